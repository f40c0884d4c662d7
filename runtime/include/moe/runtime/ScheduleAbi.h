//===- ScheduleAbi.h - The sm_90a schedule's shared vocabulary --*- C++ -*-===//
//
// Part of moe-compiler's runtime. What the compiler's typed schedule (the
// moegpu.program op) and the runtime's manifest both speak: how a launch's
// grid is sized, what a buffer's run-time dimensions stand for and where
// its contents come from, the kinds of step and of expert-parallel
// exchange. The compiler maps its enums onto these
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
#include <string>
#include <string_view>

namespace moe::abi {

/// The most SMs a GPU (and so an SM partition, a persistent grid and an
/// NCCL communicator's CTA cap) may have, everywhere.
constexpr int64_t kMaxSms = 1024;
/// The partition when none is given: all 132 SMs of an H100/H200 SXM for
/// compute, none kept for communication.
constexpr int64_t kDefaultSms = 132;

/// The packed gate/up weight ([E, 2F, H], and the [E, 2F] biases) holds
/// blocks of this many gate rows, each followed by the same rows of up: the
/// runtime packs checkpoints so, the training step's pack kernel too, and
/// the SwiGLU epilogue finds a gate column and its up column in neighbouring
/// 8-column chunks of a wgmma fragment.
constexpr int64_t kGateUpBlock = 8;

/// The name of enumerator `kind` in `names` (the enum's order), and the
/// enumerator a name stands for: every kind below is spelled through these.
template <typename Enum, size_t N>
constexpr std::string_view nameOf(const std::string_view (&names)[N],
                                  Enum kind) {
  return names[static_cast<size_t>(kind)];
}

template <typename Enum, size_t N>
constexpr std::optional<Enum> parseName(const std::string_view (&names)[N],
                                        std::string_view name) {
  for (size_t i = 0; i < N; ++i)
    if (names[i] == name)
      return static_cast<Enum>(i);
  return std::nullopt;
}

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
  return nameOf(kGridKindNames, kind);
}

constexpr std::optional<GridKind> parseGridKind(std::string_view name) {
  return parseName<GridKind>(kGridKindNames, name);
}

/// A buffer dimension known only at run time, as the manifest writes it
/// (a negative size).
enum class BufferDim : int64_t {
  Tokens = -1,       ///< the token count of the pass
  Rows = -2,         ///< the dispatched-row capacity
  ReceivedRows = -3, ///< ranks x the dispatched-row capacity
  /// The blocks of 128 rows of those two (the FP8 weight gradients'
  /// per-column scales: one a column per 128 rows).
  RowBlocks = -4,
  ReceivedRowBlocks = -5,
};

constexpr bool isBufferDim(int64_t size) { return size >= -5 && size <= -1; }

/// The rows of a `RowBlocks` dimension's block.
constexpr int64_t kRowBlock = 128;

/// Dimension `d` of a buffer: a static size, or the token count, the rows
/// or the received rows (or their blocks of kRowBlock) given.
constexpr int64_t resolveBufferDim(int64_t d, int64_t tokens, int64_t rows,
                                   int64_t received) {
  auto blocks = [](int64_t n) { return (n + kRowBlock - 1) / kRowBlock; };
  switch (static_cast<BufferDim>(d)) {
  case BufferDim::Tokens:
    return tokens;
  case BufferDim::Rows:
    return rows;
  case BufferDim::ReceivedRows:
    return received;
  case BufferDim::RowBlocks:
    return blocks(rows);
  case BufferDim::ReceivedRowBlocks:
    return blocks(received);
  }
  return d;
}

/// What a launched kernel computes: the moegpu op its body is (named by
/// the op's mnemonic). The performance model and the report dispatch on
/// it; a manifest's launch carries it as `kernel_kind`.
enum class KernelKind {
  Other, ///< a kernel with no moegpu op (none the compiler makes)
  GroupedGemm,
  RouterLogits,
  SharedGate,
  Route,
  DispatchScan,
  DispatchScatter,
  Quantize,
  Combine,
  Convert,    ///< bundles before compute_copies: one master's copy
  PackGateUp, ///< bundles before compute_copies: a packed gate/up copy
  MseLoss,
  ColumnSum,
  GroupedColumnSum,
  RowTokens,
  GatherRowDy,
  ScatterRowWeightGrad,
  ScaledWeightGrad,
  ScaleRows,
  ActGrad,
  RouteGrad,
  InputGrad,
  SharedScaleGrad,
  RouterGrad,
  TokenOffsets,
  ExpertLoad,
  BiasUpdate,
  AdamW,
  UpdateCheck,
  UpdateVerdict,
  SumSplits,
  ComputeCopies,
  GradStats,
  EpCounts,
  EpSend,
  EpWait,
  QuantizeColumns, ///< FP8 Wgrad operands: 128 x 1 codes, transposed
  QuantizeBlocks,  ///< FP8 masters: 128 x 128 block codes
};

