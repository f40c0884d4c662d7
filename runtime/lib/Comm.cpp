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
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>

namespace moe::rt {

Communicator::~Communicator() = default;

double steadySeconds() {
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::vector<CommEvent> Communicator::takeEvents() {
  std::vector<CommEvent> taken;
  taken.swap(events);
  return taken;
}

void Communicator::record(const char *name, double start, uint64_t bytes) {
  events.push_back({name, start, steadySeconds() - start, bytes});
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
  void broadcast(void *, size_t, int) override {}
  void barrier() override {}
  [[noreturn]] void abort(const std::string &message, int status) override {
    std::fprintf(stderr, "%s\n", message.c_str());
    std::exit(status);
  }
};

/// Launched by mpirun or another PMI launcher with this many ranks (1 when
/// not launched by one).
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

Communicator &fromContext(int64_t context) {
  return *reinterpret_cast<Communicator *>(static_cast<intptr_t>(context));
}

/// Checks the offsets compiled code hands over; a broken table is a bug in
/// the compiler, not a user error, but it must not become a wild copy.
void checkOffsets(Communicator &comm, const int32_t *offsets, int64_t experts,
                  const char *what) {
  for (int64_t e = 0; e < experts; ++e)
    if (offsets[0] != 0 || offsets[e + 1] < offsets[e])
      comm.abort("moe: rank " + std::to_string(comm.rank()) + ": " + what +
                     " offsets of an all-to-all are not ascending from 0",
                 70);
}

void exchangeCounts(int64_t context, int64_t kind, int64_t inAddress,
                    int64_t outAddress, int64_t experts) {
  Communicator &comm = fromContext(context);
  auto *in = reinterpret_cast<const int32_t *>(inAddress);
  auto *out = reinterpret_cast<int32_t *>(outAddress);
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

void exchangeRows(int64_t context, int64_t kind, int64_t inAddress,
                  int64_t inOffsetsAddress, int64_t outAddress,
                  int64_t outOffsetsAddress, int64_t experts,
                  int64_t rowBytes) {
  Communicator &comm = fromContext(context);
  auto *in = reinterpret_cast<const char *>(inAddress);
  auto *out = reinterpret_cast<char *>(outAddress);
  auto *inOff = reinterpret_cast<const int32_t *>(inOffsetsAddress);
  auto *outOff = reinterpret_cast<const int32_t *>(outOffsetsAddress);
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

void allReduce(int64_t context, int64_t address, int64_t count) {
  fromContext(context).allReduceSum(reinterpret_cast<float *>(address),
                                    static_cast<size_t>(count));
}

} // namespace

std::vector<int64_t> commTableFunctions() {
  return {reinterpret_cast<int64_t>(&exchangeCounts),
          reinterpret_cast<int64_t>(&exchangeRows),
          reinterpret_cast<int64_t>(&allReduce)};
}

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
  // The plugin stays loaded for the life of the process.
  return std::unique_ptr<Communicator>(comm);
}

} // namespace moe::rt
