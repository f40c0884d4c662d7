//===- Pipeline.cpp - The TMA/wgmma pipeline's ops to nvgpu and nvvm ------===//
//
// Part of moe-compiler.
//
// The patterns of moegpu.pipeline.create (mbarriers), produce (TMA loads,
// multicast in a pair), mma (wgmma on shared-memory descriptors), promote
// (FP8 block scales), release and drain.
//
//===----------------------------------------------------------------------===//

#include "Lowering.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;
using namespace mlir::moegpu;
using namespace mlir::moegpu::tonvgpu;

namespace {

/// Suspend-time hint of one mbarrier.try_wait (the wait loops until done).
constexpr int64_t kWaitTicks = 10000000;
/// Bytes of K one wgmma instruction reads per row: k = 16 of 16-bit
/// inputs, k = 32 of e4m3.
constexpr int64_t kWgmmaKBytes = 32;
/// Bits of a wgmma shared-memory descriptor besides the start address, in
/// the PTX ISA's canonical 128-byte-swizzled layouts: swizzle mode 1 (bits
/// 62-63), the stride byte offset (bits 32-45) and the leading byte offset
/// (bits 16-29), both in units of 16 bytes.
/// - K-major: 8 rows of 128 bytes repeat every 1024 bytes (the stride);
///   the leading offset is unused (16).
/// - MN-major, a TMA box of 64 rows of K by 64 elements of M or N: 8 rows
///   of K repeat every 1024 bytes (the stride) and the next 64 elements of
///   M or N are the next box, 8192 bytes on (the leading offset).
constexpr uint64_t kKMajorDescriptorBits =
    (1ull << 62) | (64ull << 32) | (1ull << 16);
constexpr uint64_t kMnMajorDescriptorBits =
    (1ull << 62) | (64ull << 32) | (512ull << 16);

/// Slot and round of pipeline iteration `iter`.
std::pair<Value, Value> slotAndRound(ImplicitLocOpBuilder &b, Value iter,
                                     int64_t stages) {
  Value s = constIndex(b, stages);
  return {arith::RemUIOp::create(b, iter, s),
          arith::DivUIOp::create(b, iter, s)};
}

/// True when `round` is odd: the parity of the barrier phase to wait for.
Value oddRound(ImplicitLocOpBuilder &b, Value round) {
  Value bit = arith::RemUIOp::create(b, round, constIndex(b, 2));
  return arith::CmpIOp::create(b, arith::CmpIPredicate::eq, bit,
                               constIndex(b, 1));
}

struct PipelineCreateLowering : OpRewritePattern<PipelineCreateOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(PipelineCreateOp op,
                                PatternRewriter &rewriter) const override;
};

LogicalResult
PipelineCreateLowering::matchAndRewrite(PipelineCreateOp op,
                                        PatternRewriter &rewriter) const {
  MLIRContext *ctx = op.getContext();
  ImplicitLocOpBuilder b(op.getLoc(), op);
  PipelineType type = op.getPipeline().getType();
  TileAttr tile = type.getTile();
  auto groupType =
      nvgpu::MBarrierGroupType::get(ctx, workgroupSpace(ctx), tile.getStages());
  Value full = nvgpu::MBarrierCreateOp::create(b, groupType);
  Value empty = nvgpu::MBarrierCreateOp::create(b, groupType);
  Value tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
  Value first =
      arith::CmpIOp::create(b, arith::CmpIPredicate::eq, tid, constIndex(b, 0));
  auto ifOp = scf::IfOp::create(b, first, /*withElseRegion=*/false);
  {
    ImplicitLocOpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(ifOp.thenBlock()->getTerminator());
    Value one = constIndex(b, 1);
    // With a pair, a slot is refilled (in both CTAs, by multicast) once
    // the consumers of both have read it.
    Value consumers = constIndex(b, tile.getConsumers() * tile.getCluster());
    for (int64_t s = 0; s < tile.getStages(); ++s) {
      Value slot = constIndex(b, s);
      nvgpu::MBarrierInitOp::create(b, full, one, slot, Value());
      nvgpu::MBarrierInitOp::create(b, empty, consumers, slot, Value());
    }
    NVVM::FenceMbarrierInitOp::create(b);
  }
  // The peer's barriers must be initialized before it is multicast to or
  // arrived on.
  if (tile.getCluster() > 1)
    clusterSync(b);
  else
    gpu::BarrierOp::create(b);
  // The ops on the pipeline read its barriers from the cast.
  rewriter.replaceOp(
      op, UnrealizedConversionCastOp::create(b, type, ValueRange{full, empty}));
  return success();
}

