//===- Layer.cpp - A compiled MoE layer ready to run ----------------------===//
//
// Part of moe-compiler's runtime.
//
//===----------------------------------------------------------------------===//

#include "moe/runtime/Layer.h"

#include "moe/runtime/CudaBackend.h"
#include "moe/runtime/ScheduleAbi.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <set>
#include <thread>
#include <tuple>

namespace moe::rt {

/// splitmix64's increment: the state after n draws is seed + n of it.
static constexpr uint64_t kRandomStep = 0x9e3779b97f4a7c15ull;

uint64_t Random::next() {
  uint64_t z = (state += kRandomStep);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void Random::skip(uint64_t draws) { state += draws * kRandomStep; }

float Random::uniform(float lo, float hi) {
  // 24 random bits: exactly representable in a float.
  float unit = static_cast<float>(next() >> 40) / 16777216.0f;
  return lo + (hi - lo) * unit;
}

/// Checks an sm_90a program refers only to what it declares.
static Status validateGpuProgram(const Manifest &m) {
  auto fail = [](const std::string &what) {
    return Status::failure("invalid manifest: " + what);
  };
  const GpuProgram &g = m.gpu;
  if (g.rowCapacity < 0)
    return fail("row_capacity must not be negative");
  if (g.receivedRowCapacity < 0)
    return fail("received_row_capacity must not be negative");
  if (g.commSms < 0 || g.commSms > abi::kMaxSms)
    return fail("comm_sms must be in [0, " + std::to_string(abi::kMaxSms) +
                "]");
  std::map<std::string, const GpuBuffer *> buffers;
  for (const GpuBuffer &b : g.buffers) {
    if (b.name.empty() || !buffers.emplace(b.name, &b).second)
      return fail("gpu buffer names must be unique and non-empty ('" + b.name +
                  "')");
    for (int64_t d : b.shape)
      if (d == 0 || (d < 0 && !abi::isBufferDim(d)) ||
          ((d == static_cast<int64_t>(abi::BufferDim::ReceivedRows) ||
            d == static_cast<int64_t>(abi::BufferDim::ReceivedRowBlocks)) &&
           m.expertParallel < 2))
        return fail("gpu buffer '" + b.name + "' has an invalid shape " +
                    formatShape(b.shape));
  }
  for (const char *name : {"x", "y", "topk_ids", "topk_weights"})
    if (!g.steps.empty() && !buffers.count(name))
      return fail(std::string("the gpu program has no buffer '") + name + "'");
  auto checkStep = [&](const GpuStep &st) -> Status {
    if (st.chunk < -1)
      return fail("a gpu step has chunk " + std::to_string(st.chunk) +
                  ", expected a chunk index >= 0 (or none)");
    using abi::StepKind;
    if (st.kind == StepKind::Memset) {
      if (!buffers.count(st.buffer))
        return fail("memset of unknown gpu buffer '" + st.buffer + "'");
      return Status::success();
    }
    if (st.kind == StepKind::Exchange || st.kind == StepKind::AllReduce) {
      bool exchange = st.kind == StepKind::Exchange;
      abi::ExchangeKind kind = st.exchange;
      bool plan = kind == abi::ExchangeKind::DispatchPlan;
      if (exchange && (plan ? st.args.size() < abi::exchangeArity(kind)
                            : st.args.size() != abi::exchangeArity(kind)))
        return fail("a gpu exchange must be a dispatch of 7 buffers, a "
                    "combine of 4, a dispatch_rows or combine_rows of 2, "
                    "or a dispatch_plan of at least 3 ('" +
                    std::string(abi::exchangeKindName(kind)) + "' of " +
                    std::to_string(st.args.size()) + ")");
      bool rows = kind == abi::ExchangeKind::DispatchRows ||
                  kind == abi::ExchangeKind::CombineRows;
      if (exchange && st.chunk >= 0 && !rows)
        return fail("a gpu exchange of kind '" +
                    std::string(abi::exchangeKindName(kind)) +
                    "' takes no chunk (only dispatch_rows and combine_rows "
                    "move one chunk's rows)");
      if (exchange && st.chunk >= 0 && plan)
        return fail("a dispatch_plan takes no chunk");
      std::string what(abi::stepKindName(st.kind));
      if (m.expertParallel < 2)
        return fail("the gpu program has a collective (" + what +
                    "), but its layer is not sharded");
      for (const std::string &a : st.args) {
        if (!buffers.count(a))
          return fail("a gpu " + what + " takes unknown buffer '" + a + "'");
        if (!exchange && buffers[a]->dtype != DType::F32)
          return fail("a gpu all_reduce sums f32 buffers, and '" + a +
                      "' is not one");
      }
      return Status::success();
    }
    for (const std::string &a : st.args)
      if (!buffers.count(a))
        return fail("kernel '" + st.kernel + "' takes unknown buffer '" + a +
                    "'");
    abi::GridKind grid = st.grid;
    if ((grid == abi::GridKind::Tokens || grid == abi::GridKind::Assignments) &&
        st.perBlock < 1)
      return fail("kernel '" + st.kernel + "' has per_block < 1");
    if (grid == abi::GridKind::Persistent &&
        (st.gridSize < 1 || st.gridSize > abi::kMaxSms))
      return fail("kernel '" + st.kernel + "' has grid_size outside [1, " +
                  std::to_string(abi::kMaxSms) + "]");
    if ((grid == abi::GridKind::Rows || grid == abi::GridKind::ReceivedRows) &&
        (st.gridSize < 0 || st.gridSize > INT32_MAX))
      return fail("kernel '" + st.kernel +
                  "' has a rows grid_size (CTAs a block of rows) outside "
                  "[0, 2^31)");
    if (grid == abi::GridKind::Fixed &&
        (st.gridSize < 1 || st.gridSize > INT32_MAX))
      return fail("kernel '" + st.kernel +
                  "' has a fixed grid_size outside [1, 2^31)");
    if (st.cluster != 1 &&
        (st.cluster != 2 || grid != abi::GridKind::Persistent ||
         st.gridSize % 2 != 0))
      return fail("kernel '" + st.kernel + "' has cluster " +
                  std::to_string(st.cluster) +
                  ", expected 1, or 2 for a persistent grid of an even size");
    if (st.block < 1 || st.block > 1024 || st.sharedMemory < 0 ||
        st.sharedMemory > 232448)
      return fail("kernel '" + st.kernel +
                  "' has a block or shared memory "
                  "size the GPU cannot launch");
    for (const GpuTensorMap &t : st.tensorMaps) {
      int64_t args = static_cast<int64_t>(st.args.size());
      if (t.source < 0 || t.source >= args || t.arg < args ||
          t.view.size() != 2 || t.box.size() != 2 ||
          (t.view[1] < 1 && !(t.view[1] == -1 && t.view[0] >= 1)) ||
          t.box[0] < 1 || t.box[0] > 256 || t.box[1] < 1 || t.box[1] > 256)
        return fail("kernel '" + st.kernel + "' has an invalid tensor map");
      const GpuBuffer *b = buffers[st.args[t.source]];
      // GEMM operands are 16-bit or e4m3; an f32 output is stored through
      // one.
      if (b->dtype != DType::BF16 && b->dtype != DType::F16 &&
          b->dtype != DType::F32 && b->dtype != DType::F8E4M3)
        return fail("kernel '" + st.kernel + "' has a tensor map over '" +
                    b->name + "', which is not bf16, f16, f32 or f8E4M3FN");
      if (t.box[1] * static_cast<int64_t>(dtypeSize(b->dtype)) > 128)
        return fail("kernel '" + st.kernel + "' has a tensor map box of " +
                    std::to_string(t.box[1]) + " columns over '" + b->name +
                    "', wider than the 128-byte swizzle");
    }
    return Status::success();
  };
  for (const auto *list :
       {&g.steps, &g.trainSteps, &g.updateSteps, &g.backwardSteps})
    for (const GpuStep &st : *list)
      if (Status s = checkStep(st); !s.ok())
        return s;
  if (g.tileM != 0 && g.tileM != 64 && g.tileM != 128)
    return fail("the gpu program has tile_m " + std::to_string(g.tileM) +
                ", expected 64 or 128");
  int64_t below = 0;
  for (const GpuVariant &v : g.variants) {
    std::string which = "gpu variant of tile_m " + std::to_string(v.tileM);
    if (v.tileM != 64 && v.tileM != 128)
      return fail("a gpu variant has tile_m " + std::to_string(v.tileM) +
                  ", expected 64 or 128");
    // Its rows live in the program's buffers, and it runs on one GPU.
    if (v.rowCapacity < 0 || v.rowCapacity > g.rowCapacity)
      return fail("the " + which + " has row_capacity " +
                  std::to_string(v.rowCapacity) + ", expected at most the " +
                  "program's " + std::to_string(g.rowCapacity));
    if (v.maxTokens <= below || v.maxTokens > m.maxTokens)
      return fail("the " + which + " has max_tokens " +
                  std::to_string(v.maxTokens) + ", expected above " +
                  std::to_string(below) + " (the variant before it) and at " +
                  "most the bundle's " + std::to_string(m.maxTokens));
    below = v.maxTokens;
    if (v.blob < 2 || v.blob % 2 != 0)
      return fail("the " + which + " has blob " + std::to_string(v.blob) +
                  ", expected an even index above 1 (its cubin; its PTX "
                  "next)");
    if (m.expertParallel != 1)
      return fail("the " + which +
                  " belongs to a sharded layer; variants "
                  "are built for one GPU");
    for (const GpuStep &st : v.steps) {
      if (st.kind != abi::StepKind::Launch && st.kind != abi::StepKind::Memset)
        return fail("the " + which + " has an " +
                    std::string(abi::stepKindName(st.kind)) +
                    " step; a variant launches kernels and clears buffers");
      if (Status s = checkStep(st); !s.ok())
        return s;
    }
  }
  return Status::success();
}

/// The parameters a layer of `l` takes, in entry-point order, with the
/// shapes of an expert-parallel rank's share (`ep` ranks).
static std::vector<std::pair<std::string, std::vector<int64_t>>>
expectedParameters(const LayerSpec &l, int64_t ep) {
  int64_t e = l.experts / ep, h = l.hidden, f = l.ffn;
  int64_t s = l.sharedExperts * l.sharedFfn;
  std::vector<std::pair<std::string, std::vector<int64_t>>> list = {
      {"router_weight", {l.experts, h}}};
  if (l.scoreBias)
    list.push_back({"score_bias", {l.experts}});
  list.push_back({"gate_weight", {e, f, h}});
  list.push_back({"up_weight", {e, f, h}});
  list.push_back({"down_weight", {e, h, f}});
  if (l.sharedExperts > 0) {
    list.push_back({"shared_gate_weight", {s, h}});
    list.push_back({"shared_up_weight", {s, h}});
    list.push_back({"shared_down_weight", {h, s}});
  }
  if (l.sharedGate)
    list.push_back({"shared_expert_gate", {1, h}});
  if (l.outputBias)
    list.push_back({"output_bias", {h}});
  if (l.routerBias)
    list.push_back({"router_bias", {l.experts}});
  if (l.expertBias) {
    list.push_back({"gate_bias", {e, f}});
    list.push_back({"up_bias", {e, f}});
    list.push_back({"down_bias", {e, h}});
  }
  if (l.isFp8()) {
    auto blocks = fp8Blocks;
    list.push_back({"gate_scale", {e, blocks(f), blocks(h)}});
    list.push_back({"up_scale", {e, blocks(f), blocks(h)}});
    list.push_back({"down_scale", {e, blocks(h), blocks(f)}});
    if (l.sharedExperts > 0) {
      list.push_back({"shared_gate_scale", {blocks(s), blocks(h)}});
      list.push_back({"shared_up_scale", {blocks(s), blocks(h)}});
      list.push_back({"shared_down_scale", {blocks(h), blocks(s)}});
    }
  }
  return list;
}

/// Whether `role` is a weight of the routed or shared experts' FFNs (FP8
/// in an fp8 layer).
static bool isFfnWeight(const std::string &role) {
  return role == "gate_weight" || role == "up_weight" ||
         role == "down_weight" || role == "shared_gate_weight" ||
         role == "shared_up_weight" || role == "shared_down_weight";
}

/// Each parameter's shape, by role.
static std::map<std::string, std::vector<int64_t>>
parameterShapes(const Manifest &m) {
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const ParameterSpec &p : m.parameters)
    shapes[p.role] = p.shape;
  return shapes;
}

/// The training step's arguments must each have the shape their name
/// implies: a parameter's (also as .m, .v, .next, .grad), [T, hidden] for
/// x, target and x.grad, [8] hyperparameters, a scalar loss, a load vector,
/// and one value per weight gradient for grad_sq and bad_updates.
static Status validateTrainArguments(const Manifest &m) {
  auto fail = [](const std::string &what) {
    return Status::failure("invalid manifest: " + what);
  };
  std::map<std::string, std::vector<int64_t>> params = parameterShapes(m);
  std::vector<int64_t> tokens = {-1, m.layer.hidden};
  for (const TrainArgumentSpec &a : m.train.arguments) {
    std::string base = a.name;
    for (const char *suffix : {".next", ".grad", ".m", ".v"})
      if (base.size() > std::strlen(suffix) &&
          base.compare(base.size() - std::strlen(suffix), std::string::npos,
                       suffix) == 0)
        base.resize(base.size() - std::strlen(suffix));
    std::optional<std::vector<int64_t>> expected;
    if (params.count(base))
      expected = params[base];
    else if (base == "x" || base == "target")
      expected = tokens;
    else if (a.name == "hyper")
      expected = std::vector<int64_t>{8};
    else if (a.name == "loss")
      expected = std::vector<int64_t>{1};
    else if (a.name == "load" && a.shape.size() == 1 && a.shape[0] >= 1 &&
             a.shape[0] <= m.layer.experts)
      expected = a.shape;
    else if (a.name == "grad_sq" || a.name == "bad_updates") {
      // One per weight gradient the step outputs.
      int64_t weights = std::count_if(m.train.arguments.begin(),
                                      m.train.arguments.end(),
                                      isWeightGradient);
      expected = std::vector<int64_t>{weights};
    }
    if (!expected)
      return fail("unknown training argument '" + a.name + "' of shape " +
                  formatShape(a.shape));
    if (a.shape != *expected)
      return fail("training argument '" + a.name + "' has shape " +
                  formatShape(a.shape) + ", the layer needs " +
                  formatShape(*expected));
    if (!isFloatType(a.dtype))
      return fail("training argument '" + a.name + "' must be a float tensor");
  }
  // The in-place update takes the hyperparameters, f32 state (moments
  // possibly bf16) and weight gradients of the step, as the step has them.
  if (m.train.update)
    for (const TrainArgumentSpec &a : m.train.update->arguments) {
      auto step = std::find_if(
          m.train.arguments.begin(), m.train.arguments.end(),
          [&](const TrainArgumentSpec &s) { return s.name == a.name; });
      bool state = step != m.train.arguments.end() && !step->output &&
                   a.name != "x" && a.name != "target";
      bool moment = state && isAdamMoment(a.name);
      bool typed = a.dtype == DType::F32 || (moment && a.dtype == DType::BF16);
      bool known = step != m.train.arguments.end() &&
                   (state || isWeightGradient(*step)) && !a.output && typed &&
                   step->dtype == a.dtype && a.shape == step->shape;
      if (!known)
        return fail("training update argument '" + a.name + "' (" +
                    mlirName(a.dtype) + " " + formatShape(a.shape) +
                    (a.output ? ", an output" : "") +
                    ") is none of the training step's state, "
                    "hyperparameters or weight gradients");
    }
  return Status::success();
}

/// The backward pass's arguments: `x`, `dy` and `x.grad` [T, hidden];
/// each weight with a parameter's shape, also as `W.grad` (on sm_90a only
/// as `W.grad`: the schedule reads the bound parameters).
static Status validateBackwardArguments(const Manifest &m) {
  bool device = m.target == "sm_90a";
  if ((m.target != "host" && !device) || m.backward.stateOnDevice)
    return Status::failure("invalid manifest: a backward pass runs on the "
                           "host or sm_90a targets, with no state of its own");
  if (device && m.gpu.backwardSteps.empty())
    return Status::failure("invalid manifest: the sm_90a backward pass has "
                           "no steps (gpu.backward_steps)");
  std::map<std::string, std::vector<int64_t>> params = parameterShapes(m);
  std::vector<int64_t> tokens = {-1, m.layer.hidden};
  for (const TrainArgumentSpec &a : m.backward.arguments) {
    if (device && !a.output && a.name != "x" && a.name != "dy")
      return Status::failure("invalid manifest: the sm_90a backward pass "
                             "takes input '" +
                             a.name +
                             "'; its weights are the bound parameters");
    std::string base = a.name;
    if (a.output && endsWith(base, ".grad"))
      base.resize(base.size() - 5);
    std::optional<std::vector<int64_t>> expected;
    if (base == "x" || (a.name == "dy" && !a.output))
      expected = tokens;
    else if (params.count(base) && a.output != (base == a.name))
      expected = params[base];
    if (!expected)
      return Status::failure("invalid manifest: unknown " +
                             std::string(a.output ? "output" : "input") + " '" +
                             a.name + "' of the backward pass");
    if (a.shape != *expected || !isFloatType(a.dtype))
      return Status::failure("invalid manifest: backward argument '" + a.name +
                             "' must be a float tensor of shape " +
                             formatShape(*expected) + ", got " +
                             formatShape(a.shape));
  }
  return Status::success();
}

Status validateManifest(const Manifest &m) {
  auto fail = [](const std::string &what) {
    return Status::failure("invalid manifest: " + what);
  };
  const LayerSpec &l = m.layer;
  if (l.hidden <= 0 || l.topK <= 0 || l.experts <= 0)
    return fail("layer sizes must be positive");
  if (l.activation != "swiglu" && l.activation != "clamped_swiglu")
    return fail("unknown activation '" + l.activation +
                "' (expected swiglu or clamped_swiglu)");
  if (m.maxTokens <= 0)
    return fail("max_tokens must be positive");
  if (m.staticTokens != 0 && m.staticTokens != m.maxTokens)
    return fail("static_tokens must be 0 or max_tokens");
  if (m.target == "host" && m.entry.empty())
    return fail("no entry point");
  if (m.target == "sm_90a")
    if (Status s = validateGpuProgram(m); !s.ok())
      return s;
  if (m.train.stateOnDevice) {
    // The state is updated in place by the update steps, checked first by
    // what the step reports per weight.
    auto output = [&](const char *name) {
      return std::any_of(
          m.train.arguments.begin(), m.train.arguments.end(),
          [&](const TrainArgumentSpec &a) { return a.output && a.name == name; });
    };
    if (m.target != "sm_90a" || m.gpu.updateSteps.empty() ||
        !output("grad_sq") || !output("bad_updates"))
      return fail("a training step with its state on the device needs the "
                  "sm_90a target, update steps and the grad_sq and "
                  "bad_updates outputs");
  }
  if (m.inputs.size() != 1 || m.inputs[0].name != "x" ||
      m.inputs[0].shape != std::vector<int64_t>{-1, l.hidden} ||
      !isFloatType(m.inputs[0].dtype))
    return fail("expected one input 'x' of shape [?, " +
                std::to_string(l.hidden) + "]");
  const std::vector<std::pair<std::string, DType>> outputs = {
      {"y", DType::F32},
      {"topk_ids", DType::I32},
      {"topk_weights", DType::F32}};
  if (m.outputs.size() != outputs.size())
    return fail("expected outputs y, topk_ids, topk_weights");
  for (size_t i = 0; i < outputs.size(); ++i) {
    int64_t width = i == 0 ? l.hidden : l.topK;
    if (m.outputs[i].name != outputs[i].first ||
        m.outputs[i].dtype != outputs[i].second ||
        m.outputs[i].shape != std::vector<int64_t>{-1, width})
      return fail("expected output '" + outputs[i].first + "' of shape [?, " +
                  std::to_string(width) + "]");
  }
  if (m.expertParallel < 1 || l.experts % m.expertParallel != 0)
    return fail("expert_parallel " + std::to_string(m.expertParallel) +
                " does not divide the " + std::to_string(l.experts) +
                " experts");
  // The parameters are the layer's, in order, with its shapes and compute
  // dtype: the compiled code indexes them without checking.
  if (l.groups < 1 || l.topkGroups < 1 || l.ffn < 1 || l.sharedExperts < 0 ||
      l.sharedFfn < 0 || l.topK > l.experts || l.experts % l.groups != 0)
    return fail("inconsistent layer sizes");
  std::optional<DType> compute = parseMlirName(l.dtype);
  if (!compute || !isFloatType(*compute))
    return fail("the layer's dtype '" + l.dtype +
                "' is not f32, bf16 or f16");
  if (!l.expertDtype.empty() && !l.isFp8())
    return fail("the layer's expert_dtype '" + l.expertDtype +
                "' is not f8E4M3FN");
  if (!l.fp8Scaling.empty() &&
      (!l.isFp8() || (l.fp8Scaling != "block" && l.fp8Scaling != "tensor")))
    return fail("the layer's fp8_scaling '" + l.fp8Scaling +
                "' is not block or tensor of an fp8 layer");
  auto expected = expectedParameters(l, m.expertParallel);
  if (m.parameters.size() != expected.size())
    return fail("the layer takes " + std::to_string(expected.size()) +
                " parameters, the manifest lists " +
                std::to_string(m.parameters.size()));
  for (size_t i = 0; i < expected.size(); ++i) {
    const ParameterSpec &p = m.parameters[i];
    // The selection bias is f32; the router may be f32 in a lower-precision
    // layer.
    const std::string &role = expected[i].first;
    DType want = role == "score_bias" || endsWith(role, "_scale")
                     ? DType::F32
                 : l.isFp8() && isFfnWeight(role) ? DType::F8E4M3
                                                  : *compute;
    bool dtypeOk = p.dtype == want ||
                   ((role == "router_weight" || role == "router_bias") &&
                    p.dtype == DType::F32);
    if (p.role != role || p.shape != expected[i].second || !dtypeOk)
      return fail("parameter " + std::to_string(i) + " must be '" + role +
                  "' " + mlirName(want) + " " +
                  formatShape(expected[i].second) + ", got '" + p.role +
                  "' " + mlirName(p.dtype) + " " + formatShape(p.shape));
  }
  if (!m.train.entry.empty())
    if (Status s = validateTrainArguments(m); !s.ok())
      return s;
  if (!m.backward.entry.empty())
    if (Status s = validateBackwardArguments(m); !s.ok())
      return s;
  for (const ParameterSpec &p : m.parameters) {
    if (p.stack > 0 && p.stack * m.expertParallel != l.experts)
      return fail("parameter '" + p.name + "' stacks " +
                  std::to_string(p.stack) + " experts; expected " +
                  std::to_string(l.experts / m.expertParallel));
    if (p.shape.empty() || !elementCount(p.shape) ||
        *elementCount(p.shape) <= 0)
      return fail("parameter '" + p.name + "' has an invalid shape " +
                  formatShape(p.shape));
    bool pattern = p.name.find("{i}") != std::string::npos;
    if ((pattern && p.stack == 0) || p.stack < 0 ||
        (p.stack > 0 && p.shape[0] != p.stack))
      return fail("parameter '" + p.name + "' has an inconsistent stack of " +
                  std::to_string(p.stack));
    size_t sliced = p.stack > 0 ? 1 : 0;
    if (p.parts < 1 || p.parts > 64 || p.part < 0 || p.part >= p.parts ||
        (p.parts > 1 && p.shape.size() <= sliced))
      return fail("parameter '" + p.name + "' is part " +
                  std::to_string(p.part) + " of " + std::to_string(p.parts) +
                  "; expected 0 <= part < parts <= 64 of a dimension it has");
    // The checkpoint tensor holds every rank's experts and every part.
    if (*elementCount(p.shape) > std::numeric_limits<int64_t>::max() /
                                     (p.parts * std::max<int64_t>(
                                                    m.expertParallel, 1)))
      return fail("parameter '" + p.name + "' is too large: " +
                  formatShape(p.shape) + " x " + std::to_string(p.parts) +
                  " parts x " + std::to_string(m.expertParallel) + " ranks");
    if (p.transposed && p.shape.size() < sliced + 2)
      return fail("parameter '" + p.name +
                  "' is transposed but has no matrix to transpose");
    if (p.flat && (pattern || p.stack == 0 || p.shape.size() < 3))
      return fail("parameter '" + p.name +
                  "' is flat but is not one tensor of stacked matrices");
    if (!isFloatType(p.dtype) && p.dtype != DType::F8E4M3)
      return fail("parameter '" + p.name + "' must have a float dtype");
  }
  return Status::success();
}

Expected<std::unique_ptr<Layer>> Layer::load(const std::string &bundlePath,
                                             const std::string &device) {
  Expected<Bundle> bundle = readBundle(bundlePath);
  if (!bundle)
    return Expected<std::unique_ptr<Layer>>::error(bundle.message());
  return fromBundle(std::move(*bundle), device);
}

Expected<std::unique_ptr<Layer>> Layer::fromBundle(Bundle bundle,
                                                   const std::string &device) {
  using Result = Expected<std::unique_ptr<Layer>>;
  if (Status s = validateManifest(bundle.manifest); !s.ok())
    return Result::error(s.error);
  const std::string &target = bundle.manifest.target;
  if (device == "host") {
    if (target != "host")
      return Result::error("the bundle was compiled for target '" + target +
                           "'; the host device runs bundles compiled with "
                           "--target=host");
  } else if (device == "cuda") {
    if (target != "sm_90a")
      return Result::error("the bundle was compiled for target '" + target +
                           "'; the cuda device runs bundles compiled with "
                           "--target=sm_90a");
  } else {
    return Result::error("unknown device '" + device +
                         "' (expected host or cuda)");
  }
  // The device first: on a machine without a GPU, that is the problem to
  // report, not the host memory the parameters would take.
  std::unique_ptr<Layer> layer(new Layer());
  Expected<std::unique_ptr<Backend>> backend =
      device == "cuda" ? createCudaBackend(bundle) : createHostBackend(bundle);
  if (!backend)
    return Result::error(backend.message());
  uint64_t parameterBytes = 0;
  for (const ParameterSpec &p : bundle.manifest.parameters)
    parameterBytes +=
        static_cast<uint64_t>(*elementCount(p.shape)) * dtypeSize(p.dtype);
  if (Status s = checkAllocation(parameterBytes, "the layer's parameters");
      !s.ok())
    return Result::error(s.error);
  layer->backend = std::move(*backend);
  layer->bundle = std::move(bundle);
  for (const ParameterSpec &p : layer->bundle.manifest.parameters)
    layer->parameters.push_back(Tensor::zeros(p.dtype, p.shape));
  layer->lent.assign(layer->parameters.size(), nullptr);
  return layer;
}

static std::string expertName(const std::string &pattern, int64_t expert) {
  std::string name = pattern;
  size_t at = name.find("{i}");
  if (at != std::string::npos)
    name.replace(at, 3, std::to_string(expert));
  return name;
}

/// The block scales `NAME_scale_inv` of an FP8 checkpoint's matrix `name`
/// of `shape`, as f32 [ceil(rows / 128), ceil(columns / 128)].
static Expected<Tensor> readFp8Scales(const Checkpoint &file,
                                      const std::string &name,
                                      const std::vector<int64_t> &shape) {
  using Result = Expected<Tensor>;
  std::string scaleName = name + "_scale_inv";
  if (!file.contains(scaleName))
    return Result::error(file.getName() + ": tensor '" + name +
                         "' is F8_E4M3 but '" + scaleName +
                         "' (its 128 x 128 block scales) is missing");
  Expected<Tensor> scale = file.get(scaleName);
  if (!scale)
    return Result::error(scale.message());
  std::vector<int64_t> blocks = {fp8Blocks(shape[0]), fp8Blocks(shape[1])};
  if (scale->shape != blocks || !isFloatType(scale->dtype))
    return Result::error(file.fileOf(scaleName) + ": tensor '" + scaleName +
                         "' has dtype " + safetensorsName(scale->dtype) +
                         " and shape " + formatShape(scale->shape) +
                         ", expected float scales of shape " +
                         formatShape(blocks) + " (128 x 128 blocks of " +
                         formatShape(shape) + ")");
  return convertTensor(*scale, DType::F32);
}

/// The weight of an FP8 checkpoint (DeepSeek-V3/R1, Kimi-K2): e4m3 values
/// times one f32 scale per 128 x 128 block, `NAME_scale_inv` [ceil(rows /
/// 128), ceil(columns / 128)], as f32.
static Expected<Tensor> dequantizeFp8(const Checkpoint &file,
                                      const std::string &name,
                                      const Tensor &values) {
  using Result = Expected<Tensor>;
  if (values.shape.size() != 2)
    return Result::error(
        file.fileOf(name) + ": tensor '" + name + "' is F8_E4M3 with shape " +
        formatShape(values.shape) + ", expected a matrix with block scales");
  Expected<Tensor> scales = readFp8Scales(file, name, values.shape);
  if (!scales)
    return Result::error(scales.message());
  const auto *s = reinterpret_cast<const float *>(scales->data.data());
  int64_t rows = values.shape[0], columns = values.shape[1];
  int64_t blockColumns = fp8Blocks(columns);
  Tensor out = Tensor::zeros(DType::F32, values.shape);
  auto *o = reinterpret_cast<float *>(out.data.data());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < columns; ++c)
      o[r * columns + c] =
          fp8e4m3ToFloat(values.data[static_cast<size_t>(r * columns + c)]) *
          s[(r / kFp8Block) * blockColumns + c / kFp8Block];
  return out;
}

