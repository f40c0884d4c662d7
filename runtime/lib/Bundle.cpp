//===- Bundle.cpp - The single-file bundle moe-compile writes -------------===//
//
// Part of moe-compiler's runtime.
//
//===----------------------------------------------------------------------===//

#include "moe/runtime/Bundle.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>

namespace moe::rt {

using json = nlohmann::json;

static const char kMagic[8] = {'M', 'O', 'E', 'B', 'N', 'D', 'L', '\0'};

uint64_t fnv1a64(const uint8_t *data, size_t size) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < size; ++i) {
    hash ^= data[i];
    hash *= 0x100000001b3ull;
  }
  return hash;
}

//===----------------------------------------------------------------------===//
// Manifest
//===----------------------------------------------------------------------===//

static json tensorToJson(const TensorSpec &t) {
  return {{"name", t.name}, {"dtype", mlirName(t.dtype)}, {"shape", t.shape}};
}

std::string serializeManifest(const Manifest &m) {
  json layer = {{"family", m.layer.family},
                {"hidden", m.layer.hidden},
                {"experts", m.layer.experts},
                {"top_k", m.layer.topK},
                {"groups", m.layer.groups},
                {"topk_groups", m.layer.topkGroups},
                {"scoring", m.layer.scoring},
                {"group_score", m.layer.groupScore},
                {"score_bias", m.layer.scoreBias},
                {"norm_topk_prob", m.layer.normTopkProb},
                {"routed_scale", m.layer.routedScale},
                {"ffn", m.layer.ffn},
                {"shared_experts", m.layer.sharedExperts},
                {"shared_ffn", m.layer.sharedFfn},
                {"shared_gate", m.layer.sharedGate},
                {"scale_input", m.layer.scaleInput},
                {"output_bias", m.layer.outputBias},
                {"router_bias", m.layer.routerBias},
                {"expert_bias", m.layer.expertBias},
                {"activation", m.layer.activation},
                {"swiglu_alpha", m.layer.swigluAlpha},
                {"swiglu_limit", m.layer.swigluLimit},
                {"dtype", m.layer.dtype},
                {"alignment", m.layer.alignment}};
  if (!m.layer.expertDtype.empty())
    layer["expert_dtype"] = m.layer.expertDtype;
  if (!m.layer.fp8Scaling.empty())
    layer["fp8_scaling"] = m.layer.fp8Scaling;
  json inputs = json::array(), params = json::array(), outputs = json::array();
  for (const TensorSpec &t : m.inputs)
    inputs.push_back(tensorToJson(t));
  for (const TensorSpec &t : m.outputs)
    outputs.push_back(tensorToJson(t));
  for (const ParameterSpec &p : m.parameters) {
    json param = {{"role", p.role},
                  {"name", p.name},
                  {"stack", p.stack},
                  {"dtype", mlirName(p.dtype)},
                  {"shape", p.shape}};
    if (p.parts != 1) {
      param["part"] = p.part;
      param["parts"] = p.parts;
    }
    if (p.transposed)
      param["transposed"] = true;
    if (p.interleaved)
      param["interleaved"] = true;
    if (p.flat)
      param["flat"] = true;
    params.push_back(std::move(param));
  }
  json root = {{"format", "moe-bundle"},    {"target", m.target},
               {"compiler", m.compiler},    {"entry", m.entry},
               {"max_tokens", m.maxTokens}, {"layer", layer},
               {"inputs", inputs},          {"parameters", params},
               {"outputs", outputs},        {"schedule", m.schedule}};
  if (m.expertParallel != 1)
    root["expert_parallel"] = m.expertParallel;
  if (m.staticTokens != 0)
    root["static_tokens"] = m.staticTokens;
  if (!m.checkpointPrefix.empty())
    root["checkpoint"] = {{"prefix", m.checkpointPrefix},
                          {"moe_layers", m.moeLayers}};
  auto entryPoint = [](const TrainSpec &spec) {
    json arguments = json::array();
    for (const TrainArgumentSpec &a : spec.arguments)
      arguments.push_back({{"name", a.name},
                           {"output", a.output},
                           {"dtype", mlirName(a.dtype)},
                           {"shape", a.shape}});
    return json{{"entry", spec.entry}, {"arguments", arguments}};
  };
  if (!m.train.entry.empty()) {
    root["train"] = entryPoint(m.train);
    if (m.train.stateOnDevice)
      root["train"]["state"] = "device";
    if (m.train.update)
      root["train"]["update"] = entryPoint(*m.train.update);
  }
  if (!m.backward.entry.empty())
    root["backward"] = entryPoint(m.backward);
  if (m.target == "sm_90a") {
    json buffers = json::array(), steps = json::array();
    for (const GpuBuffer &b : m.gpu.buffers)
      buffers.push_back({{"name", b.name},
                         {"dtype", mlirName(b.dtype)},
                         {"shape", b.shape},
                         {"source", abi::formatBufferSource(b.source)}});
    auto stepList = [](const std::vector<GpuStep> &list) {
      json out = json::array();
      for (const GpuStep &st : list) {
        json maps = json::array();
        for (const GpuTensorMap &t : st.tensorMaps)
          maps.push_back({{"arg", t.arg},
                          {"source", t.source},
                          {"view", t.view},
                          {"box", t.box},
                          {"swizzle", t.swizzle}});
        out.push_back(
            {{"op", abi::stepKindName(st.kind)},
             {"buffer", st.buffer},
             {"kernel", st.kernel},
             {"exchange", std::string(st.kind == abi::StepKind::Exchange
                                          ? abi::exchangeKindName(st.exchange)
                                          : "")},
             {"args", st.args},
             {"grid", std::string(st.kind == abi::StepKind::Launch
                                      ? abi::gridKindName(st.grid)
                                      : "")},
             {"per_block", st.perBlock},
             {"grid_size", st.gridSize},
             {"block", st.block},
             {"smem", st.sharedMemory},
             {"cluster", st.cluster},
             {"tensor_maps", maps}});
        if (st.chunk >= 0)
          out.back()["chunk"] = st.chunk;
        if (st.transport != abi::Transport::Any)
          out.back()["transport"] =
              std::string(abi::transportName(st.transport));
        if (st.kind == abi::StepKind::Launch)
          out.back()["kernel_kind"] =
              std::string(abi::kernelKindName(st.kernelKind));
      }
      return out;
    };
    steps = stepList(m.gpu.steps);
    root["gpu"] = {{"row_capacity", m.gpu.rowCapacity},
                   {"comm_sms", m.gpu.commSms},
                   {"buffers", buffers},
                   {"steps", steps}};
    if (m.gpu.receivedRowCapacity)
      root["gpu"]["received_row_capacity"] = m.gpu.receivedRowCapacity;
    if (!m.gpu.trainSteps.empty())
      root["gpu"]["train_steps"] = stepList(m.gpu.trainSteps);
    if (!m.gpu.updateSteps.empty())
      root["gpu"]["update_steps"] = stepList(m.gpu.updateSteps);
    if (!m.gpu.backwardSteps.empty())
      root["gpu"]["backward_steps"] = stepList(m.gpu.backwardSteps);
    if (m.gpu.tileM)
      root["gpu"]["tile_m"] = m.gpu.tileM;
    if (!m.gpu.variants.empty()) {
      json variants = json::array();
      for (const GpuVariant &v : m.gpu.variants)
        variants.push_back({{"tile_m", v.tileM},
                            {"max_tokens", v.maxTokens},
                            {"row_capacity", v.rowCapacity},
                            {"blob", v.blob},
                            {"steps", stepList(v.steps)}});
      root["gpu"]["variants"] = variants;
    }
  }
  if (!m.hostCpus.empty())
    root["host_cpus"] = m.hostCpus;
  return root.dump(2);
}

