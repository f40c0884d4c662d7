//===- moe-train.cpp - Train an MoE layer ---------------------------------===//
//
// Part of moe-compiler. Runs the training step of a bundle compiled with
// `moe-compile --train`: a student layer learns to reproduce a fixed random
// teacher layer of the same config on fresh random inputs each step (MSE
// loss), or trains on a batch the user brings.
//
//===----------------------------------------------------------------------===//

#include "ToolSupport.h"
#include "moe/runtime/Comm.h"
#include "moe/runtime/Layer.h"
#include "moe/runtime/Safetensors.h"
#include "moe/runtime/Train.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

using namespace moe::rt;
using moe::tools::die;
using moe::tools::flag;
using moe::tools::kTokenSeedSalt;
using moe::tools::loadWeightsOrDie;
using moe::tools::parseCount;
using moe::tools::parseNumber;
using moe::tools::randomTokens;
using moe::tools::rankPath;
using moe::tools::rankRows;

const char *const moe::tools::kToolName = "moe-train";

static const char kUsage[] =
    "usage: moe-train BUNDLE --steps=N [options]\n"
    "\n"
    "Trains the layer of a bundle compiled with moe-compile --train:\n"
    "a student layer learns a fixed random teacher layer of the same config\n"
    "on fresh random tokens each step (MSE loss), or the batch of --inputs.\n"
    "Prints step, loss, tokens/s and the load balance (max / mean tokens\n"
    "per expert) of every step.\n"
    "\n"
    "  --steps=N                steps to run\n"
    "  --device=D               host (host bundles, the default) or cuda\n"
    "                           (sm_90a bundles, on GPU 0)\n"
    "  --lr=LR                  AdamW learning rate (1e-3)\n"
    "  --seed=S                 seed of the student, teacher and tokens (0)\n"
    "  --tokens=T               tokens per step (64)\n"
    "  --weights=FILE           student weights instead of random ones (a\n"
    "                           safetensors file, an index or a model's\n"
    "                           directory, as moe-run reads them)\n"
    "  --weights-prefix=P       prefix of the layer's names in FILE\n"
    "  --layer=N                the model's layer N in FILE (a safetensors\n"
    "                           file or a model.safetensors.index.json)\n"
    "  --inputs=FILE            train on tensors x and target [T, hidden]\n"
    "  --weight-decay=W         AdamW weight decay (0)\n"
    "  --bias-update=GAMMA      auxiliary-loss-free bias update rate (1e-3;\n"
    "                           0 disables)\n"
    "  --checkpoint=DIR         write checkpoints (weights, optimizer state,\n"
    "                           bias, step, input stream) under DIR\n"
    "  --checkpoint-every=K     every K steps (and after the last step)\n"
    "  --resume=DIR             continue from the newest valid checkpoint in\n"
    "                           DIR (bit-identical to an unbroken run); a\n"
    "                           damaged newer one is reported, set aside\n"
    "                           and skipped\n"
    "  --resume-strict          with --resume: a damaged newest checkpoint\n"
    "                           is an error instead\n"
    "  --keep-checkpoints=N     keep only the newest N checkpoints of the run\n"
    "                           (0, the default: keep all)\n"
    "  --on-nonfinite=P         a step whose loss, gradient norm or update\n"
    "                           is not finite: stop (the default; exit 1\n"
    "                           before any checkpoint of it) or skip-step\n"
    "                           (leave the state unchanged and go on)\n"
    "  --trace=FILE             write a Chrome trace (Perfetto) of the run:\n"
    "                           inputs, the teacher's forward pass, the\n"
    "                           compiled step and checkpoints, per step\n"
    "  --activity               cuda: what the driver was asked in each step:\n"
    "                           launches, graph launches, host waits,\n"
    "                           allocations, bytes copied each way\n"
    "  --dump-grads=FILE        write the first step's gradients (before its\n"
    "                           update) under checkpoint names, plus x\n"
    "  --dump-buffers=FILE      cuda: write every device buffer of the\n"
    "                           schedule after the first step (its\n"
    "                           intermediates: codes, scales, gradients)\n"
    "  --save-weights=FILE      write the student's weights at the end\n"
    "  --threads=N              host: threads of the compiled code\n"
    "                           ($MOE_NUM_THREADS, else the cores shared\n"
    "                           among this node's ranks); any count gives\n"
    "                           the same results to the bit\n"
    "  --timeout=SECONDS        limit of every collective (300): a rank\n"
    "                           that died or hangs ends the job\n"
    "\n"
    "Expert parallelism: compile with --ep=N and run\n"
    "  mpirun -np N moe-train BUNDLE ...\n"
    "(several nodes: the same command with --hostfile FILE; checkpoints need\n"
    "a directory every rank sees). --tokens and --inputs give the global\n"
    "batch, split evenly over the ranks. Rank 0 prints; in a job of several\n"
    "ranks each rank writes its own --dump-grads, --trace and\n"
    "--save-weights file, named with .rankR before the extension.\n";

