//===- Sm90.h - The Hopper (sm_90a) target ----------------------*- C++ -*-===//
//
// Part of moe-compiler.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_TARGET_SM90_H
#define MOE_TARGET_SM90_H

#include "moe/runtime/Bundle.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/Timing.h"

#include <optional>
#include <string>
#include <vector>

namespace mlir::moe {

struct Sm90Options {
  /// Rows each expert's segment is padded to: a multiple of the GEMM's M
  /// block.
  int64_t alignment = 128;
  int64_t maxTokens = 4096;
  /// BLOCK_N of the grouped GEMMs whose N it divides; 0: the cost model's.
  int64_t tileN = 0;
  /// BLOCK_M of the GEMMs (64 or 128); 0: 128.
  int64_t tileM = 0;
  /// CTAs of a cluster sharing B by TMA multicast (1 or 2).
  int64_t cluster = 1;
  /// Also build the training step (the program's trainSteps).
  bool train = false;
  /// AdamW's moments' element type in the training step: "f32" or "bf16".
  std::string optimizerState = "f32";
  /// Also build the backward pass alone (the program's backwardSteps).
  bool backward = false;
  /// Make a cubin with ptxas (for --emit=cubin, bundles and reports).
  bool cubin = false;
  /// ptxas to run; "" finds one ($MOE_PTXAS, the configured toolkit, PATH).
  std::string ptxas;
};

/// What a kernel is: the moegpu op its body was before lowering (the
/// schedule ABI's kind, which the manifest carries too). The performance
/// model and the report tell kernels apart by this, never by their names.
using Sm90KernelKind = ::moe::abi::KernelKind;

/// The schedule a kernel is first launched by: the forward pass, the
/// training step's own launches (after the forward ones it repeats), or
/// the update.
enum class Sm90Phase { Forward, Train, Update };

/// What the rows of a kernel's first operand are: a fixed count, the
/// tokens, or the dispatched (or received) rows of the experts.
enum class Sm90Rows { Fixed, Tokens, Routed };

enum class Sm90GemmLayout { NT, NN, TN };

/// What a kernel computes, read from its op before lowering (its operands'
/// types and attributes) and from its launch.
struct Sm90KernelWork {
  Sm90KernelKind kind = Sm90KernelKind::Other;
  Sm90Phase phase = Sm90Phase::Forward;
  Sm90Rows rows = Sm90Rows::Fixed;
  /// GEMMs: the layout, the output's M x N (tn) or N and the reduction's K
  /// (nt, nn), their epilogue, and FP8 block scales.
  Sm90GemmLayout layout = Sm90GemmLayout::NT;
  int64_t m = 0, n = 0, k = 0;
  bool swiglu = false, accumulate = false, blockScaled = false;
  /// Bytes of an element of the first operand and of the output.
  int64_t inBytes = 0, outBytes = 0;
  /// The width a row kernel works along (a quantization's columns, the
  /// FFN width of a SwiGLU backward).
  int64_t width = 0;
  /// The elements of the output (a weight's copy, update or gradient; the
  /// masters of an optimizer kernel over several).
  int64_t elements = 0;
  /// Bytes of the compute copies an optimizer kernel writes, and of an
  /// element of its moments (f32 or bf16).
  int64_t copyBytes = 0, momentBytes = 4;
  /// A kernel that does its work only after the host wrote a master (the
  /// compute copies and the full update check, whose flag the update's
  /// verdict sets): next to nothing in a step after the first.
  bool onHostWrite = false;
  /// A dispatch moving e4m3 codes and their scales (a quantize_blocks
  /// that also writes the transposed codes); an input gradient that
  /// computes the router's part itself (SIMT).
  bool codes = false, routerPart = false;
  /// A split_k GEMM's most slices and their sum's (1: not split).
  int64_t splits = 1;
  /// A device-initiated send (ep_send) that takes rows back to their
  /// sources (else to the experts' ranks); with `width` elements of
  /// `inBytes` a row, and with `codes` a routing weight (f32) beside each;
  /// one of `sendChunks` token chunks' sends (each moves its share).
  bool combine = false;
  int64_t sendChunks = 1;
};

/// What `ptxas -v` and the compiler say about one kernel.
struct Sm90KernelReport {
  std::string name;
  Sm90KernelWork work;
  std::string grid; // e.g. "112 (persistent)" or "ceil(T / 4)"
  int64_t block = 0;
  int64_t sharedMemory = 0; // dynamic shared memory
  int64_t registers = -1, spillStores = -1, spillLoads = -1;
  /// Registers per thread a warp-specialized kernel's setmaxnreg plan
  /// needs ptxas to allocate (0: none).
  int64_t requiredRegisters = 0;
  int64_t staticSharedMemory = -1;
  /// ptxas serialized the kernel's wgmma instructions (its C7514).
  bool serializedWgmma = false;
  /// GEMMs: the tile and its pipeline stages, and the persistent grid
  /// (CTAs, one per compute SM); 0 for SIMT kernels.
  int64_t tileM = 0, tileN = 0, tileK = 0, tileStages = 0;
  /// GEMMs: the epilogue stores through shared memory and TMA (else from
  /// registers).
  bool tmaStoreEpilogue = false;
  /// CTAs of a cluster (2: a pair sharing B by TMA multicast).
  int64_t cluster = 1;
  int64_t persistentCtas = 0;
};

/// The machine the performance model projects for: an H200 SXM (dense
/// bf16 tensor-core peak, CUDA-core f32 FMA peak, HBM3e bandwidth).
struct Sm90Machine {
  double tensorFlops = 989e12;
  /// e4m3 wgmma: twice the bf16 rate.
  double fp8TensorFlops = 1979e12;
  double simtFlops = 67e12;
  double bandwidth = 4.8e12;
  int64_t sms = 132;
  /// What a kernel reaches of those peaks in the estimate, and the fixed
  /// cost of a launch.
  double tensorEfficiency = 0.75, memoryEfficiency = 0.7;
  /// What a wgmma GEMM's operand loads (each tile's A and B blocks, every
  /// k block, from L2 into shared memory) reach over all SMs: fitted to
  /// the grouped GEMMs timed on an H200 (docs/Performance.md, "The model
  /// against the H200's times"), which Nsight Compute found L2-bound.
  double l2Bandwidth = 7.0e12;
  double launchMicroseconds = 2.0;
  /// NVLink 4 of an H100/H200 SXM: 18 links, 450 GB/s each way, of which
  /// an all-to-all reaches about 380 (DeepEP's maintainers' figure).
  double nvlinkBandwidth = 450e9, nvlinkEfficiency = 0.84;
  /// What one SM's CTA of a device-initiated send moves into peers'
  /// memory: DeepEP's intranode kernels moved 337 GB/s with 24 SMs on an
  /// H20 (NVLink 4). An assumption until moe-comm-bench measures ours.
  double commSmBandwidth = 14e9;
  /// A flag's round trip between two GPUs (a release store, the peer's
  /// acquire load seeing it).
  double flagMicroseconds = 2.0;
};

/// The layer's shapes the model needs.
struct Sm90LayerShape {
  int64_t hidden = 0, ffn = 0, experts = 0, topK = 0;
  int64_t sharedFfn = 0; // shared experts x their FFN width
  int64_t alignment = 128;
  int64_t elementBytes = 2;
  int64_t ranks = 1;
  /// FP8 experts: their GEMMs read 1-byte operands at the e4m3 rate, after
  /// a quantization kernel per GEMM input.
  bool fp8 = false;
};

/// One kernel's cost at a token count: FLOPs and bytes moved, the
/// roofline time (the larger of compute at peak and traffic at full
/// bandwidth) and the model's estimate, in microseconds.
struct Sm90KernelCost {
  std::string kernel;
  /// What runs its arithmetic: "wgmma" (tensor cores) or "SIMT".
  std::string engine;
  /// What the estimate's time is: "tensor" or "SIMT" (the arithmetic),
  /// "L2" (a GEMM's operand loads), "memory" (its traffic).
  std::string bound;
  double flops = 0, bytes = 0, rooflineUs = 0, estimateUs = 0;
};

/// The forward kernels' costs at `tokens`, routing assumed uniform over the
/// experts (each expert's rows padded to the alignment). Kernels of the
/// training step and kinds the model does not know are left out.
std::vector<Sm90KernelCost>
modelForward(const Sm90LayerShape &shape,
             const std::vector<Sm90KernelReport> &kernels, int64_t tokens,
             const Sm90Machine &machine = {});

/// The training step's kernels' costs at `tokens` (the forward launches
/// it holds, then the step's own), routing as in modelForward.
std::vector<Sm90KernelCost>
modelTraining(const Sm90LayerShape &shape,
              const std::vector<Sm90KernelReport> &kernels, int64_t tokens,
              const Sm90Machine &machine = {});

/// The device-initiated exchange of a sharded layer's forward pass at a
/// token count on `commSms` SMs, routing uniform: the bytes each rank
/// sends its peers for the dispatch and the combine, and their times.
struct Sm90ExchangeCost {
  double dispatchBytes = 0, combineBytes = 0;
  double dispatchUs = 0, combineUs = 0;
  /// "NVLink" when the link is the limit, else "SMs" (the comm SMs).
  std::string bound;
};

Sm90ExchangeCost modelExchange(const Sm90LayerShape &shape, int64_t tokens,
                               int64_t commSms,
                               const Sm90Machine &machine = {});

/// The forward pass split into what the SM partition overlaps: the
/// exchange's sends on the comm SMs (dispatch, combine), the routed
/// experts' kernels on the compute SMs, and the rest (router, dispatch,
/// shared experts, combine, counts and waits), which the model keeps in
/// series. `serialUs` runs all of them one after the other (one stream);
/// `overlappedUs` pipelines `chunks` chunks: a chunk's dispatch beside the
/// GEMMs of the one before, its combine beside those of the one after.
/// Kernels without device-initiated sends (the host-driven exchange, whose
/// NCCL kernels get the comm SMs' CTAs) get modelExchange's on `commSms`.
struct Sm90Overlap {
  double dispatchUs = 0, combineUs = 0, routedUs = 0, otherUs = 0;
  double serialUs = 0, overlappedUs = 0;
  int64_t chunks = 1;
};

Sm90Overlap modelOverlap(const Sm90LayerShape &shape,
                         const std::vector<Sm90KernelReport> &kernels,
                         int64_t tokens, int64_t chunks, int64_t commSms,
                         const Sm90Machine &machine = {});

/// The comm SMs the model picks for a sharded layer on `sms` SMs at
/// `tokens`: the fewest (an even count, 2 .. 32) whose pipelined forward
/// pass (`chunks` chunks) is within 1% of the fastest, the GEMMs (with
/// the tiles moe-select-tiles gives 16-bit experts) on the others.
/// `projection` gets each candidate's modelled pass.
int64_t
chooseCommSms(const Sm90LayerShape &shape, int64_t sms, int64_t tokens,
              int64_t chunks,
              std::vector<std::pair<int64_t, double>> *projection = nullptr,
              const Sm90Machine &machine = {});

struct Sm90Result {
  std::string ptx;
  std::vector<uint8_t> cubin; // when Sm90Options::cubin
  ::moe::rt::GpuProgram program;
  std::vector<Sm90KernelReport> kernels;
};

/// Compiles the module's moe.layer into the kernels and schedule of the
/// sm_90a target: convert-moe-to-moegpu, the moegpu kernel pipeline, the
/// upstream path to PTX, and ptxas for the cubin. Diagnostics go to the
/// context's handler; `error` says what failed otherwise.
std::optional<Sm90Result> compileSm90(ModuleOp module,
                                      const Sm90Options &options,
                                      TimingScope &timing, std::string &error);

/// Where ptxas is: `preferred`, $MOE_PTXAS, the toolkit found at configure
/// time, or PATH; std::nullopt if none is.
std::optional<std::string> findPtxas(const std::string &preferred);

} // namespace mlir::moe

#endif // MOE_TARGET_SM90_H
