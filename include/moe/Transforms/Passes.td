//===- Passes.td - Transformation passes of moe-compiler ---*- tablegen -*-===//
//
// Part of moe-compiler.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_TRANSFORMS_PASSES_TD
#define MOE_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def MoeDecomposeLayer : Pass<"moe-decompose-layer"> {
  let summary = "Decompose moe.layer into its routing, expert and combine "
                "primitives";
  let description = [{
    Rewrites every `moe.layer` into the primitives of the dialect:

    ```
    %scores     = moe.router %x, %wr            (scoring of the config)
    %ids, %w    = moe.topk %scores [bias(%b)]   (group-limited top-k)
    %rows, %offsets, %map = moe.dispatch %x, %ids
    %g = moe.grouped_matmul %rows, %w_gate, %offsets
    %u = moe.grouped_matmul %rows, %w_up, %offsets
    %a = moe.swiglu %g, %u
    %d = moe.grouped_matmul %a, %w_down, %offsets
    %y = moe.combine %d, %map, %w
    %s = moe.shared_expert %x, ...              (when the layer has one)
    %out = arith.addf %y, %s
    ```

    Each expert's segment of the dispatched buffer is padded to `alignment`
    rows (the M block of the grouped GEMM). A layer's `partition` moves to
    the enclosing function as the `moe.sm_partition` attribute; two layers of
    one function with different partitions are an error.
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::linalg::LinalgDialect",
                           "::mlir::tensor::TensorDialect"];
  let options = [
    Option<"alignment", "alignment", "int64_t", /*default=*/"128",
           "Rows each expert's segment of the dispatched buffer is padded "
           "to (a power of two: the grouped GEMM's M block)">
  ];
}

