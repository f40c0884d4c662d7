//===- Train.cpp - Training steps of a compiled MoE layer -----------------===//
//
// Part of moe-compiler's runtime.
//
//===----------------------------------------------------------------------===//

#include "moe/runtime/Train.h"

#include "moe/runtime/Safetensors.h"

#include <cctype>
#include <cerrno>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <cstdio>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <nlohmann/json.hpp>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

namespace moe::rt {

/// Whether `name` ("W.next", "W.m.next", "W.v.next") is the updated state
/// of a trained weight W: one with a gradient output.
static bool isWeightState(const TrainSpec &spec, const std::string &name) {
  std::string weight = name.substr(0, name.size() - 5);
  for (const char *moment : {".m", ".v"})
    if (endsWith(weight, moment))
      weight.resize(weight.size() - 2);
  for (const TrainArgumentSpec &a : spec.arguments)
    if (a.output && a.name == weight + ".grad")
      return true;
  return false;
}

Expected<std::unique_ptr<Trainer>> Trainer::create(Layer &layer) {
  using Result = Expected<std::unique_ptr<Trainer>>;
  const Manifest &m = layer.getManifest();
  if (m.train.entry.empty())
    return Result::error("the bundle has no training step (compile it with "
                         "moe-compile --train)");
  std::unique_ptr<Trainer> trainer(new Trainer(layer));
  trainer->spec = m.train;
  for (const TrainArgumentSpec &a : m.train.arguments) {
    if (a.output || a.name == "x" || a.name == "target" || a.name == "hyper")
      continue;
    bool moment = isAdamMoment(a.name);
    // AdamW's moments may be kept in bf16 (moe-compile --optimizer-state).
    if (a.dtype != DType::F32 && !(moment && a.dtype == DType::BF16))
      return Result::error("training state '" + a.name + "' is " +
                           mlirName(a.dtype) + ", expected f32" +
                           (moment ? " or bf16" : ""));
    if (moment) {
      trainer->tensors[a.name] = Tensor::zeros(a.dtype, a.shape);
      continue;
    }
    const Tensor *value = layer.parameter(a.name);
    if (!value)
      return Result::error("the training step takes '" + a.name +
                           "', which the bundle's parameters lack");
    // The in-place host step borrows an f32 parameter (the shapes are the
    // manifest's, checked when the bundle was loaded).
    if (m.train.update && value->dtype == DType::F32 && value->shape == a.shape)
      if (layer.lendParameter(a.name, trainer->tensors[a.name]).ok())
        continue;
    // (An FP8 weight's master is its codes times their block scales.)
    Expected<Tensor> master = layer.floatParameter(a.name);
    if (!master)
      return Result::error(master.message());
    if (master->shape != a.shape)
      return Result::error("training state '" + a.name + "' has shape " +
                           formatShape(a.shape) + ", the parameter " +
                           formatShape(master->shape));
    trainer->tensors[a.name] = std::move(*master);
  }
  // A device that keeps training state holds none of this trainer's yet.
  layer.getBackend().invalidateTrainingState();
  return Result(std::move(trainer));
}

Expected<StepResult> Trainer::step(const Tensor &x, const Tensor &target,
                                   const TrainOptions &o) {
  using Result = Expected<StepResult>;
  const Manifest &m = layer.getManifest();
  int64_t hidden = m.layer.hidden;
  if (Status s = layer.checkCommunicator(); !s.ok())
    return Result::error(s.error);
  if (x.shape.size() != 2 || x.shape[1] != hidden || target.shape != x.shape)
    return Result::error(
        "x and target must both be [T, " + std::to_string(hidden) + "], got " +
        formatShape(x.shape) + " and " + formatShape(target.shape));
  int64_t tokens = x.shape[0];
  if (m.staticTokens && tokens != m.staticTokens)
    return Result::error("a training step of this bundle takes exactly " +
                         std::to_string(m.staticTokens) +
                         " tokens (its layer's static token count), got " +
                         std::to_string(tokens));
  if (tokens < 1 || tokens > m.maxTokens)
    return Result::error("a training step takes 1 to " +
                         std::to_string(m.maxTokens) + " tokens, got " +
                         std::to_string(tokens));
  // The last entry is this rank's token count: the sm_90a step needs every
  // rank's, which its backend sums; the host step counts them itself.
  float hyper[8] = {o.learningRate,   static_cast<float>(stepCount + 1),
                    o.beta1,          o.beta2,
                    o.epsilon,        o.weightDecay,
                    o.biasUpdateRate, static_cast<float>(tokens)};
  std::map<std::string, Tensor> inputs, outputs;
  std::vector<const Tensor *> args;
  for (const TrainArgumentSpec &a : spec.arguments) {
    std::vector<int64_t> shape = a.shape;
    for (int64_t &d : shape)
      if (d < 0)
        d = tokens;
    if (a.output) {
      // A device that keeps the state keeps the gradients too, the
      // input's as well (lastGradients fetches them).
      bool onDevice = spec.stateOnDevice && isGradient(a);
      if (onDevice) {
        outputs[a.name] = Tensor();
        continue;
      }
      auto spare = spareOutputs.find(a.name);
      // A gradient output reuses the last step's gradient (lastGradients
      // hands out copies), so there is one buffer for each.
      auto last = isGradient(a)
                      ? gradients.find(a.name.substr(0, a.name.size() - 5))
                      : gradients.end();
      if (last != gradients.end() && last->second.dtype == a.dtype &&
          last->second.shape == shape) {
        outputs[a.name] = std::move(last->second);
        gradients.erase(last);
      } else if (spare != spareOutputs.end() &&
                 spare->second.dtype == a.dtype &&
                 spare->second.shape == shape) {
        outputs[a.name] = std::move(spare->second);
      } else {
        outputs[a.name] = Tensor::zeros(a.dtype, shape);
      }
      continue;
    }
    if (a.name == "x" || a.name == "target") {
      // Converted only when the step takes another dtype.
      const Tensor &given = a.name == "x" ? x : target;
      if (given.dtype == a.dtype)
        continue;
      Expected<Tensor> converted = convertTensor(given, a.dtype);
      if (!converted)
        return Result::error(converted.message());
      inputs[a.name] = std::move(*converted);
    } else if (a.name == "hyper") {
      Tensor &h = inputs[a.name] = Tensor::zeros(DType::F32, {8});
      std::memcpy(h.data.data(), hyper, sizeof(hyper));
    } else if (!tensors.count(a.name)) {
      return Result::error("no training state '" + a.name + "'");
    }
  }
  for (const TrainArgumentSpec &a : spec.arguments) {
    if (a.output)
      args.push_back(&outputs[a.name]);
    else if (inputs.count(a.name))
      args.push_back(&inputs[a.name]);
    else if (a.name == "x")
      args.push_back(&x);
    else if (a.name == "target")
      args.push_back(&target);
    else
      args.push_back(&tensors[a.name]);
  }
  if (Status s = layer.getBackend().runEntry(spec.entry, args, tokens); !s.ok())
    return Result::error(s.error);

  StepResult result;
  result.loss = outputs["loss"].as<float>()[0];
  const Tensor &load = outputs["load"];
  result.load.assign(load.as<float>(), load.as<float>() + load.numElements());
  // Numerical health, before anything is committed: the loss, the global
  // gradient norm and the updated state must be finite. The step reports
  // each weight's sum of gradient squares and how many values its update
  // makes (or, a device that keeps the state, would make) non-finite, in
  // the order of the `.grad` outputs; the score bias's update, and all of
  // an older host bundle's, are checked here.
  double squares = 0;
  std::string firstBad, badUpdate;
  int threads = layer.getBackend().getThreads();
  // Host bundles since 2026-12 report them as well (from their fused AdamW
  // loops); older ones are scanned here.
  bool reported = outputs.count("grad_sq") && outputs.count("bad_updates");
  if (reported) {
    const float *sq = outputs["grad_sq"].as<float>();
    const float *bad = outputs["bad_updates"].as<float>();
    size_t w = 0;
    for (const TrainArgumentSpec &a : spec.arguments) {
      if (!isWeightGradient(a))
        continue;
      std::string weight = a.name.substr(0, a.name.size() - 5);
      if (!std::isfinite(sq[w]) && firstBad.empty())
        firstBad = weight;
      if (bad[w] != 0 && badUpdate.empty())
        badUpdate = weight;
      squares += sq[w];
      ++w;
    }
  } else {
    for (auto &[name, value] : outputs) {
      if (!endsWith(name, ".grad") || name == "x.grad")
        continue;
      double sum =
          sumOfSquares(value.as<float>(), value.numElements(), threads);
      if (!std::isfinite(sum) && firstBad.empty())
        firstBad = name.substr(0, name.size() - 5);
      squares += sum;
    }
  }
  result.gradNorm = std::sqrt(squares);
  if (!std::isfinite(result.loss))
    result.nonFinite = std::string("the loss is ") +
                       (std::isnan(result.loss) ? "NaN"
                        : result.loss > 0       ? "+Inf"
                                                : "-Inf");
  else if (!firstBad.empty())
    result.nonFinite =
        "the gradient norm is not finite (first in '" + firstBad + "')";
  else if (!badUpdate.empty())
    result.nonFinite = "the update makes '" + badUpdate + "' non-finite";
  else
    for (auto &[name, value] : outputs)
      if (endsWith(name, ".next") &&
          (!reported || !isWeightState(spec, name)) &&
          !allFinite(value, nullptr, threads)) {
        result.nonFinite = "the update makes '" +
                           name.substr(0, name.size() - 5) + "' non-finite";
        break;
      }
  // Every rank decides alike, so replicated state stays identical.
  if (Communicator *comm = layer.getCommunicator();
      comm && comm->size() > 1) {
    float bad = result.nonFinite.empty() ? 0.0f : 1.0f;
    comm->allReduceSum(&bad, 1);
    if (bad > 0 && result.nonFinite.empty())
      result.nonFinite = "the step of another rank is not finite";
  }
  // A non-finite step leaves the state as it was. The last step's
  // gradients become spare buffers.
  spareOutputs.clear();
  for (auto &[name, value] : gradients)
    spareOutputs[name + ".grad"] = std::move(value);
  gradients.clear();
  gradientsOnDevice.clear();
  if (spec.stateOnDevice) {
    // The device applied the update already, or (having found what the
    // host found above) left the state as it was.
    Backend &backend = layer.getBackend();
    if (result.nonFinite.empty()) {
      if (!backend.updatesWithStep())
        if (Status s = backend.runTrainingUpdate(); !s.ok())
          return Result::error(s.error);
      stateOnDevice = true;
    }
    // The gradients stay on the device until asked for.
    for (const TrainArgumentSpec &a : spec.arguments)
      if (isGradient(a))
        gradientsOnDevice.push_back(a.name.substr(0, a.name.size() - 5));
    lastTokens = tokens;
    ++stepCount;
    return result;
  }
  if (spec.update && result.nonFinite.empty()) {
    // AdamW in place: the weights and moments, from the step's gradients.
    std::vector<const Tensor *> updateArgs;
    for (const TrainArgumentSpec &a : spec.update->arguments) {
      if (a.name == "hyper")
        updateArgs.push_back(&inputs["hyper"]);
      else if (outputs.count(a.name))
        updateArgs.push_back(&outputs[a.name]);
      else if (tensors.count(a.name))
        updateArgs.push_back(&tensors[a.name]);
      else
        return Result::error("the training update takes '" + a.name +
                             "', which is no state or gradient of the step");
    }
    if (Status s = layer.getBackend().runEntry(spec.update->entry, updateArgs,
                                               /*tokens=*/0);
        !s.ok())
      return Result::error(s.error);
  }
  for (auto &[name, value] : outputs) {
    if (endsWith(name, ".next") && result.nonFinite.empty()) {
      Tensor &state = tensors[name.substr(0, name.size() - 5)];
      spareOutputs[name] = std::move(state);
      state = std::move(value);
    } else if (endsWith(name, ".grad")) {
      gradients[name.substr(0, name.size() - 5)] = std::move(value);
    } else {
      spareOutputs[name] = std::move(value);
    }
  }
  ++stepCount;
  return result;
}

Status Trainer::pullState() {
  if (!stateOnDevice)
    return Status::success();
  std::map<std::string, Tensor *> into;
  for (auto &[name, value] : tensors)
    into[name] = &value;
  if (Status s = layer.getBackend().downloadTrainingTensors(into); !s.ok())
    return s;
  stateOnDevice = false;
  return Status::success();
}

Expected<std::map<std::string, Tensor>> Trainer::lastGradients() {
  using Result = Expected<std::map<std::string, Tensor>>;
  if (!gradientsOnDevice.empty()) {
    std::map<std::string, Tensor *> into;
    for (const std::string &w : gradientsOnDevice) {
      // The input's gradient has the last step's tokens; a weight's, the
      // weight's shape.
      std::vector<int64_t> shape;
      if (w == "x") {
        shape = {lastTokens, layer.getManifest().layer.hidden};
      } else {
        auto it = tensors.find(w);
        if (it == tensors.end())
          return Result::error("no training state '" + w + "'");
        shape = it->second.shape;
      }
      DType dtype = DType::F32;
      for (const TrainArgumentSpec &a : spec.arguments)
        if (a.name == w + ".grad")
          dtype = a.dtype;
      gradients[w] = Tensor::zeros(dtype, shape);
      into[w + ".grad"] = &gradients[w];
    }
    if (Status s = layer.getBackend().downloadTrainingTensors(into); !s.ok())
      return Result::error(s.error);
    gradientsOnDevice.clear();
  }
  std::map<std::string, Tensor> named = layer.checkpointNames(gradients);
  if (auto it = gradients.find("x"); it != gradients.end())
    named["x"] = it->second;
  return named;
}

Trainer::~Trainer() {
  for (const auto &[name, value] : tensors)
    if (layer.parameter(name) == &value)
      layer.returnParameter(name);
}

Status Trainer::syncLayer() {
  if (Status s = pullState(); !s.ok())
    return s;
  for (const auto &[name, value] : tensors) {
    if (isAdamMoment(name) || layer.parameter(name) == &value)
      continue;
    if (Status s = layer.setParameter(name, value); !s.ok())
      return s;
  }
  return Status::success();
}

Status Trainer::restore(const std::map<std::string, Tensor> &state,
                        int64_t steps) {
  if (steps < 0)
    return Status::failure("a step count must not be negative, got " +
                           std::to_string(steps));
  for (auto &[name, value] : tensors) {
    auto it = state.find(name);
    if (it == state.end())
      return Status::failure("the checkpoint has no '" + name + "'");
    if (it->second.shape != value.shape || it->second.dtype != value.dtype)
      return Status::failure(
          "checkpoint tensor '" + name + "' is " + mlirName(it->second.dtype) +
          " " + formatShape(it->second.shape) + ", expected " +
          mlirName(value.dtype) + " " + formatShape(value.shape));
    if (int64_t at = 0; !allFinite(it->second, &at))
      return Status::failure("checkpoint tensor '" + name +
                             "' holds a non-finite value at element " +
                             std::to_string(at));
  }
  for (auto &[name, value] : tensors)
    value = state.at(name);
  stepCount = steps;
  // The device's copy (if it keeps one) is no longer the state.
  stateOnDevice = false;
  layer.getBackend().invalidateTrainingState();
  return syncLayer();
}

static Status syncPath(const std::string &path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return Status::failure("cannot open '" + path +
                           "': " + std::strerror(errno));
  bool ok = ::fsync(fd) == 0;
  ::close(fd);
  return ok ? Status::success()
            : Status::failure("cannot flush '" + path + "'");
}

static const char kMarker[] = "COMPLETE";
static const char kMarkerFormat[] = "moe-checkpoint";
static constexpr int64_t kMarkerVersion = 2;

/// Rank `rank`'s state file in a job of `ranks`: expert-parallel ranks
/// hold different experts.
static std::string stateFile(int rank, int ranks) {
  if (ranks == 1)
    return "state.safetensors";
  return "state.rank" + std::to_string(rank) + "-of-" + std::to_string(ranks) +
         ".safetensors";
}

static std::string stateFile(const Communicator *comm) {
  return comm ? stateFile(comm->rank(), comm->size()) : stateFile(0, 1);
}

static std::string checkpointName(int64_t step) {
  char name[64];
  std::snprintf(name, sizeof(name), "step-%012lld",
                static_cast<long long>(step));
  return name;
}

/// The step of a checkpoint directory's name ("step-000000000010"), or -1.
static int64_t stepOfName(const std::string &name) {
  if (name.size() != 17 || name.rfind("step-", 0) != 0)
    return -1;
  int64_t step = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9')
      return -1;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

/// Removes `dir` and the files in it.
static void removeDirectory(const std::string &dir) {
  if (DIR *d = ::opendir(dir.c_str())) {
    while (struct dirent *entry = ::readdir(d)) {
      std::string name = entry->d_name;
      if (name != "." && name != "..")
        std::remove((dir + "/" + name).c_str());
    }
    ::closedir(d);
  }
  ::rmdir(dir.c_str());
}

/// The same status on every rank: a failure on one fails all.
static Status agree(Communicator *comm, Status status,
                    const char *elsewhere = "another rank could not write "
                                            "its checkpoint") {
  if (!comm || comm->size() == 1)
    return status;
  float failed = status.ok() ? 0.0f : 1.0f;
  comm->allReduceSum(&failed, 1);
  if (status.ok() && failed > 0)
    return Status::failure(elsewhere);
  return status;
}

/// A checkpoint directory with a marker: its step and path.
struct MarkedCheckpoint {
  int64_t step;
  std::string path;
};

/// The checkpoints under `dir` that carry a marker, newest first.
static Expected<std::vector<MarkedCheckpoint>>
markedCheckpoints(const std::string &dir) {
  DIR *d = ::opendir(dir.c_str());
  if (!d)
    return Expected<std::vector<MarkedCheckpoint>>::error(
        "cannot open checkpoint directory '" + dir +
        "': " + std::strerror(errno));
  std::vector<MarkedCheckpoint> found;
  while (struct dirent *entry = ::readdir(d)) {
    std::string path = dir + "/" + entry->d_name;
    int64_t step = stepOfName(entry->d_name);
    struct stat st;
    if (step >= 0 && ::stat((path + "/" + kMarker).c_str(), &st) == 0)
      found.push_back({step, path});
  }
  ::closedir(d);
  std::sort(found.begin(), found.end(),
            [](const MarkedCheckpoint &a, const MarkedCheckpoint &b) {
              return a.step > b.step;
            });
  return found;
}

/// Whether `markerPath` is a readable moe-checkpoint marker (its format
/// field; the rest is verified on resume).
static bool isCheckpointRecord(const std::string &markerPath) {
  Expected<std::vector<uint8_t>> bytes = readFile(markerPath, 1 << 20);
  if (!bytes)
    return false;
  const char *text = reinterpret_cast<const char *>(bytes->data());
  if (!checkJsonDepth(text, bytes->size(), "marker").ok())
    return false;
  nlohmann::json marker = nlohmann::json::parse(
      text, text + bytes->size(), nullptr, /*allow_exceptions=*/false);
  auto it = marker.is_object() ? marker.find("format") : marker.end();
  return it != marker.end() && it->is_string() &&
         it->get_ref<const std::string &>() == kMarkerFormat;
}

Status writeCheckpoint(const std::string &dir, Trainer &trainer,
                       uint64_t stream, Communicator *comm, int64_t keep) {
  CheckpointWriter writer;
  if (Status s = writer.start(dir, trainer, stream, comm, keep); !s.ok())
    return s;
  return writer.finish();
}

Status writeCheckpointState(const std::string &dir,
                            const std::map<std::string, Tensor> &state,
                            int64_t step, uint64_t stream, Communicator *comm,
                            int64_t keep) {
  CheckpointWriter writer;
  if (Status s = writer.start(dir, state, step, stream, comm, keep); !s.ok())
    return s;
  return writer.finish();
}

CheckpointWriter::~CheckpointWriter() {
  // An unfinished checkpoint stays unpublished (its temporary directory
  // is removed by the next write of that step, or by a later run).
  if (writing.joinable())
    writing.join();
  if (lockFd >= 0)
    ::close(lockFd); // releases the flock
}

/// The lock file a writer holds in its checkpoint directory.
static constexpr const char *kLockFile = ".moe-train.lock";

Status CheckpointWriter::claim(const std::string &dir, Communicator *comm) {
  if (!claimed.empty() && claimed == dir)
    return Status::success();
  bool leader = !comm || comm->rank() == 0;
  Status held = Status::success();
  if (leader) {
    held = [&]() -> Status {
      struct stat info;
      if (::stat(dir.c_str(), &info) == 0 && !S_ISDIR(info.st_mode))
        return Status::failure("checkpoint directory '" + dir +
                               "' exists and is not a directory");
      if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
        return Status::failure("cannot create checkpoint directory '" + dir +
                               "': " + std::strerror(errno));
      std::string lockPath = dir + "/" + kLockFile;
      int fd = ::open(lockPath.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
      if (fd < 0)
        return Status::failure("cannot write to checkpoint directory '" +
                               dir + "': cannot create '" + lockPath +
                               "': " + std::strerror(errno));
      if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int error = errno;
        std::string holder;
        char text[256] = {};
        ssize_t n = ::pread(fd, text, sizeof(text) - 1, 0);
        ::close(fd);
        if (error != EWOULDBLOCK)
          return Status::failure("cannot lock checkpoint directory '" + dir +
                                 "': " + std::strerror(error));
        for (ssize_t i = 0; i < n && text[i] != '\n'; ++i)
          if (std::isprint(static_cast<unsigned char>(text[i])))
            holder += text[i];
        return Status::failure(
            "checkpoint directory '" + dir + "' is in use by another run (" +
            (holder.empty() ? std::string("its lock file names no process")
                            : holder) +
            ", holding " + lockPath +
            "); give each run a --checkpoint directory of its own");
      }
      char host[256] = {};
      ::gethostname(host, sizeof(host) - 1);
      std::string who = "pid " + std::to_string(::getpid()) + " on host " +
                        std::string(host) + "\n";
      if (::ftruncate(fd, 0) != 0 ||
          ::pwrite(fd, who.data(), who.size(), 0) !=
              static_cast<ssize_t>(who.size())) {
        int error = errno;
        ::close(fd);
        return Status::failure("cannot write to checkpoint directory '" +
                               dir + "': " + std::strerror(error));
      }
      if (lockFd >= 0)
        ::close(lockFd);
      lockFd = fd;
      return Status::success();
    }();
  }
  if (Status s = agree(comm, held, "rank 0 cannot claim the checkpoint "
                                   "directory (see its message)");
      !s.ok())
    return s;
  claimed = dir;
  return Status::success();
}

Status CheckpointWriter::start(const std::string &dir, Trainer &trainer,
                               uint64_t stream, Communicator *comm,
                               int64_t keep) {
  if (Status s = trainer.pullState(); !s.ok())
    return s;
  return start(dir, trainer.state(), trainer.steps(), stream, comm, keep);
}

Status CheckpointWriter::start(const std::string &dir,
                               const std::map<std::string, Tensor> &state,
                               int64_t step, uint64_t stream,
                               Communicator *comm, int64_t keep) {
  if (Status s = finish(); !s.ok())
    return s;
  if (step < 0 || step > kMaxStep)
    return Status::failure("a checkpoint's step must be in [0, 2^50], got " +
                           std::to_string(step));
  bool leader = !comm || comm->rank() == 0;
  std::string name = checkpointName(step);
  // Every rank writes into one temporary directory that rank 0 made.
  std::string tmp = dir + "/.tmp-" + name;
  // Never a checkpoint of state that cannot be resumed from.
  Status healthy = Status::success();
  for (const auto &[tensor, value] : state)
    if (!allFinite(value)) {
      healthy = Status::failure("refusing to write a checkpoint of step " +
                                std::to_string(step) + ": '" +
                                tensor + "' holds non-finite values");
      break;
    }
  if (Status s = agree(comm, healthy,
                       "another rank's training state is not finite");
      !s.ok())
    return s;
  if (Status s = claim(dir, comm); !s.ok())
    return s;
  Status made = Status::success();
  if (leader) {
    // Left by a run of this directory that died while writing (the lock
    // says no other run writes here now).
    removeDirectory(tmp);
    if (::mkdir(tmp.c_str(), 0755) != 0)
      made = Status::failure("cannot create '" + tmp +
                             "': " + std::strerror(errno));
  }
  if (Status s = agree(comm, made); !s.ok())
    return s;
  this->dir = dir;
  this->step = step;
  this->stream = stream;
  this->comm = comm;
  this->keep = keep;
  this->tmp = tmp;
  active = true;
  written = Status::success();
  // The rank's state file: a copy of the state, serialized, hashed and
  // written (fsynced) beside whatever the caller does next.
  auto snapshot = std::make_shared<std::map<std::string, Tensor>>(state);
  std::string file = tmp + "/" + stateFile(comm);
  writing = std::thread([this, snapshot, file, step, stream] {
    Tensor meta = Tensor::zeros(DType::I64, {2});
    meta.as<int64_t>()[0] = step;
    meta.as<int64_t>()[1] = static_cast<int64_t>(stream);
    std::map<std::string, const Tensor *> tensors = {
        {"__step_and_stream__", &meta}};
    for (const auto &[name, value] : *snapshot)
      tensors[name] = &value;
    written = [&]() -> Status {
      Expected<std::vector<uint8_t>> bytes = serializeSafetensors(tensors);
      if (!bytes)
        return Status::failure(bytes.message());
      Sha256 hash;
      hash.update(bytes->data(), bytes->size());
      std::string hex = hash.hexDigest();
      std::copy(hex.begin(), hex.end(), digest.sha256);
      digest.bytes = bytes->size();
      // (Not read back: after fsync a read comes from the page cache,
      // which proves nothing about the disk; resume verifies the
      // checksum.)
      return writeFileAtomically(file, bytes->data(), bytes->size());
    }();
  });
  return Status::success();
}

Status CheckpointWriter::finish() {
  if (!active)
    return Status::success();
  writing.join();
  active = false;
  bool leader = !comm || comm->rank() == 0;
  int ranks = comm ? comm->size() : 1;
  std::string final = dir + "/" + checkpointName(step);
  if (Status s = agree(comm, written); !s.ok())
    return s;
  // A test hook: MOE_TEST_CHECKPOINT_KILL=S kills the process once step S's
  // state is written but not yet published (a crash mid-checkpoint).
  if (const char *kill = std::getenv("MOE_TEST_CHECKPOINT_KILL");
      kill && std::atoll(kill) == step)
    std::raise(SIGKILL);
  // Each rank's digest, gathered on rank 0 for the marker.
  std::vector<Digest> digests(ranks, digest);
  if (comm && ranks > 1) {
    std::vector<Digest> send(ranks, digest);
    comm->allToAll(send.data(), digests.data(), sizeof(Digest));
  }
  Status published = Status::success();
  if (leader) {
    published = [&]() -> Status {
      nlohmann::json files = nlohmann::json::array();
      for (int r = 0; r < ranks; ++r)
        files.push_back({{"name", stateFile(r, ranks)},
                         {"sha256", std::string(digests[r].sha256, 64)},
                         {"bytes", digests[r].bytes}});
      nlohmann::json marker = {{"format", kMarkerFormat},
                               {"version", kMarkerVersion},
                               {"step", step},
                               {"stream", stream},
                               {"ranks", ranks},
                               {"files", files}};
      std::string text = marker.dump(1) + "\n";
      // The marker is the last file of the temporary directory, and the
      // directory appears under its final name complete, in one rename.
      if (Status s = writeFileAtomically(tmp + "/" + kMarker, text.data(),
                                         text.size());
          !s.ok())
        return s;
      if (Status s = syncPath(tmp); !s.ok())
        return s;
      if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, final.c_str(),
                      RENAME_NOREPLACE) != 0) {
        if (errno != EEXIST && errno != ENOTEMPTY)
          return Status::failure("cannot rename '" + tmp + "' to '" + final +
                                 "': " + std::strerror(errno));
        // Something under the name already. Only a checkpoint (a marker
        // that is a moe-checkpoint record: a rerun of the step) is
        // replaced; anything else is left as it is.
        if (!isCheckpointRecord(final + "/" + kMarker))
          return Status::failure(
              "cannot publish the checkpoint of step " + std::to_string(step) +
              ": '" + final + "' exists and is not a checkpoint (no " +
              kMarker + " record in it); it was left as it is, and the new "
              "checkpoint stays unpublished in '" + tmp + "': move '" +
              final + "' away or choose another --checkpoint directory");
        // A checkpoint of the same step: swap the two at once, so one of
        // them is complete under the name at every moment.
        if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, final.c_str(),
                        RENAME_EXCHANGE) != 0)
          return Status::failure("cannot replace '" + final +
                                 "': " + std::strerror(errno));
        removeDirectory(tmp);
      }
      if (Status s = syncPath(dir); !s.ok())
        return s;
      if (keep > 0)
        if (Expected<std::vector<MarkedCheckpoint>> all =
                markedCheckpoints(dir)) {
          // Older ones beyond the newest `keep` (this one counts); newer
          // ones of another run are not this run's to remove.
          int64_t kept = 0;
          for (const MarkedCheckpoint &c : *all)
            if (c.step <= step && ++kept > keep)
              removeDirectory(c.path);
        }
      return Status::success();
    }();
  }
  return agree(comm, published);
}

