//===- MoeGpuDialect.h - The moegpu dialect ---------------------*- C++ -*-===//
//
// Part of moe-compiler.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_DIALECT_MOEGPU_MOEGPUDIALECT_H
#define MOE_DIALECT_MOEGPU_MOEGPUDIALECT_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
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
/// And on a GEMM whose epilogue stores through shared memory and TMA (unit).
constexpr llvm::StringLiteral kTmaStoreEpilogueAttrName =
    "moegpu.tma_store_epilogue";

/// e^x of an f32 in a kernel, as 2^(x * log2(e)) on the SFU's ex2.approx:
/// math.exp would become a libdevice call, which gpu-module-to-binary would
/// have to link.
Value buildExp(ImplicitLocOpBuilder &b, Value x);

/// The slices a split_k GEMM of `rows` output rows takes at run time: as
/// many as leave each of `ctas` CTAs one tile of `blockM` rows x
/// `columnBlocks` column blocks (at least 1, at most `maxSplits` and the
/// `kBlocks` k blocks), then as few as cover the k blocks in slices of
/// `ceil(kBlocks / splits)` (so that none is empty). The kernel computes
/// the same (buildSplitCount) from its grid; the cost model calls this.
int64_t splitCount(int64_t rows, int64_t blockM, int64_t columnBlocks,
                   int64_t kBlocks, int64_t maxSplits, int64_t ctas);
/// splitCount in the kernel, of index values `rows` and `ctas`.
Value buildSplitCount(ImplicitLocOpBuilder &b, Value rows, int64_t blockM,
                      int64_t columnBlocks, int64_t kBlocks, int64_t maxSplits,
                      Value ctas);

/// Whether a grouped GEMM writing `c` stores its tiles through shared
/// memory and TMA (a bulk tensor store per 64-row, 128-byte box, left to
/// complete while the next tile's main loop runs) rather than from
/// registers: its element is 16-bit or f32, its rows are whole 16-byte
/// units, and no tile's box reaches into rows of another group:
/// `rowsEndOnBoxes` (see rowsEndOnBoxes), or k-grouped output rows whose
/// count is a static multiple of 64.
bool usesTmaStoreEpilogue(MemRefType c, bool rowsEndOnBoxes, bool kGrouped);
/// Whether the row groups given by `offsets` end where a 64-row box of
/// their last tile may end: the dispatch's padded segments of several
/// experts (padded to the tile's m), or one group of all the rows (a dense
/// GEMM without offsets, the shared experts' one segment [0, T]), whose
/// last box the TMA unit clips at the end of the buffer. The rows a box
/// writes past T are in the buffer's capacity, which nothing reads.
bool rowsEndOnBoxes(Value offsets);
/// Whether `offsets` ([G + 1] i32) are the dispatch's padded segments of
/// several experts rather than the shared experts' [0, T].
bool isPaddedSegments(Value offsets);
/// Whether a pair of CTAs (a 2x1 cluster) can share a tile's B by TMA
/// multicast: its halves are whole 64-row boxes.
inline bool pairSharesB(int64_t tileN) { return tileN % 128 == 0; }
/// Shared memory the TMA-store epilogue stages through: two boxes of 64
/// rows x 128 bytes per consumer warpgroup, written while the other's
/// store drains.
int64_t tmaStoreStagingBytes(int64_t consumers);
} // namespace mlir::moegpu

#endif // MOE_DIALECT_MOEGPU_MOEGPUDIALECT_H
