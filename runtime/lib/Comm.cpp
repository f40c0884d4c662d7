//===- Comm.cpp - Communicators and the collectives of compiled code ------===//
//
// Part of moe-compiler's runtime. The local (one-rank) communicator, the
// loader of the MPI one, and the functions the communicator table of a
// host shared object points to (moe/runtime/CommAbi.h).
//
//===----------------------------------------------------------------------===//

#include "moe/runtime/Comm.h"
#include "moe/runtime/CommAbi.h"

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <dlfcn.h>
#include <functional>
#include <thread>

namespace moe::rt {

Communicator::~Communicator() = default;

double steadySeconds() {
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::vector<CommEvent> Communicator::takeEvents() {
  std::lock_guard<std::mutex> lock(eventsMutex);
  std::vector<CommEvent> taken;
  taken.swap(events);
  return taken;
}

void broadcast(Communicator &comm, void *data, size_t bytes, int root) {
  // An all-to-all in which only the root's segments are read.
  int n = comm.size();
  if (n == 1 || bytes == 0)
    return;
  std::vector<char> send(bytes * n), recv(bytes * n);
  if (comm.rank() == root)
    for (int r = 0; r < n; ++r)
      std::memcpy(send.data() + r * bytes, data, bytes);
  comm.allToAll(send.data(), recv.data(), bytes);
  std::memcpy(data, recv.data() + root * bytes, bytes);
}

void Communicator::record(const std::string &name, double start, bool compute) {
  double end = steadySeconds();
  std::lock_guard<std::mutex> lock(eventsMutex);
  events.push_back({name, start, end - start, compute});
}

namespace {

class LocalCommunicator : public Communicator {
public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string name() const override { return "local"; }
  void allToAllV(const void *send, const std::vector<size_t> &bytes,
                 const std::vector<size_t> &sendOffsets, void *recv,
                 const std::vector<size_t> &,
                 const std::vector<size_t> &recvOffsets) override {
    if (bytes[0])
      std::memcpy(static_cast<char *>(recv) + recvOffsets[0],
                  static_cast<const char *>(send) + sendOffsets[0], bytes[0]);
  }
  void allToAll(const void *send, void *recv, size_t bytesPerRank) override {
    if (bytesPerRank)
      std::memcpy(recv, send, bytesPerRank);
  }
  void allReduceSum(float *, size_t) override {}
  [[noreturn]] void abort(const std::string &message, int status) override {
    std::fprintf(stderr, "%s\n", message.c_str());
    std::exit(status);
  }
};

/// Launched by mpirun or another PMI launcher with this many ranks (1 when
/// not launched by one).
int launcherWorldSize();

} // namespace

int launcherLocalRank() {
  for (const char *var : {"MOE_CUDA_DEVICE", "OMPI_COMM_WORLD_LOCAL_RANK",
                          "MPI_LOCALRANKID", "SLURM_LOCALID", "LOCAL_RANK"})
    if (const char *value = std::getenv(var))
      return std::atoi(value);
  return 0;
}

namespace {

int launcherWorldSize() {
  for (const char *var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"})
    if (const char *value = std::getenv(var))
      return std::atoi(value);
  return 1;
}

/// libmoe_comm_mpi.so in the directory of the library holding this code.
std::string mpiPluginPath() {
  if (const char *path = std::getenv("MOE_COMM_MPI"); path && *path)
    return path;
  Dl_info info;
  if (dladdr(reinterpret_cast<void *>(&launcherWorldSize), &info) &&
      info.dli_fname) {
    std::string self = info.dli_fname;
    size_t slash = self.rfind('/');
    if (slash != std::string::npos)
      return self.substr(0, slash + 1) + "libmoe_comm_mpi.so";
  }
  return "libmoe_comm_mpi.so";
}

using CreateMpi = Communicator *(*)(double, char *, size_t);

//===----------------------------------------------------------------------===//
// What compiled code calls
//===----------------------------------------------------------------------===//

/// Checks the offsets compiled code hands over; a broken table is a bug in
/// the compiler, not a user error, but it must not become a wild copy.
void checkOffsets(Communicator &comm, const int32_t *offsets, int64_t experts,
                  const char *what) {
  bool ascending = offsets[0] == 0;
  for (int64_t e = 0; ascending && e < experts; ++e)
    ascending = offsets[e + 1] >= offsets[e];
  if (!ascending)
    comm.abort("moe: rank " + std::to_string(comm.rank()) + ": " + what +
                   " offsets of an all-to-all are not ascending from 0",
               70);
}

void exchangeRows(Communicator &comm, int64_t kind, const char *in,
                  const int32_t *inOff, char *out, const int32_t *outOff,
                  int64_t experts, int64_t rowBytes) {
  size_t n = static_cast<size_t>(comm.size());
  int64_t local = experts / static_cast<int64_t>(n);
  auto bytesOf = [&](int64_t rows) {
    return static_cast<size_t>(rows) * static_cast<size_t>(rowBytes);
  };
  // One side is in expert order (contiguous per rank); the other in
  // (local expert, rank) order, which goes through a staging buffer in
  // (rank, local expert) order.
  bool dispatch = kind == static_cast<int64_t>(comm::Kind::Dispatch);
  const int32_t *byExpert = dispatch ? inOff : outOff;
  const int32_t *byLocal = dispatch ? outOff : inOff;
  std::vector<size_t> expertBytes(n), expertAt(n), localBytes(n), stagingAt(n);
  for (size_t r = 0; r < n; ++r) {
    expertAt[r] = bytesOf(byExpert[r * local]);
    expertBytes[r] = bytesOf(byExpert[(r + 1) * local]) - expertAt[r];
    size_t rows = 0;
    for (int64_t l = 0; l < local; ++l)
      rows += static_cast<size_t>(byLocal[l * n + r + 1] - byLocal[l * n + r]);
    localBytes[r] = bytesOf(static_cast<int64_t>(rows));
    stagingAt[r] = r == 0 ? 0 : stagingAt[r - 1] + localBytes[r - 1];
  }
  std::vector<char> staging(stagingAt[n - 1] + localBytes[n - 1]);
  // Moves every (l, r) segment between the staging buffer and `byLocal`'s
  // buffer.
  auto shuffle = [&](char *local_, bool toStaging) {
    for (size_t r = 0; r < n; ++r) {
      size_t at = stagingAt[r];
      for (int64_t l = 0; l < local; ++l) {
        size_t segment = static_cast<size_t>(l) * n + r;
        size_t bytes = bytesOf(byLocal[segment + 1] - byLocal[segment]);
        char *there = local_ + bytesOf(byLocal[segment]);
        if (bytes)
          std::memcpy(toStaging ? staging.data() + at : there,
                      toStaging ? there : staging.data() + at, bytes);
        at += bytes;
      }
    }
  };
  if (dispatch) {
    comm.allToAllV(in, expertBytes, expertAt, staging.data(), localBytes,
                   stagingAt);
    shuffle(out, /*toStaging=*/false);
  } else {
    shuffle(const_cast<char *>(in), /*toStaging=*/true);
    comm.allToAllV(staging.data(), localBytes, stagingAt, out, expertBytes,
                   expertAt);
  }
}

} // namespace

void exchangeOffsets(Communicator &comm, comm::Kind kindValue,
                     const int32_t *in, int32_t *out, int64_t experts) {
  auto kind = static_cast<int64_t>(kindValue);
  checkOffsets(comm, in, experts, "input");
  int n = comm.size();
  int64_t local = experts / n;
  std::vector<int32_t> send(static_cast<size_t>(experts)),
      recv(static_cast<size_t>(experts));
  auto size = [&](int64_t segment) { return in[segment + 1] - in[segment]; };
  if (kind == static_cast<int64_t>(comm::Kind::Dispatch)) {
    // To rank d: my sizes of d's experts, in expert order.
    for (int64_t e = 0; e < experts; ++e)
      send[e] = size(e);
  } else {
    // Segments are (local expert l, source s); to s: its sizes by l.
    for (int s = 0; s < n; ++s)
      for (int64_t l = 0; l < local; ++l)
        send[s * local + l] = size(l * n + s);
  }
  comm.allToAll(send.data(), recv.data(), local * sizeof(int32_t));
  // recv[r * local + l]: rank r's size of (its or my) local expert l.
  out[0] = 0;
  if (kind == static_cast<int64_t>(comm::Kind::Dispatch)) {
    for (int64_t l = 0, i = 0; l < local; ++l)
      for (int s = 0; s < n; ++s, ++i)
        out[i + 1] = out[i] + recv[s * local + l];
  } else {
    for (int64_t e = 0; e < experts; ++e)
      out[e + 1] = out[e] + recv[e];
  }
}

ExchangePlan planExchange(comm::Kind kind, const int32_t *inOffsets,
                          const int32_t *outOffsets, int64_t experts, int ranks,
                          size_t rowBytes) {
  ExchangePlan plan;
  int64_t local = experts / ranks;
  bool dispatch = kind == comm::Kind::Dispatch;
  // Expert order: segment e = d * local + l lives in rank d's share;
  // (local expert, rank) order: segment l * ranks + r.
  const int32_t *byExpert = dispatch ? inOffsets : outOffsets;
  const int32_t *byLocal = dispatch ? outOffsets : inOffsets;
  auto &expertSide = dispatch ? plan.sends : plan.recvs;
  auto &localSide = dispatch ? plan.recvs : plan.sends;
  // Per peer, segments in local-expert order on both sides, so that the
  // n-th transfer to a peer matches the peer's n-th from this rank.
  for (int r = 0; r < ranks; ++r)
    for (int64_t l = 0; l < local; ++l) {
      int64_t e = r * local + l, s = l * ranks + r;
      size_t expertRows = static_cast<size_t>(byExpert[e + 1] - byExpert[e]);
      size_t localRows = static_cast<size_t>(byLocal[s + 1] - byLocal[s]);
      expertSide.push_back({r, static_cast<size_t>(byExpert[e]) * rowBytes,
                            expertRows * rowBytes});
      localSide.push_back({r, static_cast<size_t>(byLocal[s]) * rowBytes,
                           localRows * rowBytes});
    }
  return plan;
}

//===----------------------------------------------------------------------===//
// The context of compiled code: a thread that runs its collectives
//===----------------------------------------------------------------------===//

struct CommContext::State {
  explicit State(Communicator &comm) : comm(comm) {
    worker = std::thread([this] { work(); });
  }
  ~State() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stop = true;
    }
    wake.notify_all();
    worker.join();
  }

  /// Queues `task`; returns its ticket. Tasks run in submission order.
  int64_t submit(std::function<void()> task) {
    std::lock_guard<std::mutex> lock(mutex);
    queue.push_back(std::move(task));
    wake.notify_all();
    return ++submitted;
  }
  void waitFor(int64_t ticket) {
    std::unique_lock<std::mutex> lock(mutex);
    done.wait(lock, [&] { return finished >= ticket; });
  }
  /// A blocking collective of compiled code, named `call` in the trace.
  void call(const char *call, std::function<void()> task) {
    enter(call);
    waitFor(submit(std::move(task)));
    leave();
  }

  /// Compiled code calls in: the code ran since the last call returned.
  void enter(const char *call) {
    comm.record("compute after " + lastCall, lastReturn, /*compute=*/true);
    lastCall = call;
  }
  void leave() { lastReturn = steadySeconds(); }

  Communicator &comm;
  double lastReturn = 0;
  std::string lastCall = "entry";

private:
  void work() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock<std::mutex> lock(mutex);
        wake.wait(lock, [&] { return stop || !queue.empty(); });
        if (queue.empty())
          return;
        task = std::move(queue.front());
        queue.pop_front();
      }
      task();
      {
        std::lock_guard<std::mutex> lock(mutex);
        ++finished;
      }
      done.notify_all();
    }
  }

  std::thread worker;
  std::mutex mutex;
  std::condition_variable wake, done;
  std::deque<std::function<void()>> queue;
  int64_t submitted = 0, finished = 0;
  bool stop = false;
};

