//===- PerfModel.cpp - What the forward kernels should cost on an H200 ----===//
//
// Part of moe-compiler. A first-order model of the sm_90a forward pass, for
// --report: each kernel's useful FLOPs and bytes from the layer's shapes,
// the roofline time on an H200 (the larger of those at peak), and an
// estimate of what the kernel as built reaches. Routing is assumed
// uniform: every expert gets T * k / E rows, which the GEMMs pad to the
// alignment (their M block) and compute all the same.
//
// Estimates: a wgmma GEMM runs its tiles in waves over the persistent
// grid, each tile at the tensor cores' share of one SM times an
// efficiency, and no faster than its traffic at the memory efficiency;
// SIMT kernels run at the CUDA cores' f32 peak or the memory efficiency,
// whichever is slower. Every launch adds a fixed cost.
//
//===----------------------------------------------------------------------===//

#include "moe/Target/Sm90.h"

#include <algorithm>
#include <cmath>

namespace mlir::moe {

namespace {

int64_t ceilDiv(int64_t a, int64_t b) { return b > 0 ? (a + b - 1) / b : 0; }

} // namespace

std::vector<Sm90KernelCost>
modelForward(const Sm90LayerShape &s,
             const std::vector<Sm90KernelReport> &kernels, int64_t tokens,
             const Sm90Machine &m) {
  std::vector<Sm90KernelCost> out;
  const double e = static_cast<double>(s.elementBytes);
  const double T = static_cast<double>(tokens);
  const double H = static_cast<double>(s.hidden);
  const double F = static_cast<double>(s.ffn);
  const double S = static_cast<double>(s.sharedFfn);
  const double E = static_cast<double>(s.experts);
  const double k = static_cast<double>(s.topK);
  // This rank's experts and the rows they get (sharded: every rank's
  // tokens reach a rank's experts in the same proportion).
  const int64_t local = std::max<int64_t>(1, s.experts / std::max<int64_t>(1, s.ranks));
  const int64_t assignments = tokens * s.topK;
  const int64_t perExpert = ceilDiv(assignments, s.experts);
  const int64_t busy = std::min<int64_t>(local, assignments);
  const int64_t paddedPerExpert =
      perExpert ? ceilDiv(perExpert, s.alignment) * s.alignment : 0;
  const double rows = static_cast<double>(busy * paddedPerExpert);
  const double real = static_cast<double>(busy * perExpert);

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
      c.flops = 2 * useful * gN * gK;
      c.bytes = e * (useful * gK + groups * gN * gK) +
                outBytes * useful * gN / (up ? 2 : 1);
      int64_t bm = kr.tileM ? kr.tileM : 128, bn = kr.tileN ? kr.tileN : 128;
      int64_t ctas = kr.persistentCtas ? kr.persistentCtas : m.sms;
      int64_t tiles = static_cast<int64_t>(groups) *
                      ceilDiv(tileRowsPerGroup, bm) *
                      ceilDiv(static_cast<int64_t>(gN), bn);
      double perTile = 2.0 * bm * bn * gK /
                       (m.tensorFlops / m.sms * m.tensorEfficiency);
      double compute = static_cast<double>(ceilDiv(tiles, ctas)) * perTile;
      c.rooflineUs = 1e6 * std::max(c.flops / m.tensorFlops, c.bytes / m.bandwidth);
      c.estimateUs =
          1e6 * std::max(compute, c.bytes / (m.bandwidth * m.memoryEfficiency)) +
          m.launchMicroseconds;
      out.push_back(c);
      continue;
    }
    if (kr.name == "router") {
      // SIMT logits (an f32 router weight).
      c.flops = 2 * T * E * H;
      c.bytes = e * T * H + 4 * E * H + 4 * T * E;
    } else if (kr.name == "route") {
      // Logits in; ids, weights and the counts' atomics out.
      c.bytes = 4 * T * E + 12 * T * k;
    } else if (kr.name == "dispatch_scan") {
      c.bytes = 12 * E;
    } else if (kr.name == "dispatch_scatter") {
      c.bytes = 2 * e * T * k * H + 12 * T * k;
    } else if (kr.name == "combine") {
      c.bytes = e * (real * H + T * H * (S > 0 ? 2 : 1)) + 4 * T * k;
    } else {
      continue; // not a forward kernel the model knows
    }
    c.rooflineUs = 1e6 * std::max(c.flops / m.tensorFlops, c.bytes / m.bandwidth);
    c.estimateUs = 1e6 * std::max(c.flops / m.simtFlops,
                                  c.bytes / (m.bandwidth * m.memoryEfficiency)) +
                   m.launchMicroseconds;
    out.push_back(c);
  }
  return out;
}

} // namespace mlir::moe