/// This CTA's rank in its pair and whether both blocks of the pair tile
/// `loop`'s body works on lie in one group (B is shared), computed at the
/// start of the body.
std::pair<Value, Value> pairOf(TileLoopOp loop) {
  Block &body = loop.getBody().front();
  ImplicitLocOpBuilder b(loop.getLoc(), &body, body.begin());
  Value group = body.getArgument(0), row = body.getArgument(1);
  Value rank = arith::RemUIOp::create(
      b, gpu::BlockIdOp::create(b, gpu::Dimension::x), constIndex(b, 2));
  // The other block of the pair: one block on for rank 0, one back for 1.
  Value first = arith::CmpIOp::create(b, arith::CmpIPredicate::eq, rank,
                                      constIndex(b, 0));
  Value blockM = constIndex(b, loop.getBlockM());
  Value peer =
      arith::SelectOp::create(b, first, arith::AddIOp::create(b, row, blockM),
                              arith::SubIOp::create(b, row, blockM));
  auto loadOffset = [&](Value index) -> Value {
    Value v = memref::LoadOp::create(b, loop.getOffsets(), ValueRange{index});
    return arith::IndexCastUIOp::create(b, b.getIndexType(), v);
  };
  // Both blocks hold rows (the last pair of an odd count has one) and,
  // for a grouped GEMM over row segments, the same group's: the two CTAs
  // decide alike.
  Value offsets = loop.getOffsets();
  bool segments = offsets && !loop.getKGrouped();
  int64_t groups =
      offsets ? cast<MemRefType>(offsets.getType()).getDimSize(0) - 1 : 1;
  Value rows = segments ? loadOffset(constIndex(b, groups)) : loop.getRows();
  auto below = [&](Value l, Value r) {
    return arith::CmpIOp::create(b, arith::CmpIPredicate::ult, l, r);
  };
  Value shared = arith::AndIOp::create(b, below(row, rows), below(peer, rows));
  if (segments) {
    Value begin = loadOffset(group);
    Value end = loadOffset(arith::AddIOp::create(b, group, constIndex(b, 1)));
    Value inGroup = arith::AndIOp::create(
        b, arith::CmpIOp::create(b, arith::CmpIPredicate::uge, peer, begin),
        below(peer, end));
    shared = arith::AndIOp::create(b, shared, inGroup);
  }
  return {rank, shared};
}

struct ProduceLowering : OpRewritePattern<ProduceOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(ProduceOp op,
                                PatternRewriter &rewriter) const override;
};

