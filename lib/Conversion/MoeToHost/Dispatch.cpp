//===- Dispatch.cpp - Dispatch and combine on the host --------------------===//
//
// Part of moe-compiler.
//
// moe.dispatch permutes tokens into expert-contiguous rows (histogram,
// scan, scatter); moe.combine sums each token's rows back with its routing
// weights; their gradients run the other way.
//
//===----------------------------------------------------------------------===//

#include "HostBuilders.h"

#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include <limits>

using namespace mlir;
using namespace mlir::moe;
using namespace mlir::moe::host;

namespace {

using Builder = host::Builder;

/// Copies row `src` of `from` to row `dst` of `to` (both [*, H] of one
/// element type), `lanes` elements at a time.
void copyRow(Builder &b, Value from, Value src, Value to, Value dst,
             int64_t hidden, int64_t lanes) {
  Type elt = cast<MemRefType>(from.getType()).getElementType();
  forLanes(b, hidden, lanes, [&](Builder &b, Value h, int64_t n) {
    Value v = vector::LoadOp::create(b, VectorType::get({n}, elt), from,
                                     ValueRange{src, h});
    vector::StoreOp::create(b, v, to, ValueRange{dst, h});
  });
}

/// Token t's k rows of a row map: whether each names a row of the buffer
/// (`rowCount` rows), and the row (0 where it does not).
std::pair<SmallVector<Value>, SmallVector<Value>>
tokenRows(Builder &b, Value rowMap, Value t, int64_t k, Value rowCount) {
  SmallVector<Value> valid, row;
  for (int64_t j = 0; j < k; ++j) {
    Value r = arith::IndexCastOp::create(
        b, b.getIndexType(),
        memref::LoadOp::create(b, rowMap, ValueRange{t, indexConst(b, j)}));
    Value ok = validRow(b, r, rowCount);
    valid.push_back(ok);
    row.push_back(arith::SelectOp::create(b, ok, r, indexConst(b, 0)));
  }
  return {valid, row};
}

SmallVector<Value> lowerDispatch(Builder &b, DispatchOp op,
                                 const VectorTarget &target) {
  auto experts = static_cast<int64_t>(op.getExperts());
  auto alignment = static_cast<int64_t>(op.getAlignment());
  auto rowsType = cast<RankedTensorType>(op.getRows().getType());
  auto mapType = cast<RankedTensorType>(op.getRowMap().getType());
  int64_t hidden = rowsType.getDimSize(1);
  int64_t k = mapType.getDimSize(1);
  Type i32 = b.getI32Type(), index = b.getIndexType();

  Value x = asBuffer(b, op.getInput());
  Value ids = asBuffer(b, op.getIndices());
  Value tokens = dim(b, ids, 0);
  Value zeroIdx = indexConst(b, 0), oneIdx = indexConst(b, 1);
  Value expertsV = indexConst(b, experts);

  // The expert of slot (t, j), or -1 when the id is out of range.
  auto expertOf = [&](Builder &b, Value t, Value j) {
    Value id = arith::IndexCastOp::create(
        b, index, memref::LoadOp::create(b, ids, ValueRange{t, j}));
    Value inRange = arith::AndIOp::create(
        b, arith::CmpIOp::create(b, arith::CmpIPredicate::sge, id, zeroIdx),
        arith::CmpIOp::create(b, arith::CmpIPredicate::slt, id, expertsV));
    return std::make_pair(id, inRange);
  };

  // Histogram.
  Value counts = memref::AllocaOp::create(b, MemRefType::get({experts}, index));
  fillBuffer(b, counts, zeroIdx);
  forLoop(b, zeroIdx, tokens, [&](Builder &b, Value t) {
    forLoop(b, k, [&](Builder &b, Value j) {
      std::pair<Value, Value> slot = expertOf(b, t, j);
      Value e = slot.first;
      scf::IfOp::create(b, slot.second, [&](OpBuilder &nested, Location loc) {
        Builder nb(loc, nested);
        Value c = memref::LoadOp::create(nb, counts, ValueRange{e});
        memref::StoreOp::create(nb, arith::AddIOp::create(nb, c, oneIdx),
                                counts, ValueRange{e});
        scf::YieldOp::create(nb);
      });
    });
  });

  // Exclusive prefix sum of the counts rounded up to the alignment; the
  // cursor starts at each segment's first row.
  Value offsets = alloc(b, MemRefType::get({experts + 1}, i32));
  Value cursor = memref::AllocaOp::create(b, MemRefType::get({experts}, index));
  Value alignMinusOne = indexConst(b, alignment - 1);
  Value alignMask = indexConst(b, ~(alignment - 1));
  Value used = forLoopCarrying(
      b, zeroIdx, expertsV, ValueRange{zeroIdx},
      [&](Builder &b, Value e, ValueRange carried) -> SmallVector<Value> {
        Value start = carried[0];
        memref::StoreOp::create(b, arith::IndexCastOp::create(b, i32, start),
                                offsets, ValueRange{e});
        memref::StoreOp::create(b, start, cursor, ValueRange{e});
        Value c = memref::LoadOp::create(b, counts, ValueRange{e});
        Value padded = arith::AndIOp::create(
            b, arith::AddIOp::create(b, c, alignMinusOne), alignMask);
        return {arith::AddIOp::create(b, start, padded)};
      })[0];
  memref::StoreOp::create(b, arith::IndexCastOp::create(b, i32, used), offsets,
                          ValueRange{expertsV});

  // The buffer: exactly the used rows when the type is dynamic, the static
  // bound otherwise; padding rows are zero (without padding every row is
  // copied below).
  auto rowsMemref =
      MemRefType::get(rowsType.getShape(), rowsType.getElementType());
  SmallVector<Value> rowSizes;
  if (rowsType.isDynamicDim(0))
    rowSizes.push_back(used);
  Value rows = alloc(b, rowsMemref, rowSizes);
  if (alignment > 1 || !rowsType.isDynamicDim(0)) {
    Value zero = arith::ConstantOp::create(
        b, b.getFloatAttr(rowsType.getElementType(), 0.0));
    fillBuffer(b, rows, zero);
  }

  Value rowMap = alloc(b, MemRefType::get(mapType.getShape(), i32),
                       dynamicSizes(b, mapType, ids));
  Value minusOne = i32Const(b, -1);
  forLoop(b, zeroIdx, tokens, [&](Builder &b, Value t) {
    forLoop(b, k, [&](Builder &b, Value j) {
      std::pair<Value, Value> slot = expertOf(b, t, j);
      Value e = slot.first;
      auto ifOp = scf::IfOp::create(
          b, slot.second,
          [&](OpBuilder &nested, Location loc) {
            Builder nb(loc, nested);
            Value r = memref::LoadOp::create(nb, cursor, ValueRange{e});
            memref::StoreOp::create(nb, arith::AddIOp::create(nb, r, oneIdx),
                                    cursor, ValueRange{e});
            scf::YieldOp::create(
                nb, ValueRange{arith::IndexCastOp::create(nb, i32, r)});
          },
          [&](OpBuilder &nested, Location loc) {
            Builder nb(loc, nested);
            scf::YieldOp::create(nb, ValueRange{minusOne});
          });
      memref::StoreOp::create(b, ifOp.getResult(0), rowMap, ValueRange{t, j});
    });
  });
  // The copies, in parallel: each slot has a row of its own. With scales,
  // x[t] * scale: the scale rounded to the element type first (Llama 4
  // multiplies two tensors of it), the product in f32, rounded.
  Value scales = op.getScales() ? asBuffer(b, op.getScales()) : Value();
  Type elt = rowsType.getElementType();
  forTokenBlocks(b, tokens, [&](Builder &b, Value t) {
    forLoop(b, k, [&](Builder &b, Value j) {
      Value r = memref::LoadOp::create(b, rowMap, ValueRange{t, j});
      Value placed = arith::CmpIOp::create(b, arith::CmpIPredicate::sge, r,
                                           i32Const(b, 0));
      scf::IfOp::create(b, placed, [&](OpBuilder &nested, Location loc) {
        Builder nb(loc, nested);
        Value dst = arith::IndexCastOp::create(nb, index, r);
        if (!scales) {
          copyRow(nb, x, t, rows, dst, hidden, target.width);
        } else {
          Value s = toF32(
              nb,
              fromF32(nb, memref::LoadOp::create(nb, scales, ValueRange{t, j}),
                      elt));
          forLanes(nb, hidden, target.width,
                   [&](Builder &b, Value h, int64_t n) {
                     Value v = loadVector(b, x, {t, h}, n);
                     Value scale = vector::BroadcastOp::create(
                         b, VectorType::get({n}, b.getF32Type()), s);
                     storeVector(b, arith::MulFOp::create(b, v, scale), rows,
                                 {dst, h});
                   });
        }
        scf::YieldOp::create(nb);
      });
    });
  });
  return {asTensor(b, rows), asTensor(b, offsets), asTensor(b, rowMap)};
}

Value lowerCombine(Builder &b, CombineOp op, const VectorTarget &target) {
  auto outType = cast<RankedTensorType>(op.getOutput().getType());
  auto mapType = cast<RankedTensorType>(op.getRowMap().getType());
  int64_t hidden = outType.getDimSize(1), k = mapType.getDimSize(1);
  Type elt = outType.getElementType();
  Value rows = asBuffer(b, op.getRows());
  Value rowMap = asBuffer(b, op.getRowMap());
  Value weights = op.getWeights() ? asBuffer(b, op.getWeights()) : Value();
  Value tokens = dim(b, rowMap, 0);
  Value rowCount = dim(b, rows, 0);

  Value out = alloc(b, MemRefType::get(outType.getShape(), elt),
                    dynamicSizes(b, outType, rowMap));
  // Per token: its k rows (a row map entry outside the buffer contributes
  // nothing), then each output element as the sum over the k rows in
  // order, in f32. Tokens in parallel blocks; no scratch memory.
  Value zeroF = f32Const(b, 0.0);
  forTokenBlocks(b, tokens, [&](Builder &b, Value t) {
    auto slots = tokenRows(b, rowMap, t, k, rowCount);
    SmallVector<Value> &valid = slots.first, &row = slots.second;
    SmallVector<Value> weight;
    for (int64_t j = 0; weights && j < k; ++j)
      weight.push_back(
          memref::LoadOp::create(b, weights, ValueRange{t, indexConst(b, j)}));
    forLanes(b, hidden, target.width, [&](Builder &b, Value h, int64_t n) {
      auto lanes = VectorType::get({n}, b.getF32Type());
      Value acc = vector::BroadcastOp::create(b, lanes, zeroF);
      for (int64_t j = 0; j < k; ++j) {
        Value v = loadVector(b, rows, {row[j], h}, n);
        Value term =
            weights
                ? Value(arith::MulFOp::create(
                      b, vector::BroadcastOp::create(b, lanes, weight[j]), v))
                : v;
        acc = arith::SelectOp::create(b, valid[j],
                                      arith::AddFOp::create(b, acc, term), acc);
      }
      storeVector(b, acc, out, {t, h});
    });
  });
  return asTensor(b, out);
}

/// rows_grad and weights_grad of moe.combine.
std::pair<Value, Value> lowerCombineGrad(Builder &b, CombineGradOp op) {
  auto rowsType = cast<RankedTensorType>(op.getRowsGrad().getType());
  auto wType = cast<RankedTensorType>(op.getWeightsGrad().getType());
  int64_t hidden = rowsType.getDimSize(1), k = wType.getDimSize(1);
  Type elt = rowsType.getElementType();
  Value grad = asBuffer(b, op.getGrad());
  Value rows = asBuffer(b, op.getRows());
  Value rowMap = asBuffer(b, op.getRowMap());
  Value weights = asBuffer(b, op.getWeights());
  Value tokens = dim(b, rowMap, 0), rowCount = dim(b, rows, 0);
  Value rowsGrad = alloc(b, MemRefType::get(rowsType.getShape(), elt),
                         dynamicSizes(b, rowsType, rows));
  fillBuffer(b, rowsGrad,
             arith::ConstantOp::create(b, b.getFloatAttr(elt, 0.0)));
  Value weightsGrad =
      alloc(b, MemRefType::get(wType.getShape(), b.getF32Type()),
            dynamicSizes(b, wType, rowMap));
  // Tokens in parallel blocks: each (token, j) owns its row of rows_grad.
  forTokenBlocks(b, tokens, [&](Builder &b, Value t) {
    forLoop(b, k, [&](Builder &b, Value j) {
      Value r = arith::IndexCastOp::create(
          b, b.getIndexType(),
          memref::LoadOp::create(b, rowMap, ValueRange{t, j}));
      Value w = memref::LoadOp::create(b, weights, ValueRange{t, j});
      auto ifOp = scf::IfOp::create(
          b, validRow(b, r, rowCount),
          [&](OpBuilder &nested, Location loc) {
            Builder nb(loc, nested);
            Value dot = forLoopCarrying(
                nb, indexConst(nb, 0), indexConst(nb, hidden),
                ValueRange{f32Const(nb, 0.0)},
                [&](Builder &b, Value h,
                    ValueRange carried) -> SmallVector<Value> {
                  Value g = toF32(
                      b, memref::LoadOp::create(b, grad, ValueRange{t, h}));
                  Value v = toF32(
                      b, memref::LoadOp::create(b, rows, ValueRange{r, h}));
                  memref::StoreOp::create(
                      b, fromF32(b, arith::MulFOp::create(b, w, g), elt),
                      rowsGrad, ValueRange{r, h});
                  return {arith::AddFOp::create(b, carried[0],
                                                arith::MulFOp::create(b, g, v),
                                                reductionFlags(b))};
                })[0];
            scf::YieldOp::create(nb, ValueRange{dot});
          },
          [&](OpBuilder &nested, Location loc) {
            Builder nb(loc, nested);
            scf::YieldOp::create(nb, ValueRange{f32Const(nb, 0.0)});
          });
      memref::StoreOp::create(b, ifOp.getResult(0), weightsGrad,
                              ValueRange{t, j});
    });
  });
  return {asTensor(b, rowsGrad), asTensor(b, weightsGrad)};
}

/// input_grad[t] = sum_j rows_grad[row_map[t, j]].
Value lowerDispatchGrad(Builder &b, DispatchGradOp op) {
  auto outType = cast<RankedTensorType>(op.getInputGrad().getType());
  auto mapType = cast<RankedTensorType>(op.getRowMap().getType());
  int64_t hidden = outType.getDimSize(1), k = mapType.getDimSize(1);
  Type elt = outType.getElementType();
  Value rowsGrad = asBuffer(b, op.getRowsGrad());
  Value rowMap = asBuffer(b, op.getRowMap());
  Value tokens = dim(b, rowMap, 0), rowCount = dim(b, rowsGrad, 0);
  Value out = alloc(b, MemRefType::get(outType.getShape(), elt),
                    dynamicSizes(b, outType, rowMap));
  forTokenBlocks(b, tokens, [&](Builder &b, Value t) {
    forLoop(b, hidden, [&](Builder &b, Value h) {
      Value acc = forLoopCarrying(
          b, indexConst(b, 0), indexConst(b, k), ValueRange{f32Const(b, 0.0)},
          [&](Builder &b, Value j, ValueRange carried) -> SmallVector<Value> {
            Value r = arith::IndexCastOp::create(
                b, b.getIndexType(),
                memref::LoadOp::create(b, rowMap, ValueRange{t, j}));
            auto ifOp = scf::IfOp::create(
                b, validRow(b, r, rowCount),
                [&](OpBuilder &nested, Location loc) {
                  Builder nb(loc, nested);
                  Value v = toF32(nb, memref::LoadOp::create(nb, rowsGrad,
                                                             ValueRange{r, h}));
                  scf::YieldOp::create(
                      nb, ValueRange{arith::AddFOp::create(nb, carried[0], v)});
                },
                [&](OpBuilder &nested, Location loc) {
                  Builder nb(loc, nested);
                  scf::YieldOp::create(nb, ValueRange{carried[0]});
                });
            return {ifOp.getResult(0)};
          })[0];
      memref::StoreOp::create(b, fromF32(b, acc, elt), out, ValueRange{t, h});
    });
  });
  return asTensor(b, out);
}

/// Llama 4's dispatch backward: per token, the k rows' gradients weighted
/// by the (rounded) scales, and each scale's gradient, the dot product of
/// its row's gradient with the token.
SmallVector<Value> lowerScaledDispatchGrad(Builder &b,
                                           ScaledDispatchGradOp op) {
  auto outType = cast<RankedTensorType>(op.getInputGrad().getType());
  auto mapType = cast<RankedTensorType>(op.getRowMap().getType());
  int64_t hidden = outType.getDimSize(1), k = mapType.getDimSize(1);
  Type elt = outType.getElementType();
  Type inputElt =
      cast<RankedTensorType>(op.getInput().getType()).getElementType();
  Value rowsGrad = asBuffer(b, op.getRowsGrad());
  Value rowMap = asBuffer(b, op.getRowMap());
  Value input = asBuffer(b, op.getInput());
  Value scales = asBuffer(b, op.getScales());
  Value tokens = dim(b, rowMap, 0), rowCount = dim(b, rowsGrad, 0);
  Value out = alloc(b, MemRefType::get(outType.getShape(), elt),
                    dynamicSizes(b, outType, rowMap));
  Value scalesGrad =
      alloc(b, MemRefType::get(mapType.getShape(), b.getF32Type()),
            dynamicSizes(b, mapType, rowMap));
  forTokenBlocks(b, tokens, [&](Builder &b, Value t) {
    auto slots = tokenRows(b, rowMap, t, k, rowCount);
    SmallVector<Value> &valid = slots.first, &row = slots.second;
    SmallVector<Value> scale;
    for (int64_t j = 0; j < k; ++j) {
      Value jv = indexConst(b, j);
      Value s = toF32(
          b, fromF32(b, memref::LoadOp::create(b, scales, ValueRange{t, jv}),
                     inputElt));
      scale.push_back(
          arith::SelectOp::create(b, valid[j], s, f32Const(b, 0.0)));
    }
    SmallVector<Value> dots(k, f32Const(b, 0.0));
    ValueRange sums = forLoopCarrying(
        b, indexConst(b, 0), indexConst(b, hidden), dots,
        [&](Builder &b, Value h, ValueRange carried) -> SmallVector<Value> {
          Value x =
              toF32(b, memref::LoadOp::create(b, input, ValueRange{t, h}));
          Value acc = f32Const(b, 0.0);
          SmallVector<Value> next;
          for (int64_t j = 0; j < k; ++j) {
            Value g = toF32(
                b, memref::LoadOp::create(b, rowsGrad, ValueRange{row[j], h}));
            g = arith::SelectOp::create(b, valid[j], g, f32Const(b, 0.0));
            acc = arith::AddFOp::create(b, acc,
                                        arith::MulFOp::create(b, scale[j], g));
            next.push_back(arith::AddFOp::create(
                b, carried[j], arith::MulFOp::create(b, g, x)));
          }
          memref::StoreOp::create(b, fromF32(b, acc, elt), out,
                                  ValueRange{t, h});
          return next;
        });
    for (int64_t j = 0; j < k; ++j)
      memref::StoreOp::create(b, sums[j], scalesGrad,
                              ValueRange{t, indexConst(b, j)});
  });
  return {asTensor(b, out), asTensor(b, scalesGrad)};
}

} // namespace

void mlir::moe::host::populateDispatchPatterns(RewritePatternSet &patterns,
                                               const VectorTarget &target) {
  addLowering<DispatchOp>(patterns, [target](Builder &b, DispatchOp op) {
    return lowerDispatch(b, op, target);
  });
  addLowering<CombineOp>(patterns, [target](Builder &b, CombineOp op) {
    return lowerCombine(b, op, target);
  });
  addLowering<CombineGradOp>(patterns, lowerCombineGrad);
  addLowering<DispatchGradOp>(patterns, lowerDispatchGrad);
  addLowering<ScaledDispatchGradOp>(patterns, lowerScaledDispatchGrad);
}
