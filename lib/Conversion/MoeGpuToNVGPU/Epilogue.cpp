//===- Epilogue.cpp - moegpu.store_tile to stores, staged or by TMA -------===//
//
// Part of moe-compiler.
//
// The pattern of moegpu.store_tile: the epilogue (SwiGLU, row scale,
// bias, accumulate) on a consumer warpgroup's wgmma fragment, stored from
// registers, or staged in shared memory and stored by TMA.
//
//===----------------------------------------------------------------------===//

#include "Lowering.h"

#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;
using namespace mlir::moegpu;
using namespace mlir::moegpu::tonvgpu;

namespace {

/// The epilogue's values of a thread's column pair in chunk `j` of its
/// wgmma fragment, row `half` (0: lane/4, 1: lane/4 + 8): silu(gate) * up
/// (SwiGLU: chunk j holds gate columns, j + 1 the same up columns, as the
/// packed weight's blocks of abi::kGateUpBlock = 8 rows make them; clamped
/// with `alpha` and `limit`), else the accumulators times the row's `scale`
/// (if any). With a bias, `biasCol` is the tile's first column plus the
/// thread's (2 * (lane % 4)): bias[expert, biasCol + 8 * chunk + i] joins
/// the accumulator first.
std::pair<Value, Value> epiloguePair(ImplicitLocOpBuilder &b, StoreTileOp op,
                                     int64_t j, int64_t half, Value scale,
                                     Value biasCol) {
  Type f32 = b.getF32Type();
  moe::KernelBuilder k{b};
  auto element = [&](int64_t chunk, int64_t i) -> Value {
    Value v =
        vector::ExtractOp::create(b, op.getAcc(), 4 * chunk + 2 * half + i);
    if (!op.getBias())
      return v;
    // Columns past the bias's (a partial last tile, stored nowhere) read
    // its last one.
    auto biasType = cast<MemRefType>(op.getBias().getType());
    Value col = arith::AddIOp::create(b, biasCol, constIndex(b, 8 * chunk + i));
    col = arith::MinUIOp::create(b, col,
                                 constIndex(b, biasType.getDimSize(1) - 1));
    Value bias = memref::LoadOp::create(b, op.getBias(),
                                        ValueRange{op.getExpert(), col});
    return arith::AddFOp::create(b, v, arith::ExtFOp::create(b, f32, bias));
  };
  // x * sigmoid(gain * x) = x / (1 + e^(-gain * x)).
  auto gated = [&](Value g, double gain) -> Value {
    Value scaled = gain == 1.0 ? g : arith::MulFOp::create(b, g, k.f32(gain));
    Value e = buildExp(b, arith::NegFOp::create(b, scaled));
    return arith::DivFOp::create(b, g, arith::AddFOp::create(b, k.f32(1.0), e));
  };
  if (op.getEpilogue() == Epilogue::SwiGLU) {
    std::optional<APFloat> alpha = op.getAlpha(), limit = op.getLimit();
    Type outType = cast<MemRefType>(op.getC().getType()).getElementType();
    auto rounded = [&](Value v) -> Value {
      if (!op.getRoundedInputs() || outType.isF32())
        return v;
      return arith::ExtFOp::create(
          b, f32, Value(arith::TruncFOp::create(b, outType, v)));
    };
    auto act = [&](int64_t i) -> Value {
      Value gate = rounded(element(j, i)), up = rounded(element(j + 1, i));
      if (!limit)
        return arith::MulFOp::create(b, gated(gate, 1.0), up);
      // GPT-OSS: (clamp(up, -l, l) + 1) * g * sigmoid(alpha * g), g =
      // min(gate, l).
      auto [g, u] = k.clampGateUp(gate, up, limit->convertToDouble());
      return arith::MulFOp::create(b, u, gated(g, alpha->convertToDouble()));
    };
    return {act(0), act(1)};
  }
  Value v0 = element(j, 0), v1 = element(j, 1);
  if (scale)
    return {arith::MulFOp::create(b, v0, scale),
            arith::MulFOp::create(b, v1, scale)};
  return {v0, v1};
}

/// The first bias column of a thread's fragment in a tile (see
/// epiloguePair), or null without a bias.
Value biasColumn(ImplicitLocOpBuilder &b, StoreTileOp op, Value quad) {
  if (!op.getBias())
    return Value();
  return arith::AddIOp::create(b, op.getCol(), quad);
}

struct StoreTileLowering : OpRewritePattern<StoreTileOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(StoreTileOp op,
                                PatternRewriter &rewriter) const override {
    TileAttr tile = kernelTile(op);
    if (storesByTma(op, tile))
      return storeByTma(op, tile, rewriter);
    return storeFromRegisters(op, rewriter);
  }

private:
  /// Each thread stores its fragment's column pairs to global memory.
  LogicalResult storeFromRegisters(StoreTileOp op,
                                   PatternRewriter &rewriter) const;
  /// Each warpgroup stages its rows in shared memory, 128-byte swizzled,
  /// and one thread stores each box by TMA.
  LogicalResult storeByTma(StoreTileOp op, TileAttr tile,
                           PatternRewriter &rewriter) const;
};

