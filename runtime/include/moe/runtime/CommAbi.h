//===- CommAbi.h - Collectives called from compiled code --------*- C++ -*-===//
//
// Part of moe-compiler. The contract between host code compiled with
// expert parallelism and the runtime: the shared object exports
// `moe_comm`, an array of kSlotCount 64-bit words, zero until the runtime
// writes a communicator context and three function addresses into it after
// loading. Every function takes the context first; pointers and sizes are
// passed as 64-bit integers:
//
//   exchangeCounts(ctx, kind, const int32_t *inOffsets, int32_t *outOffsets,
//                  int64_t experts)
//   exchangeRows(ctx, kind, const void *in, const int32_t *inOffsets,
//                void *out, const int32_t *outOffsets, int64_t experts,
//                int64_t rowBytes)
//   allReduce(ctx, float *data, int64_t count)        // sum, in place
//   startRows(same arguments as exchangeRows) -> int64_t handle
//   wait(ctx, int64_t handle)
//
// startRows takes what it needs of its inputs before it returns; only
// `out` must stay untouched until the wait on the returned handle.
// Collectives run in the order they are called, on every rank.
//
// `kind` is 0 (dispatch: every expert segment goes to the expert's rank,
// which lays what it receives out by (local expert, source rank)) or 1
// (combine: the reverse). Offsets are the `[experts + 1]` prefix sums of
// the segment sizes. Header-only: the compiler includes it too.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_RUNTIME_COMMABI_H
#define MOE_RUNTIME_COMMABI_H

#include <cstdint>

namespace moe::comm {

constexpr const char *kTableName = "moe_comm";

enum class Slot : int32_t {
  Context = 0,
  ExchangeCounts = 1,
  ExchangeRows = 2,
  AllReduce = 3,
  StartRows = 4,
  Wait = 5,
};
constexpr int64_t kSlotCount = 6;

enum class Kind : int64_t { Dispatch = 0, Combine = 1 };

} // namespace moe::comm

#endif // MOE_RUNTIME_COMMABI_H
