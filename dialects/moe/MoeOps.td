//===- MoeOps.td - Operations of the moe dialect -----------*- tablegen -*-===//
//
// Part of moe-compiler.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_DIALECT_MOE_MOEOPS_TD
#define MOE_DIALECT_MOE_MOEOPS_TD

include "moe/MoeDialect.td"
include "moe/MoeAttrs.td"
include "mlir/IR/CommonTypeConstraints.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

//===----------------------------------------------------------------------===//
// Type constraints
//===----------------------------------------------------------------------===//

defvar Moe_ElementTypes = [F32, BF16, F16];
def Moe_Activations : TensorRankOf<Moe_ElementTypes, [2]>;
def Moe_ExpertWeights : TensorRankOf<Moe_ElementTypes, [3]>;
/// Weights of the expert FFNs: the activations' types, or e4m3 (OCP FP8,
/// `f8E4M3FN`) with one f32 scale per 128 x 128 block.
defvar Moe_WeightTypes = [F32, BF16, F16, F8E4M3FN];
def Moe_FfnWeights : TensorRankOf<Moe_WeightTypes, [3]>;
def Moe_FfnMatrix : TensorRankOf<Moe_WeightTypes, [2]>;
def Moe_BlockScales : TensorRankOf<[F32], [3]>;
def Moe_F32Matrix : TensorRankOf<[F32], [2]>;
def Moe_F32Vector : TensorRankOf<[F32], [1]>;
def Moe_I32Matrix : TensorRankOf<[I32], [2]>;
def Moe_I32Vector : TensorRankOf<[I32], [1]>;

/// Ops whose result types follow from their operands: the inferred types may
/// be less static than the declared ones (a dynamic token count).
class Moe_InferredOp<string mnemonic, list<Trait> traits = []>
    : Moe_Op<mnemonic, !listconcat(traits,
                                   [InferTypeOpAdaptorWithIsCompatible])>;

//===----------------------------------------------------------------------===//
// moe.layer
//===----------------------------------------------------------------------===//