inline constexpr std::string_view kKernelKindNames[] = {
    "other",
    "grouped_gemm",
    "router_logits",
    "shared_gate",
    "route",
    "dispatch_scan",
    "dispatch_scatter",
    "quantize",
    "combine",
    "convert",
    "pack_gate_up",
    "mse_loss",
    "column_sum",
    "grouped_column_sum",
    "row_tokens",
    "gather_row_dy",
    "scatter_row_weight_grad",
    "scaled_weight_grad",
    "scale_rows",
    "act_grad",
    "route_grad",
    "input_grad",
    "shared_scale_grad",
    "router_grad",
    "token_offsets",
    "expert_load",
    "bias_update",
    "adamw",
    "update_check",
    "update_verdict",
    "sum_splits",
    "compute_copies",
    "grad_stats",
    "ep_counts",
    "ep_send",
    "ep_wait",
    "quantize_columns",
    "quantize_blocks"};

constexpr std::string_view kernelKindName(KernelKind kind) {
  return nameOf(kKernelKindNames, kind);
}

constexpr std::optional<KernelKind> parseKernelKind(std::string_view name) {
  return parseName<KernelKind>(kKernelKindNames, name);
}

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
  return nameOf(kExchangeKindNames, kind);
}

constexpr size_t exchangeArity(ExchangeKind kind) {
  return kExchangeArity[static_cast<size_t>(kind)];
}

constexpr std::optional<ExchangeKind> parseExchangeKind(std::string_view name) {
  return parseName<ExchangeKind>(kExchangeKindNames, name);
}

/// What a step of a schedule does.
/// How a step's expert-parallel exchange moves rows: a step of a transport
/// runs only when the runtime chose it for its communicator (Any: always).
enum class Transport {
  Any,
  Lsa,  ///< device-initiated kernels over NCCL symmetric memory (one node)
  Nccl, ///< host-driven exchanges over NCCL's send and receive
};

inline constexpr std::string_view kTransportNames[] = {"", "lsa", "nccl"};

constexpr std::string_view transportName(Transport t) {
  return nameOf(kTransportNames, t);
}

constexpr std::optional<Transport> parseTransport(std::string_view name) {
  return parseName<Transport>(kTransportNames, name);
}

/// The device-initiated exchange's status word (ep_status[0]; [1] says
/// which rank or flag): what its kernels stopped at. Past a failure every
/// later exchange kernel of the pass does nothing.
enum class ExchangeStatus : int32_t {
  Ok = 0,
  SizesTimeout = 1,    ///< a rank's sizes did not come ([1]: the rank)
  DispatchTimeout = 2, ///< the dispatch's rows did not all come ([1]: flag)
  CombineTimeout = 3,  ///< the combine's rows did not all come ([1]: flag)
  Capacity = 4, ///< a rank would receive more rows than it holds ([1]: rank)
};

/// The device-initiated exchange's flags (ep_flags): one a rank (its
/// sizes), then kExchangeFlagsPerChunk a token chunk (one set without
/// chunks): chunk c's flag f is word ranks + c kExchangeFlagsPerChunk + f.
enum class ExchangeFlag : int32_t {
  Dispatch = 0,     ///< the forward pass's rows to the experts' ranks
  Combine = 1,      ///< the experts' outputs back
  DispatchRows = 2, ///< a training step's dy (FP8: the rows' scales)
  CombineRows = 3,  ///< a training step's row and weight gradients back
};
constexpr int32_t kExchangeFlagsPerChunk = 4;

enum class StepKind {
  Launch,    ///< a kernel over its buffers
  Memset,    ///< one buffer zeroed
  Exchange,  ///< an expert-parallel exchange (ExchangeKind)
  AllReduce, ///< f32 buffers summed over the ranks in place
};

inline constexpr std::string_view kStepKindNames[] = {"launch", "memset",
                                                      "exchange", "all_reduce"};

constexpr std::string_view stepKindName(StepKind kind) {
  return nameOf(kStepKindNames, kind);
}

