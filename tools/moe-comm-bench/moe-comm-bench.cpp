//===- moe-comm-bench.cpp - Checks and times the runtime's collectives ----===//
//
// Part of moe-compiler. The collectives of expert parallelism, through the
// runtime's communicators: host memory over MPI (or one local rank), GPU
// memory over NCCL. Every received element is checked against the value
// its sender wrote, then the collective is timed.
//
//===----------------------------------------------------------------------===//

#include "Bench.h"
#include "ToolSupport.h"
#include "moe/runtime/DeviceComm.h"
#include "moe/runtime/ScheduleAbi.h"

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

using namespace moe::rt;
using moe::bench::barrier;
using moe::bench::corruptOn;
using moe::bench::Result;
using moe::tools::die;
using moe::tools::flag;
using moe::tools::parseCount;
using moe::tools::parseNumber;

const char *const moe::tools::kToolName = "moe-comm-bench";

static const char kUsage[] =
    "usage: [mpirun -np N] moe-comm-bench [options]\n"
    "\n"
    "Runs the collectives of expert parallelism through the runtime's\n"
    "communicators, checks every element that arrives against what its\n"
    "sender wrote, and times them: the all-to-all of dispatch and combine\n"
    "(uneven sizes per destination, some empty, as routing makes them) and\n"
    "the f32 all-reduce of replicated gradients. Rank 0 prints one line per\n"
    "collective: bytes, time per call, algorithm and bus bandwidth (as\n"
    "nccl-tests defines them) and the check.\n"
    "\n"
    "  --device=host|cuda   host memory over MPI (one rank: no MPI), or GPU\n"
    "                       memory over NCCL (default host)\n"
    "  --op=all_to_all|all_reduce|both|window|dispatch_combine   (both);\n"
    "                       window (cuda): a symmetric memory window (NCCL\n"
    "                       >= 2.28): every rank stores into every peer's\n"
    "                       copy through the window's peer addresses, every\n"
    "                       rank checks its own (a check, not timed);\n"
    "                       dispatch_combine (cuda, 2 to 128 ranks of one\n"
    "                       LSA team): a sharded layer's rows to their\n"
    "                       experts' ranks and back by the compiled device-\n"
    "                       initiated exchange (ep_counts, ep_send, ep_wait\n"
    "                       on --comm-sms CTAs, 20 by default; dispatch\n"
    "                       includes the sizes' exchange), then by NCCL's\n"
    "                       all-to-all of the same rows; every row, routing\n"
    "                       weight and returned row is checked\n"
    "  --tokens=T --hidden=H --experts=E --top-k=K   dispatch_combine: each\n"
    "                       rank routes T tokens of H bf16 to K distinct of E\n"
    "                       experts, E / ranks a rank (4096, 7168, 256, 8:\n"
    "                       DeepSeek-V3)\n"
    "  --bytes=B            all-to-all: bytes each rank sends each rank on\n"
    "                       average; all-reduce: bytes reduced (1048576)\n"
    "  --iters=N            timed calls (20), after --warmup=W checked\n"
    "                       calls (2)\n"
    "  --comm-sms=S         cuda: SMs NCCL may occupy (its minCTAs and\n"
    "                       maxCTAs; 0, the default, leaves NCCL's choice)\n"
    "  --gpu=D              cuda: this rank's device (default:\n"
    "                       $MOE_CUDA_DEVICE, else the local rank mpirun\n"
    "                       or torchrun gives, else 0)\n"
    "  --timeout=SECONDS    limit of every collective (300)\n";

