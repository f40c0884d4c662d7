//===- Train.h - Training steps of a compiled MoE layer ---------*- C++ -*-===//
//
// Part of moe-compiler's runtime.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_RUNTIME_TRAIN_H
#define MOE_RUNTIME_TRAIN_H

#include "moe/runtime/Layer.h"

#include <thread>

namespace moe::rt {

struct TrainOptions {
  float learningRate = 1e-3f;
  float beta1 = 0.9f, beta2 = 0.999f, epsilon = 1e-8f;
  float weightDecay = 0.0f;
  /// gamma of the auxiliary-loss-free bias update (0 disables it).
  float biasUpdateRate = 1e-3f;
};

struct StepResult {
  float loss = 0;
  /// The L2 norm of the step's parameter gradients (this rank's).
  double gradNorm = 0;
  /// Empty when the loss, the gradients and the update are finite (on
  /// every expert-parallel rank); else what was not, and the step left the
  /// state unchanged on every rank (the step count still advances).
  std::string nonFinite;
  /// Tokens routed to each expert in the step.
  std::vector<float> load;
};

/// The training state of a layer whose bundle was compiled with --train:
/// fp32 master weights, AdamW moments, the score-correction bias and the
/// step count. Each step runs the bundle's compiled training step.
class Trainer {
public:
  /// Master weights start as f32 copies of the layer's bound parameters,
  /// moments at zero (f32, or bf16 when the bundle's step keeps them so:
  /// moe-compile --optimizer-state). A host step that updates in place
  /// (TrainSpec::update) instead borrows an f32 layer's parameters as its
  /// masters (Layer::lendParameter): the layer then reads the trained
  /// weights as they are, and gets them back when the trainer goes.
  static Expected<std::unique_ptr<Trainer>> create(Layer &layer);
  ~Trainer();

  /// One step on `x` [T, hidden] (f32, bf16 or f16) towards `target`
  /// [T, hidden] (MSE loss).
  Expected<StepResult> step(const Tensor &x, const Tensor &target,
                            const TrainOptions &options);
  /// The gradients of the last step's loss, computed before its update,
  /// under checkpoint names (f32), plus "x" (from the device, if it keeps
  /// the state).
  Expected<std::map<std::string, Tensor>> lastGradients();
  /// Copies the master weights and the bias into the layer's parameters
  /// (its compute dtype), for forward passes and weights files; those the
  /// layer lent are its parameters already.
  Status syncLayer();
  /// Brings state() up to date when the device keeps the state and
  /// updated it (TrainSpec::stateOnDevice); checkpoints and syncLayer do.
  Status pullState();

  int64_t steps() const { return stepCount; }
  /// Every state tensor by its name in the training step (`W`, `W.m`,
  /// `W.v`, `score_bias`): what a checkpoint holds besides the step count.
  /// When the device keeps the state, current after pullState().
  const std::map<std::string, Tensor> &state() const { return tensors; }
  /// Restores a state written by state() and the step count.
  Status restore(const std::map<std::string, Tensor> &state, int64_t steps);

private:
  Trainer(Layer &layer) : layer(layer) {}
  Layer &layer;
  TrainSpec spec;
  std::map<std::string, Tensor> tensors;
  std::map<std::string, Tensor> gradients;
  /// The last step's output buffers (replaced state, gradients, the loss
  /// and load), by output name, for the next step to write into: the step
  /// writes every output whole, so reusing them saves the zeroing and the
  /// page faults of fresh ones (gigabytes a step for large layers).
  std::map<std::string, Tensor> spareOutputs;
  /// The device's state is newer than `tensors`.
  bool stateOnDevice = false;
  /// Weights (and "x", the input) whose last gradients are still on the
  /// device only.
  std::vector<std::string> gradientsOnDevice;
  /// Tokens of the last step (the input gradient's rows).
  int64_t lastTokens = 0;
  int64_t stepCount = 0;
};

/// The largest step count a trainer or a checkpoint records (2^50).
constexpr int64_t kMaxStep = int64_t(1) << 50;

/// Writes a checkpoint of `trainer` (its state tensors, the step count and
/// `stream`, the position of the caller's input stream) as
/// `dir/step-<steps>/state.safetensors` plus a `COMPLETE` marker holding
/// the step, the stream, the ranks and each state file's size and SHA-256.
/// Non-finite state is refused. Every file is written to a temporary
/// directory and fsynced; the directory then appears under its
/// final name in one rename (an atomic exchange when a checkpoint of the
/// same step exists), so a valid checkpoint is never removed before a
/// newer one is complete. `keep` > 0 then removes this run's older
/// checkpoints beyond the newest `keep`.
/// With an expert-parallel `comm` every rank writes its own state file
/// into the one directory (a filesystem all ranks share), and rank 0
/// publishes it once all are written; every rank returns the same status.
Status writeCheckpoint(const std::string &dir, Trainer &trainer,
                       uint64_t stream, Communicator *comm = nullptr,
                       int64_t keep = 0);

/// Writes a checkpoint of a training state given as tensors (what
/// writeCheckpoint does for a trainer): f32 state (bf16 moments),
/// `step` in [0, 2^50].
Status writeCheckpointState(const std::string &dir,
                            const std::map<std::string, Tensor> &state,
                            int64_t step, uint64_t stream,
                            Communicator *comm = nullptr, int64_t keep = 0);

/// A checkpoint written while training goes on, as writeCheckpoint writes
/// it (the same files, the same atomic publication). start() pulls the
/// state off the device, copies it, and checks and prepares on every rank;
/// the copy is then serialized, hashed and written (fsynced) on a thread
/// of the writer's own. finish() waits for that and publishes the
/// checkpoint (rank 0, once every rank's file is written): call it before
/// the next start (which calls it too) and before the job ends. The
/// collectives of both run on the caller's thread. A checkpoint never
/// finished stays unpublished: resuming ignores it.
class CheckpointWriter {
public:
  CheckpointWriter() = default;
  CheckpointWriter(const CheckpointWriter &) = delete;
  CheckpointWriter &operator=(const CheckpointWriter &) = delete;
  ~CheckpointWriter();

