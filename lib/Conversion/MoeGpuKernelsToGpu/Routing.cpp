//===- Routing.cpp - The router, shared gate and routing kernels ----------===//
//
// Part of moe-compiler.
//
//===----------------------------------------------------------------------===//

#include "Lowering.h"

using namespace mlir;
using namespace mlir::moe;
using namespace mlir::moe::kernels;

Value kernels::chunkOf(Emitter &e, Value token, Value tokens, int64_t chunks) {
  Value scaled = e.muli(e.addi(token, e.idx(1)), e.idx(chunks));
  return e.divi(e.subi(scaled, e.idx(1)), tokens);
}

/// One warp per token, its lanes striding over the experts.
static void lowerRouterLogits(moegpu::RouterLogitsOp op, Emitter &e) {
  Value x = op.getX(), wr = op.getWeight(), logits = op.getLogits();
  int64_t experts = op.getWeight().getType().getDimSize(0);
  int64_t hidden = op.getX().getType().getDimSize(1);
  Value lane, token;
  std::tie(lane, token) = e.warpRow(kRouteWarps);
  e.when(e.cmp(arith::CmpIPredicate::ult, token, e.dim(x, 0)), [&] {
    e.loop(lane, e.idx(experts), e.idx(32), {}, [&](Value ex, ValueRange) {
      Value acc = e.loop(e.idx(0), e.idx(hidden), e.idx(1), {e.f32(0)},
                         [&](Value h, ValueRange it) {
                           Value p = e.mul(e.toF32(e.load(x, {token, h})),
                                           e.toF32(e.load(wr, {ex, h})));
                           return SmallVector<Value>{e.add(it[0], p)};
                         })[0];
      e.store(acc, logits, {token, ex});
      return SmallVector<Value>{};
    });
  });
}

/// One CTA per row, its threads striding over the columns; each element's
/// slices added in slice order.
static void lowerSumSplits(moegpu::SumSplitsOp op, Emitter &e) {
  Value partials = op.getPartials(), out = op.getOut();
  Value row = gpu::BlockIdOp::create(e.b, gpu::Dimension::x);
  Value tid = gpu::ThreadIdOp::create(e.b, gpu::Dimension::x);
  Value threads = gpu::BlockDimOp::create(e.b, gpu::Dimension::x);
  int64_t columns = op.getOut().getType().getDimSize(1);
  e.when(e.cmp(arith::CmpIPredicate::ult, row, e.dim(out, 0)), [&] {
    Value count = e.index(e.load(op.getCount(), {e.idx(0)}));
    e.loop(tid, e.idx(columns), threads, {}, [&](Value n, ValueRange) {
      // (One op a statement: the IR's order must not depend on the C++
      // compiler's order of evaluating arguments.)
      Value first = e.idx(0), step = e.idx(1), zero = e.f32(0);
      Value sum =
          e.loop(first, count, step, {zero}, [&](Value slice, ValueRange it) {
            Value p = e.load(partials, {slice, row, n});
            return SmallVector<Value>{e.add(it[0], p)};
          })[0];
      e.store(sum, out, {row, n});
      return SmallVector<Value>{};
    });
  });
}

/// One warp per token.
static void lowerSharedGate(moegpu::SharedGateOp op, Emitter &e) {
  Value x = op.getX(), g = op.getGate(), scale = op.getScale();
  Value lane, token;
  std::tie(lane, token) = e.warpRow(kRouteWarps);
  // Every lane of a token's warp reaches the shuffles: the guard is around
  // the whole warp.
  e.when(e.cmp(arith::CmpIPredicate::ult, token, e.dim(x, 0)), [&] {
    int64_t hidden = op.getX().getType().getDimSize(1);
    Value part = e.loop(lane, e.idx(hidden), e.idx(32), {e.f32(0)},
                        [&](Value h, ValueRange it) {
                          Value p = e.mul(e.toF32(e.load(x, {token, h})),
                                          e.toF32(e.load(g, {e.idx(0), h})));
                          return SmallVector<Value>{e.add(it[0], p)};
                        })[0];
    Value gate = e.sigmoid(e.warpSum(part));
    e.when(e.cmp(arith::CmpIPredicate::eq, lane, e.idx(0)),
           [&] { e.store(gate, scale, {token}); });
  });
}

