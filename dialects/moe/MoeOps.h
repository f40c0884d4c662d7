//===- MoeOps.h - Operations of the moe dialect -----------------*- C++ -*-===//
//
// Part of moe-compiler.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_DIALECT_MOE_MOEOPS_H
#define MOE_DIALECT_MOE_MOEOPS_H

#include "moe/MoeDialect.h"

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#define GET_OP_CLASSES
#include "moe/MoeOps.h.inc"

namespace mlir::moe {
/// The one moe.layer under `root`, or null when there is none or several
/// (`count` gets how many there are): what compiling a layer starts from.
LayerOp getOnlyLayer(Operation *root, int64_t *count = nullptr);
} // namespace mlir::moe

#endif // MOE_DIALECT_MOE_MOEOPS_H
