//===- DecomposeLayer.cpp - moe.layer to its primitives -------------------===//
//
// Part of moe-compiler.
//
//===----------------------------------------------------------------------===//

#include "moe/Transforms/DecomposeLayer.h"
#include "moe/MoeOps.h"
#include "moe/Support/Routing.h"
#include "moe/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Interfaces/FunctionInterfaces.h"

namespace mlir::moe {
#define GEN_PASS_DEF_MOEDECOMPOSELAYER
#include "moe/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

Value mlir::moe::localExpertOffsets(OpBuilder &b, Location loc,
                                    Value recvOffsets, int64_t ep) {
  auto type = cast<RankedTensorType>(recvOffsets.getType());
  int64_t local = (type.getDimSize(0) - 1) / ep;
  return tensor::ExtractSliceOp::create(
      b, loc, RankedTensorType::get({local + 1}, type.getElementType()),
      recvOffsets, ValueRange{}, ValueRange{}, ValueRange{},
      b.getDenseI64ArrayAttr({0}), b.getDenseI64ArrayAttr({local + 1}),
      b.getDenseI64ArrayAttr({ep}));
}

DecomposedLayer mlir::moe::decomposeLayer(OpBuilder &b, LayerOp layer,
                                          int64_t alignment) {
  LayerConfigAttr config = layer.getConfig();
  Location loc = layer.getLoc();
  Value x = layer.getInput();

  auto scoring = ScoringFuncAttr::get(b.getContext(), config.getScoring());
  Value scores = RouterOp::create(b, loc, x, layer.getRouterWeight(), scoring);

  auto topk = TopKOp::create(b, loc, scores, layer.getScoreBias(),
                             config.getTopK(), config.getGroups(),
                             config.getTopkGroups(), config.getGroupScore(),
                             config.getNormTopkProb(), config.getRoutedScale());

  auto dispatch = DispatchOp::create(b, loc, x, topk.getIndices(),
                                     config.getExperts(), alignment);
  Value offsets = dispatch.getOffsets();
  // Expert parallelism: the dispatched rows go to the ranks that own their
  // experts and the expert outputs come back.
  auto ep = static_cast<int64_t>(layer.getEpSize());
  Value rows = dispatch.getRows(), recvOffsets = offsets,
        localOffsets = offsets;
  if (ep > 1) {
    auto exchange =
        AllToAllOp::create(b, loc, rows, offsets, ep, AllToAllKind::Dispatch);
    rows = exchange.getOutput();
    recvOffsets = exchange.getOutputOffsets();
    localOffsets = localExpertOffsets(b, loc, recvOffsets, ep);
  }
  Value gate = GroupedMatmulOp::create(b, loc, rows, layer.getGateWeight(),
                                       localOffsets);
  Value up =
      GroupedMatmulOp::create(b, loc, rows, layer.getUpWeight(), localOffsets);
  Value act = SwiGLUOp::create(b, loc, gate, up);
  Value down =
      GroupedMatmulOp::create(b, loc, act, layer.getDownWeight(), localOffsets);
  if (ep > 1)
    down =
        AllToAllOp::create(b, loc, down, recvOffsets, ep, AllToAllKind::Combine)
            .getOutput();
  Value out =
      CombineOp::create(b, loc, down, dispatch.getRowMap(), topk.getWeights());

  if (config.hasSharedExperts()) {
    Value shared = SharedExpertOp::create(
        b, loc, x, layer.getSharedGateWeight(), layer.getSharedUpWeight(),
        layer.getSharedDownWeight(), layer.getSharedExpertGate());
    out = arith::AddFOp::create(b, loc, out, shared);
  }
  // The layer may declare a more static result type than its input's.
  if (out.getType() != layer.getType())
    out = tensor::CastOp::create(b, loc, layer.getType(), out);
  DecomposedLayer result;
  result.output = out;
  result.indices = topk.getIndices();
  result.weights = topk.getWeights();
  result.scores = scores;
  result.rows = dispatch.getRows();
  result.offsets = offsets;
  result.localRows = rows;
  result.recvOffsets = recvOffsets;
  result.localOffsets = localOffsets;
  result.rowMap = dispatch.getRowMap();
  result.gate = gate;
  result.up = up;
  result.act = act;
  result.down = down;
  return result;
}

namespace {

/// Records `partition` on the function (or, outside functions, the parent
/// op) that holds `layer`.
LogicalResult recordPartition(LayerOp layer, SmPartitionAttr partition) {
  Operation *holder = layer->getParentOfType<FunctionOpInterface>();
  if (!holder)
    holder = layer->getParentOp();
  if (!holder)
    return layer.emitOpError() << "has a partition but no parent op to hold it";
  StringRef name = MoeDialect::getSmPartitionAttrName();
  if (auto existing = holder->getAttrOfType<SmPartitionAttr>(name)) {
    if (existing != partition)
      return layer.emitOpError()
             << "partition " << partition << " conflicts with " << existing
             << " of another layer in the same function";
    return success();
  }
  holder->setAttr(name, partition);
  return success();
}

struct MoeDecomposeLayer : moe::impl::MoeDecomposeLayerBase<MoeDecomposeLayer> {
  using Base::Base;

  void runOnOperation() override {
    int64_t rowAlignment = alignment;
    if (!isPowerOfTwo(rowAlignment) || rowAlignment > (1 << 16)) {
      emitError(getOperation()->getLoc())
          << "moe-decompose-layer: expected alignment to be a power of two "
             "<= 65536, got "
          << rowAlignment;
      return signalPassFailure();
    }
    SmallVector<LayerOp> layers;
    getOperation()->walk([&](LayerOp layer) { layers.push_back(layer); });
    OpBuilder builder(&getContext());
    for (LayerOp layer : layers) {
      if (SmPartitionAttr partition = layer.getPartitionAttr())
        if (failed(recordPartition(layer, partition)))
          return signalPassFailure();
      builder.setInsertionPoint(layer);
      Value out = decomposeLayer(builder, layer, rowAlignment).output;
      layer.getOutput().replaceAllUsesWith(out);
      layer.erase();
    }
  }
};

} // namespace
