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
#include "mlir/Dialect/Linalg/IR/Linalg.h"
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

Value mlir::moe::chunkBound(OpBuilder &b, Location loc, Value tokens,
                            int64_t chunk, int64_t chunks) {
  // floor(chunk * T / chunks): chunk sizes differ by at most one token.
  Value scaled = arith::MulIOp::create(
      b, loc, tokens, arith::ConstantIndexOp::create(b, loc, chunk));
  return arith::DivUIOp::create(b, loc, scaled,
                                arith::ConstantIndexOp::create(b, loc, chunks));
}

Value mlir::moe::emptyLike(OpBuilder &b, Location loc, Value tensor) {
  auto type = cast<RankedTensorType>(tensor.getType());
  SmallVector<Value> sizes;
  for (int64_t d = 0; d < type.getRank(); ++d)
    if (type.isDynamicDim(d))
      sizes.push_back(tensor::DimOp::create(b, loc, tensor, d));
  return tensor::EmptyOp::create(b, loc, type.getShape(), type.getElementType(),
                                 sizes);
}

Value mlir::moe::sliceRows(OpBuilder &b, Location loc, Value tensor,
                           Value begin, Value size) {
  auto type = cast<RankedTensorType>(tensor.getType());
  auto sliced = RankedTensorType::get(
      {ShapedType::kDynamic, type.getDimSize(1)}, type.getElementType());
  SmallVector<OpFoldResult> offsets{begin, b.getIndexAttr(0)};
  SmallVector<OpFoldResult> sizes{size, b.getIndexAttr(type.getDimSize(1))};
  SmallVector<OpFoldResult> strides{b.getIndexAttr(1), b.getIndexAttr(1)};
  return tensor::ExtractSliceOp::create(b, loc, sliced, tensor, offsets, sizes,
                                        strides);
}

Value mlir::moe::insertRows(OpBuilder &b, Location loc, Value part, Value whole,
                            Value begin) {
  auto type = cast<RankedTensorType>(part.getType());
  Value rows = tensor::DimOp::create(b, loc, part, 0);
  SmallVector<OpFoldResult> offsets{begin, b.getIndexAttr(0)};
  SmallVector<OpFoldResult> sizes{rows, b.getIndexAttr(type.getDimSize(1))};
  SmallVector<OpFoldResult> strides{b.getIndexAttr(1), b.getIndexAttr(1)};
  return tensor::InsertSliceOp::create(b, loc, part, whole, offsets, sizes,
                                       strides);
}

ExchangeStarts mlir::moe::startExchange(OpBuilder &b, Location loc,
                                        ArrayRef<Value> inputs,
                                        ArrayRef<Value> offsets, int64_t ep,
                                        AllToAllKind kind) {
  ExchangeStarts starts;
  for (auto [input, off] : llvm::zip(inputs, offsets)) {
    if (inputs.size() == 1) {
      auto exchange = AllToAllOp::create(b, loc, input, off, ep, kind);
      starts.outputs.push_back(exchange.getOutput());
      starts.outputOffsets.push_back(exchange.getOutputOffsets());
      continue;
    }
    auto start = AllToAllStartOp::create(b, loc, b.getI64Type(), off.getType(),
                                         input, off, ep, kind);
    starts.handles.push_back(start.getHandle());
    starts.types.push_back(RankedTensorType::get(
        {ShapedType::kDynamic,
         cast<RankedTensorType>(input.getType()).getDimSize(1)},
        cast<RankedTensorType>(input.getType()).getElementType()));
    starts.outputOffsets.push_back(start.getOutputOffsets());
  }
  return starts;
}

Value mlir::moe::finishExchange(OpBuilder &b, Location loc,
                                const ExchangeStarts &starts, size_t chunk) {
  if (starts.handles.empty())
    return starts.outputs[chunk];
  return AllToAllWaitOp::create(b, loc, starts.types[chunk],
                                starts.handles[chunk]);
}

