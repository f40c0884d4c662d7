//===- Fp8.cpp - FP8 (e4m3) quantization on the host ----------------------===//
//
// Part of moe-compiler.
//
// DeepSeek-V3's fine-grained FP8 as the host computes it: e4m3 codes
// decoded to f32 with integer operations (no f8 arithmetic exists in LLVM),
// and activations quantized per row per 128 channels and dequantized back
// to f32, so that the GEMMs see exactly the values an FP8 tensor core
// multiplies. Sums are f32 throughout, which makes the host the exact
// reference of the quantization (the tensor core's own partial sums keep
// fewer bits: DeepGEMM's reason to promote them every 128 of K).
//
//===----------------------------------------------------------------------===//

#include "HostBuilders.h"

#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/TypeUtilities.h"

using namespace mlir;
using namespace mlir::moe;
using namespace mlir::moe::host;

namespace {

using Builder = host::Builder;

/// `type` with element type `element` (a vector keeps its shape).
Type withElement(Type type, Type element) {
  if (auto vector = dyn_cast<VectorType>(type))
    return VectorType::get(vector.getShape(), element);
  return element;
}

/// A constant of `type` (scalar or vector of i32 or f32), every lane
/// `value`.
Value splat(Builder &b, Type type, double value) {
  Type element = getElementTypeOrSelf(type);
  TypedAttr scalar = element.isInteger()
                         ? TypedAttr(b.getIntegerAttr(
                               element, static_cast<int64_t>(value)))
                         : TypedAttr(b.getFloatAttr(element, value));
  if (auto vector = dyn_cast<VectorType>(type))
    return arith::ConstantOp::create(b, DenseElementsAttr::get(vector, scalar));
  return arith::ConstantOp::create(b, scalar);
}

Value asInt(Builder &b, Value f32) {
  return arith::BitcastOp::create(
      b, withElement(f32.getType(), b.getI32Type()), f32);
}

Value asFloat(Builder &b, Value i32) {
  return arith::BitcastOp::create(
      b, withElement(i32.getType(), b.getF32Type()), i32);
}

/// The inverse scale 448 / a and the scale a / 448 of tiles whose largest
/// magnitudes are `amax` (scalar or vector), floored at `minAmax`.
std::pair<Value, Value> tileScales(Builder &b, Value amax, double minAmax) {
  Type type = amax.getType();
  amax = arith::MaximumFOp::create(b, amax, splat(b, type, minAmax));
  return {arith::DivFOp::create(b, splat(b, type, kFp8Max), amax),
          arith::DivFOp::create(b, amax, splat(b, type, kFp8Max))};
}

/// 2^e for an i32 exponent `e` (scalar or vector) within the normal range.
Value powerOfTwo(Builder &b, Value e) {
  Type type = e.getType();
  return asFloat(b, arith::ShLIOp::create(
                        b, arith::AddIOp::create(b, e, splat(b, type, 127)),
                        splat(b, type, 23)));
}

} // namespace

Value mlir::moe::host::decodeFp8(Builder &b, Value codes) {
  Type i32 = withElement(codes.getType(), b.getI32Type());
  Type f32 = withElement(codes.getType(), b.getF32Type());
  if (!getElementTypeOrSelf(codes.getType()).isInteger(8))
    codes = arith::BitcastOp::create(
        b, withElement(codes.getType(), b.getI8Type()), codes);
  Value u = arith::ExtUIOp::create(b, i32, codes);
  auto c = [&](int64_t v) { return splat(b, i32, static_cast<double>(v)); };
  Value sign = arith::ShLIOp::create(
      b, arith::AndIOp::create(b, u, c(0x80)), c(24));
  // Normal: exponent field e (bias 7) and mantissa m move to f32's fields,
  // the exponent rebiased by 127 - 7.
  Value magnitude = arith::AndIOp::create(b, u, c(0x7f));
  Value normal = arith::AddIOp::create(
      b, arith::ShLIOp::create(b, magnitude, c(20)), c(120 << 23));
  // Subnormal (e = 0): m * 2^-9, computed without f32 subnormals.
  Value subnormal = asInt(
      b, arith::MulFOp::create(
             b,
             arith::UIToFPOp::create(b, f32,
                                     arith::AndIOp::create(b, u, c(0x7))),
             splat(b, f32, 0x1p-9)));
  Value isSubnormal = arith::CmpIOp::create(
      b, arith::CmpIPredicate::eq, arith::AndIOp::create(b, u, c(0x78)), c(0));
  Value bits = arith::SelectOp::create(b, isSubnormal, subnormal, normal);
  return asFloat(b, arith::OrIOp::create(b, bits, sign));
}