namespace {
/// The index of `name` in kHostCpuLevels (best first), or -1.
int hostCpuLevelRank(const std::string &name) {
  for (size_t i = 0; i < std::size(kHostCpuLevels); ++i)
    if (name == kHostCpuLevels[i])
      return static_cast<int>(i);
  return -1;
}

/// "x86-64-v4, x86-64-v3, x86-64" (`last` before the last one).
std::string hostCpuLevelList(const char *last = ", ") {
  std::string list;
  for (size_t i = 0; i < std::size(kHostCpuLevels); ++i)
    list += std::string(i == 0 ? ""
                        : i + 1 == std::size(kHostCpuLevels) ? last
                                                             : ", ") +
            kHostCpuLevels[i];
  return list;
}

/// "0000abcd".
std::string hex32(uint32_t value) {
  char text[9];
  std::snprintf(text, sizeof(text), "%08x", value);
  return text;
}
} // namespace

namespace {
/// Typed field access that records the first error instead of throwing.
struct Reader {
  std::string error;

  const json *field(const json &object, const char *key, const char *where) {
    if (!error.empty())
      return nullptr;
    if (!object.is_object()) {
      error = std::string("expected ") + where + " to be an object";
      return nullptr;
    }
    auto it = object.find(key);
    if (it == object.end()) {
      error = std::string("missing field '") + key + "' in " + where;
      return nullptr;
    }
    return &*it;
  }
  std::string str(const json &o, const char *key, const char *where) {
    const json *v = field(o, key, where);
    if (!v)
      return {};
    if (!v->is_string()) {
      error =
          std::string("expected '") + key + "' in " + where + " to be a string";
      return {};
    }
    return v->get<std::string>();
  }
  int64_t integer(const json &o, const char *key, const char *where) {
    const json *v = field(o, key, where);
    if (!v)
      return 0;
    if (!v->is_number_integer()) {
      error = std::string("expected '") + key + "' in " + where +
              " to be an integer";
      return 0;
    }
    return v->get<int64_t>();
  }
  double number(const json &o, const char *key, const char *where) {
    const json *v = field(o, key, where);
    if (!v)
      return 0;
    if (!v->is_number()) {
      error =
          std::string("expected '") + key + "' in " + where + " to be a number";
      return 0;
    }
    return v->get<double>();
  }
  bool boolean(const json &o, const char *key, const char *where) {
    const json *v = field(o, key, where);
    if (!v)
      return false;
    if (!v->is_boolean()) {
      error = std::string("expected '") + key + "' in " + where +
              " to be true or false";
      return false;
    }
    return v->get<bool>();
  }
  DType dtype(const json &o, const char *where) {
    std::string name = str(o, "dtype", where);
    if (!error.empty())
      return DType::F32;
    std::optional<DType> d = parseMlirName(name);
    if (!d)
      error = std::string("unknown dtype '") + name + "' in " + where;
    return d.value_or(DType::F32);
  }
  std::vector<int64_t> shape(const json &o, const char *where) {
    const json *v = field(o, "shape", where);
    std::vector<int64_t> dims;
    if (!v)
      return dims;
    if (!v->is_array()) {
      error = std::string("expected 'shape' in ") + where + " to be an array";
      return dims;
    }
    for (const json &d : *v) {
      if (!d.is_number_integer() || d.get<int64_t>() < -1) {
        error = std::string("expected integer sizes >= -1 in the shape of ") +
                where;
        return dims;
      }
      dims.push_back(d.get<int64_t>());
    }
    return dims;
  }
  const json *array(const json &o, const char *key, const char *where) {
    const json *v = field(o, key, where);
    if (v && !v->is_array()) {
      error =
          std::string("expected '") + key + "' in " + where + " to be an array";
      return nullptr;
    }
    return v;
  }
};

/// An entry point's name as moe-compile writes it: a C identifier of at
/// most 128 characters (the runtime looks it up only in the bundle's own
/// code, never in the libraries that code links).
void checkEntryName(Reader &r, const std::string &name, const char *where,
                    bool allowEmpty) {
  if (!r.error.empty() || (allowEmpty && name.empty()))
    return;
  bool ok = !name.empty() && name.size() <= 128 &&
            !(name[0] >= '0' && name[0] <= '9');
  for (char c : name)
    ok = ok && (c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                (c >= '0' && c <= '9'));
  if (!ok)
    r.error = std::string("expected 'entry' in ") + where +
              " to be a C identifier of at most 128 characters, got '" +
              name.substr(0, 64) + (name.size() > 64 ? "...'" : "'");
}
} // namespace

