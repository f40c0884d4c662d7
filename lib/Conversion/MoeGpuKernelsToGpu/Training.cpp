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

using namespace mlir;
using namespace mlir::moe;
using namespace mlir::moe::kernels;

/// Row of the packed [G, 2F, H] gate/up weight that holds gate row `f`
/// (blocks of kGateUpBlock gate rows, then as many up rows); its up row
/// is kGateUpBlock further.
static Value gateRow(Emitter &e, Value f) {
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

AdamWValues adamwStep(Emitter &e, Value hyper, Value p, Value m, Value v,
                      Value g) {
  auto h = [&](TrainHyper k) { return e.load(hyper, {e.idx(k)}); };
  Value lr = h(kHyperLearningRate), step = h(kHyperStep);
  Value beta1 = h(kHyperBeta1), beta2 = h(kHyperBeta2);
  Value eps = h(kHyperEpsilon), decay = h(kHyperWeightDecay);
  Value one = e.f32(1.0);
  Value m2 = e.add(e.mul(beta1, m), e.mul(e.sub(one, beta1), g));
  Value v2 = e.add(e.mul(beta2, v), e.mul(e.sub(one, beta2), e.mul(g, g)));
  Value mHat = e.div(m2, e.sub(one, e.powi(beta1, step)));
  Value vHat = e.div(v2, e.sub(one, e.powi(beta2, step)));
  Value update = e.add(e.div(mHat, e.add(e.sqrt(vHat), eps)), e.mul(decay, p));
  return {e.sub(p, e.mul(lr, update)), m2, v2};
}
} // namespace

/// dst[i] = src[i] in dst's element type, over every element of two
/// memrefs of equal size.
static void lowerConvert(moegpu::ConvertOp op, Emitter &e) {
  Value src = op.getSrc(), dst = op.getDst();
  Type type = cast<MemRefType>(dst.getType()).getElementType();
  e.gridStride(cast<MemRefType>(src.getType()).getNumElements(), [&](Value i) {
    e.store(e.truncTo(type, e.load(src, e.delinearize(i, src))), dst,
            e.delinearize(i, dst));
  });
}

/// The packed [G, 2F, H] compute weight from f32 gate and up weights
/// ([G, F, H], or [F, H] for one group), or the packed [G, 2F] biases from
/// [G, F] ones.
static void lowerPackGateUp(moegpu::PackGateUpOp op, Emitter &e) {
  ImplicitLocOpBuilder &b = e.b;
  Value gate = op.getGate(), up = op.getUp(), packed = op.getPacked();
  auto type = cast<MemRefType>(packed.getType());
  e.gridStride(type.getNumElements(), [&](Value i) {
    SmallVector<Value> at = e.delinearize(i, packed);
    Value c = at[1];
    // One emitting call a statement: the IR's order must not depend on
    // the order in which a C++ compiler evaluates arguments.
    Value inBlock = e.remi(c, e.idx(2 * kGateUpBlock));
    Value lo = e.remi(inBlock, e.idx(kGateUpBlock));
    Value hi = e.divi(c, e.idx(2 * kGateUpBlock));
    Value f = e.addi(e.muli(hi, e.idx(kGateUpBlock)), lo);
    Value isGate =
        e.cmp(arith::CmpIPredicate::ult, inBlock, e.idx(kGateUpBlock));
    SmallVector<Value> src{f};
    if (type.getRank() == 3)
      src.push_back(at[2]);
    // Grouped (gate of the packed rank): the group first.
    if (cast<MemRefType>(gate.getType()).getRank() == type.getRank())
      src.insert(src.begin(), at[0]);
    Value fromUp = e.load(up, src);
    Value fromGate = e.load(gate, src);
    Value v = arith::SelectOp::create(b, isGate, fromGate, fromUp);
    e.store(e.truncTo(type.getElementType(), v), packed, at);
  });
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
  int64_t ffn = dguType.getDimSize(1) / 2;
  Type half = dguType.getElementType();
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
          Value one = e.f32(1.0);
          // g' = min(gate, l), u' = clamp(up, -l, l) + 1 (clamped), else
          // gate and up; act = u' * g' * s with s = sigmoid(alpha * g').
          Value g = gate, u = up;
          if (clamped)
            std::tie(g, u) = e.clampGateUp(gate, up, limit);
          Value ag = clamped ? e.mul(e.f32(alpha), g) : g;
          Value sig = e.sigmoid(ag);
          Value glu = e.mul(g, sig);
          Value dact = e.mul(weight, gs);
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
          e.store(dg, dgu, {r, gr});
          e.store(du, dgu, {r, ur});
          e.store(dg, dgOut, {r, f});
          e.store(du, duOut, {r, f});
          return SmallVector<Value>{e.add(it[0], e.mul(e.mul(glu, u), gs))};
        })[0];
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

