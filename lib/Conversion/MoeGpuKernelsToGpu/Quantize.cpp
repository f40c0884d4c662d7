//===- Quantize.cpp - The FP8 quantization kernel -------------------------===//
//
// Part of moe-compiler.
//
//===----------------------------------------------------------------------===//

#include "Lowering.h"
#include "moe/MoeDialect.h"

using namespace mlir;
using namespace mlir::moe;
using namespace mlir::moe::kernels;

/// e4m3 codes of four f32 values (element i from v[i]), times `inverse`:
/// two cvt.rn.satfinite.e4m3x2.f32, as a vector<4xf8E4M3FN>.
static Value fourCodes(Emitter &e, ArrayRef<Value> v, Value inverse, Type f8) {
  ImplicitLocOpBuilder &b = e.b;
  auto pairType = VectorType::get({2}, b.getI8Type());
  // One emitting call a statement (the IR's order independent of the C++
  // compiler's order of arguments).
  auto convert = [&](Value lo, Value hi) -> Value {
    Value second = e.mul(hi, inverse);
    Value first = e.mul(lo, inverse);
    // Element 0 of the pair comes from the second operand.
    return NVVM::ConvertF32x2ToF8x2Op::create(
        b, pairType, second, first, NVVM::FPRoundingMode::RN,
        NVVM::SaturationMode::SATFINITE,
        /*relu=*/false, Float8E4M3FNType::get(b.getContext()));
  };
  Value low = convert(v[0], v[1]);
  Value high = convert(v[2], v[3]);
  Value codes =
      vector::ShuffleOp::create(b, low, high, ArrayRef<int64_t>{0, 1, 2, 3});
  return arith::BitcastOp::create(b, VectorType::get({4}, f8), codes);
}

/// One warp per row of `in` ([R, K], the layer's 16-bit type): each 128
/// channels become e4m3 codes in `out` and one f32 scale in `scale`
/// ([R, ceil(K / 128)]), as the host quantizes them (moe.grouped_matmul):
/// with `a` the block's largest magnitude (at least kFp8MinAmax), the
/// codes are e4m3(v * (448 / a)), rounded to nearest even and saturated,
/// and the scale a / 448. Lane l owns the block's channels 4l .. 4l + 3.
/// With `offsets`, the rows [offsets[0], offsets[last]) are quantized,
/// else all of in's rows.
static void lowerQuantize(moegpu::QuantizeOp op, Emitter &e) {
  ImplicitLocOpBuilder &b = e.b;
  Value in = op.getIn(), offsets = op.getOffsets();
  Value out = op.getOut(), scale = op.getScale();
  bool segmented = static_cast<bool>(offsets);
  auto inType = cast<MemRefType>(in.getType());
  int64_t depth = inType.getDimSize(1);
  int64_t blocks = llvm::divideCeil(depth, kFp8Block);
  Value lane, row;
  std::tie(lane, row) = e.warpRow(kQuantizeWarps);
  // Segmented: the rows of offsets' segments, from its first element (a
  // token chunk's received rows start past the chunks before).
  Value rows = e.dim(in, 0);
  if (segmented) {
    int64_t last = cast<MemRefType>(offsets.getType()).getDimSize(0) - 1;
    row = e.addi(row, e.index(e.load(offsets, {e.idx(0)})));
    rows = e.index(e.load(offsets, {e.idx(last)}));
  }
  // Every lane of the row's warp reaches the shuffles: the guard is
  // around the whole warp.
  e.when(e.cmp(arith::CmpIPredicate::ult, row, rows), [&] {
    e.loop(e.idx(0), e.idx(blocks), e.idx(1), {}, [&](Value kb, ValueRange) {
      Value c0 = e.addi(e.muli(kb, e.idx(kFp8Block)), e.muli(lane, e.idx(4)));
      // Lanes past K (a partial last block) load the row's last four
      // channels and count as zeros.
      Value inside = e.cmp(arith::CmpIPredicate::ult, c0, e.idx(depth));
      Value at = arith::MinUIOp::create(b, c0, e.idx(depth - 4));
      SmallVector<Value> v;
      Value amax = e.f32(0.0);
      for (int64_t i = 0; i < 4; ++i) {
        Value x = e.toF32(e.load(in, {row, e.addi(at, e.idx(i))}));
        x = arith::SelectOp::create(b, inside, x, e.f32(0.0));
        v.push_back(x);
        amax = arith::MaximumFOp::create(b, amax, math::AbsFOp::create(b, x));
      }
      for (int32_t offset = 16; offset >= 1; offset /= 2)
        amax = arith::MaximumFOp::create(
            b, amax,
            gpu::ShuffleOp::create(b, amax, offset, 32, gpu::ShuffleMode::XOR)
                .getShuffleResult());
      amax = arith::MaximumFOp::create(b, amax, e.f32(kFp8MinAmax));
      Value inverse = e.div(e.f32(kFp8Max), amax);
      Type f8 = cast<MemRefType>(out.getType()).getElementType();
      Value codes = fourCodes(e, v, inverse, f8);
      e.when(inside, [&] {
        vector::StoreOp::create(b, codes, out, ValueRange{row, c0}, false,
                                b.getI64IntegerAttr(4));
      });
      e.when(e.cmp(arith::CmpIPredicate::eq, lane, e.idx(0)), [&] {
        e.store(e.div(amax, e.f32(kFp8Max)), scale, {row, kb});
      });
      return SmallVector<Value>{};
    });
  });
}

