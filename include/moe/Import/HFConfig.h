//===- HFConfig.h - Hugging Face config.json import -------------*- C++ -*-===//
//
// Part of moe-compiler. Maps each MoE family's config.json fields (through
// an alias table per model_type) onto #moe.layer_config, builds the layer's
// function, and names the layer's weights as the family's checkpoints do.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_IMPORT_HFCONFIG_H
#define MOE_IMPORT_HFCONFIG_H

#include "moe/MoeOps.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

#include <string>
#include <vector>

namespace mlir::moe {

/// Weight-naming conventions of the supported families.
/// Names of a layer's tensors in a family's published checkpoints:
/// DeepSeek's (`gate.weight`, `experts.{i}.gate_proj.weight`,
/// `shared_experts.*`), Mixtral's (`experts.{i}.w1.weight`), Qwen's
/// (`shared_expert.*`), MiniMax's (Mixtral's, with the score bias on the
/// block: `e_score_correction_bias`) and ERNIE's (DeepSeek's, with the score
/// bias in `moe_statics`), GraniteMoE's (`input_linear.weight`, every
/// expert's gate and up projections in one tensor), Hunyuan's (`gate.wg`,
/// `shared_mlp.*`) and Llama 4's (`router.weight`, `experts.gate_up_proj`
/// and `experts.down_proj` as (in, out) matrices, `shared_expert.*`) and
/// DBRX's (`router.layer.weight`, `experts.mlp.{w1,v1,w2}` of [E * F, H],
/// w2 as (in, out)) and JetMoE's (GraniteMoE's, with the block's output
/// bias `bias`).
enum class WeightNaming {
  DeepSeek,
  Mixtral,
  Qwen,
  MiniMax,
  Ernie,
  Granite,
  Hunyuan,
  Llama4,
  Dbrx,
  JetMoe,
  GptOss
};

std::optional<WeightNaming> parseWeightNaming(llvm::StringRef name);
llvm::StringRef stringifyWeightNaming(WeightNaming naming);

struct ImportedConfig {
  std::string modelType;
  WeightNaming naming;
  LayerConfigAttr config;
  /// Where a layer's tensors are in the model's published checkpoints,
  /// "{layer}" standing for its index ("model.layers.{layer}.mlp.").
  std::string checkpointPrefix;
  /// The indices of the model's MoE layers by the family's rule
  /// (first_k_dense_replace, mlp_layer_types, decoder_sparse_step,
  /// mlp_only_layers); empty when the config has no num_hidden_layers.
  std::vector<int64_t> moeLayers;
  /// What the import assumed that the user should hear (a model_type it
  /// does not know, read as the family its architectures name).
  std::vector<std::string> warnings;
};

/// Imports the MoE layer of a config.json. `dtype` is the compute element
/// type (a config's torch_dtype is informational only), `expertDtype` that
/// of the experts' weights (null: `dtype`; f8E4M3FN: FP8 with block
/// scales). On failure returns std::nullopt and sets `error` to one line
/// naming the file and the field.
std::optional<ImportedConfig>
importHFConfig(llvm::StringRef text, llvm::StringRef fileName,
               MLIRContext *context, Type dtype, std::string &error,
               Type expertDtype = Type());

/// A module with `func.func @moe_layer(x, weights...) -> y` holding one
/// moe.layer of `config` over `[?, hidden]` tokens.
OwningOpRef<ModuleOp> buildLayerModule(MLIRContext *context,
                                       LayerConfigAttr config,
                                       SmPartitionAttr partition);

/// The checkpoint name, relative to the MoE block, of the layer operand
/// with role `role` (as in EntryArgument); stacked expert weights are
/// patterns with "{i}".
std::string hfWeightName(WeightNaming naming, llvm::StringRef role);

/// Where the operand is inside that tensor: slice `part` of `parts` of its
/// first dimension after the experts' ({0, 1}: all of it). GraniteMoE keeps
/// the gate and up projections of every expert in one [E, 2F, H] tensor.
std::pair<int64_t, int64_t> hfWeightPart(WeightNaming naming,
                                         llvm::StringRef role);

/// Whether the checkpoint keeps the operand's matrices transposed, as
/// (in, out) (Llama 4's expert tensors).
bool hfWeightTransposed(WeightNaming naming, llvm::StringRef role);

/// Whether the checkpoint folds the experts into the next dimension
/// (DBRX's [E * F, H] for [E, F, H]).
bool hfWeightFlat(WeightNaming naming, llvm::StringRef role);

/// Whether the parts of hfWeightPart interleave (part p is every parts-th
/// index from p) rather than follow each other: GPT-OSS's gate_up_proj
/// holds gate and up in alternate columns.
bool hfWeightInterleaved(WeightNaming naming, llvm::StringRef role);

} // namespace mlir::moe

#endif // MOE_IMPORT_HFCONFIG_H
