//===- Pipelines.cpp - Pass pipelines of moe-compiler ---------------------===//
//
// Part of moe-compiler.
//
//===----------------------------------------------------------------------===//

#include "moe/Pipelines/Pipelines.h"
#include "moe/Conversion/Passes.h"
#include "moe/Transforms/Passes.h"

#include "mlir/Conversion/Passes.h"
#include "mlir/Dialect/Arith/Transforms/Passes.h"
#include "mlir/Dialect/Bufferization/Pipelines/Passes.h"
#include "mlir/Dialect/Bufferization/Transforms/Passes.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/GPU/Transforms/Passes.h"
#include "mlir/Dialect/Linalg/Passes.h"
#include "mlir/Dialect/MemRef/Transforms/Passes.h"
#include "mlir/Pass/PassManager.h"
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

void moe::buildHostPipeline(OpPassManager &pm,
                            const HostPipelineOptions &options) {
  GraphPipelineOptions graph;
  graph.alignment = options.alignment;
  buildGraphPipeline(pm, graph);
  ConvertMoeToHostOptions convert;
  convert.vectorWidth = options.vectorWidth;
  convert.vectorRegisters = options.vectorRegisters;
  pm.addPass(createConvertMoeToHost(convert));
  // Passes that see one function at a time run on the functions in
  // parallel: the entry points and the GEMMs' functions (callKernel).
  OpPassManager &functions = pm.nest<func::FuncOp>();
  functions.addPass(createConvertElementwiseToLinalgPass());
  // Chains of elementwise ops (AdamW's, the loss's, SwiGLU's gradient) as
  // one loop each: one pass over memory instead of one per op.
  functions.addPass(createLinalgElementwiseOpFusionPass());
  functions.addPass(createCanonicalizerPass());
  functions.addPass(createCSEPass());

  // Results built in a tensor.empty and then written to an output argument
  // (the step's new weights and moments) are built in the argument.
  pm.addPass(bufferization::createEmptyTensorEliminationPass());
  bufferization::OneShotBufferizePassOptions bufferize;
  bufferize.bufferizeFunctionBoundaries = true;
  // The GEMMs' private functions (callKernel) take their operands as
  // tensors: contiguous buffers, as the kernels index them.
  bufferize.functionBoundaryTypeConversion =
      bufferization::LayoutMapOption::IdentityLayoutMap;
  pm.addPass(bufferization::createOneShotBufferizePass(bufferize));
  bufferization::BufferDeallocationPipelineOptions deallocation;
  bufferization::buildBufferDeallocationPipeline(pm, deallocation);
  pm.addPass(createConvertBufferizationToMemRefPass());

  // Parallel dimensions become scf.parallel (OpenMP threads in bundles).
  pm.addNestedPass<func::FuncOp>(createConvertLinalgToParallelLoopsPass());
  buildHostLoweringToLLVM(pm, options.reuseBuffers, options.openmp);
}

void moe::buildHostLoweringToLLVM(OpPassManager &pm, bool reuseBuffers,
                                  bool openmp) {
  OpPassManager &early = pm.nest<func::FuncOp>();
  early.addPass(memref::createExpandStridedMetadataPass());
  early.addPass(createLowerAffinePass());
  // scf.parallel: OpenMP's parallel loops, or (in scf-to-cf) loops in order.
  // The canonicalizer inlines the memref.alloca_scope around each parallel
  // body (it holds no alloca), which would otherwise refuse the blocks
  // scf-to-cf makes inside it.
  if (openmp) {
    // The grouped GEMMs' loops first: their iterations' costs follow the
    // routing, so threads take them one at a time.
    pm.addPass(createConvertDynamicParallelToOpenMP());
    pm.addPass(createConvertSCFToOpenMPPass());
  }
  OpPassManager &functions = pm.nest<func::FuncOp>();
  if (openmp)
    functions.addPass(createCanonicalizerPass());
  functions.addPass(createSCFToControlFlowPass());
  // bf16 conversions become integer arithmetic: the host's libgcc may lack
  // the soft-float helpers LLVM would call.
  arith::ArithExpandOpsPassOptions expand;
  expand.includeBf16 = true;
  functions.addPass(arith::createArithExpandOpsPass(expand));
  // The packed GEMMs transpose tiles of weights in registers: as shuffles
  // (a 16 x 16 tile with AVX-512's two-source shuffles).
  ConvertVectorToLLVMPassOptions vectors;
  vectors.vectorTransposeLowering =
      vector::VectorTransposeLowering::Shuffle16x16;
  functions.addPass(createConvertVectorToLLVMPass(vectors));
  functions.addPass(createConvertMathToLLVMPass());
  functions.addPass(createArithToLLVMConversionPass());
  functions.addPass(createConvertIndexToLLVMPass());
  FinalizeMemRefToLLVMConversionPassOptions memrefs;
  memrefs.useGenericFunctions = reuseBuffers;
  pm.addPass(createFinalizeMemRefToLLVMConversionPass(memrefs));
  pm.addPass(createConvertFuncToLLVMPass());
  pm.addPass(createConvertControlFlowToLLVMPass());
  if (openmp)
    pm.addPass(createConvertOpenMPToLLVMPass());
  pm.addPass(createReconcileUnrealizedCastsPass());
}

