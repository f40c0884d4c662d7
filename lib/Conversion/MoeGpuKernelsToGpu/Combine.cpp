//===- Combine.cpp - The combine kernel -----------------------------------===//
//
// Part of moe-compiler.
//
//===----------------------------------------------------------------------===//

#include "Lowering.h"

using namespace mlir;
using namespace mlir::moe;
using namespace mlir::moe::kernels;

/// One CTA per token, its threads striding over 16-byte chunks of the row.
static void lowerCombine(moegpu::CombineOp op, Emitter &e) {
  ImplicitLocOpBuilder &b = e.b;
  Value down = op.getDown(), rowMap = op.getRowMap();
  Value sharedOut = op.getSharedOut(), sharedScale = op.getSharedScale();
  Value outBias = op.getOutputBias(), y = op.getY();
  bool shared = static_cast<bool>(sharedOut);
  bool gated = static_cast<bool>(sharedScale);
  Type outType = cast<MemRefType>(y.getType()).getElementType();
  Value t = gpu::BlockIdOp::create(b, gpu::Dimension::x);
  Value tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
  auto align = b.getI64IntegerAttr(kChunkBytes);
  forRowChunks(e, tid, op.getY().getType().getDimSize(1), outType,
               [&](Value h, Type chunk) {
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
        e.idx(0), e.idx(op.getTopK()), e.idx(1), {zero},
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

void kernels::populateCombinePatterns(RewritePatternSet &patterns) {
  patterns.add<LowerKernel<moegpu::CombineOp, lowerCombine>>(
      patterns.getContext());
}