namespace {
/// A checkpoint's contents, read and verified but not yet restored.
struct CheckpointState {
  /// Set when the checkpoint is intact but not for this job (another
  /// number of ranks, another layer, an older format): resuming stops
  /// there instead of falling back.
  std::string incompatible;
  int64_t step = 0;
  uint64_t stream = 0;
  std::map<std::string, Tensor> tensors;
};
} // namespace

/// Reads and verifies this rank's part of the checkpoint at `path`: the
/// marker (format, step, ranks), the state file's size and SHA-256, every
/// tensor the trainer holds (shape, dtype, finite values) and the step and
/// stream record.
static Expected<CheckpointState>
verifyCheckpoint(const MarkedCheckpoint &checkpoint,
                 const std::map<std::string, StateSpec> &specs,
                 const Communicator *comm) {
  const std::string &path = checkpoint.path;
  using Result = Expected<CheckpointState>;
  using nlohmann::json;
  Expected<std::vector<uint8_t>> markerBytes =
      readFile(path + "/" + kMarker, 1 << 20);
  if (!markerBytes)
    return Result::error(markerBytes.message());
  CheckpointState state;
  if (markerBytes->empty()) {
    state.incompatible = "its marker holds no checksums (written by an "
                         "older moe-train), so it cannot be verified";
    return state;
  }
  const char *text = reinterpret_cast<const char *>(markerBytes->data());
  if (Status s = checkJsonText(text, markerBytes->size(), "marker"); !s.ok())
    return Result::error(s.error);
  json marker = json::parse(text, text + markerBytes->size(), nullptr,
                            /*allow_exceptions=*/false);
  // json::value() throws when the key holds another type; a damaged marker
  // must be an error, not an exception.
  auto isString = [](const json &object, const char *key,
                     const std::string &want) {
    auto it = object.find(key);
    return it != object.end() && it->is_string() &&
           it->get_ref<const std::string &>() == want;
  };
  auto number = [&](const char *key) -> const json * {
    auto it = marker.find(key);
    return it != marker.end() && it->is_number_integer() ? &*it : nullptr;
  };
  if (!marker.is_object() || !isString(marker, "format", kMarkerFormat) ||
      !number("version") || !number("step") || !number("ranks") ||
      !marker.contains("stream") || !marker["stream"].is_number_unsigned() ||
      !marker.contains("files") || !marker["files"].is_array())
    return Result::error("its marker is not a moe-checkpoint record");
  if (marker["version"].get<int64_t>() != kMarkerVersion) {
    state.incompatible = "its marker has version " +
                         std::to_string(marker["version"].get<int64_t>()) +
                         ", this runtime reads version " +
                         std::to_string(kMarkerVersion);
    return state;
  }
  state.step = marker["step"].get<int64_t>();
  state.stream = marker["stream"].get<uint64_t>();
  if (state.step < 0 || state.step > kMaxStep ||
      state.step != checkpoint.step)
    return Result::error("its marker records step " +
                         std::to_string(state.step) +
                         ", which does not match its name");
  int ranks = comm ? comm->size() : 1;
  if (marker["ranks"].get<int64_t>() != ranks) {
    state.incompatible = "it was written by a job of " +
                         std::to_string(marker["ranks"].get<int64_t>()) +
                         " rank(s), this one has " + std::to_string(ranks);
    return state;
  }
  std::string own = stateFile(comm);
  const json *entry = nullptr;
  for (const json &f : marker["files"])
    if (f.is_object() && isString(f, "name", own))
      entry = &f;
  if (!entry || !entry->contains("sha256") || !(*entry)["sha256"].is_string() ||
      !entry->contains("bytes") || !(*entry)["bytes"].is_number_unsigned())
    return Result::error("its marker has no checksum of " + own);
  uint64_t bytes = (*entry)["bytes"].get<uint64_t>();
  // The state's size follows from the trainer's tensors; a marker that
  // claims much more is damaged (and must not make us allocate it).
  uint64_t expected = 1 << 20;
  for (const auto &[name, spec] : specs)
    expected += static_cast<uint64_t>(elementCount(spec.shape).value_or(0)) *
                    dtypeSize(spec.dtype) +
                256;
  if (bytes > expected)
    return Result::error("its marker records " + std::to_string(bytes) +
                         " bytes for " + own + ", more than the state holds");
  std::string file = path + "/" + own;
  Expected<std::vector<uint8_t>> data = readFile(file, bytes);
  if (!data)
    return Result::error(data.message());
  if (data->size() != bytes)
    return Result::error(own + " has " + std::to_string(data->size()) +
                         " bytes, its marker records " +
                         std::to_string(bytes));
  Sha256 hash;
  hash.update(data->data(), data->size());
  if (hash.hexDigest() != (*entry)["sha256"].get<std::string>())
    return Result::error(own + " does not match its SHA-256 checksum");
  Expected<SafetensorsFile> parsed = SafetensorsFile::parse(std::move(*data), file);
  if (!parsed)
    return Result::error(parsed.message());
  for (const auto &[name, spec] : specs) {
    Expected<Tensor> t = parsed->get(name);
    if (!t)
      return Result::error(t.message());
    if (t->dtype != spec.dtype || t->shape != spec.shape) {
      // The checksum held: it is another layer's checkpoint (or another
      // --optimizer-state's).
      state.incompatible = "tensor '" + name + "' is " + mlirName(t->dtype) +
                           " " + formatShape(t->shape) + ", the bundle's is " +
                           mlirName(spec.dtype) + " " + formatShape(spec.shape);
      if (t->shape == spec.shape && isAdamMoment(name))
        state.incompatible += " (AdamW's moments of a step compiled with "
                              "another moe-compile --optimizer-state)";
      return state;
    }
    if (int64_t at = 0; !allFinite(*t, &at))
      return Result::error("tensor '" + name +
                           "' holds a non-finite value at element " +
                           std::to_string(at));
    state.tensors[name] = std::move(*t);
  }
  Expected<Tensor> meta = parsed->get("__step_and_stream__");
  if (!meta)
    return Result::error(meta.message());
  if (meta->dtype != DType::I64 || meta->numElements() != 2 ||
      meta->as<int64_t>()[0] != state.step ||
      static_cast<uint64_t>(meta->as<int64_t>()[1]) != state.stream)
    return Result::error("its step and stream record disagrees with its "
                         "marker");
  return state;
}

