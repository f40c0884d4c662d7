//===- CudaDriver.cpp - The CUDA driver, loaded at run time ---------------===//
//
// Part of moe-compiler's runtime. Only the driver API's C entry points are
// used, declared here by their documented signatures (CUresult is an int,
// CUdevice an int), so no CUDA header is needed to build.
//
//===----------------------------------------------------------------------===//

#include "moe/runtime/CudaDriver.h"

#include <cstdlib>
#include <dlfcn.h>

namespace moe::rt {

namespace {
using CuInit = int (*)(unsigned);
using CuDeviceGetCount = int (*)(int *);
using CuDeviceGet = int (*)(int *, int);
using CuDeviceGetName = int (*)(char *, int, int);
using CuDeviceGetAttribute = int (*)(int *, int, int);
using CuGetErrorString = int (*)(int, const char **);

// CUdevice_attribute values from the driver API.
constexpr int kAttrMultiprocessorCount = 16;
constexpr int kAttrComputeCapabilityMajor = 75;
constexpr int kAttrComputeCapabilityMinor = 76;
} // namespace

Expected<CudaDeviceInfo> probeCudaDevice() {
  using Result = Expected<CudaDeviceInfo>;
  const char *library = std::getenv("MOE_CUDA_DRIVER");
  if (!library || !*library)
    library = "libcuda.so.1";
  void *handle = dlopen(library, RTLD_NOW | RTLD_LOCAL);
  if (!handle)
    return Result::error(std::string("no CUDA driver found: ") + dlerror());
  auto symbol = [&](const char *name) { return dlsym(handle, name); };
  auto init = reinterpret_cast<CuInit>(symbol("cuInit"));
  auto count = reinterpret_cast<CuDeviceGetCount>(symbol("cuDeviceGetCount"));
  auto get = reinterpret_cast<CuDeviceGet>(symbol("cuDeviceGet"));
  auto getName = reinterpret_cast<CuDeviceGetName>(symbol("cuDeviceGetName"));
  auto attribute =
      reinterpret_cast<CuDeviceGetAttribute>(symbol("cuDeviceGetAttribute"));
  auto errorString =
      reinterpret_cast<CuGetErrorString>(symbol("cuGetErrorString"));
  if (!init || !count || !get || !getName || !attribute) {
    dlclose(handle);
    return Result::error(std::string("'") + library +
                         "' is not a CUDA driver (missing driver API "
                         "entry points)");
  }
  auto describe = [&](int code) {
    const char *text = nullptr;
    if (errorString && errorString(code, &text) == 0 && text)
      return std::string(text);
    return "error " + std::to_string(code);
  };
  int devices = 0, device = 0;
  if (int rc = init(0); rc != 0) {
    std::string why = describe(rc);
    dlclose(handle);
    return Result::error("the CUDA driver failed to initialize: " + why);
  }
  if (int rc = count(&devices); rc != 0 || devices == 0) {
    std::string why = rc ? describe(rc) : "no device";
    dlclose(handle);
    return Result::error("no CUDA device: " + why);
  }
  CudaDeviceInfo info;
  char name[256] = {0};
  if (get(&device, 0) != 0 || getName(name, sizeof(name) - 1, device) != 0 ||
      attribute(&info.computeMajor, kAttrComputeCapabilityMajor, device) != 0 ||
      attribute(&info.computeMinor, kAttrComputeCapabilityMinor, device) != 0 ||
      attribute(&info.multiprocessors, kAttrMultiprocessorCount, device) != 0) {
    dlclose(handle);
    return Result::error("cannot query CUDA device 0");
  }
  info.name = name;
  // The handle stays open: the driver is process-wide.
  return info;
}

} // namespace moe::rt