LogicalResult
ProduceLowering::matchAndRewrite(ProduceOp op,
                                 PatternRewriter &rewriter) const {
  FailureOr<Barriers> barriers = barriersOf(op, op.getPipeline());
  if (failed(barriers))
    return failure();
  Value full = barriers->full, empty = barriers->empty;
  PipelineType type = op.getPipeline().getType();
  TileAttr tile = type.getTile();
  Type elementType = type.getElementType();
  bool aMn = type.isAMnMajor(), bMn = type.isBMnMajor();
  if ((aMn && tile.getM() % kMnBox != 0) || (bMn && tile.getN() % kMnBox != 0))
    return op.emitOpError()
           << "needs the tile's M-major and N-major sides to "
              "be multiples of "
           << kMnBox << ", got " << tile.getM() << "x" << tile.getN();
  // A K-major tile is one box of its rows; an MN-major one boxes of 64 rows
  // of K.
  // A K-major box row is the stage's 128-byte row: tile k elements (64 of
  // 16 bits or 128 of e4m3).
  FailureOr<Value> aMap =
      tensorMapFor(op, op.getA(), aMn ? tile.getK() : tile.getM(), elementType,
                   aMn ? kMnBox : tile.getK());
  FailureOr<Value> bMap =
      tensorMapFor(op, op.getB(), bMn ? tile.getK() : tile.getN(), elementType,
                   bMn ? kMnBox : tile.getK());
  if (failed(aMap) || failed(bMap))
    return failure();

  MLIRContext *ctx = op.getContext();
  ImplicitLocOpBuilder b(op.getLoc(), op);
  // (Plain variables: lambdas capture `slot`, which C++17 does not allow
  // for structured bindings.)
  Value slot, round;
  std::tie(slot, round) = slotAndRound(b, op.getIter(), tile.getStages());
  // A fresh barrier counts as having completed the phase before phase 0,
  // so the first round waits for parity 1 and passes at once.
  Value parity = arith::XOrIOp::create(b, oddRound(b, round),
                                       arith::ConstantIntOp::create(b, 1, 1));
  nvgpu::MBarrierTryWaitParityOp::create(b, empty, parity,
                                         constIndex(b, kWaitTicks), slot);
  nvgpu::MBarrierArriveExpectTxOp::create(
      b, full, constIndex(b, tile.getStageBytes()), slot, Value());

  Value base = sharedMemoryBase(b, op);
  Value aOffset =
      arith::MulIOp::create(b, slot, constIndex(b, tile.getStageBytes()));
  Value bOffset =
      arith::AddIOp::create(b, aOffset, constIndex(b, tile.getABytes()));
  // A slot's boxes: rows of 128 bytes.
  int64_t rowElements = TileAttr::kStageRowBytes / tile.getElementBytes();
  auto view = [&](ImplicitLocOpBuilder &b, Value offset,
                  int64_t rows) -> Value {
    auto type = MemRefType::get({rows, rowElements}, elementType, AffineMap(),
                                workgroupSpace(ctx));
    return memref::ViewOp::create(b, type, base, offset, ValueRange{});
  };
  // TMA coordinates run innermost first: (column, row).
  auto load = [&](Value offset, Value map, bool mnMajor, int64_t extent,
                  Value mn, Value k) {
    if (!mnMajor) {
      nvgpu::TmaAsyncLoadOp::create(b, view(b, offset, extent), full, map,
                                    ValueRange{k, mn}, slot, Value(), Value());
      return;
    }
    int64_t boxBytes = tile.getK() * kMnBox * 2;
    for (int64_t i = 0; i < extent / kMnBox; ++i) {
      Value at = arith::AddIOp::create(b, offset, constIndex(b, i * boxBytes));
      Value column = arith::AddIOp::create(b, mn, constIndex(b, i * kMnBox));
      nvgpu::TmaAsyncLoadOp::create(b, view(b, at, tile.getK()), full, map,
                                    ValueRange{column, k}, slot, Value(),
                                    Value());
    }
  };
  load(aOffset, *aMap, aMn, tile.getM(), op.getAMn(), op.getAK());
  if (tile.getCluster() == 1) {
    load(bOffset, *bMap, bMn, tile.getN(), op.getBMn(), op.getBK());
    rewriter.eraseOp(op);
    return success();
  }
  // A pair: B in two halves (half the rows of a K-major tile, half the
  // 64-column boxes of an MN-major one). When both CTAs' blocks are in one
  // group, each loads its half and multicasts it to both; otherwise each
  // loads both halves itself. Either way its full barrier sees the whole
  // stage's bytes.
  auto loop = op->getParentOfType<TileLoopOp>();
  if (!loop)
    return op.emitOpError() << "of a paired pipeline must be inside a "
                               "moegpu.tile_loop";
  int64_t half = tile.getN() / 2;
  FailureOr<Value> halfMap =
      bMn ? bMap : tensorMapFor(op, op.getB(), half, elementType, tile.getK());
  if (failed(halfMap))
    return failure();
  Value rank, shared;
  std::tie(rank, shared) = pairOf(loop);
  int64_t halfBytes = tile.getBBytes() / 2;
  auto loadHalf = [&](ImplicitLocOpBuilder &b, Value h, Value mask) {
    Value offset = arith::AddIOp::create(
        b, bOffset, arith::MulIOp::create(b, h, constIndex(b, halfBytes)));
    Value mn = arith::AddIOp::create(
        b, op.getBMn(), arith::MulIOp::create(b, h, constIndex(b, half)));
    if (!bMn) {
      nvgpu::TmaAsyncLoadOp::create(b, view(b, offset, half), full, *halfMap,
                                    ValueRange{op.getBK(), mn}, slot, mask,
                                    Value());
      return;
    }
    int64_t boxBytes = tile.getK() * kMnBox * 2;
    for (int64_t i = 0; i < half / kMnBox; ++i) {
      Value at = arith::AddIOp::create(b, offset, constIndex(b, i * boxBytes));
      Value column = arith::AddIOp::create(b, mn, constIndex(b, i * kMnBox));
      nvgpu::TmaAsyncLoadOp::create(b, view(b, at, tile.getK()), full, *halfMap,
                                    ValueRange{column, op.getBK()}, slot, mask,
                                    Value());
    }
  };
  auto ifOp = scf::IfOp::create(b, shared, /*withElseRegion=*/true);
  {
    ImplicitLocOpBuilder tb(op.getLoc(), ifOp.thenBlock()->getTerminator());
    Value both = arith::ConstantIntOp::create(tb, 3, 16);
    loadHalf(tb, rank, both);
    ImplicitLocOpBuilder eb(op.getLoc(), ifOp.elseBlock()->getTerminator());
    loadHalf(eb, constIndex(eb, 0), Value());
    loadHalf(eb, constIndex(eb, 1), Value());
  }
  rewriter.eraseOp(op);
  return success();
}

