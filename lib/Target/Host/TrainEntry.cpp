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
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
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

/// Elements per parallel iteration of the fused AdamW loop: a fixed size,
/// so that the partial sums, and the sums of them, do not depend on the
/// thread count.
constexpr int64_t kAdamChunk = 1 << 14;

/// 1 when the f32 `value` is Inf or NaN (its exponent all ones), else 0.
Value nonFinite(OpBuilder &b, Location loc, Value value) {
  Type i32 = b.getI32Type();
  Value bits = arith::BitcastOp::create(b, loc, i32, value);
  Value mask =
      arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(0x7f800000));
  Value exponent = arith::AndIOp::create(b, loc, bits, mask);
  Value bad =
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, exponent, mask);
  return arith::ExtUIOp::create(b, loc, i32, bad);
}

/// Scalars of one AdamW step.
struct AdamHyper {
  Value lr, beta1, beta2, eps, decay, correction1, correction2;
};

/// One pass of AdamW over a weight's flat buffers p, m, v and g, in
/// parallel over fixed chunks:
/// - check (`update` false): the update is computed in registers only; the
///   pass adds up g's squares and how many updated values would not be
///   finite (each chunk's sums added in order afterwards, into
///   gradSq[index] and badUpdates[index]), which the runtime checks before
///   it commits the step;
/// - update: the pass writes p, m and v in place.
/// Both compute the same values in the same order. Moments of bf16 are
/// widened when loaded and the new ones rounded to nearest even when
/// stored; the check counts the rounded values.
void emitAdamWPass(OpBuilder &b, Location loc, ArrayRef<Value> buffers,
                   const AdamHyper &h, bool update, Value gradSq = {},
                   Value badUpdates = {}, int64_t index = 0) {
  auto type = cast<MemRefType>(buffers[0].getType());
  int64_t n = type.getNumElements();
  SmallVector<ReassociationIndices> all(1);
  for (int64_t d = 0; d < type.getRank(); ++d)
    all[0].push_back(d);
  SmallVector<Value> flat;
  for (Value buffer : buffers)
    flat.push_back(type.getRank() == 1 ? buffer
                                       : Value(memref::CollapseShapeOp::create(
                                             b, loc, buffer, all)));
  Type f32 = b.getF32Type(), f64 = b.getF64Type(), i32 = b.getI32Type();
  Type momentType = cast<MemRefType>(buffers[1].getType()).getElementType();
  auto idx = [&](int64_t v) -> Value {
    return arith::ConstantIndexOp::create(b, loc, v);
  };
  int64_t chunks = (n + kAdamChunk - 1) / kAdamChunk;
  // (Freed by the buffer deallocation pipeline.)
  Value sqParts, badParts;
  if (!update) {
    sqParts = memref::AllocOp::create(b, loc, MemRefType::get({chunks}, f64));
    badParts = memref::AllocOp::create(b, loc, MemRefType::get({chunks}, i32));
  }
  Value one = arith::ConstantOp::create(b, loc, b.getF32FloatAttr(1.0));
  Value oneMinusBeta1 = arith::SubFOp::create(b, loc, one, h.beta1);
  Value oneMinusBeta2 = arith::SubFOp::create(b, loc, one, h.beta2);
  auto reassoc = arith::FastMathFlagsAttr::get(b.getContext(),
                                               arith::FastMathFlags::reassoc);
  scf::ParallelOp::create(
      b, loc, ValueRange{idx(0)}, ValueRange{idx(chunks)}, ValueRange{idx(1)},
      [&](OpBuilder &pb, Location loc, ValueRange ivs) {
        Value lo = arith::MulIOp::create(pb, loc, ivs[0], idx(kAdamChunk));
        Value hi = arith::MinUIOp::create(
            pb, loc, arith::AddIOp::create(pb, loc, lo, idx(kAdamChunk)),
            idx(n));
        Value zeroSq =
            arith::ConstantOp::create(pb, loc, pb.getF64FloatAttr(0));
        Value zeroBad =
            arith::ConstantOp::create(pb, loc, pb.getI32IntegerAttr(0));
        SmallVector<Value> init;
        if (!update)
          init = {zeroSq, zeroBad};
        auto loop = scf::ForOp::create(
            pb, loc, lo, hi, idx(1), init,
            [&](OpBuilder &fb, Location loc, Value i, ValueRange acc) {
              auto load = [&](int k) -> Value {
                return memref::LoadOp::create(fb, loc, flat[k], ValueRange{i});
              };
              Value p = load(0), m = load(1), v = load(2), g = load(3);
              // Moments kept in a narrower type are widened here and
              // rounded once when stored.
              if (momentType != f32) {
                m = arith::ExtFOp::create(fb, loc, f32, m);
                v = arith::ExtFOp::create(fb, loc, f32, v);
              }
              auto mul = [&](Value l, Value r) -> Value {
                return arith::MulFOp::create(fb, loc, l, r);
              };
              auto add = [&](Value l, Value r) -> Value {
                return arith::AddFOp::create(fb, loc, l, r);
              };
              auto div = [&](Value l, Value r) -> Value {
                return arith::DivFOp::create(fb, loc, l, r);
              };
              Value m2 = add(mul(h.beta1, m), mul(oneMinusBeta1, g));
              Value v2 = add(mul(h.beta2, v), mul(oneMinusBeta2, mul(g, g)));
              Value mHat = div(m2, h.correction1);
              Value vHat = div(v2, h.correction2);
              Value step = add(
                  div(mHat, add(math::SqrtOp::create(fb, loc, vHat), h.eps)),
                  mul(h.decay, p));
              Value p2 = arith::SubFOp::create(fb, loc, p, mul(h.lr, step));
              // The moments as stored (the master's step above used them
              // unrounded).
              if (momentType != f32) {
                m2 = arith::TruncFOp::create(fb, loc, momentType, m2);
                v2 = arith::TruncFOp::create(fb, loc, momentType, v2);
              }
              if (update) {
                memref::StoreOp::create(fb, loc, p2, flat[0], ValueRange{i});
                memref::StoreOp::create(fb, loc, m2, flat[1], ValueRange{i});
                memref::StoreOp::create(fb, loc, v2, flat[2], ValueRange{i});
                scf::YieldOp::create(fb, loc);
                return;
              }
              Value gd = arith::ExtFOp::create(fb, loc, f64, g);
              Value sq = arith::AddFOp::create(
                  fb, loc, acc[0],
                  arith::MulFOp::create(fb, loc, gd, gd, reassoc), reassoc);
              if (momentType != f32) {
                m2 = arith::ExtFOp::create(fb, loc, f32, m2);
                v2 = arith::ExtFOp::create(fb, loc, f32, v2);
              }
              Value bad = arith::OrIOp::create(
                  fb, loc,
                  arith::OrIOp::create(fb, loc, nonFinite(fb, loc, p2),
                                       nonFinite(fb, loc, m2)),
                  nonFinite(fb, loc, v2));
              scf::YieldOp::create(
                  fb, loc,
                  ValueRange{sq, arith::AddIOp::create(fb, loc, acc[1], bad)});
            });
        if (!update) {
          memref::StoreOp::create(pb, loc, loop.getResult(0), sqParts, ivs);
          memref::StoreOp::create(pb, loc, loop.getResult(1), badParts, ivs);
        }
        scf::ReduceOp::create(pb, loc);
      });
  if (update)
    return;
  // The chunks' sums, in order.
  Value zeroSq = arith::ConstantOp::create(b, loc, b.getF64FloatAttr(0));
  Value zeroBad = arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(0));
  auto total = scf::ForOp::create(
      b, loc, idx(0), idx(chunks), idx(1), ValueRange{zeroSq, zeroBad},
      [&](OpBuilder &fb, Location loc, Value c, ValueRange acc) {
        Value sq = memref::LoadOp::create(fb, loc, sqParts, ValueRange{c});
        Value bad = memref::LoadOp::create(fb, loc, badParts, ValueRange{c});
        scf::YieldOp::create(
            fb, loc,
            ValueRange{arith::AddFOp::create(fb, loc, acc[0], sq),
                       arith::AddIOp::create(fb, loc, acc[1], bad)});
      });
  Value at = idx(index);
  memref::StoreOp::create(
      b, loc, arith::TruncFOp::create(b, loc, f32, total.getResult(0)), gradSq,
      ValueRange{at});
  memref::StoreOp::create(
      b, loc, arith::SIToFPOp::create(b, loc, f32, total.getResult(1)),
      badUpdates, ValueRange{at});
}

