//===- CApi.cpp - C API of the moe-compiler runtime -----------------------===//
//
// Part of moe-compiler's runtime.
//
//===----------------------------------------------------------------------===//

#include "moe_runtime.h"

#include "moe/runtime/Layer.h"

#include <cstring>

using namespace moe::rt;

struct moe_layer {
  std::unique_ptr<Layer> layer;
  /// The backward pass's gradients (x, then the trained weights' roles)
  /// and their element counts (x's per token), in the manifest's order.
  std::vector<std::string> gradients;
  std::vector<int64_t> gradientElements;

  explicit moe_layer(std::unique_ptr<Layer> l) : layer(std::move(l)) {
    const Manifest &m = layer->getManifest();
    for (const TrainArgumentSpec &a : m.backward.arguments) {
      if (!a.output)
        continue;
      gradients.push_back(a.name.substr(0, a.name.size() - 5));
      int64_t elements = 1;
      for (int64_t d : a.shape)
        elements *= d < 0 ? 1 : d;
      gradientElements.push_back(elements);
    }
  }
};

static thread_local std::string lastError;

static int fail(const std::string &message) {
  lastError = message;
  return -1;
}

const char *moe_last_error(void) { return lastError.c_str(); }

/// The runtime's dtype of a C caller's (any value: an int may be passed).
static bool fromCDType(moe_dtype code, DType &dtype) {
  switch (static_cast<int>(code)) {
  case MOE_F32:
    dtype = DType::F32;
    return true;
  case MOE_BF16:
    dtype = DType::BF16;
    return true;
  case MOE_F16:
    dtype = DType::F16;
    return true;
  default:
    return false;
  }
}

moe_layer *moe_layer_load(const char *bundle_path, const char *device) {
  lastError.clear();
  if (!bundle_path || !device) {
    fail("moe_layer_load: bundle_path and device must not be NULL");
    return nullptr;
  }
  Expected<std::unique_ptr<Layer>> layer = Layer::load(bundle_path, device);
  if (!layer) {
    fail(layer.message());
    return nullptr;
  }
  return new moe_layer(std::move(*layer));
}

moe_layer *moe_layer_load_from_memory(const void *bundle, size_t size,
                                      const char *device) {
  lastError.clear();
  if (!bundle || !device) {
    fail("moe_layer_load_from_memory: bundle and device must not be NULL");
    return nullptr;
  }
  const auto *bytes = static_cast<const uint8_t *>(bundle);
  Expected<Bundle> parsed =
      parseBundle(std::vector<uint8_t>(bytes, bytes + size), "<memory>");
  if (!parsed) {
    fail(parsed.message());
    return nullptr;
  }
  Expected<std::unique_ptr<Layer>> layer =
      Layer::fromBundle(std::move(*parsed), device);
  if (!layer) {
    fail(layer.message());
    return nullptr;
  }
  return new moe_layer(std::move(*layer));
}

void moe_layer_free(moe_layer *layer) { delete layer; }

int moe_layer_load_weights(moe_layer *layer, const char *path,
                           const char *prefix) {
  lastError.clear();
  if (!layer || !path)
    return fail("moe_layer_load_weights: layer and path must not be NULL");
  Expected<Checkpoint> checkpoint = Checkpoint::open(path);
  if (!checkpoint)
    return fail(checkpoint.message());
  Status s = layer->layer->loadWeights(*checkpoint, prefix ? prefix : "");
  return s.ok() ? 0 : fail(s.error);
}

int moe_layer_random_weights(moe_layer *layer, uint64_t seed) {
  lastError.clear();
  if (!layer)
    return fail("moe_layer_random_weights: layer must not be NULL");
  layer->layer->randomWeights(seed);
  return 0;
}

int moe_layer_set_threads(moe_layer *layer, int threads) {
  lastError.clear();
  if (!layer)
    return fail("moe_layer_set_threads: layer must not be NULL");
  if (threads < 1 || threads > 4096)
    return fail("moe_layer_set_threads: expected 1 to 4096 threads, got " +
                std::to_string(threads));
  layer->layer->getBackend().setThreads(threads);
  return 0;
}

int64_t moe_layer_hidden_size(const moe_layer *layer) {
  return layer ? layer->layer->getManifest().layer.hidden : -1;
}
int64_t moe_layer_top_k(const moe_layer *layer) {
  return layer ? layer->layer->getManifest().layer.topK : -1;
}
int64_t moe_layer_max_tokens(const moe_layer *layer) {
  return layer ? layer->layer->getManifest().maxTokens : -1;
}

int moe_layer_forward(moe_layer *layer, const void *x, moe_dtype x_dtype,
                      int64_t tokens, float *y, int32_t *topk_ids,
                      float *topk_weights) {
  lastError.clear();
  if (!layer || (tokens > 0 && (!x || !y || !topk_ids || !topk_weights)))
    return fail("moe_layer_forward: null layer or buffer");
  if (tokens < 0)
    return fail("moe_layer_forward: negative token count");
  DType dtype;
  if (!fromCDType(x_dtype, dtype))
    return fail("moe_layer_forward: unknown x_dtype");
  int64_t hidden = moe_layer_hidden_size(layer);
  int64_t k = moe_layer_top_k(layer);
  if (tokens > moe_layer_max_tokens(layer))
    return fail("moe_layer_forward: " + std::to_string(tokens) +
                " tokens exceed the bundle's max_tokens");
  Tensor input = Tensor::zeros(dtype, {tokens, hidden});
  if (tokens > 0)
    std::memcpy(input.data.data(), x, input.data.size());
  Expected<ForwardResult> result = layer->layer->forward(input);
  if (!result)
    return fail(result.message());
  size_t rows = static_cast<size_t>(tokens);
  std::memcpy(y, result->y.data.data(), rows * hidden * sizeof(float));
  std::memcpy(topk_ids, result->topkIds.data.data(),
              rows * k * sizeof(int32_t));
  std::memcpy(topk_weights, result->topkWeights.data.data(),
              rows * k * sizeof(float));
  return 0;
}