/// The consumers are done with `slot`: one thread per warpgroup arrives on
/// its `empty` barrier (and, in a pair of `cluster` 2, the peer CTA's).
void releaseSlot(ImplicitLocOpBuilder &b, Value empty, Value slot,
                 int64_t cluster) {
  // One thread per warpgroup arrives on the slot's empty barrier.
  Value leader = arith::CmpIOp::create(b, arith::CmpIPredicate::eq,
                                       threadInWarpgroup(b), constIndex(b, 0));
  auto ifOp = scf::IfOp::create(b, leader, /*withElseRegion=*/false);
  ImplicitLocOpBuilder::InsertionGuard guard(b);
  b.setInsertionPoint(ifOp.thenBlock()->getTerminator());
  nvgpu::MBarrierArriveOp::create(
      b, nvgpu::MBarrierTokenType::get(b.getContext()), empty, slot);
  if (cluster == 1)
    return;
  // And on the same slot's barrier of the other CTA of the pair, whose
  // producer multicasts into this CTA's slot too.
  MLIRContext *ctx = b.getContext();
  Value local = nvgpu::MBarrierGetOp::create(b, b.getI32Type(), empty, slot);
  Value pointer = LLVM::IntToPtrOp::create(
      b, LLVM::LLVMPointerType::get(ctx, /*shared=*/3), local);
  Value rank = NVVM::ClusterId::create(b, b.getI32Type());
  Value peer =
      arith::XOrIOp::create(b, rank, arith::ConstantIntOp::create(b, 1, 32));
  Value remote = NVVM::MapaOp::create(
      b, LLVM::LLVMPointerType::get(ctx, /*shared_cluster=*/7), pointer, peer);
  NVVM::MBarrierArriveOp::create(b, Type(), remote, Value(),
                                 NVVM::MemScopeKind::CLUSTER, false);
}

struct MmaLowering : OpRewritePattern<MmaOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(MmaOp op,
                                PatternRewriter &rewriter) const override;
};