/// The weight of an MXFP4 checkpoint (GPT-OSS's experts), as f32 of shape
/// `shape` (the (out, in) layout, whatever the bf16 tensor's): `NAME_blocks`
/// [..., C / 32, 16] U8 holds two e2m1 values a byte, the lower nibble
/// first, and `NAME_scales` [..., C / 32] U8 one power of two (e8m0, bias
/// 127) per block of 32 along the last dimension C.
static Expected<Tensor> dequantizeMxfp4(const Checkpoint &file,
                                        const std::string &name,
                                        const std::vector<int64_t> &shape) {
  using Result = Expected<Tensor>;
  constexpr int64_t kBlock = 32;
  std::string blocksName = name + "_blocks", scalesName = name + "_scales";
  int64_t columns = shape.back();
  if (columns % kBlock != 0)
    return Result::error(file.getName() + ": tensor '" + blocksName +
                         "' is MXFP4, whose blocks of 32 do not divide the " +
                         std::to_string(columns) + " columns of " +
                         formatShape(shape));
  if (!file.contains(scalesName))
    return Result::error(file.getName() + ": tensor '" + blocksName +
                         "' is MXFP4 but '" + scalesName +
                         "' (its block scales) is missing");
  std::vector<int64_t> scaleShape = shape;
  scaleShape.back() = columns / kBlock;
  std::vector<int64_t> blockShape = scaleShape;
  blockShape.push_back(kBlock / 2);
  Expected<Tensor> blocks = file.get(blocksName);
  if (!blocks)
    return Result::error(blocks.message());
  Expected<Tensor> scales = file.get(scalesName);
  if (!scales)
    return Result::error(scales.message());
  for (auto [what, tensor, want] :
       {std::tuple<const std::string &, const Tensor &,
                   const std::vector<int64_t> &>{blocksName, *blocks,
                                                 blockShape},
        {scalesName, *scales, scaleShape}})
    if (tensor.dtype != DType::U8 || tensor.shape != want)
      return Result::error(file.fileOf(what) + ": tensor '" + what +
                           "' has dtype " + safetensorsName(tensor.dtype) +
                           " and shape " + formatShape(tensor.shape) +
                           ", expected U8 of shape " + formatShape(want) +
                           " (MXFP4 of " + formatShape(shape) + ")");
  // e2m1: sign, two exponent bits, one mantissa bit.
  static constexpr float kE2m1[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,
                                      4.0f,  6.0f,  -0.0f, -0.5f, -1.0f, -1.5f,
                                      -2.0f, -3.0f, -4.0f, -6.0f};
  Tensor out = Tensor::zeros(DType::F32, shape);
  auto *o = reinterpret_cast<float *>(out.data.data());
  size_t groups = scales->data.size();
  for (size_t g = 0; g < groups; ++g) {
    float scale = std::ldexp(1.0f, static_cast<int>(scales->data[g]) - 127);
    for (int64_t i = 0; i < kBlock / 2; ++i) {
      uint8_t byte = blocks->data[g * (kBlock / 2) + static_cast<size_t>(i)];
      o[g * kBlock + 2 * i] = kE2m1[byte & 0xF] * scale;
      o[g * kBlock + 2 * i + 1] = kE2m1[byte >> 4] * scale;
    }
  }
  return out;
}

