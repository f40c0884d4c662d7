//===- Routing.cpp - Shape arithmetic of MoE token routing ----------------===//
//
// Part of moe-compiler.
//
//===----------------------------------------------------------------------===//

#include "moe/Support/Routing.h"

#include <algorithm>

namespace mlir::moe {

bool isPowerOfTwo(int64_t value) {
  return value > 0 && (value & (value - 1)) == 0;
}

std::optional<int64_t> paddedRowsUpperBound(int64_t tokens, int64_t topK,
                                            int64_t experts,
                                            int64_t alignment) {
  if (tokens < 0 || topK <= 0 || experts <= 0 || alignment <= 0)
    return std::nullopt;
  int64_t assignments;
  if (__builtin_mul_overflow(tokens, topK, &assignments))
    return std::nullopt;
  // Every expert that receives at least one row costs one block; each further
  // block of an expert needs `alignment` more rows. The most blocks come from
  // spreading one row over as many experts as possible and packing the rest
  // into whole blocks.
  int64_t nonEmpty = std::min(experts, assignments);
  int64_t blocks = nonEmpty + (assignments - nonEmpty) / alignment;
  int64_t rows;
  if (__builtin_mul_overflow(blocks, alignment, &rows))
    return std::nullopt;
  return rows;
}

} // namespace mlir::moe
