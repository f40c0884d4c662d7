//===- Nesting.h - A depth limit for MLIR text before it is parsed -*- C++ -*-//
//
// Part of moe-compiler. MLIR's parser recurses once per nested region,
// type, attribute or list, so a few thousand levels of `module {`,
// `tuple<` or `[` exhaust the stack. Every reader of MLIR text (moe-opt,
// moe-compile, the C and Python APIs, the fuzzers) checks the nesting
// first with this scan, as the JSON readers do (rt::checkJsonDepth).
//
//===----------------------------------------------------------------------===//

#ifndef MOE_SUPPORT_NESTING_H
#define MOE_SUPPORT_NESTING_H

#include <cstddef>
#include <string>

namespace mlir::moe {

/// The deepest bracket nesting accepted in MLIR text: far beyond what any
/// layer or pass output holds (tens of levels), far below what exhausts
/// the parser's stack (512 nested modules take 1-2 MB of it,
/// and sanitizers triple that); the JSON readers' limit too.
constexpr int kMaxMlirNesting = 256;

/// Checks that the MLIR text `data` nests brackets (`{`, `(`, `[`, `<`) at
/// most `maxDepth` deep, skipping strings, comments and the arrows and
/// comparisons (`->`, `<=`, `>=`) whose angle brackets open nothing.
/// Returns "" or the error, "NAME: MLIR nested deeper than N levels (at
/// line L, column C)". MLIR bytecode (binary) is not checked.
std::string checkMlirNesting(const char *data, size_t size,
                             const std::string &name,
                             int maxDepth = kMaxMlirNesting);

} // namespace mlir::moe

#endif // MOE_SUPPORT_NESTING_H
