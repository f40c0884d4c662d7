//===- NcclEmu.cpp - NCCL between the processes of one job, for the emulator
//===//
//
// Part of moe-compiler's PTX emulator. libnccl-emu.so exports the NCCL
// entry points moe-compiler's runtime binds (MOE_NCCL names it), for ranks
// whose devices are libcuda-emu.so's: device memory is host memory in each
// process, so ranks exchange bytes through files in a directory named by
// the unique id (under $MOE_NCCL_EMU_DIR, else /dev/shm, else $TMPDIR).
//
// Symmetric memory: ncclMemAlloc maps a file of its own under the same
// base directory (MAP_SHARED) and hands it to the emulated driver as
// shared device memory; ncclCommWindowRegister (collective) publishes
// each rank's file, maps every rank's at its place in one flat range
// (rank i at lsaFlatBase + i * stride4G * 2^32, as NCCL's device API
// computes a peer's address) and returns a window structure whose fields
// the device API reads, so a store through a peer's address lands in the
// peer process. Every rank of a communicator is one LSA team.
//
// A send writes "<src>-<dst>-<n>" (the n-th message of the pair) to a
// temporary name and renames it into place; the receive waits for it,
// checks its size, copies it out and removes it. Calls between
// ncclGroupStart and ncclGroupEnd run at ncclGroupEnd, every send before
// any receive, so an all-to-all cannot deadlock. An all-reduce writes the
// rank's contribution as "ar-<n>-<rank>", waits for every rank's, and sums
// them in rank order, so every rank gets the same bits. A rank deletes its
// contribution two all-reduces later (by then every rank has read it);
// ncclCommDestroy waits for every rank and the last one out removes the
// directory. A collective is work of the stream it is given: it runs
// through the emulated driver's cuLaunchHostFunc (found in the library
// $MOE_CUDA_DRIVER names), after the stream's earlier work, so it runs
// beside the other streams' kernels and a failure is the communicator's
// asynchronous error
// (ncclCommGetAsyncError); without that driver it runs at once. A peer that
// does not answer within $MOE_NCCL_EMU_TIMEOUT seconds (default 300) fails
// the call with ncclRemoteError.
//
//===----------------------------------------------------------------------===//

#include "moe/runtime/NcclAbi.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <sys/mman.h>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace {

using namespace moe::nccl;

struct Communicator {
  std::string dir;
  int rank = 0, size = 1;
  std::vector<uint64_t> sent, received; // messages per peer
  uint64_t reductions = 0;
  uint64_t windows = 0; // window registrations so far
  std::string lastError;
  /// The first failure of work run on a stream, and the work not yet run.
  std::atomic<int> asyncError{0};
  std::atomic<int> inFlight{0};
};

struct Pending {
  bool isSend;
  const void *send;
  void *recv;
  size_t bytes;
  int peer;
  Communicator *comm;
  void *stream;
};

/// The emulated driver's cuLaunchHostFunc, when the process has it loaded.
using HostFunc = int (*)(void *, void (*)(void *), void *);
HostFunc hostFunc() {
  static const HostFunc fn = []() -> HostFunc {
    const char *path = std::getenv("MOE_CUDA_DRIVER");
    if (!path || !*path)
      return nullptr;
    void *lib = ::dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    return lib ? reinterpret_cast<HostFunc>(::dlsym(lib, "cuLaunchHostFunc"))
               : nullptr;
  }();
  return fn;
}

/// Runs `work` as work of `stream` (at once without the emulated driver or
/// a stream): its failure becomes the communicator's asynchronous error.
Result submit(Communicator *c, void *stream, std::function<Result()> work) {
  HostFunc launch = hostFunc();
  if (!launch || !stream)
    return work();
  struct Job {
    Communicator *comm;
    std::function<Result()> work;
  };
  auto *job = new Job{c, std::move(work)};
  ++c->inFlight;
  int rc = launch(
      stream,
      [](void *p) {
        auto *j = static_cast<Job *>(p);
        int none = 0;
        if (Result r = j->work())
          j->comm->asyncError.compare_exchange_strong(none, r);
        --j->comm->inFlight;
        delete j;
      },
      job);
  if (rc != 0) {
    --c->inFlight;
    delete job;
    c->lastError = "the stream cannot take the collective (a CUDA error " +
                   std::to_string(rc) + ")";
    return kSystemError;
  }
  return kSuccess;
}

