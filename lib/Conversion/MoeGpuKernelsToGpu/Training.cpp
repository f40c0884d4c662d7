//===- Training.cpp - The training step's SIMT kernels --------------------===//
//
// Part of moe-compiler.
//
// One CTA per dispatched row, token or weight row, its threads striding
// over the row's columns, or a thread per element; sums in f32. Names follow
// the host's training step (moe/Transforms/Autodiff.h), whose gradients are
// checked against finite differences; these kernels compute the same
// quantities.
//
//===----------------------------------------------------------------------===//

#include "Lowering.h"
#include "moe/Transforms/Autodiff.h"

#include <limits>

using namespace mlir;
using namespace mlir::moe;
using namespace mlir::moe::kernels;

Value kernels::gateRow(Emitter &e, Value f) {
  Value lo = e.remi(f, e.idx(kGateUpBlock));
  Value hi = e.divi(f, e.idx(kGateUpBlock));
  return e.addi(e.muli(hi, e.idx(2 * kGateUpBlock)), lo);
}

/// Whether row `r` lies in [groups[0], groups[last]): the rows of the
/// groups (rows past them are capacity nobody wrote; with chunked
/// exchanges, rows before them are other chunks').
static Value inGroups(Emitter &e, Value groups, Value r) {
  int64_t count = cast<MemRefType>(groups.getType()).getDimSize(0) - 1;
  Value first = e.index(e.load(groups, {e.idx(0)}));
  Value end = e.index(e.load(groups, {e.idx(count)}));
  return arith::AndIOp::create(e.b, e.cmp(arith::CmpIPredicate::uge, r, first),
                               e.cmp(arith::CmpIPredicate::ult, r, end));
}

/// The group of row `r` (in [groups[0], groups[G])): the last g with
/// groups[g] <= r, by binary search (an empty group before it starts where
/// it does).
static Value expertOfRow(Emitter &e, Value groups, Value r) {
  int64_t count = cast<MemRefType>(groups.getType()).getDimSize(0) - 1;
  Value pos = e.idx(0);
  int64_t step = 1;
  while (step * 2 <= count - 1)
    step *= 2;
  for (; step >= 1 && count > 1; step /= 2) {
    Value cand = e.addi(pos, e.idx(step));
    Value at = arith::MinUIOp::create(e.b, cand, e.idx(count - 1));
    Value fits = arith::AndIOp::create(
        e.b, e.cmp(arith::CmpIPredicate::ule, cand, e.idx(count - 1)),
        e.cmp(arith::CmpIPredicate::ule, e.index(e.load(groups, {at})), r));
    pos = arith::SelectOp::create(e.b, fits, cand, pos);
  }
  return pos;
}

/// body(slot) for dispatched row r of `offsets`' groups that holds an
/// assignment, slot = t * k + j of assignment (t, j) (row_token[r] - 1);
/// padding rows have none.
static void forAssignedRow(Emitter &e, Value rowToken, Value offsets, Value r,
                           function_ref<void(Value)> body) {
  e.when(inGroups(e, offsets, r), [&] {
    Value code = e.load(rowToken, {r});
    e.when(e.cmp(arith::CmpIPredicate::sgt, code, e.i32(0)),
           [&] { body(e.index(arith::SubIOp::create(e.b, code, e.i32(1)))); });
  });
}