/// AdamW's scalars of this step from `hyperAt` (an element of `hyper`).
AdamHyper readAdamHyper(OpBuilder &b, Location loc,
                        function_ref<Value(TrainHyper)> hyperAt) {
  Value beta1 = hyperAt(kHyperBeta1), beta2 = hyperAt(kHyperBeta2);
  Value step = hyperAt(kHyperStep);
  Value one = arith::ConstantOp::create(b, loc, b.getF32FloatAttr(1.0));
  auto correction = [&](Value beta) -> Value {
    return arith::SubFOp::create(
        b, loc, one, math::PowFOp::create(b, loc, beta, step).getResult());
  };
  return {hyperAt(kHyperLearningRate),
          beta1,
          beta2,
          hyperAt(kHyperEpsilon),
          hyperAt(kHyperWeightDecay),
          correction(beta1),
          correction(beta2)};
}

/// Adds `func.func @name` taking `args` as memrefs (with a C interface)
/// at the builder's point and moves the builder into its body; `in` gets
/// the inputs (the arguments before the first output) as tensors.
Block *createEntry(OpBuilder &b, Location loc, StringRef name,
                   ArrayRef<TrainArgument> args,
                   std::map<std::string, Value> &in) {
  SmallVector<Type> argTypes;
  for (const TrainArgument &arg : args)
    argTypes.push_back(
        MemRefType::get(arg.type.getShape(), arg.type.getElementType()));
  auto func =
      func::FuncOp::create(b, loc, name, b.getFunctionType(argTypes, {}));
  func->setAttr("llvm.emit_c_interface", b.getUnitAttr());
  Block *body = func.addEntryBlock();
  b.setInsertionPointToStart(body);
  for (auto [i, arg] : llvm::enumerate(args)) {
    if (arg.output)
      break;
    in[arg.name] = bufferization::ToTensorOp::create(
        b, loc, arg.type, body->getArgument(i), /*restrict=*/true);
  }
  return body;
}

