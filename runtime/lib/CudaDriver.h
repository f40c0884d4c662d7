//===- CudaDriver.h - The CUDA driver API, opened with dlopen ---*- C++ -*-===//
//
// Part of moe-compiler's runtime (private). libcuda.so.1 is opened with
// dlopen; the driver API's entry points and the few structures passed to
// them are declared here by their documented C signatures and layouts, so
// building needs no CUDA header.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_RUNTIME_LIB_CUDADRIVER_H
#define MOE_RUNTIME_LIB_CUDADRIVER_H

#include "moe/runtime/Support.h"

#include <cstddef>
#include <dlfcn.h>
#include <string>

namespace moe::rt::cuda {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = void *;
using CUmodule = void *;
using CUfunction = void *;
using CUstream = void *;
using CUevent = void *;

/// CUlaunchAttribute: a 4-byte id, 4 bytes of padding, a 64-byte value.
struct LaunchAttribute {
  int id;
  char pad[4];
  union {
    char bytes[64];
    struct {
      unsigned x, y, z;
    } clusterDim;
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
constexpr int kLaunchAttributeClusterDimension = 4;
constexpr CUresult kErrorNotReady = 600;
constexpr CUresult kErrorNoBinaryForGpu = 209;
constexpr unsigned kStreamNonBlocking = 1;
constexpr int kFuncAttributeMaxDynamicSharedSize = 8;
constexpr int kTensorMapFloat16 = 6, kTensorMapBFloat16 = 9;
constexpr int kTensorMapSwizzle128B = 3;
constexpr int kTensorMapL2Promotion256B = 3;

struct Driver {
  CUresult (*init)(unsigned);
  CUresult (*deviceGet)(CUdevice *, int);
  CUresult (*primaryCtxRetain)(CUcontext *, CUdevice);
  CUresult (*ctxSetCurrent)(CUcontext);
  CUresult (*moduleLoadData)(CUmodule *, const void *);
  CUresult (*moduleUnload)(CUmodule);
  CUresult (*moduleGetFunction)(CUfunction *, CUmodule, const char *);
  CUresult (*funcSetAttribute)(CUfunction, int, int);
  CUresult (*memAlloc)(CUdeviceptr *, size_t);
  CUresult (*memFree)(CUdeviceptr);
  CUresult (*memcpyHtoD)(CUdeviceptr, const void *, size_t);
  CUresult (*memcpyDtoH)(void *, CUdeviceptr, size_t);
  CUresult (*memsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
  CUresult (*streamCreate)(CUstream *, unsigned);
  CUresult (*streamDestroy)(CUstream);
  CUresult (*streamSynchronize)(CUstream);
  CUresult (*streamQuery)(CUstream);
  CUresult (*eventCreate)(CUevent *, unsigned);
  CUresult (*eventDestroy)(CUevent);
  CUresult (*eventRecord)(CUevent, CUstream);
  CUresult (*eventSynchronize)(CUevent);
  CUresult (*eventElapsedTime)(float *, CUevent, CUevent);
  // Structures pass as void pointers: the callee's type is the driver's
  // own (UBSan's function check compares the two exactly, and the
  // emulator's driver defines these with void pointers too).
  CUresult (*launchKernelEx)(const void *config, CUfunction, void **,
                             void **);
  CUresult (*tensorMapEncodeTiled)(void *map, int, unsigned, void *,
                                   const unsigned long long *,
                                   const unsigned long long *, const unsigned *,
                                   const unsigned *, int, int, int, int);
  CUresult (*getErrorString)(CUresult, const char **);

  std::string describe(CUresult rc) const {
    const char *text = nullptr;
    if (getErrorString && getErrorString(rc, &text) == 0 && text)
      return text;
    // CUDA_ERROR_STUB_LIBRARY: the toolkit's link stub, not a driver.
    if (rc == 34)
      return "CUDA error 34 (the library is the toolkit's stub, not a GPU "
             "driver)";
    return "CUDA error " + std::to_string(rc);
  }
};

/// Binds entry points of a library opened with dlopen by name;
/// `complete` stays true while every one was found.
struct SymbolBinder {
  void *handle;
  bool complete = true;
  template <typename Fn> void operator()(Fn &fn, const char *name) {
    fn = reinterpret_cast<Fn>(dlsym(handle, name));
    complete = complete && fn;
  }
};

/// Opens the driver (libcuda.so.1; $MOE_CUDA_DRIVER overrides the name) and
/// binds every entry point above. The library stays open: the driver is
/// process-wide.
Expected<Driver> openDriver();

/// Initializes the driver and makes device `ordinal`'s primary context
/// current on the calling thread (the context the CUDA runtime, and so
/// NCCL, uses too).
Status makeContextCurrent(const Driver &driver, int ordinal);

} // namespace moe::rt::cuda

#endif // MOE_RUNTIME_LIB_CUDADRIVER_H
