//===- HostBackend.cpp - Running a bundle's shared object -----------------===//
//
// Part of moe-compiler's runtime. The shared object is written to an
// anonymous memory file and opened with dlopen; its packed entry point
// takes one MLIR memref descriptor per argument.
//
//===----------------------------------------------------------------------===//

#include "moe/runtime/CommAbi.h"
#include "moe/runtime/Layer.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <link.h>
#include <sys/mman.h>
#include <thread>
#include <unistd.h>

namespace moe::rt {

/// The address of `name` defined by the bundle's own shared object, or
/// null. dlsym on a library's handle also searches the libraries it
/// depends on, so a manifest naming "abort" or "system" would reach
/// libc's: the symbol must lie in the object `handle` opened.
static void *ownSymbol(void *handle, const std::string &name) {
  void *address = dlsym(handle, name.c_str());
  if (!address)
    return nullptr;
  struct link_map *own = nullptr, *found = nullptr;
  Dl_info info;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &own) != 0 ||
      dladdr1(address, &info, reinterpret_cast<void **>(&found),
              RTLD_DL_LINKMAP) == 0 ||
      !own || found != own)
    return nullptr;
  return address;
}

Backend::~Backend() = default;

std::string DeviceActivity::describe() const {
  auto count = [](uint64_t n, const char *one, const char *many) {
    return std::to_string(n) + " " + (n == 1 ? one : many);
  };
  return count(launches, "launch", "launches") + ", " +
         count(graphLaunches, "graph launch", "graph launches") + ", " +
         count(hostWaits, "host wait", "host waits") + ", " +
         count(allocations, "allocation", "allocations") + ", " +
         formatBytes(bytesToDevice) + " to the device, " +
         formatBytes(bytesToHost) + " back";
}

namespace {

using PackedEntry = void (*)(void **);
using SetThreads = void (*)(int32_t);

/// The default thread count: the machine's cores, shared among the MPI
/// ranks on this node (Open MPI, MPICH and Slurm say how many there are).
int defaultThreads() {
  int cores = static_cast<int>(std::thread::hardware_concurrency());
  int local = 1;
  for (const char *name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS",
                           "SLURM_NTASKS_PER_NODE"})
    if (const char *value = std::getenv(name)) {
      local = std::max(1, std::atoi(value));
      break;
    }
  return std::max(1, cores / local);
}

/// Work of fewer FLOPs than this (a forward pass, or a training step at 3x
/// its forward) runs on one thread: waking the
/// others and meeting them at every parallel loop's end costs more than
/// they save (a 64-token pass of a tiny layer took 0.2 ms on one thread,
/// 0.4 ms on two, and 6 ms whenever the other core was busy).
constexpr double kParallelMinFlops = 32e6;

class HostBackend : public Backend {
public:
  HostBackend(void *handle, PackedEntry entry, int fd, int threads,
              double flopsPerToken)
      : handle(handle), entry(entry), fd(fd), threads(threads),
        flopsPerToken(flopsPerToken), setThreadsFn(reinterpret_cast<SetThreads>(
                                          ownSymbol(handle, "moe_set_threads"))) {}
  ~HostBackend() override {
    context.reset();
    if (handle)
      dlclose(handle);
    ::close(fd);
  }

  Status run(const std::vector<const Tensor *> &arguments) override {
    // The first argument is x, [T, hidden].
    double tokens = arguments.empty() || arguments[0]->shape.empty()
                        ? 0
                        : static_cast<double>(arguments[0]->shape[0]);
    return call(entry, arguments, threadsFor(tokens));
  }

  void setThreads(int count) override { threads = std::max(1, count); }
  std::string codeVariant() const override { return variant; }
  /// The CPU level of the code loaded, when the bundle holds several.
  void setVariant(std::string level) { variant = std::move(level); }
  int getThreads() const override { return threads; }

  Status setCommunicator(Communicator *comm) override {
    auto *table = static_cast<int64_t *>(ownSymbol(handle, comm::kTableName));
    if (!table)
      return Status::failure("the bundle's shared object has no "
                             "communicator table; it was compiled without "
                             "--ep");
    context = std::make_unique<CommContext>(*comm);
    std::vector<int64_t> words = context->table();
    std::copy(words.begin(), words.end(), table);
    return Status::success();
  }

  Status runEntry(const std::string &symbol,
                  const std::vector<const Tensor *> &arguments,
                  int64_t tokens) override {
    auto fn = reinterpret_cast<PackedEntry>(ownSymbol(handle, symbol));
    if (!fn)
      return Status::failure("the bundle's shared object has no entry point '" +
                             symbol + "'");
    // A training step: its forward pass and about twice that backward.
    return call(fn, arguments, threadsFor(3.0 * tokens));
  }

private:
  /// The threads for work of `forwardTokens` tokens' forward passes (0:
  /// unknown).
  int threadsFor(double forwardTokens) const {
    return forwardTokens > 0 &&
                   forwardTokens * flopsPerToken < kParallelMinFlops
               ? 1
               : threads;
  }

