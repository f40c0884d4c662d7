//===- ScheduleAbi.h - The sm_90a schedule's shared vocabulary --*- C++ -*-===//
//
// Part of moe-compiler's runtime. What the compiler's typed schedule (the
// moegpu.program op) and the runtime's manifest both speak: how a launch's
// grid is sized, what a buffer's run-time dimensions stand for, and the
// kinds of expert-parallel exchange. The compiler maps its enums onto these
// and the runtime reads manifests through them; nobody spells the strings
// or the size markers anywhere else. Header-only, no LLVM/MLIR.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_RUNTIME_SCHEDULEABI_H
#define MOE_RUNTIME_SCHEDULEABI_H

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <optional>
#include <string_view>

namespace moe::abi {

/// The most SMs a GPU (and so an SM partition, a persistent grid and an
/// NCCL communicator's CTA cap) may have, everywhere.
constexpr int64_t kMaxSms = 1024;
/// The partition when none is given: all 132 SMs of an H100/H200 SXM for
/// compute, none kept for communication.
constexpr int64_t kDefaultSms = 132;

/// How many CTAs a launch gets.
enum class GridKind {
  Tokens,       ///< ceil(T / per_block)
  Assignments,  ///< ceil(T * k / per_block)
  Rows,         ///< ceil(dispatched-row capacity / per_block), per_block 0: 1
  ReceivedRows, ///< the same over the rows an expert-parallel rank receives
  One,          ///< one CTA
  Persistent,   ///< the kernel's own grid (its SM range), decided at compile
  Fixed,        ///< `size` CTAs
};

inline constexpr std::string_view kGridKindNames[] = {
    "tokens", "assignments", "rows", "received_rows",
    "one",    "persistent",  "fixed"};

constexpr std::string_view gridKindName(GridKind kind) {
  return kGridKindNames[static_cast<size_t>(kind)];
}

constexpr std::optional<GridKind> parseGridKind(std::string_view name) {
  for (size_t i = 0; i < std::size(kGridKindNames); ++i)
    if (kGridKindNames[i] == name)
      return static_cast<GridKind>(i);
  return std::nullopt;
}

/// A buffer dimension known only at run time, as the manifest writes it
/// (a negative size).
enum class BufferDim : int64_t {
  Tokens = -1,       ///< the token count of the pass
  Rows = -2,         ///< the dispatched-row capacity
  ReceivedRows = -3, ///< ranks x the dispatched-row capacity
};

constexpr bool isBufferDim(int64_t size) { return size >= -3 && size <= -1; }

/// The kinds of expert-parallel exchange between launches, and how many
/// buffers each takes (GpuStep in moe/runtime/Bundle.h says which).
enum class ExchangeKind {
  Dispatch,
  Combine,
  DispatchRows,
  CombineRows,
  DispatchPlan
};

inline constexpr std::string_view kExchangeKindNames[] = {
    "dispatch", "combine", "dispatch_rows", "combine_rows", "dispatch_plan"};
/// Buffers each kind takes; a dispatch_plan takes at least 3 (offsets,
/// ep_offsets, then one group-offsets buffer per chunk).
inline constexpr size_t kExchangeArity[] = {7, 4, 2, 2, 3};

constexpr std::string_view exchangeKindName(ExchangeKind kind) {
  return kExchangeKindNames[static_cast<size_t>(kind)];
}

constexpr size_t exchangeArity(ExchangeKind kind) {
  return kExchangeArity[static_cast<size_t>(kind)];
}

constexpr std::optional<ExchangeKind> parseExchangeKind(std::string_view name) {
  for (size_t i = 0; i < std::size(kExchangeKindNames); ++i)
    if (kExchangeKindNames[i] == name)
      return static_cast<ExchangeKind>(i);
  return std::nullopt;
}

} // namespace moe::abi

#endif // MOE_RUNTIME_SCHEDULEABI_H