LogicalResult
StoreTileLowering::storeFromRegisters(StoreTileOp op,
                                      PatternRewriter &rewriter) const {
  // Accumulating reads c: from registers (each element has one thread).
  bool accumulate = op.getEpilogue() == Epilogue::Accumulate;
  ImplicitLocOpBuilder b(op.getLoc(), op);
  Value c = op.getC();
  auto cType = cast<MemRefType>(c.getType());
  Type outType = cType.getElementType();
  Value columns = memref::DimOp::create(b, c, cType.getRank() - 1);
  Value t = threadInWarpgroup(b);
  Value warp = arith::DivUIOp::create(b, t, constIndex(b, 32));
  Value lane = arith::RemUIOp::create(b, t, constIndex(b, 32));
  Value row0 = arith::AddIOp::create(
      b, op.getRow(),
      arith::AddIOp::create(
          b,
          arith::AddIOp::create(
              b, arith::MulIOp::create(b, op.getWarpgroup(), constIndex(b, 64)),
              arith::MulIOp::create(b, warp, constIndex(b, 16))),
          arith::DivUIOp::create(b, lane, constIndex(b, 4))));
  Value quad = arith::MulIOp::create(
      b, arith::RemUIOp::create(b, lane, constIndex(b, 4)), constIndex(b, 2));
  bool swiglu = op.getEpilogue() == Epilogue::SwiGLU;
  Value col0 = op.getCol();
  if (swiglu)
    col0 = arith::DivUIOp::create(b, col0, constIndex(b, 2));
  int64_t chunks = op.getAcc().getType().getNumElements() / 4;

  for (int64_t half = 0; half < 2; ++half) {
    Value row = arith::AddIOp::create(b, row0, constIndex(b, 8 * half));
    Value inRows = arith::CmpIOp::create(b, arith::CmpIPredicate::ult, row,
                                         op.getRowEnd());
    auto rowIf = scf::IfOp::create(b, inRows, /*withElseRegion=*/false);
    ImplicitLocOpBuilder rb(op.getLoc(), rowIf.thenBlock()->getTerminator());
    Value scale;
    if (op.getScale())
      scale = memref::LoadOp::create(rb, op.getScale(), ValueRange{row});
    Value biasCol = biasColumn(rb, op, quad);
    for (int64_t j = 0; j < chunks; j += swiglu ? 2 : 1) {
      auto [v0, v1] = epiloguePair(rb, op, j, half, scale, biasCol);
      Value col =
          arith::AddIOp::create(rb, col0, constIndex(rb, (swiglu ? 4 : 8) * j));
      col = arith::AddIOp::create(rb, col, quad);
      Value inColumns =
          arith::CmpIOp::create(rb, arith::CmpIPredicate::ult, col, columns);
      auto colIf = scf::IfOp::create(rb, inColumns, /*withElseRegion=*/false);
      ImplicitLocOpBuilder sb(op.getLoc(), colIf.thenBlock()->getTerminator());
      auto narrow = [&](Value v) -> Value {
        return outType.isF32() ? v : arith::TruncFOp::create(sb, outType, v);
      };
      auto at = [&](Value column) -> SmallVector<Value> {
        if (op.getGroup())
          return {op.getGroup(), row, column};
        return {row, column};
      };
      // A thread's two adjacent columns in one store (a warp's row of
      // the fragment then fills whole 32-byte sectors) where the row
      // width is even: the pair's first column is, so it is aligned.
      int64_t width = cType.getShape().back();
      if (!ShapedType::isDynamic(width) && width % 2 == 0) {
        auto pairType = VectorType::get({2}, outType);
        IntegerAttr align =
            sb.getI64IntegerAttr(2 * outType.getIntOrFloatBitWidth() / 8);
        Value pair = vector::FromElementsOp::create(
            sb, pairType, ValueRange{narrow(v0), narrow(v1)});
        if (accumulate)
          pair = arith::AddFOp::create(
              sb,
              vector::LoadOp::create(sb, pairType, c, at(col),
                                     /*nontemporal=*/false, align),
              pair);
        vector::StoreOp::create(sb, pair, c, at(col), /*nontemporal=*/false,
                                align);
        continue;
      }
      // c[i] = v, or c[i] += v.
      auto put = [&](Value v, ValueRange i) {
        if (accumulate)
          v = arith::AddFOp::create(sb, memref::LoadOp::create(sb, c, i), v);
        memref::StoreOp::create(sb, v, c, i);
      };
      put(narrow(v0), at(col));
      Value next = arith::AddIOp::create(sb, col, constIndex(sb, 1));
      // A dense GEMM's N may be odd: its last pair has one column.
      if (ShapedType::isDynamic(width) || width % 2 != 0) {
        Value inside =
            arith::CmpIOp::create(sb, arith::CmpIPredicate::ult, next, columns);
        auto lastIf = scf::IfOp::create(sb, inside, /*withElseRegion=*/false);
        sb.setInsertionPoint(lastIf.thenBlock()->getTerminator());
      }
      put(narrow(v1), at(next));
    }
  }
  rewriter.eraseOp(op);
  return success();
}