/// Clones `layer` with `in["x"]` as its input, its trained weights from the
/// f32 `in[W]` converted to their compute dtype and its score bias from
/// `in["score_bias"]`, and decomposes the clone into `forward`.
LayerOp cloneOnInputs(StepBuilder &s, LayerOp layer,
                      std::map<std::string, Value> &in,
                      DecomposedLayer &forward) {
  IRMapping mapping;
  mapping.map(layer.getInput(), in["x"]);
  LayerConfigAttr config = layer.getConfig();
  // An FP8 layer's expert weights: e4m3 codes and block scales quantized
  // from the f32 masters as the recipe says, at every step.
  llvm::DenseMap<Value, Value> scaleOf;
  if (config.isFp8())
    for (auto [weight, scale] :
         {std::pair{layer.getGateWeight(), layer.getGateScale()},
          {layer.getUpWeight(), layer.getUpScale()},
          {layer.getDownWeight(), layer.getDownScale()},
          {layer.getSharedGateWeight(), layer.getSharedGateScale()},
          {layer.getSharedUpWeight(), layer.getSharedUpScale()},
          {layer.getSharedDownWeight(), layer.getSharedDownScale()}})
      if (weight)
        scaleOf[weight] = scale;
  for (auto [name, value] : listTrainedWeights(layer)) {
    Value master = in[name.str()];
    auto type = cast<RankedTensorType>(value.getType());
    if (auto scale = scaleOf.find(value); scale != scaleOf.end()) {
      auto quantized =
          Fp8QuantizeWeightOp::create(s.b, s.loc, type, scale->second.getType(),
                                      master, config.getRecipe());
      mapping.map(value, quantized.getCodes());
      mapping.map(scale->second, quantized.getScales());
      continue;
    }
    mapping.map(value, s.convert(master, type.getElementType()));
  }
  if (Value bias = layer.getScoreBias())
    mapping.map(bias, in["score_bias"]);
  auto copy = cast<LayerOp>(s.b.clone(*layer, mapping));
  forward = decomposeLayer(s.b, copy, /*alignment=*/1);
  return copy;
}