namespace {
/// One AdamW step with bias-corrected moments on element values: the new
/// master, first and second moments.
struct AdamWValues {
  Value p, m, v;
};

/// AdamW's hyperparameters, read from `hyper` once a kernel (before its
/// loops), and the bias corrections 1 - beta^step (powers by squaring).
struct AdamWHyper {
  Value lr, beta1, beta2, eps, decay, rest1, rest2, c1, c2;
};

AdamWHyper loadAdamWHyper(Emitter &e, Value hyper) {
  auto h = [&](TrainHyper k) { return e.load(hyper, {e.idx(k)}); };
  AdamWHyper a;
  a.lr = h(kHyperLearningRate);
  Value step = h(kHyperStep);
  a.beta1 = h(kHyperBeta1);
  a.beta2 = h(kHyperBeta2);
  a.eps = h(kHyperEpsilon);
  a.decay = h(kHyperWeightDecay);
  Value one = e.f32(1.0);
  a.rest1 = e.sub(one, a.beta1);
  a.rest2 = e.sub(one, a.beta2);
  Value power1 = e.powi(a.beta1, step);
  a.c1 = e.sub(one, power1);
  Value power2 = e.powi(a.beta2, step);
  a.c2 = e.sub(one, power2);
  return a;
}

/// One AdamW step with bias-corrected moments on element values.
AdamWValues adamwStep(Emitter &e, const AdamWHyper &a, Value p, Value m,
                      Value v, Value g) {
  // One emitting call a statement (the IR's order independent of the C++
  // compiler's order of arguments).
  Value keep1 = e.mul(a.beta1, m);
  Value m2 = e.add(keep1, e.mul(a.rest1, g));
  Value keep2 = e.mul(a.beta2, v);
  Value square = e.mul(g, g);
  Value v2 = e.add(keep2, e.mul(a.rest2, square));
  Value mHat = e.div(m2, a.c1);
  Value vHat = e.div(v2, a.c2);
  Value root = e.sqrt(vHat);
  Value ratio = e.div(mHat, e.add(root, a.eps));
  Value update = e.add(ratio, e.mul(a.decay, p));
  return {e.sub(p, e.mul(a.lr, update)), m2, v2};
}

/// A new moment as `moment` keeps it (rounded to the nearest even bf16
/// for bf16 moments, as DeepSeek-V3 kept them; the master took the
/// unrounded value) and the value a later step reads back (widened).
struct StoredMoment {
  Value stored, readBack;
};

StoredMoment storedMoment(Emitter &e, Value moment, Value x) {
  Type type = cast<MemRefType>(moment.getType()).getElementType();
  Value stored = e.truncTo(type, x);
  return {stored, e.toF32(stored)};
}

/// The order-preserving i32 of a magnitude: the f32 bits of |x| (a NaN
/// above every number); with `signedInf`, +inf's bits for a negative x
/// (a second moment below 0 bounds nothing).
Value magnitudeBits(Emitter &e, Value x, bool signedInf = false) {
  ImplicitLocOpBuilder &b = e.b;
  Value bits = arith::BitcastOp::create(b, b.getI32Type(), x);
  Value mask = e.i32(0x7fffffff);
  Value magnitude = arith::AndIOp::create(b, bits, mask);
  if (!signedInf)
    return magnitude;
  Value zero = e.f32(0);
  Value negative = arith::CmpFOp::create(b, arith::CmpFPredicate::OLT, x, zero);
  Value inf = e.i32(0x7f800000);
  return arith::SelectOp::create(b, negative, inf, magnitude);
}

Value maxBits(Emitter &e, Value l, Value r) {
  return arith::MaxUIOp::create(e.b, l, r);
}

/// memref[indices] = max(memref[indices], the warp's largest `v`) (i32,
/// unsigned): a butterfly of shuffles, one atomic per warp.
void warpAtomicMax(Emitter &e, Value v, Value memref, ValueRange indices) {
  for (int32_t offset = 16; offset >= 1; offset /= 2) {
    Value other =
        gpu::ShuffleOp::create(e.b, v, offset, 32, gpu::ShuffleMode::XOR)
            .getShuffleResult();
    v = maxBits(e, v, other);
  }
  Value lane = e.remi(e.thread(), e.idx(32));
  Value first = e.cmp(arith::CmpIPredicate::eq, lane, e.idx(0));
  e.when(first, [&] {
    memref::AtomicRMWOp::create(e.b, arith::AtomicRMWKind::maxu, v, memref,
                                indices);
  });
}

/// Whether weight `w`'s AdamW step is finite everywhere, from its bounds
/// (largest |p|, |m| and v, f32 bits in bounds[w]), its largest |g|
/// (gradMax[w]) and the hyperparameters, each value of the step bounded
/// as the step computes it: |m'| <= b1 M + (1 - b1) G, v' <= b2 V + (1 -
/// b2) G^2, the corrections' quotients, |m^ / (sqrt(v^) + eps)| <= M^ /
/// eps, |p'| <= P + |lr| (M^ / eps + |wd| P). Every bound below a quarter
/// of the largest float (room for the f32 rounding of both sides, and for
/// a bf16 moment's rounding, whose largest finite value is above half of
/// f32's), the betas in [0, 1] and eps > 0: no value overflows and none
/// is 0/0. A NaN anywhere fails a comparison: not shown finite.
Value boundsShowFinite(Emitter &e, const AdamWHyper &a, Value bounds,
                       Value gradMax, int64_t w) {
  ImplicitLocOpBuilder &b = e.b;
  auto bound = [&](int64_t i) {
    Value bits = e.load(bounds, {e.idx(w), e.idx(i)});
    return arith::BitcastOp::create(b, b.getF32Type(), bits).getResult();
  };
  auto le = [&](Value l, Value r) {
    return arith::CmpFOp::create(b, arith::CmpFPredicate::OLE, l, r)
        .getResult();
  };
  auto magnitude = [&](Value x) {
    Value negated = arith::NegFOp::create(b, x);
    return arith::MaximumFOp::create(b, x, negated).getResult();
  };
  Value p = bound(0), m = bound(1), v = bound(2);
  Value gBits = e.load(gradMax, {e.idx(w)});
  Value g = arith::BitcastOp::create(b, b.getF32Type(), gBits);
  Value zero = e.f32(0), one = e.f32(1.0);
  Value limit = e.f32(std::numeric_limits<float>::max() / 4);
  // One emitting call a statement: the IR's order must not depend on the
  // order in which a C++ compiler evaluates arguments.
  Value keep1 = e.mul(a.beta1, m);
  Value m2 = e.add(keep1, e.mul(a.rest1, g));
  Value g2 = e.mul(g, g);
  Value keep2 = e.mul(a.beta2, v);
  Value v2 = e.add(keep2, e.mul(a.rest2, g2));
  Value mHat = e.div(m2, a.c1);
  Value vHat = e.div(v2, a.c2);
  Value ratio = e.div(mHat, a.eps);
  Value decayAbs = magnitude(a.decay);
  Value update = e.add(ratio, e.mul(decayAbs, p));
  Value lrAbs = magnitude(a.lr);
  Value p2 = e.add(p, e.mul(lrAbs, update));
  SmallVector<Value> conditions{le(zero, a.beta1), le(a.beta1, one),
                                le(zero, a.beta2), le(a.beta2, one)};
  for (Value positive : {a.eps, a.c1, a.c2})
    conditions.push_back(
        arith::CmpFOp::create(b, arith::CmpFPredicate::OGT, positive, zero));
  for (Value x : {p, m, v, g, m2, g2, v2, mHat, vHat, update, p2})
    conditions.push_back(le(x, limit));
  Value ok = conditions.front();
  for (Value c : ArrayRef<Value>(conditions).drop_front())
    ok = arith::AndIOp::create(b, ok, c);
  return ok;
}
} // namespace

/// Stores f32 `x`, the master's element `i` (row-major; at indices
/// `master`), rounded into its compute copy `copy` where `layout` puts it.
static void storeCopy(Emitter &e, Value copy, moegpu::CopyLayout layout,
                      Value i, ArrayRef<Value> master, Value x) {
  auto type = cast<MemRefType>(copy.getType());
  Value rounded = e.truncTo(type.getElementType(), x);
  if (layout == moegpu::CopyLayout::Same) {
    e.store(rounded, copy, e.delinearize(i, copy));
    return;
  }
  // A packed [G, 2F, H] / [G, 2F] copy: the master's row f is packed row
  // gateRow(f), or kGateUpBlock further for the up half.
  SmallVector<Value> at(master);
  if (at.size() + 1 == static_cast<size_t>(type.getRank()))
    at.insert(at.begin(), e.idx(0));
  Value row = gateRow(e, at[1]);
  if (layout == moegpu::CopyLayout::UpRows)
    row = e.addi(row, e.idx(kGateUpBlock));
  at[1] = row;
  e.store(rounded, copy, at);
}

static moegpu::CopyLayout layoutOf(ArrayAttr layouts, size_t i) {
  return cast<moegpu::CopyLayoutAttr>(layouts[i]).getValue();
}

