//===- Families.h - The model families config.json import knows -*- C++ -*-===//
//
// Part of moe-compiler.
//
// Internal to the config import: one record per model family (see
// HFConfig.cpp's file comment for each family's semantics).
//
//===----------------------------------------------------------------------===//

#ifndef MOE_IMPORT_FAMILIES_H
#define MOE_IMPORT_FAMILIES_H

#include "ConfigReader.h"
#include "moe/Import/HFConfig.h"

#include <functional>

namespace mlir::moe::hfimport {

/// Whether layer i (of the model's) is an MoE layer.
using MoeLayers = std::function<bool(int64_t)>;

/// A #moe.layer_config field and the config.json field it is read from
/// (named in the verifier's messages).
struct FieldAlias {
  llvm::StringLiteral ours, theirs;
};

struct Family {
  /// The config's model_type.
  llvm::StringLiteral modelType;
  /// Its causal-LM class names (`architectures`), for a model_type this
  /// compiler does not know (Kimi-K2's kimi_k2 is DeepseekV3ForCausalLM).
  llvm::StringRef architectures[2];
  /// How its checkpoints name the experts' tensors.
  WeightNaming naming;
  /// Where layer {layer}'s MoE block is in its published checkpoints.
  llvm::StringLiteral checkpointPrefix;
  /// The config field with the number of layers.
  llvm::StringLiteral layersKey;
  llvm::ArrayRef<FieldAlias> aliases;
  /// Reads the layer's fields (with the family's transformers 5 defaults)
  /// and sets its routing rule; errors go to `r`.
  void (*readFields)(FieldReader &r, const llvm::json::Object &root, Fields &f);
  /// Which of `layers` layers are MoE layers; null: all of them.
  MoeLayers (*moeLayers)(FieldReader &r, const llvm::json::Object &root,
                         int64_t layers);
  /// Its checkpoints may be quantized as MXFP4 (GPT-OSS's experts) as well
  /// as FP8.
  bool mxfp4 = false;
};

/// Every family, in the order the import's messages list them.
llvm::ArrayRef<Family> families();
/// The family of model_type `modelType`, or null.
const Family *familyOf(llvm::StringRef modelType);
/// The family whose causal-LM class is `className`, or null.
const Family *familyOfClass(llvm::StringRef className);

} // namespace mlir::moe::hfimport

#endif // MOE_IMPORT_FAMILIES_H
