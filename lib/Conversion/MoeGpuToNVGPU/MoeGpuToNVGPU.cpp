//===- MoeGpuToNVGPU.cpp - moegpu kernels to gpu, nvgpu and nvvm ----------===//
//
// Part of moe-compiler.
//
// convert-moegpu-to-nvgpu: the warp-specialized GEMM's ops to gpu, nvgpu
// and nvvm, one pattern per op (see Lowering.h). Here: the persistent tile
// loop, the warp roles, and the pass, which plans each kernel's launch
// from its ops and applies the patterns.
//
//===----------------------------------------------------------------------===//

#include "Lowering.h"
#include "moe/Conversion/Passes.h"
#include "moe/Transforms/Passes.h"

#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Rewrite/FrozenRewritePatternSet.h"
#include "mlir/Rewrite/PatternApplicator.h"

namespace mlir::moe {
#define GEN_PASS_DEF_CONVERTMOEGPUTONVGPU
#include "moe/Conversion/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moegpu;
using namespace mlir::moegpu::tonvgpu;

namespace {

struct TileLoopLowering : OpRewritePattern<TileLoopOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(TileLoopOp op,
                                PatternRewriter &rewriter) const override;
};

LogicalResult
TileLoopLowering::matchAndRewrite(TileLoopOp op,
                                  PatternRewriter &rewriter) const {
  ImplicitLocOpBuilder b(op.getLoc(), op);
  int64_t cluster = kernelCluster(op);
  // A dense loop (rows, no offsets) has one group: group 0 for every tile.
  Value offsets = op.getOffsets();
  bool kGrouped = op.getKGrouped();
  int64_t groups =
      offsets ? cast<MemRefType>(offsets.getType()).getDimSize(0) - 1 : 1;
  int64_t blockM = op.getBlockM(), blockN = op.getBlockN();
  int64_t blockK = op.getBlockK();

  Value blockId = gpu::BlockIdOp::create(b, gpu::Dimension::x);
  Value gridDim = gpu::GridDimOp::create(b, gpu::Dimension::x);
  // A pair walks pair tiles (two M blocks of one N block) by cluster;
  // its CTAs take the pair's first and second M block by rank.
  Value rank;
  if (cluster > 1) {
    rank = arith::RemUIOp::create(b, blockId, constIndex(b, cluster));
    blockId = arith::DivUIOp::create(b, blockId, constIndex(b, cluster));
    gridDim = arith::DivUIOp::create(b, gridDim, constIndex(b, cluster));
  }
  auto loadOffset = [&](ImplicitLocOpBuilder &b, Value index) -> Value {
    Value v = memref::LoadOp::create(b, offsets, ValueRange{index});
    return arith::IndexCastUIOp::create(b, b.getIndexType(), v);
  };
  // Row blocks: of the groups' rows, from the first group's start (a
  // chunk of a chunked exchange starts after the chunks before it), or
  // of one group's output rows (k-grouped).
  Value first =
      offsets && !kGrouped ? loadOffset(b, constIndex(b, 0)) : Value();
  Value rows = op.getRows();
  if (first)
    rows =
        arith::SubIOp::create(b, loadOffset(b, constIndex(b, groups)), first);
  Value mBlocks = arith::CeilDivUIOp::create(b, rows, constIndex(b, blockM));
  if (cluster > 1)
    mBlocks = arith::CeilDivUIOp::create(b, mBlocks, constIndex(b, cluster));
  Value nBlocks = constIndex(b, llvm::divideCeil(op.getColumns(), blockN));
  Value tiles = arith::MulIOp::create(b, mBlocks, nBlocks);
  if (kGrouped)
    tiles = arith::MulIOp::create(b, tiles, constIndex(b, groups));
  // Split K: the slices this launch takes, slice-major tiles of
  // `perSlice` k blocks (the last slice the rest); the first thread of
  // the grid tells the slices' sum how many there are.
  int64_t depthBlocks = llvm::divideCeil(op.getDepth(), blockK);
  Value splits, perSlice;
  if (op.getSplits() > 1) {
    splits = buildSplitCount(b, rows, blockM * cluster,
                             llvm::divideCeil(op.getColumns(), blockN),
                             depthBlocks, op.getSplits(), gridDim);
    perSlice =
        arith::CeilDivUIOp::create(b, constIndex(b, depthBlocks), splits);
    tiles = arith::MulIOp::create(b, tiles, splits);
    if (Value count = op.getSplitCount()) {
      // (One op a statement: the IR's order must not depend on the C++
      // compiler's order of evaluating arguments.)
      Value zero = constIndex(b, 0);
      Value tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
      Value block = gpu::BlockIdOp::create(b, gpu::Dimension::x);
      Value firstInBlock =
          arith::CmpIOp::create(b, arith::CmpIPredicate::eq, tid, zero);
      Value firstBlock =
          arith::CmpIOp::create(b, arith::CmpIPredicate::eq, block, zero);
      Value firstThread = arith::AndIOp::create(b, firstInBlock, firstBlock);
      auto ifFirst = scf::IfOp::create(b, firstThread, /*withElse=*/false);
      ImplicitLocOpBuilder tb =
          ImplicitLocOpBuilder::atBlockBegin(op.getLoc(), ifFirst.thenBlock());
      Value taken = arith::IndexCastOp::create(tb, tb.getI32Type(), splits);
      memref::StoreOp::create(tb, taken, count, ValueRange{zero});
    }
  }
  // The pipeline iteration is carried by the loop: no division by the grid
  // size, and k-grouped tiles of different depths count right.
  auto loop = scf::ForOp::create(b, blockId, tiles, gridDim,
                                 ValueRange{constIndex(b, 0)});
  ImplicitLocOpBuilder lb =
      ImplicitLocOpBuilder::atBlockEnd(op.getLoc(), loop.getBody());
  Value tile = loop.getInductionVar();
  Value base = loop.getRegionIterArgs().front();
  Value group, row, col, kBlocks, kFirst = constIndex(lb, 0);
  // The M block of a tile's (pair's) row block index for this CTA.
  auto rowOf = [&](ImplicitLocOpBuilder &b, Value mBlock) -> Value {
    if (cluster > 1)
      mBlock = arith::AddIOp::create(
          b, arith::MulIOp::create(b, mBlock, constIndex(b, cluster)), rank);
    return arith::MulIOp::create(b, mBlock, constIndex(b, blockM));
  };
  if (kGrouped || splits) {
    // Group- (slice-) major: the group, then its row block and column block.
    Value perGroup = arith::MulIOp::create(lb, mBlocks, nBlocks);
    group = arith::DivUIOp::create(lb, tile, perGroup);
    Value within = arith::RemUIOp::create(lb, tile, perGroup);
    row = rowOf(lb, arith::DivUIOp::create(lb, within, nBlocks));
    col = arith::MulIOp::create(lb, arith::RemUIOp::create(lb, within, nBlocks),
                                constIndex(lb, blockN));
  }
  if (kGrouped) {
    Value begin = loadOffset(lb, group);
    Value end =
        loadOffset(lb, arith::AddIOp::create(lb, group, constIndex(lb, 1)));
    kBlocks = arith::CeilDivUIOp::create(
        lb, arith::SubIOp::create(lb, end, begin), constIndex(lb, blockK));
  } else if (splits) {
    kFirst = arith::MulIOp::create(lb, group, perSlice);
    Value left = arith::SubIOp::create(lb, constIndex(lb, depthBlocks), kFirst);
    kBlocks = arith::MinUIOp::create(lb, perSlice, left);
  } else {
    row = rowOf(lb, arith::DivUIOp::create(lb, tile, nBlocks));
    if (first)
      row = arith::AddIOp::create(lb, first, row);
    col = arith::MulIOp::create(lb, arith::RemUIOp::create(lb, tile, nBlocks),
                                constIndex(lb, blockN));
    kBlocks = constIndex(lb, depthBlocks);
    // The group whose segment holds `row`: offsets[lo] <= row <
    // offsets[hi] narrows to hi = lo + 1 in ceil(log2(E)) steps.
    Value lo = constIndex(lb, 0), hi = constIndex(lb, groups);
    for (int64_t span = groups; span > 1; span = (span + 1) / 2) {
      Value mid = arith::DivUIOp::create(lb, arith::AddIOp::create(lb, lo, hi),
                                         constIndex(lb, 2));
      Value below = arith::CmpIOp::create(lb, arith::CmpIPredicate::ule,
                                          loadOffset(lb, mid), row);
      lo = arith::SelectOp::create(lb, below, mid, lo);
      hi = arith::SelectOp::create(lb, below, hi, mid);
    }
    group = lo;
  }
  auto next = scf::YieldOp::create(
      lb, ValueRange{arith::AddIOp::create(lb, base, kBlocks)});
  Block &body = op.getBody().front();
  Operation *yield = body.getTerminator();
  rewriter.eraseOp(yield);
  rewriter.inlineBlockBefore(
      &body, next, ValueRange{group, row, col, base, kBlocks, kFirst});
  rewriter.eraseOp(op);
  return success();
}

struct WarpRolesLowering : OpRewritePattern<WarpRolesOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(WarpRolesOp op,
                                PatternRewriter &rewriter) const override;
};

