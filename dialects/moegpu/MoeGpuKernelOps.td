//===- MoeGpuKernelOps.td - The SIMT kernels of a layer ----*- tablegen -*-===//
//
// Part of moe-compiler.
//
// One op per SIMT kernel of a layer's schedule. convert-moe-to-moegpu makes
// each kernel a gpu.func whose body is one of these ops on the function's
// arguments (as the GEMM kernels' bodies are one moegpu.grouped_gemm);
// convert-moegpu-kernels-to-gpu expands each into its threads' code. The
// ops say what a kernel reads and writes and which facts of the layer it
// needs; their verifiers check the operands' shapes against each other.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_DIALECT_MOEGPU_MOEGPUKERNELOPS_TD
#define MOE_DIALECT_MOEGPU_MOEGPUKERNELOPS_TD

include "moegpu/MoeGpuOps.td"

class MoeGpu_KernelOp<string mnemonic, list<Trait> traits = []>
    : MoeGpu_Op<mnemonic, !listconcat(traits, [
          HasParent<"::mlir::gpu::GPUFuncOp">])> {
  let hasVerifier = 1;
}


def MoeGpu_Scoring : I32EnumAttr<"Scoring",
    "how the router's logits become expert scores", [
      I32EnumAttrCase<"Softmax", 0, "softmax">,
      I32EnumAttrCase<"Sigmoid", 1, "sigmoid">,
      I32EnumAttrCase<"Sparsemixer", 2, "sparsemixer">
    ]> {
  let cppNamespace = "::mlir::moegpu";
  let genSpecializedAttr = 0;
}

def MoeGpu_ScoringAttr : EnumAttr<MoeGpu_Dialect, MoeGpu_Scoring, "scoring"> {
  let assemblyFormat = "`<` $value `>`";
}

//===----------------------------------------------------------------------===//
// Routing
//===----------------------------------------------------------------------===//

def MoeGpu_RouterLogitsOp : MoeGpu_KernelOp<"router_logits"> {
  let summary = "The router's f32 logits from an f32 router weight (SIMT)";
  let description = [{
    `logits[t, e] = sum_h x[t, h] * weight[e, h]` in f32, summed in order of
    h: the router of a layer whose router weight is f32 while x is 16-bit
    (a 16-bit weight takes a dense `moegpu.grouped_gemm` instead). One warp
    per token, its lanes striding over the experts. `x` is `[T, H]`,
    `weight` `[E, H]`, `logits` `[T, E]` f32.

    ```mlir
    moegpu.router_logits %x, %w, %logits
      : memref<?x64xbf16>, memref<8x64xf32>, memref<?x8xf32>
    ```
  }];
  let arguments = (ins MoeGpu_In:$x, MoeGpu_In:$weight, MoeGpu_Out:$logits);
  let assemblyFormat = [{
    $x `,` $weight `,` $logits attr-dict `:` type($x) `,` type($weight) `,`
    type($logits)
  }];
}

def MoeGpu_SumSplitsOp : MoeGpu_KernelOp<"sum_splits"> {
  let summary = "The sum of a split-K GEMM's slices, in slice order";
  let description = [{
    `out[r, n] = sum_{s < count[0]} partials[s, r, n]` in f32, the slices
    added in order 0, 1, ... so that the result is the same on every run:
    the second half of a `grouped_gemm ... split_k(%count)`, whose kernel
    wrote `count` (at least 1, at most `S`). One CTA per row, its threads
    striding over the columns. `partials` is `[S, R, N]` f32, `count`
    `[1]` i32, `out` `[R, N]` f32.

    ```mlir
    moegpu.sum_splits %partials, %count, %logits
      : memref<28x?x256xf32>, memref<1xi32>, memref<?x256xf32>
    ```
  }];
  let arguments = (ins MoeGpu_In:$partials, MoeGpu_In:$count,
                       MoeGpu_Out:$out);
  let assemblyFormat = [{
    $partials `,` $count `,` $out attr-dict `:` type($partials) `,`
    type($count) `,` type($out)
  }];
}

def MoeGpu_SharedGateOp : MoeGpu_KernelOp<"shared_gate"> {
  let summary = "Qwen2-MoE's per-token scale of the shared experts' output";
  let description = [{
    `scale[t] = sigmoid(sum_h x[t, h] * gate[0, h])` in f32: one warp per
    token, a butterfly sum over its lanes. `x` is `[T, H]`, `gate` `[1, H]`,
    `scale` `[T]` f32.
  }];
  let arguments = (ins MoeGpu_In:$x, MoeGpu_In:$gate, MoeGpu_Out:$scale);
  let assemblyFormat = [{
    $x `,` $gate `,` $scale attr-dict `:` type($x) `,` type($gate) `,`
    type($scale)
  }];
}

