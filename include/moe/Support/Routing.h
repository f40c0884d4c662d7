//===- Routing.h - Shape arithmetic of MoE token routing --------*- C++ -*-===//
//
// Part of moe-compiler. Plain C++ (no MLIR types) so that verifiers, passes,
// the runtime and unit tests share one definition of the routing shapes.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_SUPPORT_ROUTING_H
#define MOE_SUPPORT_ROUTING_H

#include <cstdint>
#include <optional>
#include <string>

namespace mlir::moe {

/// Returns true if `value` is a positive power of two.
bool isPowerOfTwo(int64_t value);

/// The largest row alignment of expert segments (dispatch, decomposition,
/// autodiff, moe-compile --alignment).
constexpr int64_t kMaxAlignment = int64_t(1) << 16;

/// The alignment rule, in one place: "" when `alignment` is a power of two
/// <= kMaxAlignment, else the reason ("expected alignment to be a power of
/// two <= 65536, got 96").
std::string checkAlignment(int64_t alignment);

/// Upper bound on the number of rows of the expert-contiguous buffer that
/// `moe.dispatch` produces for `tokens` tokens routed to `topK` experts each
/// over `experts` experts, when every expert's segment is padded up to a
/// multiple of `alignment` rows. The bound is tight: some routing reaches it.
/// Returns std::nullopt on negative or zero sizes where positive ones are
/// required, or when the result does not fit in int64_t.
std::optional<int64_t> paddedRowsUpperBound(int64_t tokens, int64_t topK,
                                            int64_t experts, int64_t alignment);

/// Checks the parameters of group-limited top-k routing over `experts`
/// experts: 1 <= k <= experts, groups dividing the experts, 1 <= topkGroups
/// <= groups, k within the kept groups' experts, and two experts per group
/// when groups are scored by their two best. Returns "" or the message,
/// which calls k `kName` ("top_k" in configs, "k" on moe.topk).
std::string checkGroupLimitedTopK(int64_t experts, int64_t k, int64_t groups,
                                  int64_t topkGroups, bool sumTop2,
                                  const char *kName);

} // namespace mlir::moe

#endif // MOE_SUPPORT_ROUTING_H