LogicalResult MmaLowering::matchAndRewrite(MmaOp op,
                                           PatternRewriter &rewriter) const {
  FailureOr<Barriers> barriers = barriersOf(op, op.getPipeline());
  if (failed(barriers))
    return failure();
  PipelineType type = op.getPipeline().getType();
  TileAttr tile = type.getTile();
  Type elementType = type.getElementType();
  MLIRContext *ctx = op.getContext();
  ImplicitLocOpBuilder b(op.getLoc(), op);
  auto [slot, round] = slotAndRound(b, op.getIter(), tile.getStages());
  nvgpu::MBarrierTryWaitParityOp::create(b, barriers->full, oddRound(b, round),
                                         constIndex(b, kWaitTicks), slot);

  // Shared-memory descriptors of this warpgroup's 64 A rows and the B tile.
  Value base = memref::ExtractAlignedPointerAsIndexOp::create(
      b, sharedMemoryBase(b, op));
  Value stage = arith::AddIOp::create(
      b, base,
      arith::MulIOp::create(b, slot, constIndex(b, tile.getStageBytes())));
  Value aAddress = arith::AddIOp::create(
      b, stage,
      arith::MulIOp::create(b, op.getWarpgroup(),
                            constIndex(b, 64 * TileAttr::kStageRowBytes)));
  Value bAddress =
      arith::AddIOp::create(b, stage, constIndex(b, tile.getABytes()));
  bool aMn = type.isAMnMajor(), bMn = type.isBMnMajor();
  auto descriptor = [&](Value address, bool mnMajor) -> Value {
    Value a = arith::IndexCastUIOp::create(b, b.getI64Type(), address);
    a = arith::ShRUIOp::create(b, a, constI64(b, 4));
    a = arith::AndIOp::create(b, a, constI64(b, 0x3FFF));
    uint64_t bits = mnMajor ? kMnMajorDescriptorBits : kKMajorDescriptorBits;
    return arith::OrIOp::create(b, a, constI64(b, static_cast<int64_t>(bits)));
  };
  // A warpgroup's 64 A rows: 64 K-major rows of 128 bytes, or the 64-wide
  // box of an M-major tile; both 8192 bytes.
  Value aDesc = descriptor(aAddress, aMn), bDesc = descriptor(bAddress, bMn);

  int64_t fragment = op.getAcc().getType().getNumElements();
  Type f32 = b.getF32Type();
  auto structType =
      LLVM::LLVMStructType::getLiteral(ctx, SmallVector<Type>(fragment, f32));
  // A tile's first k block ignores the accumulator (scale-d 0 below): its
  // registers stay undefined rather than being zeroed after the fence.
  Value acc = LLVM::UndefOp::create(b, structType);
  for (int64_t i = 0; i < fragment && !op.getFirst(); ++i) {
    Value v = vector::ExtractOp::create(b, op.getAcc(), i);
    acc = LLVM::InsertValueOp::create(b, acc, v, i);
  }
  NVVM::WGMMATypes inputType = isa<Float8E4M3FNType>(elementType)
                                   ? NVVM::WGMMATypes::e4m3
                               : elementType.isBF16() ? NVVM::WGMMATypes::bf16
                                                      : NVVM::WGMMATypes::f16;
  int64_t wgmmaK = kWgmmaKBytes / tile.getElementBytes();
  auto shape = NVVM::MMAShapeAttr::get(ctx, 64, tile.getN(), wgmmaK);
  NVVM::WgmmaFenceAlignedOp::create(b);
  // Each k step (16 of 16 bits, 32 of e4m3) advances a K-major
  // descriptor by 32 bytes (2 in the descriptor's 16-byte units) inside
  // the 128-byte swizzle atom, and an MN-major one (16-bit only) by 16 rows
  // of 128 bytes (128 units). wgmma reads an MN-major operand transposed:
  // A in column layout, B in row layout.
  auto advance = [&](Value desc, bool mnMajor, int64_t step) -> Value {
    if (!step)
      return desc;
    int64_t units =
        mnMajor ? step * wgmmaK * 128 / 16 : step * kWgmmaKBytes / 16;
    return arith::AddIOp::create(b, desc, constI64(b, units));
  };
  for (int64_t step = 0; step < tile.getK() / wgmmaK; ++step) {
    acc = NVVM::WgmmaMmaAsyncOp::create(
        b, structType, acc, advance(aDesc, aMn, step),
        advance(bDesc, bMn, step), shape, inputType, inputType,
        NVVM::WGMMATypes::f32,
        op.getFirst() && step == 0 ? NVVM::WGMMAScaleOut::zero
                                   : NVVM::WGMMAScaleOut::one,
        NVVM::WGMMAScaleIn::one, NVVM::WGMMAScaleIn::one,
        aMn ? NVVM::MMALayout::col : NVVM::MMALayout::row,
        bMn ? NVVM::MMALayout::row : NVVM::MMALayout::col,
        /*satfinite=*/NVVM::MMAIntOverflowAttr());
  }
  NVVM::WgmmaGroupSyncAlignedOp::create(b);
  NVVM::WgmmaWaitGroupSyncOp::create(b, op.getPending());

  SmallVector<Value> elements;
  for (int64_t i = 0; i < fragment; ++i)
    elements.push_back(LLVM::ExtractValueOp::create(b, acc, i));
  Value result =
      vector::FromElementsOp::create(b, op.getAcc().getType(), elements);

  // With nothing left in flight the slot is free now.
  if (op.getPending() == 0)
    releaseSlot(b, barriers->empty, slot, tile.getCluster());
  rewriter.replaceOp(op, result);
  return success();
}