/// Reads the "gpu" object of an sm_90a manifest.
static void readGpuProgram(Reader &r, const json &root, GpuProgram &program) {
  const json *gpu = r.field(root, "gpu", "the manifest");
  if (!gpu)
    return;
  const char *w = "the gpu program";
  program.rowCapacity = r.integer(*gpu, "row_capacity", w);
  if (gpu->contains("comm_sms"))
    program.commSms = r.integer(*gpu, "comm_sms", w);
  if (gpu->contains("received_row_capacity"))
    program.receivedRowCapacity = r.integer(*gpu, "received_row_capacity", w);
  auto ints = [&](const json &o, const char *key, const char *where) {
    std::vector<int64_t> out;
    const json *v = r.array(o, key, where);
    if (!v)
      return out;
    for (const json &d : *v) {
      if (!d.is_number_integer()) {
        r.error = std::string("expected integers in '") + key + "' of " + where;
        return out;
      }
      out.push_back(d.get<int64_t>());
    }
    return out;
  };
  if (const json *buffers = r.array(*gpu, "buffers", w))
    for (const json &item : *buffers) {
      GpuBuffer b;
      b.name = r.str(item, "name", "a gpu buffer");
      b.dtype = r.dtype(item, "a gpu buffer");
      b.shape = ints(item, "shape", "a gpu buffer");
      std::string source = r.str(item, "source", "a gpu buffer");
      if (std::optional<abi::BufferSource> parsed =
              abi::parseBufferSource(source))
        b.source = std::move(*parsed);
      else if (r.error.empty())
        r.error = "gpu buffer '" + b.name + "' has unknown source '" + source +
                  "' (expected input, output, scratch, param:<role>, "
                  "pack:<gate>,<up>, concat:<gate>,<up> or arg:<name>)";
      program.buffers.push_back(std::move(b));
    }
  auto readSteps = [&](const json &list, std::vector<GpuStep> &into) {
    for (const json &item : list) {
      const char *sw = "a gpu step";
      GpuStep st;
      std::string op = r.str(item, "op", sw);
      st.buffer = r.str(item, "buffer", sw);
      st.kernel = r.str(item, "kernel", sw);
      std::optional<abi::StepKind> kind = abi::parseStepKind(op);
      if (!kind && r.error.empty())
        r.error = "unknown gpu step '" + op +
                  "' (expected launch, memset, exchange or all_reduce)";
      st.kind = kind.value_or(abi::StepKind::Launch);
      if (st.kind == abi::StepKind::Exchange) {
        std::string exchange = r.str(item, "exchange", sw);
        std::optional<abi::ExchangeKind> e = abi::parseExchangeKind(exchange);
        if (!e && r.error.empty())
          r.error = "a gpu exchange must be a dispatch, combine, "
                    "dispatch_rows, combine_rows or dispatch_plan, not '" +
                    exchange + "'";
        st.exchange = e.value_or(abi::ExchangeKind::Dispatch);
      }
      if (const json *args = r.array(item, "args", sw))
        for (const json &a : *args) {
          if (!a.is_string()) {
            r.error = "expected buffer names in the args of a gpu step";
            break;
          }
          st.args.push_back(a.get<std::string>());
        }
      std::string grid = r.str(item, "grid", sw);
      std::optional<abi::GridKind> gridKind = abi::parseGridKind(grid);
      // Only a launch's grid matters (other steps write one all the same).
      if (!gridKind && st.kind == abi::StepKind::Launch && r.error.empty())
        r.error = "kernel '" + st.kernel + "' has unknown grid '" + grid + "'";
      st.grid = gridKind.value_or(abi::GridKind::One);
      // Bundles written before kernel kinds have none: other.
      if (st.kind == abi::StepKind::Launch && item.contains("kernel_kind")) {
        std::string kernelKind = r.str(item, "kernel_kind", sw);
        std::optional<abi::KernelKind> k = abi::parseKernelKind(kernelKind);
        if (!k && r.error.empty())
          r.error = "kernel '" + st.kernel + "' has unknown kind '" +
                    kernelKind +
                    "' (expected the name of a moegpu kernel op, "
                    "such as grouped_gemm or route)";
        st.kernelKind = k.value_or(abi::KernelKind::Other);
      }
      st.perBlock = r.integer(item, "per_block", sw);
      st.gridSize = r.integer(item, "grid_size", sw);
      st.block = r.integer(item, "block", sw);
      st.sharedMemory = r.integer(item, "smem", sw);
      // Bundles written before clusters have none: one CTA each.
      if (item.contains("cluster"))
        st.cluster = r.integer(item, "cluster", sw);
      if (item.contains("chunk"))
        st.chunk = r.integer(item, "chunk", sw);
      // Bundles before the device-initiated exchange: every step runs.
      if (item.contains("transport")) {
        std::string name = r.str(item, "transport", sw);
        std::optional<abi::Transport> t = abi::parseTransport(name);
        if ((!t || *t == abi::Transport::Any) && r.error.empty())
          r.error = "a gpu step has unknown transport '" + name +
                    "' (expected lsa or nccl)";
        st.transport = t.value_or(abi::Transport::Any);
      }
      if (const json *maps = r.array(item, "tensor_maps", sw))
        for (const json &m : *maps) {
          GpuTensorMap t;
          t.arg = r.integer(m, "arg", "a tensor map");
          t.source = r.integer(m, "source", "a tensor map");
          t.view = ints(m, "view", "a tensor map");
          t.box = ints(m, "box", "a tensor map");
          t.swizzle = r.integer(m, "swizzle", "a tensor map");
          st.tensorMaps.push_back(std::move(t));
        }
      into.push_back(std::move(st));
    }
  };
  if (const json *steps = r.array(*gpu, "steps", w))
    readSteps(*steps, program.steps);
  if (gpu->contains("train_steps"))
    if (const json *steps = r.array(*gpu, "train_steps", w))
      readSteps(*steps, program.trainSteps);
  if (gpu->contains("update_steps"))
    if (const json *steps = r.array(*gpu, "update_steps", w))
      readSteps(*steps, program.updateSteps);
  if (gpu->contains("backward_steps"))
    if (const json *steps = r.array(*gpu, "backward_steps", w))
      readSteps(*steps, program.backwardSteps);
  if (gpu->contains("tile_m"))
    program.tileM = r.integer(*gpu, "tile_m", w);
  if (gpu->contains("variants"))
    if (const json *variants = r.array(*gpu, "variants", w))
      for (const json &item : *variants) {
        const char *vw = "a gpu variant";
        GpuVariant v;
        v.tileM = r.integer(item, "tile_m", vw);
        v.maxTokens = r.integer(item, "max_tokens", vw);
        v.rowCapacity = r.integer(item, "row_capacity", vw);
        v.blob = r.integer(item, "blob", vw);
        if (const json *steps = r.array(item, "steps", vw))
          readSteps(*steps, v.steps);
        program.variants.push_back(std::move(v));
      }
  indexGpuBuffers(program);
}