def MoeGpu_RouteOp : MoeGpu_KernelOp<"route", [AttrSizedOperandSegments]> {
  let summary = "Scores, group-limited top-k and per-expert counts";
  let description = [{
    One warp per token of `logits` (`[T, E]` f32), lane l holding experts l,
    l + 32, ...: the scores (`scoring`: softmax over the experts, sigmoid
    each, or Phi-3.5's sparsemixer, which selects on the logits), the
    selection (scores plus `score_bias` `[E]` f32, DeepSeek-V3's correction
    bias, which only selects; with `groups > 1`, the experts of the
    `topk_groups` best groups, a group scored by its best expert or with
    `sum_top2` its best two), and the k best (ties: the lower expert) into
    `ids` and `weights` (`[T, k]` i32 and f32: the unbiased scores,
    normalized to sum 1 with `normalize`, times `routed_scale`). Each pick
    adds one to `counts[c * E + e]` (`[chunks * E]` i32; c the token's
    chunk of `chunks`: token t of T is in chunk `((t + 1) * chunks - 1) /
    T`). `router_bias` (`[E]`, GPT-OSS) joins the logits before the
    scoring. A NaN score is never selected over a number; `jitter` is
    sparsemixer's router_jitter.

    ```mlir
    moegpu.route %logits, %ids, %weights, %counts
      {scoring = #moegpu.scoring<softmax>, normalize}
      : memref<?x8xf32>, memref<?x2xi32>, memref<?x2xf32>, memref<8xi32>
    ```
  }];
  let arguments = (ins MoeGpu_In:$logits, MoeGpu_OptIn:$router_bias,
                       MoeGpu_OptIn:$score_bias, MoeGpu_Out:$ids,
                       MoeGpu_Out:$weights, MoeGpu_InOut:$counts,
                       MoeGpu_ScoringAttr:$scoring,
                       DefaultValuedAttr<I64Attr, "1">:$groups,
                       DefaultValuedAttr<I64Attr, "1">:$topk_groups,
                       UnitAttr:$sum_top2, UnitAttr:$normalize,
                       DefaultValuedAttr<F64Attr, "1.0">:$routed_scale,
                       DefaultValuedAttr<F64Attr, "0.0">:$jitter,
                       DefaultValuedAttr<I64Attr, "1">:$chunks);
  let assemblyFormat = [{
    $logits `,` $ids `,` $weights `,` $counts
    (`router_bias` `(` $router_bias^ `:` type($router_bias) `)`)?
    (`score_bias` `(` $score_bias^ `:` type($score_bias) `)`)? attr-dict
    `:` type($logits) `,` type($ids) `,` type($weights) `,` type($counts)
  }];
  let extraClassDeclaration = [{
    int64_t getNumExperts() { return getLogits().getType().getDimSize(1); }
    int64_t getTopK() { return getIds().getType().getDimSize(1); }
  }];
}

//===----------------------------------------------------------------------===//
// Dispatch
//===----------------------------------------------------------------------===//

def MoeGpu_DispatchScanOp : MoeGpu_KernelOp<"dispatch_scan"> {
  let summary = "Each expert's aligned segment of the dispatched rows";
  let description = [{
    From `counts` (`[S]` i32, the rows of each of S segments: experts, or
    (chunk, expert) pairs chunk-major), `offsets` (`[S + 1]` i32) gets the
    exclusive prefix sums of the counts rounded up to `alignment`, and
    `cursors` (`[S]`) each segment's start, where the scatter counts from.
    `shared_offsets` (`[2]` i32), when present, gets `[0, T]` with T the
    rows of `ids` (`[T, k]`): the shared experts' one group. One CTA of 256
    threads: a scan over the threads' runs of segments in shared memory.

    ```mlir
    moegpu.dispatch_scan %ids, %counts, %offsets, %cursors {alignment = 128}
      : memref<?x2xi32>, memref<8xi32>, memref<9xi32>, memref<8xi32>
    ```
  }];
  let arguments = (ins MoeGpu_In:$ids, MoeGpu_In:$counts,
                       MoeGpu_Out:$offsets, MoeGpu_Out:$cursors,
                       MoeGpu_OptOut:$shared_offsets, I64Attr:$alignment);
  let assemblyFormat = [{
    $ids `,` $counts `,` $offsets `,` $cursors
    (`shared` `(` $shared_offsets^ `:` type($shared_offsets) `)`)? attr-dict
    `:` type($ids) `,` type($counts) `,` type($offsets) `,` type($cursors)
  }];
}

def MoeGpu_DispatchScatterOp : MoeGpu_KernelOp<"dispatch_scatter",
    [AttrSizedOperandSegments]> {
  let summary = "Copy each token's row to the rows of its experts";
  let description = [{
    One CTA per assignment (t, j) of `ids` (`[T, k]` i32): an expert in
    `[0, experts)` takes the next row of its segment from `cursors` (the
    segment of (chunk, expert) with `chunks > 1`), and `x[t]` is copied
    there in `rows`; `row_map[t, j]` gets the row (-1 for an id out of
    range) and `row_weight` the routing weight `weights[t, j]` (1 with
    `scale_input`, where the row is x[t] times the weight rounded to x's
    type instead: Llama 4). With `x_scale` and `row_scale`, x and rows hold
    e4m3 codes and each token's 128-channel scales go to its rows too.

    ```mlir
    moegpu.dispatch_scatter %x, %ids, %weights, %cursors, %rows, %row_map,
        %row_weight {experts = 8}
      : memref<?x64xbf16>, memref<?x2xi32>, memref<?x2xf32>, memref<8xi32>,
        memref<?x64xbf16>, memref<?x2xi32>, memref<?xf32>
    ```
  }];
  let arguments = (ins MoeGpu_In:$x, MoeGpu_In:$ids, MoeGpu_In:$weights,
                       MoeGpu_InOut:$cursors, MoeGpu_Out:$rows,
                       MoeGpu_Out:$row_map, MoeGpu_Out:$row_weight,
                       MoeGpu_OptIn:$x_scale, MoeGpu_OptOut:$row_scale,
                       I64Attr:$experts,
                       DefaultValuedAttr<I64Attr, "1">:$chunks,
                       UnitAttr:$scale_input);
  let assemblyFormat = [{
    $x `,` $ids `,` $weights `,` $cursors `,` $rows `,` $row_map `,`
    $row_weight (`scales` `(` $x_scale^ `,` $row_scale `:` type($x_scale) `,`
    type($row_scale) `)`)? attr-dict `:` type($x) `,` type($ids) `,`
    type($weights) `,` type($cursors) `,` type($rows) `,` type($row_map) `,`
    type($row_weight)
  }];
  let extraClassDeclaration = [{
    /// x and rows hold e4m3 codes, their scales beside them.
    bool copiesCodes() { return static_cast<bool>(getXScale()); }
  }];
}

def MoeGpu_CopyLayout : I32EnumAttr<"CopyLayout",
    "where a master weight's elements go in its compute copy", [
      I32EnumAttrCase<"Same", 0, "same">,
      I32EnumAttrCase<"GateRows", 1, "gate_rows">,
      I32EnumAttrCase<"UpRows", 2, "up_rows">
    ]> {
  let cppNamespace = "::mlir::moegpu";
  let genSpecializedAttr = 0;
}

def MoeGpu_CopyLayoutAttr : EnumAttr<MoeGpu_Dialect, MoeGpu_CopyLayout,
                                     "copy_layout"> {
  let assemblyFormat = "`<` $value `>`";
}

def MoeGpu_CopyLayoutArrayAttr
    : TypedArrayAttrBase<MoeGpu_CopyLayoutAttr, "compute-copy layouts">;

def MoeGpu_QuantizeOp : MoeGpu_KernelOp<"quantize"> {
  let summary = "Rows as e4m3 codes with one scale per 128 channels";
  let description = [{
    One warp per row of `in` (`[R, K]`, 16-bit): each block of 128 channels
    (the last may be shorter) becomes e4m3 codes in `out` (`[R, K]`) and one
    f32 scale in `scale` (`[R, ceil(K / 128)]`), DeepSeek-V3's fine-grained
    quantization: with `a` the block's largest magnitude (at least
    `min_amax`, 1e-4 by default: the forward activations'), the codes are
    `e4m3(v * 448 / a)`, rounded to nearest even and saturated, and the
    scale `a / 448`. With `offsets` (`[G + 1]` i32) only the rows
    `[offsets[0], offsets[G])` are quantized: a group's rows. K is a
    multiple of 4. The backward pass's operands, gradients far below 1e-4,
    take `min_amax = 2^-100`, as the host's recipe does.

    ```mlir
    moegpu.quantize %act, %codes, %scales offsets(%offsets : memref<9xi32>)
      : memref<?x256xbf16>, memref<?x256xf8E4M3FN>, memref<?x2xf32>
    ```
  }];
  let arguments = (ins MoeGpu_In:$in, MoeGpu_OptIn:$offsets,
                       MoeGpu_Out:$out, MoeGpu_Out:$scale,
                       DefaultValuedAttr<F64Attr, "1e-4">:$min_amax);
  let assemblyFormat = [{
    $in `,` $out `,` $scale (`offsets` `(` $offsets^ `:` type($offsets) `)`)?
    attr-dict `:` type($in) `,` type($out) `,` type($scale)
  }];
}

def MoeGpu_QuantizeColumnsOp : MoeGpu_KernelOp<"quantize_columns"> {
  let summary = "Columns as e4m3 codes with one scale per 128 rows, "
                "transposed";
  let description = [{
    The 128 x 1 tiles of DeepSeek-V3's weight gradients: a Wgrad GEMM
    reduces over the rows (tokens), and e4m3 wgmma reads both operands
    K-major, so each column of `in` (`[R, C]`, 16-bit or e4m3 below)
    becomes a row of
    `out` (`[C, R]` e4m3 codes), quantized per 128 rows: with `a` the
    largest magnitude of column c in rows `[128 j, 128 j + 128)` (at
    least `min_amax`, 1e-4 by default; the backward's gradients take
    2^-100), `out[c, r] = e4m3(in[r, c] * 448 / a)`, rounded to
    nearest even and saturated, and `scale[c, j] = a / 448` (`[C,
    ceil(R / 128)]` f32). The rows quantized are the groups' `[offsets[0],
    offsets[G])` (`offsets`: `[G + 1]` i32), whose starts must be
    multiples of 128 (the schedule's alignment): a tile never spans two
    groups, so the tiles restart at each expert's rows, as the recipe's
    do. Rows past `offsets[G]` in the last tile count as zeros (a last
    group that ends inside a tile: the shared experts' tokens), and `out`
    holds whole tiles (R at least `offsets[G]` rounded up to 128). R (the
    rows' capacity) is a multiple of 4, so that a lane's four codes are
    one aligned 4-byte store.

    A CTA of 128 threads takes 128 rows of 32 columns through shared
    memory: it reads the rows (a warp a row, a lane a column), then writes
    each column's 128 codes as one 128-byte line (a lane four codes). The
    grid's CTAs cover ceil(C / 32) column tiles times the row blocks
    (CTA b: column tile b mod ceil(C / 32), row block b / ceil(C / 32));
    CTAs past `offsets[G]` do nothing.

    `in` may hold e4m3 codes with `in_scale` (`[R, ceil(C / 128)]` f32,
    their scales per row per 128 columns): the rows as the FP8 forward
    dispatched and kept them (1 x 128 tiles), whose values `code *
    in_scale[r, c / 128]` the weight gradient takes in 128 x 1 tiles, as
    DeepSeek-V3 turned its cached activations' tiles around.

    ```mlir
    moegpu.quantize_columns %dy, %codes_t, %scale_t, %offsets
      : memref<?x256xbf16>, memref<256x?xf8E4M3FN>, memref<256x?xf32>,
        memref<9xi32>
    moegpu.quantize_columns %rows, %codes_t, %scale_t, %offsets
      in_scale(%row_scales : memref<?x2xf32>)
      : memref<?x256xf8E4M3FN>, memref<256x?xf8E4M3FN>, memref<256x?xf32>,
        memref<9xi32>
    ```
  }];
  let arguments = (ins MoeGpu_In:$in, MoeGpu_Out:$out, MoeGpu_Out:$scale,
                       MoeGpu_In:$offsets, MoeGpu_OptIn:$in_scale,
                       DefaultValuedAttr<F64Attr, "1e-4">:$min_amax);
  let assemblyFormat = [{
    $in `,` $out `,` $scale `,` $offsets (`in_scale` `(` $in_scale^ `:`
    type($in_scale) `)`)? attr-dict `:` type($in) `,` type($out) `,`
    type($scale) `,` type($offsets)
  }];
}

def MoeGpu_QuantizeBlocksOp : MoeGpu_KernelOp<"quantize_blocks",
    [AttrSizedOperandSegments]> {
  let summary = "f32 weights as e4m3 codes with one scale per 128 x 128 "
                "block, and optionally transposed";
  let description = [{
    The weights' side of DeepSeek-V3's recipe, run after each update: every
    128 x 128 block of each matrix of `in` (`[G, N, K]` f32 masters) becomes
    e4m3 codes in `out` (`[G, N, K]`) and one scale in `scale` (`[G,
    ceil(N / 128), ceil(K / 128)]` f32): with `a` the block's largest
    magnitude, `e4m3(w * (448 / a))` rounded to nearest even and saturated,
    and the scale `a / 448`; a block of zeros (a below the smallest normal
    f32) keeps its values and gets the scale 1, as the host quantizes.
    With `transposed` the codes are also written as `[G, K, N]`, and with
    `transposed_scale` (`[G, ceil(K / 128), ceil(N / 128)]`) block (i, j)'s
    scale at `[g, j, i]`: e4m3 wgmma reads both operands K-major, and the
    input gradient's GEMM reduces over N, reading the transposed codes as
    its B. K and N are multiples of 4.

    `layout` (`same` by default) places a gate or an up matrix in the
    packed gate/up weight, as `moegpu.compute_copies` does: with
    `gate_rows` or `up_rows`, `out` is the packed `[G, 2N, K]` (rows in
    blocks of 8 gate rows then 8 up rows, N a multiple of 8), `scale`
    `[G, 2 ceil(N / 128), ceil(K / 128)]` (the gate's blocks, then the
    up's: the forward GEMM's block scales), `transposed` `[G, K, 2 N']`
    with `N' = 128 ceil(N / 128)` (the gate's columns from 0, the up's
    from N': a 128-column block of the input gradient's reduction holds
    one of them, never both; columns N to N' are not written) and
    `transposed_scale` `[G, ceil(K / 128), 2 ceil(N / 128)]`.

    With `unless` (`memref<1xf32>`, the training step's `copies_valid`)
    nothing is written while it is not 0: the update requantized the
    masters it wrote, and the step quantizes them only after the host
    wrote one.

    A CTA of 256 threads per block: warp w reads rows w, w + 8, ... (a
    lane four consecutive values, a warp a 512-byte row), keeping its 64
    values in registers, the block's maximum from a butterfly and shared
    memory; each lane stores its four codes of a row in one 4-byte access
    (a warp a 128-byte row). The transposed codes go through a shared
    byte tile, read back a column at a time as 128-byte rows.

    ```mlir
    moegpu.quantize_blocks %w2, %codes, %scales
      transposed(%codes_t : memref<8x32x64xf8E4M3FN>)
      transposed_scale(%scales_t : memref<8x1x1xf32>)
      : memref<8x64x32xf32>, memref<8x64x32xf8E4M3FN>, memref<8x1x1xf32>
    moegpu.quantize_blocks %gate, %w13, %s13 {layout = #moegpu.copy_layout<gate_rows>}
      : memref<8x64x32xf32>, memref<8x128x32xf8E4M3FN>, memref<8x2x1xf32>
    ```
  }];
  let arguments = (ins MoeGpu_In:$in, MoeGpu_Out:$out, MoeGpu_Out:$scale,
                       MoeGpu_OptOut:$transposed,
                       MoeGpu_OptOut:$transposed_scale,
                       MoeGpu_OptIn:$unless,
                       DefaultValuedAttr<MoeGpu_CopyLayoutAttr,
                           "::mlir::moegpu::CopyLayout::Same">:$layout);
  let assemblyFormat = [{
    $in `,` $out `,` $scale (`transposed` `(` $transposed^ `:`
    type($transposed) `)`)? (`transposed_scale` `(` $transposed_scale^ `:`
    type($transposed_scale) `)`)? (`unless` `(` $unless^ `:`
    type($unless) `)`)? attr-dict `:` type($in) `,` type($out) `,`
    type($scale)
  }];
}

//===----------------------------------------------------------------------===//
// Combine
//===----------------------------------------------------------------------===//

def MoeGpu_CombineOp : MoeGpu_KernelOp<"combine",
    [AttrSizedOperandSegments]> {
  let summary = "Each token's output: its experts' rows summed";
  let description = [{
    `y[t] = sum_j down[row_map[t, j]]` over the token's k rows (a row of -1
    is skipped), summed in f32, plus `shared_out[t]` (times
    `shared_scale[t]` when present: Qwen2-MoE's gate), plus `output_bias`
    (`[H]`, JetMoE: added to the sum rounded to y's type, as transformers
    does), rounded to y's type. One CTA per token. `down` is `[R, H]`,
    `row_map` `[T, k]` i32, `shared_out` and `y` `[T, H]`, `shared_scale`
    `[T]` f32.

    ```mlir
    moegpu.combine %down, %row_map, %y
      : memref<?x64xbf16>, memref<?x2xi32>, memref<?x64xbf16>
    ```
  }];
  let arguments = (ins MoeGpu_In:$down, MoeGpu_In:$row_map,
                       MoeGpu_OptIn:$shared_out, MoeGpu_OptIn:$shared_scale,
                       MoeGpu_OptIn:$output_bias, MoeGpu_Out:$y);
  let assemblyFormat = [{
    $down `,` $row_map `,` $y
    (`shared` `(` $shared_out^ `:` type($shared_out) `)`)?
    (`shared_scale` `(` $shared_scale^ `:` type($shared_scale) `)`)?
    (`output_bias` `(` $output_bias^ `:` type($output_bias) `)`)? attr-dict
    `:` type($down) `,` type($row_map) `,` type($y)
  }];
  let extraClassDeclaration = [{
    int64_t getTopK() { return getRowMap().getType().getDimSize(1); }
  }];
}

//===----------------------------------------------------------------------===//
// The training step
//===----------------------------------------------------------------------===//
//
// One CTA per dispatched row, token or weight row (its threads striding
// over the row's columns), or one thread per element; sums in f32. They
// compute what the host's training step computes (moe/Transforms/
// Autodiff.h), whose gradients are checked against finite differences.
// `hyper` is the step's f32 hyperparameters, indexed by TrainHyper.

def MoeGpu_ComputeCopiesOp : MoeGpu_KernelOp<"compute_copies",
    [AttrSizedOperandSegments]> {
  let summary = "The compute copies of f32 master weights, in one launch";
  let description = [{
    For each master `masters[i]` (f32, static shape), its elements rounded
    to the element type of `copies[i]` and stored where `layouts[i]` says:
    `same`, element j of the master is element j of the copy (row-major;
    the copy may have a group dimension of 1 the master lacks); `gate_rows`
    and `up_rows`, the master (`[G, F, H]` or `[G, F]`, the group dimension
    absent for one group) is the gate or the up half of a packed `[G, 2F,
    H]` / `[G, 2F]` copy, whose rows `16j .. 16j+7` are gate rows `8j ..`
    and rows `16j+8 .. 16j+15` up rows `8j ..` (kGateUpBlock), as the
    SwiGLU GEMM reads them. One grid-stride loop of 256-thread CTAs per
    master, one after another.

    With `valid` (one f32): nothing is done when `valid[0]` is not 0, the
    copies being those of the masters already (`update_verdict` marks them
    so after a step; the runtime clears it when the host writes a master).
    With `bounds` (`update_check`'s bounds of the state, i32): zeroed too
    when the copies are made, for `update_check` to take them anew.

    ```mlir
    moegpu.compute_copies masters(%g, %u : memref<4x32x64xf32>,
      memref<4x32x64xf32>) copies(%w13, %w13 : memref<4x64x64xbf16>,
      memref<4x64x64xbf16>) layouts [#moegpu.copy_layout<gate_rows>,
      #moegpu.copy_layout<up_rows>] valid(%valid : memref<1xf32>)
    ```
  }];
  let arguments = (ins Arg<Variadic<AnyMemRef>, "", [MemRead]>:$masters,
                       Arg<Variadic<AnyMemRef>, "", [MemWrite]>:$copies,
                       MoeGpu_CopyLayoutArrayAttr:$layouts,
                       MoeGpu_OptIn:$valid, MoeGpu_OptOut:$bounds);
  let assemblyFormat = [{
    `masters` `(` $masters `:` type($masters) `)`
    `copies` `(` $copies `:` type($copies) `)` `layouts` $layouts
    (`valid` `(` $valid^ `:` type($valid) `)`)?
    (`bounds` `(` $bounds^ `:` type($bounds) `)`)? attr-dict
  }];
}

def MoeGpu_MseLossOp : MoeGpu_KernelOp<"mse_loss"> {
  let summary = "The mean squared error and its gradient";
  let description = [{
    `dy = 2 (y - target) / (T * H)` and `loss[0] += sum (y - target)^2 /
    (T * H)` with T every rank's tokens (`hyper[tokens]`): one CTA per
    token, one atomic per warp. `y` is `[T, H]` 16-bit, `target` and `dy`
    `[T, H]` f32, `loss` `[1]` f32.
  }];
  let arguments = (ins MoeGpu_In:$y, MoeGpu_In:$target, MoeGpu_In:$hyper,
                       MoeGpu_Out:$dy, MoeGpu_InOut:$loss);
  let assemblyFormat = [{
    $y `,` $target `,` $hyper `,` $dy `,` $loss attr-dict `:` type($y) `,`
    type($target) `,` type($hyper) `,` type($dy) `,` type($loss)
  }];
}

def MoeGpu_ColumnSumOp : MoeGpu_KernelOp<"column_sum"> {
  let summary = "Each column's sum over the rows";
  let description = [{
    `out[c] = sum_t in[t, c]` in row order, a thread per column: the
    gradient of a bias added to every row. `in` is `[T, C]`, `out` `[C]`
    f32.
  }];
  let arguments = (ins MoeGpu_In:$in, MoeGpu_Out:$out);
  let assemblyFormat = "$in `,` $out attr-dict `:` type($in) `,` type($out)";
}

def MoeGpu_GroupedColumnSumOp : MoeGpu_KernelOp<"grouped_column_sum"> {
  let summary = "Each group's column sums";
  let description = [{
    `out[g, c] = sum in[r, c]` over group g's rows `[groups[g],
    groups[g + 1])` (with `accumulate`, added to out): the gradient of a
    per-expert bias. A CTA per group, a thread per column. `in` is
    `[R, C]`, `groups` `[G + 1]` i32, `out` `[G, C]` f32.
  }];
  let arguments = (ins MoeGpu_In:$in, MoeGpu_In:$groups, MoeGpu_InOut:$out,
                       UnitAttr:$accumulate);
  let assemblyFormat = [{
    $in `,` $groups `,` $out attr-dict `:` type($in) `,` type($groups) `,`
    type($out)
  }];
}

def MoeGpu_RowTokensOp : MoeGpu_KernelOp<"row_tokens"> {
  let summary = "Each dispatched row's assignment";
  let description = [{
    `row_token[row_map[t, j]] = t * k + j + 1` for every assignment with a
    row (padding rows keep what they had: 0 after a memset). A thread per
    assignment. `row_map` is `[T, k]` i32, `row_token` `[R]` i32.
  }];
  let arguments = (ins MoeGpu_In:$row_map, MoeGpu_Out:$row_token);
  let assemblyFormat = [{
    $row_map `,` $row_token attr-dict `:` type($row_map) `,` type($row_token)
  }];
}

def MoeGpu_GatherRowDyOp : MoeGpu_KernelOp<"gather_row_dy"> {
  let summary = "Each dispatched row's output gradient";
  let description = [{
    `row_dy[r] = dy[t]` (rounded to row_dy's type) for each row r in the
    groups of `offsets` whose `row_token` is an assignment of token t (of
    `top_k` a token); other rows are left alone. A CTA per row.
  }];
  let arguments = (ins MoeGpu_In:$dy, MoeGpu_In:$row_token,
                       MoeGpu_In:$offsets, MoeGpu_Out:$row_dy,
                       I64Attr:$top_k);
  let assemblyFormat = [{
    $dy `,` $row_token `,` $offsets `,` $row_dy attr-dict `:` type($dy) `,`
    type($row_token) `,` type($offsets) `,` type($row_dy)
  }];
}

def MoeGpu_ScatterRowWeightGradOp
    : MoeGpu_KernelOp<"scatter_row_weight_grad"> {
  let summary = "The routing weights' gradients from their rows'";
  let description = [{
    `dtw[t, j] = row_grad[r]` for the row r of assignment (t, j) (found
    through `row_token`, within the groups of `offsets`). A thread per row.
    `dtw` is `[T, k]` f32.
  }];
  let arguments = (ins MoeGpu_In:$row_grad, MoeGpu_In:$row_token,
                       MoeGpu_In:$offsets, MoeGpu_Out:$dtw);
  let assemblyFormat = [{
    $row_grad `,` $row_token `,` $offsets `,` $dtw attr-dict `:`
    type($row_grad) `,` type($row_token) `,` type($offsets) `,` type($dtw)
  }];
}

def MoeGpu_ScaledWeightGradOp : MoeGpu_KernelOp<"scaled_weight_grad"> {
  let summary = "Llama 4's routing weights' gradients (rows scaled by them)";
  let description = [{
    With scale_input a row r of token t holds `x[t] * w`, so
    `row_grad[r] += drows[r] . x[t]` (one atomic per warp), for the rows of
    `offsets`' groups with an assignment (`row_token`, `top_k` a token). A
    CTA per row.
  }];
  let arguments = (ins MoeGpu_In:$drows, MoeGpu_In:$row_token,
                       MoeGpu_In:$offsets, MoeGpu_In:$x,
                       MoeGpu_InOut:$row_grad, I64Attr:$top_k);
  let assemblyFormat = [{
    $drows `,` $row_token `,` $offsets `,` $x `,` $row_grad attr-dict `:`
    type($drows) `,` type($row_token) `,` type($offsets) `,` type($x) `,`
    type($row_grad)
  }];
}

def MoeGpu_ScaleRowsOp : MoeGpu_KernelOp<"scale_rows"> {
  let summary = "Rows times their weights, in the compute type";
  let description = [{
    `dst[r, h] = weight[r] * src[r, h]` (`weight` absent: 1) rounded to
    dst's 16-bit type, for the rows of `groups`' groups: the output
    gradient as the backward GEMMs read it. A CTA per row.
  }];
  let arguments = (ins MoeGpu_In:$src, MoeGpu_In:$groups, MoeGpu_Out:$dst,
                       MoeGpu_OptIn:$weight);
  let assemblyFormat = [{
    $src `,` $groups `,` $dst (`weight` `(` $weight^ `:` type($weight) `)`)?
    attr-dict `:` type($src) `,` type($groups) `,` type($dst)
  }];
}

def MoeGpu_ActGradOp : MoeGpu_KernelOp<"act_grad",
    [AttrSizedOperandSegments]> {
  let summary = "The SwiGLU backward of each row";
  let description = [{
    Per row r of `groups`' groups and FFN column f, from `gu` (`[R, 2F]`
    f32: the gate and up pre-activations at the packed rows) and `gs`
    (`[R, F]` f32: dY[r] . W2[:, f]): `d_act = w * gs` (w = `weight[r]`, or
    1), `dg = d_act * u * silu'(g)`, `du = d_act * silu(g)`, stored in the
    compute type into `dgu` (interleaved as the packed weight's rows) and
    into `dg` and `du`; with `row_grad`, the routing weight's gradient
    `sum_f act * gs` (plus `dy[r] . b2[e]` with `dy` and `b2`: GPT-OSS's
    down bias, e the row's group) is added to `row_grad[r]`. `alpha` and
    `limit` make it GPT-OSS's clamped SwiGLU. A CTA per row.

    With `split`, `dgu` is `[R, 2 F']` with `F' = 128 ceil(F / 128)`: the
    gate's gradient in columns `[0, F)` and the up's in `[F', F' + F)`
    (columns past each are not written), so that each 128 columns of the
    FP8 input gradient's reduction, quantized per 1 x 128, hold the gate's
    or the up's, as the transposed weight codes do
    (`moegpu.quantize_blocks` with a gate or up layout).

    With `combine(dy, down)` (an FP8 step's): `gs` is the gradient of the
    weighted output, `(w dY) . W2` from the e4m3 codes of w dY (the
    recipe quantizes the down projection's output gradient, which is w
    dY), so `d_act = gs`; and the routing weight's gradient is the
    combine's, `dy[r] . down[r] / w` (`down` the row's output times w, as
    the forward's down projection stored it; 0 where w is 0), in place of
    `sum_f act * gs`: the recipe leaves the combine, and so the routing
    weights' gradients, unquantized. `rounded_inputs` rounds the gate,
    up and gs values to the compute type first, as the FP8 forward rounds
    gate and up before its SwiGLU (`moegpu.grouped_gemm`'s
    `rounded_inputs`) and as a 16-bit framework holds them: the values
    the recipe quantizes next are then those a bf16 step computes.
  }];
  let arguments = (ins MoeGpu_In:$gu, MoeGpu_In:$gs, MoeGpu_In:$groups,
                       MoeGpu_Out:$dgu, MoeGpu_Out:$dg, MoeGpu_Out:$du,
                       MoeGpu_OptIn:$weight,
                       Arg<Optional<AnyMemRef>, "", [MemRead, MemWrite]>:
                           $row_grad,
                       MoeGpu_OptIn:$dy, MoeGpu_OptIn:$b2,
                       MoeGpu_OptIn:$out_dy, MoeGpu_OptIn:$down,
                       OptionalAttr<F64Attr>:$alpha,
                       OptionalAttr<F64Attr>:$limit, UnitAttr:$split,
                       UnitAttr:$rounded_inputs);
  let assemblyFormat = [{
    $gu `,` $gs `,` $groups `,` $dgu `,` $dg `,` $du
    (`weight` `(` $weight^ `,` $row_grad `:` type($weight) `,`
     type($row_grad) `)`)?
    (`down_bias` `(` $dy^ `,` $b2 `:` type($dy) `,` type($b2) `)`)?
    (`combine` `(` $out_dy^ `,` $down `:` type($out_dy) `,` type($down)
     `)`)?
    attr-dict `:` type($gu) `,` type($gs) `,` type($groups) `,` type($dgu)
    `,` type($dg) `,` type($du)
  }];
}

def MoeGpu_RouteGradOp : MoeGpu_KernelOp<"route_grad",
    [AttrSizedOperandSegments]> {
  let summary = "The router logits' gradient from the routing weights'";
  let description = [{
    One thread per token: the scores again from `logits` (plus
    `router_bias`; `scoring` sigmoid or softmax) into `dl` (`[T, E]` f32),
    the selected scores' gradient from `dtw` (`[T, k]`: the routing
    weights', through `normalize` and `routed_scale`), then the logits',
    in place; with `dl_half`, also rounded to its type for the router's
    gradient GEMMs.
  }];
  let arguments = (ins MoeGpu_In:$logits, MoeGpu_OptIn:$router_bias,
                       MoeGpu_In:$ids, MoeGpu_In:$dtw, MoeGpu_Out:$dl,
                       MoeGpu_OptOut:$dl_half, MoeGpu_ScoringAttr:$scoring,
                       UnitAttr:$normalize,
                       DefaultValuedAttr<F64Attr, "1.0">:$routed_scale);
  let assemblyFormat = [{
    $logits `,` $ids `,` $dtw `,` $dl
    (`router_bias` `(` $router_bias^ `:` type($router_bias) `)`)?
    (`half` `(` $dl_half^ `:` type($dl_half) `)`)? attr-dict `:`
    type($logits) `,` type($ids) `,` type($dtw) `,` type($dl)
  }];
}

def MoeGpu_InputGradOp : MoeGpu_KernelOp<"input_grad",
    [AttrSizedOperandSegments]> {
  let summary = "The layer input's gradient";
  let description = [{
    `dx[t, h] = sum_j drows[row_map[t, j], h]` (each times its token's
    weight rounded to the compute type with `scales`: Llama 4), plus the
    router's part (`router_dx[t, h]` from a GEMM, or `sum_e dl[t, e] *
    router[e, h]`), plus `shared_dx[t, h]`, plus `shared_dz[t, 0] *
    gate[0, h]` (Qwen2-MoE's gate). A CTA per token.
  }];
  let arguments = (ins MoeGpu_In:$drows, MoeGpu_In:$row_map,
                       MoeGpu_OptIn:$scales, MoeGpu_OptIn:$router_dx,
                       MoeGpu_OptIn:$dl, MoeGpu_OptIn:$router,
                       MoeGpu_OptIn:$shared_dx, MoeGpu_OptIn:$shared_dz,
                       MoeGpu_OptIn:$gate, MoeGpu_Out:$dx);
  let assemblyFormat = [{
    $drows `,` $row_map `,` $dx
    (`scales` `(` $scales^ `:` type($scales) `)`)?
    (`router_dx` `(` $router_dx^ `:` type($router_dx) `)`)?
    (`router` `(` $dl^ `,` $router `:` type($dl) `,` type($router) `)`)?
    (`shared` `(` $shared_dx^ `:` type($shared_dx) `)`)?
    (`gate` `(` $shared_dz^ `,` $gate `:` type($shared_dz) `,` type($gate)
     `)`)? attr-dict `:` type($drows) `,` type($row_map) `,` type($dx)
  }];
}

def MoeGpu_SharedScaleGradOp : MoeGpu_KernelOp<"shared_scale_grad"> {
  let summary = "The gradient of Qwen2-MoE's shared-expert gate logit";
  let description = [{
    `dz[t, 0] = (dy[t] . out[t]) * s (1 - s)`, s = `scale[t]` (the forward
    pass's sigmoid): one warp per token.
  }];
  let arguments = (ins MoeGpu_In:$dy, MoeGpu_In:$out, MoeGpu_In:$scale,
                       MoeGpu_Out:$dz);
  let assemblyFormat = [{
    $dy `,` $out `,` $scale `,` $dz attr-dict `:` type($dy) `,` type($out)
    `,` type($scale) `,` type($dz)
  }];
}

def MoeGpu_RouterGradOp : MoeGpu_KernelOp<"router_grad"> {
  let summary = "A router weight's gradient (SIMT)";
  let description = [{
    `grad[e, h] = sum_t dl[t, e] * x[t, h]` in token order: a CTA per row
    e. `dl` is `[T, E]` f32, `x` `[T, H]`, `grad` `[E, H]` f32.
  }];
  let arguments = (ins MoeGpu_In:$dl, MoeGpu_In:$x, MoeGpu_Out:$grad);
  let assemblyFormat = [{
    $dl `,` $x `,` $grad attr-dict `:` type($dl) `,` type($x) `,` type($grad)
  }];
}

def MoeGpu_TokenOffsetsOp : MoeGpu_KernelOp<"token_offsets"> {
  let summary = "One group of every token: [0, T]";
  let arguments = (ins MoeGpu_In:$x, MoeGpu_Out:$offsets);
  let assemblyFormat = "$x `,` $offsets attr-dict `:` type($x) `,` type($offsets)";
}

def MoeGpu_ExpertLoadOp : MoeGpu_KernelOp<"expert_load"> {
  let summary = "Each expert's routed tokens on this rank";
  let description = [{
    `load[e] = sum_c counts[c * E + e]` as f32, over the `chunks` token
    chunks (counts are chunk-major). A thread per expert.
  }];
  let arguments = (ins MoeGpu_In:$counts, MoeGpu_Out:$load,
                       DefaultValuedAttr<I64Attr, "1">:$chunks);
  let assemblyFormat = [{
    $counts `,` $load attr-dict `:` type($counts) `,` type($load)
  }];
}

def MoeGpu_BiasUpdateOp : MoeGpu_KernelOp<"bias_update"> {
  let summary = "DeepSeek-V3's auxiliary-loss-free bias update";
  let description = [{
    In place, a thread per expert: `bias[e] += gamma * sign(T * k / E -
    load[e])`, T every rank's tokens and gamma from `hyper`, `load` summed
    over the ranks, k `top_k`. With `rejected` (update_verdict's), nothing
    changes when it is not 0.
  }];
  let arguments = (ins MoeGpu_In:$load, MoeGpu_In:$hyper,
                       MoeGpu_InOut:$bias, MoeGpu_OptIn:$rejected,
                       I64Attr:$top_k);
  let assemblyFormat = [{
    $load `,` $hyper `,` $bias
    (`rejected` `(` $rejected^ `:` type($rejected) `)`)? attr-dict
    `:` type($load) `,` type($hyper) `,` type($bias)
  }];
}

def MoeGpu_AdamWOp : MoeGpu_KernelOp<"adamw", [AttrSizedOperandSegments]> {
  let summary = "AdamW on every f32 master weight, in place, in one launch";
  let description = [{
    For each weight i: one AdamW step with bias-corrected moments and
    decoupled weight decay on the master `params[i]` and its moments `m[i]`
    and `v[i]` from its gradient `grads[i]` (all four of one static shape;
    master and gradient f32, the moments both f32 or both bf16, as
    DeepSeek-V3 kept them: widened when loaded, rounded to the nearest even
    once when stored, the master computed from the unrounded moments), the
    hyperparameters (learning rate, step, betas, epsilon,
    decay) from `hyper`. A grid-stride loop per weight, one after another,
    so that one launch reads each master, moment and gradient once and
    writes each master and moment once (as PyTorch's fused and Apex's
    multi-tensor AdamW do).

    With `copies` (one per weight, `layouts` as `compute_copies`'s): the
    new master is also rounded into its compute copy, the one the next
    step's GEMMs read, while it is in registers; with `copied` (indices
    of `params`, ascending) only those weights have one, in that order
    (an FP8 expert's master has none: its codes are quantized per block
    after the update, by `moegpu.quantize_blocks`). With `bounds`
    (`update_check`'s, `[W, 3]` i32): each weight's largest |master|,
    |first moment| and second moment raised to the new values' (one
    atomic max per warp each), so that the next step's check knows them
    without reading the state. With `rejected` (update_verdict's): nothing
    changes when it is not 0, as PyTorch's fused AdamW does with
    `found_inf`.

    ```mlir
    moegpu.adamw %hyper params(%p : memref<8x64xf32>) m(%m : memref<8x64xf32>)
      v(%v : memref<8x64xf32>) grads(%g : memref<8x64xf32>)
      copies(%c : memref<8x64xbf16>) layouts [#moegpu.copy_layout<same>]
      rejected(%r : memref<1xf32>) : memref<8xf32>
    ```
  }];
  let arguments = (ins MoeGpu_In:$hyper,
                       Arg<Variadic<AnyMemRef>, "", [MemRead, MemWrite]>:$params,
                       Arg<Variadic<AnyMemRef>, "", [MemRead, MemWrite]>:$m,
                       Arg<Variadic<AnyMemRef>, "", [MemRead, MemWrite]>:$v,
                       Arg<Variadic<AnyMemRef>, "", [MemRead]>:$grads,
                       Arg<Variadic<AnyMemRef>, "", [MemWrite]>:$copies,
                       OptionalAttr<MoeGpu_CopyLayoutArrayAttr>:$layouts,
                       OptionalAttr<DenseI64ArrayAttr>:$copied,
                       Arg<Optional<AnyMemRef>, "", [MemRead, MemWrite]>:$bounds,
                       MoeGpu_OptIn:$rejected);
  let assemblyFormat = [{
    $hyper `params` `(` $params `:` type($params) `)`
    `m` `(` $m `:` type($m) `)` `v` `(` $v `:` type($v) `)`
    `grads` `(` $grads `:` type($grads) `)`
    (`copies` `(` $copies^ `:` type($copies) `)`)? (`layouts` $layouts^)?
    (`bounds` `(` $bounds^ `:` type($bounds) `)`)?
    (`rejected` `(` $rejected^ `:` type($rejected) `)`)? attr-dict
    `:` type($hyper)
  }];
}

def MoeGpu_GradStatsOp : MoeGpu_KernelOp<"grad_stats"> {
  let summary = "Each gradient's sum of squares and largest magnitude";
  let description = [{
    For each weight i, over its gradient `grads[i]` (f32): the sum of the
    squares into `grad_sq[i]` (f32, its norm and whether it is finite) and
    the largest |g| into `grad_max[i]` (i32: the f32's bits, whose order is
    the order of non-negative floats; NaN above every number), one atomic
    per warp each. A grid-stride loop per weight: the only read of the
    gradients before the update.

    ```mlir
    moegpu.grad_stats %grad_sq, %grad_max grads(%g : memref<8x64xf32>)
      : memref<1xf32>, memref<1xi32>
    ```
  }];
  let arguments = (ins MoeGpu_InOut:$grad_sq, MoeGpu_InOut:$grad_max,
                       Arg<Variadic<AnyMemRef>, "", [MemRead]>:$grads);
  let assemblyFormat = [{
    $grad_sq `,` $grad_max `grads` `(` $grads `:` type($grads) `)` attr-dict
    `:` type($grad_sq) `,` type($grad_max)
  }];
}

def MoeGpu_UpdateCheckOp : MoeGpu_KernelOp<"update_check",
    [AttrSizedOperandSegments]> {
  let summary = "Whether an update would make the state non-finite";
  let description = [{
    For each weight i (`params`, `m`, `v`, `grads` as `adamw`'s): the count
    of elements whose AdamW step would make the master or a moment
    non-finite into `bad[i]` (one atomic per warp). Nothing else of the
    state is written.

    With `bounds` (`[W, 3]` i32, f32 bits: each weight's largest |master|,
    |first moment| and second moment, a negative one counted as +inf) and
    `valid` (compute_copies' flag): when the flag is set the bounds hold
    (`adamw` keeps them), and a weight whose bounds, largest |gradient|
    (`grad_max`, grad_stats') and hyperparameters show every value of its
    update finite (each below a quarter of the largest float, the betas in
    [0, 1], epsilon positive) is not read at all: its count is 0. Else
    (the flag clear: the host wrote the state) every element is checked,
    and the bounds taken from the state as it is.

    ```mlir
    moegpu.update_check %hyper, %grad_max, %bad params(%p : memref<8x64xf32>)
      m(%m : memref<8x64xf32>) v(%v : memref<8x64xf32>)
      grads(%g : memref<8x64xf32>) valid(%valid : memref<1xf32>)
      bounds(%b : memref<1x3xi32>) : memref<8xf32>, memref<1xi32>,
      memref<1xf32>
    ```
  }];
  let arguments = (ins MoeGpu_In:$hyper, MoeGpu_In:$grad_max,
                       MoeGpu_InOut:$bad,
                       Arg<Variadic<AnyMemRef>, "", [MemRead]>:$params,
                       Arg<Variadic<AnyMemRef>, "", [MemRead]>:$m,
                       Arg<Variadic<AnyMemRef>, "", [MemRead]>:$v,
                       Arg<Variadic<AnyMemRef>, "", [MemRead]>:$grads,
                       MoeGpu_OptIn:$valid,
                       Arg<Optional<AnyMemRef>, "", [MemRead, MemWrite]>:$bounds);
  let assemblyFormat = [{
    $hyper `,` $grad_max `,` $bad `params` `(` $params `:` type($params) `)`
    `m` `(` $m `:` type($m) `)` `v` `(` $v `:` type($v) `)`
    `grads` `(` $grads `:` type($grads) `)`
    (`valid` `(` $valid^ `:` type($valid) `)`)?
    (`bounds` `(` $bounds^ `:` type($bounds) `)`)? attr-dict
    `:` type($hyper) `,` type($grad_max) `,` type($bad)
  }];
}

def MoeGpu_UpdateVerdictOp : MoeGpu_KernelOp<"update_verdict",
    [AllTypesMatch<["grad_sq", "bad"]>]> {
  let summary = "Whether a training step's update is applied, on the device";
  let description = [{
    One thread: `rejected[0]` is 0 when the loss and every weight's sum of
    gradient squares (`grad_sq`, grad_stats') are finite and no
    weight's update would make a value non-finite (`bad` all 0), else 1.
    The update's kernels read it and change nothing when it is not 0; with
    expert parallelism the schedule sums it over the ranks first, so that
    every rank decides alike. The host reads it only to report the step.
    With `copies_valid`: 1 into it, the compute copies being those of the
    masters from here on (the update rewrites both, or neither).

    ```mlir
    moegpu.update_verdict %loss, %grad_sq, %bad, %rejected
      : memref<1xf32>, memref<6xf32>, memref<1xf32>
    ```
  }];
  let arguments = (ins MoeGpu_In:$loss, MoeGpu_In:$grad_sq, MoeGpu_In:$bad,
                       MoeGpu_Out:$rejected, MoeGpu_OptOut:$copies_valid);
  let assemblyFormat = [{
    $loss `,` $grad_sq `,` $bad `,` $rejected
    (`copies_valid` `(` $copies_valid^ `:` type($copies_valid) `)`)?
    attr-dict `:` type($loss) `,` type($grad_sq) `,` type($rejected)
  }];
}

//===----------------------------------------------------------------------===//
// Device-initiated exchanges over symmetric memory
//===----------------------------------------------------------------------===//

def MoeGpu_EpCountsOp : MoeGpu_KernelOp<"ep_counts"> {
  let summary = "Exchange the dispatch's sizes between the ranks, on the device";
  let description = [{
    The sizes part of an expert-parallel dispatch without the host, over
    symmetric memory (`table` and `flags` are in every rank's window;
    `peers` is the runtime's `peers` buffer: for each of the `ranks` ranks
    the byte distance from this rank's address of a window byte to that
    rank's, then this rank, the wait's limit in nanoseconds and the rows a
    rank can receive). The rows are in C token chunks, one
    `ep_group_offsets` buffer a chunk: `offsets` holds C x E segments
    (chunk-major, E experts) plus one. One CTA:

    1. the pass's epoch, `epoch[0] + 1`, kept in `epoch`;
    2. this rank's size of every (chunk, expert) segment
       (`offsets[i + 1] - offsets[i]`) into row `rank` of every rank's
       `table` (`ranks x C x E`), then `flags[rank] = epoch` on every rank,
       a release at system scope;
    3. every rank's flag waited for (acquire), up to the limit: past it,
       `status = [1, the rank]` and every later exchange kernel of the pass
       does nothing;
    4. every rank's received rows over all chunks against the capacity (all
       ranks see the same table, so all stop alike): past it,
       `status = [4, the rank]`;
    5. from the table, chunk c's received rows after chunk c - 1's:
       `ep_offsets[c (E + 1) + l ranks + s]`, where the segment of local
       expert l from source rank s starts, and `ep_offsets[c (E + 1) + E]`,
       where the chunk ends, as the host path lays them out; chunk c's
       `ep_group_offsets`, each local expert's rows; `send_pos[c E + e]`,
       where this rank's segment (c, e) starts in its owner's received
       rows; and `back_pos[c E + i]`, where received segment i of chunk c
       started in its source's dispatched rows.

    ```mlir
    moegpu.ep_counts %offsets, %table, %flags, %epoch, %peers, %ep_offsets,
        %send_pos, %back_pos, %status groups(%ep_group_offsets : memref<5xi32>)
        {ranks = 2 : i64}
      : memref<9xi32>, memref<16xi32>, memref<4xi32>, memref<1xi32>,
        memref<5xi64>, memref<9xi32>, memref<8xi32>, memref<8xi32>,
        memref<2xi32>
    ```
  }];
  let arguments = (ins MoeGpu_In:$offsets, MoeGpu_InOut:$table,
                       MoeGpu_InOut:$flags, MoeGpu_InOut:$epoch,
                       MoeGpu_In:$peers, MoeGpu_Out:$ep_offsets,
                       MoeGpu_Out:$send_pos, MoeGpu_Out:$back_pos,
                       MoeGpu_InOut:$status,
                       Arg<Variadic<AnyMemRef>, "", [MemWrite]>:$ep_group_offsets,
                       I64Attr:$ranks);
  let assemblyFormat = [{
    $offsets `,` $table `,` $flags `,` $epoch `,` $peers `,` $ep_offsets `,`
    $send_pos `,` $back_pos `,` $status
    `groups` `(` $ep_group_offsets `:` type($ep_group_offsets) `)`
    attr-dict `:`
    type($offsets) `,` type($table) `,` type($flags) `,` type($epoch) `,`
    type($peers) `,` type($ep_offsets) `,` type($send_pos) `,`
    type($back_pos) `,` type($status)
  }];
  let extraClassDeclaration = [{
    /// The token chunks: one ep_group_offsets buffer each.
    int64_t getChunks() { return getEpGroupOffsets().size(); }
  }];
}

def MoeGpu_EpDirection : I32EnumAttr<"EpDirection",
    "which way a device-initiated exchange moves rows", [
      I32EnumAttrCase<"Dispatch", 0, "dispatch">,
      I32EnumAttrCase<"Combine", 1, "combine">
    ]> {
  let cppNamespace = "::mlir::moegpu";
  let genSpecializedAttr = 0;
}

def MoeGpu_EpDirectionAttr
    : EnumAttr<MoeGpu_Dialect, MoeGpu_EpDirection, "ep_direction"> {
  let assemblyFormat = "`<` $value `>`";
}

def MoeGpu_EpSendOp : MoeGpu_KernelOp<"ep_send", [AttrSizedOperandSegments]> {
  let summary = "Store rows into the ranks' symmetric buffers, then signal";
  let description = [{
    The rows of an expert-parallel exchange, stored by this rank straight
    into each destination's copy of `to` (a buffer in the symmetric window,
    addressed through `peers`, see `ep_counts`). Segment i of `rows`
    (`segments[i]` to `segments[i + 1]`, E segments) goes to rank
    `i / (E / ranks)` (`dispatch`: segments are experts, each rank owns a
    block of them) or `i % ranks` (`combine`: segments are (local expert,
    source rank)), where its rows start at `positions[i]`; `weights`, one f32 per
    row, go the same way into `to_weights`. In C token chunks (`chunks`,
    the layout of `ep_counts`) the send moves chunk `chunk`'s segments:
    dispatch, `segments[chunk E .. (chunk + 1) E]` of C x E + 1; combine,
    `segments[chunk (E + 1) ..]` of C x (E + 1); positions from
    `positions[chunk E]`. A warp copies a row (16-byte
    chunks where the row allows), the warps of the grid striding over the
    rows; then each CTA adds 1 to `flags[slot]` (a word past the ranks'
    flags of the sizes) of every rank, a release at
    system scope after a fence, so a rank has its rows when its flag counts
    every CTA of every rank (`ep_wait`). Nothing waits here: the grid need
    not be resident at once. After a failed wait (`status[0]` not 0) it
    does nothing.

    ```mlir
    moegpu.ep_send <dispatch> %offsets, %send_pos, %rows, %ep_rows,
        weights(%row_weight, %ep_row_weight), %flags, %status, %peers
        {ranks = 2 : i64, slot = 2 : i64}
      : memref<9xi32>, memref<8xi32>, memref<?x64xbf16>, memref<?x64xbf16>,
        memref<?xf32>, memref<?xf32>, memref<4xi32>, memref<2xi32>,
        memref<5xi64>
    ```
  }];
  let arguments = (ins MoeGpu_EpDirectionAttr:$direction,
                       MoeGpu_In:$segments, MoeGpu_In:$positions,
                       MoeGpu_In:$rows, MoeGpu_InOut:$to,
                       MoeGpu_OptIn:$weights, MoeGpu_OptOut:$to_weights,
                       MoeGpu_InOut:$flags, MoeGpu_In:$status,
                       MoeGpu_In:$peers, I64Attr:$ranks, I64Attr:$slot,
                       DefaultValuedAttr<I64Attr, "0">:$chunk,
                       DefaultValuedAttr<I64Attr, "1">:$chunks);
  let assemblyFormat = [{
    $direction $segments `,` $positions `,` $rows `,` $to `,`
    (`weights` `(` $weights^ `,` $to_weights `:` type($weights) `,`
     type($to_weights) `)` `,`)?
    $flags `,` $status `,` $peers attr-dict `:` type($segments) `,`
    type($positions) `,` type($rows) `,` type($to) `,` type($flags) `,`
    type($status) `,` type($peers)
  }];
}

def MoeGpu_EpWaitOp : MoeGpu_KernelOp<"ep_wait"> {
  let summary = "Wait until every rank's ep_send of this pass has signalled";
  let description = [{
    One thread adds `ranks x senders` (every CTA of every rank's `ep_send`
    on this flag) to `waited[slot]`, this rank's count of the signals it
    has waited for on each flag word, and spins (acquire at system scope,
    with nanosleep between tries) until `flags[slot]` reaches it, up to the
    limit in `peers` (see `ep_counts`): past it, `status = [code, slot]`
    (`code`: 2 for a dispatch, 3 for a combine). The kernels after it on
    the stream then see every rank's rows. A count a flag keeps it right
    whichever schedules ran before (a forward pass sends on fewer flags
    than a training step).

    ```mlir
    moegpu.ep_wait %flags, %waited, %status, %peers
        {ranks = 2 : i64, slot = 2 : i64, senders = 20 : i64, code = 2 : i64}
      : memref<4xi32>, memref<4xi32>, memref<2xi32>, memref<5xi64>
    ```
  }];
  let arguments = (ins MoeGpu_In:$flags, MoeGpu_InOut:$waited,
                       MoeGpu_InOut:$status, MoeGpu_In:$peers,
                       I64Attr:$ranks, I64Attr:$slot, I64Attr:$senders,
                       I64Attr:$code);
  let assemblyFormat = [{
    $flags `,` $waited `,` $status `,` $peers attr-dict `:` type($flags) `,`
    type($waited) `,` type($status) `,` type($peers)
  }];
}

#endif // MOE_DIALECT_MOEGPU_MOEGPUKERNELOPS_TD
