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
                     "padded to (a power of two; default 128, sm_90a's GEMM "
                     "block; moe-compile uses 1 on the host)"),
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
  PassOptions::Option<bool> reuseBuffers{
      *this, "reuse-buffers",
      llvm::cl::desc("Allocate through _mlir_memref_to_llvm_alloc and _free "
                     "(a bundle's shared object defines them to keep freed "
                     "buffers for reuse) instead of malloc and free"),
      llvm::cl::init(false)};
  PassOptions::Option<int64_t> vectorWidth{
      *this, "vector-width",
      llvm::cl::desc("f32 lanes of the host's vector registers (4: SSE2 or "
                     "NEON, 8: AVX2, 16: AVX-512)"),
      llvm::cl::init(4)};
  PassOptions::Option<int64_t> vectorRegisters{
      *this, "vector-registers",
      llvm::cl::desc("Vector registers of the host (16, or 32 with AVX-512 "
                     "and on AArch64)"),
      llvm::cl::init(16)};
  PassOptions::Option<bool> openmp{
      *this, "openmp",
      llvm::cl::desc("Run the parallel loops on OpenMP threads (the code "
                     "then calls the LLVM OpenMP runtime, libomp); else "
                     "they run in order on the calling thread"),
      llvm::cl::init(false)};
};

/// moe ops (and the upstream ops around them, on tensors or memrefs) ->
/// the LLVM dialect, through convert-moe-to-host, one-shot bufferization
/// and buffer deallocation.
void buildHostPipeline(OpPassManager &pm, const HostPipelineOptions &options);

/// The tail of the host pipeline: memref, scf (scf.parallel as OpenMP
/// parallel loops with `openmp`, else loops in order), arith (bf16
/// conversions as integer arithmetic), vector, math, func and cf to the
/// LLVM dialect; heap buffers through the generic allocation functions
/// with `reuseBuffers`.
void buildHostLoweringToLLVM(OpPassManager &pm, bool reuseBuffers = false,
                             bool openmp = false);

/// Options of the Hopper (sm_90a) kernel pipelines.
struct Sm90PipelineOptions : public PassPipelineOptions<Sm90PipelineOptions> {
  PassOptions::Option<int64_t> maxStages{
      *this, "max-stages", llvm::cl::desc("Most pipeline stages of a GEMM"),
      llvm::cl::init(8)};
  PassOptions::Option<int64_t> tileM{
      *this, "tile-m",
      llvm::cl::desc("BLOCK_M of the GEMMs, 64 or 128 (0: 128)"),
      llvm::cl::init(0)};
  PassOptions::Option<int64_t> tileN{
      *this, "tile-n",
      llvm::cl::desc("BLOCK_N of the grouped GEMMs whose N it divides (0: "
                     "the cost model's choice)"),
      llvm::cl::init(0)};
  PassOptions::Option<int64_t> cluster{
      *this, "cluster",
      llvm::cl::desc("CTAs of a cluster sharing B by TMA multicast (1 or 2)"),
      llvm::cl::init(1)};
  PassOptions::Option<bool> report{
      *this, "report",
      llvm::cl::desc("Emit a remark with each GEMM's tile choice"),
      llvm::cl::init(false)};
  PassOptions::Option<std::string> format{
      *this, "format",
      llvm::cl::desc("What gpu-module-to-binary makes: isa (PTX) or bin "
                     "(cubin, through ptxas)"),
      llvm::cl::init("isa")};
  PassOptions::Option<std::string> toolkit{
      *this, "toolkit",
      llvm::cl::desc("CUDA toolkit whose ptxas makes cubins (empty: the "
                     "one found at configure time)"),
      llvm::cl::init("")};
};

/// moegpu kernels -> gpu/nvgpu/nvvm: tile selection, SM partition, warp
/// specialization and the lowering of its ops.
void buildMoeGpuKernelPipeline(OpPassManager &pm,
                               const Sm90PipelineOptions &options);

/// moegpu kernels -> gpu.binary with PTX or cubins for sm_90a: the kernel
/// pipeline, then the upstream nvgpu/gpu -> nvvm -> llvm path and LLVM's
/// NVPTX backend.
void buildSm90Pipeline(OpPassManager &pm, const Sm90PipelineOptions &options);

/// The second half of buildSm90Pipeline: kernels in gpu/nvgpu/nvvm ->
/// gpu.binary.
void buildSm90BinaryPipeline(OpPassManager &pm,
                             const Sm90PipelineOptions &options);

/// Registers every pipeline with the global registry (for moe-opt).
void registerPipelines();

} // namespace mlir::moe

#endif // MOE_PIPELINES_PIPELINES_H
