//===- CudaDriver.h - The CUDA driver API, opened with dlopen ---*- C++ -*-===//
//
// Part of moe-compiler's runtime (private). libcuda.so.1 is opened with
// dlopen; the driver API's entry points are declared here by their
// documented C signatures (its types, values and structures are in
// moe/runtime/CudaAbi.h), so building needs no CUDA header.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_RUNTIME_LIB_CUDADRIVER_H
#define MOE_RUNTIME_LIB_CUDADRIVER_H

#include "moe/runtime/CudaAbi.h"
#include "moe/runtime/Layer.h"
#include "moe/runtime/Support.h"

#include <cstddef>
#include <dlfcn.h>
#include <string>

namespace moe::rt::cuda {

// The driver API's types, values and structures.
using namespace ::moe::cuda;

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
  CUresult (*memGetInfo)(size_t *free, size_t *total);
  CUresult (*memcpyHtoD)(CUdeviceptr, const void *, size_t);
  CUresult (*memcpyDtoH)(void *, CUdeviceptr, size_t);
  CUresult (*memcpyHtoDAsync)(CUdeviceptr, const void *, size_t, CUstream);
  CUresult (*memcpyDtoHAsync)(void *, CUdeviceptr, size_t, CUstream);
  /// Page-locked host memory: what async copies read and write while the
  /// host goes on (and what a captured copy reads when its graph runs).
  CUresult (*memAllocHost)(void **, size_t);
  CUresult (*memFreeHost)(void *);
  CUresult (*memsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
  CUresult (*memsetD32Async)(CUdeviceptr, unsigned, size_t, CUstream);
  CUresult (*memcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
  CUresult (*streamCreate)(CUstream *, unsigned);
  CUresult (*streamDestroy)(CUstream);
  CUresult (*streamSynchronize)(CUstream);
  CUresult (*streamQuery)(CUstream);
  /// *status: 0 not capturing, 1 capturing, 2 a capture invalidated.
  CUresult (*streamIsCapturing)(CUstream, int *status);
  CUresult (*eventCreate)(CUevent *, unsigned);
  CUresult (*eventDestroy)(CUevent);
  CUresult (*eventRecord)(CUevent, CUstream);
  CUresult (*streamWaitEvent)(CUstream, CUevent, unsigned);
  CUresult (*eventSynchronize)(CUevent);
  CUresult (*eventElapsedTime)(float *, CUevent, CUevent);
  CUresult (*streamBeginCapture)(CUstream, int mode);
  CUresult (*streamEndCapture)(CUstream, CUgraph *);
  CUresult (*graphInstantiate)(CUgraphExec *, CUgraph, unsigned long long);
  CUresult (*graphLaunch)(CUgraphExec, CUstream);
  CUresult (*graphExecDestroy)(CUgraphExec);
  CUresult (*graphDestroy)(CUgraph);
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
    // The toolkit's link stub, not a driver.
    if (rc == kErrorStubLibrary)
      return "CUDA error 34 (the library is the toolkit's stub, not a GPU "
             "driver)";
    return "CUDA error " + std::to_string(rc);
  }
};

/// What the process asked of the driver since it was opened, counted in
/// front of it (the runtime's own instrument; moe-run --profile and
/// moe-train --trace print it per pass and per step).
DeviceActivity driverActivity();

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
