"""moe-compiler from Python: compile a Mixture-of-Experts layer, run it and
take its gradients on arrays of any DLPack framework (numpy, torch, JAX).

    import moe_compiler
    bundle = moe_compiler.compile("config.json", train=True)
    layer = bundle.load(weights="model.safetensors", prefix="model.layers.3.mlp.")
    y, topk_ids, topk_weights = layer(x)          # x: [tokens, hidden]
    grads = layer.backward(x, dy)                  # {"x": ..., "gate_weight": ...}

`moe_compiler.torch` wraps a layer as a `torch.nn.Module` with autograd and
swaps the MoE blocks of a transformers model for compiled layers.
"""

import json
import os

from ._core import CompileError
from . import _core

__all__ = ["CompileError", "Bundle", "Layer", "compile", "version"]


def version():
    """The compiler's version string (part of every compile cache key)."""
    return _core.version()


def _config_text(config):
    """(text, kind, name) for compile()'s `config`."""
    if isinstance(config, (str, os.PathLike)):
        path = os.fspath(config)
        # A model's directory, as Hugging Face users pass it.
        if os.path.isdir(path):
            if not os.path.isfile(os.path.join(path, "config.json")):
                raise FileNotFoundError(
                    "'%s' is a directory without a config.json (give the "
                    "model's directory or its config.json)" % path)
            path = os.path.join(path, "config.json")
        if not os.path.isfile(path):
            raise FileNotFoundError(
                "no such config file: '%s' (expected a config.json, a .mlir "
                "file, a dict or a transformers config)" % path)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        return text, ("mlir" if path.endswith(".mlir") else "hf"), path
    if isinstance(config, dict):
        return json.dumps(config), "hf", "<dict>"
    if hasattr(config, "to_dict"):  # a transformers PretrainedConfig
        return (json.dumps(config.to_dict(), default=str), "hf",
                "<%s>" % type(config).__name__)
    raise TypeError(
        "config must be a path (config.json or .mlir), a dict or a "
        "transformers config, got %s" % type(config).__name__)


def compile(config, target="host", dtype=None, train=False, ep=1,
            max_tokens=4096, alignment=0, weight_names=None, mcpu="native",
            cache=True, fp8_recipe=None):
    """Compiles one MoE layer into a Bundle.

    config: a Hugging Face config.json path or a model's directory (its
        config.json), a .mlir file holding one moe.layer, a config dict,
        or a transformers config object.
    target: "host" (the CPU) or "sm_90a" (Hopper).
    dtype: "f32", "bf16", "f16" or "fp8" (bf16 with FP8 experts; None: the
        config's).
    train: also compile the layer's backward pass (host or sm_90a; with
        dtype="fp8" the host only), so that Layer.backward and the torch
        integration's loss.backward() work.
    fp8_recipe: with dtype="fp8", how the GEMMs scale their e4m3 operands:
        "block" (DeepSeek-V3's: 1 x 128 activation and gradient tiles,
        128 x 128 weight blocks; the default) or "tensor" (one scale per
        GEMM operand).
    ep: expert-parallel ranks: the bundle holds experts / ep of them per
        rank, loaded with a communicator of ep ranks (Bundle.load;
        moe_compiler.torch's process_group=), or run by mpirun -np N
        moe-run/moe-train.
    max_tokens: the largest token count a forward pass takes.
    mcpu: the host CPU the code is for: "native" (the default here: this
        machine's vector unit, AVX2 or AVX-512; 2-3x the speed of the
        generic code) or None for any x86-64 (moe-compile's default; for
        bundles that run on other machines). sm_90a ignores it.
    cache: reuse and fill the compile cache ($MOE_CACHE_DIR).

    Raises CompileError with the compiler's diagnostics.
    """
    text, kind, name = _config_text(config)
    data = _core.compile(
        text, kind, name, target=target, emit="bundle", dtype=dtype or "",
        max_tokens=int(max_tokens), alignment=int(alignment), ep=int(ep),
        train=False, backward=bool(train), weight_names=weight_names or "",
        mcpu=(mcpu or "") if target == "host" else "",
        use_cache=bool(cache), fp8_recipe=fp8_recipe or "")
    return Bundle(data, target)


