//===- ExpertExchange.cpp - The compiled dispatch and combine, timed ------===//
//
// Part of moe-compiler. The device-initiated exchange of a sharded layer
// (the kernels the compiler schedules on the comm SMs) beside NCCL's
// all-to-all of the same rows: checked row by row, then timed.
//
//===----------------------------------------------------------------------===//

#include "Bench.h"

#include "CudaDriver.h"
#include "moe_compiler.h"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <unistd.h>

using namespace moe::rt;
using namespace moe::rt::cuda;

namespace moe::bench {
namespace {

uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/// Column `col` of token `t`'s row on rank `s` (bf16 bits: the exchange
/// moves bytes).
uint16_t element(int s, int64_t t, int64_t col) {
  return static_cast<uint16_t>(mix((static_cast<uint64_t>(s) << 48) ^
                                   (static_cast<uint64_t>(t) << 20) ^
                                   static_cast<uint64_t>(col)));
}
/// The routing weight of token `t`'s k-th expert on rank `s`.
float weightOf(int s, int64_t t, int64_t k) {
  return static_cast<float>(mix((static_cast<uint64_t>(s) << 40) ^
                                (static_cast<uint64_t>(t) << 8) ^
                                static_cast<uint64_t>(k) ^ 0x5157u) %
                            4096) /
         4096.0f;
}

/// One rank's rows, as the layer's dispatch lays them out: by expert, and
/// within an expert by token.
struct Routing {
  std::vector<int32_t> offsets; // experts + 1
  std::vector<int64_t> token;   // a row's token
  std::vector<int64_t> slot;    // which of the token's experts
};

Routing route(int s, const ExchangeBenchOptions &o) {
  std::vector<std::vector<std::pair<int64_t, int64_t>>> byExpert(
      static_cast<size_t>(o.experts));
  std::vector<int64_t> picked;
  for (int64_t t = 0; t < o.tokens; ++t) {
    picked.clear();
    for (uint64_t j = 0; static_cast<int64_t>(picked.size()) < o.topK; ++j) {
      int64_t e =
          static_cast<int64_t>(mix((static_cast<uint64_t>(s) << 44) ^
                                   (static_cast<uint64_t>(t) << 12) ^ j) %
                               static_cast<uint64_t>(o.experts));
      if (std::find(picked.begin(), picked.end(), e) != picked.end())
        continue;
      byExpert[static_cast<size_t>(e)].push_back(
          {t, static_cast<int64_t>(picked.size())});
      picked.push_back(e);
    }
  }
  Routing r;
  r.offsets.push_back(0);
  for (const auto &rows : byExpert) {
    for (auto [t, k] : rows) {
      r.token.push_back(t);
      r.slot.push_back(k);
    }
    r.offsets.push_back(static_cast<int32_t>(r.token.size()));
  }
  return r;
}

/// The exchange's PTX from the compiler's C API, opened at run time (so
/// the tool needs no LLVM where it only runs NCCL's collectives):
/// $MOE_COMPILER_LIBRARY, else libmoe_compiler.so beside the tool's lib
/// directory (../lib), else the loader's search path.
Expected<std::string> compileKernels(int64_t ranks, int64_t experts,
                                     int64_t hidden, int64_t ctas) {
  std::vector<std::string> names;
  if (const char *given = std::getenv("MOE_COMPILER_LIBRARY"))
    names.push_back(given);
  char self[PATH_MAX];
  ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (len > 0) {
    std::string exe(self, static_cast<size_t>(len));
    names.push_back(exe.substr(0, exe.rfind('/')) +
                    "/../lib/libmoe_compiler.so");
  }
  names.push_back("libmoe_compiler.so");
  void *lib = nullptr;
  std::string why;
  for (const std::string &name : names) {
    if ((lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL)))
      break;
    const char *e = dlerror();
    why = e ? e : name;
    if (std::getenv("MOE_COMPILER_LIBRARY"))
      break;
  }
  if (!lib)
    return Expected<std::string>::error(
        "the compiled exchange needs the compiler's library "
        "(libmoe_compiler.so, with LLVM and MLIR): " +
        why);
  auto compile = reinterpret_cast<decltype(&moe_compile_exchange_kernels)>(
      dlsym(lib, "moe_compile_exchange_kernels"));
  auto ok = reinterpret_cast<decltype(&moe_compile_result_ok)>(
      dlsym(lib, "moe_compile_result_ok"));
  auto data = reinterpret_cast<decltype(&moe_compile_result_data)>(
      dlsym(lib, "moe_compile_result_data"));
  auto diagnostics =
      reinterpret_cast<decltype(&moe_compile_result_diagnostics)>(
          dlsym(lib, "moe_compile_result_diagnostics"));
  auto release = reinterpret_cast<decltype(&moe_compile_result_free)>(
      dlsym(lib, "moe_compile_result_free"));
  if (!compile || !ok || !data || !diagnostics || !release)
    return Expected<std::string>::error(
        "the compiler's library has no moe_compile_exchange_kernels (an "
        "older build?)");
  moe_compile_result *result = compile(ranks, experts, hidden, ctas);
  size_t size = 0;
  const void *text = data(result, &size);
  Expected<std::string> ptx =
      ok(result) && text ? Expected<std::string>(std::string(
                               static_cast<const char *>(text), size))
                         : Expected<std::string>::error(
                               std::string("compiling the exchange failed: ") +
                               diagnostics(result));
  release(result);
  return ptx;
}

/// A contiguous memref's descriptor as kernel parameters.
void memref(std::vector<uint64_t> &words, const void *p,
            std::initializer_list<int64_t> sizes) {
  auto at = reinterpret_cast<uint64_t>(p);
  words.insert(words.end(), {at, at, 0});
  for (int64_t s : sizes)
    words.push_back(static_cast<uint64_t>(s));
  std::vector<int64_t> strides(sizes.size());
  int64_t stride = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= *(sizes.begin() + i);
  }
  for (int64_t s : strides)
    words.push_back(static_cast<uint64_t>(s));
}

