//===- Comm.h - Communicators for expert parallelism ------------*- C++ -*-===//
//
// Part of moe-compiler's runtime.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_RUNTIME_COMM_H
#define MOE_RUNTIME_COMM_H

#include "moe/runtime/Support.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace moe::rt {

/// A collective the communicator ran: for the trace.
struct CommEvent {
  std::string name;
  double start = 0, seconds = 0; // steady clock, seconds
  uint64_t bytes = 0;            // sent by this rank
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
  virtual void broadcast(void *data, size_t bytes, int root) = 0;
  virtual void barrier() = 0;
  /// Ends the job on every rank with exit status `status`.
  [[noreturn]] virtual void abort(const std::string &message, int status) = 0;

  /// The collectives since the last call.
  std::vector<CommEvent> takeEvents();

protected:
  /// Records a collective that started at `start` (steady clock, seconds).
  void record(const char *name, double start, uint64_t bytes);

private:
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

/// A communicator of one rank.
std::unique_ptr<Communicator> createLocalCommunicator();

/// The three functions compiled code calls (moe/runtime/CommAbi.h), as the
/// table words after the context: exchangeCounts, exchangeRows, allReduce.
std::vector<int64_t> commTableFunctions();

} // namespace moe::rt

#endif // MOE_RUNTIME_COMM_H
