//===- Layer.h - A compiled MoE layer ready to run --------------*- C++ -*-===//
//
// Part of moe-compiler's runtime.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_RUNTIME_LAYER_H
#define MOE_RUNTIME_LAYER_H

#include "moe/runtime/Bundle.h"
#include "moe/runtime/Comm.h"
#include "moe/runtime/Safetensors.h"

#include <map>
#include <memory>

namespace moe::rt {

/// What one forward pass produces.
struct ForwardResult {
  Tensor y;           // [T, hidden] f32
  Tensor topkIds;     // [T, k] i32
  Tensor topkWeights; // [T, k] f32
};

/// The time one kernel of a forward pass took on the device.
struct KernelTime {
  /// The kernel (with " (chunk c)" for a chunk's launch), or for an
  /// exchange on the communication stream "all-to-all (<kind>[ of chunk
  /// c])".
  std::string kernel;
  float milliseconds = 0;
  /// Its start after the schedule's first work, in ms of the device's
  /// clock, shared by the compute and communication streams.
  float startMilliseconds = 0;
  /// On the communication stream: an exchange, or a device-initiated
  /// send's kernel.
  bool exchange = false;
  /// A kernel's CTAs (0 for an exchange).
  int64_t ctas = 0;
};

/// What a device's driver was asked to do (counted in front of it): each
/// field a count or a byte total since the device was opened; the
/// difference of two is what happened in between.
struct DeviceActivity {
  uint64_t launches = 0;      // kernel launches enqueued (or captured)
  uint64_t graphLaunches = 0; // CUDA graphs launched
  uint64_t hostWaits = 0;     // the host waited for the device: stream,
                              // event and context synchronizations and
                              // synchronous copies
  uint64_t allocations = 0;   // device and page-locked host allocations
  uint64_t bytesToDevice = 0, bytesToHost = 0; // copied each way

