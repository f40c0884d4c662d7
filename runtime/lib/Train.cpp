//===- Train.cpp - Training steps of a compiled MoE layer -----------------===//
//
// Part of moe-compiler's runtime.
//
//===----------------------------------------------------------------------===//

#include "moe/runtime/Train.h"

#include <cstring>

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
  if (x.shape.size() != 2 || x.shape[1] != hidden || target.shape != x.shape)
    return Result::error("x and target must both be [T, " +
                         std::to_string(hidden) + "], got " +
                         formatShape(x.shape) + " and " +
                         formatShape(target.shape));
  int64_t tokens = x.shape[0];
  if (tokens < 1 || tokens > m.maxTokens)
    return Result::error("a training step takes 1 to " +
                         std::to_string(m.maxTokens) + " tokens, got " +
                         std::to_string(tokens));
  float hyper[8] = {o.learningRate,
                    static_cast<float>(stepCount + 1),
                    o.beta1,
                    o.beta2,
                    o.epsilon,
                    o.weightDecay,
                    o.biasUpdateRate,
                    0.0f};
  Tensor hyperTensor = Tensor::zeros(DType::F32, {8});
  std::memcpy(hyperTensor.data.data(), hyper, sizeof(hyper));

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
      Expected<Tensor> converted =
          convertTensor(a.name == "x" ? x : target, a.dtype);
      if (!converted)
        return Result::error(converted.message());
      inputs[a.name] = std::move(*converted);
    } else if (a.name == "hyper") {
      inputs[a.name] = hyperTensor;
    } else if (!tensors.count(a.name)) {
      return Result::error("no training state '" + a.name + "'");
    }
  }
  for (const TrainArgumentSpec &a : spec.arguments) {
    if (a.output)
      args.push_back(&outputs[a.name]);
    else if (inputs.count(a.name))
      args.push_back(&inputs[a.name]);
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

} // namespace moe::rt
