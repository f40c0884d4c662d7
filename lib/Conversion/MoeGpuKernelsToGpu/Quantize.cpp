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

/// The largest of `v` over the warp, in every lane (butterfly shuffles).
static Value warpMax(Emitter &e, Value v) {
  for (int32_t offset = 16; offset >= 1; offset /= 2) {
    Value other =
        gpu::ShuffleOp::create(e.b, v, offset, 32, gpu::ShuffleMode::XOR)
            .getShuffleResult();
    v = arith::MaximumFOp::create(e.b, v, other);
  }
  return v;
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
  Value lane4 = e.muli(lane, e.idx(4));
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
      Value blockStart = e.muli(kb, e.idx(kFp8Block));
      Value c0 = e.addi(blockStart, lane4);
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
      amax = warpMax(e, amax);
      amax = arith::MaximumFOp::create(
          b, amax, e.f32(op.getMinAmax().convertToDouble()));
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
  Value offsets = op.getOffsets(), inScale = op.getInScale();
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
  // One emitting call a statement (the IR's order independent of the C++
  // compiler's order of arguments).
  Value lane4 = e.muli(lane, e.idx(4));
  Value laneColumn = e.muli(lane, e.idx(kPitch));
  Value block = e.block();
  Value column0 = e.muli(e.remi(block, e.idx(tiles)), e.idx(kColumnTile));
  Value first = e.index(e.load(offsets, {e.idx(0)}));
  Value end = e.index(e.load(offsets, {e.idx(last)}));
  Value rowBlock = e.divi(block, e.idx(tiles));
  Value row0 = e.addi(first, e.muli(rowBlock, e.idx(kFp8Block)));
  // The whole CTA takes the branch: the barriers inside are uniform.
  e.when(e.cmp(arith::CmpIPredicate::ult, row0, end), [&] {
    Value column = e.addi(column0, lane);
    Value inside = e.cmp(arith::CmpIPredicate::ult, column, e.idx(columns));
    // Lanes past C read the last column and count as zeros.
    Value at = arith::MinUIOp::create(b, column, e.idx(columns - 1));
    Value block128;
    if (inScale)
      block128 = e.divi(at, e.idx(kFp8Block));
    // Rows past the groups' end (a last group that ends inside a tile,
    // as the shared experts' tokens do) read the last row and count as
    // zeros.
    Value lastRow = e.subi(end, e.idx(1));
    Value amax =
        e.loop(warp, e.idx(kFp8Block), e.idx(kWarps), {e.f32(0.0)},
               [&](Value r, ValueRange it) {
                 Value tileRow = e.addi(row0, r);
                 Value valid = arith::AndIOp::create(
                     b, inside, e.cmp(arith::CmpIPredicate::ult, tileRow, end));
                 Value row = arith::MinUIOp::create(b, tileRow, lastRow);
                 Value x = e.load(in, {row, at});
                 if (inScale) {
                   // code * its row's scale of the column's 128.
                   Value byte = arith::BitcastOp::create(b, b.getI8Type(), x);
                   Value pair = vector::BroadcastOp::create(
                       b, VectorType::get({2}, b.getI8Type()), byte);
                   Value halves = NVVM::ConvertF8x2ToF16x2Op::create(
                       b, VectorType::get({2}, b.getF16Type()), pair,
                       /*relu=*/false, Float8E4M3FNType::get(b.getContext()));
                   Value value = vector::ExtractOp::create(b, halves, 0);
                   Value rowScale = e.load(inScale, {row, block128});
                   x = e.mul(e.toF32(value), rowScale);
                 } else {
                   x = e.toF32(x);
                 }
                 x = arith::SelectOp::create(b, valid, x, e.f32(0.0));
                 e.store(x, tile, {e.addi(laneColumn, r)});
                 Value magnitude = math::AbsFOp::create(b, x);
                 return SmallVector<Value>{
                     arith::MaximumFOp::create(b, it[0], magnitude)};
               })[0];
    e.store(amax, partial, {warp, lane});
    gpu::BarrierOp::create(b);
    e.loop(
        warp, e.idx(kColumnTile), e.idx(kWarps), {}, [&](Value c, ValueRange) {
          Value a = e.f32(op.getMinAmax().convertToDouble());
          for (int64_t w = 0; w < kWarps; ++w)
            a = arith::MaximumFOp::create(b, a, e.load(partial, {e.idx(w), c}));
          Value inverse = e.div(e.f32(kFp8Max), a);
          Value columnAt = e.muli(c, e.idx(kPitch));
          Value base = e.addi(columnAt, lane4);
          SmallVector<Value> v;
          for (int64_t i = 0; i < 4; ++i)
            v.push_back(e.load(tile, {e.addi(base, e.idx(i))}));
          Value codes = fourCodes(e, v, inverse, f8);
          Value col = e.addi(column0, c);
          e.when(e.cmp(arith::CmpIPredicate::ult, col, e.idx(columns)), [&] {
            Value r = e.addi(row0, lane4);
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

/// 128 x 128 blocks (moegpu.quantize_blocks): CTA b takes block (i, j)
/// of matrix g, b = (g * row blocks + i) * column blocks + j. Warp w reads
/// rows 128 i + w + 8 p (p < 16) and lane l its columns 128 j + 4 l ..
/// + 3 (one 16-byte load; outside the matrix, zeros), 64 values a thread
/// kept in registers. The block's largest magnitude: the thread's, a
/// butterfly over the warp, then the eight warps' through shared memory.
/// Each lane stores its four codes of a row in one access; with
/// `transposed` they also go into a shared byte tile (`t[c][r]`, 132
/// bytes a column), which warp w reads back a column (c = w + 8 q) at a
/// time, a lane four bytes, into the transposed output's rows. A gate or
/// up half (`layout`) goes to its rows of the packed codes, its blocks of
/// the scales and its columns of the transposed codes.
static void lowerQuantizeBlocks(moegpu::QuantizeBlocksOp op, Emitter &e) {
  ImplicitLocOpBuilder &b = e.b;
  Value in = op.getIn(), out = op.getOut(), scale = op.getScale();
  Value transposed = op.getTransposed();
  Value transposedScale = op.getTransposedScale();
  moegpu::CopyLayout layout = op.getLayout();
  bool packed = layout != moegpu::CopyLayout::Same;
  bool up = layout == moegpu::CopyLayout::UpRows;
  auto type = cast<MemRefType>(in.getType());
  int64_t rows = type.getDimSize(1), cols = type.getDimSize(2);
  int64_t rowBlocks = llvm::divideCeil(rows, kFp8Block);
  int64_t colBlocks = llvm::divideCeil(cols, kFp8Block);
  constexpr int64_t kWarps = kBlockThreads / 32;
  constexpr int64_t kPasses = kFp8Block / kWarps;
  constexpr int64_t kPitch = kFp8Block + 4;
  Type f32 = b.getF32Type(), i8 = b.getI8Type();
  Type f8 = cast<MemRefType>(out.getType()).getElementType();
  auto func = op->getParentOfType<gpu::GPUFuncOp>();
  auto wg =
      gpu::AddressSpaceAttr::get(b.getContext(), gpu::AddressSpace::Workgroup);
  Value maxima = func.addWorkgroupAttribution(
      MemRefType::get({kWarps}, f32, AffineMap(), wg), op.getLoc());
  Value tile;
  if (transposed)
    tile = func.addWorkgroupAttribution(
        MemRefType::get({kFp8Block * kPitch}, i8, AffineMap(), wg),
        op.getLoc());

  // With `unless`, a CTA does nothing while the flag is set (codes still
  // valid): the flag is uniform, so are the barriers inside.
  auto body = [&] {
    Value lane = e.remi(e.thread(), e.idx(32));
    Value warp = e.divi(e.thread(), e.idx(32));
    Value block = e.block();
    Value j = e.remi(block, e.idx(colBlocks));
    Value rest = e.divi(block, e.idx(colBlocks));
    Value i = e.remi(rest, e.idx(rowBlocks));
    Value g = e.divi(rest, e.idx(rowBlocks));
    // One emitting call a statement, as above.
    Value lane4 = e.muli(lane, e.idx(4));
    Value column0 = e.muli(j, e.idx(kFp8Block));
    Value col = e.addi(column0, lane4);
    Value colInside = e.cmp(arith::CmpIPredicate::ult, col, e.idx(cols));
    Value colAt = arith::MinUIOp::create(b, col, e.idx(cols - 4));
    Value row0 = e.muli(i, e.idx(kFp8Block));
    auto vec4 = VectorType::get({4}, f32);
    Value zeros = arith::ConstantOp::create(
        b, vec4, DenseElementsAttr::get(vec4, b.getF32FloatAttr(0.0f)));
    // Per pass: the values, whether they are in the matrix, and the row
    // (within the block and within the matrix).
    SmallVector<Value> values, inside, blockRows, matrixRows;
    Value amax = e.f32(0.0);
    for (int64_t p = 0; p < kPasses; ++p) {
      Value r = e.addi(warp, e.idx(kWarps * p));
      Value row = e.addi(row0, r);
      Value rowInside = e.cmp(arith::CmpIPredicate::ult, row, e.idx(rows));
      Value ok = arith::AndIOp::create(b, rowInside, colInside);
      Value rowAt = arith::MinUIOp::create(b, row, e.idx(rows - 1));
      Value v = vector::LoadOp::create(b, vec4, in, ValueRange{g, rowAt, colAt},
                                       false, b.getI64IntegerAttr(16));
      v = arith::SelectOp::create(b, ok, v, zeros);
      Value magnitudes = math::AbsFOp::create(b, v);
      Value largest = vector::ReductionOp::create(
          b, vector::CombiningKind::MAXIMUMF, magnitudes);
      amax = arith::MaximumFOp::create(b, amax, largest);
      values.push_back(v);
      inside.push_back(ok);
      blockRows.push_back(r);
      matrixRows.push_back(row);
    }
    amax = warpMax(e, amax);
    e.when(e.cmp(arith::CmpIPredicate::eq, lane, e.idx(0)),
           [&] { e.store(amax, maxima, {warp}); });
    gpu::BarrierOp::create(b);
    amax = e.load(maxima, {e.idx(0)});
    for (int64_t w = 1; w < kWarps; ++w) {
      Value other = e.load(maxima, {e.idx(w)});
      amax = arith::MaximumFOp::create(b, amax, other);
    }
    // A block of zeros keeps its values and gets the scale 1.
    Value zero = arith::CmpFOp::create(
        b, arith::CmpFPredicate::OLT, amax,
        e.f32(static_cast<double>(std::numeric_limits<float>::min())));
    Value one = e.f32(1.0);
    Value quotient = e.div(e.f32(kFp8Max), amax);
    Value inverse = arith::SelectOp::create(b, zero, one, quotient);
    Value blockScale = e.div(amax, e.f32(kFp8Max));
    blockScale = arith::SelectOp::create(b, zero, one, blockScale);
    // The up half's blocks follow the gate's.
    Value scaleRow = up ? e.addi(i, e.idx(rowBlocks)) : i;
    e.when(e.cmp(arith::CmpIPredicate::eq, e.thread(), e.idx(0)), [&] {
      e.store(blockScale, scale, {g, scaleRow, j});
      if (transposedScale)
        e.store(blockScale, transposedScale, {g, j, scaleRow});
    });
    for (int64_t p = 0; p < kPasses; ++p) {
      SmallVector<Value> v;
      for (int64_t x = 0; x < 4; ++x)
        v.push_back(vector::ExtractOp::create(b, values[p], x));
      Value codes = fourCodes(e, v, inverse, f8);
      Value r = blockRows[p];
      Value outRow = matrixRows[p];
      if (packed) {
        outRow = gateRow(e, outRow);
        if (up)
          outRow = e.addi(outRow, e.idx(kGateUpBlock));
      }
      e.when(inside[p], [&] {
        vector::StoreOp::create(b, codes, out, ValueRange{g, outRow, col},
                                false, b.getI64IntegerAttr(4));
      });
      if (!transposed)
        continue;
      // t[c][r] for the lane's four columns c (codes of zeros outside).
      Value bytes =
          arith::BitcastOp::create(b, VectorType::get({4}, i8), codes);
      for (int64_t x = 0; x < 4; ++x) {
        Value c = e.addi(lane4, e.idx(x));
        Value byte = vector::ExtractOp::create(b, bytes, x);
        e.store(byte, tile, {e.addi(e.muli(c, e.idx(kPitch)), r)});
      }
    }
    if (!transposed)
      return;
    gpu::BarrierOp::create(b);
    // Warp w: columns w, w + 8, ... of the block, each a 128-byte row of
    // the transposed codes (lane l its rows 4 l .. 4 l + 3).
    Value trow = e.addi(row0, lane4);
    Value trowInside = e.cmp(arith::CmpIPredicate::ult, trow, e.idx(rows));
    // The up half's columns start past the gate's, padded to whole blocks.
    Value tcolumn = up ? e.addi(trow, e.idx(rowBlocks * kFp8Block)) : trow;
    for (int64_t q = 0; q < kPasses; ++q) {
      Value c = e.addi(warp, e.idx(kWarps * q));
      Value tcol = e.addi(column0, c);
      Value columnAt = e.muli(c, e.idx(kPitch));
      Value at = e.addi(columnAt, lane4);
      Value bytes =
          vector::LoadOp::create(b, VectorType::get({4}, i8), tile,
                                 ValueRange{at}, false, b.getI64IntegerAttr(4));
      Value codes =
          arith::BitcastOp::create(b, VectorType::get({4}, f8), bytes);
      Value ok = arith::AndIOp::create(
          b, trowInside, e.cmp(arith::CmpIPredicate::ult, tcol, e.idx(cols)));
      e.when(ok, [&] {
        vector::StoreOp::create(b, codes, transposed,
                                ValueRange{g, tcol, tcolumn}, false,
                                b.getI64IntegerAttr(4));
      });
    }
  };
  if (!op.getUnless())
    return body();
  Value flag = e.load(op.getUnless(), {e.idx(0)});
  e.when(arith::CmpFOp::create(b, arith::CmpFPredicate::OEQ, flag, e.f32(0.0)),
         body);
}

void kernels::populateQuantizePatterns(RewritePatternSet &patterns) {
  patterns.add<LowerKernel<moegpu::QuantizeOp, lowerQuantize>,
               LowerKernel<moegpu::QuantizeColumnsOp, lowerQuantizeColumns>,
               LowerKernel<moegpu::QuantizeBlocksOp, lowerQuantizeBlocks>>(
      patterns.getContext());
}
