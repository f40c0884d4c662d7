"""PyTorch integration: a compiled MoE layer as a `torch.nn.Module` whose
backward runs the compiled backward pass, and `replace_moe_blocks`, which
swaps the MoE blocks of a transformers model for compiled layers holding the
model's own weights. The layer runs as custom ops (moe_compiler::
layer_forward and layer_backward), so torch.compile(fullgraph=True) traces
through it.

    from moe_compiler.torch import MoELayer, replace_moe_blocks
    moe = MoELayer.from_config("config.json", seed=0)   # or weights=...
    y = moe(x)                                          # x: [..., hidden]
    y.square().mean().backward()                        # grads in moe.*.grad

    replace_moe_blocks(model)                           # a transformers model
    restore_moe_blocks(model)           # its own blocks back, trained weights

The host target runs on CPU tensors. Parameters are float32 torch
Parameters (the masters); each forward pass copies those that changed since
the last one into the layer, in its compute dtype. Gradients flow to x and
to every trained parameter through y; topk_ids and topk_weights are
outputs without gradients. A batch of more tokens than the bundle's
max_tokens runs in pieces of at most max_tokens (routing is per token, so
the result is the same). A MoELayer pickles and deep-copies: the copy loads
its bundle again and binds the copied parameters.
"""

import itertools
import re
import weakref

import torch

from . import Bundle, _config_text, _core, compile as _compile


# Every live MoELayer by a handle: the ops below take the handle (an int,
# which torch.compile keeps as a constant of the graph) and the layer's
# tensors, so that the layer's compiled code, which no op signature can
# carry, stays outside the graph.
_LAYERS = weakref.WeakValueDictionary()
_HANDLES = itertools.count(1)


def _module(handle):
    module = _LAYERS.get(handle)
    if module is None:
        raise RuntimeError("moe_compiler: MoELayer %d no longer exists"
                           % handle)
    return module


@torch.library.custom_op("moe_compiler::layer_forward", mutates_args=())
def _layer_forward(x: torch.Tensor, params: list[torch.Tensor],
                   handle: int) -> tuple[torch.Tensor, torch.Tensor,
                                         torch.Tensor]:
    """y [T, hidden] f32, topk_ids [T, k] i32, topk_weights [T, k] f32 of
    layer `handle` on x [T, hidden], its parameters `params` (by role, in
    the module's order) bound first where they changed."""
    module = _module(handle)
    module._bind(params)
    y, ids, weights = module.layer._core.forward(x.detach())
    return (torch.from_numpy(y), torch.from_numpy(ids),
            torch.from_numpy(weights))


@_layer_forward.register_fake
def _(x, params, handle):
    module = _module(handle)
    tokens = x.shape[0]
    return (x.new_empty((tokens, module._hidden), dtype=torch.float32),
            x.new_empty((tokens, module._top_k), dtype=torch.int32),
            x.new_empty((tokens, module._top_k), dtype=torch.float32))


@torch.library.custom_op("moe_compiler::layer_backward", mutates_args=())
def _layer_backward(x: torch.Tensor, dy: torch.Tensor,
                    params: list[torch.Tensor],
                    handle: int) -> list[torch.Tensor]:
    """[dL/dx, then dL/dW of each trained parameter in the module's order]
    for dL/dy = dy, by the bundle's compiled backward pass (which
    recomputes the forward pass)."""
    module = _module(handle)
    if not module.layer.has_backward:
        raise RuntimeError(
            "this MoELayer's bundle has no backward pass: compile it "
            "with train=True (moe-compile --backward)")
    module._bind(params)
    grads = module.layer._core.backward(x.detach(), dy.contiguous())
    out = [torch.from_numpy(grads["x"]).to(x.dtype)]
    for i in module._trained_index:
        out.append(torch.from_numpy(grads[module._roles[i]])
                   .to(params[i].dtype))
    return out


@_layer_backward.register_fake
def _(x, dy, params, handle):
    module = _module(handle)
    return [torch.empty_like(x)] + [torch.empty_like(params[i])
                                    for i in module._trained_index]


def _setup_context(ctx, inputs, output):
    x, params, handle = inputs
    ctx.save_for_backward(x, *params)
    ctx.handle = handle
    ctx.mark_non_differentiable(output[1], output[2])


