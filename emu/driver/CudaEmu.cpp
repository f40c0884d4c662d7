//===- CudaEmu.cpp - The CUDA driver API over the PTX emulator
//-------------===//
//
// Part of moe-compiler's PTX emulator. libcuda-emu.so exports the driver
// API entry points that moe-compiler's runtime (and programs like it) bind,
// with the documented C signatures, for an emulated sm_90 device:
//
//   MOE_CUDA_DRIVER=build/lib/libcuda-emu.so moe-run B --device=cuda ...
//
// Device memory is host memory. Every stream is in order and runs its
// work on a thread of its own, beside the host and the other streams, so
// a program's missing waits show up as they would on a GPU
// (MOE_EMU_STREAMS=sync runs work when it is enqueued). Events time the
// emulation itself.
// Modules are PTX text: a cubin (SASS) is refused with
// CUDA_ERROR_NO_BINARY_FOR_GPU, so a caller that carries both, as a fatbin
// does, falls back to its PTX. A kernel that fails a check or traps fails
// its launch (CUDA_ERROR_ILLEGAL_ADDRESS, _MISALIGNED_ADDRESS or
// _LAUNCH_FAILED), prints the emulator's report to stderr, and leaves the
// context's error sticky, as a GPU fault does.
//
// Environment: MOE_EMU_STREAMS=sync (see above); MOE_EMU_CHECKS=0 turns
// the sanitizer's optional checks off;
// MOE_EMU_TRACE=<cta>:<warp> traces one warp's instructions (to
// MOE_EMU_TRACE_FILE, else stderr); MOE_EMU_STATS=1 prints each kernel's
// emulated instruction counts and rates at exit;
// MOE_EMU_STALL_KERNEL=<name> makes every launch of that kernel hang
// (a stuck rank, for the tests of timeouts);
// MOE_EMU_INSTRUCTION_LIMIT bounds one launch; MOE_EMU_DEVICE_MEMORY sets
// the device's memory in bytes (80 GiB); MOE_EMU_PTX=<file> loads
// that file's PTX in place of every PTX module the program loads (to run
// an edited copy of a kernel).
//
//===----------------------------------------------------------------------===//

#include "moe/emu/Emulator.h"
#include "moe/runtime/CudaAbi.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

using namespace moe::emu;
using namespace moe::cuda;

namespace {

constexpr int kDevices = 8;

struct LoadedModule {
  std::shared_ptr<Module> module;
};

struct Function {
  LoadedModule *module;
  const Kernel *kernel;
  int maxDynamicShared = 48 * 1024;
};

/// Every stream runs its work in order on a thread of its own,
/// concurrently with the host and the other streams, as a GPU's streams do
/// (an error of its work becomes the context's sticky error, reported by
/// the next call). MOE_EMU_STREAMS=sync runs work when it is enqueued
/// instead (a fault then fails the call that enqueued it).
bool asyncStreams() {
  static const bool async = [] {
    const char *v = std::getenv("MOE_EMU_STREAMS");
    return !v || std::strcmp(v, "sync") != 0;
  }();
  return async;
}

struct Graph;

/// A stream: its work, in order. `blocking` streams (created without
/// CU_STREAM_NON_BLOCKING) order with the legacy stream's work: the
/// synchronous copies and fills wait for them.
class Stream {
public:
  explicit Stream(bool blocking);
  ~Stream();
  Stream(const Stream &) = delete;
  Stream &operator=(const Stream &) = delete;

  void push(std::function<void()> work) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      queue.push_back(std::move(work));
    }
    wake.notify_all();
  }
  /// Waits until every piece of work enqueued so far has run.
  void drain() {
    std::unique_lock<std::mutex> lock(mutex);
    done.wait(lock, [&] { return queue.empty() && !running; });
  }
  bool idle() {
    std::lock_guard<std::mutex> lock(mutex);
    return queue.empty() && !running;
  }

  const bool blocking;
  /// While the stream is being captured (cuStreamBeginCapture), its work
  /// goes into this graph instead of running.
  std::shared_ptr<Graph> capture;
  int captureMode = 0;
  std::thread::id captureThread;
  /// Its lane of the captured graph: 0 for the stream that began the
  /// capture, another for each stream that joined it (by waiting for an
  /// event recorded in it).
  int captureLane = 0;

private:
  void run() {
    std::unique_lock<std::mutex> lock(mutex);
    for (;;) {
      wake.wait(lock, [&] { return stop || !queue.empty(); });
      if (queue.empty())
        return; // stopping, and nothing left
      std::function<void()> work = std::move(queue.front());
      queue.pop_front();
      running = true;
      lock.unlock();
      work();
      lock.lock();
      running = false;
      if (queue.empty())
        done.notify_all();
    }
  }

  std::mutex mutex;
  std::condition_variable wake, done;
  std::deque<std::function<void()>> queue;
  bool running = false, stop = false;
  std::thread worker;
};

/// Every live stream, for the legacy stream's and the context's waits,
/// and the streams being captured (see unsafeDuringCapture).
struct StreamRegistry {
  std::mutex mutex;
  std::set<Stream *> streams, capturing;
};
StreamRegistry &streamRegistry() {
  static StreamRegistry r;
  return r;
}

Stream::Stream(bool blocking) : blocking(blocking) {
  {
    std::lock_guard<std::mutex> lock(streamRegistry().mutex);
    streamRegistry().streams.insert(this);
  }
  if (asyncStreams())
    worker = std::thread([this] { run(); });
}

Stream::~Stream() {
  {
    std::lock_guard<std::mutex> lock(mutex);
    stop = true;
  }
  wake.notify_all();
  if (worker.joinable())
    worker.join();
  std::lock_guard<std::mutex> lock(streamRegistry().mutex);
  streamRegistry().streams.erase(this);
  streamRegistry().capturing.erase(this); // destroyed while capturing
}

/// Waits for the work of every stream (or every blocking one).
void drainStreams(bool blockingOnly) {
  std::vector<Stream *> streams;
  {
    std::lock_guard<std::mutex> lock(streamRegistry().mutex);
    for (Stream *s : streamRegistry().streams)
      if (!blockingOnly || s->blocking)
        streams.push_back(s);
  }
  for (Stream *s : streams)
    s->drain();
}

/// An event: records are numbered as they are enqueued and completed as
/// their stream reaches them.
struct Event {
  /// Its last record inside a stream capture: the graph and the record's
  /// node there (while that capture is under way).
  Graph *capturedIn = nullptr;
  int capturedRecord = -1;
  std::mutex mutex;
  std::condition_variable reachedRecord;
  std::atomic<uint64_t> recordedSeq{0};
  uint64_t completedSeq = 0;
  std::chrono::steady_clock::time_point when;