  DeviceActivity operator-(const DeviceActivity &o) const {
    return {launches - o.launches,           graphLaunches - o.graphLaunches,
            hostWaits - o.hostWaits,         allocations - o.allocations,
            bytesToDevice - o.bytesToDevice, bytesToHost - o.bytesToHost};
  }
  /// "12 launches, 1 graph launch, 1 host wait, 0 allocations, 16 KiB to
  /// the device, 48 KiB back".
  std::string describe() const;
};

/// A forward pass on device memory (a framework's CUDA tensors): device
/// addresses in the primary context of the layer's GPU, and the caller's
/// stream. x is [tokens, hidden] in the bundle's input dtype; y [tokens,
/// hidden] in its output dtype (Layer::deviceOutputDType), topk_ids
/// [tokens, k] i32 and topk_weights [tokens, k] f32, all contiguous.
struct DeviceForward {
  uint64_t x = 0, y = 0, topkIds = 0, topkWeights = 0;
  int64_t tokens = 0;
  /// The caller's CUstream (0: the legacy default stream): the pass
  /// starts after the work on it so far, and work enqueued on it after
  /// the call runs after the pass. The host does not wait.
  uint64_t stream = 0;
};

/// A backward pass on device memory (an sm_90a bundle compiled with
/// --backward): x [tokens, hidden] in the dtype forwardOnDevice takes, dy
/// [tokens, hidden] f32, and where the gradients go (f32): `grads` in the
/// order of the backward pass's outputs (Manifest::backward), x.grad
/// [tokens, hidden] first, then each trained weight's, its parameter's
/// shape. The stream is the caller's, as DeviceForward's.
struct DeviceBackward {
  uint64_t x = 0, dy = 0;
  std::vector<uint64_t> grads;
  int64_t tokens = 0;
  uint64_t stream = 0;
};

/// A device that runs a bundle's code.
class Backend {
public:
  virtual ~Backend();
  /// A forward pass on device memory; `parameters` in manifest order
  /// (uploaded when they changed). Devices without memory of their own
  /// say so.
  virtual Status runOnDevice(const DeviceForward &,
                             const std::vector<const Tensor *> &) {
    return Status::failure("this device takes host tensors only (device "
                           "pointers need a cuda layer)");
  }
  /// A backward pass on device memory; `parameters` as runOnDevice's.
  virtual Status runBackwardOnDevice(const DeviceBackward &,
                                     const std::vector<const Tensor *> &) {
    return Status::failure("this device takes host tensors only (device "
                           "pointers need a cuda layer)");
  }
  /// Runs another entry point of the bundle (the training step) on
  /// arguments in its own order, for `tokens` tokens (0: unknown; the host
  /// runs a small step on one thread); devices without one say so.
  virtual Status runEntry(const std::string &symbol,
                          const std::vector<const Tensor *> &arguments,
                          int64_t tokens = 0) {
    return Status::failure("this device cannot run entry point '" + symbol +
                           "'");
  }
  /// A training step that keeps its state on the device
  /// (TrainSpec::stateOnDevice) uploads the state arguments it is given
  /// only when the device does not hold them yet or any more: after
  /// this (a restore), the next step uploads them.
  virtual void invalidateTrainingState() {}
  /// Copies training arguments the device holds (the state, or the last
  /// step's weight gradients), by name, into the tensors given.
  virtual Status
  downloadTrainingTensors(const std::map<std::string, Tensor *> &) {
    return Status::failure("this device keeps no training state");
  }
  /// Whether a training step updates the state itself, the step's
  /// finiteness decided on the device (bundles since 2026-12-04): then
  /// runTrainingUpdate is not called.
  virtual bool updatesWithStep() const { return false; }
  /// Updates the state in place with the last step's gradients.
  virtual Status runTrainingUpdate() {
    return Status::failure("this device keeps no training state");
  }
  /// Where the code's collectives go (bundles compiled with --ep).
  virtual Status setCommunicator(Communicator *) {
    return Status::failure("this device does not run expert-parallel code");
  }
  /// The parameter tensors changed (a device copy must be refreshed).
  virtual void invalidateParameters() {}
  /// Which of the bundle's code runs, when it holds several (the host's
  /// CPU level: "x86-64-v4"); empty otherwise.
  virtual std::string codeVariant() const { return {}; }
  /// How a sharded layer's exchanges move rows ("lsa (...)" or "nccl
  /// (...)", with the reason); empty when not sharded or not a GPU.
  virtual std::string exchangeTransport() const { return {}; }
  /// Time every kernel of the following forward passes (devices that can).
  virtual void setProfiling(bool) {}
  /// Threads of the code's parallel loops (the host; other devices ignore
  /// it). The default: $MOE_NUM_THREADS, else the cores shared among the
  /// node's MPI ranks.
  virtual void setThreads(int) {}
  /// The threads the host's own work around the code may use too (the
  /// runtime's checks of a training step's results).
  virtual int getThreads() const { return 1; }
  /// The kernel times of the last forward pass, in launch order.
  virtual std::vector<KernelTime> lastProfile() const { return {}; }
  /// What this device's driver was asked to do so far (devices with a
  /// driver; zeros otherwise).
  virtual DeviceActivity activity() const { return {}; }
  /// Every device buffer after the last forward pass, at its live size
  /// (devices with buffers of their own; empty otherwise).
  virtual Expected<std::map<std::string, Tensor>> dumpBuffers() {
    return std::map<std::string, Tensor>{};
  }
  /// Runs the entry point on argument buffers in manifest order (inputs,
  /// parameters, outputs), each with its shape.
  /// The tensors themselves are not changed; the outputs' bytes are
  /// written through their data pointers.
  virtual Status run(const std::vector<const Tensor *> &arguments) = 0;
};

/// Checks what the runtime relies on in a manifest (sizes, inputs,
/// outputs, parameter shapes and names); a bundle that passes its checksum
/// can still have been written by another tool.
Status validateManifest(const Manifest &manifest);

/// The host backend: the bundle's shared object, loaded with dlopen.
Expected<std::unique_ptr<Backend>> createHostBackend(const Bundle &bundle);

/// A bundle, its backend and its parameters.
class Layer {
public:
  /// Loads a bundle and its code for `device`: "host" (bundles compiled
  /// for the host) or "cuda" (sm_90a bundles on device 0).
  static Expected<std::unique_ptr<Layer>> load(const std::string &bundlePath,
                                               const std::string &device);
  static Expected<std::unique_ptr<Layer>> fromBundle(Bundle bundle,
                                                     const std::string &device);