Expected<ValidCheckpoint>
readValidCheckpoint(const std::string &dir,
                    const std::map<std::string, StateSpec> &specs,
                    Communicator *comm, bool strict) {
  using Result = Expected<ValidCheckpoint>;
  bool leader = !comm || comm->rank() == 0;
  Expected<std::vector<MarkedCheckpoint>> all = markedCheckpoints(dir);
  if (!all)
    return Result::error(all.message());
  if (all->empty())
    return Result::error("no complete checkpoint in '" + dir +
                         "' (a complete one has a " + kMarker + " marker)");
  ValidCheckpoint valid;
  for (const MarkedCheckpoint &checkpoint : *all) {
    const std::string &path = checkpoint.path;
    Expected<CheckpointState> state = verifyCheckpoint(checkpoint, specs, comm);
    // Intact but not for this job: an error, never a fallback.
    Status fits = state && !state->incompatible.empty()
                      ? Status::failure(state->incompatible)
                      : Status::success();
    if (Status s = agree(comm, fits,
                         "another rank cannot resume from it (see its "
                         "message)");
        !s.ok())
      return Result::error(path + ": " + s.error);
    Status here = state ? Status::success() : Status::failure(state.message());
    Status everywhere =
        agree(comm, here, "another rank's part of it is damaged");
    if (everywhere.ok()) {
      valid.path = path;
      valid.step = state->step;
      valid.stream = state->stream;
      valid.tensors = std::move(state->tensors);
      // Set the damaged ones aside (renamed, not deleted), so that a later
      // resume does not try them again and their steps can be rewritten.
      if (leader)
        for (ValidCheckpoint::Damaged &bad : valid.damaged) {
          std::string aside =
              bad.path + ".damaged-" + std::to_string(std::time(nullptr));
          if (std::rename(bad.path.c_str(), aside.c_str()) == 0)
            bad.setAside = aside;
          else
            bad.notMoved = std::strerror(errno);
        }
      return valid;
    }
    if (strict)
      return Result::error("the newest checkpoint is damaged: " + path + ": " +
                           everywhere.error + " (--resume-strict)");
    valid.damaged.push_back({path, everywhere.error, "", ""});
  }
  std::string reasons;
  for (const ValidCheckpoint::Damaged &bad : valid.damaged)
    reasons += "; " + bad.path + ": " + bad.why;
  return Result::error("no valid checkpoint in '" + dir + "'" + reasons);
}