class Bundle:
    """A compiled layer: the bytes moe-compile writes to a .moeb file."""

    def __init__(self, data, target=None):
        self.data = bytes(data)
        self.target = target

    @classmethod
    def open(cls, path):
        """Reads a bundle file (as moe-compile writes it)."""
        with open(path, "rb") as f:
            return cls(f.read())

    def save(self, path):
        """Writes the bundle as moe-compile -o does: a file atomically, a
        symbolic link's target, a device or a FIFO in place (an error,
        not a hang, when nobody reads the FIFO)."""
        _core.write_file(os.fspath(path), self.data)

    def load(self, weights=None, prefix="", device=None, seed=None,
             threads=None, communicator=None):
        """A Layer ready to run.

        weights: a safetensors file, a sharded checkpoint's
            model.safetensors.index.json, or a state dict (name -> torch
            tensor or numpy array) named as in the model's checkpoints.
        prefix: the layer's prefix in those names ("model.layers.3.mlp.").
        seed: random weights instead (for tests and benchmarks).
        device: "host" (default for host bundles) or "cuda".
        threads: the host code's threads (default: $MOE_NUM_THREADS, else
            the cores).
        communicator: the ranks of a bundle compiled with ep > 1: an
            object with `rank` and `size` and the collectives
            all_to_all_v(send, send_splits, recv, recv_splits) (uint8
            arrays, byte counts per rank) and all_reduce_sum(data) (a
            float32 array, in place); moe_compiler.torch makes one over a
            torch.distributed process group. The layer holds this rank's
            experts.
        """
        if device is None:
            device = "cuda" if self.target == "sm_90a" else "host"
        layer = Layer(_core.Layer.load(self.data, device, communicator))
        # What a copy (pickle, copy.deepcopy of a torch module holding it)
        # loads again.
        layer._bundle = self
        layer._device = device
        layer._communicator = communicator
        if threads is not None:
            layer.set_threads(threads)
        if weights is not None and seed is not None:
            raise ValueError("give weights or seed, not both")
        if weights is not None:
            layer.load_weights(weights, prefix)
        elif seed is not None:
            layer._core.random_weights(int(seed))
        return layer


def _host_array(value, name):
    """A CPU array nanobind takes: torch tensors detached, lists as numpy."""
    if hasattr(value, "detach") and hasattr(value, "is_cuda"):
        return value.detach()
    if hasattr(value, "__dlpack__") or hasattr(value, "__array_interface__"):
        return value
    raise TypeError("%s must be an array (numpy, torch, or any DLPack "
                    "tensor), got %s" % (name, type(value).__name__))


# __cuda_array_interface__ typestrs and torch dtypes -> the runtime's names.
_TYPESTRS = {"<f4": "f32", "<f2": "f16", "<i4": "i32"}
_TORCH_DTYPES = {"torch.float32": "f32", "torch.bfloat16": "bf16",
                 "torch.float16": "f16", "torch.int32": "i32"}


def _device_array(value, name, what="forward_into"):
    """(address, shape, dtype name) of a C-contiguous device array: a torch
    CUDA tensor, or an object with __cuda_array_interface__."""
    if hasattr(value, "data_ptr") and hasattr(value, "is_cuda"):
        if not value.is_cuda:
            raise ValueError("%s is on %s; %s takes device arrays "
                             "(CUDA tensors)" % (name, value.device, what))
        if not value.is_contiguous():
            raise ValueError("%s is not contiguous" % name)
        return (value.data_ptr(), tuple(value.shape),
                _TORCH_DTYPES.get(str(value.dtype), str(value.dtype)))
    cai = getattr(value, "__cuda_array_interface__", None)
    if not isinstance(cai, dict):
        raise TypeError("%s must be a device array (a torch CUDA tensor or "
                        "an object with __cuda_array_interface__), got %s"
                        % (name, type(value).__name__))
    shape = tuple(cai["shape"])
    dtype = _TYPESTRS.get(cai["typestr"], cai["typestr"])
    strides = cai.get("strides")
    if strides is not None:
        size = int(cai["typestr"][2:])
        want = []
        for d in reversed(shape):
            want.insert(0, size)
            size *= d
        if tuple(strides) != tuple(want):
            raise ValueError("%s is not C-contiguous (strides %s)"
                             % (name, list(strides)))
    return int(cai["data"][0]), shape, dtype


