//===- Train.h - Training steps of a compiled MoE layer ---------*- C++ -*-===//
//
// Part of moe-compiler's runtime.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_RUNTIME_TRAIN_H
#define MOE_RUNTIME_TRAIN_H

#include "moe/runtime/Layer.h"

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
  /// Tokens routed to each expert in the step.
  std::vector<float> load;
};

/// The training state of a layer whose bundle was compiled with --train:
/// fp32 master weights, AdamW moments, the score-correction bias and the
/// step count. Each step runs the bundle's compiled training step.
class Trainer {
public:
  /// Master weights start as f32 copies of the layer's bound parameters,
  /// moments at zero.
  static Expected<std::unique_ptr<Trainer>> create(Layer &layer);

  /// One step on `x` [T, hidden] (f32, bf16 or f16) towards `target`
  /// [T, hidden] (MSE loss).
  Expected<StepResult> step(const Tensor &x, const Tensor &target,
                            const TrainOptions &options);
  /// The gradients of the last step's loss, computed before its update,
  /// under checkpoint names (f32), plus "x".
  std::map<std::string, Tensor> lastGradients() const;
  /// Copies the master weights and the bias into the layer's parameters
  /// (its compute dtype), for forward passes and weights files.
  Status syncLayer();

  int64_t steps() const { return stepCount; }
  /// Every state tensor by its name in the training step (`W`, `W.m`,
  /// `W.v`, `score_bias`): what a checkpoint holds besides the step count.
  const std::map<std::string, Tensor> &state() const { return tensors; }
  /// Restores a state written by state() and the step count.
  Status restore(const std::map<std::string, Tensor> &state, int64_t steps);

private:
  Trainer(Layer &layer) : layer(layer) {}
  Layer &layer;
  TrainSpec spec;
  std::map<std::string, Tensor> tensors;
  std::map<std::string, Tensor> gradients;
  int64_t stepCount = 0;
};

/// Writes a checkpoint of `trainer` (its state tensors, the step count and
/// `stream`, the position of the caller's input stream) as
/// `dir/step-<steps>/state.safetensors`: the file is written to a temporary
/// directory and fsynced, the directory renamed into place, and a
/// `COMPLETE` marker written last.
/// With an expert-parallel `comm` every rank writes its own state file
/// into the one directory (a filesystem all ranks share), and rank 0
/// publishes it once all are written; every rank returns the same status.
Status writeCheckpoint(const std::string &dir, const Trainer &trainer,
                       uint64_t stream, Communicator *comm = nullptr);

/// The newest complete checkpoint under `dir` (one with its marker), or an
/// error saying there is none.
Expected<std::string> findCheckpoint(const std::string &dir);

/// Restores `trainer` from the checkpoint at `path` and returns the stream
/// position stored with it.
Expected<uint64_t> readCheckpoint(const std::string &path, Trainer &trainer,
                                  Communicator *comm = nullptr);

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
  };
  std::vector<std::string> lanes;
  std::vector<Event> events;
  double origin;
};

} // namespace moe::rt

#endif // MOE_RUNTIME_TRAIN_H