def _backward(ctx, dy, _ids, _weights):
    x, *params = ctx.saved_tensors
    module = _module(ctx.handle)
    grads = torch.ops.moe_compiler.layer_backward(x, dy.contiguous(), params,
                                                  ctx.handle)
    by_param = [None] * len(params)
    for n, i in enumerate(module._trained_index):
        by_param[i] = grads[n + 1]
    return grads[0], by_param, None


_layer_forward.register_autograd(_backward, setup_context=_setup_context)


class MoELayer(torch.nn.Module):
    """A compiled MoE layer as a module: forward(x) maps [..., hidden] to
    the same shape (x's dtype; computed in the bundle's dtype, accumulated
    in f32).

    layer: a moe_compiler.Layer with weights bound.
    output: "tensor" returns y; "routing" returns (y, topk_ids,
        topk_weights); "pair" returns (y, topk_weights), the form of the
        GPT-OSS and Llama 4 blocks in transformers (whose decoder layers
        discard the second element).
    """

    def __init__(self, layer, output="tensor"):
        super().__init__()
        if output not in ("tensor", "routing", "pair"):
            raise ValueError("output must be 'tensor', 'routing' or 'pair', "
                             "got %r" % (output,))
        if not hasattr(layer, "_bundle"):
            raise TypeError("layer must be a moe_compiler.Layer from "
                            "Bundle.load, got %s" % type(layer).__name__)
        self.layer = layer
        self.output = output
        trained = set(layer.trained_parameters()) if layer.has_backward \
            else set()
        self._trained = []
        self._roles = []
        for role, value in layer.parameters().items():
            tensor = torch.from_numpy(value)
            if role in trained:
                self.register_parameter(role, torch.nn.Parameter(tensor))
                self._trained.append(role)
            else:
                self.register_buffer(role, tensor)
            self._roles.append(role)
        # (data pointer, version) of each tensor as the layer last saw it.
        self._seen = {role: self._stamp(getattr(self, role))
                      for role in self._roles}
        self._trained_index = [self._roles.index(r) for r in self._trained]
        # The layer's facts as plain ints, for torch.compile.
        self._hidden = layer.hidden_size
        self._top_k = layer.top_k
        self._max_tokens = layer.max_tokens
        self._register()

    def _register(self):
        self._handle = next(_HANDLES)
        _LAYERS[self._handle] = self

    @classmethod
    def from_config(cls, config, weights=None, prefix="", seed=None,
                    train=True, threads=None, output="tensor", **compile_args):
        """Compiles `config` (see moe_compiler.compile) and loads it."""
        bundle = _compile(config, train=train, **compile_args)
        return cls(bundle.load(weights=weights, prefix=prefix, seed=seed,
                               threads=threads), output=output)

    def __getstate__(self):
        """The module's state with the loaded layer replaced by its bundle
        (the compiled code is not picklable; the parameters are the
        module's own tensors)."""
        state = self.__dict__.copy()
        layer = state.pop("layer")
        state["_layer_bundle"] = (layer._bundle.data, layer._bundle.target,
                                  layer._device)
        return state

    def __setstate__(self, state):
        state = dict(state)
        data, target, device = state.pop("_layer_bundle")
        self.__dict__.update(state)
        # Bound (to placeholders), then every parameter is set from the
        # module's tensors.
        self.layer = Bundle(data, target).load(device=device, seed=0)
        self._seen = {role: None for role in self._roles}
        self._sync()
        self._register()

    @staticmethod
    def _stamp(tensor):
        return (tensor.data_ptr(), tensor._version, tensor.dtype)

    def _sync(self):
        """Copies the parameters changed since the last call (an optimizer
        step, load_state_dict) into the layer."""
        self._bind([getattr(self, role) for role in self._roles])

    def _bind(self, params):
        """Copies those of `params` (by role, in the module's order) that
        changed since the layer last saw them into the layer."""
        for role, tensor in zip(self._roles, params):
            stamp = self._stamp(tensor)
            if self._seen[role] != stamp:
                if tensor.device.type != "cpu":
                    raise ValueError(
                        "parameter '%s' is on %s; the host target runs on "
                        "CPU tensors" % (role, tensor.device))
                self.layer._core.set_parameter(role,
                                               tensor.detach().contiguous())
                self._seen[role] = stamp

    def forward(self, x):
        hidden = self._hidden
        if not isinstance(x, torch.Tensor):
            raise TypeError("x must be a torch.Tensor, got %s"
                            % type(x).__name__)
        if x.dim() < 1 or x.shape[-1] != hidden:
            raise ValueError("x has shape %s, expected [..., %d] (float32, "
                             "bfloat16 or float16, on the CPU)"
                             % (list(x.shape), hidden))
        flat = x.reshape(-1, hidden).contiguous()
        params = [getattr(self, role) for role in self._roles]
        run = torch.ops.moe_compiler.layer_forward
        # Batches beyond the bundle's capacity in pieces of at most
        # max_tokens tokens.
        cap = self._max_tokens
        if flat.shape[0] <= cap:
            y, ids, weights = run(flat, params, self._handle)
        else:
            parts = [run(flat[i:i + cap], params, self._handle)
                     for i in range(0, flat.shape[0], cap)]
            y, ids, weights = (torch.cat([p[j] for p in parts])
                               for j in range(3))
        y = y.to(x.dtype).reshape(x.shape)
        if self.output == "routing":
            k = self.layer.top_k
            lead = list(x.shape[:-1])
            return y, ids.reshape(lead + [k]), weights.reshape(lead + [k])
        if self.output == "pair":
            return y, weights
        return y

    def extra_repr(self):
        return "hidden=%d, experts=%d, top_k=%d, dtype=%s, backward=%s" % (
            self.layer.hidden_size, self.layer.num_experts, self.layer.top_k,
            self.layer.dtype, self.layer.has_backward)