bool isGradient(const TrainArgumentSpec &spec) {
  const std::string &n = spec.name;
  return spec.output && n.size() > 5 &&
         n.compare(n.size() - 5, 5, ".grad") == 0;
}

bool isWeightGradient(const TrainArgumentSpec &spec) {
  const std::string &n = spec.name;
  return spec.output && n != "x.grad" && n.size() > 5 &&
         n.compare(n.size() - 5, 5, ".grad") == 0;
}

bool isAdamMoment(const std::string &name) {
  return endsWith(name, ".m") || endsWith(name, ".v");
}

Expected<Manifest> parseManifest(const std::string &text) {
  if (Status s = checkJsonText(text.data(), text.size(), "manifest");
      !s.ok())
    return Expected<Manifest>::error("invalid manifest: " + s.error);
  json root = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded())
    return Expected<Manifest>::error("manifest is not valid JSON");
  Reader r;
  Manifest m;
  if (r.str(root, "format", "the manifest") != "moe-bundle" && r.error.empty())
    r.error = "manifest format is not 'moe-bundle'";
  m.target = r.str(root, "target", "the manifest");
  m.compiler = r.str(root, "compiler", "the manifest");
  m.entry = r.str(root, "entry", "the manifest");
  checkEntryName(r, m.entry, "the manifest", /*allowEmpty=*/true);
  m.maxTokens = r.integer(root, "max_tokens", "the manifest");
  if (root.is_object() && root.contains("expert_parallel"))
    m.expertParallel = r.integer(root, "expert_parallel", "the manifest");
  if (root.is_object() && root.contains("static_tokens"))
    m.staticTokens = r.integer(root, "static_tokens", "the manifest");
  if (root.is_object() && root.contains("checkpoint")) {
    const json &c = root["checkpoint"];
    const char *w = "the manifest's checkpoint";
    m.checkpointPrefix = r.str(c, "prefix", w);
    if (const json *layers = r.field(c, "moe_layers", w)) {
      if (!layers->is_array())
        r.error = "expected 'moe_layers' in the manifest's checkpoint to be "
                  "an array";
      else
        for (const json &l : *layers) {
          if (!l.is_number_integer() || l.get<int64_t>() < 0) {
            r.error = "expected 'moe_layers' in the manifest's checkpoint to "
                      "hold layer indices";
            break;
          }
          m.moeLayers.push_back(l.get<int64_t>());
        }
    }
  }
  if (root.is_object() && root.contains("host_cpus")) {
    const json &cpus = root["host_cpus"];
    auto known = [](const json &c) {
      return c.is_string() &&
             hostCpuLevelRank(c.get_ref<const std::string &>()) >= 0;
    };
    if (!cpus.is_array() || cpus.empty() ||
        !std::all_of(cpus.begin(), cpus.end(), known))
      r.error = "expected 'host_cpus' in the manifest to list x86-64 levels (" +
                hostCpuLevelList() + ")";
    else
      for (const json &c : cpus)
        m.hostCpus.push_back(c.get<std::string>());
  }
  if (const json *layer = r.field(root, "layer", "the manifest")) {
    const char *w = "the layer";
    LayerSpec &l = m.layer;
    l.family = r.str(*layer, "family", w);
    l.hidden = r.integer(*layer, "hidden", w);
    l.experts = r.integer(*layer, "experts", w);
    l.topK = r.integer(*layer, "top_k", w);
    l.groups = r.integer(*layer, "groups", w);
    l.topkGroups = r.integer(*layer, "topk_groups", w);
    l.scoring = r.str(*layer, "scoring", w);
    l.groupScore = r.str(*layer, "group_score", w);
    l.scoreBias = r.boolean(*layer, "score_bias", w);
    l.normTopkProb = r.boolean(*layer, "norm_topk_prob", w);
    l.routedScale = r.number(*layer, "routed_scale", w);
    l.ffn = r.integer(*layer, "ffn", w);
    l.sharedExperts = r.integer(*layer, "shared_experts", w);
    l.sharedFfn = r.integer(*layer, "shared_ffn", w);
    l.sharedGate = r.boolean(*layer, "shared_gate", w);
    l.scaleInput = r.boolean(*layer, "scale_input", w);
    l.outputBias = r.boolean(*layer, "output_bias", w);
    l.routerBias = r.boolean(*layer, "router_bias", w);
    l.expertBias = r.boolean(*layer, "expert_bias", w);
    l.activation = r.str(*layer, "activation", w);
    l.swigluAlpha = r.number(*layer, "swiglu_alpha", w);
    l.swigluLimit = r.number(*layer, "swiglu_limit", w);
    l.dtype = r.str(*layer, "dtype", w);
    if (layer->contains("expert_dtype"))
      l.expertDtype = r.str(*layer, "expert_dtype", w);
    if (layer->contains("fp8_scaling"))
      l.fp8Scaling = r.str(*layer, "fp8_scaling", w);
    l.alignment = r.integer(*layer, "alignment", w);
  }
  auto readTensors = [&](const char *key, std::vector<TensorSpec> &out) {
    const json *list = r.array(root, key, "the manifest");
    if (!list)
      return;
    for (const json &item : *list) {
      TensorSpec t;
      t.name = r.str(item, "name", key);
      t.dtype = r.dtype(item, key);
      t.shape = r.shape(item, key);
      out.push_back(std::move(t));
    }
  };
  readTensors("inputs", m.inputs);
  readTensors("outputs", m.outputs);
  if (const json *params = r.array(root, "parameters", "the manifest")) {
    for (const json &item : *params) {
      ParameterSpec p;
      p.role = r.str(item, "role", "parameters");
      p.name = r.str(item, "name", "parameters");
      p.stack = r.integer(item, "stack", "parameters");
      // A slice of a fused tensor; absent: the whole tensor.
      if (item.is_object() && item.contains("parts")) {
        p.part = r.integer(item, "part", "parameters");
        p.parts = r.integer(item, "parts", "parameters");
      }
      if (item.is_object() && item.contains("transposed"))
        p.transposed = r.boolean(item, "transposed", "parameters");
      if (item.is_object() && item.contains("flat"))
        p.flat = r.boolean(item, "flat", "parameters");
      if (item.is_object() && item.contains("interleaved"))
        p.interleaved = r.boolean(item, "interleaved", "parameters");
      p.dtype = r.dtype(item, "parameters");
      p.shape = r.shape(item, "parameters");
      m.parameters.push_back(std::move(p));
    }
  }
  if (const json *schedule = r.array(root, "schedule", "the manifest"))
    for (const json &step : *schedule) {
      if (!step.is_string()) {
        r.error = "expected the schedule's steps to be strings";
        break;
      }
      m.schedule.push_back(step.get<std::string>());
    }
  if (m.target == "sm_90a" && r.error.empty())
    readGpuProgram(r, root, m.gpu);
  auto readEntryPoint = [&](const json &from, TrainSpec &spec, const char *what,
                            const char *argument) {
    spec.entry = r.str(from, "entry", what);
    checkEntryName(r, spec.entry, what, /*allowEmpty=*/false);
    if (const json *list = r.array(from, "arguments", what))
      for (const json &item : *list) {
        TrainArgumentSpec a;
        a.name = r.str(item, "name", argument);
        a.output = r.boolean(item, "output", argument);
        a.dtype = r.dtype(item, argument);
        a.shape = r.shape(item, argument);
        spec.arguments.push_back(std::move(a));
      }
  };
  if (root.is_object() && root.contains("backward") && r.error.empty())
    readEntryPoint(root["backward"], m.backward, "the backward pass",
                   "a backward argument");
  if (root.is_object() && root.contains("train") && r.error.empty()) {
    const json &train = root["train"];
    readEntryPoint(train, m.train, "the training step", "a training argument");
    if (train.is_object() && train.contains("update") && r.error.empty()) {
      m.train.update = std::make_shared<TrainSpec>();
      readEntryPoint(train["update"], *m.train.update, "the training update",
                     "a training update argument");
    }
    if (train.is_object() && train.contains("state")) {
      std::string state = r.str(train, "state", "the training step");
      if (state == "device")
        m.train.stateOnDevice = true;
      else if (r.error.empty())
        r.error = "the training step's state must be \"device\" when "
                  "given, got \"" +
                  state + "\"";
    }
  }
  if (!r.error.empty())
    return Expected<Manifest>::error("invalid manifest: " + r.error);
  return m;
}

