//===- MoeGpuDialect.h - The moegpu dialect ---------------------*- C++ -*-===//
//
// Part of moe-compiler.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_DIALECT_MOEGPU_MOEGPUDIALECT_H
#define MOE_DIALECT_MOEGPU_MOEGPUDIALECT_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/ControlFlowInterfaces.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "moegpu/MoeGpuDialect.h.inc"
#include "moegpu/MoeGpuEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "moegpu/MoeGpuAttrs.h.inc"

#define GET_TYPEDEF_CLASSES
#include "moegpu/MoeGpuTypes.h.inc"

#define GET_OP_CLASSES
#include "moegpu/MoeGpuOps.h.inc"

namespace mlir::moegpu {
/// Threads of a warpgroup.
constexpr int64_t kWarpgroupThreads = 128;
/// Registers of one SM (and the most one CTA may hold).
constexpr int64_t kRegistersPerSm = 65536;
/// Opt-in dynamic shared memory limit of one CTA on sm_90 (227 KiB).
constexpr int64_t kMaxSharedMemoryBytes = 232448;
/// Of it, what a warp-specialized GEMM keeps out of its dynamic region:
/// the static mbarriers and the padding that puts the region on a
/// 1024-byte boundary.
constexpr int64_t kReservedSharedMemoryBytes = 1024;

/// Discardable attributes convert-moegpu-to-nvgpu sets on a lowered kernel:
/// its #moegpu.kernel_launch, and an array of its #moegpu.tensor_map.
constexpr llvm::StringLiteral kKernelLaunchAttrName = "moegpu.kernel_launch";
constexpr llvm::StringLiteral kTensorMapsAttrName = "moegpu.tensor_maps";
/// And on a warp-specialized kernel: the registers per thread its
/// setmaxnreg plan needs the CTA to start with (ptxas must allocate them).
constexpr llvm::StringLiteral kRequiredRegistersAttrName =
    "moegpu.required_registers";

/// e^x of an f32 in a kernel, as 2^(x * log2(e)) on the SFU's ex2.approx:
/// math.exp would become a libdevice call, which gpu-module-to-binary would
/// have to link.
Value buildExp(ImplicitLocOpBuilder &b, Value x);

/// Whether a grouped GEMM writing `c` stores its tiles through shared
/// memory and TMA (a bulk tensor store per 64-row, 128-byte box, left to
/// complete while the next tile's main loop runs) rather than from
/// registers: its element is 16-bit or f32, its rows are whole 16-byte
/// units, and every tile's rows end on a 64-row boundary of its group:
/// `paddedSegments` (the experts' row segments, which the dispatch pads to
/// the tile's m), or k-grouped output rows whose count is a static
/// multiple of 64. A dense GEMM's rows, and the shared experts' one
/// segment, end at the token count: they store from registers.
bool usesTmaStoreEpilogue(MemRefType c, bool paddedSegments, bool kGrouped);
/// Whether `offsets` ([G + 1] i32) are the dispatch's padded segments of
/// several experts rather than the shared experts' [0, T].
bool isPaddedSegments(Value offsets);
/// Shared memory the TMA-store epilogue stages through: two boxes of 64
/// rows x 128 bytes per consumer warpgroup, written while the other's
/// store drains.
int64_t tmaStoreStagingBytes(int64_t consumers);
} // namespace mlir::moegpu

#endif // MOE_DIALECT_MOEGPU_MOEGPUDIALECT_H