Value mlir::moe::host::roundToFp8(Builder &b, Value value) {
  Type f32 = value.getType();
  Type i32 = withElement(f32, b.getI32Type());
  Value a = math::AbsFOp::create(b, value);
  // The binade of |v| (its unbiased exponent), no lower than e4m3's
  // lowest, whose spacing its subnormals share: 2^(e-3) apart.
  Value exponent = arith::SubIOp::create(
      b, arith::ShRUIOp::create(b, asInt(b, a), splat(b, i32, 23)),
      splat(b, i32, 127));
  exponent = arith::MaxSIOp::create(b, exponent, splat(b, i32, -6));
  Value three = splat(b, i32, 3);
  Value perStep = powerOfTwo(b, arith::SubIOp::create(b, three, exponent));
  Value step = powerOfTwo(b, arith::SubIOp::create(b, exponent, three));
  // a * 2^(3-e) is exact; round to the nearest multiple, ties to even.
  Value rounded = arith::MulFOp::create(
      b, math::RoundEvenOp::create(b, arith::MulFOp::create(b, a, perStep)),
      step);
  // Saturate at 448 (e4m3fn has no infinity); NaN stays NaN.
  rounded = arith::MinimumFOp::create(b, rounded, splat(b, f32, kFp8Max));
  return math::CopySignOp::create(b, rounded, value);
}

Value mlir::moe::host::quantizeRowsFp8(Builder &b, Value input, int64_t width,
                                       Value out, double minAmax) {
  auto inputType = cast<MemRefType>(input.getType());
  int64_t depth = inputType.getDimSize(1);
  Value rows = dim(b, input, 0);
  SmallVector<Value> sizes;
  if (inputType.isDynamicDim(0))
    sizes.push_back(rows);
  if (!out)
    out =
        alloc(b, MemRefType::get(inputType.getShape(), b.getF32Type()), sizes);
  auto vectorType = VectorType::get({width}, b.getF32Type());
  // One block of `length` channels from k0: `width` at a time, then the
  // rest one by one.
  auto quantizeBlock = [&](Builder &b, Value r, Value k0, int64_t length) {
    int64_t vectorEnd = width > 1 ? length / width * width : 0;
    Value kVectorEnd = offset(b, k0, vectorEnd), k1 = offset(b, k0, length);
    // The block's largest magnitude (NaN if it holds one).
    Value amax = f32Const(b, 0.0);
    if (vectorEnd > 0) {
      Value lanes = forLoopCarrying(
          b, k0, kVectorEnd, width, {splat(b, vectorType, 0.0)},
          [&](Builder &b, Value k, ValueRange acc) -> SmallVector<Value> {
            Value x = loadVector(b, input, {r, k}, width);
            return {arith::MaximumFOp::create(b, acc[0],
                                              math::AbsFOp::create(b, x))};
          })[0];
      amax = vector::ReductionOp::create(b, vector::CombiningKind::MAXIMUMF,
                                         lanes);
    }
    if (vectorEnd < length)
      amax = forLoopCarrying(
          b, kVectorEnd, k1, 1, {amax},
          [&](Builder &b, Value k, ValueRange acc) -> SmallVector<Value> {
            Value x =
                toF32(b, memref::LoadOp::create(b, input, ValueRange{r, k}));
            return {arith::MaximumFOp::create(b, acc[0],
                                              math::AbsFOp::create(b, x))};
          })[0];
    auto [inverse, scale] = tileScales(b, amax, minAmax);
    if (vectorEnd > 0) {
      Value inverses = vector::BroadcastOp::create(b, vectorType, inverse);
      Value scales = vector::BroadcastOp::create(b, vectorType, scale);
      forLoopCarrying(
          b, k0, kVectorEnd, width, {},
          [&](Builder &b, Value k, ValueRange) -> SmallVector<Value> {
            Value x = loadVector(b, input, {r, k}, width);
            Value q = roundToFp8(b, arith::MulFOp::create(b, x, inverses));
            vector::StoreOp::create(b, arith::MulFOp::create(b, q, scales), out,
                                    ValueRange{r, k});
            return {};
          });
    }
    if (vectorEnd < length)
      forLoop(b, kVectorEnd, k1, [&](Builder &b, Value k) {
        Value x = toF32(b, memref::LoadOp::create(b, input, ValueRange{r, k}));
        Value q = roundToFp8(b, arith::MulFOp::create(b, x, inverse));
        memref::StoreOp::create(b, arith::MulFOp::create(b, q, scale), out,
                                ValueRange{r, k});
      });
  };
  int64_t fullBlocks = depth / kFp8Block, rest = depth % kFp8Block;
  forTokenBlocks(b, rows, [&](Builder &b, Value r) {
    forLoop(b, fullBlocks, [&](Builder &b, Value block) {
      quantizeBlock(b, r,
                    arith::MulIOp::create(b, block, indexConst(b, kFp8Block)),
                    kFp8Block);
    });
    if (rest > 0)
      quantizeBlock(b, r, indexConst(b, fullBlocks * kFp8Block), rest);
  });
  return out;
}