  void complete(uint64_t seq) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (seq > completedSeq) {
        completedSeq = seq;
        when = std::chrono::steady_clock::now();
      }
    }
    reachedRecord.notify_all();
  }
  void waitFor(uint64_t seq) {
    std::unique_lock<std::mutex> lock(mutex);
    reachedRecord.wait(lock, [&] { return completedSeq >= seq; });
  }
  bool reached(uint64_t seq) {
    std::lock_guard<std::mutex> lock(mutex);
    return completedSeq >= seq;
  }
  /// The time of the last record, once it has completed.
  bool completedAt(std::chrono::steady_clock::time_point &at) {
    std::lock_guard<std::mutex> lock(mutex);
    if (completedSeq == 0 || completedSeq < recordedSeq)
      return false;
    at = when;
    return true;
  }
};

struct KernelStats {
  LaunchStats stats;
  double seconds = 0;
  uint64_t launches = 0;
};

struct State {
  std::mutex mutex;
  bool initialized = false;
  int current = -1; // the device of the current context
  GlobalMemory memory;
  std::atomic<CUresult> sticky{kSuccess}; // set by the streams' threads too
  LaunchOptions options;
  bool stats = false;
  std::mutex statsMutex; // kernelStats: launches run on the streams' threads
  std::map<std::string, KernelStats> kernelStats;

  State() {
    if (const char *c = std::getenv("MOE_EMU_CHECKS"))
      options.checks = std::strcmp(c, "0") != 0;
    if (const char *t = std::getenv("MOE_EMU_TRACE")) {
      long cta = -1;
      int warp = -1;
      if (std::sscanf(t, "%ld:%d", &cta, &warp) == 2) {
        options.traceCta = cta;
        options.traceWarp = warp;
      }
    }
    if (const char *f = std::getenv("MOE_EMU_TRACE_FILE"))
      options.traceFile = f;
    if (const char *l = std::getenv("MOE_EMU_INSTRUCTION_LIMIT"))
      options.instructionLimit = std::strtoull(l, nullptr, 10);
    if (const char *s = std::getenv("MOE_EMU_STATS"))
      stats = std::strcmp(s, "0") != 0;
    if (const char *k = std::getenv("MOE_EMU_STALL_KERNEL"))
      stallKernel = k;
  }
  /// A kernel whose launches never start: the process hangs there, as a
  /// rank stuck in a driver call or a dead GPU would (the tests of the
  /// exchanges' timeouts; one rank of a job gets it).
  std::string stallKernel;

  ~State() {
    if (!stats || kernelStats.empty())
      return;
    std::fprintf(stderr, "moe-emu: %-28s %8s %14s %14s %10s %12s\n", "kernel",
                 "launches", "warp instrs", "thread instrs", "seconds",
                 "warp instr/s");
    for (auto &[name, k] : kernelStats)
      std::fprintf(stderr, "moe-emu: %-28s %8llu %14llu %14llu %10.3f %12.3g\n",
                   name.c_str(), static_cast<unsigned long long>(k.launches),
                   static_cast<unsigned long long>(k.stats.warpInstructions),
                   static_cast<unsigned long long>(k.stats.threadInstructions),
                   k.seconds,
                   k.seconds > 0 ? k.stats.warpInstructions / k.seconds : 0.0);
  }
};

State &state() {
  static State s;
  return s;
}

#define REQUIRE_INIT()                                                         \
  do {                                                                         \
    if (!state().initialized)                                                  \
      return kErrorNotInitialized;                                             \
  } while (0)

#define REQUIRE_CONTEXT()                                                      \
  do {                                                                         \
    REQUIRE_INIT();                                                            \
    if (state().current < 0)                                                   \
      return kErrorInvalidContext;                                             \
    if (state().sticky != kSuccess)                                            \
      return state().sticky;                                                   \
  } while (0)

/// True when [p, p + bytes) lies in one allocation.
bool inAllocation(CUdeviceptr p, size_t bytes) {
  return bytes == 0 || state().memory.contains(p, bytes);
}

// Contexts are device ordinals + 1, so a null context stays invalid.
void *contextOf(int device) {
  return reinterpret_cast<void *>(static_cast<uintptr_t>(device + 1));
}

/// Whether work on `stream` runs later, on the stream's thread.
bool deferred(void *stream) { return stream && asyncStreams(); }

/// A node of a captured graph: work of one lane (the captured streams'
/// order within each), or an event's record there, or a lane's wait for
/// such a record (another lane's).
struct GraphNode {
  int lane = 0;
  enum Kind { Work, Record, Wait } kind = Work;
  int record = -1; // Record: its index; Wait: the record waited for
  std::function<CUresult()> work;
};
/// A captured graph: its streams' work in capture order, a lane a stream
/// (the one that began the capture and those that joined it by waiting
/// for an event recorded in it, as CUDA's fork and join), and whether an
/// unsafe call invalidated the capture. An instantiated graph copies the
/// nodes; each launch runs them as one piece of work of the launching
/// stream, each lane on a thread of its own, the records and waits
/// between them ordering the lanes as the streams' events did.
struct Graph {
  std::vector<GraphNode> nodes;
  int lanes = 1, records = 0;
  bool invalidated = false;
  /// The streams that joined the capture (lanes 1 ..).
  std::vector<Stream *> joined;
};
struct GraphExec {
  std::vector<GraphNode> nodes;
  int lanes = 1, records = 0;
};

Graph *capturingGraph(void *stream) {
  auto *s = static_cast<Stream *>(stream);
  return s && s->capture ? s->capture.get() : nullptr;
}
/// Whether a call that is unsafe during a capture (a synchronization, a
/// synchronous copy or fill, an allocation) fails now: while a capture in
/// global mode is under way, or one in thread-local mode on the calling
/// thread. It then fails with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and the
/// captures are invalidated, so the emulator finds a host wait inside a
/// captured schedule as a GPU's driver does.
bool unsafeDuringCapture() {
  std::lock_guard<std::mutex> lock(streamRegistry().mutex);
  bool unsafe = false;
  for (Stream *s : streamRegistry().capturing)
    if (s->captureMode == kStreamCaptureModeGlobal ||
        s->captureThread == std::this_thread::get_id())
      unsafe = true;
  if (unsafe)
    for (Stream *s : streamRegistry().capturing)
      s->capture->invalidated = true;
  return unsafe;
}

#define REQUIRE_NO_CAPTURE()                                                   \
  do {                                                                         \
    if (unsafeDuringCapture())                                                 \
      return kErrorStreamCaptureUnsupported;                                   \
  } while (0)

/// Events recorded or waited for inside a capture (graph event nodes) are
/// not emulated: said once, and refused.
CUresult eventsNotCaptured() {
  static std::once_flag said;
  std::call_once(said, [] {
    std::fprintf(stderr, "moe-emu: events inside a stream capture are not "
                         "emulated\n");
  });
  return kErrorNotSupported;
}