/// AdamW on one f32 master weight, in place: (p, m, v, grad, hyper).
static void lowerAdamW(moegpu::AdamWOp op, Emitter &e) {
  Value p = op.getP(), m = op.getM(), v = op.getV(), grad = op.getGrad();
  Value hyper = op.getHyper();
  int64_t elements = cast<MemRefType>(p.getType()).getNumElements();
  unlessRejected(e, op.getRejected(), [&] {
    e.gridStride(elements, [&](Value i) {
      SmallVector<Value> at = e.delinearize(i, p);
      AdamWValues next = adamwStep(e, hyper, e.load(p, at), e.load(m, at),
                                   e.load(v, at), e.load(grad, at));
      e.store(next.p, p, at);
      e.store(next.m, m, at);
      e.store(next.v, v, at);
    });
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
  });
}

/// What the runtime checks before it runs the update: over weight
/// `index`'s elements (a grid-stride loop), the sum of its gradient's
/// squares into grad_sq[index] and the count of elements whose AdamW step
/// would make the master or a moment non-finite into bad[index]; each
/// warp adds its lanes' sums (a butterfly of shuffles) with one atomic.
/// (p, m, v, grad, hyper, grad_sq, bad)
static void lowerUpdateCheck(moegpu::UpdateCheckOp op, Emitter &e) {
  ImplicitLocOpBuilder &b = e.b;
  Value p = op.getP(), m = op.getM(), v = op.getV(), grad = op.getGrad();
  Value hyper = op.getHyper(), gradSq = op.getGradSq(), bad = op.getBad();
  int64_t index = op.getIndex();
  int64_t elements = cast<MemRefType>(p.getType()).getNumElements();
  // x - x is 0 exactly when x is finite.
  auto finite = [&](Value x) {
    return arith::CmpFOp::create(b, arith::CmpFPredicate::OEQ, e.sub(x, x),
                                 e.f32(0));
  };
  ValueRange sums = e.gridStride(
      elements, {e.f32(0), e.f32(0)}, [&](Value i, ValueRange it) {
        SmallVector<Value> at = e.delinearize(i, p);
        Value g = e.load(grad, at);
        AdamWValues next = adamwStep(e, hyper, e.load(p, at), e.load(m, at),
                                     e.load(v, at), g);
        Value ok = arith::AndIOp::create(
            b, finite(next.p),
            arith::AndIOp::create(b, finite(next.m), finite(next.v)));
        Value count = arith::SelectOp::create(b, ok, e.f32(0), e.f32(1.0));
        return SmallVector<Value>{e.add(it[0], e.mul(g, g)),
                                  e.add(it[1], count)};
      });
  e.warpAtomicAdd(sums[0], gradSq, {e.idx(index)});
  e.warpAtomicAdd(sums[1], bad, {e.idx(index)});
}

void kernels::populateTrainingPatterns(RewritePatternSet &patterns) {
  patterns.add<
      LowerKernel<moegpu::ConvertOp, lowerConvert>,
      LowerKernel<moegpu::PackGateUpOp, lowerPackGateUp>,
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
      LowerKernel<moegpu::UpdateCheckOp, lowerUpdateCheck>,
      LowerKernel<moegpu::UpdateVerdictOp, lowerUpdateVerdict>>(
      patterns.getContext());
}