  Status start(const std::string &dir, Trainer &trainer, uint64_t stream,
               Communicator *comm = nullptr, int64_t keep = 0);
  Status start(const std::string &dir,
               const std::map<std::string, Tensor> &state, int64_t step,
               uint64_t stream, Communicator *comm = nullptr,
               int64_t keep = 0);
  /// Publishes the checkpoint started last; success when none is pending.
  Status finish();
  bool pending() const { return active; }

  /// Claims `dir` for this job until the writer is destroyed: creates it
  /// if missing (a path that is a file, or that cannot be written, is an
  /// error here, before any step runs) and takes an exclusive lock on
  /// `dir/.moe-train.lock` (flock, released when the process ends, however
  /// it ends). A second job writing the same directory gets an error that
  /// names the holder's pid and host. start() claims its directory when it
  /// is not claimed yet; every rank returns the same status (rank 0 holds
  /// the lock).
  Status claim(const std::string &dir, Communicator *comm = nullptr);

private:
  struct Digest {
    char sha256[64];
    uint64_t bytes;
  };
  std::string dir, tmp;
  int64_t step = 0, keep = 0;
  uint64_t stream = 0;
  Communicator *comm = nullptr;
  bool active = false;
  std::string claimed; // the directory whose lock lockFd holds
  int lockFd = -1;
  std::thread writing;
  Status written = Status::success(); // the thread's, read after the join
  Digest digest{};
};

/// The newest valid checkpoint under `dir`, and the newer ones skipped.
struct ValidCheckpoint {
  std::string path;
  int64_t step = 0;
  uint64_t stream = 0;
  /// The state tensors, by name.
  std::map<std::string, Tensor> tensors;
  /// Each damaged newer checkpoint, newest first.
  struct Damaged {
    std::string path, why;
    /// The name it was set aside as (`<path>.damaged-<time>`), or empty
    /// when the rename failed (read-only storage), and then `notMoved`
    /// says why.
    std::string setAside, notMoved;
  };
  std::vector<Damaged> damaged;
};

/// A state tensor as a checkpoint must hold it.
struct StateSpec {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
};

/// The dtype and shape of each of `state`'s tensors (a trainer's state()).
std::map<std::string, StateSpec>
stateSpecs(const std::map<std::string, Tensor> &state);

/// Reads the newest checkpoint under `dir` that verifies on every rank:
/// its marker (format, step matching the name, ranks), each state file's
/// size and SHA-256, the step and stream record, every tensor of `specs`
/// (its dtype and shape, finite values). A damaged checkpoint is skipped
/// for the next older one (with `strict`, it is the error); an intact one
/// that is not this job's (other ranks, other dtypes or shapes, an older
/// format) is an error, never skipped.
Expected<ValidCheckpoint>
readValidCheckpoint(const std::string &dir,
                    const std::map<std::string, StateSpec> &specs,
                    Communicator *comm = nullptr, bool strict = false);

/// readValidCheckpoint for `trainer`'s state, restored into it.
Expected<ValidCheckpoint> resumeCheckpoint(const std::string &dir,
                                           Trainer &trainer,
                                           Communicator *comm = nullptr,
                                           bool strict = false);

/// A Chrome trace (the JSON Perfetto and chrome://tracing open): complete
/// events on named lanes, in microseconds from the trace's creation.
class Trace {
public:
  Trace();
  /// A lane (a "thread" of the trace); returns its id.
  int lane(const std::string &name);
  /// Records `name` on `lane` from `start` for `seconds`.
  void add(int lane, const std::string &name, double startSeconds,
           double seconds);
  /// Adds the lanes of a device's streams (kernels, exchanges).
  void addDeviceLanes();
  /// Records a device profile (KernelTime starts count from `start`) on
  /// those lanes, each name after `label`.
  void addDeviceProfile(const std::vector<KernelTime> &profile,
                        const std::string &label, double start);
  /// Seconds since the trace began.
  double now() const;
  /// A steadySeconds() time on the trace's clock.
  double fromSteady(double seconds) const;
  Status write(const std::string &path) const;

private:
  struct Event {
    int lane;
    std::string name;
    double start, duration;
    int64_t ctas = 0; // a kernel's, in the span's args
  };
  std::vector<std::string> lanes;
  std::vector<Event> events;
  int kernelLane = -1, exchangeLane = -1;
  double origin;
};

} // namespace moe::rt

#endif // MOE_RUNTIME_TRAIN_H