struct PromoteLowering : OpRewritePattern<PromoteOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(PromoteOp op,
                                PatternRewriter &rewriter) const override;
};

LogicalResult
PromoteLowering::matchAndRewrite(PromoteOp op,
                                 PatternRewriter &rewriter) const {
  ImplicitLocOpBuilder b(op.getLoc(), op);
  auto fragmentType = op.getAcc().getType();
  int64_t fragment = fragmentType.getNumElements(), n = 2 * fragment;
  auto bScaleType = cast<MemRefType>(op.getBScale().getType());
  bool perColumn = bScaleType.getRank() == 2;
  // One scale of b per (gate or up) column block of the tile: its columns
  // lie in one block of 128 (256 interleaved), as its start is a multiple
  // of its width.
  if (!perColumn && (n > 128 || 128 % n != 0))
    return op.emitOpError() << "needs a tile n that divides 128 (one block "
                               "of b's scales), got "
                            << n;
  Value t = threadInWarpgroup(b);
  Value warp = arith::DivUIOp::create(b, t, constIndex(b, 32));
  Value lane = arith::RemUIOp::create(b, t, constIndex(b, 32));
  // The thread's rows: 16 * warp + lane / 4 and 8 further, of the
  // warpgroup's 64; those past the group's end read its last row's scale.
  Value first = arith::AddIOp::create(
      b,
      arith::AddIOp::create(
          b, op.getRow(),
          arith::MulIOp::create(b, op.getWarpgroup(), constIndex(b, 64))),
      arith::AddIOp::create(b,
                            arith::MulIOp::create(b, warp, constIndex(b, 16)),
                            arith::DivUIOp::create(b, lane, constIndex(b, 4))));
  Value lastRow = arith::SubIOp::create(b, op.getRowEnd(), constIndex(b, 1));
  Value aScale[2];
  for (int64_t h = 0; h < 2; ++h) {
    Value r = arith::MinUIOp::create(
        b, arith::AddIOp::create(b, first, constIndex(b, 8 * h)), lastRow);
    aScale[h] = memref::LoadOp::create(b, op.getAScale(),
                                       ValueRange{r, op.getKBlock()});
  }
  if (perColumn) {
    // Element 4 * j + 2 * h + v: row half h, column 8 * j + 2 * (lane % 4)
    // + v, whose scale is its own; columns past N read column N - 1's.
    Value pair = arith::AddIOp::create(
        b, op.getCol(),
        arith::MulIOp::create(b,
                              arith::RemUIOp::create(b, lane, constIndex(b, 4)),
                              constIndex(b, 2)));
    Value lastColumn = constIndex(b, bScaleType.getDimSize(0) - 1);
    SmallVector<Value> factors(fragment);
    for (int64_t j = 0; j < fragment / 4; ++j)
      for (int64_t v = 0; v < 2; ++v) {
        Value c = arith::MinUIOp::create(
            b, arith::AddIOp::create(b, pair, constIndex(b, 8 * j + v)),
            lastColumn);
        Value scale = memref::LoadOp::create(b, op.getBScale(),
                                             ValueRange{c, op.getKBlock()});
        for (int64_t h = 0; h < 2; ++h)
          factors[4 * j + 2 * h + v] =
              arith::MulFOp::create(b, aScale[h], scale);
      }
    Value scales = vector::FromElementsOp::create(b, fragmentType, factors);
    rewriter.replaceOp(
        op, math::FmaOp::create(b, op.getPartial(), scales, op.getAcc())
                .getResult());
    return success();
  }
  bool interleaved = op.getInterleaved();
  int64_t blocks = bScaleType.getDimSize(1);
  Value block = arith::DivUIOp::create(b, op.getCol(),
                                       constIndex(b, interleaved ? 256 : 128));
  Value bScale[2];
  bScale[0] = memref::LoadOp::create(
      b, op.getBScale(), ValueRange{op.getGroup(), block, op.getKBlock()});
  bScale[1] = bScale[0];
  if (interleaved)
    bScale[1] = memref::LoadOp::create(
        b, op.getBScale(),
        ValueRange{op.getGroup(),
                   arith::AddIOp::create(b, block, constIndex(b, blocks / 2)),
                   op.getKBlock()});
  // Element 4 * j + 2 * h + v: row half h, column block j (gate columns
  // for even j when interleaved).
  Value factor[2][2];
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t p = 0; p < 2; ++p)
      factor[h][p] = arith::MulFOp::create(b, aScale[h], bScale[p]);
  SmallVector<Value> factors;
  for (int64_t i = 0; i < fragment; ++i)
    factors.push_back(factor[(i / 2) % 2][interleaved ? (i / 4) % 2 : 0]);
  Value scales = vector::FromElementsOp::create(b, fragmentType, factors);
  rewriter.replaceOp(
      op,
      math::FmaOp::create(b, op.getPartial(), scales, op.getAcc()).getResult());
  return success();
}

