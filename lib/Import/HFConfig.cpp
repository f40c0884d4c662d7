//===- HFConfig.cpp - Hugging Face config.json import ---------------------===//
//
// Part of moe-compiler.
//
// Semantics per family (from each family's transformers 5 modeling code,
// which wins where a family's original code differs):
// - deepseek_v3, deepseek_v32, glm4_moe, dots1 (one router in transformers
//   5): sigmoid scores, a selection-only e_score_correction_bias, group
//   score = sum of the group's top-2 biased scores, weights renormalized
//   when norm_topk_prob (for top_k = 1 too: DeepSeek's own code skipped
//   it there), then times routed_scaling_factor.
// - deepseek_v2: softmax scores; topk_method greedy (no groups) or
//   group_limited_greedy (group score = max); the weights times
//   routed_scaling_factor, never renormalized (transformers 5 ignores
//   norm_topk_prob; DeepSeek's code renormalized instead of scaling).
// - mixtral, minimax, granitemoe: softmax over all experts, top-k,
//   renormalized (GraniteMoE: softmax over the top-k logits, the same).
// - ernie4_5_moe: softmax scores, a selection-only e_score_correction_bias
//   (in moe_statics), top-k, renormalized (by the sum clamped to
//   moe_norm_min, 1e-12: the same for any sum that is not denormal).
// - minimax_m2: sigmoid scores, a selection-only e_score_correction_bias
//   (on the block, not the router), top-k, renormalized.
// - hunyuan_v1_moe: softmax, top-k (moe_topk, the same for every
//   layer), renormalized, plus one shared MLP of intermediate_size.
// - dbrx: softmax, top-k, divided by their sum (moe_normalize_expert_weights
//   1; null: not divided); the fields in ffn_config, d_model, n_layers.
// - jetmoe: GraniteMoE's experts and routing, plus a bias on the output.
// - phimoe: sparsemixer (its inference form) over the logits, two
//   experts, margin router_jitter_noise; Mixtral's checkpoint names.
// - llama4_text (and llama4's text_config): the sigmoids of the top-k
//   logits, not renormalized, scale the token before its experts; one
//   shared MLP of intermediate_size; MoE layers by moe_layers or
//   interleave_moe_layer_step.
// - qwen2_moe / qwen3_moe / olmoe: softmax, top-k, renormalized when
//   norm_topk_prob; Qwen2-MoE adds a shared expert gated by
//   sigmoid(shared_expert_gate(x)).
// Shared experts of DeepSeek act as one dense FFN of n_shared_experts *
// moe_intermediate_size. A field that is absent (or null) takes the
// default of the family's transformers 5 config class. A model_type we do
// not know (Kimi-K2's kimi_k2) is read as the family of the first known
// entry of `architectures` (DeepseekV3ForCausalLM).
//
//===----------------------------------------------------------------------===//

#include "moe/Import/HFConfig.h"
#include "moe/runtime/Support.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Regex.h"

#include <cstdio>
#include <functional>

using namespace mlir;
using namespace mlir::moe;

std::optional<WeightNaming> mlir::moe::parseWeightNaming(llvm::StringRef name) {
  return llvm::StringSwitch<std::optional<WeightNaming>>(name)
      .Case("deepseek", WeightNaming::DeepSeek)
      .Case("mixtral", WeightNaming::Mixtral)
      .Case("qwen", WeightNaming::Qwen)
      .Case("minimax", WeightNaming::MiniMax)
      .Case("ernie", WeightNaming::Ernie)
      .Case("granite", WeightNaming::Granite)
      .Case("hunyuan", WeightNaming::Hunyuan)
      .Case("llama4", WeightNaming::Llama4)
      .Case("dbrx", WeightNaming::Dbrx)
      .Case("jetmoe", WeightNaming::JetMoe)
      .Case("gpt_oss", WeightNaming::GptOss)
      .Default(std::nullopt);
}

llvm::StringRef mlir::moe::stringifyWeightNaming(WeightNaming naming) {
  switch (naming) {
  case WeightNaming::DeepSeek:
    return "deepseek";
  case WeightNaming::Mixtral:
    return "mixtral";
  case WeightNaming::Qwen:
    return "qwen";
  case WeightNaming::MiniMax:
    return "minimax";
  case WeightNaming::Ernie:
    return "ernie";
  case WeightNaming::Granite:
    return "granite";
  case WeightNaming::Hunyuan:
    return "hunyuan";
  case WeightNaming::Llama4:
    return "llama4";
  case WeightNaming::Dbrx:
    return "dbrx";
  case WeightNaming::JetMoe:
    return "jetmoe";
  case WeightNaming::GptOss:
    return "gpt_oss";
  }
  return "deepseek";
}