LogicalResult
WarpRolesLowering::matchAndRewrite(WarpRolesOp op,
                                   PatternRewriter &rewriter) const {
  auto func = op->getParentOfType<gpu::GPUFuncOp>();
  // setmaxnreg moves registers between the warpgroups of a CTA whose own
  // count ptxas fixes; unless the kernel pins it, ptxas gives it only what
  // the code needs (68 for these GEMMs) and the consumers' inc would wait
  // forever. One CTA per SM (.minnctapersm 1) lets ptxas give the most its
  // threads can have, which the plan needs; the target checks ptxas's
  // count against kRequiredRegistersAttrName.
  Builder attrs(op.getContext());
  int64_t threads = (op.getConsumers() + 1) * kWarpgroupThreads;
  int64_t planned =
      (op.getProducerRegs() + op.getConsumers() * op.getConsumerRegs()) *
      kWarpgroupThreads;
  int64_t perThread = llvm::divideCeil(planned, threads);
  func->setAttr(NVVM::NVVMDialect::getMinctasmAttrName(),
                attrs.getI32IntegerAttr(1));
  // One consumer warpgroup (BLOCK_M 64): the CTA's 256 threads may each
  // hold all 255 registers, so nothing moves between the warpgroups and
  // ptxas's own count serves both.
  bool rebalance = op.getConsumers() > 1;
  if (rebalance)
    func->setAttr(kRequiredRegistersAttrName,
                  attrs.getI64IntegerAttr(llvm::alignTo(perThread, 8)));
  ImplicitLocOpBuilder b(op.getLoc(), op);
  Value tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
  Value warpgroup =
      arith::DivUIOp::create(b, tid, constIndex(b, kWarpgroupThreads));
  Value producer = arith::CmpIOp::create(b, arith::CmpIPredicate::eq, warpgroup,
                                         constIndex(b, op.getConsumers()));
  auto ifOp = scf::IfOp::create(b, producer, /*withElseRegion=*/true);

  ImplicitLocOpBuilder pb(op.getLoc(), ifOp.thenBlock()->getTerminator());
  if (rebalance)
    NVVM::SetMaxRegisterOp::create(pb, op.getProducerRegs(),
                                   NVVM::SetMaxRegisterAction::decrease);
  Value leader = arith::CmpIOp::create(
      pb, arith::CmpIPredicate::eq, threadInWarpgroup(pb), constIndex(pb, 0));
  auto leaderIf = scf::IfOp::create(pb, leader, /*withElseRegion=*/false);
  rewriter.inlineBlockBefore(&op.getProducer().front(),
                             leaderIf.thenBlock()->getTerminator());

  ImplicitLocOpBuilder cb(op.getLoc(), ifOp.elseBlock()->getTerminator());
  if (rebalance)
    NVVM::SetMaxRegisterOp::create(cb, op.getConsumerRegs(),
                                   NVVM::SetMaxRegisterAction::increase);
  rewriter.inlineBlockBefore(&op.getConsumer().front(),
                             ifOp.elseBlock()->getTerminator(),
                             ValueRange{warpgroup});
  // The epilogue's last TMA stores complete before the consumers exit.
  if (func->hasAttr(kTmaStoreEpilogueAttrName)) {
    cb.setInsertionPoint(ifOp.elseBlock()->getTerminator());
    NVVM::CpAsyncBulkWaitGroupOp::create(cb, 0, UnitAttr());
  }
  // A CTA of a pair leaves only when the other is done with its barriers
  // and shared memory (its consumers arrive on this CTA's barriers).
  if (kernelCluster(op) > 1) {
    b.setInsertionPointAfter(ifOp);
    clusterSync(b);
  }
  rewriter.eraseOp(op);
  return success();
}

