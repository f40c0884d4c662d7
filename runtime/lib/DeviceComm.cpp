//===- DeviceComm.cpp - Collectives on GPU memory through NCCL ------------===//
//
// Part of moe-compiler's runtime. NCCL is opened with dlopen, like the
// driver (CudaDriver.h): its entry points are declared here from their
// documented C signatures (its types and structures are in
// moe/runtime/NcclAbi.h), so building needs no NCCL header and one rank
// never loads NCCL.
//
//===----------------------------------------------------------------------===//

#include "moe/runtime/DeviceComm.h"

#include "CudaDriver.h"
#include "moe/runtime/NcclAbi.h"

#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <thread>

namespace moe::rt {

DeviceCommunicator::~DeviceCommunicator() = default;

namespace {

using namespace cuda;

/// The config's fields are NCCL 2.18's.
constexpr int kMinimumVersion = nccl::kConfigVersion;

struct Nccl {
  nccl::Result (*getVersion)(int *);
  nccl::Result (*getUniqueId)(ncclUniqueId *);
  // The config passes as a void pointer (see CudaDriver.h).
  nccl::Result (*commInitRankConfig)(nccl::Comm *, int, ncclUniqueId, int,
                                     void *config);
  nccl::Result (*commGetAsyncError)(nccl::Comm, nccl::Result *);
  nccl::Result (*commAbort)(nccl::Comm);
  nccl::Result (*commDestroy)(nccl::Comm);
  nccl::Result (*groupStart)();
  nccl::Result (*groupEnd)();
  nccl::Result (*send)(const void *, size_t, int, int, nccl::Comm, CUstream);
  nccl::Result (*recv)(void *, size_t, int, int, nccl::Comm, CUstream);
  nccl::Result (*allReduce)(const void *, void *, size_t, int, int, nccl::Comm,
                            CUstream);
  const char *(*getErrorString)(nccl::Result);
  const char *(*getLastError)(nccl::Comm);
  // Symmetric memory (2.28): optional, null when the library lacks it.
  nccl::Result (*memAlloc)(void **, size_t);
  nccl::Result (*memFree)(void *);
  nccl::Result (*windowRegister)(nccl::Comm, void *, size_t, void **, int);
  nccl::Result (*windowDeregister)(nccl::Comm, void *);
  int version;

  std::string describe(nccl::Result rc, nccl::Comm comm = nullptr) const {
    std::string text = getErrorString(rc);
    const char *last = getLastError(comm);
    if (last && *last)
      text += " (" + std::string(last) + ")";
    return text;
  }
};

Expected<Nccl> openNccl() {
  using Result = Expected<Nccl>;
  const char *library = std::getenv("MOE_NCCL");
  if (!library || !*library)
    library = "libnccl.so.2";
  void *handle = dlopen(library, RTLD_NOW | RTLD_LOCAL);
  if (!handle)
    return Result::error(std::string("no NCCL library found: ") + dlerror());
  Nccl n{};
  SymbolBinder bind{handle};
  bind(n.getVersion, "ncclGetVersion");
  bind(n.getUniqueId, "ncclGetUniqueId");
  bind(n.commInitRankConfig, "ncclCommInitRankConfig");
  bind(n.commGetAsyncError, "ncclCommGetAsyncError");
  bind(n.commAbort, "ncclCommAbort");
  bind(n.commDestroy, "ncclCommDestroy");
  bind(n.groupStart, "ncclGroupStart");
  bind(n.groupEnd, "ncclGroupEnd");
  bind(n.send, "ncclSend");
  bind(n.recv, "ncclRecv");
  bind(n.allReduce, "ncclAllReduce");
  bind(n.getErrorString, "ncclGetErrorString");
  bind(n.getLastError, "ncclGetLastError");
  if (!bind.complete) {
    dlclose(handle);
    return Result::error(std::string("'") + library +
                         "' is not an NCCL library (missing entry points of "
                         "NCCL 2.18 or later)");
  }
  int version = 0;
  n.getVersion(&version);
  if (version < kMinimumVersion)
    return Result::error("NCCL " + std::to_string(version) + " in '" + library +
                         "' is too old: 2.18 or later is needed");
  n.version = version;
  SymbolBinder windows{handle};
  windows(n.memAlloc, "ncclMemAlloc");
  windows(n.memFree, "ncclMemFree");
  windows(n.windowRegister, "ncclCommWindowRegister");
  windows(n.windowDeregister, "ncclCommWindowDeregister");
  if (!windows.complete || version < nccl::kWindowVersion)
    n.memAlloc = nullptr;
  return n;
}

class NcclCommunicator : public DeviceCommunicator {
public:
  NcclCommunicator(Communicator &host, const DeviceCommOptions &options)
      : host(host), options(options) {}
  ~NcclCommunicator() override {
    for (SymmetricWindow &w : windows) {
      if (comm && healthy)
        nccl.windowDeregister(comm, w.handle);
      nccl.memFree(w.local);
    }
    if (comm)
      (healthy ? nccl.commDestroy : nccl.commAbort)(comm);
    if (commStream)
      driver.streamDestroy(commStream);
  }