/// Each master's compute copy, a grid-stride loop per master; nothing when
/// `valid` says the copies are current.
static void lowerComputeCopies(moegpu::ComputeCopiesOp op, Emitter &e) {
  auto body = [&] {
    // The state's bounds, zeroed for update_check to take anew.
    if (Value bounds = op.getBounds()) {
      int64_t n = cast<MemRefType>(bounds.getType()).getNumElements();
      e.gridStride(n, [&](Value j) {
        Value zero = e.i32(0);
        e.store(zero, bounds, e.delinearize(j, bounds));
      });
    }
    for (auto [i, master] : llvm::enumerate(op.getMasters())) {
      Value copy = op.getCopies()[i];
      moegpu::CopyLayout layout = layoutOf(op.getLayouts(), i);
      e.gridStride(cast<MemRefType>(master.getType()).getNumElements(),
                   [&](Value j) {
                     SmallVector<Value> at = e.delinearize(j, master);
                     Value x = e.load(master, at);
                     storeCopy(e, copy, layout, j, at, x);
                   });
    }
  };
  if (!op.getValid())
    return body();
  // One emitting call a statement (the IR's order independent of the C++
  // compiler's order of arguments).
  Value flag = e.load(op.getValid(), {e.idx(0)});
  Value zero = e.f32(0);
  Value stale =
      arith::CmpFOp::create(e.b, arith::CmpFPredicate::OEQ, flag, zero);
  e.when(stale, body);
}

/// dy = 2 (y - target) / (T * H); loss += sum of (y - target)^2 / (T * H),
/// T every rank's tokens (hyper[kHyperTokens], which the runtime fills).
static void lowerMseLoss(moegpu::MseLossOp op, Emitter &e) {
  Value y = op.getY(), target = op.getTarget(), hyper = op.getHyper();
  Value dy = op.getDy(), loss = op.getLoss();
  int64_t hidden = op.getY().getType().getDimSize(1);
  Value t = e.block();
  Value count = e.mul(e.load(hyper, {e.idx(kHyperTokens)}),
                      e.f32(static_cast<double>(hidden)));
  Value partial = e.loop(
      e.thread(), e.idx(hidden), e.idx(kRowThreads), {e.f32(0)},
      [&](Value h, ValueRange it) {
        Value d = e.sub(e.toF32(e.load(y, {t, h})), e.load(target, {t, h}));
        e.store(e.div(e.mul(e.f32(2.0), d), count), dy, {t, h});
        return SmallVector<Value>{e.add(it[0], e.div(e.mul(d, d), count))};
      })[0];
  e.warpAtomicAdd(partial, loss, {e.idx(0)});
}

/// row_token[r] = t * k + j + 1 for the row of assignment (t, j); padding
/// rows keep 0.
static void lowerRowTokens(moegpu::RowTokensOp op, Emitter &e) {
  ImplicitLocOpBuilder &b = e.b;
  Value rowMap = op.getRowMap(), rowToken = op.getRowToken();
  int64_t topK = op.getRowMap().getType().getDimSize(1);
  Value i = e.globalThread(kCountThreads);
  Value n = e.muli(e.dim(rowMap, 0), e.idx(topK));
  e.when(e.cmp(arith::CmpIPredicate::ult, i, n), [&] {
    Value r = e.load(rowMap, {e.divi(i, e.idx(topK)), e.remi(i, e.idx(topK))});
    e.when(e.cmp(arith::CmpIPredicate::sge, r, e.i32(0)), [&] {
      Value code =
          arith::IndexCastOp::create(b, b.getI32Type(), e.addi(i, e.idx(1)));
      e.store(code, rowToken, {e.index(r)});
    });
  });
}

/// row_dy[r] = dy[t] (in the compute type) for every dispatched row r of
/// token t (padding rows stay as the memset left them: zero).
static void lowerGatherRowDy(moegpu::GatherRowDyOp op, Emitter &e) {
  ImplicitLocOpBuilder &b = e.b;
  Value dy = op.getDy(), rowToken = op.getRowToken();
  Value offsets = op.getOffsets(), rowDy = op.getRowDy();
  int64_t topK = op.getTopK(), hidden = op.getDy().getType().getDimSize(1);
  Value r = e.block();
  forAssignedRow(e, rowToken, offsets, r, [&](Value slot) {
    Value t = e.divi(slot, e.idx(topK));
    Type half = cast<MemRefType>(rowDy.getType()).getElementType();
    e.columns(hidden, [&](Value h) {
      e.store(arith::TruncFOp::create(b, half, e.load(dy, {t, h})), rowDy,
              {r, h});
    });
  });
}

/// dtw[t, j] = dtw_row[r] for the row r of assignment (t, j).
static void lowerScatterRowWeightGrad(moegpu::ScatterRowWeightGradOp op, Emitter &e) {
  Value rowGrad = op.getRowGrad(), rowToken = op.getRowToken();
  Value offsets = op.getOffsets(), dtw = op.getDtw();
  int64_t topK = op.getDtw().getType().getDimSize(1);
  Value i = e.globalThread(kCountThreads);
  forAssignedRow(e, rowToken, offsets, i, [&](Value slot) {
    Value token = e.divi(slot, e.idx(topK));
    Value k = e.remi(slot, e.idx(topK));
    e.store(e.load(rowGrad, {i}), dtw, {token, k});
  });
}

/// Llama 4 (scale_input): row r of token t holds x[t] * w, so w's gradient
/// is drows[r] . x[t] (the roundings are not differentiated), summed into
/// row_grad[r] for every dispatched row. (drows, row_token, offsets, x,
/// row_grad)
static void lowerScaledWeightGrad(moegpu::ScaledWeightGradOp op, Emitter &e) {
  Value drows = op.getDrows(), rowToken = op.getRowToken();
  Value offsets = op.getOffsets(), x = op.getX(), rowGrad = op.getRowGrad();
  int64_t topK = op.getTopK(), hidden = op.getDrows().getType().getDimSize(1);
  Value r = e.block();
  forAssignedRow(e, rowToken, offsets, r, [&](Value slot) {
    Value t = e.divi(slot, e.idx(topK));
    Value partial = e.sum(e.thread(), e.idx(hidden),
                          e.idx(kRowThreads), e.f32(0), [&](Value h) {
                            return e.mul(e.toF32(e.load(drows, {r, h})),
                                         e.toF32(e.load(x, {t, h})));
                          });
    e.warpAtomicAdd(partial, rowGrad, {r});
  });
}

