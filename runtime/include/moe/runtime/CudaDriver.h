//===- CudaDriver.h - The CUDA driver, loaded at run time -------*- C++ -*-===//
//
// Part of moe-compiler's runtime. libcuda.so.1 is opened with dlopen, so the
// runtime builds and runs on machines without a GPU and says so clearly.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_RUNTIME_CUDADRIVER_H
#define MOE_RUNTIME_CUDADRIVER_H

#include "moe/runtime/Support.h"

#include <string>

namespace moe::rt {

/// What the driver says about device 0.
struct CudaDeviceInfo {
  std::string name;
  int computeMajor = 0, computeMinor = 0;
  int multiprocessors = 0;
};

/// Opens libcuda.so.1 ($MOE_CUDA_DRIVER overrides the name), initializes
/// it and describes device 0; "no CUDA driver found: ..." when there is
/// none.
Expected<CudaDeviceInfo> probeCudaDevice();

} // namespace moe::rt

#endif // MOE_RUNTIME_CUDADRIVER_H
