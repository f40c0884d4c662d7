//===- TrainingKernels.cpp - The training step's SIMT kernels -------------===//
//
// Part of moe-compiler.
//
//===----------------------------------------------------------------------===//

#include "LayerBuilder.h"

using namespace mlir;
using namespace mlir::moe;
using namespace mlir::moe::lowering;

//===----------------------------------------------------------------------===//
// The training step: SIMT kernels around the forward schedule
//===----------------------------------------------------------------------===//
//
// One CTA per dispatched row, token or weight row, its threads striding
// over the row's columns; sums in f32. Names follow the host's training
// step (moe/Transforms/Autodiff.h), whose gradients are checked against
// finite differences; these kernels compute the same quantities.

/// Row of the packed [G, 2F, H] gate/up weight that holds gate row `f`
/// (blocks of 8 gate rows, then 8 up rows); its up row is 8 further.
static Value gateRow(Emitter &e, Value f) {
  return e.addi(e.muli(e.divi(f, e.idx(8)), e.idx(16)), e.remi(f, e.idx(8)));
}

/// dst[i] = src[i] in dst's element type, over every element of two
/// memrefs of equal size.
void LayerBuilder::buildConvert(gpu::GPUFuncOp func) {
  ImplicitLocOpBuilder b = kernelBody(func);
  Emitter e{b};
  Value src = func.getArgument(0), dst = func.getArgument(1);
  Type type = cast<MemRefType>(dst.getType()).getElementType();
  e.gridStride(cast<MemRefType>(src.getType()).getNumElements(), [&](Value i) {
    e.store(e.truncTo(type, e.load(src, e.delinearize(i, src))), dst,
            e.delinearize(i, dst));
  });
}

/// The packed [G, 2F, H] compute weight from f32 gate and up weights
/// ([G, F, H], or [F, H] for one group), or the packed [G, 2F] biases from
/// [G, F] ones.
void LayerBuilder::buildPack(gpu::GPUFuncOp func) {
  ImplicitLocOpBuilder b = kernelBody(func);
  Emitter e{b};
  Value gate = func.getArgument(0), up = func.getArgument(1);
  Value packed = func.getArgument(2);
  auto type = cast<MemRefType>(packed.getType());
  e.gridStride(type.getNumElements(), [&](Value i) {
    SmallVector<Value> at = e.delinearize(i, packed);
    Value c = at[1];
    Value inBlock = e.remi(c, e.idx(16));
    Value f = e.addi(e.muli(e.divi(c, e.idx(16)), e.idx(8)),
                     e.remi(inBlock, e.idx(8)));
    Value isGate = e.cmp(arith::CmpIPredicate::ult, inBlock, e.idx(8));
    SmallVector<Value> src{f};
    if (type.getRank() == 3)
      src.push_back(at[2]);
    // Grouped (gate of the packed rank): the group first.
    if (cast<MemRefType>(gate.getType()).getRank() == type.getRank())
      src.insert(src.begin(), at[0]);
    Value v = arith::SelectOp::create(b, isGate, e.load(gate, src),
                                      e.load(up, src));
    e.store(e.truncTo(type.getElementType(), v), packed, at);
  });
}

