//===- Bundle.h - The single-file bundle moe-compile writes -----*- C++ -*-===//
//
// Part of moe-compiler's runtime. Layout (integers little-endian):
//
//   "MOEBNDL\0"            8-byte magic
//   u32 format version     kBundleFormatVersion
//   u32 flags              0
//   u64 manifest size M
//   u64 blob count B       at most kMaxBlobs
//   u64 blob sizes[B]
//   manifest               M bytes of JSON
//   blobs                  the code objects, back to back
//   u64 checksum           FNV-1a 64 of every byte before it
//
// Everything is validated on load; a bundle that is truncated, corrupt, of
// another version or for another target is one clear error.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_RUNTIME_BUNDLE_H
#define MOE_RUNTIME_BUNDLE_H

#include "moe/runtime/ScheduleAbi.h"
#include "moe/runtime/Support.h"

#include <memory>
#include <string>
#include <vector>

namespace moe::rt {

constexpr uint32_t kBundleFormatVersion = 1;
constexpr uint64_t kMaxBlobs = 64;

/// FNV-1a, 64 bits.
uint64_t fnv1a64(const uint8_t *data, size_t size);

/// A tensor the entry point reads or writes. A negative dimension is the
/// token count, known at run time.
struct TensorSpec {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
};

/// A parameter of the layer: where its data comes from in a checkpoint.
struct ParameterSpec {
  /// Argument role in the layer ("router_weight", "gate_weight", ...).
  std::string role;
  /// Hugging Face name relative to the MoE block; for stacked expert
  /// weights a pattern with "{i}", e.g. "experts.{i}.gate_proj.weight".
  std::string name;
  /// Number of experts stacked along dim 0 (0: not stacked): from one
  /// tensor per expert ("{i}" in `name`) or one tensor of every expert
  /// [E, ...] (GraniteMoE's), of which a rank takes its own experts.
  int64_t stack = 0;
  /// Compute dtype and full (stacked) shape.
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  /// The parameter is slice `part` of `parts` equal slices of the
  /// checkpoint tensor's first dimension after the experts' (GraniteMoE's
  /// gate and up projections in one [E, 2F, H] tensor: parts 0 and 1 of
  /// 2). parts == 1: the whole tensor.
  int64_t part = 0, parts = 1;
  /// The checkpoint keeps each matrix (the last two dimensions) transposed,
  /// as (in, out): Llama 4's gate_up_proj [E, H, 2F] and down_proj
  /// [E, F, H]. Parts then slice the checkpoint's last dimension.
  bool transposed = false;
  /// The checkpoint folds the stacked experts into the next dimension: one
  /// [E * F, H] matrix for [E, F, H] (DBRX's), the same bytes.
  bool flat = false;
  /// The parts interleave: part p is every parts-th index of the sliced
  /// dimension from p (GPT-OSS's gate_up_proj, gate and up columns
  /// alternating).
  bool interleaved = false;
};

/// The layer's routing configuration, for reports and reference checks.
struct LayerSpec {
  std::string family; // weight naming: deepseek, mixtral, qwen
  int64_t hidden = 0, experts = 0, topK = 0, groups = 1, topkGroups = 1;
  std::string scoring, groupScore;
  bool scoreBias = false, normTopkProb = false;
  double routedScale = 1.0;
  int64_t ffn = 0, sharedExperts = 0, sharedFfn = 0;
  bool sharedGate = false;
  /// The routed weights scale the experts' inputs (Llama 4).
  bool scaleInput = false;
  /// A bias [H] is added to the output (JetMoE).
  bool outputBias = false;
  /// A bias [E] on the router logits and biases on the routed experts'
  /// projections (GPT-OSS).
  bool routerBias = false, expertBias = false;
  /// The experts' gated activation: swiglu, or clamped_swiglu (GPT-OSS)
  /// with its sigmoid gain and clamp.
  std::string activation = "swiglu";
  double swigluAlpha = 1.702, swigluLimit = 7.0;
  std::string dtype;
  /// The routed and shared experts' weights: "" (as `dtype`) or f8E4M3FN
  /// (e4m3 codes with a `ROLE_scale` parameter of f32 scales, one per
  /// 128 x 128 block).
  std::string expertDtype;
  /// An fp8 layer's recipe (#moe.fp8_recipe): "block" (DeepSeek-V3's; ""
  /// in bundles written before the field) or "tensor", whose weights
  /// bound as float values get one scale per expert's matrix (every block
  /// scale of the matrix the same).
  std::string fp8Scaling;
  int64_t alignment = 1;

