//===- moe-run.cpp - Run a compiled MoE layer -----------------------------===//
//
// Part of moe-compiler. Links only the runtime (no LLVM/MLIR).
//
//===----------------------------------------------------------------------===//

#include "ToolSupport.h"
#include "moe/runtime/Comm.h"
#include "moe/runtime/Layer.h"
#include "moe/runtime/Train.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>

using namespace moe::rt;
using moe::tools::die;
using moe::tools::flag;
using moe::tools::loadWeightsOrDie;

const char *const moe::tools::kToolName = "moe-run";

static const char kUsage[] =
    "usage: moe-run BUNDLE [options]\n"
    "\n"
    "Runs a bundle written by moe-compile on safetensors inputs and weights\n"
    "(or seeded random ones) and writes safetensors outputs.\n"
    "\n"
    "  --device=D               host (host bundles) or cuda (sm_90a\n"
    "                           bundles on GPU 0) (host)\n"
    "  --weights=FILE           weights, named as in the model family's\n"
    "                           checkpoints (gate.weight, experts.{i}...):\n"
    "                           a safetensors file, a sharded\n"
    "                           checkpoint's model.safetensors.index.json\n"
    "                           or the model's directory (its index)\n"
    "  --weights-prefix=P       prefix of the layer's names in FILE, e.g.\n"
    "                           model.layers.3.mlp.\n"
    "  --layer=N                the model's layer N (bundles compiled from\n"
    "                           a config.json know where it is and which\n"
    "                           layers are MoE layers)\n"
    "  --random-weights         seeded uniform weights instead of a file\n"
    "  --inputs=FILE            tensor 'x' [T, hidden] (f32, bf16 or f16)\n"
    "  --tokens=T               random input of T tokens instead of a file\n"
    "  --seed=N                 seed of random weights and inputs (0)\n"
    "  --outputs=FILE           write y, topk_ids, topk_weights\n"
    "  --save-weights=FILE      write the weights used (with "
    "--random-weights)\n"
    "  --save-inputs=FILE       write the input used (with --tokens)\n"
    "  --warm-tokens=T,T,...    first, one pass of random tokens for each\n"
    "                           count (a serving mix; untimed, their\n"
    "                           outputs dropped); with --activity each\n"
    "                           one's driver work is printed (cuda: a pass\n"
    "                           replays the graph of its count's bucket)\n"
    "  --repeat=N               run N times and report the median (1);\n"
    "                           with N > 1 after one untimed warm-up\n"
    "  --threads=N              host: threads of the compiled code\n"
    "                           ($MOE_NUM_THREADS, else the cores shared\n"
    "                           among this node's ranks); any count gives\n"
    "                           the same results to the bit\n"
    "  --dump-buffers=FILE      cuda: write every device buffer after the\n"
    "                           last pass (to check each kernel alone)\n"
    "  --profile                cuda: per-kernel device times (CUDA events),\n"
    "                           median over the repeats, after one warm-up\n"
    "  --activity               cuda: what the driver was asked in the first\n"
    "                           and the last pass: launches, graph launches,\n"
    "                           host waits, allocations, bytes copied (the\n"
    "                           first captures the pass's CUDA graph; later\n"
    "                           ones replay it); --profile prints it too\n"
    "  --trace=FILE             cuda: write a Chrome trace (Perfetto) of the\n"
    "                           passes: kernels on the compute stream and\n"
    "                           exchanges on the communication stream, as\n"
    "                           the device timed them (after one warm-up)\n"
    "  --timeout=SECONDS        limit of every collective (300)\n"
    "  --allow-nonfinite        accept NaN or Inf in the outputs (a warning\n"
    "                           instead of an error, and --outputs written)\n"
    "\n"
    "A bundle compiled with --ep=N runs under mpirun -np N moe-run ...: the\n"
    "tokens (--tokens or --inputs) are split evenly over the ranks, each\n"
    "rank holds its experts, rank 0 prints, and with several ranks every\n"
    "rank writes its own --outputs file, named with .rankR before the\n"
    "extension.\n";

static int64_t parseInt(const std::string &text, const char *what) {
  char *end = nullptr;
  errno = 0;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0 || v < 0)
    die(std::string("expected a non-negative integer for ") + what + ", got '" +
        text + "'");
  return v;
}

