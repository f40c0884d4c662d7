//===- Autodiff.cpp - Backward functions of MoE layers --------------------===//
//
// Part of moe-compiler.
//
//===----------------------------------------------------------------------===//

#include "moe/Transforms/Autodiff.h"
#include "moe/MoeOps.h"
#include "moe/Support/Routing.h"
#include "moe/Transforms/DecomposeLayer.h"
#include "moe/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/IRMapping.h"

namespace mlir::moe {
#define GEN_PASS_DEF_MOEAUTODIFF
#include "moe/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

namespace {

RankedTensorType f32Like(Value v) {
  auto type = cast<RankedTensorType>(v.getType());
  return RankedTensorType::get(type.getShape(),
                               Float32Type::get(v.getContext()));
}

/// The gradients of a dense SwiGLU FFN (the shared experts) as one group of
/// all `x`'s rows: returns dx and the f32 gradients of gate [S, H], up
/// [S, H] and down [H, S].
struct DenseGrads {
  Value dx, gate, up, down;
  /// The f32 gradient of the gate on the output ([1, H]), when gated.
  Value expertGate;
};

/// An FP8 training step's operands of the backward GEMMs, as `recipe`
/// (null: none) quantizes them: the output gradient of Dgrad per row
/// (1 x 128 tiles for the blockwise recipe) and both operands of Wgrad per
/// column within each expert's rows (128 x 1), the f32 values the e4m3
/// codes and scales stand for.
struct Fp8Operands {
  OpBuilder &b;
  Location loc;
  Fp8RecipeAttr recipe;

