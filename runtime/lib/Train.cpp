//===- Train.cpp - Training steps of a compiled MoE layer -----------------===//
//
// Part of moe-compiler's runtime.
//
//===----------------------------------------------------------------------===//

#include "moe/runtime/Train.h"

#include "moe/runtime/Safetensors.h"

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <nlohmann/json.hpp>
#include <sys/stat.h>
#include <unistd.h>

namespace moe::rt {

static bool endsWith(const std::string &s, const std::string &suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
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
    if (a.dtype != DType::F32)
      return Result::error("training state '" + a.name + "' must be f32");
    if (endsWith(a.name, ".m") || endsWith(a.name, ".v")) {
      trainer->tensors[a.name] = Tensor::zeros(DType::F32, a.shape);
      continue;
    }
    const Tensor *value = layer.parameter(a.name);
    if (!value)
      return Result::error("the training step takes '" + a.name +
                           "', which the bundle's parameters lack");
    Expected<Tensor> master = convertTensor(*value, DType::F32);
    if (!master)
      return Result::error(master.message());
    if (master->shape != a.shape)
      return Result::error("training state '" + a.name + "' has shape " +
                           formatShape(a.shape) + ", the parameter " +
                           formatShape(master->shape));
    trainer->tensors[a.name] = std::move(*master);
  }
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
      outputs[a.name] = Tensor::zeros(a.dtype, shape);
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
  if (Status s = layer.getBackend().runEntry(spec.entry, args); !s.ok())
    return Result::error(s.error);

  StepResult result;
  result.loss = outputs["loss"].as<float>()[0];
  const Tensor &load = outputs["load"];
  result.load.assign(load.as<float>(), load.as<float>() + load.numElements());
  gradients.clear();
  for (auto &[name, value] : outputs) {
    if (endsWith(name, ".next"))
      tensors[name.substr(0, name.size() - 5)] = std::move(value);
    else if (endsWith(name, ".grad"))
      gradients[name.substr(0, name.size() - 5)] = std::move(value);
  }
  ++stepCount;
  return result;
}

std::map<std::string, Tensor> Trainer::lastGradients() const {
  std::map<std::string, Tensor> named = layer.checkpointNames(gradients);
  if (auto it = gradients.find("x"); it != gradients.end())
    named["x"] = it->second;
  return named;
}

Status Trainer::syncLayer() {
  for (const auto &[name, value] : tensors) {
    if (endsWith(name, ".m") || endsWith(name, ".v"))
      continue;
    if (Status s = layer.setParameter(name, value); !s.ok())
      return s;
  }
  return Status::success();
}

