//===- CoreModule.cpp - moe_compiler._core: the Python extension ----------===//
//
// Part of moe-compiler. nanobind bindings over the compiler (compile()) and
// the runtime (Layer): the C++ APIs themselves, so that a compile's
// diagnostics and a runtime error reach Python as exceptions with the
// message moe-compile or moe-run would print. Arrays cross as DLPack
// tensors (numpy, torch, JAX); the Python package (moe_compiler/) adds the
// friendly API and the torch integration on top.
//
//===----------------------------------------------------------------------===//

#include "moe/Compiler/Compiler.h"
#include "moe/runtime/Comm.h"
#include "moe/runtime/Layer.h"
#include "moe/runtime/Safetensors.h"

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>

namespace nb = nanobind;
using namespace moe::rt;

namespace {

/// Raised by compile() with the compiler's message and diagnostics.
struct CompileError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// A runtime failure (a missing tensor, a wrong shape in a checkpoint, a
/// failed entry point): RuntimeError in Python.
[[noreturn]] void fail(const std::string &message) {
  throw std::runtime_error(message);
}

/// A bad argument from the caller: ValueError in Python.
[[noreturn]] void badArgument(const std::string &message) {
  throw nb::value_error(message.c_str());
}

using AnyArray = nb::ndarray<nb::ro>;
using NumpyArray = nb::ndarray<nb::numpy>;

std::string dtypeName(nb::dlpack::dtype d) {
  auto code = static_cast<nb::dlpack::dtype_code>(d.code);
  const char *kind = code == nb::dlpack::dtype_code::Float    ? "float"
                     : code == nb::dlpack::dtype_code::Bfloat ? "bfloat"
                     : code == nb::dlpack::dtype_code::Int    ? "int"
                     : code == nb::dlpack::dtype_code::UInt   ? "uint"
                     : code == nb::dlpack::dtype_code::Bool   ? "bool"
                                                              : "other";
  return std::string(kind) + std::to_string(d.bits);
}

std::optional<DType> toDType(nb::dlpack::dtype d) {
  if (d.lanes != 1)
    return std::nullopt;
  if (d == nb::dtype<float>())
    return DType::F32;
  if (d.code == static_cast<uint8_t>(nb::dlpack::dtype_code::Bfloat) &&
      d.bits == 16)
    return DType::BF16;
  if (d.code == static_cast<uint8_t>(nb::dlpack::dtype_code::Float) &&
      d.bits == 16)
    return DType::F16;
  if (d == nb::dtype<int32_t>())
    return DType::I32;
  if (d == nb::dtype<int64_t>())
    return DType::I64;
  if (d == nb::dtype<uint8_t>())
    return DType::U8;
  return std::nullopt;
}

std::string formatArrayShape(const AnyArray &a) {
  std::vector<int64_t> shape;
  for (size_t i = 0; i < a.ndim(); ++i)
    shape.push_back(static_cast<int64_t>(a.shape(i)));
  return formatShape(shape);
}

/// Copies a host array into a Tensor, checking what `what` must be: on the
/// CPU, C-contiguous, of rank `rank` (-1: any) and a float dtype when
/// `floatOnly`. Messages name the argument and the expected form.
Tensor toTensor(const AnyArray &a, const std::string &what, int rank,
                bool floatOnly, const std::string &form) {
  if (a.device_type() != nb::device::cpu::value)
    badArgument(what + " is on another device; the layer takes " + form);
  std::optional<DType> dtype = toDType(a.dtype());
  if (!dtype || (floatOnly && !isFloatType(*dtype)))
    badArgument(what + " has dtype " + dtypeName(a.dtype()) + ", expected " +
                (floatOnly ? "float32, bfloat16 or float16"
                           : "a float or integer dtype") +
                " (" + form + ")");
  if (rank >= 0 && a.ndim() != static_cast<size_t>(rank))
    badArgument(what + " has shape " + formatArrayShape(a) + ", expected " +
                form);
  // C-contiguous: each stride (in elements) the product of the sizes after
  // it, ignoring dimensions of size 1 (and every stride of an empty array,
  // which numpy sets freely).
  int64_t expected = 1;
  bool empty = a.size() == 0;
  for (size_t i = a.ndim(); i-- > 0;) {
    if (!empty && a.shape(i) != 1 && a.stride(i) != expected)
      badArgument(what + " is not contiguous (strides in elements must be "
                         "row-major; call .contiguous() or "
                         "numpy.ascontiguousarray first)");
    expected *= static_cast<int64_t>(a.shape(i));
  }
  Tensor t;
  t.dtype = *dtype;
  for (size_t i = 0; i < a.ndim(); ++i)
    t.shape.push_back(static_cast<int64_t>(a.shape(i)));
  t.data.resize(a.nbytes());
  if (a.nbytes())
    std::memcpy(t.data.data(), a.data(), a.nbytes());
  return t;
}

/// Gradient buffers Python has let go of, for the next backward pass to
/// write into: fresh ones cost page faults and zeroing, half of a pass at
/// 64 tokens. At most one per gradient name.
struct GradientPool {
  std::mutex mutex;
  std::map<std::string, Tensor> spare;
};

/// Hands a Tensor's bytes to numpy without copying them; f32, i32 and i64
/// only (other dtypes are converted to f32 first). With a `pool`, the
/// buffer goes back to it under `name` once numpy and torch are done with
/// the array, instead of being freed.
NumpyArray toNumpy(Tensor tensor, std::shared_ptr<GradientPool> pool = {},
                   const std::string &name = "") {
  // e4m3 codes (an FP8 layer's weights) are handed out as uint8.
  if (tensor.dtype == DType::F8E4M3)
    tensor.dtype = DType::U8;
  if (tensor.dtype != DType::F32 && tensor.dtype != DType::I32 &&
      tensor.dtype != DType::I64 && tensor.dtype != DType::U8) {
    Expected<Tensor> c = convertTensor(tensor, DType::F32);
    if (!c)
      fail(c.message());
    tensor = std::move(*c);
  }
  struct Owned {
    Tensor tensor;
    std::shared_ptr<GradientPool> pool;
    std::string name;
  };
  auto *owned = new Owned{std::move(tensor), std::move(pool), name};
  nb::capsule owner(owned, [](void *p) noexcept {
    auto *o = static_cast<Owned *>(p);
    if (o->pool) {
      try {
        std::lock_guard<std::mutex> lock(o->pool->mutex);
        o->pool->spare.try_emplace(o->name, std::move(o->tensor));
      } catch (...) {
        // Not kept: the buffer is freed with its holder.
      }
    }
    delete o;
  });
  const Tensor &t = owned->tensor;
  std::vector<size_t> shape(t.shape.begin(), t.shape.end());
  nb::dlpack::dtype d = t.dtype == DType::F32   ? nb::dtype<float>()
                        : t.dtype == DType::I32 ? nb::dtype<int32_t>()
                        : t.dtype == DType::U8  ? nb::dtype<uint8_t>()
                                                : nb::dtype<int64_t>();
  return NumpyArray(owned->tensor.data.data(), shape.size(), shape.data(),
                    owner, nullptr, d);
}

template <typename T> T check(Expected<T> value) {
  if (!value)
    fail(value.message());
  return std::move(*value);
}

void check(const Status &status) {
  if (!status.ok())
    fail(status.error);
}

/// The ranks of an expert-parallel layer as a Python object gives them
/// (moe_compiler.torch makes one over a torch.distributed process group):
/// `rank` and `size` attributes, all_to_all_v(send, send_splits, recv,
/// recv_splits) on uint8 arrays (byte counts per rank, packed in rank
/// order) and all_reduce_sum(data) on a float32 array in place. The
/// runtime calls it from its communication thread: each call takes the
/// GIL (the layer's entry points run without it). A collective that
/// raises ends the process, as the MPI communicator ends the job: the
/// compiled code that waits on it cannot unwind.
class PyCommunicator final : public Communicator {
public:
  explicit PyCommunicator(nb::object impl)
      : impl(std::move(impl)),
        rankValue(nb::cast<int>(this->impl.attr("rank"))),
        sizeValue(nb::cast<int>(this->impl.attr("size"))) {
    if (sizeValue < 1 || rankValue < 0 || rankValue >= sizeValue)
      badArgument("the communicator's rank " + std::to_string(rankValue) +
                  " and size " + std::to_string(sizeValue) +
                  " are not a rank of a group");
  }
  ~PyCommunicator() override {
    nb::gil_scoped_acquire gil;
    impl.reset();
  }