  /// (Per-tensor scaling takes one scale per expert's rows: per GEMM.)
  Value rows(Value v, Value offsets) {
    return recipe
               ? Fp8QuantizeOp::create(b, loc, v,
                                       recipe.isBlockwise() ? Value() : offsets,
                                       recipe, UnitAttr())
               : v;
  }
  Value columns(Value v, Value offsets) {
    return recipe ? Fp8QuantizeOp::create(b, loc, v, offsets, recipe,
                                          b.getUnitAttr())
                  : v;
  }
  /// Dgrad: `grad` quantized per row against the weight's e4m3 codes, the
  /// result in `grad`'s element type (as without FP8).
  Value dgrad(Value grad, Value weight, Value offsets, Value scale) {
    Value dx = GroupedMatmulDxOp::create(b, loc, rows(grad, offsets), weight,
                                         offsets, scale);
    Type elt = cast<RankedTensorType>(grad.getType()).getElementType();
    auto type = cast<RankedTensorType>(dx.getType());
    if (type.getElementType() == elt)
      return dx;
    return arith::TruncFOp::create(
        b, loc, RankedTensorType::get(type.getShape(), elt), dx);
  }
  /// Wgrad: the k-grouped GEMM of both operands quantized per column.
  Value wgrad(Value input, Value grad, Value offsets) {
    return GroupedMatmulDwOp::create(b, loc, columns(input, offsets),
                                     columns(grad, offsets), offsets);
  }
};

/// The shared experts' FP8 block scales ([N/128, K/128] each), when FP8.
struct DenseScales {
  Value gate, up, down;
};

DenseGrads denseFfnBackward(OpBuilder &b, Location loc, Value x, Value gate,
                            Value up, Value down, Value dy, Value expertGate,
                            DenseScales scales, Fp8RecipeAttr recipe) {
  Fp8Operands fp8{b, loc, recipe};
  Value rows = tensor::DimOp::create(b, loc, x, 0);
  Value zero = arith::ConstantIntOp::create(b, loc, 0, 32);
  Value end = arith::IndexCastOp::create(b, loc, b.getI32Type(), rows);
  Value offsets = tensor::FromElementsOp::create(
      b, loc, RankedTensorType::get({2}, b.getI32Type()),
      ValueRange{zero, end});
  // [N, K] -> [1, N, K] and back.
  auto group = [&](Value w) -> Value {
    auto type = cast<RankedTensorType>(w.getType());
    auto grouped = RankedTensorType::get(
        {1, type.getDimSize(0), type.getDimSize(1)}, type.getElementType());
    return tensor::ExpandShapeOp::create(
        b, loc, grouped, w, ArrayRef<ReassociationIndices>{{0, 1}, {2}});
  };
  auto ungroup = [&](Value w) -> Value {
    return tensor::CollapseShapeOp::create(
        b, loc, w, ArrayRef<ReassociationIndices>{{0, 1}, {2}});
  };
  auto groupOrNull = [&](Value w) { return w ? group(w) : Value(); };
  Value g1 = group(gate), u1 = group(up), d1 = group(down);
  Value gs = groupOrNull(scales.gate), us = groupOrNull(scales.up),
        ds = groupOrNull(scales.down);
  Value g = GroupedMatmulOp::create(b, loc, x, g1, offsets, Value(), gs,
                                    gs ? recipe : Fp8RecipeAttr());
  Value u = GroupedMatmulOp::create(b, loc, x, u1, offsets, Value(), us,
                                    us ? recipe : Fp8RecipeAttr());
  Value a = SwiGLUOp::create(b, loc, g, u, FloatAttr(), FloatAttr());
  // Qwen2-MoE's gate: the output is s * down(a) with s = sigmoid(x . g^T)
  // per token, a combine of one row per token weighted by s and the
  // gate a router of one expert. Its gradients: down(a)'s is s * dy and
  // the gate's score's dy . down(a) (combine_grad), then through the
  // sigmoid to the gate and x (router_grad).
  Value dxGate, dExpertGate;
  if (expertGate) {
    Value scores =
        RouterOp::create(b, loc, x, expertGate, Value(), ScoringFunc::Sigmoid);
    Value out = GroupedMatmulOp::create(b, loc, a, d1, offsets, Value(), ds,
                                        ds ? recipe : Fp8RecipeAttr());
    auto mapType =
        RankedTensorType::get({ShapedType::kDynamic, 1}, b.getI32Type());
    Value rowMap = tensor::GenerateOp::create(
        b, loc, mapType, ValueRange{rows},
        [](OpBuilder &nb, Location nl, ValueRange ids) {
          Value t = arith::IndexCastOp::create(nb, nl, nb.getI32Type(), ids[0]);
          tensor::YieldOp::create(nb, nl, t);
        });
    auto combine = CombineGradOp::create(b, loc, dy, out, rowMap, scores);
    dy = combine.getRowsGrad();
    auto router =
        RouterGradOp::create(b, loc, x, expertGate, scores,
                             combine.getWeightsGrad(), ScoringFunc::Sigmoid);
    dxGate = router.getInputGrad();
    dExpertGate = router.getWeightGrad();
  }
  Value da = fp8.dgrad(dy, d1, offsets, ds);
  Value dDown = fp8.wgrad(a, dy, offsets);
  auto swigluGrad =
      SwiGLUGradOp::create(b, loc, g, u, da, FloatAttr(), FloatAttr());
  Value dg = swigluGrad.getGateGrad(), du = swigluGrad.getUpGrad();
  Value dx = arith::AddFOp::create(b, loc, fp8.dgrad(dg, g1, offsets, gs),
                                   fp8.dgrad(du, u1, offsets, us));
  Value dGate = fp8.wgrad(x, dg, offsets);
  Value dUp = fp8.wgrad(x, du, offsets);
  if (dxGate)
    dx = arith::AddFOp::create(b, loc, dx, dxGate);
  return {dx, ungroup(dGate), ungroup(dUp), ungroup(dDown), dExpertGate};
}

/// The f32 gradient of a bias added to every row of a (grouped) product:
/// the bias is a weight on an input that is always 1, so its gradient is
/// the weight gradient for a column of ones, `[E, N, 1]` from the k-grouped
/// GEMM of ones and `grad` `[R, N]`: each expert's column sums of its rows
/// of `grad`, returned as `[E, N]`.
Value groupedBiasGrad(OpBuilder &b, Location loc, Value grad, Value offsets) {
  Value rows = tensor::DimOp::create(b, loc, grad, 0);
  Type elt = cast<RankedTensorType>(grad.getType()).getElementType();
  Value ones =
      linalg::FillOp::create(
          b, loc,
          ValueRange{
              arith::ConstantOp::create(b, loc, b.getFloatAttr(elt, 1.0))},
          ValueRange{tensor::EmptyOp::create(
              b, loc, RankedTensorType::get({ShapedType::kDynamic, 1}, elt),
              ValueRange{rows})})
          .getResult(0);
  Value dw = GroupedMatmulDwOp::create(b, loc, ones, grad, offsets);
  return tensor::CollapseShapeOp::create(
      b, loc, dw, ArrayRef<ReassociationIndices>{{0}, {1, 2}});
}

} // namespace

LayerGradients mlir::moe::buildLayerBackward(OpBuilder &b, LayerOp layer,
                                             const DecomposedLayer &fwd,
                                             Value dy) {
  Location loc = layer.getLoc();
  MLIRContext *ctx = layer.getContext();
  LayerConfigAttr config = layer.getConfig();
  LayerOp copy = layer;
  Value x = layer.getInput();
  // combine -> down projection -> SwiGLU -> gate/up projections -> dispatch.
  auto ep = static_cast<int64_t>(layer.getEpSize());
  size_t chunkCount = fwd.chunks.size();
  bool chunked = chunkCount > 1;
  auto sum = [&](Value total, Value part) -> Value {
    return total ? Value(arith::AddFOp::create(b, loc, total, part)) : part;
  };
  // With expert parallelism the gradients of the expert outputs go to the
  // experts' ranks, and those of the expert inputs come back, chunk by
  // chunk as in the forward pass.
  // Llama 4 (scale_input): the combine summed the rows unweighted (weights
  // of 1 here) and the dispatch scaled them.
  bool scaled = config.getScaleInput();
  auto onesLike = [&](Value like) -> Value {
    Value one = arith::ConstantOp::create(b, loc, b.getF32FloatAttr(1.0));
    return linalg::FillOp::create(b, loc, ValueRange{one},
                                  ValueRange{emptyLike(b, loc, like)})
        .getResult(0);
  };
  SmallVector<Value> dDowns, offsets, weightGrads;
  for (const ExpertChunk &chunk : fwd.chunks) {
    Value dyc = dy, weights = fwd.weights;
    if (chunked) {
      dyc = sliceRows(b, loc, dy, chunk.begin, chunk.size);
      weights = sliceRows(b, loc, weights, chunk.begin, chunk.size);
    }
    if (scaled)
      weights = onesLike(weights);
    auto combine =
        CombineGradOp::create(b, loc, dyc, chunk.down, chunk.rowMap, weights);
    dDowns.push_back(combine.getRowsGrad());
    offsets.push_back(chunk.offsets);
    weightGrads.push_back(combine.getWeightsGrad());
  }
  ExchangeStarts sent;
  if (ep > 1)
    sent = startExchange(b, loc, dDowns, offsets, ep, AllToAllKind::Dispatch);
  Value gDown, gGate, gUp;
  // GPT-OSS: the experts' biases, and the clamped SwiGLU.
  bool biased = static_cast<bool>(layer.getGateBias());
  Value gGateBias, gUpBias, gDownBias;
  FloatAttr alpha, limit;
  if (config.isClamped()) {
    alpha = b.getF64FloatAttr(config.getSwigluAlphaValue());
    limit = b.getF64FloatAttr(config.getSwigluLimitValue());
  }
  // FP8 training (DeepSeek-V3's recipe, or the layer's own): the weights
  // are e4m3 codes with block scales, the other operands quantized here.
  Fp8RecipeAttr recipe = config.isFp8() ? config.getRecipe() : Fp8RecipeAttr();
  Fp8Operands fp8{b, loc, recipe};
  SmallVector<Value> dRowsLocal, recvOffsets;
  for (size_t c = 0; c < chunkCount; ++c) {
    const ExpertChunk &chunk = fwd.chunks[c];
    Value dDown = ep > 1 ? finishExchange(b, loc, sent, c) : dDowns[c];
    Value off = chunk.localOffsets;
    Value dAct =
        fp8.dgrad(dDown, copy.getDownWeight(), off, copy.getDownScale());
    gDown = sum(gDown, fp8.wgrad(chunk.act, dDown, off));
    auto swiglu =
        SwiGLUGradOp::create(b, loc, chunk.gate, chunk.up, dAct, alpha, limit);
    Value dGate = swiglu.getGateGrad(), dUp = swiglu.getUpGrad();
    if (biased) {
      gDownBias = sum(gDownBias, groupedBiasGrad(b, loc, dDown, off));
      gGateBias = sum(gGateBias, groupedBiasGrad(b, loc, dGate, off));
      gUpBias = sum(gUpBias, groupedBiasGrad(b, loc, dUp, off));
    }
    dRowsLocal.push_back(arith::AddFOp::create(
        b, loc,
        fp8.dgrad(dGate, copy.getGateWeight(), off, copy.getGateScale()),
        fp8.dgrad(dUp, copy.getUpWeight(), off, copy.getUpScale())));
    recvOffsets.push_back(chunk.recvOffsets);
    gGate = sum(gGate, fp8.wgrad(chunk.localRows, dGate, off));
    gUp = sum(gUp, fp8.wgrad(chunk.localRows, dUp, off));
  }
  ExchangeStarts returned;
  if (ep > 1)
    returned = startExchange(b, loc, dRowsLocal, recvOffsets, ep,
                             AllToAllKind::Combine);
  Value dx, weightsGrad;
  for (size_t c = 0; c < chunkCount; ++c) {
    const ExpertChunk &chunk = fwd.chunks[c];
    Value dRows = ep > 1 ? finishExchange(b, loc, returned, c) : dRowsLocal[c];
    Value dxc;
    if (scaled) {
      Value xc = x, scales = fwd.weights;
      if (chunked) {
        xc = sliceRows(b, loc, x, chunk.begin, chunk.size);
        scales = sliceRows(b, loc, scales, chunk.begin, chunk.size);
      }
      auto grad =
          ScaledDispatchGradOp::create(b, loc, dRows, chunk.rowMap, xc, scales);
      dxc = grad.getInputGrad();
      weightGrads[c] = grad.getScalesGrad();
    } else {
      dxc = DispatchGradOp::create(b, loc, dRows, chunk.rowMap);
    }
    if (!chunked) {
      dx = dxc;
      weightsGrad = weightGrads[c];
      continue;
    }
    if (!dx) {
      Value tokens = tensor::DimOp::create(b, loc, x, 0);
      auto empty = [&](Value like) -> Value {
        auto type = cast<RankedTensorType>(like.getType());
        return tensor::EmptyOp::create(
            b, loc,
            RankedTensorType::get({ShapedType::kDynamic, type.getDimSize(1)},
                                  type.getElementType()),
            ValueRange{tokens});
      };
      dx = empty(dxc);
      weightsGrad = empty(weightGrads[c]);
    }
    dx = insertRows(b, loc, dxc, dx, chunk.begin);
    weightsGrad = insertRows(b, loc, weightGrads[c], weightsGrad, chunk.begin);
  }

  // Routing weights -> selected scores -> router.
  Value dScores = TopKGradOp::create(
      b, loc, fwd.scores, fwd.indices, weightsGrad,
      config.getNormTopkProb() ? b.getUnitAttr() : UnitAttr(),
      b.getF64FloatAttr(config.getRoutedScaleValue()));
  auto router = RouterGradOp::create(
      b, loc, x, copy.getRouterWeight(), fwd.scores, dScores,
      ScoringFuncAttr::get(ctx, config.getScoring()));
  dx = arith::AddFOp::create(b, loc, dx, router.getInputGrad());
  // GPT-OSS's router bias: a weight on an input that is always 1 (see
  // groupedBiasGrad), the gradient of a router of one such column.
  Value gRouterBias;
  if (Value bias = copy.getRouterBias()) {
    Type f32 = b.getF32Type();
    int64_t experts = config.getExperts();
    Value tokens = tensor::DimOp::create(b, loc, x, 0);
    auto filled = [&](RankedTensorType type, ValueRange sizes, double v) {
      return linalg::FillOp::create(
                 b, loc,
                 ValueRange{
                     arith::ConstantOp::create(b, loc, b.getF32FloatAttr(v))},
                 ValueRange{tensor::EmptyOp::create(b, loc, type, sizes)})
          .getResult(0);
    };
    Value ones = filled(RankedTensorType::get({ShapedType::kDynamic, 1}, f32),
                        tokens, 1.0);
    Value zeros = filled(RankedTensorType::get({experts, 1}, f32), {}, 0.0);
    auto column =
        RouterGradOp::create(b, loc, ones, zeros, fwd.scores, dScores,
                             ScoringFuncAttr::get(ctx, config.getScoring()));
    gRouterBias = tensor::CollapseShapeOp::create(
        b, loc, column.getWeightGrad(), ArrayRef<ReassociationIndices>{{0, 1}});
  }

  LayerGradients grads;
  grads.weights = {router.getWeightGrad(), gGate, gUp, gDown};
  if (config.hasSharedExperts()) {
    DenseGrads shared = denseFfnBackward(
        b, loc, x, copy.getSharedGateWeight(), copy.getSharedUpWeight(),
        copy.getSharedDownWeight(), dy, copy.getSharedExpertGate(),
        {copy.getSharedGateScale(), copy.getSharedUpScale(),
         copy.getSharedDownScale()},
        recipe);
    dx = arith::AddFOp::create(b, loc, dx, shared.dx);
    grads.weights.append({shared.gate, shared.up, shared.down});
    if (shared.expertGate)
      grads.weights.push_back(shared.expertGate);
  }
  if (layer.getOutputBias()) {
    // JetMoE's output bias: the sum of dy over the tokens, in f32.
    auto dyType = cast<RankedTensorType>(dy.getType());
    Type f32 = b.getF32Type();
    Value wide = dy;
    if (!dyType.getElementType().isF32())
      wide = arith::ExtFOp::create(
          b, loc, RankedTensorType::get(dyType.getShape(), f32), dy);
    int64_t hidden = config.getHidden();
    Value init = linalg::FillOp::create(
                     b, loc, ValueRange{arith::ConstantOp::create(
                                 b, loc, b.getF32FloatAttr(0.0))},
                     ValueRange{tensor::EmptyOp::create(
                         b, loc, ArrayRef<int64_t>{hidden}, f32)})
                     .getResult(0);
    auto reduce = linalg::ReduceOp::create(
        b, loc, ValueRange{wide}, ValueRange{init}, ArrayRef<int64_t>{0},
        [](OpBuilder &nb, Location nloc, ValueRange args) {
          linalg::YieldOp::create(
              nb, nloc,
              ValueRange{arith::AddFOp::create(nb, nloc, args[0], args[1])});
        });
    grads.weights.push_back(reduce.getResult(0));
  }
  if (gRouterBias)
    grads.weights.push_back(gRouterBias);
  if (biased)
    grads.weights.append({gGateBias, gUpBias, gDownBias});
  grads.input = dx;
  return grads;
}

namespace {

LogicalResult addBackward(ModuleOp module, func::FuncOp forward, LayerOp layer,
                          int64_t alignment) {
  LayerConfigAttr config = layer.getConfig();
  Location loc = layer.getLoc();
  if (std::string why = config.getUntrainable(); !why.empty())
    return layer.emitOpError()
           << "has no backward pass in moe-autodiff yet: " << why;

  // Arguments: the layer's operands, then dy.
  SmallVector<Type> argTypes(layer->getOperandTypes());
  argTypes.push_back(layer.getType());
  SmallVector<Type> resultTypes{
      layer.getInput().getType(), f32Like(layer.getRouterWeight()),
      f32Like(layer.getGateWeight()), f32Like(layer.getUpWeight()),
      f32Like(layer.getDownWeight())};
  if (config.hasSharedExperts())
    for (Value w : {layer.getSharedGateWeight(), layer.getSharedUpWeight(),
                    layer.getSharedDownWeight(), layer.getSharedExpertGate()})
      if (w)
        resultTypes.push_back(f32Like(w));
  for (Value bias :
       {layer.getOutputBias(), layer.getRouterBias(), layer.getGateBias(),
        layer.getUpBias(), layer.getDownBias()})
    if (bias)
      resultTypes.push_back(f32Like(bias));

  OpBuilder b = OpBuilder::atBlockEnd(module.getBody());
  std::string name = (forward.getName() + "_backward").str();
  if (module.lookupSymbol(name))
    return forward.emitOpError()
           << "already has a function '" << name << "' next to it";
  auto func = func::FuncOp::create(b, loc, name,
                                   b.getFunctionType(argTypes, resultTypes));
  Block *entry = func.addEntryBlock();
  b.setInsertionPointToStart(entry);

  // Recompute the forward primitives from a copy of the layer.
  IRMapping mapping;
  for (auto [operand, arg] :
       llvm::zip(layer->getOperands(), entry->getArguments()))
    mapping.map(operand, arg);
  auto copy = cast<LayerOp>(b.clone(*layer, mapping));
  DecomposedLayer fwd = decomposeLayer(b, copy, alignment);
  Value dy = entry->getArguments().back();

  LayerGradients grads = buildLayerBackward(b, copy, fwd, dy);
  SmallVector<Value> results{grads.input};
  results.append(grads.weights.begin(), grads.weights.end());
  Value dx = results[0];
  if (dx.getType() != resultTypes[0])
    dx = tensor::CastOp::create(b, loc, resultTypes[0], dx);
  results[0] = dx;
  for (auto [i, value] : llvm::enumerate(results))
    if (value.getType() != resultTypes[i])
      results[i] = tensor::CastOp::create(b, loc, resultTypes[i], value);
  func::ReturnOp::create(b, loc, results);
  copy.erase();
  return success();
}

struct MoeAutodiff : public moe::impl::MoeAutodiffBase<MoeAutodiff> {
  using Base::Base;