  const Manifest &getManifest() const { return bundle.manifest; }

  /// Binds every parameter from `file`, named `prefix + name` (stacked
  /// expert weights one tensor per expert). Float tensors are converted to
  /// the compute dtype; a missing tensor or a wrong shape or dtype is an
  /// error naming it.
  Status loadWeights(const Checkpoint &checkpoint, const std::string &prefix);
  /// Fills every parameter with seeded uniform values in
  /// [-1/sqrt(fan_in), 1/sqrt(fan_in)] (biases in [-0.1, 0.1]). A seed
  /// gives the same layer whatever the number of expert-parallel ranks.
  void randomWeights(uint64_t seed);
  /// The job's communicator (null: one rank). Its size must be the
  /// bundle's expert-parallel size; its rank picks this layer's experts,
  /// so call it before binding weights. A communicator of one rank is the
  /// same as none. The layer does not own it.
  Status setCommunicator(Communicator *comm);
  /// The communicator set, or null for one rank.
  Communicator *getCommunicator() const { return communicator; }
  /// Fails when the bundle needs a communicator and has none.
  Status checkCommunicator() const;
  /// The global index of this rank's first expert.
  int64_t getFirstExpert() const { return firstExpert; }
  /// The bound parameters under their checkpoint names (stacked weights
  /// split per expert), for writing a weights file.
  std::map<std::string, Tensor> namedParameters() const;
  /// `byRole` (tensors of the manifest's parameter shapes, by role) under
  /// checkpoint names, stacked weights split per expert and the parts of a
  /// fused tensor joined (a tensor of every expert holds this rank's).
  std::map<std::string, Tensor>
  checkpointNames(const std::map<std::string, Tensor> &byRole) const;
  /// The bound parameter of `role`, or null.
  const Tensor *parameter(const std::string &role) const;
  /// The parameter of `role` as f32 values: an FP8 weight's e4m3 codes
  /// times their block scales (the `X_scale` of `X_weight`), any other
  /// converted. The master copy a training step starts from.
  Expected<Tensor> floatParameter(const std::string &role) const;
  /// Replaces the parameter of `role` (converted to its dtype).
  Status setParameter(const std::string &role, const Tensor &value);
  /// Moves the storage of f32 parameter `role` into `to` and reads `to` as
  /// that parameter from then on (a trainer's master weight, updated in
  /// place, is then the layer's parameter: one copy instead of two).
  /// `to` must outlive the loan. Writing the parameter (setParameter,
  /// loadWeights, randomWeights) ends the loan: the layer copies `to` back
  /// first.
  Status lendParameter(const std::string &role, Tensor &to);
  /// Ends the loan of `role`, if any, by moving the borrowed tensor back
  /// (for a borrower that is going away).
  void returnParameter(const std::string &role);
  Backend &getBackend() { return *backend; }

  /// Runs the layer on `x` [T, hidden] (f32, bf16 or f16).
  Expected<ForwardResult> forward(const Tensor &x);
  /// Runs the layer on device memory (a cuda layer; sharded, with the
  /// device-initiated exchange): no host copy of x or the outputs and no
  /// host wait; see DeviceForward. A sharded pass's exchange status is
  /// checked by a later call, once the device is done with it.
  Status forwardOnDevice(const DeviceForward &io);
  /// The backward pass on device memory (a cuda layer whose bundle was
  /// compiled with --backward; sharded, with the device-initiated
  /// exchange): no host copy of x, dy or the gradients and no host wait;
  /// see DeviceBackward.
  Status backwardOnDevice(const DeviceBackward &io);
  /// The dtypes forwardOnDevice takes x in and writes y in.
  DType deviceInputDType() const;
  DType deviceOutputDType() const;