/// Plans the launch of `func` from its ops and lowers them by `patterns`,
/// in an order that keeps the output stable: the pipeline first (its
/// barriers feed the rest), then the pipeline steps and epilogues in
/// program order (which numbers the tensor-map arguments: A and B, then
/// C), then the tile loops and the warp roles, whose bodies are lowered by
/// then.
LogicalResult lowerKernel(gpu::GPUFuncOp func,
                          const FrozenRewritePatternSet &patterns) {
  SmallVector<PipelineCreateOp> creates;
  SmallVector<Operation *> steps, loops, roles;
  func.walk([&](Operation *op) {
    if (auto create = dyn_cast<PipelineCreateOp>(op))
      creates.push_back(create);
    else if (isa<ProduceOp, MmaOp, PromoteOp, ReleaseOp, DrainOp, StoreTileOp>(
                 op))
      steps.push_back(op);
    else if (isa<TileLoopOp>(op))
      loops.push_back(op);
    else if (isa<WarpRolesOp>(op))
      roles.push_back(op);
  });
  if (creates.empty() && steps.empty() && loops.empty() && roles.empty())
    return success();
  if (!func.isKernel())
    return func.emitOpError() << "holds moegpu ops but is not a kernel";
  if (creates.size() > 1)
    return creates[1].emitOpError()
           << "is the second pipeline of kernel @" << func.getName()
           << "; a kernel holds one pipeline";

  // The launch, from the ops: the pipeline's tile sizes the CTA and its
  // shared memory (with the staging of a TMA-store epilogue), the tile
  // loops' SM range the grid.
  MLIRContext *ctx = func.getContext();
  Builder attrs(ctx);
  TileAttr tile = creates.empty()
                      ? TileAttr()
                      : creates[0].getPipeline().getType().getTile();
  bool tmaStores = llvm::any_of(steps, [&](Operation *op) {
    auto store = dyn_cast<StoreTileOp>(op);
    return store && storesByTma(store, tile);
  });
  int64_t blockThreads = 0, sharedMemoryBytes = 0, gridSize = 0;
  if (tile) {
    blockThreads = (tile.getConsumers() + 1) * kWarpgroupThreads;
    sharedMemoryBytes = tile.getSharedMemoryBytes();
    if (tmaStores)
      sharedMemoryBytes += tmaStoreStagingBytes(tile.getConsumers());
  }
  if (!loops.empty())
    gridSize = cast<TileLoopOp>(loops.back()).getSmRange().getCount();
  if (blockThreads)
    func->setAttr(
        NVVM::NVVMDialect::getMaxntidAttrName(),
        attrs.getDenseI32ArrayAttr({static_cast<int32_t>(blockThreads), 1, 1}));
  func->setAttr(kKernelLaunchAttrName,
                KernelLaunchAttr::get(ctx, gridSize, blockThreads,
                                      sharedMemoryBytes, tile));
  func->setAttr(kTensorMapsAttrName, attrs.getArrayAttr({}));
  if (tmaStores)
    func->setAttr(kTmaStoreEpilogueAttrName, attrs.getUnitAttr());

  PatternApplicator applicator(patterns);
  applicator.applyDefaultCostModel();
  PatternRewriter rewriter(ctx);
  SmallVector<Operation *> order(creates.begin(), creates.end());
  llvm::append_range(order, steps);
  llvm::append_range(order, loops);
  llvm::append_range(order, roles);
  for (Operation *op : order) {
    rewriter.setInsertionPoint(op);
    if (failed(applicator.matchAndRewrite(op, rewriter)))
      return failure();
  }
  // The pipelines' casts, once nothing reads them.
  SmallVector<UnrealizedConversionCastOp> casts;
  func.walk([&](UnrealizedConversionCastOp cast) {
    if (cast->getNumResults() == 1 &&
        isa<PipelineType>(cast->getResult(0).getType()))
      casts.push_back(cast);
  });
  for (UnrealizedConversionCastOp cast : casts) {
    if (!cast->use_empty())
      return emitError(cast.getLoc())
             << "'moegpu.pipeline.create' op is still used after lowering";
    rewriter.eraseOp(cast);
  }
  return success();
}

