//===- KernelBuilder.h - Shorthands for building kernel code ---*- C++ -*-===//
//
// Part of moe-compiler. One builder of scalar kernel code for every
// lowering: the sm_90a SIMT kernels (convert-moe-to-moegpu), the host loops
// (convert-moe-to-host) and the warp-specialized GEMMs
// (convert-moegpu-to-nvgpu) all build constants, conversions, arithmetic,
// loads and stores, loops and conditionals through it.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_CONVERSION_KERNELBUILDER_H
#define MOE_CONVERSION_KERNELBUILDER_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"

namespace mlir::moe {

/// Builds at `b`'s insertion point and location. Float arithmetic is f32
/// unless the operands say otherwise; integer division and remainder are
/// unsigned (indices and counts).
struct KernelBuilder {
  ImplicitLocOpBuilder &b;

  Value idx(int64_t v) { return arith::ConstantIndexOp::create(b, v); }
  Value f32(double v) {
    return arith::ConstantFloatOp::create(b, b.getF32Type(),
                                          APFloat(static_cast<float>(v)));
  }
  Value i32(int64_t v) { return arith::ConstantIntOp::create(b, v, 32); }
  Value toF32(Value v) {
    return v.getType().isF32() ? v
                               : arith::ExtFOp::create(b, b.getF32Type(), v);
  }
  Value cmp(arith::CmpIPredicate p, Value l, Value r) {
    return arith::CmpIOp::create(b, p, l, r);
  }
  Value load(Value memref, ValueRange indices) {
    return memref::LoadOp::create(b, memref, indices);
  }
  void store(Value v, Value memref, ValueRange indices) {
    memref::StoreOp::create(b, v, memref, indices);
  }
  /// for (i = lb; i < ub; i += step) body(i, iterArgs) -> results.
  ValueRange loop(Value lb, Value ub, Value step, ValueRange init,
                  function_ref<SmallVector<Value>(Value, ValueRange)> body) {
    // The body is built inside scf.for's builder callback, so no implicit
    // terminator is made and erased (a rewriter listening to `b` would
    // see an op vanish behind its back).
    auto op = scf::ForOp::create(
        b, lb, ub, step, init,
        [&](OpBuilder &, Location, Value iv, ValueRange carried) {
          ImplicitLocOpBuilder::InsertionGuard guard(b);
          b.setInsertionPointToEnd(iv.getParentBlock());
          scf::YieldOp::create(b, body(iv, carried));
        });
    return op.getResults();
  }
  void when(Value cond, function_ref<void()> body) {
    auto op = scf::IfOp::create(b, cond, /*withElseRegion=*/false);
    ImplicitLocOpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(op.thenBlock()->getTerminator());
    body();
  }
  Value add(Value l, Value r) { return arith::AddFOp::create(b, l, r); }
  Value sub(Value l, Value r) { return arith::SubFOp::create(b, l, r); }
  Value mul(Value l, Value r) { return arith::MulFOp::create(b, l, r); }
  Value div(Value l, Value r) { return arith::DivFOp::create(b, l, r); }
  Value addi(Value l, Value r) { return arith::AddIOp::create(b, l, r); }
  Value muli(Value l, Value r) { return arith::MulIOp::create(b, l, r); }
  Value subi(Value l, Value r) { return arith::SubIOp::create(b, l, r); }
  Value divi(Value l, Value r) { return arith::DivUIOp::create(b, l, r); }
  Value remi(Value l, Value r) { return arith::RemUIOp::create(b, l, r); }
  Value index(Value i32) {
    return arith::IndexCastOp::create(b, b.getIndexType(), i32);
  }
  Value dim(Value memref, int64_t i) {
    return memref::DimOp::create(b, memref, i);
  }
  Value truncTo(Type type, Value v) {
    return type == v.getType() ? v : arith::TruncFOp::create(b, type, v);
  }
  /// The indices of element `linear` of a row-major memref.
  SmallVector<Value> delinearize(Value linear, Value memref) {
    auto type = cast<MemRefType>(memref.getType());
    SmallVector<Value> out(type.getRank());
    for (int64_t d = type.getRank() - 1; d >= 0; --d) {
      Value size = dim(memref, d);
      out[d] = d == 0 ? linear : remi(linear, size);
      linear = divi(linear, size);
    }
    return out;
  }
  /// GPT-OSS's clamp before its SwiGLU, of f32 gate and up: min(gate,
  /// limit), and up clamped to [-limit, limit] plus one. minimumf and
  /// maximumf propagate a NaN, as torch.clamp does.
  std::pair<Value, Value> clampGateUp(Value gate, Value up, double limit) {
    Value g = arith::MinimumFOp::create(b, gate, f32(limit));
    Value u = arith::MaximumFOp::create(
        b, arith::MinimumFOp::create(b, up, f32(limit)), f32(-limit));
    return {g, add(u, f32(1.0))};
  }
  /// Whether the gradient passes that clamp, of the gate and of up (it
  /// does at the bounds, as torch.clamp's does).
  std::pair<Value, Value> clampPasses(Value gate, Value up, double limit) {
    auto le = [&](Value l, Value r) {
      return arith::CmpFOp::create(b, arith::CmpFPredicate::OLE, l, r);
    };
    return {le(gate, f32(limit)),
            arith::AndIOp::create(b, le(f32(-limit), up), le(up, f32(limit)))};
  }
  /// `base` to the power `n` (f32, 0 <= n < 2^31) by squaring.
  Value powi(Value base, Value n) {
    Value exponent = arith::FPToUIOp::create(b, b.getI32Type(), n);
    ValueRange r = loop(
        idx(0), idx(31), idx(1), {f32(1.0), base},
        [&](Value bit, ValueRange it) {
          Value mask = arith::ShLIOp::create(
              b, i32(1), arith::IndexCastOp::create(b, b.getI32Type(), bit));
          Value set = cmp(arith::CmpIPredicate::ne,
                          arith::AndIOp::create(b, exponent, mask), i32(0));
          Value next =
              arith::SelectOp::create(b, set, mul(it[0], it[1]), it[0]);
          return SmallVector<Value>{next, mul(it[1], it[1])};
        });
    return r[0];
  }
};

} // namespace mlir::moe

#endif // MOE_CONVERSION_KERNELBUILDER_H