/// Index, in dimension `dim` of a checkpoint tensor, of row `r` of slice
/// `part` of `parts` of `rows` rows each: the slices follow each other, or
/// interleave (row r of part p is whole row r * parts + p).
static size_t sliceRow(const ParameterSpec &p, size_t rows, size_t r) {
  return p.interleaved ? r * static_cast<size_t>(p.parts) + p.part
                       : static_cast<size_t>(p.part) * rows + r;
}

/// Copies the parameter's slice (hfWeightPart) of dimension `dim` of `src`
/// (shape `shape`) into `dst`, for each index of the dimensions before it in
/// [firstOuter, firstOuter + outers).
static void copySlice(const Tensor &src, const std::vector<int64_t> &shape,
                      size_t dim, const ParameterSpec &p, int64_t firstOuter,
                      int64_t outers, uint8_t *dst) {
  size_t element = dtypeSize(src.dtype);
  size_t inner = element;
  for (size_t d = dim + 1; d < shape.size(); ++d)
    inner *= static_cast<size_t>(shape[d]);
  size_t rows = static_cast<size_t>(shape[dim] / p.parts);
  size_t outerBytes = static_cast<size_t>(shape[dim]) * inner;
  for (int64_t o = 0; o < outers; ++o) {
    const uint8_t *from =
        src.data.data() + static_cast<size_t>(firstOuter + o) * outerBytes;
    uint8_t *to = dst + static_cast<size_t>(o) * rows * inner;
    if (!p.interleaved) {
      std::memcpy(to, from + sliceRow(p, rows, 0) * inner, rows * inner);
      continue;
    }
    for (size_t r = 0; r < rows; ++r)
      std::memcpy(to + r * inner, from + sliceRow(p, rows, r) * inner, inner);
  }
}