Value mlir::moe::host::loadFp8Weight(Builder &b, Value codes, Value scales,
                                     ValueRange indices, int64_t width) {
  Type f8 = cast<MemRefType>(codes.getType()).getElementType();
  Value raw =
      width == 1
          ? Value(memref::LoadOp::create(b, codes, indices))
          : Value(vector::LoadOp::create(b, VectorType::get({width}, f8),
                                         codes, indices));
  Value values = decodeFp8(b, raw);
  // The scale of the 128 x 128 block of the last two indices: `width`
  // consecutive columns never cross a block (128 is a multiple of it).
  SmallVector<Value> blockIndices(indices);
  for (size_t d = blockIndices.size() - 2; d < blockIndices.size(); ++d)
    blockIndices[d] = arith::DivUIOp::create(b, blockIndices[d],
                                             indexConst(b, kFp8Block));
  Value scale = memref::LoadOp::create(b, scales, blockIndices);
  if (width > 1)
    scale = vector::BroadcastOp::create(b, values.getType(), scale);
  return arith::MulFOp::create(b, values, scale);
}

Value mlir::moe::host::widenRows(Builder &b, Value input, int64_t width,
                                 int64_t depthMultiple) {
  auto inputType = cast<MemRefType>(input.getType());
  if (inputType.getElementType().isF32())
    return input;
  Value rows = dim(b, input, 0), depth = dim(b, input, 1);
  if (!inputType.isDynamicDim(1))
    depthMultiple = inputType.getDimSize(1);
  SmallVector<Value> sizes;
  for (int64_t d = 0; d < 2; ++d)
    if (inputType.isDynamicDim(d))
      sizes.push_back(d == 0 ? rows : depth);
  Value out =
      alloc(b, MemRefType::get(inputType.getShape(), b.getF32Type()), sizes);
  forTokenBlocks(b, rows, [&](Builder &b, Value r) {
    forLanes(b, depth, depthMultiple, width,
             [&](Builder &b, Value k, int64_t n) {
               vector::StoreOp::create(b, loadVector(b, input, {r, k}, n), out,
                                       ValueRange{r, k});
             });
  });
  return out;
}

Value mlir::moe::host::loadWeight(Builder &b, Value weight, Value scales,
                                  ValueRange indices, int64_t width) {
  if (scales)
    return loadFp8Weight(b, weight, scales, indices, width);
  if (width == 1)
    return toF32(b, memref::LoadOp::create(b, weight, indices));
  return loadVector(b, weight, indices, width);
}