/// Page-locked host memory (cuMemAllocHost): its start and size. An async
/// copy to or from it runs when its stream reaches it, reading the bytes
/// then, as a DMA from pinned memory does.
struct PinnedRegistry {
  std::mutex mutex;
  std::map<uintptr_t, size_t> blocks;
  bool contains(const void *p, size_t bytes) {
    auto at = reinterpret_cast<uintptr_t>(p);
    std::lock_guard<std::mutex> lock(mutex);
    auto it = blocks.upper_bound(at);
    if (it == blocks.begin())
      return false;
    --it;
    return at >= it->first && at + bytes <= it->first + it->second;
  }
};
PinnedRegistry &pinned() {
  static PinnedRegistry r;
  return r;
}

/// Runs `work` as `stream`'s: on the legacy stream (null) after the
/// blocking streams' work and before returning, or enqueued on an
/// asynchronous stream. Run at once, it returns the work's failure or the
/// context's sticky error (an earlier fault); deferred, the work's
/// failure becomes the sticky error when it runs.
CUresult runOnStream(void *stream, std::function<CUresult()> work) {
  if (Graph *graph = capturingGraph(stream)) {
    GraphNode node;
    node.lane = static_cast<Stream *>(stream)->captureLane;
    node.work = std::move(work);
    graph->nodes.push_back(std::move(node));
    return kSuccess;
  }
  // The legacy stream's work (the synchronous copies and fills) waits for
  // the device: unsafe during a capture.
  if (!stream)
    REQUIRE_NO_CAPTURE();
  if (!deferred(stream)) {
    if (!stream)
      drainStreams(/*blockingOnly=*/true);
    CUresult rc = work();
    return rc != kSuccess ? rc : state().sticky.load();
  }
  static_cast<Stream *>(stream)->push([work = std::move(work)] {
    CUresult none = kSuccess;
    if (CUresult rc = work(); rc != kSuccess)
      state().sticky.compare_exchange_strong(none, rc);
  });
  return kSuccess;
}

/// runOnStream for work that cannot fail.
CUresult onStream(void *stream, std::function<void()> work) {
  return runOnStream(stream, [work = std::move(work)]() -> CUresult {
    work();
    return kSuccess;
  });
}

CUresult runLaunch(Function *fn, Dim3 grid, Dim3 block, Dim3 cluster,
                   unsigned shared, const std::vector<uint8_t> &params,
                   bool cooperative);

CUresult launchOn(Function *fn, Dim3 grid, Dim3 block, Dim3 cluster,
                  unsigned shared, void **kernelParams, void **extra,
                  void *stream, bool cooperative) {
  if (!fn || !fn->kernel)
    return kErrorInvalidHandle;
  if (shared > static_cast<unsigned>(fn->maxDynamicShared)) {
    std::fprintf(stderr,
                 "moe-emu: kernel '%s' asks for %u bytes of dynamic shared "
                 "memory; cuFuncSetAttribute allowed %d\n",
                 kernelName(*fn->kernel).c_str(), shared, fn->maxDynamicShared);
    return kErrorInvalidValue;
  }
  ParamLayout layout = paramLayout(*fn->kernel);
  std::vector<uint8_t> params(layout.bytes, 0);
  if (kernelParams) {
    for (size_t i = 0; i < layout.sizes.size(); ++i) {
      if (!kernelParams[i])
        return kErrorInvalidValue;
      std::memcpy(params.data() + layout.offsets[i], kernelParams[i],
                  layout.sizes[i]);
    }
  } else if (extra) {
    void *buffer = nullptr;
    size_t size = 0;
    for (size_t i = 0; extra[i]; i += 2) {
      auto key = reinterpret_cast<uintptr_t>(extra[i]);
      if (key == 1)
        buffer = extra[i + 1];
      else if (key == 2)
        size = *static_cast<size_t *>(extra[i + 1]);
      else
        return kErrorInvalidValue;
    }
    if (!buffer || size < layout.bytes)
      return kErrorInvalidValue;
    std::memcpy(params.data(), buffer, layout.bytes);
  } else if (!layout.sizes.empty()) {
    return kErrorInvalidValue;
  }
  // Deferred, the launch's failure (one that cannot start included) is
  // the context's sticky error from when it runs.
  return runOnStream(stream, [=, params = std::move(params)] {
    return runLaunch(fn, grid, block, cluster, shared, params, cooperative);
  });
}

CUresult runLaunch(Function *fn, Dim3 grid, Dim3 block, Dim3 cluster,
                   unsigned shared, const std::vector<uint8_t> &params,
                   bool cooperative) {
  State &s = state();
  if (!s.stallKernel.empty() && s.stallKernel == kernelName(*fn->kernel)) {
    std::fprintf(stderr,
                 "moe-emu: kernel '%s' stalls ($MOE_EMU_STALL_KERNEL)\n",
                 s.stallKernel.c_str());
    for (;;)
      std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  LaunchStats stats;
  auto begin = std::chrono::steady_clock::now();
  LaunchOptions options = s.options;
  options.cooperative = cooperative;
  LaunchResult result =
      launch(*fn->module->module, *fn->kernel, grid, block, cluster, shared,
             params, s.memory, options, &stats);
  double seconds = std::chrono::duration<double>(
                       std::chrono::steady_clock::now() - begin)
                       .count();
  {
    std::lock_guard<std::mutex> lock(s.statsMutex);
    KernelStats &ks = s.kernelStats[kernelName(*fn->kernel)];
    ks.stats.warpInstructions += stats.warpInstructions;
    ks.stats.threadInstructions += stats.threadInstructions;
    ks.seconds += seconds;
    ++ks.launches;
  }
  if (result.ok())
    return kSuccess;
  std::fprintf(stderr, "moe-emu: %s\n", result.report.c_str());
  switch (result.failure) {
  case LaunchFailure::BadLaunch:
    return kErrorLaunchOutOfResources; // not sticky: nothing ran
  case LaunchFailure::IllegalAddress:
    return s.sticky = kErrorIllegalAddress;
  case LaunchFailure::MisalignedAddress:
    return s.sticky = kErrorMisalignedAddress;
  default:
    return s.sticky = kErrorLaunchFailed;
  }
}

/// The emulated device's memory: 80 GiB, or MOE_EMU_DEVICE_MEMORY bytes
/// (to try what does not fit).
size_t deviceMemory() {
  static const size_t bytes = [] {
    if (const char *v = std::getenv("MOE_EMU_DEVICE_MEMORY"); v && *v)
      return static_cast<size_t>(std::strtoull(v, nullptr, 10));
    return static_cast<size_t>(80ull << 30);
  }();
  return bytes;
}

} // namespace