/// Writes `value` into the output buffer `buffer` of `arg`.
void writeOutput(OpBuilder &b, Location loc, Value value,
                 const TrainArgument &arg, Value buffer) {
  if (value.getType() != arg.type)
    value = tensor::CastOp::create(b, loc, arg.type, value);
  auto op =
      bufferization::MaterializeInDestinationOp::create(b, loc, value, buffer);
  op.setRestrict(true);
  op.setWritable(true);
}

bool isExpertWeight(StringRef name) {
  return name == "gate_weight" || name == "up_weight" ||
         name == "down_weight" || name == "gate_bias" || name == "up_bias" ||
         name == "down_bias";
}

} // namespace

std::vector<TrainArgument>
mlir::moe::addHostTrainEntry(ModuleOp module, LayerOp layer, Type momentType) {
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
  std::vector<TrainArgument> args = listTrainArguments(layer, momentType);
  size_t firstOutput = 0;
  while (!args[firstOutput].output)
    ++firstOutput;

  b.setInsertionPointToEnd(module.getBody());
  std::map<std::string, Value> in;
  Block *body = createEntry(b, loc, kHostTrainEntryName, args, in);
  StepBuilder s{b, loc};
  Value x = in["x"], target = in["target"], hyper = in["hyper"];
  auto hyperAt = [&](TrainHyper h) -> Value {
    Value i = arith::ConstantIndexOp::create(b, loc, h);
    return tensor::ExtractOp::create(b, loc, hyper, ValueRange{i});
  };

  // The forward pass on compute copies of the master weights.
  DecomposedLayer forward;
  LayerOp copy = cloneOnInputs(s, layer, in, forward);

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

  // AdamW with bias-corrected moments: checked here, applied by
  // moe_train_update (addHostTrainUpdateEntry) once the step is finite.
  AdamHyper adam = readAdamHyper(b, loc, hyperAt);
  std::map<std::string, Value> argOf;
  for (auto [i, arg] : llvm::enumerate(args))
    argOf[arg.name] = body->getArgument(i);
  for (auto [i, entry] : llvm::enumerate(weights)) {
    std::string name = entry.first.str();
    Value g = grads.weights[i];
    // The ranks' gradients of replicated weights are partial sums; each
    // rank's experts already saw every token routed to them.
    if (!isExpertWeight(entry.first))
      g = allReduce(g);
    // Into the gradient output (where the expert GEMMs' dW writes it in
    // the first place: buildInDestinations in convert-moe-to-host), then
    // checked from there.
    Value gradArg = argOf[name + ".grad"];
    auto gradSpec = llvm::find_if(
        args, [&](const TrainArgument &a) { return a.name == name + ".grad"; });
    writeOutput(b, loc, g, *gradSpec, gradArg);
    emitAdamWPass(
        b, loc, {argOf[name], argOf[name + ".m"], argOf[name + ".v"], gradArg},
        adam,
        /*update=*/false, argOf["grad_sq"], argOf["bad_updates"],
        static_cast<int64_t>(i));
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
    // Written above.
    StringRef name = args[i].name;
    if (name == "grad_sq" || name == "bad_updates" ||
        (name.ends_with(".grad") && name != "x.grad"))
      continue;
    writeOutput(b, loc, out.at(args[i].name), args[i], body->getArgument(i));
  }
  func::ReturnOp::create(b, loc);
  copy.erase();
  return args;
}

