//===- DeviceComm.h - Collectives on GPU memory (NCCL) ----------*- C++ -*-===//
//
// Part of moe-compiler's runtime.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_RUNTIME_DEVICECOMM_H
#define MOE_RUNTIME_DEVICECOMM_H

#include "moe/runtime/Comm.h"

namespace moe::rt {

struct DeviceCommOptions {
  /// The CUDA device of this rank (its primary context is made current).
  int device = 0;
  /// SMs the communicator may occupy: NCCL runs one CTA per channel, so
  /// its config gets minCTAs = maxCTAs = commSms, the `comm` part of a
  /// layer's #moe.sm_partition (20 of 132 in DeepSeek-V3). 0 leaves NCCL's
  /// own choice.
  int commSms = 0;
  /// Bound of initialization and of every synchronize(), in seconds. A rank
  /// that died or hangs makes the others abort their communicator and fail
  /// with a message instead of waiting forever.
  double timeoutSeconds = 300;
};

/// Symmetric memory (NCCL >= 2.28): a window of the same size on every
/// rank, allocated with ncclMemAlloc and registered with
/// ncclCommWindowRegister, that this rank's kernels load from and store to
/// on every peer (NVLink load/store within one LSA team).
struct SymmetricWindow {
  /// This rank's copy (a device address).
  void *local = nullptr;
  size_t bytes = 0;
  /// Rank p's copy as this rank addresses it (peers[rank()] is this rank's
  /// copy through the window's flat range, an alias of `local`).
  std::vector<uint64_t> peers;
  /// NCCL's window handle (the device address of its ncclWindow_vidmem).
  void *handle = nullptr;
};

/// Collectives on device memory among the ranks of a host communicator,
/// enqueued on a stream of the communicator's own, so they run beside the
/// compute stream's kernels. Calls enqueue and return; synchronize() waits.
/// Pointers are device addresses (CUdeviceptr) in the device's primary
/// context.
class DeviceCommunicator {
public:
  virtual ~DeviceCommunicator();
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// "nccl".
  virtual std::string name() const = 0;
  /// The CUstream the collectives are enqueued on.
  virtual void *stream() const = 0;

  /// As Communicator::allToAllV, on device memory; sizes are known on the
  /// host (exchange them first, e.g. with the host communicator).
  virtual Status allToAllV(const void *send, const std::vector<size_t> &bytes,
                           const std::vector<size_t> &sendOffsets, void *recv,
                           const std::vector<size_t> &recvBytes,
                           const std::vector<size_t> &recvOffsets) = 0;
  /// The transfers of an ExchangePlan between device buffers `send` and
  /// `recv`, in one group (every rank calls it with its own plan).
  virtual Status exchange(const void *send,
                          const std::vector<SegmentTransfer> &sends, void *recv,
                          const std::vector<SegmentTransfer> &recvs) = 0;
  /// Elementwise f32 sum over the ranks, in place.
  virtual Status allReduceSum(float *data, size_t count) = 0;
  /// Waits until everything enqueued has completed, up to the timeout;
  /// past it, aborts the communicator and fails naming the rank.
  virtual Status synchronize() = 0;

  /// A symmetric window of `bytes` (every rank calls it, with the same
  /// size; collective), zeroed, kept until the communicator is destroyed.
  /// Fails with the reason when the library has no windows or the ranks
  /// are not one LSA team (then the exchanges stay on send/receive).
  virtual Expected<SymmetricWindow> openWindow(size_t bytes) = 0;

  /// Device memory for tools and tests (frameworks bring their own).
  virtual Expected<void *> allocate(size_t bytes) = 0;
  virtual void release(void *device) = 0;
  virtual Status upload(void *device, const void *host, size_t bytes) = 0;
  virtual Status download(void *host, const void *device, size_t bytes) = 0;
};

/// An NCCL communicator over the ranks of `host`: NCCL is opened at run
/// time (libnccl.so.2, or $MOE_NCCL), rank 0 makes the unique id and `host`
/// broadcasts it, and the communicator is created non-blocking with the
/// options' CTA limits on `options.device`. Fails with one message (and
/// touches no GPU state it does not undo) when NCCL, the driver or the
/// device is missing.
Expected<std::unique_ptr<DeviceCommunicator>>
createNcclCommunicator(Communicator &host, const DeviceCommOptions &options);

} // namespace moe::rt

#endif // MOE_RUNTIME_DEVICECOMM_H
