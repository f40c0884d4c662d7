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

void LayerBuilder::buildRoute(gpu::GPUFuncOp func) {
  ImplicitLocOpBuilder b = kernelBody(func);
  Emitter e{b};
  int64_t experts = config.getExperts(), hidden = config.getHidden();
  int64_t topK = config.getTopK(), groups = config.getGroups();
  bool bias = config.getScoreBias();
  Value x = func.getArgument(0), wr = func.getArgument(1);
  Value biasArg = bias ? func.getArgument(2) : Value();
  Value ids = func.getArgument(bias ? 3 : 2);
  Value weights = func.getArgument(bias ? 4 : 3);
  Value scores = func.getWorkgroupAttributions()[0];
  Value sel = func.getWorkgroupAttributions()[1];

  Value tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
  Value warp = arith::DivUIOp::create(b, tid, e.idx(32));
  Value lane = arith::RemUIOp::create(b, tid, e.idx(32));
  Value token = arith::AddIOp::create(
      b,
      arith::MulIOp::create(b, gpu::BlockIdOp::create(b, gpu::Dimension::x),
                            e.idx(kRouteWarps)),
      warp);
  Value tokens = memref::DimOp::create(b, x, 0);
  Value valid = e.cmp(arith::CmpIPredicate::ult, token, tokens);
  bool sigmoid = config.getScoring() == ScoringFunc::Sigmoid;

  // Router logits: lane l computes experts l, l + 32, ...
  e.when(valid, [&] {
    e.loop(lane, e.idx(experts), e.idx(32), {}, [&](Value ex, ValueRange) {
      Value acc = e.loop(
          e.idx(0), e.idx(hidden), e.idx(1), {e.f32(0)},
          [&](Value h, ValueRange it) {
            Value p = arith::MulFOp::create(b, e.toF32(e.load(x, {token, h})),
                                            e.toF32(e.load(wr, {ex, h})));
            return SmallVector<Value>{arith::AddFOp::create(b, it[0], p)};
          })[0];
      e.store(sigmoid ? e.sigmoid(acc) : acc, scores, {warp, ex});
      return SmallVector<Value>{};
    });
  });
  gpu::BarrierOp::create(b);

  Value leader = arith::AndIOp::create(
      b, valid, e.cmp(arith::CmpIPredicate::eq, lane, e.idx(0)));
  e.when(leader, [&] {
    Value zero = e.idx(0), one = e.idx(1), nE = e.idx(experts);
    if (!sigmoid) {
      Value max = e.loop(
          zero, nE, one, {e.f32(-INFINITY)}, [&](Value i, ValueRange it) {
            return SmallVector<Value>{
                arith::MaximumFOp::create(b, it[0], e.load(scores, {warp, i}))};
          })[0];
      Value sum =
          e.loop(zero, nE, one, {e.f32(0)}, [&](Value i, ValueRange it) {
            Value v =
                e.exp(arith::SubFOp::create(b, e.load(scores, {warp, i}), max));
            e.store(v, scores, {warp, i});
            return SmallVector<Value>{arith::AddFOp::create(b, it[0], v)};
          })[0];
      e.loop(zero, nE, one, {}, [&](Value i, ValueRange) {
        e.store(arith::DivFOp::create(b, e.load(scores, {warp, i}), sum),
                scores, {warp, i});
        return SmallVector<Value>{};
      });
    }
    // Selection scores: biased, NaN read as -inf (a NaN input never makes
    // the selection repeat or leave the experts), and masked outside the
    // kept groups. NaN in `sel` and `gsc` marks what is excluded.
    e.loop(zero, nE, one, {}, [&](Value i, ValueRange) {
      Value v = e.load(scores, {warp, i});
      if (bias)
        v = arith::AddFOp::create(b, v, e.load(biasArg, {i}));
      e.store(e.ordered(v), sel, {warp, i});
      return SmallVector<Value>{};
    });
    if (groups > 1) {
      Value gsc = func.getWorkgroupAttributions()[2];
      int64_t perGroup = config.getExpertsPerGroup();
      bool top2 = config.getGroupScore() == GroupScore::SumTop2;
      e.loop(zero, e.idx(groups), one, {}, [&](Value g, ValueRange) {
        Value first = arith::MulIOp::create(b, g, e.idx(perGroup));
        ValueRange best = e.loop(
            zero, e.idx(perGroup), one, {e.f32(-INFINITY), e.f32(-INFINITY)},
            [&](Value i, ValueRange it) {
              Value v = e.load(sel, {warp, arith::AddIOp::create(b, first, i)});
              Value gt1 =
                  arith::CmpFOp::create(b, arith::CmpFPredicate::OGT, v, it[0]);
              Value gt2 =
                  arith::CmpFOp::create(b, arith::CmpFPredicate::OGT, v, it[1]);
              Value m2 = arith::SelectOp::create(
                  b, gt1, it[0], arith::SelectOp::create(b, gt2, v, it[1]));
              Value m1 = arith::SelectOp::create(b, gt1, v, it[0]);
              return SmallVector<Value>{m1, m2};
            });
        Value score =
            top2 ? arith::AddFOp::create(b, best[0], best[1]) : best[0];
        e.store(e.ordered(score), gsc, {warp, g});
        return SmallVector<Value>{};
      });
      // Keep the topk_groups best groups: a kept group's score becomes
      // NaN (excluded from the next argmax), every other group's experts
      // are masked with NaN.
      e.loop(zero, e.idx(config.getTopkGroups()), one, {},
             [&](Value, ValueRange) {
               auto [g, v] = e.argmax(
                   groups, [&](Value i) { return e.load(gsc, {warp, i}); });
               (void)v;
               e.store(e.f32(NAN), gsc, {warp, g});
               return SmallVector<Value>{};
             });
      e.loop(zero, nE, one, {}, [&](Value i, ValueRange) {
        Value g = arith::DivUIOp::create(b, i, e.idx(perGroup));
        Value s = e.load(gsc, {warp, g});
        Value kept = arith::CmpFOp::create(b, arith::CmpFPredicate::UNO, s, s);
        e.when(arith::XOrIOp::create(b, kept,
                                     arith::ConstantIntOp::create(b, 1, 1)),
               [&] { e.store(e.f32(NAN), sel, {warp, i}); });
        return SmallVector<Value>{};
      });
    }
    // Top-k over the selection scores; weights from the unbiased scores.
    Value sum =
        e.loop(zero, e.idx(topK), one, {e.f32(0)}, [&](Value j, ValueRange it) {
          auto [best, v] = e.argmax(experts, [&](Value i) {
            return e.load(sel, {warp, i});
          });
          (void)v;
          Value w = e.load(scores, {warp, best});
          e.store(arith::IndexCastOp::create(b, b.getI32Type(), best), ids,
                  {token, j});
          e.store(w, weights, {token, j});
          e.store(e.f32(NAN), sel, {warp, best});
          return SmallVector<Value>{arith::AddFOp::create(b, it[0], w)};
        })[0];
    bool normalize = config.getNormTopkProb();
    double scale = config.getRoutedScaleValue();
    if (normalize || scale != 1.0)
      e.loop(zero, e.idx(topK), one, {}, [&](Value j, ValueRange) {
        Value w = e.load(weights, {token, j});
        if (normalize)
          w = arith::DivFOp::create(b, w, sum);
        if (scale != 1.0)
          w = arith::MulFOp::create(b, w, e.f32(scale));
        e.store(w, weights, {token, j});
        return SmallVector<Value>{};
      });
  });
}