class Exchange {
public:
  Exchange(Communicator &c, DeviceCommunicator &dev,
           const ExchangeBenchOptions &o)
      : c(c), dev(dev), o(o), n(c.size()), me(c.rank()), local(o.experts / n),
        rowBytes(static_cast<size_t>(o.hidden) * 2) {}
  std::vector<Result> run();

private:
  [[noreturn]] void fail(const std::string &what) {
    c.abort("moe-comm-bench: error: rank " + std::to_string(me) + ": " + what,
            1);
    std::abort(); // abort() ends the job; a communicator that returned
  }
  void check(CUresult rc, const char *what) {
    if (rc != 0)
      fail(std::string(what) + ": " + driver.describe(rc));
  }
  void check(const Status &s) {
    if (!s.ok())
      fail(s.error);
  }
  void *allocate(size_t bytes) {
    Expected<void *> p = dev.allocate(std::max<size_t>(bytes, 16));
    if (!p)
      fail(p.message());
    buffers.push_back(*p);
    return *p;
  }
  void launch(const char *name, unsigned grid, unsigned block,
              std::vector<uint64_t> words);
  /// Rows rank `s` routes to rank `d`'s experts.
  int64_t rowsTo(int s, int d) const {
    const Routing &r = every[static_cast<size_t>(s)];
    return r.offsets[static_cast<size_t>((d + 1) * local)] -
           r.offsets[static_cast<size_t>(d * local)];
  }
  /// One pass of the compiled exchange, enqueued: counts, dispatch and
  /// its wait, then (after `mid` is recorded, if given) the combine of the
  /// received rows as they are, and its wait.
  void enqueuePass(CUevent start, CUevent mid, CUevent end);
  /// Checks what the last pass received and what came back.
  void checkPass(Result &dispatch, Result &combine);
  void checkStatus();
  void runNccl(Result &dispatch, Result &combine);

