/*===- moe_runtime.h - C API of the moe-compiler runtime -----------*- C
-*-===*\
|*                                                                            *|
|* Part of moe-compiler. A stable C interface for frameworks: load a bundle,  *|
|* bind weights, run forward and backward passes on host buffers (or, for a   *|
|* cuda layer, on device memory). Every function that can fail returns 0 on
success and   *|
|* -1 on failure; moe_last_error() then says why (per thread, valid until     *|
|* the next call on that thread).                                             *|
|*                                                                            *|
\*===----------------------------------------------------------------------===*/

#ifndef MOE_RUNTIME_H
#define MOE_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct moe_layer moe_layer;

typedef enum moe_dtype { MOE_F32 = 0, MOE_BF16 = 1, MOE_F16 = 2 } moe_dtype;

/** The last error of this thread, or "" if there was none. */
const char *moe_last_error(void);

/** Loads a bundle for `device`: "host" (host bundles) or "cuda" (sm_90a
 *  bundles on GPU 0; buffers stay host memory, copied per call). Returns
 *  NULL on failure. */
moe_layer *moe_layer_load(const char *bundle_path, const char *device);
/** The same from `size` bytes in memory (as moe_compile returns them). */
moe_layer *moe_layer_load_from_memory(const void *bundle, size_t size,
                                      const char *device);
void moe_layer_free(moe_layer *layer);

/** Binds the parameters from a safetensors file, from a sharded
 *  checkpoint's index (a path ending in .json, such as
 *  model.safetensors.index.json: only the shards holding the layer are
 *  read), or from a model's directory (its index, else its
 *  model.safetensors), names prefixed by `prefix` (may be NULL or ""). */
int moe_layer_load_weights(moe_layer *layer, const char *safetensors_path,
                           const char *prefix);
/** Binds seeded random parameters. */
int moe_layer_random_weights(moe_layer *layer, uint64_t seed);

/** Threads of the host code's parallel loops (1 to 4096; the default is
 *  $MOE_NUM_THREADS, else the cores shared among the node's MPI ranks).
 *  Any count gives the same results to the bit; other devices ignore it. */
int moe_layer_set_threads(moe_layer *layer, int threads);

int64_t moe_layer_hidden_size(const moe_layer *layer);
int64_t moe_layer_top_k(const moe_layer *layer);
int64_t moe_layer_max_tokens(const moe_layer *layer);

/** Runs the layer on `x` [tokens, hidden] of `x_dtype`, writing y
 *  [tokens, hidden] f32, topk_ids [tokens, top_k] and topk_weights
 *  [tokens, top_k]. Buffers are the caller's, row-major and contiguous. */
int moe_layer_forward(moe_layer *layer, const void *x, moe_dtype x_dtype,
                      int64_t tokens, float *y, int32_t *topk_ids,
                      float *topk_weights);

/** The dtypes moe_layer_forward_device takes x in and writes y in (the
 *  sm_90a pass's own buffers': bf16 or f16). */
int moe_layer_device_dtypes(const moe_layer *layer, moe_dtype *x_dtype,
                            moe_dtype *y_dtype);

/** Runs a "cuda" layer on device memory, for a framework that holds its
 *  tensors on the GPU: x [tokens, hidden], y [tokens, hidden] (both in
 *  the dtypes of moe_layer_device_dtypes), topk_ids [tokens, top_k]
 *  int32 and topk_weights [tokens, top_k] f32 are device addresses in the
 *  primary context of the layer's GPU, contiguous. The pass runs after the
 *  work enqueued on `stream` (a CUstream; NULL: the legacy default stream)
 *  and work enqueued there afterwards runs after the pass; nothing goes
 *  through host memory and the host does not wait (parameters changed
 *  since the last pass are uploaded first). When the caller is capturing
 *  `stream` into a CUDA graph, the pass's copies and kernels are captured
 *  into it. A sharded layer (--ep) takes this path with the
 *  device-initiated exchange only, every rank with at least one token; a
 *  pass's exchange status is checked by a later call. */
int moe_layer_forward_device(moe_layer *layer, uint64_t x, int64_t tokens,
                             uint64_t y, uint64_t topk_ids,
                             uint64_t topk_weights, void *stream);

/** The gradients the backward pass writes (bundles compiled with
 *  --backward; 0 for others): dL/dx first, then each trained weight's.
 *  moe_layer_gradient_name gives gradient i's name ("x", then the weights'
 *  roles, e.g. "router_weight") and moe_layer_gradient_elements its f32
 *  element count (x's per token: hidden). -1, NULL: no such gradient. */
int64_t moe_layer_gradient_count(const moe_layer *layer);
const char *moe_layer_gradient_name(const moe_layer *layer, int64_t i);
int64_t moe_layer_gradient_elements(const moe_layer *layer, int64_t i);

/** The backward pass for a loss whose gradient with respect to y is dy:
 *  from x [tokens, hidden] of `x_dtype` and dy [tokens, hidden] f32 it
 *  writes the `count` (moe_layer_gradient_count) f32 gradients into
 *  grads[i] (host buffers, x's of tokens * hidden values). The forward
 *  pass runs again first (nothing of an earlier call is kept). */
int moe_layer_backward(moe_layer *layer, const void *x, moe_dtype x_dtype,
                       const float *dy, int64_t tokens, float *const *grads,
                       int64_t count);

/** The backward pass of a "cuda" layer on device memory, as
 *  moe_layer_forward_device runs the forward pass (stream, capture, no
 *  host copy or wait; sharded, the device-initiated exchange only): x
 *  [tokens, hidden] in moe_layer_device_dtypes' x dtype, dy [tokens,
 *  hidden] f32, and the `count` gradients' device addresses (f32). */
int moe_layer_backward_device(moe_layer *layer, uint64_t x, uint64_t dy,
                              int64_t tokens, const uint64_t *grads,
                              int64_t count, void *stream);

#ifdef __cplusplus
}
#endif

#endif /* MOE_RUNTIME_H */