/// The SwiGLU backward, elementwise per row r of a group (an expert's rows,
/// or every token for the shared experts) and FFN column f, from the
/// backward GEMMs' gu (the gate and up pre-activations g, u, at w13's
/// interleaved rows) and gs = dY[r] . W2[:, f]: d_act = w * gs, dg = d_act
/// * u * silu'(g), du = d_act * silu(g) in the compute type, into dgu[r]
/// interleaved as w13's rows are (the input gradient's GEMM multiplies it
/// by w13) and into dg[r, f] and du[r, f] (the weight gradients' GEMMs);
/// with routing weights, the weight's gradient sum_f act * gs into
/// row_grad[r]. Padding rows have zero rows, dy and weight, so they
/// contribute nothing.
static void lowerActGrad(moegpu::ActGradOp op, Emitter &e) {
  ImplicitLocOpBuilder &b = e.b;
  Value gu = op.getGu(), gsIn = op.getGs();
  Value groups = op.getGroups(), dgu = op.getDgu();
  Value dgOut = op.getDg(), duOut = op.getDu();
  bool weighted = static_cast<bool>(op.getWeight());
  // GPT-OSS: the routed experts' down bias is part of each row's output.
  bool downBias = static_cast<bool>(op.getB2());
  auto dguType = cast<MemRefType>(dgu.getType());
  int64_t ffn = cast<MemRefType>(gu.getType()).getDimSize(1) / 2;
  Type half = dguType.getElementType();
  // Split: the gate's columns, then the up's from a multiple of 128.
  bool split = op.getSplit();
  int64_t upColumn = llvm::alignTo(ffn, kFp8Block);
  // GPT-OSS's clamped SwiGLU.
  bool clamped = static_cast<bool>(op.getAlpha());
  double alpha = clamped ? op.getAlpha()->convertToDouble() : 1.0;
  double limit = clamped ? op.getLimit()->convertToDouble() : 0.0;
  Value r = e.block();
  e.when(inGroups(e, groups, r), [&] {
    Value weight = weighted ? e.load(op.getWeight(), {r}) : e.f32(1.0);
    Value partial = e.loop(
        e.thread(), e.idx(ffn), e.idx(kRowThreads), {e.f32(0)},
        [&](Value f, ValueRange it) {
          Value gr = gateRow(e, f);
          Value ur = e.addi(gr, e.idx(kGateUpBlock));
          Value gate = e.load(gu, {r, gr}), up = e.load(gu, {r, ur});
          Value gs = e.load(gsIn, {r, f});
          if (op.getRoundedInputs()) {
            auto round = [&](Value v) {
              return e.toF32(arith::TruncFOp::create(b, half, v));
            };
            gate = round(gate);
            up = round(up);
            gs = round(gs);
          }
          Value one = e.f32(1.0);
          // g' = min(gate, l), u' = clamp(up, -l, l) + 1 (clamped), else
          // gate and up; act = u' * g' * s with s = sigmoid(alpha * g').
          Value g = gate, u = up;
          if (clamped)
            std::tie(g, u) = e.clampGateUp(gate, up, limit);
          Value ag = clamped ? e.mul(e.f32(alpha), g) : g;
          Value sig = e.sigmoid(ag);
          Value glu = e.mul(g, sig);
          // With combine, gs is already the weighted output's gradient.
          Value dact = op.getOutDy() ? gs : e.mul(weight, gs);
          // d(g * sigmoid(alpha g))/dg = sig * (1 + alpha g * (1 - sig))
          Value dglu = e.mul(sig, e.add(one, e.mul(ag, e.sub(one, sig))));
          Value dgF = e.mul(e.mul(dact, u), dglu);
          Value duF = e.mul(dact, glu);
          if (clamped) {
            // No gradient where the clamp cuts.
            auto [gatePasses, upPasses] = e.clampPasses(gate, up, limit);
            dgF = arith::SelectOp::create(b, gatePasses, dgF, e.f32(0.0));
            duF = arith::SelectOp::create(b, upPasses, duF, e.f32(0.0));
          }
          Value dg = arith::TruncFOp::create(b, half, dgF);
          Value du = arith::TruncFOp::create(b, half, duF);
          if (split) {
            e.store(dg, dgu, {r, f});
            e.store(du, dgu, {r, e.addi(f, e.idx(upColumn))});
          } else {
            e.store(dg, dgu, {r, gr});
            e.store(du, dgu, {r, ur});
          }
          e.store(dg, dgOut, {r, f});
          e.store(du, duOut, {r, f});
          if (op.getOutDy())
            return SmallVector<Value>{it[0]};
          return SmallVector<Value>{e.add(it[0], e.mul(e.mul(glu, u), gs))};
        })[0];
    if (Value dy = op.getOutDy()) {
      // The combine's gradient: dy . (w out) / w (0 for a padding row,
      // whose weight is 0).
      Value down = op.getDown();
      int64_t hidden = cast<MemRefType>(down.getType()).getDimSize(1);
      partial = e.sum(e.thread(), e.idx(hidden), e.idx(kRowThreads), partial,
                      [&](Value h) {
                        return e.mul(e.toF32(e.load(dy, {r, h})),
                                     e.toF32(e.load(down, {r, h})));
                      });
      Value real = arith::CmpFOp::create(b, arith::CmpFPredicate::ONE, weight,
                                         e.f32(0.0));
      partial =
          arith::SelectOp::create(b, real, e.div(partial, weight), e.f32(0.0));
    }
    if (downBias) {
      // The weight multiplies down(act) + b2[e]: dy . b2[e] joins its
      // gradient.
      Value dy = op.getDy(), b2 = op.getB2();
      Value ex = expertOfRow(e, groups, r);
      partial = e.sum(e.thread(), e.idx(op.getB2().getType().getDimSize(1)),
                      e.idx(kRowThreads),
                      partial, [&](Value h) {
                        return e.mul(e.toF32(e.load(dy, {r, h})),
                                     e.toF32(e.load(b2, {ex, h})));
                      });
    }
    if (weighted)
      e.warpAtomicAdd(partial, op.getRowGrad(), {r});
  });
}

/// dst[r, h] = w[r] * src[r, h] (w = 1 without weights) in the compute
/// type, for the rows in `groups`: the output gradient as the backward
/// GEMMs read it. (src, groups, dst [, weight])
static void lowerScaleRows(moegpu::ScaleRowsOp op, Emitter &e) {
  ImplicitLocOpBuilder &b = e.b;
  Value src = op.getSrc(), groups = op.getGroups(), dst = op.getDst();
  Type half = cast<MemRefType>(dst.getType()).getElementType();
  Value r = e.block();
  e.when(inGroups(e, groups, r), [&] {
    Value w = op.getWeight() ? e.load(op.getWeight(), {r}) : Value();
    e.columns(op.getSrc().getType().getDimSize(1), [&](Value h) {
      Value v = e.toF32(e.load(src, {r, h}));
      if (w)
        v = e.mul(w, v);
      e.store(arith::TruncFOp::create(b, half, v), dst, {r, h});
    });
  });
}

