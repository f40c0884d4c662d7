//===- Forward.cpp - The forward kernels of a layer -----------------------===//
//
// Part of moe-compiler.
//
// Routing (scores, group-limited top-k), dispatch (count, scan, scatter),
// the grouped GEMMs (left as moegpu.grouped_gemm for the warp-specialized
// lowering) and the combine.
//
//===----------------------------------------------------------------------===//

#include "LayerBuilder.h"

using namespace mlir;
using namespace mlir::moe;
using namespace mlir::moe::lowering;

void LayerBuilder::buildRouterGemm(gpu::GPUFuncOp func) {
  buildGemm(func, moegpu::Epilogue::None, moegpu::GemmLayout::NT,
            /*dense=*/true);
}

void LayerBuilder::buildRouterLogits(gpu::GPUFuncOp func) {
  ImplicitLocOpBuilder b = kernelBody(func);
  Emitter e{b};
  int64_t experts = config.getExperts(), hidden = config.getHidden();
  Value x = func.getArgument(0), wr = func.getArgument(1);
  Value logits = func.getArgument(2);
  Value lane = e.remi(e.thread(), e.idx(32));
  Value token = e.addi(e.muli(e.block(), e.idx(kRouteWarps)),
                       e.divi(e.thread(), e.idx(32)));
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

void LayerBuilder::buildSharedGate(gpu::GPUFuncOp func) {
  ImplicitLocOpBuilder b = kernelBody(func);
  Emitter e{b};
  Value x = func.getArgument(0), g = func.getArgument(1);
  Value scale = func.getArgument(2);
  Value lane = e.remi(e.thread(), e.idx(32));
  Value token = e.addi(e.muli(e.block(), e.idx(kRouteWarps)),
                       e.divi(e.thread(), e.idx(32)));
  // Every lane of a token's warp reaches the shuffles: the guard is around
  // the whole warp.
  e.when(e.cmp(arith::CmpIPredicate::ult, token, e.dim(x, 0)), [&] {
    Value part = e.loop(lane, e.idx(config.getHidden()), e.idx(32), {e.f32(0)},
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

/// One warp per token. Lane l holds experts l, l + 32, ... (`slots` of
/// them) in registers: scores, selection scores with NaN marking what is
/// excluded, and every reduction over experts is the lanes' own values
/// then a butterfly of shuffles, after which every lane holds the result.
void LayerBuilder::buildRoute(gpu::GPUFuncOp func) {
  ImplicitLocOpBuilder b = kernelBody(func);
  Emitter e{b};
  int64_t experts = config.getExperts();
  int64_t topK = config.getTopK(), groups = config.getGroups();
  int64_t slots = llvm::divideCeil(experts, 32);
  bool bias = config.getScoreBias();
  bool sigmoid = config.getScoring() == ScoringFunc::Sigmoid;
  // Sparsemixer (Phi-3.5-MoE) selects on the logits themselves.
  bool mixer = config.getScoring() == ScoringFunc::Sparsemixer;
  unsigned next = 0;
  auto arg = [&]() { return func.getArgument(next++); };
  Value logits = arg();
  // GPT-OSS's router bias joins the logits before the scoring.
  Value routerBias = config.getRouterBias() ? arg() : Value();
  Value biasArg = bias ? arg() : Value();
  Value ids = arg(), weights = arg(), counts = arg();

  Value lane = e.remi(e.thread(), e.idx(32));
  Value token = e.addi(e.muli(e.block(), e.idx(kRouteWarps)),
                       e.divi(e.thread(), e.idx(32)));
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
      int64_t perGroup = config.getExpertsPerGroup();
      bool top2 = config.getGroupScore() == GroupScore::SumTop2;
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
      for (int64_t r = 0; r < config.getTopkGroups(); ++r) {
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
    bool normalize = config.getNormTopkProb() && !mixer;
    double scale = config.getRoutedScaleValue();
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
            e.addi(e.muli(chunkOf(e, token, e.dim(logits, 0)), e.idx(experts)),
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
            sparsemixerWeight(e, score, expert, inRange, chosen, best));
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

/// Sparsemixer's weight for the pick of logit `m` (the last of `chosen`):
/// `1 / sum exp(s - m)` over the warp's logits `score` of experts in range
/// and not chosen before, whose `(m - s) / max(|s|, m)` is not above twice
/// the layer's router_jitter (a NaN ratio keeps the logit, as in
/// transformers). Every lane ends with the sum.
Value LayerBuilder::sparsemixerWeight(Emitter &e, ArrayRef<Value> score,
                                      ArrayRef<Value> expert,
                                      ArrayRef<Value> inRange,
                                      ArrayRef<Value> chosen, Value m) {
  ImplicitLocOpBuilder &b = e.b;
  Value margin = e.f32(2.0 * config.getRouterJitterValue());
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

/// Token t's chunk of T tokens in `chunks`: chunk c holds tokens
/// [floor(T c / C), floor(T (c + 1) / C)), as the host target's chunks, so
/// t's is the largest c with T c < (t + 1) C: ((t + 1) C - 1) / T.
Value LayerBuilder::chunkOf(Emitter &e, Value token, Value tokens) {
  Value scaled = e.muli(e.addi(token, e.idx(1)), e.idx(chunks));
  return e.divi(e.subi(scaled, e.idx(1)), tokens);
}

/// Each expert's segment of the dispatched rows, aligned: offsets are the
/// exclusive prefix sums of the aligned counts. One CTA: thread t sums the
/// aligned counts of its run of ceil(E / kScanThreads) experts, a
/// Hillis-Steele scan over the threads' sums in shared memory gives each
/// run's start, and each thread then writes its experts' offsets and
/// cursors.
void LayerBuilder::buildScan(gpu::GPUFuncOp func) {
  ImplicitLocOpBuilder b = kernelBody(func);
  Emitter e{b};
  Value ids = func.getArgument(0), counts = func.getArgument(1);
  Value offsets = func.getArgument(2), cursors = func.getArgument(3);
  Value sums = func.getWorkgroupAttributions()[0];
  // The segments: experts, or (chunk, expert) pairs chunk-major.
  int64_t experts = chunks * config.getExperts();
  int64_t run = llvm::divideCeil(experts, kScanThreads);
  Value tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
  Value begin = arith::MinUIOp::create(
      b, arith::MulIOp::create(b, tid, e.idx(run)), e.idx(experts));
  Value end = arith::MinUIOp::create(
      b, arith::AddIOp::create(b, begin, e.idx(run)), e.idx(experts));
  Value a = e.i32(alignment);
  auto aligned = [&](Value ex) {
    Value c = e.load(counts, {ex});
    return arith::MulIOp::create(
        b,
        arith::DivUIOp::create(
            b, arith::AddIOp::create(b, c, e.i32(alignment - 1)), a),
        a);
  };
  Value local = e.loop(begin, end, e.idx(1), {e.i32(0)},
                       [&](Value ex, ValueRange it) {
                         return SmallVector<Value>{
                             arith::AddIOp::create(b, it[0], aligned(ex))};
                       })[0];
  e.store(local, sums, {tid});
  gpu::BarrierOp::create(b);
  // Inclusive scan over the threads' sums: log2(kScanThreads) steps, each
  // reading before any thread writes.
  for (int64_t d = 1; d < kScanThreads; d *= 2) {
    Value has = e.cmp(arith::CmpIPredicate::uge, tid, e.idx(d));
    Value from = arith::SelectOp::create(
        b, has, arith::SubIOp::create(b, tid, e.idx(d)), e.idx(0));
    Value add =
        arith::SelectOp::create(b, has, e.load(sums, {from}), e.i32(0));
    gpu::BarrierOp::create(b);
    e.store(arith::AddIOp::create(b, e.load(sums, {tid}), add), sums, {tid});
    gpu::BarrierOp::create(b);
  }
  Value isFirst = e.cmp(arith::CmpIPredicate::eq, tid, e.idx(0));
  Value start = arith::SelectOp::create(
      b, isFirst, e.i32(0),
      e.load(sums, {arith::SelectOp::create(
                       b, isFirst, e.idx(0),
                       arith::SubIOp::create(b, tid, e.idx(1)))}));
  e.loop(begin, end, e.idx(1), {start}, [&](Value ex, ValueRange it) {
    e.store(it[0], cursors, {ex});
    Value next = arith::AddIOp::create(b, it[0], aligned(ex));
    e.store(next, offsets, {arith::AddIOp::create(b, ex, e.idx(1))});
    return SmallVector<Value>{next};
  });
  e.when(isFirst, [&] {
    e.store(e.i32(0), offsets, {e.idx(0)});
    if (func.getNumArguments() > 4) {
      Value shared = func.getArgument(4);
      e.store(e.i32(0), shared, {e.idx(0)});
      e.store(arith::IndexCastOp::create(b, b.getI32Type(),
                                         memref::DimOp::create(b, ids, 0)),
              shared, {e.idx(1)});
    }
  });
}

void LayerBuilder::buildScatter(gpu::GPUFuncOp func) {
  ImplicitLocOpBuilder b = kernelBody(func);
  Emitter e{b};
  Value x = func.getArgument(0), ids = func.getArgument(1);
  Value weights = func.getArgument(2), cursors = func.getArgument(3);
  Value rows = func.getArgument(4), rowMap = func.getArgument(5);
  Value rowWeight = func.getArgument(6);
  Value pos = func.getWorkgroupAttributions()[0];
  int64_t topK = config.getTopK();
  Value i = gpu::BlockIdOp::create(b, gpu::Dimension::x);
  Value tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
  Value t = arith::DivUIOp::create(b, i, e.idx(topK));
  Value j = arith::RemUIOp::create(b, i, e.idx(topK));
  e.when(e.cmp(arith::CmpIPredicate::eq, tid, e.idx(0)), [&] {
    Value id = e.load(ids, {t, j});
    Value inRange = arith::AndIOp::create(
        b, e.cmp(arith::CmpIPredicate::sge, id, e.i32(0)),
        e.cmp(arith::CmpIPredicate::slt, id, e.i32(config.getExperts())));
    auto ifOp = scf::IfOp::create(b, b.getI32Type(), inRange, true);
    {
      ImplicitLocOpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(ifOp.thenBlock());
      Value segment = arith::IndexCastOp::create(b, b.getIndexType(), id);
      if (chunks > 1)
        segment = e.addi(e.muli(chunkOf(e, t, e.dim(ids, 0)),
                                e.idx(config.getExperts())),
                         segment);
      Value p = memref::AtomicRMWOp::create(
          b, arith::AtomicRMWKind::addi, e.i32(1), cursors,
          ValueRange{segment});
      // With scale_input the row carries the weight and the down
      // projection's row scale is 1.
      e.store(config.getScaleInput() ? e.f32(1) : e.load(weights, {t, j}),
              rowWeight, {arith::IndexCastOp::create(b, b.getIndexType(), p)});
      scf::YieldOp::create(b, p);
      b.setInsertionPointToStart(ifOp.elseBlock());
      scf::YieldOp::create(b, e.i32(-1));
    }
    e.store(ifOp.getResult(0), rowMap, {t, j});
    e.store(ifOp.getResult(0), pos, {e.idx(0)});
  });
  gpu::BarrierOp::create(b);
  Value p = e.load(pos, {e.idx(0)});
  // The token's e4m3 codes and scales, as quantize_x made them, go to the
  // row.
  bool codes = dispatchesCodes();
  e.when(e.cmp(arith::CmpIPredicate::sge, p, e.i32(0)), [&] {
    Value row = arith::IndexCastOp::create(b, b.getIndexType(), p);
    if (codes) {
      Value xScale = func.getArgument(7), rowScale = func.getArgument(8);
      int64_t hidden = config.getHidden();
      auto chunk = VectorType::get(
          {kChunkBytes}, cast<MemRefType>(x.getType()).getElementType());
      e.loop(e.muli(tid, e.idx(kChunkBytes)), e.idx(hidden),
             e.idx(kRowThreads * kChunkBytes), {}, [&](Value h, ValueRange) {
               vector::StoreOp::create(
                   b,
                   vector::LoadOp::create(b, chunk, x, ValueRange{t, h}, false,
                                          b.getI64IntegerAttr(kChunkBytes)),
                   rows, ValueRange{row, h}, false,
                   b.getI64IntegerAttr(kChunkBytes));
               return SmallVector<Value>{};
             });
      e.loop(tid, e.idx(fp8Blocks(hidden)), e.idx(kRowThreads), {},
             [&](Value c, ValueRange) {
               e.store(e.load(xScale, {t, c}), rowScale, {row, c});
               return SmallVector<Value>{};
             });
      return;
    }
    // Llama 4 (scale_input): x[t] times the weight rounded to the element
    // type, the product in f32 rounded once more.
    Type elt = config.getDtype();
    Value scale;
    if (config.getScaleInput()) {
      scale = e.load(weights, {t, j});
      if (!elt.isF32())
        scale = e.toF32(arith::TruncFOp::create(b, elt, scale));
    }
    auto scaled = [&](Value v) -> Value {
      if (!scale)
        return v;
      auto vec = dyn_cast<VectorType>(v.getType());
      Type f32 = vec ? Type(VectorType::get(vec.getShape(), b.getF32Type()))
                     : b.getF32Type();
      Value s = vec ? Value(vector::BroadcastOp::create(b, f32, scale)) : scale;
      Value wide = elt.isF32() ? v : Value(arith::ExtFOp::create(b, f32, v));
      Value product = arith::MulFOp::create(b, wide, s);
      return elt.isF32()
                 ? product
                 : Value(arith::TruncFOp::create(b, v.getType(), product));
    };
    forRowChunks(e, tid, [&](Value h, Type chunk) {
      if (auto vec = dyn_cast_if_present<VectorType>(chunk))
        vector::StoreOp::create(
            b,
            scaled(vector::LoadOp::create(b, vec, x, ValueRange{t, h}, false,
                                          b.getI64IntegerAttr(kChunkBytes))),
            rows, ValueRange{row, h}, false, b.getI64IntegerAttr(kChunkBytes));
      else
        e.store(scaled(e.load(x, {t, h})), rows, {row, h});
    });
  });
}

/// Runs `body(h, chunk)` for this thread's share of a row of `hidden`
/// 2-byte elements: 16-byte chunks (vector<8>) when whole rows are, every
/// kRowThreads-th chunk from the thread's own; single elements otherwise.
void LayerBuilder::forRowChunks(Emitter &e, Value tid,
                                function_ref<void(Value, Type)> body) {
  ImplicitLocOpBuilder &b = e.b;
  int64_t hidden = config.getHidden();
  int64_t per = kChunkBytes / 2;
  if (hidden % per != 0) {
    e.loop(tid, e.idx(hidden), e.idx(kRowThreads), {},
           [&](Value h, ValueRange) {
             body(h, Type());
             return SmallVector<Value>{};
           });
    return;
  }
  auto chunk = VectorType::get({per}, config.getDtype());
  e.loop(arith::MulIOp::create(b, tid, e.idx(per)), e.idx(hidden),
         e.idx(kRowThreads * per), {}, [&](Value h, ValueRange) {
           body(h, chunk);
           return SmallVector<Value>{};
         });
}

void LayerBuilder::buildCombine(gpu::GPUFuncOp func) {
  ImplicitLocOpBuilder b = kernelBody(func);
  Emitter e{b};
  Value down = func.getArgument(0), rowMap = func.getArgument(1);
  bool shared = config.hasSharedExperts();
  bool gated = shared && config.getSharedGate();
  Value sharedOut = shared ? func.getArgument(2) : Value();
  Value sharedScale = gated ? func.getArgument(3) : Value();
  unsigned next = 2 + (shared ? 1 : 0) + (gated ? 1 : 0);
  Value outBias = config.getOutputBias() ? func.getArgument(next++) : Value();
  Value y = func.getArgument(next);
  Type outType = cast<MemRefType>(y.getType()).getElementType();
  Value t = gpu::BlockIdOp::create(b, gpu::Dimension::x);
  Value tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
  auto align = b.getI64IntegerAttr(kChunkBytes);
  forRowChunks(e, tid, [&](Value h, Type chunk) {
    // The token's k rows, summed in f32 over a chunk of columns (or one).
    auto vec = dyn_cast_if_present<VectorType>(chunk);
    Type accType = vec ? Type(VectorType::get(vec.getShape(), b.getF32Type()))
                       : b.getF32Type();
    auto loadF32 = [&](Value memref, Value row) -> Value {
      if (!vec)
        return e.toF32(e.load(memref, {row, h}));
      Value loaded = vector::LoadOp::create(b, vec, memref, ValueRange{row, h},
                                            false, align);
      return arith::ExtFOp::create(b, accType, loaded);
    };
    Value zero = vec ? Value(arith::ConstantOp::create(
                           b, DenseElementsAttr::get(cast<VectorType>(accType),
                                                     b.getF32FloatAttr(0))))
                     : e.f32(0);
    Value acc = e.loop(
        e.idx(0), e.idx(config.getTopK()), e.idx(1), {zero},
        [&](Value j, ValueRange it) {
          Value r = e.load(rowMap, {t, j});
          auto ifOp = scf::IfOp::create(
              b, accType, e.cmp(arith::CmpIPredicate::sge, r, e.i32(0)), true);
          {
            ImplicitLocOpBuilder::InsertionGuard guard(b);
            b.setInsertionPointToStart(ifOp.thenBlock());
            Value v = loadF32(
                down, arith::IndexCastOp::create(b, b.getIndexType(), r));
            scf::YieldOp::create(
                b, ValueRange{arith::AddFOp::create(b, it[0], v)});
            b.setInsertionPointToStart(ifOp.elseBlock());
            scf::YieldOp::create(b, it[0]);
          }
          return SmallVector<Value>{ifOp.getResult(0)};
        })[0];
    if (shared) {
      Value out = loadF32(sharedOut, t);
      if (gated) {
        Value g = e.load(sharedScale, {t});
        if (vec)
          g = vector::BroadcastOp::create(b, accType, g);
        out = arith::MulFOp::create(b, out, g);
      }
      acc = arith::AddFOp::create(b, acc, out);
    }
    // JetMoE's output bias, added as transformers does: to the output
    // rounded to the layer's dtype, the sum rounded again.
    if (outBias) {
      Value rounded = acc;
      Value bias = vec ? Value(vector::LoadOp::create(
                             b, vec, outBias, ValueRange{h}, false, align))
                       : e.load(outBias, {h});
      if (!outType.isF32()) {
        Type accOut =
            vec ? Type(VectorType::get(vec.getShape(), outType)) : outType;
        Value narrow = arith::TruncFOp::create(b, accOut, acc);
        rounded = arith::ExtFOp::create(b, accType, narrow);
        bias = arith::ExtFOp::create(b, accType, bias);
      }
      acc = arith::AddFOp::create(b, rounded, bias);
    }
    if (vec)
      vector::StoreOp::create(
          b,
          arith::TruncFOp::create(b, VectorType::get(vec.getShape(), outType),
                                  acc),
          y, ValueRange{t, h}, false, align);
    else
      e.store(arith::TruncFOp::create(b, outType, acc), y, {t, h});
  });
}

void LayerBuilder::buildGemm(gpu::GPUFuncOp func, moegpu::Epilogue epilogue,
                             moegpu::GemmLayout layout, bool dense, Value bias,
                             FloatAttr alpha, FloatAttr limit) {
  OpBuilder b = builderAt(func.front().getTerminator());
  unsigned c = dense ? 2 : 3;
  Value scale = epilogue == moegpu::Epilogue::RowScale
                    ? func.getArgument(c + 1)
                    : Value();
  moegpu::GroupedGemmOp::create(
      b, layer.getLoc(), func.getArgument(0), func.getArgument(1),
      dense ? Value() : func.getArgument(2), func.getArgument(c), scale, bias,
      /*aScale=*/Value(), /*bScale=*/Value(),
      moegpu::EpilogueAttr::get(ctx, epilogue),
      moegpu::GemmLayoutAttr::get(ctx, layout), moegpu::TileAttr(),
      moegpu::SmRangeAttr(), alpha, limit, /*roundedInputs=*/UnitAttr());
}

void LayerBuilder::buildExpertGemm(gpu::GPUFuncOp func,
                                   moegpu::Epilogue epilogue) {
  Value bias = config.getExpertBias()
                   ? func.getArgument(func.getNumArguments() - 1)
                   : Value();
  // GPT-OSS's clamped SwiGLU.
  FloatAttr alpha, limit;
  if (epilogue == moegpu::Epilogue::SwiGLU && config.isClamped()) {
    Builder attrs(ctx);
    alpha = attrs.getF64FloatAttr(config.getSwigluAlphaValue());
    limit = attrs.getF64FloatAttr(config.getSwigluLimitValue());
  }
  buildGemm(func, epilogue, moegpu::GemmLayout::NT, /*dense=*/false, bias,
            alpha, limit);
}

/// One warp per row of `in` ([R, K], the layer's 16-bit type): each 128
/// channels become e4m3 codes in `out` and one f32 scale in `scale`
/// ([R, ceil(K / 128)]), as the host quantizes them (moe.grouped_matmul):
/// with `a` the block's largest magnitude (at least kFp8MinAmax), the
/// codes are e4m3(v * (448 / a)), rounded to nearest even and saturated,
/// and the scale a / 448. Lane l owns the block's channels 4l .. 4l + 3.
/// With `offsets`, the rows [offsets[0], offsets[last]) are quantized,
/// else all of in's rows.
void LayerBuilder::buildQuantize(gpu::GPUFuncOp func, bool segmented) {
  ImplicitLocOpBuilder b = kernelBody(func);
  Emitter e{b};
  unsigned next = 0;
  Value in = func.getArgument(next++);
  Value offsets = segmented ? func.getArgument(next++) : Value();
  Value out = func.getArgument(next++), scale = func.getArgument(next++);
  auto inType = cast<MemRefType>(in.getType());
  int64_t depth = inType.getDimSize(1);
  int64_t blocks = llvm::divideCeil(depth, kFp8Block);
  Value lane = e.remi(e.thread(), e.idx(32));
  Value row = e.addi(e.muli(e.block(), e.idx(kQuantizeWarps)),
                     e.divi(e.thread(), e.idx(32)));
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
            /*relu=*/false, Float8E4M3FNType::get(ctx));
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

void LayerBuilder::buildFp8Gemm(gpu::GPUFuncOp func, moegpu::Epilogue epilogue,
                                bool expert) {
  OpBuilder b = builderAt(func.front().getTerminator());
  unsigned count = func.getNumArguments();
  Value rowScale =
      epilogue == moegpu::Epilogue::RowScale ? func.getArgument(4) : Value();
  FloatAttr alpha, limit;
  if (expert && epilogue == moegpu::Epilogue::SwiGLU && config.isClamped()) {
    Builder attrs(ctx);
    alpha = attrs.getF64FloatAttr(config.getSwigluAlphaValue());
    limit = attrs.getF64FloatAttr(config.getSwigluLimitValue());
  }
  moegpu::GroupedGemmOp::create(
      b, layer.getLoc(), func.getArgument(0), func.getArgument(1),
      func.getArgument(2), func.getArgument(3), rowScale, /*bias=*/Value(),
      func.getArgument(count - 2), func.getArgument(count - 1),
      moegpu::EpilogueAttr::get(ctx, epilogue),
      moegpu::GemmLayoutAttr::get(ctx, moegpu::GemmLayout::NT),
      moegpu::TileAttr(), moegpu::SmRangeAttr(), alpha, limit,
      /*roundedInputs=*/epilogue == moegpu::Epilogue::SwiGLU ? b.getUnitAttr()
                                                             : UnitAttr());
}
