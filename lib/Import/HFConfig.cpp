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
// entry of `architectures` (DeepseekV3ForCausalLM). Each family is one
// record of the table in Families.cpp.
//
//===----------------------------------------------------------------------===//

#include "moe/Import/HFConfig.h"
#include "Families.h"
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
using namespace mlir::moe::hfimport;

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
    if (familyOf(modelType))
      return true;
    if (const llvm::json::Array *archs = object.getArray("architectures"))
      for (const llvm::json::Value &arch : *archs) {
        std::optional<llvm::StringRef> name = arch.getAsString();
        if (const Family *family = name ? familyOfClass(*name) : nullptr) {
          modelType = family->modelType.str();
          via = "architectures " + name->str();
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
      llvm::ArrayRef<Family> all = families();
      for (size_t i = 0; i < all.size(); ++i)
        top.error += (i ? (i + 1 == all.size() ? " or '" : ", '") : "'") +
                     all[i].modelType.str() + "'";
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
  const Family &family = *familyOf(modelType);
  Fields f;
  // The experts are SwiGLU: silu (transformers' "swish" is the same
  // function). Anything else would compile into a different model.
  r.oneOf("hidden_act", {"silu", "swish"}, "silu");
  family.readFields(r, *root, f);
  // Quantized checkpoints: FP8 with 128 x 128 block scales (DeepSeek-V3/R1,
  // Kimi-K2) is dequantized when the weights are loaded; the layer computes
  // in its own dtype. Any other method would be read as something else.
  if (const llvm::json::Object *quant =
          root->getObject("quantization_config")) {
    FieldReader q{*quant, r.prefix + ": quantization_config", {}};
    std::string method = q.string("quant_method", "");
    bool mxfp4 = family.mxfp4;
    if (method != "fp8" && !(mxfp4 && method == "mxfp4") && !q.failed())
      q.error = q.prefix + ": 'quant_method' is '" + method +
                "', expected 'fp8' (128 x 128 block-scaled e4m3 weights, "
                "dequantized on load)" +
                (mxfp4 ? " or 'mxfp4' (GPT-OSS's expert weights, "
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
  // (A wrapper's language model is elsewhere in its checkpoints, under a
  // name of the wrapper's: not recorded, --weights-prefix names it.)
  std::string checkpointPrefix = llvm::StringRef(via).starts_with("text_config")
                                     ? ""
                                     : family.checkpointPrefix.str();
  std::vector<int64_t> moeLayers;
  llvm::StringRef layersKey = family.layersKey;
  if (root->get(layersKey) &&
      root->get(layersKey)->kind() != llvm::json::Value::Null) {
    int64_t layers = r.integer(layersKey);
    if (!r.failed() && (layers < 1 || layers > 100000))
      r.error = r.prefix + ": field '" + layersKey.str() + "' is " +
                std::to_string(layers) + ", expected 1 to 100000";
    MoeLayers isMoe = [](int64_t) { return true; };
    if (family.moeLayers && !r.failed())
      isMoe = family.moeLayers(r, *root, layers);
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
        expertDtype, Fp8RecipeAttr());
  }
  if (!config) {
    error = r.prefix + ": inconsistent MoE configuration: " + verifyError;
    std::string aliases;
    for (auto [ours, theirs] : family.aliases) {
      llvm::Regex word(("(^|[^a-z_])" + ours + "([^a-z_]|$)").str());
      if (word.match(verifyError))
        aliases += (aliases.empty() ? "" : ", ") + ours.str() + " is '" +
                   theirs.str() + "'";
    }
    if (!aliases.empty())
      error += " (" + aliases + ")";
    return std::nullopt;
  }
  ImportedConfig imported{modelType,        family.naming,        config,
                          checkpointPrefix, std::move(moeLayers), {}};
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