/// One thread per token: the scores again from the forward pass's router
/// logits (then sigmoid or softmax) into dl[t], the selected scores'
/// gradient from the routing weights' (moe.topk_grad), then the logits'
/// (moe.router_grad), in place; with a dl_half argument, also in the
/// compute type for the router's gradient GEMMs.
static void lowerRouteGrad(moegpu::RouteGradOp op, Emitter &e) {
  ImplicitLocOpBuilder &b = e.b;
  int64_t experts = op.getLogits().getType().getDimSize(1);
  int64_t topK = op.getIds().getType().getDimSize(1);
  bool sigmoid = op.getScoring() == moegpu::Scoring::Sigmoid;
  bool normalize = op.getNormalize();
  double scale = op.getRoutedScale().convertToDouble();
  Value logits = op.getLogits(), routerBias = op.getRouterBias();
  Value ids = op.getIds(), dtw = op.getDtw(), dl = op.getDl();
  Value dlHalf = op.getDlHalf();
  Value t = e.globalThread(kCountThreads);
  Value zero = e.idx(0), one = e.idx(1), nE = e.idx(experts), nK = e.idx(topK);
  e.when(e.cmp(arith::CmpIPredicate::ult, t, e.dim(ids, 0)), [&] {
    e.loop(zero, nE, one, {}, [&](Value ex, ValueRange) {
      Value logit = e.load(logits, {t, ex});
      if (routerBias)
        logit = e.add(logit, e.toF32(e.load(routerBias, {ex})));
      e.store(sigmoid ? e.sigmoid(logit) : logit, dl, {t, ex});
      return SmallVector<Value>{};
    });
    if (!sigmoid) {
      Value max = e.loop(
          zero, nE, one, {e.f32(-INFINITY)}, [&](Value i, ValueRange it) {
            return SmallVector<Value>{
                arith::MaximumFOp::create(b, it[0], e.load(dl, {t, i}))};
          })[0];
      Value sum =
          e.loop(zero, nE, one, {e.f32(0)}, [&](Value i, ValueRange it) {
            Value v = e.exp(e.sub(e.load(dl, {t, i}), max));
            e.store(v, dl, {t, i});
            return SmallVector<Value>{e.add(it[0], v)};
          })[0];
      e.loop(zero, nE, one, {}, [&](Value i, ValueRange) {
        e.store(e.div(e.load(dl, {t, i}), sum), dl, {t, i});
        return SmallVector<Value>{};
      });
    }
    auto selected = [&](Value j) {
      return e.load(dl, {t, e.index(e.load(ids, {t, j}))});
    };
    // Z and sum_j dw_j s_j over the selected experts.
    ValueRange zs = e.loop(
        zero, nK, one, {e.f32(0), e.f32(0)}, [&](Value j, ValueRange it) {
          Value sj = selected(j);
          return SmallVector<Value>{
              e.add(it[0], sj), e.add(it[1], e.mul(e.load(dtw, {t, j}), sj))};
        });
    Value z = normalize ? zs[0] : e.f32(1.0);
    auto scoreGrad = [&](Value j) {
      Value dw = e.load(dtw, {t, j});
      if (normalize)
        return e.div(e.mul(e.f32(scale), e.sub(dw, e.div(zs[1], z))), z);
      return e.mul(e.f32(scale), dw);
    };
    // softmax: sum_e ds_e s_e, nonzero only for selected experts.
    Value dot = e.loop(zero, nK, one, {e.f32(0)}, [&](Value j, ValueRange it) {
      return SmallVector<Value>{e.add(it[0], e.mul(scoreGrad(j), selected(j)))};
    })[0];
    e.loop(zero, nE, one, {}, [&](Value ex, ValueRange) {
      Value exI32 = arith::IndexCastOp::create(b, b.getI32Type(), ex);
      Value ds = e.loop(zero, nK, one, {e.f32(0)}, [&](Value j, ValueRange it) {
        Value hit = e.cmp(arith::CmpIPredicate::eq, e.load(ids, {t, j}), exI32);
        return SmallVector<Value>{
            arith::SelectOp::create(b, hit, scoreGrad(j), it[0])};
      })[0];
      Value s = e.load(dl, {t, ex});
      Value g = sigmoid ? e.mul(e.mul(ds, s), e.sub(e.f32(1.0), s))
                        : e.mul(s, e.sub(ds, dot));
      e.store(g, dl, {t, ex});
      if (dlHalf)
        e.store(arith::TruncFOp::create(
                    b, cast<MemRefType>(dlHalf.getType()).getElementType(), g),
                dlHalf, {t, ex});
      return SmallVector<Value>{};
    });
  });
}

/// dx[t, h] = sum_j d_rows[row_map[t, j], h] (+ the shared experts' input
/// gradient) + sum_e dl[t, e] * router[e, h].
static void lowerInputGrad(moegpu::InputGradOp op, Emitter &e) {
  ImplicitLocOpBuilder &b = e.b;
  Value drows = op.getDrows(), rowMap = op.getRowMap();
  // Llama 4: a row is the token times its scale, rounded to the compute
  // type as the dispatch rounded it.
  Value scales = op.getScales();
  Type half = cast<MemRefType>(drows.getType()).getElementType();
  Value routerDx = op.getRouterDx(), dl = op.getDl(), wr = op.getRouter();
  Value sharedDx = op.getSharedDx();
  bool shared = static_cast<bool>(sharedDx);
  Value dz = op.getSharedDz(), gate = op.getGate();
  Value dx = op.getDx();
  Value t = e.block();
  e.columns(op.getDx().getType().getDimSize(1), [&](Value h) {
    Value acc = e.loop(
        e.idx(0), e.idx(op.getRowMap().getType().getDimSize(1)), e.idx(1),
        {e.f32(0)},
        [&](Value j, ValueRange it) {
          Value r = e.load(rowMap, {t, j});
          auto ifOp = scf::IfOp::create(
              b, b.getF32Type(), e.cmp(arith::CmpIPredicate::sge, r, e.i32(0)),
              true);
          ImplicitLocOpBuilder::InsertionGuard guard(b);
          b.setInsertionPointToStart(ifOp.thenBlock());
          Value row = e.toF32(e.load(drows, {e.index(r), h}));
          if (scales)
            row = e.mul(e.toF32(arith::TruncFOp::create(
                            b, half, e.load(scales, {t, j}))),
                        row);
          scf::YieldOp::create(b, ValueRange{e.add(it[0], row)});
          b.setInsertionPointToStart(ifOp.elseBlock());
          scf::YieldOp::create(b, it[0]);
          return SmallVector<Value>{ifOp.getResult(0)};
        })[0];
    if (shared)
      acc = e.add(acc, e.load(sharedDx, {t, h}));
    if (dz)
      acc = e.add(acc, e.mul(e.load(dz, {t, e.idx(0)}),
                             e.toF32(e.load(gate, {e.idx(0), h}))));
    if (routerDx) {
      acc = e.add(acc, e.load(routerDx, {t, h}));
    } else {
      acc = e.sum(
          e.idx(0), e.idx(op.getRouter().getType().getDimSize(0)), e.idx(1),
          acc, [&](Value ex) {
            return e.mul(e.load(dl, {t, ex}), e.toF32(e.load(wr, {ex, h})));
          });
    }
    e.store(acc, dx, {t, h});
  });
}

