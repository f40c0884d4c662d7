//===- CudaBackend.cpp - Running an sm_90a bundle through the driver API --===//
//
// Part of moe-compiler's runtime. The driver API comes through dlopen
// (CudaDriver.h), so building needs no CUDA header. The bundle's cubin holds
// every kernel; its manifest lists the device buffers and the memsets and
// launches of one forward pass.
//
//===----------------------------------------------------------------------===//

#include "moe/runtime/CudaBackend.h"
#include "moe/runtime/DeviceComm.h"
#include "moe/runtime/ScheduleAbi.h"

#include "CudaDriver.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>

namespace moe::rt {

namespace {

using namespace cuda;

/// A buffer dimension: the token count, the dispatched rows, the rows an
/// expert-parallel rank can receive (`received`), or a static size.
int64_t resolveDim(int64_t d, int64_t tokens, int64_t rows,
                   int64_t received = 0) {
  return abi::resolveBufferDim(d, tokens, rows, received);
}

/// A training step argument that the host gives every step (the rest of
/// a step's inputs is state that the device keeps).
/// The bytes of training argument `spec` (held in `b`) for `tokens`
/// tokens.
size_t argumentBytes(const TrainArgumentSpec &spec, const GpuBuffer &b,
                     int64_t tokens) {
  size_t bytes = dtypeSize(b.dtype);
  for (int64_t d : spec.shape)
    bytes *= static_cast<size_t>(d < 0 ? tokens : d);
  return bytes;
}

bool isStepInput(const TrainArgumentSpec &spec) {
  return !spec.output &&
         (spec.name == "x" || spec.name == "target" || spec.name == "hyper");
}

class CudaBackend : public Backend {
public:
  ~CudaBackend() override {
    if (!ready)
      return;
    for (CUevent e : {callerReady, passDone})
      if (e)
        driver.eventDestroy(e);
    for (size_t i = 0; i < buffers.size(); ++i)
      if (buffers[i] && !(i < inWindow.size() && inWindow[i]))
        driver.memFree(buffers[i]);
    if (mapsBuffer)
      driver.memFree(mapsBuffer);
    for (auto &[key, exec] : graphs)
      driver.graphExecDestroy(exec);
    if (pinned)
      driver.memFreeHost(pinned);
    for (CUevent e : events)
      driver.eventDestroy(e);
    for (CUevent e : exchangeEvents)
      driver.eventDestroy(e);
    if (scheduleStart)
      driver.eventDestroy(scheduleStart);
    if (stream)
      driver.streamDestroy(stream);
    for (CUmodule m : variantModules)
      driver.moduleUnload(m);
    if (module)
      driver.moduleUnload(module);
  }

  Status init(const Bundle &bundle);
  Status run(const std::vector<const Tensor *> &arguments) override;
  Status runOnDevice(const DeviceForward &io,
                     const std::vector<const Tensor *> &arguments) override;
  Status
  runBackwardOnDevice(const DeviceBackward &io,
                      const std::vector<const Tensor *> &arguments) override;
  Status runEntry(const std::string &symbol,
                  const std::vector<const Tensor *> &arguments,
                  int64_t tokens) override;
  void invalidateTrainingState() override { trainingStateValid = false; }
  bool updatesWithStep() const override { return deviceVerdict; }
  Status
  downloadTrainingTensors(const std::map<std::string, Tensor *> &) override;
  Status runTrainingUpdate() override;
  /// A sharded layer's ranks: an NCCL communicator over `comm` on this
  /// rank's GPU, its CTAs capped at the program's comm SMs.
  Status setCommunicator(Communicator *comm) override {
    DeviceCommOptions options;
    options.device = device;
    options.commSms = static_cast<int>(manifest.gpu.commSms);
    options.timeoutSeconds = comm->timeoutSeconds;
    Expected<std::unique_ptr<DeviceCommunicator>> made =
        createNcclCommunicator(*comm, options);
    if (!made)
      return Status::failure(made.message());
    hostComm = comm;
    deviceComm = std::move(*made);
    return chooseTransport();
  }
  std::string exchangeTransport() const override {
    if (!deviceComm)
      return {};
    if (transport == abi::Transport::Lsa)
      return "lsa (device-initiated kernels over NCCL symmetric memory, " +
             std::to_string(deviceComm->size()) + " ranks)";
    return "nccl (host-driven send/receive" +
           (transportNote.empty() ? std::string(")")
                                  : std::string(": ") + transportNote + ")");
  }
  void invalidateParameters() override { parametersUploaded = false; }
  /// The last forward pass's build of the expert GEMMs ("BLOCK_M 64"),
  /// in a bundle that records it.
  std::string codeVariant() const override {
    return lastTileM ? "BLOCK_M " + std::to_string(lastTileM) : std::string();
  }
  std::vector<KernelTime> lastProfile() const override { return profile; }
  DeviceActivity activity() const override { return driverActivity(); }
  void setProfiling(bool on) override { profiling = on; }
  Expected<std::map<std::string, Tensor>> dumpBuffers() override;

private:
  Status check(CUresult rc, const std::string &what) const {
    if (rc == 0)
      return Status::success();
    return Status::failure(what + ": " + driver.describe(rc));
  }
  /// The buffer of a name, when loading and for what the user asks by
  /// name; steps know theirs by index (GpuStep::argIds).
  const GpuBuffer *findBuffer(const std::string &name) const {
    for (const GpuBuffer &b : manifest.gpu.buffers)
      if (b.name == name)
        return &b;
    return nullptr;
  }
  /// The device memory of a buffer of the manifest.
  CUdeviceptr &deviceOf(const GpuBuffer &b) {
    return buffers[static_cast<size_t>(&b - manifest.gpu.buffers.data())];
  }
  const GpuBuffer &bufferOf(int32_t id) const {
    return manifest.gpu.buffers[static_cast<size_t>(id)];
  }
  size_t capacityBytes(const GpuBuffer &b) const {
    return gpuBufferBytes(manifest.gpu, b, manifest.maxTokens,
                          manifest.expertParallel);
  }
  Status uploadParameters(const std::vector<const Tensor *> &arguments);
  int64_t receivedRows() const {
    return gpuReceivedRows(manifest.gpu, manifest.expertParallel);
  }
  /// An expert-parallel exchange step (GpuStep::exchange); one on the
  /// communication stream records `begin` and `end` around it there when
  /// they are given (returning whether it did in `timed`).
  Status runExchange(const GpuStep &step, CUevent begin = nullptr,
                     CUevent end = nullptr, bool *timed = nullptr);
  /// A dispatch_plan: every chunk's sizes exchanged and laid out.
  Status planChunks(const GpuStep &step);
  /// The exchange transport of a sharded layer (after its communicator):
  /// lsa, where the bundle has the device-initiated exchange and every
  /// rank opens the symmetric window (its buffers moved there, the peers
  /// written, the tensor maps encoded again), else nccl, with the reason
  /// in transportNote. $MOE_EP_TRANSPORT (auto, lsa, nccl) asks for one.
  Status chooseTransport();
  abi::Transport transport = abi::Transport::Nccl;
  std::string transportNote;
  /// By buffer index: whether it lives in the symmetric window (freed
  /// with the communicator, not by this backend).
  std::vector<bool> inWindow;
  /// Whether step `st` runs with the chosen transport.
  bool runs(const GpuStep &st) const {
    return st.transport == abi::Transport::Any || st.transport == transport;
  }
  /// The device-initiated exchange's status words (ep_status), copied to
  /// their staging at the end of each pass; the error they report.
  const GpuBuffer *exchangeStatus = nullptr;
  Status checkExchangeStatus(const char *what) const;
  /// ", token chunk c" of a chunked exchange's flag word (else nothing).
  std::string chunkOfFlag(int32_t flag) const;
  /// Enqueues the copy of the status words to their staging (the end of a
  /// pass or step with the device-initiated exchange).
  Status enqueueStatusCopy() {
    if (!exchangeStatus || transport != abi::Transport::Lsa)
      return Status::success();
    return check(driver.memcpyDtoHAsync(stagingOf(*exchangeStatus),
                                        deviceOf(*exchangeStatus),
                                        2 * sizeof(int32_t), stream),
                 "cannot download the exchange's status");
  }
  /// Encodes the tensor map of every launch's GpuTensorMap (in the order
  /// of the steps of every schedule) into `maps`.
  Status encodeTensorMaps(std::vector<TensorMap> &maps);
  std::vector<std::pair<const GpuStep *, CUmodule>> allSteps;
  /// The time and start of every launch of `steps`, and of every
  /// exchange on the communication stream, after a timed run.
  void collectProfile(const std::vector<GpuStep> &steps) {
    for (size_t i = 0; i < steps.size(); ++i) {
      const GpuStep &st = steps[i];
      bool exchange = i < timedExchanges.size() && timedExchanges[i];
      if ((st.kind != abi::StepKind::Launch && !exchange) || !runs(st))
        continue;
      KernelTime k;
      k.exchange = exchange;
      // "expert_up (chunk 1)", "all-to-all (combine_rows ep_down -> down,
      // chunk 1)".
      std::string chunk =
          st.chunk >= 0 ? "chunk " + std::to_string(st.chunk) : "";
      if (i < timedGrids.size())
        k.ctas = timedGrids[i];
      if (st.kind == abi::StepKind::Launch) {
        k.kernel = st.kernel + (chunk.empty() ? "" : " (" + chunk + ")");
      } else {
        k.kernel =
            "all-to-all (" + std::string(abi::exchangeKindName(st.exchange));
        if (st.args.size() == 2)
          k.kernel += " " + st.args[0] + " -> " + st.args[1];
        k.kernel += (chunk.empty() ? "" : ", " + chunk) + ")";
      }
      driver.eventElapsedTime(&k.milliseconds, events[2 * i],
                              events[2 * i + 1]);
      driver.eventElapsedTime(&k.startMilliseconds, scheduleStart,
                              events[2 * i]);
      profile.push_back(std::move(k));
    }
  }
  /// A timed run: its first event, and the exchanges it timed (by step).
  CUevent scheduleStart = nullptr;
  std::vector<bool> timedExchanges;
  /// The CTAs of each launch of a timed run (by step).
  std::vector<int64_t> timedGrids;
  /// Device-initiated sends on the communicator's stream (else on the
  /// compute stream): $MOE_EP_SEND_STREAM=comm (the default) or compute.
  bool sendsOnCommStream = true;
  /// Sums each f32 buffer of `step` over the ranks.
  Status runAllReduce(const GpuStep &step);
  /// Waits for the compute stream (and, sharded, the collectives, polled
  /// against their timeout); `what` names the work in the error.
  Status waitForDevice(const std::string &what);
  /// Bytes of one row of `b` (its dimensions after the first).
  size_t rowBytes(const GpuBuffer &b) const {
    size_t n = dtypeSize(b.dtype);
    for (size_t i = 1; i < b.shape.size(); ++i)
      n *= static_cast<size_t>(b.shape[i]);
    return n;
  }
  /// What a schedule's steps need at run time beyond the manifest, found
  /// at load: each launch's kernel and the device addresses of its tensor
  /// maps.
  struct StepPlan {
    CUfunction function = nullptr;
    std::vector<CUdeviceptr> maps;
  };
  using SchedulePlan = std::vector<StepPlan>;
  /// Enqueues the memsets and launches of `steps` for `tokens` tokens.
  /// Timed, their starts count from this schedule's start, or with
  /// `sameClock` from the last timed schedule's (the update after its
  /// step).
  Status launchSteps(const std::vector<GpuStep> &steps,
                     const SchedulePlan &plan, int64_t tokens, bool timed,
                     bool sameClock = false, int64_t rowCapacity = -1);
  /// Runs `steps` for `tokens` tokens to completion (timed when profiling;
  /// `what` names the schedule in errors).
  Status runSchedule(const std::vector<GpuStep> &steps,
                     const SchedulePlan &plan, int64_t tokens, const char *what,
                     bool sameClock = false) {
    if (Status s = launchSteps(steps, plan, tokens, profiling, sameClock);
        !s.ok())
      return s;
    if (Status s = waitForDevice(what); !s.ok())
      return s;
    if (profiling)
      collectProfile(steps);
    return Status::success();
  }
  /// The buffer of training step argument `name`.
  const GpuBuffer *argumentBuffer(const std::string &name) const {
    using abi::SourceKind;
    for (const GpuBuffer &b : manifest.gpu.buffers)
      if (b.source.kind == SourceKind::Arg && b.source.role == name)
        return &b;
    for (const GpuBuffer &b : manifest.gpu.buffers)
      if (b.name == name &&
          (b.source.kind == SourceKind::Input ||
           (b.source.kind == SourceKind::Param && b.source.role == name)))
        return &b;
    return nullptr;
  }