struct ConvertMoeGpuToNVGPU
    : public mlir::moe::impl::ConvertMoeGpuToNVGPUBase<ConvertMoeGpuToNVGPU> {
  void runOnOperation() override {
    gpu::GPUModuleOp module = getOperation();
    bool needed = false;
    module.walk([&](Operation *op) {
      if (isa<PipelineCreateOp>(op))
        needed = true;
    });
    memref::GlobalOp sharedMemory =
        module.lookupSymbol<memref::GlobalOp>(kSharedMemoryName);
    if (needed && !sharedMemory) {
      MLIRContext *ctx = module.getContext();
      OpBuilder b = OpBuilder::atBlockBegin(module.getBody());
      auto type =
          MemRefType::get({0}, b.getI8Type(), AffineMap(), workgroupSpace(ctx));
      sharedMemory = memref::GlobalOp::create(
          b, module.getLoc(), kSharedMemoryName,
          /*sym_visibility=*/StringAttr(), type,
          /*initial_value=*/Attribute(), /*constant=*/false,
          b.getI64IntegerAttr(kSharedMemoryAlignment));
    }
    RewritePatternSet set(module.getContext());
    populateMoeGpuToNVGPUPatterns(set);
    FrozenRewritePatternSet patterns(std::move(set));
    for (auto func : module.getOps<gpu::GPUFuncOp>()) {
      if (failed(lowerKernel(func, patterns)))
        return signalPassFailure();
      // Programmatic dependent launch: let the next kernel be scheduled
      // now, and touch memory only once the previous one is complete.
      if (func.isKernel() && !func.getBody().empty()) {
        OpBuilder b = OpBuilder::atBlockBegin(&func.getBody().front());
        NVVM::GriddepcontrolOp::create(
            b, func.getLoc(), NVVM::GridDepActionKind::launch_dependents);
        NVVM::GriddepcontrolOp::create(b, func.getLoc(),
                                       NVVM::GridDepActionKind::wait);
      }
    }
  }
};

} // namespace

void tonvgpu::populateMoeGpuToNVGPUPatterns(RewritePatternSet &patterns) {
  populatePipelinePatterns(patterns);
  populateEpiloguePatterns(patterns);
  patterns.add<TileLoopLowering, WarpRolesLowering>(patterns.getContext());
}
