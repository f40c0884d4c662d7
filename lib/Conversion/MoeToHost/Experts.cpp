//===- Experts.cpp - Expert FFNs on the host ------------------------------===//
//
// Part of moe-compiler.
//
// The grouped GEMMs over expert segments (and their dX and dW), SwiGLU
// (and its gradient) and the dense shared expert.
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

using namespace mlir;
using namespace mlir::moe;
using namespace mlir::moe::host;

namespace {

using Builder = host::Builder;

Value silu(Builder &b, Value x) {
  return arith::MulFOp::create(b, x, sigmoid(b, x));
}

Value lowerSwiGLU(Builder &b, SwiGLUOp op) {
  Type elt = op.getType().getElementType();
  return elementwise(b, ValueRange{op.getGate(), op.getUp()}, elt,
                     [](Builder &nb, ValueRange v) {
                       return arith::MulFOp::create(nb, silu(nb, v[0]), v[1]);
                     });
}

/// Rounds an f32 tensor to `elt` (identity for f32): projections produce
/// the layer's element type, as a framework's Linear does.
Value roundTo(Builder &b, Value f32Tensor, Type elt) {
  if (elt.isF32())
    return f32Tensor;
  return elementwise(b, f32Tensor, elt,
                     [](Builder &, ValueRange v) { return v[0]; });
}

Value lowerSharedExpert(Builder &b, SharedExpertOp op) {
  Type elt = op.getType().getElementType();
  Value x = op.getInput();
  Value gate = roundTo(b, matmulTransposeB(b, x, op.getGateWeight()), elt);
  Value up = roundTo(b, matmulTransposeB(b, x, op.getUpWeight()), elt);
  Value act =
      elementwise(b, ValueRange{gate, up}, elt, [](Builder &nb, ValueRange v) {
        return arith::MulFOp::create(nb, silu(nb, v[0]), v[1]);
      });
  Value down = matmulTransposeB(b, act, op.getDownWeight());
  if (!op.getExpertGate())
    return roundTo(b, down, elt);
  // Qwen2-MoE: the shared output times sigmoid(x * g^T), per token.
  Value gateLogit = matmulTransposeB(b, x, op.getExpertGate()); // [T, 1]
  auto gateType = cast<RankedTensorType>(gateLogit.getType());
  auto rowType =
      RankedTensorType::get({gateType.getDimSize(0)}, b.getF32Type());
  SmallVector<ReassociationIndices> collapse = {{0, 1}};
  Value gateRow =
      tensor::CollapseShapeOp::create(b, rowType, gateLogit, collapse);
  Value gated =
      withRowValue(b, down, gateRow, [](Builder &nb, Value v, Value g) {
        return arith::MulFOp::create(nb, v, sigmoid(nb, g));
      });
  return roundTo(b, gated, elt);
}

/// Rows [lo, hi) of expert `e`'s segment, clamped to [0, rows]: no input
/// makes the generated code read or write out of bounds.
std::pair<Value, Value> segment(Builder &b, Value offsets, Value e,
                                Value rows) {
  Value zero = indexConst(b, 0);
  auto at = [&](Value i) -> Value {
    Value v = arith::IndexCastOp::create(
        b, b.getIndexType(), memref::LoadOp::create(b, offsets, ValueRange{i}));
    return arith::MinSIOp::create(b, arith::MaxSIOp::create(b, v, zero), rows);
  };
  Value lo = at(e);
  Value hi = arith::MaxSIOp::create(
      b, lo, at(arith::AddIOp::create(b, e, indexConst(b, 1))));
  return {lo, hi};
}

/// The grouped GEMM over expert segments: `out[r, c] = sum_i in[r, i] *
/// w[e, c, i]`, or with `transposeWeight` `sum_i in[r, i] * w[e, i, c]`,
/// accumulated in f32; rows outside every segment are zero.
Value groupedGemm(Builder &b, Value inputTensor, Value weightTensor,
                  Value offsetsTensor, RankedTensorType outType,
                  bool transposeWeight) {
  auto weightType = cast<RankedTensorType>(weightTensor.getType());
  int64_t experts = weightType.getDimSize(0);
  int64_t reduction = weightType.getDimSize(transposeWeight ? 1 : 2);
  int64_t columns = outType.getDimSize(1);
  Type elt = outType.getElementType();
  Value input = asBuffer(b, inputTensor);
  Value weight = asBuffer(b, weightTensor);
  Value offsets = asBuffer(b, offsetsTensor);
  Value rows = dim(b, input, 0);
  Value out = alloc(b, MemRefType::get(outType.getShape(), elt),
                    dynamicSizes(b, outType, input));
  fillBuffer(b, out, arith::ConstantOp::create(b, b.getFloatAttr(elt, 0.0)));
  forLoop(b, experts, [&](Builder &b, Value e) {
    auto [lo, hi] = segment(b, offsets, e, rows);
    forLoop(b, lo, hi, [&](Builder &b, Value r) {
      forLoop(b, columns, [&](Builder &b, Value c) {
        Value acc = forLoopCarrying(
            b, indexConst(b, 0), indexConst(b, reduction),
            ValueRange{f32Const(b, 0.0)},
            [&](Builder &b, Value i, ValueRange carried) -> SmallVector<Value> {
              Value a =
                  toF32(b, memref::LoadOp::create(b, input, ValueRange{r, i}));
              SmallVector<Value, 3> at{e, c, i};
              if (transposeWeight)
                std::swap(at[1], at[2]);
              Value w = toF32(b, memref::LoadOp::create(b, weight, at));
              Value prod = arith::MulFOp::create(b, a, w, reductionFlags(b));
              return {arith::AddFOp::create(b, carried[0], prod,
                                            reductionFlags(b))};
            })[0];
        memref::StoreOp::create(b, fromF32(b, acc, elt), out, ValueRange{r, c});
      });
    });
  });
  return asTensor(b, out);
}

Value lowerGroupedMatmul(Builder &b, GroupedMatmulOp op) {
  return groupedGemm(b, op.getInput(), op.getWeight(), op.getOffsets(),
                     cast<RankedTensorType>(op.getOutput().getType()),
                     /*transposeWeight=*/false);
}

/// gate_grad and up_grad of silu(gate) * up, elementwise in f32.
std::pair<Value, Value> lowerSwiGLUGrad(Builder &b, SwiGLUGradOp op) {
  Type elt = op.getGate().getType().getElementType();
  ValueRange inputs{op.getGate(), op.getUp(), op.getGrad()};
  Value gateGrad = elementwise(b, inputs, elt, [](Builder &nb, ValueRange v) {
    Value s = sigmoid(nb, v[0]);
    Value one = f32Const(nb, 1.0);
    // d silu(g)/dg = s * (1 + g * (1 - s))
    Value dsilu = arith::MulFOp::create(
        nb, s,
        arith::AddFOp::create(
            nb, one,
            arith::MulFOp::create(nb, v[0],
                                  arith::SubFOp::create(nb, one, s))));
    return arith::MulFOp::create(nb, arith::MulFOp::create(nb, v[2], v[1]),
                                 dsilu);
  });
  Value upGrad = elementwise(b, inputs, elt, [](Builder &nb, ValueRange v) {
    return arith::MulFOp::create(nb, v[2], silu(nb, v[0]));
  });
  return {gateGrad, upGrad};
}

/// input_grad[r, k] = sum_n grad[r, n] * w[e, n, k] over expert e's rows.
Value lowerGroupedMatmulDx(Builder &b, GroupedMatmulDxOp op) {
  return groupedGemm(b, op.getGrad(), op.getWeight(), op.getOffsets(),
                     cast<RankedTensorType>(op.getInputGrad().getType()),
                     /*transposeWeight=*/true);
}

/// weight_grad[e, n, k] = sum over expert e's rows r of grad[r, n] * in[r, k].
Value lowerGroupedMatmulDw(Builder &b, GroupedMatmulDwOp op) {
  auto outType = cast<RankedTensorType>(op.getWeightGrad().getType());
  int64_t experts = outType.getDimSize(0), n = outType.getDimSize(1),
          kSize = outType.getDimSize(2);
  Value input = asBuffer(b, op.getInput());
  Value grad = asBuffer(b, op.getGrad());
  Value offsets = asBuffer(b, op.getOffsets());
  Value rows = dim(b, input, 0);
  Value out = alloc(b, MemRefType::get(outType.getShape(), b.getF32Type()));
  forLoop(b, experts, [&](Builder &b, Value e) {
    auto [lo, hi] = segment(b, offsets, e, rows);
    forLoop(b, n, [&](Builder &b, Value col) {
      forLoop(b, kSize, [&](Builder &b, Value kk) {
        Value acc = forLoopCarrying(
            b, lo, hi, ValueRange{f32Const(b, 0.0)},
            [&](Builder &b, Value r, ValueRange carried) -> SmallVector<Value> {
              Value g =
                  toF32(b, memref::LoadOp::create(b, grad, ValueRange{r, col}));
              Value x =
                  toF32(b, memref::LoadOp::create(b, input, ValueRange{r, kk}));
              Value prod = arith::MulFOp::create(b, g, x, reductionFlags(b));
              return {arith::AddFOp::create(b, carried[0], prod,
                                            reductionFlags(b))};
            })[0];
        memref::StoreOp::create(b, acc, out, ValueRange{e, col, kk});
      });
    });
  });
  return asTensor(b, out);
}

} // namespace

void mlir::moe::host::populateExpertPatterns(RewritePatternSet &patterns) {
  addLowering<GroupedMatmulOp>(patterns, lowerGroupedMatmul);
  addLowering<GroupedMatmulDxOp>(patterns, lowerGroupedMatmulDx);
  addLowering<GroupedMatmulDwOp>(patterns, lowerGroupedMatmulDw);
  addLowering<SwiGLUOp>(patterns, lowerSwiGLU);
  addLowering<SwiGLUGradOp>(patterns, lowerSwiGLUGrad);
  addLowering<SharedExpertOp>(patterns, lowerSharedExpert);
}