/// One warp per token: dz[t] = (dy[t] . shared_out[t]) * s (1 - s), the
/// gradient of the gate's logit, with s = sigmoid of it (the forward
/// pass's shared_scale).
static void lowerSharedScaleGrad(moegpu::SharedScaleGradOp op, Emitter &e) {
  Value dy = op.getDy(), out = op.getOut();
  Value scale = op.getScale(), dz = op.getDz();
  int64_t hidden = op.getDy().getType().getDimSize(1);
  Value lane, token;
  std::tie(lane, token) = e.warpRow(kRouteWarps);
  e.when(e.cmp(arith::CmpIPredicate::ult, token, e.dim(dy, 0)), [&] {
    Value part = e.sum(lane, e.idx(hidden), e.idx(32), e.f32(0), [&](Value h) {
      return e.mul(e.load(dy, {token, h}), e.toF32(e.load(out, {token, h})));
    });
    Value sum = e.warpSum(part);
    Value s = e.load(scale, {token});
    Value grad = e.mul(sum, e.mul(s, e.sub(e.f32(1.0), s)));
    e.when(e.cmp(arith::CmpIPredicate::eq, lane, e.idx(0)), [&] {
      e.store(grad, dz, {token, e.idx(0)});
    });
  });
}

/// dRouter[e, h] = sum_t dl[t, e] * x[t, h].
static void lowerRouterGrad(moegpu::RouterGradOp op, Emitter &e) {
  Value dl = op.getDl(), x = op.getX(), grad = op.getGrad();
  Value ex = e.block();
  e.columns(op.getGrad().getType().getDimSize(1), [&](Value h) {
    Value acc = e.sum(e.idx(0), e.dim(x, 0), e.idx(1), e.f32(0), [&](Value t) {
      return e.mul(e.load(dl, {t, ex}), e.toF32(e.load(x, {t, h})));
    });
    e.store(acc, grad, {ex, h});
  });
}

/// out[c] = sum_t in[t, c] over the rows of an f32 `in` [T, C]: the
/// gradient of a bias added to every row (JetMoE's output bias from dy).
/// A thread a column, summing in token order.
static void lowerColumnSum(moegpu::ColumnSumOp op, Emitter &e) {
  Value in = op.getIn(), out = op.getOut();
  auto columns = cast<MemRefType>(in.getType()).getDimSize(1);
  Value c = e.globalThread(kCountThreads);
  e.when(e.cmp(arith::CmpIPredicate::ult, c, e.idx(columns)), [&] {
    e.store(e.sum(e.idx(0), e.dim(in, 0), e.idx(1), e.f32(0),
                  [&](Value t) {
                    return e.toF32(e.load(in, {t, c}));
                  }),
            out, {c});
  });
}

/// out[g, c] (+)= sum of in[r, c] over group g's rows [groups[g],
/// groups[g+1]): the gradient of a per-group bias (GPT-OSS's expert
/// biases). A block a group, a thread a column, rows in order;
/// `accumulate` adds to out (the token chunks after the first).
static void lowerGroupedColumnSum(moegpu::GroupedColumnSumOp op, Emitter &e) {
  Value in = op.getIn(), groups = op.getGroups(), out = op.getOut();
  bool accumulate = op.getAccumulate();
  auto columns = cast<MemRefType>(in.getType()).getDimSize(1);
  Value g = e.block();
  Value lo = e.index(e.load(groups, {g}));
  Value hi = e.index(e.load(groups, {e.addi(g, e.idx(1))}));
  e.columns(columns, [&](Value c) {
    Value init = accumulate ? e.load(out, {g, c}) : e.f32(0);
    e.store(e.sum(lo, hi, e.idx(1), init,
                  [&](Value r) {
                    return e.toF32(e.load(in, {r, c}));
                  }),
            out, {g, c});
  });
}

/// offsets = [0, T]: one group of every token, for the k-grouped GEMM of
/// the router's weight gradient.
static void lowerTokenOffsets(moegpu::TokenOffsetsOp op, Emitter &e) {
  ImplicitLocOpBuilder &b = e.b;
  Value x = op.getX(), offsets = op.getOffsets();
  e.when(e.cmp(arith::CmpIPredicate::eq, e.thread(), e.idx(0)), [&] {
    e.store(e.i32(0), offsets, {e.idx(0)});
    e.store(arith::IndexCastOp::create(b, b.getI32Type(), e.dim(x, 0)),
            offsets, {e.idx(1)});
  });
}

/// load[e] = this rank's tokens routed to expert e.
static void lowerExpertLoad(moegpu::ExpertLoadOp op, Emitter &e) {
  ImplicitLocOpBuilder &b = e.b;
  Value counts = op.getCounts(), load = op.getLoad();
  int64_t experts = op.getLoad().getType().getDimSize(0);
  int64_t chunks = op.getChunks();
  Value ex = e.globalThread(kCountThreads);
  e.when(e.cmp(arith::CmpIPredicate::ult, ex, e.idx(experts)), [&] {
    // An expert's rows in every token chunk (counts are chunk-major).
    Value total = e.i32(0);
    for (int64_t c = 0; c < chunks; ++c)
      total = arith::AddIOp::create(
          b, total, e.load(counts, {e.addi(ex, e.idx(c * experts))}));
    e.store(arith::SIToFPOp::create(b, b.getF32Type(), total), load, {ex});
  });
}