  bool isFp8() const { return expertDtype == "f8E4M3FN"; }
  bool perTensorFp8() const { return fp8Scaling == "tensor"; }
};

/// A device buffer of an sm_90a program. Shape sizes: -1 is the token
/// count, -2 the dispatched-row capacity (`GpuProgram::rowCapacity`), -3
/// the rows an expert-parallel rank can receive (ranks x the capacity).
struct GpuBuffer {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  /// Where its contents come from (the manifest spells it as
  /// abi::formatBufferSource does).
  abi::BufferSource source;
};

/// A TMA descriptor the runtime encodes for a kernel argument.
struct GpuTensorMap {
  int64_t arg = 0;           // kernel parameter (a pointer to the 128-byte map)
  int64_t source = 0;        // kernel argument whose buffer the map describes
  std::vector<int64_t> view; // [rows, cols]; rows -1: from the buffer
  std::vector<int64_t> box;  // [box rows, box cols]
  int64_t swizzle = 128;
};

/// One step of an sm_90a schedule.
struct GpuStep {
  abi::StepKind kind = abi::StepKind::Launch;
  std::string buffer; // memset: the buffer zeroed
  std::string kernel; // launch: the kernel
  /// launch: what the kernel computes (the moegpu op its body was).
  abi::KernelKind kernelKind = abi::KernelKind::Other;
  /// exchange (expert parallelism, between the launches): "dispatch" with
  /// args [offsets, rows, row_weight, ep_offsets, ep_group_offsets,
  /// ep_rows, ep_row_weight]: every expert's segment of rows and weights
  /// goes to its rank, which lays them out by (local expert, source rank);
  /// "combine" with args [ep_offsets, ep_down, offsets, down]: back;
  /// "dispatch_rows" and "combine_rows" with args [from, to]: other rows
  /// of the last dispatch's segments, either way, or with a `chunk`, that
  /// chunk's segments of the last "dispatch_plan" (args [offsets,
  /// ep_offsets, then each chunk's ep_group_offsets]). all_reduce: the f32
  /// buffers of args summed over the ranks, in place.
  abi::ExchangeKind exchange = abi::ExchangeKind::Dispatch;
  std::vector<std::string> args; // launch: the buffers of its memref args
  /// `args` and `buffer` as indices into GpuProgram::buffers (-1: no such
  /// buffer), set by indexGpuBuffers when a program is loaded: running a
  /// step looks nothing up by name.
  std::vector<int32_t> argIds;
  int32_t bufferId = -1;
  /// Grid: tokens (ceil(T / perBlock)), assignments (ceil(T * k /
  /// perBlock)), rows and received_rows (ceil(capacity / perBlock) over the
  /// dispatched or the received rows' capacity), one, or persistent and
  /// fixed (`gridSize` CTAs).
  abi::GridKind grid = abi::GridKind::One;
  int64_t perBlock = 0, gridSize = 0;
  int64_t block = 0, sharedMemory = 0;
  /// CTAs of a cluster along x (1 or 2); the grid is a multiple of it.
  int64_t cluster = 1;
  /// The token chunk a launch or exchange works on (chunked
  /// expert-parallel exchanges), or -1: all of its buffers.
  int64_t chunk = -1;
  /// The exchange transport the step belongs to (launch, exchange): it
  /// runs only when the runtime chose that one (Any: always).
  abi::Transport transport = abi::Transport::Any;
  std::vector<GpuTensorMap> tensorMaps;
};

/// The forward pass built with other GEMM tiles, for the token counts at
/// which the performance model finds them faster (BLOCK_M 64 at small T):
/// its kernels are in code blobs of their own, and its steps name the
/// program's buffers, whose capacities hold its rows.
struct GpuVariant {
  /// The expert GEMMs' BLOCK_M (the segments' alignment).
  int64_t tileM = 0;
  /// The runtime runs it for 1 .. maxTokens tokens.
  int64_t maxTokens = 0;
  /// Its dispatched rows at the bundle's max tokens (at most the
  /// program's).
  int64_t rowCapacity = 0;
  /// The bundle blob of its cubin; its PTX is the next one.
  int64_t blob = 0;
  std::vector<GpuStep> steps;
};

struct GpuProgram {
  int64_t rowCapacity = 0;
  /// The expert GEMMs' BLOCK_M (0: not recorded, bundles before variants).
  int64_t tileM = 0;
  /// The rows a rank of a sharded program can receive (its experts' rows
  /// from every rank, padded); 0 when not sharded.
  int64_t receivedRowCapacity = 0;
  /// SMs left to communication (the layer's #moe.sm_partition): the NCCL
  /// communicator of a sharded layer may occupy that many.
  int64_t commSms = 0;
  std::vector<GpuBuffer> buffers;
  /// One forward pass.
  std::vector<GpuStep> steps;
  /// With --train: one training step (TrainSpec's arguments are the
  /// buffers with source `arg:<name>`, and `x` and `score_bias`) up to
  /// the gradients and the update's check, then the update of the state
  /// in place, which the runtime runs only when the step is finite.
  std::vector<GpuStep> trainSteps;
  std::vector<GpuStep> updateSteps;
  /// With --backward: the forward pass again, then the backward kernels
  /// from the caller's dy (the buffer of source `arg:dy`) into the buffers
  /// of `arg:x.grad` and `arg:<W>.grad`, on the bound weights.
  std::vector<GpuStep> backwardSteps;
  /// Other builds of the forward pass, smallest maxTokens first: a pass of
  /// T tokens runs the first whose maxTokens is at least T, else `steps`.
  std::vector<GpuVariant> variants;
};

/// Sets every step's argIds and bufferId from its buffer names (-1 for a
/// name the program has no buffer of; validation reports those).
void indexGpuBuffers(GpuProgram &program);

/// Bytes of an sm_90a buffer at its capacity: `maxTokens` tokens, the
/// program's dispatched-row capacity and, for a rank of `ranks`, the rows
/// it can receive (the program's bound; `ranks` times the row capacity in
/// bundles written before it had one).
uint64_t gpuBufferBytes(const GpuProgram &program, const GpuBuffer &buffer,
                        int64_t maxTokens, int64_t ranks);
int64_t gpuReceivedRows(const GpuProgram &program, int64_t ranks);

/// The device memory an sm_90a program allocates on each rank, by what
/// its buffers hold.
struct GpuMemoryPlan {
  /// The compute copies of the weights (bf16) and the fp32 masters.
  uint64_t weights = 0;
  /// AdamW's moments, and the updated masters and moments (`.next`).
  uint64_t optimizer = 0;
  uint64_t gradients = 0;
  /// The step's inputs and outputs, and the forward pass's buffers that
  /// the backward kernels read.
  uint64_t activations = 0;
  /// Everything else: buffers live within one pass.
  uint64_t workspace = 0;
  uint64_t total() const {
    return weights + optimizer + gradients + activations + workspace;
  }
};

GpuMemoryPlan planGpuMemory(const GpuProgram &program, int64_t maxTokens,
                            int64_t ranks);

/// "12.3 GB" (decimal units, as device memory is quoted).
std::string formatBytes(uint64_t bytes);

/// One argument of the compiled training step (see moe-compile --train).
struct TrainArgumentSpec {
  std::string name;
  bool output = false;
  DType dtype = DType::F32;
  std::vector<int64_t> shape; // -1: the token count
};

/// A weight's gradient among a training step's outputs (`W.grad`, not
/// `x.grad`).
bool isWeightGradient(const TrainArgumentSpec &spec);

/// Whether `name` is one of AdamW's moments of a trained weight (`W.m`,
/// `W.v`): f32 or bf16 (moe-compile --optimizer-state), zero at first.
bool isAdamMoment(const std::string &name);

/// Any gradient among a training step's outputs (`W.grad` or `x.grad`):
/// what a device that keeps the state keeps until asked for.
bool isGradient(const TrainArgumentSpec &spec);

/// The training step of a bundle compiled with --train.
struct TrainSpec {
  std::string entry; // symbol of its packed entry point; "" if none
  std::vector<TrainArgumentSpec> arguments;
  /// The state (the arguments besides x, target and hyper that are not
  /// outputs) lives on the device and is updated in place (sm_90a): no
  /// `.next` outputs, but `grad_sq` and `bad_updates` (see
  /// listDeviceTrainArguments) and the program's updateSteps.
  bool stateOnDevice = false;
  /// The host's in-place AdamW update of a finite step (moe_train_update;
  /// its arguments are all inputs, the state and the step's gradients).
  /// Null for a bundle whose step returns its updated state as `.next`
  /// outputs (host bundles before 2026-12-02) and for sm_90a.
  std::shared_ptr<TrainSpec> update;
};

struct Manifest {
  std::string target;   // "host" (shared object) or "sm_90a"
  std::string compiler; // version string of the writer
  std::string entry;    // symbol of the packed entry point
  int64_t maxTokens = 0;
  /// Nonzero when the layer was compiled with a static token count: every
  /// forward pass and training step takes exactly that many tokens.
  int64_t staticTokens = 0;
  /// Expert-parallel ranks the code was compiled for; each rank's stacked
  /// expert weights hold layer.experts / expertParallel experts.
  int64_t expertParallel = 1;
  LayerSpec layer;
  /// Entry point arguments, in order: inputs, parameters, outputs.
  std::vector<TensorSpec> inputs;
  std::vector<ParameterSpec> parameters;
  std::vector<TensorSpec> outputs;
  /// The launch sequence; for the host target one call of `entry`.
  std::vector<std::string> schedule;
  /// sm_90a: buffers and steps; blob 0 is the cubin holding the program's
  /// kernels, blob 1 their PTX, then each variant's cubin and PTX.
  GpuProgram gpu;
  /// With --train: the training step.
  TrainSpec train;
  /// With --backward: the layer's backward pass (`x`, `dy`, the weights
  /// and `score_bias` in; `x.grad` and `W.grad` out). Never stateOnDevice.
  TrainSpec backward;
  /// From a config.json: where a layer's tensors are in the model's
  /// published checkpoints, "{layer}" standing for the layer's index
  /// ("model.layers.{layer}.mlp."; empty when unknown), and the indices of
  /// the model's MoE layers (empty when unknown).
  std::string checkpointPrefix;
  std::vector<int64_t> moeLayers;
  /// Host bundles built for several CPU levels (moe-compile without
  /// --mcpu): blob i holds the code for hostCpus[i], best first, and the
  /// runtime loads the best this CPU runs. Empty: one blob, for the CPU
  /// --mcpu named.
  std::vector<std::string> hostCpus;
};

/// The x86-64 levels a host bundle compiled without --mcpu carries, best
/// first: AVX-512 (16 f32 lanes, 32 registers), AVX2 with FMA (8 lanes)
/// and the baseline every x86-64 CPU runs (SSE2, 4 lanes).
inline constexpr const char *kHostCpuLevels[] = {"x86-64-v4", "x86-64-v3",
                                                 "x86-64"};

/// Whether this CPU runs code for the x86-64 level `level` (one of
/// kHostCpuLevels), capped by $MOE_HOST_ISA when it names a level
/// (as a CPU without the higher levels would be). An unknown
/// $MOE_HOST_ISA is an error.
Expected<bool> hostRunsLevel(const std::string &level);

/// The prefix of layer `layer`'s tensors in the model's checkpoints
/// (`--layer N`), or why there is none: the bundle was not compiled from a
/// config.json, or that layer is not one of the model's MoE layers.
Expected<std::string> checkpointPrefixOf(const Manifest &manifest,
                                         int64_t layer);

std::string serializeManifest(const Manifest &manifest);
Expected<Manifest> parseManifest(const std::string &text);

struct Bundle {
  Manifest manifest;
  std::vector<std::vector<uint8_t>> blobs;
};

/// The bundle's bytes.
std::vector<uint8_t> serializeBundle(const Bundle &bundle);
/// Validates and decodes bundle bytes; `name` appears in messages.
Expected<Bundle> parseBundle(const std::vector<uint8_t> &bytes,
                             const std::string &name);
Expected<Bundle> readBundle(const std::string &path);
Status writeBundle(const std::string &path, const Bundle &bundle);

} // namespace moe::rt

#endif // MOE_RUNTIME_BUNDLE_H