void moe::buildMoeGpuKernelPipeline(OpPassManager &pm,
                                    const Sm90PipelineOptions &options) {
  MoeGpuLowerKernelsOptions lower;
  lower.maxStages = options.maxStages;
  lower.tileN = options.tileN;
  lower.tileM = options.tileM;
  lower.cluster = options.cluster;
  lower.report = options.report;
  pm.addPass(createMoeGpuLowerKernels(lower));
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
}

void moe::buildSm90Pipeline(OpPassManager &pm,
                            const Sm90PipelineOptions &options) {
  buildMoeGpuKernelPipeline(pm, options);
  buildSm90BinaryPipeline(pm, options);
}

void moe::buildSm90BinaryPipeline(OpPassManager &pm,
                                  const Sm90PipelineOptions &options) {
  // The upstream path checked in shared/TOOLCHAIN.md; scf must be lowered
  // inside the kernels before translation.
  GpuNVVMAttachTargetOptions target;
  target.chip = "sm_90a";
  target.features = "+ptx80";
  target.optLevel = 3;
  pm.addPass(createGpuNVVMAttachTarget(target));
  pm.addPass(createConvertNVGPUToNVVMPass());
  pm.addPass(createSCFToControlFlowPass());
  pm.addPass(memref::createExpandStridedMetadataPass());
  pm.addPass(createLowerAffinePass());
  pm.addNestedPass<gpu::GPUModuleOp>(createConvertGpuOpsToNVVMOps());
  pm.addPass(createConvertNVVMToLLVMPass());
  pm.addPass(createConvertIndexToLLVMPass());
  pm.addPass(createArithToLLVMConversionPass());
  pm.addPass(createConvertControlFlowToLLVMPass());
  pm.addPass(createReconcileUnrealizedCastsPass());
  GpuModuleToBinaryPassOptions binary;
  binary.compilationTarget = options.format;
  binary.toolkitPath = options.toolkit.empty()
                           ? std::string(MOE_CUDA_TOOLKIT_ROOT)
                           : std::string(options.toolkit);
  pm.addPass(createGpuModuleToBinaryPass(binary));
}

void moe::registerPipelines() {
  PassPipelineRegistration<GraphPipelineOptions>(
      "moe-graph-pipeline",
      "Decompose MoE layers into primitives, then canonicalize and CSE",
      buildGraphPipeline);
  PassPipelineRegistration<HostPipelineOptions>(
      "moe-host-pipeline",
      "Lower MoE layers for the host target, down to the LLVM dialect",
      buildHostPipeline);
  PassPipelineRegistration<Sm90PipelineOptions>(
      "moegpu-kernel-pipeline",
      "Warp-specialize moegpu kernels and lower them to gpu, nvgpu and nvvm",
      buildMoeGpuKernelPipeline);
  PassPipelineRegistration<Sm90PipelineOptions>(
      "moe-sm90-pipeline",
      "Lower moegpu kernels to a gpu.binary of PTX or sm_90a cubins",
      buildSm90Pipeline);
}