  Status init();

  int rank() const override { return host.rank(); }
  int size() const override { return host.size(); }
  std::string name() const override { return "nccl"; }
  void *stream() const override { return commStream; }

  Status allToAllV(const void *send, const std::vector<size_t> &bytes,
                   const std::vector<size_t> &sendOffsets, void *recv,
                   const std::vector<size_t> &recvBytes,
                   const std::vector<size_t> &recvOffsets) override;
  Status exchange(const void *send, const std::vector<SegmentTransfer> &sends,
                  void *recv,
                  const std::vector<SegmentTransfer> &recvs) override;
  Status allReduceSum(float *data, size_t count) override;
  Status synchronize() override;
  Expected<SymmetricWindow> openWindow(size_t bytes) override;

  Expected<void *> allocate(size_t bytes) override {
    CUdeviceptr ptr = 0;
    if (Status s = checkCuda(driver.memAlloc(&ptr, std::max<size_t>(bytes, 1)),
                             "cannot allocate " + std::to_string(bytes) +
                                 " bytes of device memory");
        !s.ok())
      return Expected<void *>::error(s.error);
    return reinterpret_cast<void *>(ptr);
  }
  void release(void *device) override {
    if (device)
      driver.memFree(reinterpret_cast<CUdeviceptr>(device));
  }
  Status upload(void *device, const void *data, size_t bytes) override {
    return checkCuda(
        driver.memcpyHtoD(reinterpret_cast<CUdeviceptr>(device), data, bytes),
        "cannot copy to the device");
  }
  Status download(void *data, const void *device, size_t bytes) override {
    return checkCuda(
        driver.memcpyDtoH(data, reinterpret_cast<CUdeviceptr>(device), bytes),
        "cannot copy from the device");
  }

private:
  std::string where() const {
    return "rank " + std::to_string(rank()) + " of " + std::to_string(size());
  }
  Status checkCuda(CUresult rc, const std::string &what) const {
    if (rc == 0)
      return Status::success();
    return Status::failure(what + ": " + driver.describe(rc));
  }
  /// An NCCL call's result: in progress is fine (non-blocking mode), an
  /// error marks the communicator for abort.
  Status checkNccl(nccl::Result rc, const std::string &what) {
    if (rc == nccl::kSuccess || rc == nccl::kInProgress)
      return Status::success();
    healthy = false;
    return Status::failure("NCCL " + what + " failed on " + where() + ": " +
                           nccl.describe(rc, comm));
  }
  /// Polls until NCCL has no call in progress, up to the timeout.
  Status waitReady(const std::string &what);