std::map<std::string, StateSpec>
stateSpecs(const std::map<std::string, Tensor> &state) {
  std::map<std::string, StateSpec> specs;
  for (const auto &[name, value] : state)
    specs[name] = {value.dtype, value.shape};
  return specs;
}

Expected<ValidCheckpoint> resumeCheckpoint(const std::string &dir,
                                           Trainer &trainer, Communicator *comm,
                                           bool strict) {
  Expected<ValidCheckpoint> valid =
      readValidCheckpoint(dir, stateSpecs(trainer.state()), comm, strict);
  if (!valid)
    return valid;
  if (Status s = trainer.restore(valid->tensors, valid->step); !s.ok())
    return Expected<ValidCheckpoint>::error(valid->path + ": " + s.error);
  return valid;
}

Trace::Trace() : origin(steadySeconds()) {}

double Trace::now() const { return steadySeconds() - origin; }

double Trace::fromSteady(double seconds) const { return seconds - origin; }

int Trace::lane(const std::string &name) {
  for (size_t i = 0; i < lanes.size(); ++i)
    if (lanes[i] == name)
      return static_cast<int>(i);
  lanes.push_back(name);
  return static_cast<int>(lanes.size() - 1);
}

void Trace::add(int lane, const std::string &name, double startSeconds,
                double seconds) {
  events.push_back({lane, name, startSeconds, seconds});
}