  int rank() const override { return rankValue; }
  int size() const override { return sizeValue; }
  std::string name() const override { return "python"; }

  void allToAllV(const void *send, const std::vector<size_t> &bytes,
                 const std::vector<size_t> &sendOffsets, void *recv,
                 const std::vector<size_t> &recvBytes,
                 const std::vector<size_t> &recvOffsets) override {
    double start = steadySeconds();
    // Python's collective takes each side packed in rank order: segments
    // that lie so already (the runtime's usual case) go as they are, others
    // through a packed copy.
    auto *in = static_cast<const uint8_t *>(send);
    auto *out = static_cast<uint8_t *>(recv);
    std::vector<uint8_t> packedSend, packedRecv;
    bool sendInPlace = inRankOrder(bytes, sendOffsets);
    bool recvInPlace = inRankOrder(recvBytes, recvOffsets);
    if (!sendInPlace) {
      packedSend.resize(total(bytes));
      for (size_t r = 0, at = 0; r < bytes.size(); at += bytes[r++])
        if (bytes[r])
          std::memcpy(packedSend.data() + at, in + sendOffsets[r], bytes[r]);
    }
    if (!recvInPlace)
      packedRecv.resize(total(recvBytes));
    exchange(sendInPlace ? in + sendOffsets[0] : packedSend.data(),
             total(bytes), bytes,
             recvInPlace ? out + recvOffsets[0] : packedRecv.data(),
             total(recvBytes), recvBytes);
    if (!recvInPlace)
      for (size_t r = 0, at = 0; r < recvBytes.size(); at += recvBytes[r++])
        if (recvBytes[r])
          std::memcpy(out + recvOffsets[r], packedRecv.data() + at,
                      recvBytes[r]);
    record("all_to_all_v", start);
  }

