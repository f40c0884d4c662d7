//===- Families.cpp - The model families config.json import knows --------===//
//
// Part of moe-compiler.
//
// One record per family (see Families.h): its model_type and class
// names, checkpoint naming, fields with their transformers 5 defaults and
// routing rule, and which of its layers are MoE layers. Adding a family is
// one reader, one entry in kFamilies and its test.
//
//===----------------------------------------------------------------------===//

#include "Families.h"

#include <functional>

using namespace mlir;
using namespace mlir::moe;
using namespace mlir::moe::hfimport;

namespace {

using Int = std::optional<int64_t>;

//===----------------------------------------------------------------------===//
// The fields of each family, with the defaults of its transformers 5 config
// class (std::nullopt: the class has none, the field is required).
//===----------------------------------------------------------------------===//

/// DeepSeek-V3's router and fields, with a family's defaults.
struct DeepSeekDefaults {
  Int hidden, experts, topK, groups, topkGroups, shared, ffn;
  bool norm;
  double scale;
};

void readDeepSeekStyle(FieldReader &r, Fields &f, const DeepSeekDefaults &d) {
  f.hidden = r.integer("hidden_size", d.hidden);
  f.experts =
      r.integerAliased({"n_routed_experts", "num_local_experts"}, d.experts);
  f.topK = r.integer("num_experts_per_tok", d.topK);
  f.ffn = r.integer("moe_intermediate_size", d.ffn);
  f.groups = r.integer("n_group", d.groups);
  f.topkGroups = r.integer("topk_group", d.topkGroups);
  f.sharedExperts = r.integer("n_shared_experts", d.shared);
  f.sharedFfn = f.sharedExperts > 0 ? f.ffn : 0;
  // Fields transformers 5 does not read, but which would name another
  // router if they were set to something else.
  r.oneOf("topk_method", {"noaux_tc"}, "noaux_tc");
  r.oneOf("scoring_func", {"sigmoid"}, "sigmoid");
  f.scoring = ScoringFunc::Sigmoid;
  f.scoreBias = true;
  f.groupScore = GroupScore::SumTop2;
  f.normalize = r.boolean("norm_topk_prob", d.norm);
  f.scale = r.number("routed_scaling_factor", d.scale);
}

template <const DeepSeekDefaults &defaults>
void readDeepSeek(FieldReader &r, const llvm::json::Object &, Fields &f) {
  readDeepSeekStyle(r, f, defaults);
}

constexpr DeepSeekDefaults kDeepSeekV3 = {7168, 256,  8,    8,  4,
                                          1,    2048, true, 2.5};
constexpr DeepSeekDefaults kGlm4Moe = {4096, 128, 8, 1, 1, 1, 1408, true, 1.0};
constexpr DeepSeekDefaults kGlm4MoeLite = {2048, 64,   4,    1,  1,
                                           1,    1536, true, 1.8};
constexpr DeepSeekDefaults kDots1 = {4608, {}, {}, 1, 1, {}, 1408, false, 1.0};

/// A family's switch for biases the layer does not model: set, one error.
void refuseBias(FieldReader &r, const char *field, const char *what) {
  if (r.boolean(field, false) && !r.failed())
    r.error = r.prefix + ": field '" + field + "' is true: biases of the " +
              what + " are not supported";
}

void readDeepSeekV2(FieldReader &r, const llvm::json::Object &root, Fields &f) {
  f.hidden = r.integer("hidden_size", 4096);
  f.experts = r.integerAliased({"n_routed_experts", "num_experts"}, 64);
  f.topK = r.integer("num_experts_per_tok");
  f.ffn = r.integer("moe_intermediate_size", 1407);
  f.sharedExperts = r.integer("n_shared_experts", 2);
  f.sharedFfn = f.sharedExperts > 0 ? f.ffn : 0;
  r.oneOf("scoring_func", {"softmax"}, "softmax");
  std::string method =
      r.oneOf("topk_method", {"greedy", "group_limited_greedy"}, "greedy");
  if (method == "group_limited_greedy") {
    f.groups = r.integer("n_group");
    f.topkGroups = r.integer("topk_group");
  }
  f.scale = r.number("routed_scaling_factor", 1.0);
  refuseBias(r, "mlp_bias", "shared experts' projections");
}

void readMixtral(FieldReader &r, const llvm::json::Object &root, Fields &f) {
  f.readMixtralStyle(r, 4096, 8, 2, 14336);
  f.normalize = true;
}

void readGranite(FieldReader &r, const llvm::json::Object &root, Fields &f) {
  // Mixtral's routing (softmax over the top-k logits); every expert's
  // gate and up projections in one tensor, the down projections in
  // another.
  f.readMixtralStyle(r, 4096, 8, 2, 11008);
  f.normalize = true;
}

void readHunyuan(FieldReader &r, const llvm::json::Object &root, Fields &f) {
  // Softmax, top-k, renormalized; one always-on shared MLP. In
  // transformers 5 the routed experts and the shared MLP are both
  // intermediate_size wide (moe_intermediate_size and
  // num_shared_expert, per layer in the published configs, are not
  // read there).
  f.hidden = r.integer("hidden_size", 4096);
  f.experts = r.integerAliased({"num_experts", "num_local_experts"}, 1);
  // (num_experts_per_tok is the config class's alias of moe_topk.)
  f.topK = root.get("moe_topk") ? r.uniformInteger("moe_topk", 1)
                                : r.integer("num_experts_per_tok", 1);
  f.ffn = r.integer("intermediate_size", 11008);
  f.sharedExperts = 1;
  f.sharedFfn = f.ffn;
  f.normalize = true;
  refuseBias(r, "mlp_bias", "projections");
}

void readLlama4(FieldReader &r, const llvm::json::Object &root, Fields &f) {
  // The top-k logits' sigmoids (no renormalization) scale the token
  // before its experts; one always-on shared MLP as wide as an expert.
  f.hidden = r.integer("hidden_size", 5120);
  f.experts = r.integer("num_local_experts", 16);
  f.topK = r.integer("num_experts_per_tok", 1);
  f.ffn = r.integer("intermediate_size", 8192);
  f.sharedExperts = 1;
  f.sharedFfn = f.ffn;
  f.scoring = ScoringFunc::Sigmoid;
  f.scaleInput = true;
}

void readJetMoe(FieldReader &r, const llvm::json::Object &root, Fields &f) {
  // GraniteMoE's experts and routing (softmax over the top-k logits)
  // plus a bias on the block's output; its attention layers are a
  // mixture too, which is not the MoE block compiled here.
  f.hidden = r.integer("hidden_size", 2048);
  f.experts = r.integer("num_local_experts", 8);
  f.topK = r.integer("num_experts_per_tok", 2);
  f.ffn = r.integer("intermediate_size", 5632);
  r.oneOf("activation_function", {"silu", "swish"}, "silu");
  f.normalize = true;
  f.outputBias = true;
}

void readDbrx(FieldReader &r, const llvm::json::Object &root, Fields &f) {
  // Softmax, top-k, divided by the k weights' p-norm (p = 1: their sum);
  // the MoE fields in ffn_config; every expert's matrices in three
  // tensors with the experts folded into the rows ([E * F, H]), w2 as
  // (in, out).
  f.hidden = r.integerAliased({"d_model", "hidden_size"}, 2048);
  llvm::json::Object none;
  const llvm::json::Object *ffnObject = root.getObject("ffn_config");
  if (!ffnObject && root.get("ffn_config") &&
      root.get("ffn_config")->kind() != llvm::json::Value::Null && !r.failed())
    r.error = r.prefix + ": field 'ffn_config' must be an object";
  FieldReader ffn{ffnObject ? *ffnObject : none, r.prefix + ": ffn_config",
                  r.error};
  f.experts = ffn.integer("moe_num_experts", 4);
  f.topK = ffn.integer("moe_top_k", 1);
  f.ffn = ffn.integer("ffn_hidden_size", 3584);
  if (const llvm::json::Object *act =
          ffnObject ? ffnObject->getObject("ffn_act_fn") : nullptr) {
    FieldReader fn{*act, ffn.prefix + ": ffn_act_fn", ffn.error};
    fn.oneOf("name", {"silu", "swish"}, "silu");
    ffn.error = fn.error;
  }
  if (ffnObject && ffnObject->get("moe_normalize_expert_weights") &&
      ffnObject->get("moe_normalize_expert_weights")->kind() ==
          llvm::json::Value::Null) {
    f.normalize = false;
  } else {
    double p = ffn.number("moe_normalize_expert_weights", 1.0);
    f.normalize = true;
    if (p != 1.0 && !ffn.failed())
      ffn.error = ffn.prefix + ": field 'moe_normalize_expert_weights' is " +
                  formatNumber(p) +
                  ", expected 1 or null (weights divided by their sum, or "
                  "not at all); other p-norms are not supported";
  }
  r.error = ffn.error;
}

void readGptOss(FieldReader &r, const llvm::json::Object &root, Fields &f) {
  // A router with a bias; softmax over the top-k logits (the same as
  // the top-k of the softmax, renormalized); experts with biases and the
  // clamped SwiGLU (its hidden_act is not read); fused, interleaved
  // gate/up columns.
  f.readMixtralStyle(r, 2880, 128, 4, 2880);
  f.normalize = true;
  f.routerBias = true;
  f.expertBias = true;
  f.activation = Activation::ClampedSwiGLU;
  f.alpha = r.number("swiglu_alpha", 1.702);
  f.limit = r.number("swiglu_limit", 7.0);
}

void readPhiMoe(FieldReader &r, const llvm::json::Object &root, Fields &f) {
  // Sparsemixer over the logits (its inference form), two experts;
  // Mixtral's checkpoint names.
  f.hidden = r.integer("hidden_size", 4096);
  f.experts = r.integer("num_local_experts", 16);
  f.topK = r.integer("num_experts_per_tok", 2);
  if (!r.failed() && f.topK != 2)
    r.error = r.prefix + ": field 'num_experts_per_tok' is " +
              std::to_string(f.topK) +
              ", expected 2 (sparsemixer picks two experts whatever it "
              "says)";
  f.ffn = r.integer("intermediate_size", 6400);
  f.scoring = ScoringFunc::Sparsemixer;
  f.jitter = r.number("router_jitter_noise", 0.01);
}

void readMiniMaxM2(FieldReader &r, const llvm::json::Object &root, Fields &f) {
  f.readMixtralStyle(r, 3072, 256, 8, 1536);
  r.oneOf("scoring_func", {"sigmoid"}, "sigmoid");
  f.scoring = ScoringFunc::Sigmoid;
  f.scoreBias = true;
  f.normalize = true;
}

void readErnie(FieldReader &r, const llvm::json::Object &root, Fields &f) {
  f.hidden = r.integer("hidden_size", 2560);
  f.experts = r.integerAliased({"num_experts", "moe_num_experts"}, 64);
  f.topK = r.integerAliased({"num_experts_per_tok", "moe_k"}, 6);
  f.ffn = r.integer("moe_intermediate_size", 1536);
  f.sharedExperts = r.integer("moe_num_shared_experts", 2);
  f.sharedFfn = f.sharedExperts > 0 ? f.ffn : 0;
  f.scoreBias = true;
  f.normalize = true;
  refuseBias(r, "use_bias", "experts' projections");
}

void readOlmoe(FieldReader &r, const llvm::json::Object &root, Fields &f) {
  f.hidden = r.integer("hidden_size", 2048);
  f.experts = r.integerAliased({"num_experts", "num_local_experts"}, 64);
  f.topK = r.integer("num_experts_per_tok", 8);
  f.ffn = r.integer("intermediate_size", 2048);
  f.normalize = r.boolean("norm_topk_prob", false);
}

/// qwen2_moe, qwen3_moe.
template <bool qwen2>
void readQwen(FieldReader &r, const llvm::json::Object &root, Fields &f) {
  f.hidden = r.integer("hidden_size", 2048);
  f.experts =
      r.integerAliased({"num_experts", "num_local_experts"}, qwen2 ? 60 : 128);
  f.topK = r.integer("num_experts_per_tok", qwen2 ? 4 : 8);
  f.ffn = r.integer("moe_intermediate_size", qwen2 ? 1408 : 768);
  f.normalize = r.boolean("norm_topk_prob", false);
  if (qwen2) {
    f.sharedFfn = r.integer("shared_expert_intermediate_size", 5632);
    f.sharedExperts = f.sharedFfn > 0 ? 1 : 0;
    f.sharedGate = f.sharedExperts > 0;
  }
}

//===----------------------------------------------------------------------===//
// Which layers are MoE layers.
//===----------------------------------------------------------------------===//

/// Every layer from first_k_dense_replace (the family's default `dense`).
template <int64_t dense>
MoeLayers firstKDense(FieldReader &r, const llvm::json::Object &, int64_t) {
  int64_t first = r.integer("first_k_dense_replace", dense);
  return [first](int64_t i) { return i >= first; };
}

/// mlp_layer_types ('dense' or 'sparse' per layer) where the config gives
/// it, else `otherwise`.
template <MoeLayers (*otherwise)(FieldReader &, const llvm::json::Object &,
                                 int64_t)>
MoeLayers layerTypes(FieldReader &r, const llvm::json::Object &root,
                     int64_t layers) {
  if (!root.getArray("mlp_layer_types"))
    return otherwise(r, root, layers);
  std::vector<std::string> types;
  for (const llvm::json::Value &v : *root.getArray("mlp_layer_types")) {
    std::optional<llvm::StringRef> t = v.getAsString();
    if ((!t || (*t != "dense" && *t != "sparse")) && !r.failed())
      r.error = r.prefix +
                ": field 'mlp_layer_types' must be a list of 'dense' "
                "or 'sparse'";
    types.push_back(t ? t->str() : "");
  }
  if (!r.failed() && static_cast<int64_t>(types.size()) != layers)
    r.error = r.prefix + ": field 'mlp_layer_types' has " +
              std::to_string(types.size()) +
              " entries, expected num_hidden_layers (" +
              std::to_string(layers) + ")";
  return [types](int64_t i) { return types[i] == "sparse"; };
}

/// GLM-4.7-Flash's class ignores first_k_dense_replace: layer 0 is dense.
MoeLayers afterFirst(FieldReader &, const llvm::json::Object &, int64_t) {
  return [](int64_t i) { return i >= 1; };
}

MoeLayers ernieLayers(FieldReader &r, const llvm::json::Object &,
                      int64_t layers) {
  int64_t interval = r.integer("moe_layer_interval", 1);
  int64_t start = r.integer("moe_layer_start_index", 1);
  int64_t end = r.integer("moe_layer_end_index", layers - 1);
  if (!r.failed() && interval < 1)
    r.error = r.prefix + ": field 'moe_layer_interval' is " +
              std::to_string(interval) + ", expected at least 1";
  return [=](int64_t i) {
    return (i + 1) % interval == 0 && i >= start && i <= end;
  };
}

/// moe_layers, else every interleave_moe_layer_step-th layer.
MoeLayers llama4Layers(FieldReader &r, const llvm::json::Object &root,
                       int64_t layers) {
  if (root.get("moe_layers") &&
      root.get("moe_layers")->kind() != llvm::json::Value::Null) {
    const llvm::json::Array *list = root.getArray("moe_layers");
    if (!list && !r.failed())
      r.error = r.prefix + ": field 'moe_layers' must be a list of "
                           "layer indices";
    std::vector<int64_t> listed;
    for (const llvm::json::Value &v : list ? *list : llvm::json::Array()) {
      std::optional<int64_t> i = v.getAsInteger();
      if ((!i || *i < 0 || *i >= layers) && !r.failed())
        r.error = r.prefix +
                  ": field 'moe_layers' must hold layer "
                  "indices in [0, " +
                  std::to_string(layers) + ")";
      listed.push_back(i.value_or(-1));
    }
    return [listed](int64_t i) { return llvm::is_contained(listed, i); };
  }
  int64_t step = r.integer("interleave_moe_layer_step", 1);
  if (!r.failed() && step < 1)
    r.error = r.prefix + ": field 'interleave_moe_layer_step' is " +
              std::to_string(step) + ", expected at least 1";
  return [step](int64_t i) { return (i + 1) % step == 0; };
}

MoeLayers qwenLayers(FieldReader &r, const llvm::json::Object &root, int64_t) {
  int64_t step = r.integer("decoder_sparse_step", 1);
  if (!r.failed() && step < 1)
    r.error = r.prefix + ": field 'decoder_sparse_step' is " +
              std::to_string(step) + ", expected at least 1";
  std::vector<int64_t> mlpOnly;
  if (const llvm::json::Array *only = root.getArray("mlp_only_layers"))
    for (const llvm::json::Value &v : *only) {
      if (!v.getAsInteger() && !r.failed())
        r.error =
            r.prefix + ": field 'mlp_only_layers' must be a list of integers";
      mlpOnly.push_back(v.getAsInteger().value_or(-1));
    }
  return [mlpOnly, step](int64_t i) {
    return !llvm::is_contained(mlpOnly, i) && (i + 1) % step == 0;
  };
}

//===----------------------------------------------------------------------===//
// The table.
//===----------------------------------------------------------------------===//

/// config.json names of the #moe.layer_config fields, per family.
constexpr FieldAlias kDeepSeekAliases[] = {
    {"hidden", "hidden_size"},
    {"experts", "n_routed_experts"},
    {"top_k", "num_experts_per_tok"},
    {"groups", "n_group"},
    {"topk_groups", "topk_group"},
    {"ffn", "moe_intermediate_size"},
    {"routed_scale", "routed_scaling_factor"},
    {"shared_experts", "n_shared_experts"}};
constexpr FieldAlias kMixtralAliases[] = {{"hidden", "hidden_size"},
                                          {"experts", "num_local_experts"},
                                          {"top_k", "num_experts_per_tok"},
                                          {"ffn", "intermediate_size"}};
constexpr FieldAlias kQwenAliases[] = {
    {"hidden", "hidden_size"},
    {"experts", "num_experts"},
    {"top_k", "num_experts_per_tok"},
    {"ffn", "moe_intermediate_size"},
    {"shared_ffn", "shared_expert_intermediate_size"}};
constexpr FieldAlias kOlmoeAliases[] = {{"hidden", "hidden_size"},
                                        {"experts", "num_experts"},
                                        {"top_k", "num_experts_per_tok"},
                                        {"ffn", "intermediate_size"}};
constexpr FieldAlias kErnieAliases[] = {
    {"hidden", "hidden_size"},
    {"experts", "num_experts"},
    {"top_k", "num_experts_per_tok"},
    {"ffn", "moe_intermediate_size"},
    {"shared_experts", "moe_num_shared_experts"}};
constexpr FieldAlias kHunyuanAliases[] = {{"hidden", "hidden_size"},
                                          {"experts", "num_experts"},
                                          {"top_k", "moe_topk"},
                                          {"ffn", "intermediate_size"},
                                          {"shared_ffn", "intermediate_size"}};
constexpr FieldAlias kLlama4Aliases[] = {{"hidden", "hidden_size"},
                                         {"experts", "num_local_experts"},
                                         {"top_k", "num_experts_per_tok"},
                                         {"ffn", "intermediate_size"},
                                         {"shared_ffn", "intermediate_size"}};
constexpr FieldAlias kPhiMoeAliases[] = {
    {"hidden", "hidden_size"},
    {"experts", "num_local_experts"},
    {"top_k", "num_experts_per_tok"},
    {"ffn", "intermediate_size"},
    {"router_jitter", "router_jitter_noise"}};
constexpr FieldAlias kDbrxAliases[] = {
    {"hidden", "d_model"},
    {"experts", "ffn_config.moe_num_experts"},
    {"top_k", "ffn_config.moe_top_k"},
    {"ffn", "ffn_config.ffn_hidden_size"}};

constexpr llvm::StringLiteral kMlp = "model.layers.{layer}.mlp.";
constexpr llvm::StringLiteral kBlockSparse =
    "model.layers.{layer}.block_sparse_moe.";
constexpr llvm::StringLiteral kLayers = "num_hidden_layers";

const Family kFamilies[] = {
    {"deepseek_v3",
     {"DeepseekV3ForCausalLM"},
     WeightNaming::DeepSeek,
     kMlp,
     kLayers,
     kDeepSeekAliases,
     readDeepSeek<kDeepSeekV3>,
     firstKDense<3>},
    {"deepseek_v32",
     {"DeepseekV32ForCausalLM"},
     WeightNaming::DeepSeek,
     kMlp,
     kLayers,
     kDeepSeekAliases,
     readDeepSeek<kDeepSeekV3>,
     layerTypes<firstKDense<3>>},
    {"glm4_moe",
     {"Glm4MoeForCausalLM"},
     WeightNaming::DeepSeek,
     kMlp,
     kLayers,
     kDeepSeekAliases,
     readDeepSeek<kGlm4Moe>,
     firstKDense<1>},
    {"glm4_moe_lite",
     {"Glm4MoeLiteForCausalLM"},
     WeightNaming::DeepSeek,
     kMlp,
     kLayers,
     kDeepSeekAliases,
     readDeepSeek<kGlm4MoeLite>,
     layerTypes<afterFirst>},
    {"dots1",
     {"Dots1ForCausalLM"},
     WeightNaming::DeepSeek,
     kMlp,
     kLayers,
     kDeepSeekAliases,
     readDeepSeek<kDots1>,
     firstKDense<0>},
    {"deepseek_v2",
     {"DeepseekV2ForCausalLM"},
     WeightNaming::DeepSeek,
     kMlp,
     kLayers,
     kDeepSeekAliases,
     readDeepSeekV2,
     firstKDense<0>},
    // MiniMax-Text-01's experts are Mixtral's (its attention is not).
    {"mixtral",
     {"MixtralForCausalLM"},
     WeightNaming::Mixtral,
     kBlockSparse,
     kLayers,
     kMixtralAliases,
     readMixtral,
     nullptr},
    {"minimax",
     {"MiniMaxForCausalLM"},
     WeightNaming::Mixtral,
     kBlockSparse,
     kLayers,
     kMixtralAliases,
     readMixtral,
     nullptr},
    {"minimax_m2",
     {"MiniMaxM2ForCausalLM"},
     WeightNaming::MiniMax,
     kBlockSparse,
     kLayers,
     kMixtralAliases,
     readMiniMaxM2,
     nullptr},
    {"qwen2_moe",
     {"Qwen2MoeForCausalLM"},
     WeightNaming::Qwen,
     kMlp,
     kLayers,
     kQwenAliases,
     readQwen<true>,
     qwenLayers},
    {"qwen3_moe",
     {"Qwen3MoeForCausalLM"},
     WeightNaming::Qwen,
     kMlp,
     kLayers,
     kQwenAliases,
     readQwen<false>,
     qwenLayers},
    {"olmoe",
     {"OlmoeForCausalLM"},
     WeightNaming::Qwen,
     kMlp,
     kLayers,
     kOlmoeAliases,
     readOlmoe,
     nullptr},
    {"ernie4_5_moe",
     {"Ernie4_5_MoeForCausalLM"},
     WeightNaming::Ernie,
     kMlp,
     kLayers,
     kErnieAliases,
     readErnie,
     ernieLayers},
    {"granitemoe",
     {"GraniteMoeForCausalLM"},
     WeightNaming::Granite,
     kBlockSparse,
     kLayers,
     kMixtralAliases,
     readGranite,
     nullptr},
    {"hunyuan_v1_moe",
     {"HunYuanMoEV1ForCausalLM"},
     WeightNaming::Hunyuan,
     kMlp,
     kLayers,
     kHunyuanAliases,
     readHunyuan,
     nullptr},
    {"llama4_text",
     {"Llama4ForCausalLM"},
     WeightNaming::Llama4,
     "model.layers.{layer}.feed_forward.",
     kLayers,
     kLlama4Aliases,
     readLlama4,
     llama4Layers},
    {"phimoe",
     {"PhimoeForCausalLM", "PhiMoEForCausalLM"},
     WeightNaming::Mixtral,
     kBlockSparse,
     kLayers,
     kPhiMoeAliases,
     readPhiMoe,
     nullptr},
    {"dbrx",
     {"DbrxForCausalLM"},
     WeightNaming::Dbrx,
     "transformer.blocks.{layer}.ffn.",
     "n_layers",
     kDbrxAliases,
     readDbrx,
     nullptr},
    {"jetmoe",
     {"JetMoeForCausalLM"},
     WeightNaming::JetMoe,
     kMlp,
     kLayers,
     kMixtralAliases,
     readJetMoe,
     nullptr},
    {"gpt_oss",
     {"GptOssForCausalLM"},
     WeightNaming::GptOss,
     kMlp,
     kLayers,
     kMixtralAliases,
     readGptOss,
     nullptr,
     /*mxfp4=*/true},
};

} // namespace

llvm::ArrayRef<Family> hfimport::families() { return kFamilies; }

const Family *hfimport::familyOf(llvm::StringRef modelType) {
  for (const Family &family : kFamilies)
    if (family.modelType == modelType)
      return &family;
  return nullptr;
}

const Family *hfimport::familyOfClass(llvm::StringRef className) {
  if (className.empty())
    return nullptr;
  for (const Family &family : kFamilies)
    if (llvm::is_contained(family.architectures, className))
      return &family;
  return nullptr;
}