namespace {

/// The collectives of one device kind, on buffers of that kind.
struct Collectives {
  virtual ~Collectives() = default;
  virtual std::string describe() const = 0;
  virtual void *allocate(size_t bytes) = 0;
  virtual void release(void *p) = 0;
  virtual void upload(void *dst, const void *src, size_t bytes) = 0;
  virtual void download(void *dst, const void *src, size_t bytes) = 0;
  virtual void allToAllV(const void *send, const std::vector<size_t> &bytes,
                         const std::vector<size_t> &sendOffsets, void *recv,
                         const std::vector<size_t> &recvBytes,
                         const std::vector<size_t> &recvOffsets) = 0;
  virtual void allReduceSum(float *data, size_t count) = 0;
  /// Waits for every enqueued collective.
  virtual void finish() = 0;
};

struct HostCollectives : Collectives {
  explicit HostCollectives(Communicator &c) : comm(c) {}
  std::string describe() const override { return "host (" + comm.name() + ")"; }
  void *allocate(size_t bytes) override {
    return new char[std::max<size_t>(bytes, 1)];
  }
  void release(void *p) override { delete[] static_cast<char *>(p); }
  void upload(void *dst, const void *src, size_t bytes) override {
    std::memcpy(dst, src, bytes);
  }
  void download(void *dst, const void *src, size_t bytes) override {
    std::memcpy(dst, src, bytes);
  }
  void allToAllV(const void *send, const std::vector<size_t> &bytes,
                 const std::vector<size_t> &sendOffsets, void *recv,
                 const std::vector<size_t> &recvBytes,
                 const std::vector<size_t> &recvOffsets) override {
    comm.allToAllV(send, bytes, sendOffsets, recv, recvBytes, recvOffsets);
  }
  void allReduceSum(float *data, size_t count) override {
    comm.allReduceSum(data, count);
  }
  void finish() override {}
  Communicator &comm;
};

/// Failures of a device collective end the job (the peers would wait in
/// the next one).
struct CudaCollectives : Collectives {
  CudaCollectives(Communicator &host, std::unique_ptr<DeviceCommunicator> d,
                  int commSms)
      : host(host), dev(std::move(d)), commSms(commSms) {}
  std::string describe() const override {
    return "cuda (" + dev->name() + ", " +
           (commSms ? std::to_string(commSms) + " SMs" : "NCCL's SM count") +
           ")";
  }
  void check(const Status &s) {
    if (!s.ok())
      host.abort("moe-comm-bench: error: " + s.error, 1);
  }
  void *allocate(size_t bytes) override {
    Expected<void *> p = dev->allocate(bytes);
    if (!p)
      host.abort("moe-comm-bench: error: " + p.message(), 1);
    return *p;
  }
  void release(void *p) override { dev->release(p); }
  void upload(void *dst, const void *src, size_t bytes) override {
    check(dev->upload(dst, src, bytes));
  }
  void download(void *dst, const void *src, size_t bytes) override {
    check(dev->download(dst, src, bytes));
  }
  void allToAllV(const void *send, const std::vector<size_t> &bytes,
                 const std::vector<size_t> &sendOffsets, void *recv,
                 const std::vector<size_t> &recvBytes,
                 const std::vector<size_t> &recvOffsets) override {
    check(
        dev->allToAllV(send, bytes, sendOffsets, recv, recvBytes, recvOffsets));
  }
  void allReduceSum(float *data, size_t count) override {
    check(dev->allReduceSum(data, count));
  }
  void finish() override { check(dev->synchronize()); }
  Communicator &host;
  std::unique_ptr<DeviceCommunicator> dev;
  int commSms;
};

/// Elements rank `s` sends rank `d`: around `mean`, one pair in four empty.
size_t pairCount(int s, int d, size_t mean) {
  if ((s + 2 * d) % 4 == 3)
    return 0;
  return mean / 2 + static_cast<size_t>(s * 7 + d * 3) % (mean + 1);
}
/// Element `i` of what rank `s` sends rank `d`.
uint32_t pairValue(int s, int d, size_t i) {
  return (static_cast<uint32_t>(s) * 0x9E3779B1u) ^
         (static_cast<uint32_t>(d) * 0x85EBCA77u) ^
         (static_cast<uint32_t>(i) * 0xC2B2AE3Du);
}

/// The mean over ranks of `v` (every rank gets it).
double meanOverRanks(Communicator &c, double v) {
  float f = static_cast<float>(v);
  c.allReduceSum(&f, 1);
  return f / c.size();
}

Result runAllToAll(Communicator &c, Collectives &b, size_t bytes,
                   int64_t warmup, int64_t iters) {
  int n = c.size(), me = c.rank();
  size_t mean = std::max<size_t>(bytes / sizeof(uint32_t), 1);
  std::vector<size_t> sendBytes(n), sendOff(n), recvBytes(n), recvOff(n);
  size_t sendTotal = 0, recvTotal = 0;
  for (int p = 0; p < n; ++p) {
    sendOff[p] = sendTotal;
    sendBytes[p] = pairCount(me, p, mean) * sizeof(uint32_t);
    sendTotal += sendBytes[p];
    recvOff[p] = recvTotal;
    recvBytes[p] = pairCount(p, me, mean) * sizeof(uint32_t);
    recvTotal += recvBytes[p];
  }
  std::vector<uint32_t> send(sendTotal / sizeof(uint32_t)),
      recv(recvTotal / sizeof(uint32_t));
  for (int p = 0; p < n; ++p)
    for (size_t i = 0; i < sendBytes[p] / sizeof(uint32_t); ++i)
      send[sendOff[p] / sizeof(uint32_t) + i] = pairValue(me, p, i);
  void *dSend = b.allocate(sendTotal), *dRecv = b.allocate(recvTotal);
  b.upload(dSend, send.data(), sendTotal);

  Result r;
  r.op = "all_to_all";
  r.bytes = sendTotal;
  r.busFactor = n > 1 ? static_cast<double>(n - 1) / n : 0;
  for (int64_t w = 0; w < std::max<int64_t>(warmup, 1); ++w) {
    std::vector<uint32_t> poison(recv.size(), 0xDEADBEEFu);
    b.upload(dRecv, poison.data(), recvTotal);
    b.allToAllV(dSend, sendBytes, sendOff, dRecv, recvBytes, recvOff);
    b.finish();
    b.download(recv.data(), dRecv, recvTotal);
    if (corruptOn(c) && !recv.empty())
      recv[recv.size() / 2] ^= 1;
    for (int p = 0; p < n; ++p)
      for (size_t i = 0; i < recvBytes[p] / sizeof(uint32_t); ++i) {
        uint32_t got = recv[recvOff[p] / sizeof(uint32_t) + i];
        uint32_t want = pairValue(p, me, i);
        if (got != want && r.errors++ == 0)
          r.firstError = "rank " + std::to_string(me) + ": element " +
                         std::to_string(i) + " from rank " + std::to_string(p) +
                         " is " + std::to_string(got) + ", expected " +
                         std::to_string(want);
      }
  }
  barrier(c);
  double start = steadySeconds();
  for (int64_t i = 0; i < iters; ++i)
    b.allToAllV(dSend, sendBytes, sendOff, dRecv, recvBytes, recvOff);
  b.finish();
  r.seconds = meanOverRanks(c, (steadySeconds() - start) / iters);
  b.release(dSend);
  b.release(dRecv);
  return r;
}

Result runAllReduce(Communicator &c, Collectives &b, size_t bytes,
                    int64_t warmup, int64_t iters) {
  int n = c.size(), me = c.rank();
  size_t count = std::max<size_t>(bytes / sizeof(float), 1);
  // Small integers, so every order of summation gives the exact sum.
  std::vector<float> data(count), out(count);
  for (size_t i = 0; i < count; ++i)
    data[i] = static_cast<float>((me + 1) * (static_cast<int>(i % 61) - 30));
  float *d = static_cast<float *>(b.allocate(count * sizeof(float)));
  Result r;
  r.op = "all_reduce";
  r.bytes = count * sizeof(float);
  r.busFactor = n > 1 ? 2.0 * (n - 1) / n : 0;
  for (int64_t w = 0; w < std::max<int64_t>(warmup, 1); ++w) {
    b.upload(d, data.data(), count * sizeof(float));
    b.allReduceSum(d, count);
    b.finish();
    b.download(out.data(), d, count * sizeof(float));
    if (corruptOn(c))
      out[count / 2] += 1;
    for (size_t i = 0; i < count; ++i) {
      float want =
          static_cast<float>((static_cast<int>(i % 61) - 30) * n * (n + 1) / 2);
      if (out[i] != want && r.errors++ == 0)
        r.firstError = "rank " + std::to_string(me) + ": element " +
                       std::to_string(i) + " is " + std::to_string(out[i]) +
                       ", expected " + std::to_string(want);
    }
  }
  barrier(c);
  double start = steadySeconds();
  for (int64_t i = 0; i < iters; ++i)
    b.allReduceSum(d, count);
  b.finish();
  r.seconds = meanOverRanks(c, (steadySeconds() - start) / iters);
  b.release(d);
  return r;
}

/// The check of a symmetric window: rank s stores `mean` elements
/// pairValue(s, d, i) into slot s of rank d's copy through d's address;
/// after a barrier every rank reads its own copy.
Result runWindow(Communicator &c, DeviceCommunicator &dev, size_t bytes) {
  int n = c.size(), me = c.rank();
  size_t mean = std::max<size_t>(bytes / sizeof(uint32_t), 1);
  Result r;
  r.op = "window";
  r.bytes = mean * sizeof(uint32_t) * static_cast<size_t>(n);
  Expected<SymmetricWindow> w = dev.openWindow(r.bytes);
  if (!w)
    c.abort("moe-comm-bench: error: rank " + std::to_string(me) +
                ": no symmetric window: " + w.message(),
            1);
  std::vector<uint32_t> part(mean);
  for (int d = 0; d < n; ++d) {
    for (size_t i = 0; i < mean; ++i)
      part[i] = pairValue(me, d, i);
    uint64_t at = w->peers[static_cast<size_t>(d)] +
                  static_cast<uint64_t>(me) * mean * sizeof(uint32_t);
    if (Status s = dev.upload(reinterpret_cast<void *>(at), part.data(),
                              mean * sizeof(uint32_t));
        !s.ok())
      c.abort("moe-comm-bench: error: " + s.error, 1);
  }
  barrier(c);
  std::vector<uint32_t> mine(mean * static_cast<size_t>(n));
  if (Status s = dev.download(mine.data(), w->local, r.bytes); !s.ok())
    c.abort("moe-comm-bench: error: " + s.error, 1);
  if (corruptOn(c))
    mine[mine.size() / 2] ^= 1;
  for (int src = 0; src < n; ++src)
    for (size_t i = 0; i < mean; ++i) {
      uint32_t got = mine[static_cast<size_t>(src) * mean + i];
      uint32_t want = pairValue(src, me, i);
      if (got != want && r.errors++ == 0)
        r.firstError = "rank " + std::to_string(me) + ": element " +
                       std::to_string(i) + " of rank " + std::to_string(src) +
                       "'s slot is " + std::to_string(got) + ", expected " +
                       std::to_string(want);
    }
  return r;
}

} // namespace