namespace {

/// The largest magnitude of `lanes` (a vector), NaN if one is NaN.
Value laneMax(Builder &b, Value lanes) {
  return vector::ReductionOp::create(b, vector::CombiningKind::MAXIMUMF, lanes);
}

/// `x` (a vector) quantized with `inverse` and dequantized with `scale`
/// (scalars, broadcast, or vectors of x's lanes).
Value fakeQuantize(Builder &b, Value x, Value inverse, Value scale) {
  auto type = cast<VectorType>(x.getType());
  auto lanes = [&](Value v) -> Value {
    return isa<VectorType>(v.getType())
               ? v
               : Value(vector::BroadcastOp::create(b, type, v));
  };
  Value q = roundToFp8(b, arith::MulFOp::create(b, x, lanes(inverse)));
  return arith::MulFOp::create(b, q, lanes(scale));
}

/// Row `segments[e]` ([E + 1] i32 offsets) as an index, at most `rows`.
Value segmentRow(Builder &b, Value segments, Value e, Value rows) {
  Value offset = memref::LoadOp::create(b, segments, ValueRange{e});
  Value row = arith::IndexCastUIOp::create(b, b.getIndexType(), offset);
  return arith::MinUIOp::create(b, row, rows);
}

/// `fn(r, c, acc)` over rows [r0, r1) and columns [c0, c1) (by
/// `columnStep`), row-major, carrying one value from `init`.
Value overRange(Builder &b, Value r0, Value r1, Value c0, Value c1,
                int64_t columnStep, Value init,
                function_ref<Value(Builder &, Value, Value, Value)> fn) {
  return forLoopCarrying(
      b, r0, r1, 1, {init},
      [&](Builder &b, Value r, ValueRange acc) -> SmallVector<Value> {
        return {forLoopCarrying(
            b, c0, c1, columnStep, {acc[0]},
            [&](Builder &b, Value c, ValueRange acc) -> SmallVector<Value> {
              return {fn(b, r, c, acc[0])};
            })[0]};
      })[0];
}

/// Lanes of a row of `depth` channels: `width` when they divide it.
int64_t lanesFor(int64_t depth, int64_t width) {
  return depth % width == 0 ? width : 1;
}

/// An f32 buffer shaped like `input` ([R, K], K static).
Value f32Like(Builder &b, Value input) {
  auto type = cast<MemRefType>(input.getType());
  SmallVector<Value> sizes;
  if (type.isDynamicDim(0))
    sizes.push_back(dim(b, input, 0));
  return alloc(b, MemRefType::get(type.getShape(), b.getF32Type()), sizes);
}

/// The e4m3 code (i8) of `value`, an f32 that roundToFp8 returned (exactly
/// an e4m3 value, or NaN).
Value encodeFp8(Builder &b, Value value) {
  Type i32 = b.getI32Type();
  auto c = [&](int64_t v) { return splat(b, i32, static_cast<double>(v)); };
  Value a = math::AbsFOp::create(b, value);
  Value bits = asInt(b, a);
  // Normal: the rebiased exponent and the top 3 bits of the mantissa.
  Value exponent = arith::SubIOp::create(
      b, arith::ShRUIOp::create(b, bits, c(23)), c(127 - 7));
  Value normal = arith::OrIOp::create(
      b, arith::ShLIOp::create(b, exponent, c(3)),
      arith::AndIOp::create(b, arith::ShRUIOp::create(b, bits, c(20)), c(7)));
  // Subnormal (below 2^-6): a multiple of 2^-9, the code its count.
  Value subnormal = arith::FPToUIOp::create(
      b, i32, arith::MulFOp::create(b, a, splat(b, b.getF32Type(), 0x1p9)));
  Value small = arith::CmpFOp::create(b, arith::CmpFPredicate::OLT, a,
                                      splat(b, b.getF32Type(), 0x1p-6));
  Value code = arith::SelectOp::create(b, small, subnormal, normal);
  Value nan = arith::CmpFOp::create(b, arith::CmpFPredicate::UNO, a, a);
  code = arith::SelectOp::create(b, nan, c(0x7f), code);
  Value sign = arith::AndIOp::create(
      b, arith::ShRUIOp::create(b, asInt(b, value), c(24)), c(0x80));
  return arith::TruncIOp::create(b, b.getI8Type(),
                                 arith::OrIOp::create(b, code, sign));
}

} // namespace

