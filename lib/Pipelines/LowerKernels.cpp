//===- LowerKernels.cpp - The moegpu kernel pipeline as one pass ----------===//
//
// Part of moe-compiler. moegpu-lower-kernels, the umbrella pass of the
// warp-specialization steps (STYLE.md: a compound transform is small
// passes run by an umbrella pass), lives with the pipelines that run it.
//
//===----------------------------------------------------------------------===//

#include "moe/Conversion/Passes.h"
#include "moe/MoeOps.h"
#include "moe/Transforms/Passes.h"
#include "moegpu/MoeGpuDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/Pass/PassManager.h"

namespace mlir::moe {
#define GEN_PASS_DEF_MOEGPULOWERKERNELS
#include "moe/Conversion/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;

namespace {

struct MoeGpuLowerKernels
    : public mlir::moe::impl::MoeGpuLowerKernelsBase<MoeGpuLowerKernels> {
  using MoeGpuLowerKernelsBase::MoeGpuLowerKernelsBase;

  void runOnOperation() override {
    // A module of moe-level layers (the pipeline run one step early) has
    // nothing to lower: say so instead of returning it unchanged.
    bool kernels = false;
    Operation *layer = nullptr;
    getOperation()->walk([&](Operation *op) {
      if (isa<gpu::GPUModuleOp>(op))
        kernels = true;
      else if (!layer && isa<moe::LayerOp>(op))
        layer = op;
    });
    if (!kernels && layer)
      layer->emitWarning()
          << "moe-sm90-pipeline lowers moegpu kernels, and this module has "
             "none: convert the layer first (--convert-moe-to-moegpu), or "
             "compile it with moe-compile --target=sm_90a";
    OpPassManager pm(ModuleOp::getOperationName());
    pm.addNestedPass<gpu::GPUModuleOp>(moe::createConvertMoeGpuKernelsToGpu());
    moe::MoeSelectTilesOptions tiles;
    tiles.maxStages = maxStages;
    tiles.tileN = tileN;
    tiles.tileM = tileM;
    tiles.cluster = cluster;
    tiles.report = report;
    pm.addPass(moe::createMoeSelectTiles(tiles));
    pm.addPass(moe::createMoePartitionSms());
    pm.addPass(moe::createMoeGpuWarpSpecialize());
    pm.addNestedPass<gpu::GPUModuleOp>(moe::createConvertMoeGpuToNVGPU());
    // Last: a TMA source must be a kernel argument until the GEMMs are
    // lowered.
    pm.addPass(moe::createMoeGpuTokensFromMemory());
    if (failed(runPipeline(pm, getOperation())))
      signalPassFailure();
  }
};

} // namespace
