//===- Bench.h - moe-comm-bench's results and its compiled exchange -------===//
//
// Part of moe-compiler.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_TOOLS_MOE_COMM_BENCH_BENCH_H
#define MOE_TOOLS_MOE_COMM_BENCH_BENCH_H

#include "moe/runtime/Comm.h"
#include "moe/runtime/DeviceComm.h"

#include <cstdint>
#include <string>
#include <vector>

namespace moe::bench {

/// One line of the table: a collective, checked and timed.
struct Result {
  std::string op;
  size_t bytes = 0; // this rank's payload per call
  double seconds = 0;
  /// Bus bandwidth over algorithm bandwidth (nccl-tests' factor; for the
  /// expert exchange, the share of the bytes that go to peers).
  double busFactor = 1;
  int64_t errors = 0;
  std::string firstError;
  /// The bytes/rank column shows this rank's own; the others may differ.
  void fail(const std::string &what) {
    if (errors++ == 0)
      firstError = what;
  }
};

/// A test hook: MOE_TEST_FAULT=corrupt:R makes rank R change one received
/// element before the check, to show that the check fails.
bool corruptOn(const rt::Communicator &c);

/// Waits for every rank.
void barrier(rt::Communicator &c);

/// The expert-parallel exchange of a layer's rows: every rank routes
/// `tokens` tokens to `topK` distinct experts of `experts` (uniformly, by a
/// seeded hash), `experts / ranks` on each rank; rows of `hidden` bf16.
struct ExchangeBenchOptions {
  int64_t tokens = 4096;
  int64_t hidden = 7168;
  int64_t experts = 256;
  int64_t topK = 8;
  /// The compiled sends' CTAs.
  int64_t ctas = 20;
  int64_t warmup = 2;
  int64_t iters = 20;
  int device = 0;
  double timeoutSeconds = 300;
};

/// Compiles the device-initiated dispatch and combine for the shape
/// (moegpu.ep_counts, ep_send, ep_wait through the sm_90a pipeline), runs
/// them over a symmetric window of `dev`, checks every received row,
/// routing weight and combined row, and times them; then NCCL's
/// all-to-all of the same rows both ways. Four results: ep_dispatch,
/// ep_combine, nccl_dispatch, nccl_combine. A failure that leaves the
/// ranks out of step aborts the job with the reason.
std::vector<Result> runExpertExchange(rt::Communicator &c,
                                      rt::DeviceCommunicator &dev,
                                      const ExchangeBenchOptions &options);

} // namespace moe::bench

#endif // MOE_TOOLS_MOE_COMM_BENCH_BENCH_H