/// The auxiliary-loss-free bias update, in place: bias += gamma *
/// sign(T * k / E - load), T every rank's tokens (hyper[kHyperTokens]) and
/// load summed over the ranks.
/// Runs `body` unless the step's verdict (`rejected`, update_verdict's)
/// rejects the update; without one, always.
static void unlessRejected(Emitter &e, Value rejected,
                           function_ref<void()> body) {
  if (!rejected)
    return body();
  Value accepted = arith::CmpFOp::create(
      e.b, arith::CmpFPredicate::OEQ, e.load(rejected, {e.idx(0)}), e.f32(0));
  e.when(accepted, body);
}

static void lowerBiasUpdate(moegpu::BiasUpdateOp op, Emitter &e) {
  ImplicitLocOpBuilder &b = e.b;
  Value load = op.getLoad(), hyper = op.getHyper(), bias = op.getBias();
  int64_t experts = op.getLoad().getType().getDimSize(0);
  Value ex = e.globalThread(kCountThreads);
  Value inRange = e.cmp(arith::CmpIPredicate::ult, ex, e.idx(experts));
  unlessRejected(e, op.getRejected(), [&] {
    e.when(inRange, [&] {
      Value tokens = e.load(hyper, {e.idx(kHyperTokens)});
      Value mean =
          e.div(e.mul(tokens, e.f32(static_cast<double>(op.getTopK()))),
                e.f32(static_cast<double>(experts)));
      Value gamma = e.load(hyper, {e.idx(kHyperGamma)});
      Value d = e.sub(mean, e.load(load, {ex}));
      Value above =
          arith::CmpFOp::create(b, arith::CmpFPredicate::OGT, d, e.f32(0));
      Value below =
          arith::CmpFOp::create(b, arith::CmpFPredicate::OLT, d, e.f32(0));
      Value sign = arith::SelectOp::create(
          b, above, e.f32(1.0),
          arith::SelectOp::create(b, below, e.f32(-1.0), e.f32(0)));
      e.store(e.add(e.load(bias, {ex}), e.mul(gamma, sign)), bias, {ex});
    });
  });
}

/// AdamW on every f32 master, in place, a grid-stride loop per weight:
/// (hyper, params, m, v, grads[, copies, bounds]), each new master also
/// rounded into its compute copy, the new values' largest magnitudes
/// (the moments' as stored) into the bounds. Moments in bf16 are widened
/// when loaded and rounded once when stored (StoredMoment).
static void lowerAdamW(moegpu::AdamWOp op, Emitter &e) {
  unlessRejected(e, op.getRejected(), [&] {
    AdamWHyper hyper = loadAdamWHyper(e, op.getHyper());
    // Weight w's copy: the copies' w-th, or with `copied` the one at w's
    // place in it (none where w is not there).
    std::optional<ArrayRef<int64_t>> copied = op.getCopied();
    auto copyIndex = [&](size_t w) -> std::optional<size_t> {
      if (op.getCopies().empty())
        return std::nullopt;
      if (!copied)
        return w;
      const int64_t *at = llvm::find(*copied, static_cast<int64_t>(w));
      if (at == copied->end())
        return std::nullopt;
      return static_cast<size_t>(at - copied->begin());
    };
    for (auto [w, p] : llvm::enumerate(op.getParams())) {
      Value m = op.getM()[w], v = op.getV()[w], grad = op.getGrads()[w];
      std::optional<size_t> c = copyIndex(w);
      Value copy = c ? op.getCopies()[*c] : Value();
      int64_t elements = cast<MemRefType>(p.getType()).getNumElements();
      Value bounds = op.getBounds();
      // The new values' largest magnitudes, for the bounds.
      SmallVector<Value> init;
      if (bounds)
        init.assign(3, e.i32(0));
      ValueRange largest =
          e.gridStride(elements, init, [&](Value i, ValueRange it) {
            SmallVector<Value> at = e.delinearize(i, p);
            Value p0 = e.load(p, at);
            Value m0 = e.toF32(e.load(m, at));
            Value v0 = e.toF32(e.load(v, at));
            Value g = e.load(grad, at);
            AdamWValues next = adamwStep(e, hyper, p0, m0, v0, g);
            StoredMoment m1 = storedMoment(e, m, next.m);
            StoredMoment v1 = storedMoment(e, v, next.v);
            e.store(next.p, p, at);
            e.store(m1.stored, m, at);
            e.store(v1.stored, v, at);
            if (copy)
              storeCopy(e, copy, layoutOf(*op.getLayouts(), *c), i, at, next.p);
            if (!bounds)
              return SmallVector<Value>{};
            Value pb = magnitudeBits(e, next.p);
            Value mb = magnitudeBits(e, m1.readBack);
            Value vb = magnitudeBits(e, v1.readBack, /*signedInf=*/true);
            return SmallVector<Value>{maxBits(e, it[0], pb),
                                      maxBits(e, it[1], mb),
                                      maxBits(e, it[2], vb)};
          });
      if (bounds)
        for (int64_t k = 0; k < 3; ++k)
          warpAtomicMax(e, largest[k], bounds, {e.idx(w), e.idx(k)});
    }
  });
}

/// The step's verdict, on one thread: rejected = 1 unless the loss and
/// every grad_sq are finite and every bad count is 0. (loss, grad_sq,
/// bad, rejected)
static void lowerUpdateVerdict(moegpu::UpdateVerdictOp op, Emitter &e) {
  ImplicitLocOpBuilder &b = e.b;
  Value gradSq = op.getGradSq(), bad = op.getBad();
  int64_t weights = op.getGradSq().getType().getDimSize(0);
  // x - x is 0 exactly when x is finite.
  auto finite = [&](Value x) {
    return arith::CmpFOp::create(b, arith::CmpFPredicate::OEQ, e.sub(x, x),
                                 e.f32(0));
  };
  e.when(e.cmp(arith::CmpIPredicate::eq, e.thread(), e.idx(0)), [&] {
    Value ok = finite(e.load(op.getLoss(), {e.idx(0)}));
    for (int64_t w = 0; w < weights; ++w) {
      Value none = arith::CmpFOp::create(b, arith::CmpFPredicate::OEQ,
                                         e.load(bad, {e.idx(w)}), e.f32(0));
      ok = arith::AndIOp::create(
          b, ok,
          arith::AndIOp::create(b, finite(e.load(gradSq, {e.idx(w)})), none));
    }
    e.store(arith::SelectOp::create(b, ok, e.f32(0), e.f32(1.0)),
            op.getRejected(), {e.idx(0)});
    if (Value valid = op.getCopiesValid()) {
      Value one = e.f32(1.0);
      e.store(one, valid, {e.idx(0)});
    }
  });
}