  Driver driver{};
  Manifest manifest;
  int device = 0;
  Communicator *hostComm = nullptr;
  std::unique_ptr<DeviceCommunicator> deviceComm;
  /// The last dispatch's offsets on both sides: the combine sends back
  /// what came, so it needs no exchange of sizes.
  std::vector<int32_t> dispatchedOffsets, receivedOffsets;
  /// The last dispatch_plan's, per token chunk: both sides' offsets of
  /// the chunk's segments, absolute in the dispatched and received rows.
  std::vector<std::vector<int32_t>> chunkDispatched, chunkReceived;
  bool ready = false, parametersUploaded = false, profiling = false;
  CUmodule module = nullptr;
  CUstream stream = nullptr;
  /// By buffer index (GpuProgram::buffers).
  std::vector<CUdeviceptr> buffers;
  CUdeviceptr mapsBuffer = 0;
  /// The forward pass's, the training step's and the update's.
  SchedulePlan stepPlan, trainStepPlan, updateStepPlan, backwardStepPlan;
  /// The forward pass's other builds (GpuProgram::variants): their
  /// modules and plans.
  std::vector<CUmodule> variantModules;
  std::vector<SchedulePlan> variantPlans;
  /// The build of the forward pass that runs `tokens` tokens: an index
  /// into GpuProgram::variants, or -1 for its own steps; by the bundle's
  /// buckets, or as $MOE_TILE_M (64 or 128) asks.
  Expected<int> forwardVariant(int64_t tokens) const;
  /// What running build `variant` (as forwardVariant gives) takes.
  struct ForwardBuild {
    const std::vector<GpuStep> &steps;
    const SchedulePlan &plan;
    int64_t rowCapacity, tileM;
  };
  ForwardBuild forwardBuild(int variant) const {
    if (variant < 0)
      return {manifest.gpu.steps, stepPlan, manifest.gpu.rowCapacity,
              manifest.gpu.tileM};
    auto v = static_cast<size_t>(variant);
    const GpuVariant &build = manifest.gpu.variants[v];
    return {build.steps, variantPlans[v], build.rowCapacity, build.tileM};
  }
  /// The forward pass's input and outputs (y, topk_ids, topk_weights); the
  /// training step's arguments' buffers, in TrainSpec order (null: none).
  const GpuBuffer *inputBuffer = nullptr;
  const GpuBuffer *outputBuffers[3] = {};
  std::vector<const GpuBuffer *> trainArgumentBuffers;
  /// The backward pass's (manifest.backward's arguments), all staged.
  std::vector<const GpuBuffer *> backwardArgumentBuffers;
  /// A backward pass: `arguments` in manifest.backward's order, then the
  /// bound parameters in manifest order.
  Status runBackward(const std::vector<const Tensor *> &arguments);
  Status enqueueBackward(int64_t launched, const std::vector<size_t> &outputs);
  /// A step keeping its state on the device: whether the device holds it
  /// (uploaded by a step; a restore invalidates it).
  bool trainingStateValid = false;
  std::vector<CUevent> events;
  /// An exchange whose sizes the host already has runs on the
  /// communicator's stream while the compute stream goes on; a later step
  /// that touches its buffers (or the end of the schedule) waits for it.
  struct PendingExchange {
    CUevent done;
    std::vector<int32_t> buffers;
    int64_t chunk = -1; // the token chunk it moves, or -1: all
  };
  std::vector<PendingExchange> pendingExchanges;
  std::vector<CUevent> exchangeEvents, freeExchangeEvents;
  Expected<CUevent> takeExchangeEvent() {
    if (!freeExchangeEvents.empty()) {
      CUevent e = freeExchangeEvents.back();
      freeExchangeEvents.pop_back();
      return e;
    }
    CUevent e = nullptr;
    // No timing: the cheapest event to record and wait on.
    if (Status s = check(driver.eventCreate(&e, /*DISABLE_TIMING=*/2),
                         "cuEventCreate");
        !s.ok())
      return Expected<CUevent>::error(s.error);
    exchangeEvents.push_back(e);
    return e;
  }
  /// A free exchange event recorded on `on` (`what` names it in errors).
  Expected<CUevent> recordExchangeEvent(CUstream on, const char *what) {
    Expected<CUevent> e = takeExchangeEvent();
    if (!e)
      return e;
    if (Status s = check(driver.eventRecord(*e, on),
                         std::string("cannot record ") + what);
        !s.ok())
      return Expected<CUevent>::error(s.error);
    return e;
  }
  /// `comm` waits for the compute stream's work so far (`what` names the
  /// work that follows there in the error).
  Status orderAfterCompute(CUstream comm, const std::string &what) {
    Expected<CUevent> ready =
        recordExchangeEvent(stream, "the compute stream's progress");
    if (!ready)
      return Status::failure(ready.message());
    Status waited = check(driver.streamWaitEvent(comm, *ready, 0),
                          "cannot order " + what + " after the compute stream");
    freeExchangeEvents.push_back(*ready);
    return waited;
  }
  /// The work enqueued on `comm` so far is a pending exchange of `buffers`
  /// (see waitForExchanges), recorded as `what`'s completion.
  Status addPendingExchange(CUstream comm, const std::vector<int32_t> &buffers,
                            int64_t chunk, const std::string &what) {
    Expected<CUevent> done =
        recordExchangeEvent(comm, (what + "'s completion").c_str());
    if (!done)
      return Status::failure(done.message());
    pendingExchanges.push_back({*done, buffers, chunk});
    return Status::success();
  }
  /// The compute stream waits for the pending exchanges that touch any of
  /// the buffers `ids` (all of them when `ids` is null). A step of token
  /// chunk `chunk` touches only that chunk's rows: another chunk's
  /// exchange of the same buffers does not hold it back.
  Status waitForExchanges(const std::vector<int32_t> *ids,
                          int64_t chunk = -1) {
    for (size_t i = 0; i < pendingExchanges.size();) {
      PendingExchange &p = pendingExchanges[i];
      if (chunk >= 0 && p.chunk >= 0 && p.chunk != chunk) {
        ++i;
        continue;
      }
      bool touches = !ids;
      for (size_t j = 0; ids && !touches && j < ids->size(); ++j)
        touches = std::find(p.buffers.begin(), p.buffers.end(), (*ids)[j]) !=
                  p.buffers.end();
      if (!touches) {
        ++i;
        continue;
      }
      if (Status s = check(driver.streamWaitEvent(stream, p.done, 0),
                           "cannot order the compute stream after an "
                           "exchange");
          !s.ok())
        return s;
      freeExchangeEvents.push_back(p.done);
      pendingExchanges.erase(pendingExchanges.begin() + i);
    }
    return Status::success();
  }
  std::vector<KernelTime> profile;
  int64_t lastTokens = 0;
  /// The BLOCK_M of the last forward pass's build (0: not recorded).
  int64_t lastTileM = 0;

