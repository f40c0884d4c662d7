//===- MoeGpu.td - The moegpu dialect umbrella -------------*- tablegen -*-===//
//
// Part of moe-compiler.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_DIALECT_MOEGPU_MOEGPU_TD
#define MOE_DIALECT_MOEGPU_MOEGPU_TD

include "moegpu/MoeGpuDialect.td"
include "moegpu/MoeGpuAttrs.td"
include "moegpu/MoeGpuTypes.td"
include "moegpu/MoeGpuOps.td"
include "moegpu/MoeGpuKernelOps.td"

#endif // MOE_DIALECT_MOEGPU_MOEGPU_TD