  void allToAll(const void *send, void *recv, size_t bytesPerRank) override {
    double start = steadySeconds();
    auto n = static_cast<size_t>(sizeValue);
    std::vector<size_t> bytes(n, bytesPerRank);
    exchange(static_cast<const uint8_t *>(send), n * bytesPerRank, bytes,
             static_cast<uint8_t *>(recv), n * bytesPerRank, bytes);
    record("all_to_all", start);
  }

  void allReduceSum(float *data, size_t count) override {
    double start = steadySeconds();
    call("all_reduce_sum",
         [&] { impl.attr("all_reduce_sum")(view<float>(data, count)); });
    record("all_reduce", start);
  }

  [[noreturn]] void abort(const std::string &message, int status) override {
    std::fprintf(stderr, "moe_compiler: rank %d: %s\n", rankValue,
                 message.c_str());
    std::fflush(stderr);
    std::_Exit(status);
  }

private:
  /// A numpy array over `count` elements at `data`, which the callee
  /// reads or writes in place during the call (an owner that frees
  /// nothing: without one, nanobind would hand Python a copy).
  template <typename T> static nb::object view(T *data, size_t count) {
    size_t shape[1] = {count};
    nb::capsule owner(data, [](void *) noexcept {});
    return nb::cast(nb::ndarray<nb::numpy, T>(data, 1, shape, owner));
  }

  static size_t total(const std::vector<size_t> &bytes) {
    size_t sum = 0;
    for (size_t b : bytes)
      sum += b;
    return sum;
  }

  /// Whether the segments (`bytes[r]` at `offsets[r]`) follow each other
  /// in rank order.
  static bool inRankOrder(const std::vector<size_t> &bytes,
                          const std::vector<size_t> &offsets) {
    for (size_t r = 1; r < bytes.size(); ++r)
      if (offsets[r] != offsets[r - 1] + bytes[r - 1])
        return false;
    return true;
  }

  /// Python's all_to_all_v on packed buffers (the callee only reads
  /// `send`).
  void exchange(const uint8_t *send, size_t sendTotal,
                const std::vector<size_t> &sendBytes, uint8_t *recv,
                size_t recvTotal, const std::vector<size_t> &recvBytes) {
    call("all_to_all_v", [&] {
      nb::list sendSplits, recvSplits;
      for (size_t b : sendBytes)
        sendSplits.append(b);
      for (size_t b : recvBytes)
        recvSplits.append(b);
      impl.attr("all_to_all_v")(
          view<uint8_t>(const_cast<uint8_t *>(send), sendTotal), sendSplits,
          view<uint8_t>(recv, recvTotal), recvSplits);
    });
  }