/// dy = 2 (y - target) / (T * H); loss += sum of (y - target)^2 / (T * H),
/// T every rank's tokens (hyper[kHyperTokens], which the runtime fills).
void LayerBuilder::buildLoss(gpu::GPUFuncOp func) {
  ImplicitLocOpBuilder b = kernelBody(func);
  Emitter e{b};
  Value y = func.getArgument(0), target = func.getArgument(1);
  Value hyper = func.getArgument(2), dy = func.getArgument(3);
  Value loss = func.getArgument(4);
  int64_t hidden = config.getHidden();
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
void LayerBuilder::buildRowTokens(gpu::GPUFuncOp func) {
  ImplicitLocOpBuilder b = kernelBody(func);
  Emitter e{b};
  Value rowMap = func.getArgument(0), rowToken = func.getArgument(1);
  int64_t topK = config.getTopK();
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

/// row_dy[r] = dy[t] (in the compute type) for every dispatched row r of
/// token t (padding rows stay as the memset left them: zero).
void LayerBuilder::buildGatherRowDy(gpu::GPUFuncOp func) {
  ImplicitLocOpBuilder b = kernelBody(func);
  Emitter e{b};
  Value dy = func.getArgument(0), rowToken = func.getArgument(1);
  Value offsets = func.getArgument(2), rowDy = func.getArgument(3);
  Value r = e.block();
  forAssignedRow(e, rowToken, offsets, r, [&](Value slot) {
    Value t = e.divi(slot, e.idx(config.getTopK()));
    Type half = cast<MemRefType>(rowDy.getType()).getElementType();
    e.columns(config.getHidden(), [&](Value h) {
      e.store(arith::TruncFOp::create(b, half, e.load(dy, {t, h})), rowDy,
              {r, h});
    });
  });
}

/// dtw[t, j] = dtw_row[r] for the row r of assignment (t, j).
void LayerBuilder::buildScatterRowWeightGrad(gpu::GPUFuncOp func) {
  ImplicitLocOpBuilder b = kernelBody(func);
  Emitter e{b};
  Value rowGrad = func.getArgument(0), rowToken = func.getArgument(1);
  Value offsets = func.getArgument(2), dtw = func.getArgument(3);
  int64_t topK = config.getTopK();
  Value i = e.globalThread(kCountThreads);
  forAssignedRow(e, rowToken, offsets, i, [&](Value slot) {
    e.store(e.load(rowGrad, {i}), dtw,
            {e.divi(slot, e.idx(topK)), e.remi(slot, e.idx(topK))});
  });
}

/// Llama 4 (scale_input): row r of token t holds x[t] * w, so w's gradient
/// is drows[r] . x[t] (the roundings are not differentiated), summed into
/// row_grad[r] for every dispatched row. (drows, row_token, offsets, x,
/// row_grad)
void LayerBuilder::buildScaledWeightGrad(gpu::GPUFuncOp func) {
  ImplicitLocOpBuilder b = kernelBody(func);
  Emitter e{b};
  Value drows = func.getArgument(0), rowToken = func.getArgument(1);
  Value offsets = func.getArgument(2), x = func.getArgument(3);
  Value rowGrad = func.getArgument(4);
  Value r = e.block();
  forAssignedRow(e, rowToken, offsets, r, [&](Value slot) {
    Value t = e.divi(slot, e.idx(config.getTopK()));
    Value partial = e.sum(e.thread(), e.idx(config.getHidden()),
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
void LayerBuilder::buildActGrad(gpu::GPUFuncOp func, bool weighted) {
  ImplicitLocOpBuilder b = kernelBody(func);
  Emitter e{b};
  // gu, gs, groups, dgu, dg, du [, weight, row_grad [, dy, b2]]
  Value gu = func.getArgument(0), gsIn = func.getArgument(1);
  Value groups = func.getArgument(2), dgu = func.getArgument(3);
  Value dgOut = func.getArgument(4), duOut = func.getArgument(5);
  // GPT-OSS: the routed experts' down bias is part of each row's output.
  bool downBias = weighted && config.getExpertBias();
  auto dguType = cast<MemRefType>(dgu.getType());
  int64_t ffn = dguType.getDimSize(1) / 2;
  Type half = dguType.getElementType();
  // GPT-OSS's clamped SwiGLU (not of the shared experts: unweighted).
  bool clamped = weighted && config.isClamped();
  double alpha = clamped ? config.getSwigluAlphaValue() : 1.0;
  double limit = config.getSwigluLimitValue();
  Value r = e.block();
  e.when(inGroups(e, groups, r), [&] {
    Value weight = weighted ? e.load(func.getArgument(6), {r}) : e.f32(1.0);
    Value partial = e.loop(
        e.thread(), e.idx(ffn), e.idx(kRowThreads), {e.f32(0)},
        [&](Value f, ValueRange it) {
          Value gr = gateRow(e, f), ur = e.addi(gateRow(e, f), e.idx(8));
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
      Value dy = func.getArgument(8), b2 = func.getArgument(9);
      Value ex = expertOfRow(e, groups, r);
      partial = e.sum(e.thread(), e.idx(config.getHidden()), e.idx(kRowThreads),
                      partial, [&](Value h) {
                        return e.mul(e.toF32(e.load(dy, {r, h})),
                                     e.toF32(e.load(b2, {ex, h})));
                      });
    }
    if (weighted)
      e.warpAtomicAdd(partial, func.getArgument(7), {r});
  });
}

/// dst[r, h] = w[r] * src[r, h] (w = 1 without weights) in the compute
/// type, for the rows in `groups`: the output gradient as the backward
/// GEMMs read it. (src, groups, dst [, weight])
void LayerBuilder::buildScaleToHalf(gpu::GPUFuncOp func, bool weighted) {
  ImplicitLocOpBuilder b = kernelBody(func);
  Emitter e{b};
  Value src = func.getArgument(0), groups = func.getArgument(1);
  Value dst = func.getArgument(2);
  Type half = cast<MemRefType>(dst.getType()).getElementType();
  Value r = e.block();
  e.when(inGroups(e, groups, r), [&] {
    Value w = weighted ? e.load(func.getArgument(3), {r}) : Value();
    e.columns(config.getHidden(), [&](Value h) {
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
void LayerBuilder::buildRouteGrad(gpu::GPUFuncOp func) {
  ImplicitLocOpBuilder b = kernelBody(func);
  Emitter e{b};
  int64_t experts = config.getExperts();
  int64_t topK = config.getTopK();
  bool sigmoid = config.getScoring() == ScoringFunc::Sigmoid;
  bool normalize = config.getNormTopkProb();
  double scale = config.getRoutedScaleValue();
  // logits [, router_bias], ids, dtw, dl [, dl_half]
  unsigned next = 0;
  auto arg = [&]() { return func.getArgument(next++); };
  Value logits = arg();
  Value routerBias = config.getRouterBias() ? arg() : Value();
  Value ids = arg(), dtw = arg(), dl = arg();
  Value dlHalf = next < func.getNumArguments() ? arg() : Value();
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
void LayerBuilder::buildInputGrad(gpu::GPUFuncOp func, bool routerGemm) {
  ImplicitLocOpBuilder b = kernelBody(func);
  Emitter e{b};
  bool shared = config.hasSharedExperts();
  // drows, row_map [, scales], (dl, router | the router's dx)
  // [, shared dx], dx
  Value drows = func.getArgument(0), rowMap = func.getArgument(1);
  unsigned next = 2;
  // Llama 4: a row is the token times its scale, rounded to the compute
  // type as the dispatch rounded it.
  Value scales = config.getScaleInput() ? func.getArgument(next++) : Value();
  Type half = cast<MemRefType>(drows.getType()).getElementType();
  Value routerDx, dl, wr;
  if (routerGemm) {
    routerDx = func.getArgument(next++);
  } else {
    dl = func.getArgument(next++);
    wr = func.getArgument(next++);
  }
  Value sharedDx = shared ? func.getArgument(next++) : Value();
  Value dz, gate;
  if (shared && config.getSharedGate()) {
    dz = func.getArgument(next++);
    gate = func.getArgument(next++);
  }
  Value dx = func.getArgument(next);
  Value t = e.block();
  e.columns(config.getHidden(), [&](Value h) {
    Value acc = e.loop(
        e.idx(0), e.idx(config.getTopK()), e.idx(1), {e.f32(0)},
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
      acc = e.loop(
          e.idx(0), e.idx(config.getExperts()), e.idx(1), {acc},
          [&](Value ex, ValueRange it) {
            Value p = e.mul(e.load(dl, {t, ex}), e.toF32(e.load(wr, {ex, h})));
            return SmallVector<Value>{e.add(it[0], p)};
          })[0];
    }
    e.store(acc, dx, {t, h});
  });
}

/// One warp per token: dz[t] = (dy[t] . shared_out[t]) * s (1 - s), the
/// gradient of the gate's logit, with s = sigmoid of it (the forward
/// pass's shared_scale).
void LayerBuilder::buildSharedScaleGrad(gpu::GPUFuncOp func) {
  ImplicitLocOpBuilder b = kernelBody(func);
  Emitter e{b};
  Value dy = func.getArgument(0), out = func.getArgument(1);
  Value scale = func.getArgument(2), dz = func.getArgument(3);
  Value lane = e.remi(e.thread(), e.idx(32));
  Value token = e.addi(e.muli(e.block(), e.idx(kRouteWarps)),
                       e.divi(e.thread(), e.idx(32)));
  e.when(e.cmp(arith::CmpIPredicate::ult, token, e.dim(dy, 0)), [&] {
    Value part = e.loop(lane, e.idx(config.getHidden()), e.idx(32), {e.f32(0)},
                        [&](Value h, ValueRange it) {
                          Value p = e.mul(e.load(dy, {token, h}),
                                          e.toF32(e.load(out, {token, h})));
                          return SmallVector<Value>{e.add(it[0], p)};
                        })[0];
    Value sum = e.warpSum(part);
    Value s = e.load(scale, {token});
    Value grad = e.mul(sum, e.mul(s, e.sub(e.f32(1.0), s)));
    e.when(e.cmp(arith::CmpIPredicate::eq, lane, e.idx(0)), [&] {
      e.store(grad, dz, {token, e.idx(0)});
    });
  });
}

/// dRouter[e, h] = sum_t dl[t, e] * x[t, h].
void LayerBuilder::buildRouterGrad(gpu::GPUFuncOp func) {
  ImplicitLocOpBuilder b = kernelBody(func);
  Emitter e{b};
  Value dl = func.getArgument(0), x = func.getArgument(1);
  Value grad = func.getArgument(2);
  Value ex = e.block();
  e.columns(config.getHidden(), [&](Value h) {
    Value acc = e.loop(
        e.idx(0), e.dim(x, 0), e.idx(1), {e.f32(0)},
        [&](Value t, ValueRange it) {
          Value p = e.mul(e.load(dl, {t, ex}), e.toF32(e.load(x, {t, h})));
          return SmallVector<Value>{e.add(it[0], p)};
        })[0];
    e.store(acc, grad, {ex, h});
  });
}

/// out[c] = sum_t in[t, c] over the rows of an f32 `in` [T, C]: the
/// gradient of a bias added to every row (JetMoE's output bias from dy).
/// A thread a column, summing in token order.
void LayerBuilder::buildColumnSum(gpu::GPUFuncOp func) {
  ImplicitLocOpBuilder b = kernelBody(func);
  Emitter e{b};
  Value in = func.getArgument(0), out = func.getArgument(1);
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
void LayerBuilder::buildGroupedColumnSum(gpu::GPUFuncOp func, bool accumulate) {
  ImplicitLocOpBuilder b = kernelBody(func);
  Emitter e{b};
  Value in = func.getArgument(0), groups = func.getArgument(1);
  Value out = func.getArgument(2);
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
void LayerBuilder::buildTokenOffsets(gpu::GPUFuncOp func) {
  ImplicitLocOpBuilder b = kernelBody(func);
  Emitter e{b};
  Value x = func.getArgument(0), offsets = func.getArgument(1);
  e.when(e.cmp(arith::CmpIPredicate::eq, e.thread(), e.idx(0)), [&] {
    e.store(e.i32(0), offsets, {e.idx(0)});
    e.store(arith::IndexCastOp::create(b, b.getI32Type(), e.dim(x, 0)),
            offsets, {e.idx(1)});
  });
}

/// load[e] = this rank's tokens routed to expert e.
void LayerBuilder::buildLoad(gpu::GPUFuncOp func) {
  ImplicitLocOpBuilder b = kernelBody(func);
  Emitter e{b};
  Value counts = func.getArgument(0), load = func.getArgument(1);
  int64_t experts = config.getExperts();
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
void LayerBuilder::buildBias(gpu::GPUFuncOp func) {
  ImplicitLocOpBuilder b = kernelBody(func);
  Emitter e{b};
  Value load = func.getArgument(0), hyper = func.getArgument(1);
  Value bias = func.getArgument(2);
  int64_t experts = config.getExperts();
  Value ex = e.globalThread(kCountThreads);
  e.when(e.cmp(arith::CmpIPredicate::ult, ex, e.idx(experts)), [&] {
    Value tokens = e.load(hyper, {e.idx(kHyperTokens)});
    Value mean =
        e.div(e.mul(tokens, e.f32(static_cast<double>(config.getTopK()))),
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

/// AdamW on one f32 master weight, in place: (p, m, v, grad, hyper).
void LayerBuilder::buildAdamW(gpu::GPUFuncOp func) {
  ImplicitLocOpBuilder b = kernelBody(func);
  Emitter e{b};
  Value p = func.getArgument(0), m = func.getArgument(1);
  Value v = func.getArgument(2), grad = func.getArgument(3);
  Value hyper = func.getArgument(4);
  e.gridStride(cast<MemRefType>(p.getType()).getNumElements(), [&](Value i) {
    SmallVector<Value> at = e.delinearize(i, p);
    AdamWValues next = adamwStep(e, hyper, e.load(p, at), e.load(m, at),
                                 e.load(v, at), e.load(grad, at));
    e.store(next.p, p, at);
    e.store(next.m, m, at);
    e.store(next.v, v, at);
  });
}

/// What the runtime checks before it runs the update: over weight
/// `index`'s elements (a grid-stride loop), the sum of its gradient's
/// squares into grad_sq[index] and the count of elements whose AdamW step
/// would make the master or a moment non-finite into bad[index]; each
/// warp adds its lanes' sums (a butterfly of shuffles) with one atomic.
/// (p, m, v, grad, hyper, grad_sq, bad)
void LayerBuilder::buildUpdateCheck(gpu::GPUFuncOp func, int64_t index) {
  ImplicitLocOpBuilder b = kernelBody(func);
  Emitter e{b};
  Value p = func.getArgument(0), m = func.getArgument(1);
  Value v = func.getArgument(2), grad = func.getArgument(3);
  Value hyper = func.getArgument(4), gradSq = func.getArgument(5);
  Value bad = func.getArgument(6);
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

