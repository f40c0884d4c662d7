//===- MoeAttrs.td - Attributes and enums of the moe dialect -*- tablegen -*-=//
//
// Part of moe-compiler.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_DIALECT_MOE_MOEATTRS_TD
#define MOE_DIALECT_MOE_MOEATTRS_TD

include "moe/MoeDialect.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"

//===----------------------------------------------------------------------===//
// Enums
//===----------------------------------------------------------------------===//

def Moe_ScoringFunc : I32EnumAttr<"ScoringFunc",
    "function turning router logits into expert scores", [
      I32EnumAttrCase<"Softmax", 0, "softmax">,
      I32EnumAttrCase<"Sigmoid", 1, "sigmoid">,
      I32EnumAttrCase<"Sparsemixer", 2, "sparsemixer">
    ]> {
  let cppNamespace = "::mlir::moe";
  let genSpecializedAttr = 0;
}

def Moe_GroupScore : I32EnumAttr<"GroupScore",
    "how an expert group is scored for group-limited routing", [
      I32EnumAttrCase<"Max", 0, "max">,
      I32EnumAttrCase<"SumTop2", 1, "sum_top2">
    ]> {
  let cppNamespace = "::mlir::moe";
  let genSpecializedAttr = 0;
}

def Moe_Activation : I32EnumAttr<"Activation",
    "gated activation of the expert FFN", [
      I32EnumAttrCase<"SwiGLU", 0, "swiglu">,
      I32EnumAttrCase<"ClampedSwiGLU", 1, "clamped_swiglu">
    ]> {
  let cppNamespace = "::mlir::moe";
  let genSpecializedAttr = 0;
}

def Moe_Fp8Scaling : I32EnumAttr<"Fp8Scaling",
    "how an FP8 recipe scales the values it quantizes", [
      I32EnumAttrCase<"Block", 0, "block">,
      I32EnumAttrCase<"Tensor", 1, "tensor">
    ]> {
  let cppNamespace = "::mlir::moe";
  let genSpecializedAttr = 0;
}

def Moe_AllToAllKind : I32EnumAttr<"AllToAllKind",
    "direction of an expert-parallel exchange", [
      I32EnumAttrCase<"Dispatch", 0, "dispatch">,
      I32EnumAttrCase<"Combine", 1, "combine">
    ]> {
  let cppNamespace = "::mlir::moe";
  let genSpecializedAttr = 0;
}

class Moe_Attr<string name, string attrMnemonic, list<Trait> traits = []>
    : AttrDef<Moe_Dialect, name, traits> {
  let mnemonic = attrMnemonic;
}

/// An enum attribute printed as `#moe.<mnemonic><value>`.
class Moe_EnumAttr<EnumAttrInfo info, string mnemonic>
    : EnumAttr<Moe_Dialect, info, mnemonic> {
  let assemblyFormat = "`<` $value `>`";
}

def Moe_ScoringFuncAttr : Moe_EnumAttr<Moe_ScoringFunc, "scoring">;
def Moe_GroupScoreAttr : Moe_EnumAttr<Moe_GroupScore, "group_score">;
def Moe_AllToAllKindAttr : Moe_EnumAttr<Moe_AllToAllKind, "all_to_all_kind">;

//===----------------------------------------------------------------------===//
// Parameters
//===----------------------------------------------------------------------===//

class Moe_EnumParameter<EnumAttrInfo info, string default>
    : EnumParameter<info> {
  let parser = "::mlir::moe::parseEnumParameter<" # info.cppNamespace # "::"
               # info.className # ">($_parser)";
  let defaultValue = default;
}

/// A `true`/`false` keyword.
class Moe_BoolParameter<string desc, string default = "false">
    : AttrParameter<"bool", desc> {
  let parser = "::mlir::moe::parseBoolParameter($_parser)";
  let printer = "$_printer << ($_self ? \"true\" : \"false\")";
  let defaultValue = default;
}

