//===- CudaDriver.cpp - The CUDA driver API, opened with dlopen -----------===//
//
// Part of moe-compiler's runtime.
//
//===----------------------------------------------------------------------===//

#include "CudaDriver.h"

#include <cstdlib>
#include <dlfcn.h>

namespace moe::rt::cuda {

Expected<Driver> openDriver() {
  using Result = Expected<Driver>;
  const char *library = std::getenv("MOE_CUDA_DRIVER");
  if (!library || !*library)
    library = "libcuda.so.1";
  void *handle = dlopen(library, RTLD_NOW | RTLD_LOCAL);
  if (!handle)
    return Result::error(std::string("no CUDA driver found: ") + dlerror());
  Driver d{};
  SymbolBinder bind{handle};
  bind(d.init, "cuInit");
  bind(d.deviceGet, "cuDeviceGet");
  bind(d.primaryCtxRetain, "cuDevicePrimaryCtxRetain");
  bind(d.ctxSetCurrent, "cuCtxSetCurrent");
  bind(d.moduleLoadData, "cuModuleLoadData");
  bind(d.moduleUnload, "cuModuleUnload");
  bind(d.moduleGetFunction, "cuModuleGetFunction");
  bind(d.funcSetAttribute, "cuFuncSetAttribute");
  bind(d.memAlloc, "cuMemAlloc_v2");
  bind(d.memFree, "cuMemFree_v2");
  bind(d.memGetInfo, "cuMemGetInfo_v2");
  bind(d.memcpyHtoD, "cuMemcpyHtoD_v2");
  bind(d.memcpyDtoH, "cuMemcpyDtoH_v2");
  bind(d.memsetD8Async, "cuMemsetD8Async");
  bind(d.streamCreate, "cuStreamCreate");
  bind(d.streamDestroy, "cuStreamDestroy_v2");
  bind(d.streamSynchronize, "cuStreamSynchronize");
  bind(d.streamQuery, "cuStreamQuery");
  bind(d.eventCreate, "cuEventCreate");
  bind(d.eventDestroy, "cuEventDestroy_v2");
  bind(d.eventRecord, "cuEventRecord");
  bind(d.streamWaitEvent, "cuStreamWaitEvent");
  bind(d.eventSynchronize, "cuEventSynchronize");
  bind(d.eventElapsedTime, "cuEventElapsedTime");
  bind(d.launchKernelEx, "cuLaunchKernelEx");
  bind(d.tensorMapEncodeTiled, "cuTensorMapEncodeTiled");
  bind(d.getErrorString, "cuGetErrorString");
  if (!bind.complete) {
    dlclose(handle);
    return Result::error(std::string("'") + library +
                         "' is not a CUDA driver (missing driver API "
                         "entry points)");
  }
  // The handle stays open: the driver is process-wide.
  return d;
}

Status makeContextCurrent(const Driver &driver, int ordinal) {
  auto check = [&](CUresult rc, const std::string &what) {
    return rc == 0 ? Status::success()
                   : Status::failure(what + ": " + driver.describe(rc));
  };
  CUdevice device = 0;
  CUcontext context = nullptr;
  if (Status s = check(driver.init(0), "the CUDA driver failed to initialize");
      !s.ok())
    return s;
  std::string name = "device " + std::to_string(ordinal);
  if (Status s = check(driver.deviceGet(&device, ordinal), "no CUDA " + name);
      !s.ok())
    return s;
  if (Status s = check(driver.primaryCtxRetain(&context, device),
                       "cannot create a context on " + name);
      !s.ok())
    return s;
  return check(driver.ctxSetCurrent(context), "cuCtxSetCurrent");
}

} // namespace moe::rt::cuda