# moe(): bundles by (config, dtype, target, token bucket) and loaded layers
# by bundle and the weights' identity.
_BUNDLES = {}
_BOUND = {}


def _bucket(tokens):
    """The token capacity a call of `tokens` tokens is compiled for: the
    next power of two, at least 64."""
    cap = 64
    while cap < tokens:
        cap *= 2
    return cap


def moe(x, weights, config, prefix="", dtype=None, target="host"):
    """The MoE layer of `config` on x [..., hidden] with `weights`, for
    serving code that holds the weights itself: y, x's shape and dtype.

    weights: a state dict (name -> tensor) under the model's checkpoint
        names; `prefix` selects the layer's ("model.layers.3.mlp.").
    config: as moe_compiler.compile takes it (a path, a dict or a
        transformers config).
    dtype: the compute dtype ("f32", "bf16", "f16", "fp8"; None: x's).

    The layer is compiled once per (config, dtype, target, token bucket:
    the next power of two of the tokens, at least 64), through the compile
    cache, and loaded once per bundle and weights (the same tensors, not
    changed in place since): later calls only run it. No gradients flow
    (a serving entry; MoELayer trains).
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError("x must be a torch.Tensor, got %s" % type(x).__name__)
    if not hasattr(weights, "items"):
        raise TypeError("weights must be a state dict (name -> tensor), got "
                        "%s" % type(weights).__name__)
    if dtype is None:
        dtype = _DTYPES.get(x.dtype)
    tokens = x.numel() // x.shape[-1] if x.dim() and x.shape[-1] else 0
    text, _, _ = _config_text(config)
    key = (text, dtype, target, _bucket(tokens))
    bundle = _BUNDLES.get(key)
    if bundle is None:
        bundle = _BUNDLES[key] = _compile(config, target=target, dtype=dtype,
                                          max_tokens=key[3])
    names = sorted(n for n in weights if n.startswith(prefix))
    stamp = tuple((n, w.data_ptr(), w._version)
                  if isinstance(w, torch.Tensor) else (n, id(w))
                  for n, w in ((n, weights[n]) for n in names))
    bound = _BOUND.get(id(bundle))
    if bound is None or bound[0] != (prefix, stamp):
        module = MoELayer(bundle.load(weights=weights, prefix=prefix))
        module.eval()
        _BOUND[id(bundle)] = bound = ((prefix, stamp), module)
    with torch.no_grad():
        return bound[1](x)


def _checkpoint_state(model, path, block):
    """The block's tensors under the names of the model's published
    checkpoints (transformers 5 fuses and renames some at load; its own
    reverse mapping, as save_pretrained uses, undoes that)."""
    state = {"%s.%s" % (path, k): v.detach()
             for k, v in block.state_dict().items()}
    try:
        from transformers.core_model_loading import revert_weight_conversion
    except ImportError:  # transformers 4: names are the checkpoint's
        return state
    return revert_weight_conversion(model, state)


# What transformers names a decoder layer's MoE block, whatever the
# checkpoints call it (transformers 5 loads Mixtral's, Phi-3.5-MoE's and
# MiniMax's `block_sparse_moe` into `mlp`).
_BLOCK_NAMES = ("mlp", "block_sparse_moe", "feed_forward")

# A model's parameter dtype -> the compiler's --dtype.
_DTYPES = {torch.float32: "f32", torch.bfloat16: "bf16",
           torch.float16: "f16"}


def _find_blocks(model, template, moe_layers):
    """(path, layer, module) of each MoE block. Blocks are found by the
    prefix's last parts: "...layers.{layer}.mlp." matches the module
    "model.layers.3.mlp" (and the module tree of a multimodal wrapper,
    whose outer names differ from the checkpoint's); the block's own name
    may be the checkpoint's or any of _BLOCK_NAMES, the checkpoint's
    first."""
    head, tail = template.split("{layer}", 1)
    head_last = head.rstrip(".").split(".")[-1]
    names = [tail.strip(".")]
    names += [n for n in _BLOCK_NAMES if n not in names]
    pattern = re.compile(r"(?:^|.*\.)%s\.(\d+)\.(%s)$"
                         % (re.escape(head_last),
                            "|".join(re.escape(n) for n in names)))
    best = {}
    for path, module in model.named_modules():
        match = pattern.match(path)
        if not match:
            continue
        index = int(match.group(1))
        if moe_layers and index not in moe_layers:
            continue
        rank = names.index(match.group(2))
        if index not in best or rank < best[index][0]:
            best[index] = (rank, path, module)
    return [(path, index, module)
            for index, (_, path, module) in sorted(best.items())]


def replace_moe_blocks(model, target="host", dtype=None, train=None,
                       threads=None, cache=True, max_tokens=4096):
    """Swaps every MoE block of a transformers model (a family the importer
    supports) for a compiled MoELayer holding the block's weights, in place.

    The layer is compiled once from model.config, in the model's dtype
    unless `dtype` says otherwise ("f32", "bf16", "f16", "fp8"); train
    (default: whether the model is in training mode) also compiles the
    backward pass. A forward pass of more than max_tokens tokens runs in
    pieces. Each block removed is kept, its tensors moved to the meta
    device, for restore_moe_blocks. Returns the module paths replaced.
    """
    config = getattr(model, "config", None)
    if config is None:
        raise TypeError("model must be a transformers model (it has no "
                        ".config)")
    if train is None:
        train = model.training
    if dtype is None:
        first = next(model.parameters(), None)
        dtype = _DTYPES.get(first.dtype) if first is not None else None
    bundle = _compile(config, target=target, dtype=dtype, train=train,
                      max_tokens=max_tokens, cache=cache)
    template, moe_layers = _core.bundle_checkpoint(bundle.data)
    moe_layers = set(moe_layers)
    if "{layer}" not in template:
        raise ValueError("the compiled config does not say where its MoE "
                         "blocks are in the model (no checkpoint prefix)")
    found = _find_blocks(model, template, moe_layers)
    if not found:
        raise ValueError("no MoE block of the form '%s' (or with the block "
                         "named %s) found in the model (layers %s)"
                         % (template, " or ".join(_BLOCK_NAMES),
                            sorted(moe_layers)))
    replaced = []
    for path, index, block in found:
        prefix = template.replace("{layer}", str(index))
        state = _checkpoint_state(model, path, block)
        # The published names may start differently from the module tree
        # (a multimodal wrapper): match them on the block's prefix end.
        names = [k for k in state if prefix in k]
        if names:
            start = names[0].index(prefix)
            state = {k[start:]: v for k, v in state.items()
                     if k[start:].startswith(prefix)}
        layer = bundle.load(weights=state, prefix=prefix, threads=threads)
        # Mimic the block's output: a tensor, or a pair whose second part
        # the decoder layer discards (GPT-OSS, Llama 4).
        with torch.no_grad():
            probe_x = torch.zeros(1, 1, layer.hidden_size,
                                  dtype=next(block.parameters()).dtype)
            out = block(probe_x)
        output = "pair" if isinstance(out, tuple) else "tensor"
        new = MoELayer(layer, output=output)
        new.train(block.training)
        # The block itself, for restore_moe_blocks: its tensors on the meta
        # device (no memory), its non-persistent buffers (not in the
        # checkpoint) kept as they are.
        persistent = set(block.state_dict())
        extra = {n: b.detach().clone() for n, b in block.named_buffers()
                 if n not in persistent}
        block.to("meta")
        new._original = (block, extra)
        parent_path, _, name = path.rpartition(".")
        parent = model.get_submodule(parent_path) if parent_path else model
        setattr(parent, name, new)
        replaced.append(path)
    return replaced


def _block_values(model, path, block, checkpoint):
    """The tensors of transformers' `block` (at module `path`, on the meta
    device) from `checkpoint`, the layer's weights under the checkpoint's
    names relative to the block: transformers' conversion from its tensors
    to the checkpoint's (the one save_pretrained applies) rearranges
    elements, so it is run on element indices and each checkpoint value
    goes back where its index says."""
    from transformers.core_model_loading import revert_weight_conversion
    state = block.state_dict()
    names = list(state)
    offsets, total = {}, 0
    for n in names:
        offsets[n] = total
        total += state[n].numel()
    ids = {"%s.%s" % (path, n): torch.arange(
        offsets[n], offsets[n] + state[n].numel(),
        dtype=torch.int64).reshape(state[n].shape) for n in names}
    reverted = revert_weight_conversion(model, ids)
    flat = torch.zeros(total, dtype=torch.float32)
    filled = torch.zeros(total, dtype=torch.bool)
    for full, index in reverted.items():
        rel = re.sub(r"^.*?layers\.\d+\.[A-Za-z_]+\.", "", full)
        if rel not in checkpoint:
            raise ValueError("restore_moe_blocks: the layer has no tensor "
                             "'%s' that transformers' block '%s' saves as "
                             "'%s'" % (rel, path, full))
        value = torch.as_tensor(checkpoint[rel]).reshape(-1).float()
        index = index.reshape(-1)
        if value.numel() != index.numel():
            raise ValueError("restore_moe_blocks: '%s' has %d elements, "
                             "transformers' block saves %d"
                             % (rel, value.numel(), index.numel()))
        flat[index] = value
        filled[index] = True
    if not bool(filled.all()):
        raise ValueError("restore_moe_blocks: transformers' conversion of "
                         "block '%s' is not a rearrangement of its tensors "
                         "(elements left unset)" % path)
    return {n: flat[offsets[n]:offsets[n] + state[n].numel()]
            .reshape(state[n].shape).to(state[n].dtype) for n in names}


def restore_moe_blocks(model):
    """Puts transformers' own MoE blocks back in place of the MoELayers that
    replace_moe_blocks put in `model`, holding the layers' current
    (trained) weights in the block's dtype, so that save_pretrained writes
    a checkpoint from_pretrained loads (with or without the compiler).
    Returns the module paths restored."""
    restored = []
    for path, module in list(model.named_modules()):
        if not isinstance(module, MoELayer) or \
                getattr(module, "_original", None) is None:
            continue
        block, extra = module._original
        module._sync()
        values = _block_values(model, path, block,
                               module.layer.named_parameters())
        device = next(iter(module.parameters()), torch.empty(0)).device
        block.to_empty(device=device)
        with torch.no_grad():
            for name, value in values.items():
                block.get_parameter(name).copy_(value) \
                    if name in dict(block.named_parameters()) \
                    else block.get_buffer(name).copy_(value)
            for name, value in extra.items():
                block.get_buffer(name).copy_(value)
        block.train(module.training)
        parent_path, _, name = path.rpartition(".")
        parent = model.get_submodule(parent_path) if parent_path else model
        setattr(parent, name, block)
        restored.append(path)
    return restored


__all__ = ["MoELayer", "moe", "replace_moe_blocks", "restore_moe_blocks",
           "Bundle"]
