//===- CudaAbi.h - The CUDA driver API's types and values -------*- C++ -*-===//
//
// Part of moe-compiler. The driver API's scalar types, result codes and
// the structures passed through it, by their documented values and
// layouts, so that neither side needs a CUDA header: the runtime calls a
// driver opened with dlopen (runtime/lib/CudaDriver.h), and the PTX
// emulator's drop-in driver (emu/driver/CudaEmu.cpp) implements the same
// entry points. Header-only.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_RUNTIME_CUDAABI_H
#define MOE_RUNTIME_CUDAABI_H

namespace moe::cuda {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = void *;
using CUmodule = void *;
using CUfunction = void *;
using CUstream = void *;
using CUevent = void *;
using CUgraph = void *;
using CUgraphExec = void *;

// CUresult values.
enum : CUresult {
  kSuccess = 0,
  kErrorInvalidValue = 1,
  kErrorOutOfMemory = 2,
  kErrorNotInitialized = 3,
  kErrorStubLibrary = 34,
  kErrorInvalidDevice = 101,
  kErrorInvalidImage = 200,
  kErrorInvalidContext = 201,
  kErrorNoBinaryForGpu = 209,
  kErrorInvalidPtx = 218,
  kErrorInvalidHandle = 400,
  kErrorIllegalState = 401,
  kErrorNotFound = 500,
  kErrorNotReady = 600,
  kErrorIllegalAddress = 700,
  kErrorLaunchOutOfResources = 701,
  kErrorMisalignedAddress = 716,
  kErrorLaunchFailed = 719,
  kErrorNotSupported = 801,
  kErrorStreamCaptureUnsupported = 900,
  kErrorStreamCaptureInvalidated = 901,
  kErrorStreamCaptureUnjoined = 904,
  kErrorStreamCaptureIsolation = 905,
  kErrorUnknown = 999,
};

/// CUlaunchAttribute: a 4-byte id, 4 bytes of padding, a 64-byte value.
struct LaunchAttribute {
  int id;
  char pad[4];
  union {
    char bytes[64];
    struct {
      unsigned x, y, z;
    } clusterDim;
    int programmaticStreamSerializationAllowed;
    int cooperative;
  } value;
};
static_assert(sizeof(LaunchAttribute) == 72, "CUlaunchAttribute layout");

/// CUlaunchConfig.
struct LaunchConfig {
  unsigned gridDimX, gridDimY, gridDimZ;
  unsigned blockDimX, blockDimY, blockDimZ;
  unsigned sharedMemBytes;
  CUstream stream;
  LaunchAttribute *attrs;
  unsigned numAttrs;
};

/// CUtensorMap: 128 opaque bytes, 64-byte aligned.
struct alignas(64) TensorMap {
  unsigned long long opaque[16];
};

// Enum values of the driver API.
constexpr int kLaunchAttributeCooperative = 2;
constexpr int kLaunchAttributeClusterDimension = 4;
constexpr int kLaunchAttributeProgrammaticStreamSerialization = 6;
constexpr unsigned kStreamNonBlocking = 1;
/// CUstreamCaptureMode: unsafe calls (synchronization, allocation) fail
/// during a capture from any thread, or only from the capturing one.
constexpr int kStreamCaptureModeGlobal = 0, kStreamCaptureModeThreadLocal = 1;
constexpr int kFuncAttributeMaxDynamicSharedSize = 8;
constexpr int kTensorMapUInt8 = 0, kTensorMapFloat16 = 6, kTensorMapFloat32 = 7,
              kTensorMapBFloat16 = 9;
constexpr int kTensorMapSwizzle128B = 3;
constexpr int kTensorMapL2Promotion256B = 3;

} // namespace moe::cuda

#endif // MOE_RUNTIME_CUDAABI_H