namespace {
/// config.json names of the #moe.layer_config fields, per model_type.
SmallVector<std::pair<llvm::StringRef, llvm::StringRef>>
aliasesOf(llvm::StringRef modelType) {
  if (modelType.starts_with("deepseek") || modelType.starts_with("glm4_moe") ||
      modelType == "dots1")
    return {{"hidden", "hidden_size"},
            {"experts", "n_routed_experts"},
            {"top_k", "num_experts_per_tok"},
            {"groups", "n_group"},
            {"topk_groups", "topk_group"},
            {"ffn", "moe_intermediate_size"},
            {"routed_scale", "routed_scaling_factor"},
            {"shared_experts", "n_shared_experts"}};
  if (modelType == "ernie4_5_moe")
    return {{"hidden", "hidden_size"},
            {"experts", "num_experts"},
            {"top_k", "num_experts_per_tok"},
            {"ffn", "moe_intermediate_size"},
            {"shared_experts", "moe_num_shared_experts"}};
  if (modelType == "hunyuan_v1_moe")
    return {{"hidden", "hidden_size"},
            {"experts", "num_experts"},
            {"top_k", "moe_topk"},
            {"ffn", "intermediate_size"},
            {"shared_ffn", "intermediate_size"}};
  if (modelType == "llama4_text")
    return {{"hidden", "hidden_size"},
            {"experts", "num_local_experts"},
            {"top_k", "num_experts_per_tok"},
            {"ffn", "intermediate_size"},
            {"shared_ffn", "intermediate_size"}};
  if (modelType == "olmoe")
    return {{"hidden", "hidden_size"},
            {"experts", "num_experts"},
            {"top_k", "num_experts_per_tok"},
            {"ffn", "intermediate_size"}};
  if (modelType == "dbrx")
    return {{"hidden", "d_model"},
            {"experts", "ffn_config.moe_num_experts"},
            {"top_k", "ffn_config.moe_top_k"},
            {"ffn", "ffn_config.ffn_hidden_size"}};
  if (modelType == "gpt_oss")
    return {{"hidden", "hidden_size"},
            {"experts", "num_local_experts"},
            {"top_k", "num_experts_per_tok"},
            {"ffn", "intermediate_size"}};
  if (modelType == "jetmoe")
    return {{"hidden", "hidden_size"},
            {"experts", "num_local_experts"},
            {"top_k", "num_experts_per_tok"},
            {"ffn", "intermediate_size"}};
  if (modelType == "phimoe")
    return {{"hidden", "hidden_size"},
            {"experts", "num_local_experts"},
            {"top_k", "num_experts_per_tok"},
            {"ffn", "intermediate_size"},
            {"router_jitter", "router_jitter_noise"}};
  if (modelType.starts_with("mixtral") || modelType.starts_with("minimax") ||
      modelType == "granitemoe")
    return {{"hidden", "hidden_size"},
            {"experts", "num_local_experts"},
            {"top_k", "num_experts_per_tok"},
            {"ffn", "intermediate_size"}};
  return {{"hidden", "hidden_size"},
          {"experts", "num_experts"},
          {"top_k", "num_experts_per_tok"},
          {"ffn", "moe_intermediate_size"},
          {"shared_ffn", "shared_expert_intermediate_size"}};
}

/// A number as a config.json would write it.
std::string formatNumber(double v) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", v);
  return text;
}

/// "" or why `text` is no name: it holds a control character (a NUL
/// would end the name for C code that reads it).
static std::string controlCharacter(llvm::StringRef text) {
  for (size_t i = 0; i < text.size(); ++i)
    if (static_cast<unsigned char>(text[i]) < 0x20 || text[i] == 0x7f) {
      char code[8];
      std::snprintf(code, sizeof(code), "U+%04X",
                    static_cast<unsigned char>(text[i]));
      return "holds the control character " + std::string(code) +
             " at offset " + std::to_string(i);
    }
  return "";
}

/// Reads fields of one config object, recording the first error.
struct FieldReader {
  const llvm::json::Object &object;
  std::string prefix; // "config.json (model_type mixtral)"
  std::string error;

  bool failed() const { return !error.empty(); }

  /// Fields a published config may leave null, where the family's model
  /// reads None as its default (dots.llm1's n_group and topk_group: no
  /// expert groups). Anywhere else a null is what transformers would
  /// carry into the model as None, and fail on: an error here too.
  static bool nullMeansDefault(llvm::StringRef key) {
    return key == "n_group" || key == "topk_group";
  }

  /// The field `key`: null when it is absent (an error when `required`),
  /// or when it is null and the family reads null as its default.
  const llvm::json::Value *find(llvm::StringRef key, bool required) {
    if (failed())
      return nullptr;
    const llvm::json::Value *value = object.get(key);
    if (value && value->kind() == llvm::json::Value::Null) {
      if (!nullMeansDefault(key))
        error = prefix + ": field '" + key.str() +
                "' is null; expected " + (required ? "a value" : "a value "
                "or no field at all (for the family's default)") +
                " (transformers would carry None into the model)";
      else if (required)
        error = prefix + ": missing field '" + key.str() + "'";
      return nullptr;
    }
    if (!value && required)
      error = prefix + ": missing field '" + key.str() + "'";
    return value;
  }

  /// An integer field that transformers also writes under other names (a
  /// config class's attribute_map: transformers 5 saves Qwen-MoE's
  /// num_experts as num_local_experts, for one). Names that are present
  /// must agree; `fallback` when none is.
  int64_t integerAliased(llvm::ArrayRef<llvm::StringRef> keys,
                         std::optional<int64_t> fallback = {}) {
    std::optional<int64_t> found;
    llvm::StringRef foundKey;
    for (llvm::StringRef key : keys) {
      if (failed() || !object.get(key) ||
          (object.get(key)->kind() == llvm::json::Value::Null &&
           nullMeansDefault(key)))
        continue;
      int64_t v = integer(key);
      if (found && v != *found && !failed())
        error = prefix + ": fields '" + foundKey.str() + "' (" +
                std::to_string(*found) + ") and '" + key.str() + "' (" +
                std::to_string(v) + ") disagree";
      if (!found) {
        found = v;
        foundKey = key;
      }
    }
    if (!found && fallback)
      return *fallback;
    if (!found && !failed()) {
      error = prefix + ": missing field '" + keys.front().str() + "'";
      for (size_t i = 1; i < keys.size(); ++i)
        error += (i == 1 ? " (or '" : ", '") + keys[i].str() + "'";
      if (keys.size() > 1)
        error += ")";
    }
    return found.value_or(0);
  }

  int64_t integer(llvm::StringRef key, std::optional<int64_t> fallback = {}) {
    const llvm::json::Value *value = find(key, !fallback);
    if (!value)
      return fallback.value_or(0);
    std::optional<int64_t> v = value->getAsInteger();
    if (!v) {
      error = prefix + ": field '" + key.str() + "' must be an integer";
      return 0;
    }
    return *v;
  }