namespace {

using State = CommContext::State;

State &fromContext(int64_t context) {
  return *reinterpret_cast<State *>(static_cast<intptr_t>(context));
}
template <typename T> T *pointer(int64_t address) {
  return reinterpret_cast<T *>(static_cast<intptr_t>(address));
}

void callExchangeCounts(int64_t context, int64_t kind, int64_t in, int64_t out,
                        int64_t experts) {
  State &s = fromContext(context);
  s.call("all-to-all sizes", [&] {
    exchangeOffsets(s.comm, static_cast<comm::Kind>(kind),
                    pointer<const int32_t>(in), pointer<int32_t>(out), experts);
  });
}

void callExchangeRows(int64_t context, int64_t kind, int64_t in, int64_t inOff,
                      int64_t out, int64_t outOff, int64_t experts,
                      int64_t rowBytes) {
  State &s = fromContext(context);
  s.call("all-to-all", [&] {
    exchangeRows(s.comm, kind, pointer<const char>(in),
                 pointer<const int32_t>(inOff), pointer<char>(out),
                 pointer<const int32_t>(outOff), experts, rowBytes);
  });
}

int64_t callStartRows(int64_t context, int64_t kind, int64_t in, int64_t inOff,
                      int64_t out, int64_t outOff, int64_t experts,
                      int64_t rowBytes) {
  State &s = fromContext(context);
  s.enter("all-to-all start");
  // The code may reuse its input buffers once this returns: copy them.
  auto *inOffsets = pointer<const int32_t>(inOff);
  auto *outOffsets = pointer<const int32_t>(outOff);
  auto copies = std::make_shared<std::vector<int32_t>>(inOffsets,
                                                       inOffsets + experts + 1);
  copies->insert(copies->end(), outOffsets, outOffsets + experts + 1);
  auto rows = std::make_shared<std::vector<char>>(
      pointer<const char>(in),
      pointer<const char>(in) +
          static_cast<size_t>(inOffsets[experts]) * rowBytes);
  int64_t ticket = s.submit([&s, kind, copies, rows, out, experts, rowBytes] {
    exchangeRows(s.comm, kind, rows->data(), copies->data(), pointer<char>(out),
                 copies->data() + experts + 1, experts, rowBytes);
  });
  s.leave();
  return ticket;
}

void callWait(int64_t context, int64_t ticket) {
  State &s = fromContext(context);
  s.enter("all-to-all wait");
  s.waitFor(ticket);
  s.leave();
}

void callAllReduce(int64_t context, int64_t address, int64_t count) {
  State &s = fromContext(context);
  s.call("all-reduce", [&] {
    s.comm.allReduceSum(pointer<float>(address), static_cast<size_t>(count));
  });
}

} // namespace