def MoeSelectTiles : Pass<"moe-select-tiles"> {
  let summary = "Choose tile shapes and pipeline depths of grouped GEMMs";
  let description = [{
    Gives every `moegpu.grouped_gemm` without a `tile` one, from its problem
    shape and the SM's budgets:

    - `m = 128`: two consumer warpgroups of 64 rows (the dispatch alignment
      must be a multiple of it);
    - `n`: `tile-n` where given and dividing N; 256 for a K-major (nt)
      GEMM with a 16-bit result whose N it divides (faster on an H200);
      for a dense K-major GEMM (the router's) N rounded up to 8, at most
      64; otherwise the first of 128, 256, 192, 64, 160, 224, 96, 32, 16
      that divides N (a multiple of 16 with the swiglu epilogue, of 64 for
      an N-major B), so no tile has a column tail; 128 when none does
      (tails are masked);
    - `k = 64`: one 128-byte swizzle atom;
    - `stages`: as many as fit in the 227 KiB of dynamic shared memory (1 KiB
      kept for the barriers, 32 KiB for the TMA-store epilogue's staging
      where it applies), at most `max-stages`;
    - `cluster`: 2 with `cluster=2` where n is a multiple of 128 (pairs of
      CTAs sharing B by TMA multicast), else 1.

    With `report`, a remark on each op states the choice and the shared
    memory it takes.
  }];
  let dependentDialects = ["::mlir::moegpu::MoeGpuDialect"];
  let options = [
    Option<"maxStages", "max-stages", "int64_t", /*default=*/"8",
           "Most pipeline stages (more add latency hiding but no bandwidth)">,
    Option<"cluster", "cluster", "int64_t", /*default=*/"1",
           "CTAs of a cluster pairing M blocks and sharing B by TMA "
           "multicast (1 or 2; 2 where the tile's n is a multiple of 128)">,
    Option<"tileN", "tile-n", "int64_t", /*default=*/"0",
           "BLOCK_N of every grouped GEMM (not the dense router's) whose N "
           "it divides; 0: the cost model's choice">,
    Option<"tileM", "tile-m", "int64_t", /*default=*/"0",
           "BLOCK_M of every GEMM, 64 (one consumer warpgroup) or 128 (two); "
           "0: 128">,
    Option<"report", "report", "bool", /*default=*/"false",
           "Emit a remark with the choice on every grouped GEMM">
  ];
}

def MoePartitionSms : Pass<"moe-partition-sms"> {
  let summary = "Restrict persistent kernels to the compute SMs of the "
                "partition";
  let description = [{
    Gives every `moegpu.grouped_gemm` without an `sm_range` the compute SMs
    of the nearest enclosing `moe.sm_partition` attribute (`sms - comm`,
    starting at SM 0), the module's included: the one place the partition
    is decided (moe-compile puts `--sm-partition` there). Where no op
    carries one, all 132 SMs of an H100/H200 SXM compute. An explicit
    `sm_range` reaching past the compute SMs is an error.
  }];
  let dependentDialects = ["::mlir::moegpu::MoeGpuDialect"];
}

def MoeGpuWarpSpecialize : Pass<"moegpu-warp-specialize"> {
  let summary = "Split grouped GEMMs into a TMA producer and wgmma consumers";
  let description = [{
    Rewrites every `moegpu.grouped_gemm` (which must have a `tile` and an
    `sm_range`) into its warp-specialized form:

    ```
    %p = moegpu.pipeline.create
    moegpu.warp_roles consumers = m / 64, producer_regs = 40, consumer_regs = R
    producer {
      moegpu.tile_loop ... {            // the persistent schedule
        scf.for %kb { moegpu.produce %p[%it], %a[%row], %b[%e * N + %col], k %k }
      }
    } consumer {
    ^bb0(%wg: index):
      moegpu.tile_loop ... {
        %acc = scf.for %kb iter_args(%acc = 0) { moegpu.mma %p[%it], %acc, warpgroup %wg }
        moegpu.store_tile %acc, %c[%row, %col], ... {epilogue}
      }
    }
    ```

    Both roles walk the same tile sequence, so pipeline iteration
    `ordinal * k_blocks + kb` names the same slot and phase on both sides.
    `R` is the largest multiple of 8 (at most 232) that keeps the CTA within
    the SM's 64K registers.
  }];
  let dependentDialects = ["::mlir::moegpu::MoeGpuDialect",
                           "::mlir::arith::ArithDialect",
                           "::mlir::memref::MemRefDialect",
                           "::mlir::scf::SCFDialect"];
}

def MoeGpuTokensFromMemory : Pass<"moegpu-tokens-from-memory",
                                   "::mlir::ModuleOp"> {
  let summary = "Kernels read the pass's token count from a device word";
  let description = [{
    Gives every kernel that a schedule launches on a token-sized buffer
    (a `moegpu.buffer` with a `#moegpu.dim<tokens>` dimension) one more
    argument, the buffer `@tokens : memref<1xi32>` of source `tokens`,
    which the runtime writes before each pass, and makes the kernel see
    its token-sized arguments with that many tokens:

    ```mlir
    %w = memref.load %tokens[%c0] : memref<1xi32>
    %t = arith.index_castui %w : i32 to index
    %x1 = memref.reinterpret_cast %x to offset: [0], sizes: [%t, 64],
        strides: [64, 1] : memref<?x64xbf16> to memref<?x64xbf16>
    ```

    So the launch's own sizes (its memref descriptors and a grid of
    `tokens` or `assignments`) may be those of any token count up to the
    buffers' capacity: a CUDA graph captured for a bucket of token counts
    replays for each of them. On a grid of `tokens`, a CTA whose first
    token is past the count returns at once (`cf.cond_br` to a
    `gpu.return`); on a grid of `assignments`, the kernel ops guard their
    assignment themselves. Runs after the kernels are lowered (a TMA source must still be
    a kernel argument there); the new argument goes after the buffers and
    before the tensor-map pointers, whose records it shifts.

    Errors: a kernel launched with token-sized buffers at different
    arguments by different launches, and a kernel on a grid of the token
    count that takes no token-sized buffer (it could not tell the live
    tokens from its grid's).
  }];
  let dependentDialects = ["::mlir::moegpu::MoeGpuDialect",
                           "::mlir::arith::ArithDialect",
                           "::mlir::cf::ControlFlowDialect",
                           "::mlir::memref::MemRefDialect"];
}

def MoeExpertParallel : Pass<"moe-expert-parallel", "::mlir::ModuleOp"> {
  let summary = "Shard every layer's experts over `ep` ranks";
  let description = [{
    Makes each `moe.layer` one rank's share of an expert-parallel layer:
    sets its `ep_size` and narrows the expert weights (function arguments)
    to `E / ep` experts, `[E / ep, F, H]` and `[E / ep, H, F]`. Rank `r`
    then holds experts `[r * E / ep, (r + 1) * E / ep)`; tokens stay on
    their rank, and `moe-decompose-layer` (and `moe-autodiff`) exchange the
    dispatched rows with `moe.all_to_all`: to the experts' ranks and back,
    in both passes. With `chunks = C` the tokens are exchanged in C chunks
    (`moe.all_to_all_start`/`moe.all_to_all_wait`): every chunk's exchange
    starts before the first chunk's experts run.

    Errors: `chunks` < 1, `ep` not dividing a layer's experts, and expert weights that are
    not arguments of the function holding the layer (or are used by anything
    else), since narrowing them changes the function's signature.
  }];
  let options = [
    Option<"ep", "ep", "int64_t", /*default=*/"1",
           "Number of expert-parallel ranks">,
    Option<"chunks", "chunks", "int64_t", /*default=*/"1",
           "Exchange each rank's tokens in this many chunks, so that one "
           "chunk's all-to-all overlaps another chunk's experts">
  ];
}

def MoeAutodiff : Pass<"moe-autodiff", "::mlir::ModuleOp"> {
  let summary = "Add the backward function of every MoE layer";
  let description = [{
    For each function `@f` holding one `moe.layer`, adds `@f_backward`,
    which takes the layer's operands and the gradient `dy` of a loss with
    respect to the layer's output, recomputes the forward primitives and
    returns the gradient with respect to `x` and every trained weight:

    ```
    (dx, d_router, d_gate, d_up, d_down[, d_shared_gate, d_shared_up,
     d_shared_down]) = @f_backward(x, router[, bias], gate, up, down
                                   [, shared...], dy)
    ```

    built from the gradient ops: `moe.combine_grad` (rows and routing
    weights), `moe.grouped_matmul_dx` and `moe.grouped_matmul_dw` for the
    three expert projections, `moe.swiglu_grad`, `moe.dispatch_grad`,
    `moe.topk_grad` (the gradient reaches the selected unbiased scores) and
    `moe.router_grad`; the shared experts are the same ops over one group of
    all tokens. `dx` has the input's type; weight gradients are f32. The
    score-correction bias gets no gradient (it only steers selection), and a
    shared-expert gate (Qwen2-MoE) is not supported yet.
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::func::FuncDialect",
                           "::mlir::linalg::LinalgDialect",
                           "::mlir::tensor::TensorDialect"];
  let options = [
    Option<"alignment", "alignment", "int64_t", /*default=*/"1",
           "Row alignment of the recomputed dispatch (a power of two)">
  ];
}

#endif // MOE_TRANSFORMS_PASSES_TD
