//===- Compiler.h - Compile one MoE layer -----------------------*- C++ -*-===//
//
// Part of moe-compiler. The whole of moe-compile as a library call, shared by
// the tool and the compiler's C API, plus the compile cache.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_COMPILER_COMPILER_H
#define MOE_COMPILER_COMPILER_H

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mlir::moe {

/// The compiler's version; part of every cache key.
extern const char *const kCompilerVersion;

enum class InputKind { Mlir, HFConfig };

struct CompileOptions {
  std::string target = "host"; // host | sm_90a
  /// host: mlir | llvm | bundle; sm_90a: mlir | ptx | cubin | bundle.
  std::string emit = "bundle";
  std::string dtype; // f32 | bf16 | f16; "" for the default
  /// The FP8 layer's recipe: block (DeepSeek-V3's) | tensor; "" keeps the
  /// layer's own (block when it names none).
  std::string fp8Recipe;
  int64_t maxTokens = 4096;
  /// Set by compile() when the layer's input has a static token count T:
  /// the bundle then takes exactly T tokens (and maxTokens becomes T).
  int64_t staticTokens = 0;
  /// Rows each expert's segment is padded to; 0 for the target's default
  /// (1 on the host, 128 on sm_90a).
  int64_t alignment = 0;
  /// sm_90a: "SMS:COMM" overriding the layer's partition, or "auto" /
  /// "SMS:auto" for the performance model's comm SMs; "" keeps the
  /// layer's (132:0 when it has none), except that a sharded layer whose
  /// partition keeps no comm SMs gets the model's.
  std::string smPartition;
  /// sm_90a: BLOCK_N of every grouped GEMM whose N it divides (64, 128,
  /// 192 or 256); 0 leaves each to the cost model.
  int64_t tileN = 0;
  /// sm_90a: BLOCK_M of the GEMMs, 64 or 128 (0: 128).
  int64_t tileM = 0;
  /// sm_90a: 2 pairs the CTAs of the grouped GEMMs whose BLOCK_N is a
  /// multiple of 128 in clusters that share B by TMA multicast.
  int64_t tileCluster = 1;
  /// sm_90a: per-kernel resource report (ptxas -v) in CompileResult.
  bool report = false;
  /// sm_90a: the ptxas to run; "" finds one.
  std::string ptxas;
  /// sm_90a: warn when a rank's buffers need more device memory than this
  /// many bytes; 0 for no budget.
  uint64_t deviceMemory = 0;
  /// Also compile the training step (host): forward, MSE loss, backward,
  /// AdamW and the auxiliary-loss-free bias update.
  bool train = false;
  /// With train: the dtype AdamW keeps its moments in, f32 or bf16 (as
  /// DeepSeek-V3 trained: half the optimizer's memory; the update is
  /// computed in f32 and rounded once per step); "" for f32.
  std::string optimizerState;
  /// Also compile the layer's backward pass as an entry point of its own
  /// (host): given x and dy = dL/dy, the gradients of x and of every
  /// trained weight, for a framework's autograd (moe_backward). With ep >
  /// 1, this rank's experts' gradients and the replicated weights'
  /// gradients summed over the ranks.
  bool backward = false;
  /// Expert-parallel ranks (moe-expert-parallel): each rank of the bundle
  /// holds experts/ep experts. Needs train on the host target.
  int64_t ep = 1;
  /// With ep > 1: exchange the tokens in this many chunks, overlapping one
  /// chunk's all-to-all with another chunk's experts.
  int64_t epChunks = 1;
  std::string weightNames; // deepseek | mixtral | qwen; "" for the default
  std::string mcpu;        // "" (generic), "native" or a CPU name
  bool timing = false;     // print MLIR's timing report to stderr
  /// Apply MLIR's pass manager command-line options (crash reproducers,
  /// IR printing); only for tools that registered them.
  bool passManagerCLOptions = false;
};

struct CompileResult {
  /// The output: MLIR or LLVM IR text, or the bundle's bytes.
  std::vector<uint8_t> output;
  /// Empty on success; else one line saying what is wrong.
  std::string error;
  /// Diagnostics with source locations (file:line:col: error: ...), if any.
  std::string diagnostics;
  /// The --report table, or "".
  std::string report;
  /// A problem that did not stop the compile (the cache could not be
  /// written), or "".
  std::string warning;
  bool ok() const { return error.empty() && diagnostics.empty(); }
};

/// Checks the options; returns an error message or "".
std::string validateOptions(const CompileOptions &options);

/// The row alignment of expert segments the options give: --alignment, or
/// the target's default (1 on the host, 128 on sm_90a).
int64_t alignmentFor(const CompileOptions &options);

/// Compiles `input`, the text of a .mlir file or of a config.json named
/// `inputName` (used in diagnostics).
CompileResult compile(const std::string &input, const std::string &inputName,
                      InputKind kind, const CompileOptions &options);

/// compile() through the compile cache: a bundle (emit = bundle) comes from
/// an intact cache entry with the same key when there is one (except with
/// `timing` or `report`, which want the compile itself), and is stored
/// after a successful compile. Other outputs, or `useCache` false, go
/// straight to compile().
CompileResult compileCached(const std::string &input,
                            const std::string &inputName, InputKind kind,
                            const CompileOptions &options, bool useCache);

/// A hex SHA-256 over the compiler version, the build of the compiler (the
/// path, size and modification time of the file holding it, so a rebuilt
/// compiler does not reuse what an older build compiled), the input kind
/// and text, and every option that changes the output (with "native"
/// resolved to this machine's CPU).
std::string cacheKey(const std::string &input, InputKind kind,
                     const CompileOptions &options);

/// "<file>:<size>:<mtime>" of the file that holds this compiler (empty if
/// it cannot be found): the build part of every cache key.
std::string buildIdentity();

/// The cache directory: $MOE_CACHE_DIR, else $XDG_CACHE_HOME/moe-compiler,
/// else $HOME/.cache/moe-compiler.
std::optional<std::string> cacheDirectory();

/// A cache entry is the bundle followed by a trailer, "MOECACHE" and the
/// 64 hex digits of the key it was stored under: an entry is served only
/// when it is a regular file, its trailer names the key looked up and its
/// bundle passes the bundle checks (checksum included). Anything else is
/// a miss, and the next store replaces it.
/// The cached bundle for `key`, if there is a valid entry.
std::optional<std::vector<uint8_t>> lookupCache(const std::string &dir,
                                                const std::string &key);

/// Stores `bundle` (with its trailer) under `key`: written to a unique temporary file in the
/// directory, then renamed, so concurrent writers of one key never leave a
/// partial entry. Returns an error message or "".
std::string storeCache(const std::string &dir, const std::string &key,
                       const std::vector<uint8_t> &bundle);

/// The device-initiated exchange alone, as moe-comm-bench runs it: `ranks`
/// ranks of `experts / ranks` experts each, rows of `hidden` bf16 with an
/// f32 routing weight, sends on `ctas` CTAs, whole (one token chunk).
struct ExchangeKernelShape {
  int64_t ranks = 2;
  int64_t experts = 8;
  int64_t hidden = 64;
  int64_t ctas = 20;
};

/// The sm_90a PTX of the exchange's kernels, each one kernel op that the
/// compiler schedules for a sharded layer, lowered by the same pipeline:
/// `counts` (moegpu.ep_counts), `dispatch` and `combine` (ep_send, on
/// flags ranks + ExchangeFlag::Dispatch and + Combine) and their waits
/// `dispatch_wait` and `combine_wait` (ep_wait). Their parameters are the
/// operands' memref descriptors in operand order (groups last for
/// counts); the buffers' sizes are those of the layer's schedule.
struct ExchangeKernels {
  std::string ptx;
  /// Empty on success; else what failed.
  std::string error;
};
ExchangeKernels compileExchangeKernels(const ExchangeKernelShape &shape);

} // namespace mlir::moe

#endif // MOE_COMPILER_COMPILER_H
