//===- Pipelines.h - Pass pipelines of moe-compiler -------------*- C++ -*-===//
//
// Part of moe-compiler. The pipelines registered for moe-opt are the ones
// moe-compile builds: one source of truth.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_PIPELINES_PIPELINES_H
#define MOE_PIPELINES_PIPELINES_H

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassOptions.h"

namespace mlir::moe {

/// Options of the graph-level pipeline.
struct GraphPipelineOptions : public PassPipelineOptions<GraphPipelineOptions> {
  PassOptions::Option<int64_t> alignment{
      *this, "alignment",
      llvm::cl::desc("Rows each expert's segment of the dispatched buffer is "
                     "padded to (a power of two)"),
      llvm::cl::init(128)};
};

/// moe.layer -> verified, simplified graph of moe primitives.
void buildGraphPipeline(OpPassManager &pm, const GraphPipelineOptions &options);

/// Options of the host (CPU) pipeline.
struct HostPipelineOptions : public PassPipelineOptions<HostPipelineOptions> {
  PassOptions::Option<int64_t> alignment{
      *this, "alignment",
      llvm::cl::desc("Rows each expert's segment of the dispatched buffer is "
                     "padded to (a power of two; 1 on the host wastes no "
                     "work)"),
      llvm::cl::init(1)};
};

/// moe ops (and the upstream ops around them, on tensors or memrefs) ->
/// the LLVM dialect, through convert-moe-to-host, one-shot bufferization
/// and buffer deallocation.
void buildHostPipeline(OpPassManager &pm, const HostPipelineOptions &options);

/// Registers every pipeline with the global registry (for moe-opt).
void registerPipelines();

} // namespace mlir::moe

#endif // MOE_PIPELINES_PIPELINES_H