  /// The layer's backward pass (bundles compiled with --backward): from `x`
  /// [T, hidden] and `dy` [T, hidden], the gradient of a loss with respect
  /// to the forward pass's y, the gradients with respect to x (under "x")
  /// and to every trained weight (under its role), all f32. It runs the
  /// forward pass again (nothing of an earlier forward call is kept).
  /// `spare` may hold earlier results, by the same names, to write into
  /// instead of fresh buffers (those whose dtype and shape match are
  /// taken; the pass writes every output whole).
  Expected<std::map<std::string, Tensor>>
  backward(const Tensor &x, const Tensor &dy,
           std::map<std::string, Tensor> *spare = nullptr);
  /// Per-kernel device times of the following forward passes (cuda).
  void setProfiling(bool on) { backend->setProfiling(on); }
  std::vector<KernelTime> lastProfile() const { return backend->lastProfile(); }
  DeviceActivity activity() const { return backend->activity(); }
  /// The device buffers after the last forward pass (cuda), for checking
  /// each kernel on its own.
  Expected<std::map<std::string, Tensor>> dumpBuffers() {
    return backend->dumpBuffers();
  }

private:
  Layer() = default;
  /// Reads parameter `p` (its checkpoint layout, converted to p.dtype, a
  /// float type) into `base`.
  Status loadParameter(const Checkpoint &file, const std::string &prefix,
                       const ParameterSpec &p, uint8_t *base);
  /// Reads FP8 parameter `i` and its scales: published e4m3 codes as they
  /// are, anything else quantized.
  Status loadFp8Parameter(const Checkpoint &file, const std::string &prefix,
                          size_t i);
  /// Quantizes f32 `values` of FP8 parameter `i` into it and its scales.
  Status quantizeParameter(size_t i, const Tensor &values);
  Bundle bundle;
  std::unique_ptr<Backend> backend;
  /// Ends the loan of parameter i, if any (lendParameter), with a copy
  /// of the borrowed tensor, or by moving it back.
  void reclaim(size_t i, bool move = false);
  /// Parameter i as the entry points read it.
  const Tensor &param(size_t i) const {
    return lent[i] ? *lent[i] : parameters[i];
  }
  /// What a pass on device memory of `tokens` tokens needs of the layer:
  /// weights, its communicator, a token count the bundle takes.
  Status checkDevicePass(int64_t tokens) const;
  /// A pass on device memory's parameter list: null (no host x), then
  /// each parameter in manifest order.
  std::vector<const Tensor *> deviceParameters() const;
  std::vector<Tensor> parameters; // manifest order
  /// A trainer's tensor that parameter i is read from, or null.
  std::vector<Tensor *> lent;
  bool weightsBound = false;
  Communicator *communicator = nullptr;
  int64_t firstExpert = 0;
};

/// Deterministic pseudo-random numbers (splitmix64), shared by tools and
/// tests so that a seed means the same tensors everywhere.
class Random {
public:
  explicit Random(uint64_t seed) : state(seed) {}
  uint64_t next();
  /// Uniform in [lo, hi).
  float uniform(float lo, float hi);
  /// Moves the stream `draws` numbers ahead in O(1) (splitmix64 is a
  /// counter): a generator can start at any draw of another's stream.
  void skip(uint64_t draws);
  /// The generator's position, to continue a stream after a restart.
  uint64_t getState() const { return state; }
  void setState(uint64_t value) { state = value; }

private:
  uint64_t state;
};

} // namespace moe::rt

#endif // MOE_RUNTIME_LAYER_H