void Trace::addDeviceLanes() {
  kernelLane = lane("kernels (compute stream)");
  exchangeLane = lane("exchanges (communication stream)");
}

void Trace::addDeviceProfile(const std::vector<KernelTime> &profile,
                             const std::string &label, double start) {
  if (kernelLane < 0)
    addDeviceLanes();
  for (const KernelTime &k : profile) {
    add(k.exchange ? exchangeLane : kernelLane, label + ": " + k.kernel,
        start + k.startMilliseconds / 1e3, k.milliseconds / 1e3);
    events.back().ctas = k.ctas;
  }
}

Status Trace::write(const std::string &path) const {
  using nlohmann::json;
  json list = json::array();
  for (size_t i = 0; i < lanes.size(); ++i)
    list.push_back({{"name", "thread_name"},
                    {"ph", "M"},
                    {"pid", 0},
                    {"tid", static_cast<int>(i)},
                    {"args", {{"name", lanes[i]}}}});
  for (const Event &e : events) {
    json span = {
        {"name", e.name}, {"ph", "X"},           {"pid", 0},
        {"tid", e.lane},  {"ts", e.start * 1e6}, {"dur", e.duration * 1e6}};
    // A kernel's CTAs: a send's are the comm SMs, a persistent GEMM's the
    // others.
    if (e.ctas > 0)
      span["args"] = {{"ctas", e.ctas}};
    list.push_back(std::move(span));
  }
  std::string text =
      json{{"traceEvents", list}, {"displayTimeUnit", "ms"}}.dump(1);
  return writeFileAtomically(path, text.data(), text.size());
}

} // namespace moe::rt