static moe_dtype toCDType(DType dtype) {
  return dtype == DType::BF16  ? MOE_BF16
         : dtype == DType::F16 ? MOE_F16
                               : MOE_F32;
}

int moe_layer_device_dtypes(const moe_layer *layer, moe_dtype *x_dtype,
                            moe_dtype *y_dtype) {
  lastError.clear();
  if (!layer || !x_dtype || !y_dtype)
    return fail("moe_layer_device_dtypes: null layer or result pointer");
  *x_dtype = toCDType(layer->layer->deviceInputDType());
  *y_dtype = toCDType(layer->layer->deviceOutputDType());
  return 0;
}

int moe_layer_forward_device(moe_layer *layer, uint64_t x, int64_t tokens,
                             uint64_t y, uint64_t topk_ids,
                             uint64_t topk_weights, void *stream) {
  lastError.clear();
  if (!layer)
    return fail("moe_layer_forward_device: null layer");
  DeviceForward io{
      x, y, topk_ids, topk_weights, tokens, reinterpret_cast<uint64_t>(stream)};
  Status s = layer->layer->forwardOnDevice(io);
  return s.ok() ? 0 : fail(s.error);
}

int64_t moe_layer_gradient_count(const moe_layer *layer) {
  return layer ? static_cast<int64_t>(layer->gradients.size()) : -1;
}

const char *moe_layer_gradient_name(const moe_layer *layer, int64_t i) {
  if (!layer || i < 0 || i >= moe_layer_gradient_count(layer))
    return nullptr;
  return layer->gradients[static_cast<size_t>(i)].c_str();
}

int64_t moe_layer_gradient_elements(const moe_layer *layer, int64_t i) {
  if (!layer || i < 0 || i >= moe_layer_gradient_count(layer))
    return -1;
  return layer->gradientElements[static_cast<size_t>(i)];
}

/// The backward pass's gradient count, or an error naming `what`.
static int checkGradientCount(const moe_layer *layer, int64_t count,
                              const char *what) {
  int64_t want = moe_layer_gradient_count(layer);
  if (want == 0)
    return fail(std::string(what) +
                ": the bundle has no backward pass (compile it with "
                "moe-compile --backward)");
  if (count != want)
    return fail(std::string(what) + ": the backward pass writes " +
                std::to_string(want) + " gradients, got " +
                std::to_string(count));
  return 0;
}

int moe_layer_backward(moe_layer *layer, const void *x, moe_dtype x_dtype,
                       const float *dy, int64_t tokens, float *const *grads,
                       int64_t count) {
  lastError.clear();
  if (!layer || !grads || (tokens > 0 && (!x || !dy)))
    return fail("moe_layer_backward: null layer or buffer");
  if (tokens < 0)
    return fail("moe_layer_backward: negative token count");
  if (checkGradientCount(layer, count, "moe_layer_backward") != 0)
    return -1;
  for (int64_t i = 0; i < count; ++i)
    if (!grads[i] && (i > 0 || tokens > 0))
      return fail("moe_layer_backward: gradient " + std::to_string(i) + " ('" +
                  layer->gradients[static_cast<size_t>(i)] +
                  "') is a null buffer");
  DType dtype;
  if (!fromCDType(x_dtype, dtype))
    return fail("moe_layer_backward: unknown x_dtype");
  int64_t hidden = moe_layer_hidden_size(layer);
  Tensor input = Tensor::zeros(dtype, {tokens, hidden});
  Tensor grad = Tensor::zeros(DType::F32, {tokens, hidden});
  if (tokens > 0) {
    std::memcpy(input.data.data(), x, input.data.size());
    std::memcpy(grad.data.data(), dy, grad.data.size());
  }
  Expected<std::map<std::string, Tensor>> result =
      layer->layer->backward(input, grad);
  if (!result)
    return fail(result.message());
  for (int64_t i = 0; i < count; ++i) {
    const std::string &name = layer->gradients[static_cast<size_t>(i)];
    auto it = result->find(name);
    if (it == result->end())
      return fail("moe_layer_backward: the backward pass gave no gradient '" +
                  name + "'");
    if (!it->second.data.empty())
      std::memcpy(grads[i], it->second.data.data(), it->second.data.size());
  }
  return 0;
}

int moe_layer_backward_device(moe_layer *layer, uint64_t x, uint64_t dy,
                              int64_t tokens, const uint64_t *grads,
                              int64_t count, void *stream) {
  lastError.clear();
  if (!layer || !grads)
    return fail("moe_layer_backward_device: null layer or gradient list");
  if (checkGradientCount(layer, count, "moe_layer_backward_device") != 0)
    return -1;
  DeviceBackward io{x, dy, std::vector<uint64_t>(grads, grads + count), tokens,
                    reinterpret_cast<uint64_t>(stream)};
  Status s = layer->layer->backwardOnDevice(io);
  return s.ok() ? 0 : fail(s.error);
}