constexpr std::optional<StepKind> parseStepKind(std::string_view name) {
  return parseName<StepKind>(kStepKindNames, name);
}

/// Where a device buffer's contents come from.
enum class SourceKind {
  Input,     ///< the pass's input x
  Output,    ///< an output read back after the pass
  Scratch,   ///< written by the schedule itself
  Param,     ///< a checkpoint tensor (`role`)
  Pack,      ///< gate and up tensors interleaved in blocks of kGateUpBlock
             ///< rows along dim -2 (`role`, then `upRole`)
  Concat,    ///< gate rows, then up rows, along dim -2
  Arg,       ///< a training step's argument (`role`)
  Tokens,    ///< one i32, the pass's token count: the runtime writes it
             ///< before each pass, and the kernels read it
  Symmetric, ///< scratch in the communicator's symmetric window, at one
             ///< offset on every rank (the device-initiated exchange)
  Peers,     ///< the device-initiated exchange's i64 peers: each rank's
             ///< distance from this rank's window, the rank, the waits'
             ///< limit (ns) and the rows a rank can receive; the runtime's
};

/// A buffer's source, written `input`, `output`, `scratch`, `tokens`,
/// `param:<role>`, `pack:<gate role>,<up role>`, `concat:<gate
/// role>,<up role>` or `arg:<name>`: the one spelling the compiler's
/// moegpu.buffer and the manifest share, parsed only by parseBufferSource.
struct BufferSource {
  SourceKind kind = SourceKind::Scratch;
  std::string role, upRole;

  bool fromCheckpoint() const {
    return kind == SourceKind::Param || kind == SourceKind::Pack ||
           kind == SourceKind::Concat;
  }
  bool operator==(const BufferSource &o) const {
    return kind == o.kind && role == o.role && upRole == o.upRole;
  }
};

inline std::optional<BufferSource> parseBufferSource(std::string_view text) {
  auto after = [&](std::string_view prefix) -> std::optional<std::string_view> {
    if (text.substr(0, prefix.size()) != prefix)
      return std::nullopt;
    return text.substr(prefix.size());
  };
  BufferSource s;
  if (text == "input" || text == "output" || text == "scratch" ||
      text == "tokens" || text == "symmetric" || text == "peers") {
    s.kind = text == "input"       ? SourceKind::Input
             : text == "output"    ? SourceKind::Output
             : text == "tokens"    ? SourceKind::Tokens
             : text == "symmetric" ? SourceKind::Symmetric
             : text == "peers"     ? SourceKind::Peers
                                   : SourceKind::Scratch;
    return s;
  }
  for (auto [prefix, kind] : {std::pair{"param:", SourceKind::Param},
                              std::pair{"arg:", SourceKind::Arg}})
    if (std::optional<std::string_view> role = after(prefix)) {
      if (role->empty() || role->find(',') != std::string_view::npos)
        return std::nullopt;
      s.kind = kind;
      s.role = std::string(*role);
      return s;
    }
  for (auto [prefix, kind] : {std::pair{"pack:", SourceKind::Pack},
                              std::pair{"concat:", SourceKind::Concat}})
    if (std::optional<std::string_view> roles = after(prefix)) {
      size_t comma = roles->find(',');
      if (comma == 0 || comma == std::string_view::npos ||
          comma + 1 == roles->size() ||
          roles->find(',', comma + 1) != std::string_view::npos)
        return std::nullopt;
      s.kind = kind;
      s.role = std::string(roles->substr(0, comma));
      s.upRole = std::string(roles->substr(comma + 1));
      return s;
    }
  return std::nullopt;
}

inline std::string formatBufferSource(const BufferSource &s) {
  switch (s.kind) {
  case SourceKind::Input:
    return "input";
  case SourceKind::Output:
    return "output";
  case SourceKind::Scratch:
    return "scratch";
  case SourceKind::Tokens:
    return "tokens";
  case SourceKind::Symmetric:
    return "symmetric";
  case SourceKind::Peers:
    return "peers";
  case SourceKind::Param:
    return "param:" + s.role;
  case SourceKind::Arg:
    return "arg:" + s.role;
  case SourceKind::Pack:
    return "pack:" + s.role + "," + s.upRole;
  case SourceKind::Concat:
    return "concat:" + s.role + "," + s.upRole;
  }
  return "scratch";
}

} // namespace moe::abi

#endif // MOE_RUNTIME_SCHEDULEABI_H