  /// Runs the Python call `f` with the GIL; a Python error ends the
  /// process with its message.
  template <typename F> void call(const char *what, F &&f) {
    std::string error;
    {
      nb::gil_scoped_acquire gil;
      try {
        f();
      } catch (nb::python_error &e) {
        error = e.what();
      } catch (std::exception &e) {
        error = e.what();
      }
    }
    if (!error.empty())
      abort(std::string(what) + " failed: " + error, 1);
  }

  nb::object impl;
  int rankValue, sizeValue;
};

/// A loaded layer: the runtime's Layer with the manifest facts Python
/// needs.
struct PyLayer {
  /// The expert-parallel ranks, or null; outlives the layer, whose
  /// communication thread calls it.
  std::unique_ptr<PyCommunicator> communicator;
  std::unique_ptr<Layer> layer;
  std::shared_ptr<GradientPool> gradientPool = std::make_shared<GradientPool>();

  /// Python threads may share a layer; its runtime state is not
  /// reentrant.
  std::mutex mutex;

  const Manifest &manifest() const { return layer->getManifest(); }

  /// Runs `f` without the GIL and with the layer to itself.
  template <typename F> auto exclusive(F &&f) {
    nb::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(mutex);
    return f();
  }

  /// The forward pass on x [T, hidden].
  std::tuple<NumpyArray, NumpyArray, NumpyArray> forward(const AnyArray &x) {
    std::string form =
        "x of shape [tokens, " + std::to_string(manifest().layer.hidden) +
        "], float32, bfloat16 or float16, C-contiguous, on the CPU";
    Tensor input = toTensor(x, "x", 2, true, form);
    if (input.shape[1] != manifest().layer.hidden)
      badArgument("x has shape " + formatShape(input.shape) + ", expected " +
                  form);
    ForwardResult r = exclusive([&] { return check(layer->forward(input)); });
    return {toNumpy(std::move(r.y)), toNumpy(std::move(r.topkIds)),
            toNumpy(std::move(r.topkWeights))};
  }

  /// The forward pass on device memory (a cuda layer): addresses and the
  /// caller's stream, as DeviceForward takes them.
  void forwardDevice(uint64_t x, int64_t tokens, uint64_t y, uint64_t ids,
                     uint64_t weights, uint64_t stream) {
    DeviceForward io{x, y, ids, weights, tokens, stream};
    exclusive([&] { check(layer->forwardOnDevice(io)); });
  }

  /// The backward pass on device memory: addresses of x, dy and the
  /// gradients (x's, then each trained weight's) and the caller's stream,
  /// as DeviceBackward takes them.
  void backwardDevice(uint64_t x, uint64_t dy, int64_t tokens,
                      const std::vector<uint64_t> &grads, uint64_t stream) {
    DeviceBackward io{x, dy, grads, tokens, stream};
    exclusive([&] { check(layer->backwardOnDevice(io)); });
  }

  /// What the device's driver was asked to do so far (counts and bytes;
  /// zeros on the host).
  std::map<std::string, uint64_t> activity() {
    DeviceActivity a =
        exclusive([&] { return layer->getBackend().activity(); });
    return {{"launches", a.launches},
            {"graph_launches", a.graphLaunches},
            {"host_waits", a.hostWaits},
            {"allocations", a.allocations},
            {"bytes_to_device", a.bytesToDevice},
            {"bytes_to_host", a.bytesToHost}};
  }

  /// The gradients of x ("x") and of the trained weights (by role).
  std::map<std::string, NumpyArray> backward(const AnyArray &x,
                                             const AnyArray &dy) {
    std::string form = "[tokens, " + std::to_string(manifest().layer.hidden) +
                       "], float32, bfloat16 or float16, C-contiguous, on the "
                       "CPU";
    Tensor input = toTensor(x, "x", 2, true, "x of shape " + form);
    Tensor grad = toTensor(dy, "dy", 2, true, "dy of shape " + form);
    if (input.shape[1] != manifest().layer.hidden || grad.shape != input.shape)
      badArgument("x and dy have shapes " + formatShape(input.shape) + " and " +
                  formatShape(grad.shape) + ", expected both of shape " + form);
    std::map<std::string, Tensor> spare;
    {
      std::lock_guard<std::mutex> lock(gradientPool->mutex);
      spare.swap(gradientPool->spare);
    }
    std::map<std::string, Tensor> grads =
        exclusive([&] { return check(layer->backward(input, grad, &spare)); });
    std::map<std::string, NumpyArray> out;
    for (auto &[name, t] : grads)
      out.emplace(name, toNumpy(std::move(t), gradientPool, name));
    return out;
  }