struct ReleaseLowering : OpRewritePattern<ReleaseOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(ReleaseOp op,
                                PatternRewriter &rewriter) const override;
};

LogicalResult
ReleaseLowering::matchAndRewrite(ReleaseOp op,
                                 PatternRewriter &rewriter) const {
  FailureOr<Barriers> barriers = barriersOf(op, op.getPipeline());
  if (failed(barriers))
    return failure();
  TileAttr tile = op.getPipeline().getType().getTile();
  ImplicitLocOpBuilder b(op.getLoc(), op);
  if (op.getDrain())
    NVVM::WgmmaWaitGroupSyncOp::create(b, 0);
  Value slot = slotAndRound(b, op.getIter(), tile.getStages()).first;
  releaseSlot(b, barriers->empty, slot, tile.getCluster());
  rewriter.eraseOp(op);
  return success();
}

struct DrainLowering : OpRewritePattern<DrainOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(DrainOp op,
                                PatternRewriter &rewriter) const override {
    ImplicitLocOpBuilder b(op.getLoc(), op);
    NVVM::WgmmaWaitGroupSyncOp::create(b, 0);
    rewriter.eraseOp(op);
    return success();
  }
};

} // namespace

Value tonvgpu::sharedMemoryBase(ImplicitLocOpBuilder &b, Operation *user) {
  auto global = SymbolTable::lookupNearestSymbolFrom<memref::GlobalOp>(
      user, StringAttr::get(user->getContext(), kSharedMemoryName));
  return memref::GetGlobalOp::create(b, global.getType(), global.getSymName());
}

KernelLaunchAttr tonvgpu::kernelLaunch(Operation *op) {
  auto func = dyn_cast<gpu::GPUFuncOp>(op);
  if (!func)
    func = op->getParentOfType<gpu::GPUFuncOp>();
  return func ? func->getAttrOfType<KernelLaunchAttr>(kKernelLaunchAttrName)
              : KernelLaunchAttr();
}