Value mlir::moe::host::quantizeTensorFp8(Builder &b, Value input,
                                         Value segments, int64_t width,
                                         Value out, double minAmax) {
  int64_t depth = cast<MemRefType>(input.getType()).getDimSize(1);
  int64_t lanes = lanesFor(depth, width);
  Value rows = dim(b, input, 0);
  if (!out)
    out = f32Like(b, input);
  auto vectorType = VectorType::get({lanes}, b.getF32Type());
  Value zero = indexConst(b, 0), end = indexConst(b, depth);
  // The rows [lo, hi) with one scale: their largest magnitude first.
  auto quantizeRange = [&](Builder &b, Value lo, Value hi) {
    auto overRows =
        [&](Builder &b, Value init,
            function_ref<Value(Builder &, Value, Value, Value)> fn) {
          return overRange(b, lo, hi, zero, end, lanes, init, fn);
        };
    Value amax = laneMax(
        b, overRows(b, splat(b, vectorType, 0.0),
                    [&](Builder &b, Value r, Value k, Value acc) -> Value {
                      Value x = loadVector(b, input, {r, k}, lanes);
                      return arith::MaximumFOp::create(
                          b, acc, math::AbsFOp::create(b, x));
                    }));
    auto [inverse, scale] = tileScales(b, amax, minAmax);
    overRows(b, i32Const(b, 0),
             [&](Builder &b, Value r, Value k, Value acc) -> Value {
               Value x = loadVector(b, input, {r, k}, lanes);
               vector::StoreOp::create(b, fakeQuantize(b, x, inverse, scale),
                                       out, ValueRange{r, k});
               return acc;
             });
  };
  if (!segments) {
    quantizeRange(b, zero, rows);
    return out;
  }
  // Per segment (one expert's rows: one GEMM's operand), in parallel; rows
  // outside every segment are zero.
  fillBuffer(b, out, f32Const(b, 0.0));
  int64_t experts = cast<MemRefType>(segments.getType()).getDimSize(0) - 1;
  parallelBlocks(b, {indexConst(b, experts)}, [&](Builder &b, ValueRange e) {
    quantizeRange(b, segmentRow(b, segments, e[0], rows),
                  segmentRow(b, segments, offset(b, e[0], 1), rows));
  });
  return out;
}

Value mlir::moe::host::quantizeColumnsFp8(Builder &b, Value input,
                                          Value segments, int64_t width,
                                          Value out, double minAmax) {
  int64_t depth = cast<MemRefType>(input.getType()).getDimSize(1);
  int64_t lanes = lanesFor(depth, width);
  int64_t experts = cast<MemRefType>(segments.getType()).getDimSize(0) - 1;
  Value rows = dim(b, input, 0);
  if (!out)
    out = f32Like(b, input);
  // Rows outside every segment (padding) are zero.
  fillBuffer(b, out, f32Const(b, 0.0));
  auto vectorType = VectorType::get({lanes}, b.getF32Type());
  // In parallel over experts and column vectors; per tile of 128 rows of
  // an expert, the columns' largest magnitudes, then their values.
  parallelBlocks(
      b, {indexConst(b, experts), indexConst(b, depth / lanes)},
      [&](Builder &b, ValueRange block) {
        Value e = block[0];
        Value k = arith::MulIOp::create(b, block[1], indexConst(b, lanes));
        Value lo = segmentRow(b, segments, e, rows),
              hi = segmentRow(b, segments, offset(b, e, 1), rows);
        forLoopCarrying(
            b, lo, hi, kFp8Block, {},
            [&](Builder &b, Value t0, ValueRange) -> SmallVector<Value> {
              Value t1 =
                  arith::MinUIOp::create(b, offset(b, t0, kFp8Block), hi);
              Value amax = forLoopCarrying(
                  b, t0, t1, 1, {splat(b, vectorType, 0.0)},
                  [&](Builder &b, Value r,
                      ValueRange acc) -> SmallVector<Value> {
                    Value x = loadVector(b, input, {r, k}, lanes);
                    return {arith::MaximumFOp::create(
                        b, acc[0], math::AbsFOp::create(b, x))};
                  })[0];
              auto [inverse, scale] = tileScales(b, amax, minAmax);
              forLoop(b, t0, t1, [&](Builder &b, Value r) {
                Value x = loadVector(b, input, {r, k}, lanes);
                vector::StoreOp::create(b, fakeQuantize(b, x, inverse, scale),
                                        out, ValueRange{r, k});
              });
              return {};
            });
      });
  return out;
}