/// `src` (shape `shape`) with its last two dimensions swapped.
static Tensor transposeLastTwo(const Tensor &src,
                               const std::vector<int64_t> &shape) {
  std::vector<int64_t> swapped = shape;
  std::swap(swapped[swapped.size() - 1], swapped[swapped.size() - 2]);
  Tensor out = Tensor::zeros(src.dtype, swapped);
  size_t element = dtypeSize(src.dtype);
  auto rows = static_cast<size_t>(shape[shape.size() - 2]);
  auto cols = static_cast<size_t>(shape.back());
  size_t matrices = src.data.size() / (rows * cols * element);
  for (size_t m = 0; m < matrices; ++m) {
    const uint8_t *from = src.data.data() + m * rows * cols * element;
    uint8_t *to = out.data.data() + m * rows * cols * element;
    for (size_t r = 0; r < rows; ++r)
      for (size_t c = 0; c < cols; ++c)
        std::memcpy(to + (c * rows + r) * element,
                    from + (r * cols + c) * element, element);
  }
  return out;
}

/// The e4m3 codes `values` of an FP8 checkpoint's weight `name` and its
/// block scales, checked and copied out: the codes' shape is `shape` (one
/// (out, in) matrix), no code is NaN, and the scales are finite.
static Status readFp8(const Checkpoint &file, const std::string &name,
                      const Tensor &values, const std::vector<int64_t> &shape,
                      uint8_t *codes, float *scales) {
  if (values.dtype != DType::F8E4M3 || values.shape != shape)
    return Status::failure(file.fileOf(name) + ": tensor '" + name +
                           "' has dtype " + safetensorsName(values.dtype) +
                           " and shape " + formatShape(values.shape) +
                           ", expected F8_E4M3 " + formatShape(shape) +
                           " as the layer's other experts");
  Expected<Tensor> f32 = readFp8Scales(file, name, shape);
  if (!f32)
    return Status::failure(f32.message());
  const auto *s = reinterpret_cast<const float *>(f32->data.data());
  int64_t blocks = f32->numElements();
  for (int64_t b = 0; b < blocks; ++b)
    if (!std::isfinite(s[b]))
      return Status::failure(file.fileOf(name + "_scale_inv") + ": tensor '" +
                             name + "_scale_inv' holds a non-finite scale at " +
                             std::to_string(b));
  for (size_t c = 0; c < values.data.size(); ++c)
    if ((values.data[c] & 0x7f) == 0x7f)
      return Status::failure(file.fileOf(name) + ": tensor '" + name +
                             "' holds a NaN code at element " +
                             std::to_string(c));
  std::memcpy(codes, values.data.data(), values.data.size());
  std::memcpy(scales, s, static_cast<size_t>(blocks) * sizeof(float));
  return Status::success();
}