thread_local int groupDepth = 0;
thread_local std::vector<Pending> pending;
thread_local std::string lastGlobalError;

Result failWith(Communicator *c, Result rc, const std::string &what) {
  (c ? c->lastError : lastGlobalError) = what;
  return rc;
}

double timeoutSeconds() {
  const char *t = std::getenv("MOE_NCCL_EMU_TIMEOUT");
  return t && *t ? std::atof(t) : 300.0;
}

size_t typeSize(int dtype) {
  switch (dtype) {
  case kInt8:
  case kUint8:
    return 1;
  case kInt32:
  case kUint32:
  case kFloat32:
    return 4;
  case kInt64:
  case kUint64:
  case kFloat64:
    return 8;
  case kFloat16:
  case kBfloat16:
    return 2;
  default: return 0;
  }
}

bool writeFile(const std::string &path, const void *data, size_t bytes) {
  std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0)
    return false;
  const char *p = static_cast<const char *>(data);
  size_t left = bytes;
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n <= 0) {
      ::close(fd);
      return false;
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  ::close(fd);
  return ::rename(tmp.c_str(), path.c_str()) == 0;
}

/// Waits for `path` to appear; false on timeout.
bool waitFor(const std::string &path) {
  auto start = std::chrono::steady_clock::now();
  double limit = timeoutSeconds();
  struct stat st;
  int spins = 0;
  while (::stat(path.c_str(), &st) != 0) {
    if (++spins > 1000)
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    else
      std::this_thread::yield();
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count() > limit)
      return false;
  }
  return true;
}

