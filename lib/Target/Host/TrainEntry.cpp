//===- TrainEntry.cpp - The host training step ----------------------------===//
//
// Part of moe-compiler. One compiled function runs a whole training step of
// an MoE layer: forward, MSE loss, backward, AdamW and the
// auxiliary-loss-free bias update.
//
//===----------------------------------------------------------------------===//

#include "moe/MoeOps.h"
#include "moe/Target/Host.h"
#include "moe/Transforms/Autodiff.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"

using namespace mlir;
using namespace mlir::moe;

namespace {

/// Builds the training step's arithmetic on tensors.
struct StepBuilder {
  OpBuilder &b;
  Location loc;

  Value f32(double v) {
    return arith::ConstantOp::create(b, loc, b.getF32FloatAttr(v));
  }
  /// `value` broadcast to the (static or dynamic) shape of `like`.
  Value splat(Value value, Value like) {
    auto type = cast<RankedTensorType>(like.getType());
    SmallVector<Value> sizes;
    for (int64_t i = 0; i < type.getRank(); ++i)
      if (type.isDynamicDim(i))
        sizes.push_back(tensor::DimOp::create(b, loc, like, i));
    auto f32Type = RankedTensorType::get(type.getShape(), b.getF32Type());
    Value empty = tensor::EmptyOp::create(b, loc, f32Type, sizes);
    return linalg::FillOp::create(b, loc, value, empty).getResult(0);
  }
  Value add(Value l, Value r) { return arith::AddFOp::create(b, loc, l, r); }
  Value sub(Value l, Value r) { return arith::SubFOp::create(b, loc, l, r); }
  Value mul(Value l, Value r) { return arith::MulFOp::create(b, loc, l, r); }
  Value div(Value l, Value r) { return arith::DivFOp::create(b, loc, l, r); }
  /// Converts a float tensor to `elementType`.
  Value convert(Value tensor, Type elementType) {
    auto type = cast<RankedTensorType>(tensor.getType());
    if (type.getElementType() == elementType)
      return tensor;
    auto to = RankedTensorType::get(type.getShape(), elementType);
    if (elementType.getIntOrFloatBitWidth() <
        type.getElementType().getIntOrFloatBitWidth())
      return arith::TruncFOp::create(b, loc, to, tensor);
    return arith::ExtFOp::create(b, loc, to, tensor);
  }
  /// Sum of every element of an f32 tensor, as a scalar.
  Value sumAll(Value tensor) {
    auto type = cast<RankedTensorType>(tensor.getType());
    Value init = tensor::EmptyOp::create(
        b, loc, RankedTensorType::get({}, b.getF32Type()), ValueRange{});
    init = linalg::FillOp::create(b, loc, f32(0.0), init).getResult(0);
    SmallVector<int64_t> dims;
    for (int64_t i = 0; i < type.getRank(); ++i)
      dims.push_back(i);
    auto reduce = linalg::ReduceOp::create(
        b, loc, ValueRange{tensor}, ValueRange{init}, dims,
        [](OpBuilder &nb, Location nloc, ValueRange args) {
          Value s = arith::AddFOp::create(nb, nloc, args[0], args[1]);
          linalg::YieldOp::create(nb, nloc, s);
        });
    return tensor::ExtractOp::create(b, loc, reduce.getResult(0), ValueRange{});
  }
};

bool isExpertWeight(StringRef name) {
  return name == "gate_weight" || name == "up_weight" || name == "down_weight";
}

} // namespace