/// "missing tensor" for `name` (the layer's `prefix` and a tensor's own
/// name); when the checkpoint holds that tensor under other prefixes (a
/// whole model's layers), it names them and the flags that choose one.
static Status missingTensor(const Checkpoint &file, const std::string &name,
                            const std::string &prefix) {
  std::string message = file.getName() + ": missing tensor '" + name + "'";
  std::vector<std::string> found =
      file.prefixesOf(name.substr(std::min(prefix.size(), name.size())));
  if (!found.empty()) {
    message += "; the checkpoint holds it under " +
               std::to_string(found.size()) + " prefix" +
               (found.size() > 1 ? "es" : "") + " (";
    for (size_t i = 0; i < found.size() && i < 3; ++i)
      message += (i ? ", '" : "'") + found[i] + "'";
    message += found.size() > 3 ? ", ...)" : ")";
    message += ": choose the layer with --layer N (a bundle compiled from "
               "the model's config.json) or --weights-prefix PREFIX";
  }
  return Status::failure(message);
}

Status Layer::loadWeights(const Checkpoint &file, const std::string &prefix) {
  const Manifest &m = bundle.manifest;
  for (size_t i = 0; i < parameters.size(); ++i)
    reclaim(i);
  for (size_t i = 0; i < m.parameters.size(); ++i) {
    const ParameterSpec &p = m.parameters[i];
    // An FP8 weight's scales are written with it.
    if (endsWith(p.role, "_scale"))
      continue;
    Status loaded = p.dtype == DType::F8E4M3
                        ? loadFp8Parameter(file, prefix, i)
                        : loadParameter(file, prefix, p,
                                        parameters[i].data.data());
    if (!loaded.ok())
      return loaded;
  }
  weightsBound = true;
  backend->invalidateParameters();
  return Status::success();
}

/// The index of the block scales of the FP8 parameter `role` (X_weight ->
/// X_scale).
static size_t scaleIndex(const Manifest &m, const std::string &role) {
  std::string scale = role.substr(0, role.size() - 7) + "_scale";
  for (size_t j = 0; j < m.parameters.size(); ++j)
    if (m.parameters[j].role == scale)
      return j;
  return m.parameters.size();
}

Status Layer::quantizeParameter(size_t i, const Tensor &values) {
  const Manifest &m = bundle.manifest;
  const ParameterSpec &p = m.parameters[i];
  size_t j = scaleIndex(m, p.role);
  int64_t rows = p.shape[p.shape.size() - 2], cols = p.shape.back();
  int64_t matrices = values.numElements() / (rows * cols);
  int64_t blocks = fp8Blocks(rows) * fp8Blocks(cols);
  const auto *w = reinterpret_cast<const float *>(values.data.data());
  auto *scales = reinterpret_cast<float *>(parameters[j].data.data());
  bool perMatrix = m.layer.perTensorFp8();
  for (int64_t k = 0; k < matrices; ++k)
    if (!quantizeFp8Blocks(w + k * rows * cols, rows, cols,
                           parameters[i].data.data() + k * rows * cols,
                           scales + k * blocks, perMatrix))
      return Status::failure("parameter '" + p.role + "' holds a NaN or an "
                             "infinity, which e4m3 cannot quantize");
  return Status::success();
}

Status Layer::loadFp8Parameter(const Checkpoint &file,
                               const std::string &prefix, size_t i) {
  const Manifest &m = bundle.manifest;
  const ParameterSpec &p = m.parameters[i];
  bool pattern = p.name.find("{i}") != std::string::npos;
  // Published FP8 weights (one e4m3 matrix and its scales per expert, or
  // one matrix) are taken as they are; each tensor is read once.
  std::string first = prefix + expertName(p.name, firstExpert);
  Expected<Tensor> values =
      file.contains(first) ? file.get(first) : Expected<Tensor>::error("");
  if (values && values->dtype == DType::F8E4M3 && !p.transposed &&
      p.parts == 1 && !p.flat && (pattern || p.stack == 0)) {
    size_t j = scaleIndex(m, p.role);
    std::vector<int64_t> matrix(p.shape.end() - 2, p.shape.end());
    int64_t pieces = pattern ? p.stack : 1;
    size_t codes = static_cast<size_t>(matrix[0] * matrix[1]);
    size_t blocks =
        static_cast<size_t>(fp8Blocks(matrix[0]) * fp8Blocks(matrix[1]));
    auto *scales = reinterpret_cast<float *>(parameters[j].data.data());
    for (int64_t e = 0; e < pieces; ++e) {
      std::string name = prefix + expertName(p.name, firstExpert + e);
      if (e > 0) {
        if (!file.contains(name))
          return missingTensor(file, name, prefix);
        values = file.get(name);
        if (!values)
          return Status::failure(values.message());
      }
      if (Status s = readFp8(file, name, *values, matrix,
                             parameters[i].data.data() + e * codes,
                             scales + e * blocks);
          !s.ok())
        return s;
    }
    return Status::success();
  }
  // Anything else is read as f32 (dequantized if it is FP8 in another
  // layout) and quantized here.
  ParameterSpec f32 = p;
  f32.dtype = DType::F32;
  Tensor staging = Tensor::zeros(DType::F32, p.shape);
  if (Status s = loadParameter(file, prefix, f32, staging.data.data()); !s.ok())
    return s;
  return quantizeParameter(i, staging);
}