LogicalResult StoreTileLowering::storeByTma(StoreTileOp op, TileAttr tile,
                                            PatternRewriter &rewriter) const {
  auto cType = cast<MemRefType>(op.getC().getType());
  Type outType = cType.getElementType();
  int64_t bytes = outType.getIntOrFloatBitWidth() / 8;
  // A box is 64 rows of 128 bytes (the 128-byte swizzle's row).
  int64_t boxCols = 128 / bytes;
  bool swiglu = op.getEpilogue() == Epilogue::SwiGLU;
  int64_t outCols = swiglu ? tile.getN() / 2 : tile.getN();
  int64_t boxes = outCols / boxCols;
  constexpr int64_t kBoxBytes = 64 * 128;
  FailureOr<Value> map = tensorMapFor(op, op.getC(), 64, outType, boxCols);
  if (failed(map))
    return failure();
  MLIRContext *ctx = op.getContext();
  ImplicitLocOpBuilder b(op.getLoc(), op);
  Type i32 = b.getI32Type();
  Value wg = op.getWarpgroup();
  Value t = threadInWarpgroup(b);
  Value warp = arith::DivUIOp::create(b, t, constIndex(b, 32));
  Value lane = arith::RemUIOp::create(b, t, constIndex(b, 32));
  // A thread's fragment: rows warp*16 + lane/4 (+8), column pairs at
  // 2 * (lane % 4) in every 8 (or, SwiGLU, in every 4 of the output).
  Value quarter = arith::DivUIOp::create(b, lane, constIndex(b, 4));
  Value quad = arith::MulIOp::create(
      b, arith::RemUIOp::create(b, lane, constIndex(b, 4)), constIndex(b, 2));
  Value firstRow = arith::AddIOp::create(
      b, op.getRow(), arith::MulIOp::create(b, wg, constIndex(b, 64)));
  // This warpgroup's 64 rows are in the group, or wholly past its end (a
  // k-grouped GEMM of 64 rows; the second CTA of a pair past the last
  // block): they store nothing.
  Value stores = arith::CmpIOp::create(b, arith::CmpIPredicate::ult, firstRow,
                                       op.getRowEnd());
  auto ifOp = scf::IfOp::create(b, stores, /*withElseRegion=*/false);
  ImplicitLocOpBuilder sb(op.getLoc(), ifOp.thenBlock()->getTerminator());
  int64_t pipelineBytes = tile.getSharedMemoryBytes();
  Value base = sharedMemoryBase(sb, op);
  Value staging = arith::AddIOp::create(
      sb, constIndex(sb, pipelineBytes),
      arith::MulIOp::create(sb, wg, constIndex(sb, 2 * kBoxBytes)));
  Value leader =
      arith::CmpIOp::create(sb, arith::CmpIPredicate::eq, t, constIndex(sb, 0));
  // Named barrier 1 + wg: this warpgroup's 128 threads.
  Value barrierId = arith::IndexCastOp::create(
      sb, i32, arith::AddIOp::create(sb, wg, constIndex(sb, 1)));
  Value barrierThreads =
      arith::ConstantIntOp::create(sb, kWarpgroupThreads, 32);
  auto warpgroupBarrier = [&] {
    NVVM::BarrierOp::create(sb, TypeRange{}, barrierId, barrierThreads,
                            NVVM::BarrierReductionAttr(), Value());
  };
  auto whenLeader = [&](function_ref<void(ImplicitLocOpBuilder &)> body) {
    auto leaderIf = scf::IfOp::create(sb, leader, /*withElseRegion=*/false);
    ImplicitLocOpBuilder lb(op.getLoc(), leaderIf.thenBlock()->getTerminator());
    body(lb);
  };
  Value scale0, scale1;
  if (op.getScale()) {
    // Rows past the group's end (a box the TMA unit clips) read its last
    // row's scale.
    Value lastRow =
        arith::SubIOp::create(sb, op.getRowEnd(), constIndex(sb, 1));
    Value row0 = arith::AddIOp::create(
        sb, firstRow,
        arith::AddIOp::create(
            sb, arith::MulIOp::create(sb, warp, constIndex(sb, 16)), quarter));
    for (int64_t h = 0; h < 2; ++h) {
      Value r = arith::MinUIOp::create(
          sb, arith::AddIOp::create(sb, row0, constIndex(sb, 8 * h)), lastRow);
      (h ? scale1 : scale0) =
          memref::LoadOp::create(sb, op.getScale(), ValueRange{r});
    }
  }
  auto narrow = [&](Value v) -> Value {
    return outType.isF32() ? v : arith::TruncFOp::create(sb, outType, v);
  };
  auto flatType = MemRefType::get({64 * boxCols}, outType, AffineMap(),
                                  workgroupSpace(ctx));
  auto boxType =
      MemRefType::get({64, boxCols}, outType, AffineMap(), workgroupSpace(ctx));
  Value outCol0 = op.getCol();
  if (swiglu)
    outCol0 = arith::DivUIOp::create(sb, outCol0, constIndex(sb, 2));
  Value outRow = firstRow;
  if (op.getGroup())
    outRow = arith::AddIOp::create(
        sb, outRow,
        arith::MulIOp::create(
            sb, op.getGroup(),
            constIndex(sb, cType.getShape()[cType.getRank() - 2])));
  // Per fragment row: the box row's first byte and its swizzle (the
  // 16-byte chunk index is XORed with the row modulo 8, which is lane/4).
  Value rowBytes[2];
  for (int64_t half = 0; half < 2; ++half) {
    Value r = arith::AddIOp::create(
        sb, arith::MulIOp::create(sb, warp, constIndex(sb, 16)),
        arith::AddIOp::create(sb, quarter, constIndex(sb, 8 * half)));
    rowBytes[half] = arith::MulIOp::create(sb, r, constIndex(sb, 128));
  }
  Value quadBytes = arith::MulIOp::create(sb, quad, constIndex(sb, bytes));
  Value biasCol = biasColumn(sb, op, quad);
  for (int64_t box = 0; box < boxes; ++box) {
    Value offset = arith::AddIOp::create(sb, staging,
                                         constIndex(sb, (box % 2) * kBoxBytes));
    // The store that last read this buffer (two boxes back, or the last
    // tile's) is done reading; the other buffer's may still be.
    whenLeader([&](ImplicitLocOpBuilder &lb) {
      NVVM::CpAsyncBulkWaitGroupOp::create(lb, box == 0 ? 0 : 1,
                                           lb.getUnitAttr());
    });
    warpgroupBarrier();
    Value flat =
        memref::ViewOp::create(sb, flatType, base, offset, ValueRange{});
    int64_t perBox = boxCols / (swiglu ? 4 : 8);
    for (int64_t jj = 0; jj < perBox; jj += swiglu ? 2 : 1) {
      int64_t j = box * perBox + jj;
      for (int64_t half = 0; half < 2; ++half) {
        auto [v0, v1] =
            epiloguePair(sb, op, j, half, half ? scale1 : scale0, biasCol);
        // Byte of the pair in the box row, before the swizzle.
        int64_t colInBox = (swiglu ? 4 : 8) * jj;
        Value cb = arith::AddIOp::create(sb, constIndex(sb, colInBox * bytes),
                                         quadBytes);
        Value chunk = arith::XOrIOp::create(
            sb, arith::DivUIOp::create(sb, cb, constIndex(sb, 16)), quarter);
        Value at = arith::AddIOp::create(
            sb, rowBytes[half],
            arith::AddIOp::create(
                sb, arith::MulIOp::create(sb, chunk, constIndex(sb, 16)),
                arith::RemUIOp::create(sb, cb, constIndex(sb, 16))));
        Value index = arith::DivUIOp::create(sb, at, constIndex(sb, bytes));
        auto pairType = VectorType::get({2}, outType);
        Value pair = vector::FromElementsOp::create(
            sb, pairType, ValueRange{narrow(v0), narrow(v1)});
        vector::StoreOp::create(sb, pair, flat, ValueRange{index},
                                /*nontemporal=*/false,
                                sb.getI64IntegerAttr(2 * bytes));
      }
    }
    // The writes, visible to the TMA unit, then one thread stores the box.
    NVVM::FenceProxyOp::create(
        sb, NVVM::ProxyKind::async_shared,
        NVVM::SharedSpaceAttr::get(ctx, NVVM::SharedSpace::shared_cta));
    warpgroupBarrier();
    whenLeader([&](ImplicitLocOpBuilder &lb) {
      Value boxView =
          memref::ViewOp::create(lb, boxType, base, offset, ValueRange{});
      Value col =
          arith::AddIOp::create(lb, outCol0, constIndex(lb, box * boxCols));
      nvgpu::TmaAsyncStoreOp::create(lb, boxView, *map, ValueRange{col, outRow},
                                     Value());
      NVVM::CpAsyncBulkCommitGroupOp::create(lb);
    });
  }
  rewriter.eraseOp(op);
  return success();
}

} // namespace