CommContext::CommContext(Communicator &comm)
    : state(std::make_unique<State>(comm)) {}
CommContext::~CommContext() = default;

std::vector<int64_t> CommContext::table() {
  std::vector<int64_t> words(comm::kSlotCount);
  auto set = [&](comm::Slot slot, auto *function) {
    words[static_cast<size_t>(slot)] = reinterpret_cast<int64_t>(function);
  };
  words[static_cast<size_t>(comm::Slot::Context)] =
      reinterpret_cast<int64_t>(state.get());
  set(comm::Slot::ExchangeCounts, &callExchangeCounts);
  set(comm::Slot::ExchangeRows, &callExchangeRows);
  set(comm::Slot::AllReduce, &callAllReduce);
  set(comm::Slot::StartRows, &callStartRows);
  set(comm::Slot::Wait, &callWait);
  return words;
}

void CommContext::enterCode() {
  state->lastCall = "entry";
  state->leave();
}

void CommContext::leaveCode() { state->enter("exit"); }

std::unique_ptr<Communicator> createLocalCommunicator() {
  return std::make_unique<LocalCommunicator>();
}

Expected<std::unique_ptr<Communicator>>
createCommunicator(double timeoutSeconds) {
  using Result = Expected<std::unique_ptr<Communicator>>;
  if (launcherWorldSize() <= 1)
    return createLocalCommunicator();
  std::string path = mpiPluginPath();
  void *handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle)
    return Result::error(
        "launched with " + std::to_string(launcherWorldSize()) +
        " ranks, but the MPI communicator cannot be loaded: " + dlerror() +
        " (build with Open MPI's headers installed, or set "
        "MOE_COMM_MPI)");
  auto create =
      reinterpret_cast<CreateMpi>(dlsym(handle, "moe_comm_mpi_create"));
  if (!create)
    return Result::error(path + " has no moe_comm_mpi_create");
  char error[512] = {0};
  Communicator *comm = create(timeoutSeconds, error, sizeof(error));
  if (!comm)
    return Result::error(std::string("MPI: ") + error);
  comm->timeoutSeconds = timeoutSeconds;
  // The plugin stays loaded for the life of the process.
  return std::unique_ptr<Communicator>(comm);
}

} // namespace moe::rt