Status Layer::loadParameter(const Checkpoint &file, const std::string &prefix,
                            const ParameterSpec &p, uint8_t *base) {
  const Manifest &m = bundle.manifest;
  {
    bool pattern = p.name.find("{i}") != std::string::npos;
    // Per-expert tensors are read one by one; a tensor of every expert
    // (GraniteMoE's) once, for this rank's experts.
    int64_t pieces = pattern ? p.stack : 1;
    std::vector<int64_t> pieceShape = p.shape;
    if (pattern)
      pieceShape.erase(pieceShape.begin());
    // The checkpoint's shape: every expert's, and the fused dimension
    // whole (the first after the experts').
    std::vector<int64_t> fileShape = pieceShape;
    size_t sliced = p.stack > 0 && !pattern ? 1 : 0;
    if (p.stack > 0 && !pattern)
      fileShape[0] = m.layer.experts;
    fileShape[sliced] *= p.parts;
    // Llama 4 keeps each expert's matrices as (in, out).
    std::vector<int64_t> storedShape = fileShape;
    if (p.transposed)
      std::swap(storedShape[storedShape.size() - 1],
                storedShape[storedShape.size() - 2]);
    // DBRX folds the experts into the rows: the same bytes, one dimension
    // fewer.
    std::vector<int64_t> foldedShape = storedShape;
    if (p.flat) {
      foldedShape[1] *= foldedShape[0];
      foldedShape.erase(foldedShape.begin());
    }
    size_t pieceBytes =
        static_cast<size_t>(*elementCount(pieceShape)) * dtypeSize(p.dtype);
    for (int64_t e = 0; e < pieces; ++e) {
      std::string name = prefix + expertName(p.name, firstExpert + e);
      // GPT-OSS publishes its experts as MXFP4 blocks and scales, in the
      // layer's (out, in) layout.
      bool mxfp4 = !file.contains(name) && file.contains(name + "_blocks");
      if (!file.contains(name) && !mxfp4)
        return missingTensor(file, name, prefix);
      Expected<Tensor> tensor = mxfp4 ? dequantizeMxfp4(file, name, fileShape)
                                      : file.get(name);
      if (!tensor)
        return Status::failure(tensor.message());
      if (mxfp4 && p.flat)
        return Status::failure(file.getName() + ": tensor '" + name +
                               "_blocks' is MXFP4, which a flat parameter (" +
                               p.role + ") cannot take");
      // ERNIE keeps its [E] score bias as [1, E]: leading 1s are dropped.
      std::vector<int64_t> shape = tensor->shape;
      while (shape.size() > foldedShape.size() && shape.front() == 1)
        shape.erase(shape.begin());
      if (shape != (mxfp4 ? fileShape : foldedShape))
        return Status::failure(file.fileOf(name) + ": tensor '" + name +
                               "' has shape " + formatShape(tensor->shape) +
                               ", expected " + formatShape(foldedShape) +
                               (p.parts > 1
                                    ? " (" + p.role + " is part " +
                                          std::to_string(p.part + 1) + " of " +
                                          std::to_string(p.parts) + " of it)"
                                    : std::string()));
      if (tensor->dtype == DType::F8E4M3) {
        Expected<Tensor> dequantized = dequantizeFp8(file, name, *tensor);
        if (!dequantized)
          return Status::failure(dequantized.message());
        tensor = std::move(dequantized);
      }
      if (!isFloatType(tensor->dtype))
        return Status::failure(file.fileOf(name) + ": tensor '" + name +
                               "' has dtype " + safetensorsName(tensor->dtype) +
                               ", expected F32, BF16, F16 or F8_E4M3 with "
                               "block scales");
      Expected<Tensor> converted = convertTensor(*tensor, p.dtype);
      if (!converted)
        return Status::failure(converted.message());
      if (p.transposed && !mxfp4)
        converted = transposeLastTwo(*converted, storedShape);
      uint8_t *dst = base + static_cast<size_t>(e) * pieceBytes;
      if (sliced)
        copySlice(*converted, fileShape, 1, p, firstExpert, p.stack, dst);
      else
        copySlice(*converted, fileShape, 0, p, 0, 1, dst);
    }
  }
  return Status::success();
}

void Layer::randomWeights(uint64_t seed) {
  const Manifest &m = bundle.manifest;
  for (size_t i = 0; i < parameters.size(); ++i)
    reclaim(i);
  // One stream over the parameters in order. Each rank draws only its own
  // experts' values, in chunks over the cores, each chunk's generator
  // started at its first draw: the same numbers as one generator drawing
  // them all in turn (a full DeepSeek-V3 layer's 11 billion took two
  // minutes that way).
  uint64_t drawn = 0;
  int cores =
      static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (size_t i = 0; i < m.parameters.size(); ++i) {
    const ParameterSpec &p = m.parameters[i];
    // FP8 weights are drawn as f32 (the same values as in a layer of
    // another dtype) and quantized; their scales come with them.
    if (endsWith(p.role, "_scale"))
      continue;
    bool fp8 = p.dtype == DType::F8E4M3;
    Tensor staging = fp8 ? Tensor::zeros(DType::F32, p.shape) : Tensor();
    float bound = p.role == "score_bias"
                      ? 0.1f
                      : 1.0f / std::sqrt(static_cast<float>(p.shape.back()));
    Tensor &values = fp8 ? staging : parameters[i];
    // Stacked expert weights draw every rank's experts, so a seed gives
    // the same layer for any number of expert-parallel ranks; this rank
    // keeps its own.
    int64_t n = values.numElements();
    int64_t perExpert = p.stack > 0 ? n / p.stack : n;
    int64_t first = p.stack > 0 ? firstExpert * perExpert : 0;
    int64_t total = p.stack > 0 ? perExpert * m.layer.experts : n;
    constexpr int64_t kChunk = int64_t(1) << 20;
    parallelFor((n + kChunk - 1) / kChunk, cores, [&](int64_t c) {
      int64_t begin = c * kChunk, end = std::min(n, begin + kChunk);
      Random rng(seed);
      rng.skip(drawn + static_cast<uint64_t>(first + begin));
      for (int64_t j = begin; j < end; ++j)
        setFloatElement(values, static_cast<size_t>(j),
                        rng.uniform(-bound, bound));
    });
    drawn += static_cast<uint64_t>(total);
    if (fp8)
      (void)quantizeParameter(i, staging); // finite by construction
  }
  weightsBound = true;
  backend->invalidateParameters();
}

Status Layer::setCommunicator(Communicator *comm) {
  const Manifest &m = bundle.manifest;
  int size = comm ? comm->size() : 1;
  if (m.expertParallel != size)
    return Status::failure(
        "the bundle was compiled for " + std::to_string(m.expertParallel) +
        " expert-parallel rank(s) (--ep), but this job has " +
        std::to_string(size) + "; run it with mpirun -np " +
        std::to_string(m.expertParallel));
  if (size == 1)
    comm = nullptr;
  else if (Status s = backend->setCommunicator(comm); !s.ok())
    return s;
  communicator = comm;
  firstExpert = comm ? comm->rank() * (m.layer.experts / size) : 0;
  return Status::success();
}

Status Layer::checkCommunicator() const {
  if (bundle.manifest.expertParallel > 1 && !communicator)
    return Status::failure(
        "the bundle was compiled for " +
        std::to_string(bundle.manifest.expertParallel) +
        " expert-parallel ranks (--ep); run it under mpirun -np " +
        std::to_string(bundle.manifest.expertParallel));
  return Status::success();
}