  /// Binds the parameters from in-memory tensors named as in a checkpoint.
  void loadTensors(const std::map<std::string, AnyArray> &tensors,
                   const std::string &prefix) {
    std::map<std::string, Tensor> owned;
    for (const auto &[name, array] : tensors) {
      if (!toDType(array.dtype()))
        continue; // not a tensor of the layer (the loader names what lacks)
      owned.emplace(name, toTensor(array, "tensor '" + name + "'", -1, false,
                                   "a C-contiguous CPU array"));
    }
    exclusive([&] {
      check(layer->loadWeights(Checkpoint(std::move(owned), "<state_dict>"),
                               prefix));
    });
  }

  void loadFile(const std::string &path, const std::string &prefix) {
    exclusive([&] {
      Checkpoint checkpoint = check(Checkpoint::open(path));
      check(layer->loadWeights(checkpoint, prefix));
    });
  }

  NumpyArray parameter(const std::string &role) {
    std::optional<Tensor> value = exclusive([&]() -> std::optional<Tensor> {
      if (const Tensor *p = layer->parameter(role))
        return *p;
      return std::nullopt;
    });
    if (!value)
      badArgument("the layer has no parameter '" + role + "'");
    return toNumpy(std::move(*value));
  }

  void setParameter(const std::string &role, const AnyArray &value) {
    const Tensor *p = layer->parameter(role);
    if (!p)
      badArgument("the layer has no parameter '" + role + "'");
    // An FP8 weight takes float values (quantized) or uint8 e4m3 codes.
    bool fp8 = p->dtype == DType::F8E4M3;
    std::string form =
        "shape " + formatShape(p->shape) +
        (fp8 ? ", a float dtype or uint8 e4m3 codes" : ", a float dtype") +
        ", C-contiguous, on the CPU";
    Tensor t = toTensor(value, "parameter '" + role + "'", -1, !fp8, form);
    if (fp8 && t.dtype == DType::U8)
      t.dtype = DType::F8E4M3;
    else if (!isFloatType(t.dtype))
      badArgument("parameter '" + role + "' has dtype " +
                  dtypeName(value.dtype()) + ", expected " + form);
    if (t.shape != p->shape)
      badArgument("parameter '" + role + "' has shape " + formatShape(t.shape) +
                  ", expected " + form);
    exclusive([&] { check(layer->setParameter(role, t)); });
  }

  std::map<std::string, NumpyArray> namedParameters() {
    std::map<std::string, NumpyArray> out;
    for (auto &[name, t] : exclusive([&] { return layer->namedParameters(); }))
      out.emplace(name, toNumpy(std::move(t)));
    return out;
  }

  /// Tensors by role (gradients, say) under the checkpoint's names, as
  /// namedParameters() names the parameters: float tensors as float32,
  /// int64 ones (element indices, which map a layout onto the other) as
  /// they are.
  std::map<std::string, NumpyArray>
  checkpointNames(const std::map<std::string, AnyArray> &byRole) {
    std::map<std::string, Tensor> tensors;
    for (const auto &[role, array] : byRole) {
      const Tensor *p = layer->parameter(role);
      if (!p)
        badArgument("the layer has no parameter '" + role + "'");
      bool indices = toDType(array.dtype()) == DType::I64;
      Tensor t = toTensor(array, "tensor '" + role + "'", -1, !indices,
                          "shape " + formatShape(p->shape));
      if (t.shape != p->shape)
        badArgument("tensor '" + role + "' has shape " + formatShape(t.shape) +
                    ", the parameter " + formatShape(p->shape));
      tensors.emplace(role, indices ? std::move(t)
                                    : check(convertTensor(t, DType::F32)));
    }
    std::map<std::string, NumpyArray> out;
    for (auto &[name, t] : layer->checkpointNames(tensors))
      out.emplace(name, toNumpy(std::move(t)));
    return out;
  }

  /// (role, checkpoint name, shape, dtype) of each parameter, in order.
  using Spec =
      std::tuple<std::string, std::string, std::vector<int64_t>, std::string>;
  std::vector<Spec> parameterSpecs() const {
    std::vector<Spec> out;
    for (const ParameterSpec &p : manifest().parameters)
      out.emplace_back(p.role, p.name, p.shape, mlirName(p.dtype));
    return out;
  }

