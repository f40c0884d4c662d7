//===- MoeToHost.cpp - moe primitives to upstream dialects for the host ---===//
//
// Part of moe-compiler.
//
// Structured ops (router, SwiGLU, shared expert) become linalg.generic on
// tensors; routing-dependent ops (top-k, dispatch, grouped matmul, combine)
// become scf loops over buffers. Every accumulation is in f32.
//
//===----------------------------------------------------------------------===//

#include "moe/Conversion/Passes.h"
#include "moe/MoeOps.h"
#include "moe/runtime/CommAbi.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"

#include <limits>

namespace mlir::moe {
#define GEN_PASS_DEF_CONVERTMOETOHOST
#include "moe/Conversion/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

namespace {

using Builder = ImplicitLocOpBuilder;
using BodyFn = function_ref<void(Builder &, Value)>;

//===----------------------------------------------------------------------===//
// Small builders
//===----------------------------------------------------------------------===//

Value indexConst(Builder &b, int64_t value) {
  return arith::ConstantIndexOp::create(b, value);
}

Value f32Const(Builder &b, double value) {
  return arith::ConstantOp::create(b, b.getF32FloatAttr(value));
}

Value i32Const(Builder &b, int64_t value) {
  return arith::ConstantOp::create(b, b.getI32IntegerAttr(value));
}

/// Converts a float scalar to f32 (identity for f32).
Value toF32(Builder &b, Value value) {
  if (value.getType().isF32())
    return value;
  return arith::ExtFOp::create(b, b.getF32Type(), value);
}

/// Converts an f32 scalar to `type` (identity for f32).
Value fromF32(Builder &b, Value value, Type type) {
  if (type.isF32())
    return value;
  return arith::TruncFOp::create(b, type, value);
}

Value dim(Builder &b, Value shaped, int64_t index) {
  if (isa<RankedTensorType>(shaped.getType()))
    return tensor::DimOp::create(b, shaped, index);
  return memref::DimOp::create(b, shaped, index);
}

/// Dynamic sizes of `type` taken from `source`, a value of the same shape.
SmallVector<Value> dynamicSizes(Builder &b, ShapedType type, Value source) {
  SmallVector<Value> sizes;
  for (int64_t i = 0; i < type.getRank(); ++i)
    if (type.isDynamicDim(i))
      sizes.push_back(dim(b, source, i));
  return sizes;
}

/// `for (iv = lb; iv < ub; ++iv) body(iv)`.
void forLoop(Builder &b, Value lb, Value ub, BodyFn body) {
  Value one = indexConst(b, 1);
  scf::ForOp::create(
      b, lb, ub, one, ValueRange{},
      [&](OpBuilder &nested, Location loc, Value iv, ValueRange) {
        Builder nb(loc, nested);
        body(nb, iv);
        scf::YieldOp::create(nb);
      });
}

void forLoop(Builder &b, int64_t ub, BodyFn body) {
  forLoop(b, indexConst(b, 0), indexConst(b, ub), body);
}

/// A loop carrying values: `init` in, the body's yielded values out.
ValueRange forLoopCarrying(
    Builder &b, Value lb, Value ub, ValueRange init,
    function_ref<SmallVector<Value>(Builder &, Value, ValueRange)> body) {
  Value one = indexConst(b, 1);
  auto loop = scf::ForOp::create(
      b, lb, ub, one, init,
      [&](OpBuilder &nested, Location loc, Value iv, ValueRange carried) {
        Builder nb(loc, nested);
        scf::YieldOp::create(nb, body(nb, iv, carried));
      });
  return loop.getResults();
}

/// Flags for dot-product reductions: the sum may be reassociated (and
/// multiply-adds fused), which lets LLVM vectorize it. The result differs
/// from a sequential sum only by rounding.
arith::FastMathFlagsAttr reductionFlags(Builder &b) {
  return arith::FastMathFlagsAttr::get(b.getContext(),
                                       arith::FastMathFlags::reassoc |
                                           arith::FastMathFlags::contract);
}

Value sigmoid(Builder &b, Value x) {
  Value one = f32Const(b, 1.0);
  Value e = math::ExpOp::create(b, arith::NegFOp::create(b, x));
  return arith::DivFOp::create(b, one, arith::AddFOp::create(b, one, e));
}

/// A fresh buffer of `type` with its dynamic sizes taken from `sizes`.
Value alloc(Builder &b, MemRefType type, ValueRange sizes = {}) {
  return memref::AllocOp::create(b, type, sizes);
}

Value asBuffer(Builder &b, Value tensor) {
  auto type = cast<RankedTensorType>(tensor.getType());
  auto memrefType = MemRefType::get(type.getShape(), type.getElementType());
  return bufferization::ToBufferOp::create(b, memrefType, tensor,
                                           /*read_only=*/true);
}

/// Hands a buffer written by the lowering back to tensor land, as a tensor
/// of the buffer's shape (the caller casts to a more static result type).
Value asTensor(Builder &b, Value buffer) {
  auto type = cast<MemRefType>(buffer.getType());
  auto tensorType =
      RankedTensorType::get(type.getShape(), type.getElementType());
  return bufferization::ToTensorOp::create(b, tensorType, buffer,
                                           /*restrict=*/true,
                                           /*writable=*/true);
}

void fillBuffer(Builder &b, Value buffer, Value value) {
  linalg::FillOp::create(b, ValueRange{value}, ValueRange{buffer});
}

//===----------------------------------------------------------------------===//
// Structured pieces on tensors
//===----------------------------------------------------------------------===//

/// `out[m, n] = sum_k lhs[m, k] * rhs[n, k]` in f32, as a tensor<MxNxf32>.
Value matmulTransposeB(Builder &b, Value lhs, Value rhs) {
  auto lhsType = cast<RankedTensorType>(lhs.getType());
  auto rhsType = cast<RankedTensorType>(rhs.getType());
  auto resultType = RankedTensorType::get(
      {lhsType.getDimSize(0), rhsType.getDimSize(0)}, b.getF32Type());
  SmallVector<Value> sizes;
  if (resultType.isDynamicDim(0))
    sizes.push_back(dim(b, lhs, 0));
  if (resultType.isDynamicDim(1))
    sizes.push_back(dim(b, rhs, 0));
  Value empty = tensor::EmptyOp::create(b, resultType, sizes);
  Value zero =
      linalg::FillOp::create(b, ValueRange{f32Const(b, 0.0)}, ValueRange{empty})
          .getResult(0);
  MLIRContext *ctx = b.getContext();
  AffineExpr m, n, k;
  bindDims(ctx, m, n, k);
  SmallVector<AffineMap> maps = {AffineMap::get(3, 0, {m, k}, ctx),
                                 AffineMap::get(3, 0, {n, k}, ctx),
                                 AffineMap::get(3, 0, {m, n}, ctx)};
  SmallVector<utils::IteratorType> iterators = {utils::IteratorType::parallel,
                                                utils::IteratorType::parallel,
                                                utils::IteratorType::reduction};
  return linalg::GenericOp::create(
             b, TypeRange{resultType}, ValueRange{lhs, rhs}, ValueRange{zero},
             maps, iterators,
             [&](OpBuilder &nested, Location loc, ValueRange args) {
               Builder nb(loc, nested);
               Value prod = arith::MulFOp::create(nb, toF32(nb, args[0]),
                                                  toF32(nb, args[1]),
                                                  reductionFlags(nb));
               linalg::YieldOp::create(
                   nb, ValueRange{arith::AddFOp::create(nb, args[2], prod,
                                                        reductionFlags(nb))});
             })
      .getResult(0);
}

/// Applies `fn` elementwise to same-shaped 2-D tensors `inputs` (any float
/// types, passed to `fn` as f32) and returns a tensor of `elementType`.
Value elementwise(Builder &b, ValueRange inputs, Type elementType,
                  function_ref<Value(Builder &, ValueRange)> fn) {
  auto type = cast<RankedTensorType>(inputs.front().getType());
  auto resultType = RankedTensorType::get(type.getShape(), elementType);
  Value empty = tensor::EmptyOp::create(
      b, resultType, dynamicSizes(b, resultType, inputs.front()));
  MLIRContext *ctx = b.getContext();
  SmallVector<AffineMap> maps(inputs.size() + 1,
                              AffineMap::getMultiDimIdentityMap(2, ctx));
  SmallVector<utils::IteratorType> iterators(2, utils::IteratorType::parallel);
  return linalg::GenericOp::create(
             b, TypeRange{resultType}, inputs, ValueRange{empty}, maps,
             iterators,
             [&](OpBuilder &nested, Location loc, ValueRange args) {
               Builder nb(loc, nested);
               SmallVector<Value> f32Args;
               for (Value arg : args.drop_back())
                 f32Args.push_back(toF32(nb, arg));
               linalg::YieldOp::create(
                   nb, ValueRange{fromF32(nb, fn(nb, f32Args), elementType)});
             })
      .getResult(0);
}

/// Reduces each row of a [T, E] f32 tensor with `combine`, starting from
/// `init`; returns a [T] f32 tensor.
Value reduceRows(Builder &b, Value input, double init,
                 function_ref<Value(Builder &, Value, Value)> combine) {
  auto type = cast<RankedTensorType>(input.getType());
  auto resultType = RankedTensorType::get({type.getDimSize(0)}, b.getF32Type());
  Value empty = tensor::EmptyOp::create(b, resultType,
                                        dynamicSizes(b, resultType, input));
  Value filled = linalg::FillOp::create(b, ValueRange{f32Const(b, init)},
                                        ValueRange{empty})
                     .getResult(0);
  MLIRContext *ctx = b.getContext();
  AffineExpr t, e;
  bindDims(ctx, t, e);
  SmallVector<AffineMap> maps = {AffineMap::get(2, 0, {t, e}, ctx),
                                 AffineMap::get(2, 0, {t}, ctx)};
  SmallVector<utils::IteratorType> iterators = {utils::IteratorType::parallel,
                                                utils::IteratorType::reduction};
  return linalg::GenericOp::create(
             b, TypeRange{resultType}, ValueRange{input}, ValueRange{filled},
             maps, iterators,
             [&](OpBuilder &nested, Location loc, ValueRange args) {
               Builder nb(loc, nested);
               linalg::YieldOp::create(
                   nb, ValueRange{combine(nb, args[1], args[0])});
             })
      .getResult(0);
}

/// `out[t, e] = fn(input[t, e], rowValue[t])` for a [T, E] f32 tensor and a
/// [T] f32 tensor.
Value withRowValue(Builder &b, Value input, Value rowValue,
                   function_ref<Value(Builder &, Value, Value)> fn) {
  auto type = cast<RankedTensorType>(input.getType());
  Value empty = tensor::EmptyOp::create(b, type, dynamicSizes(b, type, input));
  MLIRContext *ctx = b.getContext();
  AffineExpr t, e;
  bindDims(ctx, t, e);
  SmallVector<AffineMap> maps = {AffineMap::get(2, 0, {t, e}, ctx),
                                 AffineMap::get(2, 0, {t}, ctx),
                                 AffineMap::get(2, 0, {t, e}, ctx)};
  SmallVector<utils::IteratorType> iterators(2, utils::IteratorType::parallel);
  return linalg::GenericOp::create(
             b, TypeRange{type}, ValueRange{input, rowValue}, ValueRange{empty},
             maps, iterators,
             [&](OpBuilder &nested, Location loc, ValueRange args) {
               Builder nb(loc, nested);
               linalg::YieldOp::create(nb,
                                       ValueRange{fn(nb, args[0], args[1])});
             })
      .getResult(0);
}

//===----------------------------------------------------------------------===//
// Op lowerings
//===----------------------------------------------------------------------===//

Value lowerRouter(Builder &b, RouterOp op) {
  Value logits = matmulTransposeB(b, op.getInput(), op.getWeight());
  if (op.getScoring() == ScoringFunc::Sigmoid)
    return elementwise(
        b, logits, b.getF32Type(),
        [](Builder &nb, ValueRange v) { return sigmoid(nb, v[0]); });
  // Numerically stable softmax over the experts of each token.
  Value max = reduceRows(b, logits, -std::numeric_limits<double>::infinity(),
                         [](Builder &nb, Value acc, Value v) -> Value {
                           return arith::MaximumFOp::create(nb, acc, v);
                         });
  Value exps = withRowValue(b, logits, max, [](Builder &nb, Value v, Value m) {
    return math::ExpOp::create(nb, arith::SubFOp::create(nb, v, m));
  });
  Value sum = reduceRows(b, exps, 0.0, [](Builder &nb, Value acc, Value v) {
    return arith::AddFOp::create(nb, acc, v);
  });
  return withRowValue(b, exps, sum, [](Builder &nb, Value v, Value s) {
    return arith::DivFOp::create(nb, v, s);
  });
}

Value silu(Builder &b, Value x) {
  return arith::MulFOp::create(b, x, sigmoid(b, x));
}

Value lowerSwiGLU(Builder &b, SwiGLUOp op) {
  Type elt = op.getType().getElementType();
  return elementwise(b, ValueRange{op.getGate(), op.getUp()}, elt,
                     [](Builder &nb, ValueRange v) {
                       return arith::MulFOp::create(nb, silu(nb, v[0]), v[1]);
                     });
}

/// Rounds an f32 tensor to `elt` (identity for f32): projections produce
/// the layer's element type, as a framework's Linear does.
Value roundTo(Builder &b, Value f32Tensor, Type elt) {
  if (elt.isF32())
    return f32Tensor;
  return elementwise(b, f32Tensor, elt,
                     [](Builder &, ValueRange v) { return v[0]; });
}

Value lowerSharedExpert(Builder &b, SharedExpertOp op) {
  Type elt = op.getType().getElementType();
  Value x = op.getInput();
  Value gate = roundTo(b, matmulTransposeB(b, x, op.getGateWeight()), elt);
  Value up = roundTo(b, matmulTransposeB(b, x, op.getUpWeight()), elt);
  Value act =
      elementwise(b, ValueRange{gate, up}, elt, [](Builder &nb, ValueRange v) {
        return arith::MulFOp::create(nb, silu(nb, v[0]), v[1]);
      });
  Value down = matmulTransposeB(b, act, op.getDownWeight());
  if (!op.getExpertGate())
    return roundTo(b, down, elt);
  // Qwen2-MoE: the shared output times sigmoid(x * g^T), per token.
  Value gateLogit = matmulTransposeB(b, x, op.getExpertGate()); // [T, 1]
  auto gateType = cast<RankedTensorType>(gateLogit.getType());
  auto rowType =
      RankedTensorType::get({gateType.getDimSize(0)}, b.getF32Type());
  SmallVector<ReassociationIndices> collapse = {{0, 1}};
  Value gateRow =
      tensor::CollapseShapeOp::create(b, rowType, gateLogit, collapse);
  Value gated =
      withRowValue(b, down, gateRow, [](Builder &nb, Value v, Value g) {
        return arith::MulFOp::create(nb, v, sigmoid(nb, g));
      });
  return roundTo(b, gated, elt);
}

/// Index of the best allowed, not yet chosen entry of `values[0, n)`: the
/// first maximum (ties go to the lower index), NaN read as -inf, so a NaN
/// score never repeats a choice or beats a number. `allowed(i)` and
/// `chosen` (an i1 buffer) filter candidates.
Value argmaxUnchosen(Builder &b, Value values, Value chosen, int64_t n,
                     function_ref<Value(Builder &, Value)> allowed) {
  Value negInf = f32Const(b, -std::numeric_limits<double>::infinity());
  Value none = indexConst(b, -1);
  ValueRange result = forLoopCarrying(
      b, indexConst(b, 0), indexConst(b, n), ValueRange{negInf, none},
      [&](Builder &nb, Value i, ValueRange carried) -> SmallVector<Value> {
        Value best = carried[0], bestIndex = carried[1];
        Value raw = memref::LoadOp::create(nb, values, ValueRange{i});
        Value isNan =
            arith::CmpFOp::create(nb, arith::CmpFPredicate::UNO, raw, raw);
        Value v = arith::SelectOp::create(nb, isNan, negInf, raw);
        Value isChosen = memref::LoadOp::create(nb, chosen, ValueRange{i});
        Value free = arith::XOrIOp::create(
            nb, isChosen, arith::ConstantOp::create(nb, nb.getBoolAttr(true)));
        Value noneYet = arith::CmpIOp::create(nb, arith::CmpIPredicate::slt,
                                              bestIndex, indexConst(nb, 0));
        Value better =
            arith::CmpFOp::create(nb, arith::CmpFPredicate::OGT, v, best);
        Value take = arith::AndIOp::create(
            nb, arith::AndIOp::create(nb, free, allowed(nb, i)),
            arith::OrIOp::create(nb, noneYet, better));
        return {arith::SelectOp::create(nb, take, v, best),
                arith::SelectOp::create(nb, take, i, bestIndex)};
      });
  return result[1];
}

std::pair<Value, Value> lowerTopK(Builder &b, TopKOp op) {
  auto scoresType = cast<RankedTensorType>(op.getScores().getType());
  int64_t experts = scoresType.getDimSize(1);
  auto k = static_cast<int64_t>(op.getK());
  auto groups = static_cast<int64_t>(op.getGroups());
  auto keptGroups = static_cast<int64_t>(op.getTopkGroups());
  int64_t perGroup = experts / groups;
  bool sumTop2 = op.getGroupScore() == GroupScore::SumTop2;

  Value scores = asBuffer(b, op.getScores());
  Value bias = op.getBias() ? asBuffer(b, op.getBias()) : Value();
  Value tokens = dim(b, scores, 0);

  Value ids = alloc(
      b, MemRefType::get({ShapedType::kDynamic, k}, b.getI32Type()), tokens);
  Value weights = alloc(
      b, MemRefType::get({ShapedType::kDynamic, k}, b.getF32Type()), tokens);

  // Per-token scratch, reused across tokens.
  Type f32 = b.getF32Type(), i1 = b.getI1Type();
  Value select = memref::AllocaOp::create(b, MemRefType::get({experts}, f32));
  Value chosen = memref::AllocaOp::create(b, MemRefType::get({experts}, i1));
  Value groupScore =
      memref::AllocaOp::create(b, MemRefType::get({groups}, f32));
  Value groupKept = memref::AllocaOp::create(b, MemRefType::get({groups}, i1));
  Value falseV = arith::ConstantOp::create(b, b.getBoolAttr(false));
  Value trueV = arith::ConstantOp::create(b, b.getBoolAttr(true));
  Value perGroupV = indexConst(b, perGroup);

  forLoop(b, indexConst(b, 0), tokens, [&](Builder &b, Value t) {
    // Selection scores: biased when there is a bias.
    forLoop(b, experts, [&](Builder &b, Value e) {
      Value s = memref::LoadOp::create(b, scores, ValueRange{t, e});
      if (bias)
        s = arith::AddFOp::create(
            b, s, memref::LoadOp::create(b, bias, ValueRange{e}));
      memref::StoreOp::create(b, s, select, ValueRange{e});
      memref::StoreOp::create(b, falseV, chosen, ValueRange{e});
    });

    // Group-limited routing: keep the best groups.
    if (groups > 1) {
      forLoop(b, groups, [&](Builder &b, Value g) {
        Value negInf = f32Const(b, -std::numeric_limits<double>::infinity());
        Value base = arith::MulIOp::create(b, g, perGroupV);
        ValueRange best = forLoopCarrying(
            b, indexConst(b, 0), perGroupV, ValueRange{negInf, negInf},
            [&](Builder &b, Value j, ValueRange top) -> SmallVector<Value> {
              Value v = memref::LoadOp::create(
                  b, select, ValueRange{arith::AddIOp::create(b, base, j)});
              Value isFirst = arith::CmpFOp::create(
                  b, arith::CmpFPredicate::OGT, v, top[0]);
              Value isSecond = arith::CmpFOp::create(
                  b, arith::CmpFPredicate::OGT, v, top[1]);
              Value first = arith::SelectOp::create(b, isFirst, v, top[0]);
              Value second = arith::SelectOp::create(
                  b, isFirst, top[0],
                  arith::SelectOp::create(b, isSecond, v, top[1]));
              return {first, second};
            });
        Value score = sumTop2
                          ? Value(arith::AddFOp::create(b, best[0], best[1]))
                          : best[0];
        memref::StoreOp::create(b, score, groupScore, ValueRange{g});
        memref::StoreOp::create(b, falseV, groupKept, ValueRange{g});
      });
      forLoop(b, keptGroups, [&](Builder &b, Value) {
        Value g = argmaxUnchosen(
            b, groupScore, groupKept, groups, [&](Builder &b, Value) {
              return arith::ConstantOp::create(b, b.getBoolAttr(true));
            });
        memref::StoreOp::create(b, trueV, groupKept, ValueRange{g});
      });
    }

    // Top-k over the experts of the kept groups; weights from the unbiased
    // scores.
    Value sum = forLoopCarrying(
        b, indexConst(b, 0), indexConst(b, k), ValueRange{f32Const(b, 0.0)},
        [&](Builder &b, Value j, ValueRange carried) -> SmallVector<Value> {
          Value e = argmaxUnchosen(
              b, select, chosen, experts, [&](Builder &b, Value e) -> Value {
                if (groups == 1)
                  return arith::ConstantOp::create(b, b.getBoolAttr(true));
                Value g = arith::DivUIOp::create(b, e, perGroupV);
                return memref::LoadOp::create(b, groupKept, ValueRange{g});
              });
          memref::StoreOp::create(b, trueV, chosen, ValueRange{e});
          Value id = arith::IndexCastOp::create(b, b.getI32Type(), e);
          memref::StoreOp::create(b, id, ids, ValueRange{t, j});
          Value w = memref::LoadOp::create(b, scores, ValueRange{t, e});
          memref::StoreOp::create(b, w, weights, ValueRange{t, j});
          return {arith::AddFOp::create(b, carried[0], w)};
        })[0];

    double scale = op.getScale().convertToDouble();
    Value factor = f32Const(b, scale);
    if (op.getNormalize())
      factor = arith::DivFOp::create(b, factor, sum);
    forLoop(b, k, [&](Builder &b, Value j) {
      Value w = memref::LoadOp::create(b, weights, ValueRange{t, j});
      memref::StoreOp::create(b, arith::MulFOp::create(b, w, factor), weights,
                              ValueRange{t, j});
    });
  });
  return {asTensor(b, ids), asTensor(b, weights)};
}

/// Copies row `src` of `from` to row `dst` of `to` (both [*, H]).
void copyRow(Builder &b, Value from, Value src, Value to, Value dst,
             int64_t width) {
  forLoop(b, width, [&](Builder &b, Value h) {
    Value v = memref::LoadOp::create(b, from, ValueRange{src, h});
    memref::StoreOp::create(b, v, to, ValueRange{dst, h});
  });
}

SmallVector<Value> lowerDispatch(Builder &b, DispatchOp op) {
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
  // bound otherwise; padding rows are zero.
  auto rowsMemref =
      MemRefType::get(rowsType.getShape(), rowsType.getElementType());
  SmallVector<Value> rowSizes;
  if (rowsType.isDynamicDim(0))
    rowSizes.push_back(used);
  Value rows = alloc(b, rowsMemref, rowSizes);
  Value zero = arith::ConstantOp::create(
      b, b.getFloatAttr(rowsType.getElementType(), 0.0));
  fillBuffer(b, rows, zero);

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
            copyRow(nb, x, t, rows, r, hidden);
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
  return {asTensor(b, rows), asTensor(b, offsets), asTensor(b, rowMap)};
}

/// Rows [lo, hi) of expert `e`'s segment, clamped to [0, rows]: no input
/// makes the generated code read or write out of bounds.
std::pair<Value, Value> segment(Builder &b, Value offsets, Value e,
                                Value rows) {
  Value zero = indexConst(b, 0);
  auto at = [&](Value i) -> Value {
    Value v = arith::IndexCastOp::create(
        b, b.getIndexType(), memref::LoadOp::create(b, offsets, ValueRange{i}));
    return arith::MinSIOp::create(b, arith::MaxSIOp::create(b, v, zero), rows);
  };
  Value lo = at(e);
  Value hi = arith::MaxSIOp::create(
      b, lo, at(arith::AddIOp::create(b, e, indexConst(b, 1))));
  return {lo, hi};
}

/// The grouped GEMM over expert segments: `out[r, c] = sum_i in[r, i] *
/// w[e, c, i]`, or with `transposeWeight` `sum_i in[r, i] * w[e, i, c]`,
/// accumulated in f32; rows outside every segment are zero.
Value groupedGemm(Builder &b, Value inputTensor, Value weightTensor,
                  Value offsetsTensor, RankedTensorType outType,
                  bool transposeWeight) {
  auto weightType = cast<RankedTensorType>(weightTensor.getType());
  int64_t experts = weightType.getDimSize(0);
  int64_t reduction = weightType.getDimSize(transposeWeight ? 1 : 2);
  int64_t columns = outType.getDimSize(1);
  Type elt = outType.getElementType();
  Value input = asBuffer(b, inputTensor);
  Value weight = asBuffer(b, weightTensor);
  Value offsets = asBuffer(b, offsetsTensor);
  Value rows = dim(b, input, 0);
  Value out = alloc(b, MemRefType::get(outType.getShape(), elt),
                    dynamicSizes(b, outType, input));
  fillBuffer(b, out, arith::ConstantOp::create(b, b.getFloatAttr(elt, 0.0)));
  forLoop(b, experts, [&](Builder &b, Value e) {
    auto [lo, hi] = segment(b, offsets, e, rows);
    forLoop(b, lo, hi, [&](Builder &b, Value r) {
      forLoop(b, columns, [&](Builder &b, Value c) {
        Value acc = forLoopCarrying(
            b, indexConst(b, 0), indexConst(b, reduction),
            ValueRange{f32Const(b, 0.0)},
            [&](Builder &b, Value i, ValueRange carried) -> SmallVector<Value> {
              Value a =
                  toF32(b, memref::LoadOp::create(b, input, ValueRange{r, i}));
              SmallVector<Value, 3> at{e, c, i};
              if (transposeWeight)
                std::swap(at[1], at[2]);
              Value w = toF32(b, memref::LoadOp::create(b, weight, at));
              Value prod = arith::MulFOp::create(b, a, w, reductionFlags(b));
              return {arith::AddFOp::create(b, carried[0], prod,
                                            reductionFlags(b))};
            })[0];
        memref::StoreOp::create(b, fromF32(b, acc, elt), out, ValueRange{r, c});
      });
    });
  });
  return asTensor(b, out);
}

Value lowerGroupedMatmul(Builder &b, GroupedMatmulOp op) {
  return groupedGemm(b, op.getInput(), op.getWeight(), op.getOffsets(),
                     cast<RankedTensorType>(op.getOutput().getType()),
                     /*transposeWeight=*/false);
}

/// gate_grad and up_grad of silu(gate) * up, elementwise in f32.
std::pair<Value, Value> lowerSwiGLUGrad(Builder &b, SwiGLUGradOp op) {
  Type elt = op.getGate().getType().getElementType();
  ValueRange inputs{op.getGate(), op.getUp(), op.getGrad()};
  Value gateGrad = elementwise(b, inputs, elt, [](Builder &nb, ValueRange v) {
    Value s = sigmoid(nb, v[0]);
    Value one = f32Const(nb, 1.0);
    // d silu(g)/dg = s * (1 + g * (1 - s))
    Value dsilu = arith::MulFOp::create(
        nb, s,
        arith::AddFOp::create(
            nb, one,
            arith::MulFOp::create(nb, v[0],
                                  arith::SubFOp::create(nb, one, s))));
    return arith::MulFOp::create(nb, arith::MulFOp::create(nb, v[2], v[1]),
                                 dsilu);
  });
  Value upGrad = elementwise(b, inputs, elt, [](Builder &nb, ValueRange v) {
    return arith::MulFOp::create(nb, v[2], silu(nb, v[0]));
  });
  return {gateGrad, upGrad};
}

/// input_grad[r, k] = sum_n grad[r, n] * w[e, n, k] over expert e's rows.
Value lowerGroupedMatmulDx(Builder &b, GroupedMatmulDxOp op) {
  return groupedGemm(b, op.getGrad(), op.getWeight(), op.getOffsets(),
                     cast<RankedTensorType>(op.getInputGrad().getType()),
                     /*transposeWeight=*/true);
}

/// weight_grad[e, n, k] = sum over expert e's rows r of grad[r, n] * in[r, k].
Value lowerGroupedMatmulDw(Builder &b, GroupedMatmulDwOp op) {
  auto outType = cast<RankedTensorType>(op.getWeightGrad().getType());
  int64_t experts = outType.getDimSize(0), n = outType.getDimSize(1),
          kSize = outType.getDimSize(2);
  Value input = asBuffer(b, op.getInput());
  Value grad = asBuffer(b, op.getGrad());
  Value offsets = asBuffer(b, op.getOffsets());
  Value rows = dim(b, input, 0);
  Value out = alloc(b, MemRefType::get(outType.getShape(), b.getF32Type()));
  forLoop(b, experts, [&](Builder &b, Value e) {
    auto [lo, hi] = segment(b, offsets, e, rows);
    forLoop(b, n, [&](Builder &b, Value col) {
      forLoop(b, kSize, [&](Builder &b, Value kk) {
        Value acc = forLoopCarrying(
            b, lo, hi, ValueRange{f32Const(b, 0.0)},
            [&](Builder &b, Value r, ValueRange carried) -> SmallVector<Value> {
              Value g =
                  toF32(b, memref::LoadOp::create(b, grad, ValueRange{r, col}));
              Value x =
                  toF32(b, memref::LoadOp::create(b, input, ValueRange{r, kk}));
              Value prod = arith::MulFOp::create(b, g, x, reductionFlags(b));
              return {arith::AddFOp::create(b, carried[0], prod,
                                            reductionFlags(b))};
            })[0];
        memref::StoreOp::create(b, acc, out, ValueRange{e, col, kk});
      });
    });
  });
  return asTensor(b, out);
}

Value lowerCombine(Builder &b, CombineOp op) {
  auto outType = cast<RankedTensorType>(op.getOutput().getType());
  auto mapType = cast<RankedTensorType>(op.getRowMap().getType());
  int64_t hidden = outType.getDimSize(1), k = mapType.getDimSize(1);
  Type elt = outType.getElementType();
  Value rows = asBuffer(b, op.getRows());
  Value rowMap = asBuffer(b, op.getRowMap());
  Value weights = asBuffer(b, op.getWeights());
  Value tokens = dim(b, rowMap, 0);
  Value rowCount = dim(b, rows, 0);
  Value zeroIdx = indexConst(b, 0);

  Value out = alloc(b, MemRefType::get(outType.getShape(), elt),
                    dynamicSizes(b, outType, rowMap));
  Value acc =
      memref::AllocaOp::create(b, MemRefType::get({hidden}, b.getF32Type()));
  forLoop(b, zeroIdx, tokens, [&](Builder &b, Value t) {
    fillBuffer(b, acc, f32Const(b, 0.0));
    forLoop(b, k, [&](Builder &b, Value j) {
      Value r = arith::IndexCastOp::create(
          b, b.getIndexType(),
          memref::LoadOp::create(b, rowMap, ValueRange{t, j}));
      Value valid = arith::AndIOp::create(
          b, arith::CmpIOp::create(b, arith::CmpIPredicate::sge, r, zeroIdx),
          arith::CmpIOp::create(b, arith::CmpIPredicate::slt, r, rowCount));
      Value w = memref::LoadOp::create(b, weights, ValueRange{t, j});
      scf::IfOp::create(b, valid, [&](OpBuilder &nested, Location loc) {
        Builder nb(loc, nested);
        forLoop(nb, hidden, [&](Builder &b, Value h) {
          Value v = toF32(b, memref::LoadOp::create(b, rows, ValueRange{r, h}));
          Value a = memref::LoadOp::create(b, acc, ValueRange{h});
          memref::StoreOp::create(
              b, arith::AddFOp::create(b, a, arith::MulFOp::create(b, w, v)),
              acc, ValueRange{h});
        });
        scf::YieldOp::create(nb);
      });
    });
    forLoop(b, hidden, [&](Builder &b, Value h) {
      Value a = memref::LoadOp::create(b, acc, ValueRange{h});
      memref::StoreOp::create(b, fromF32(b, a, elt), out, ValueRange{t, h});
    });
  });
  return asTensor(b, out);
}

/// Whether row map entry `r` names a row of a buffer of `rowCount` rows.
Value validRow(Builder &b, Value r, Value rowCount) {
  return arith::AndIOp::create(
      b,
      arith::CmpIOp::create(b, arith::CmpIPredicate::sge, r, indexConst(b, 0)),
      arith::CmpIOp::create(b, arith::CmpIPredicate::slt, r, rowCount));
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
  forLoop(b, indexConst(b, 0), tokens, [&](Builder &b, Value t) {
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
  forLoop(b, indexConst(b, 0), tokens, [&](Builder &b, Value t) {
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

/// scores_grad of moe.topk's weights: nonzero only at the selected experts.
Value lowerTopKGrad(Builder &b, TopKGradOp op) {
  auto scoresType = cast<RankedTensorType>(op.getScores().getType());
  auto idsType = cast<RankedTensorType>(op.getIndices().getType());
  int64_t experts = scoresType.getDimSize(1), k = idsType.getDimSize(1);
  Value scores = asBuffer(b, op.getScores());
  Value ids = asBuffer(b, op.getIndices());
  Value weightsGrad = asBuffer(b, op.getWeightsGrad());
  Value tokens = dim(b, ids, 0);
  Value out = alloc(b, MemRefType::get(scoresType.getShape(), b.getF32Type()),
                    dynamicSizes(b, scoresType, scores));
  fillBuffer(b, out, f32Const(b, 0.0));
  Value scale = f32Const(b, op.getScale().convertToDouble());
  Value expertCount = indexConst(b, experts);
  forLoop(b, indexConst(b, 0), tokens, [&](Builder &b, Value t) {
    // The selected experts' score (0 for an id out of range).
    auto selected = [&](Builder &b, Value j) -> std::pair<Value, Value> {
      Value e = arith::IndexCastOp::create(
          b, b.getIndexType(),
          memref::LoadOp::create(b, ids, ValueRange{t, j}));
      Value valid = validRow(b, e, expertCount);
      Value safe = arith::SelectOp::create(b, valid, e, indexConst(b, 0));
      Value s = memref::LoadOp::create(b, scores, ValueRange{t, safe});
      return {valid, arith::SelectOp::create(b, valid, s, f32Const(b, 0.0))};
    };
    Value z = f32Const(b, 1.0), dot = f32Const(b, 0.0);
    if (op.getNormalize()) {
      ValueRange sums = forLoopCarrying(
          b, indexConst(b, 0), indexConst(b, k),
          ValueRange{f32Const(b, 0.0), f32Const(b, 0.0)},
          [&](Builder &b, Value j, ValueRange carried) -> SmallVector<Value> {
            Value s = selected(b, j).second;
            Value g = memref::LoadOp::create(b, weightsGrad, ValueRange{t, j});
            return {arith::AddFOp::create(b, carried[0], s),
                    arith::AddFOp::create(b, carried[1],
                                          arith::MulFOp::create(b, g, s))};
          });
      z = sums[0];
      dot = arith::DivFOp::create(b, sums[1], z);
    }
    forLoop(b, k, [&](Builder &b, Value j) {
      auto [valid, s] = selected(b, j);
      (void)s;
      Value g = memref::LoadOp::create(b, weightsGrad, ValueRange{t, j});
      Value ds = arith::DivFOp::create(
          b, arith::MulFOp::create(b, scale, arith::SubFOp::create(b, g, dot)),
          z);
      scf::IfOp::create(b, valid, [&](OpBuilder &nested, Location loc) {
        Builder nb(loc, nested);
        Value e = arith::IndexCastOp::create(
            nb, nb.getIndexType(),
            memref::LoadOp::create(nb, ids, ValueRange{t, j}));
        Value old = memref::LoadOp::create(nb, out, ValueRange{t, e});
        memref::StoreOp::create(nb, arith::AddFOp::create(nb, old, ds), out,
                                ValueRange{t, e});
        scf::YieldOp::create(nb);
      });
    });
  });
  return asTensor(b, out);
}

/// input_grad and weight_grad of moe.router, through the scoring function.
std::pair<Value, Value> lowerRouterGrad(Builder &b, RouterGradOp op) {
  auto inputType = cast<RankedTensorType>(op.getInput().getType());
  auto weightType = cast<RankedTensorType>(op.getWeight().getType());
  int64_t hidden = inputType.getDimSize(1), experts = weightType.getDimSize(0);
  Type elt = inputType.getElementType();
  Value input = asBuffer(b, op.getInput());
  Value weight = asBuffer(b, op.getWeight());
  Value scores = asBuffer(b, op.getScores());
  Value scoresGrad = asBuffer(b, op.getScoresGrad());
  Value tokens = dim(b, input, 0);
  auto scoresType = cast<RankedTensorType>(op.getScores().getType());
  Value logitsGrad =
      alloc(b, MemRefType::get(scoresType.getShape(), b.getF32Type()),
            dynamicSizes(b, scoresType, scores));
  bool sigmoid = op.getScoring() == ScoringFunc::Sigmoid;
  forLoop(b, indexConst(b, 0), tokens, [&](Builder &b, Value t) {
    Value dot = f32Const(b, 0.0);
    if (!sigmoid)
      dot = forLoopCarrying(
          b, indexConst(b, 0), indexConst(b, experts),
          ValueRange{f32Const(b, 0.0)},
          [&](Builder &b, Value e, ValueRange carried) -> SmallVector<Value> {
            Value s = memref::LoadOp::create(b, scores, ValueRange{t, e});
            Value g = memref::LoadOp::create(b, scoresGrad, ValueRange{t, e});
            return {arith::AddFOp::create(b, carried[0],
                                          arith::MulFOp::create(b, g, s))};
          })[0];
    forLoop(b, experts, [&](Builder &b, Value e) {
      Value s = memref::LoadOp::create(b, scores, ValueRange{t, e});
      Value g = memref::LoadOp::create(b, scoresGrad, ValueRange{t, e});
      Value lg =
          sigmoid
              ? arith::MulFOp::create(
                    b, arith::MulFOp::create(b, g, s),
                    arith::SubFOp::create(b, f32Const(b, 1.0), s))
              : arith::MulFOp::create(b, s, arith::SubFOp::create(b, g, dot));
      memref::StoreOp::create(b, lg, logitsGrad, ValueRange{t, e});
    });
  });
  // input_grad[t, h] = sum_e g[t, e] * w[e, h]
  Value inputGrad = alloc(b, MemRefType::get(inputType.getShape(), elt),
                          dynamicSizes(b, inputType, input));
  forLoop(b, indexConst(b, 0), tokens, [&](Builder &b, Value t) {
    forLoop(b, hidden, [&](Builder &b, Value h) {
      Value acc = forLoopCarrying(
          b, indexConst(b, 0), indexConst(b, experts),
          ValueRange{f32Const(b, 0.0)},
          [&](Builder &b, Value e, ValueRange carried) -> SmallVector<Value> {
            Value g = memref::LoadOp::create(b, logitsGrad, ValueRange{t, e});
            Value w =
                toF32(b, memref::LoadOp::create(b, weight, ValueRange{e, h}));
            return {arith::AddFOp::create(b, carried[0],
                                          arith::MulFOp::create(b, g, w),
                                          reductionFlags(b))};
          })[0];
      memref::StoreOp::create(b, fromF32(b, acc, elt), inputGrad,
                              ValueRange{t, h});
    });
  });
  // weight_grad[e, h] = sum_t g[t, e] * x[t, h]
  Value weightGrad =
      alloc(b, MemRefType::get(weightType.getShape(), b.getF32Type()));
  forLoop(b, experts, [&](Builder &b, Value e) {
    forLoop(b, hidden, [&](Builder &b, Value h) {
      Value acc = forLoopCarrying(
          b, indexConst(b, 0), tokens, ValueRange{f32Const(b, 0.0)},
          [&](Builder &b, Value t, ValueRange carried) -> SmallVector<Value> {
            Value g = memref::LoadOp::create(b, logitsGrad, ValueRange{t, e});
            Value x =
                toF32(b, memref::LoadOp::create(b, input, ValueRange{t, h}));
            return {arith::AddFOp::create(b, carried[0],
                                          arith::MulFOp::create(b, g, x),
                                          reductionFlags(b))};
          })[0];
      memref::StoreOp::create(b, acc, weightGrad, ValueRange{e, h});
    });
  });
  return {asTensor(b, inputGrad), asTensor(b, weightGrad)};
}

//===----------------------------------------------------------------------===//
// The pass
//===----------------------------------------------------------------------===//

/// Largest stack scratch one lowered op may use (per call, not per token).
constexpr int64_t kMaxStackScratchBytes = 1 << 20;

/// Stack scratch the lowering of `op` allocates, and what it scales with.
std::pair<int64_t, std::string> stackScratch(Operation *op) {
  if (auto topk = dyn_cast<TopKOp>(op)) {
    int64_t experts =
        cast<RankedTensorType>(topk.getScores().getType()).getDimSize(1);
    auto groups = static_cast<int64_t>(topk.getGroups());
    return {experts * 5 + groups * 5, "experts = " + std::to_string(experts)};
  }
  if (auto dispatch = dyn_cast<DispatchOp>(op)) {
    auto experts = static_cast<int64_t>(dispatch.getExperts());
    return {experts * 16, "experts = " + std::to_string(experts)};
  }
  if (auto combine = dyn_cast<CombineOp>(op)) {
    int64_t hidden =
        cast<RankedTensorType>(combine.getOutput().getType()).getDimSize(1);
    return {hidden * 4, "hidden = " + std::to_string(hidden)};
  }
  return {0, ""};
}

//===----------------------------------------------------------------------===//
// Collectives: calls through the communicator table
//===----------------------------------------------------------------------===//

/// A word of the module's communicator table (created on first use): an
/// exported, zero-initialized `i64` array the runtime fills after loading
/// the shared object (see moe/runtime/CommAbi.h).
using CommSlot = ::moe::comm::Slot;
constexpr int64_t kCommTableSize = ::moe::comm::kSlotCount;
constexpr const char *kCommTableName = ::moe::comm::kTableName;

Value commWord(Builder &b, ModuleOp module, CommSlot slot) {
  MLIRContext *ctx = b.getContext();
  auto i64 = b.getI64Type();
  auto tableType = LLVM::LLVMArrayType::get(i64, kCommTableSize);
  if (!module.lookupSymbol(kCommTableName)) {
    OpBuilder global = OpBuilder::atBlockBegin(module.getBody());
    LLVM::GlobalOp::create(
        global, module.getLoc(), tableType, /*isConstant=*/false,
        LLVM::Linkage::External, kCommTableName,
        DenseElementsAttr::get(RankedTensorType::get({kCommTableSize}, i64),
                               b.getI64IntegerAttr(0).getValue()));
  }
  auto ptr = LLVM::LLVMPointerType::get(ctx);
  Value table = LLVM::AddressOfOp::create(b, ptr, kCommTableName);
  Value word = LLVM::GEPOp::create(
      b, ptr, tableType, table,
      ArrayRef<LLVM::GEPArg>{0, static_cast<int32_t>(slot)});
  return LLVM::LoadOp::create(b, i64, word);
}

/// Calls the runtime function in `slot` with the communicator context and
/// `args` (all i64); returns its i64 result when `hasResult`.
Value callComm(Builder &b, ModuleOp module, CommSlot slot, ArrayRef<Value> args,
               bool hasResult = false) {
  MLIRContext *ctx = b.getContext();
  auto i64 = b.getI64Type();
  Value fn = LLVM::IntToPtrOp::create(b, LLVM::LLVMPointerType::get(ctx),
                                      commWord(b, module, slot));
  SmallVector<Value> operands{fn, commWord(b, module, CommSlot::Context)};
  operands.append(args.begin(), args.end());
  SmallVector<Type> params(operands.size() - 1, i64);
  Type result = hasResult ? Type(i64) : LLVM::LLVMVoidType::get(ctx);
  auto call = LLVM::CallOp::create(
      b, LLVM::LLVMFunctionType::get(result, params), operands);
  return hasResult ? call.getResult() : Value();
}

/// The address of a buffer's first element (buffers here have the identity
/// layout, so the aligned pointer is the first element).
Value addressOf(Builder &b, Value buffer) {
  Value index = memref::ExtractAlignedPointerAsIndexOp::create(b, buffer);
  return arith::IndexCastOp::create(b, b.getI64Type(), index);
}

Value i64Const(Builder &b, int64_t value) {
  return arith::ConstantOp::create(b, b.getI64IntegerAttr(value));
}

/// Two calls: the exchange of segment sizes gives the output offsets, then
/// the rows move into a buffer of the size they announce, at once (a
/// blocking all-to-all) or in the background until the wait (a start).
/// Returns the output buffer, the output offsets as a tensor and, for a
/// start, the handle.
struct Exchange {
  Value out, outOffsets, handle;
};
Exchange lowerExchange(Builder &b, Operation *op, Value input, Value offsets,
                       AllToAllKind kindAttr, bool start) {
  auto module = op->getParentOfType<ModuleOp>();
  auto inputType = cast<RankedTensorType>(input.getType());
  auto offsetsType = cast<RankedTensorType>(offsets.getType());
  int64_t experts = offsetsType.getDimSize(0) - 1;
  int64_t rowBytes =
      inputType.getDimSize(1) * (inputType.getElementTypeBitWidth() / 8);
  Value kind = i64Const(b, static_cast<int64_t>(kindAttr));
  Value inOffsets = asBuffer(b, offsets);
  Value outOffsets = alloc(b, MemRefType::get({experts + 1}, b.getI32Type()));
  callComm(b, module, CommSlot::ExchangeCounts,
           {kind, addressOf(b, inOffsets), addressOf(b, outOffsets),
            i64Const(b, experts)});
  Value used =
      memref::LoadOp::create(b, outOffsets, ValueRange{indexConst(b, experts)});
  Value rows = arith::IndexCastOp::create(b, b.getIndexType(), used);
  Value out =
      alloc(b,
            MemRefType::get({ShapedType::kDynamic, inputType.getDimSize(1)},
                            inputType.getElementType()),
            rows);
  Value handle =
      callComm(b, module, start ? CommSlot::StartRows : CommSlot::ExchangeRows,
               {kind, addressOf(b, asBuffer(b, input)), addressOf(b, inOffsets),
                addressOf(b, out), addressOf(b, outOffsets),
                i64Const(b, experts), i64Const(b, rowBytes)},
               /*hasResult=*/start);
  return {out, asTensor(b, outOffsets), handle};
}

SmallVector<Value> lowerAllToAll(Builder &b, AllToAllOp op) {
  Exchange e = lowerExchange(b, op, op.getInput(), op.getOffsets(),
                             op.getKind(), /*start=*/false);
  return {asTensor(b, e.out), e.outOffsets};
}

/// A copy of the input, summed in place over the ranks.
Value lowerAllReduce(Builder &b, AllReduceOp op) {
  auto type = cast<RankedTensorType>(op.getInput().getType());
  auto memrefType = MemRefType::get(type.getShape(), type.getElementType());
  Value in = asBuffer(b, op.getInput());
  Value out = alloc(b, memrefType, dynamicSizes(b, memrefType, in));
  memref::CopyOp::create(b, in, out);
  Value count = indexConst(b, 1);
  for (int64_t i = 0; i < type.getRank(); ++i)
    count = arith::MulIOp::create(b, count, dim(b, in, i));
  callComm(b, op->getParentOfType<ModuleOp>(), CommSlot::AllReduce,
           {addressOf(b, out),
            arith::IndexCastOp::create(b, b.getI64Type(), count)});
  return asTensor(b, out);
}

struct ConvertMoeToHost
    : mlir::moe::impl::ConvertMoeToHostBase<ConvertMoeToHost> {
  using Base::Base;

  void runOnOperation() override {
    SmallVector<Operation *> ops;
    WalkResult walk = getOperation()->walk([&](Operation *op) {
      if (!isa<MoeDialect>(op->getDialect()))
        return WalkResult::advance();
      if (isa<LayerOp>(op)) {
        op->emitOpError() << "must be decomposed before convert-moe-to-host "
                             "(run moe-decompose-layer first)";
        return WalkResult::interrupt();
      }
      if (auto [bytes, reason] = stackScratch(op);
          bytes > kMaxStackScratchBytes) {
        op->emitOpError() << "needs " << bytes
                          << " bytes of stack scratch on the host (" << reason
                          << "), more than the " << kMaxStackScratchBytes
                          << "-byte limit";
        return WalkResult::interrupt();
      }
      if (isa<AllToAllOp, AllToAllStartOp, AllToAllWaitOp, AllReduceOp>(op) &&
          !op->getParentOfType<ModuleOp>()) {
        op->emitOpError() << "must be inside a module (its collective "
                             "calls go through the module's communicator "
                             "table)";
        return WalkResult::interrupt();
      }
      ops.push_back(op);
      return WalkResult::advance();
    });
    if (walk.wasInterrupted())
      return signalPassFailure();

    // Output buffers of started all-to-alls, by their handle.
    DenseMap<Value, Value> pending;
    for (Operation *op : ops) {
      Builder b(op->getLoc(), op);
      SmallVector<Value> results;
      if (auto router = dyn_cast<RouterOp>(op)) {
        results.push_back(lowerRouter(b, router));
      } else if (auto topk = dyn_cast<TopKOp>(op)) {
        auto [ids, weights] = lowerTopK(b, topk);
        results = {ids, weights};
      } else if (auto dispatch = dyn_cast<DispatchOp>(op)) {
        results = lowerDispatch(b, dispatch);
      } else if (auto gmm = dyn_cast<GroupedMatmulOp>(op)) {
        results.push_back(lowerGroupedMatmul(b, gmm));
      } else if (auto swiglu = dyn_cast<SwiGLUOp>(op)) {
        results.push_back(lowerSwiGLU(b, swiglu));
      } else if (auto grad = dyn_cast<SwiGLUGradOp>(op)) {
        auto [gateGrad, upGrad] = lowerSwiGLUGrad(b, grad);
        results = {gateGrad, upGrad};
      } else if (auto dx = dyn_cast<GroupedMatmulDxOp>(op)) {
        results.push_back(lowerGroupedMatmulDx(b, dx));
      } else if (auto dw = dyn_cast<GroupedMatmulDwOp>(op)) {
        results.push_back(lowerGroupedMatmulDw(b, dw));
      } else if (auto cg = dyn_cast<CombineGradOp>(op)) {
        auto [rowsGrad, weightsGrad] = lowerCombineGrad(b, cg);
        results = {rowsGrad, weightsGrad};
      } else if (auto dg = dyn_cast<DispatchGradOp>(op)) {
        results.push_back(lowerDispatchGrad(b, dg));
      } else if (auto tg = dyn_cast<TopKGradOp>(op)) {
        results.push_back(lowerTopKGrad(b, tg));
      } else if (auto rg = dyn_cast<RouterGradOp>(op)) {
        auto [inputGrad, weightGrad] = lowerRouterGrad(b, rg);
        results = {inputGrad, weightGrad};
      } else if (auto combine = dyn_cast<CombineOp>(op)) {
        results.push_back(lowerCombine(b, combine));
      } else if (auto shared = dyn_cast<SharedExpertOp>(op)) {
        results.push_back(lowerSharedExpert(b, shared));
      } else if (auto a2a = dyn_cast<AllToAllOp>(op)) {
        if (a2a.getEpSize() == 1)
          results = {a2a.getInput(), a2a.getOffsets()};
        else
          results = lowerAllToAll(b, a2a);
      } else if (auto start = dyn_cast<AllToAllStartOp>(op)) {
        Exchange e = lowerExchange(b, op, start.getInput(), start.getOffsets(),
                                   start.getKind(), /*start=*/true);
        // The wait (later in the block) hands the buffer out.
        pending[e.handle] = e.out;
        results = {e.handle, e.outOffsets};
      } else if (auto wait = dyn_cast<AllToAllWaitOp>(op)) {
        auto it = pending.find(wait.getHandle());
        if (it == pending.end()) {
          wait.emitOpError() << "has no lowered moe.all_to_all_start";
          return signalPassFailure();
        }
        callComm(b, op->getParentOfType<ModuleOp>(), CommSlot::Wait,
                 {wait.getHandle()});
        results.push_back(asTensor(b, it->second));
      } else if (auto reduce = dyn_cast<AllReduceOp>(op)) {
        results.push_back(reduce.getEpSize() == 1 ? reduce.getInput()
                                                  : lowerAllReduce(b, reduce));
      }
      // Results may be less static than the op's declared types.
      SmallVector<Value> casted;
      for (auto [result, value] : llvm::zip(op->getResults(), results))
        casted.push_back(
            value.getType() == result.getType()
                ? value
                : Value(tensor::CastOp::create(b, result.getType(), value)));
      op->replaceAllUsesWith(casted);
      op->erase();
    }
  }
};

} // namespace