  Communicator &host;
  DeviceCommOptions options;
  Nccl nccl{};
  Driver driver{};
  nccl::Comm comm = nullptr;
  CUstream commStream = nullptr;
  bool healthy = true;
  std::vector<SymmetricWindow> windows;
};

Status NcclCommunicator::init() {
  // NCCL first: its absence is the common failure, and the unique id needs
  // no GPU, so every rank takes part in the broadcast before any can fail
  // on its device (a rank that failed alone would leave the others waiting
  // in the broadcast).
  Expected<Nccl> n = openNccl();
  if (!n)
    return Status::failure(n.message());
  nccl = *n;
  ncclUniqueId id{};
  nccl::Result idResult = nccl::kSuccess;
  if (rank() == 0)
    idResult = nccl.getUniqueId(&id);
  // Rank 0's result travels with the id, so all ranks fail together.
  struct {
    ncclUniqueId id;
    int32_t result;
  } message{id, idResult};
  broadcast(host, &message, sizeof(message), 0);
  if (message.result != nccl::kSuccess)
    return Status::failure("NCCL could not make a unique id on rank 0: " +
                           nccl.describe(message.result));
  Expected<Driver> d = openDriver();
  if (!d)
    return Status::failure(d.message());
  driver = *d;
  if (Status s = makeContextCurrent(driver, options.device); !s.ok())
    return s;
  if (Status s = checkCuda(driver.streamCreate(&commStream, kStreamNonBlocking),
                           "cannot create the communication stream");
      !s.ok())
    return s;
  nccl::Config config{sizeof(nccl::Config),
                      nccl::kConfigMagic,
                      nccl::kConfigVersion,
                      /*blocking=*/0,
                      nccl::kConfigUndefined,
                      nccl::kConfigUndefined,
                      nccl::kConfigUndefined,
                      nullptr,
                      nccl::kConfigUndefined};
  if (options.commSms > 0)
    config.minCTAs = config.maxCTAs = options.commSms;
  if (Status s = checkNccl(
          nccl.commInitRankConfig(&comm, size(), message.id, rank(), &config),
          "initialization");
      !s.ok())
    return s;
  return waitReady("initialization");
}

Status NcclCommunicator::waitReady(const std::string &what) {
  double deadline = steadySeconds() + options.timeoutSeconds;
  for (;;) {
    nccl::Result state = nccl::kSuccess;
    if (Status s = checkNccl(nccl.commGetAsyncError(comm, &state), what);
        !s.ok())
      return s;
    if (state == nccl::kSuccess)
      return Status::success();
    if (state != nccl::kInProgress)
      return checkNccl(state, what);
    if (steadySeconds() > deadline) {
      healthy = false;
      return Status::failure("NCCL " + what + " did not complete on " +
                             where() + " within " +
                             std::to_string(options.timeoutSeconds) +
                             " s: another rank died or hangs");
    }
    std::this_thread::yield();
  }
}

Status NcclCommunicator::allToAllV(const void *send,
                                   const std::vector<size_t> &bytes,
                                   const std::vector<size_t> &sendOffsets,
                                   void *recv,
                                   const std::vector<size_t> &recvBytes,
                                   const std::vector<size_t> &recvOffsets) {
  size_t n = static_cast<size_t>(size());
  if (bytes.size() != n || sendOffsets.size() != n || recvBytes.size() != n ||
      recvOffsets.size() != n)
    return Status::failure("an all-to-all on " + where() +
                           " needs one size and offset per rank");
  // Point-to-point pairs in one group: NCCL schedules them together, and
  // a zero-byte pair still matches its peer's.
  if (Status s = checkNccl(nccl.groupStart(), "all-to-all"); !s.ok())
    return s;
  for (size_t peer = 0; peer < n; ++peer) {
    int p = static_cast<int>(peer);
    if (Status s = checkNccl(
            nccl.send(static_cast<const char *>(send) + sendOffsets[peer],
                      bytes[peer], nccl::kInt8, p, comm, commStream),
            "all-to-all send");
        !s.ok()) {
      nccl.groupEnd();
      return s;
    }
    if (Status s = checkNccl(
            nccl.recv(static_cast<char *>(recv) + recvOffsets[peer],
                      recvBytes[peer], nccl::kInt8, p, comm, commStream),
            "all-to-all receive");
        !s.ok()) {
      nccl.groupEnd();
      return s;
    }
  }
  if (Status s = checkNccl(nccl.groupEnd(), "all-to-all"); !s.ok())
    return s;
  return waitReady("all-to-all");
}

Status NcclCommunicator::exchange(const void *send,
                                  const std::vector<SegmentTransfer> &sends,
                                  void *recv,
                                  const std::vector<SegmentTransfer> &recvs) {
  for (const auto *list : {&sends, &recvs})
    for (const SegmentTransfer &t : *list)
      if (t.peer < 0 || t.peer >= size())
        return Status::failure("an exchange on " + where() + " names rank " +
                               std::to_string(t.peer));
  if (Status s = checkNccl(nccl.groupStart(), "exchange"); !s.ok())
    return s;
  Status status = Status::success();
  // Pairs with an empty segment are still posted: the peer posts its side.
  for (const SegmentTransfer &t : sends)
    if (status.ok())
      status =
          checkNccl(nccl.send(static_cast<const char *>(send) + t.offset,
                              t.bytes, nccl::kInt8, t.peer, comm, commStream),
                    "exchange send");
  for (const SegmentTransfer &t : recvs)
    if (status.ok())
      status =
          checkNccl(nccl.recv(static_cast<char *>(recv) + t.offset, t.bytes,
                              nccl::kInt8, t.peer, comm, commStream),
                    "exchange receive");
  if (Status s = checkNccl(nccl.groupEnd(), "exchange"); status.ok())
    status = s;
  if (!status.ok())
    return status;
  return waitReady("exchange");
}

Status NcclCommunicator::allReduceSum(float *data, size_t count) {
  if (Status s = checkNccl(nccl.allReduce(data, data, count, nccl::kFloat32,
                                          nccl::kSum, comm, commStream),
                           "all-reduce");
      !s.ok())
    return s;
  return waitReady("all-reduce");
}

Expected<SymmetricWindow> NcclCommunicator::openWindow(size_t bytes) {
  using Result = Expected<SymmetricWindow>;
  if (!nccl.memAlloc)
    return Result::error("NCCL " + std::to_string(nccl.version) +
                         " has no symmetric memory windows (2.28 or later "
                         "has)");
  // Every rank learns whether every rank has its window, so that all take
  // the same path (a rank that failed alone would leave the others
  // waiting in the registration).
  auto agree = [&](bool ok) {
    std::vector<float> fine(1, ok ? 1.0f : 0.0f);
    host.allReduceSum(fine.data(), 1);
    return fine[0] == static_cast<float>(size());
  };
  SymmetricWindow w;
  w.bytes = bytes;
  size_t rounded = (std::max<size_t>(bytes, 1) + 4095) / 4096 * 4096;
  nccl::Result rc = nccl.memAlloc(&w.local, rounded);
  // Zeroed before any peer can reach it (the agreement after the
  // registration orders every rank's zeroing before every rank's use).
  bool zeroed = rc == nccl::kSuccess &&
                driver.memsetD8Async(reinterpret_cast<CUdeviceptr>(w.local), 0,
                                     rounded, commStream) == 0 &&
                driver.streamSynchronize(commStream) == 0;
  if (rc == nccl::kSuccess && !zeroed) {
    nccl.memFree(w.local);
    rc = nccl::kSystemError;
  }
  if (!agree(rc == nccl::kSuccess)) {
    if (rc == nccl::kSuccess)
      nccl.memFree(w.local);
    return Result::error(rc == nccl::kSuccess
                             ? "another rank could not allocate its window"
                             : "ncclMemAlloc of " + std::to_string(rounded) +
                                   " bytes failed on " + where() + ": " +
                                   nccl.describe(rc));
  }
  rc = nccl.windowRegister(comm, w.local, rounded, &w.handle,
                           nccl::kWinCollSymmetric);
  if (rc == nccl::kInProgress) {
    if (Status s = waitReady("window registration"); !s.ok())
      rc = nccl::kSystemError;
    else
      rc = nccl::kSuccess;
  }
  nccl::WindowFields fields{};
  bool read =
      rc == nccl::kSuccess &&
      driver.memcpyDtoH(&fields, reinterpret_cast<CUdeviceptr>(w.handle),
                        sizeof fields) == 0;
  // One LSA team: every rank's position in it is its rank (a second node's
  // ranks would count from 0 again).
  bool oneTeam = read && fields.lsaRank == rank() && fields.worldRank == rank();
  if (!agree(oneTeam)) {
    if (rc == nccl::kSuccess)
      nccl.windowDeregister(comm, w.handle);
    nccl.memFree(w.local);
    if (rc != nccl::kSuccess)
      return Result::error("ncclCommWindowRegister failed on " + where() +
                           ": " + nccl.describe(rc, comm));
    return Result::error("the ranks are not one LSA team (load/store "
                         "accessible: one node's NVLink domain)");
  }
  for (int p = 0; p < size(); ++p)
    w.peers.push_back(reinterpret_cast<uint64_t>(fields.lsaFlatBase) +
                      (static_cast<uint64_t>(p) * fields.stride4G << 32));
  windows.push_back(w);
  return w;
}

Status NcclCommunicator::synchronize() {
  double deadline = steadySeconds() + options.timeoutSeconds;
  for (;;) {
    CUresult rc = driver.streamQuery(commStream);
    if (rc == 0)
      break;
    if (rc != kErrorNotReady) {
      healthy = false;
      return checkCuda(rc, "the communication stream failed on " + where());
    }
    nccl::Result state = nccl::kSuccess;
    nccl.commGetAsyncError(comm, &state);
    if (state != nccl::kSuccess && state != nccl::kInProgress)
      return checkNccl(state, "collective");
    if (steadySeconds() > deadline) {
      healthy = false;
      return Status::failure("NCCL collectives did not complete on " + where() +
                             " within " +
                             std::to_string(options.timeoutSeconds) +
                             " s: another rank died or hangs");
    }
    std::this_thread::yield();
  }
  return Status::success();
}

} // namespace

Expected<std::unique_ptr<DeviceCommunicator>>
createNcclCommunicator(Communicator &host, const DeviceCommOptions &options) {
  using Result = Expected<std::unique_ptr<DeviceCommunicator>>;
  if (options.commSms < 0)
    return Result::error("the communicator's SM count must be 0 (NCCL's "
                         "choice) or positive, got " +
                         std::to_string(options.commSms));
  auto comm = std::make_unique<NcclCommunicator>(host, options);
  if (Status s = comm->init(); !s.ok())
    return Result::error(s.error);
  return Result(std::move(comm));
}

} // namespace moe::rt
