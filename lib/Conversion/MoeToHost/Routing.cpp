//===- Routing.cpp - Routing ops on the host ------------------------------===//
//
// Part of moe-compiler.
//
// moe.router becomes a linalg GEMM with the scoring function; moe.topk a
// parallel loop over blocks of tokens with group-limited selection; their
// gradients parallel loops over tokens.
//
//===----------------------------------------------------------------------===//

#include "HostBuilders.h"

#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

#include <limits>
#include <numeric>

using namespace mlir;
using namespace mlir::moe;
using namespace mlir::moe::host;

namespace {

using Builder = host::Builder;

Value lowerRouter(Builder &b, RouterOp op, const VectorTarget &target) {
  Value logits = matmulTransposeB(b, op.getInput(), op.getWeight(), target);
  // GPT-OSS: the router's bias, added in f32.
  if (Value bias = op.getBias())
    logits = withColumnValue(b, logits, bias,
                             [](Builder &nb, Value v, Value c) -> Value {
                               return arith::AddFOp::create(nb, v,
                                                            toF32(nb, c));
                             });
  // Sparsemixer's selection (moe.topk) reads the logits themselves.
  if (op.getScoring() == ScoringFunc::Sparsemixer)
    return logits;
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

/// Index of the best allowed, not yet chosen entry of `values[row, 0..n)`:
/// the first maximum (ties go to the lower index), NaN read as -inf, so a
/// NaN score never repeats a choice or beats a number. `allowed(i)` and
/// `chosen` (an i1 buffer, indexed like `values`) filter candidates.
Value argmaxUnchosen(Builder &b, Value values, Value chosen, Value row,
                     int64_t n, function_ref<Value(Builder &, Value)> allowed) {
  Value negInf = f32Const(b, -std::numeric_limits<double>::infinity());
  Value none = indexConst(b, -1);
  ValueRange result = forLoopCarrying(
      b, indexConst(b, 0), indexConst(b, n), ValueRange{negInf, none},
      [&](Builder &nb, Value i, ValueRange carried) -> SmallVector<Value> {
        Value best = carried[0], bestIndex = carried[1];
        Value raw = memref::LoadOp::create(nb, values, ValueRange{row, i});
        Value isNan =
            arith::CmpFOp::create(nb, arith::CmpFPredicate::UNO, raw, raw);
        Value v = arith::SelectOp::create(nb, isNan, negInf, raw);
        Value isChosen = memref::LoadOp::create(nb, chosen, ValueRange{row, i});
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

/// Sparsemixer's two picks for token `t` (Phi-3.5-MoE at inference): the
/// best logit m1, then the best of the others m2; pick i's weight is
/// `scale / sum_e exp(s_e - m_i)` over the logits still free (the first
/// pick is not, for the second) with `(m_i - s_e) / max(|s_e|, m_i)` not
/// above `margin` (a NaN ratio keeps the logit, as in transformers).
/// `logits` and `chosen` are the token's scratch row `r`.
void lowerSparsemixerToken(Builder &b, Value logits, Value chosen, Value r,
                           Value t, int64_t experts, double margin,
                           double scale, Value ids, Value weights) {
  Value trueV = arith::ConstantOp::create(b, b.getBoolAttr(true));
  for (int64_t j = 0; j < 2; ++j) {
    Value e = argmaxUnchosen(b, logits, chosen, r, experts,
                             [&](Builder &, Value) { return trueV; });
    Value m = memref::LoadOp::create(b, logits, ValueRange{r, e});
    Value sum = forLoopCarrying(
        b, indexConst(b, 0), indexConst(b, experts),
        ValueRange{f32Const(b, 0.0)},
        [&](Builder &b, Value i, ValueRange carried) -> SmallVector<Value> {
          Value s = memref::LoadOp::create(b, logits, ValueRange{r, i});
          Value taken = memref::LoadOp::create(b, chosen, ValueRange{r, i});
          Value factor =
              arith::MaximumFOp::create(b, math::AbsFOp::create(b, s), m);
          Value ratio =
              arith::DivFOp::create(b, arith::SubFOp::create(b, m, s), factor);
          Value outside = arith::CmpFOp::create(b, arith::CmpFPredicate::OGT,
                                                ratio, f32Const(b, margin));
          Value drop = arith::OrIOp::create(b, taken, outside);
          Value term = math::ExpOp::create(b, arith::SubFOp::create(b, s, m));
          return {arith::SelectOp::create(
              b, drop, carried[0], arith::AddFOp::create(b, carried[0], term))};
        })[0];
    memref::StoreOp::create(b, trueV, chosen, ValueRange{r, e});
    Value jv = indexConst(b, j);
    memref::StoreOp::create(b, arith::IndexCastOp::create(b, b.getI32Type(), e),
                            ids, ValueRange{t, jv});
    memref::StoreOp::create(b,
                            arith::DivFOp::create(b, f32Const(b, scale), sum),
                            weights, ValueRange{t, jv});
  }
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

  // Scratch rows, one per parallel block of tokens, reused by its tokens.
  Type f32 = b.getF32Type(), i1 = b.getI1Type();
  Value blocks = ceilDiv(b, tokens, kTokenBlock);
  auto scratch = [&](int64_t n, Type type) {
    return alloc(b, MemRefType::get({ShapedType::kDynamic, n}, type), blocks);
  };
  Value select = scratch(experts, f32), chosen = scratch(experts, i1);
  Value groupScore = scratch(groups, f32), groupKept = scratch(groups, i1);
  Value falseV = arith::ConstantOp::create(b, b.getBoolAttr(false));
  Value trueV = arith::ConstantOp::create(b, b.getBoolAttr(true));
  Value perGroupV = indexConst(b, perGroup);

  parallelBlocks(b, {blocks}, [&](Builder &b, ValueRange block) {
    Value r = block[0];
    auto [t0, t1] = blockRange(b, r, kTokenBlock, tokens);
    forLoop(b, t0, t1, [&](Builder &b, Value t) {
      // Selection scores: biased when there is a bias.
      forLoop(b, experts, [&](Builder &b, Value e) {
        Value s = memref::LoadOp::create(b, scores, ValueRange{t, e});
        if (bias)
          s = arith::AddFOp::create(
              b, s, memref::LoadOp::create(b, bias, ValueRange{e}));
        memref::StoreOp::create(b, s, select, ValueRange{r, e});
        memref::StoreOp::create(b, falseV, chosen, ValueRange{r, e});
      });

      if (std::optional<llvm::APFloat> eps = op.getSparsemixer()) {
        lowerSparsemixerToken(b, select, chosen, r, t, experts,
                              2.0 * eps->convertToDouble(),
                              op.getScale().convertToDouble(), ids, weights);
        return;
      }

      // Group-limited routing: keep the best groups.
      if (groups > 1) {
        forLoop(b, groups, [&](Builder &b, Value g) {
          Value negInf = f32Const(b, -std::numeric_limits<double>::infinity());
          Value base = arith::MulIOp::create(b, g, perGroupV);
          ValueRange best = forLoopCarrying(
              b, indexConst(b, 0), perGroupV, ValueRange{negInf, negInf},
              [&](Builder &b, Value j, ValueRange top) -> SmallVector<Value> {
                Value v = memref::LoadOp::create(
                    b, select,
                    ValueRange{r, arith::AddIOp::create(b, base, j)});
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
          memref::StoreOp::create(b, score, groupScore, ValueRange{r, g});
          memref::StoreOp::create(b, falseV, groupKept, ValueRange{r, g});
        });
        forLoop(b, keptGroups, [&](Builder &b, Value) {
          Value g = argmaxUnchosen(
              b, groupScore, groupKept, r, groups, [&](Builder &b, Value) {
                return arith::ConstantOp::create(b, b.getBoolAttr(true));
              });
          memref::StoreOp::create(b, trueV, groupKept, ValueRange{r, g});
        });
      }

      // Top-k over the experts of the kept groups; weights from the
      // unbiased scores.
      Value sum = forLoopCarrying(
          b, indexConst(b, 0), indexConst(b, k), ValueRange{f32Const(b, 0.0)},
          [&](Builder &b, Value j, ValueRange carried) -> SmallVector<Value> {
            Value e = argmaxUnchosen(
                b, select, chosen, r, experts,
                [&](Builder &b, Value e) -> Value {
                  if (groups == 1)
                    return arith::ConstantOp::create(b, b.getBoolAttr(true));
                  Value g = arith::DivUIOp::create(b, e, perGroupV);
                  return memref::LoadOp::create(b, groupKept, ValueRange{r, g});
                });
            memref::StoreOp::create(b, trueV, chosen, ValueRange{r, e});
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
  });
  return {asTensor(b, ids), asTensor(b, weights)};
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
  forTokenBlocks(b, tokens, [&](Builder &b, Value t) {
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
std::pair<Value, Value> lowerRouterGrad(Builder &b, RouterGradOp op,
                                        const VectorTarget &target) {
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
  forTokenBlocks(b, tokens, [&](Builder &b, Value t) {
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
  // input_grad[t, h] = sum_e g[t, e] * w[e, h], in blocks of tokens and
  // of columns.
  Value inputGrad = alloc(b, MemRefType::get(inputType.getShape(), elt),
                          dynamicSizes(b, inputType, input));
  int64_t columnBlock = outerColumnBlock(target);
  Value zero = indexConst(b, 0);
  Value hiddenEnd = indexConst(b, hidden);
  parallelBlocks(
      b, {ceilDiv(b, tokens, kTokenBlock), ceilDiv(b, hiddenEnd, columnBlock)},
      [&](Builder &b, ValueRange block) {
        auto [t0, t1] = blockRange(b, block[0], kTokenBlock, tokens);
        auto [h0, h1] = blockRange(b, block[1], columnBlock, hiddenEnd);
        emitOuterGemm(
            b,
            {t0, t1, zero, indexConst(b, experts), h0, h1,
             [&](Builder &b, Value t, Value e) -> Value {
               return memref::LoadOp::create(b, logitsGrad, ValueRange{t, e});
             },
             [&](Builder &b, Value e, Value h, int64_t width) {
               return loadVector(b, weight, {e, h}, width);
             },
             [&](Builder &b, Value t, Value h, Value v) {
               storeVector(b, v, inputGrad, {t, h});
             },
             std::gcd(columnBlock, hidden), /*aColumn=*/nullptr},
            target);
      });
  // weight_grad[e, h] = sum_t g[t, e] * x[t, h], in blocks of columns.
  Value weightGrad =
      alloc(b, MemRefType::get(weightType.getShape(), b.getF32Type()));
  parallelBlocks(
      b, {ceilDiv(b, hiddenEnd, columnBlock)},
      [&](Builder &b, ValueRange block) {
        auto [h0, h1] = blockRange(b, block[0], columnBlock, hiddenEnd);
        emitOuterGemm(
            b,
            {zero, indexConst(b, experts), zero, tokens, h0, h1,
             [&](Builder &b, Value e, Value t) -> Value {
               return memref::LoadOp::create(b, logitsGrad, ValueRange{t, e});
             },
             [&](Builder &b, Value t, Value h, int64_t width) {
               return loadVector(b, input, {t, h}, width);
             },
             [&](Builder &b, Value e, Value h, Value v) {
               storeVector(b, v, weightGrad, {e, h});
             },
             std::gcd(columnBlock, hidden), /*aColumn=*/nullptr},
            target);
      });
  return {asTensor(b, inputGrad), asTensor(b, weightGrad)};
}

} // namespace

void mlir::moe::host::populateRoutingPatterns(RewritePatternSet &patterns,
                                              const VectorTarget &target) {
  addLowering<RouterOp>(patterns, [target](Builder &b, RouterOp op) {
    return lowerRouter(b, op, target);
  });
  addLowering<TopKOp>(patterns, lowerTopK);
  addLowering<TopKGradOp>(patterns, lowerTopKGrad);
  addLowering<RouterGradOp>(patterns, [target](Builder &b, RouterGradOp op) {
    return lowerRouterGrad(b, op, target);
  });
}