  /// An integer that a family may also give per layer, as a list
  /// (Hunyuan's moe_topk): one layer configuration takes one value, so a
  /// list must hold the same value for every layer.
  int64_t uniformInteger(llvm::StringRef key, int64_t fallback) {
    const llvm::json::Value *value = find(key, false);
    if (!value || !value->getAsArray())
      return integer(key, fallback);
    const llvm::json::Array &list = *value->getAsArray();
    std::optional<int64_t> first;
    for (const llvm::json::Value &v : list) {
      std::optional<int64_t> i = v.getAsInteger();
      if (!i) {
        error = prefix + ": field '" + key.str() +
                "' must be an integer or a list of integers";
        return 0;
      }
      if (first && *i != *first) {
        error = prefix + ": field '" + key.str() +
                "' differs between layers (" + std::to_string(*first) +
                " and " + std::to_string(*i) +
                "); a layer configuration takes one value, so give the "
                "layer's as an integer";
        return 0;
      }
      first = first.value_or(*i);
    }
    if (!first)
      error = prefix + ": field '" + key.str() + "' is an empty list";
    return first.value_or(0);
  }

  double number(llvm::StringRef key, std::optional<double> fallback = {}) {
    const llvm::json::Value *value = find(key, !fallback);
    if (!value)
      return fallback.value_or(0.0);
    std::optional<double> v = value->getAsNumber();
    if (!v) {
      error = prefix + ": field '" + key.str() + "' must be a number";
      return 0.0;
    }
    return *v;
  }

  bool boolean(llvm::StringRef key, std::optional<bool> fallback = {}) {
    const llvm::json::Value *value = find(key, !fallback);
    if (!value)
      return fallback.value_or(false);
    std::optional<bool> v = value->getAsBoolean();
    if (!v) {
      error = prefix + ": field '" + key.str() + "' must be true or false";
      return false;
    }
    return *v;
  }

  std::string string(llvm::StringRef key,
                     std::optional<llvm::StringRef> fallback = {}) {
    const llvm::json::Value *value = find(key, !fallback);
    if (!value)
      return fallback.value_or("").str();
    std::optional<llvm::StringRef> v = value->getAsString();
    if (!v) {
      error = prefix + ": field '" + key.str() + "' must be a string";
      return {};
    }
    if (std::string why = controlCharacter(*v); !why.empty()) {
      error = prefix + ": field '" + key.str() + "' " + why;
      return {};
    }
    return v->str();
  }

  /// A string field that must be one of `allowed`.
  std::string oneOf(llvm::StringRef key, ArrayRef<llvm::StringRef> allowed,
                    std::optional<llvm::StringRef> fallback = {}) {
    std::string v = string(key, fallback);
    if (failed() || llvm::is_contained(allowed, v))
      return v;
    error = prefix + ": field '" + key.str() + "' is '" + v + "', expected ";
    for (size_t i = 0; i < allowed.size(); ++i)
      error += (i ? (i + 1 == allowed.size() ? " or '" : ", '") : "'") +
               allowed[i].str() + "'";
    return v;
  }
};

/// The #moe.layer_config fields before verification.
struct Fields {
  int64_t hidden = 0, experts = 0, topK = 0, groups = 1, topkGroups = 1;
  ScoringFunc scoring = ScoringFunc::Softmax;
  GroupScore groupScore = GroupScore::Max;
  bool scoreBias = false, normalize = false, sharedGate = false,
       scaleInput = false, outputBias = false, routerBias = false,
       expertBias = false;
  double scale = 1.0, jitter = 0.0;
  Activation activation = Activation::SwiGLU;
  double alpha = 1.702, limit = 7.0;
  int64_t ffn = 0, sharedExperts = 0, sharedFfn = 0;

  /// Mixtral's fields (hidden_size, num_local_experts or num_experts,
  /// num_experts_per_tok, intermediate_size), with the family's defaults.
  void readMixtralStyle(FieldReader &r, int64_t defaultHidden,
                        int64_t defaultExperts, int64_t defaultTopK,
                        int64_t defaultFfn) {
    hidden = r.integer("hidden_size", defaultHidden);
    experts =
        r.integerAliased({"num_local_experts", "num_experts"}, defaultExperts);
    topK = r.integer("num_experts_per_tok", defaultTopK);
    ffn = r.integer("intermediate_size", defaultFfn);
  }
};
} // namespace