extern "C" {

CUresult cuInit(unsigned flags) {
  if (flags != 0)
    return kErrorInvalidValue;
  state().initialized = true;
  return kSuccess;
}

CUresult cuDriverGetVersion(int *version) {
  if (!version)
    return kErrorInvalidValue;
  *version = 13000;
  return kSuccess;
}

CUresult cuDeviceGetCount(int *count) {
  REQUIRE_INIT();
  if (!count)
    return kErrorInvalidValue;
  *count = kDevices;
  return kSuccess;
}

CUresult cuDeviceGet(int *device, int ordinal) {
  REQUIRE_INIT();
  if (!device)
    return kErrorInvalidValue;
  if (ordinal < 0 || ordinal >= kDevices)
    return kErrorInvalidDevice;
  *device = ordinal;
  return kSuccess;
}

CUresult cuDeviceGetName(char *name, int len, int device) {
  REQUIRE_INIT();
  if (!name || len <= 0)
    return kErrorInvalidValue;
  if (device < 0 || device >= kDevices)
    return kErrorInvalidDevice;
  std::snprintf(name, static_cast<size_t>(len), "moe-emu sm_90a (emulated H100)");
  return kSuccess;
}

CUresult cuDeviceTotalMem_v2(size_t *bytes, int device) {
  REQUIRE_INIT();
  if (!bytes)
    return kErrorInvalidValue;
  if (device < 0 || device >= kDevices)
    return kErrorInvalidDevice;
  *bytes = deviceMemory();
  return kSuccess;
}

CUresult cuDeviceGetAttribute(int *value, int attribute, int device) {
  REQUIRE_INIT();
  if (!value)
    return kErrorInvalidValue;
  if (device < 0 || device >= kDevices)
    return kErrorInvalidDevice;
  static const std::map<int, int> attributes = {
      {1, 1024},       {2, 1024},    {3, 1024},   {4, 64},
      {5, 2147483647}, {6, 65535},   {7, 65535},  {8, 49152},
      {9, 65536},      {10, 32},     {11, 2147483647}, {12, 65536},
      {13, 1980000},   {14, 512},    {15, 1},     {16, 132},
      {17, 0},         {18, 0},      {19, 1},     {20, 0},
      {31, 1},         {33, 0},      {34, 0},     {35, 0},
      {36, 2619000},   {37, 5120},   {38, 52428800}, {39, 2048},
      {40, 1},         {41, 1},      {75, 9},     {76, 0},
      {81, 233472},    {82, 65536},  {83, 1},     {84, 1},
      {86, 0},         {87, 0},      {88, 1},     {89, 1},
      {95, 1},         {97, 232448}, {106, 32},   {120, 1}};
  auto it = attributes.find(attribute);
  *value = it == attributes.end() ? 0 : it->second;
  return kSuccess;
}

CUresult cuDeviceComputeCapability(int *major, int *minor, int device) {
  REQUIRE_INIT();
  if (!major || !minor)
    return kErrorInvalidValue;
  if (device < 0 || device >= kDevices)
    return kErrorInvalidDevice;
  *major = 9;
  *minor = 0;
  return kSuccess;
}

CUresult cuDevicePrimaryCtxRetain(void **context, int device) {
  REQUIRE_INIT();
  if (!context)
    return kErrorInvalidValue;
  if (device < 0 || device >= kDevices)
    return kErrorInvalidDevice;
  *context = contextOf(device);
  return kSuccess;
}

CUresult cuDevicePrimaryCtxRelease_v2(int device) {
  REQUIRE_INIT();
  return device < 0 || device >= kDevices ? kErrorInvalidDevice : kSuccess;
}

CUresult cuCtxCreate_v2(void **context, unsigned, int device) {
  if (CUresult rc = cuDevicePrimaryCtxRetain(context, device))
    return rc;
  state().current = device;
  return kSuccess;
}

CUresult cuCtxDestroy_v2(void *) { return kSuccess; }

CUresult cuCtxSetCurrent(void *context) {
  REQUIRE_INIT();
  auto d = static_cast<int>(reinterpret_cast<uintptr_t>(context)) - 1;
  if (context && (d < 0 || d >= kDevices))
    return kErrorInvalidContext;
  state().current = context ? d : -1;
  return kSuccess;
}

CUresult cuCtxGetCurrent(void **context) {
  REQUIRE_INIT();
  if (!context)
    return kErrorInvalidValue;
  *context = state().current >= 0 ? contextOf(state().current) : nullptr;
  return kSuccess;
}

CUresult cuCtxGetDevice(int *device) {
  REQUIRE_CONTEXT();
  if (!device)
    return kErrorInvalidValue;
  *device = state().current;
  return kSuccess;
}

CUresult cuCtxSynchronize() {
  REQUIRE_CONTEXT();
  REQUIRE_NO_CAPTURE();
  drainStreams(/*blockingOnly=*/false);
  return state().sticky;
}

CUresult cuModuleLoadData(void **module, const void *image) {
  REQUIRE_CONTEXT();
  if (!module || !image)
    return kErrorInvalidValue;
  const auto *bytes = static_cast<const unsigned char *>(image);
  if (std::memcmp(bytes, "\x7f" "ELF", 4) == 0) {
    // SASS: the emulator runs PTX only.
    return kErrorNoBinaryForGpu;
  }
  uint32_t magic = 0;
  std::memcpy(&magic, bytes, 4);
  if (magic == 0xBA55ED50u) {
    std::fprintf(stderr, "moe-emu: fatbinary images are not supported; "
                         "load the PTX text\n");
    return kErrorNoBinaryForGpu;
  }
  std::string text(static_cast<const char *>(image));
  std::string ptxName = "module.ptx";
  if (const char *path = std::getenv("MOE_EMU_PTX"); path && *path) {
    // A debugging hook: run this file's PTX instead (an edited copy).
    FILE *f = std::fopen(path, "rb");
    if (!f) {
      std::fprintf(stderr, "moe-emu: cannot read MOE_EMU_PTX '%s'\n", path);
      return kErrorInvalidPtx;
    }
    text.clear();
    char buf[65536];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;)
      text.append(buf, n);
    std::fclose(f);
    ptxName = path;
  }
  std::string error;
  std::shared_ptr<Module> m = loadModule(text, ptxName, error);
  if (!m) {
    std::fprintf(stderr, "moe-emu: cannot load the PTX module: %s\n",
                 error.c_str());
    return kErrorInvalidPtx;
  }
  adoptVariables(*m, state().memory);
  auto *loaded = new LoadedModule{std::move(m)};
  *module = loaded;
  return kSuccess;
}

CUresult cuModuleLoadDataEx(void **module, const void *image, unsigned,
                            int *, void **) {
  return cuModuleLoadData(module, image);
}