void LayerBuilder::buildCount(gpu::GPUFuncOp func) {
  ImplicitLocOpBuilder b = kernelBody(func);
  Emitter e{b};
  Value ids = func.getArgument(0), counts = func.getArgument(1);
  int64_t topK = config.getTopK();
  Value i = arith::AddIOp::create(
      b,
      arith::MulIOp::create(b, gpu::BlockIdOp::create(b, gpu::Dimension::x),
                            e.idx(kCountThreads)),
      gpu::ThreadIdOp::create(b, gpu::Dimension::x));
  Value n =
      arith::MulIOp::create(b, memref::DimOp::create(b, ids, 0), e.idx(topK));
  e.when(e.cmp(arith::CmpIPredicate::ult, i, n), [&] {
    Value id = e.load(ids, {arith::DivUIOp::create(b, i, e.idx(topK)),
                            arith::RemUIOp::create(b, i, e.idx(topK))});
    Value inRange = arith::AndIOp::create(
        b, e.cmp(arith::CmpIPredicate::sge, id, e.i32(0)),
        e.cmp(arith::CmpIPredicate::slt, id, e.i32(config.getExperts())));
    e.when(inRange, [&] {
      memref::AtomicRMWOp::create(
          b, arith::AtomicRMWKind::addi, e.i32(1), counts,
          ValueRange{arith::IndexCastOp::create(b, b.getIndexType(), id)});
    });
  });
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
  int64_t experts = config.getExperts();
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
      Value p = memref::AtomicRMWOp::create(
          b, arith::AtomicRMWKind::addi, e.i32(1), cursors,
          ValueRange{arith::IndexCastOp::create(b, b.getIndexType(), id)});
      e.store(e.load(weights, {t, j}), rowWeight,
              {arith::IndexCastOp::create(b, b.getIndexType(), p)});
      scf::YieldOp::create(b, p);
      b.setInsertionPointToStart(ifOp.elseBlock());
      scf::YieldOp::create(b, e.i32(-1));
    }
    e.store(ifOp.getResult(0), rowMap, {t, j});
    e.store(ifOp.getResult(0), pos, {e.idx(0)});
  });
  gpu::BarrierOp::create(b);
  Value p = e.load(pos, {e.idx(0)});
  e.when(e.cmp(arith::CmpIPredicate::sge, p, e.i32(0)), [&] {
    Value row = arith::IndexCastOp::create(b, b.getIndexType(), p);
    forRowChunks(e, tid, [&](Value h, Type chunk) {
      if (auto vec = dyn_cast_if_present<VectorType>(chunk))
        vector::StoreOp::create(
            b, vector::LoadOp::create(b, vec, x, ValueRange{t, h}, false,
                                      b.getI64IntegerAttr(kChunkBytes)),
            rows, ValueRange{row, h}, false, b.getI64IntegerAttr(kChunkBytes));
      else
        e.store(e.load(x, {t, h}), rows, {row, h});
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
  Value sharedOut = shared ? func.getArgument(2) : Value();
  Value y = func.getArgument(shared ? 3 : 2);
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
    if (shared)
      acc = arith::AddFOp::create(b, acc, loadF32(sharedOut, t));
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

void LayerBuilder::buildGemm(gpu::GPUFuncOp func, moegpu::Epilogue epilogue) {
  OpBuilder b = builderAt(func.front().getTerminator());
  Value scale =
      epilogue == moegpu::Epilogue::RowScale ? func.getArgument(4) : Value();
  moegpu::GroupedGemmOp::create(b, layer.getLoc(), func.getArgument(0),
                                func.getArgument(1), func.getArgument(2),
                                func.getArgument(3), scale,
                                moegpu::EpilogueAttr::get(ctx, epilogue),
                                moegpu::TileAttr(), moegpu::SmRangeAttr());
}

