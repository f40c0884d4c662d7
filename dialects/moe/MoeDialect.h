//===- MoeDialect.h - The moe dialect ---------------------------*- C++ -*-===//
//
// Part of moe-compiler.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_DIALECT_MOE_MOEDIALECT_H
#define MOE_DIALECT_MOE_MOEDIALECT_H

#include "mlir/IR/Attributes.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/APFloat.h"

#include "moe/MoeDialect.h.inc"
#include "moe/MoeEnums.h.inc"

namespace mlir::moe {
/// Rows and columns of an FP8 weight's scale block, and channels of an
/// activation's (DeepSeek-V3's fine-grained quantization).
constexpr int64_t kFp8Block = 128;
/// The largest finite e4m3 value: a block's largest magnitude maps to it.
constexpr double kFp8Max = 448.0;
/// The smallest block maximum an activation's scale is computed from (an
/// all-zero block gets a finite scale).
constexpr double kFp8MinAmax = 1e-4;
/// The same for the operands of a training step's backward GEMMs
/// (moe.fp8_quantize): gradients are orders of magnitude below 1e-4, which
/// would flush them to e4m3's subnormals or zero; 2^-100 only keeps the
/// inverse scale 448 / a finite.
constexpr double kFp8MinGradAmax = 0x1p-100;

/// Scale blocks covering `n` rows or columns.
inline int64_t fp8Blocks(int64_t n) { return (n + kFp8Block - 1) / kFp8Block; }

/// Field parsers used by the attribute assembly formats.
FailureOr<bool> parseBoolParameter(AsmParser &parser);
FailureOr<llvm::APFloat> parseF64Parameter(AsmParser &parser);
void printF64Parameter(AsmPrinter &printer, const llvm::APFloat &value);

/// Parses the keyword of an enum case, naming the valid ones on error. The
/// cases of `EnumT` are numbered from 0 without gaps.
template <typename EnumT>
FailureOr<EnumT> parseEnumParameter(AsmParser &parser) {
  SMLoc loc = parser.getCurrentLocation();
  StringRef keyword;
  if (failed(parser.parseOptionalKeyword(&keyword)))
    keyword = "";
  if (std::optional<EnumT> value = symbolizeEnum<EnumT>(keyword))
    return *value;
  std::string valid;
  for (uint32_t i = 0;; ++i) {
    StringRef name = stringifyEnum(static_cast<EnumT>(i));
    if (name.empty())
      break;
    valid += (i ? ", " : "") + name.str();
  }
  return parser.emitError(loc)
         << "expected one of " << valid << ", got '" << keyword << "'";
}
} // namespace mlir::moe

#define GET_ATTRDEF_CLASSES
#include "moe/MoeAttrs.h.inc"

#endif // MOE_DIALECT_MOE_MOEDIALECT_H