  Status call(PackedEntry fn, const std::vector<const Tensor *> &arguments,
              int threadCount) {
    // Bundles compiled before the code had parallel loops lack the hook.
    if (setThreadsFn)
      setThreadsFn(threadCount);
    if (context)
      context->enterCode();
    // A descriptor of rank r: allocated and aligned pointers, offset, r
    // sizes, r strides; all 8-byte words on 64-bit hosts.
    std::vector<std::vector<int64_t>> descriptors;
    descriptors.reserve(arguments.size());
    std::vector<void *> argv;
    for (const Tensor *tensor : arguments) {
      size_t rank = tensor->shape.size();
      std::vector<int64_t> d(3 + 2 * rank);
      auto base = reinterpret_cast<int64_t>(tensor->data.data());
      d[0] = base;
      d[1] = base;
      d[2] = 0;
      int64_t stride = 1;
      for (size_t i = rank; i-- > 0;) {
        d[3 + i] = tensor->shape[i];
        d[3 + rank + i] = stride;
        stride *= tensor->shape[i];
      }
      descriptors.push_back(std::move(d));
      argv.push_back(descriptors.back().data());
    }
    fn(argv.data());
    if (context)
      context->leaveCode();
    return Status::success();
  }

  void *handle;
  PackedEntry entry;
  /// The memory file stays open while the code is loaded: dlopen finds a
  /// loaded object by its path, and a closed descriptor's number (and so
  /// the path) would be reused by the next layer, which would then share
  /// this one's code and globals (its communicator table).
  int fd;
  int threads;
  double flopsPerToken; // of a forward pass: router, k experts, shared
  SetThreads setThreadsFn;
  std::unique_ptr<CommContext> context;
  std::string variant;
};

} // namespace

Expected<std::unique_ptr<Backend>> createHostBackend(const Bundle &bundle) {
  using Result = Expected<std::unique_ptr<Backend>>;
  const Manifest &m = bundle.manifest;
  // One shared object, or one per CPU level (best first): the best this
  // CPU runs.
  size_t chosen = 0;
  if (m.hostCpus.empty() && bundle.blobs.size() != 1)
    return Result::error("host bundle must hold exactly one shared object, "
                         "it holds " +
                         std::to_string(bundle.blobs.size()) + " blobs");
  if (!m.hostCpus.empty()) {
    std::string levels;
    for (chosen = 0; chosen < m.hostCpus.size(); ++chosen) {
      Expected<bool> runs = hostRunsLevel(m.hostCpus[chosen]);
      if (!runs)
        return Result::error(runs.message());
      if (*runs)
        break;
      levels += (levels.empty() ? "" : ", ") + m.hostCpus[chosen];
    }
    if (chosen == m.hostCpus.size())
      return Result::error("this CPU runs none of the bundle's host code (" +
                           levels + ")");
  }
  int threads = defaultThreads();
  if (const char *value = std::getenv("MOE_NUM_THREADS")) {
    char *end = nullptr;
    errno = 0;
    long n = std::strtol(value, &end, 10);
    if (*value == '\0' || *end != '\0' || errno != 0 || n < 1 || n > 4096)
      return Result::error(std::string("MOE_NUM_THREADS must be a thread "
                                       "count from 1 to 4096, got '") +
                           value + "'");
    threads = static_cast<int>(n);
  }
  const std::vector<uint8_t> &so = bundle.blobs[chosen];
  static const uint8_t kElf[4] = {0x7f, 'E', 'L', 'F'};
  if (so.size() < 4 || std::memcmp(so.data(), kElf, 4) != 0)
    return Result::error("host bundle's code is not an ELF shared object");

  int fd = memfd_create("moe-bundle", MFD_CLOEXEC);
  if (fd < 0)
    return Result::error(std::string("memfd_create failed: ") +
                         std::strerror(errno));
  size_t written = 0;
  while (written < so.size()) {
    ssize_t n = ::write(fd, so.data() + written, so.size() - written);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      ::close(fd);
      return Result::error("cannot stage the shared object in memory");
    }
    written += static_cast<size_t>(n);
  }
  std::string path = "/proc/self/fd/" + std::to_string(fd);
  void *handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    ::close(fd);
    return Result::error(
        std::string("cannot load the bundle's shared object: ") + dlerror());
  }
  auto entry = reinterpret_cast<PackedEntry>(ownSymbol(handle, m.entry));
  if (!entry) {
    dlclose(handle);
    ::close(fd);
    return Result::error("the bundle's shared object has no entry point '" +
                         m.entry + "'");
  }
  const LayerSpec &l = m.layer;
  double flopsPerToken =
      2.0 * l.hidden *
      (l.experts + 3.0 * l.topK * l.ffn + 3.0 * l.sharedExperts * l.sharedFfn);
  auto backend = std::make_unique<HostBackend>(handle, entry, fd, threads,
                                               flopsPerToken);
  if (!m.hostCpus.empty())
    backend->setVariant(m.hostCpus[chosen]);
  return std::unique_ptr<Backend>(std::move(backend));
}

} // namespace moe::rt