/// A floating-point literal, kept as an IEEE double.
class Moe_F64Parameter<string desc, string default>
    : APFloatParameter<desc> {
  let parser = "::mlir::moe::parseF64Parameter($_parser)";
  let printer = "::mlir::moe::printF64Parameter($_printer, $_self)";
  let defaultValue = "::llvm::APFloat(" # default # ")";
}

//===----------------------------------------------------------------------===//
// #moe.fp8_recipe
//===----------------------------------------------------------------------===//

def Moe_Fp8RecipeAttr : Moe_Attr<"Fp8Recipe", "fp8_recipe"> {
  let summary = "How FP8 (e4m3) GEMMs scale their operands";
  let description = [{
    Every GEMM of an FP8 layer multiplies e4m3 codes whose scales this
    recipe picks. A scale maps its tile's largest magnitude `a` (at least
    1e-4) to 448, e4m3's largest value: the tile's values become
    `e4m3(v * (448 / a))` (round to nearest even) with the scale `a / 448`,
    and products sum in f32.

    - `scaling = block` (DeepSeek-V3's recipe, the default): activations
      and output gradients per token per `block` channels (1 x 128 tiles)
      where the GEMM reduces over channels (Fprop, Dgrad), per channel per
      `block` tokens of one expert (128 x 1) where it reduces over tokens
      (Wgrad); weights per `block` x `block` square.
    - `scaling = tensor` (Transformer Engine's current scaling): one scale
      per operand: per activation or gradient tensor, and per expert's
      weight matrix (stored as that scale in every block).

    Weights are quantized from the f32 master copies at every training
    step. `block` is 128 (the only size the kernels tile by).

    ```mlir
    #moe.fp8_recipe<scaling = tensor>
    ```
  }];
  let parameters = (ins
    Moe_EnumParameter<Moe_Fp8Scaling, "::mlir::moe::Fp8Scaling::Block">:$scaling,
    DefaultValuedParameter<"int64_t", "128">:$block
  );
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    bool isBlockwise() const {
      return getScaling() == ::mlir::moe::Fp8Scaling::Block;
    }
  }];
}

//===----------------------------------------------------------------------===//
// #moe.layer_config
//===----------------------------------------------------------------------===//

