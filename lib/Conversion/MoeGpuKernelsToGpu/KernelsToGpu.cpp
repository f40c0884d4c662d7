//===- KernelsToGpu.cpp - The SIMT kernel ops as gpu code ----------------===//
//
// Part of moe-compiler.
//
//===----------------------------------------------------------------------===//

#include "Lowering.h"
#include "moe/Conversion/Passes.h"

#include "mlir/Transforms/WalkPatternRewriteDriver.h"

namespace mlir::moe {
#define GEN_PASS_DEF_CONVERTMOEGPUKERNELSTOGPU
#include "moe/Conversion/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

void mlir::moe::populateMoeGpuKernelsToGpuPatterns(
    RewritePatternSet &patterns) {
  kernels::populateRoutingPatterns(patterns);
  kernels::populateDispatchPatterns(patterns);
  kernels::populateQuantizePatterns(patterns);
  kernels::populateCombinePatterns(patterns);
  kernels::populateTrainingPatterns(patterns);
  kernels::populateExchangePatterns(patterns);
}

namespace {

struct ConvertMoeGpuKernelsToGpu
    : public mlir::moe::impl::ConvertMoeGpuKernelsToGpuBase<
          ConvertMoeGpuKernelsToGpu> {
  using ConvertMoeGpuKernelsToGpuBase::ConvertMoeGpuKernelsToGpuBase;

  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    mlir::moe::populateMoeGpuKernelsToGpuPatterns(patterns);
    // One walk, no folding: each kernel's code is built once, as written.
    walkAndApplyPatterns(getOperation(), std::move(patterns));
  }
};

} // namespace
