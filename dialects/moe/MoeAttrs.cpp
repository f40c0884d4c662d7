//===- MoeAttrs.cpp - Attributes of the moe dialect -----------------------===//
//
// Part of moe-compiler.
//
//===----------------------------------------------------------------------===//

#include "moe/MoeDialect.h"
#include "moe/Support/Routing.h"
#include "moe/runtime/ScheduleAbi.h"

#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/SmallString.h"

#include <cmath>
#include <cstdio>
#include <limits>

using namespace mlir;
using namespace mlir::moe;

//===----------------------------------------------------------------------===//
// Field parsers
//===----------------------------------------------------------------------===//

FailureOr<bool> mlir::moe::parseBoolParameter(AsmParser &parser) {
  if (succeeded(parser.parseOptionalKeyword("true")))
    return true;
  if (succeeded(parser.parseOptionalKeyword("false")))
    return false;
  return parser.emitError(parser.getCurrentLocation(),
                          "expected 'true' or 'false'");
}

FailureOr<llvm::APFloat> mlir::moe::parseF64Parameter(AsmParser &parser) {
  // Accept integer literals too: `routed_scale = 16` means 16.0.
  int64_t integer = 0;
  OptionalParseResult parsedInteger = parser.parseOptionalInteger(integer);
  if (parsedInteger.has_value()) {
    if (failed(*parsedInteger))
      return failure();
    return llvm::APFloat(static_cast<double>(integer));
  }
  double value;
  if (parser.parseFloat(value))
    return failure();
  return llvm::APFloat(value);
}

void mlir::moe::printF64Parameter(AsmPrinter &printer,
                                  const llvm::APFloat &value) {
  llvm::SmallString<32> text;
  value.toString(text);
  // Keep the literal a float literal when it prints as an integer.
  if (text.find_first_of(".eEni") == llvm::StringRef::npos)
    text += ".0";
  printer << text;
}

//===----------------------------------------------------------------------===//
// Verifiers
//===----------------------------------------------------------------------===//

/// Largest size accepted for any dimension of a layer: offsets and row maps
/// are i32.
static constexpr int64_t kMaxDim = std::numeric_limits<int32_t>::max();

static LogicalResult checkSize(function_ref<InFlightDiagnostic()> emitError,
                               StringRef name, int64_t value) {
  if (value <= 0 || value > kMaxDim)
    return emitError() << "expected 0 < " << name << " <= " << kMaxDim
                       << ", got " << value;
  return success();
}

LogicalResult LayerConfigAttr::verify(
    function_ref<InFlightDiagnostic()> emitError, int64_t hidden,
    int64_t experts, int64_t topK, int64_t groups, int64_t topkGroups,
    ScoringFunc scoring, GroupScore groupScore, bool scoreBias,
    bool normTopkProb, llvm::APFloat routedScale, llvm::APFloat routerJitter,
    int64_t ffn, int64_t sharedExperts, int64_t sharedFfn, bool sharedGate,
    bool scaleInput, bool outputBias, bool routerBias, bool expertBias,
    Activation activation, llvm::APFloat swigluAlpha, llvm::APFloat swigluLimit,
    Type dtype, Type expertDtype, Fp8RecipeAttr fp8Recipe) {
  if (failed(checkSize(emitError, "hidden", hidden)) ||
      failed(checkSize(emitError, "experts", experts)) ||
      failed(checkSize(emitError, "ffn", ffn)))
    return failure();
  std::string routing =
      checkGroupLimitedTopK(experts, topK, groups, topkGroups,
                            groupScore == GroupScore::SumTop2, "top_k");
  if (!routing.empty())
    return emitError() << routing;
  double scale = routedScale.convertToDouble();
  if (!std::isfinite(scale) || scale <= 0.0)
    return emitError() << "expected a finite routed_scale > 0, got " << scale;
  double jitter = routerJitter.convertToDouble();
  // As a config.json writes it (%g), not in the diagnostic's %e.
  auto shortest = [](double v) {
    char text[32];
    std::snprintf(text, sizeof(text), "%g", v);
    return std::string(text);
  };
  if (!std::isfinite(jitter) || jitter < 0.0)
    return emitError() << "expected a finite router_jitter >= 0, got "
                       << shortest(jitter);
  if (scoring == ScoringFunc::Sparsemixer) {
    if (topK != 2)
      return emitError() << "expected top_k = 2 with scoring = sparsemixer "
                            "(it picks two experts), got "
                         << topK;
    if (groups != 1 || scoreBias || normTopkProb)
      return emitError() << "expected no groups, score_bias or "
                            "norm_topk_prob with scoring = sparsemixer";
  } else if (jitter != 0.0) {
    return emitError() << "expected router_jitter = 0 unless scoring = "
                          "sparsemixer, got "
                       << shortest(jitter);
  }
  if (sharedExperts < 0 || sharedExperts > kMaxDim)
    return emitError() << "expected 0 <= shared_experts <= " << kMaxDim
                       << ", got " << sharedExperts;
  if (sharedExperts > 0) {
    if (failed(checkSize(emitError, "shared_ffn", sharedFfn)))
      return failure();
    if (sharedExperts * sharedFfn > kMaxDim)
      return emitError() << "expected shared_experts * shared_ffn <= "
                         << kMaxDim << ", got " << sharedExperts * sharedFfn;
  } else {
    if (sharedFfn != 0)
      return emitError() << "expected shared_ffn = 0 without shared experts, "
                            "got "
                         << sharedFfn;
    if (sharedGate)
      return emitError() << "expected shared_gate = false without shared "
                            "experts";
  }
  double alpha = swigluAlpha.convertToDouble();
  double limit = swigluLimit.convertToDouble();
  if (activation == Activation::ClampedSwiGLU) {
    if (!std::isfinite(alpha) || alpha <= 0.0)
      return emitError() << "expected a finite swiglu_alpha > 0, got "
                         << shortest(alpha);
    if (!std::isfinite(limit) || limit <= 0.0)
      return emitError() << "expected a finite swiglu_limit > 0, got "
                         << shortest(limit);
  } else if (alpha != 1.702 || limit != 7.0) {
    return emitError() << "expected swiglu_alpha and swiglu_limit only with "
                          "activation = clamped_swiglu";
  }
  if (!dtype || !(dtype.isF32() || dtype.isBF16() || dtype.isF16()))
    return emitError() << "expected dtype to be f32, bf16 or f16, got "
                       << dtype;
  if (expertDtype && expertDtype != dtype &&
      !isa<Float8E4M3FNType>(expertDtype))
    return emitError() << "expected expert_dtype to be the dtype (" << dtype
                       << ") or f8E4M3FN, got " << expertDtype;
  if (fp8Recipe && !isa_and_nonnull<Float8E4M3FNType>(expertDtype))
    return emitError() << "expected fp8_recipe only with expert_dtype = "
                          "f8E4M3FN";
  return success();
}

LogicalResult
Fp8RecipeAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                      Fp8Scaling scaling, int64_t block) {
  if (block != 128)
    return emitError() << "expected block = 128 (the tile of the FP8 "
                          "kernels), got "
                       << block;
  return success();
}

LogicalResult
SmPartitionAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                        int64_t sms, int64_t comm) {
  if (sms <= 0 || sms > ::moe::abi::kMaxSms)
    return emitError() << "expected 0 < sms <= " << ::moe::abi::kMaxSms
                       << ", got " << sms;
  if (comm < 0 || comm >= sms)
    return emitError() << "expected 0 <= comm < sms (" << sms << "), got "
                       << comm;
  return success();
}
