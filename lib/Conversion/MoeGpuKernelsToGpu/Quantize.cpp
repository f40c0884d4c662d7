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
  Type i8 = b.getI8Type();
  auto pairType = VectorType::get({2}, i8);
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
      auto convert = [&](Value lo, Value hi) -> Value {
        // cvt.rn.satfinite.e4m3x2.f32: element 0 from the second operand.
        return NVVM::ConvertF32x2ToF8x2Op::create(
            b, pairType, e.mul(hi, inverse), e.mul(lo, inverse),
            NVVM::FPRoundingMode::RN, NVVM::SaturationMode::SATFINITE,
            /*relu=*/false, Float8E4M3FNType::get(b.getContext()));
      };
      Value codes =
          vector::ShuffleOp::create(b, convert(v[0], v[1]), convert(v[2], v[3]),
                                    ArrayRef<int64_t>{0, 1, 2, 3});
      Type f8 = cast<MemRefType>(out.getType()).getElementType();
      codes = arith::BitcastOp::create(b, VectorType::get({4}, f8), codes);
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

void kernels::populateQuantizePatterns(RewritePatternSet &patterns) {
  patterns.add<LowerKernel<moegpu::QuantizeOp, lowerQuantize>>(
      patterns.getContext());
}