  Communicator &c;
  DeviceCommunicator &dev;
  const ExchangeBenchOptions &o;
  int n, me;
  int64_t local;
  size_t rowBytes;
  Driver driver{};
  CUmodule module = nullptr;
  CUstream stream = nullptr;
  std::vector<void *> buffers;
  std::vector<Routing> every;
  int64_t sent = 0, received = 0, capacity = 0, mostSent = 0;
  // Device buffers.
  void *offsets, *epoch, *waited, *peers, *epOffsets, *sendPos, *backPos,
      *status, *groups, *rows, *weights;
  char *table, *flags, *recv, *recvWeights, *back;
  std::vector<uint16_t> hostRows;
  std::vector<float> hostWeights;
};

void Exchange::launch(const char *name, unsigned grid, unsigned block,
                      std::vector<uint64_t> words) {
  CUfunction f = nullptr;
  check(driver.moduleGetFunction(&f, module, name), name);
  std::vector<void *> params(words.size());
  for (size_t i = 0; i < words.size(); ++i)
    params[i] = &words[i];
  LaunchConfig config{grid, 1, 1, block, 1, 1, 0, stream, nullptr, 0};
  check(driver.launchKernelEx(&config, f, params.data(), nullptr), name);
}

void Exchange::enqueuePass(CUevent start, CUevent mid, CUevent end) {
  int64_t flagWords = n + 2, e = o.experts;
  auto common = [&](std::vector<uint64_t> &w) {
    memref(w, flags, {flagWords});
    memref(w, status, {2});
    memref(w, peers, {n + 3});
  };
  if (start)
    check(driver.eventRecord(start, stream), "cuEventRecord");
  std::vector<uint64_t> w;
  memref(w, offsets, {e + 1});
  memref(w, table, {n * e});
  memref(w, flags, {flagWords});
  memref(w, epoch, {1});
  memref(w, peers, {n + 3});
  memref(w, epOffsets, {e + 1});
  memref(w, sendPos, {e});
  memref(w, backPos, {e});
  memref(w, status, {2});
  memref(w, groups, {local + 1});
  launch("counts", 1, 128, std::move(w));
  w.clear();
  memref(w, offsets, {e + 1});
  memref(w, sendPos, {e});
  memref(w, rows, {sent, o.hidden});
  memref(w, recv, {capacity, o.hidden});
  memref(w, weights, {sent});
  memref(w, recvWeights, {capacity});
  common(w);
  launch("dispatch", static_cast<unsigned>(o.ctas), 128, std::move(w));
  w.clear();
  memref(w, flags, {flagWords});
  memref(w, waited, {flagWords});
  memref(w, status, {2});
  memref(w, peers, {n + 3});
  launch("dispatch_wait", 1, 32, w);
  if (mid)
    check(driver.eventRecord(mid, stream), "cuEventRecord");
  std::vector<uint64_t> cw;
  memref(cw, epOffsets, {e + 1});
  memref(cw, backPos, {e});
  memref(cw, recv, {capacity, o.hidden});
  memref(cw, back, {mostSent, o.hidden});
  common(cw);
  launch("combine", static_cast<unsigned>(o.ctas), 128, std::move(cw));
  launch("combine_wait", 1, 32, std::move(w));
  if (end)
    check(driver.eventRecord(end, stream), "cuEventRecord");
}

void Exchange::checkStatus() {
  check(driver.streamSynchronize(stream), "cuStreamSynchronize");
  int32_t words[2] = {0, 0};
  check(dev.download(words, status, sizeof(words)));
  if (words[0] != 0)
    fail("the compiled exchange stopped with status [" +
         std::to_string(words[0]) + ", " + std::to_string(words[1]) +
         "] (1: a rank's sizes, 2: the dispatch, 3: the combine did not "
         "come in time; 4: a rank would receive more rows than it holds)");
}