  /// The roles the backward pass gives gradients for, in order.
  std::vector<std::string> trainedRoles() const {
    std::vector<std::string> out;
    for (const TrainArgumentSpec &a : manifest().backward.arguments)
      if (a.output && a.name != "x.grad")
        out.push_back(a.name.substr(0, a.name.size() - 5));
    return out;
  }
};

/// The bundle in `data`, checked (checksum, manifest).
Bundle parseBundleBytes(const nb::bytes &data) {
  std::vector<uint8_t> bytes(data.size());
  std::memcpy(bytes.data(), data.c_str(), data.size());
  return check(parseBundle(bytes, "<bundle>"));
}

/// Where the bundle's layer is in its model's checkpoints: the prefix with
/// "{layer}" and the MoE layers' indices (from a config.json; empty when
/// unknown). Nothing is loaded.
std::tuple<std::string, std::vector<int64_t>>
bundleCheckpoint(const nb::bytes &data) {
  Bundle bundle = parseBundleBytes(data);
  return {bundle.manifest.checkpointPrefix, bundle.manifest.moeLayers};
}

std::unique_ptr<PyLayer> loadLayer(const nb::bytes &data,
                                   const std::string &device,
                                   nb::object communicator) {
  Bundle bundle = parseBundleBytes(data);
  int ranks = bundle.manifest.expertParallel;
  if (ranks > 1 && communicator.is_none())
    badArgument("the bundle shards its experts over " + std::to_string(ranks) +
                " ranks (ep); load it with a communicator (MoELayer's "
                "process_group=), or run it with mpirun -np N moe-run or "
                "moe-train");
  auto layer = std::make_unique<PyLayer>();
  if (!communicator.is_none()) {
    layer->communicator = std::make_unique<PyCommunicator>(communicator);
    if (layer->communicator->size() != ranks)
      badArgument("the bundle shards its experts over " +
                  std::to_string(ranks) +
                  " rank(s) (ep), but the process "
                  "group has " +
                  std::to_string(layer->communicator->size()));
  }
  layer->layer = check(Layer::fromBundle(std::move(bundle), device));
  if (ranks > 1)
    check(layer->layer->setCommunicator(layer->communicator.get()));
  return layer;
}

nb::bytes compileLayer(const std::string &input, const std::string &kind,
                       const std::string &name, const std::string &target,
                       const std::string &emit, const std::string &dtype,
                       int64_t maxTokens, int64_t alignment, int64_t ep,
                       bool train, bool backward,
                       const std::string &weightNames, const std::string &mcpu,
                       bool useCache, const std::string &fp8Recipe) {
  mlir::moe::InputKind inputKind;
  if (kind == "mlir")
    inputKind = mlir::moe::InputKind::Mlir;
  else if (kind == "hf")
    inputKind = mlir::moe::InputKind::HFConfig;
  else
    badArgument("kind must be 'mlir' or 'hf', got '" + kind + "'");
  mlir::moe::CompileOptions options;
  options.target = target;
  options.emit = emit;
  options.dtype = dtype;
  options.fp8Recipe = fp8Recipe;
  options.maxTokens = maxTokens;
  options.alignment = alignment;
  options.ep = ep;
  options.train = train;
  options.backward = backward;
  options.weightNames = weightNames;
  options.mcpu = mcpu;
  mlir::moe::CompileResult result;
  {
    nb::gil_scoped_release release;
    if (std::string why = mlir::moe::validateOptions(options); !why.empty())
      result.error = why;
    else
      result =
          mlir::moe::compileCached(input, name, inputKind, options, useCache);
  }
  if (!result.ok()) {
    std::string message = result.error;
    if (!result.diagnostics.empty()) {
      if (!message.empty())
        message += "\n";
      message += result.diagnostics;
    }
    while (!message.empty() && message.back() == '\n')
      message.pop_back();
    throw CompileError(message);
  }
  return nb::bytes(reinterpret_cast<const char *>(result.output.data()),
                   result.output.size());
}

} // namespace