def Moe_LayerConfigAttr : Moe_Attr<"LayerConfig", "layer_config"> {
  let summary = "Shape and routing configuration of an MoE layer";
  let description = [{
    Everything that defines an MoE layer apart from its weights:

    | parameter | meaning | default |
    |---|---|---|
    | `hidden` | model (hidden) size H | required |
    | `experts` | routed experts E | required |
    | `top_k` | experts per token k | required |
    | `groups` | expert groups for group-limited routing | 1 |
    | `topk_groups` | groups kept per token | 1 |
    | `scoring` | `softmax`, `sigmoid` or `sparsemixer` over the router logits | `softmax` |
    | `group_score` | group rule: `max` score or `sum_top2` of its two best | `max` |
    | `score_bias` | a score-correction bias is added for selection only | `false` |
    | `norm_topk_prob` | the k weights are renormalized to sum to one | `false` |
    | `routed_scale` | factor on the routed weights | `1.0` |
    | `router_jitter` | sparsemixer's relative logit margin (Phi-3.5-MoE's `router_jitter_noise`) | `0.0` |
    | `ffn` | intermediate size F of a routed expert | required |
    | `shared_experts` | number of shared (dense) experts | 0 |
    | `shared_ffn` | intermediate size of one shared expert | 0 |
    | `shared_gate` | shared output scaled by sigmoid(x * g^T) (Qwen2-MoE) | `false` |
    | `scale_input` | a routed weight scales its expert's input, not output (Llama 4) | `false` |
    | `output_bias` | a bias `[H]` is added to the layer's output (JetMoE) | `false` |
    | `router_bias` | a bias `[E]` is added to the router logits (GPT-OSS) | `false` |
    | `expert_bias` | the routed experts' projections have biases (GPT-OSS) | `false` |
    | `activation` | gated activation of the FFNs: `swiglu` or `clamped_swiglu` | `swiglu` |
    | `swiglu_alpha` | `clamped_swiglu`'s sigmoid gain | `1.702` |
    | `swiglu_limit` | `clamped_swiglu`'s clamp | `7.0` |
    | `dtype` | element type of activations and weights (f32, bf16, f16) | required |
    | `expert_dtype` | element type of the routed and shared experts' weights: `dtype`, or `f8E4M3FN` (e4m3 with one f32 scale per 128 x 128 block; inputs quantized per token per 128 channels) | `dtype` |
    | `fp8_recipe` | how the FP8 GEMMs scale their operands (`#moe.fp8_recipe`), only with `expert_dtype = f8E4M3FN` | DeepSeek-V3's blockwise recipe |

    Routing: scores are `scoring(x * Wr^T)` in f32. With `groups > 1`, each
    group of `experts / groups` consecutive experts is scored by its best
    (biased) score or the sum of its two best, the `topk_groups` best groups
    are kept, and the top-k is taken over the experts of kept groups. The
    bias, when present, is added for these selections only; the weights are
    the unbiased scores of the selected experts, renormalized when
    `norm_topk_prob`, then multiplied by `routed_scale`.

    `sparsemixer` (Phi-3.5-MoE, inference form; `top_k = 2`, no groups,
    bias or renormalization) picks the best logit `m1`, then the best of
    the others `m2`; expert `i`'s weight is the softmax, at `i`, of the
    logits `s` that are within the margin of `m_i`,
    `(m_i - s) / max(|s|, m_i) <= 2 * router_jitter` (for the second, the
    first expert excluded).

    `router_bias` adds its bias to the logits before `scoring`. An expert's
    FFN is `down(act(gate(x), up(x)))`, each projection with its expert's
    bias when `expert_bias`. `swiglu` is `silu(g) * u`; `clamped_swiglu`
    (GPT-OSS) is `(clamp(u, -l, l) + 1) * g' * sigmoid(alpha * g')` with
    `g' = min(g, l)`, `alpha = swiglu_alpha` and `l = swiglu_limit`; the
    shared experts always use `swiglu`.

    A token's routed output is `sum_j w_j * FFN_j(x)`, or with `scale_input`
    `sum_j FFN_j(w_j * x)` where `w_j * x` is rounded to `dtype` (Llama 4
    multiplies the token by its router score before the expert).

    Example (DeepSeek-V3):

    ```mlir
    #moe.layer_config<hidden = 7168, experts = 256, top_k = 8, groups = 8,
      topk_groups = 4, scoring = sigmoid, group_score = sum_top2,
      score_bias = true, norm_topk_prob = true, routed_scale = 2.5,
      ffn = 2048, shared_experts = 1, shared_ffn = 2048, dtype = bf16>
    ```
  }];
  let parameters = (ins
    "int64_t":$hidden,
    "int64_t":$experts,
    "int64_t":$top_k,
    DefaultValuedParameter<"int64_t", "1">:$groups,
    DefaultValuedParameter<"int64_t", "1">:$topk_groups,
    Moe_EnumParameter<Moe_ScoringFunc, "::mlir::moe::ScoringFunc::Softmax">:$scoring,
    Moe_EnumParameter<Moe_GroupScore, "::mlir::moe::GroupScore::Max">:$group_score,
    Moe_BoolParameter<"selection-only score-correction bias">:$score_bias,
    Moe_BoolParameter<"renormalize the top-k weights">:$norm_topk_prob,
    Moe_F64Parameter<"factor on the routed weights", "1.0">:$routed_scale,
    Moe_F64Parameter<"sparsemixer's relative logit margin", "0.0">:$router_jitter,
    "int64_t":$ffn,
    DefaultValuedParameter<"int64_t", "0">:$shared_experts,
    DefaultValuedParameter<"int64_t", "0">:$shared_ffn,
    Moe_BoolParameter<"sigmoid gate on the shared expert output">:$shared_gate,
    Moe_BoolParameter<"routed weights scale the experts' inputs">:$scale_input,
    Moe_BoolParameter<"a bias added to the layer's output">:$output_bias,
    Moe_BoolParameter<"a bias added to the router logits">:$router_bias,
    Moe_BoolParameter<"biases on the routed experts' projections">:$expert_bias,
    Moe_EnumParameter<Moe_Activation, "::mlir::moe::Activation::SwiGLU">:$activation,
    Moe_F64Parameter<"clamped_swiglu's sigmoid gain", "1.702">:$swiglu_alpha,
    Moe_F64Parameter<"clamped_swiglu's clamp", "7.0">:$swiglu_limit,
    "::mlir::Type":$dtype,
    OptionalParameter<"::mlir::Type">:$expert_dtype,
    OptionalParameter<"::mlir::moe::Fp8RecipeAttr">:$fp8_recipe
  );
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// Experts in one group.
    int64_t getExpertsPerGroup() const { return getExperts() / getGroups(); }
    /// Intermediate size of all shared experts together (they act as one
    /// dense FFN of this size).
    int64_t getSharedFfnTotal() const {
      return getSharedExperts() * getSharedFfn();
    }
    bool hasSharedExperts() const { return getSharedExperts() > 0; }
    double getRoutedScaleValue() const {
      return getRoutedScale().convertToDouble();
    }
    double getRouterJitterValue() const {
      return getRouterJitter().convertToDouble();
    }
    double getSwigluAlphaValue() const {
      return getSwigluAlpha().convertToDouble();
    }
    double getSwigluLimitValue() const {
      return getSwigluLimit().convertToDouble();
    }
    /// The element type of the expert FFNs' weights.
    ::mlir::Type getExpertWeightType() const {
      return getExpertDtype() ? getExpertDtype() : getDtype();
    }
    /// Whether the experts' weights are FP8 with 128 x 128 block scales.
    bool isFp8() const {
      return getExpertDtype() &&
             ::llvm::isa<::mlir::Float8E4M3FNType>(getExpertDtype());
    }
    /// The FP8 recipe of an FP8 layer: its own, or DeepSeek-V3's.
    ::mlir::moe::Fp8RecipeAttr getRecipe() const {
      if (getFp8Recipe())
        return getFp8Recipe();
      return ::mlir::moe::Fp8RecipeAttr::get(
          getContext(), ::mlir::moe::Fp8Scaling::Block, 128);
    }
    bool isClamped() const {
      return getActivation() == ::mlir::moe::Activation::ClampedSwiGLU;
    }
    /// What of the layer no training step (host or sm_90a) supports yet,
    /// or "" when it can be trained.
    std::string getUntrainable() const {
      if (getScoring() == ::mlir::moe::ScoringFunc::Sparsemixer)
        return "it routes by sparsemixer (Phi-3.5-MoE)";
      return "";
    }
  }];
}

//===----------------------------------------------------------------------===//
// #moe.sm_partition
//===----------------------------------------------------------------------===//

def Moe_SmPartitionAttr : Moe_Attr<"SmPartition", "sm_partition"> {
  let summary = "Split of the GPU's SMs between compute and communication";
  let description = [{
    `sms` is the number of SMs of the target GPU and `comm` how many of them
    are reserved for communication (the all-to-all); the compute kernels'
    persistent grids use the remaining `sms - comm`. DeepSeek-V3 trained with
    `#moe.sm_partition<sms = 132, comm = 20>` on H800s. `0 <= comm < sms`.

    The attribute appears as the `partition` of a `moe.layer`, or as the
    discardable attribute `moe.sm_partition` on a function or module.
  }];
  let parameters = (ins "int64_t":$sms, "int64_t":$comm);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// SMs left to the compute kernels.
    int64_t getComputeSms() const { return getSms() - getComm(); }
  }];
}

#endif // MOE_DIALECT_MOE_MOEATTRS_TD
