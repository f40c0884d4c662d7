//===- ExpertParallel.cpp - Shard experts over ranks ----------------------===//
//
// Part of moe-compiler.
//
//===----------------------------------------------------------------------===//

#include "moe/MoeOps.h"
#include "moe/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"

namespace mlir::moe {
#define GEN_PASS_DEF_MOEEXPERTPARALLEL
#include "moe/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

namespace {

/// Narrows the expert weights of `layer` to one rank's E / ep experts.
LogicalResult shardLayer(LayerOp layer, int64_t ep, int64_t chunks) {
  int64_t experts = layer.getConfig().getExperts();
  if (layer.getEpSize() != 1)
    return layer.emitOpError()
           << "is already sharded (ep_size = " << layer.getEpSize() << ")";
  if (experts % ep != 0)
    return layer.emitOpError() << "has " << experts
                               << " experts, which moe-expert-parallel cannot "
                                  "shard over ep = "
                               << ep << " ranks";
  auto func = layer->getParentOfType<func::FuncOp>();
  SmallVector<BlockArgument> args;
  SmallVector<std::pair<StringRef, Value>> perExpert = {
      {"gate weight", layer.getGateWeight()},
      {"up weight", layer.getUpWeight()},
      {"down weight", layer.getDownWeight()}};
  if (layer.getGateBias())
    perExpert.append({{"gate bias", layer.getGateBias()},
                      {"up bias", layer.getUpBias()},
                      {"down bias", layer.getDownBias()}});
  if (layer.getGateScale())
    perExpert.append({{"gate scale", layer.getGateScale()},
                      {"up scale", layer.getUpScale()},
                      {"down scale", layer.getDownScale()}});
  for (auto [what, weight] : perExpert) {
    auto arg = dyn_cast<BlockArgument>(weight);
    if (!func || !arg || arg.getOwner() != &func.getBody().front() ||
        !arg.hasOneUse())
      return layer.emitOpError()
             << "expected the " << what
             << " to be an argument of the enclosing function used "
                "only by the layer, so moe-expert-parallel can narrow it";
    args.push_back(arg);
  }
  // Checked all before changing any.
  for (BlockArgument arg : args) {
    auto type = cast<RankedTensorType>(arg.getType());
    SmallVector<int64_t> shape(type.getShape());
    shape[0] /= ep;
    arg.setType(RankedTensorType::get(shape, type.getElementType()));
  }
  layer.setEpSize(ep);
  layer.setEpChunks(chunks);
  SmallVector<Type> inputs(func.getBody().front().getArgumentTypes());
  func.setFunctionType(
      FunctionType::get(func.getContext(), inputs, func.getResultTypes()));
  return success();
}

struct MoeExpertParallel
    : public moe::impl::MoeExpertParallelBase<MoeExpertParallel> {
  using Base::Base;

  void runOnOperation() override {
    int64_t ranks = ep;
    if (ranks < 1) {
      emitError(getOperation().getLoc())
          << "moe-expert-parallel: expected ep >= 1, got " << ranks;
      return signalPassFailure();
    }
    int64_t pieces = chunks;
    if (pieces < 1) {
      emitError(getOperation().getLoc())
          << "moe-expert-parallel: expected chunks >= 1, got " << pieces;
      return signalPassFailure();
    }
    if (ranks == 1)
      return;
    SmallVector<LayerOp> layers;
    getOperation().walk([&](LayerOp layer) { layers.push_back(layer); });
    for (LayerOp layer : layers)
      if (failed(shardLayer(layer, ranks, pieces)))
        return signalPassFailure();
  }
};

} // namespace