NB_MODULE(_core, m) {
  m.doc() = "moe-compiler's compiler and runtime (use the moe_compiler "
            "package, not this module)";
  // torch keeps autograd graphs, whose nodes hold layers, alive through
  // interpreter shutdown; nanobind would report those as leaks.
  nb::set_leak_warnings(false);
  nb::exception<CompileError>(m, "CompileError");
  m.def("compile", &compileLayer, nb::arg("input"), nb::arg("kind"),
        nb::arg("name"), nb::arg("target"), nb::arg("emit"), nb::arg("dtype"),
        nb::arg("max_tokens"), nb::arg("alignment"), nb::arg("ep"),
        nb::arg("train"), nb::arg("backward"), nb::arg("weight_names"),
        nb::arg("mcpu"), nb::arg("use_cache"), nb::arg("fp8_recipe") = "");
  m.def("version", [] { return std::string(mlir::moe::kCompilerVersion); });
  // Outputs as every tool writes them (rt::writeFileAtomically: links
  // followed, devices and FIFOs written in place, files atomically).
  m.def(
      "write_file",
      [](const std::string &path, const nb::bytes &data) {
        if (Status s = writeFileAtomically(path, data.c_str(), data.size());
            !s.ok())
          fail(s.error);
      },
      nb::arg("path"), nb::arg("data"));
  m.def("bundle_checkpoint", &bundleCheckpoint, nb::arg("bundle"));

  nb::class_<PyLayer>(m, "Layer")
      .def_static("load", &loadLayer, nb::arg("bundle"), nb::arg("device"),
                  nb::arg("communicator").none() = nb::none())
      .def("forward", &PyLayer::forward, nb::arg("x"))
      .def("backward", &PyLayer::backward, nb::arg("x"), nb::arg("dy"))
      .def("forward_device", &PyLayer::forwardDevice, nb::arg("x"),
           nb::arg("tokens"), nb::arg("y"), nb::arg("topk_ids"),
           nb::arg("topk_weights"), nb::arg("stream"))
      .def("backward_device", &PyLayer::backwardDevice, nb::arg("x"),
           nb::arg("dy"), nb::arg("tokens"), nb::arg("grads"),
           nb::arg("stream"))
      .def("activity", &PyLayer::activity)
      .def_prop_ro("exchange_transport",
                   [](PyLayer &l) {
                     return l.exclusive([&] {
                       return l.layer->getBackend().exchangeTransport();
                     });
                   })
      .def_prop_ro("device_dtypes",
                   [](const PyLayer &l) {
                     return std::make_pair(
                         std::string(mlirName(l.layer->deviceInputDType())),
                         std::string(mlirName(l.layer->deviceOutputDType())));
                   })
      .def("load_file", &PyLayer::loadFile, nb::arg("path"), nb::arg("prefix"))
      .def("load_tensors", &PyLayer::loadTensors, nb::arg("tensors"),
           nb::arg("prefix"))
      .def("random_weights",
           [](PyLayer &l, uint64_t seed) {
             l.exclusive([&] { l.layer->randomWeights(seed); });
           })
      .def("set_threads",
           [](PyLayer &l, int threads) {
             if (threads < 1 || threads > 4096)
               badArgument("threads must be in [1, 4096], got " +
                           std::to_string(threads));
             l.exclusive([&] { l.layer->getBackend().setThreads(threads); });
           })
      .def("parameter", &PyLayer::parameter, nb::arg("role"))
      .def("set_parameter", &PyLayer::setParameter, nb::arg("role"),
           nb::arg("value"))
      .def("named_parameters", &PyLayer::namedParameters)
      .def("checkpoint_names", &PyLayer::checkpointNames, nb::arg("by_role"))
      .def("parameter_specs", &PyLayer::parameterSpecs)
      .def("trained_roles", &PyLayer::trainedRoles)
      .def_prop_ro("target",
                   [](const PyLayer &l) { return l.manifest().target; })
      .def_prop_ro("hidden_size",
                   [](const PyLayer &l) { return l.manifest().layer.hidden; })
      .def_prop_ro("top_k",
                   [](const PyLayer &l) { return l.manifest().layer.topK; })
      .def_prop_ro("num_experts",
                   [](const PyLayer &l) { return l.manifest().layer.experts; })
      .def_prop_ro("family",
                   [](const PyLayer &l) { return l.manifest().layer.family; })
      .def_prop_ro("dtype",
                   [](const PyLayer &l) { return l.manifest().layer.dtype; })
      .def_prop_ro("max_tokens",
                   [](const PyLayer &l) { return l.manifest().maxTokens; })
      .def_prop_ro("has_backward", [](const PyLayer &l) {
        return !l.manifest().backward.entry.empty();
      });
}