bool tonvgpu::storesByTma(StoreTileOp op, TileAttr tile) {
  auto loop = op->getParentOfType<TileLoopOp>();
  if (!tile || !loop || op.getEpilogue() == Epilogue::Accumulate ||
      !usesTmaStoreEpilogue(op.getC().getType(),
                            !loop.getKGrouped() &&
                                rowsEndOnBoxes(loop.getOffsets()),
                            loop.getKGrouped()))
    return false;
  // A box is 64 rows of 128 bytes (the 128-byte swizzle's row); the
  // tile's output columns must be whole boxes.
  Type outType = cast<MemRefType>(op.getC().getType()).getElementType();
  int64_t boxCols = 128 / (outType.getIntOrFloatBitWidth() / 8);
  bool swiglu = op.getEpilogue() == Epilogue::SwiGLU;
  int64_t outCols = swiglu ? tile.getN() / 2 : tile.getN();
  // A tile given with more stages than leave room for the staging (the
  // tile selection reserves it) stores from registers.
  return outCols % boxCols == 0 &&
         tile.getSharedMemoryBytes() +
                 tmaStoreStagingBytes(tile.getConsumers()) <=
             kMaxSharedMemoryBytes - kReservedSharedMemoryBytes;
}

void tonvgpu::populateEpiloguePatterns(RewritePatternSet &patterns) {
  patterns.add<StoreTileLowering>(patterns.getContext());
}
