//===- ConfigReader.h - Reading config.json fields -------------*- C++ -*-===//
//
// Part of moe-compiler.
//
// Internal to the config import: the reader of one config object's fields
// (with the first error it met) and the layer configuration's fields
// before verification.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_IMPORT_CONFIGREADER_H
#define MOE_IMPORT_CONFIGREADER_H

#include "moe/MoeOps.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/JSON.h"

#include <cstdio>
#include <optional>
#include <string>

namespace mlir::moe::hfimport {

/// A number as a config.json would write it.
inline std::string formatNumber(double v) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", v);
  return text;
}

/// "" or why `text` is no name: it holds a control character (a NUL
/// would end the name for C code that reads it).
inline std::string controlCharacter(llvm::StringRef text) {
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
        error = prefix + ": field '" + key.str() + "' is null; expected " +
                (required ? "a value"
                          : "a value "
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

} // namespace mlir::moe::hfimport

#endif // MOE_IMPORT_CONFIGREADER_H