std::vector<TrainArgument> mlir::moe::addHostTrainUpdateEntry(ModuleOp module,
                                                              LayerOp layer,
                                                              Type momentType) {
  OpBuilder b(layer.getContext());
  Location loc = layer.getLoc();
  std::vector<TrainArgument> args = listTrainUpdateArguments(layer, momentType);
  SmallVector<Type> argTypes;
  for (const TrainArgument &arg : args)
    argTypes.push_back(
        MemRefType::get(arg.type.getShape(), arg.type.getElementType()));
  b.setInsertionPointToEnd(module.getBody());
  auto func = func::FuncOp::create(b, loc, kHostTrainUpdateEntryName,
                                   b.getFunctionType(argTypes, {}));
  func->setAttr("llvm.emit_c_interface", b.getUnitAttr());
  Block *body = func.addEntryBlock();
  b.setInsertionPointToStart(body);
  Value hyper = body->getArgument(0);
  AdamHyper adam = readAdamHyper(b, loc, [&](TrainHyper h) -> Value {
    Value i = arith::ConstantIndexOp::create(b, loc, h);
    return memref::LoadOp::create(b, loc, hyper, ValueRange{i});
  });
  // hyper, then W, W.m, W.v, W.grad per weight.
  for (size_t i = 1; i + 3 < args.size(); i += 4)
    emitAdamWPass(b, loc,
                  {body->getArgument(i), body->getArgument(i + 1),
                   body->getArgument(i + 2), body->getArgument(i + 3)},
                  adam, /*update=*/true);
  func::ReturnOp::create(b, loc);
  return args;
}

std::vector<TrainArgument> mlir::moe::addHostBackwardEntry(ModuleOp module,
                                                           LayerOp layer) {
  OpBuilder b(layer.getContext());
  Location loc = layer.getLoc();
  std::vector<TrainArgument> args = listBackwardArguments(layer);
  b.setInsertionPointToEnd(module.getBody());
  std::map<std::string, Value> in;
  Block *body = createEntry(b, loc, kHostBackwardEntryName, args, in);
  StepBuilder s{b, loc};
  // The forward pass again (nothing of the framework's forward call is
  // kept), then the backward pass from the caller's dy.
  DecomposedLayer forward;
  LayerOp copy = cloneOnInputs(s, layer, in, forward);
  Value dy = s.convert(in["dy"],
                       cast<RankedTensorType>(copy.getType()).getElementType());
  LayerGradients grads = buildLayerBackward(b, copy, forward, dy);
  std::map<std::string, Value> out;
  out["x.grad"] = s.convert(grads.input, b.getF32Type());
  // Expert-parallel: each rank's experts saw every token routed to them,
  // and the replicated weights' gradients (partial sums over this rank's
  // tokens) are summed over the ranks, as the training step sums them, so
  // a framework's optimizer sees the gradients of the loss over every
  // rank's tokens.
  auto ep = static_cast<int64_t>(layer.getEpSize());
  for (auto [i, entry] : llvm::enumerate(listTrainedWeights(layer))) {
    Value g = grads.weights[i];
    if (ep > 1 && !isExpertWeight(entry.first))
      g = AllReduceOp::create(b, loc, g, ep);
    out[(entry.first + ".grad").str()] = g;
  }
  for (auto [i, arg] : llvm::enumerate(args))
    if (arg.output)
      writeOutput(b, loc, out.at(arg.name), arg, body->getArgument(i));
  func::ReturnOp::create(b, loc);
  copy.erase();
  return args;
}