Status Trainer::restore(const std::map<std::string, Tensor> &state,
                        int64_t steps) {
  for (auto &[name, value] : tensors) {
    auto it = state.find(name);
    if (it == state.end())
      return Status::failure("the checkpoint has no '" + name + "'");
    if (it->second.shape != value.shape || it->second.dtype != DType::F32)
      return Status::failure("checkpoint tensor '" + name + "' has shape " +
                             formatShape(it->second.shape) + ", expected " +
                             formatShape(value.shape) + " f32");
  }
  for (auto &[name, value] : tensors)
    value = state.at(name);
  stepCount = steps;
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

/// Each rank's state file: expert-parallel ranks hold different experts.
static std::string stateFile(const Communicator *comm) {
  if (!comm || comm->size() == 1)
    return "state.safetensors";
  return "state.rank" + std::to_string(comm->rank()) + "-of-" +
         std::to_string(comm->size()) + ".safetensors";
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
static Status agree(Communicator *comm, Status status) {
  if (!comm || comm->size() == 1)
    return status;
  float failed = status.ok() ? 0.0f : 1.0f;
  comm->allReduceSum(&failed, 1);
  if (status.ok() && failed > 0)
    return Status::failure("another rank could not write its checkpoint");
  return status;
}

Status writeCheckpoint(const std::string &dir, const Trainer &trainer,
                       uint64_t stream, Communicator *comm) {
  bool leader = !comm || comm->rank() == 0;
  char name[64];
  std::snprintf(name, sizeof(name), "step-%012lld",
                static_cast<long long>(trainer.steps()));
  std::string final = dir + "/" + name;
  // Every rank writes into one temporary directory that rank 0 made.
  std::string tmp = dir + "/.tmp-" + name;
  Status made = Status::success();
  if (leader) {
    if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
      made = Status::failure("cannot create checkpoint directory '" + dir +
                             "': " + std::strerror(errno));
    else {
      removeDirectory(tmp); // left by a run that died while writing
      if (::mkdir(tmp.c_str(), 0755) != 0)
        made = Status::failure("cannot create '" + tmp +
                               "': " + std::strerror(errno));
    }
  }
  if (Status s = agree(comm, made); !s.ok())
    return s;
  std::map<std::string, Tensor> tensors = trainer.state();
  Tensor meta = Tensor::zeros(DType::I64, {2});
  meta.as<int64_t>()[0] = trainer.steps();
  meta.as<int64_t>()[1] = static_cast<int64_t>(stream);
  tensors["__step_and_stream__"] = meta;
  std::string file = tmp + "/" + stateFile(comm);
  Status written = writeSafetensors(file, tensors);
  if (written.ok())
    written = syncPath(file);
  if (Status s = agree(comm, written); !s.ok())
    return s;
  Status published = Status::success();
  if (leader) {
    published = [&]() -> Status {
      if (Status s = syncPath(tmp); !s.ok())
        return s;
      // A checkpoint of the same step (a rerun) is replaced.
      std::string old = final + ".old";
      removeDirectory(old);
      bool replaced = std::rename(final.c_str(), old.c_str()) == 0;
      if (std::rename(tmp.c_str(), final.c_str()) != 0)
        return Status::failure("cannot rename '" + tmp + "' to '" + final +
                               "': " + std::strerror(errno));
      if (replaced)
        removeDirectory(old);
      if (Status s = syncPath(dir); !s.ok())
        return s;
      // The marker last: a checkpoint without it is incomplete.
      int fd = ::open((final + "/" + kMarker).c_str(),
                      O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (fd < 0 || ::fsync(fd) != 0 || ::close(fd) != 0)
        return Status::failure("cannot write the marker of '" + final + "'");
      return syncPath(final);
    }();
  }
  return agree(comm, published);
}

Expected<std::string> findCheckpoint(const std::string &dir) {
  DIR *d = ::opendir(dir.c_str());
  if (!d)
    return Expected<std::string>::error("cannot open checkpoint directory '" +
                                        dir + "': " + std::strerror(errno));
  std::string best;
  while (struct dirent *entry = ::readdir(d)) {
    std::string name = entry->d_name;
    if (name.rfind("step-", 0) != 0 || name.find('.') != std::string::npos)
      continue;
    struct stat st;
    if (::stat((dir + "/" + name + "/" + kMarker).c_str(), &st) != 0)
      continue;
    if (name > best)
      best = name;
  }
  ::closedir(d);
  if (best.empty())
    return Expected<std::string>::error("no complete checkpoint in '" + dir +
                                        "' (a complete one has a " + kMarker +
                                        " marker)");
  return dir + "/" + best;
}

Expected<uint64_t> readCheckpoint(const std::string &path, Trainer &trainer,
                                  Communicator *comm) {
  using Result = Expected<uint64_t>;
  std::string name = path + "/" + stateFile(comm);
  struct stat st;
  if (::stat(name.c_str(), &st) != 0)
    return Result::error(path + " has no " + stateFile(comm) +
                         ": it was written by a job with another number of "
                         "ranks");
  Expected<SafetensorsFile> file = SafetensorsFile::open(name);
  if (!file)
    return Result::error(file.message());
  std::map<std::string, Tensor> state;
  for (const auto &[name, value] : trainer.state()) {
    (void)value;
    Expected<Tensor> t = file->get(name);
    if (!t)
      return Result::error(path + ": " + t.message());
    state[name] = std::move(*t);
  }
  Expected<Tensor> meta = file->get("__step_and_stream__");
  if (!meta)
    return Result::error(path + ": " + meta.message());
  if (meta->dtype != DType::I64 || meta->numElements() != 2)
    return Result::error(path + ": malformed step record");
  if (Status s = trainer.restore(state, meta->as<int64_t>()[0]); !s.ok())
    return Result::error(path + ": " + s.error);
  return static_cast<uint64_t>(meta->as<int64_t>()[1]);
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

Status Trace::write(const std::string &path) const {
  using nlohmann::json;
  json list = json::array();
  for (size_t i = 0; i < lanes.size(); ++i)
    list.push_back({{"name", "thread_name"},
                    {"ph", "M"},
                    {"pid", 0},
                    {"tid", static_cast<int>(i)},
                    {"args", {{"name", lanes[i]}}}});
  for (const Event &e : events)
    list.push_back({{"name", e.name},
                    {"ph", "X"},
                    {"pid", 0},
                    {"tid", e.lane},
                    {"ts", e.start * 1e6},
                    {"dur", e.duration * 1e6}});
  std::string text =
      json{{"traceEvents", list}, {"displayTimeUnit", "ms"}}.dump(1);
  return writeFileAtomically(path, text.data(), text.size());
}

} // namespace moe::rt
