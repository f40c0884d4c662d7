//===- Lowering.h - Shared pieces of convert-moegpu-to-nvgpu ---*- C++ -*-===//
//
// Part of moe-compiler.
//
// Internal to convert-moegpu-to-nvgpu: one rewrite pattern per moegpu op
// (Pipeline.cpp: pipeline.create, produce, mma, promote, release, drain;
// Epilogue.cpp: store_tile; MoeGpuToNVGPU.cpp: tile_loop, warp_roles and
// the pass). A pattern keeps no state: what it needs of its kernel is on
// the IR. The pass writes the kernel's launch (its tile, hence the cluster,
// and whether the epilogue stores by TMA) on the gpu.func before any
// pattern runs; pipeline.create's pattern leaves the pipeline as an
// unrealized cast of its full and empty barriers, which the ops using it
// read; a tensor map is a record in the kernel's moegpu.tensor_maps and a
// cast of the argument it added.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_CONVERSION_MOEGPUTONVGPU_LOWERING_H
#define MOE_CONVERSION_MOEGPUTONVGPU_LOWERING_H

#include "moe/Conversion/KernelBuilder.h"
#include "moegpu/MoeGpuDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "mlir/IR/PatternMatch.h"

namespace mlir::moegpu::tonvgpu {

/// The kernel's dynamic shared memory.
constexpr StringLiteral kSharedMemoryName = "moegpu_smem";
/// Alignment of the dynamic shared memory: a 128-byte swizzled TMA box
/// repeats every 1024 bytes and must start on such a boundary.
constexpr int64_t kSharedMemoryAlignment = 1024;
/// Elements of M or N in one MN-major box (one 128-byte swizzle row).
constexpr int64_t kMnBox = 64;

inline Value constIndex(ImplicitLocOpBuilder &b, int64_t value) {
  return moe::KernelBuilder{b}.idx(value);
}

inline Value constI64(ImplicitLocOpBuilder &b, int64_t value) {
  return arith::ConstantIntOp::create(b, value, 64);
}

inline gpu::AddressSpaceAttr workgroupSpace(MLIRContext *ctx) {
  return gpu::AddressSpaceAttr::get(ctx, gpu::AddressSpace::Workgroup);
}

/// The thread's index in its warpgroup.
inline Value threadInWarpgroup(ImplicitLocOpBuilder &b) {
  Value tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
  return arith::RemUIOp::create(b, tid, constIndex(b, kWarpgroupThreads));
}

/// barrier.cluster.arrive + wait by every thread of the cluster.
inline void clusterSync(ImplicitLocOpBuilder &b) {
  NVVM::ClusterArriveOp::create(b, UnitAttr());
  NVVM::ClusterWaitOp::create(b, UnitAttr());
}

/// The base of the kernel's dynamic shared memory (@moegpu_smem).
Value sharedMemoryBase(ImplicitLocOpBuilder &b, Operation *user);

/// The launch the pass planned for `op`'s kernel (see the file comment).
KernelLaunchAttr kernelLaunch(Operation *op);

/// The tile of `op`'s kernel's pipeline, or null.
inline TileAttr kernelTile(Operation *op) {
  KernelLaunchAttr launch = kernelLaunch(op);
  return launch ? launch.getTile() : TileAttr();
}

/// CTAs per cluster of `op`'s kernel (1 without a paired pipeline).
inline int64_t kernelCluster(Operation *op) {
  TileAttr tile = kernelTile(op);
  return tile ? tile.getCluster() : 1;
}

/// Whether store_tile `op` of a kernel whose pipeline has `tile` stores
/// through shared memory and TMA (else from registers): not accumulating,
/// in a tile loop whose rows suit it, the tile's output columns whole
/// boxes, and room for the staging next to the pipeline's stages.
bool storesByTma(StoreTileOp op, TileAttr tile);

/// The full and empty barriers of `pipeline` (the cast pipeline.create's
/// pattern left); an error on `user` when it was not created in the kernel.
struct Barriers {
  Value full, empty;
};
FailureOr<Barriers> barriersOf(Operation *user, Value pipeline);

/// The TMA descriptor of kernel argument `source` in boxes of `boxRows` x
/// `boxCols`: a pointer argument the pass adds to the kernel (once per
/// source and box) and records in its moegpu.tensor_maps.
FailureOr<Value> tensorMapFor(Operation *user, Value source, int64_t boxRows,
                              Type elementType, int64_t boxCols = kMnBox);

/// pipeline.create, produce, mma, promote, release and drain.
void populatePipelinePatterns(RewritePatternSet &patterns);
/// store_tile: the epilogue, from registers or by TMA.
void populateEpiloguePatterns(RewritePatternSet &patterns);
/// All of the above, tile_loop and warp_roles.
void populateMoeGpuToNVGPUPatterns(RewritePatternSet &patterns);

} // namespace mlir::moegpu::tonvgpu

#endif // MOE_CONVERSION_MOEGPUTONVGPU_LOWERING_H
