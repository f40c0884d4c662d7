//===- KernelWork.cpp - What a kernel computes, from its op ---------------===//
//
// Part of moe-compiler. Reads each kernel's moegpu op into the typed
// record the performance model costs (Sm90KernelWork), so that the model
// and the report dispatch on what a kernel is, not on what it is called.
//
//===----------------------------------------------------------------------===//

#include "KernelWork.h"

#include "moegpu/MoeGpuDialect.h"

#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::moe;

namespace {

MemRefType memrefOf(Value v) { return cast<MemRefType>(v.getType()); }

int64_t elementBytes(Value v) {
  return (memrefOf(v).getElementTypeBitWidth() + 7) / 8;
}

/// The size of a memref's last dimension (0 if dynamic).
int64_t columnsOf(Value v) {
  ArrayRef<int64_t> shape = memrefOf(v).getShape();
  return shape.empty() || ShapedType::isDynamic(shape.back()) ? 0
                                                              : shape.back();
}

int64_t elementsOf(Value v) {
  MemRefType type = memrefOf(v);
  return type.hasStaticShape() ? type.getNumElements() : 0;
}

/// The elements of several memrefs.
int64_t elementsOf(ValueRange values) {
  int64_t n = 0;
  for (Value v : values)
    n += elementsOf(v);
  return n;
}

/// Bytes written into compute copies: each master's elements in its
/// copy's element type (a packed copy takes two masters, half each).
int64_t copyBytesOf(ValueRange masters, ValueRange copies) {
  int64_t n = 0;
  for (auto [master, copy] : llvm::zip(masters, copies))
    n += elementsOf(master) * elementBytes(copy);
  return n;
}

/// A grouped GEMM's output M x N (tn) or N and K (nt, nn), from its
/// operands' static sizes: b is [E, N, K] (nt) or [E, K, N] (nn), c [E, M,
/// N] (tn); dense, without the E.
void readGemm(moegpu::GroupedGemmOp gemm, Sm90KernelWork &w) {
  ArrayRef<int64_t> b = memrefOf(gemm.getB()).getShape();
  ArrayRef<int64_t> c = memrefOf(gemm.getC()).getShape();
  switch (gemm.getLayout()) {
  case moegpu::GemmLayout::NT:
    w.layout = Sm90GemmLayout::NT;
    w.n = b[b.size() - 2];
    w.k = b.back();
    break;
  case moegpu::GemmLayout::NN:
    w.layout = Sm90GemmLayout::NN;
    w.k = b[b.size() - 2];
    w.n = b.back();
    break;
  case moegpu::GemmLayout::TN:
    w.layout = Sm90GemmLayout::TN;
    w.m = c[c.size() - 2];
    w.n = c.back();
    break;
  }
  w.swiglu = gemm.getEpilogue() == moegpu::Epilogue::SwiGLU;
  w.accumulate = gemm.getEpilogue() == moegpu::Epilogue::Accumulate;
  w.blockScaled = static_cast<bool>(gemm.getAScale());
  w.inBytes = elementBytes(gemm.getA());
  w.outBytes = elementBytes(gemm.getC());
  w.splits = gemm.getMaxSplits();
}

} // namespace

