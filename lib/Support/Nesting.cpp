//===- Nesting.cpp - A depth limit for MLIR text --------------------------===//
//
// Part of moe-compiler.
//
//===----------------------------------------------------------------------===//

#include "moe/Support/Nesting.h"

#include <cstring>

namespace mlir::moe {

std::string checkMlirNesting(const char *data, size_t size,
                             const std::string &name, int maxDepth) {
  // MLIR bytecode starts with "ML\xefR"; its reader is not this scan's.
  if (size >= 4 && std::memcmp(data, "ML\xefR", 4) == 0)
    return {};
  int depth = 0;
  size_t line = 1, lineStart = 0;
  for (size_t i = 0; i < size; ++i) {
    char c = data[i];
    char next = i + 1 < size ? data[i + 1] : '\0';
    switch (c) {
    case '\n':
      ++line;
      lineStart = i + 1;
      break;
    case '"':
      // A string: up to its unescaped closing quote or the line's end
      // (where the lexer stops too).
      for (++i; i < size && data[i] != '"' && data[i] != '\n'; ++i)
        if (data[i] == '\\')
          ++i;
      if (i < size && data[i] == '\n')
        --i; // counted as a line break by the loop
      break;
    case '/':
      if (next == '/')
        while (i + 1 < size && data[i + 1] != '\n')
          ++i;
      break;
    case '-':
      if (next == '>')
        ++i; // "->"
      break;
    case '<':
    case '>':
      if (next == '=') {
        ++i; // "<=", ">="
        break;
      }
      [[fallthrough]];
    default:
      if (c == '{' || c == '(' || c == '[' || c == '<') {
        if (++depth > maxDepth)
          return name + ": MLIR nested deeper than " +
                 std::to_string(maxDepth) + " levels (at line " +
                 std::to_string(line) + ", column " +
                 std::to_string(i - lineStart + 1) + ")";
      } else if ((c == '}' || c == ')' || c == ']' || c == '>') && depth > 0) {
        --depth;
      }
    }
  }
  return {};
}

} // namespace mlir::moe