namespace {

/// One candidate of a warp-wide argmax: value, expert and the unbiased
/// score that goes with it. `value` NaN means no candidate.
struct Candidate {
  Value value, index, score;
};

} // namespace

/// Sparsemixer's weight for the pick of logit `m` (the last of `chosen`):
/// `1 / sum exp(s - m)` over the warp's logits `score` of experts in range
/// and not chosen before, whose `(m - s) / max(|s|, m)` is not above twice
/// the layer's router_jitter (a NaN ratio keeps the logit, as in
/// transformers). Every lane ends with the sum.
static Value sparsemixerWeight(Emitter &e, ArrayRef<Value> score,
                               ArrayRef<Value> expert,
                               ArrayRef<Value> inRange,
                               ArrayRef<Value> chosen, Value m,
                               double jitter) {
  ImplicitLocOpBuilder &b = e.b;
  Value margin = e.f32(2.0 * jitter);
  Value sum = e.f32(0);
  for (size_t i = 0; i < score.size(); ++i) {
    Value s = score[i];
    Value keep = inRange[i];
    Value id = arith::IndexCastOp::create(b, b.getI32Type(), expert[i]);
    for (size_t c = 0; c + 1 < chosen.size(); ++c)
      keep = arith::AndIOp::create(
          b, keep, e.cmp(arith::CmpIPredicate::ne, id, chosen[c]));
    Value abs = arith::MaximumFOp::create(b, s, arith::NegFOp::create(b, s));
    Value factor = arith::MaximumFOp::create(b, abs, m);
    Value ratio = e.div(e.sub(m, s), factor);
    Value outside =
        arith::CmpFOp::create(b, arith::CmpFPredicate::OGT, ratio, margin);
    keep = arith::AndIOp::create(
        b, keep,
        arith::XOrIOp::create(b, outside,
                              arith::ConstantIntOp::create(b, 1, 1)));
    sum = e.add(sum,
                arith::SelectOp::create(b, keep, e.exp(e.sub(s, m)), e.f32(0)));
  }
  for (int32_t offset = 16; offset >= 1; offset /= 2)
    sum = e.add(
        sum, gpu::ShuffleOp::create(b, sum, offset, 32, gpu::ShuffleMode::XOR)
                 .getShuffleResult());
  return e.div(e.f32(1), sum);
}