std::map<std::string, Tensor>
Layer::checkpointNames(const std::map<std::string, Tensor> &byRole) const {
  std::map<std::string, Tensor> named;
  // Writes `value` (one expert's, or the whole parameter's) as slice
  // `part` of `parts` of dimension `dim` of the named tensor of `shape`.
  auto place = [&](const std::string &name, const Tensor &value,
                   std::vector<int64_t> shape, size_t dim,
                   const ParameterSpec &p) {
    shape[dim] *= p.parts;
    auto [it, fresh] = named.try_emplace(name);
    if (fresh)
      it->second = Tensor::zeros(value.dtype, shape);
    size_t inner = dtypeSize(value.dtype);
    for (size_t d = dim + 1; d < shape.size(); ++d)
      inner *= static_cast<size_t>(shape[d]);
    auto rows = static_cast<size_t>(shape[dim] / p.parts);
    size_t outers = value.data.size() / (rows * inner);
    for (size_t o = 0; o < outers; ++o)
      for (size_t r = 0; r < rows; ++r)
        std::memcpy(it->second.data.data() +
                        (o * p.parts * rows + sliceRow(p, rows, r)) * inner,
                    value.data.data() + (o * rows + r) * inner, inner);
  };
  for (const ParameterSpec &p : bundle.manifest.parameters) {
    auto it = byRole.find(p.role);
    if (it == byRole.end())
      continue;
    const Tensor &value = it->second;
    bool pattern = p.name.find("{i}") != std::string::npos;
    if (!pattern) {
      // A tensor of this rank's experts (stacked) or the whole parameter.
      place(p.name, value, value.shape, p.stack > 0 ? 1 : 0, p);
      continue;
    }
    std::vector<int64_t> pieceShape(value.shape.begin() + 1, value.shape.end());
    Tensor piece = Tensor::zeros(value.dtype, pieceShape);
    for (int64_t e = 0; e < p.stack; ++e) {
      std::memcpy(piece.data.data(),
                  value.data.data() +
                      static_cast<size_t>(e) * piece.data.size(),
                  piece.data.size());
      place(expertName(p.name, firstExpert + e), piece, pieceShape, 0, p);
    }
  }
  // Tensors whose checkpoint layout is not the layer's were assembled in
  // the layer's: each is turned to (in, out) and folded (DBRX) once, the
  // parts of a fused tensor sharing it.
  std::set<std::string> done;
  for (const ParameterSpec &p : bundle.manifest.parameters) {
    if ((!p.transposed && !p.flat) || !byRole.count(p.role))
      continue;
    bool pattern = p.name.find("{i}") != std::string::npos;
    for (int64_t e = 0; e < (pattern ? p.stack : 1); ++e) {
      std::string name = pattern ? expertName(p.name, firstExpert + e) : p.name;
      auto it = named.find(name);
      if (it == named.end() || !done.insert(name).second)
        continue;
      Tensor &tensor = it->second;
      if (p.transposed) {
        std::vector<int64_t> shape = tensor.shape;
        tensor = transposeLastTwo(tensor, shape);
      }
      if (p.flat) {
        tensor.shape[1] *= tensor.shape[0];
        tensor.shape.erase(tensor.shape.begin());
      }
    }
  }
  return named;
}

std::map<std::string, Tensor> Layer::namedParameters() const {
  std::map<std::string, Tensor> byRole;
  for (size_t i = 0; i < bundle.manifest.parameters.size(); ++i)
    byRole[bundle.manifest.parameters[i].role] = param(i);
  return checkpointNames(byRole);
}

const Tensor *Layer::parameter(const std::string &role) const {
  for (size_t i = 0; i < bundle.manifest.parameters.size(); ++i)
    if (bundle.manifest.parameters[i].role == role)
      return &param(i);
  return nullptr;
}

Expected<Tensor> Layer::floatParameter(const std::string &role) const {
  const Tensor *value = parameter(role);
  if (!value)
    return Expected<Tensor>::error("the bundle has no parameter '" + role +
                                   "'");
  if (value->dtype == DType::F8E4M3 && endsWith(role, "_weight"))
    if (const Tensor *scale =
            parameter(role.substr(0, role.size() - 7) + "_scale"))
      return dequantizeFp8Blocks(*value, *scale);
  return convertTensor(*value, DType::F32);
}

Status Layer::lendParameter(const std::string &role, Tensor &to) {
  for (size_t i = 0; i < bundle.manifest.parameters.size(); ++i) {
    if (bundle.manifest.parameters[i].role != role)
      continue;
    if (parameters[i].dtype != DType::F32 || lent[i])
      return Status::failure("parameter '" + role +
                             "' cannot be lent (it is not f32, or lent)");
    to = std::move(parameters[i]);
    parameters[i] = Tensor();
    lent[i] = &to;
    return Status::success();
  }
  return Status::failure("the bundle has no parameter '" + role + "'");
}

void Layer::reclaim(size_t i, bool move) {
  if (!lent[i])
    return;
  if (move)
    parameters[i] = std::move(*lent[i]);
  else
    parameters[i] = *lent[i];
  lent[i] = nullptr;
  backend->invalidateParameters();
}

void Layer::returnParameter(const std::string &role) {
  for (size_t i = 0; i < bundle.manifest.parameters.size(); ++i)
    if (bundle.manifest.parameters[i].role == role)
      reclaim(i, /*move=*/true);
}

Status Layer::setParameter(const std::string &role, const Tensor &value) {
  for (size_t i = 0; i < bundle.manifest.parameters.size(); ++i) {
    const ParameterSpec &p = bundle.manifest.parameters[i];
    if (p.role != role)
      continue;
    if (value.shape != p.shape)
      return Status::failure("parameter '" + role + "' has shape " +
                             formatShape(p.shape) + ", got " +
                             formatShape(value.shape));
    reclaim(i);
    // An FP8 weight takes e4m3 codes as they are (its scales are a
    // parameter of their own), or float values it quantizes, scales and all.
    if (p.dtype == DType::F8E4M3 && value.dtype != DType::F8E4M3) {
      Expected<Tensor> values = convertTensor(value, DType::F32);
      if (!values)
        return Status::failure(values.message());
      if (Status s = quantizeParameter(i, *values); !s.ok())
        return s;
      backend->invalidateParameters();
      return Status::success();
    }
    if (p.dtype == DType::F8E4M3)
      for (size_t c = 0; c < value.data.size(); ++c)
        if ((value.data[c] & 0x7f) == 0x7f)
          return Status::failure("parameter '" + role +
                                 "' gets a NaN code at element " +
                                 std::to_string(c));
    Expected<Tensor> converted = convertTensor(value, p.dtype);
    if (!converted)
      return Status::failure(converted.message());
    parameters[i] = std::move(*converted);
    backend->invalidateParameters();
    return Status::success();
  }
  return Status::failure("the bundle has no parameter '" + role + "'");
}

Expected<ForwardResult> Layer::forward(const Tensor &x) {
  using Result = Expected<ForwardResult>;
  const Manifest &m = bundle.manifest;
  int64_t hidden = m.layer.hidden, k = m.layer.topK;
  if (!weightsBound)
    return Result::error("no weights bound: load a weights file or use "
                         "random weights first");
  if (Status s = checkCommunicator(); !s.ok())
    return Result::error(s.error);
  if (x.shape.size() != 2 || x.shape[1] != hidden)
    return Result::error("input 'x' has shape " + formatShape(x.shape) +
                         ", expected [T, " + std::to_string(hidden) + "]");
  if (!isFloatType(x.dtype))
    return Result::error(std::string("input 'x' has dtype ") +
                         mlirName(x.dtype) + ", expected f32, bf16 or f16");
  int64_t tokens = x.shape[0];
  if (m.staticTokens && tokens != m.staticTokens)
    return Result::error("input 'x' has " + std::to_string(tokens) +
                         " tokens, the bundle's layer takes exactly " +
                         std::to_string(m.staticTokens) +
                         " (its input type has a static token count)");
  if (tokens > m.maxTokens)
    return Result::error("input 'x' has " + std::to_string(tokens) +
                         " tokens, the bundle was compiled for at most " +
                         std::to_string(m.maxTokens) + " (--max-tokens)");
  uint64_t ioBytes = static_cast<uint64_t>(tokens) *
                     (static_cast<uint64_t>(hidden) * 8 + k * 8);
  if (Status s = checkAllocation(ioBytes, "the forward pass's buffers");
      !s.ok())
    return Result::error(s.error);
  // Convert the input only when its dtype is not the entry point's.
  const Tensor *input = &x;
  Tensor converted;
  if (x.dtype != m.inputs[0].dtype) {
    Expected<Tensor> c = convertTensor(x, m.inputs[0].dtype);
    if (!c)
      return Result::error(c.message());
    converted = std::move(*c);
    input = &converted;
  }
  ForwardResult result{Tensor::zeros(DType::F32, {tokens, hidden}),
                       Tensor::zeros(DType::I32, {tokens, k}),
                       Tensor::zeros(DType::F32, {tokens, k})};
  std::vector<const Tensor *> args = {input};
  for (size_t i = 0; i < parameters.size(); ++i)
    args.push_back(&param(i));
  args.push_back(&result.y);
  args.push_back(&result.topkIds);
  args.push_back(&result.topkWeights);
  if (Status s = backend->run(args); !s.ok())
    return Result::error(s.error);
  return result;
}