bool readFile(const std::string &path, void *data, size_t bytes,
              size_t &actual) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0)
    return false;
  struct stat st;
  ::fstat(fd, &st);
  actual = static_cast<size_t>(st.st_size);
  bool ok = actual == bytes;
  char *p = static_cast<char *>(data);
  size_t left = ok ? bytes : 0;
  while (left > 0) {
    ssize_t n = ::read(fd, p, left);
    if (n <= 0) {
      ok = false;
      break;
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  ::close(fd);
  return ok;
}

std::string pairPath(Communicator *c, int src, int dst, uint64_t n) {
  return c->dir + "/" + std::to_string(src) + "-" + std::to_string(dst) + "-" +
         std::to_string(n);
}

Result doSend(const Pending &p) {
  Communicator *c = p.comm;
  uint64_t n = c->sent[p.peer]++;
  if (!writeFile(pairPath(c, c->rank, p.peer, n), p.send, p.bytes))
    return failWith(c, kSystemError,
                    "cannot write a message in '" + c->dir + "'");
  return kSuccess;
}

Result doRecv(const Pending &p) {
  Communicator *c = p.comm;
  uint64_t n = c->received[p.peer]++;
  std::string path = pairPath(c, p.peer, c->rank, n);
  if (!waitFor(path))
    return failWith(c, kRemoteError,
                    "rank " + std::to_string(p.peer) +
                        " sent nothing within the timeout (died or hangs?)");
  size_t actual = 0;
  if (!readFile(path, p.recv, p.bytes, actual))
    return failWith(c, kInvalidUsage,
                    "rank " + std::to_string(p.peer) + " sent " +
                        std::to_string(actual) + " bytes; rank " +
                        std::to_string(c->rank) + " receives " +
                        std::to_string(p.bytes));
  ::unlink(path.c_str());
  return kSuccess;
}

Result enqueue(const Pending &p) {
  if (p.peer < 0 || p.peer >= p.comm->size)
    return failWith(p.comm, kInvalidArgument,
                    "peer " + std::to_string(p.peer) + " of " +
                        std::to_string(p.comm->size) + " ranks");
  if (groupDepth > 0) {
    pending.push_back(p);
    return kSuccess;
  }
  return submit(p.comm, p.stream,
                [p]() -> Result { return p.isSend ? doSend(p) : doRecv(p); });
}

/// A sum over the ranks, in rank order (every rank gets the same bits).
Result allReduce(Communicator *c, const void *send, void *recv, size_t count,
                 int dtype) {
  size_t bytes = count * typeSize(dtype);
  uint64_t n = c->reductions++;
  auto path = [&](uint64_t seq, int r) {
    return c->dir + "/ar-" + std::to_string(seq) + "-" + std::to_string(r);
  };
  if (n >= 2)
    ::unlink(path(n - 2, c->rank).c_str());
  if (!writeFile(path(n, c->rank), send, bytes))
    return failWith(c, kSystemError, "cannot write in '" + c->dir + "'");
  std::vector<char> sum(bytes), part(bytes);
  for (int r = 0; r < c->size; ++r) {
    if (!waitFor(path(n, r)))
      return failWith(c, kRemoteError,
                      "rank " + std::to_string(r) +
                          " did not join the all-reduce within the timeout");
    size_t actual = 0;
    if (!readFile(path(n, r), r == 0 ? sum.data() : part.data(), bytes, actual))
      return failWith(c, kInvalidUsage,
                      "rank " + std::to_string(r) + " reduces " +
                          std::to_string(actual) + " bytes, this rank " +
                          std::to_string(bytes));
    if (r == 0)
      continue;
    auto add = [&](auto *acc, const auto *x) {
      for (size_t i = 0; i < count; ++i)
        acc[i] += x[i];
    };
    switch (dtype) {
    case kFloat32:
      add(reinterpret_cast<float *>(sum.data()),
          reinterpret_cast<const float *>(part.data()));
      break;
    case kFloat64:
      add(reinterpret_cast<double *>(sum.data()),
          reinterpret_cast<const double *>(part.data()));
      break;
    case kInt32:
      add(reinterpret_cast<int32_t *>(sum.data()),
          reinterpret_cast<const int32_t *>(part.data()));
      break;
    default: add(reinterpret_cast<int64_t *>(sum.data()),
                 reinterpret_cast<const int64_t *>(part.data())); break;
    }
  }
  std::memcpy(recv, sum.data(), bytes);
  return kSuccess;
}


void removeDirectory(const std::string &dir) {
  if (DIR *d = ::opendir(dir.c_str())) {
    while (dirent *e = ::readdir(d)) {
      std::string name = e->d_name;
      if (name != "." && name != "..")
        ::unlink((dir + "/" + name).c_str());
    }
    ::closedir(d);
  }
  ::rmdir(dir.c_str());
}

/// The base directory of the communicators' directories (and of the
/// symmetric memory's files).
std::string baseDirectory() {
  if (const char *d = std::getenv("MOE_NCCL_EMU_DIR"); d && *d)
    return d;
  if (::access("/dev/shm", W_OK) == 0)
    return "/dev/shm";
  if (const char *t = std::getenv("TMPDIR"); t && *t)
    return t;
  return "/tmp";
}

/// The emulated driver's entry points for memory other processes share.
struct SharedHooks {
  int (*adopt)(void *, size_t) = nullptr;
  int (*forget)(void *) = nullptr;
};
const SharedHooks &sharedHooks() {
  static const SharedHooks hooks = [] {
    SharedHooks h;
    const char *path = std::getenv("MOE_CUDA_DRIVER");
    if (void *lib =
            path && *path ? ::dlopen(path, RTLD_NOW | RTLD_NOLOAD) : nullptr) {
      h.adopt = reinterpret_cast<int (*)(void *, size_t)>(
          ::dlsym(lib, "moeEmuAdoptShared"));
      h.forget =
          reinterpret_cast<int (*)(void *)>(::dlsym(lib, "moeEmuForget"));
    }
    return h;
  }();
  return hooks;
}

/// An ncclMemAlloc allocation: a file mapped shared, so that peers can
/// map it too.
struct SharedAllocation {
  std::string path;
  size_t bytes;
};

/// A registered window: the flat range of every rank's copy, and the
/// structure the device API reads.
struct Window {
  WindowFields fields;
  char *flat;
  size_t flatBytes, bytes;
  int ranks;
};

std::mutex sharedMutex;
std::map<void *, SharedAllocation> allocations;
uint64_t allocationCount = 0;

constexpr size_t k4G = size_t(1) << 32;

} // namespace

