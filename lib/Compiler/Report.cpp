//===- Report.cpp - The text of moe-compile --report ----------------------===//
//
// Part of moe-compiler.
//
// The sm_90a report's three parts: the kernels' ptxas table, the
// performance model's projection and the device memory plan.
//
//===----------------------------------------------------------------------===//

#include "Report.h"

#include "moegpu/MoeGpuDialect.h"

#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>

using namespace mlir;
using namespace mlir::moe;
namespace rt = ::moe::rt;

/// The report's token counts: 128, 512 and 4096 up to `maxTokens`, else
/// `maxTokens`.
static std::vector<int64_t> reportCounts(int64_t maxTokens) {
  std::vector<int64_t> counts;
  for (int64_t t : {128, 512, 4096})
    if (t <= maxTokens)
      counts.push_back(t);
  if (counts.empty())
    counts.push_back(maxTokens);
  return counts;
}

std::string
mlir::moe::formatKernelTable(const std::vector<Sm90KernelReport> &kernels) {
  std::string text;
  llvm::raw_string_ostream os(text);
  size_t width = 17; // training kernels have longer names
  for (const Sm90KernelReport &k : kernels)
    width = std::max(width, k.name.size());
  auto pad = [&](const std::string &name) {
    return name + std::string(width - name.size(), ' ');
  };
  os << llvm::formatv("{0} {1,-16} {2,6} {3,8} {4,7} {5,-11} {6,-20} {7,-9} "
                      "{8}\n",
                      pad("kernel"), "grid", "block", "smem", "static", "regs",
                      "tile", "epilogue", "spills (st/ld)");
  for (const Sm90KernelReport &k : kernels) {
    auto num = [](int64_t v) {
      return v < 0 ? std::string("?") : std::to_string(v);
    };
    std::string tile = k.tileM ? std::to_string(k.tileM) + "x" +
                                     std::to_string(k.tileN) + "x" +
                                     std::to_string(k.tileK) + ", " +
                                     std::to_string(k.tileStages) + " stages"
                               : "-";
    // A warp-specialized kernel's count is pinned (.minnctapersm 1) and
    // checked against what its setmaxnreg plan needs.
    std::string regs = num(k.registers);
    if (k.requiredRegisters > 0)
      regs += " pinned";
    const char *epilogue = !k.tileM             ? "-"
                           : k.tmaStoreEpilogue ? "tma-store"
                                                : "registers";
    os << llvm::formatv(
        "{0} {1,-16} {2,6} {3,8} {4,7} {5,-11} {6,-20} {7,-9} {8}/{9}\n",
        pad(k.name), k.grid, k.block, k.sharedMemory, num(k.staticSharedMemory),
        regs, tile, epilogue, num(k.spillStores), num(k.spillLoads));
  }
  std::string paired;
  for (const Sm90KernelReport &k : kernels)
    if (k.cluster > 1)
      paired += (paired.empty() ? "" : ", ") + k.name;
  if (paired.empty())
    os << "cluster 1x1x1 for every kernel";
  else
    os << "cluster 2x1x1 (B multicast) for " << paired
       << "; 1x1x1 for the others";
  os << "; smem is dynamic shared memory in bytes\n";
  return text;
}