DType Layer::deviceInputDType() const {
  for (const GpuBuffer &b : bundle.manifest.gpu.buffers)
    if (b.name == "x")
      return b.dtype;
  return bundle.manifest.inputs[0].dtype;
}

DType Layer::deviceOutputDType() const {
  for (const GpuBuffer &b : bundle.manifest.gpu.buffers)
    if (b.name == "y")
      return b.dtype;
  return bundle.manifest.outputs[0].dtype;
}

Status Layer::checkDevicePass(int64_t tokens) const {
  const Manifest &m = bundle.manifest;
  if (!weightsBound)
    return Status::failure("no weights bound: load a weights file or use "
                           "random weights first");
  if (Status s = checkCommunicator(); !s.ok())
    return s;
  if (tokens >= 0 && (!m.staticTokens || tokens == m.staticTokens) &&
      tokens <= m.maxTokens)
    return Status::success();
  return Status::failure(
      "input 'x' has " + std::to_string(tokens) + " tokens, the bundle takes " +
      (m.staticTokens
           ? "exactly " + std::to_string(m.staticTokens)
           : "at most " + std::to_string(m.maxTokens) + " (--max-tokens)"));
}

std::vector<const Tensor *> Layer::deviceParameters() const {
  std::vector<const Tensor *> args = {nullptr};
  for (size_t i = 0; i < parameters.size(); ++i)
    args.push_back(&param(i));
  return args;
}

Status Layer::forwardOnDevice(const DeviceForward &io) {
  if (Status s = checkDevicePass(io.tokens); !s.ok())
    return s;
  if (io.tokens > 0 && (!io.x || !io.y || !io.topkIds || !io.topkWeights))
    return Status::failure("a device pointer of x or the outputs is null");
  return backend->runOnDevice(io, deviceParameters());
}

Status Layer::backwardOnDevice(const DeviceBackward &io) {
  const Manifest &m = bundle.manifest;
  if (m.backward.entry.empty())
    return Status::failure("the bundle has no backward pass (compile it with "
                           "moe-compile --backward)");
  if (Status s = checkDevicePass(io.tokens); !s.ok())
    return s;
  size_t outputs = 0;
  for (const TrainArgumentSpec &a : m.backward.arguments)
    outputs += a.output;
  if (io.grads.size() != outputs)
    return Status::failure("the backward pass writes " +
                           std::to_string(outputs) +
                           " gradients (x's, then each trained weight's), "
                           "got " +
                           std::to_string(io.grads.size()) + " addresses");
  if (io.tokens > 0 && (!io.x || !io.dy))
    return Status::failure("a device pointer of x or dy is null");
  for (size_t i = 0; i < io.grads.size(); ++i)
    if (!io.grads[i] && (i > 0 || io.tokens > 0))
      return Status::failure("a gradient's device pointer is null");
  return backend->runBackwardOnDevice(io, deviceParameters());
}

Expected<std::map<std::string, Tensor>>
Layer::backward(const Tensor &x, const Tensor &dy,
                std::map<std::string, Tensor> *spare) {
  using Result = Expected<std::map<std::string, Tensor>>;
  const Manifest &m = bundle.manifest;
  const TrainSpec &spec = m.backward;
  if (spec.entry.empty())
    return Result::error("the bundle has no backward pass (compile it with "
                         "moe-compile --backward)");
  if (!weightsBound)
    return Result::error("no weights bound: load a weights file or use "
                         "random weights first");
  if (Status s = checkCommunicator(); !s.ok())
    return Result::error(s.error);
  int64_t hidden = m.layer.hidden;
  if (x.shape.size() != 2 || x.shape[1] != hidden || dy.shape != x.shape)
    return Result::error("x and dy must both be [T, " + std::to_string(hidden) +
                         "], got " + formatShape(x.shape) + " and " +
                         formatShape(dy.shape));
  if (!isFloatType(x.dtype) || !isFloatType(dy.dtype))
    return Result::error("x and dy must be f32, bf16 or f16, got " +
                         std::string(mlirName(x.dtype)) + " and " +
                         mlirName(dy.dtype));
  int64_t tokens = x.shape[0];
  if (m.staticTokens && tokens != m.staticTokens)
    return Result::error("input 'x' has " + std::to_string(tokens) +
                         " tokens, the bundle's layer takes exactly " +
                         std::to_string(m.staticTokens));
  if (tokens > m.maxTokens)
    return Result::error("input 'x' has " + std::to_string(tokens) +
                         " tokens, the bundle was compiled for at most " +
                         std::to_string(m.maxTokens) + " (--max-tokens)");
  // Inputs converted where their dtype is not the entry point's; the
  // weights' f32 copies only where the layer computes in another dtype.
  std::map<std::string, Tensor> converted;
  std::vector<const Tensor *> args;
  std::map<std::string, Tensor> outputs;
  auto bind = [&](const std::string &name, const Tensor &value,
                  DType want) -> Status {
    if (value.dtype == want) {
      args.push_back(&value);
      return Status::success();
    }
    Expected<Tensor> c = convertTensor(value, want);
    if (!c)
      return Status::failure(c.message());
    args.push_back(&(converted[name] = std::move(*c)));
    return Status::success();
  };
  for (const TrainArgumentSpec &a : spec.arguments) {
    Status s = Status::success();
    if (a.output) {
      std::vector<int64_t> shape = a.shape;
      for (int64_t &d : shape)
        if (d < 0)
          d = tokens;
      Tensor &out = outputs[a.name];
      auto reuse = spare ? spare->find(a.name.substr(0, a.name.size() - 5))
                         : std::map<std::string, Tensor>::iterator();
      if (spare && reuse != spare->end() && reuse->second.dtype == a.dtype &&
          reuse->second.shape == shape) {
        out = std::move(reuse->second);
        // With no tokens nothing runs (or writes) them: zeros, as new.
        if (tokens == 0)
          std::fill(out.data.begin(), out.data.end(), uint8_t{0});
      } else
        out = Tensor::zeros(a.dtype, shape);
      args.push_back(&out);
    } else if (a.name == "x") {
      s = bind(a.name, x, a.dtype);
    } else if (a.name == "dy") {
      s = bind(a.name, dy, a.dtype);
    } else if (const Tensor *p = parameter(a.name)) {
      // An FP8 weight's f32 values (the step quantizes them again).
      if (p->dtype == DType::F8E4M3 && a.dtype == DType::F32) {
        Expected<Tensor> values = floatParameter(a.name);
        if (!values)
          return Result::error(values.message());
        args.push_back(&(converted[a.name] = std::move(*values)));
      } else {
        s = bind(a.name, *p, a.dtype);
      }
    } else {
      return Result::error("the backward pass takes '" + a.name +
                           "', which the bundle's parameters lack");
    }
    if (!s.ok())
      return Result::error(s.error);
  }
  // On sm_90a the schedule reads the weights from the forward pass's
  // buffers: the parameters follow the arguments, uploaded when changed.
  if (m.target == "sm_90a")
    for (size_t i = 0; i < parameters.size(); ++i)
      args.push_back(&param(i));
  // No tokens: every gradient is zero, as the outputs already are (but a
  // rank of an expert-parallel job still takes part in the exchanges).
  if (tokens > 0 || communicator)
    if (Status s = backend->runEntry(spec.entry, args, tokens); !s.ok())
      return Result::error(s.error);
  std::map<std::string, Tensor> grads;
  for (auto &[name, tensor] : outputs)
    grads[name.substr(0, name.size() - 5)] = std::move(tensor);
  return grads;
}

} // namespace moe::rt
