//===- MpiComm.cpp - The MPI communicator (a plugin) ----------------------===//
//
// Part of moe-compiler's runtime, built as libmoe_comm_mpi.so and opened at
// run time only when mpirun starts several ranks. Collectives are
// non-blocking MPI calls polled against a deadline: when a peer died or
// hangs, the ranks still waiting say which collective timed out and abort
// the job instead of waiting forever.
//
//===----------------------------------------------------------------------===//

#include "moe/runtime/Comm.h"

// The C API only (no C++ bindings to link).
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <climits>
#include <cstdio>
#include <cstring>
#include <thread>

namespace moe::rt {
namespace {

class MpiCommunicator : public Communicator {
public:
  MpiCommunicator(double timeoutSeconds) : timeout(timeoutSeconds) {
    MPI_Comm_rank(MPI_COMM_WORLD, &myRank);
    MPI_Comm_size(MPI_COMM_WORLD, &worldSize);
  }
  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized)
      MPI_Finalize();
  }
  int rank() const override { return myRank; }
  int size() const override { return worldSize; }
  std::string name() const override { return "mpi"; }

  void allToAllV(const void *send, const std::vector<size_t> &bytes,
                 const std::vector<size_t> &sendOffsets, void *recv,
                 const std::vector<size_t> &recvBytes,
                 const std::vector<size_t> &recvOffsets) override {
    double start = steadySeconds();
    std::vector<int> sc(worldSize), sd(worldSize), rc(worldSize), rd(worldSize);
    for (int r = 0; r < worldSize; ++r) {
      sc[r] = toInt(bytes[r], "all-to-all");
      sd[r] = toInt(sendOffsets[r], "all-to-all");
      rc[r] = toInt(recvBytes[r], "all-to-all");
      rd[r] = toInt(recvOffsets[r], "all-to-all");
    }
    MPI_Request request;
    check(MPI_Ialltoallv(send, sc.data(), sd.data(), MPI_BYTE, recv, rc.data(),
                         rd.data(), MPI_BYTE, MPI_COMM_WORLD, &request),
          "all-to-all");
    wait(request, "all-to-all");
    record("all-to-all", start);
  }
  void allToAll(const void *send, void *recv, size_t bytesPerRank) override {
    double start = steadySeconds();
    MPI_Request request;
    int count = toInt(bytesPerRank, "all-to-all of sizes");
    check(MPI_Ialltoall(send, count, MPI_BYTE, recv, count, MPI_BYTE,
                        MPI_COMM_WORLD, &request),
          "all-to-all of sizes");
    wait(request, "all-to-all of sizes");
    record("all-to-all (sizes)", start);
  }
  void allReduceSum(float *data, size_t count) override {
    double start = steadySeconds();
    MPI_Request request;
    check(MPI_Iallreduce(MPI_IN_PLACE, data, toInt(count, "all-reduce"),
                         MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &request),
          "all-reduce");
    wait(request, "all-reduce");
    record("all-reduce", start);
  }
  [[noreturn]] void abort(const std::string &message, int status) override {
    std::fprintf(stderr, "%s\n", message.c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, status);
    std::_Exit(status);
  }

private:
  std::string prefix() const {
    return "moe: rank " + std::to_string(myRank) + " of " +
           std::to_string(worldSize) + ": ";
  }
  int toInt(size_t value, const char *what) {
    if (value > static_cast<size_t>(INT_MAX))
      abort(prefix() + what + " of " + std::to_string(value) +
                " bytes is larger than one MPI call moves",
            71);
    return static_cast<int>(value);
  }
  void check(int rc, const char *what) {
    if (rc == MPI_SUCCESS)
      return;
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    MPI_Error_string(rc, text, &length);
    abort(prefix() + what + " failed: " + std::string(text, length), 72);
  }
  /// Polls `request` until it completes or the timeout passes.
  void wait(MPI_Request &request, const char *what) {
    double deadline = steadySeconds() + timeout;
    for (int polls = 0;; ++polls) {
      int done = 0;
      check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), what);
      if (done)
        return;
      if (steadySeconds() > deadline) {
        char seconds[32];
        std::snprintf(seconds, sizeof(seconds), "%g", timeout);
        abort(prefix() + what + " did not complete within " + seconds +
                  " s: another rank died or hangs; aborting the job "
                  "(the tool's --timeout sets the limit)",
              124);
      }
      // Spin briefly, then back off so a waiting rank leaves the CPU to
      // the ranks still computing.
      if (polls > 1000)
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      else
        std::this_thread::yield();
    }
  }

  double timeout;
  int myRank = 0, worldSize = 1;
};

} // namespace
} // namespace moe::rt

extern "C" __attribute__((visibility("default"))) moe::rt::Communicator *
moe_comm_mpi_create(double timeoutSeconds, char *error, size_t errorSize) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    // Compiled code's collectives run on a thread of their own, never two
    // calls at once.
    int provided = 0;
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided) !=
        MPI_SUCCESS) {
      std::snprintf(error, errorSize, "MPI_Init_thread failed");
      return nullptr;
    }
    if (provided < MPI_THREAD_SERIALIZED) {
      std::snprintf(error, errorSize,
                    "this MPI does not support MPI_THREAD_SERIALIZED");
      return nullptr;
    }
  }
  // Errors come back as return codes, so each one gets a message here.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  return new moe::rt::MpiCommunicator(timeoutSeconds);
}