/// Each gradient's sum of squares and largest magnitude, a grid-stride
/// loop per weight, one atomic per warp each. (grad_sq, grad_max, grads)
static void lowerGradStats(moegpu::GradStatsOp op, Emitter &e) {
  for (auto [w, grad] : llvm::enumerate(op.getGrads())) {
    int64_t elements = cast<MemRefType>(grad.getType()).getNumElements();
    Value zero = e.f32(0);
    Value none = e.i32(0);
    ValueRange stats =
        e.gridStride(elements, {zero, none}, [&](Value i, ValueRange it) {
          Value g = e.load(grad, e.delinearize(i, grad));
          Value square = e.mul(g, g);
          Value bits = magnitudeBits(e, g);
          return SmallVector<Value>{e.add(it[0], square),
                                    maxBits(e, it[1], bits)};
        });
    Value sum = stats[0], largest = stats[1];
    e.warpAtomicAdd(sum, op.getGradSq(), {e.idx(w)});
    warpAtomicMax(e, largest, op.getGradMax(), {e.idx(w)});
  }
}

/// Whether each weight's update would make anything non-finite: bad[w] +=
/// the elements whose AdamW step would (one atomic per warp), read from
/// the state where the flag is clear or the bounds do not show the step
/// finite (boundsShowFinite), taking the state's bounds as it goes; else
/// nothing read. (hyper, grad_max, bad, params, m, v, grads[, valid,
/// bounds])
static void lowerUpdateCheck(moegpu::UpdateCheckOp op, Emitter &e) {
  ImplicitLocOpBuilder &b = e.b;
  Value bad = op.getBad(), valid = op.getValid(), bounds = op.getBounds();
  AdamWHyper hyper = loadAdamWHyper(e, op.getHyper());
  // x - x is 0 exactly when x is finite.
  auto finite = [&](Value x) {
    return arith::CmpFOp::create(b, arith::CmpFPredicate::OEQ, e.sub(x, x),
                                 e.f32(0));
  };
  Value known;
  if (valid) {
    Value flag = e.load(valid, {e.idx(0)});
    Value zero = e.f32(0);
    known = arith::CmpFOp::create(b, arith::CmpFPredicate::ONE, flag, zero);
  }
  for (auto [w, p] : llvm::enumerate(op.getParams())) {
    Value m = op.getM()[w], v = op.getV()[w], grad = op.getGrads()[w];
    int64_t elements = cast<MemRefType>(p.getType()).getNumElements();
    auto check = [&] {
      SmallVector<Value> init{e.f32(0)};
      if (bounds)
        init.append(3, e.i32(0));
      ValueRange sums =
          e.gridStride(elements, init, [&](Value i, ValueRange it) {
            SmallVector<Value> at = e.delinearize(i, p);
            Value p0 = e.load(p, at);
            Value m0 = e.toF32(e.load(m, at));
            Value v0 = e.toF32(e.load(v, at));
            Value g = e.load(grad, at);
            AdamWValues next = adamwStep(e, hyper, p0, m0, v0, g);
            // Moments as AdamW would store them: a finite f32 moment may
            // round to a bf16 infinity.
            Value m1 = storedMoment(e, m, next.m).readBack;
            Value v1 = storedMoment(e, v, next.v).readBack;
            Value ok = arith::AndIOp::create(
                b, finite(next.p),
                arith::AndIOp::create(b, finite(m1), finite(v1)));
            Value zero = e.f32(0);
            Value one = e.f32(1.0);
            Value count = arith::SelectOp::create(b, ok, zero, one);
            SmallVector<Value> out{e.add(it[0], count)};
            if (bounds) {
              Value pb = magnitudeBits(e, p0);
              Value mb = magnitudeBits(e, m0);
              Value vb = magnitudeBits(e, v0, /*signedInf=*/true);
              out.push_back(maxBits(e, it[1], pb));
              out.push_back(maxBits(e, it[2], mb));
              out.push_back(maxBits(e, it[3], vb));
            }
            return out;
          });
      e.warpAtomicAdd(sums[0], bad, {e.idx(w)});
      if (bounds)
        for (int64_t k = 0; k < 3; ++k)
          warpAtomicMax(e, sums[1 + k], bounds, {e.idx(w), e.idx(k)});
    };
    if (!valid) {
      check();
      continue;
    }
    Value shown = boundsShowFinite(e, hyper, bounds, op.getGradMax(), w);
    Value skip = arith::AndIOp::create(b, known, shown);
    Value yes = arith::ConstantIntOp::create(b, 1, 1);
    Value read = arith::XOrIOp::create(b, skip, yes);
    e.when(read, check);
  }
}

void kernels::populateTrainingPatterns(RewritePatternSet &patterns) {
  patterns.add<
      LowerKernel<moegpu::ComputeCopiesOp, lowerComputeCopies>,
      LowerKernel<moegpu::MseLossOp, lowerMseLoss>,
      LowerKernel<moegpu::RowTokensOp, lowerRowTokens>,
      LowerKernel<moegpu::GatherRowDyOp, lowerGatherRowDy>,
      LowerKernel<moegpu::ScatterRowWeightGradOp, lowerScatterRowWeightGrad>,
      LowerKernel<moegpu::ScaledWeightGradOp, lowerScaledWeightGrad>,
      LowerKernel<moegpu::ActGradOp, lowerActGrad>,
      LowerKernel<moegpu::ScaleRowsOp, lowerScaleRows>,
      LowerKernel<moegpu::RouteGradOp, lowerRouteGrad>,
      LowerKernel<moegpu::InputGradOp, lowerInputGrad>,
      LowerKernel<moegpu::SharedScaleGradOp, lowerSharedScaleGrad>,
      LowerKernel<moegpu::RouterGradOp, lowerRouterGrad>,
      LowerKernel<moegpu::ColumnSumOp, lowerColumnSum>,
      LowerKernel<moegpu::GroupedColumnSumOp, lowerGroupedColumnSum>,
      LowerKernel<moegpu::TokenOffsetsOp, lowerTokenOffsets>,
      LowerKernel<moegpu::ExpertLoadOp, lowerExpertLoad>,
      LowerKernel<moegpu::BiasUpdateOp, lowerBiasUpdate>,
      LowerKernel<moegpu::AdamWOp, lowerAdamW>,
      LowerKernel<moegpu::GradStatsOp, lowerGradStats>,
      LowerKernel<moegpu::UpdateCheckOp, lowerUpdateCheck>,
      LowerKernel<moegpu::UpdateVerdictOp, lowerUpdateVerdict>>(
      patterns.getContext());
}
