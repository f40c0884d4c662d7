//===- MemoryPlan.cpp - The device memory of an sm_90a program ------------===//
//
// Part of moe-compiler. What each rank allocates for a program's buffers
// at their capacities, by what they hold: moe-compile's --report and
// --device-memory, and the CUDA backend's check at load.
//
//===----------------------------------------------------------------------===//

#include "moe/runtime/Bundle.h"
#include "moe/runtime/ScheduleAbi.h"

#include <cstdio>
#include <map>
#include <set>

namespace moe::rt {

int64_t gpuReceivedRows(const GpuProgram &program, int64_t ranks) {
  return program.receivedRowCapacity ? program.receivedRowCapacity
                                     : ranks * program.rowCapacity;
}

uint64_t gpuBufferBytes(const GpuProgram &program, const GpuBuffer &buffer,
                        int64_t maxTokens, int64_t ranks) {
  uint64_t n = dtypeSize(buffer.dtype);
  for (int64_t d : buffer.shape) {
    int64_t size =
        abi::isBufferDim(d)
            ? abi::resolveBufferDim(d, maxTokens, program.rowCapacity,
                                    gpuReceivedRows(program, ranks))
            : d;
    n *= static_cast<uint64_t>(std::max<int64_t>(size, 0));
  }
  return n;
}

void indexGpuBuffers(GpuProgram &program) {
  std::map<std::string, int32_t> ids;
  for (size_t i = 0; i < program.buffers.size(); ++i)
    ids.emplace(program.buffers[i].name, static_cast<int32_t>(i));
  auto id = [&](const std::string &name) {
    auto it = ids.find(name);
    return it == ids.end() ? -1 : it->second;
  };
  std::vector<std::vector<GpuStep> *> lists = {
      &program.steps, &program.trainSteps, &program.updateSteps,
      &program.backwardSteps};
  for (GpuVariant &variant : program.variants)
    lists.push_back(&variant.steps);
  for (std::vector<GpuStep> *steps : lists)
    for (GpuStep &step : *steps) {
      step.argIds.clear();
      for (const std::string &a : step.args)
        step.argIds.push_back(id(a));
      step.bufferId = step.buffer.empty() ? -1 : id(step.buffer);
    }
}

GpuMemoryPlan planGpuMemory(const GpuProgram &program, int64_t maxTokens,
                            int64_t ranks) {
  // Which buffers the forward pass's kernels touch, and which the training
  // step's own kernels and exchanges do.
  std::set<std::string> forwardKernels, forward, backward;
  for (const GpuStep &step : program.steps) {
    if (step.kind == abi::StepKind::Launch)
      forwardKernels.insert(step.kernel);
    forward.insert(step.args.begin(), step.args.end());
  }
  for (const auto *list : {&program.trainSteps, &program.backwardSteps})
    for (const GpuStep &step : *list)
      if (step.kind != abi::StepKind::Launch ||
          !forwardKernels.count(step.kernel))
        backward.insert(step.args.begin(), step.args.end());

  GpuMemoryPlan plan;
  for (const GpuBuffer &b : program.buffers) {
    uint64_t bytes = gpuBufferBytes(program, b, maxTokens, ranks);
    abi::SourceKind src = b.source.kind;
    if (b.source.fromCheckpoint()) {
      plan.weights += bytes;
    } else if (src == abi::SourceKind::Arg) {
      const std::string &name = b.source.role;
      if (endsWith(name, ".grad"))
        plan.gradients += bytes;
      else if (isAdamMoment(name) || endsWith(name, ".next"))
        plan.optimizer += bytes;
      else if (name == "x" || name == "target" || name == "hyper" ||
               name == "loss" || name == "load" || name == "grad_sq" ||
               name == "bad_updates")
        plan.activations += bytes; // the step's inputs and outputs
      else
        plan.weights += bytes; // an fp32 master
    } else if (src == abi::SourceKind::Input ||
               src == abi::SourceKind::Output ||
               (forward.count(b.name) && backward.count(b.name))) {
      plan.activations += bytes;
    } else {
      plan.workspace += bytes;
    }
  }
  return plan;
}

std::string formatBytes(uint64_t bytes) {
  char text[32];
  double b = static_cast<double>(bytes);
  if (b >= 1e9)
    std::snprintf(text, sizeof(text), "%.2f GB", b / 1e9);
  else if (b >= 1e6)
    std::snprintf(text, sizeof(text), "%.2f MB", b / 1e6);
  else if (b >= 1e3)
    std::snprintf(text, sizeof(text), "%.2f kB", b / 1e3);
  else
    std::snprintf(text, sizeof(text), "%llu B",
                  static_cast<unsigned long long>(bytes));
  return text;
}

} // namespace moe::rt
