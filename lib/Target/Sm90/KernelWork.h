//===- KernelWork.h - What a kernel computes, from its op -------*- C++ -*-===//
//
// Part of moe-compiler.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_LIB_TARGET_SM90_KERNELWORK_H
#define MOE_LIB_TARGET_SM90_KERNELWORK_H

#include "moe/Target/Sm90.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"

namespace mlir::moe {

/// The kind and shapes of the moegpu op a kernel's body is (before
/// convert-moegpu-kernels-to-gpu and the GEMM pipeline lower it): what the
/// performance model costs. A kernel of no moegpu op is `Other`.
Sm90KernelWork kernelWorkOf(gpu::GPUFuncOp func);

} // namespace mlir::moe

#endif // MOE_LIB_TARGET_SM90_KERNELWORK_H