def Moe_LayerOp : Moe_InferredOp<"layer", [Pure, AttrSizedOperandSegments]> {
  let summary = "A whole Mixture-of-Experts layer";
  let description = [{
    `y = combine(experts(dispatch(x, topk(router(x))))) + shared(x)` as
    defined by `config`. Operands, with T tokens, H = `hidden`,
    E = `experts`, F = `ffn`, S = `shared_experts * shared_ffn`:

    - `x`: `[T, H]` activations of element type `dtype`;
    - `router(w)`: the router weight `[E, H]` (`dtype` or f32), and
      `bias(b)`, the `[E]` f32 score-correction bias, present exactly when
      `score_bias`;
    - `experts(gate, up, down)`: `[E, F, H]`, `[E, F, H]`, `[E, H, F]`;
    - `shared(gate, up, down)`: `[S, H]`, `[S, H]`, `[H, S]`, present
      exactly when `shared_experts > 0`;
    - `shared_gate(g)`: `[1, H]`, present exactly when `shared_gate`;
    - `output_bias(b)`: `[H]`, added to every token's output, present
      exactly when `output_bias`;
    - `router_bias(b)`: `[E]` (the router weight's element type), added to
      the router logits, present exactly when `router_bias`;
    - `expert_bias(gate, up, down)`: `[E, F]`, `[E, F]`, `[E, H]`, the
      routed experts' projection biases, present exactly when
      `expert_bias`;
    - `scales(gate, up, down)` and `shared_scales(gate, up, down)`: with
      `expert_dtype = f8E4M3FN` the routed and shared weights are e4m3
      codes, and these are their f32 scales, one per 128 x 128 block of
      each (out, in) matrix: `[E, ceil(F/128), ceil(H/128)]`, ...,
      `[ceil(S/128), ceil(H/128)]`, ... (a weight is its codes times its
      block's scale, as the `weight_scale_inv` of DeepSeek-V3's
      checkpoints).

    The result is `[T, H]` of element type `dtype`. `partition`, when
    present, is the SM split the layer's kernels are compiled for.

    With `ep_size = N` (set by `moe-expert-parallel`) the layer is one rank's
    share of an expert-parallel layer: `x` holds this rank's tokens and the
    expert weights only its `E / N` consecutive experts (`[E / N, F, H]`,
    ...); the router, bias and shared experts are replicated. With
    `ep_chunks = C > 1` its tokens are exchanged in C chunks so that one
    chunk's all-to-all overlaps another chunk's expert computation.

    ```mlir
    %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd)
           {config = #moe.layer_config<hidden = 64, experts = 8, top_k = 2,
                                       ffn = 32, dtype = f32>}
           : (tensor<?x64xf32>, tensor<8x64xf32>, tensor<8x32x64xf32>,
              tensor<8x32x64xf32>, tensor<8x64x32xf32>) -> tensor<?x64xf32>
    ```
  }];
  let arguments = (ins
    Moe_Activations:$input,
    TensorRankOf<Moe_ElementTypes, [2]>:$router_weight,
    Optional<Moe_F32Vector>:$score_bias,
    Moe_FfnWeights:$gate_weight,
    Moe_FfnWeights:$up_weight,
    Moe_FfnWeights:$down_weight,
    Optional<Moe_FfnMatrix>:$shared_gate_weight,
    Optional<Moe_FfnMatrix>:$shared_up_weight,
    Optional<Moe_FfnMatrix>:$shared_down_weight,
    Optional<Moe_Activations>:$shared_expert_gate,
    Optional<TensorRankOf<Moe_ElementTypes, [1]>>:$output_bias,
    Optional<TensorRankOf<Moe_ElementTypes, [1]>>:$router_bias,
    Optional<Moe_Activations>:$gate_bias,
    Optional<Moe_Activations>:$up_bias,
    Optional<Moe_Activations>:$down_bias,
    Optional<Moe_BlockScales>:$gate_scale,
    Optional<Moe_BlockScales>:$up_scale,
    Optional<Moe_BlockScales>:$down_scale,
    Optional<Moe_F32Matrix>:$shared_gate_scale,
    Optional<Moe_F32Matrix>:$shared_up_scale,
    Optional<Moe_F32Matrix>:$shared_down_scale,
    Moe_LayerConfigAttr:$config,
    OptionalAttr<Moe_SmPartitionAttr>:$partition,
    DefaultValuedAttr<I64Attr, "1">:$ep_size,
    DefaultValuedAttr<I64Attr, "1">:$ep_chunks
  );
  let results = (outs Moe_Activations:$output);
  let assemblyFormat = [{
    $input `router` `(` $router_weight (`,` `bias` $score_bias^)? `)`
    `experts` `(` $gate_weight `,` $up_weight `,` $down_weight `)`
    (`scales` `(` $gate_scale^ `,` $up_scale `,` $down_scale `)`)?
    (`shared` `(` $shared_gate_weight^ `,` $shared_up_weight `,`
                  $shared_down_weight `)`)?
    (`shared_scales` `(` $shared_gate_scale^ `,` $shared_up_scale `,`
                         $shared_down_scale `)`)?
    (`shared_gate` `(` $shared_expert_gate^ `)`)?
    (`output_bias` `(` $output_bias^ `)`)?
    (`router_bias` `(` $router_bias^ `)`)?
    (`expert_bias` `(` $gate_bias^ `,` $up_bias `,` $down_bias `)`)?
    attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Routing
//===----------------------------------------------------------------------===//

def Moe_RouterOp : Moe_InferredOp<"router", [Pure]> {
  let summary = "Router scores of every token for every expert";
  let description = [{
    `scores[t, e] = scoring(sum_h x[t, h] * w[e, h] + b[e])`, computed and
    returned in f32, with `b` the optional `bias` (`[E]`, the weight's
    element type; GPT-OSS's router bias) or 0. `scoring` is `softmax` (over the E experts of a token),
    `sigmoid` (elementwise) or `sparsemixer` (none: the logits, which
    moe.topk's `sparsemixer` turns into weights).

    ```mlir
    %s = moe.router %x, %w {scoring = #moe.scoring<sigmoid>}
           : tensor<?x64xbf16>, tensor<8x64xbf16> -> tensor<?x8xf32>
    ```
  }];
  let arguments = (ins Moe_Activations:$input, Moe_Activations:$weight,
                       Optional<TensorRankOf<Moe_ElementTypes, [1]>>:$bias,
                       Moe_ScoringFuncAttr:$scoring);
  let results = (outs Moe_F32Matrix:$scores);
  let assemblyFormat = [{
    $input `,` $weight (`bias` $bias^)? attr-dict `:` type($input) `,`
    type($weight) (`,` type($bias)^)? `->` type($scores)
  }];
  let hasVerifier = 1;
}

def Moe_TopKOp : Moe_InferredOp<"topk", [Pure]> {
  let summary = "Group-limited top-k expert selection";
  let description = [{
    Selects `k` distinct experts per token from `scores` `[T, E]` and returns
    their ids `[T, k]` (i32, in descending order of biased score) and routing
    weights `[T, k]` (f32).

    Selection uses `scores + bias` when `bias` (`[E]`, f32) is given. With
    `groups > 1`, the experts form `groups` groups of `E / groups`
    consecutive experts; a group's score is its best selection score
    (`group_score = max`) or the sum of its two best (`sum_top2`); only the
    experts of the `topk_groups` best groups can be chosen. The weights are
    the unbiased scores of the chosen experts, divided by their sum when
    `normalize` is set, then multiplied by `scale`. Ties go to the lower
    index.

    With `sparsemixer = eps` (Phi-3.5-MoE; `k = 2`, no bias, groups or
    `normalize`), `scores` are logits: the first expert is the best logit
    `m1`, the second the best of the others `m2`, and expert `i`'s weight
    is `1 / sum_e exp(s_e - m_i)` over the logits `s_e` with
    `(m_i - s_e) / max(|s_e|, m_i) <= 2 eps` (for the second, the first
    expert left out), times `scale`.

    ```mlir
    %ids, %w = moe.topk %s bias(%b) {k = 8, groups = 8, topk_groups = 4,
                 group_score = #moe.group_score<sum_top2>, normalize,
                 scale = 2.5 : f64}
               : tensor<?x256xf32>, tensor<256xf32>
               -> tensor<?x8xi32>, tensor<?x8xf32>
    ```
  }];
  let arguments = (ins
    Moe_F32Matrix:$scores,
    Optional<Moe_F32Vector>:$bias,
    I64Attr:$k,
    DefaultValuedAttr<I64Attr, "1">:$groups,
    DefaultValuedAttr<I64Attr, "1">:$topk_groups,
    DefaultValuedAttr<Moe_GroupScoreAttr, "::mlir::moe::GroupScore::Max">
        :$group_score,
    UnitAttr:$normalize,
    DefaultValuedAttr<F64Attr, "1.0">:$scale,
    OptionalAttr<F64Attr>:$sparsemixer
  );
  let results = (outs Moe_I32Matrix:$indices, Moe_F32Matrix:$weights);
  let assemblyFormat = [{
    $scores (`bias` `(` $bias^ `)`)? attr-dict `:` type($scores)
    (`,` type($bias)^)? `->` type($indices) `,` type($weights)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Dispatch, expert compute, combine
//===----------------------------------------------------------------------===//

def Moe_DispatchOp : Moe_InferredOp<"dispatch", [Pure]> {
  let summary = "Permute tokens into an expert-contiguous, padded buffer";
  let description = [{
    For `x` `[T, H]` and the selected expert ids `[T, k]`, writes every
    (token, slot) pair's row of `x` into `rows`, grouped by expert in
    ascending expert order and, within an expert, in ascending token order.
    Each expert's segment starts at a multiple of `alignment` (a power of
    two: the GEMM's M block) and its padding rows are zero. With `scales`
    (f32 `[T, k]`, Llama 4's router scores), the row of (token, slot) is
    `x[t] * scales[t, j]`, the scale rounded to the element type and the
    product computed in f32 and rounded again.

    - `offsets` `[E + 1]`: expert `e` owns rows `[offsets[e], offsets[e+1])`;
      `offsets[0] = 0` and `offsets[E]` is the used row count.
    - `row_map` `[T, k]`: the row of `rows` that holds token `t`'s copy for
      its `j`-th expert.
    - `rows` has a static upper bound of rows that depends only on T, k, E
      and `alignment` (one row for each of min(E, T*k) experts, the rest in
      whole blocks); with a static T the row count must equal it, otherwise
      it is dynamic.

    ```mlir
    %rows, %offsets, %map = moe.dispatch %x, %ids {experts = 8, alignment = 128}
        : tensor<?x64xf32>, tensor<?x2xi32>
        -> tensor<?x64xf32>, tensor<9xi32>, tensor<?x2xi32>
    ```
  }];
  let arguments = (ins Moe_Activations:$input, Moe_I32Matrix:$indices,
                       Optional<Moe_F32Matrix>:$scales,
                       I64Attr:$experts,
                       DefaultValuedAttr<I64Attr, "128">:$alignment);
  let results = (outs Moe_Activations:$rows, Moe_I32Vector:$offsets,
                      Moe_I32Matrix:$row_map);
  let assemblyFormat = [{
    $input `,` $indices (`scales` $scales^)? attr-dict `:` type($input) `,`
    type($indices) (`,` type($scales)^)? `->` type($rows) `,` type($offsets)
    `,` type($row_map)
  }];
  let hasVerifier = 1;
}

def Moe_GroupedMatmulOp : Moe_InferredOp<"grouped_matmul",
                                         [Pure, AttrSizedOperandSegments]> {
  let summary = "Per-expert GEMM over an expert-contiguous buffer";
  let description = [{
    `out[r, n] = sum_k in[r, k] * w[e, n, k] + b[e, n]` for every row `r` in
    `[offsets[e], offsets[e+1])`, with `b` the optional `bias` (`[E, N]`,
    the weight's element type; GPT-OSS's expert biases) or 0; rows past
    `offsets[E]` are zero.
    `w` is `[E, N, K]` (each expert's weight in (out, in) layout), `in`
    `[R, K]`, `offsets` `[E + 1]` i32, the result `[R, N]`. Accumulation is
    in f32; the result has the input's element type.

    With `scale` the weight is FP8 as DeepSeek-V3 computes it: `w` holds
    e4m3 codes (`f8E4M3FN`) and `scale` `[E, ceil(N/128), ceil(K/128)]`
    one f32 scale per 128 x 128 block, and each row of the input is
    quantized per 128 of K before the product: with `a` the block's
    largest magnitude (at least 1e-4), its values become
    `e4m3(in * (448 / a))` (round to nearest even) with the scale
    `a / 448`. `out[r, n]` sums, block by block, the products of the
    codes times both blocks' scales. `recipe`, when present, says how the
    input is scaled (`#moe.fp8_recipe`; with `scaling = tensor`, one scale
    for each expert's rows); without it, as above.

    ```mlir
    %h = moe.grouped_matmul %rows, %w, %offsets
           : tensor<?x64xbf16>, tensor<8x32x64xbf16>, tensor<9xi32>
           -> tensor<?x32xbf16>
    ```
  }];
  let arguments = (ins Moe_Activations:$input, Moe_FfnWeights:$weight,
                       Moe_I32Vector:$offsets,
                       Optional<Moe_Activations>:$bias,
                       Optional<Moe_BlockScales>:$scale,
                       OptionalAttr<Moe_Fp8RecipeAttr>:$recipe);
  let results = (outs Moe_Activations:$output);
  let assemblyFormat = [{
    $input `,` $weight `,` $offsets (`bias` $bias^)? (`scale` $scale^)?
    attr-dict `:` type($input) `,` type($weight) `,` type($offsets)
    (`,` type($bias)^)? (`scale` type($scale)^)? `->` type($output)
  }];
  let hasVerifier = 1;
}

def Moe_SwiGLUOp : Moe_Op<"swiglu", [Pure, SameOperandsAndResultType]> {
  let summary = "SwiGLU: silu(gate) * up, elementwise";
  let description = [{
    `out = gate * sigmoid(gate) * up`, elementwise over two tensors of the
    same type (the gate and up projections of an FFN), computed in f32.
    With `limit` (GPT-OSS's clamped SwiGLU), `out = (clamp(up, -limit,
    limit) + 1) * g * sigmoid(alpha * g)` with `g = min(gate, limit)`.

    ```mlir
    %a = moe.swiglu %g, %u : tensor<?x32xbf16>
    %c = moe.swiglu %g, %u {alpha = 1.702, limit = 7.0} : tensor<?x32xbf16>
    ```
  }];
  let arguments = (ins Moe_Activations:$gate, Moe_Activations:$up,
                       OptionalAttr<F64Attr>:$alpha,
                       OptionalAttr<F64Attr>:$limit);
  let results = (outs Moe_Activations:$output);
  let assemblyFormat = "$gate `,` $up attr-dict `:` type($output)";
  let hasVerifier = 1;
}

def Moe_CombineOp : Moe_InferredOp<"combine", [Pure]> {
  let summary = "Weighted un-permute of expert outputs back to tokens";
  let description = [{
    `y[t, h] = sum_j weights[t, j] * rows[row_map[t, j], h]`, accumulated in
    f32; `rows` `[R, H]`, `row_map` and `weights` `[T, k]`, the result
    `[T, H]` with the element type of `rows`. Without `weights` (the
    dispatch scaled the rows already), the rows are summed as they are.

    ```mlir
    %y = moe.combine %rows, %map, %w
           : tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>
           -> tensor<?x64xf32>
    ```
  }];
  let arguments = (ins Moe_Activations:$rows, Moe_I32Matrix:$row_map,
                       Optional<Moe_F32Matrix>:$weights);
  let results = (outs Moe_Activations:$output);
  let assemblyFormat = [{
    $rows `,` $row_map (`,` $weights^)? attr-dict `:` type($rows) `,`
    type($row_map) (`,` type($weights)^)? `->` type($output)
  }];
  let hasVerifier = 1;
}

def Moe_SharedExpertOp : Moe_InferredOp<"shared_expert",
                                        [Pure, AttrSizedOperandSegments]> {
  let summary = "The shared (dense) expert FFN every token goes through";
  let description = [{
    `y = down(silu(x * gate^T) * (x * up^T))` with `gate`, `up` `[S, H]` and
    `down` `[H, S]`; with `gate(g)` (`[1, H]`, Qwen2-MoE's
    `shared_expert_gate`) the result is multiplied per token by
    `sigmoid(x * g^T)`. Several shared experts of size F act as one of size
    `S = n * F`. With `scales(g, u, d)` the three weights are e4m3 codes
    with f32 block scales, and each projection's input is quantized, as
    `moe.grouped_matmul`'s `scale` and `recipe` define.

    ```mlir
    %s = moe.shared_expert %x, %g, %u, %d
           : (tensor<?x64xf32>, tensor<32x64xf32>, tensor<32x64xf32>,
              tensor<64x32xf32>) -> tensor<?x64xf32>
    ```
  }];
  let arguments = (ins Moe_Activations:$input,
                       Moe_FfnMatrix:$gate_weight,
                       Moe_FfnMatrix:$up_weight,
                       Moe_FfnMatrix:$down_weight,
                       Optional<Moe_Activations>:$expert_gate,
                       Optional<Moe_F32Matrix>:$gate_scale,
                       Optional<Moe_F32Matrix>:$up_scale,
                       Optional<Moe_F32Matrix>:$down_scale,
                       OptionalAttr<Moe_Fp8RecipeAttr>:$recipe);
  let results = (outs Moe_Activations:$output);
  let assemblyFormat = [{
    $input `,` $gate_weight `,` $up_weight `,` $down_weight
    (`gate` `(` $expert_gate^ `)`)?
    (`scales` `(` $gate_scale^ `,` $up_scale `,` $down_scale `)`)?
    attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Expert parallelism
//===----------------------------------------------------------------------===//

def Moe_AllToAllOp : Moe_InferredOp<"all_to_all"> {
  let summary = "Expert-parallel exchange of dispatched rows";
  let description = [{
    A collective over `ep_size` ranks; rank `r` owns the `E / ep_size`
    consecutive experts starting at `r * E / ep_size`.

    - `kind = dispatch`: `input` is this rank's dispatched buffer with
      per-expert `offsets` `[E + 1]` (as produced by `moe.dispatch`). Every
      expert segment is sent to its owner. `output` holds what this rank
      received, ordered by (local expert, source rank), and `output_offsets`
      `[E + 1]` delimits those `E` segments.
    - `kind = combine`: the reverse exchange: `input` is laid out by (local
      expert, source rank) and each segment goes back to its source rank,
      which receives its rows in (expert) order again.

    Segments keep their padding, so the alignment of the dispatched buffer
    holds on the other side. The op communicates, so it is not `Pure`.

    ```mlir
    %recv, %recv_offsets = moe.all_to_all %rows, %offsets
        {ep_size = 4, kind = #moe.all_to_all_kind<dispatch>}
        : tensor<?x64xbf16>, tensor<17xi32> -> tensor<?x64xbf16>, tensor<17xi32>
    ```
  }];
  let arguments = (ins Moe_Activations:$input, Moe_I32Vector:$offsets,
                       I64Attr:$ep_size, Moe_AllToAllKindAttr:$kind);
  let results = (outs Moe_Activations:$output, Moe_I32Vector:$output_offsets);
  let assemblyFormat = [{
    $input `,` $offsets attr-dict `:` type($input) `,` type($offsets) `->`
    type($output) `,` type($output_offsets)
  }];
  let hasVerifier = 1;
}

def Moe_AllToAllStartOp : Moe_Op<"all_to_all_start"> {
  let summary = "Start an all-to-all that completes at its wait";
  let description = [{
    `moe.all_to_all` split in two so that work placed between the halves
    overlaps the exchange: the segment sizes are exchanged here (the
    result `output_offsets` is ready at once), the rows move in the
    background, and `moe.all_to_all_wait` on `handle` returns them.
    Attributes and layouts are those of `moe.all_to_all`. Every start has
    exactly one wait, later in the same block.

    ```mlir
    %h, %recv_offsets = moe.all_to_all_start %rows, %offsets
        {ep_size = 4, kind = #moe.all_to_all_kind<dispatch>}
        : tensor<?x64xbf16>, tensor<17xi32> -> tensor<17xi32>
    %recv = moe.all_to_all_wait %h : tensor<?x64xbf16>
    ```
  }];
  let arguments = (ins Moe_Activations:$input, Moe_I32Vector:$offsets,
                       I64Attr:$ep_size, Moe_AllToAllKindAttr:$kind);
  let results = (outs I64:$handle, Moe_I32Vector:$output_offsets);
  let assemblyFormat = [{
    $input `,` $offsets attr-dict `:` type($input) `,` type($offsets) `->`
    type($output_offsets)
  }];
  let hasVerifier = 1;
}

def Moe_AllToAllWaitOp : Moe_Op<"all_to_all_wait"> {
  let summary = "Wait for the rows of a started all-to-all";
  let description = [{
    The rows `moe.all_to_all_start` sent to this rank, laid out by its
    `output_offsets`: `[?, H]` with the element type of the start's input.
  }];
  let arguments = (ins I64:$handle);
  let results = (outs Moe_Activations:$output);
  let assemblyFormat = "$handle attr-dict `:` type($output)";
  let hasVerifier = 1;
}

def Moe_AllReduceOp : Moe_Op<"all_reduce", [SameOperandsAndResultType]> {
  let summary = "Sum of an f32 tensor over the expert-parallel ranks";
  let description = [{
    Every one of the `ep_size` ranks contributes its `input` and receives
    the elementwise sum. Training uses it for the gradients of the
    replicated weights, the loss and the expert load. The op communicates,
    so it is not `Pure`.

    ```mlir
    %g = moe.all_reduce %grad {ep_size = 2} : tensor<8x64xf32>
    ```
  }];
  let arguments = (ins TensorOf<[F32]>:$input, I64Attr:$ep_size);
  let results = (outs TensorOf<[F32]>:$output);
  let assemblyFormat = "$input attr-dict `:` type($output)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Gradients: the vector-Jacobian products of the expert computation
//===----------------------------------------------------------------------===//

def Moe_SwiGLUGradOp : Moe_Op<"swiglu_grad", [Pure,
    AllTypesMatch<["gate", "up", "grad", "gate_grad", "up_grad"]>]> {
  let summary = "Gradients of moe.swiglu";
  let description = [{
    For `out = silu(gate) * up` and the gradient `grad` of a loss with
    respect to `out`, elementwise with `s = sigmoid(gate)` (in f32):

    ```
    gate_grad = grad * up * s * (1 + gate * (1 - s))
    up_grad   = grad * gate * s
    ```

    With `alpha` and `limit` (moe.swiglu's clamped form), `g = min(gate,
    limit)`, `u = clamp(up, -limit, limit)` and `s = sigmoid(alpha * g)`:

    ```
    gate_grad = grad * (u + 1) * s * (1 + alpha * g * (1 - s))   if gate <= limit, else 0
    up_grad   = grad * g * s                       if -limit <= up <= limit, else 0
    ```

    (at the clamp's bounds the gradient passes, as torch.clamp's does).

    ```mlir
    %dg, %du = moe.swiglu_grad %g, %u, %dy : tensor<?x32xbf16>
    ```
  }];
  let arguments = (ins Moe_Activations:$gate, Moe_Activations:$up,
                       Moe_Activations:$grad, OptionalAttr<F64Attr>:$alpha,
                       OptionalAttr<F64Attr>:$limit);
  let results = (outs Moe_Activations:$gate_grad, Moe_Activations:$up_grad);
  let assemblyFormat = "$gate `,` $up `,` $grad attr-dict `:` type($gate)";
}

def Moe_GroupedMatmulDxOp : Moe_InferredOp<"grouped_matmul_dx", [Pure]> {
  let summary = "Input gradient of moe.grouped_matmul (weights transposed)";
  let description = [{
    For `out = moe.grouped_matmul in, w, offsets` and the gradient `grad`
    (`[R, N]`) of a loss with respect to `out`: `input_grad[r, k] = sum_n
    grad[r, n] * w[e, n, k]` for every row `r` in `[offsets[e],
    offsets[e+1])`; rows past `offsets[E]` are zero. The result is `[R, K]`
    of `grad`'s element type, accumulated in f32: the grouped GEMM of the
    forward pass with each expert's weight transposed. With `scale` the
    weight is e4m3 codes with 128 x 128 block scales, as in
    `moe.grouped_matmul` (FP8 training's Dgrad; its `grad` comes quantized
    from `moe.fp8_quantize`).

    ```mlir
    %dx = moe.grouped_matmul_dx %dy, %w, %offsets
            : tensor<?x32xf32>, tensor<8x32x64xf32>, tensor<9xi32>
            -> tensor<?x64xf32>
    ```
  }];
  let arguments = (ins Moe_Activations:$grad, Moe_FfnWeights:$weight,
                       Moe_I32Vector:$offsets,
                       Optional<Moe_BlockScales>:$scale);
  let results = (outs Moe_Activations:$input_grad);
  let assemblyFormat = [{
    $grad `,` $weight `,` $offsets (`scale` $scale^)? attr-dict `:`
    type($grad) `,` type($weight) `,` type($offsets)
    (`scale` type($scale)^)? `->` type($input_grad)
  }];
  let hasVerifier = 1;
}

def Moe_GroupedMatmulDwOp : Moe_InferredOp<"grouped_matmul_dw", [Pure]> {
  let summary = "Weight gradient of moe.grouped_matmul (k-grouped GEMM)";
  let description = [{
    For `out = moe.grouped_matmul in, w, offsets` and the gradient `grad`
    (`[R, N]`) of a loss with respect to `out`: `weight_grad[e, n, k] =
    sum of grad[r, n] * in[r, k]` over the rows `r` of expert `e`'s segment
    `[offsets[e], offsets[e+1])`: one GEMM per expert whose reduction runs
    over that expert's rows. The result is `[E, N, K]` in f32 (gradients
    accumulate into fp32 master weights); an expert without rows gets
    zeros.

    ```mlir
    %dw = moe.grouped_matmul_dw %x, %dy, %offsets
            : tensor<?x64xbf16>, tensor<?x32xbf16>, tensor<9xi32>
            -> tensor<8x32x64xf32>
    ```
  }];
  let arguments = (ins Moe_Activations:$input, Moe_Activations:$grad,
                       Moe_I32Vector:$offsets);
  let results = (outs TensorRankOf<[F32], [3]>:$weight_grad);
  let assemblyFormat = [{
    $input `,` $grad `,` $offsets attr-dict `:` type($input) `,`
    type($grad) `,` type($offsets) `->` type($weight_grad)
  }];
  let hasVerifier = 1;
}

def Moe_Fp8QuantizeOp : Moe_InferredOp<"fp8_quantize", [Pure]> {
  let summary = "An operand of an FP8 GEMM as its e4m3 tiles represent it";
  let description = [{
    `input` (`[R, K]`) rounded to e4m3 as `recipe` scales it, and returned
    as the f32 values the codes and scales stand for (`code * scale`): what
    an FP8 tensor core multiplies. A tile whose largest magnitude is `a`
    (at least 2^-100: gradients are far below the forward activations'
    floor of 1e-4) has the scale `a / 448` and codes `e4m3(v * (448 / a))`,
    rounded to nearest even.

    With `scaling = block` the tiles are 1 x 128 (each row's 128
    consecutive columns) or, `transposed`, 128 x 1 (each column's 128
    consecutive rows, counted from the start of each expert's segment
    `[segments[e], segments[e+1])`, so that no tile mixes two experts'
    rows: the operands of a k-grouped Wgrad). With `scaling = tensor` each
    segment (one GEMM's operand) is one tile, or without segments the whole
    input. Rows outside every segment are zero.

    ```mlir
    %q = moe.fp8_quantize %dy segments %offsets
           {recipe = #moe.fp8_recipe<>, transposed}
           : tensor<?x64xbf16>, tensor<9xi32> -> tensor<?x64xf32>
    ```
  }];
  let arguments = (ins Moe_Activations:$input,
                       Optional<Moe_I32Vector>:$segments,
                       Moe_Fp8RecipeAttr:$recipe,
                       UnitAttr:$transposed);
  let results = (outs Moe_Activations:$output);
  let assemblyFormat = [{
    $input (`segments` $segments^)? attr-dict `:` type($input)
    (`,` type($segments)^)? `->` type($output)
  }];
  let hasVerifier = 1;
}

def Moe_Fp8QuantizeWeightOp : Moe_Op<"fp8_quantize_weight", [Pure]> {
  let summary = "A weight as e4m3 codes and block scales";
  let description = [{
    The f32 weight `[..., N, K]` (an FP8 layer's master copy) as e4m3
    codes of the same shape and the f32 scales
    `[..., ceil(N/128), ceil(K/128)]` of its 128 x 128 blocks, the form
    `moe.grouped_matmul`'s `scale` takes. With `scaling = block` a block
    whose largest magnitude is `a` has the scale `a / 448`, or 1 when it
    is all zeros; with `scaling = tensor` every block of one (expert's)
    matrix has the scale of the whole matrix.

    ```mlir
    %codes, %scales = moe.fp8_quantize_weight %w {recipe = #moe.fp8_recipe<>}
        : tensor<8x32x64xf32> -> tensor<8x32x64xf8E4M3FN>, tensor<8x1x1xf32>
    ```
  }];
  let arguments = (ins TensorOf<[F32]>:$weight, Moe_Fp8RecipeAttr:$recipe);
  let results = (outs TensorOf<[F8E4M3FN]>:$codes, TensorOf<[F32]>:$scales);
  let assemblyFormat = [{
    $weight attr-dict `:` type($weight) `->` type($codes) `,` type($scales)
  }];
  let hasVerifier = 1;
}

def Moe_CombineGradOp : Moe_InferredOp<"combine_grad", [Pure]> {
  let summary = "Gradients of moe.combine";
  let description = [{
    For `y = moe.combine rows, row_map, weights` and the gradient `grad`
    (`[T, H]`) of a loss with respect to `y`:

    ```
    rows_grad[row_map[t, j], h] = weights[t, j] * grad[t, h]
    weights_grad[t, j]          = sum_h grad[t, h] * rows[row_map[t, j], h]
    ```

    Rows no entry of `row_map` names get zeros, and entries outside the
    buffer contribute nothing (their `weights_grad` is 0). `rows_grad` has
    the type of `rows`; `weights_grad` is `[T, k]` f32.

    ```mlir
    %drows, %dw = moe.combine_grad %dy, %rows, %map, %w
        : tensor<?x64xf32>, tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>
        -> tensor<?x64xf32>, tensor<?x2xf32>
    ```
  }];
  let arguments = (ins Moe_Activations:$grad, Moe_Activations:$rows,
                       Moe_I32Matrix:$row_map, Moe_F32Matrix:$weights);
  let results = (outs Moe_Activations:$rows_grad,
                      Moe_F32Matrix:$weights_grad);
  let assemblyFormat = [{
    $grad `,` $rows `,` $row_map `,` $weights attr-dict `:` type($grad) `,`
    type($rows) `,` type($row_map) `,` type($weights) `->` type($rows_grad)
    `,` type($weights_grad)
  }];
  let hasVerifier = 1;
}

def Moe_DispatchGradOp : Moe_InferredOp<"dispatch_grad", [Pure]> {
  let summary = "Input gradient of moe.dispatch";
  let description = [{
    `moe.dispatch` copies token `t` to rows `row_map[t, j]`; for the
    gradient `rows_grad` (`[R, H]`) of a loss with respect to those rows,
    `input_grad[t, h] = sum_j rows_grad[row_map[t, j], h]`, accumulated in
    f32 (entries outside the buffer are skipped). The result is `[T, H]`
    of `rows_grad`'s element type.

    ```mlir
    %dx = moe.dispatch_grad %drows, %map
            : tensor<?x64xf32>, tensor<?x2xi32> -> tensor<?x64xf32>
    ```
  }];
  let arguments = (ins Moe_Activations:$rows_grad, Moe_I32Matrix:$row_map);
  let results = (outs Moe_Activations:$input_grad);
  let assemblyFormat = [{
    $rows_grad `,` $row_map attr-dict `:` type($rows_grad) `,`
    type($row_map) `->` type($input_grad)
  }];
  let hasVerifier = 1;
}

def Moe_ScaledDispatchGradOp : Moe_InferredOp<"scaled_dispatch_grad",
                                              [Pure]> {
  let summary = "Gradients of moe.dispatch with scales";
  let description = [{
    `moe.dispatch x, ids scales s` writes `x[t] * s[t, j]` (the scale
    rounded to the element type) to row `row_map[t, j]`; for the gradient
    `rows_grad` (`[R, H]`) of a loss with respect to those rows:

    ```
    input_grad[t, h]  = sum_j s[t, j] * rows_grad[row_map[t, j], h]
    scales_grad[t, j] = sum_h rows_grad[row_map[t, j], h] * input[t, h]
    ```

    with the rounded scales, accumulated in f32 (the roundings themselves
    are not differentiated); entries outside the buffer contribute nothing.
    `input_grad` has `rows_grad`'s element type, `scales_grad` is f32.

    ```mlir
    %dx, %ds = moe.scaled_dispatch_grad %drows, %map, %x, %s
        : tensor<?x64xbf16>, tensor<?x1xi32>, tensor<?x64xbf16>,
          tensor<?x1xf32> -> tensor<?x64xbf16>, tensor<?x1xf32>
    ```
  }];
  let arguments = (ins Moe_Activations:$rows_grad, Moe_I32Matrix:$row_map,
                       Moe_Activations:$input, Moe_F32Matrix:$scales);
  let results = (outs Moe_Activations:$input_grad,
                      Moe_F32Matrix:$scales_grad);
  let assemblyFormat = [{
    $rows_grad `,` $row_map `,` $input `,` $scales attr-dict `:`
    type($rows_grad) `,` type($row_map) `,` type($input) `,` type($scales)
    `->` type($input_grad) `,` type($scales_grad)
  }];
  let hasVerifier = 1;
}

def Moe_TopKGradOp : Moe_InferredOp<"topk_grad", [Pure]> {
  let summary = "Score gradient of moe.topk's routing weights";
  let description = [{
    For `ids, weights = moe.topk scores ...` (`weights[t, j] = scale *
    scores[t, ids[t, j]] / Z`, `Z` the sum of the selected scores with
    `normalize`, else 1) and the gradient `weights_grad` (`[T, k]`) of a loss
    with respect to `weights`, the gradient with respect to `scores`
    (`[T, E]` f32):

    ```
    scores_grad[t, ids[t, i]] = scale * (weights_grad[t, i]
        - sum_j weights_grad[t, j] * scores[t, ids[t, j]] / Z) / Z
    ```

    (`scale * weights_grad[t, i]` without `normalize`), zero for experts not
    selected. The selection itself is piecewise constant: no gradient flows
    through the choice or the selection bias. Ids outside `[0, E)` are
    skipped.

    ```mlir
    %ds = moe.topk_grad %scores, %ids, %dw {normalize, scale = 2.5 : f64}
            : tensor<?x8xf32>, tensor<?x2xi32>, tensor<?x2xf32>
            -> tensor<?x8xf32>
    ```
  }];
  let arguments = (ins Moe_F32Matrix:$scores, Moe_I32Matrix:$indices,
                       Moe_F32Matrix:$weights_grad, UnitAttr:$normalize,
                       DefaultValuedAttr<F64Attr, "1.0">:$scale);
  let results = (outs Moe_F32Matrix:$scores_grad);
  let assemblyFormat = [{
    $scores `,` $indices `,` $weights_grad attr-dict `:` type($scores) `,`
    type($indices) `,` type($weights_grad) `->` type($scores_grad)
  }];
  let hasVerifier = 1;
}

def Moe_RouterGradOp : Moe_InferredOp<"router_grad", [Pure]> {
  let summary = "Gradients of moe.router";
  let description = [{
    For `scores = moe.router input, weight {scoring}` and the gradient
    `scores_grad` (`[T, E]` f32) of a loss with respect to `scores`, first
    the logits' gradient `g`:

    ```
    sigmoid: g = scores_grad * scores * (1 - scores)
    softmax: g[t, e] = scores[t, e] * (scores_grad[t, e]
                                       - sum_e' scores_grad[t, e'] * scores[t, e'])
    ```

    then `input_grad = g * weight` (`[T, H]`, the input's element type) and
    `weight_grad = g^T * input` (`[E, H]` f32). `scores` is the forward
    result.

    ```mlir
    %dx, %dw = moe.router_grad %x, %w, %s, %ds {scoring = #moe.scoring<sigmoid>}
        : tensor<?x64xbf16>, tensor<8x64xbf16>, tensor<?x8xf32>, tensor<?x8xf32>
        -> tensor<?x64xbf16>, tensor<8x64xf32>
    ```
  }];
  let arguments = (ins Moe_Activations:$input, Moe_Activations:$weight,
                       Moe_F32Matrix:$scores, Moe_F32Matrix:$scores_grad,
                       Moe_ScoringFuncAttr:$scoring);
  let results = (outs Moe_Activations:$input_grad,
                      Moe_F32Matrix:$weight_grad);
  let assemblyFormat = [{
    $input `,` $weight `,` $scores `,` $scores_grad attr-dict `:`
    type($input) `,` type($weight) `,` type($scores) `,` type($scores_grad)
    `->` type($input_grad) `,` type($weight_grad)
  }];
  let hasVerifier = 1;
}

#endif // MOE_DIALECT_MOE_MOEOPS_TD