CUresult cuModuleUnload(void *module) {
  REQUIRE_INIT();
  if (!module)
    return kErrorInvalidHandle;
  auto *loaded = static_cast<LoadedModule *>(module);
  drainStreams(/*blockingOnly=*/false); // its kernels may still run
  forgetVariables(*loaded->module, state().memory);
  delete loaded;
  return kSuccess;
}

CUresult cuModuleGetFunction(void **function, void *module, const char *name) {
  REQUIRE_CONTEXT();
  if (!function || !module || !name)
    return kErrorInvalidValue;
  auto *m = static_cast<LoadedModule *>(module);
  const Kernel *k = findKernel(*m->module, name);
  if (!k)
    return kErrorNotFound;
  *function = new Function{m, k};
  return kSuccess;
}

CUresult cuFuncSetAttribute(void *function, int attribute, int value) {
  REQUIRE_CONTEXT();
  auto *f = static_cast<Function *>(function);
  if (!f)
    return kErrorInvalidHandle;
  if (attribute == 8) { // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    if (value < 0 ||
        static_cast<uint32_t>(value) + staticSharedBytes(*f->kernel) > 232448)
      return kErrorInvalidValue;
    f->maxDynamicShared = value;
  }
  return kSuccess;
}

CUresult cuFuncGetAttribute(int *value, int attribute, void *function) {
  REQUIRE_CONTEXT();
  auto *f = static_cast<Function *>(function);
  if (!f || !value)
    return kErrorInvalidValue;
  switch (attribute) {
  case 0: { // MAX_THREADS_PER_BLOCK
    uint32_t t = maxThreads(*f->kernel);
    *value = t ? static_cast<int>(t) : 1024;
    break;
  }
  case 1: *value = static_cast<int>(staticSharedBytes(*f->kernel)); break;
  case 8: *value = f->maxDynamicShared; break;
  default: *value = 0;
  }
  return kSuccess;
}

CUresult cuMemAlloc_v2(CUdeviceptr *ptr, size_t bytes) {
  REQUIRE_CONTEXT();
  REQUIRE_NO_CAPTURE();
  if (!ptr || bytes == 0)
    return kErrorInvalidValue;
  uint64_t p = state().memory.allocate(bytes);
  if (!p)
    return kErrorOutOfMemory;
  *ptr = p;
  return kSuccess;
}

CUresult cuMemFree_v2(CUdeviceptr ptr) {
  REQUIRE_INIT();
  REQUIRE_NO_CAPTURE();
  if (ptr == 0)
    return kSuccess;
  // Freeing waits for the device, as cuMemFree does.
  drainStreams(/*blockingOnly=*/false);
  // Only an allocation's start frees it (not an adopted module variable).
  return state().memory.release(ptr) ? kSuccess : kErrorInvalidValue;
}

// Memory that other processes map too (libnccl-emu's symmetric memory:
// every rank's window, mapped from one file each): kernels and copies may
// address it, and the interpreter waits for a spin on it to end (a peer's
// store ends it) instead of calling it a hang. Not part of the CUDA API:
// libnccl-emu finds these with dlsym in the library $MOE_CUDA_DRIVER
// names.
int moeEmuAdoptShared(void *ptr, size_t bytes) {
  if (!ptr || bytes == 0)
    return kErrorInvalidValue;
  state().memory.adopt(reinterpret_cast<uint64_t>(ptr), bytes, true);
  return kSuccess;
}

int moeEmuForget(void *ptr) {
  drainStreams(/*blockingOnly=*/false);
  state().memory.forget(reinterpret_cast<uint64_t>(ptr));
  return kSuccess;
}

// Page-locked host memory: ordinary host memory here, remembered so that
// async copies through it read and write it when they run.
CUresult cuMemAllocHost_v2(void **ptr, size_t bytes) {
  REQUIRE_CONTEXT();
  REQUIRE_NO_CAPTURE();
  if (!ptr || bytes == 0)
    return kErrorInvalidValue;
  size_t rounded = (bytes + 4095) / 4096 * 4096;
  void *p = std::aligned_alloc(4096, rounded);
  if (!p)
    return kErrorOutOfMemory;
  std::lock_guard<std::mutex> lock(pinned().mutex);
  pinned().blocks[reinterpret_cast<uintptr_t>(p)] = bytes;
  *ptr = p;
  return kSuccess;
}
CUresult cuMemFreeHost(void *ptr) {
  REQUIRE_INIT();
  REQUIRE_NO_CAPTURE();
  // The device may still copy from or to it: freeing waits, as for
  // device memory.
  drainStreams(/*blockingOnly=*/false);
  std::lock_guard<std::mutex> lock(pinned().mutex);
  if (!pinned().blocks.erase(reinterpret_cast<uintptr_t>(ptr)))
    return kErrorInvalidValue;
  std::free(ptr);
  return kSuccess;
}

CUresult cuMemGetInfo_v2(size_t *free, size_t *total) {
  REQUIRE_CONTEXT();
  if (!free || !total)
    return kErrorInvalidValue;
  *total = deviceMemory();
  *free = *total - std::min(*total, state().memory.allocatedBytes());
  return kSuccess;
}

// Copies and fills. The synchronous forms run on the legacy stream: after
// the blocking streams' work, before returning. The Async forms are work
// of their stream; an HtoD copy reads its host bytes when it is called
// (as a copy from pageable memory does), a DtoH copy writes them when it
// runs.
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t bytes,
                              void *stream) {
  REQUIRE_CONTEXT();
  if (!inAllocation(dst, bytes) || (!src && bytes))
    return kErrorInvalidValue;
  // From pageable memory, the host bytes are read now (the caller may
  // reuse them), and such a copy cannot be captured; from page-locked
  // memory they are read when the copy runs.
  bool fromPinned = pinned().contains(src, bytes);
  if (capturingGraph(stream) && !fromPinned) {
    unsafeDuringCapture();
    return kErrorStreamCaptureUnsupported;
  }
  std::shared_ptr<std::vector<char>> copy;
  if (deferred(stream) && !fromPinned) {
    copy = std::make_shared<std::vector<char>>(
        static_cast<const char *>(src), static_cast<const char *>(src) + bytes);
    src = copy->data();
  }
  return onStream(stream, [=] {
    if (bytes)
      std::memcpy(reinterpret_cast<void *>(dst), src, bytes);
  });
}
CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t bytes,
                              void *stream) {
  REQUIRE_CONTEXT();
  if (!inAllocation(src, bytes) || (!dst && bytes))
    return kErrorInvalidValue;
  // A captured copy writes its host bytes at every launch of the graph:
  // only into page-locked memory.
  if (capturingGraph(stream) && !pinned().contains(dst, bytes)) {
    unsafeDuringCapture();
    return kErrorStreamCaptureUnsupported;
  }
  return onStream(stream, [=] {
    if (bytes)
      std::memcpy(dst, reinterpret_cast<const void *>(src), bytes);
  });
}
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t bytes,
                              void *stream) {
  REQUIRE_CONTEXT();
  if (!inAllocation(dst, bytes) || !inAllocation(src, bytes))
    return kErrorInvalidValue;
  return onStream(stream, [=] {
    if (bytes)
      std::memmove(reinterpret_cast<void *>(dst),
                   reinterpret_cast<const void *>(src), bytes);
  });
}

CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t bytes) {
  return cuMemcpyHtoDAsync_v2(dst, src, bytes, nullptr);
}
CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t bytes) {
  return cuMemcpyDtoHAsync_v2(dst, src, bytes, nullptr);
}
CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t bytes) {
  return cuMemcpyDtoDAsync_v2(dst, src, bytes, nullptr);
}

CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t count,
                         void *stream) {
  REQUIRE_CONTEXT();
  if (!inAllocation(dst, count))
    return kErrorInvalidValue;
  return onStream(stream, [=] {
    if (count)
      std::memset(reinterpret_cast<void *>(dst), value, count);
  });
}
CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char value, size_t count) {
  return cuMemsetD8Async(dst, value, count, nullptr);
}
CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned value, size_t count,
                          void *stream) {
  REQUIRE_CONTEXT();
  if (dst % 4 || !inAllocation(dst, count * 4))
    return kErrorInvalidValue;
  return onStream(stream, [=] {
    auto *p = reinterpret_cast<unsigned *>(dst);
    for (size_t i = 0; i < count; ++i)
      p[i] = value;
  });
}
CUresult cuMemsetD32_v2(CUdeviceptr dst, unsigned value, size_t count) {
  return cuMemsetD32Async(dst, value, count, nullptr);
}

// Streams and events.
CUresult cuStreamCreate(void **stream, unsigned flags) {
  REQUIRE_CONTEXT();
  if (!stream || (flags & ~1u))
    return kErrorInvalidValue;
  *stream = new Stream(/*blocking=*/(flags & 1u) == 0);
  return kSuccess;
}
CUresult cuStreamCreateWithPriority(void **stream, unsigned flags, int) {
  return cuStreamCreate(stream, flags);
}
CUresult cuStreamDestroy_v2(void *stream) {
  REQUIRE_INIT();
  // Its work completes first (the worker finishes its queue).
  delete static_cast<Stream *>(stream);
  return kSuccess;
}
CUresult cuStreamSynchronize(void *stream) {
  REQUIRE_CONTEXT();
  REQUIRE_NO_CAPTURE();
  if (stream)
    static_cast<Stream *>(stream)->drain();
  else
    drainStreams(/*blockingOnly=*/true);
  return state().sticky;
}
CUresult cuStreamQuery(void *stream) {
  REQUIRE_CONTEXT();
  REQUIRE_NO_CAPTURE();
  if (stream && !static_cast<Stream *>(stream)->idle())
    return kErrorNotReady;
  return kSuccess;
}
CUresult cuStreamWaitEvent(void *stream, void *event, unsigned) {
  REQUIRE_CONTEXT();
  auto *e = static_cast<Event *>(event);
  if (!e)
    return kErrorInvalidHandle;
  // Inside a capture: a wait for a record of the same capture (a stream
  // not yet capturing joins it, as a forked stream does on a GPU).
  {
    std::lock_guard<std::mutex> lock(streamRegistry().mutex);
    auto *s = static_cast<Stream *>(stream);
    Graph *g = s ? s->capture.get() : nullptr;
    // The stream that began the capture of the event's record, while that
    // capture is under way.
    Stream *origin = nullptr;
    if (e->capturedIn)
      for (Stream *c : streamRegistry().capturing)
        if (c->capture.get() == e->capturedIn && c->captureLane == 0)
          origin = c;
    if (g || (s && origin)) {
      if (!origin)
        return eventsNotCaptured();
      if (g && g != e->capturedIn)
        return kErrorStreamCaptureIsolation;
      if (!g) {
        s->capture = origin->capture;
        s->captureMode = origin->captureMode;
        s->captureThread = origin->captureThread;
        s->captureLane = e->capturedIn->lanes++;
        e->capturedIn->joined.push_back(s);
        streamRegistry().capturing.insert(s);
        g = e->capturedIn;
      }
      GraphNode node;
      node.lane = s->captureLane;
      node.kind = GraphNode::Wait;
      node.record = e->capturedRecord;
      g->nodes.push_back(std::move(node));
      return kSuccess;
    }
  }
  // The stream's later work waits for the event's last record as of now.
  uint64_t target = e->recordedSeq;
  return onStream(stream, [e, target] { e->waitFor(target); });
}

CUresult cuEventCreate(void **event, unsigned) {
  REQUIRE_CONTEXT();
  if (!event)
    return kErrorInvalidValue;
  *event = new Event;
  return kSuccess;
}
CUresult cuEventDestroy_v2(void *event) {
  REQUIRE_INIT();
  delete static_cast<Event *>(event);
  return kSuccess;
}
CUresult cuEventRecord(void *event, void *stream) {
  REQUIRE_CONTEXT();
  auto *e = static_cast<Event *>(event);
  if (!e)
    return kErrorInvalidHandle;
  if (Graph *g = capturingGraph(stream)) {
    // A record node: the lanes that wait for it follow it.
    std::lock_guard<std::mutex> lock(streamRegistry().mutex);
    GraphNode node;
    node.lane = static_cast<Stream *>(stream)->captureLane;
    node.kind = GraphNode::Record;
    node.record = g->records++;
    e->capturedIn = g;
    e->capturedRecord = node.record;
    g->nodes.push_back(std::move(node));
    return kSuccess;
  }
  e->capturedIn = nullptr;
  uint64_t seq = ++e->recordedSeq;
  return onStream(stream, [e, seq] { e->complete(seq); });
}
CUresult cuEventSynchronize(void *event) {
  REQUIRE_CONTEXT();
  REQUIRE_NO_CAPTURE();
  auto *e = static_cast<Event *>(event);
  if (!e)
    return kErrorInvalidHandle;
  e->waitFor(e->recordedSeq);
  return state().sticky;
}
CUresult cuEventQuery(void *event) {
  REQUIRE_CONTEXT();
  REQUIRE_NO_CAPTURE();
  auto *e = static_cast<Event *>(event);
  if (!e)
    return kErrorInvalidHandle;
  return e->reached(e->recordedSeq) ? kSuccess : kErrorNotReady;
}
CUresult cuEventElapsedTime(float *ms, void *start, void *end) {
  REQUIRE_CONTEXT();
  auto *a = static_cast<Event *>(start), *b = static_cast<Event *>(end);
  if (!ms || !a || !b)
    return kErrorInvalidHandle;
  std::chrono::steady_clock::time_point from, to;
  if (!a->completedAt(from) || !b->completedAt(to))
    return kErrorNotReady;
  *ms = std::chrono::duration<float, std::milli>(to - from).count();
  return kSuccess;
}

