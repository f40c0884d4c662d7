//===- Pipelines.cpp - Pass pipelines of moe-compiler ---------------------===//
//
// Part of moe-compiler.
//
//===----------------------------------------------------------------------===//

#include "moe/Pipelines/Pipelines.h"
#include "moe/Transforms/Passes.h"

#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;

void moe::buildGraphPipeline(OpPassManager &pm,
                             const GraphPipelineOptions &options) {
  MoeDecomposeLayerOptions decompose;
  decompose.alignment = options.alignment;
  pm.addPass(createMoeDecomposeLayer(decompose));
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
}

void moe::registerPipelines() {
  PassPipelineRegistration<GraphPipelineOptions>(
      "moe-graph-pipeline",
      "Decompose MoE layers into primitives, then canonicalize and CSE",
      buildGraphPipeline);
}