extern "C" {

Result ncclMemAlloc(void **ptr, size_t size) {
  if (!ptr || size == 0)
    return failWith(nullptr, kInvalidArgument, "ncclMemAlloc of 0 bytes");
  size_t bytes = (size + 4095) / 4096 * 4096;
  std::string path;
  {
    std::lock_guard<std::mutex> lock(sharedMutex);
    path = baseDirectory() + "/moe-nccl-emu-mem-" + std::to_string(::getpid()) +
           "-" + std::to_string(allocationCount++);
  }
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (fd < 0)
    return failWith(nullptr, kSystemError, "cannot make '" + path + "'");
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    ::close(fd);
    ::unlink(path.c_str());
    return failWith(nullptr, kSystemError,
                    "cannot size '" + path + "' to " + std::to_string(bytes) +
                        " bytes");
  }
  void *p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) {
    ::unlink(path.c_str());
    return failWith(nullptr, kSystemError, "cannot map '" + path + "'");
  }
  if (sharedHooks().adopt)
    sharedHooks().adopt(p, bytes);
  std::lock_guard<std::mutex> lock(sharedMutex);
  allocations[p] = {path, bytes};
  *ptr = p;
  return kSuccess;
}

Result ncclMemFree(void *ptr) {
  if (!ptr)
    return kSuccess;
  SharedAllocation a;
  {
    std::lock_guard<std::mutex> lock(sharedMutex);
    auto it = allocations.find(ptr);
    if (it == allocations.end())
      return failWith(nullptr, kInvalidArgument,
                      "ncclMemFree of memory ncclMemAlloc did not return");
    a = it->second;
    allocations.erase(it);
  }
  if (sharedHooks().forget)
    sharedHooks().forget(ptr);
  ::munmap(ptr, a.bytes);
  ::unlink(a.path.c_str()); // gone already once a window was registered
  return kSuccess;
}

