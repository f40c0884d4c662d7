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

/// The device memory of each rank (the buffers at their capacities, the
/// received rows for `ranks` ranks).
std::string formatMemoryPlan(const ::moe::rt::GpuMemoryPlan &plan,
                             int64_t maxTokens, int64_t ranks);

} // namespace mlir::moe

#endif // MOE_COMPILER_REPORT_H