void Exchange::checkPass(Result &dispatch, Result &combine) {
  std::vector<uint16_t> got(static_cast<size_t>(received * o.hidden));
  std::vector<float> gotWeights(static_cast<size_t>(received));
  if (received) {
    check(dev.download(got.data(), recv, got.size() * 2));
    check(dev.download(gotWeights.data(), recvWeights, gotWeights.size() * 4));
  }
  if (corruptOn(c) && !got.empty())
    got[got.size() / 2] ^= 1;
  // Local expert l's rows from every source in rank order, each source's
  // in its own order.
  int64_t at = 0;
  for (int64_t l = 0; l < local; ++l)
    for (int s = 0; s < n; ++s) {
      const Routing &r = every[static_cast<size_t>(s)];
      size_t e = static_cast<size_t>(me * local + l);
      for (int32_t i = r.offsets[e]; i < r.offsets[e + 1]; ++i, ++at) {
        int64_t t = r.token[static_cast<size_t>(i)];
        for (int64_t col = 0; col < o.hidden; ++col)
          if (got[static_cast<size_t>(at * o.hidden + col)] !=
              element(s, t, col)) {
            dispatch.fail("rank " + std::to_string(me) + ": received row " +
                          std::to_string(at) + " (token " + std::to_string(t) +
                          " of rank " + std::to_string(s) + "), element " +
                          std::to_string(col) + " differs");
            break;
          }
        if (gotWeights[static_cast<size_t>(at)] !=
            weightOf(s, t, r.slot[static_cast<size_t>(i)]))
          dispatch.fail("rank " + std::to_string(me) +
                        ": the routing weight of received row " +
                        std::to_string(at) + " differs");
      }
    }
  std::vector<uint16_t> came(static_cast<size_t>(sent * o.hidden));
  if (sent)
    check(dev.download(came.data(), back, came.size() * 2));
  for (int64_t i = 0; i < sent; ++i)
    if (std::memcmp(&came[static_cast<size_t>(i * o.hidden)],
                    &hostRows[static_cast<size_t>(i * o.hidden)], rowBytes)) {
      combine.fail("rank " + std::to_string(me) + ": row " + std::to_string(i) +
                   " came back different");
      break;
    }
}

void Exchange::runNccl(Result &dispatch, Result &combine) {
  // Every source's rows for this rank's experts, by source.
  std::vector<size_t> sendBytes(n), sendOff(n), recvBytes(n), recvOff(n);
  const Routing &mine = every[static_cast<size_t>(me)];
  size_t recvTotal = 0;
  for (int p = 0; p < n; ++p) {
    sendOff[p] = mine.offsets[static_cast<size_t>(p * local)] * rowBytes;
    sendBytes[p] = rowsTo(me, p) * rowBytes;
    recvOff[p] = recvTotal;
    recvBytes[p] = rowsTo(p, me) * rowBytes;
    recvTotal += recvBytes[p];
  }
  void *in = allocate(recvTotal), *out = allocate(sent * rowBytes);
  auto both = [&] {
    check(dev.allToAllV(rows, sendBytes, sendOff, in, recvBytes, recvOff));
    check(dev.allToAllV(in, recvBytes, recvOff, out, sendBytes, sendOff));
  };
  both();
  check(dev.synchronize());
  std::vector<uint16_t> got(recvTotal / 2), came(sent * o.hidden);
  if (recvTotal)
    check(dev.download(got.data(), in, recvTotal));
  if (sent)
    check(dev.download(came.data(), out, sent * rowBytes));
  size_t at = 0;
  for (int s = 0; s < n && dispatch.errors == 0; ++s) {
    const Routing &r = every[static_cast<size_t>(s)];
    for (int32_t i = r.offsets[static_cast<size_t>(me * local)];
         i < r.offsets[static_cast<size_t>((me + 1) * local)]; ++i, ++at)
      for (int64_t col = 0; col < o.hidden; ++col)
        if (got[at * o.hidden + col] !=
            element(s, r.token[static_cast<size_t>(i)], col)) {
          dispatch.fail("rank " + std::to_string(me) + ": row " +
                        std::to_string(at) + " of NCCL's all-to-all differs");
          break;
        }
  }
  if (came != hostRows)
    combine.fail("rank " + std::to_string(me) +
                 ": rows came back different through NCCL's all-to-all");
  // The two ways timed apart, each over the iterations.
  for (Result *r : {&dispatch, &combine}) {
    barrier(c);
    double start = steadySeconds();
    for (int64_t i = 0; i < o.iters; ++i) {
      if (r == &dispatch)
        check(dev.allToAllV(rows, sendBytes, sendOff, in, recvBytes, recvOff));
      else
        check(dev.allToAllV(in, recvBytes, recvOff, out, sendBytes, sendOff));
    }
    check(dev.synchronize());
    float seconds = static_cast<float>((steadySeconds() - start) / o.iters);
    c.allReduceSum(&seconds, 1);
    r->seconds = seconds / n;
  }
}