std::string
mlir::moe::formatModelProjection(const std::vector<Sm90KernelReport> &kernels,
                                 const Sm90LayerShape &shape, int64_t maxTokens,
                                 bool train) {
  std::string text;
  llvm::raw_string_ostream os(text);
  Sm90Machine machine;
  os << llvm::formatv(
      "model: H200 ({0:f0} TFLOP/s bf16 dense{6}, {1:f0} TFLOP/s f32 SIMT, "
      "{2:f1} TB/s); routing uniform over the experts; roofline = useful "
      "work at peak; estimate = the kernel as built, the slowest of: "
      "padded tiles in waves at {3:f0}% of the tensor cores, their operands "
      "through L2 at {7:f1} TB/s, traffic at {4:f0}% of the bandwidth, SIMT "
      "at the f32 peak; + {5:f0} us a launch\n",
      machine.tensorFlops / 1e12, machine.simtFlops / 1e12,
      machine.bandwidth / 1e12, machine.tensorEfficiency * 100,
      machine.memoryEfficiency * 100, machine.launchMicroseconds,
      shape.fp8
          ? llvm::formatv(", {0:f0} e4m3", machine.fp8TensorFlops / 1e12).str()
          : std::string(),
      machine.l2Bandwidth / 1e12);
  os << llvm::formatv("{0,6} {1,-17} {2,10} {3,10} {4,12} {5,12}  {6}\n",
                      "tokens", "kernel", "GFLOP", "MB", "roofline us",
                      "estimate us", "bound");
  std::vector<int64_t> counts = reportCounts(maxTokens);
  // An FP8 layer's projections get the layer with bf16 experts beside
  // them: these GEMMs' tiles on 16-bit operands at the bf16 rate, without
  // the quantization.
  Sm90LayerShape bf16 = shape;
  bf16.fp8 = false;
  std::vector<Sm90KernelReport> unquantized;
  for (const Sm90KernelReport &k : kernels)
    if (k.work.kind != Sm90KernelKind::Quantize)
      unquantized.push_back(k);
  for (int64_t t : counts) {
    double flops = 0, bytes = 0, roofline = 0, estimate = 0;
    for (const Sm90KernelCost &c : modelForward(shape, kernels, t, machine)) {
      os << llvm::formatv("{0,6} {1,-17} {2,10:f2} {3,10:f2} {4,12:f1} "
                          "{5,12:f1}  {6}\n",
                          t, c.kernel, c.flops / 1e9, c.bytes / 1e6,
                          c.rooflineUs, c.estimateUs, c.bound);
      flops += c.flops;
      bytes += c.bytes;
      roofline += c.rooflineUs;
      estimate += c.estimateUs;
    }
    os << llvm::formatv("{0,6} {1,-17} {2,10:f2} {3,10:f2} {4,12:f1} "
                        "{5,12:f1}  ({6:f2}x the roofline)\n",
                        t, "layer", flops / 1e9, bytes / 1e6, roofline,
                        estimate, roofline > 0 ? estimate / roofline : 0.0);
    if (shape.fp8) {
      double bf16Estimate = modelledForwardUs(bf16, unquantized, t);
      os << llvm::formatv("{0,6} {1,-17} {2,10} {3,10} {4,12} {5,12:f1}  "
                          "({6:f2}x the fp8 layer's)\n",
                          t, "layer if bf16", "", "", "", bf16Estimate,
                          estimate > 0 ? bf16Estimate / estimate : 0.0);
    }
    // What pairs of CTAs sharing B (--tile-cluster=2) would change: the
    // GEMMs the option pairs, unless they are paired already.
    std::vector<Sm90KernelReport> paired = kernels;
    bool pairs = false;
    for (Sm90KernelReport &k : paired)
      if (k.tileM && moegpu::pairSharesB(k.tileN) && k.cluster == 1) {
        k.cluster = 2;
        pairs = true;
      }
    if (pairs) {
      double pairedEstimate = modelledForwardUs(shape, paired, t);
      os << llvm::formatv("{0,6} {1,-17} {2,10} {3,10} {4,12} {5,12:f1}  "
                          "(--tile-cluster=2)\n",
                          t, "layer if paired", "", "", "", pairedEstimate);
    }
  }
  if (!train)
    return text;
  // The training step at the largest of those counts: each kernel's
  // engine, and the share of the step's FLOPs on the tensor cores.
  int64_t t = counts.back();
  os << llvm::formatv("training step, {0} tokens:\n", t);
  os << llvm::formatv("{0,-31} {1,-6} {2,10} {3,10} {4,12}\n", "kernel",
                      "engine", "GFLOP", "MB", "estimate us");
  // The optimizer's kernels: the compute copies (and the gate/up repack)
  // the step's GEMMs read, the update checks, the verdict, AdamW and the
  // bias update.
  llvm::StringSet<> optimizerKernels;
  for (const Sm90KernelReport &k : kernels)
    switch (k.work.kind) {
    case Sm90KernelKind::ComputeCopies:
    case Sm90KernelKind::GradStats:
    case Sm90KernelKind::UpdateCheck:
    case Sm90KernelKind::UpdateVerdict:
    case Sm90KernelKind::AdamW:
    case Sm90KernelKind::BiasUpdate:
    case Sm90KernelKind::QuantizeBlocks:
      if (k.work.phase != Sm90Phase::Forward)
        optimizerKernels.insert(k.name);
      break;
    default:
      break;
    }
  double flops = 0, tensor = 0, e4m3 = 0, estimate = 0, optimizer = 0;
  for (const Sm90KernelCost &c : modelTraining(shape, kernels, t, machine)) {
    if (optimizerKernels.contains(c.kernel))
      optimizer += c.estimateUs;
    os << llvm::formatv("{0,-31} {1,-6} {2,10:f2} {3,10:f2} {4,12:f1}\n",
                        c.kernel, c.engine, c.flops / 1e9, c.bytes / 1e6,
                        c.estimateUs);
    flops += c.flops;
    if (c.engine == "wgmma" || c.engine == "e4m3")
      tensor += c.flops;
    if (c.engine == "e4m3")
      e4m3 += c.flops;
    estimate += c.estimateUs;
  }
  os << llvm::formatv("{0,-31} {1,-6} {2,10:f2} {3,10} {4,12:f1}  "
                      "({5:f1}% of the FLOPs on tensor cores",
                      "step", "", flops / 1e9, "", estimate,
                      flops > 0 ? 100 * tensor / flops : 0.0);
  if (e4m3 > 0)
    os << llvm::formatv(", {0:f1}% in e4m3", 100 * e4m3 / flops);
  os << ")\n";
  os << llvm::formatv("{0,-31} {1,-6} {2,10} {3,10} {4,12:f1}  "
                      "({5:f1}% of the step: compute copies, gradient "
                      "statistics, update checks, AdamW, bias update{6})\n",
                      "of which the optimizer", "", "", "", optimizer,
                      estimate > 0 ? 100 * optimizer / estimate : 0.0,
                      e4m3 > 0 ? ", FP8 requantization" : "");
  return text;
}