std::vector<TrainArgument> mlir::moe::addHostTrainEntry(ModuleOp module,
                                                        LayerOp layer) {
  MLIRContext *ctx = layer.getContext();
  Location loc = layer.getLoc();
  OpBuilder b(ctx);
  LayerConfigAttr config = layer.getConfig();
  Type f32 = b.getF32Type();
  int64_t hidden = config.getHidden(), experts = config.getExperts();

  // The trained weights, in the order buildLayerBackward returns their
  // gradients.
  SmallVector<std::pair<StringRef, Value>> weights = listTrainedWeights(layer);
  Value bias = layer.getScoreBias();
  std::vector<TrainArgument> args = listTrainArguments(layer);
  size_t firstOutput = 0;
  while (!args[firstOutput].output)
    ++firstOutput;

  SmallVector<Type> argTypes;
  for (const TrainArgument &arg : args)
    argTypes.push_back(
        MemRefType::get(arg.type.getShape(), arg.type.getElementType()));
  b.setInsertionPointToEnd(module.getBody());
  auto func = func::FuncOp::create(b, loc, kHostTrainEntryName,
                                   b.getFunctionType(argTypes, {}));
  func->setAttr("llvm.emit_c_interface", b.getUnitAttr());
  Block *body = func.addEntryBlock();
  b.setInsertionPointToStart(body);
  StepBuilder s{b, loc};

  std::map<std::string, Value> in;
  for (size_t i = 0; i < firstOutput; ++i)
    in[args[i].name] = bufferization::ToTensorOp::create(
        b, loc, args[i].type, body->getArgument(i), /*restrict=*/true);
  Value x = in["x"], target = in["target"], hyper = in["hyper"];
  auto hyperAt = [&](TrainHyper h) -> Value {
    Value i = arith::ConstantIndexOp::create(b, loc, h);
    return tensor::ExtractOp::create(b, loc, hyper, ValueRange{i});
  };

  // The forward pass on compute copies of the master weights.
  IRMapping mapping;
  mapping.map(layer.getInput(), x);
  for (auto [name, value] : weights)
    mapping.map(
        value,
        s.convert(in[name.str()],
                  cast<RankedTensorType>(value.getType()).getElementType()));
  if (bias)
    mapping.map(bias, in["score_bias"]);
  auto copy = cast<LayerOp>(b.clone(*layer, mapping));
  DecomposedLayer forward = decomposeLayer(b, copy, /*alignment=*/1);

  // loss = mean((y - target)^2); dy = 2 (y - target) / N. With expert
  // parallelism the mean is over every rank's tokens: the sum of squares
  // and the token count are summed over the ranks first.
  auto ep = static_cast<int64_t>(layer.getEpSize());
  auto allReduce = [&](Value v) -> Value {
    return ep > 1 ? AllReduceOp::create(b, loc, v, ep) : v;
  };
  Value diff = s.sub(s.convert(forward.output, f32), target);
  Value rows = tensor::DimOp::create(b, loc, x, 0);
  Value tokens = arith::UIToFPOp::create(
      b, loc, f32, arith::IndexCastUIOp::create(b, loc, b.getI64Type(), rows));
  Value totals = allReduce(tensor::FromElementsOp::create(
      b, loc, RankedTensorType::get({2}, f32),
      ValueRange{s.sumAll(s.mul(diff, diff)), tokens}));
  auto element = [&](Value t, int64_t i) -> Value {
    Value index = arith::ConstantIndexOp::create(b, loc, i);
    return tensor::ExtractOp::create(b, loc, t, ValueRange{index});
  };
  Value globalTokens = element(totals, 1);
  Value count = s.mul(globalTokens, s.f32(static_cast<double>(hidden)));
  Value loss = s.div(element(totals, 0), count);
  Value dy = s.mul(diff, s.splat(s.div(s.f32(2.0), count), diff));
  dy = s.convert(dy, cast<RankedTensorType>(copy.getType()).getElementType());
  LayerGradients grads = buildLayerBackward(b, copy, forward, dy);

  std::map<std::string, Value> out;
  out["loss"] = tensor::FromElementsOp::create(
      b, loc, RankedTensorType::get({1}, f32), ValueRange{loss});
  out["x.grad"] = s.convert(grads.input, f32);

  // AdamW with bias-corrected moments.
  Value lr = hyperAt(kHyperLearningRate), step = hyperAt(kHyperStep);
  Value beta1 = hyperAt(kHyperBeta1), beta2 = hyperAt(kHyperBeta2);
  Value eps = hyperAt(kHyperEpsilon), decay = hyperAt(kHyperWeightDecay);
  Value one = s.f32(1.0);
  Value correction1 =
      s.sub(one, math::PowFOp::create(b, loc, beta1, step).getResult());
  Value correction2 =
      s.sub(one, math::PowFOp::create(b, loc, beta2, step).getResult());
  for (auto [i, entry] : llvm::enumerate(weights)) {
    std::string name = entry.first.str();
    Value p = in[name], m = in[name + ".m"], v = in[name + ".v"];
    Value g = grads.weights[i];
    // The ranks' gradients of replicated weights are partial sums; each
    // rank's experts already saw every token routed to them.
    if (!isExpertWeight(entry.first))
      g = allReduce(g);
    if (g.getType() != p.getType())
      g = tensor::CastOp::create(b, loc, p.getType(), g);
    Value m2 = s.add(s.mul(s.splat(beta1, p), m),
                     s.mul(s.splat(s.sub(one, beta1), p), g));
    Value v2 = s.add(s.mul(s.splat(beta2, p), v),
                     s.mul(s.splat(s.sub(one, beta2), p), s.mul(g, g)));
    Value mHat = s.div(m2, s.splat(correction1, p));
    Value vHat = s.div(v2, s.splat(correction2, p));
    Value update = s.add(
        s.div(mHat, s.add(math::SqrtOp::create(b, loc, vHat), s.splat(eps, p))),
        s.mul(s.splat(decay, p), p));
    out[name + ".next"] = s.sub(p, s.mul(s.splat(lr, p), update));
    out[name + ".m.next"] = m2;
    out[name + ".v.next"] = v2;
    out[name + ".grad"] = g;
  }

  // Tokens routed to each expert: the unpadded segment sizes.
  auto i32Vec = RankedTensorType::get({experts}, b.getI32Type());
  Value counts;
  for (const ExpertChunk &chunk : forward.chunks) {
    auto slice = [&](int64_t first) -> Value {
      return tensor::ExtractSliceOp::create(
          b, loc, i32Vec, chunk.offsets, ValueRange{}, ValueRange{},
          ValueRange{}, b.getDenseI64ArrayAttr({first}),
          b.getDenseI64ArrayAttr({experts}), b.getDenseI64ArrayAttr({1}));
    };
    Value part = arith::SubIOp::create(b, loc, slice(1), slice(0));
    counts = counts ? Value(arith::AddIOp::create(b, loc, counts, part)) : part;
  }
  Value load = allReduce(arith::SIToFPOp::create(
      b, loc, RankedTensorType::get({experts}, f32), counts));
  out["load"] = load;
  if (bias) {
    // bias += gamma * sign(mean load - load), over every rank's tokens.
    Value assigned =
        s.mul(globalTokens, s.f32(static_cast<double>(config.getTopK())));
    Value mean = s.div(assigned, s.f32(static_cast<double>(experts)));
    Value d = s.sub(s.splat(mean, load), load);
    Value zeros = s.splat(s.f32(0.0), load);
    Value above =
        arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OGT, d, zeros);
    Value below =
        arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OLT, d, zeros);
    Value sign = arith::SelectOp::create(
        b, loc, above, s.splat(s.f32(1.0), load),
        arith::SelectOp::create(b, loc, below, s.splat(s.f32(-1.0), load),
                                zeros));
    out["score_bias.next"] = s.add(
        in["score_bias"], s.mul(s.splat(hyperAt(kHyperGamma), load), sign));
  }

  for (size_t i = firstOutput; i < args.size(); ++i) {
    Value value = out.at(args[i].name);
    if (value.getType() != args[i].type)
      value = tensor::CastOp::create(b, loc, args[i].type, value);
    auto op = bufferization::MaterializeInDestinationOp::create(
        b, loc, value, body->getArgument(i));
    op.setRestrict(true);
    op.setWritable(true);
  }
  func::ReturnOp::create(b, loc);
  copy.erase();
  return args;
}