//===----------------------------------------------------------------------===//
// Container
//===----------------------------------------------------------------------===//

static void putU32(std::vector<uint8_t> &out, uint32_t v) {
  for (int i = 0; i < 4; ++i)
    out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
static void putU64(std::vector<uint8_t> &out, uint64_t v) {
  for (int i = 0; i < 8; ++i)
    out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
static uint64_t getLE(const uint8_t *p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i)
    v = (v << 8) | p[i];
  return v;
}

std::vector<uint8_t> serializeBundle(const Bundle &bundle) {
  std::string manifest = serializeManifest(bundle.manifest);
  std::vector<uint8_t> out(kMagic, kMagic + 8);
  putU32(out, kBundleFormatVersion);
  putU32(out, 0);
  putU64(out, manifest.size());
  putU64(out, bundle.blobs.size());
  for (const auto &blob : bundle.blobs)
    putU64(out, blob.size());
  out.insert(out.end(), manifest.begin(), manifest.end());
  for (const auto &blob : bundle.blobs)
    out.insert(out.end(), blob.begin(), blob.end());
  putU64(out, fnv1a64(out.data(), out.size()));
  return out;
}

Expected<bool> hostRunsLevel(const std::string &level) {
  // Levels in kHostCpuLevels order: a cap admits itself and those after.
  int want = hostCpuLevelRank(level);
  if (want < 0)
    return Expected<bool>::error("unknown host CPU level '" + level + "'");
  if (const char *cap = std::getenv("MOE_HOST_ISA"); cap && *cap) {
    int limit = hostCpuLevelRank(cap);
    if (limit < 0)
      return Expected<bool>::error("MOE_HOST_ISA must be " +
                                   hostCpuLevelList(" or ") +
                                   " (the most the runtime may use), got '" +
                                   cap + "'");
    if (want < limit)
      return false;
  }
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (level == "x86-64-v4")
    return __builtin_cpu_supports("x86-64-v4") != 0;
  if (level == "x86-64-v3")
    return __builtin_cpu_supports("x86-64-v3") != 0;
  return true;
#else
  return false;
#endif
}

Expected<Bundle> parseBundle(const std::vector<uint8_t> &bytes,
                             const std::string &name) {
  auto fail = [&](const std::string &what) {
    return Expected<Bundle>::error(name + ": invalid bundle: " + what);
  };
  const size_t fixed = 8 + 4 + 4 + 8 + 8;
  if (bytes.size() < fixed + 8)
    return fail("file of " + std::to_string(bytes.size()) +
                " bytes is too short for a bundle header");
  if (std::memcmp(bytes.data(), kMagic, 8) != 0)
    return fail("wrong magic (not a moe-compiler bundle)");
  uint32_t version = static_cast<uint32_t>(getLE(bytes.data() + 8, 4));
  if (version != kBundleFormatVersion)
    return fail("format version " + std::to_string(version) +
                ", this runtime reads version " +
                std::to_string(kBundleFormatVersion));
  if (uint32_t flags = static_cast<uint32_t>(getLE(bytes.data() + 12, 4));
      flags != 0)
    return fail("header flags 0x" + hex32(flags) +
                ", this runtime knows no flags (the format requires 0)");
  uint64_t stored = getLE(bytes.data() + bytes.size() - 8, 8);
  if (stored != fnv1a64(bytes.data(), bytes.size() - 8))
    return fail("checksum mismatch (the file is corrupt or truncated)");
  uint64_t manifestSize = getLE(bytes.data() + 16, 8);
  uint64_t blobCount = getLE(bytes.data() + 24, 8);
  if (blobCount > kMaxBlobs)
    return fail("blob count " + std::to_string(blobCount) + " exceeds " +
                std::to_string(kMaxBlobs));
  size_t headerEnd = fixed + 8 * blobCount;
  size_t payloadEnd = bytes.size() - 8;
  if (headerEnd > payloadEnd)
    return fail("blob table runs past the end of the file");
  uint64_t total = manifestSize;
  std::vector<uint64_t> sizes;
  for (uint64_t i = 0; i < blobCount; ++i) {
    sizes.push_back(getLE(bytes.data() + fixed + 8 * i, 8));
    if (__builtin_add_overflow(total, sizes.back(), &total))
      return fail("section sizes overflow");
  }
  if (total != payloadEnd - headerEnd)
    return fail("section sizes add up to " + std::to_string(total) +
                " bytes, the file holds " +
                std::to_string(payloadEnd - headerEnd));
  Bundle bundle;
  const char *manifestBegin =
      reinterpret_cast<const char *>(bytes.data() + headerEnd);
  Expected<Manifest> manifest =
      parseManifest(std::string(manifestBegin, manifestSize));
  if (!manifest)
    return fail(manifest.message());
  bundle.manifest = std::move(*manifest);
  if (!bundle.manifest.hostCpus.empty() &&
      bundle.manifest.hostCpus.size() != blobCount)
    return fail("the manifest lists " +
                std::to_string(bundle.manifest.hostCpus.size()) +
                " host CPU levels for " + std::to_string(blobCount) +
                " code blobs");
  size_t offset = headerEnd + manifestSize;
  for (uint64_t size : sizes) {
    bundle.blobs.emplace_back(
        bytes.begin() + static_cast<std::ptrdiff_t>(offset),
        bytes.begin() + static_cast<std::ptrdiff_t>(offset + size));
    offset += size;
  }
  return bundle;
}

Expected<Bundle> readBundle(const std::string &path) {
  Expected<std::vector<uint8_t>> bytes = readFile(path);
  if (!bytes)
    return Expected<Bundle>::error(bytes.message());
  return parseBundle(*bytes, path);
}

Status writeBundle(const std::string &path, const Bundle &bundle) {
  std::vector<uint8_t> bytes = serializeBundle(bundle);
  return writeFileAtomically(path, bytes.data(), bytes.size());
}

Expected<std::string> checkpointPrefixOf(const Manifest &manifest,
                                         int64_t layer) {
  using Result = Expected<std::string>;
  if (manifest.checkpointPrefix.empty())
    return Result::error(
        "this bundle does not record where its layers are in the model's "
        "checkpoints (it was compiled from a .mlir file, or from a "
        "multimodal config's text_config): name the layer's tensors with "
        "--weights-prefix instead of --layer");
  const std::vector<int64_t> &moe = manifest.moeLayers;
  if (layer < 0 ||
      (!moe.empty() && std::find(moe.begin(), moe.end(), layer) == moe.end())) {
    std::string which;
    // The MoE layers as ranges: "3-60", "1, 3, 5-7".
    for (size_t i = 0; i < moe.size();) {
      size_t j = i;
      while (j + 1 < moe.size() && moe[j + 1] == moe[j] + 1)
        ++j;
      which += (which.empty() ? "" : ", ") + std::to_string(moe[i]) +
               (j > i ? "-" + std::to_string(moe[j]) : "");
      i = j + 1;
    }
    return Result::error(
        "layer " + std::to_string(layer) +
        " is not an MoE layer of this model" +
        (which.empty() ? std::string() : " (its MoE layers: " + which + ")"));
  }
  std::string prefix = manifest.checkpointPrefix;
  size_t at = prefix.find("{layer}");
  if (at != std::string::npos)
    prefix.replace(at, 7, std::to_string(layer));
  return prefix;
}

} // namespace moe::rt
