//===- MoeDialect.h - The moe dialect ---------------------------*- C++ -*-===//
//
// Part of moe-compiler.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_DIALECT_MOE_MOEDIALECT_H
#define MOE_DIALECT_MOE_MOEDIALECT_H

#include "mlir/IR/Attributes.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/APFloat.h"

#include "moe/MoeDialect.h.inc"
#include "moe/MoeEnums.h.inc"

namespace mlir::moe {
/// Field parsers used by the attribute assembly formats.
FailureOr<bool> parseBoolParameter(AsmParser &parser);
FailureOr<llvm::APFloat> parseF64Parameter(AsmParser &parser);
void printF64Parameter(AsmPrinter &printer, const llvm::APFloat &value);
} // namespace mlir::moe

#define GET_ATTRDEF_CLASSES
#include "moe/MoeAttrs.h.inc"

#endif // MOE_DIALECT_MOE_MOEDIALECT_H
