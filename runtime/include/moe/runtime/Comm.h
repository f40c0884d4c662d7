//===- Comm.h - Communicators for expert parallelism ------------*- C++ -*-===//
//
// Part of moe-compiler's runtime.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_RUNTIME_COMM_H
#define MOE_RUNTIME_COMM_H

#include "moe/runtime/CommAbi.h"
#include "moe/runtime/Support.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace moe::rt {

/// A collective the communicator ran, or a stretch of compiled code
/// between two of its calls to the communicator: for the trace.
struct CommEvent {
  std::string name;
  double start = 0, seconds = 0; // steady clock, seconds
  bool compute = false;          // compiled code, not a collective
};

/// The ranks of an expert-parallel job. Every collective either completes
/// on every rank or, after the communicator's timeout, ends the whole job
/// with a message naming the rank and the collective (a peer that died or
/// hangs never makes a rank wait forever).
class Communicator {
public:
  virtual ~Communicator();
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// "local" or "mpi".
  virtual std::string name() const = 0;

  /// Every rank sends `bytes[d]` bytes from `send + sendOffsets[d]` to rank
  /// d, and receives `recvBytes[s]` bytes from rank s at
  /// `recv + recvOffsets[s]`.
  virtual void allToAllV(const void *send, const std::vector<size_t> &bytes,
                         const std::vector<size_t> &sendOffsets, void *recv,
                         const std::vector<size_t> &recvBytes,
                         const std::vector<size_t> &recvOffsets) = 0;
  /// `bytesPerRank` bytes to each rank, in rank order.
  virtual void allToAll(const void *send, void *recv, size_t bytesPerRank) = 0;
  /// Elementwise sum over the ranks, in place.
  virtual void allReduceSum(float *data, size_t count) = 0;
  /// Ends the job on every rank with exit status `status`.
  [[noreturn]] virtual void abort(const std::string &message, int status) = 0;

  /// The bound of every collective, in seconds (createCommunicator's).
  double timeoutSeconds = 300;

  /// The events since the last call (any thread may record them).
  std::vector<CommEvent> takeEvents();
  /// Records a collective that started at `start` (steady clock, seconds),
  /// or with `compute`, a stretch of compiled code.
  void record(const std::string &name, double start, bool compute = false);

private:
  std::mutex eventsMutex;
  std::vector<CommEvent> events;
};

/// Seconds on the steady clock (the trace's time base).
double steadySeconds();

/// The communicator of this process: MPI when launched by mpirun (or
/// another PMI launcher) with more than one rank, a single local rank
/// otherwise. MPI is opened at run time (libmoe_comm_mpi.so next to the
/// runtime library, or $MOE_COMM_MPI), so one rank needs no MPI at all.
/// `timeoutSeconds` bounds every collective.
Expected<std::unique_ptr<Communicator>>
createCommunicator(double timeoutSeconds);

/// The GPU of this rank: $MOE_CUDA_DEVICE, else the node-local rank the
/// launcher gives (Open MPI, MPICH, Slurm, torchrun), else 0.
int launcherLocalRank();

/// A communicator of one rank.
std::unique_ptr<Communicator> createLocalCommunicator();

/// The offsets an expert-parallel exchange produces (moe/runtime/CommAbi.h):
/// from this rank's `[experts + 1]` offsets `in` (dispatch: by global
/// expert; combine: by (local expert, source rank)), every rank's sizes are
/// exchanged and `out` gets the receiving side's offsets (dispatch: by
/// (local expert, source rank); combine: by global expert).
void exchangeOffsets(Communicator &comm, comm::Kind kind, const int32_t *in,
                     int32_t *out, int64_t experts);

/// One contiguous piece of an exchange: `bytes` bytes at byte `offset` of
/// the send or receive buffer, to or from rank `peer`.
struct SegmentTransfer {
  int peer = 0;
  size_t offset = 0, bytes = 0;
};
/// The pieces of an exchange of rows of `rowBytes` bytes between buffers
/// laid out by `inOffsets` and `outOffsets` (as exchangeOffsets gives
/// them), one per (peer, local expert): segments move straight into their
/// place, with no staging copy. Transfers to one peer come in local-expert
/// order on both sides, so the n-th send to a peer matches that peer's
/// n-th receive (NCCL pairs them so within one group).
struct ExchangePlan {
  std::vector<SegmentTransfer> sends, recvs;
};
ExchangePlan planExchange(comm::Kind kind, const int32_t *inOffsets,
                          const int32_t *outOffsets, int64_t experts, int ranks,
                          size_t rowBytes);

/// Copies `bytes` bytes at `data` on rank `root` to `data` on every rank.
void broadcast(Communicator &comm, void *data, size_t bytes, int root = 0);

/// What the communicator table of compiled code points to
/// (moe/runtime/CommAbi.h): a context that runs the code's collectives in
/// call order on a thread of its own, so that a started all-to-all moves
/// while the code computes, and records the compiled code's compute
/// between its calls as events of `comm`.
class CommContext {
public:
  explicit CommContext(Communicator &comm);
  ~CommContext();
  /// The table's words: the context, then the function of every slot.
  std::vector<int64_t> table();
  /// Around each call of compiled code: the compute before its first and
  /// after its last collective are events too.
  void enterCode();
  void leaveCode();

  struct State;

private:
  std::unique_ptr<State> state;
};

} // namespace moe::rt

#endif // MOE_RUNTIME_COMM_H
