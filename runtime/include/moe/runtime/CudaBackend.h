//===- CudaBackend.h - The CUDA backend -------------------------*- C++ -*-===//
//
// Part of moe-compiler's runtime.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_RUNTIME_CUDABACKEND_H
#define MOE_RUNTIME_CUDABACKEND_H

#include "moe/runtime/Layer.h"

namespace moe::rt {

/// Opens the CUDA driver (libcuda.so.1 through dlopen; $MOE_CUDA_DRIVER
/// overrides the name), loads the bundle's cubin on device 0, allocates
/// every buffer of its schedule for max_tokens tokens and encodes the
/// kernels' TMA descriptors. "no CUDA driver found: ..." where there is
/// none.
Expected<std::unique_ptr<Backend>> createCudaBackend(const Bundle &bundle);

/// The fused gate/up weight of the grouped GEMM with the SwiGLU epilogue:
/// `gate` and `up` are [E, F, H] (or [F, H], one group); the result is
/// [E, 2F, H] with rows 16j..16j+7 = gate rows 8j..8j+7 and rows
/// 16j+8..16j+15 = up rows 8j..8j+7 of each expert (F a multiple of 8).
/// With `vectors`, they are the experts' [E, F] biases of those rows: the
/// result is [E, 2F], interleaved alike.
AlignedBytes packGateUp(const Tensor &gate, const Tensor &up,
                        bool vectors = false);

/// The gate's and up's FP8 block scales of one fused weight: per leading
/// index (expert), the gate's rows of blocks, then the up's ([E, Fb, Kb]
/// twice to [E, 2 Fb, Kb]; [Fb, Kb] twice to [2 Fb, Kb]).
AlignedBytes concatGateUp(const Tensor &gate, const Tensor &up);

} // namespace moe::rt

#endif // MOE_RUNTIME_CUDABACKEND_H
