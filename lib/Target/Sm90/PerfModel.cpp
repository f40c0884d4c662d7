//===- PerfModel.cpp - What the kernels should cost on an H200 ------------===//
//
// Part of moe-compiler. A first-order model of the sm_90a forward pass and
// training step, for --report: each kernel's useful FLOPs and bytes from the
// layer's shapes, the roofline time on an H200 (the larger of those at peak),
// and an estimate of what the kernel as built reaches. Routing is assumed
// uniform: every expert gets T * k / E rows, which the GEMMs pad to the
// alignment (their M block) and compute all the same.
//
// Estimates: a wgmma GEMM runs its tiles in waves over the persistent
// grid, each tile at the tensor cores' share of one SM times an
// efficiency, and no faster than its operands' loads through L2 (what
// bounded the grouped GEMMs timed on an H200) or its traffic at the memory
// efficiency; SIMT kernels run at the CUDA cores' f32 peak or the memory
// efficiency, whichever is slower. Every launch adds a fixed cost.
//
//===----------------------------------------------------------------------===//

#include "moe/Target/Sm90.h"
#include "moegpu/MoeGpuDialect.h"

#include "llvm/ADT/STLExtras.h"

#include <algorithm>
#include <cmath>

namespace mlir::moe {

namespace {

int64_t ceilDiv(int64_t a, int64_t b) { return b > 0 ? (a + b - 1) / b : 0; }

/// A wgmma GEMM's cost: `tiles` output tiles of the kernel's tile, each
/// reducing over `depth`, in waves over its persistent grid; no faster
/// than its operands' loads through L2 (every tile reads its A and B
/// blocks of each k block, `operandBytes` an element; a pair of CTAs
/// sharing B reads half of it each where the pair's two M blocks are one
/// group's, `mBlocksPerGroup` of them a group) or its traffic.
void costGemm(Sm90KernelCost &c, const Sm90KernelReport &kr, int64_t tiles,
              double depth, const Sm90Machine &m, double operandBytes,
              bool fp8 = false, int64_t mBlocksPerGroup = 1) {
  int64_t bm = kr.tileM ? kr.tileM : 128, bn = kr.tileN ? kr.tileN : 128;
  int64_t bk = kr.tileK ? kr.tileK : (fp8 ? 128 : 64);
  int64_t ctas = kr.persistentCtas ? kr.persistentCtas : m.sms;
  double peak = fp8 ? m.fp8TensorFlops : m.tensorFlops;
  double perTile = 2.0 * bm * bn * depth / (peak / m.sms * m.tensorEfficiency);
  double compute = static_cast<double>(ceilDiv(tiles, ctas)) * perTile;
  // Tiles whose pair shares B: both M blocks of a pair in one group.
  double paired = 0;
  if (kr.cluster > 1 && mBlocksPerGroup > 1)
    paired = static_cast<double>(mBlocksPerGroup - mBlocksPerGroup % 2) /
             static_cast<double>(mBlocksPerGroup);
  // Each SM's share of the L2 bandwidth, in the same waves (one wave of
  // few tiles leaves the rest unused).
  double kBlocks = std::ceil(depth / static_cast<double>(bk));
  double tileLoads = kBlocks * (bm + bn * (1 - paired / 2)) * bk * operandBytes;
  double l2 = static_cast<double>(ceilDiv(tiles, ctas)) * tileLoads /
              (m.l2Bandwidth / m.sms);
  double memory = c.bytes / (m.bandwidth * m.memoryEfficiency);
  c.engine = kr.work.blockScaled ? "e4m3" : "wgmma";
  c.bound = compute >= l2 && compute >= memory ? "tensor"
            : l2 >= memory                     ? "L2"
                                               : "memory";
  c.rooflineUs = 1e6 * std::max(c.flops / peak, c.bytes / m.bandwidth);
  c.estimateUs = 1e6 * std::max({compute, l2, memory}) + m.launchMicroseconds;
}

/// A SIMT kernel's cost: its FLOPs on the CUDA cores or its traffic.
void costSimt(Sm90KernelCost &c, const Sm90Machine &m) {
  double arithmetic = c.flops / m.simtFlops;
  double memory = c.bytes / (m.bandwidth * m.memoryEfficiency);
  c.engine = "SIMT";
  c.bound = arithmetic >= memory ? "SIMT" : "memory";
  c.rooflineUs = 1e6 * std::max(c.flops / m.tensorFlops, c.bytes / m.bandwidth);
  c.estimateUs = 1e6 * std::max(arithmetic, memory) + m.launchMicroseconds;
}

/// The layer's sizes at a token count, as doubles for the arithmetic.
struct Dims {
  double e, T, H, F, S, E, k;
};

Dims dimsOf(const Sm90LayerShape &s, int64_t tokens) {
  auto d = [](int64_t v) { return static_cast<double>(v); };
  return {d(s.elementBytes), d(tokens),  d(s.hidden), d(s.ffn),
          d(s.sharedFfn),    d(s.experts), d(s.topK)};
}

/// The routed rows of a layer at a token count, routing uniform: this
/// rank's experts, those with rows, their rows, padded to the alignment,
/// and real.
struct Rows {
  int64_t local = 0, busy = 0, perExpert = 0, paddedPerExpert = 0;
  double padded = 0, real = 0;
};

Rows routedRows(const Sm90LayerShape &s, int64_t tokens) {
  Rows r;
  const int64_t local = r.local =
      std::max<int64_t>(1, s.experts / std::max<int64_t>(1, s.ranks));
  const int64_t assignments = tokens * s.topK;
  r.perExpert = ceilDiv(assignments, s.experts);
  r.busy = std::min<int64_t>(local, assignments);
  r.paddedPerExpert =
      r.perExpert ? ceilDiv(r.perExpert, s.alignment) * s.alignment : 0;
  r.padded = static_cast<double>(r.busy * r.paddedPerExpert);
  r.real = static_cast<double>(r.busy * r.perExpert);
  return r;
}

} // namespace

namespace {

/// The slices a split_k GEMM of `tokens` rows takes (1: not split), as
/// its kernel decides them.
int64_t slicesOf(const Sm90KernelReport &kr, int64_t tokens,
                 const Sm90Machine &m) {
  const Sm90KernelWork &w = kr.work;
  if (w.splits <= 1)
    return 1;
  int64_t bm = kr.tileM ? kr.tileM : 128, bn = kr.tileN ? kr.tileN : 128;
  int64_t bk = kr.tileK ? kr.tileK : 64;
  int64_t ctas = kr.persistentCtas ? kr.persistentCtas : m.sms;
  return mlir::moegpu::splitCount(tokens, bm * kr.cluster, ceilDiv(w.n, bn),
                                  ceilDiv(w.k, bk), w.splits, ctas);
}

/// A grouped GEMM's work from its op: nt and nn reduce over K into each
/// row's N outputs (SwiGLU halves what is stored), tn reduces over the
/// rows into a group's M x N; its rows are the tokens (one group) or the
/// experts' dispatched rows. The useful work counts the real rows, the
/// estimate the padded ones too.
void costGemmKernel(Sm90KernelCost &c, const Sm90KernelReport &kr,
                    const Sm90LayerShape &s, const Rows &routed, double T,
                    int64_t tokens, const Sm90Machine &m) {
  const Sm90KernelWork &w = kr.work;
  bool byRows = w.rows == Sm90Rows::Routed;
  double rows = byRows ? routed.real : T;
  double groups = byRows ? static_cast<double>(routed.busy) : 1;
  int64_t tileRows = byRows ? routed.paddedPerExpert : tokens;
  int64_t bm = kr.tileM ? kr.tileM : 128, bn = kr.tileN ? kr.tileN : 128;
  // FP8 experts: 1-byte operands and a scale per 128 of K (a row's, a
  // block's).
  bool fp8 = s.fp8 && w.blockScaled;
  double operand = fp8 ? 1 : static_cast<double>(s.elementBytes);
  double out = w.outBytes == 4 ? 4 : static_cast<double>(s.elementBytes);
  double M = static_cast<double>(w.m), N = static_cast<double>(w.n),
         K = static_cast<double>(w.k);
  if (w.layout == Sm90GemmLayout::TN) {
    // A weight gradient: every group's M x N over its rows; FP8 reads a
    // scale per column of both operands per 128 rows.
    c.flops = 2 * rows * M * N;
    c.bytes = operand * rows * (M + N) + out * groups * M * N +
              (fp8 ? 4 * (M + N) * std::ceil(rows / 128) : 0);
    int64_t tiles =
        static_cast<int64_t>(groups) * ceilDiv(w.m, bm) * ceilDiv(w.n, bn);
    costGemm(c, kr, tiles, byRows ? routed.paddedPerExpert : T, m, operand,
             fp8);
    return;
  }
  // Activations in and out, each busy group's weights once.
  c.flops = 2 * rows * N * K;
  c.bytes = operand * (rows * K + groups * N * K) +
            out * rows * N / (w.swiglu ? 2 : 1) +
            (fp8 ? 4 * (rows + groups * N / 128) * std::ceil(K / 128) : 0);
  int64_t mBlocks = ceilDiv(tileRows, bm);
  int64_t tiles = static_cast<int64_t>(groups) * mBlocks * ceilDiv(w.n, bn);
  // Split K: each slice's tiles walk their share of K and write f32
  // partials in place of the output.
  if (int64_t slices = slicesOf(kr, tokens, m); slices > 1) {
    int64_t bk = kr.tileK ? kr.tileK : 64;
    int64_t kBlocks = ceilDiv(w.k, bk);
    c.bytes += (4 * static_cast<double>(slices) - out) * rows * N;
    costGemm(c, kr, tiles * slices,
             static_cast<double>(ceilDiv(kBlocks, slices) * bk), m, operand,
             fp8, mBlocks);
    return;
  }
  costGemm(c, kr, tiles, K, m, operand, fp8, mBlocks);
}

/// The rows a rank sends its peers in one direction of an exchange,
/// routing uniform: every rank's experts get its dispatched rows in the
/// same share, so all but 1 / ranks of them leave it.
double rowsToPeers(const Sm90LayerShape &s, int64_t tokens) {
  double ranks = static_cast<double>(std::max<int64_t>(1, s.ranks));
  return static_cast<double>(tokens * s.topK) * (ranks - 1) / ranks;
}

/// `bytes` to the peers by `ctas` SMs: at their share of the link or the
/// link's achievable bandwidth, whichever is less; which one in `bound`.
double sendSeconds(double bytes, int64_t ctas, const Sm90Machine &m,
                   std::string &bound) {
  double link = m.nvlinkBandwidth * m.nvlinkEfficiency;
  double sms =
      static_cast<double>(std::max<int64_t>(1, ctas)) * m.commSmBandwidth;
  bound = sms >= link ? "NVLink" : "SMs";
  return bytes / std::min(link, sms);
}

/// The device-initiated exchange's kernels: a send moves its rows to the
/// peers (the NVLink traffic is its bytes); the counts add a flag's round
/// trip to their launch; a wait costs its launch (its time is the send's).
void costExchangeKernel(Sm90KernelCost &c, const Sm90KernelReport &kr,
                        const Sm90LayerShape &s, int64_t tokens,
                        const Sm90Machine &m) {
  const Sm90KernelWork &w = kr.work;
  c.engine = "NVLink";
  c.bound = "latency";
  double launch = m.launchMicroseconds;
  switch (w.kind) {
  case Sm90KernelKind::EpSend: {
    double rowBytes =
        static_cast<double>(w.width * w.inBytes) + (w.codes ? 4.0 : 0.0);
    // A chunk's send moves the chunk's share of the rows.
    c.bytes =
        rowsToPeers(s, tokens) * rowBytes / static_cast<double>(w.sendChunks);
    c.rooflineUs = 1e6 * c.bytes / m.nvlinkBandwidth;
    c.estimateUs =
        1e6 * sendSeconds(c.bytes, kr.persistentCtas, m, c.bound) + launch;
    return;
  }
  case Sm90KernelKind::EpCounts:
    // Each rank's count a local expert to every peer.
    c.bytes = 4.0 * static_cast<double>(s.experts);
    c.estimateUs = launch + m.flagMicroseconds;
    return;
  default:
    c.estimateUs = launch;
    return;
  }
}

} // namespace

std::vector<Sm90KernelCost>
modelForward(const Sm90LayerShape &s,
             const std::vector<Sm90KernelReport> &kernels, int64_t tokens,
             const Sm90Machine &m) {
  std::vector<Sm90KernelCost> out;
  const auto [e, T, H, F, S, E, k] = dimsOf(s, tokens);
  // This rank's experts and the rows they get (sharded: every rank's
  // tokens reach a rank's experts in the same proportion).
  const Rows routed = routedRows(s, tokens);
  const double real = routed.real;
  using K = Sm90KernelKind;
  // The slices of the split_k GEMM whose sum a sum_splits kernel takes.
  int64_t slices = 1;
  for (const Sm90KernelReport &kr : kernels)
    if (kr.work.kind == K::GroupedGemm && kr.work.phase == Sm90Phase::Forward)
      slices = std::max(slices, slicesOf(kr, tokens, m));
  for (const Sm90KernelReport &kr : kernels) {
    const Sm90KernelWork &w = kr.work;
    if (w.phase != Sm90Phase::Forward)
      continue;
    Sm90KernelCost c;
    c.kernel = kr.name;
    bool byRows = w.rows == Sm90Rows::Routed;
    switch (w.kind) {
    case K::GroupedGemm:
      costGemmKernel(c, kr, s, routed, T, tokens, m);
      out.push_back(c);
      continue;
    case K::Quantize: {
      // A 16-bit input read, codes and a scale per 128 channels written.
      double qRows = byRows ? real : T, width = static_cast<double>(w.width);
      c.bytes = qRows * (e * width + width + 4 * std::ceil(width / 128));
      break;
    }
    case K::RouterLogits:
      // SIMT logits (an f32 router weight).
      c.flops = 2 * T * E * H;
      c.bytes = e * T * H + 4 * E * H + 4 * T * E;
      break;
    case K::SumSplits:
      // The slices in, the sum out, f32.
      c.bytes = 4 * T * static_cast<double>(w.width) *
                (static_cast<double>(slices) + 1);
      break;
    case K::SharedGate:
      // Qwen2-MoE's gate on the shared output: x . g, one scale a token.
      c.flops = 2 * T * H;
      c.bytes = e * (T * H + H) + 4 * T;
      break;
    case K::Route:
      // Logits in; ids, weights and the counts' atomics out.
      c.bytes = 4 * T * E + 12 * T * k;
      break;
    case K::DispatchScan:
      c.bytes = 12 * E;
      break;
    case K::DispatchScatter:
      // FP8 rows carry codes and a scale per 128 channels (e4m3 when the
      // kernel reads x's codes: its one-byte rows).
      c.bytes = (s.fp8 && w.codes ? 2 * T * k * (H + 4 * std::ceil(H / 128))
                                  : 2 * e * T * k * H) +
                12 * T * k;
      break;
    case K::Combine:
      c.bytes = e * (real * H + T * H * (S > 0 ? 2 : 1)) + 4 * T * k;
      break;
    case K::EpCounts:
    case K::EpSend:
    case K::EpWait:
      costExchangeKernel(c, kr, s, tokens, m);
      out.push_back(c);
      continue;
    default:
      continue; // not a forward kernel the model knows
    }
    costSimt(c, m);
    out.push_back(c);
  }
  return out;
}

std::vector<Sm90KernelCost>
modelTraining(const Sm90LayerShape &s,
              const std::vector<Sm90KernelReport> &kernels, int64_t tokens,
              const Sm90Machine &m) {
  // The forward launches inside the step cost what they cost alone.
  std::vector<Sm90KernelCost> out = modelForward(s, kernels, tokens, m);
  const auto [e, T, H, F, S, E, k] = dimsOf(s, tokens);
  const Rows r = routedRows(s, tokens);
  using K = Sm90KernelKind;
  for (const Sm90KernelReport &kr : kernels) {
    const Sm90KernelWork &w = kr.work;
    // A chunked step's weight gradients of the later chunks (accumulated
    // into the first's) are modelled with the first chunk's kernel, which
    // the model gives every row.
    if (w.phase == Sm90Phase::Forward || w.accumulate)
      continue;
    Sm90KernelCost c;
    c.kernel = kr.name;
    double rows = w.rows == Sm90Rows::Routed ? r.real : T;
    double width = static_cast<double>(w.width);
    double elements = static_cast<double>(w.elements);
    switch (w.kind) {
    case K::GroupedGemm:
      costGemmKernel(c, kr, s, r, T, tokens, m);
      out.push_back(c);
      continue;
    case K::EpCounts:
    case K::EpSend:
    case K::EpWait:
      costExchangeKernel(c, kr, s, tokens, m);
      out.push_back(c);
      continue;
    case K::ActGrad:
      // The SwiGLU backward: GU and GS in (f32), dGU, dG and dU out.
      c.bytes = 4 * rows * 3 * width + e * rows * 4 * width;
      break;
    case K::ScaleRows:
      // dY in (the rows' in the compute type, the tokens' in f32); the
      // weighted rows' or the tokens' in the compute type out.
      c.bytes = (static_cast<double>(w.inBytes) + e) * rows * H;
      break;
    case K::SharedScaleGrad:
      // Qwen2-MoE's gate: dy (f32) . shared_out a token.
      c.flops = 2 * T * H;
      c.bytes = (4 + e) * T * H + 8 * T;
      break;
    case K::RouterGrad: {
      // SIMT (an f32 router weight, or the shared experts' gate): dl^T . x
      // into `elements` = outputs x H.
      double outputs = elements / H;
      c.flops = 2 * T * outputs * H;
      c.bytes = e * T * H + 4 * (T * outputs + elements);
      break;
    }
    case K::RouteGrad:
      // The forward's logits in; their gradient out (f32 and, for the
      // GEMMs, the compute type).
      c.bytes = (8 + e) * T * E + 4 * T * k;
      break;
    case K::InputGrad:
      // The rows' dx summed per token, the shared experts' and the
      // router's added (SIMT: dl . router computed here).
      c.flops = w.routerPart ? 2 * T * E * H : 0;
      c.bytes = e * r.real * H + 4 * 3 * T * H + (w.routerPart ? 4 * T * E : 0);
      break;
    case K::TokenOffsets:
      c.bytes = 8;
      break;
    case K::MseLoss:
      c.bytes = (e + 8) * T * H;
      break;
    case K::GatherRowDy:
      c.bytes = (4 + e) * r.real * H;
      break;
    case K::RowTokens:
    case K::ScatterRowWeightGrad:
      c.bytes = 12 * T * k;
      break;
    case K::ExpertLoad:
    case K::BiasUpdate:
      c.bytes = 12 * E;
      break;
    case K::AdamW:
      // Read w, m, v, grad; write the next w, m, v (the masters and
      // gradients f32, the moments f32 or bf16) and the new w's compute
      // copy.
      c.bytes = (12 + 4 * static_cast<double>(w.momentBytes)) * elements +
                static_cast<double>(w.copyBytes);
      break;
    case K::ComputeCopies:
      // Compute copies of the masters, f32 in; in a step after the first
      // (the flag set, nothing the host wrote) only the flag is read: the
      // launch's cost.
      c.bytes =
          w.onHostWrite ? 0 : 4 * elements + static_cast<double>(w.copyBytes);
      break;
    case K::Convert:
    case K::PackGateUp:
      // Compute copies of the masters: f32 in, the compute type out.
      c.bytes = (4 + e) * elements;
      break;
    case K::UpdateCheck:
      // The weights' masters, moments and gradients read (f32) before the
      // update: how many values it would make non-finite. With the
      // state's bounds (in a step after the first, the flag set and the
      // bounds showing the update finite) only they are read: a few bytes
      // a weight, the launch's cost.
      c.bytes = w.onHostWrite ? 0 : 16 * elements;
      break;
    case K::GradStats:
      // Each gradient read once: its square sum and largest magnitude.
      c.bytes = 4 * elements;
      break;
    case K::UpdateVerdict:
      // One thread: the loss and each weight's two check results read.
      c.bytes = 4 + 8 * elements;
      break;
    case K::ColumnSum:
      // A bias's gradient: the rows' gradients in, one f32 per column out.
      c.bytes = (static_cast<double>(w.inBytes) * rows + 4) * width;
      break;
    case K::GroupedColumnSum:
      // Each expert's bias gradient over its rows.
      c.bytes = (static_cast<double>(w.inBytes) * rows + 4 * E) * width;
      break;
    case K::Quantize:
      // FP8 Dgrad: a gradient's 16-bit rows in, codes and a scale per 128
      // channels out.
      c.bytes = rows * (e * width + width + 4 * std::ceil(width / 128));
      break;
    case K::QuantizeColumns:
      // FP8 Wgrad: the rows in (16-bit, or e4m3 codes with their 1 x 128
      // scales), the transposed codes and a scale per 128 rows out.
      c.bytes = rows * width *
                (static_cast<double>(w.inBytes) + 1 +
                 (w.inBytes == 1 ? 4.0 / 128 : 0) + 4.0 / 128);
      break;
    case K::QuantizeBlocks:
      // An FP8 master (f32) in, its codes (and transposed codes) out; in
      // the step only after the host wrote one (the update requantizes).
      c.bytes = w.onHostWrite ? 0 : (w.codes ? 6 : 5) * elements;
      break;
    case K::ScaledWeightGrad:
      // Llama 4: a row's gradient dotted with its token's x.
      c.flops = 2 * rows * H;
      c.bytes = (static_cast<double>(w.inBytes) + e) * rows * H + 12 * rows;
      break;
    default:
      continue;
    }
    costSimt(c, m);
    out.push_back(c);
  }
  return out;
}

Sm90ExchangeCost modelExchange(const Sm90LayerShape &s, int64_t tokens,
                               int64_t commSms, const Sm90Machine &m) {
  Sm90ExchangeCost x;
  double rows = rowsToPeers(s, tokens);
  double row = static_cast<double>(s.hidden * s.elementBytes);
  // The dispatch carries each row's routing weight (f32) too; FP8 rows
  // travel as e4m3 codes with a scale per 128 channels.
  double dispatched =
      s.fp8 ? static_cast<double>(s.hidden + 4 * ceilDiv(s.hidden, 128)) : row;
  x.dispatchBytes = rows * (dispatched + 4);
  x.combineBytes = rows * row;
  x.dispatchUs = 1e6 * sendSeconds(x.dispatchBytes, commSms, m, x.bound) +
                 m.launchMicroseconds;
  x.combineUs = 1e6 * sendSeconds(x.combineBytes, commSms, m, x.bound) +
                m.launchMicroseconds;
  return x;
}

Sm90Overlap modelOverlap(const Sm90LayerShape &s,
                         const std::vector<Sm90KernelReport> &kernels,
                         int64_t tokens, int64_t chunks, int64_t commSms,
                         const Sm90Machine &m) {
  Sm90Overlap o;
  o.chunks = std::max<int64_t>(1, chunks);
  std::vector<Sm90KernelCost> costs = modelForward(s, kernels, tokens, m);
  for (const Sm90KernelCost &c : costs) {
    auto kr = llvm::find_if(
        kernels, [&](const Sm90KernelReport &r) { return r.name == c.kernel; });
    if (kr == kernels.end())
      continue;
    const Sm90KernelWork &w = kr->work;
    if (w.kind == Sm90KernelKind::EpSend)
      (w.combine ? o.combineUs : o.dispatchUs) += c.estimateUs;
    else if (w.rows == Sm90Rows::Routed)
      o.routedUs += c.estimateUs;
    else
      o.otherUs += c.estimateUs;
  }
  if (s.ranks > 1 && !llvm::any_of(kernels, [](const Sm90KernelReport &r) {
        return r.work.kind == Sm90KernelKind::EpSend;
      })) {
    Sm90ExchangeCost x = modelExchange(s, tokens, commSms, m);
    o.dispatchUs = x.dispatchUs;
    o.combineUs = x.combineUs;
  }
  double n = static_cast<double>(o.chunks);
  o.serialUs = o.otherUs + o.routedUs + o.dispatchUs + o.combineUs;
  o.overlappedUs =
      o.otherUs + o.dispatchUs / n +
      std::max(o.routedUs, (o.dispatchUs + o.combineUs) * (n - 1) / n) +
      o.combineUs / n;
  return o;
}

int64_t chooseCommSms(const Sm90LayerShape &s, int64_t sms, int64_t tokens,
                      int64_t chunks,
                      std::vector<std::pair<int64_t, double>> *projection,
                      const Sm90Machine &m) {
  // The kernels whose time the partition changes, as the compiler builds
  // them: the grouped GEMMs (persistent on the compute SMs; BLOCK_N 256
  // where N divides by it, else 128; FP8: 128) and the two sends.
  auto gemm = [&](const char *name, Sm90Rows rows, int64_t n, int64_t k,
                  bool swiglu, int64_t ctas) {
    Sm90KernelReport r;
    r.name = name;
    r.work.kind = Sm90KernelKind::GroupedGemm;
    r.work.rows = rows;
    r.work.n = n;
    r.work.k = k;
    r.work.swiglu = swiglu;
    r.work.blockScaled = s.fp8 && rows == Sm90Rows::Routed;
    r.work.inBytes = s.elementBytes;
    r.work.outBytes = s.elementBytes;
    r.tileM = 128;
    r.tileN = !s.fp8 && n % 256 == 0 ? 256 : 128;
    r.tileK = r.work.blockScaled ? 128 : 64;
    r.persistentCtas = ctas;
    return r;
  };
  // FP8 rows go as e4m3 codes, their scales (f32, one per 128 channels)
  // in a send of their own.
  auto send = [&](const char *name, bool combine, int64_t ctas,
                  bool scales = false) {
    Sm90KernelReport r;
    r.name = name;
    r.work.kind = Sm90KernelKind::EpSend;
    r.work.combine = combine;
    r.work.width = scales ? ceilDiv(s.hidden, 128) : s.hidden;
    r.work.inBytes = scales ? 4 : s.fp8 && !combine ? 1 : s.elementBytes;
    r.work.codes = !combine && !scales;
    r.persistentCtas = ctas;
    return r;
  };
  int64_t best = 0;
  double bestUs = 0;
  std::vector<std::pair<int64_t, double>> all;
  for (int64_t comm = 2; comm <= std::min<int64_t>(32, sms / 2); comm += 2) {
    int64_t compute = sms - comm;
    std::vector<Sm90KernelReport> kernels = {
        send("dispatch", false, comm),
        gemm("expert_up", Sm90Rows::Routed, 2 * s.ffn, s.hidden, true, compute),
        gemm("expert_down", Sm90Rows::Routed, s.hidden, s.ffn, false, compute),
        send("combine", true, comm)};
    if (s.fp8)
      kernels.push_back(send("dispatch_scales", false, comm, true));
    if (s.sharedFfn > 0) {
      kernels.push_back(gemm("shared_up", Sm90Rows::Tokens, 2 * s.sharedFfn,
                             s.hidden, true, compute));
      kernels.push_back(gemm("shared_down", Sm90Rows::Tokens, s.hidden,
                             s.sharedFfn, false, compute));
    }
    double us = modelOverlap(s, kernels, tokens, chunks, comm, m).overlappedUs;
    all.emplace_back(comm, us);
    if (!best || us < bestUs) {
      best = comm;
      bestUs = us;
    }
  }
  // The fewest SMs within 1% of the fastest: the rest compute.
  for (auto [comm, us] : all)
    if (us <= bestUs * 1.01) {
      best = comm;
      break;
    }
  if (projection)
    *projection = std::move(all);
  return best;
}

} // namespace mlir::moe
