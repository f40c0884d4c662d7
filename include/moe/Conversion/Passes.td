//===- Passes.td - Conversion passes of moe-compiler -------*- tablegen -*-===//
//
// Part of moe-compiler.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_CONVERSION_PASSES_TD
#define MOE_CONVERSION_PASSES_TD

include "mlir/Pass/PassBase.td"

def ConvertMoeToHost : Pass<"convert-moe-to-host"> {
  let summary = "Lower moe primitives to linalg, scf, arith and math for the "
                "host (CPU) target";
  let description = [{
    Rewrites every moe primitive into upstream dialects on tensors, ready for
    one-shot bufferization:

    - every GEMM (the router's, the shared experts', `moe.grouped_matmul`
      and its dX and dW, the router's gradients) becomes one of two
      register-blocked micro-kernels in the vector dialect (vectors of
      `vector-width` f32, register blocks sized for `vector-registers`),
      accumulating in f32, tiled for the caches, inside `scf.parallel`
      loops over blocks of the output that no two iterations share; each
      sum's order depends on the shapes only, so the results do not depend
      on how the parallel loops are run;
    - the scoring functions and SwiGLU become `linalg.generic` ops;
    - `moe.topk`, `moe.dispatch` and `moe.combine`, whose access patterns
      depend on the routing, become `scf.for` loops over buffers
      (`bufferization.to_buffer` of the operands, fresh `memref.alloc`
      results returned through `bufferization.to_tensor`);
    - `moe.all_to_all` and `moe.all_reduce` with `ep_size = 1` are the
      identity; over several ranks they become calls through the module's
      communicator table `moe_comm`, an exported array of 64-bit words the
      runtime fills after loading the code (context, exchange of segment
      sizes, exchange of rows, in-place f32 sum).

    `moe.layer` must be decomposed first (`moe-decompose-layer`); that is
    reported as an error. Expert ids outside `[0, experts)` reaching
    `moe.dispatch` are dropped (their row map entry is -1) and `moe.combine`
    skips row map entries outside the buffer, so no input makes the
    generated code read or write out of bounds.
  }];
  let options = [
    Option<"vectorWidth", "vector-width", "int64_t", /*default=*/"4",
           "f32 lanes of the host's vector registers, which the GEMM "
           "micro-kernels load and accumulate (4: SSE2 or NEON, 8: AVX2, "
           "16: AVX-512)">,
    Option<"vectorRegisters", "vector-registers", "int64_t",
           /*default=*/"16",
           "Vector registers of the host, which size the micro-kernels' "
           "register blocks (16, or 32 with AVX-512 and on AArch64)">
  ];
  let dependentDialects = [
    "::mlir::arith::ArithDialect", "::mlir::bufferization::BufferizationDialect",
    "::mlir::LLVM::LLVMDialect", "::mlir::linalg::LinalgDialect", "::mlir::math::MathDialect",
    "::mlir::memref::MemRefDialect", "::mlir::scf::SCFDialect",
    "::mlir::tensor::TensorDialect", "::mlir::vector::VectorDialect"
  ];
}

def ConvertDynamicParallelToOpenMP
    : Pass<"convert-dynamic-parallel-to-openmp", "::mlir::ModuleOp"> {
  let summary = "Lower the scf.parallel loops marked for a dynamic schedule "
                "to OpenMP worksharing loops that hand out one iteration at "
                "a time";
  let description = [{
    `scf.parallel` loops carrying `moe.schedule = "dynamic"` become
    `omp.parallel` around an `omp.wsloop` with `schedule(dynamic, 1)`
    (their dimensions collapsed into one iteration space, each body in a
    `memref.alloca_scope`, as `convert-scf-to-openmp` builds them). Other
    `scf.parallel` loops are left for `convert-scf-to-openmp`, whose loops
    run a static schedule: contiguous equal shares of the iterations.

    The grouped GEMMs are marked: each iteration is one expert's block of
    columns, and experts get different numbers of rows, so equal shares of
    iterations are unequal shares of work, and a static schedule leaves
    threads waiting at the loop's end for the one that drew the busiest
    experts. The iterations write disjoint elements and each element's sum
    keeps its order, so the schedule changes no result.

    A marked loop with reductions is not supported and is reported as an
    error.
  }];
  let dependentDialects = [
    "::mlir::omp::OpenMPDialect", "::mlir::memref::MemRefDialect",
    "::mlir::LLVM::LLVMDialect"
  ];
}

def ConvertMoeGpuKernelsToGpu : Pass<"convert-moegpu-kernels-to-gpu",
                                     "::mlir::gpu::GPUModuleOp"> {
  let summary = "Expand each SIMT kernel op into its threads' code";
  let description = [{
    Each SIMT kernel op of the `moegpu` dialect (`moegpu.route`,
    `dispatch_scan`, `dispatch_scatter`, `quantize`, `combine`, ...: the
    body of a `gpu.func` that convert-moe-to-moegpu made) becomes `gpu`,
    `scf`, `arith`, `memref`, `vector` and `nvvm` code in its place, for
    the CTA shape its launch has (moe/Conversion/MoeGpuKernels.h). One
    pattern per op (`populateMoeGpuKernelsToGpuPatterns`), applied in one
    walk without folding. Kernels that need shared memory get it as a
    workgroup attribution of their function.
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect", "::mlir::gpu::GPUDialect",
    "::mlir::LLVM::LLVMDialect", "::mlir::math::MathDialect",
    "::mlir::memref::MemRefDialect", "::mlir::NVVM::NVVMDialect",
    "::mlir::scf::SCFDialect", "::mlir::vector::VectorDialect"
  ];
}

def ConvertMoeGpuToNVGPU : Pass<"convert-moegpu-to-nvgpu",
                                "::mlir::gpu::GPUModuleOp"> {
  let summary = "Lower warp-specialized moegpu kernels to gpu, nvgpu and nvvm";
  let description = [{
    Lowers the ops `moegpu-warp-specialize` produces, inside each kernel of
    a `gpu.module`:

    - `moegpu.pipeline.create`: two `nvgpu.mbarrier.create` groups (full,
      empty), initialized by thread 0 (arrival counts 1 and the consumer
      warpgroups), `nvvm.fence.mbarrier.init`, `gpu.barrier`. The slots live
      in `@moegpu_smem`, an external 1024-byte-aligned shared array (the
      kernel's dynamic shared memory; 128-byte swizzled TMA boxes need that
      alignment, which `gpu.dynamic_shared_memory` does not give);
    - `moegpu.warp_roles`: `scf.if` on the warpgroup index with
      `nvvm.setmaxregister` on both sides; the producer region runs on the
      warpgroup's first thread;
    - `moegpu.tile_loop`: an `scf.for` from `blockIdx.x` to the tile count
      (read from `offsets[E]`) stepping by `gridDim.x`, with a binary search
      of the tile's expert in `offsets`;
    - `moegpu.produce`: `nvgpu.mbarrier.try_wait.parity` on the slot's empty
      barrier, `nvgpu.mbarrier.arrive.expect_tx` and two
      `nvgpu.tma.async.load`s. Each TMA source becomes a tensor-map pointer
      argument appended to the kernel;
    - `moegpu.mma`: wait on the full barrier, 128B-swizzle shared memory
      descriptors (K-major, or MN-major read transposed), one
      `nvvm.wgmma.mma_async` per 16 of k between `wgmma.fence` and
      `commit_group`/`wait_group`, and the release arrival on the empty
      barrier (`moegpu.release`, `moegpu.drain`);
    - `moegpu.store_tile`: the epilogue (SwiGLU on interleaved gate/up
      blocks, routing-weight scaling) and masked stores.

    Every kernel of the module starts with `nvvm.griddepcontrol
    launch_dependents` then `wait`: launched with programmatic stream
    serialization (as the runtime launches one kernel after another), the
    next kernel of the schedule is scheduled while this one runs and waits
    for its completion and memory before its own first access, which hides
    the launch latency between consecutive kernels.

    Each kernel gets `nvvm.maxntid`, and a `moegpu.launch` dictionary
    (`grid`, `block`, `smem`) and `moegpu.tensor_maps` list (for each
    appended argument: the memref argument it describes, the 2-D view
    `[rows, cols]` of it, the box `[box_rows, 64]`) that the runtime reads to
    launch it.
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect", "::mlir::gpu::GPUDialect",
    "::mlir::LLVM::LLVMDialect", "::mlir::math::MathDialect",
    "::mlir::memref::MemRefDialect", "::mlir::nvgpu::NVGPUDialect",
    "::mlir::NVVM::NVVMDialect", "::mlir::scf::SCFDialect",
    "::mlir::vector::VectorDialect"
  ];
}

def ConvertMoeToMoeGpu : Pass<"convert-moe-to-moegpu", "::mlir::ModuleOp"> {
  let summary = "Turn an MoE layer into the kernels and launch schedule of "
                "the Hopper target";
  let description = [{
    Replaces the function holding the module's `moe.layer` with a
    `gpu.module @moe_kernels` and a launch schedule:

    | kernel | what | grid x block |
    |---|---|---|
    | `router` | router logits in f32: a dense `moegpu.grouped_gemm` (SIMT for an f32 router weight) | compute SMs |
    | `route` | scoring, group-limited top-k, per-expert counts; one warp per token | T/4 x 128 |
    | `dispatch_scan` | aligned prefix sum: expert offsets and cursors | 1 x 256 |
    | `dispatch_scatter` | row map, routing weight per row, row copy | T*k x 128 |
    | `expert_up` | `moegpu.grouped_gemm`, SwiGLU epilogue | compute SMs |
    | `expert_down` | `moegpu.grouped_gemm`, routing weight epilogue | compute SMs |
    | `shared_up`, `shared_down` | the shared experts as one-group GEMMs | compute SMs |
    | `combine` | sum of a token's rows (+ shared output) | T x 128 |

    Gate and up weights become one `[E, 2F, H]` weight with blocks of 8
    gate rows and 8 up rows interleaved (the runtime packs them), so one
    GEMM serves both and the epilogue finds gate and up values in the same
    thread. The module gets `moegpu.buffers` (every buffer: dtype, shape
    with -1 for the token count and -2 for the dispatched-row capacity,
    where its contents come from) and `moegpu.schedule` (memsets and
    launches with their buffer arguments, in order).

    With `train`, the program also gets the schedules "train" and "update":
    one training step with the arguments of listDeviceTrainArguments
    (buffers `arg.<name>` with source `arg:<name>`; `x` and `score_bias`
    are the forward pass's own buffers). It converts the f32 master weights
    to the compute copies, runs the forward schedule, then the MSE loss,
    the backward pass (the experts' GEMMs on tensor cores, top-k, router
    and input gradients), the expert load, the step's verdict and, in
    "update", the auxiliary-loss-free bias update and AdamW. With
    `optimizer-state=bf16` (only with `train`) AdamW's moments `arg.<W>.m`
    and `arg.<W>.v` are bf16 buffers, as DeepSeek-V3 kept them.

    With `backward` (not with `train`), the program gets the schedule
    "backward" instead: a framework's vector-Jacobian product with the
    arguments of listDeviceBackwardArguments. It runs the forward schedule
    on the bound weights (the forward pass's own buffers), then the same
    backward kernels from the caller's `dy` (source `arg:dy`) into
    `arg.x.grad` and each `arg.<W>.grad`; no loss, no update.

    Needs a bf16 or f16 layer (FP8 experts serve only).
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect", "::mlir::gpu::GPUDialect",
    "::mlir::LLVM::LLVMDialect", "::mlir::memref::MemRefDialect",
    "::mlir::moegpu::MoeGpuDialect", "::mlir::scf::SCFDialect",
    "::mlir::ub::UBDialect", "::mlir::vector::VectorDialect"
  ];
  let options = [
    Option<"alignment", "alignment", "int64_t", /*default=*/"128",
           "Rows each expert's segment is padded to (the GEMM's M block)">,
    Option<"train", "train", "bool", /*default=*/"false",
           "Also build the training step: the schedules train and update">,
    Option<"backward", "backward", "bool", /*default=*/"false",
           "Also build the backward pass alone: the schedule backward">,
    Option<"optimizerState", "optimizer-state", "std::string",
           /*default=*/"\"f32\"",
           "AdamW's moments' element type in the training step: f32 or bf16">
  ];
}

def MoeGpuLowerKernels : Pass<"moegpu-lower-kernels", "::mlir::ModuleOp"> {
  let summary = "Lower the SIMT kernels and warp-specialize every grouped "
                "GEMM (umbrella)";
  let description = [{
    Runs, on the module, the passes that turn the kernel ops into gpu, nvgpu
    and nvvm code, in order: `convert-moegpu-kernels-to-gpu` (the SIMT
    kernels, on each `gpu.module`), then for the `moegpu.grouped_gemm` ops'
    warp-specialized kernels `moe-select-tiles`, `moe-partition-sms`, `moegpu-warp-specialize` and
    `convert-moegpu-to-nvgpu` (on each `gpu.module`), and last
    `moegpu-tokens-from-memory` (the kernels read the token count from a
    device word). Each step has its own lit tests; this pass is what the
    sm_90a pipeline runs.
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect", "::mlir::gpu::GPUDialect",
    "::mlir::LLVM::LLVMDialect", "::mlir::math::MathDialect",
    "::mlir::memref::MemRefDialect", "::mlir::moegpu::MoeGpuDialect",
    "::mlir::nvgpu::NVGPUDialect", "::mlir::NVVM::NVVMDialect",
    "::mlir::scf::SCFDialect", "::mlir::vector::VectorDialect"
  ];
  let options = [
    Option<"maxStages", "max-stages", "int64_t", /*default=*/"8",
           "Most pipeline stages of a GEMM">,
    Option<"cluster", "cluster", "int64_t", /*default=*/"1",
           "CTAs of a cluster pairing M blocks and sharing B by TMA "
           "multicast (1 or 2; 2 where the tile's n is a multiple of 128)">,
    Option<"tileN", "tile-n", "int64_t", /*default=*/"0",
           "BLOCK_N of every grouped GEMM (not the dense router's) whose N "
           "it divides; 0: the cost model's choice">,
    Option<"tileM", "tile-m", "int64_t", /*default=*/"0",
           "BLOCK_M of every GEMM, 64 or 128 (0: 128)">,
    Option<"report", "report", "bool", /*default=*/"false",
           "Emit a remark with each GEMM's tile choice">
  ];
}

#endif // MOE_CONVERSION_PASSES_TD
