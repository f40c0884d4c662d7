//===- Experts.cpp - Expert FFNs on the host ------------------------------===//
//
// Part of moe-compiler.
//
// The grouped GEMMs over expert segments (and their dX and dW), SwiGLU
// (and its gradient) and the dense shared expert.
//
//===----------------------------------------------------------------------===//

#include "HostBuilders.h"
#include "moe/Conversion/KernelBuilder.h"

#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include <limits>
#include <numeric>

using namespace mlir;
using namespace mlir::moe;
using namespace mlir::moe::host;

namespace {

using Builder = host::Builder;

Value silu(Builder &b, Value x) {
  return arith::MulFOp::create(b, x, sigmoid(b, x, ExpKind::Inline));
}

Value lowerSwiGLU(Builder &b, SwiGLUOp op) {
  Type elt = op.getType().getElementType();
  std::optional<APFloat> alpha = op.getAlpha(), limit = op.getLimit();
  return elementwise(
      b, ValueRange{op.getGate(), op.getUp()}, elt,
      [&](Builder &nb, ValueRange v) -> Value {
        if (!limit)
          return arith::MulFOp::create(nb, silu(nb, v[0]), v[1]);
        // GPT-OSS: (clamp(up, -l, l) + 1) * g * sigmoid(alpha * g), g =
        // min(gate, l).
        auto [g, u] =
            KernelBuilder{nb}.clampGateUp(v[0], v[1], limit->convertToDouble());
        Value glu = arith::MulFOp::create(
            nb, g,
            sigmoid(nb,
                    arith::MulFOp::create(
                        nb, g, f32Const(nb, alpha->convertToDouble())),
                    ExpKind::Inline));
        return arith::MulFOp::create(nb, u, glu);
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

Value lowerSharedExpert(Builder &b, SharedExpertOp op,
                        const VectorTarget &target) {
  Type elt = op.getType().getElementType();
  Value x = op.getInput();
  bool tensorScaled = op.getRecipe() && !op.getRecipe()->isBlockwise();
  Value gate = roundTo(b,
                       matmulTransposeB(b, x, op.getGateWeight(), target,
                                        op.getGateScale(), tensorScaled),
                       elt);
  Value up = roundTo(b,
                     matmulTransposeB(b, x, op.getUpWeight(), target,
                                      op.getUpScale(), tensorScaled),
                     elt);
  Value act =
      elementwise(b, ValueRange{gate, up}, elt, [](Builder &nb, ValueRange v) {
        return arith::MulFOp::create(nb, silu(nb, v[0]), v[1]);
      });
  Value down = matmulTransposeB(b, act, op.getDownWeight(), target,
                                op.getDownScale(), tensorScaled);
  if (!op.getExpertGate())
    return roundTo(b, down, elt);
  // Qwen2-MoE: the shared output times sigmoid(x * g^T), per token.
  Value gateLogit = matmulTransposeB(b, x, op.getExpertGate(), target); // [T, 1]
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

/// Zeroes the rows of `out` that no expert's segment covers, which the
/// grouped GEMMs leave unwritten, instead of the whole buffer: one pass
/// over the experts zeroes each gap between the segments' running end and
/// the next segment's start, then the rows after the last. With offsets
/// out of order a gap may hold rows of a later segment, which its GEMM
/// then overwrites; no row outside every segment is missed.
void zeroUncoveredRows(Builder &b, Value out, Value offsets, int64_t experts,
                       Value rows) {
  auto type = cast<MemRefType>(out.getType());
  Value zero =
      arith::ConstantOp::create(b, b.getFloatAttr(type.getElementType(), 0.0));
  Value columns = dim(b, out, 1);
  // A loop of stores of zero along a row, which LLVM makes a memset.
  auto zeroRows = [&](Builder &b, Value r0, Value r1) {
    forLoop(b, r0, r1, [&](Builder &b, Value r) {
      forLoop(b, indexConst(b, 0), columns, [&](Builder &b, Value c) {
        memref::StoreOp::create(b, zero, out, ValueRange{r, c});
      });
    });
  };
  Value end =
      forLoopCarrying(
          b, indexConst(b, 0), indexConst(b, experts),
          ValueRange{indexConst(b, 0)},
          [&](Builder &b, Value e, ValueRange running) -> SmallVector<Value> {
            auto [lo, hi] = segment(b, offsets, e, rows);
            zeroRows(b, running[0], lo);
            return {arith::MaxSIOp::create(b, running[0], hi)};
          })
          .front();
  zeroRows(b, end, rows);
}

/// The grouped GEMMs' parallel loop: over experts and blocks of
/// `columnBlock` of the `columns` output columns, with expert e's rows
/// [lo, hi) of `rows` (from `offsets`) and the block's columns [c0, c1).
/// An iteration costs as much as its expert has rows, so the threads take
/// them one at a time (in expert order, so that one expert's rows stay in
/// a thread's cache across its blocks when there are few threads).
void overExpertBlocks(Builder &b, int64_t experts, Value columns,
                      Value columnBlock, Value offsets, Value rows,
                      function_ref<void(Builder &, Value e, Value lo, Value hi,
                                        Value c0, Value c1)>
                          body) {
  parallelBlocks(
      b, {indexConst(b, experts), ceilDiv(b, columns, columnBlock)},
      [&](Builder &b, ValueRange block) {
        Value e = block[0];
        auto [lo, hi] = segment(b, offsets, e, rows);
        auto [c0, c1] = blockRange(b, block[1], columnBlock, columns);
        body(b, e, lo, hi, c0, c1);
      },
      Schedule::Dynamic);
}

/// out[r, c] = sum_i in[r, i] * w[e, c, i] (+ bias[e, c]) over expert e's
/// rows r, accumulated in f32, on buffers (bias and scales may be null);
/// rows outside every segment are zero. In parallel over experts and blocks
/// of columns. The sizes may be dynamic (`multiples` holds what the code
/// takes from the static ones).
void groupedMatmul(Builder &b, Value input, Value weight, Value offsets,
                   Value bias, Value scales, bool tensorScaled, Value out,
                   const SizeMultiples &multiples, const VectorTarget &target) {
  auto weightType = cast<MemRefType>(weight.getType());
  int64_t experts = weightType.getDimSize(0);
  Value columns = dim(b, weight, 1);
  Value depth = dim(b, weight, 2);
  Value columnBlock = packedColumnBlock(b, target, depth, columns);
  Type elt = cast<MemRefType>(out.getType()).getElementType();
  Value rows = dim(b, input, 0);
  // The rows as f32 (quantized for FP8): the kernels then broadcast and
  // load them without converting each use.
  Value a = !scales        ? widenRows(b, input, target.width, multiples.depth)
            : tensorScaled ? quantizeTensorFp8(b, input, offsets, target.width)
                           : quantizeRowsFp8(b, input, target.width);
  zeroUncoveredRows(b, out, offsets, experts, rows);
  overExpertBlocks(
      b, experts, columns, columnBlock, offsets, rows,
      [&](Builder &b, Value e, Value lo, Value hi, Value c0, Value c1) {
        // An expert with enough rows packs its block of weights for the
        // outer kernel; one with few reads them as they are.
        Value many = arith::CmpIOp::create(b, arith::CmpIPredicate::uge,
                                           arith::SubIOp::create(b, hi, lo),
                                           indexConst(b, kPackedRows));
        auto ifOp = scf::IfOp::create(b, many, /*withElseRegion=*/true);
        Builder packed(b.getLoc(), ifOp.getThenBodyBuilder());
        emitPackedGemm(
            packed,
            {lo, hi, c0, c1, depth, columnBlock,
             [&](Builder &b, Value r, Value k) {
               return toF32(b, memref::LoadOp::create(b, a, ValueRange{r, k}));
             },
             [&](Builder &b, Value c, Value k, int64_t width) {
               return loadWeight(b, weight, scales, {e, c, k}, width);
             },
             [&](Builder &b, Value r, Value c, Value v) {
               // The bias joins the f32 sums: one rounding.
               if (bias) {
                 int64_t width = cast<VectorType>(v.getType()).getNumElements();
                 v = arith::AddFOp::create(b, v,
                                           loadVector(b, bias, {e, c}, width));
               }
               storeVector(b, v, out, {r, c});
             },
             multiples.columns, multiples.depth},
            target);
        Builder few(b.getLoc(), ifOp.getElseBodyBuilder());
        auto gemm = [&](Builder &b, Value panel) {
          emitDotGemm(
              b,
              {lo, hi, c0, c1, depth,
               [&](Builder &b, Value r, Value k, int64_t width) {
                 return loadVector(b, a, {r, k}, width);
               },
               [&](Builder &b, Value c, Value k, int64_t width) {
                 if (!panel)
                   return loadVector(b, weight, {e, c, k}, width);
                 Value row = arith::SubIOp::create(b, c, c0);
                 return loadVector(b, panel, {row, k}, width);
               },
               [&](Builder &b, Value r, Value c, Value sum) {
                 // The bias joins the f32 sum: one rounding.
                 if (bias)
                   sum = arith::AddFOp::create(
                       b, sum,
                       toF32(b, memref::LoadOp::create(b, bias,
                                                       ValueRange{e, c})));
                 memref::StoreOp::create(b, fromF32(b, sum, elt), out,
                                         ValueRange{r, c});
               },
               multiples.columns, multiples.depth},
              target);
        };
        // FP8 or 16-bit weights: the block's weights converted once, for
        // all of its rows.
        if (scales || !weightType.getElementType().isF32())
          withWeightPanel(few, weight, scales, {e}, c0, c1, columnBlock, depth,
                          multiples.depth, target.width, gemm);
        else
          gemm(few, Value());
      });
}

Value lowerGroupedMatmul(Builder &b, GroupedMatmulOp op,
                         const VectorTarget &target) {
  auto outType = cast<RankedTensorType>(op.getOutput().getType());
  SmallVector<Value> operands = {op.getInput(), op.getWeight(),
                                 op.getOffsets()};
  std::string kind = "grouped_matmul";
  if (op.getBias()) {
    operands.push_back(op.getBias());
    kind += "_bias";
  }
  // FP8: the rows quantized per 128 of K, the weight decoded with its block
  // scales.
  bool tensorScaled = op.getRecipe() && !op.getRecipe()->isBlockwise();
  if (op.getScale()) {
    operands.push_back(op.getScale());
    kind += tensorScaled ? "_fp8_tensor" : "_fp8";
  }
  Value out =
      alloc(b, MemRefType::get(outType.getShape(), outType.getElementType()),
            dynamicSizes(b, outType, op.getInput()));
  operands.push_back(out);
  bool hasBias = op.getBias() != nullptr, hasScale = op.getScale() != nullptr;
  auto weightType = cast<RankedTensorType>(op.getWeight().getType());
  int64_t columns = weightType.getDimSize(1), depth = weightType.getDimSize(2);
  SizeMultiples multiples =
      SizeMultiples::of(columns, depth, packedStripWidth(target), target.width);
  // Without FP8 scales (whose block counts follow the sizes) the kernel
  // takes the column count and depth at run time: the projections of a
  // layer share one copy of its code when these blocks agree (DeepSeek-V3's
  // gate, up and down).
  std::string variant;
  if (!hasScale) {
    operands[0] = withDynamicDims(b, operands[0], {1});
    operands[1] = withDynamicDims(b, operands[1], {1, 2});
    if (hasBias)
      operands[3] = withDynamicDims(b, operands[3], {1});
    operands.back() = withDynamicDims(b, operands.back(), {1});
    variant = multiples.key();
  }
  callKernel(
      b, target, kind, operands,
      [&](Builder &b, ValueRange args) {
        groupedMatmul(b, args[0], args[1], args[2], hasBias ? args[3] : Value(),
                      hasScale ? args[3 + hasBias] : Value(),
                      hasScale && tensorScaled, args.back(), multiples, target);
      },
      variant);
  return asTensor(b, out);
}

/// gate_grad and up_grad of silu(gate) * up, elementwise in f32, or of
/// the clamped form with `alpha` and `limit`.
std::pair<Value, Value> lowerSwiGLUGrad(Builder &b, SwiGLUGradOp op) {
  Type elt = op.getGate().getType().getElementType();
  std::optional<APFloat> alphaAttr = op.getAlpha(), limitAttr = op.getLimit();
  double alpha = alphaAttr ? alphaAttr->convertToDouble() : 1.0;
  // (Owned here: a ValueRange of a braced list would outlive its storage.)
  SmallVector<Value, 3> inputs{op.getGate(), op.getUp(), op.getGrad()};
  // The (clamped) gate and up, and whether the gradient passes each clamp
  // (null: no clamp).
  struct Clamped {
    Value g, u, gatePasses, upPasses;
  };
  auto clamp = [&](Builder &nb, Value gate, Value up) -> Clamped {
    if (!limitAttr)
      return {gate, up, Value(), Value()};
    KernelBuilder k{nb};
    double limit = limitAttr->convertToDouble();
    auto [g, u] = k.clampGateUp(gate, up, limit);
    auto [gatePasses, upPasses] = k.clampPasses(gate, up, limit);
    return {g, u, gatePasses, upPasses};
  };
  // alpha * g (g itself for SwiGLU).
  auto gain = [&](Builder &nb, Value g) -> Value {
    return alpha == 1.0
               ? g
               : Value(arith::MulFOp::create(nb, f32Const(nb, alpha), g));
  };
  auto passed = [](Builder &nb, Value passes, Value v) -> Value {
    return passes ? arith::SelectOp::create(nb, passes, v, f32Const(nb, 0.0))
                  : v;
  };
  Value gateGrad = elementwise(b, inputs, elt, [&](Builder &nb, ValueRange v) {
    auto [g, u, passes, upPasses] = clamp(nb, v[0], v[1]);
    Value one = f32Const(nb, 1.0), ag = gain(nb, g);
    Value s = sigmoid(nb, ag, ExpKind::Inline);
    // d (g * sigmoid(alpha g)) / dg = s * (1 + alpha * g * (1 - s))
    Value dglu = arith::MulFOp::create(
        nb, s,
        arith::AddFOp::create(
            nb, one,
            arith::MulFOp::create(nb, ag, arith::SubFOp::create(nb, one, s))));
    return passed(
        nb, passes,
        arith::MulFOp::create(nb, arith::MulFOp::create(nb, v[2], u), dglu));
  });
  Value upGrad = elementwise(b, inputs, elt, [&](Builder &nb, ValueRange v) {
    auto [g, u, gatePasses, passes] = clamp(nb, v[0], v[1]);
    Value glu =
        arith::MulFOp::create(nb, g, sigmoid(nb, gain(nb, g), ExpKind::Inline));
    return passed(nb, passes, arith::MulFOp::create(nb, v[2], glu));
  });
  return {gateGrad, upGrad};
}

/// input_grad[r, k] = sum_n grad[r, n] * w[e, n, k] over expert e's rows;
/// rows outside every segment are zero. In parallel over experts and blocks
/// of columns.
void groupedMatmulDx(Builder &b, Value grad, Value weight, Value scales,
                     Value offsets, Value out, const VectorTarget &target) {
  auto weightType = cast<MemRefType>(weight.getType());
  int64_t experts = weightType.getDimSize(0), n = weightType.getDimSize(1),
          columns = weightType.getDimSize(2);
  Value rows = dim(b, grad, 0);
  zeroUncoveredRows(b, out, offsets, experts, rows);
  int64_t columnBlock = outerColumnBlock(target);
  overExpertBlocks(
      b, experts, indexConst(b, columns), indexConst(b, columnBlock), offsets,
      rows, [&](Builder &b, Value e, Value lo, Value hi, Value c0, Value c1) {
        OuterGemm gemm{lo,
                       hi,
                       indexConst(b, 0),
                       indexConst(b, n),
                       c0,
                       c1,
                       [&](Builder &b, Value r, Value p) {
                         return toF32(b, memref::LoadOp::create(
                                             b, grad, ValueRange{r, p}));
                       },
                       [&](Builder &b, Value p, Value c,
                           int64_t width) -> Value {
                         Value w =
                             loadWeight(b, weight, scales, {e, p, c}, width);
                         // (One lane of an FP8 weight loads as a scalar.)
                         if (!isa<VectorType>(w.getType()))
                           w = vector::BroadcastOp::create(
                               b, VectorType::get({1}, w.getType()), w);
                         return w;
                       },
                       [&](Builder &b, Value r, Value c, Value v) {
                         storeVector(b, v, out, {r, c});
                       },
                       std::gcd(columnBlock, columns),
                       /*aColumn=*/nullptr};
        // An expert with enough rows copies its block of the weight into
        // contiguous strips first (rows of W are pages apart).
        Value many = arith::CmpIOp::create(b, arith::CmpIPredicate::uge,
                                           arith::SubIOp::create(b, hi, lo),
                                           indexConst(b, kPackedRows));
        auto ifOp = scf::IfOp::create(b, many, /*withElseRegion=*/true);
        Builder packed(b.getLoc(), ifOp.getThenBodyBuilder());
        emitPackedOuterGemm(packed, gemm, columnBlock, target);
        Builder few(b.getLoc(), ifOp.getElseBodyBuilder());
        emitOuterGemm(few, gemm, target);
      });
}

Value lowerGroupedMatmulDx(Builder &b, GroupedMatmulDxOp op,
                           const VectorTarget &target) {
  auto outType = cast<RankedTensorType>(op.getInputGrad().getType());
  Value out =
      alloc(b, MemRefType::get(outType.getShape(), outType.getElementType()),
            dynamicSizes(b, outType, op.getGrad()));
  // FP8 (Dgrad of a training step): the weight decoded with its block
  // scales; the gradient comes quantized.
  if (Value scale = op.getScale()) {
    callKernel(b, target, "grouped_matmul_dx_fp8",
               {op.getGrad(), op.getWeight(), scale, op.getOffsets(), out},
               [&](Builder &b, ValueRange args) {
                 groupedMatmulDx(b, args[0], args[1], args[2], args[3], args[4],
                                 target);
               });
    return asTensor(b, out);
  }
  callKernel(b, target, "grouped_matmul_dx",
             {op.getGrad(), op.getWeight(), op.getOffsets(), out},
             [&](Builder &b, ValueRange args) {
               groupedMatmulDx(b, args[0], args[1], Value(), args[2], args[3],
                               target);
             });
  return asTensor(b, out);
}

/// weight_grad[e, n, k] = sum over expert e's rows r of grad[r, n] * in[r, k],
/// in f32. In parallel over experts and blocks of columns.
void groupedMatmulDw(Builder &b, Value input, Value grad, Value offsets,
                     Value out, const VectorTarget &target) {
  auto outType = cast<MemRefType>(out.getType());
  int64_t experts = outType.getDimSize(0), n = outType.getDimSize(1),
          columns = outType.getDimSize(2);
  Value rows = dim(b, input, 0);
  int64_t columnBlock = outerColumnBlock(target);
  overExpertBlocks(
      b, experts, indexConst(b, columns), indexConst(b, columnBlock), offsets,
      rows, [&](Builder &b, Value e, Value lo, Value hi, Value c0, Value c1) {
        // The expert's rows of the input, copied into contiguous strips
        // once for all n rows of the gradient (rows of the input are a
        // page or more apart).
        emitPackedOuterGemm(
            b,
            {indexConst(b, 0), indexConst(b, n), lo, hi, c0, c1,
             [&](Builder &b, Value row, Value r) {
               return toF32(
                   b, memref::LoadOp::create(b, grad, ValueRange{r, row}));
             },
             [&](Builder &b, Value r, Value c, int64_t width) {
               return loadVector(b, input, {r, c}, width);
             },
             [&](Builder &b, Value row, Value c, Value v) {
               storeVector(b, v, out, {e, row, c});
             },
             std::gcd(columnBlock, columns),
             [&](Builder &b, Value row, Value r, int64_t count) {
               return loadVector(b, grad, {r, row}, count);
             }},
            columnBlock, target);
      });
}

Value lowerGroupedMatmulDw(Builder &b, GroupedMatmulDwOp op,
                           const VectorTarget &target) {
  auto outType = cast<RankedTensorType>(op.getWeightGrad().getType());
  Value out = alloc(b, MemRefType::get(outType.getShape(), b.getF32Type()));
  callKernel(b, target, "grouped_matmul_dw",
             {op.getInput(), op.getGrad(), op.getOffsets(), out},
             [&](Builder &b, ValueRange args) {
               groupedMatmulDw(b, args[0], args[1], args[2], args[3], target);
             });
  return asTensor(b, out);
}

/// An FP8 GEMM operand as its e4m3 tiles represent it.
Value lowerFp8Quantize(Builder &b, Fp8QuantizeOp op,
                       const VectorTarget &target) {
  bool blockwise = op.getRecipe().isBlockwise();
  bool columns = blockwise && op.getTransposed();
  SmallVector<Value> operands = {op.getInput()};
  // Per-tensor scales are per segment when there are segments.
  if (op.getSegments() && (columns || !blockwise))
    operands.push_back(op.getSegments());
  std::string kind = !blockwise ? (op.getSegments() ? "fp8_quantize_segments"
                                                    : "fp8_quantize_tensor")
                     : columns  ? "fp8_quantize_columns"
                                : "fp8_quantize_rows";
  auto outType = cast<RankedTensorType>(op.getOutput().getType());
  Value out = alloc(b, MemRefType::get(outType.getShape(), b.getF32Type()),
                    dynamicSizes(b, outType, op.getInput()));
  operands.push_back(out);
  callKernel(b, target, kind, operands, [&](Builder &b, ValueRange args) {
    // Gradients are far below an activation's floor of 1e-4.
    if (!blockwise)
      quantizeTensorFp8(b, args[0], op.getSegments() ? args[1] : Value(),
                        target.width, args.back(), kFp8MinGradAmax);
    else if (columns)
      quantizeColumnsFp8(b, args[0], args[1], target.width, args.back(),
                         kFp8MinGradAmax);
    else
      quantizeRowsFp8(b, args[0], target.width, args.back(), kFp8MinGradAmax);
  });
  return asTensor(b, out);
}

/// An f32 weight as e4m3 codes and block scales.
std::pair<Value, Value> lowerFp8QuantizeWeight(Builder &b,
                                               Fp8QuantizeWeightOp op) {
  auto codesType = cast<RankedTensorType>(op.getCodes().getType());
  auto scalesType = cast<RankedTensorType>(op.getScales().getType());
  Value codes = alloc(
      b, MemRefType::get(codesType.getShape(), codesType.getElementType()));
  Value scales =
      alloc(b, MemRefType::get(scalesType.getShape(), b.getF32Type()));
  quantizeWeightFp8(b, asBuffer(b, op.getWeight()), codes, scales,
                    !op.getRecipe().isBlockwise());
  return {asTensor(b, codes), asTensor(b, scales)};
}

} // namespace

void mlir::moe::host::populateExpertPatterns(RewritePatternSet &patterns,
                                             const VectorTarget &target) {
  // The GEMMs block for the host's vector unit.
  auto with = [target](auto lower) {
    return [target, lower](Builder &b, auto op) {
      return lower(b, op, target);
    };
  };
  addLowering<GroupedMatmulOp>(patterns, with(lowerGroupedMatmul));
  addLowering<GroupedMatmulDxOp>(patterns, with(lowerGroupedMatmulDx));
  addLowering<GroupedMatmulDwOp>(patterns, with(lowerGroupedMatmulDw));
  addLowering<Fp8QuantizeOp>(patterns, with(lowerFp8Quantize));
  addLowering<Fp8QuantizeWeightOp>(patterns, lowerFp8QuantizeWeight);
  addLowering<SwiGLUOp>(patterns, lowerSwiGLU);
  addLowering<SwiGLUGradOp>(patterns, lowerSwiGLUGrad);
  addLowering<SharedExpertOp>(patterns, with(lowerSharedExpert));
}