void mlir::moe::host::quantizeWeightFp8(Builder &b, Value weight, Value codes,
                                        Value scales, bool perMatrix) {
  auto type = cast<MemRefType>(weight.getType());
  int64_t rank = type.getRank();
  int64_t rowsPer = type.getDimSize(rank - 2), cols = type.getDimSize(rank - 1);
  int64_t matrices = type.getNumElements() / (rowsPer * cols);
  // [..., N, K] as [M, N, K] (the weights are contiguous).
  auto as3d = [&](Value v, int64_t n, int64_t k) -> Value {
    auto t = cast<MemRefType>(v.getType());
    if (t.getRank() == 2)
      return memref::ExpandShapeOp::create(
          b, MemRefType::get({1, n, k}, t.getElementType()), v,
          ArrayRef<ReassociationIndices>{{0, 1}, {2}});
    ReassociationIndices lead;
    for (int64_t d = 0; d < t.getRank() - 2; ++d)
      lead.push_back(d);
    return memref::CollapseShapeOp::create(
        b, v,
        ArrayRef<ReassociationIndices>{
            lead, {t.getRank() - 2}, {t.getRank() - 1}});
  };
  Value w = as3d(weight, rowsPer, cols);
  Value c = as3d(codes, rowsPer, cols);
  Value s = as3d(scales, fp8Blocks(rowsPer), fp8Blocks(cols));
  Type f8 = cast<MemRefType>(codes.getType()).getElementType();
  // The (un)scaled codes of the block [r0, r1) x [c0, c1) of matrix m.
  auto quantizeBlock = [&](Builder &b, Value m, Value r0, Value r1, Value c0,
                           Value c1) {
    auto overBlock =
        [&](Builder &b, Value init,
            function_ref<Value(Builder &, Value, Value, Value)> fn) {
          return overRange(b, r0, r1, c0, c1, 1, init, fn);
        };
    Value amax = overBlock(
        b, f32Const(b, 0.0), [&](Builder &b, Value r, Value k, Value acc) {
          Value v = memref::LoadOp::create(b, w, ValueRange{m, r, k});
          return arith::MaximumFOp::create(b, acc, math::AbsFOp::create(b, v));
        });
    // A block of zeros gets the scale 1.
    Value zero = arith::CmpFOp::create(
        b, arith::CmpFPredicate::OLT, amax,
        f32Const(b, static_cast<double>(std::numeric_limits<float>::min())));
    Value one = f32Const(b, 1.0);
    Value inverse = arith::SelectOp::create(
        b, zero, one, arith::DivFOp::create(b, f32Const(b, kFp8Max), amax));
    Value scale = arith::SelectOp::create(
        b, zero, one, arith::DivFOp::create(b, amax, f32Const(b, kFp8Max)));
    overBlock(
        b, f32Const(b, 0.0), [&](Builder &b, Value r, Value k, Value acc) {
          Value v = memref::LoadOp::create(b, w, ValueRange{m, r, k});
          Value code =
              encodeFp8(b, roundToFp8(b, arith::MulFOp::create(b, v, inverse)));
          memref::StoreOp::create(b, arith::BitcastOp::create(b, f8, code), c,
                                  ValueRange{m, r, k});
          return acc;
        });
    return scale;
  };
  int64_t rowBlocks = fp8Blocks(rowsPer), colBlocks = fp8Blocks(cols);
  Value rowsValue = indexConst(b, rowsPer), colsValue = indexConst(b, cols);
  if (perMatrix) {
    // One scale per matrix, written into each of its blocks.
    parallelBlocks(b, {indexConst(b, matrices)}, [&](Builder &b, ValueRange m) {
      Value scale = quantizeBlock(b, m[0], indexConst(b, 0), rowsValue,
                                  indexConst(b, 0), colsValue);
      forLoop(b, rowBlocks, [&](Builder &b, Value i) {
        forLoop(b, colBlocks, [&](Builder &b, Value j) {
          memref::StoreOp::create(b, scale, s, ValueRange{m[0], i, j});
        });
      });
    });
    return;
  }
  parallelBlocks(
      b,
      {indexConst(b, matrices), indexConst(b, rowBlocks),
       indexConst(b, colBlocks)},
      [&](Builder &b, ValueRange block) {
        auto [r0, r1] = blockRange(b, block[1], kFp8Block, rowsValue);
        auto [c0, c1] = blockRange(b, block[2], kFp8Block, colsValue);
        Value scale = quantizeBlock(b, block[0], r0, r1, c0, c1);
        memref::StoreOp::create(b, scale, s,
                                ValueRange{block[0], block[1], block[2]});
      });
}