std::string mlir::moe::formatPartition(
    const std::vector<Sm90KernelReport> &kernels, const Sm90LayerShape &shape,
    int64_t sms, int64_t comm, int64_t chunks, int64_t maxTokens,
    const std::vector<std::pair<int64_t, double>> &candidates) {
  std::string text;
  llvm::raw_string_ostream os(text);
  Sm90Machine machine;
  os << llvm::formatv("SM partition {0}:{1}: the exchange's sends on {1} comm "
                      "SMs, the GEMMs on {2}{3}\n",
                      sms, comm, sms - comm,
                      candidates.empty()
                          ? std::string(" (as given)")
                          : llvm::formatv(" (the model's choice at {0} "
                                          "tokens; --sm-partition=S:C fixes "
                                          "it)",
                                          maxTokens)
                                .str());
  if (!candidates.empty()) {
    os << "  comm SMs -> modelled GEMMs and sends us:";
    for (auto [c, us] : candidates)
      os << llvm::formatv(" {0}:{1:f1}", c, us);
    os << " (the fewest within 1% of the fastest)\n";
  }
  int64_t whatIf = chunks > 1 ? chunks : 4;
  os << llvm::formatv(
      "exchange and overlap (model: NVLink {0:f0} GB/s each way at {1:f0}%, "
      "{2:f0} GB/s a comm SM; routing uniform; sends to {3} peer{4}):\n",
      machine.nvlinkBandwidth / 1e9, machine.nvlinkEfficiency * 100,
      machine.commSmBandwidth / 1e9, shape.ranks - 1,
      shape.ranks > 2 ? "s" : "");
  std::string overlapped =
      chunks > 1 ? llvm::formatv("{0} chunks us", chunks).str()
                 : llvm::formatv("if {0} chunks us", whatIf).str();
  os << llvm::formatv("{0,6} {1,11} {2,11} {3,9} {4,-8} {5,10} {6,9} {7,10} "
                      "{8,15}\n",
                      "tokens", "dispatch MB", "combine MB", "sends us",
                      "bound", "routed us", "other us", "serial us",
                      overlapped);
  for (int64_t t : reportCounts(maxTokens)) {
    Sm90ExchangeCost x = modelExchange(shape, t, comm, machine);
    Sm90Overlap o = modelOverlap(shape, kernels, t, whatIf, comm, machine);
    os << llvm::formatv("{0,6} {1,11:f2} {2,11:f2} {3,9:f1} {4,-8} {5,10:f1} "
                        "{6,9:f1} {7,10:f1} {8,15:f1}\n",
                        t, x.dispatchBytes / 1e6, x.combineBytes / 1e6,
                        o.dispatchUs + o.combineUs, x.bound, o.routedUs,
                        o.otherUs, o.serialUs, o.overlappedUs);
  }
  os << (chunks > 1 ? "the pass pipelines its chunks' exchanges beside the "
                      "GEMMs\n"
                    : "the pass runs its exchanges whole, in series with "
                      "the GEMMs (--ep-chunks pipelines them)\n");
  return text;
}