Sm90KernelWork mlir::moe::kernelWorkOf(gpu::GPUFuncOp func) {
  Sm90KernelWork w;
  if (func.getBody().empty())
    return w;
  Operation *body = nullptr;
  for (Operation &op : func.front())
    if (isa<moegpu::MoeGpuDialect>(op.getDialect())) {
      body = &op;
      break;
    }
  if (!body)
    return w;
  using K = Sm90KernelKind;
  llvm::TypeSwitch<Operation *>(body)
      .Case([&](moegpu::GroupedGemmOp op) {
        w.kind = K::GroupedGemm;
        readGemm(op, w);
      })
      .Case([&](moegpu::RouterLogitsOp) { w.kind = K::RouterLogits; })
      .Case([&](moegpu::SumSplitsOp op) {
        w.kind = K::SumSplits;
        w.width = columnsOf(op.getOut());
        w.splits = cast<MemRefType>(op.getPartials().getType()).getDimSize(0);
      })
      .Case([&](moegpu::SharedGateOp) { w.kind = K::SharedGate; })
      .Case([&](moegpu::RouteOp) { w.kind = K::Route; })
      .Case([&](moegpu::DispatchScanOp) { w.kind = K::DispatchScan; })
      .Case([&](moegpu::DispatchScatterOp op) {
        w.kind = K::DispatchScatter;
        w.codes = static_cast<bool>(op.getXScale());
      })
      .Case([&](moegpu::QuantizeOp op) {
        w.kind = K::Quantize;
        w.width = columnsOf(op.getIn());
      })
      .Case([&](moegpu::QuantizeColumnsOp op) {
        w.kind = K::QuantizeColumns;
        w.width = columnsOf(op.getIn());
        w.inBytes = elementBytes(op.getIn());
      })
      .Case([&](moegpu::QuantizeBlocksOp op) {
        w.kind = K::QuantizeBlocks;
        w.elements = elementsOf(op.getIn());
        w.codes = static_cast<bool>(op.getTransposed());
        w.onHostWrite = static_cast<bool>(op.getUnless());
      })
      .Case([&](moegpu::CombineOp) { w.kind = K::Combine; })
      .Case([&](moegpu::EpCountsOp) { w.kind = K::EpCounts; })
      .Case([&](moegpu::EpSendOp op) {
        w.kind = K::EpSend;
        w.combine = op.getDirection() == moegpu::EpDirection::Combine;
        w.width = columnsOf(op.getRows());
        w.inBytes = elementBytes(op.getRows());
        w.codes = static_cast<bool>(op.getWeights());
        w.sendChunks = op.getChunks();
      })
      .Case([&](moegpu::EpWaitOp) { w.kind = K::EpWait; })
      .Case([&](moegpu::ComputeCopiesOp op) {
        w.kind = K::ComputeCopies;
        w.elements = elementsOf(op.getMasters());
        w.copyBytes = copyBytesOf(op.getMasters(), op.getCopies());
        w.onHostWrite = static_cast<bool>(op.getValid());
      })
      .Case([&](moegpu::MseLossOp) { w.kind = K::MseLoss; })
      .Case([&](moegpu::RowTokensOp) { w.kind = K::RowTokens; })
      .Case([&](moegpu::GatherRowDyOp) { w.kind = K::GatherRowDy; })
      .Case([&](moegpu::ScaleRowsOp op) {
        w.kind = K::ScaleRows;
        w.inBytes = elementBytes(op.getSrc());
      })
      .Case([&](moegpu::ActGradOp op) {
        w.kind = K::ActGrad;
        w.width = columnsOf(op.getGs());
      })
      .Case([&](moegpu::SharedScaleGradOp) { w.kind = K::SharedScaleGrad; })
      .Case([&](moegpu::RouteGradOp) { w.kind = K::RouteGrad; })
      .Case([&](moegpu::RouterGradOp op) {
        w.kind = K::RouterGrad;
        w.elements = elementsOf(op.getGrad());
      })
      .Case([&](moegpu::InputGradOp op) {
        w.kind = K::InputGrad;
        w.routerPart = static_cast<bool>(op.getDl());
      })
      .Case([&](moegpu::ScatterRowWeightGradOp) {
        w.kind = K::ScatterRowWeightGrad;
      })
      .Case([&](moegpu::TokenOffsetsOp) { w.kind = K::TokenOffsets; })
      .Case([&](moegpu::ExpertLoadOp) { w.kind = K::ExpertLoad; })
      .Case([&](moegpu::BiasUpdateOp) { w.kind = K::BiasUpdate; })
      .Case([&](moegpu::AdamWOp op) {
        w.kind = K::AdamW;
        w.elements = elementsOf(op.getParams());
        w.copyBytes = copyBytesOf(op.getParams(), op.getCopies());
        if (!op.getM().empty())
          w.momentBytes = elementBytes(op.getM().front());
      })
      .Case([&](moegpu::ColumnSumOp op) {
        w.kind = K::ColumnSum;
        w.width = columnsOf(op.getIn());
        w.inBytes = elementBytes(op.getIn());
      })
      .Case([&](moegpu::GroupedColumnSumOp op) {
        w.kind = K::GroupedColumnSum;
        w.width = columnsOf(op.getIn());
        w.inBytes = elementBytes(op.getIn());
        w.accumulate = op.getAccumulate();
      })
      .Case([&](moegpu::ScaledWeightGradOp op) {
        w.kind = K::ScaledWeightGrad;
        w.inBytes = elementBytes(op.getDrows());
      })
      .Case([&](moegpu::GradStatsOp op) {
        w.kind = K::GradStats;
        w.elements = elementsOf(op.getGrads());
      })
      .Case([&](moegpu::UpdateCheckOp op) {
        w.kind = K::UpdateCheck;
        w.elements = elementsOf(op.getParams());
        w.onHostWrite = static_cast<bool>(op.getValid());
      })
      .Case([&](moegpu::UpdateVerdictOp op) {
        w.kind = K::UpdateVerdict;
        w.elements = elementsOf(op.getGradSq());
      });
  return w;
}
