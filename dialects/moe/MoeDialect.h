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