DecomposedLayer mlir::moe::decomposeLayer(OpBuilder &b, LayerOp layer,
                                          int64_t alignment) {
  LayerConfigAttr config = layer.getConfig();
  Location loc = layer.getLoc();
  Value x = layer.getInput();

  auto scoring = ScoringFuncAttr::get(b.getContext(), config.getScoring());
  Value scores = RouterOp::create(b, loc, x, layer.getRouterWeight(),
                                  layer.getRouterBias(), scoring);

  // Sparsemixer (Phi-3.5-MoE) selects on the logits with its margin.
  FloatAttr sparsemixer;
  if (config.getScoring() == ScoringFunc::Sparsemixer)
    sparsemixer = b.getF64FloatAttr(config.getRouterJitterValue());
  auto topk = TopKOp::create(
      b, loc, scores, layer.getScoreBias(), config.getTopK(),
      config.getGroups(), config.getTopkGroups(), config.getGroupScore(),
      config.getNormTopkProb(), config.getRoutedScale(), sparsemixer);

  // Expert parallelism: the dispatched rows go to the ranks that own their
  // experts and the expert outputs come back. With several chunks, every
  // chunk's exchange starts before any chunk's experts run, so the
  // exchanges of the later chunks overlap the experts of the earlier ones.
  auto ep = static_cast<int64_t>(layer.getEpSize());
  int64_t chunkCount = ep > 1 ? static_cast<int64_t>(layer.getEpChunks()) : 1;
  DecomposedLayer result;
  result.indices = topk.getIndices();
  result.weights = topk.getWeights();
  result.scores = scores;
  Value tokens;
  if (chunkCount > 1)
    tokens = tensor::DimOp::create(b, loc, x, 0);
  SmallVector<Value> rows, offsets;
  for (int64_t c = 0; c < chunkCount; ++c) {
    ExpertChunk chunk;
    Value xc = x, ids = topk.getIndices();
    // Llama 4: the routed weights scale the rows going to the experts.
    Value scales = config.getScaleInput() ? topk.getWeights() : Value();
    if (chunkCount > 1) {
      chunk.begin = chunkBound(b, loc, tokens, c, chunkCount);
      Value end = chunkBound(b, loc, tokens, c + 1, chunkCount);
      chunk.size = arith::SubIOp::create(b, loc, end, chunk.begin);
      xc = sliceRows(b, loc, x, chunk.begin, chunk.size);
      ids = sliceRows(b, loc, ids, chunk.begin, chunk.size);
      if (scales)
        scales = sliceRows(b, loc, scales, chunk.begin, chunk.size);
    }
    auto dispatch = DispatchOp::create(b, loc, xc, ids, scales,
                                       config.getExperts(), alignment);
    chunk.rows = chunk.localRows = dispatch.getRows();
    chunk.offsets = chunk.recvOffsets = chunk.localOffsets =
        dispatch.getOffsets();
    chunk.rowMap = dispatch.getRowMap();
    rows.push_back(chunk.rows);
    offsets.push_back(chunk.offsets);
    result.chunks.push_back(chunk);
  }
  ExchangeStarts sent;
  if (ep > 1)
    sent = startExchange(b, loc, rows, offsets, ep, AllToAllKind::Dispatch);

  // GPT-OSS's clamped SwiGLU.
  FloatAttr alpha, limit;
  if (config.isClamped()) {
    alpha = b.getF64FloatAttr(config.getSwigluAlphaValue());
    limit = b.getF64FloatAttr(config.getSwigluLimitValue());
  }
  SmallVector<Value> downs, recvOffsets;
  for (size_t c = 0; c < result.chunks.size(); ++c) {
    ExpertChunk &chunk = result.chunks[c];
    if (ep > 1) {
      chunk.localRows = finishExchange(b, loc, sent, c);
      chunk.recvOffsets = sent.outputOffsets[c];
      chunk.localOffsets = localExpertOffsets(b, loc, chunk.recvOffsets, ep);
    }
    chunk.gate = GroupedMatmulOp::create(
        b, loc, chunk.localRows, layer.getGateWeight(), chunk.localOffsets,
        layer.getGateBias(), layer.getGateScale(), config.getFp8Recipe());
    chunk.up = GroupedMatmulOp::create(
        b, loc, chunk.localRows, layer.getUpWeight(), chunk.localOffsets,
        layer.getUpBias(), layer.getUpScale(), config.getFp8Recipe());
    chunk.act = SwiGLUOp::create(b, loc, chunk.gate, chunk.up, alpha, limit);
    chunk.down = GroupedMatmulOp::create(
        b, loc, chunk.act, layer.getDownWeight(), chunk.localOffsets,
        layer.getDownBias(), layer.getDownScale(), config.getFp8Recipe());
    downs.push_back(chunk.down);
    recvOffsets.push_back(chunk.recvOffsets);
  }
  ExchangeStarts returned;
  if (ep > 1)
    returned =
        startExchange(b, loc, downs, recvOffsets, ep, AllToAllKind::Combine);

  Value out;
  for (size_t c = 0; c < result.chunks.size(); ++c) {
    ExpertChunk &chunk = result.chunks[c];
    if (ep > 1)
      chunk.down = finishExchange(b, loc, returned, c);
    Value weights = config.getScaleInput() ? Value() : topk.getWeights();
    if (chunkCount > 1 && weights)
      weights = sliceRows(b, loc, weights, chunk.begin, chunk.size);
    Value part = CombineOp::create(b, loc, chunk.down, chunk.rowMap, weights);
    if (chunkCount == 1) {
      out = part;
      continue;
    }
    if (!out) {
      auto partType = cast<RankedTensorType>(part.getType());
      out = tensor::EmptyOp::create(
          b, loc,
          RankedTensorType::get(partType.getShape(), partType.getElementType()),
          ValueRange{tokens});
    }
    out = insertRows(b, loc, part, out, chunk.begin);
  }

  if (config.hasSharedExperts()) {
    Value shared = SharedExpertOp::create(
        b, loc, x, layer.getSharedGateWeight(), layer.getSharedUpWeight(),
        layer.getSharedDownWeight(), layer.getSharedExpertGate(),
        layer.getSharedGateScale(), layer.getSharedUpScale(),
        layer.getSharedDownScale(), config.getFp8Recipe());
    out = arith::AddFOp::create(b, loc, out, shared);
  }
  // JetMoE: a bias on every token's output, in the layer's dtype.
  if (Value bias = layer.getOutputBias()) {
    Value rows = linalg::BroadcastOp::create(
                     b, loc, bias, emptyLike(b, loc, out), ArrayRef<int64_t>{0})
                     .getResult()[0];
    out = arith::AddFOp::create(b, loc, out, rows);
  }
  // The layer may declare a more static result type than its input's.
  if (out.getType() != layer.getType())
    out = tensor::CastOp::create(b, loc, layer.getType(), out);
  result.output = out;
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
    if (std::string why = checkAlignment(rowAlignment); !why.empty()) {
      emitError(getOperation()->getLoc()) << "moe-decompose-layer: " << why;
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
