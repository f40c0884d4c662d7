//===- Dispatch.cpp - The dispatch's scan and scatter kernels -------------===//
//
// Part of moe-compiler.
//
//===----------------------------------------------------------------------===//

#include "Lowering.h"

using namespace mlir;
using namespace mlir::moe;
using namespace mlir::moe::kernels;

void kernels::forRowChunks(Emitter &e, Value tid, int64_t hidden, Type element,
                           function_ref<void(Value, Type)> body) {
  ImplicitLocOpBuilder &b = e.b;
  int64_t per = kChunkBytes / 2;
  if (hidden % per != 0) {
    e.loop(tid, e.idx(hidden), e.idx(kRowThreads), {},
           [&](Value h, ValueRange) {
             body(h, Type());
             return SmallVector<Value>{};
           });
    return;
  }
  auto chunk = VectorType::get({per}, element);
  e.loop(arith::MulIOp::create(b, tid, e.idx(per)), e.idx(hidden),
         e.idx(kRowThreads * per), {}, [&](Value h, ValueRange) {
           body(h, chunk);
           return SmallVector<Value>{};
         });
}

/// Each expert's segment of the dispatched rows, aligned: offsets are the
/// exclusive prefix sums of the aligned counts. One CTA: thread t sums the
/// aligned counts of its run of ceil(E / kScanThreads) experts, a
/// Hillis-Steele scan over the threads' sums in shared memory gives each
/// run's start, and each thread then writes its experts' offsets and
/// cursors.
static void lowerScan(moegpu::DispatchScanOp op, Emitter &e) {
  ImplicitLocOpBuilder &b = e.b;
  Value ids = op.getIds(), counts = op.getCounts();
  Value offsets = op.getOffsets(), cursors = op.getCursors();
  int64_t alignment = op.getAlignment();
  // The threads' sums in shared memory.
  auto func = op->getParentOfType<gpu::GPUFuncOp>();
  auto wg = gpu::AddressSpaceAttr::get(b.getContext(),
                                       gpu::AddressSpace::Workgroup);
  Value sums = func.addWorkgroupAttribution(
      MemRefType::get({kScanThreads}, b.getI32Type(), AffineMap(), wg),
      op.getLoc());
  // The segments: experts, or (chunk, expert) pairs chunk-major.
  int64_t experts = op.getCounts().getType().getDimSize(0);
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
    if (Value shared = op.getSharedOffsets()) {
      e.store(e.i32(0), shared, {e.idx(0)});
      e.store(arith::IndexCastOp::create(b, b.getI32Type(),
                                         memref::DimOp::create(b, ids, 0)),
              shared, {e.idx(1)});
    }
  });
}

/// One assignment (t, j) of the CTA's: thread 0 takes the row from the
/// segment's cursor, every thread copies a share of the token's row.
static void lowerScatterAssignment(moegpu::DispatchScatterOp op, Emitter &e,
                                   Value i, Value t) {
  ImplicitLocOpBuilder &b = e.b;
  Value x = op.getX(), ids = op.getIds();
  Value weights = op.getWeights(), cursors = op.getCursors();
  Value rows = op.getRows(), rowMap = op.getRowMap();
  Value rowWeight = op.getRowWeight();
  int64_t topK = op.getIds().getType().getDimSize(1);
  int64_t experts = op.getExperts(), chunks = op.getChunks();
  int64_t hidden = op.getX().getType().getDimSize(1);
  // The assignment's row, for every thread of the CTA.
  auto wg = gpu::AddressSpaceAttr::get(b.getContext(),
                                       gpu::AddressSpace::Workgroup);
  Value pos = op->getParentOfType<gpu::GPUFuncOp>().addWorkgroupAttribution(
      MemRefType::get({1}, b.getI32Type(), AffineMap(), wg), op.getLoc());
  Value tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
  Value j = arith::RemUIOp::create(b, i, e.idx(topK));
  e.when(e.cmp(arith::CmpIPredicate::eq, tid, e.idx(0)), [&] {
    Value id = e.load(ids, {t, j});
    Value inRange = arith::AndIOp::create(
        b, e.cmp(arith::CmpIPredicate::sge, id, e.i32(0)),
        e.cmp(arith::CmpIPredicate::slt, id, e.i32(experts)));
    auto ifOp = scf::IfOp::create(b, b.getI32Type(), inRange, true);
    {
      ImplicitLocOpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(ifOp.thenBlock());
      Value segment = arith::IndexCastOp::create(b, b.getIndexType(), id);
      if (chunks > 1)
        segment = e.addi(
            e.muli(chunkOf(e, t, e.dim(ids, 0), chunks), e.idx(experts)),
            segment);
      Value p = memref::AtomicRMWOp::create(
          b, arith::AtomicRMWKind::addi, e.i32(1), cursors,
          ValueRange{segment});
      // With scale_input the row carries the weight and the down
      // projection's row scale is 1.
      e.store(op.getScaleInput() ? e.f32(1) : e.load(weights, {t, j}),
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
  bool codes = op.copiesCodes();
  e.when(e.cmp(arith::CmpIPredicate::sge, p, e.i32(0)), [&] {
    Value row = arith::IndexCastOp::create(b, b.getIndexType(), p);
    if (codes) {
      Value xScale = op.getXScale(), rowScale = op.getRowScale();
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
      e.loop(tid, e.idx(op.getRowScale().getType().getDimSize(1)),
             e.idx(kRowThreads), {},
             [&](Value c, ValueRange) {
               e.store(e.load(xScale, {t, c}), rowScale, {row, c});
               return SmallVector<Value>{};
             });
      return;
    }
    // Llama 4 (scale_input): x[t] times the weight rounded to the element
    // type, the product in f32 rounded once more.
    Type elt = op.getX().getType().getElementType();
    Value scale;
    if (op.getScaleInput()) {
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
    forRowChunks(e, tid, hidden, elt, [&](Value h, Type chunk) {
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

/// One CTA per assignment (t, j); CTAs past the assignments (a launch
/// sized for more tokens) do nothing.
static void lowerScatter(moegpu::DispatchScatterOp op, Emitter &e) {
  ImplicitLocOpBuilder &b = e.b;
  int64_t topK = op.getIds().getType().getDimSize(1);
  Value i = gpu::BlockIdOp::create(b, gpu::Dimension::x);
  Value t = arith::DivUIOp::create(b, i, e.idx(topK));
  Value tokens = e.dim(op.getIds(), 0);
  e.when(e.cmp(arith::CmpIPredicate::ult, t, tokens),
         [&] { lowerScatterAssignment(op, e, i, t); });
}

void kernels::populateDispatchPatterns(RewritePatternSet &patterns) {
  patterns.add<LowerKernel<moegpu::DispatchScanOp, lowerScan>,
               LowerKernel<moegpu::DispatchScatterOp, lowerScatter>>(
      patterns.getContext());
}
