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

namespace mlir::moe {

/// Returns true if `value` is a positive power of two.
bool isPowerOfTwo(int64_t value);

/// Upper bound on the number of rows of the expert-contiguous buffer that
/// `moe.dispatch` produces for `tokens` tokens routed to `topK` experts each
/// over `experts` experts, when every expert's segment is padded up to a
/// multiple of `alignment` rows. The bound is tight: some routing reaches it.
/// Returns std::nullopt on negative or zero sizes where positive ones are
/// required, or when the result does not fit in int64_t.
std::optional<int64_t> paddedRowsUpperBound(int64_t tokens, int64_t topK,
                                            int64_t experts, int64_t alignment);

} // namespace mlir::moe

#endif // MOE_SUPPORT_ROUTING_H