/// 128 x 1 tiles, transposed (moegpu.quantize_columns): CTA b takes rows
/// [128 j, 128 j + 128) of columns [32 t, 32 t + 32), t = b mod tiles and
/// 128 j = offsets[0] + 128 (b / tiles). Warp w reads rows w, w + 4, ...
/// (lane l column 32 t + l, coalesced) into shared memory, column-major
/// with a row of padding (`tile[c][r]` at c * 129 + r: the stores of a
/// warp's 32 columns fall in 32 banks), each thread keeping its column's
/// largest magnitude; the four warps' maxima meet in shared memory. Then
/// warp w writes columns w, w + 4, ...: lane l converts rows 4l .. 4l + 3
/// and stores their four codes, so a warp writes a column's 128 codes as
/// one 128-byte line of `out`, and lane 0 its scale. (Those reads of four
/// consecutive rows conflict 4 ways in the banks; the global accesses,
/// which bound the kernel, are whole lines.)
static void lowerQuantizeColumns(moegpu::QuantizeColumnsOp op, Emitter &e) {
  ImplicitLocOpBuilder &b = e.b;
  Value in = op.getIn(), out = op.getOut(), scale = op.getScale();
  Value offsets = op.getOffsets();
  int64_t columns = cast<MemRefType>(in.getType()).getDimSize(1);
  int64_t tiles = llvm::divideCeil(columns, kColumnTile);
  int64_t last = cast<MemRefType>(offsets.getType()).getDimSize(0) - 1;
  constexpr int64_t kWarps = kColumnThreads / 32;
  constexpr int64_t kPitch = kFp8Block + 1;
  Type f32 = b.getF32Type();
  Type f8 = cast<MemRefType>(out.getType()).getElementType();
  auto func = op->getParentOfType<gpu::GPUFuncOp>();
  auto wg =
      gpu::AddressSpaceAttr::get(b.getContext(), gpu::AddressSpace::Workgroup);
  Value tile = func.addWorkgroupAttribution(
      MemRefType::get({kColumnTile * kPitch}, f32, AffineMap(), wg),
      op.getLoc());
  Value partial = func.addWorkgroupAttribution(
      MemRefType::get({kWarps, kColumnTile}, f32, AffineMap(), wg),
      op.getLoc());

  Value lane = e.remi(e.thread(), e.idx(32));
  Value warp = e.divi(e.thread(), e.idx(32));
  Value block = e.block();
  Value column0 = e.muli(e.remi(block, e.idx(tiles)), e.idx(kColumnTile));
  Value first = e.index(e.load(offsets, {e.idx(0)}));
  Value end = e.index(e.load(offsets, {e.idx(last)}));
  Value row0 =
      e.addi(first, e.muli(e.divi(block, e.idx(tiles)), e.idx(kFp8Block)));
  // The whole CTA takes the branch: the barriers inside are uniform.
  e.when(e.cmp(arith::CmpIPredicate::ult, row0, end), [&] {
    Value column = e.addi(column0, lane);
    Value inside = e.cmp(arith::CmpIPredicate::ult, column, e.idx(columns));
    // Lanes past C read the last column and count as zeros.
    Value at = arith::MinUIOp::create(b, column, e.idx(columns - 1));
    Value amax =
        e.loop(warp, e.idx(kFp8Block), e.idx(kWarps), {e.f32(0.0)},
               [&](Value r, ValueRange it) {
                 Value x = e.toF32(e.load(in, {e.addi(row0, r), at}));
                 x = arith::SelectOp::create(b, inside, x, e.f32(0.0));
                 e.store(x, tile, {e.addi(e.muli(lane, e.idx(kPitch)), r)});
                 Value magnitude = math::AbsFOp::create(b, x);
                 return SmallVector<Value>{
                     arith::MaximumFOp::create(b, it[0], magnitude)};
               })[0];
    e.store(amax, partial, {warp, lane});
    gpu::BarrierOp::create(b);
    e.loop(
        warp, e.idx(kColumnTile), e.idx(kWarps), {}, [&](Value c, ValueRange) {
          Value a = e.f32(kFp8MinAmax);
          for (int64_t w = 0; w < kWarps; ++w)
            a = arith::MaximumFOp::create(b, a, e.load(partial, {e.idx(w), c}));
          Value inverse = e.div(e.f32(kFp8Max), a);
          Value base = e.addi(e.muli(c, e.idx(kPitch)), e.muli(lane, e.idx(4)));
          SmallVector<Value> v;
          for (int64_t i = 0; i < 4; ++i)
            v.push_back(e.load(tile, {e.addi(base, e.idx(i))}));
          Value codes = fourCodes(e, v, inverse, f8);
          Value col = e.addi(column0, c);
          e.when(e.cmp(arith::CmpIPredicate::ult, col, e.idx(columns)), [&] {
            Value r = e.addi(row0, e.muli(lane, e.idx(4)));
            vector::StoreOp::create(b, codes, out, ValueRange{col, r}, false,
                                    b.getI64IntegerAttr(4));
            e.when(e.cmp(arith::CmpIPredicate::eq, lane, e.idx(0)), [&] {
              Value j = e.divi(row0, e.idx(kFp8Block));
              e.store(e.div(a, e.f32(kFp8Max)), scale, {col, j});
            });
          });
          return SmallVector<Value>{};
        });
  });
}

void kernels::populateQuantizePatterns(RewritePatternSet &patterns) {
  patterns.add<LowerKernel<moegpu::QuantizeOp, lowerQuantize>,
               LowerKernel<moegpu::QuantizeColumnsOp, lowerQuantizeColumns>>(
      patterns.getContext());
}