std::vector<Result> Exchange::run() {
  Expected<Driver> opened = openDriver();
  if (!opened)
    fail(opened.message());
  driver = *opened;
  check(makeContextCurrent(driver, o.device));

  Expected<std::string> ptx = compileKernels(n, o.experts, o.hidden, o.ctas);
  if (!ptx)
    fail(ptx.message());
  check(driver.moduleLoadData(&module, ptx->c_str()),
        "loading the exchange's PTX");
  check(driver.streamCreate(&stream, kStreamNonBlocking), "cuStreamCreate");

  for (int s = 0; s < n; ++s)
    every.push_back(route(s, o));
  const Routing &mine = every[static_cast<size_t>(me)];
  sent = static_cast<int64_t>(mine.token.size());
  for (int d = 0; d < n; ++d) {
    int64_t in = 0;
    for (int s = 0; s < n; ++s)
      in += rowsTo(s, d);
    capacity = std::max(capacity, in);
    if (d == me)
      received = in;
    mostSent = std::max<int64_t>(
        mostSent,
        static_cast<int64_t>(every[static_cast<size_t>(d)].token.size()));
  }

  // The symmetric window: the same layout on every rank.
  int64_t flagWords = n + 2, e = o.experts;
  size_t windowBytes = 0;
  auto place = [&](size_t bytes) {
    size_t at = windowBytes;
    windowBytes += (std::max<size_t>(bytes, 1) + 255) / 256 * 256;
    return at;
  };
  size_t tableAt = place(4 * n * e), flagsAt = place(4 * flagWords),
         recvAt = place(capacity * rowBytes),
         recvWeightsAt = place(4 * capacity),
         backAt = place(mostSent * rowBytes);
  Expected<SymmetricWindow> window = dev.openWindow(windowBytes);
  if (!window)
    fail("no symmetric window: " + window.message());
  auto base = static_cast<char *>(window->local);
  table = base + tableAt;
  flags = base + flagsAt;
  recv = base + recvAt;
  recvWeights = base + recvWeightsAt;
  back = base + backAt;

  offsets = allocate(4 * (e + 1));
  epoch = allocate(4);
  waited = allocate(4 * flagWords);
  peers = allocate(8 * (n + 3));
  epOffsets = allocate(4 * (e + 1));
  sendPos = allocate(4 * e);
  backPos = allocate(4 * e);
  status = allocate(8);
  groups = allocate(4 * (local + 1));
  rows = allocate(sent * rowBytes);
  weights = allocate(4 * sent);
  std::vector<uint32_t> zeros(static_cast<size_t>(flagWords) + 2, 0);
  check(dev.upload(epoch, zeros.data(), 4));
  check(dev.upload(waited, zeros.data(), 4 * flagWords));
  check(dev.upload(status, zeros.data(), 8));
  check(dev.upload(offsets, mine.offsets.data(), 4 * (e + 1)));
  std::vector<uint64_t> peerWords;
  for (int p = 0; p < n; ++p)
    peerWords.push_back(window->peers[static_cast<size_t>(p)] -
                        reinterpret_cast<uint64_t>(window->local));
  peerWords.push_back(static_cast<uint64_t>(me));
  peerWords.push_back(static_cast<uint64_t>(o.timeoutSeconds * 1e9));
  peerWords.push_back(static_cast<uint64_t>(capacity));
  check(dev.upload(peers, peerWords.data(), 8 * peerWords.size()));
  hostRows.resize(static_cast<size_t>(sent * o.hidden));
  hostWeights.resize(static_cast<size_t>(sent));
  for (int64_t i = 0; i < sent; ++i) {
    int64_t t = mine.token[static_cast<size_t>(i)];
    for (int64_t col = 0; col < o.hidden; ++col)
      hostRows[static_cast<size_t>(i * o.hidden + col)] = element(me, t, col);
    hostWeights[static_cast<size_t>(i)] =
        weightOf(me, t, mine.slot[static_cast<size_t>(i)]);
  }
  if (sent) {
    check(dev.upload(rows, hostRows.data(), hostRows.size() * 2));
    check(dev.upload(weights, hostWeights.data(), hostWeights.size() * 4));
  }

  std::vector<Result> results(4);
  Result &dispatch = results[0], &combine = results[1];
  dispatch.op = "ep_dispatch";
  combine.op = "ep_combine";
  results[2].op = "nccl_dispatch";
  results[3].op = "nccl_combine";
  // What this rank sends each way, and the share that leaves it.
  int64_t toSelf = rowsTo(me, me);
  for (int i = 0; i < 4; ++i) {
    bool out = i % 2 == 0;
    int64_t rowsOut = out ? sent : received;
    results[i].bytes =
        rowsOut * rowBytes + (i == 0 ? 4 * static_cast<size_t>(sent) : 0);
    results[i].busFactor =
        rowsOut ? static_cast<double>(rowsOut - toSelf) / rowsOut : 0;
  }

  // Checked passes: the received rows and weights poisoned before each.
  std::vector<uint8_t> poison(std::max(capacity, mostSent) * rowBytes, 0xA5);
  for (int64_t w = 0; w < std::max<int64_t>(o.warmup, 1); ++w) {
    barrier(c);
    check(dev.upload(recv, poison.data(), capacity * rowBytes));
    check(dev.upload(recvWeights, poison.data(), 4 * capacity));
    check(dev.upload(back, poison.data(), mostSent * rowBytes));
    barrier(c);
    enqueuePass(nullptr, nullptr, nullptr);
    checkStatus();
    checkPass(dispatch, combine);
  }
  // Timed passes back to back, CUDA events around each way.
  std::vector<CUevent> events(static_cast<size_t>(3 * o.iters));
  for (CUevent &ev : events)
    check(driver.eventCreate(&ev, 0), "cuEventCreate");
  barrier(c);
  for (int64_t i = 0; i < o.iters; ++i)
    enqueuePass(events[3 * i], events[3 * i + 1], events[3 * i + 2]);
  checkStatus();
  double dispatchMs = 0, combineMs = 0;
  for (int64_t i = 0; i < o.iters; ++i) {
    float d = 0, cm = 0;
    check(driver.eventElapsedTime(&d, events[3 * i], events[3 * i + 1]),
          "cuEventElapsedTime");
    check(driver.eventElapsedTime(&cm, events[3 * i + 1], events[3 * i + 2]),
          "cuEventElapsedTime");
    dispatchMs += d;
    combineMs += cm;
  }
  for (CUevent ev : events)
    driver.eventDestroy(ev);
  float sums[2] = {static_cast<float>(dispatchMs / o.iters),
                   static_cast<float>(combineMs / o.iters)};
  c.allReduceSum(sums, 2);
  dispatch.seconds = sums[0] / n / 1e3;
  combine.seconds = sums[1] / n / 1e3;

  runNccl(results[2], results[3]);
  for (void *p : buffers)
    dev.release(p);
  driver.streamDestroy(stream);
  driver.moduleUnload(module);
  return results;
}

} // namespace

std::vector<Result> runExpertExchange(Communicator &c, DeviceCommunicator &dev,
                                      const ExchangeBenchOptions &options) {
  return Exchange(c, dev, options).run();
}

} // namespace moe::bench
