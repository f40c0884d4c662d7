//===- Report.h - The text of moe-compile --report ------------*- C++ -*-===//
//
// Part of moe-compiler.
//
// Internal to the compiler library: the sm_90a --report, in three parts.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_COMPILER_REPORT_H
#define MOE_COMPILER_REPORT_H

#include "moe/Target/Sm90.h"
#include "moe/runtime/Bundle.h"

#include <string>
#include <vector>

namespace mlir::moe {

/// Per kernel: its grid, block, registers, shared memory, tile and
/// epilogue, as ptxas and the lowering left them.
std::string formatKernelTable(const std::vector<Sm90KernelReport> &kernels);

/// The performance model's projection (PerfModel.cpp) of the forward pass
/// at 128, 512 and 4096 tokens and at `maxTokens`, and of a training
/// step (`train`) at the largest.
std::string formatModelProjection(const std::vector<Sm90KernelReport> &kernels,
                                  const Sm90LayerShape &shape,
                                  int64_t maxTokens, bool train);

/// A sharded layer's SM partition (`comm` of `sms` SMs) and the model's
/// projection of its exchange beside the GEMMs at the token counts of
/// formatModelProjection: the pass in series and pipelined over `chunks`
/// chunks (4 where the layer's exchanges are whole, as what they would
/// give). `candidates`, when the model chose the partition (at
/// `maxTokens`), are its modelled pass for each count of comm SMs.
std::string
formatPartition(const std::vector<Sm90KernelReport> &kernels,
                const Sm90LayerShape &shape, int64_t sms, int64_t comm,
                int64_t chunks, int64_t maxTokens,
                const std::vector<std::pair<int64_t, double>> &candidates);

/// The device memory of each rank (the buffers at their capacities, the
/// received rows for `ranks` ranks).
std::string formatMemoryPlan(const ::moe::rt::GpuMemoryPlan &plan,
                             int64_t maxTokens, int64_t ranks);

/// The forward pass's modelled time (the sum of its kernels' estimates)
/// with `kernels` at `tokens`.
double modelledForwardUs(const Sm90LayerShape &shape,
                         const std::vector<Sm90KernelReport> &kernels,
                         int64_t tokens);

/// The most tokens T such that the forward pass built with `variant`'s
/// kernels is faster in the performance model than with `main`'s at every
/// count 1 .. T (at most `maxTokens`); 0 when it is not at 1.
int64_t variantBucket(const Sm90LayerShape &shape,
                      const std::vector<Sm90KernelReport> &main,
                      int64_t mainAlignment,
                      const std::vector<Sm90KernelReport> &variant,
                      int64_t variantAlignment, int64_t maxTokens);

/// Both builds' modelled forward pass at a few token counts, and which
/// one the bundle runs (the variant up to `variantTokens`).
std::string formatTileVariants(const Sm90LayerShape &shape,
                               const std::vector<Sm90KernelReport> &main,
                               int64_t mainAlignment,
                               const std::vector<Sm90KernelReport> &variant,
                               int64_t variantAlignment, int64_t variantTokens,
                               int64_t maxTokens);

} // namespace mlir::moe

#endif // MOE_COMPILER_REPORT_H