Result ncclCommWindowRegister(void *comm, void *buff, size_t size, void **win,
                              int) {
  auto *c = static_cast<Communicator *>(comm);
  if (!c || !win || !buff || size == 0)
    return failWith(c, kInvalidArgument, "bad window arguments");
  SharedAllocation mine;
  {
    std::lock_guard<std::mutex> lock(sharedMutex);
    auto it = allocations.find(buff);
    if (it == allocations.end() || size > it->second.bytes)
      return failWith(c, kInvalidArgument,
                      "libnccl-emu registers windows that start at an "
                      "ncclMemAlloc allocation and lie inside it");
    mine = it->second;
  }
  // Publish this rank's file and size; read every rank's.
  uint64_t n = c->windows++;
  auto path = [&](const char *what, int r) {
    return c->dir + "/" + what + "-" + std::to_string(n) + "-" +
           std::to_string(r);
  };
  std::string record = std::to_string(size) + " " + mine.path;
  if (!writeFile(path("win", c->rank), record.data(), record.size()))
    return failWith(c, kSystemError, "cannot write in '" + c->dir + "'");
  std::vector<std::string> files(static_cast<size_t>(c->size));
  for (int r = 0; r < c->size; ++r) {
    if (!waitFor(path("win", r)))
      return failWith(c, kRemoteError,
                      "rank " + std::to_string(r) +
                          " did not register the window within the timeout");
    char text[4096] = {};
    int fd = ::open(path("win", r).c_str(), O_RDONLY);
    ssize_t got = fd >= 0 ? ::read(fd, text, sizeof text - 1) : -1;
    if (fd >= 0)
      ::close(fd);
    char *rest = nullptr;
    unsigned long long theirs = std::strtoull(text, &rest, 10);
    if (got <= 0 || !rest || *rest != ' ')
      return failWith(c, kSystemError, "a malformed window record");
    if (theirs != size)
      return failWith(c, kInvalidUsage,
                      "rank " + std::to_string(r) + " registers a window of " +
                          std::to_string(theirs) + " bytes, rank " +
                          std::to_string(c->rank) + " one of " +
                          std::to_string(size) +
                          " (a symmetric window has one size on every rank)");
    files[static_cast<size_t>(r)] = rest + 1;
  }
  // One flat range, every rank's copy 4 GiB-strided.
  unsigned stride4G = static_cast<unsigned>((size + k4G - 1) / k4G);
  size_t flatBytes = static_cast<size_t>(c->size) * stride4G * k4G;
  void *range = ::mmap(nullptr, flatBytes, PROT_NONE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (range == MAP_FAILED)
    return failWith(c, kSystemError, "cannot reserve the window's addresses");
  char *flat = static_cast<char *>(range);
  for (int r = 0; r < c->size; ++r) {
    char *at = flat + static_cast<size_t>(r) * stride4G * k4G;
    int fd = ::open(files[static_cast<size_t>(r)].c_str(), O_RDWR);
    void *p = fd < 0 ? MAP_FAILED
                     : ::mmap(at, size, PROT_READ | PROT_WRITE,
                              MAP_SHARED | MAP_FIXED, fd, 0);
    if (fd >= 0)
      ::close(fd);
    if (p == MAP_FAILED) {
      ::munmap(range, flatBytes);
      return failWith(c, kRemoteError,
                      "cannot map rank " + std::to_string(r) + "'s memory ('" +
                          files[static_cast<size_t>(r)] + "')");
    }
    if (sharedHooks().adopt)
      sharedHooks().adopt(at, size);
  }
  // Every rank has mapped every file: the names can go.
  writeFile(path("mapped", c->rank), "", 0);
  for (int r = 0; r < c->size; ++r)
    if (!waitFor(path("mapped", r)))
      return failWith(c, kRemoteError,
                      "rank " + std::to_string(r) +
                          " did not map the window within the timeout");
  ::unlink(mine.path.c_str());
  auto *w = new Window;
  w->fields = {w, flat, c->rank, c->rank, stride4G};
  w->flat = flat;
  w->flatBytes = flatBytes;
  w->bytes = size;
  w->ranks = c->size;
  // The structure is device memory the kernels read.
  if (sharedHooks().adopt)
    sharedHooks().adopt(&w->fields, sizeof w->fields);
  *win = &w->fields;
  return kSuccess;
}

Result ncclCommWindowDeregister(void *comm, void *win) {
  auto *c = static_cast<Communicator *>(comm);
  if (!c || !win)
    return failWith(c, kInvalidArgument, "bad window");
  auto *w = static_cast<Window *>(static_cast<WindowFields *>(win)->winHost);
  if (sharedHooks().forget) {
    sharedHooks().forget(&w->fields);
    for (int r = 0; r < w->ranks; ++r)
      sharedHooks().forget(w->flat +
                           static_cast<size_t>(r) * w->fields.stride4G * k4G);
  }
  ::munmap(w->flat, w->flatBytes);
  delete w;
  return kSuccess;
}

Result ncclGetVersion(int *version) {
  if (!version)
    return kInvalidArgument;
  *version = 22800;
  return kSuccess;
}

Result ncclGetUniqueId(ncclUniqueId *id) {
  if (!id)
    return kInvalidArgument;
  std::random_device rd;
  uint64_t a = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^
               static_cast<uint64_t>(::getpid());
  uint64_t b = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  std::memset(id, 0, sizeof *id);
  std::snprintf(id->internal, sizeof id->internal, "moe-nccl-emu-%016llx%016llx",
                static_cast<unsigned long long>(a),
                static_cast<unsigned long long>(b));
  return kSuccess;
}

Result ncclCommInitRankConfig(void **comm, int nranks, ncclUniqueId id, int rank,
                              void *) {
  if (!comm || nranks < 1 || rank < 0 || rank >= nranks)
    return failWith(nullptr, kInvalidArgument, "bad rank or rank count");
  if (std::strncmp(id.internal, "moe-nccl-emu-", 13) != 0)
    return failWith(nullptr, kInvalidArgument,
                    "the unique id is not one of libnccl-emu's");
  std::string base = baseDirectory();
  auto *c = new Communicator;
  c->dir = base + "/" + std::string(id.internal, ::strnlen(id.internal, 127));
  c->rank = rank;
  c->size = nranks;
  c->sent.assign(static_cast<size_t>(nranks), 0);
  c->received.assign(static_cast<size_t>(nranks), 0);
  if (::mkdir(c->dir.c_str(), 0700) != 0 && errno != EEXIST) {
    delete c;
    return failWith(nullptr, kSystemError, "cannot make '" + base + "/...'");
  }
  *comm = c;
  return kSuccess;
}

Result ncclCommInitRank(void **comm, int nranks, ncclUniqueId id, int rank) {
  return ncclCommInitRankConfig(comm, nranks, id, rank, nullptr);
}

Result ncclCommGetAsyncError(void *comm, Result *state) {
  if (!comm || !state)
    return kInvalidArgument;
  *state = static_cast<Result>(static_cast<Communicator *>(comm)->asyncError.load());
  return kSuccess;
}

Result ncclCommCount(void *comm, int *count) {
  if (!comm || !count)
    return kInvalidArgument;
  *count = static_cast<Communicator *>(comm)->size;
  return kSuccess;
}

Result ncclCommUserRank(void *comm, int *rank) {
  if (!comm || !rank)
    return kInvalidArgument;
  *rank = static_cast<Communicator *>(comm)->rank;
  return kSuccess;
}

Result ncclCommDestroy(void *comm) {
  auto *c = static_cast<Communicator *>(comm);
  if (!c)
    return kInvalidArgument;
  // Its collectives still on a stream finish first.
  while (c->inFlight.load() > 0)
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  // Every rank has finished its collectives once it announces it; the last
  // rank to see all announcements and leave removes the directory.
  std::string fin = c->dir + "/fin-" + std::to_string(c->rank);
  writeFile(fin, "", 0);
  bool all = true;
  for (int r = 0; r < c->size && all; ++r)
    all = waitFor(c->dir + "/fin-" + std::to_string(r));
  if (all) {
    writeFile(c->dir + "/left-" + std::to_string(c->rank), "", 0);
    int left = 0;
    struct stat st;
    for (int r = 0; r < c->size; ++r)
      left += ::stat((c->dir + "/left-" + std::to_string(r)).c_str(), &st) == 0;
    if (left == c->size)
      removeDirectory(c->dir);
  }
  delete c;
  return kSuccess;
}

Result ncclCommAbort(void *comm) {
  auto *c = static_cast<Communicator *>(comm);
  if (!c)
    return kInvalidArgument;
  removeDirectory(c->dir);
  delete c;
  return kSuccess;
}

Result ncclGroupStart() {
  ++groupDepth;
  return kSuccess;
}

Result ncclGroupEnd() {
  if (groupDepth == 0)
    return failWith(nullptr, kInvalidUsage, "ncclGroupEnd without a start");
  if (--groupDepth > 0)
    return kSuccess;
  std::vector<Pending> ops;
  ops.swap(pending);
  if (ops.empty())
    return kSuccess;
  return submit(ops[0].comm, ops[0].stream, [ops]() -> Result {
    for (const Pending &p : ops)
      if (p.isSend)
        if (Result rc = doSend(p))
          return rc;
    for (const Pending &p : ops)
      if (!p.isSend)
        if (Result rc = doRecv(p))
          return rc;
    return kSuccess;
  });
}

Result ncclSend(const void *data, size_t count, int dtype, int peer,
                void *comm, void *stream) {
  size_t size = typeSize(dtype);
  if (!comm || size == 0 || (count && !data))
    return failWith(static_cast<Communicator *>(comm), kInvalidArgument,
                    "bad send arguments");
  return enqueue({true, data, nullptr, count * size, peer,
                  static_cast<Communicator *>(comm), stream});
}

Result ncclRecv(void *data, size_t count, int dtype, int peer, void *comm,
                void *stream) {
  size_t size = typeSize(dtype);
  if (!comm || size == 0 || (count && !data))
    return failWith(static_cast<Communicator *>(comm), kInvalidArgument,
                    "bad receive arguments");
  return enqueue({false, nullptr, data, count * size, peer,
                  static_cast<Communicator *>(comm), stream});
}

Result ncclAllReduce(const void *send, void *recv, size_t count, int dtype,
                     int op, void *comm, void *stream) {
  auto *c = static_cast<Communicator *>(comm);
  if (!c || (count && (!send || !recv)))
    return kInvalidArgument;
  if (op != kSum || (dtype != kFloat32 && dtype != kFloat64 &&
                     dtype != kInt32 && dtype != kInt64))
    return failWith(c, kInvalidArgument,
                    "libnccl-emu reduces sums of float32, float64, int32 and "
                    "int64 only");
  if (groupDepth > 0)
    return failWith(c, kInvalidUsage,
                    "libnccl-emu runs all-reduces outside groups only");
  return submit(c, stream,
                [=] { return allReduce(c, send, recv, count, dtype); });
}

const char *ncclGetErrorString(Result rc) {
  switch (rc) {
  case kSuccess: return "no error";
  case kSystemError: return "unhandled system error";
  case kInvalidArgument: return "invalid argument";
  case kInvalidUsage: return "invalid usage";
  case kRemoteError: return "remote process exited or there was a network error";
  default: return "unknown result code";
  }
}

const char *ncclGetLastError(void *comm) {
  auto *c = static_cast<Communicator *>(comm);
  return c ? c->lastError.c_str() : lastGlobalError.c_str();
}

} // extern "C"