/// A test hook: MOE_TEST_FAULT=kill:R:S or hang:R:S makes rank R die (by
/// SIGKILL) or hang when it reaches step S, to check that the other ranks
/// give up.
static void injectFault(const Communicator &c, int64_t step) {
  const char *spec = std::getenv("MOE_TEST_FAULT");
  if (!spec)
    return;
  char kind[8] = {0};
  int rank = -1;
  long long at = -1;
  if (std::sscanf(spec, "%7[a-z]:%d:%lld", kind, &rank, &at) != 3 ||
      rank != c.rank() || at != step)
    return;
  if (!std::strcmp(kind, "kill")) {
    std::fprintf(stderr, "moe-train: rank %d: MOE_TEST_FAULT: killed\n", rank);
    std::fflush(stderr);
    std::raise(SIGKILL);
  }
  if (!std::strcmp(kind, "hang"))
    for (;;)
      std::this_thread::sleep_for(std::chrono::seconds(1));
}

int main(int argc, char **argv) {
  moe::tools::installOutOfMemoryHandler();
  std::string bundlePath, weights, prefix, inputs, dumpGrads, saveWeights;
  std::string dumpBuffers;
  std::string checkpointDir, resumeDir, tracePath, device = "host";
  std::string onNonFinite = "stop";
  int64_t steps = -1, tokens = 64, checkpointEvery = 0, keepCheckpoints = 0;
  bool resumeStrict = false, activity = false;
  uint64_t seed = 0;
  double timeout = 300;
  int threads = 0; // the backend's default
  int64_t checkpointLayer = -1;
  TrainOptions options;
  for (int i = 1; i < argc; ++i) {
    std::string value;
    const char *a = argv[i];
    if (!std::strcmp(a, "--help") || !std::strcmp(a, "-h")) {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (!std::strcmp(a, "--version")) {
      moe::tools::printVersion();
      return 0;
    }
    if (flag(argc, argv, i, "--weights", &weights) ||
        flag(argc, argv, i, "--weights-prefix", &prefix) ||
        flag(argc, argv, i, "--inputs", &inputs) ||
        flag(argc, argv, i, "--dump-grads", &dumpGrads) ||
        flag(argc, argv, i, "--dump-buffers", &dumpBuffers) ||
        flag(argc, argv, i, "--save-weights", &saveWeights) ||
        flag(argc, argv, i, "--checkpoint", &checkpointDir) ||
        flag(argc, argv, i, "--resume", &resumeDir) ||
        flag(argc, argv, i, "--trace", &tracePath) ||
        flag(argc, argv, i, "--on-nonfinite", &onNonFinite) ||
        flag(argc, argv, i, "--device", &device))
      continue;
    if (flag(argc, argv, i, "--activity", nullptr))
      activity = true;
    else if (flag(argc, argv, i, "--resume-strict", nullptr))
      resumeStrict = true;
    else if (flag(argc, argv, i, "--steps", &value))
      steps = parseCount(value, "--steps", 1, kMaxStep);
    else if (flag(argc, argv, i, "--keep-checkpoints", &value))
      keepCheckpoints = parseCount(value, "--keep-checkpoints");
    else if (flag(argc, argv, i, "--checkpoint-every", &value))
      checkpointEvery = parseCount(value, "--checkpoint-every");
    else if (flag(argc, argv, i, "--tokens", &value))
      tokens = parseCount(value, "--tokens");
    else if (flag(argc, argv, i, "--layer", &value))
      checkpointLayer = parseCount(value, "--layer");
    else if (flag(argc, argv, i, "--seed", &value))
      seed = static_cast<uint64_t>(parseCount(value, "--seed"));
    else if (flag(argc, argv, i, "--lr", &value))
      options.learningRate =
          static_cast<float>(parseNumber(value, "--lr", 0, 10));
    else if (flag(argc, argv, i, "--weight-decay", &value))
      options.weightDecay =
          static_cast<float>(parseNumber(value, "--weight-decay", 0, 1));
    else if (flag(argc, argv, i, "--timeout", &value))
      timeout = parseNumber(value, "--timeout", 0.001, 1e6);
    else if (flag(argc, argv, i, "--threads", &value)) {
      threads = static_cast<int>(parseCount(value, "--threads"));
      if (threads < 1 || threads > 4096)
        die("expected --threads from 1 to 4096, got '" + value + "'");
    }
    else if (flag(argc, argv, i, "--bias-update", &value))
      options.biasUpdateRate =
          static_cast<float>(parseNumber(value, "--bias-update", 0, 1));
    else if (a[0] != '-' && bundlePath.empty())
      bundlePath = a;
    else
      die(std::string("unexpected argument '") + a + "' (see --help)");
  }
  if (bundlePath.empty())
    die("no bundle given (see --help)");
  if (steps < 1)
    die("give the number of steps (--steps=N, N >= 1)");
  if (tokens < 1)
    die("--tokens must be at least 1");
  if (checkpointEvery > 0 && checkpointDir.empty())
    die("--checkpoint-every needs --checkpoint=DIR");
  if (keepCheckpoints > 0 && checkpointDir.empty())
    die("--keep-checkpoints needs --checkpoint=DIR");
  if (resumeStrict && resumeDir.empty())
    die("--resume-strict needs --resume=DIR");
  if (activity && device != "cuda")
    die("--activity needs --device=cuda");
  if (!dumpBuffers.empty() && device != "cuda")
    die("--dump-buffers needs --device=cuda");
  if (onNonFinite != "stop" && onNonFinite != "skip-step")
    die("unknown --on-nonfinite '" + onNonFinite +
        "' (expected stop or skip-step)");

  Expected<std::unique_ptr<Communicator>> communicator =
      createCommunicator(timeout);
  if (!communicator)
    die(communicator.message());
  Communicator &comm = **communicator;
  bool leader = comm.rank() == 0;

  Expected<std::unique_ptr<Layer>> student = Layer::load(bundlePath, device);
  if (!student)
    die(student.message());
  if (Status s = (*student)->setCommunicator(&comm); !s.ok())
    die(s.error);
  if (threads > 0)
    (*student)->getBackend().setThreads(threads);
  const Manifest &m = (*student)->getManifest();
  int64_t hidden = m.layer.hidden;
  if (weights.empty() && (checkpointLayer >= 0 || !prefix.empty()))
    die("--layer and --weights-prefix name the tensors of --weights");
  if (weights.empty()) {
    (*student)->randomWeights(seed);
  } else {
    loadWeightsOrDie(**student, weights, prefix, checkpointLayer);
  }
  Expected<std::unique_ptr<Trainer>> trainer = Trainer::create(**student);
  if (!trainer)
    die(trainer.message());

  // Either a fixed batch, or a teacher and fresh tokens every step.
  Tensor fixedX, fixedTarget;
  std::unique_ptr<Layer> teacher;
  if (!inputs.empty()) {
    Expected<SafetensorsFile> file = SafetensorsFile::open(inputs);
    if (!file)
      die(file.message());
    Expected<Tensor> x = file->get("x"), target = file->get("target");
    if (!x)
      die(x.message());
    if (!target)
      die(target.message());
    tokens = x->shape.size() == 2 ? x->shape[0] : 0;
    if (tokens % comm.size() != 0 || x->shape != target->shape)
      die(inputs + ": x and target must both be [T, " + std::to_string(hidden) +
          "] with T a multiple of the " + std::to_string(comm.size()) +
          " ranks");
    fixedX = rankRows(std::move(*x), comm);
    fixedTarget = rankRows(std::move(*target), comm);
  } else {
    Expected<std::unique_ptr<Layer>> t = Layer::load(bundlePath, device);
    if (!t)
      die(t.message());
    teacher = std::move(*t);
    if (Status s = teacher->setCommunicator(&comm); !s.ok())
      die(s.error);
    if (threads > 0)
      teacher->getBackend().setThreads(threads);
    teacher->randomWeights(seed ^ 0x7eac4e5ull);
  }
  if (tokens % comm.size() != 0)
    die("--tokens " + std::to_string(tokens) + " must be a multiple of the " +
        std::to_string(comm.size()) + " ranks");
  if (m.staticTokens && tokens != m.staticTokens * comm.size())
    die("the bundle's layer takes exactly " + std::to_string(m.staticTokens) +
        " tokens per rank (a static token count): give --tokens " +
        std::to_string(m.staticTokens * comm.size()));
  if (tokens / comm.size() > m.maxTokens)
    die("--tokens " + std::to_string(tokens) +
        (comm.size() > 1
             ? " (" + std::to_string(tokens / comm.size()) + " per rank)"
             : std::string()) +
        " exceeds the bundle's --max-tokens " + std::to_string(m.maxTokens));

  Random rng(seed ^ kTokenSeedSalt);
  // The checkpoint directory is this job's from here to the end: checked
  // and locked before any step runs (a second job on it stops here).
  CheckpointWriter checkpoints;
  if (!checkpointDir.empty())
    if (Status s = checkpoints.claim(checkpointDir, &comm); !s.ok())
      die(s.error);
  if (!resumeDir.empty()) {
    Expected<ValidCheckpoint> resumed =
        resumeCheckpoint(resumeDir, **trainer, &comm, resumeStrict);
    if (!resumed)
      die(resumed.message());
    if (leader)
      for (const ValidCheckpoint::Damaged &bad : resumed->damaged) {
        std::string where =
            bad.setAside.empty()
                ? "left in place: it could not be renamed: " + bad.notMoved
                : "set aside as " + bad.setAside;
        std::fprintf(stderr,
                     "moe-train: warning: skipping damaged checkpoint %s: %s "
                     "(%s)\n",
                     bad.path.c_str(), bad.why.c_str(), where.c_str());
      }
    rng.setState(resumed->stream);
    if (leader)
      std::printf("moe-train: resumed from %s (step %lld)\n",
                  resumed->path.c_str(),
                  static_cast<long long>((*trainer)->steps()));
    if ((*trainer)->steps() >= steps)
      die("the checkpoint is at step " +
          std::to_string((*trainer)->steps()) + ", and --steps " +
          std::to_string(steps) +
          " asks for no more: give a larger --steps to train further");
  }
  float firstLoss = 0, lastLoss = 0;
  int64_t skipped = 0;
  int64_t first = (*trainer)->steps() + 1;
  Trace trace;
  int dataLane = trace.lane("data (inputs, teacher)");
  int stepLane = trace.lane("training step (" + device + ")");
  // On the GPU: each kernel's and each exchange's span (CUDA events on
  // the device's clock), from the step's start, on its stream's lane.
  bool deviceTrace = device == "cuda" && !tracePath.empty();
  if (deviceTrace) {
    trace.addDeviceLanes();
    (*student)->getBackend().setProfiling(true);
  }
  int ioLane = trace.lane("checkpoints");
  std::string rank = "rank " + std::to_string(comm.rank());
  int codeLane = trace.lane("compiled code between collectives (" + rank + ")");
  int commLane = trace.lane("collectives (" + rank + ", " + comm.name() + ")");
  for (int64_t step = first; step <= steps; ++step) {
    injectFault(comm, step);
    std::string label = "step " + std::to_string(step);
    // The step's batch: fresh tokens and the teacher's output, or the
    // fixed batch (not copied).
    Tensor freshX, freshTarget;
    const Tensor *x = &fixedX, *target = &fixedTarget;
    double t0 = trace.now();
    if (teacher) {
      // Every rank draws the global batch, so the stream (and a resume)
      // does not depend on the number of ranks, and keeps its share.
      freshX = rankRows(randomTokens(rng, tokens, hidden), comm);
      double t1 = trace.now();
      trace.add(dataLane, label + ": tokens", t0, t1 - t0);
      Expected<ForwardResult> out = teacher->forward(freshX);
      if (!out)
        die(out.message());
      freshTarget = std::move(out->y);
      trace.add(dataLane, label + ": teacher forward", t1, trace.now() - t1);
      x = &freshX;
      target = &freshTarget;
    }
    auto start = std::chrono::steady_clock::now();
    double t2 = trace.now();
    DeviceActivity before = (*student)->activity();
    Expected<StepResult> result = (*trainer)->step(*x, *target, options);
    auto end = std::chrono::steady_clock::now();
    if (activity && leader)
      std::printf("moe-train: driver, step %lld: %s\n",
                  static_cast<long long>(step),
                  ((*student)->activity() - before).describe().c_str());
    // The last checkpoint was written beside this step: published now,
    // before anything of this step can end the run.
    if (checkpoints.pending()) {
      double t = trace.now();
      if (Status s = checkpoints.finish(); !s.ok())
        die(s.error);
      trace.add(ioLane, label + ": previous checkpoint published", t,
                trace.now() - t);
    }
    if (!result)
      die(result.message());
    if (!result->nonFinite.empty()) {
      if (onNonFinite == "stop")
        die("step " + std::to_string(step) + ": " + result->nonFinite +
            "; stopped before its update and any checkpoint of it "
            "(--on-nonfinite=skip-step goes on without the update)");
      ++skipped;
      if (leader)
        std::fprintf(stderr,
                     "moe-train: warning: step %lld skipped: %s\n",
                     static_cast<long long>(step),
                     result->nonFinite.c_str());
    }
    trace.add(stepLane, label + ": forward, loss, backward, AdamW", t2,
              trace.now() - t2);
    if (deviceTrace)
      trace.addDeviceProfile((*student)->getBackend().lastProfile(), label,
                             t2);
    for (const CommEvent &e : comm.takeEvents())
      trace.add(e.compute ? codeLane : commLane, label + ": " + e.name,
                trace.fromSteady(e.start), e.seconds);
    if (step == first && !dumpGrads.empty()) {
      Expected<std::map<std::string, Tensor>> grads =
          (*trainer)->lastGradients();
      if (!grads)
        die(grads.message());
      if (Status s = writeSafetensors(rankPath(dumpGrads, comm), *grads);
          !s.ok())
        die(s.error);
    }
    if (step == first && !dumpBuffers.empty()) {
      Expected<std::map<std::string, Tensor>> dumped =
          (*student)->dumpBuffers();
      if (!dumped)
        die(dumped.message());
      if (Status s = writeSafetensors(rankPath(dumpBuffers, comm), *dumped);
          !s.ok())
        die(s.error);
    }
    double seconds = std::chrono::duration<double>(end - start).count();
    float maxLoad = 0, total = 0;
    for (float l : result->load) {
      maxLoad = std::max(maxLoad, l);
      total += l;
    }
    float mean = result->load.empty() ? 0 : total / result->load.size();
    if (leader)
      std::printf("step %lld loss %.6g tokens/s %.1f balance %.3f\n",
                  static_cast<long long>(step), result->loss,
                  seconds > 0 ? tokens / seconds : 0.0,
                  mean > 0 ? maxLoad / mean : 0.0f);
    if (step == first)
      firstLoss = result->loss;
    lastLoss = result->loss;
    if (!checkpointDir.empty() &&
        ((checkpointEvery > 0 && step % checkpointEvery == 0) ||
         step == steps)) {
      // The state is copied out now; its file is written beside the
      // next step and published after it (or below, after the last).
      double t3 = trace.now();
      if (Status s = checkpoints.start(checkpointDir, **trainer,
                                       rng.getState(), &comm, keepCheckpoints);
          !s.ok())
        die(s.error);
      trace.add(ioLane, label + ": checkpoint copied out", t3,
                trace.now() - t3);
    }
  }
  if (checkpoints.pending()) {
    double t = trace.now();
    if (Status s = checkpoints.finish(); !s.ok())
      die(s.error);
    trace.add(ioLane, "last checkpoint published", t, trace.now() - t);
  }
  if (!tracePath.empty())
    if (Status s = trace.write(rankPath(tracePath, comm)); !s.ok())
      die(s.error);
  if (leader) {
    char change[64] = "no ratio";
    if (lastLoss > 0 && firstLoss >= lastLoss)
      std::snprintf(change, sizeof(change), "%.1fx lower", firstLoss / lastLoss);
    else if (firstLoss > 0 && lastLoss > firstLoss)
      std::snprintf(change, sizeof(change), "%.1fx higher",
                    lastLoss / firstLoss);
    std::string skips =
        skipped ? ", " + std::to_string(skipped) + " skipped as non-finite"
                : "";
    std::printf("moe-train: %lld steps, loss %.6g -> %.6g (%s)%s\n",
                static_cast<long long>(steps - first + 1), firstLoss, lastLoss,
                change, skips.c_str());
  }
  if (!saveWeights.empty()) {
    if (Status s = (*trainer)->syncLayer(); !s.ok())
      die(s.error);
    if (Status s = writeSafetensors(rankPath(saveWeights, comm),
                                    (*student)->namedParameters());
        !s.ok())
      die(s.error);
  }
  return 0;
}