int main(int argc, char **argv) {
  moe::tools::installOutOfMemoryHandler();
  std::string dumpBuffers, tracePath;
  std::string bundlePath, device = "host", weights, prefix, inputs, outputs,
                          saveWeights, saveInputs, value;
  bool randomWeights = false, profile = false, allowNonFinite = false,
       activity = false;
  int64_t tokens = -1, repeat = 1, threads = 0;
  std::vector<int64_t> warmTokens;
  uint64_t seed = 0;
  double timeout = 300;
  int64_t checkpointLayer = -1;
  for (int i = 1; i < argc; ++i) {
    const char *a = argv[i];
    if (!std::strcmp(a, "--help") || !std::strcmp(a, "-h")) {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (!std::strcmp(a, "--version")) {
      moe::tools::printVersion();
      return 0;
    }
    if (flag(argc, argv, i, "--device", &device) ||
        flag(argc, argv, i, "--weights", &weights) ||
        flag(argc, argv, i, "--weights-prefix", &prefix) ||
        flag(argc, argv, i, "--inputs", &inputs) ||
        flag(argc, argv, i, "--outputs", &outputs) ||
        flag(argc, argv, i, "--save-weights", &saveWeights) ||
        flag(argc, argv, i, "--save-inputs", &saveInputs) ||
        flag(argc, argv, i, "--dump-buffers", &dumpBuffers) ||
        flag(argc, argv, i, "--trace", &tracePath))
      continue;
    if (flag(argc, argv, i, "--random-weights", nullptr)) {
      randomWeights = true;
    } else if (flag(argc, argv, i, "--allow-nonfinite", nullptr)) {
      allowNonFinite = true;
    } else if (flag(argc, argv, i, "--layer", &value)) {
      checkpointLayer = parseInt(value, "--layer");
    } else if (flag(argc, argv, i, "--tokens", &value)) {
      tokens = parseInt(value, "--tokens");
    } else if (flag(argc, argv, i, "--warm-tokens", &value)) {
      for (size_t at = 0;;) {
        size_t comma = value.find(',', at);
        std::string item = value.substr(at, comma - at);
        int64_t t = parseInt(item, "an entry of --warm-tokens");
        if (t < 1)
          die("--warm-tokens takes token counts of 1 or more, got '" + item +
              "'");
        warmTokens.push_back(t);
        if (comma == std::string::npos)
          break;
        at = comma + 1;
      }
    } else if (flag(argc, argv, i, "--seed", &value)) {
      seed = static_cast<uint64_t>(parseInt(value, "--seed"));
    } else if (flag(argc, argv, i, "--timeout", &value)) {
      timeout = static_cast<double>(parseInt(value, "--timeout"));
      if (timeout < 1)
        die("expected --timeout >= 1");
    } else if (flag(argc, argv, i, "--profile", nullptr)) {
      profile = true;
    } else if (flag(argc, argv, i, "--activity", nullptr)) {
      activity = true;
    } else if (flag(argc, argv, i, "--threads", &value)) {
      threads = parseInt(value, "--threads");
      if (threads < 1 || threads > 4096)
        die("expected --threads from 1 to 4096");
    } else if (flag(argc, argv, i, "--repeat", &value)) {
      repeat = moe::tools::parseCount(value, "--repeat", 1,
                                      moe::tools::kMaxRepeats);
    } else if (a[0] == '-') {
      die(std::string("unknown option '") + a + "' (see --help)");
    } else if (bundlePath.empty()) {
      bundlePath = a;
    } else {
      die(std::string("unexpected argument '") + a + "' (see --help)");
    }
  }
  if (bundlePath.empty())
    die("no bundle given (see --help)");
  if (!tracePath.empty() && device != "cuda")
    die("--trace needs --device=cuda");
  if (weights.empty() == !randomWeights)
    die("give exactly one of --weights=FILE and --random-weights");
  if (randomWeights && (checkpointLayer >= 0 || !prefix.empty()))
    die("--layer and --weights-prefix name the tensors of --weights; not "
        "with --random-weights");
  if (inputs.empty() == (tokens < 0))
    die("give exactly one of --inputs=FILE and --tokens=T");

  Expected<std::unique_ptr<Layer>> loaded = Layer::load(bundlePath, device);
  if (!loaded)
    die(loaded.message());
  Layer &layer = **loaded;
  if (threads > 0)
    layer.getBackend().setThreads(static_cast<int>(threads));
  const Manifest &m = layer.getManifest();
  Expected<std::unique_ptr<Communicator>> communicator =
      createCommunicator(timeout);
  if (!communicator)
    die(communicator.message());
  Communicator &comm = **communicator;
  if (Status s = layer.setCommunicator(&comm); !s.ok())
    die(s.error);
  bool leader = comm.rank() == 0;

  if (randomWeights) {
    layer.randomWeights(seed);
    if (!saveWeights.empty())
      if (Status s = writeSafetensors(saveWeights, layer.namedParameters());
          !s.ok())
        die(s.error);
  } else {
    loadWeightsOrDie(layer, weights, prefix, checkpointLayer);
  }

  Tensor x;
  if (!inputs.empty()) {
    Expected<SafetensorsFile> file = SafetensorsFile::open(inputs);
    if (!file)
      die(file.message());
    Expected<Tensor> t = file->get("x");
    if (!t)
      die(t.message());
    x = std::move(*t);
  } else {
    // Checked before the tokens are generated (the layer checks again).
    if (tokens > m.maxTokens)
      die("input 'x' has " + std::to_string(tokens) +
          " tokens, the bundle was compiled for at most " +
          std::to_string(m.maxTokens) + " (--max-tokens)");
    Random rng(seed ^ moe::tools::kTokenSeedSalt);
    x = moe::tools::randomTokens(rng, tokens, m.layer.hidden);
    if (!saveInputs.empty())
      if (Status s = writeSafetensors(saveInputs, {{"x", x}}); !s.ok())
        die(s.error);
  }

  // Several ranks: each runs its share of the (global) tokens.
  if (x.shape.size() == 2 && x.shape[0] % comm.size() != 0)
    die("the " + std::to_string(x.shape[0]) +
        " tokens do not split evenly over " + std::to_string(comm.size()) +
        " ranks");
  if (x.shape.size() == 2)
    x = moe::tools::rankRows(std::move(x), comm);

  std::vector<double> seconds;
  Expected<ForwardResult> result = ForwardResult{};
  std::map<std::string, std::vector<float>> kernelTimes;
  std::vector<std::string> kernelOrder;
  std::set<std::string> exchanges; // of kernelOrder: on the communication stream
  Trace trace;
  int passLane = -1;
  if (!tracePath.empty()) {
    profile = true;
    passLane = trace.lane("forward passes (host)");
    trace.addDeviceLanes();
  }
  if (profile && device != "cuda")
    die("--profile needs --device=cuda");
  if (activity && device != "cuda")
    die("--activity needs --device=cuda");
  activity = activity || profile;
  // What the driver was asked in the first pass (warm-up or not) and in
  // the last.
  DeviceActivity firstActivity, lastActivity;
  bool firstCounted = false;
  auto countedForward = [&]() {
    DeviceActivity before = layer.activity();
    Expected<ForwardResult> r = layer.forward(x);
    lastActivity = layer.activity() - before;
    if (!firstCounted)
      firstActivity = lastActivity;
    firstCounted = true;
    return r;
  };
  // The serving mix first, each count's tokens split over the ranks.
  for (int64_t t : warmTokens) {
    if (t > m.maxTokens)
      die("--warm-tokens: " + std::to_string(t) +
          " tokens, the bundle was compiled for at most " +
          std::to_string(m.maxTokens) + " (--max-tokens)");
    if (t % comm.size() != 0)
      die("--warm-tokens: " + std::to_string(t) +
          " tokens do not split evenly over " + std::to_string(comm.size()) +
          " ranks");
    Random rng(seed ^ moe::tools::kTokenSeedSalt ^ static_cast<uint64_t>(t));
    Tensor warm = moe::tools::rankRows(
        moe::tools::randomTokens(rng, t, m.layer.hidden), comm);
    DeviceActivity before = layer.activity();
    if (Expected<ForwardResult> r = layer.forward(warm); !r)
      die(r.message());
    if (activity && leader)
      std::printf("moe-run: driver, warm pass of %lld tokens: %s\n",
                  static_cast<long long>(t),
                  (layer.activity() - before).describe().c_str());
  }
  // One pass before the timed ones (first-touch page faults, the OpenMP
  // threads' start, the GPU's clocks), when there is more than one or a
  // profile.
  if (profile || repeat > 1)
    if (Expected<ForwardResult> warm = countedForward(); !warm)
      die(warm.message());
  if (profile)
    layer.setProfiling(true);
  for (int64_t r = 0; r < repeat; ++r) {
    double began = trace.now();
    auto start = std::chrono::steady_clock::now();
    result = countedForward();
    auto end = std::chrono::steady_clock::now();
    if (!result)
      die(result.message());
    seconds.push_back(std::chrono::duration<double>(end - start).count());
    std::string label = "pass " + std::to_string(r + 1);
    if (passLane >= 0) {
      trace.add(passLane, label, began, seconds.back());
      trace.addDeviceProfile(layer.lastProfile(), label, began);
    }
    for (const KernelTime &k : layer.lastProfile()) {
      if (!kernelTimes.count(k.kernel))
        kernelOrder.push_back(k.kernel);
      if (k.exchange)
        exchanges.insert(k.kernel);
      kernelTimes[k.kernel].push_back(k.milliseconds);
    }
  }
  for (const std::string &kernel : kernelOrder) {
    std::vector<float> &t = kernelTimes[kernel];
    std::sort(t.begin(), t.end());
    if (leader)
      std::printf("moe-run: %s %-18s %10.4f ms (median of %zu)\n",
                  exchanges.count(kernel) ? "exchange" : "kernel",
                  kernel.c_str(), t[t.size() / 2], t.size());
  }
  if (std::string how = layer.getBackend().exchangeTransport();
      (activity || profile) && leader && !how.empty())
    std::printf("moe-run: exchanges: %s\n", how.c_str());
  if (activity && leader) {
    std::printf("moe-run: driver, first pass: %s\n",
                firstActivity.describe().c_str());
    std::printf("moe-run: driver, last pass: %s\n",
                lastActivity.describe().c_str());
  }
  if (!tracePath.empty())
    if (Status s = trace.write(moe::tools::rankPath(tracePath, comm)); !s.ok())
      die(s.error);
  std::sort(seconds.begin(), seconds.end());
  double median = seconds[seconds.size() / 2];

  if (!dumpBuffers.empty()) {
    if (device != "cuda")
      die("--dump-buffers needs --device=cuda");
    Expected<std::map<std::string, Tensor>> dumped = layer.dumpBuffers();
    if (!dumped)
      die(dumped.message());
    if (Status s = writeSafetensors(dumpBuffers, *dumped); !s.ok())
      die(s.error);
  }

  // NaN or Inf in the outputs is an error unless asked for: a pipeline
  // must not take them for a result.
  int64_t bad = 0, firstToken = -1;
  std::string firstName;
  for (auto [name, tensor] :
       {std::pair<const char *, const Tensor *>{"y", &result->y},
        {"topk_weights", &result->topkWeights}}) {
    const float *v = tensor->as<float>();
    int64_t width = tensor->shape.size() == 2 ? tensor->shape[1] : 1;
    for (int64_t i = 0, n = tensor->numElements(); i < n; ++i) {
      if (std::isfinite(v[i]))
        continue;
      ++bad;
      if (firstToken < 0 || i / width < firstToken) {
        firstToken = i / width;
        firstName = name;
      }
    }
  }
  if (bad && !allowNonFinite)
    die(std::to_string(bad) + " non-finite value(s) in the outputs (first "
        "in '" + firstName + "' of token " + std::to_string(firstToken) +
        (comm.size() > 1 ? " of rank " + std::to_string(comm.rank()) : "") +
        "); nothing written (--allow-nonfinite accepts them)");
  if (bad && leader)
    std::fprintf(stderr,
                 "moe-run: warning: %lld non-finite value(s) in the outputs "
                 "(first in '%s' of token %lld)\n",
                 static_cast<long long>(bad), firstName.c_str(),
                 static_cast<long long>(firstToken));

  if (!outputs.empty()) {
    std::map<std::string, Tensor> out = {{"y", result->y},
                                         {"topk_ids", result->topkIds},
                                         {"topk_weights", result->topkWeights}};
    if (Status s = writeSafetensors(moe::tools::rankPath(outputs, comm), out);
        !s.ok())
      die(s.error);
  }

  // Useful work per token: router, k experts (gate, up, down), shared FFN.
  const LayerSpec &l = m.layer;
  double flopsPerToken = 2.0 * l.hidden * l.experts +
                         6.0 * l.topK * l.hidden * l.ffn +
                         6.0 * l.hidden * l.sharedExperts * l.sharedFfn;
  double t = static_cast<double>(x.shape[0]) * comm.size();
  if (!leader)
    return 0;
  std::string variant = layer.getBackend().codeVariant();
  std::string where =
      variant.empty() ? device : device + " (" + variant + " code)";
  std::printf("moe-run: %lld tokens on %s in %.3f ms (median of %lld): "
              "%.1f tokens/s, %.2f GFLOP/s\n",
              static_cast<long long>(x.shape[0] * comm.size()), where.c_str(),
              median * 1e3, static_cast<long long>(repeat),
              median > 0 ? t / median : 0.0,
              median > 0 ? t * flopsPerToken / median / 1e9 : 0.0);
  return 0;
}