bool moe::bench::corruptOn(const Communicator &c) {
  const char *spec = std::getenv("MOE_TEST_FAULT");
  int rank = -1;
  return spec && std::sscanf(spec, "corrupt:%d", &rank) == 1 &&
         rank == c.rank();
}

void moe::bench::barrier(Communicator &c) {
  float token = 0;
  c.allReduceSum(&token, 1);
}

int main(int argc, char **argv) {
  moe::tools::installOutOfMemoryHandler();
  std::string device = "host", op = "both";
  int64_t bytes = 1 << 20, iters = 20, warmup = 2, commSms = 0, gpu = -1;
  moe::bench::ExchangeBenchOptions exchange;
  double timeout = 300;
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
    if (flag(argc, argv, i, "--device", &device) ||
        flag(argc, argv, i, "--op", &op))
      continue;
    if (flag(argc, argv, i, "--bytes", &value))
      bytes = parseCount(value, "--bytes");
    else if (flag(argc, argv, i, "--iters", &value))
      iters = parseCount(value, "--iters", 0, moe::tools::kMaxRepeats);
    else if (flag(argc, argv, i, "--warmup", &value))
      warmup = parseCount(value, "--warmup", 0, moe::tools::kMaxRepeats);
    else if (flag(argc, argv, i, "--comm-sms", &value))
      commSms = parseCount(value, "--comm-sms");
    else if (flag(argc, argv, i, "--tokens", &value))
      exchange.tokens = parseCount(value, "--tokens", 1, 1 << 24);
    else if (flag(argc, argv, i, "--hidden", &value))
      exchange.hidden = parseCount(value, "--hidden", 1, 1 << 20);
    else if (flag(argc, argv, i, "--experts", &value))
      exchange.experts = parseCount(value, "--experts", 1, 1 << 16);
    else if (flag(argc, argv, i, "--top-k", &value))
      exchange.topK = parseCount(value, "--top-k", 1, 1 << 16);
    else if (flag(argc, argv, i, "--gpu", &value))
      gpu = parseCount(value, "--gpu");
    else if (flag(argc, argv, i, "--timeout", &value))
      timeout = parseNumber(value, "--timeout", 0.001, 1e6);
    else
      die(std::string("unexpected argument '") + a + "' (see --help)");
  }
  if (device != "host" && device != "cuda")
    die("--device must be host or cuda, got '" + device + "'");
  if (op != "all_to_all" && op != "all_reduce" && op != "both" &&
      op != "window" && op != "dispatch_combine")
    die("--op must be all_to_all, all_reduce, both, window or "
        "dispatch_combine, got '" +
        op + "'");
  if (op == "window" && device != "cuda")
    die("--op=window needs --device=cuda (a window is GPU memory)");
  if (op == "dispatch_combine" && device != "cuda")
    die("--op=dispatch_combine needs --device=cuda (the exchange is "
        "compiled GPU kernels)");
  if (exchange.topK > exchange.experts)
    die("--top-k " + std::to_string(exchange.topK) +
        " is more than the --experts " + std::to_string(exchange.experts));
  if (bytes < 4)
    die("--bytes must be at least 4 (one element)");
  // The all-to-all holds a send, a receive and an expected buffer of
  // --bytes each on every rank.
  if (Status s = checkAllocation(3 * static_cast<uint64_t>(bytes),
                                 "--bytes " + std::to_string(bytes) +
                                     ": the buffers");
      !s.ok())
    die(s.error);
  if (iters < 1)
    die("--iters must be at least 1");
  if (device == "host" && (commSms || gpu >= 0))
    die("--comm-sms and --gpu apply to --device=cuda only");
  if (commSms > moe::abi::kMaxSms)
    die("--comm-sms must be at most " + std::to_string(moe::abi::kMaxSms) +
        ", got " + std::to_string(commSms));

  Expected<std::unique_ptr<Communicator>> communicator =
      createCommunicator(timeout);
  if (!communicator)
    die(communicator.message());
  Communicator &comm = **communicator;
  std::unique_ptr<Collectives> backend;
  if (device == "host") {
    backend = std::make_unique<HostCollectives>(comm);
  } else {
    DeviceCommOptions options;
    options.device = gpu >= 0 ? static_cast<int>(gpu) : launcherLocalRank();
    options.commSms = static_cast<int>(commSms);
    options.timeoutSeconds = timeout;
    Expected<std::unique_ptr<DeviceCommunicator>> dev =
        createNcclCommunicator(comm, options);
    if (!dev) {
      std::string message =
          "rank " + std::to_string(comm.rank()) + ": " + dev.message();
      if (comm.size() > 1)
        comm.abort("moe-comm-bench: error: " + message, 1);
      die(message);
    }
    backend = std::make_unique<CudaCollectives>(comm, std::move(*dev),
                                                static_cast<int>(commSms));
  }

  std::vector<Result> results;
  if (op == "dispatch_combine") {
    if (exchange.experts % comm.size() || comm.size() < 2 || comm.size() > 128)
      comm.abort("moe-comm-bench: error: --op=dispatch_combine needs 2 to "
                 "128 ranks that divide the --experts " +
                     std::to_string(exchange.experts) + ", got " +
                     std::to_string(comm.size()) + " rank(s)",
                 1);
    exchange.ctas = commSms ? commSms : 20;
    exchange.warmup = warmup;
    exchange.iters = iters;
    exchange.device = gpu >= 0 ? static_cast<int>(gpu) : launcherLocalRank();
    exchange.timeoutSeconds = timeout;
    results = moe::bench::runExpertExchange(
        comm, *static_cast<CudaCollectives &>(*backend).dev, exchange);
  }
  if (op == "window")
    results.push_back(
        runWindow(comm, *static_cast<CudaCollectives &>(*backend).dev, bytes));
  if (op == "all_to_all" || op == "both")
    results.push_back(runAllToAll(comm, *backend, bytes, warmup, iters));
  if (op == "all_reduce" || op == "both")
    results.push_back(runAllReduce(comm, *backend, bytes, warmup, iters));

  // Every rank learns which checks failed anywhere; failing ranks say where.
  std::vector<float> failures;
  for (const Result &r : results) {
    if (r.errors)
      std::fprintf(stderr,
                   "moe-comm-bench: error: %s: %lld wrong elements; first: "
                   "%s\n",
                   r.op.c_str(), static_cast<long long>(r.errors),
                   r.firstError.c_str());
    failures.push_back(r.errors ? 1.0f : 0.0f);
  }
  std::fflush(stderr);
  comm.allReduceSum(failures.data(), failures.size());
  bool failed = false;
  if (comm.rank() == 0) {
    std::printf("moe-comm-bench: %d rank(s), %s\n", comm.size(),
                backend->describe().c_str());
    std::printf("%-13s %12s %11s %11s %11s  %s\n", "op", "bytes/rank",
                "time_us", "algbw_GB/s", "busbw_GB/s", "check");
  }
  for (size_t i = 0; i < results.size(); ++i) {
    const Result &r = results[i];
    failed = failed || failures[i] > 0;
    if (comm.rank() != 0)
      continue;
    // One rank's all-reduce moves nothing, and the window is a check:
    // no bandwidth to speak of.
    if (r.op == "window") {
      std::printf("%-13s %12zu %11s %11s %11s  %s\n", r.op.c_str(), r.bytes,
                  "-", "-", "-", failures[i] > 0 ? "FAILED" : "ok");
      continue;
    }
    if (comm.size() == 1 && r.op == "all_reduce") {
      std::printf("%-13s %12zu %11.1f %11s %11s  %s\n", r.op.c_str(), r.bytes,
                  r.seconds * 1e6, "-", "-", failures[i] > 0 ? "FAILED" : "ok");
      continue;
    }
    double algbw = r.bytes / r.seconds / 1e9;
    std::printf("%-13s %12zu %11.1f %11.3f %11.3f  %s\n", r.op.c_str(), r.bytes,
                r.seconds * 1e6, algbw, algbw * r.busFactor,
                failures[i] > 0 ? "FAILED" : "ok");
  }
  std::fflush(stdout);
  return failed ? 1 : 0;
}