def _device_rows(arrays, what):
    """(tokens, addresses) of (name, array, dtype, width) device arrays of
    one pass: each [tokens, width] of its dtype, the same tokens."""
    tokens, ptrs = None, []
    for name, value, dtype, width in arrays:
        ptr, shape, got = _device_array(value, name, what)
        if got != dtype or len(shape) != 2 or shape[1] != width or \
                (tokens is not None and shape[0] != tokens):
            raise ValueError(
                "%s is a %s array of shape %s, expected %s of shape "
                "[%s, %d]" % (name, got, list(shape), dtype,
                              "tokens" if tokens is None else tokens, width))
        tokens = shape[0]
        ptrs.append(ptr)
    return tokens, ptrs


def _stream_handle(stream):
    """A CUstream handle from an int or an object with .cuda_stream."""
    stream = getattr(stream, "cuda_stream", stream)
    if not isinstance(stream, int) or stream < 0:
        raise TypeError("stream must be a CUstream handle (an int) or "
                        "have .cuda_stream, got %r" % (stream,))
    return stream


def _like(value, array):
    """`array` (numpy) as the framework of `value`: torch in, torch out."""
    if type(value).__module__.startswith("torch"):
        import torch
        return torch.from_numpy(array)
    return array


class Layer:
    """A loaded layer: its parameters and the compiled forward (and, for
    bundles compiled with train=True, backward) pass."""

    def __init__(self, core):
        self._core = core

    # The layer's facts, from the bundle's manifest.
    hidden_size = property(lambda self: self._core.hidden_size)
    top_k = property(lambda self: self._core.top_k)
    num_experts = property(lambda self: self._core.num_experts)
    max_tokens = property(lambda self: self._core.max_tokens)
    dtype = property(lambda self: self._core.dtype)
    target = property(lambda self: self._core.target)
    has_backward = property(lambda self: self._core.has_backward)

    def load_weights(self, weights, prefix=""):
        """Binds the parameters from a checkpoint file or a state dict."""
        if isinstance(weights, (str, os.PathLike)):
            self._core.load_file(os.fspath(weights), prefix)
            return
        if not hasattr(weights, "items"):
            raise TypeError("weights must be a path or a state dict, got %s"
                            % type(weights).__name__)
        tensors = {}
        for name, value in weights.items():
            if prefix and not name.startswith(prefix):
                continue
            if hasattr(value, "detach"):
                value = value.detach().contiguous()
                if value.device.type != "cpu":
                    value = value.cpu()
            tensors[name] = value
        self._core.load_tensors(tensors, prefix)

    def set_threads(self, threads):
        self._core.set_threads(int(threads))

    def parameters(self):
        """Each parameter by role ("gate_weight", ...), as float32 numpy
        copies in the layer's layout (experts stacked); an FP8 layer's
        expert weights as uint8 e4m3 codes, their block scales as
        "gate_scale", ...."""
        return {role: self._core.parameter(role)
                for role, _, _, _ in self._core.parameter_specs()}

    def named_parameters(self):
        """The parameters under their checkpoint names (float32)."""
        return self._core.named_parameters()

    def checkpoint_names(self, by_role):
        """Tensors given by role (gradients, say) under the checkpoint's
        names, split per expert as named_parameters() splits them."""
        return self._core.checkpoint_names(
            {role: _host_array(v, role) for role, v in by_role.items()})

    def set_parameter(self, role, value):
        """Sets one parameter; an FP8 weight takes uint8 e4m3 codes as they
        are, or float values it quantizes (setting its scales too)."""
        self._core.set_parameter(role, _host_array(value, role))

    def trained_parameters(self):
        """The roles the backward pass gives gradients for."""
        return list(self._core.trained_roles())

    def __call__(self, x):
        """y [tokens, hidden] (float32), topk_ids and topk_weights
        [tokens, top_k], as numpy arrays, or torch tensors for torch x."""
        y, ids, weights = self._core.forward(_host_array(x, "x"))
        return _like(x, y), _like(x, ids), _like(x, weights)

    forward = __call__

    def forward_into(self, x, y, topk_ids, topk_weights, stream=0):
        """The forward pass on device memory (a cuda layer: an sm_90a
        bundle): x [tokens, hidden] and the outputs y [tokens, hidden],
        topk_ids [tokens, top_k] (int32) and topk_weights [tokens, top_k]
        (float32) are device arrays (torch CUDA tensors, or any object
        with __cuda_array_interface__), C-contiguous, x and y in the
        dtypes of `device_dtypes`. Nothing is copied through the host and
        the host does not wait: the pass runs after the work on `stream`
        (a CUstream handle, or an object with .cuda_stream; 0: the legacy
        default stream) and work enqueued there afterwards runs after it.
        Parameters changed since the last pass are uploaded first."""
        if self.target != "sm_90a":
            raise RuntimeError("this device takes host tensors only: "
                               "forward_into needs an sm_90a bundle (this "
                               "one is for the %s target)" % self.target)
        x_dtype, y_dtype = self.device_dtypes
        hidden, k = self.hidden_size, self.top_k
        tokens, ptrs = _device_rows(
            (("x", x, x_dtype, hidden), ("y", y, y_dtype, hidden),
             ("topk_ids", topk_ids, "i32", k),
             ("topk_weights", topk_weights, "f32", k)), "forward_into")
        self._core.forward_device(ptrs[0], tokens, ptrs[1], ptrs[2], ptrs[3],
                                  _stream_handle(stream))

    def backward_into(self, x, dy, grads, stream=0):
        """The backward pass on device memory (an sm_90a bundle compiled
        with train=True), as forward_into runs the forward pass: x
        [tokens, hidden] in device_dtypes[0] and dy [tokens, hidden]
        (float32) are device arrays, and `grads` maps "x" and every role
        of trained_parameters() to a float32 device array of its shape
        (x's, the parameter's), which the pass writes. Nothing is copied
        through the host and the host does not wait."""
        if self.target != "sm_90a":
            raise RuntimeError("this device takes host tensors only: "
                               "backward_into needs an sm_90a bundle (this "
                               "one is for the %s target)" % self.target)
        if not self.has_backward:
            raise RuntimeError("the bundle has no backward pass (compile it "
                               "with train=True)")
        roles = ["x"] + self.trained_parameters()
        if not hasattr(grads, "keys") or set(grads) != set(roles):
            raise ValueError("grads must map each of %s to a device array, "
                             "got %s" % (roles, sorted(grads) if
                                         hasattr(grads, "keys") else
                                         type(grads).__name__))
        shapes = {role: tuple(shape) for role, _, shape, _ in
                  self._core.parameter_specs()}
        hidden = self.hidden_size
        tokens, ptrs = _device_rows(
            (("x", x, self.device_dtypes[0], hidden), ("dy", dy, "f32", hidden)),
            "backward_into")
        out = []
        for role in roles:
            want = (tokens, hidden) if role == "x" else shapes[role]
            ptr, shape, got = _device_array(grads[role], "grads['%s']" % role,
                                            "backward_into")
            if got != "f32" or tuple(shape) != tuple(want):
                raise ValueError("grads['%s'] is a %s array of shape %s, "
                                 "expected f32 of shape %s"
                                 % (role, got, list(shape), list(want)))
            out.append(ptr)
        self._core.backward_device(ptrs[0], ptrs[1], tokens, out,
                                   _stream_handle(stream))

    @property
    def device_dtypes(self):
        """(x's, y's) dtype on the device ("bf16", "f32", ...)."""
        return tuple(self._core.device_dtypes)

    def activity(self):
        """What the device's driver was asked to do since it was opened:
        launches, graph_launches, host_waits, allocations, bytes_to_device,
        bytes_to_host (process-wide; zeros on the host target)."""
        return dict(self._core.activity())

    def backward(self, x, dy):
        """The gradients of a loss whose gradient with respect to y is dy:
        {"x": dL/dx, role: dL/dW, ...} (float32). Needs train=True."""
        grads = self._core.backward(_host_array(x, "x"), _host_array(dy, "dy"))
        return {name: _like(x, g) for name, g in grads.items()}
