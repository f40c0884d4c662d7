//===- CudaDriver.cpp - The CUDA driver API, opened with dlopen -----------===//
//
// Part of moe-compiler's runtime.
//
//===----------------------------------------------------------------------===//

#include "CudaDriver.h"

#include <atomic>
#include <cstdlib>
#include <dlfcn.h>
#include <map>
#include <mutex>

namespace moe::rt::cuda {

namespace {

/// The driver's own entry points, and what was asked of them. The counted
/// entry points below stand in front of the driver in every table
/// openDriver returns.
Driver real{};
struct Counters {
  std::atomic<uint64_t> launches{0}, graphLaunches{0}, hostWaits{0},
      allocations{0}, bytesToDevice{0}, bytesToHost{0};
} counters;

CUresult countedMemAlloc(CUdeviceptr *p, size_t bytes) {
  ++counters.allocations;
  return real.memAlloc(p, bytes);
}
CUresult countedMemAllocHost(void **p, size_t bytes) {
  ++counters.allocations;
  return real.memAllocHost(p, bytes);
}
CUresult countedMemcpyHtoD(CUdeviceptr dst, const void *src, size_t bytes) {
  ++counters.hostWaits;
  counters.bytesToDevice += bytes;
  return real.memcpyHtoD(dst, src, bytes);
}
CUresult countedMemcpyDtoH(void *dst, CUdeviceptr src, size_t bytes) {
  ++counters.hostWaits;
  counters.bytesToHost += bytes;
  return real.memcpyDtoH(dst, src, bytes);
}
/// Bytes a graph copies each way when it runs: the async copies captured
/// into it (tallied on the capturing thread), carried to its executable
/// graphs and counted at each launch.
struct GraphBytes {
  uint64_t toDevice = 0, toHost = 0;
};
thread_local bool capturing = false;
thread_local GraphBytes captured;
std::mutex graphMutex;
std::map<CUgraph, GraphBytes> graphBytes;
std::map<CUgraphExec, GraphBytes> execBytes;

/// An async copy's bytes: the graph's being captured, or copied now.
void countAsyncCopy(size_t bytes, bool toDevice) {
  if (capturing)
    (toDevice ? captured.toDevice : captured.toHost) += bytes;
  else
    (toDevice ? counters.bytesToDevice : counters.bytesToHost) += bytes;
}
CUresult countedMemcpyHtoDAsync(CUdeviceptr dst, const void *src, size_t bytes,
                                CUstream stream) {
  countAsyncCopy(bytes, /*toDevice=*/true);
  return real.memcpyHtoDAsync(dst, src, bytes, stream);
}
CUresult countedMemcpyDtoHAsync(void *dst, CUdeviceptr src, size_t bytes,
                                CUstream stream) {
  countAsyncCopy(bytes, /*toDevice=*/false);
  return real.memcpyDtoHAsync(dst, src, bytes, stream);
}
CUresult countedStreamBeginCapture(CUstream stream, int mode) {
  CUresult rc = real.streamBeginCapture(stream, mode);
  if (rc == 0) {
    capturing = true;
    captured = {};
  }
  return rc;
}
CUresult countedStreamEndCapture(CUstream stream, CUgraph *graph) {
  CUresult rc = real.streamEndCapture(stream, graph);
  capturing = false;
  if (rc == 0 && graph && *graph) {
    std::lock_guard<std::mutex> lock(graphMutex);
    graphBytes[*graph] = captured;
  }
  return rc;
}
CUresult countedGraphInstantiate(CUgraphExec *exec, CUgraph graph,
                                 unsigned long long flags) {
  CUresult rc = real.graphInstantiate(exec, graph, flags);
  if (rc == 0 && exec) {
    std::lock_guard<std::mutex> lock(graphMutex);
    execBytes[*exec] = graphBytes[graph];
  }
  return rc;
}
CUresult countedGraphDestroy(CUgraph graph) {
  {
    std::lock_guard<std::mutex> lock(graphMutex);
    graphBytes.erase(graph);
  }
  return real.graphDestroy(graph);
}
CUresult countedGraphExecDestroy(CUgraphExec exec) {
  {
    std::lock_guard<std::mutex> lock(graphMutex);
    execBytes.erase(exec);
  }
  return real.graphExecDestroy(exec);
}
CUresult countedStreamSynchronize(CUstream stream) {
  ++counters.hostWaits;
  return real.streamSynchronize(stream);
}
CUresult countedEventSynchronize(CUevent event) {
  ++counters.hostWaits;
  return real.eventSynchronize(event);
}
CUresult countedLaunchKernelEx(const void *config, CUfunction f, void **params,
                               void **extra) {
  ++counters.launches;
  return real.launchKernelEx(config, f, params, extra);
}
CUresult countedGraphLaunch(CUgraphExec exec, CUstream stream) {
  ++counters.graphLaunches;
  {
    std::lock_guard<std::mutex> lock(graphMutex);
    auto it = execBytes.find(exec);
    if (it != execBytes.end()) {
      counters.bytesToDevice += it->second.toDevice;
      counters.bytesToHost += it->second.toHost;
    }
  }
  return real.graphLaunch(exec, stream);
}

} // namespace

DeviceActivity driverActivity() {
  DeviceActivity a;
  a.launches = counters.launches;
  a.graphLaunches = counters.graphLaunches;
  a.hostWaits = counters.hostWaits;
  a.allocations = counters.allocations;
  a.bytesToDevice = counters.bytesToDevice;
  a.bytesToHost = counters.bytesToHost;
  return a;
}

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
  bind(d.memcpyHtoDAsync, "cuMemcpyHtoDAsync_v2");
  bind(d.memcpyDtoHAsync, "cuMemcpyDtoHAsync_v2");
  bind(d.memAllocHost, "cuMemAllocHost_v2");
  bind(d.memFreeHost, "cuMemFreeHost");
  bind(d.memsetD8Async, "cuMemsetD8Async");
  bind(d.memsetD32Async, "cuMemsetD32Async");
  bind(d.memcpyDtoDAsync, "cuMemcpyDtoDAsync_v2");
  bind(d.streamCreate, "cuStreamCreate");
  bind(d.streamDestroy, "cuStreamDestroy_v2");
  bind(d.streamSynchronize, "cuStreamSynchronize");
  bind(d.streamQuery, "cuStreamQuery");
  bind(d.streamIsCapturing, "cuStreamIsCapturing");
  bind(d.eventCreate, "cuEventCreate");
  bind(d.eventDestroy, "cuEventDestroy_v2");
  bind(d.eventRecord, "cuEventRecord");
  bind(d.streamWaitEvent, "cuStreamWaitEvent");
  bind(d.eventSynchronize, "cuEventSynchronize");
  bind(d.eventElapsedTime, "cuEventElapsedTime");
  bind(d.streamBeginCapture, "cuStreamBeginCapture_v2");
  bind(d.streamEndCapture, "cuStreamEndCapture");
  bind(d.graphInstantiate, "cuGraphInstantiateWithFlags");
  bind(d.graphLaunch, "cuGraphLaunch");
  bind(d.graphExecDestroy, "cuGraphExecDestroy");
  bind(d.graphDestroy, "cuGraphDestroy");
  bind(d.launchKernelEx, "cuLaunchKernelEx");
  bind(d.tensorMapEncodeTiled, "cuTensorMapEncodeTiled");
  bind(d.getErrorString, "cuGetErrorString");
  if (!bind.complete) {
    dlclose(handle);
    return Result::error(std::string("'") + library +
                         "' is not a CUDA driver (missing driver API "
                         "entry points)");
  }
  // The handle stays open: the driver is process-wide, and so are the
  // counts.
  real = d;
  d.memAlloc = countedMemAlloc;
  d.memAllocHost = countedMemAllocHost;
  d.memcpyHtoD = countedMemcpyHtoD;
  d.memcpyDtoH = countedMemcpyDtoH;
  d.memcpyHtoDAsync = countedMemcpyHtoDAsync;
  d.memcpyDtoHAsync = countedMemcpyDtoHAsync;
  d.streamSynchronize = countedStreamSynchronize;
  d.eventSynchronize = countedEventSynchronize;
  d.launchKernelEx = countedLaunchKernelEx;
  d.graphLaunch = countedGraphLaunch;
  d.streamBeginCapture = countedStreamBeginCapture;
  d.streamEndCapture = countedStreamEndCapture;
  d.graphInstantiate = countedGraphInstantiate;
  d.graphDestroy = countedGraphDestroy;
  d.graphExecDestroy = countedGraphExecDestroy;
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