// Stream capture and graphs.
CUresult cuStreamBeginCapture_v2(void *stream, int mode) {
  REQUIRE_CONTEXT();
  auto *s = static_cast<Stream *>(stream);
  if (!s) // the legacy stream cannot be captured
    return kErrorStreamCaptureUnsupported;
  if (mode != kStreamCaptureModeGlobal &&
      mode != kStreamCaptureModeThreadLocal && mode != 2 /* relaxed */)
    return kErrorInvalidValue;
  std::lock_guard<std::mutex> lock(streamRegistry().mutex);
  if (s->capture)
    return kErrorIllegalState;
  s->capture = std::make_shared<Graph>();
  // Relaxed mode forbids nothing: as thread-local on no thread.
  s->captureMode = mode;
  s->captureThread = mode == 2 ? std::thread::id() : std::this_thread::get_id();
  if (mode == 2)
    s->captureMode = kStreamCaptureModeThreadLocal;
  streamRegistry().capturing.insert(s);
  return kSuccess;
}
CUresult cuStreamBeginCapture(void *stream) {
  return cuStreamBeginCapture_v2(stream, kStreamCaptureModeGlobal);
}
CUresult cuStreamEndCapture(void *stream, void **graph) {
  REQUIRE_CONTEXT();
  auto *s = static_cast<Stream *>(stream);
  if (!s || !graph)
    return kErrorInvalidValue;
  std::shared_ptr<Graph> captured;
  {
    std::lock_guard<std::mutex> lock(streamRegistry().mutex);
    // Only the stream that began the capture ends it.
    if (!s->capture || s->captureLane != 0)
      return kErrorIllegalState;
    captured = std::move(s->capture);
    s->capture.reset();
    streamRegistry().capturing.erase(s);
    for (Stream *j : captured->joined) {
      j->capture.reset();
      j->captureLane = 0;
      streamRegistry().capturing.erase(j);
    }
    captured->joined.clear();
  }
  *graph = nullptr;
  if (captured->invalidated)
    return kErrorStreamCaptureInvalidated;
  // Every joined stream must have been joined back: its last node a
  // record that a node of another lane, after it, waits for (CUDA's
  // CUDA_ERROR_STREAM_CAPTURE_UNJOINED otherwise).
  for (int lane = 1; lane < captured->lanes; ++lane) {
    int last = -1;
    for (size_t i = 0; i < captured->nodes.size(); ++i)
      if (captured->nodes[i].lane == lane)
        last = static_cast<int>(i);
    bool joined = false;
    if (last >= 0 && captured->nodes[last].kind == GraphNode::Record)
      for (size_t i = last + 1; i < captured->nodes.size(); ++i)
        joined = joined ||
                 (captured->nodes[i].kind == GraphNode::Wait &&
                  captured->nodes[i].record == captured->nodes[last].record);
    if (!joined)
      return kErrorStreamCaptureUnjoined;
  }
  *graph = new Graph(std::move(*captured));
  return kSuccess;
}
CUresult cuStreamIsCapturing(void *stream, int *status) {
  REQUIRE_CONTEXT();
  if (!status)
    return kErrorInvalidValue;
  Graph *g = capturingGraph(stream);
  // CU_STREAM_CAPTURE_STATUS_NONE, _ACTIVE, _INVALIDATED.
  *status = !g ? 0 : g->invalidated ? 2 : 1;
  return kSuccess;
}
CUresult cuGraphInstantiateWithFlags(void **exec, void *graph,
                                     unsigned long long flags) {
  REQUIRE_CONTEXT();
  if (!exec || !graph || flags)
    return kErrorInvalidValue;
  auto *g = static_cast<Graph *>(graph);
  *exec = new GraphExec{g->nodes, g->lanes, g->records};
  return kSuccess;
}
CUresult cuGraphLaunch(void *exec, void *stream) {
  REQUIRE_CONTEXT();
  auto *e = static_cast<GraphExec *>(exec);
  if (!e)
    return kErrorInvalidHandle;
  // The graph's work, as one piece of the stream's: each lane's nodes in
  // order on a thread of its own (lane 0 on the stream's), a wait until
  // its record has run. A node that fails ends the launch (the other
  // lanes' waits give up), its failure the context's sticky error.
  return runOnStream(stream, [e]() -> CUresult {
    if (e->lanes == 1) {
      for (const GraphNode &node : e->nodes)
        if (node.kind == GraphNode::Work)
          if (CUresult rc = node.work(); rc != kSuccess)
            return rc;
      return kSuccess;
    }
    std::mutex mutex;
    std::condition_variable changed;
    std::vector<bool> recorded(e->records, false);
    CUresult failed = kSuccess;
    auto runLane = [&](int lane) {
      for (const GraphNode &node : e->nodes) {
        if (node.lane != lane)
          continue;
        if (node.kind == GraphNode::Wait) {
          std::unique_lock<std::mutex> lock(mutex);
          changed.wait(lock, [&] {
            return recorded[node.record] || failed != kSuccess;
          });
          if (failed != kSuccess)
            return;
          continue;
        }
        if (node.kind == GraphNode::Record) {
          {
            std::lock_guard<std::mutex> lock(mutex);
            recorded[node.record] = true;
          }
          changed.notify_all();
          continue;
        }
        if (CUresult rc = node.work(); rc != kSuccess) {
          {
            std::lock_guard<std::mutex> lock(mutex);
            if (failed == kSuccess)
              failed = rc;
          }
          changed.notify_all();
          return;
        }
      }
    };
    std::vector<std::thread> others;
    for (int lane = 1; lane < e->lanes; ++lane)
      others.emplace_back(runLane, lane);
    runLane(0);
    for (std::thread &t : others)
      t.join();
    return failed;
  });
}
CUresult cuGraphExecDestroy(void *exec) {
  REQUIRE_INIT();
  // A launch still queued runs first.
  drainStreams(/*blockingOnly=*/false);
  delete static_cast<GraphExec *>(exec);
  return kSuccess;
}
CUresult cuGraphDestroy(void *graph) {
  REQUIRE_INIT();
  delete static_cast<Graph *>(graph);
  return kSuccess;
}

/// Runs fn(data) as work of `stream`, after its earlier work (a host
/// function may block; the emulated NCCL runs its transfers so).
CUresult cuLaunchHostFunc(void *stream, void (*fn)(void *), void *data) {
  REQUIRE_CONTEXT();
  if (!fn)
    return kErrorInvalidValue;
  return onStream(stream, [fn, data] { fn(data); });
}