  /// Page-locked host memory, allocated at load, staging what crosses
  /// between host and device in every pass and step (the forward pass's x
  /// and outputs; a training step's x, target, hyper and the results it
  /// reports), each buffer's at its capacity. Async copies read and write
  /// it, so a pass or a step waits for the device once.
  void *pinned = nullptr;
  /// By buffer index: its staging's offset in `pinned`, or kNoStaging.
  static constexpr size_t kNoStaging = ~size_t(0);
  std::vector<size_t> stagingOffsets;
  uint8_t *stagingOf(const GpuBuffer &b) const {
    size_t at =
        stagingOffsets[static_cast<size_t>(&b - manifest.gpu.buffers.data())];
    return at == kNoStaging ? nullptr : static_cast<uint8_t *>(pinned) + at;
  }
  /// Allocates the staging of the buffers above.
  Status allocateStaging();
  /// Whether the training step's update runs right after it, decided on
  /// the device (the bundle's update kernels read update_rejected).
  bool deviceVerdict = false;
  /// The flag of what the training step derives from its state on the
  /// device (copies_valid: while it is 0 the step makes the compute copies
  /// from the masters and reads the state's bounds anew; its verdict sets
  /// it), and whether the host wrote a master or a copy since the last
  /// step, so that the next clears it.
  const GpuBuffer *copiesValid = nullptr;
  bool copiesStale = true;
  /// The pass's token count as the kernels read it (bundles since the
  /// word: moegpu-tokens-from-memory), or null. Written from its staging
  /// by an async copy at the start of each pass, so a graph launched for
  /// `launchTokens(T)` tokens runs any T up to that.
  const GpuBuffer *tokensWord = nullptr;
  /// Sets the word's staging to `tokens` (before the pass is enqueued or
  /// its graph launched) and enqueues its copy (with the pass).
  void stageTokens(int64_t tokens) {
    if (tokensWord)
      *reinterpret_cast<int32_t *>(stagingOf(*tokensWord)) =
          static_cast<int32_t>(tokens);
  }
  Status enqueueTokens() {
    if (!tokensWord)
      return Status::success();
    return check(driver.memcpyHtoDAsync(deviceOf(*tokensWord),
                                        stagingOf(*tokensWord), sizeof(int32_t),
                                        stream),
                 "cannot upload the token count");
  }
  /// The most tokens the forward pass's build `variant` takes (-1: the
  /// bundle's own).
  int64_t variantCapacity(int variant) const {
    return variant >= 0 ? manifest.gpu.variants[variant].maxTokens
                        : manifest.maxTokens;
  }
  /// The token count a graph for `tokens` tokens is launched for: the
  /// next power of two, at most `capacity`, where the kernels read the
  /// count from the word (one graph a bucket), else `tokens` itself.
  int64_t launchTokens(int64_t tokens, int64_t capacity) const {
    if (!tokensWord || tokens <= 0)
      return tokens;
    int64_t bucket = 1;
    while (bucket < tokens)
      bucket *= 2;
    return std::max(tokens, std::min(bucket, capacity));
  }
  /// Rows of a training input's staging past the live ones that an
  /// earlier step left non-zero (by buffer index): a graph copies its
  /// bucket's rows, and the rows past the tokens must arrive as zeros.
  std::vector<int64_t> stagedRows;
  /// Enqueues a forward pass launched for `launched` tokens (the live
  /// ones, or their graph's bucket): the token count and x from their
  /// staging, the schedule (`variant`'s, see forwardVariant), the outputs
  /// to theirs.
  Status enqueueForward(int64_t launched, int variant);
  /// Whether `steps` can be captured as a CUDA graph: kernels and memsets
  /// only (an exchange needs the host), not timed, and graphs not turned
  /// off ($MOE_CUDA_GRAPHS=0).
  bool capturable(const std::vector<GpuStep> &steps) const;
  /// Runs a schedule's work as a CUDA graph: captured by `enqueue` the
  /// first time `key` is asked for (what the work depends on: the
  /// schedule, the token count, ...), replayed after. At most kGraphs are
  /// kept, the least recently used replaced.
  Status launchGraph(const std::vector<int64_t> &key, const char *what,
                     const std::function<Status()> &enqueue);
  static constexpr size_t kGraphs = 16;
  /// A graph key's first entry: whose schedule (a forward pass on the
  /// caller's device memory captures the kernels alone).
  enum : int64_t {
    kForwardPass,
    kTrainingStep,
    kDeviceForwardPass,
    kBackwardPass,
    kDeviceBackwardPass
  };
  /// What a pass on device pointers needs (sharded: the device-initiated
  /// exchange and a token); the status of the previous one, where done.
  Status checkDevicePass(int64_t tokens);
  /// Orders this stream after the caller's (`callerReady`); whether the
  /// caller is capturing its stream into a graph (then the pass's work
  /// joins that capture and no graph of ours is launched inside it).
  Status joinCaller(CUstream caller, bool &callerCaptures);
  /// Orders the caller's stream after the pass (`passDone`).
  Status releaseCaller(CUstream caller);
  /// The token count word set on the device (a pass on device memory).
  Status setTokensOnDevice(int64_t tokens);
  /// Runs `steps` of a pass on device memory for `tokens` tokens: the
  /// graph of `key` (its kind, then what else it depends on; the launched
  /// bucket is put second) where they can be captured and the caller is
  /// not capturing, else step by step into the caller's capture.
  Status launchOnDevice(std::vector<int64_t> key,
                        const std::vector<GpuStep> &steps,
                        const SchedulePlan &plan, int64_t tokens,
                        int64_t capacity, bool callerCaptures, const char *what,
                        int64_t rowCapacity = -1);
  /// The end of a pass on device memory: a sharded pass's status words
  /// to their staging (checked later), the caller's stream after the pass.
  Status finishDevicePass(CUstream caller);
  /// Recorded on the caller's stream and on this one around a pass on
  /// device memory, so that each stream waits for the other on the
  /// device.
  CUevent callerReady = nullptr, passDone = nullptr;
  /// A sharded pass on device pointers copied its exchange status to the
  /// staging; not yet checked.
  bool statusPending = false;
  std::map<std::vector<int64_t>, CUgraphExec> graphs;
  std::vector<std::vector<int64_t>> graphOrder; // least recently used first
  /// Zeroes the rows of `b` past its first `bytes` (a step's input of
  /// fewer tokens than its capacity: the shared experts' weight gradients
  /// reduce over the tokens in blocks of 64 rows).
  Status clearPast(const GpuBuffer &b, size_t bytes, const std::string &name) {
    size_t capacity = capacityBytes(b);
    if (capacity <= bytes)
      return Status::success();
    return check(
        driver.memsetD8Async(deviceOf(b) + bytes, 0, capacity - bytes, stream),
        "cannot clear the rows past '" + name + "'");
  }
  /// Enqueues a training step launched for `launched` tokens (as
  /// enqueueForward): the staged inputs' copies, the step, its update
  /// where the device decides it, and the copies of the results in
  /// `reported` (by argument) to their staging.
  Status enqueueTrainingStep(int64_t launched,
                             const std::vector<const GpuBuffer *> &targets,
                             const std::vector<size_t> &uploads,
                             const std::vector<size_t> &reported,
                             const std::vector<const Tensor *> &arguments);
};

Expected<std::map<std::string, Tensor>> CudaBackend::dumpBuffers() {
  using Result = Expected<std::map<std::string, Tensor>>;
  // Dispatched rows in use: offsets[E], when the program has offsets.
  int64_t rows = manifest.gpu.rowCapacity;
  if (const GpuBuffer *offsets = findBuffer("offsets")) {
    int32_t end = 0;
    size_t at = static_cast<size_t>(offsets->shape[0] - 1) * sizeof(int32_t);
    if (Status s =
            check(driver.memcpyDtoH(&end, deviceOf(*offsets) + at, sizeof(end)),
                  "cannot read the expert offsets");
        !s.ok())
      return Result::error(s.error);
    rows = std::min<int64_t>(rows, std::max<int32_t>(end, 0));
  }
  std::map<std::string, Tensor> out;
  for (const GpuBuffer &b : manifest.gpu.buffers) {
    // Rows in use only where they lead (a transposed [C, rows] buffer's
    // rows are a stride: its whole capacity).
    bool inner = false;
    for (size_t i = 1; i < b.shape.size(); ++i)
      inner |= abi::isBufferDim(b.shape[i]);
    std::vector<int64_t> shape;
    for (int64_t d : b.shape)
      shape.push_back(resolveDim(d, lastTokens,
                                 inner ? manifest.gpu.rowCapacity : rows,
                                 receivedRows()));
    Tensor t = Tensor::zeros(b.dtype, shape);
    if (!t.data.empty())
      if (Status s = check(
              driver.memcpyDtoH(t.data.data(), deviceOf(b), t.data.size()),
              "cannot download '" + b.name + "'");
          !s.ok())
        return Result::error(s.error);
    out[b.name] = std::move(t);
  }
  return out;
}

Status CudaBackend::init(const Bundle &bundle) {
  manifest = bundle.manifest;
  // (A program built in memory has not been through the bundle reader.)
  indexGpuBuffers(manifest.gpu);
  Expected<Driver> d = openDriver();
  if (!d)
    return Status::failure(d.message());
  driver = *d;
  // One GPU per rank of a node; device 0 without a launcher.
  device = launcherLocalRank();
  if (Status s = makeContextCurrent(driver, device); !s.ok())
    return s;
  ready = true;
  // The program's cubin and optionally its PTX, then each variant's
  // cubin and PTX.
  size_t variants = manifest.gpu.variants.size();
  auto isElf = [](const std::vector<uint8_t> &blob) {
    return blob.size() >= 4 && std::memcmp(blob.data(),
                                           "\x7f"
                                           "ELF",
                                           4) == 0;
  };
  if (bundle.blobs.empty() || !isElf(bundle.blobs[0]) ||
      (variants ? bundle.blobs.size() != 2 + 2 * variants
                : bundle.blobs.size() > 2))
    return Status::failure(
        "the sm_90a bundle holds no cubin (expected an ELF blob, then "
        "optionally its PTX" +
        std::string(variants ? ", then a cubin and its PTX for each of the " +
                                   std::to_string(variants) + " variants"
                             : "") +
        "; found " + std::to_string(bundle.blobs.size()) + " blobs)");
  // The cubin first; a driver that has no binary for this GPU (a newer
  // architecture, or the PTX emulator) gets the PTX to JIT instead.
  // `of`: "" for the program's own code, " of its BLOCK_M 64 forward
  // pass" for a variant's.
  auto load = [&](CUmodule &into, size_t at, const std::string &of) {
    if (at >= bundle.blobs.size())
      return Status::failure("the cubin" + of + " is blob " +
                             std::to_string(at) + ", but the bundle has " +
                             std::to_string(bundle.blobs.size()) + " blobs");
    const std::vector<uint8_t> *ptx =
        at + 1 < bundle.blobs.size() ? &bundle.blobs[at + 1] : nullptr;
    if (!isElf(bundle.blobs[at]))
      return Status::failure("the sm_90a bundle's blob " + std::to_string(at) +
                             " (the cubin" + of + ") is not an ELF file");
    if (ptx && (ptx->empty() || ptx->back() != 0))
      return Status::failure("the sm_90a bundle's PTX" + of +
                             " is not NUL-terminated");
    CUresult loaded = driver.moduleLoadData(&into, bundle.blobs[at].data());
    if (loaded == kErrorNoBinaryForGpu && ptx)
      loaded = driver.moduleLoadData(&into, ptx->data());
    return check(loaded, std::string("cannot load the bundle's ") +
                             (ptx ? "cubin or PTX" : "cubin") + of +
                             " (is the GPU an sm_90 Hopper?)");
  };
  if (Status s = load(module, 0, ""); !s.ok())
    return s;
  for (const GpuVariant &v : manifest.gpu.variants) {
    variantModules.push_back(nullptr);
    if (Status s = load(variantModules.back(), static_cast<size_t>(v.blob),
                        " of its BLOCK_M " + std::to_string(v.tileM) +
                            " forward pass");
        !s.ok())
      return s;
  }
  if (Status s = check(driver.streamCreate(&stream, 0), "cuStreamCreate");
      !s.ok())
    return s;

  // The buffers must fit what the device has free: one clear failure
  // here rather than an allocation failing halfway.
  GpuMemoryPlan plan = planGpuMemory(manifest.gpu, manifest.maxTokens,
                                     manifest.expertParallel);
  size_t freeBytes = 0, totalBytes = 0;
  if (Status s = check(driver.memGetInfo(&freeBytes, &totalBytes),
                       "cannot query the device's memory");
      !s.ok())
    return s;
  if (plan.total() > freeBytes)
    return Status::failure(
        "the bundle needs " + formatBytes(plan.total()) +
        " of device memory on this rank (weights " + formatBytes(plan.weights) +
        ", optimizer state " + formatBytes(plan.optimizer) + ", gradients " +
        formatBytes(plan.gradients) + ", activations " +
        formatBytes(plan.activations) + ", workspace " +
        formatBytes(plan.workspace) + ") but device " + std::to_string(device) +
        " has " + formatBytes(freeBytes) + " free of " +
        formatBytes(totalBytes) +
        "; compile with more expert-parallel ranks (--ep) or fewer tokens "
        "(--max-tokens)");

  buffers.assign(manifest.gpu.buffers.size(), 0);
  for (const GpuBuffer &b : manifest.gpu.buffers) {
    CUdeviceptr ptr = 0;
    size_t bytes = std::max<size_t>(capacityBytes(b), 16);
    if (Status s = check(driver.memAlloc(&ptr, bytes),
                         "cannot allocate " + std::to_string(bytes >> 20) +
                             " MiB for buffer '" + b.name + "'");
        !s.ok())
      return s;
    deviceOf(b) = ptr;
    // Zeroed once: a weight gradient's GEMM reads whole 64-row blocks of
    // its operands, and rows no step has written yet must not be NaN.
    if (Status s = check(driver.memsetD8Async(ptr, 0, bytes, stream),
                         "cannot clear buffer '" + b.name + "'");
        !s.ok())
      return s;
  }

  // Kernels, their shared memory, and the tensor maps (encoded once over
  // each buffer's full capacity: rows past the live ones are never stored).
  std::vector<TensorMap> maps;
  std::vector<std::vector<size_t>> mapIndex;
  std::vector<CUfunction> functions;
  // Each schedule's steps, the module of their kernels and their plan.
  variantPlans.resize(variants);
  struct Schedule {
    const std::vector<GpuStep> *steps;
    CUmodule module;
    SchedulePlan *plan;
  };
  std::vector<Schedule> schedules = {
      {&manifest.gpu.steps, module, &stepPlan},
      {&manifest.gpu.trainSteps, module, &trainStepPlan},
      {&manifest.gpu.updateSteps, module, &updateStepPlan},
      {&manifest.gpu.backwardSteps, module, &backwardStepPlan}};
  for (size_t v = 0; v < variants; ++v)
    schedules.push_back(
        {&manifest.gpu.variants[v].steps, variantModules[v], &variantPlans[v]});
  allSteps.clear();
  for (const Schedule &schedule : schedules)
    for (const GpuStep &step : *schedule.steps)
      allSteps.push_back({&step, schedule.module});
  for (auto [stepPtr, stepModule] : allSteps) {
    const GpuStep &step = *stepPtr;
    mapIndex.emplace_back();
    functions.push_back(nullptr);
    if (step.kind != abi::StepKind::Launch)
      continue;
    CUfunction fn = nullptr;
    if (Status s = check(
            driver.moduleGetFunction(&fn, stepModule, step.kernel.c_str()),
            "the cubin has no kernel '" + step.kernel + "'");
        !s.ok())
      return s;
    functions.back() = fn;
    if (step.sharedMemory > 48 * 1024)
      if (Status s = check(
              driver.funcSetAttribute(fn, kFuncAttributeMaxDynamicSharedSize,
                                      static_cast<int>(step.sharedMemory)),
              "kernel '" + step.kernel + "' cannot get " +
                  std::to_string(step.sharedMemory) +
                  " bytes of shared memory");
          !s.ok())
        return s;
    for (size_t t = 0; t < step.tensorMaps.size(); ++t)
      mapIndex.back().push_back(maps.size() + t);
    maps.resize(maps.size() + step.tensorMaps.size());
  }
  if (Status s = encodeTensorMaps(maps); !s.ok())
    return s;

  if (!maps.empty()) {
    size_t bytes = maps.size() * sizeof(TensorMap);
    if (Status s = check(driver.memAlloc(&mapsBuffer, bytes),
                         "cannot allocate the tensor maps");
        !s.ok())
      return s;
    if (Status s = check(driver.memcpyHtoD(mapsBuffer, maps.data(), bytes),
                         "cannot copy the tensor maps");
        !s.ok())
      return s;
  }
  size_t j = 0;
  for (const Schedule &schedule : schedules)
    for (size_t n = 0; n < schedule.steps->size(); ++n, ++j) {
      schedule.plan->emplace_back();
      schedule.plan->back().function = functions[j];
      for (size_t i : mapIndex[j])
        schedule.plan->back().maps.push_back(mapsBuffer +
                                             i * sizeof(TensorMap));
    }
  inputBuffer = findBuffer("x");
  const char *outputs[3] = {"y", "topk_ids", "topk_weights"};
  for (int o = 0; o < 3; ++o)
    outputBuffers[o] = findBuffer(outputs[o]);
  for (const TrainArgumentSpec &spec : manifest.train.arguments)
    trainArgumentBuffers.push_back(argumentBuffer(spec.name));
  for (const TrainArgumentSpec &spec : manifest.backward.arguments)
    backwardArgumentBuffers.push_back(argumentBuffer(spec.name));
  // One pair of events per step of the longest schedule: a schedule's
  // times are read before the next one runs.
  size_t timedSteps = 0;
  for (const Schedule &schedule : schedules)
    timedSteps = std::max(timedSteps, schedule.steps->size());
  for (size_t i = 0; i < 2 * timedSteps; ++i) {
    CUevent e = nullptr;
    if (Status s = check(driver.eventCreate(&e, 0), "cuEventCreate"); !s.ok())
      return s;
    events.push_back(e);
  }
  deviceVerdict = findBuffer("update_rejected") != nullptr;
  copiesValid = findBuffer("copies_valid");
  for (const GpuBuffer &b : manifest.gpu.buffers)
    if (b.source.kind == abi::SourceKind::Tokens)
      tokensWord = &b;
  exchangeStatus = findBuffer("ep_status");
  if (exchangeStatus && capacityBytes(*exchangeStatus) != 2 * sizeof(int32_t))
    return Status::failure("buffer 'ep_status' must be two i32 words");
  return allocateStaging();
}

Status CudaBackend::encodeTensorMaps(std::vector<TensorMap> &maps) {
  maps.clear();
  for (auto [step, stepModule] : allSteps) {
    const GpuStep &st = *step;
    for (const GpuTensorMap &t : st.tensorMaps) {
      const GpuBuffer *b = &bufferOf(st.argIds[t.source]);
      // One side of the view may be the buffer's (-1): its elements
      // over the other.
      int64_t elements =
          static_cast<int64_t>(capacityBytes(*b) / dtypeSize(b->dtype));
      int64_t cols = t.view[1] >= 0 ? t.view[1] : elements / t.view[0];
      int64_t rows = t.view[0] >= 0 ? t.view[0] : elements / cols;
      unsigned long long dims[2] = {static_cast<unsigned long long>(cols),
                                    static_cast<unsigned long long>(rows)};
      unsigned long long strides[1] = {static_cast<unsigned long long>(cols) *
                                       dtypeSize(b->dtype)};
      unsigned box[2] = {static_cast<unsigned>(t.box[1]),
                         static_cast<unsigned>(t.box[0])};
      unsigned elementStrides[2] = {1, 1};
      TensorMap map{};
      int type = b->dtype == DType::BF16     ? kTensorMapBFloat16
                 : b->dtype == DType::F32    ? kTensorMapFloat32
                 : b->dtype == DType::F8E4M3 ? kTensorMapUInt8
                                             : kTensorMapFloat16;
      if (Status s =
              check(driver.tensorMapEncodeTiled(
                        &map, type, 2, reinterpret_cast<void *>(deviceOf(*b)),
                        dims, strides, box, elementStrides, /*interleave=*/0,
                        kTensorMapSwizzle128B, kTensorMapL2Promotion256B,
                        /*oobFill=*/0),
                    "cannot encode the tensor map of '" + b->name +
                        "' for kernel '" + st.kernel + "'");
          !s.ok())
        return s;
      maps.push_back(map);
    }
  }
  return Status::success();
}

Status CudaBackend::chooseTransport() {
  using abi::Transport;
  transport = Transport::Nccl;
  transportNote.clear();
  bool device = false;
  for (auto [step, stepModule] : allSteps)
    device = device || step->transport == Transport::Lsa;
  if (!device) {
    transportNote = "the bundle has no device-initiated exchange";
    return Status::success();
  }
  static const std::string asked = [] {
    const char *v = std::getenv("MOE_EP_TRANSPORT");
    return std::string(v ? v : "auto");
  }();
  if (asked != "auto" && asked != "lsa" && asked != "nccl")
    return Status::failure("MOE_EP_TRANSPORT is '" + asked +
                           "', expected auto, lsa or nccl");
  // Every rank takes the same path: the window is collective.
  float wants = asked == "nccl" ? 0.0F : 1.0F;
  hostComm->allReduceSum(&wants, 1);
  if (wants < static_cast<float>(hostComm->size())) {
    if (asked == "lsa")
      return Status::failure("MOE_EP_TRANSPORT=lsa on rank " +
                             std::to_string(hostComm->rank()) +
                             ", but another rank asks for nccl");
    transportNote = "MOE_EP_TRANSPORT=nccl";
    return Status::success();
  }
  static const std::string sendStream = [] {
    const char *v = std::getenv("MOE_EP_SEND_STREAM");
    return std::string(v ? v : "comm");
  }();
  if (sendStream != "comm" && sendStream != "compute")
    return Status::failure("MOE_EP_SEND_STREAM is '" + sendStream +
                           "', expected comm or compute");
  sendsOnCommStream = sendStream == "comm";
  // The symmetric buffers, each at one offset of every rank's window.
  std::vector<std::pair<const GpuBuffer *, size_t>> placed;
  size_t bytes = 0;
  for (const GpuBuffer &b : manifest.gpu.buffers)
    if (b.source.kind == abi::SourceKind::Symmetric) {
      placed.push_back({&b, bytes});
      bytes += (std::max<size_t>(capacityBytes(b), 16) + 255) / 256 * 256;
    }
  const GpuBuffer *peers = nullptr;
  for (const GpuBuffer &b : manifest.gpu.buffers)
    if (b.source.kind == abi::SourceKind::Peers)
      peers = &b;
  int n = deviceComm->size();
  if (!peers || capacityBytes(*peers) != (n + 3) * sizeof(int64_t) ||
      !exchangeStatus)
    return Status::failure(
        "the bundle's device-initiated exchange needs a peers buffer of " +
        std::to_string(n + 3) +
        " i64 (one a rank, the rank, the limit, the "
        "capacity) and ep_status");
  Expected<SymmetricWindow> window = deviceComm->openWindow(bytes);
  if (!window) {
    if (asked == "lsa")
      return Status::failure("MOE_EP_TRANSPORT=lsa, but " + window.message());
    transportNote = window.message();
    return Status::success();
  }
  inWindow.assign(manifest.gpu.buffers.size(), false);
  auto local = reinterpret_cast<CUdeviceptr>(window->local);
  for (auto [b, at] : placed) {
    CUdeviceptr &ptr = deviceOf(*b);
    driver.memFree(ptr);
    ptr = local + at;
    inWindow[static_cast<size_t>(b - manifest.gpu.buffers.data())] = true;
  }
  // Distances from this rank's copy to every rank's, the rank, the
  // waits' limit (the communicator's timeout) and what a rank receives.
  std::vector<int64_t> words;
  for (int p = 0; p < n; ++p)
    words.push_back(static_cast<int64_t>(window->peers[p] - local));
  words.push_back(deviceComm->rank());
  words.push_back(static_cast<int64_t>(hostComm->timeoutSeconds * 1e9));
  words.push_back(receivedRows());
  if (Status s = check(driver.memcpyHtoD(deviceOf(*peers), words.data(),
                                         words.size() * sizeof(int64_t)),
                       "cannot write the exchange's peers");
      !s.ok())
    return s;
  // The tensor maps of the moved buffers point into the window now.
  std::vector<TensorMap> maps;
  if (Status s = encodeTensorMaps(maps); !s.ok())
    return s;
  if (!maps.empty())
    if (Status s = check(driver.memcpyHtoD(mapsBuffer, maps.data(),
                                           maps.size() * sizeof(TensorMap)),
                         "cannot copy the tensor maps");
        !s.ok())
      return s;
  transport = Transport::Lsa;
  return Status::success();
}

std::string CudaBackend::chunkOfFlag(int32_t flag) const {
  // Chunked sends (steps with a chunk) have a set of flags a chunk.
  bool chunked = false;
  for (auto [step, stepModule] : allSteps)
    chunked =
        chunked || (step->transport == abi::Transport::Lsa && step->chunk >= 0);
  int32_t past = flag - deviceComm->size();
  if (!chunked || past < 0)
    return "";
  return ", token chunk " + std::to_string(past / abi::kExchangeFlagsPerChunk);
}

Status CudaBackend::checkExchangeStatus(const char *what) const {
  if (!exchangeStatus || transport != abi::Transport::Lsa)
    return Status::success();
  int32_t words[2];
  std::memcpy(words, stagingOf(*exchangeStatus), sizeof words);
  if (words[0] == 0)
    return Status::success();
  std::string rank = "rank " + std::to_string(deviceComm->rank());
  std::string limit =
      std::to_string(static_cast<int64_t>(hostComm->timeoutSeconds)) + " s";
  using abi::ExchangeStatus;
  std::string why = "stopped with status " + std::to_string(words[0]);
  switch (static_cast<ExchangeStatus>(words[0])) {
  case ExchangeStatus::Ok:
    break;
  case ExchangeStatus::SizesTimeout:
    why = "waited " + limit + " for the sizes of rank " +
          std::to_string(words[1]) + " (is it alive?)";
    break;
  case ExchangeStatus::DispatchTimeout:
  case ExchangeStatus::CombineTimeout:
    why = "waited " + limit + " for the " +
          (words[0] == static_cast<int32_t>(ExchangeStatus::DispatchTimeout)
               ? "dispatch's"
               : "combine's") +
          " rows of its peers (flag " + std::to_string(words[1]) +
          chunkOfFlag(words[1]) + "; did a rank die?)";
    break;
  case ExchangeStatus::Capacity:
    why = "found that rank " + std::to_string(words[1]) +
          " would receive more rows than its " +
          std::to_string(receivedRows()) + " (do the ranks run one bundle?)";
    break;
  }
  return Status::failure(rank + ": the device-initiated exchange of " + what +
                         " " + why);
}

Status CudaBackend::allocateStaging() {
  std::vector<const GpuBuffer *> staged;
  if (inputBuffer && outputBuffers[0] && outputBuffers[1] && outputBuffers[2])
    staged = {inputBuffer, outputBuffers[0], outputBuffers[1],
              outputBuffers[2]};
  // A step keeping its state on the device: its per-step inputs and the
  // results it reports (not the gradients, which stay there).
  if (manifest.train.stateOnDevice)
    for (size_t i = 0; i < manifest.train.arguments.size(); ++i) {
      const TrainArgumentSpec &spec = manifest.train.arguments[i];
      if (trainArgumentBuffers[i] &&
          (spec.output ? !isGradient(spec) : isStepInput(spec)))
        staged.push_back(trainArgumentBuffers[i]);
    }
  // The backward pass's inputs and gradients (the caller's tensors).
  for (const GpuBuffer *b : backwardArgumentBuffers)
    if (b)
      staged.push_back(b);
  if (tokensWord)
    staged.push_back(tokensWord);
  if (exchangeStatus)
    staged.push_back(exchangeStatus);
  stagedRows.assign(manifest.gpu.buffers.size(), 0);
  stagingOffsets.assign(manifest.gpu.buffers.size(), kNoStaging);
  size_t bytes = 0;
  for (const GpuBuffer *b : staged) {
    size_t &at =
        stagingOffsets[static_cast<size_t>(b - manifest.gpu.buffers.data())];
    if (at != kNoStaging)
      continue; // x of both the forward pass and the step
    at = bytes;
    bytes += (capacityBytes(*b) + 255) / 256 * 256;
  }
  if (bytes == 0)
    return Status::success();
  if (Status s = check(driver.memAllocHost(&pinned, bytes),
                       "cannot allocate " + formatBytes(bytes) +
                           " of page-locked host memory");
      !s.ok())
    return s;
  // Zeros past what a step stages (see stagedRows).
  std::memset(pinned, 0, bytes);
  return Status::success();
}

Status
CudaBackend::uploadParameters(const std::vector<const Tensor *> &arguments) {
  auto parameter = [&](const std::string &role) -> const Tensor * {
    for (size_t i = 0; i < manifest.parameters.size(); ++i)
      if (manifest.parameters[i].role == role)
        return arguments[1 + i];
    return nullptr;
  };
  for (const GpuBuffer &b : manifest.gpu.buffers) {
    AlignedBytes packed;
    const AlignedBytes *bytes = nullptr;
    if (b.source.kind == abi::SourceKind::Param) {
      const Tensor *t = parameter(b.source.role);
      if (!t)
        return Status::failure("buffer '" + b.name + "' takes parameter '" +
                               b.source.role + "', which the bundle has not");
      bytes = &t->data;
    } else if (b.source.fromCheckpoint()) {
      bool concat = b.source.kind == abi::SourceKind::Concat;
      const Tensor *gate = parameter(b.source.role);
      const Tensor *up = parameter(b.source.upRole);
      if (!gate || !up || gate->shape != up->shape ||
          (concat && gate->shape.size() < 2))
        return Status::failure("buffer '" + b.name + "' packs '" +
                               b.source.role + "," + b.source.upRole +
                               "', which the bundle does not hold alike" +
                               (concat ? " (as matrices)" : ""));
      // A rank-2 buffer packs vectors (the experts' gate and up biases).
      packed = concat ? concatGateUp(*gate, *up)
                      : packGateUp(*gate, *up,
                                   /*vectors=*/b.shape.size() == 2);
      bytes = &packed;
    } else {
      continue;
    }
    if (bytes->size() != capacityBytes(b))
      return Status::failure(
          "buffer '" + b.name + "' needs " + std::to_string(capacityBytes(b)) +
          " bytes, its parameters give " + std::to_string(bytes->size()));
    if (Status s =
            check(driver.memcpyHtoD(deviceOf(b), bytes->data(), bytes->size()),
                  "cannot upload '" + b.name + "'");
        !s.ok())
      return s;
  }
  parametersUploaded = true;
  // The compute copies are the host's now, not the masters'.
  copiesStale = true;
  return Status::success();
}

Status CudaBackend::runExchange(const GpuStep &step, CUevent begin,
                                CUevent end, bool *timed) {
  if (!deviceComm)
    return Status::failure(
        "the bundle's layer is sharded over " +
        std::to_string(manifest.expertParallel) +
        " expert-parallel ranks, and this run has no communicator (run it "
        "with mpirun -np " +
        std::to_string(manifest.expertParallel) + ")");
  int64_t experts = manifest.layer.experts;
  int ranks = deviceComm->size();
  double started = steadySeconds();
  auto ptr = [&](size_t arg) {
    return reinterpret_cast<void *>(buffers[step.argIds[arg]]);
  };
  abi::ExchangeKind kind = step.exchange;
  // A dispatch needs what the launches before wrote on the host (the
  // sizes). The others have their sizes from the dispatch: the
  // communicator's stream waits for the compute stream's work so far,
  // runs the exchange, and the compute stream goes on (the steps that
  // touch the exchange's buffers wait for it).
  bool async = kind != abi::ExchangeKind::Dispatch &&
               kind != abi::ExchangeKind::DispatchPlan;
  auto *commStream = static_cast<CUstream>(deviceComm->stream());
  if (async) {
    if (Status s = orderAfterCompute(commStream, "the exchange"); !s.ok())
      return s;
    if (begin)
      driver.eventRecord(begin, commStream);
  } else if (Status s = check(driver.streamSynchronize(stream),
                              "a kernel before the exchange failed");
             !s.ok()) {
    return s;
  }
  if (kind == abi::ExchangeKind::Dispatch) {
    dispatchedOffsets.assign(experts + 1, 0);
    receivedOffsets.assign(experts + 1, 0);
    if (Status s = check(driver.memcpyDtoH(dispatchedOffsets.data(),
                                           buffers[step.argIds[0]],
                                           (experts + 1) * sizeof(int32_t)),
                         "cannot read the expert offsets");
        !s.ok())
      return s;
    exchangeOffsets(*hostComm, comm::Kind::Dispatch, dispatchedOffsets.data(),
                    receivedOffsets.data(), experts);
    if (receivedOffsets[experts] > receivedRows())
      return Status::failure(
          "rank " + std::to_string(deviceComm->rank()) + " receives " +
          std::to_string(receivedOffsets[experts]) + " rows, more than its " +
          std::to_string(receivedRows()) + " (do the ranks run one bundle?)");
    int64_t local = experts / ranks;
    std::vector<int32_t> groups(local + 1);
    for (int64_t l = 0; l <= local; ++l)
      groups[l] = receivedOffsets[l * ranks];
    if (Status s = check(driver.memcpyHtoD(buffers[step.argIds[3]],
                                           receivedOffsets.data(),
                                           (experts + 1) * sizeof(int32_t)),
                         "cannot write the received offsets");
        !s.ok())
      return s;
    if (Status s =
            check(driver.memcpyHtoD(buffers[step.argIds[4]], groups.data(),
                                    groups.size() * sizeof(int32_t)),
                  "cannot write the experts' offsets");
        !s.ok())
      return s;
    ExchangePlan rows = planExchange(
        comm::Kind::Dispatch, dispatchedOffsets.data(), receivedOffsets.data(),
        experts, ranks, rowBytes(bufferOf(step.argIds[1])));
    ExchangePlan weights =
        planExchange(comm::Kind::Dispatch, dispatchedOffsets.data(),
                     receivedOffsets.data(), experts, ranks, sizeof(float));
    if (Status s = deviceComm->exchange(ptr(1), rows.sends, ptr(5), rows.recvs);
        !s.ok())
      return s;
    if (Status s =
            deviceComm->exchange(ptr(2), weights.sends, ptr(6), weights.recvs);
        !s.ok())
      return s;
  } else if (kind == abi::ExchangeKind::DispatchPlan) {
    if (Status s = planChunks(step); !s.ok())
      return s;
  } else if ((kind == abi::ExchangeKind::DispatchRows ||
              kind == abi::ExchangeKind::CombineRows) &&
             step.chunk >= 0) {
    // One chunk's segments of the last plan, either way.
    auto c = static_cast<size_t>(step.chunk);
    if (c >= chunkDispatched.size())
      return Status::failure(
          "the schedule exchanges chunk " + std::to_string(c) + " of " +
          std::to_string(chunkDispatched.size()) +
          " planned chunks (a dispatch_plan must come first)");
    bool forth = kind == abi::ExchangeKind::DispatchRows;
    const int32_t *sent = chunkDispatched[c].data();
    const int32_t *came = chunkReceived[c].data();
    ExchangePlan plan =
        planExchange(forth ? comm::Kind::Dispatch : comm::Kind::Combine,
                     forth ? sent : came, forth ? came : sent, experts, ranks,
                     rowBytes(bufferOf(step.argIds[0])));
    if (Status s = deviceComm->exchange(ptr(0), plan.sends, ptr(1), plan.recvs);
        !s.ok())
      return s;
  } else if (kind == abi::ExchangeKind::DispatchRows ||
             kind == abi::ExchangeKind::CombineRows) {
    // More rows of the last dispatch's segments, either way.
    if (receivedOffsets.empty())
      return Status::failure("the schedule exchanges rows before it "
                             "dispatches");
    bool forth = kind == abi::ExchangeKind::DispatchRows;
    ExchangePlan plan =
        planExchange(forth ? comm::Kind::Dispatch : comm::Kind::Combine,
                     forth ? dispatchedOffsets.data() : receivedOffsets.data(),
                     forth ? receivedOffsets.data() : dispatchedOffsets.data(),
                     experts, ranks, rowBytes(bufferOf(step.argIds[0])));
    if (Status s = deviceComm->exchange(ptr(0), plan.sends, ptr(1), plan.recvs);
        !s.ok())
      return s;
  } else if (kind == abi::ExchangeKind::Combine) {
    if (receivedOffsets.empty())
      return Status::failure("the schedule combines before it dispatches");
    ExchangePlan rows = planExchange(
        comm::Kind::Combine, receivedOffsets.data(), dispatchedOffsets.data(),
        experts, ranks, rowBytes(bufferOf(step.argIds[1])));
    if (Status s = deviceComm->exchange(ptr(1), rows.sends, ptr(3), rows.recvs);
        !s.ok())
      return s;
  }
  if (async) {
    if (end) {
      driver.eventRecord(end, commStream);
      if (timed)
        *timed = true;
    }
    if (Status s = addPendingExchange(commStream, step.argIds, step.chunk,
                                      "the exchange");
        !s.ok())
      return s;
    // For the trace: enqueueing it (it runs beside the next launches).
    std::string what(abi::exchangeKindName(step.exchange));
    if (step.chunk >= 0)
      what += ", chunk " + std::to_string(step.chunk);
    hostComm->record("all-to-all (" + what + ", NCCL, enqueued)", started);
    return Status::success();
  }
  if (kind == abi::ExchangeKind::DispatchPlan) {
    // Sizes only, over the host's communicator.
    hostComm->record("all-to-all (dispatch_plan, sizes)", started);
    return Status::success();
  }
  Status done = deviceComm->synchronize();
  // For the trace: the exchange's span, sizes and NCCL together.
  hostComm->record("all-to-all (" +
                       std::string(abi::exchangeKindName(step.exchange)) +
                       ", NCCL)",
                   started);
  return done;
}

Status CudaBackend::planChunks(const GpuStep &step) {
  int64_t experts = manifest.layer.experts;
  int ranks = deviceComm->size();
  int64_t local = experts / ranks;
  auto chunks = static_cast<int64_t>(step.args.size()) - 2;
  const GpuBuffer *offsets = &bufferOf(step.argIds[0]);
  const GpuBuffer *received = &bufferOf(step.argIds[1]);
  if (offsets->shape.size() != 1 || offsets->shape[0] != chunks * experts + 1 ||
      received->shape.size() != 1 ||
      received->shape[0] != chunks * (experts + 1))
    return Status::failure(
        "a dispatch_plan of " + std::to_string(chunks) +
        " chunks needs offsets of " + std::to_string(chunks * experts + 1) +
        " and ep_offsets of " + std::to_string(chunks * (experts + 1)) +
        " entries");
  std::vector<int32_t> all(static_cast<size_t>(chunks * experts + 1));
  if (Status s = check(driver.memcpyDtoH(all.data(), buffers[step.argIds[0]],
                                         all.size() * sizeof(int32_t)),
                       "cannot read the chunks' expert offsets");
      !s.ok())
    return s;
  chunkDispatched.assign(static_cast<size_t>(chunks), {});
  chunkReceived.assign(static_cast<size_t>(chunks), {});
  std::vector<int32_t> layout; // every chunk's received offsets in a row
  int64_t base = 0;
  for (int64_t c = 0; c < chunks; ++c) {
    // The chunk's segments from 0 for the exchange of sizes, then where
    // they lie: after the chunks before, on both sides.
    std::vector<int32_t> sent(all.begin() + c * experts,
                              all.begin() + (c + 1) * experts + 1);
    std::vector<int32_t> sizes(sent);
    for (int32_t &o : sizes)
      o -= sent[0];
    std::vector<int32_t> came(static_cast<size_t>(experts + 1));
    exchangeOffsets(*hostComm, comm::Kind::Dispatch, sizes.data(), came.data(),
                    experts);
    chunkDispatched[c] = std::move(sent);
    chunkReceived[c] = std::move(came);
  }
  // Every rank has taken part in every chunk's exchange of sizes before
  // one can fail here.
  for (int64_t c = 0; c < chunks; ++c) {
    std::vector<int32_t> &came = chunkReceived[c];
    if (base + came[experts] > receivedRows())
      return Status::failure(
          "rank " + std::to_string(deviceComm->rank()) + " receives " +
          std::to_string(base + came[experts]) + " rows in " +
          std::to_string(c + 1) + " chunks, more than its " +
          std::to_string(receivedRows()) + " (do the ranks run one bundle?)");
    for (int32_t &o : came)
      o += static_cast<int32_t>(base);
    base = came[experts];
    std::vector<int32_t> groups(static_cast<size_t>(local + 1));
    for (int64_t l = 0; l <= local; ++l)
      groups[l] = came[l * ranks];
    if (Status s = check(
            driver.memcpyHtoD(buffers[step.argIds[2 + c]], groups.data(),
                              groups.size() * sizeof(int32_t)),
            "cannot write chunk " + std::to_string(c) + "'s expert offsets");
        !s.ok())
      return s;
    layout.insert(layout.end(), came.begin(), came.end());
  }
  // A later unchunked exchange has no dispatch to refer to.
  dispatchedOffsets.clear();
  receivedOffsets.clear();
  return check(driver.memcpyHtoD(buffers[step.argIds[1]], layout.data(),
                                 layout.size() * sizeof(int32_t)),
               "cannot write the received offsets");
}

Status CudaBackend::runAllReduce(const GpuStep &step) {
  if (!deviceComm)
    return Status::failure("the bundle's schedule sums over ranks, and this "
                           "run has no communicator");
  // Stream-ordered, like an exchange whose sizes are known: the
  // communicator's stream waits for the compute stream's work so far and
  // sums; the steps that touch the sums (or the schedule's end) wait for
  // it on the device. No host wait.
  double started = steadySeconds();
  auto *commStream = static_cast<CUstream>(deviceComm->stream());
  if (Status s = orderAfterCompute(commStream, "the all-reduce"); !s.ok())
    return s;
  for (int32_t id : step.argIds)
    if (Status s = deviceComm->allReduceSum(
            reinterpret_cast<float *>(buffers[id]),
            capacityBytes(bufferOf(id)) / sizeof(float));
        !s.ok())
      return s;
  if (Status s =
          addPendingExchange(commStream, step.argIds, -1, "the all-reduce");
      !s.ok())
    return s;
  hostComm->record("all-reduce (NCCL, enqueued)", started);
  return Status::success();
}

Status CudaBackend::waitForDevice(const std::string &what) {
  // Collectives first, polled against the communicator's timeout: a rank
  // that died must not leave this one blocked in the synchronization.
  if (deviceComm)
    if (Status s = deviceComm->synchronize(); !s.ok())
      return s;
  return check(driver.streamSynchronize(stream),
               "a kernel of " + what + " failed");
}

Status CudaBackend::launchSteps(const std::vector<GpuStep> &steps,
                                const SchedulePlan &plan, int64_t tokens,
                                bool timed, bool sameClock,
                                int64_t rowCapacity) {
  int64_t k = manifest.layer.topK;
  if (rowCapacity < 0)
    rowCapacity = manifest.gpu.rowCapacity;
  if (timed) {
    timedExchanges.assign(steps.size(), false);
    timedGrids.assign(steps.size(), 0);
    if (!scheduleStart) {
      if (Status s = check(driver.eventCreate(&scheduleStart, 0),
                           "cuEventCreate");
          !s.ok())
        return s;
      sameClock = false;
    }
    if (!sameClock)
      driver.eventRecord(scheduleStart, stream);
  }
  // The last step that ran (a launch right after a launch may overlap it).
  const GpuStep *previous = nullptr;
  for (size_t i = 0; i < steps.size(); ++i) {
    const GpuStep &step = steps[i];
    if (!runs(step))
      continue;
    const GpuStep *before = previous;
    previous = &step;
    if (step.kind == abi::StepKind::Exchange) {
      bool recorded = false;
      if (Status s = timed ? runExchange(step, events[2 * i],
                                         events[2 * i + 1], &recorded)
                           : runExchange(step);
          !s.ok())
        return s;
      if (timed)
        timedExchanges[i] = recorded;
      continue;
    }
    if (step.kind == abi::StepKind::AllReduce) {
      if (Status s = runAllReduce(step); !s.ok())
        return s;
      continue;
    }
    if (step.kind == abi::StepKind::Memset) {
      std::vector<int32_t> cleared{step.bufferId};
      if (Status s = waitForExchanges(&cleared); !s.ok())
        return s;
      if (Status s = check(driver.memsetD8Async(
                               buffers[step.bufferId], 0,
                               capacityBytes(bufferOf(step.bufferId)), stream),
                           "cannot clear '" + step.buffer + "'");
          !s.ok())
        return s;
      continue;
    }
    if (Status s = waitForExchanges(&step.argIds, step.chunk); !s.ok())
      return s;
    // A device-initiated send runs on the communicator's stream, beside
    // the compute stream's kernels (its CTAs on the comm SMs that the
    // persistent kernels leave free): after the compute stream's work so
    // far, and the steps that touch its buffers (its wait, which reads
    // its flags) after it. $MOE_EP_SEND_STREAM=compute keeps it in line.
    CUstream launchStream = stream;
    bool onCommStream = step.kernelKind == abi::KernelKind::EpSend &&
                        deviceComm && sendsOnCommStream;
    if (onCommStream) {
      launchStream = static_cast<CUstream>(deviceComm->stream());
      if (Status s = orderAfterCompute(launchStream, "a send"); !s.ok())
        return s;
      // The next launch on the compute stream follows the kernel before
      // this one there.
      previous = before;
    }
    int64_t perBlock = std::max<int64_t>(step.perBlock, 1);
    int64_t grid = step.gridSize;
    switch (step.grid) {
    case abi::GridKind::Tokens:
      grid = (tokens + perBlock - 1) / perBlock;
      break;
    case abi::GridKind::Assignments:
      grid = (tokens * k + perBlock - 1) / perBlock;
      break;
    case abi::GridKind::Rows:
      grid = (rowCapacity + perBlock - 1) / perBlock *
             std::max<int64_t>(step.gridSize, 1);
      break;
    case abi::GridKind::ReceivedRows:
      grid = (receivedRows() + perBlock - 1) / perBlock *
             std::max<int64_t>(step.gridSize, 1);
      break;
    case abi::GridKind::One:
      grid = 1;
      break;
    case abi::GridKind::Persistent:
    case abi::GridKind::Fixed:
      break;
    }
    // Memref arguments as MLIR passes them to kernels: allocated and
    // aligned pointers, offset, sizes, row-major strides; then the tensor
    // map pointers appended by the compiler.
    std::vector<int64_t> words;
    words.reserve(64);
    for (int32_t id : step.argIds) {
      const GpuBuffer *b = &bufferOf(id);
      auto ptr = static_cast<int64_t>(buffers[id]);
      words.push_back(ptr);
      words.push_back(ptr);
      words.push_back(0);
      std::vector<int64_t> sizes;
      for (int64_t d : b->shape)
        sizes.push_back(resolveDim(d, tokens, rowCapacity, receivedRows()));
      for (int64_t s : sizes)
        words.push_back(s);
      int64_t stride = 1;
      std::vector<int64_t> strides(sizes.size());
      for (size_t j = sizes.size(); j-- > 0;) {
        strides[j] = stride;
        stride *= sizes[j];
      }
      for (int64_t s : strides)
        words.push_back(s);
    }
    for (CUdeviceptr map : plan[i].maps)
      words.push_back(static_cast<int64_t>(map));
    std::vector<void *> params;
    for (size_t j = 0; j < words.size(); ++j)
      params.push_back(&words[j]);

    LaunchAttribute attrs[2]{};
    attrs[0].id = kLaunchAttributeClusterDimension;
    attrs[0].value.clusterDim = {static_cast<unsigned>(step.cluster), 1, 1};
    // A kernel right after another (no memset, exchange or timing event
    // between): programmatic dependent launch. Every kernel waits
    // (griddepcontrol.wait) for the one before to complete before it
    // touches memory, so it may be scheduled while that one runs.
    attrs[1].id = kLaunchAttributeProgrammaticStreamSerialization;
    attrs[1].value.programmaticStreamSerializationAllowed = 1;
    bool afterKernel = before && before->kind == abi::StepKind::Launch &&
                       !timed && !onCommStream;
    LaunchConfig config{static_cast<unsigned>(grid),
                        1,
                        1,
                        static_cast<unsigned>(step.block),
                        1,
                        1,
                        static_cast<unsigned>(step.sharedMemory),
                        launchStream,
                        attrs,
                        afterKernel ? 2u : 1u};
    if (timed) {
      driver.eventRecord(events[2 * i], launchStream);
      timedExchanges[i] = onCommStream;
      timedGrids[i] = grid;
    }
    if (Status s = check(driver.launchKernelEx(&config, plan[i].function,
                                               params.data(), nullptr),
                         "cannot launch kernel '" + step.kernel + "'");
        !s.ok())
      return s;
    if (timed)
      driver.eventRecord(events[2 * i + 1], launchStream);
    if (onCommStream)
      if (Status s = addPendingExchange(launchStream, step.argIds, step.chunk,
                                        "a send");
          !s.ok())
        return s;
  }
  // Nothing of the schedule outlives it.
  return waitForExchanges(nullptr);
}

Status CudaBackend::run(const std::vector<const Tensor *> &arguments) {
  const Tensor &x = *arguments.front();
  int64_t tokens = x.shape[0];
  if (!inputBuffer || !outputBuffers[0] || !outputBuffers[1] ||
      !outputBuffers[2])
    return Status::failure("the sm_90a bundle has no forward pass (no "
                           "buffers x, y, topk_ids and topk_weights)");
  lastTokens = tokens;
  if (!parametersUploaded)
    if (Status s = uploadParameters(arguments); !s.ok())
      return s;
  if (static_cast<size_t>(x.data.size()) > capacityBytes(*inputBuffer))
    return Status::failure("the input is larger than the bundle's x");
  std::memcpy(stagingOf(*inputBuffer), x.data.data(), x.data.size());

  Expected<int> variant = forwardVariant(tokens);
  if (!variant)
    return Status::failure(variant.message());
  ForwardBuild build = forwardBuild(*variant);
  const std::vector<GpuStep> &steps = build.steps;
  lastTileM = build.tileM;
  profile.clear();
  stageTokens(tokens);
  // One wait for the device a pass, after the outputs' copies: the pass
  // replays its graph where it can (one a bucket of token counts, where
  // the kernels read the count from memory), else enqueues its steps.
  if (tokens > 0) {
    if (capturable(steps)) {
      int64_t launched = launchTokens(tokens, variantCapacity(*variant));
      if (Status s = launchGraph(
              {kForwardPass, launched, *variant}, "the forward pass",
              [&] { return enqueueForward(launched, *variant); });
          !s.ok())
        return s;
    } else if (Status s = enqueueForward(tokens, *variant); !s.ok()) {
      return s;
    }
  }
  if (Status s = waitForDevice("the forward pass"); !s.ok())
    return s;
  if (tokens > 0)
    if (Status s = checkExchangeStatus("the forward pass"); !s.ok())
      return s;
  if (profiling && tokens > 0)
    collectProfile(steps);

  // Outputs: y (converted to f32), topk_ids, topk_weights, from their
  // staging.
  const char *names[3] = {"y", "topk_ids", "topk_weights"};
  for (int o = 0; o < 3; ++o) {
    const Tensor &out = *arguments[arguments.size() - 3 + o];
    auto *into = const_cast<uint8_t *>(out.data.data());
    const GpuBuffer *b = outputBuffers[o];
    size_t count = static_cast<size_t>(out.numElements());
    if (tokens == 0 || count == 0)
      continue;
    bool same = b->dtype == out.dtype;
    if (!same && !(isFloatType(b->dtype) && isFloatType(out.dtype)))
      return Status::failure(std::string("cannot convert '") + names[o] +
                             "' from " + mlirName(b->dtype) + " to " +
                             mlirName(out.dtype));
    const uint8_t *from = stagingOf(*b);
    if (same)
      std::memcpy(into, from, count * dtypeSize(b->dtype));
    else
      convertFloats(from, b->dtype, into, out.dtype, count);
  }
  return Status::success();
}

Status CudaBackend::runOnDevice(const DeviceForward &io,
                                const std::vector<const Tensor *> &arguments) {
  if (!inputBuffer || !outputBuffers[0] || !outputBuffers[1] ||
      !outputBuffers[2])
    return Status::failure("the sm_90a bundle has no forward pass (no "
                           "buffers x, y, topk_ids and topk_weights)");
  if (Status s = checkDevicePass(io.tokens); !s.ok())
    return s;
  int64_t tokens = io.tokens;
  size_t inputBytes = static_cast<size_t>(tokens) * rowBytes(*inputBuffer);
  if (tokens < 0 || inputBytes > capacityBytes(*inputBuffer))
    return Status::failure("the input is larger than the bundle's x");
  lastTokens = tokens;
  if (!parametersUploaded)
    if (Status s = uploadParameters(arguments); !s.ok())
      return s;
  Expected<int> variant = forwardVariant(tokens);
  if (!variant)
    return Status::failure(variant.message());
  ForwardBuild build = forwardBuild(*variant);
  lastTileM = build.tileM;
  profile.clear();
  auto caller = reinterpret_cast<CUstream>(io.stream);
  bool callerCaptures = false;
  if (Status s = joinCaller(caller, callerCaptures); !s.ok())
    return s;
  if (tokens > 0) {
    // The token count and x straight into the pass's buffers (device to
    // device), then the kernels (a graph per bucket of token counts, as
    // the host path replays them), then the outputs out of them.
    if (Status s = setTokensOnDevice(tokens); !s.ok())
      return s;
    if (Status s = check(driver.memcpyDtoDAsync(deviceOf(*inputBuffer), io.x,
                                                inputBytes, stream),
                         "cannot copy x into the pass's input");
        !s.ok())
      return s;
    if (Status s = launchOnDevice({kDeviceForwardPass, *variant}, build.steps,
                                  build.plan, tokens, variantCapacity(*variant),
                                  callerCaptures, "the forward pass",
                                  build.rowCapacity);
        !s.ok())
      return s;
    const uint64_t into[3] = {io.y, io.topkIds, io.topkWeights};
    const char *names[3] = {"y", "topk_ids", "topk_weights"};
    for (int o = 0; o < 3; ++o) {
      size_t bytes = static_cast<size_t>(tokens) * rowBytes(*outputBuffers[o]);
      if (Status s =
              check(driver.memcpyDtoDAsync(into[o], deviceOf(*outputBuffers[o]),
                                           bytes, stream),
                    std::string("cannot copy '") + names[o] + "' out");
          !s.ok())
        return s;
    }
  }
  return finishDevicePass(caller);
}

Status CudaBackend::checkDevicePass(int64_t tokens) {
  // Sharded, the exchanges must be the device's own: the NCCL path's
  // host-driven steps cannot run behind the caller's stream.
  if (manifest.expertParallel > 1) {
    if (transport != abi::Transport::Lsa)
      return Status::failure(
          "a sharded layer on device pointers needs the device-initiated "
          "exchange (NCCL symmetric memory within one node); this "
          "communicator's transport is " +
          exchangeTransport());
    if (tokens == 0)
      return Status::failure("a rank of a sharded layer on device pointers "
                             "needs at least one token a pass (its peers "
                             "wait for its rows)");
  }
  // The previous pass's exchange status, where the device is done with it
  // (no wait: a pass still running is checked by a later call).
  if (statusPending && driver.streamQuery(stream) == 0) {
    statusPending = false;
    if (Status s = checkExchangeStatus("an earlier pass"); !s.ok())
      return s;
  }
  return Status::success();
}

Status CudaBackend::joinCaller(CUstream caller, bool &callerCaptures) {
  for (CUevent *e : {&callerReady, &passDone})
    if (!*e)
      if (Status s = check(driver.eventCreate(e, /*DISABLE_TIMING=*/2),
                           "cuEventCreate");
          !s.ok())
        return s;
  // A caller capturing its stream into a CUDA graph (torch.cuda.graph)
  // gets the pass's copies and kernels in its graph: this stream joins
  // the capture through the events, and no graph of ours is launched
  // inside it.
  int captureStatus = 0;
  if (caller)
    if (Status s = check(driver.streamIsCapturing(caller, &captureStatus),
                         "cannot query the caller's stream");
        !s.ok())
      return s;
  if (captureStatus == 2)
    return Status::failure("the caller's stream capture was invalidated");
  callerCaptures = captureStatus == 1;
  if (Status s = check(driver.eventRecord(callerReady, caller),
                       "cannot record an event on the caller's stream");
      !s.ok())
    return s;
  return check(driver.streamWaitEvent(stream, callerReady, 0),
               "cannot order the pass after the caller's stream");
}

Status CudaBackend::setTokensOnDevice(int64_t tokens) {
  if (!tokensWord)
    return Status::success();
  return check(driver.memsetD32Async(deviceOf(*tokensWord),
                                     static_cast<unsigned>(tokens), 1, stream),
               "cannot set the token count");
}

Status CudaBackend::launchOnDevice(std::vector<int64_t> key,
                                   const std::vector<GpuStep> &steps,
                                   const SchedulePlan &plan, int64_t tokens,
                                   int64_t capacity, bool callerCaptures,
                                   const char *what, int64_t rowCapacity) {
  if (!capturable(steps) || callerCaptures)
    return launchSteps(steps, plan, tokens, /*timed=*/false,
                       /*sameClock=*/false, rowCapacity);
  int64_t launched = launchTokens(tokens, capacity);
  key.insert(key.begin() + 1, launched);
  return launchGraph(key, what, [&] {
    return launchSteps(steps, plan, launched, /*timed=*/false,
                       /*sameClock=*/false, rowCapacity);
  });
}

Status CudaBackend::finishDevicePass(CUstream caller) {
  // Sharded: the exchange's status words come back with the pass (8
  // bytes), read by a later call once the device is done with them.
  if (manifest.expertParallel > 1) {
    if (Status s = enqueueStatusCopy(); !s.ok())
      return s;
    statusPending = true;
  }
  return releaseCaller(caller);
}

Status CudaBackend::releaseCaller(CUstream caller) {
  if (Status s = check(driver.eventRecord(passDone, stream),
                       "cannot record the pass's end");
      !s.ok())
    return s;
  return check(driver.streamWaitEvent(caller, passDone, 0),
               "cannot order the caller's stream after the pass");
}

Status
CudaBackend::runBackwardOnDevice(const DeviceBackward &io,
                                 const std::vector<const Tensor *> &arguments) {
  const TrainSpec &spec = manifest.backward;
  if (spec.entry.empty() || manifest.gpu.backwardSteps.empty())
    return Status::failure("the sm_90a bundle has no backward pass (compile "
                           "it with moe-compile --backward)");
  if (Status s = checkDevicePass(io.tokens); !s.ok())
    return s;
  int64_t tokens = io.tokens;
  if (tokens < 0 || tokens > manifest.maxTokens)
    return Status::failure("a backward pass takes 0 to " +
                           std::to_string(manifest.maxTokens) +
                           " tokens, got " + std::to_string(tokens));
  lastTokens = tokens;
  if (!parametersUploaded)
    if (Status s = uploadParameters(arguments); !s.ok())
      return s;
  profile.clear();
  auto caller = reinterpret_cast<CUstream>(io.stream);
  bool callerCaptures = false;
  if (Status s = joinCaller(caller, callerCaptures); !s.ok())
    return s;
  // The arguments' buffers: the inputs x and dy, then the outputs in
  // order (io.grads').
  std::vector<std::pair<size_t, uint64_t>> inputs, outputs;
  for (size_t i = 0; i < spec.arguments.size(); ++i) {
    const TrainArgumentSpec &a = spec.arguments[i];
    if (!backwardArgumentBuffers[i])
      return Status::failure("the backward schedule has no buffer for "
                             "argument '" +
                             a.name + "'");
    if (a.output)
      outputs.push_back({i, io.grads[outputs.size()]});
    else if (a.name == "x" || a.name == "dy")
      inputs.push_back({i, a.name == "x" ? io.x : io.dy});
  }
  if (tokens > 0) {
    // The count, x and dy straight into the pass's buffers (their rows
    // past the tokens zero: the shared experts' weight gradients reduce
    // over whole blocks of rows), the kernels (a graph per bucket), the
    // gradients out.
    if (Status s = setTokensOnDevice(tokens); !s.ok())
      return s;
    for (auto [i, from] : inputs) {
      const GpuBuffer &b = *backwardArgumentBuffers[i];
      const std::string &name = spec.arguments[i].name;
      size_t bytes = argumentBytes(spec.arguments[i], b, tokens);
      if (Status s =
              check(driver.memcpyDtoDAsync(deviceOf(b), from, bytes, stream),
                    "cannot copy " + name + " into the pass");
          !s.ok())
        return s;
      if (Status s = clearPast(b, bytes, name); !s.ok())
        return s;
    }
    if (Status s = launchOnDevice(
            {kDeviceBackwardPass}, manifest.gpu.backwardSteps, backwardStepPlan,
            tokens, manifest.maxTokens, callerCaptures, "the backward pass");
        !s.ok())
      return s;
  }
  for (auto [i, into] : outputs) {
    const GpuBuffer &b = *backwardArgumentBuffers[i];
    size_t bytes = argumentBytes(spec.arguments[i], b, tokens);
    if (bytes == 0)
      continue;
    // No tokens: every gradient is zero.
    Status s =
        tokens > 0
            ? check(driver.memcpyDtoDAsync(into, deviceOf(b), bytes, stream),
                    "cannot copy '" + spec.arguments[i].name + "' out")
            : check(driver.memsetD8Async(into, 0, bytes, stream),
                    "cannot clear '" + spec.arguments[i].name + "'");
    if (!s.ok())
      return s;
  }
  return finishDevicePass(caller);
}

Expected<int> CudaBackend::forwardVariant(int64_t tokens) const {
  const std::vector<GpuVariant> &variants = manifest.gpu.variants;
  // Read once, as $MOE_CUDA_GRAPHS is: a pass asks nothing of the
  // environment.
  static const std::string text = [] {
    const char *v = std::getenv("MOE_TILE_M");
    return std::string(v ? v : "");
  }();
  if (text.empty()) {
    for (size_t v = 0; v < variants.size(); ++v)
      if (tokens <= variants[v].maxTokens)
        return static_cast<int>(v);
    return -1;
  }
  if (text != "64" && text != "128")
    return Expected<int>::error("MOE_TILE_M is '" + text +
                                "', expected 64 or 128 (the expert GEMMs' "
                                "BLOCK_M of a build of the forward pass)");
  int64_t tileM = std::stoll(text);
  // Bundles before variants record no tile: theirs is the 128 default.
  int64_t own = manifest.gpu.tileM ? manifest.gpu.tileM : 128;
  if (own == tileM)
    return -1;
  std::string have = std::to_string(own);
  for (size_t v = 0; v < variants.size(); ++v) {
    if (variants[v].tileM == tileM)
      return static_cast<int>(v);
    have += " and " + std::to_string(variants[v].tileM);
  }
  return Expected<int>::error("MOE_TILE_M is " + text +
                              ", but the bundle's forward pass is built "
                              "with BLOCK_M " +
                              have + " only");
}

Status CudaBackend::enqueueForward(int64_t launched, int variant) {
  ForwardBuild build = forwardBuild(variant);
  if (Status s = enqueueTokens(); !s.ok())
    return s;
  size_t inputBytes = static_cast<size_t>(launched) * rowBytes(*inputBuffer);
  if (Status s = check(driver.memcpyHtoDAsync(deviceOf(*inputBuffer),
                                              stagingOf(*inputBuffer),
                                              inputBytes, stream),
                       "cannot upload the input");
      !s.ok())
    return s;
  if (Status s = launchSteps(build.steps, build.plan, launched, profiling,
                             /*sameClock=*/false, build.rowCapacity);
      !s.ok())
    return s;
  const char *names[3] = {"y", "topk_ids", "topk_weights"};
  for (int o = 0; o < 3; ++o) {
    const GpuBuffer *b = outputBuffers[o];
    size_t bytes = static_cast<size_t>(launched) * rowBytes(*b);
    if (Status s = check(
            driver.memcpyDtoHAsync(stagingOf(*b), deviceOf(*b), bytes, stream),
            std::string("cannot download '") + names[o] + "'");
        !s.ok())
      return s;
  }
  return enqueueStatusCopy();
}

bool CudaBackend::capturable(const std::vector<GpuStep> &steps) const {
  static const bool off = [] {
    const char *v = std::getenv("MOE_CUDA_GRAPHS");
    return v && std::strcmp(v, "0") == 0;
  }();
  if (off || profiling)
    return false;
  return std::all_of(steps.begin(), steps.end(), [&](const GpuStep &st) {
    return st.kind == abi::StepKind::Launch ||
           st.kind == abi::StepKind::Memset || !runs(st);
  });
}

Status CudaBackend::launchGraph(const std::vector<int64_t> &key,
                                const char *what,
                                const std::function<Status()> &enqueue) {
  CUgraphExec exec = nullptr;
  auto used = std::find(graphOrder.begin(), graphOrder.end(), key);
  if (used != graphOrder.end()) {
    graphOrder.erase(used);
    exec = graphs.at(key);
  } else {
    // Captured in thread-local mode: a wait or an allocation on this
    // thread while capturing fails the capture (another thread's work is
    // its own).
    std::string cannot = std::string("cannot capture ") + what;
    if (Status s = check(
            driver.streamBeginCapture(stream, kStreamCaptureModeThreadLocal),
            cannot);
        !s.ok())
      return s;
    Status enqueued = enqueue();
    CUgraph graph = nullptr;
    CUresult ended = driver.streamEndCapture(stream, &graph);
    if (!enqueued.ok()) {
      if (graph)
        driver.graphDestroy(graph);
      return enqueued;
    }
    if (Status s = check(ended, cannot); !s.ok())
      return s;
    CUresult made = driver.graphInstantiate(&exec, graph, 0);
    driver.graphDestroy(graph);
    if (Status s = check(made, std::string("cannot instantiate ") + what);
        !s.ok())
      return s;
    if (graphOrder.size() == kGraphs) {
      driver.graphExecDestroy(graphs.at(graphOrder.front()));
      graphs.erase(graphOrder.front());
      graphOrder.erase(graphOrder.begin());
    }
    graphs[key] = exec;
  }
  graphOrder.push_back(key);
  return check(driver.graphLaunch(exec, stream),
               std::string("cannot launch the graph of ") + what);
}

Status CudaBackend::runBackward(const std::vector<const Tensor *> &arguments) {
  const TrainSpec &spec = manifest.backward;
  size_t count = spec.arguments.size();
  if (arguments.size() != count + manifest.parameters.size())
    return Status::failure(
        "the backward pass takes " + std::to_string(count) +
        " arguments and the " + std::to_string(manifest.parameters.size()) +
        " parameters, got " + std::to_string(arguments.size()));
  int64_t tokens = -1;
  for (size_t i = 0; i < count; ++i)
    if (spec.arguments[i].name == "x" && !arguments[i]->shape.empty())
      tokens = arguments[i]->shape[0];
  if (tokens < 0 || tokens > manifest.maxTokens)
    return Status::failure("a backward pass takes 0 to " +
                           std::to_string(manifest.maxTokens) +
                           " tokens, got " + std::to_string(tokens));
  // A sharded rank with no tokens still serves its experts' rows: its
  // peers wait for its part of the exchanges, which the schedule's grids
  // of no tokens would not send.
  if (tokens == 0 && manifest.expertParallel > 1)
    return Status::failure("a sharded sm_90a backward pass needs at least "
                           "one token on every rank");
  if (tokens == 0)
    return Status::success(); // every gradient is zero, as given
  // The weights are the forward pass's buffers: uploaded when they changed.
  if (!parametersUploaded) {
    std::vector<const Tensor *> params = {nullptr};
    params.insert(params.end(), arguments.begin() + count, arguments.end());
    if (Status s = uploadParameters(params); !s.ok())
      return s;
  }
  bool graph = capturable(manifest.gpu.backwardSteps);
  int64_t launched = graph ? launchTokens(tokens, manifest.maxTokens) : tokens;
  std::vector<size_t> outputs;
  for (size_t i = 0; i < count; ++i) {
    const TrainArgumentSpec &a = spec.arguments[i];
    const GpuBuffer *b = backwardArgumentBuffers[i];
    if (!b || !stagingOf(*b))
      return Status::failure("the backward schedule has no buffer for "
                             "argument '" +
                             a.name + "'");
    size_t bytes = argumentBytes(a, *b, tokens);
    const Tensor &t = *arguments[i];
    if (t.dtype != b->dtype || t.data.size() != bytes)
      return Status::failure("backward argument '" + a.name + "' must be " +
                             std::string(mlirName(b->dtype)) + " of " +
                             std::to_string(bytes) + " bytes");
    if (a.output) {
      outputs.push_back(i);
      continue;
    }
    // Into the staging, zeros past the tokens up to the launched ones (a
    // graph copies its bucket's rows; x's staging is the forward pass's
    // too): the shared experts' weight gradients reduce over whole blocks
    // of rows.
    uint8_t *staged = stagingOf(*b);
    std::memcpy(staged, t.data.data(), bytes);
    std::memset(staged + bytes, 0, argumentBytes(a, *b, launched) - bytes);
  }
  lastTokens = tokens;
  profile.clear();
  stageTokens(tokens);
  // The forward pass again, the gradients, their copies to the staging:
  // one wait for the device, as a graph where the schedule can be one.
  if (graph) {
    if (Status s =
            launchGraph({kBackwardPass, launched}, "the backward pass",
                        [&] { return enqueueBackward(launched, outputs); });
        !s.ok())
      return s;
  } else if (Status s = enqueueBackward(tokens, outputs); !s.ok()) {
    return s;
  }
  if (Status s = waitForDevice("the backward pass"); !s.ok())
    return s;
  if (Status s = checkExchangeStatus("the backward pass"); !s.ok())
    return s;
  if (profiling)
    collectProfile(manifest.gpu.backwardSteps);
  for (size_t i : outputs) {
    const Tensor &t = *arguments[i];
    std::memcpy(const_cast<uint8_t *>(t.data.data()),
                stagingOf(*backwardArgumentBuffers[i]), t.data.size());
  }
  return Status::success();
}

Status CudaBackend::enqueueBackward(int64_t launched,
                                    const std::vector<size_t> &outputs) {
  const TrainSpec &spec = manifest.backward;
  if (Status s = enqueueTokens(); !s.ok())
    return s;
  for (size_t i = 0; i < spec.arguments.size(); ++i) {
    const TrainArgumentSpec &a = spec.arguments[i];
    if (a.output)
      continue;
    const GpuBuffer &b = *backwardArgumentBuffers[i];
    size_t bytes = argumentBytes(a, b, launched);
    if (Status s = check(
            driver.memcpyHtoDAsync(deviceOf(b), stagingOf(b), bytes, stream),
            "cannot upload '" + a.name + "'");
        !s.ok())
      return s;
    if (Status s = clearPast(b, bytes, a.name); !s.ok())
      return s;
  }
  if (Status s = launchSteps(manifest.gpu.backwardSteps, backwardStepPlan,
                             launched, profiling);
      !s.ok())
    return s;
  for (size_t i : outputs) {
    const GpuBuffer &b = *backwardArgumentBuffers[i];
    if (Status s =
            check(driver.memcpyDtoHAsync(
                      stagingOf(b), deviceOf(b),
                      argumentBytes(spec.arguments[i], b, launched), stream),
                  "cannot download '" + spec.arguments[i].name + "'");
        !s.ok())
      return s;
  }
  return enqueueStatusCopy();
}

Status CudaBackend::runEntry(const std::string &symbol,
                             const std::vector<const Tensor *> &arguments,
                             int64_t) {
  if (!manifest.backward.entry.empty() && symbol == manifest.backward.entry)
    return runBackward(arguments);
  const TrainSpec &train = manifest.train;
  if (train.entry.empty() || symbol != train.entry ||
      manifest.gpu.trainSteps.empty())
    return Status::failure("this sm_90a bundle has no entry point '" + symbol +
                           "' (a training step needs moe-compile --train)");
  if (arguments.size() != train.arguments.size())
    return Status::failure(
        "the training step takes " + std::to_string(train.arguments.size()) +
        " arguments, got " + std::to_string(arguments.size()));
  int64_t tokens = -1;
  for (size_t i = 0; i < arguments.size(); ++i)
    if (train.arguments[i].name == "x" && !arguments[i]->shape.empty())
      tokens = arguments[i]->shape[0];
  if (tokens < 1 || tokens > manifest.maxTokens)
    return Status::failure("a training step takes 1 to " +
                           std::to_string(manifest.maxTokens) +
                           " tokens, got " + std::to_string(tokens));
  // The step divides by every rank's tokens: this rank's count, which the
  // Trainer put last in `hyper`, summed over the ranks.
  Tensor hyper;
  float globalTokens = static_cast<float>(tokens);
  if (hostComm)
    hostComm->allReduceSum(&globalTokens, 1);
  std::vector<const Tensor *> args = arguments;
  for (size_t i = 0; i < args.size(); ++i)
    if (train.arguments[i].name == "hyper" && args[i]->dtype == DType::F32 &&
        args[i]->numElements() == 8) {
      hyper = *args[i];
      hyper.as<float>()[7] = globalTokens;
      args[i] = &hyper;
    }
  std::vector<const GpuBuffer *> targets;
  std::vector<size_t> uploads; // staged, by argument
  for (size_t i = 0; i < arguments.size(); ++i) {
    const TrainArgumentSpec &spec = train.arguments[i];
    const GpuBuffer *b = trainArgumentBuffers[i];
    if (!b)
      return Status::failure("the training schedule has no buffer for "
                             "argument '" +
                             spec.name + "'");
    size_t bytes = argumentBytes(spec, *b, tokens);
    const Tensor &t = *args[i];
    // With the state on the device, the gradients (the weights' and the
    // input's) stay there until asked for (downloadTrainingTensors): their
    // tensors may be empty.
    if (train.stateOnDevice && isGradient(spec) && t.data.empty()) {
      targets.push_back(b);
      continue;
    }
    if (t.dtype != b->dtype || t.data.size() != bytes)
      return Status::failure("training step argument '" + spec.name +
                             "' must be " + std::string(mlirName(b->dtype)) +
                             " of " + std::to_string(bytes) + " bytes");
    targets.push_back(b);
    if (spec.output)
      continue;
    // State the device holds already stays there.
    bool state = train.stateOnDevice && !isStepInput(spec);
    if (state && trainingStateValid)
      continue;
    // A master from the host: the step remakes the compute copies.
    if (!isStepInput(spec))
      copiesStale = true;
    // A step's own inputs go through their staging, copied with the
    // step's work; state (the first step's, or a restored one) directly.
    if (uint8_t *staged = stagingOf(*b)) {
      std::memcpy(staged, t.data.data(), bytes);
      // Zeros past the tokens, where an earlier step staged more.
      int64_t &dirty =
          stagedRows[static_cast<size_t>(b - manifest.gpu.buffers.data())];
      size_t dirtyBytes = argumentBytes(spec, *b, dirty);
      if (dirtyBytes > bytes)
        std::memset(staged + bytes, 0, dirtyBytes - bytes);
      dirty = tokens;
      uploads.push_back(i);
    } else if (Status s =
                   check(driver.memcpyHtoD(deviceOf(*b), t.data.data(), bytes),
                         "cannot upload '" + spec.name + "'");
               !s.ok()) {
      return s;
    } else if (Status s = clearPast(*b, bytes, spec.name); !s.ok()) {
      return s;
    }
  }
  lastTokens = tokens;
  profile.clear();
  if (train.stateOnDevice)
    trainingStateValid = true;
  // The results to give back (the gradients that stay on the device are
  // not asked for).
  std::vector<size_t> reported;
  bool allStaged = true;
  for (size_t i = 0; i < arguments.size(); ++i) {
    const TrainArgumentSpec &spec = train.arguments[i];
    if (!spec.output ||
        (train.stateOnDevice && isGradient(spec) && arguments[i]->data.empty()))
      continue;
    reported.push_back(i);
    allStaged = allStaged && stagingOf(*targets[i]);
  }
  // Before the step (and outside its graph, which is replayed whatever
  // the host wrote): where the host wrote a master, the step remakes the
  // compute copies and the state's bounds.
  if (copiesValid && copiesStale) {
    if (Status s =
            check(driver.memsetD8Async(deviceOf(*copiesValid), 0,
                                       capacityBytes(*copiesValid), stream),
                  "cannot clear 'copies_valid'");
        !s.ok())
      return s;
    copiesStale = false;
  }
  // The step, then (where the device decides) its update, then the
  // results into their staging: one wait for the device. As a graph when
  // all of it can be captured (the key: the tokens' bucket and what is
  // reported).
  stageTokens(tokens);
  if (deviceVerdict && allStaged && capturable(manifest.gpu.trainSteps) &&
      capturable(manifest.gpu.updateSteps)) {
    int64_t launched = launchTokens(tokens, manifest.maxTokens);
    std::vector<int64_t> key{kTrainingStep, launched};
    key.insert(key.end(), reported.begin(), reported.end());
    if (Status s = launchGraph(key, "the training step",
                               [&] {
                                 return enqueueTrainingStep(launched, targets,
                                                            uploads, reported,
                                                            arguments);
                               });
        !s.ok())
      return s;
  } else if (Status s = enqueueTrainingStep(tokens, targets, uploads, reported,
                                            arguments);
             !s.ok()) {
    return s;
  }
  // The step rewrote the compute copies from its master weights.
  parametersUploaded = false;
  if (Status s = waitForDevice("the training step"); !s.ok())
    return s;
  if (Status s = checkExchangeStatus("the training step"); !s.ok())
    return s;
  for (size_t i : reported) {
    auto *into = const_cast<uint8_t *>(arguments[i]->data.data());
    size_t bytes = arguments[i]->data.size();
    if (const uint8_t *staged = stagingOf(*targets[i]))
      std::memcpy(into, staged, bytes);
    else if (Status s =
                 check(driver.memcpyDtoH(into, deviceOf(*targets[i]), bytes),
                       "cannot download '" + train.arguments[i].name + "'");
             !s.ok())
      return s;
  }
  return Status::success();
}

Status CudaBackend::enqueueTrainingStep(
    int64_t launched, const std::vector<const GpuBuffer *> &targets,
    const std::vector<size_t> &uploads, const std::vector<size_t> &reported,
    const std::vector<const Tensor *> &arguments) {
  const TrainSpec &train = manifest.train;
  if (Status s = enqueueTokens(); !s.ok())
    return s;
  // The launched tokens' rows (past the live ones: zeros, see stagedRows).
  for (size_t i : uploads) {
    const GpuBuffer &b = *targets[i];
    size_t bytes = argumentBytes(train.arguments[i], b, launched);
    if (Status s = check(
            driver.memcpyHtoDAsync(deviceOf(b), stagingOf(b), bytes, stream),
            "cannot upload '" + train.arguments[i].name + "'");
        !s.ok())
      return s;
    if (Status s = clearPast(b, bytes, train.arguments[i].name); !s.ok())
      return s;
  }
  // Timed, each schedule is waited for to read its events (not captured:
  // a timed step is never a graph).
  auto launch = [&](const std::vector<GpuStep> &steps, const SchedulePlan &plan,
                    bool sameClock) {
    if (Status s = launchSteps(steps, plan, launched, profiling, sameClock);
        !s.ok())
      return s;
    if (!profiling)
      return Status::success();
    if (Status s = waitForDevice("the training step"); !s.ok())
      return s;
    collectProfile(steps);
    return Status::success();
  };
  if (Status s = launch(manifest.gpu.trainSteps, trainStepPlan, false); !s.ok())
    return s;
  if (deviceVerdict)
    if (Status s = launch(manifest.gpu.updateSteps, updateStepPlan, true);
        !s.ok())
      return s;
  for (size_t i : reported)
    if (uint8_t *staged = stagingOf(*targets[i]))
      if (Status s =
              check(driver.memcpyDtoHAsync(staged, deviceOf(*targets[i]),
                                           argumentBytes(train.arguments[i],
                                                         *targets[i], launched),
                                           stream),
                    "cannot download '" + train.arguments[i].name + "'");
          !s.ok())
        return s;
  return enqueueStatusCopy();
}

Status CudaBackend::downloadTrainingTensors(
    const std::map<std::string, Tensor *> &tensors) {
  for (const auto &[name, tensor] : tensors) {
    const GpuBuffer *b = argumentBuffer(name);
    if (!b || b->dtype != tensor->dtype ||
        tensor->data.size() > capacityBytes(*b))
      return Status::failure("the training schedule has no " +
                             std::string(mlirName(tensor->dtype)) +
                             " buffer of " +
                             std::to_string(tensor->data.size()) +
                             " bytes for '" + name + "'");
    if (Status s = check(driver.memcpyDtoH(tensor->data.data(), deviceOf(*b),
                                           tensor->data.size()),
                         "cannot download '" + name + "'");
        !s.ok())
      return s;
  }
  return Status::success();
}

Status CudaBackend::runTrainingUpdate() {
  if (!manifest.train.stateOnDevice || !trainingStateValid)
    return Status::failure("no training step ran whose state the device "
                           "holds");
  if (deviceVerdict)
    return Status::failure("this bundle's training step updates its state "
                           "itself, decided on the device");
  // Profiled, the update's kernels follow the step's in lastProfile().
  return runSchedule(manifest.gpu.updateSteps, updateStepPlan, lastTokens,
                     "the training update", /*sameClock=*/true);
}

} // namespace

AlignedBytes packGateUp(const Tensor &gate, const Tensor &up, bool vectors) {
  size_t elem = dtypeSize(gate.dtype);
  int64_t experts = gate.shape.size() == 3 || vectors ? gate.shape[0] : 1;
  int64_t f = vectors ? gate.shape.back() : gate.shape[gate.shape.size() - 2];
  size_t rowBytes =
      vectors ? elem : static_cast<size_t>(gate.shape.back()) * elem;
  AlignedBytes out(2 * gate.data.size());
  for (int64_t e = 0; e < experts; ++e)
    for (int64_t r = 0; r < f; ++r) {
      size_t src = (static_cast<size_t>(e) * f + r) * rowBytes;
      constexpr int64_t block = abi::kGateUpBlock;
      size_t gateRow = static_cast<size_t>(e * 2 * f + (r / block) * 2 * block +
                                           r % block);
      std::memcpy(out.data() + gateRow * rowBytes, gate.data.data() + src,
                  rowBytes);
      std::memcpy(out.data() + (gateRow + block) * rowBytes,
                  up.data.data() + src, rowBytes);
    }
  return out;
}

AlignedBytes concatGateUp(const Tensor &gate, const Tensor &up) {
  size_t rows = static_cast<size_t>(gate.shape[gate.shape.size() - 2]);
  size_t rowBytes =
      static_cast<size_t>(gate.shape.back()) * dtypeSize(gate.dtype);
  size_t matrix = rows * rowBytes;
  size_t matrices = matrix ? gate.data.size() / matrix : 0;
  AlignedBytes out(2 * gate.data.size());
  for (size_t m = 0; m < matrices; ++m) {
    std::memcpy(out.data() + 2 * m * matrix, gate.data.data() + m * matrix,
                matrix);
    std::memcpy(out.data() + (2 * m + 1) * matrix, up.data.data() + m * matrix,
                matrix);
  }
  return out;
}

Expected<std::unique_ptr<Backend>> createCudaBackend(const Bundle &bundle) {
  using Result = Expected<std::unique_ptr<Backend>>;
  auto backend = std::make_unique<CudaBackend>();
  if (Status s = backend->init(bundle); !s.ok())
    return Result::error(s.error);
  return Result(std::unique_ptr<Backend>(std::move(backend)));
}

} // namespace moe::rt