std::string mlir::moe::formatMemoryPlan(const rt::GpuMemoryPlan &plan,
                                        int64_t maxTokens, int64_t ranks) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << llvm::formatv(
      "device memory per rank ({0} tokens{1}): {2}\n", maxTokens,
      ranks > 1 ? ", received rows for " + std::to_string(ranks) + " ranks"
                : std::string(),
      rt::formatBytes(plan.total()));
  for (auto [what, bytes] :
       {std::pair<const char *, uint64_t>{"weights (compute and fp32 masters)",
                                          plan.weights},
        {"optimizer state", plan.optimizer},
        {"gradients", plan.gradients},
        {"activations (inputs, kept for backward)", plan.activations},
        {"workspace", plan.workspace}})
    os << llvm::formatv("  {0,-41} {1,12}\n", what, rt::formatBytes(bytes));
  return text;
}

double
mlir::moe::modelledForwardUs(const Sm90LayerShape &shape,
                             const std::vector<Sm90KernelReport> &kernels,
                             int64_t tokens) {
  double us = 0;
  for (const Sm90KernelCost &c : modelForward(shape, kernels, tokens))
    us += c.estimateUs;
  return us;
}

/// `shape` with its expert segments padded to `alignment` rows.
static Sm90LayerShape alignedTo(Sm90LayerShape shape, int64_t alignment) {
  shape.alignment = alignment;
  return shape;
}

int64_t mlir::moe::variantBucket(const Sm90LayerShape &shape,
                                 const std::vector<Sm90KernelReport> &main,
                                 int64_t mainAlignment,
                                 const std::vector<Sm90KernelReport> &variant,
                                 int64_t variantAlignment, int64_t maxTokens) {
  Sm90LayerShape big = alignedTo(shape, mainAlignment);
  Sm90LayerShape small = alignedTo(shape, variantAlignment);
  int64_t t = 0;
  while (t < maxTokens && modelledForwardUs(small, variant, t + 1) <
                              modelledForwardUs(big, main, t + 1))
    ++t;
  return t;
}

std::string mlir::moe::formatTileVariants(
    const Sm90LayerShape &shape, const std::vector<Sm90KernelReport> &main,
    int64_t mainAlignment, const std::vector<Sm90KernelReport> &variant,
    int64_t variantAlignment, int64_t variantTokens, int64_t maxTokens) {
  Sm90LayerShape big = alignedTo(shape, mainAlignment);
  Sm90LayerShape small = alignedTo(shape, variantAlignment);
  std::string text;
  llvm::raw_string_ostream os(text);
  os << "tile variants of the forward pass (model, us):\n";
  os << llvm::formatv("{0,6} {1,12} {2,12}  {3}\n", "tokens", "BLOCK_M 128",
                      "BLOCK_M 64", "runs");
  std::vector<int64_t> counts = {1, 8, 32, 128, 512, 4096};
  if (variantTokens > 0 && variantTokens < maxTokens)
    counts.push_back(variantTokens + 1);
  llvm::sort(counts);
  for (int64_t t : counts) {
    if (t > maxTokens)
      continue;
    os << llvm::formatv("{0,6} {1,12:f1} {2,12:f1}  BLOCK_M {3}\n", t,
                        modelledForwardUs(big, main, t),
                        modelledForwardUs(small, variant, t),
                        t <= variantTokens ? 64 : 128);
  }
  if (variantTokens > 0)
    os << llvm::formatv("the bundle runs BLOCK_M 64 for 1 .. {0} tokens{1}\n",
                        variantTokens,
                        variantTokens < maxTokens ? ", BLOCK_M 128 above" : "");
  else
    os << "the bundle runs BLOCK_M 128 at every token count (BLOCK_M 64 "
          "is not faster at 1)\n";
  return text;
}
