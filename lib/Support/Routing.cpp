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

std::string checkAlignment(int64_t alignment) {
  if (isPowerOfTwo(alignment) && alignment <= kMaxAlignment)
    return "";
  return "expected alignment to be a power of two <= " +
         std::to_string(kMaxAlignment) + ", got " + std::to_string(alignment);
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

std::string checkGroupLimitedTopK(int64_t experts, int64_t k, int64_t groups,
                                  int64_t topkGroups, bool sumTop2,
                                  const char *kName) {
  auto str = [](int64_t v) { return std::to_string(v); };
  if (k < 1 || k > experts)
    return "expected 1 <= " + std::string(kName) + " <= experts (" +
           str(experts) + "), got " + str(k);
  if (groups < 1 || groups > experts || experts % groups != 0)
    return "expected groups to divide experts (" + str(experts) + "), got " +
           str(groups);
  if (topkGroups < 1 || topkGroups > groups)
    return "expected 1 <= topk_groups <= groups (" + str(groups) + "), got " +
           str(topkGroups);
  int64_t perGroup = experts / groups;
  if (k > topkGroups * perGroup)
    return "expected " + std::string(kName) +
           " <= topk_groups * experts per group (" + str(topkGroups) + " * " +
           str(perGroup) + " = " + str(topkGroups * perGroup) + "), got " +
           str(k);
  if (groups > 1 && sumTop2 && perGroup < 2)
    return "expected at least 2 experts per group with group_score = "
           "sum_top2, got " +
           str(perGroup);
  return "";
}

} // namespace mlir::moe
