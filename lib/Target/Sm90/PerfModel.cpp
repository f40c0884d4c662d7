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
  c.engine = "wgmma";
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

std::vector<Sm90KernelCost>
modelForward(const Sm90LayerShape &s,
             const std::vector<Sm90KernelReport> &kernels, int64_t tokens,
             const Sm90Machine &m) {
  std::vector<Sm90KernelCost> out;
  const auto [e, T, H, F, S, E, k] = dimsOf(s, tokens);
  // This rank's experts and the rows they get (sharded: every rank's
  // tokens reach a rank's experts in the same proportion).
  const Rows routed = routedRows(s, tokens);
  const int64_t busy = routed.busy;
  const int64_t paddedPerExpert = routed.paddedPerExpert;
  const double rows = routed.padded, real = routed.real;

  auto hasKernel = [&](StringRef name) {
    return llvm::any_of(kernels, [&](const Sm90KernelReport &kr) {
      return kr.name == name;
    });
  };
  for (const Sm90KernelReport &kr : kernels) {
    Sm90KernelCost c;
    c.kernel = kr.name;
    // GEMMs: rows per group, N, K, groups with rows, weight bytes.
    double gRows = 0, gN = 0, gK = 0, groups = 0, outBytes = e;
    int64_t tileRowsPerGroup = 0;
    bool up = kr.name == "expert_up" || kr.name == "shared_up";
    if (kr.name == "router" && kr.tileM) {
      // The router's logits on tensor cores: one dense group, f32 out.
      gRows = T;
      gN = E;
      gK = H;
      groups = 1;
      tileRowsPerGroup = tokens;
      outBytes = 4;
    } else if (kr.name == "expert_up" || kr.name == "expert_down") {
      gRows = rows;
      gN = up ? 2 * F : H;
      gK = up ? H : F;
      groups = static_cast<double>(busy);
      tileRowsPerGroup = paddedPerExpert;
    } else if (kr.name == "shared_up" || kr.name == "shared_down") {
      if (S == 0)
        continue;
      gRows = T;
      gN = up ? 2 * S : H;
      gK = up ? H : S;
      groups = 1;
      tileRowsPerGroup = tokens;
    }
    if (gN > 0) {
      // The useful work and traffic: real rows only (the kernel computes
      // the padded ones too, which the estimate counts), activations in
      // and out (SwiGLU halves the up GEMM's output), each busy group's
      // weights once.
      double useful = gRows == rows ? real : gRows;
      // FP8 experts: 1-byte operands and a scale per 128 of K (a row's, a
      // block's).
      bool fp8 = s.fp8 && kr.name != "router";
      double operand = fp8 ? 1 : e;
      c.flops = 2 * useful * gN * gK;
      c.bytes =
          operand * (useful * gK + groups * gN * gK) +
          outBytes * useful * gN / (up ? 2 : 1) +
          (fp8 ? 4 * (useful + groups * gN / 128) * std::ceil(gK / 128) : 0);
      int64_t bm = kr.tileM ? kr.tileM : 128, bn = kr.tileN ? kr.tileN : 128;
      int64_t mBlocks = ceilDiv(tileRowsPerGroup, bm);
      int64_t tiles = static_cast<int64_t>(groups) * mBlocks *
                      ceilDiv(static_cast<int64_t>(gN), bn);
      costGemm(c, kr, tiles, gK, m, operand, fp8, mBlocks);
      out.push_back(c);
      continue;
    }
    // FP8 quantization: a 16-bit input read, codes and a scale per 128
    // channels written.
    double qRows = 0, qWidth = 0;
    if (kr.name == "quantize_rows" || kr.name == "quantize_act") {
      qRows = real;
      qWidth = kr.name == "quantize_rows" ? H : F;
    } else if (kr.name == "quantize_x" || kr.name == "quantize_shared_act") {
      qRows = T;
      qWidth = kr.name == "quantize_x" ? H : S;
    }
    if (qWidth > 0) {
      c.bytes = qRows * (e * qWidth + qWidth + 4 * std::ceil(qWidth / 128));
      costSimt(c, m);
      out.push_back(c);
      continue;
    }
    if (kr.name == "router") {
      // SIMT logits (an f32 router weight).
      c.flops = 2 * T * E * H;
      c.bytes = e * T * H + 4 * E * H + 4 * T * E;
    } else if (kr.name == "shared_gate") {
      // Qwen2-MoE's gate on the shared output: x . g, one scale a token.
      c.flops = 2 * T * H;
      c.bytes = e * (T * H + H) + 4 * T;
    } else if (kr.name == "route") {
      // Logits in; ids, weights and the counts' atomics out.
      c.bytes = 4 * T * E + 12 * T * k;
    } else if (kr.name == "dispatch_scan") {
      c.bytes = 12 * E;
    } else if (kr.name == "dispatch_scatter") {
      // FP8 rows carry codes and a scale per 128 channels (e4m3 when the
      // kernel reads x's codes: its one-byte rows).
      c.bytes = (s.fp8 && !hasKernel("quantize_rows")
                     ? 2 * T * k * (H + 4 * std::ceil(H / 128))
                     : 2 * e * T * k * H) +
                12 * T * k;
    } else if (kr.name == "combine") {
      c.bytes = e * (real * H + T * H * (S > 0 ? 2 : 1)) + 4 * T * k;
    } else {
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
  const double busy = static_cast<double>(r.busy);
  // The routed experts' weights this rank trains.
  const double expertWeights = 3.0 * static_cast<double>(r.local) * F * H;
  auto tilesOf = [](double groups, double rows, double cols, int64_t bm,
                    int64_t bn) {
    return static_cast<int64_t>(groups) *
           ceilDiv(static_cast<int64_t>(rows), bm) *
           ceilDiv(static_cast<int64_t>(cols), bn);
  };
  for (const Sm90KernelReport &kr : kernels) {
    const std::string &n = kr.name;
    // A chunked step's weight gradients of the later chunks ("_acc") are
    // modelled with the first chunk's kernel, which the model gives every
    // row.
    if (n.rfind("train_", 0) != 0 ||
        (n.size() > 4 && n.compare(n.size() - 4, 4, "_acc") == 0))
      continue;
    Sm90KernelCost c;
    c.kernel = n;
    int64_t bm = kr.tileM ? kr.tileM : 128, bn = kr.tileN ? kr.tileN : 128;
    bool routed = n.rfind("train_expert_", 0) == 0;
    bool sharedK = n.rfind("train_shared_", 0) == 0;
    // Rows, groups, FFN width and reduction depth of the expert kernels.
    double rows = routed ? r.real : T, groups = routed ? busy : 1;
    double width = routed ? F : S;
    double depth = routed ? static_cast<double>(r.paddedPerExpert) : T;
    if ((routed || sharedK) && width == 0)
      continue;
    if (kr.tileM && (routed || sharedK)) {
      // After "train_expert_" or "train_shared_".
      std::string what = n.substr(13);
      double rowTiles = routed ? static_cast<double>(r.paddedPerExpert) : T;
      if (what == "gate_up") {
        // GU = X . W13^T again (nt): N = 2F, K = H, f32 out.
        c.flops = 2 * rows * 2 * width * H;
        c.bytes = e * (rows * H + groups * 2 * width * H) + 4 * rows * 2 * width;
        costGemm(c, kr, tilesOf(groups, rowTiles, 2 * width, bm, bn), H, m, e);
      } else if (what == "dact") {
        // GS = dY . W2 (nn): N = F, K = H, f32 out.
        c.flops = 2 * rows * width * H;
        c.bytes = e * (rows * H + groups * H * width) + 4 * rows * width;
        costGemm(c, kr, tilesOf(groups, rowTiles, width, bm, bn), H, m, e);
      } else if (what == "rows_grad") {
        // dX = dGU . W13 (nn): K = 2F.
        c.flops = 2 * rows * 2 * width * H;
        c.bytes = e * (rows * 2 * width + groups * 2 * width * H) + 4 * rows * H;
        costGemm(c, kr, tilesOf(groups, rowTiles, H, bm, bn), 2 * width, m, e);
      } else if (what == "down_grad") {
        // dW2 = dY^T . act (tn): H x F per group over its rows.
        c.flops = 2 * rows * H * width;
        c.bytes = e * rows * (H + width) + 4 * groups * H * width;
        costGemm(c, kr, tilesOf(groups, H, width, bm, bn), depth, m, e);
      } else {
        // dWg or dWu = dG^T . X (tn): F x H per group.
        c.flops = 2 * rows * width * H;
        c.bytes = e * rows * (width + H) + 4 * groups * width * H;
        costGemm(c, kr, tilesOf(groups, width, H, bm, bn), depth, m, e);
      }
      out.push_back(c);
      continue;
    }
    if (kr.tileM && (n == "train_router_dx" || n == "train_router_grad")) {
      // The router's part of dx = dl . router (nn, dense over the tokens),
      // or dRouter = dl^T . x (tn over one group of every token).
      c.flops = 2 * T * E * H;
      bool dx = n == "train_router_dx";
      c.bytes = e * (T * E + (dx ? E * H : T * H)) + 4 * (dx ? T * H : E * H);
      int64_t tiles = dx ? tilesOf(1, T, H, bm, bn) : tilesOf(1, E, H, bm, bn);
      costGemm(c, kr, tiles, dx ? E : T, m, e);
      out.push_back(c);
      continue;
    }
    if (n == "train_expert_act_grad" || n == "train_shared_act_grad") {
      // The SwiGLU backward: GU and GS in (f32), dGU, dG and dU out.
      c.bytes = 4 * rows * 3 * width + e * rows * 4 * width;
    } else if (n == "train_expert_dy" || n == "train_shared_dy") {
      // dY in (the rows' in the compute type, the tokens' in f32); the
      // weighted rows' or the tokens' in the compute type out.
      c.bytes = ((routed ? e : 4) + e) * rows * H;
    } else if (n == "train_shared_scale_grad") {
      // Qwen2-MoE's gate: dy (f32) . shared_out a token.
      c.flops = 2 * T * H;
      c.bytes = (4 + e) * T * H + 8 * T;
    } else if (n == "train_shared_expert_gate_grad") {
      // dg = dz^T . x.
      c.flops = 2 * T * H;
      c.bytes = e * T * H + 4 * (T + H);
    } else if (n == "train_route_grad") {
      // The forward's logits in; their gradient out (f32 and, for the
      // GEMMs, the compute type).
      c.bytes = (8 + e) * T * E + 4 * T * k;
    } else if (n == "train_router_grad") {
      // SIMT (an f32 router weight): dl^T . x.
      c.flops = 2 * T * E * H;
      c.bytes = e * T * H + 4 * (T * E + E * H);
    } else if (n == "train_input_grad") {
      // The rows' dx summed per token, the shared experts' and the
      // router's added (SIMT: dl . router computed here).
      bool simtRouter = std::any_of(
          kernels.begin(), kernels.end(), [](const Sm90KernelReport &o) {
            return o.name == "train_router_grad" && !o.tileM;
          });
      c.flops = simtRouter ? 2 * T * E * H : 0;
      c.bytes = e * r.real * H + 4 * 3 * T * H + (simtRouter ? 4 * T * E : 0);
    } else if (n == "train_token_offsets") {
      c.bytes = 8;
    } else if (n == "train_loss") {
      c.bytes = (e + 8) * T * H;
    } else if (n == "train_gather_row_dy") {
      c.bytes = (4 + e) * r.real * H;
    } else if (n == "train_row_tokens" ||
               n == "train_scatter_row_weight_grad") {
      c.bytes = 12 * T * k;
    } else if (n == "train_load" || n == "train_bias") {
      c.bytes = 12 * E;
    } else if (n.rfind("train_adamw_", 0) == 0) {
      // Read w, m, v, grad; write the next w, m, v (f32), this weight's
      // share of the trained weights.
      std::string w = n.substr(12);
      double count = w == "router_weight"         ? E * H
                     : w == "shared_expert_gate"  ? H
                     : w.rfind("shared_", 0) == 0 ? S * H
                                                  : expertWeights / 3;
      c.bytes = 28 * count;
    } else {
      // Compute copies of the masters: f32 in, the compute type out.
      double count = n == "train_router_weight"         ? E * H
                     : n == "train_pack_gate_up"        ? 2 * expertWeights / 3
                     : n == "train_down_weight"         ? expertWeights / 3
                     : n == "train_pack_shared_gate_up" ? 2 * S * H
                     : n == "train_shared_down_weight"  ? S * H
                     : n == "train_shared_expert_gate"  ? H
                                                        : 0;
      if (count == 0)
        continue;
      c.bytes = (4 + e) * count;
    }
    costSimt(c, m);
    out.push_back(c);
  }
  return out;
}

} // namespace mlir::moe