  void runOnOperation() override {
    int64_t rowAlignment = alignment;
    if (std::string why = checkAlignment(rowAlignment); !why.empty()) {
      emitError(getOperation()->getLoc()) << "moe-autodiff: " << why;
      return signalPassFailure();
    }
    SmallVector<std::pair<func::FuncOp, LayerOp>> work;
    for (auto func : getOperation().getOps<func::FuncOp>()) {
      SmallVector<LayerOp> layers;
      func.walk([&](LayerOp layer) { layers.push_back(layer); });
      if (layers.size() > 1) {
        func.emitOpError() << "holds " << layers.size()
                           << " moe.layer ops; moe-autodiff differentiates "
                              "one layer per function";
        return signalPassFailure();
      }
      if (!layers.empty())
        work.push_back({func, layers.front()});
    }
    for (auto [func, layer] : work)
      if (failed(addBackward(getOperation(), func, layer, rowAlignment)))
        return signalPassFailure();
  }
};

} // namespace

SmallVector<std::pair<StringRef, Value>>
mlir::moe::listTrainedWeights(LayerOp layer) {
  SmallVector<std::pair<StringRef, Value>> weights{
      {"router_weight", layer.getRouterWeight()},
      {"gate_weight", layer.getGateWeight()},
      {"up_weight", layer.getUpWeight()},
      {"down_weight", layer.getDownWeight()}};
  if (layer.getConfig().hasSharedExperts())
    weights.append({{"shared_gate_weight", layer.getSharedGateWeight()},
                    {"shared_up_weight", layer.getSharedUpWeight()},
                    {"shared_down_weight", layer.getSharedDownWeight()}});
  if (Value gate = layer.getSharedExpertGate())
    weights.push_back({"shared_expert_gate", gate});
  if (Value bias = layer.getOutputBias())
    weights.push_back({"output_bias", bias});
  if (Value bias = layer.getRouterBias())
    weights.push_back({"router_bias", bias});
  if (layer.getGateBias())
    weights.append({{"gate_bias", layer.getGateBias()},
                    {"up_bias", layer.getUpBias()},
                    {"down_bias", layer.getDownBias()}});
  return weights;
}

std::vector<TrainArgument> mlir::moe::listTrainArguments(LayerOp layer,
                                                         Type momentType) {
  Builder b(layer.getContext());
  LayerConfigAttr config = layer.getConfig();
  Type f32 = b.getF32Type();
  if (!momentType)
    momentType = f32;
  int64_t dyn = ShapedType::kDynamic;
  int64_t hidden = config.getHidden(), experts = config.getExperts();
  auto f32Like = [&](Value v) {
    return RankedTensorType::get(cast<RankedTensorType>(v.getType()).getShape(),
                                 f32);
  };
  std::vector<TrainArgument> args;
  auto xType = cast<RankedTensorType>(layer.getInput().getType());
  args.push_back(
      {"x", false,
       RankedTensorType::get({dyn, hidden}, xType.getElementType())});
  args.push_back({"target", false, RankedTensorType::get({dyn, hidden}, f32)});
  args.push_back({"hyper", false, RankedTensorType::get({kHyperCount}, f32)});
  SmallVector<std::pair<StringRef, Value>> weights = listTrainedWeights(layer);
  for (auto [name, value] : weights) {
    args.push_back({name.str(), false, f32Like(value)});
    auto moment = RankedTensorType::get(
        cast<RankedTensorType>(value.getType()).getShape(), momentType);
    for (const char *suffix : {".m", ".v"})
      args.push_back({(name + suffix).str(), false, moment});
  }
  Value bias = layer.getScoreBias();
  if (bias)
    args.push_back({"score_bias", false, f32Like(bias)});
  if (bias)
    args.push_back({"score_bias.next", true, f32Like(bias)});
  args.push_back({"loss", true, RankedTensorType::get({1}, f32)});
  args.push_back({"load", true, RankedTensorType::get({experts}, f32)});
  args.push_back({"x.grad", true, RankedTensorType::get({dyn, hidden}, f32)});
  for (auto [name, value] : weights)
    args.push_back({(name + ".grad").str(), true, f32Like(value)});
  auto perWeight =
      RankedTensorType::get({static_cast<int64_t>(weights.size())}, f32);
  args.push_back({"grad_sq", true, perWeight});
  args.push_back({"bad_updates", true, perWeight});
  return args;
}

std::vector<TrainArgument>
mlir::moe::listTrainUpdateArguments(LayerOp layer, Type momentType) {
  Builder b(layer.getContext());
  Type f32 = b.getF32Type();
  if (!momentType)
    momentType = f32;
  std::vector<TrainArgument> args;
  args.push_back({"hyper", false, RankedTensorType::get({kHyperCount}, f32)});
  for (auto [name, value] : listTrainedWeights(layer)) {
    ArrayRef<int64_t> shape =
        cast<RankedTensorType>(value.getType()).getShape();
    auto type = RankedTensorType::get(shape, f32);
    auto moment = RankedTensorType::get(shape, momentType);
    args.push_back({name.str(), false, type});
    args.push_back({(name + ".m").str(), false, moment});
    args.push_back({(name + ".v").str(), false, moment});
    args.push_back({(name + ".grad").str(), false, type});
  }
  return args;
}

std::vector<TrainArgument>
mlir::moe::listDeviceTrainArguments(LayerOp layer, Type momentType) {
  std::vector<TrainArgument> args;
  for (TrainArgument &arg : listTrainArguments(layer, momentType))
    if (!StringRef(arg.name).ends_with(".next"))
      args.push_back(std::move(arg));
  return args;
}

std::vector<TrainArgument>
mlir::moe::listDeviceBackwardArguments(LayerOp layer) {
  std::vector<TrainArgument> args;
  for (TrainArgument &arg : listBackwardArguments(layer))
    if (arg.output || arg.name == "x" || arg.name == "dy")
      args.push_back(std::move(arg));
  return args;
}

std::vector<TrainArgument> mlir::moe::listBackwardArguments(LayerOp layer) {
  Builder b(layer.getContext());
  Type f32 = b.getF32Type();
  int64_t dyn = ShapedType::kDynamic;
  int64_t hidden = layer.getConfig().getHidden();
  auto f32Like = [&](Value v) {
    return RankedTensorType::get(cast<RankedTensorType>(v.getType()).getShape(),
                                 f32);
  };
  auto xType = cast<RankedTensorType>(layer.getInput().getType());
  std::vector<TrainArgument> args;
  args.push_back(
      {"x", false,
       RankedTensorType::get({dyn, hidden}, xType.getElementType())});
  args.push_back({"dy", false, RankedTensorType::get({dyn, hidden}, f32)});
  SmallVector<std::pair<StringRef, Value>> weights = listTrainedWeights(layer);
  for (auto [name, value] : weights)
    args.push_back({name.str(), false, f32Like(value)});
  if (Value bias = layer.getScoreBias())
    args.push_back({"score_bias", false, f32Like(bias)});
  args.push_back({"x.grad", true, RankedTensorType::get({dyn, hidden}, f32)});
  for (auto [name, value] : weights)
    args.push_back({(name + ".grad").str(), true, f32Like(value)});
  return args;
}