CUresult cuLaunchKernel(void *function, unsigned gx, unsigned gy, unsigned gz,
                        unsigned bx, unsigned by, unsigned bz, unsigned shared,
                        void *stream, void **params, void **extra) {
  REQUIRE_CONTEXT();
  return launchOn(static_cast<Function *>(function), {gx, gy, gz}, {bx, by, bz},
                  {1, 1, 1}, shared, params, extra, stream,
                  /*cooperative=*/false);
}

CUresult cuLaunchCooperativeKernel(void *function, unsigned gx, unsigned gy,
                                   unsigned gz, unsigned bx, unsigned by,
                                   unsigned bz, unsigned shared, void *stream,
                                   void **params) {
  REQUIRE_CONTEXT();
  return launchOn(static_cast<Function *>(function), {gx, gy, gz}, {bx, by, bz},
                  {1, 1, 1}, shared, params, nullptr, stream,
                  /*cooperative=*/true);
}

CUresult cuLaunchKernelEx(const void *configBytes, void *function,
                          void **params, void **extra) {
  REQUIRE_CONTEXT();
  if (!configBytes)
    return kErrorInvalidValue;
  const auto *config = static_cast<const LaunchConfig *>(configBytes);
  Dim3 cluster;
  bool cooperative = false;
  for (unsigned i = 0; i < config->numAttrs; ++i) {
    if (config->attrs[i].id == kLaunchAttributeCooperative)
      cooperative = config->attrs[i].value.cooperative != 0;
    if (config->attrs[i].id == kLaunchAttributeClusterDimension) {
      cluster = {config->attrs[i].value.clusterDim.x,
                 config->attrs[i].value.clusterDim.y,
                 config->attrs[i].value.clusterDim.z};
      if (cluster.count() == 0)
        return kErrorInvalidValue;
    }
    // Programmatic dependent launch: launches of a stream run one after
    // another here, which is what griddepcontrol.wait guarantees a kernel
    // anyway (and griddepcontrol executes as a no-op).
    if (config->attrs[i].id == kLaunchAttributeProgrammaticStreamSerialization &&
        (config->attrs[i].value.programmaticStreamSerializationAllowed & ~1))
      return kErrorInvalidValue;
  }
  return launchOn(static_cast<Function *>(function),
                  {config->gridDimX, config->gridDimY, config->gridDimZ},
                  {config->blockDimX, config->blockDimY, config->blockDimZ},
                  cluster, config->sharedMemBytes, params, extra,
                  config->stream, cooperative);
}

CUresult cuTensorMapEncodeTiled(void *map, int dtype, unsigned rank,
                                void *globalAddress,
                                const unsigned long long *globalDim,
                                const unsigned long long *globalStrides,
                                const unsigned *boxDim,
                                const unsigned *elementStrides, int interleave,
                                int swizzle, int l2Promotion, int oobFill) {
  (void)l2Promotion;
  if (!map || !globalDim || !boxDim || !elementStrides ||
      (rank > 1 && !globalStrides))
    return kErrorInvalidValue;
  static const int sizes[] = {1, 2, 4, 4, 8, 8, 2, 4, 8, 2, 4, 4, 4};
  if (dtype < 0 || dtype > 12 || rank < 1 || rank > 5 || interleave != 0 ||
      swizzle < 0 || swizzle > 3 || oobFill < 0 || oobFill > 1)
    return kErrorInvalidValue;
  auto address = reinterpret_cast<uint64_t>(globalAddress);
  if (address % 16)
    return kErrorInvalidValue;
  TensorMapDesc d{};
  d.magic = kTensorMapMagic;
  d.dtype = static_cast<uint8_t>(dtype);
  d.rank = static_cast<uint8_t>(rank);
  d.swizzle = static_cast<uint8_t>(swizzle);
  d.oobFill = static_cast<uint8_t>(oobFill);
  d.elementBytes = static_cast<uint8_t>(sizes[dtype]);
  d.globalAddress = address;
  for (unsigned i = 0; i < rank; ++i) {
    if (globalDim[i] == 0 || globalDim[i] > (1ull << 32) || boxDim[i] == 0 ||
        boxDim[i] > 256 || elementStrides[i] == 0 || elementStrides[i] > 8)
      return kErrorInvalidValue;
    d.dims[i] = static_cast<uint32_t>(globalDim[i]);
    d.box[i] = static_cast<uint16_t>(boxDim[i]);
    d.elementStrides[i] = static_cast<uint8_t>(elementStrides[i]);
    if (i > 0) {
      unsigned long long s = globalStrides[i - 1];
      if (s % 16 || s >= (1ull << 40))
        return kErrorInvalidValue;
      d.strides[i - 1] = s;
    }
  }
  if (boxDim[0] * static_cast<unsigned>(sizes[dtype]) % 16)
    return kErrorInvalidValue;
  unsigned span = swizzle == 3 ? 128 : swizzle == 2 ? 64 : swizzle == 1 ? 32 : 0;
  if (span && boxDim[0] * static_cast<unsigned>(sizes[dtype]) > span)
    return kErrorInvalidValue;
  std::memset(map, 0, 128);
  std::memcpy(map, &d, sizeof d);
  return kSuccess;
}

CUresult cuGetErrorString(CUresult error, const char **text) {
  if (!text)
    return kErrorInvalidValue;
  static const std::map<int, const char *> texts = {
      {kSuccess, "no error"},
      {kErrorInvalidValue, "invalid argument"},
      {kErrorOutOfMemory, "out of memory"},
      {kErrorNotInitialized, "initialization error"},
      {kErrorInvalidDevice, "invalid device ordinal"},
      {kErrorInvalidImage, "device kernel image is invalid"},
      {kErrorInvalidContext, "invalid device context"},
      {kErrorNoBinaryForGpu,
       "no kernel image is available for execution on the device (the "
       "emulator runs PTX, not SASS)"},
      {kErrorInvalidPtx, "a PTX JIT compilation failed"},
      {kErrorInvalidHandle, "invalid resource handle"},
      {kErrorNotFound, "named symbol not found"},
      {kErrorNotReady, "device not ready"},
      {kErrorIllegalAddress, "an illegal memory access was encountered"},
      {kErrorLaunchOutOfResources, "too many resources requested for launch"},
      {kErrorMisalignedAddress, "misaligned address"},
      {kErrorLaunchFailed, "unspecified launch failure"},
      {kErrorNotSupported, "operation not supported"},
      {kErrorUnknown, "unknown error"}};
  auto it = texts.find(error);
  if (it == texts.end()) {
    *text = nullptr;
    return kErrorInvalidValue;
  }
  *text = it->second;
  return kSuccess;
}

CUresult cuGetErrorName(CUresult error, const char **text) {
  return cuGetErrorString(error, text);
}

} // extern "C"