/// One warp per token. Lane l holds experts l, l + 32, ... (`slots` of
/// them) in registers: scores, selection scores with NaN marking what is
/// excluded, and every reduction over experts is the lanes' own values
/// then a butterfly of shuffles, after which every lane holds the result.
static void lowerRoute(moegpu::RouteOp op, Emitter &e) {
  ImplicitLocOpBuilder &b = e.b;
  int64_t experts = op.getNumExperts();
  int64_t topK = op.getTopK(), groups = op.getGroups();
  int64_t chunks = op.getChunks();
  int64_t slots = llvm::divideCeil(experts, 32);
  bool sigmoid = op.getScoring() == moegpu::Scoring::Sigmoid;
  // Sparsemixer (Phi-3.5-MoE) selects on the logits themselves.
  bool mixer = op.getScoring() == moegpu::Scoring::Sparsemixer;
  Value logits = op.getLogits();
  // GPT-OSS's router bias joins the logits before the scoring.
  Value routerBias = op.getRouterBias();
  Value biasArg = op.getScoreBias();
  bool bias = static_cast<bool>(biasArg);
  Value ids = op.getIds(), weights = op.getWeights(), counts = op.getCounts();

  Value lane, token;
  std::tie(lane, token) = e.warpRow(kRouteWarps);
  Type i32 = b.getI32Type();
  Value yes = arith::ConstantIntOp::create(b, 1, 1);
  auto fcmp = [&](arith::CmpFPredicate p, Value l, Value r) -> Value {
    return arith::CmpFOp::create(b, p, l, r);
  };
  auto select = [&](Value c, Value t, Value f) -> Value {
    return arith::SelectOp::create(b, c, t, f);
  };
  auto isNan = [&](Value v) { return fcmp(arith::CmpFPredicate::UNO, v, v); };
  auto shuffle = [&](Value v, int32_t offset) -> Value {
    return gpu::ShuffleOp::create(b, v, offset, 32, gpu::ShuffleMode::XOR)
        .getShuffleResult();
  };
  /// Butterfly reduction of `v` by `combine`: every lane ends with the
  /// same result (each step combines two disjoint halves, commutatively).
  auto allReduce = [&](Value v, function_ref<Value(Value, Value)> combine) {
    for (int32_t offset = 16; offset >= 1; offset /= 2)
      v = combine(v, shuffle(v, offset));
    return v;
  };
  // `other` beats `mine`: a candidate against none, a larger value, or an
  // equal one of a lower expert.
  auto better = [&](const Candidate &other, const Candidate &mine) -> Value {
    Value gt = fcmp(arith::CmpFPredicate::OGT, other.value, mine.value);
    Value tie = arith::AndIOp::create(
        b, fcmp(arith::CmpFPredicate::OEQ, other.value, mine.value),
        e.cmp(arith::CmpIPredicate::slt, other.index, mine.index));
    Value wins = arith::OrIOp::create(
        b, isNan(mine.value), arith::OrIOp::create(b, gt, tie));
    return arith::AndIOp::create(
        b, arith::XOrIOp::create(b, isNan(other.value), yes), wins);
  };
  auto pick = [&](Value c, const Candidate &t, const Candidate &f) {
    return Candidate{select(c, t.value, f.value), select(c, t.index, f.index),
                     select(c, t.score, f.score)};
  };

  e.when(e.cmp(arith::CmpIPredicate::ult, token, e.dim(logits, 0)), [&] {
    // The lane's experts; slots past E hold nothing (NaN selection) and
    // read expert E - 1's values (`clamped`) in its place.
    SmallVector<Value> expert, clamped, inRange, score, sel;
    for (int64_t i = 0; i < slots; ++i) {
      Value ex = e.addi(lane, e.idx(32 * i));
      Value in = 32 * (i + 1) <= experts
                     ? yes
                     : e.cmp(arith::CmpIPredicate::ult, ex, e.idx(experts));
      expert.push_back(ex);
      clamped.push_back(arith::MinUIOp::create(b, ex, e.idx(experts - 1)));
      inRange.push_back(in);
      score.push_back(e.load(logits, {token, clamped.back()}));
      if (routerBias)
        score.back() = arith::AddFOp::create(
            b, score.back(), e.toF32(e.load(routerBias, {clamped.back()})));
    }
    if (sigmoid) {
      for (Value &s : score)
        s = e.sigmoid(s);
    } else if (!mixer) {
      // Softmax: the warp's max (NaN propagates, as in the serial form),
      // then the sum of exponentials.
      Value max = e.f32(-INFINITY);
      for (int64_t i = 0; i < slots; ++i)
        max = arith::MaximumFOp::create(
            b, max, select(inRange[i], score[i], e.f32(-INFINITY)));
      max = allReduce(max, [&](Value l, Value r) -> Value {
        return arith::MaximumFOp::create(b, l, r);
      });
      Value sum = e.f32(0);
      for (int64_t i = 0; i < slots; ++i) {
        score[i] = e.exp(e.sub(score[i], max));
        sum = e.add(sum, select(inRange[i], score[i], e.f32(0)));
      }
      sum = allReduce(sum, [&](Value l, Value r) { return e.add(l, r); });
      for (Value &s : score)
        s = e.div(s, sum);
    }
    // Selection scores: biased, NaN read as -inf (a NaN score never makes
    // the selection repeat or leave the experts), NaN outside E.
    for (int64_t i = 0; i < slots; ++i) {
      Value v = score[i];
      if (bias)
        v = e.add(v, e.load(biasArg, {clamped[i]}));
      sel.push_back(select(inRange[i], e.ordered(v), e.f32(NAN)));
    }

    if (groups > 1) {
      // Group scores (the best, or the sum of the best two), the same in
      // every lane; keep the topk_groups best, lower group on ties.
      int64_t perGroup = experts / groups;
      bool top2 = op.getSumTop2();
      SmallVector<Value> group, groupScore;
      for (int64_t i = 0; i < slots; ++i)
        group.push_back(e.divi(expert[i], e.idx(perGroup)));
      for (int64_t g = 0; g < groups; ++g) {
        Value best1 = e.f32(-INFINITY), best2 = e.f32(-INFINITY);
        for (int64_t i = 0; i < slots; ++i) {
          Value member = arith::AndIOp::create(
              b, inRange[i], e.cmp(arith::CmpIPredicate::eq, group[i], e.idx(g)));
          Value v = select(member, sel[i], e.f32(-INFINITY));
          best2 = arith::MaximumFOp::create(
              b, best2, arith::MinimumFOp::create(b, best1, v));
          best1 = arith::MaximumFOp::create(b, best1, v);
        }
        for (int32_t offset = 16; offset >= 1; offset /= 2) {
          Value o1 = shuffle(best1, offset), o2 = shuffle(best2, offset);
          best2 = arith::MaximumFOp::create(
              b, arith::MinimumFOp::create(b, best1, o1),
              arith::MaximumFOp::create(b, best2, o2));
          best1 = arith::MaximumFOp::create(b, best1, o1);
        }
        groupScore.push_back(e.ordered(top2 ? e.add(best1, best2) : best1));
      }
      SmallVector<Value> kept(groups, arith::ConstantIntOp::create(b, 0, 1));
      int64_t topkGroups = op.getTopkGroups();
      for (int64_t r = 0; r < topkGroups; ++r) {
        Value bestGroup = e.idx(0), bestScore = e.f32(-INFINITY);
        Value found = arith::ConstantIntOp::create(b, 0, 1);
        for (int64_t g = 0; g < groups; ++g) {
          Value gt = fcmp(arith::CmpFPredicate::OGT, groupScore[g], bestScore);
          Value take = arith::AndIOp::create(
              b, arith::XOrIOp::create(b, kept[g], yes),
              arith::OrIOp::create(b, arith::XOrIOp::create(b, found, yes),
                                   gt));
          bestGroup = select(take, e.idx(g), bestGroup);
          bestScore = select(take, groupScore[g], bestScore);
          found = arith::OrIOp::create(b, found, take);
        }
        for (int64_t g = 0; g < groups; ++g)
          kept[g] = arith::OrIOp::create(
              b, kept[g], e.cmp(arith::CmpIPredicate::eq, bestGroup, e.idx(g)));
      }
      for (int64_t i = 0; i < slots; ++i) {
        Value keep = arith::ConstantIntOp::create(b, 0, 1);
        for (int64_t g = 0; g < groups; ++g)
          keep = arith::OrIOp::create(
              b, keep,
              arith::AndIOp::create(
                  b, kept[g],
                  e.cmp(arith::CmpIPredicate::eq, group[i], e.idx(g))));
        sel[i] = select(keep, sel[i], e.f32(NAN));
      }
    }

    // Top-k: k warp-wide argmaxes over the selection scores; the chosen
    // expert is marked NaN in its lane. Weights are the unbiased scores.
    Value none = e.i32(std::numeric_limits<int32_t>::max());
    // The best of the lanes' candidates in `sel`, in every lane; the
    // chosen expert (expert 0 when nothing is left to choose: more picks
    // than unmasked experts, which the layer's verifier rules out, as the
    // serial argmax) is marked NaN in `sel`.
    auto argmax = [&](MutableArrayRef<Value> sel) -> std::pair<Value, Value> {
      Candidate best{e.f32(NAN), none, e.f32(0)};
      for (int64_t i = 0; i < slots; ++i) {
        Candidate mine{sel[i], arith::IndexCastOp::create(b, i32, expert[i]),
                       score[i]};
        best = pick(better(mine, best), mine, best);
      }
      for (int32_t offset = 16; offset >= 1; offset /= 2) {
        Candidate other{shuffle(best.value, offset), shuffle(best.index, offset),
                        shuffle(best.score, offset)};
        best = pick(better(other, best), other, best);
      }
      Value index = select(e.cmp(arith::CmpIPredicate::eq, best.index, none),
                           e.i32(0), best.index);
      for (int64_t i = 0; i < slots; ++i)
        sel[i] = select(
            e.cmp(arith::CmpIPredicate::eq,
                  arith::IndexCastOp::create(b, i32, expert[i]), index),
            e.f32(NAN), sel[i]);
      return {index, best.score};
    };
    bool normalize = op.getNormalize() && !mixer;
    double scale = op.getRoutedScale().convertToDouble();
    auto scaled = [&](Value w) {
      return scale != 1.0 ? e.mul(w, e.f32(scale)) : w;
    };
    // Lane 0 writes the token's choices and counts them for the dispatch.
    Value leader = e.cmp(arith::CmpIPredicate::eq, lane, e.idx(0));
    auto record = [&](Value j, Value index, Value w) {
      e.store(index, ids, {token, j});
      e.store(w, weights, {token, j});
      Value segment = arith::IndexCastOp::create(b, b.getIndexType(), index);
      if (chunks > 1)
        segment =
            e.addi(e.muli(chunkOf(e, token, e.dim(logits, 0), chunks), e.idx(experts)),
                   segment);
      memref::AtomicRMWOp::create(b, arith::AtomicRMWKind::addi, e.i32(1),
                                  counts, ValueRange{segment});
    };
    if (mixer) {
      // Sparsemixer's weights look at every earlier pick: unrolled.
      SmallVector<Value> chosen, chosenScore;
      for (int64_t j = 0; j < topK; ++j) {
        auto [index, best] = argmax(sel);
        chosen.push_back(index);
        chosenScore.push_back(
            sparsemixerWeight(e, score, expert, inRange, chosen, best,
                              op.getJitter().convertToDouble()));
      }
      e.when(leader, [&] {
        for (int64_t j = 0; j < topK; ++j)
          record(e.idx(j), chosen[j], scaled(chosenScore[j]));
      });
      return;
    }
    // One pick an iteration (a loop, not k copies of the warp's argmax:
    // the kernel's code is a third of what it was), the selection scores
    // and the sum of the picks' scores carried. The weights are stored as
    // the scores; normalized, they are divided by the sum after the loop.
    SmallVector<Value> carried(sel);
    carried.push_back(e.f32(0));
    ValueRange picked =
        e.loop(e.idx(0), e.idx(topK), e.idx(1), carried,
               [&](Value j, ValueRange in) -> SmallVector<Value> {
                 SmallVector<Value> next(in.begin(), in.end());
                 auto [index, best] =
                     argmax(MutableArrayRef<Value>(next).take_front(slots));
                 e.when(leader, [&] {
                   record(j, index, normalize ? best : scaled(best));
                 });
                 next.back() = e.add(next.back(), best);
                 return next;
               });
    if (normalize) {
      Value sum = picked.back();
      e.when(leader, [&] {
        e.loop(e.idx(0), e.idx(topK), e.idx(1), {},
               [&](Value j, ValueRange) -> SmallVector<Value> {
                 e.store(scaled(e.div(e.load(weights, {token, j}), sum)),
                         weights, {token, j});
                 return {};
               });
      });
    }
  });
}

void kernels::populateRoutingPatterns(RewritePatternSet &patterns) {
  patterns.add<LowerKernel<moegpu::RouterLogitsOp, lowerRouterLogits>,
               LowerKernel<moegpu::SumSplitsOp, lowerSumSplits>,
               LowerKernel<moegpu::SharedGateOp, lowerSharedGate>,
               LowerKernel<moegpu::RouteOp, lowerRoute>>(patterns.getContext());
}