FailureOr<Barriers> tonvgpu::barriersOf(Operation *user, Value pipeline) {
  auto cast = pipeline.getDefiningOp<UnrealizedConversionCastOp>();
  if (!cast || cast.getNumOperands() != 2 ||
      cast->getParentOfType<gpu::GPUFuncOp>() !=
          user->getParentOfType<gpu::GPUFuncOp>())
    return user->emitOpError() << "uses a pipeline not created in its kernel";
  return Barriers{cast.getOperand(0), cast.getOperand(1)};
}

FailureOr<Value> tonvgpu::tensorMapFor(Operation *user, Value source,
                                       int64_t boxRows, Type elementType,
                                       int64_t boxCols) {
  auto func = user->getParentOfType<gpu::GPUFuncOp>();
  auto arg = dyn_cast<BlockArgument>(source);
  if (!arg || arg.getOwner() != &func.front())
    return user->emitOpError()
           << "needs its TMA source to be an argument of kernel @"
           << func.getName() << " (the runtime encodes its tensor map)";
  // A map of this source and box made before: its argument's cast.
  auto records = func->getAttrOfType<ArrayAttr>(kTensorMapsAttrName);
  SmallVector<Attribute> list(records ? records.getValue()
                                      : ArrayRef<Attribute>());
  for (Attribute a : list) {
    auto record = cast<TensorMapAttr>(a);
    if (record.getSource() != arg.getArgNumber() ||
        record.getBox() != ArrayRef<int64_t>{boxRows, boxCols})
      continue;
    for (Operation *use : func.getArgument(record.getArg()).getUsers())
      if (auto cast = dyn_cast<UnrealizedConversionCastOp>(use))
        return cast.getResult(0);
  }

  MLIRContext *ctx = func.getContext();
  auto boxType = MemRefType::get({boxRows, boxCols}, elementType, AffineMap(),
                                 workgroupSpace(ctx));
  auto mapType = nvgpu::TensorMapDescriptorType::get(
      ctx, boxType, nvgpu::TensorMapSwizzleKind::SWIZZLE_128B,
      nvgpu::TensorMapL2PromoKind::L2PROMO_256B,
      nvgpu::TensorMapOOBKind::OOB_ZERO,
      nvgpu::TensorMapInterleaveKind::INTERLEAVE_NONE);
  unsigned index = func.getNumArguments();
  if (failed(func.insertArgument(index, LLVM::LLVMPointerType::get(ctx),
                                 DictionaryAttr(), source.getLoc())))
    return user->emitOpError()
           << "cannot add a tensor-map argument to @" << func.getName();
  ImplicitLocOpBuilder b(source.getLoc(), &func.front(), func.front().begin());
  Value map = UnrealizedConversionCastOp::create(
                  b, mapType, ValueRange{func.getArgument(index)})
                  .getResult(0);

  // The 2-D view the map describes: leading dimensions folded into rows
  // (-1: sized by the buffer at run time), or static rows of a dynamic
  // length (-1 columns: a transposed buffer of a capacity's rows).
  auto sourceType = cast<MemRefType>(source.getType());
  int64_t rows = 1;
  for (int64_t d : sourceType.getShape().drop_back())
    rows = (ShapedType::isDynamic(d) || rows < 0) ? -1 : rows * d;
  int64_t cols = sourceType.getShape().back();
  if (ShapedType::isDynamic(cols)) {
    if (rows < 0)
      return user->emitOpError()
             << "needs a TMA source with at most one dynamic dimension, got "
             << sourceType;
    cols = -1;
  }
  list.push_back(TensorMapAttr::get(ctx, index, arg.getArgNumber(),
                                    {rows, cols}, {boxRows, boxCols},
                                    /*swizzle=*/128));
  func->setAttr(kTensorMapsAttrName, ArrayAttr::get(ctx, list));
  return map;
}

void tonvgpu::populatePipelinePatterns(RewritePatternSet &patterns) {
  patterns.add<PipelineCreateLowering, ProduceLowering, MmaLowering,
               PromoteLowering, ReleaseLowering, DrainLowering>(
      patterns.getContext());
}