std::optional<ImportedConfig>
mlir::moe::importHFConfig(llvm::StringRef text, llvm::StringRef fileName,
                          MLIRContext *context, Type dtype,
                          std::string &error, Type expertDtype) {
  // llvm::json's parser recurses: bound the nesting first.
  if (::moe::rt::Status s = ::moe::rt::checkJsonText(
          text.data(), text.size(), fileName.str());
      !s.ok()) {
    error = s.error;
    return std::nullopt;
  }
  llvm::Expected<llvm::json::Value> parsed = llvm::json::parse(text);
  if (!parsed) {
    error = fileName.str() +
            ": invalid JSON: " + llvm::toString(parsed.takeError());
    return std::nullopt;
  }
  const llvm::json::Object *root = parsed->getAsObject();
  if (!root) {
    error = fileName.str() + ": expected a JSON object";
    return std::nullopt;
  }
  FieldReader top{*root, fileName.str(), {}};
  static const llvm::StringRef kTypes[] = {
      "deepseek_v3",  "deepseek_v32", "glm4_moe",       "glm4_moe_lite",
      "dots1",        "deepseek_v2",  "mixtral",        "minimax",
      "minimax_m2",   "qwen2_moe",    "qwen3_moe",      "olmoe",
      "ernie4_5_moe", "granitemoe",   "hunyuan_v1_moe", "llama4_text",
      "phimoe",       "dbrx",         "jetmoe",         "gpt_oss"};
  // The families' causal-LM class names, for a model_type we do not know.
  static const std::pair<llvm::StringRef, llvm::StringRef> kArchitectures[] = {
      {"DeepseekV3ForCausalLM", "deepseek_v3"},
      {"DeepseekV32ForCausalLM", "deepseek_v32"},
      {"Glm4MoeForCausalLM", "glm4_moe"},
      {"Glm4MoeLiteForCausalLM", "glm4_moe_lite"},
      {"Dots1ForCausalLM", "dots1"},
      {"DeepseekV2ForCausalLM", "deepseek_v2"},
      {"MixtralForCausalLM", "mixtral"},
      {"MiniMaxForCausalLM", "minimax"},
      {"MiniMaxM2ForCausalLM", "minimax_m2"},
      {"OlmoeForCausalLM", "olmoe"},
      {"Ernie4_5_MoeForCausalLM", "ernie4_5_moe"},
      {"Qwen2MoeForCausalLM", "qwen2_moe"},
      {"Qwen3MoeForCausalLM", "qwen3_moe"},
      {"GraniteMoeForCausalLM", "granitemoe"},
      {"HunYuanMoEV1ForCausalLM", "hunyuan_v1_moe"},
      {"Llama4ForCausalLM", "llama4_text"},
      {"PhimoeForCausalLM", "phimoe"},
      {"PhiMoEForCausalLM", "phimoe"},
      {"DbrxForCausalLM", "dbrx"},
      {"JetMoeForCausalLM", "jetmoe"},
      {"GptOssForCausalLM", "gpt_oss"}};
  std::string declared = top.string("model_type", "");
  std::string modelType = declared;
  std::string via;
  // The family of a config object: its model_type, else its first known
  // architectures entry (recorded in `via`).
  // architectures, where given, is a list of class names (transformers
  // writes ["DeepseekV3ForCausalLM"]; a bare string would be read as its
  // characters).
  auto checkArchitectures = [&](const llvm::json::Object &object,
                                const std::string &where) {
    const llvm::json::Value *archs = object.get("architectures");
    if (!archs || archs->kind() == llvm::json::Value::Null || !top.error.empty())
      return;
    const llvm::json::Array *list = archs->getAsArray();
    bool names = list != nullptr;
    for (size_t i = 0; names && i < list->size(); ++i) {
      std::optional<llvm::StringRef> name = (*list)[i].getAsString();
      names = name.has_value();
      if (name)
        if (std::string why = controlCharacter(*name); !why.empty()) {
          top.error = where + ": entry " + std::to_string(i) +
                      " of field 'architectures' " + why;
          return;
        }
    }
    if (!names)
      top.error = where + ": field 'architectures' must be a list of "
                          "strings (class names such as "
                          "'DeepseekV3ForCausalLM')";
  };
  checkArchitectures(*root, fileName.str());
  auto known = [&](const llvm::json::Object &object) {
    if (llvm::is_contained(kTypes, modelType))
      return true;
    if (const llvm::json::Array *archs = object.getArray("architectures"))
      for (const llvm::json::Value &arch : *archs) {
        std::optional<llvm::StringRef> name = arch.getAsString();
        for (auto [cls, type] : kArchitectures)
          if (name && *name == cls) {
            modelType = type.str();
            via = "architectures " + cls.str();
            return true;
          }
      }
    return false;
  };
  if (!top.failed() && !known(*root)) {
    // A multimodal wrapper (Llama 4, the VL models) keeps its language
    // model's config in text_config.
    const llvm::json::Object *text = root->getObject("text_config");
    std::string textType;
    if (text)
      checkArchitectures(*text, fileName.str() + ": text_config");
    if (text && top.error.empty()) {
      FieldReader inner{*text, fileName.str() + ": text_config", {}};
      textType = modelType = inner.string("model_type", "");
      if (!inner.failed() && known(*text)) {
        via = "text_config" + (via.empty() ? "" : ", " + via);
        root = text;
      } else {
        textType = inner.failed() ? "" : textType;
      }
    }
    if (root != text && top.error.empty()) {
      top.error =
          fileName.str() + ": " +
          (declared.empty() ? std::string("missing field 'model_type'")
                            : "field 'model_type' is '" + declared + "'") +
          ", expected ";
      for (size_t i = 0; i < std::size(kTypes); ++i)
        top.error +=
            (i ? (i + 1 == std::size(kTypes) ? " or '" : ", '") : "'") +
            kTypes[i].str() + "'";
      top.error += " (or an 'architectures' entry of one of them, such as "
                   "'DeepseekV3ForCausalLM')";
      if (text)
        top.error += "; nor is its text_config's model_type '" + textType + "'";
    }
  }
  if (top.failed()) {
    error = top.error;
    return std::nullopt;
  }
  FieldReader r{
      *root,
      fileName.str() + " (model_type " +
          (via.empty() ? modelType
                       : declared + ", read as " + modelType + " from " + via) +
          ")",
      {}};
  Fields f;
  WeightNaming naming = WeightNaming::DeepSeek;
  // The experts are SwiGLU: silu (transformers' "swish" is the same
  // function). Anything else would compile into a different model.
  r.oneOf("hidden_act", {"silu", "swish"}, "silu");

  // Absent fields take the defaults of the family's transformers 5 config
  // class (std::nullopt: the class has none, the field is required).
  using Int = std::optional<int64_t>;
  if (modelType == "deepseek_v3" || modelType == "deepseek_v32" ||
      modelType == "glm4_moe" || modelType == "glm4_moe_lite" ||
      modelType == "dots1") {
    struct {
      Int hidden, experts, topK, groups, topkGroups, shared, ffn;
      bool norm;
      double scale;
    } d;
    if (modelType == "glm4_moe")
      d = {4096, 128, 8, 1, 1, 1, 1408, true, 1.0};
    else if (modelType == "glm4_moe_lite")
      d = {2048, 64, 4, 1, 1, 1, 1536, true, 1.8};
    else if (modelType == "dots1")
      d = {4608, {}, {}, 1, 1, {}, 1408, false, 1.0};
    else // deepseek_v3, deepseek_v32
      d = {7168, 256, 8, 8, 4, 1, 2048, true, 2.5};
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
  } else if (modelType == "deepseek_v2") {
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
    if (r.boolean("mlp_bias", false) && !r.failed())
      r.error = r.prefix + ": field 'mlp_bias' is true: biases of the "
                           "shared experts' projections are not supported";
  } else if (modelType == "mixtral" || modelType == "minimax") {
    // MiniMax-Text-01's experts are Mixtral's (its attention is not).
    naming = WeightNaming::Mixtral;
    f.readMixtralStyle(r, 4096, 8, 2, 14336);
    f.normalize = true;
  } else if (modelType == "granitemoe") {
    // Mixtral's routing (softmax over the top-k logits); every expert's
    // gate and up projections in one tensor, the down projections in
    // another.
    naming = WeightNaming::Granite;
    f.readMixtralStyle(r, 4096, 8, 2, 11008);
    f.normalize = true;
  } else if (modelType == "hunyuan_v1_moe") {
    // Softmax, top-k, renormalized; one always-on shared MLP. In
    // transformers 5 the routed experts and the shared MLP are both
    // intermediate_size wide (moe_intermediate_size and
    // num_shared_expert, per layer in the published configs, are not
    // read there).
    naming = WeightNaming::Hunyuan;
    f.hidden = r.integer("hidden_size", 4096);
    f.experts = r.integerAliased({"num_experts", "num_local_experts"}, 1);
    // (num_experts_per_tok is the config class's alias of moe_topk.)
    f.topK = root->get("moe_topk") ? r.uniformInteger("moe_topk", 1)
                                   : r.integer("num_experts_per_tok", 1);
    f.ffn = r.integer("intermediate_size", 11008);
    f.sharedExperts = 1;
    f.sharedFfn = f.ffn;
    f.normalize = true;
    if (r.boolean("mlp_bias", false) && !r.failed())
      r.error = r.prefix + ": field 'mlp_bias' is true: biases of the "
                           "projections are not supported";
  } else if (modelType == "llama4_text") {
    // The top-k logits' sigmoids (no renormalization) scale the token
    // before its experts; one always-on shared MLP as wide as an expert.
    naming = WeightNaming::Llama4;
    f.hidden = r.integer("hidden_size", 5120);
    f.experts = r.integer("num_local_experts", 16);
    f.topK = r.integer("num_experts_per_tok", 1);
    f.ffn = r.integer("intermediate_size", 8192);
    f.sharedExperts = 1;
    f.sharedFfn = f.ffn;
    f.scoring = ScoringFunc::Sigmoid;
    f.scaleInput = true;
  } else if (modelType == "jetmoe") {
    // GraniteMoE's experts and routing (softmax over the top-k logits)
    // plus a bias on the block's output; its attention layers are a
    // mixture too, which is not the MoE block compiled here.
    naming = WeightNaming::JetMoe;
    f.hidden = r.integer("hidden_size", 2048);
    f.experts = r.integer("num_local_experts", 8);
    f.topK = r.integer("num_experts_per_tok", 2);
    f.ffn = r.integer("intermediate_size", 5632);
    r.oneOf("activation_function", {"silu", "swish"}, "silu");
    f.normalize = true;
    f.outputBias = true;
  } else if (modelType == "dbrx") {
    // Softmax, top-k, divided by the k weights' p-norm (p = 1: their sum);
    // the MoE fields in ffn_config; every expert's matrices in three
    // tensors with the experts folded into the rows ([E * F, H]), w2 as
    // (in, out).
    naming = WeightNaming::Dbrx;
    f.hidden = r.integerAliased({"d_model", "hidden_size"}, 2048);
    llvm::json::Object none;
    const llvm::json::Object *ffnObject = root->getObject("ffn_config");
    if (!ffnObject && root->get("ffn_config") &&
        root->get("ffn_config")->kind() != llvm::json::Value::Null &&
        !r.failed())
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
  } else if (modelType == "gpt_oss") {
    // A router with a bias; softmax over the top-k logits (the same as
    // the top-k of the softmax, renormalized); experts with biases and the
    // clamped SwiGLU (its hidden_act is not read); fused, interleaved
    // gate/up columns.
    naming = WeightNaming::GptOss;
    f.readMixtralStyle(r, 2880, 128, 4, 2880);
    f.normalize = true;
    f.routerBias = true;
    f.expertBias = true;
    f.activation = Activation::ClampedSwiGLU;
    f.alpha = r.number("swiglu_alpha", 1.702);
    f.limit = r.number("swiglu_limit", 7.0);
  } else if (modelType == "phimoe") {
    // Sparsemixer over the logits (its inference form), two experts;
    // Mixtral's checkpoint names.
    naming = WeightNaming::Mixtral;
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
  } else if (modelType == "minimax_m2") {
    naming = WeightNaming::MiniMax;
    f.readMixtralStyle(r, 3072, 256, 8, 1536);
    r.oneOf("scoring_func", {"sigmoid"}, "sigmoid");
    f.scoring = ScoringFunc::Sigmoid;
    f.scoreBias = true;
    f.normalize = true;
  } else if (modelType == "ernie4_5_moe") {
    naming = WeightNaming::Ernie;
    f.hidden = r.integer("hidden_size", 2560);
    f.experts = r.integerAliased({"num_experts", "moe_num_experts"}, 64);
    f.topK = r.integerAliased({"num_experts_per_tok", "moe_k"}, 6);
    f.ffn = r.integer("moe_intermediate_size", 1536);
    f.sharedExperts = r.integer("moe_num_shared_experts", 2);
    f.sharedFfn = f.sharedExperts > 0 ? f.ffn : 0;
    f.scoreBias = true;
    f.normalize = true;
    if (r.boolean("use_bias", false) && !r.failed())
      r.error = r.prefix + ": field 'use_bias' is true: biases of the "
                           "experts' projections are not supported";
  } else if (modelType == "olmoe") {
    naming = WeightNaming::Qwen;
    f.hidden = r.integer("hidden_size", 2048);
    f.experts = r.integerAliased({"num_experts", "num_local_experts"}, 64);
    f.topK = r.integer("num_experts_per_tok", 8);
    f.ffn = r.integer("intermediate_size", 2048);
    f.normalize = r.boolean("norm_topk_prob", false);
  } else { // qwen2_moe, qwen3_moe
    naming = WeightNaming::Qwen;
    bool qwen2 = modelType == "qwen2_moe";
    f.hidden = r.integer("hidden_size", 2048);
    f.experts = r.integerAliased({"num_experts", "num_local_experts"},
                                 qwen2 ? 60 : 128);
    f.topK = r.integer("num_experts_per_tok", qwen2 ? 4 : 8);
    f.ffn = r.integer("moe_intermediate_size", qwen2 ? 1408 : 768);
    f.normalize = r.boolean("norm_topk_prob", false);
    if (qwen2) {
      f.sharedFfn = r.integer("shared_expert_intermediate_size", 5632);
      f.sharedExperts = f.sharedFfn > 0 ? 1 : 0;
      f.sharedGate = f.sharedExperts > 0;
    }
  }
  // Quantized checkpoints: FP8 with 128 x 128 block scales (DeepSeek-V3/R1,
  // Kimi-K2) is dequantized when the weights are loaded; the layer computes
  // in its own dtype. Any other method would be read as something else.
  if (const llvm::json::Object *quant =
          root->getObject("quantization_config")) {
    FieldReader q{*quant, r.prefix + ": quantization_config", {}};
    std::string method = q.string("quant_method", "");
    bool gptOss = modelType == "gpt_oss";
    if (method != "fp8" && !(gptOss && method == "mxfp4") && !q.failed())
      q.error = q.prefix + ": 'quant_method' is '" + method +
                "', expected 'fp8' (128 x 128 block-scaled e4m3 weights, "
                "dequantized on load)" +
                (gptOss ? " or 'mxfp4' (GPT-OSS's expert weights, "
                          "dequantized on load)"
                        : "") +
                "; other methods are not supported";
    // mxfp4: the experts' *_blocks and *_scales; nothing else to check.
    if (method != "mxfp4") {
      q.oneOf("fmt", {"e4m3"}, "e4m3");
      if (const llvm::json::Value *block = quant->get("weight_block_size")) {
        const llvm::json::Array *sizes = block->getAsArray();
        if (!q.failed() && (!sizes || sizes->size() != 2 ||
                            (*sizes)[0].getAsInteger() != 128 ||
                            (*sizes)[1].getAsInteger() != 128))
          q.error = q.prefix + ": 'weight_block_size' must be [128, 128]";
      } else if (!q.failed()) {
        q.error = q.prefix + ": missing field 'weight_block_size' (expected "
                             "[128, 128])";
      }
    }
    if (q.failed() && !r.failed())
      r.error = q.error;
  } else if (root->get("quantization_config") &&
             root->get("quantization_config")->kind() !=
                 llvm::json::Value::Null &&
             !r.failed()) {
    r.error = r.prefix + ": field 'quantization_config' must be an object";
  }

  // Which layers are MoE layers, by the family's rule, and where their
  // tensors are in the published checkpoints.
  bool dbrx = modelType == "dbrx";
  bool blockSparse = modelType == "mixtral" || modelType == "minimax" ||
                     modelType == "minimax_m2" || modelType == "granitemoe" ||
                     modelType == "phimoe";
  // (A wrapper's language model is elsewhere in its checkpoints, under a
  // name of the wrapper's: not recorded, --weights-prefix names it.)
  std::string checkpointPrefix =
      llvm::StringRef(via).starts_with("text_config") ? ""
      : blockSparse                ? "model.layers.{layer}.block_sparse_moe."
      : modelType == "llama4_text" ? "model.layers.{layer}.feed_forward."
      : dbrx                       ? "transformer.blocks.{layer}.ffn."
                                   : "model.layers.{layer}.mlp.";
  std::vector<int64_t> moeLayers;
  llvm::StringRef layersKey = dbrx ? "n_layers" : "num_hidden_layers";
  if (root->get(layersKey) &&
      root->get(layersKey)->kind() != llvm::json::Value::Null) {
    int64_t layers = r.integer(layersKey);
    if (!r.failed() && (layers < 1 || layers > 100000))
      r.error = r.prefix + ": field '" + layersKey.str() + "' is " +
                std::to_string(layers) + ", expected 1 to 100000";
    std::function<bool(int64_t)> isMoe = [](int64_t) { return true; };
    std::vector<std::string> types;
    std::vector<int64_t> mlpOnly, listed;
    if ((modelType == "deepseek_v32" || modelType == "glm4_moe_lite") &&
        root->getArray("mlp_layer_types")) {
      for (const llvm::json::Value &v : *root->getArray("mlp_layer_types")) {
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
      isMoe = [&](int64_t i) { return types[i] == "sparse"; };
    } else if (modelType == "glm4_moe_lite") {
      // Its class ignores first_k_dense_replace: layer 0 is dense.
      isMoe = [](int64_t i) { return i >= 1; };
    } else if (llvm::StringRef(modelType).starts_with("deepseek") ||
               modelType == "glm4_moe" || modelType == "dots1") {
      int64_t dense = modelType == "deepseek_v3" || modelType == "deepseek_v32"
                          ? 3
                      : modelType == "glm4_moe" ? 1
                                                : 0;
      dense = r.integer("first_k_dense_replace", dense);
      isMoe = [dense](int64_t i) { return i >= dense; };
    } else if (modelType == "ernie4_5_moe") {
      int64_t interval = r.integer("moe_layer_interval", 1);
      int64_t start = r.integer("moe_layer_start_index", 1);
      int64_t end = r.integer("moe_layer_end_index", layers - 1);
      if (!r.failed() && interval < 1)
        r.error = r.prefix + ": field 'moe_layer_interval' is " +
                  std::to_string(interval) + ", expected at least 1";
      isMoe = [=](int64_t i) {
        return (i + 1) % interval == 0 && i >= start && i <= end;
      };
    } else if (modelType == "llama4_text") {
      // moe_layers, else every interleave_moe_layer_step-th layer.
      if (root->get("moe_layers") &&
          root->get("moe_layers")->kind() != llvm::json::Value::Null) {
        const llvm::json::Array *list = root->getArray("moe_layers");
        if (!list && !r.failed())
          r.error = r.prefix + ": field 'moe_layers' must be a list of "
                               "layer indices";
        for (const llvm::json::Value &v : list ? *list : llvm::json::Array()) {
          std::optional<int64_t> i = v.getAsInteger();
          if ((!i || *i < 0 || *i >= layers) && !r.failed())
            r.error = r.prefix +
                      ": field 'moe_layers' must hold layer "
                      "indices in [0, " +
                      std::to_string(layers) + ")";
          listed.push_back(i.value_or(-1));
        }
        isMoe = [&](int64_t i) { return llvm::is_contained(listed, i); };
      } else {
        int64_t step = r.integer("interleave_moe_layer_step", 1);
        if (!r.failed() && step < 1)
          r.error = r.prefix + ": field 'interleave_moe_layer_step' is " +
                    std::to_string(step) + ", expected at least 1";
        isMoe = [step](int64_t i) { return (i + 1) % step == 0; };
      }
    } else if (modelType == "qwen2_moe" || modelType == "qwen3_moe") {
      int64_t step = r.integer("decoder_sparse_step", 1);
      if (!r.failed() && step < 1)
        r.error = r.prefix + ": field 'decoder_sparse_step' is " +
                  std::to_string(step) + ", expected at least 1";
      if (const llvm::json::Array *only = root->getArray("mlp_only_layers"))
        for (const llvm::json::Value &v : *only) {
          if (!v.getAsInteger() && !r.failed())
            r.error = r.prefix +
                      ": field 'mlp_only_layers' must be a list of integers";
          mlpOnly.push_back(v.getAsInteger().value_or(-1));
        }
      isMoe = [&, step](int64_t i) {
        return !llvm::is_contained(mlpOnly, i) && (i + 1) % step == 0;
      };
    }
    for (int64_t i = 0; !r.failed() && i < layers; ++i)
      if (isMoe(i))
        moeLayers.push_back(i);
    if (!r.failed() && moeLayers.empty())
      r.error = r.prefix + ": none of the " + std::to_string(layers) +
                " layers is an MoE layer";
  }
  if (r.failed()) {
    error = r.error;
    return std::nullopt;
  }

  // The attribute's verifier checks consistency; its message gets the file
  // name in front and the config.json names of the fields it mentions.
  std::string verifyError;
  LayerConfigAttr config;
  {
    ScopedDiagnosticHandler capture(context, [&](Diagnostic &diag) {
      verifyError = diag.str();
      return success();
    });
    config = LayerConfigAttr::getChecked(
        [&]() -> InFlightDiagnostic {
          return mlir::emitError(UnknownLoc::get(context));
        },
        context, f.hidden, f.experts, f.topK, f.groups, f.topkGroups, f.scoring,
        f.groupScore, f.scoreBias, f.normalize, llvm::APFloat(f.scale),
        llvm::APFloat(f.jitter), f.ffn, f.sharedExperts, f.sharedFfn,
        f.sharedGate, f.scaleInput, f.outputBias, f.routerBias, f.expertBias,
        f.activation, llvm::APFloat(f.alpha), llvm::APFloat(f.limit), dtype,
        expertDtype);
  }
  if (!config) {
    error = r.prefix + ": inconsistent MoE configuration: " + verifyError;
    std::string aliases;
    for (auto [ours, theirs] : aliasesOf(modelType)) {
      llvm::Regex word(("(^|[^a-z_])" + ours + "([^a-z_]|$)").str());
      if (word.match(verifyError))
        aliases += (aliases.empty() ? "" : ", ") + ours.str() + " is '" +
                   theirs.str() + "'";
    }
    if (!aliases.empty())
      error += " (" + aliases + ")";
    return std::nullopt;
  }
  ImportedConfig imported{modelType, naming, config, checkpointPrefix,
                          std::move(moeLayers), {}};
  if (!declared.empty() && declared != modelType &&
      via.find("architectures") != std::string::npos)
    imported.warnings.push_back(
        "model_type '" + declared + "' is not a family this compiler knows; "
        "the layer is read as " + modelType + " because of its " +
        via.substr(via.find("architectures")) +
        " entry (check that the model is one)");
  return imported;
}

OwningOpRef<ModuleOp> mlir::moe::buildLayerModule(MLIRContext *context,
                                                  LayerConfigAttr config,
                                                  SmPartitionAttr partition) {
  context->loadDialect<func::FuncDialect, MoeDialect>();
  OpBuilder b(context);
  Location loc = b.getUnknownLoc();
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  int64_t h = config.getHidden(), e = config.getExperts(), f = config.getFfn(),
          s = config.getSharedFfnTotal();
  Type dt = config.getDtype();
  auto t = [&](ArrayRef<int64_t> shape, Type elt) {
    return RankedTensorType::get(shape, elt);
  };
  SmallVector<Type> types = {t({ShapedType::kDynamic, h}, dt), t({e, h}, dt)};
  if (config.getScoreBias())
    types.push_back(t({e}, b.getF32Type()));
  Type wt = config.getExpertWeightType();
  types.append({t({e, f, h}, wt), t({e, f, h}, wt), t({e, h, f}, wt)});
  if (config.hasSharedExperts())
    types.append({t({s, h}, wt), t({s, h}, wt), t({h, s}, wt)});
  if (config.getSharedGate())
    types.push_back(t({1, h}, dt));
  if (config.getOutputBias())
    types.push_back(t({h}, dt));
  if (config.getRouterBias())
    types.push_back(t({e}, dt));
  if (config.getExpertBias())
    types.append({t({e, f}, dt), t({e, f}, dt), t({e, h}, dt)});
  // FP8 experts: their block scales.
  auto blocks = fp8Blocks;
  Type f32 = b.getF32Type();
  if (config.isFp8()) {
    types.append({t({e, blocks(f), blocks(h)}, f32),
                  t({e, blocks(f), blocks(h)}, f32),
                  t({e, blocks(h), blocks(f)}, f32)});
    if (config.hasSharedExperts())
      types.append({t({blocks(s), blocks(h)}, f32),
                    t({blocks(s), blocks(h)}, f32),
                    t({blocks(h), blocks(s)}, f32)});
  }

  b.setInsertionPointToEnd(module->getBody());
  auto func = func::FuncOp::create(b, loc, "moe_layer",
                                   b.getFunctionType(types, {types[0]}));
  Block *body = func.addEntryBlock();
  b.setInsertionPointToStart(body);
  unsigned next = 0;
  auto arg = [&]() { return body->getArgument(next++); };
  Value x = arg(), router = arg();
  Value bias = config.getScoreBias() ? arg() : Value();
  Value gate = arg(), up = arg(), down = arg();
  Value sg, su, sd, sgate;
  if (config.hasSharedExperts()) {
    sg = arg();
    su = arg();
    sd = arg();
  }
  if (config.getSharedGate())
    sgate = arg();
  Value outBias = config.getOutputBias() ? arg() : Value();
  Value routerBias = config.getRouterBias() ? arg() : Value();
  Value gateBias, upBias, downBias;
  if (config.getExpertBias()) {
    gateBias = arg();
    upBias = arg();
    downBias = arg();
  }
  Value gateScale, upScale, downScale, sgScale, suScale, sdScale;
  if (config.isFp8()) {
    gateScale = arg();
    upScale = arg();
    downScale = arg();
    if (config.hasSharedExperts()) {
      sgScale = arg();
      suScale = arg();
      sdScale = arg();
    }
  }
  Value y = LayerOp::create(b, loc, x, router, bias, gate, up, down, sg, su, sd,
                            sgate, outBias, routerBias, gateBias, upBias,
                            downBias, gateScale, upScale, downScale, sgScale,
                            suScale, sdScale, config, partition);
  func::ReturnOp::create(b, loc, y);
  return module;
}

std::pair<int64_t, int64_t> mlir::moe::hfWeightPart(WeightNaming naming,
                                                    llvm::StringRef role) {
  bool fused = naming == WeightNaming::Granite ||
               naming == WeightNaming::JetMoe ||
               naming == WeightNaming::Llama4 || naming == WeightNaming::GptOss;
  if (fused && (role == "gate_weight" || role == "gate_bias"))
    return {0, 2};
  if (fused && (role == "up_weight" || role == "up_bias"))
    return {1, 2};
  return {0, 1};
}

bool mlir::moe::hfWeightTransposed(WeightNaming naming, llvm::StringRef role) {
  if (naming == WeightNaming::Dbrx)
    return role == "down_weight";
  return (naming == WeightNaming::Llama4 || naming == WeightNaming::GptOss) &&
         (role == "gate_weight" || role == "up_weight" ||
          role == "down_weight");
}

bool mlir::moe::hfWeightInterleaved(WeightNaming naming, llvm::StringRef role) {
  return naming == WeightNaming::GptOss &&
         (role == "gate_weight" || role == "up_weight" || role == "gate_bias" ||
          role == "up_bias");
}

bool mlir::moe::hfWeightFlat(WeightNaming naming, llvm::StringRef role) {
  return naming == WeightNaming::Dbrx &&
         (role == "gate_weight" || role == "up_weight" ||
          role == "down_weight");
}

std::string mlir::moe::hfWeightName(WeightNaming naming, llvm::StringRef role) {
  // An FP8 weight's block scales, as DeepSeek-V3's checkpoints name them.
  if (role.ends_with("_scale"))
    return hfWeightName(naming, (role.drop_back(6) + "_weight").str()) +
           "_scale_inv";
  if (naming == WeightNaming::Granite || naming == WeightNaming::JetMoe)
    return llvm::StringSwitch<std::string>(role)
        .Case("router_weight", "router.layer.weight")
        .Cases({"gate_weight", "up_weight"}, "input_linear.weight")
        .Case("down_weight", "output_linear.weight")
        .Case("output_bias", "bias")
        .Default(role.str());
  if (naming == WeightNaming::Dbrx)
    return llvm::StringSwitch<std::string>(role)
        .Case("router_weight", "router.layer.weight")
        .Case("gate_weight", "experts.mlp.w1")
        .Case("up_weight", "experts.mlp.v1")
        .Case("down_weight", "experts.mlp.w2")
        .Default(role.str());
  if (naming == WeightNaming::GptOss)
    return llvm::StringSwitch<std::string>(role)
        .Case("router_weight", "router.weight")
        .Case("router_bias", "router.bias")
        .Cases({"gate_weight", "up_weight"}, "experts.gate_up_proj")
        .Cases({"gate_bias", "up_bias"}, "experts.gate_up_proj_bias")
        .Case("down_weight", "experts.down_proj")
        .Case("down_bias", "experts.down_proj_bias")
        .Default(role.str());
  if (naming == WeightNaming::Llama4)
    return llvm::StringSwitch<std::string>(role)
        .Case("router_weight", "router.weight")
        .Cases({"gate_weight", "up_weight"}, "experts.gate_up_proj")
        .Case("down_weight", "experts.down_proj")
        .Case("shared_gate_weight", "shared_expert.gate_proj.weight")
        .Case("shared_up_weight", "shared_expert.up_proj.weight")
        .Case("shared_down_weight", "shared_expert.down_proj.weight")
        .Default(role.str());
  bool mixtral =
      naming == WeightNaming::Mixtral || naming == WeightNaming::MiniMax;
  std::string shared = naming == WeightNaming::Qwen      ? "shared_expert."
                       : naming == WeightNaming::Hunyuan ? "shared_mlp."
                                                         : "shared_experts.";
  return llvm::StringSwitch<std::string>(role)
      .Case("router_weight",
            naming == WeightNaming::Hunyuan ? "gate.wg.weight" : "gate.weight")
      .Case("score_bias", naming == WeightNaming::MiniMax
                              ? "e_score_correction_bias"
                          : naming == WeightNaming::Ernie
                              ? "moe_statics.e_score_correction_bias"
                              : "gate.e_score_correction_bias")
      .Case("gate_weight",
            mixtral ? "experts.{i}.w1.weight" : "experts.{i}.gate_proj.weight")
      .Case("up_weight",
            mixtral ? "experts.{i}.w3.weight" : "experts.{i}.up_proj.weight")
      .Case("down_weight",
            mixtral ? "experts.{i}.w2.weight" : "experts.{i}.down_proj.weight")
      .Case("shared_gate_weight", shared + "gate_proj.weight")
      .Case("shared_up_weight", shared + "up_proj.weight")
      .Case("shared_down_weight", shared + "down_proj.weight")
      .Case("shared_expert_gate", "shared_expert_gate.weight")
      .Default(role.str());
}
