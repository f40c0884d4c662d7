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
    model.save_pretrained("tuned")      # transformers' names: loads anywhere
    restore_moe_blocks(model)           # its own blocks back, trained weights

    MoELayer.from_config("config.json", seed=0, process_group=pg)  # torchrun

The host target runs on CPU tensors; an sm_90a layer also on CUDA tensors
(forward only), on device memory. Parameters are float32 torch Parameters
(the masters; replace_moe_blocks gives the model's dtype); each forward
pass copies those that changed since the last one into the layer, in its
compute dtype. Gradients flow to x and
to every trained parameter through y; topk_ids and topk_weights are
outputs without gradients. A batch of more tokens than the bundle's
max_tokens runs in pieces of at most max_tokens (routing is per token, so
the result is the same). A MoELayer pickles and deep-copies: the copy loads
its bundle again and binds the copied parameters. A replaced model's
state_dict() and load_state_dict() use transformers' names for the
blocks' tensors. process_group= shards the experts over a
torch.distributed group (gloo), each rank holding its experts.
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
    if x.is_cuda:
        return module._forward_device(x.detach())
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
    recomputes the forward pass); on CUDA tensors (an sm_90a layer's) on
    their device memory, on the current stream."""
    module = _module(handle)
    if not module.layer.has_backward:
        raise RuntimeError(
            "this MoELayer's bundle has no backward pass: compile it "
            "with train=True (moe-compile --backward)")
    module._bind(params)
    if x.is_cuda:
        return module._backward_device(x.detach(), dy, params)
    grads = module.layer._core.backward(x.detach(), dy.contiguous())
    out = [torch.from_numpy(grads["x"]).to(device=x.device, dtype=x.dtype)]
    for i in module._trained_index:
        out.append(torch.from_numpy(grads[module._roles[i]])
                   .to(device=params[i].device, dtype=params[i].dtype))
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


class _GroupCommunicator:
    """The collectives of an expert-parallel layer (moe_compiler.Bundle.
    load's communicator) over a torch.distributed process group: gloo
    for the host target."""

    def __init__(self, group):
        import torch.distributed as dist
        self.group = group
        self.rank = dist.get_rank(group)
        self.size = dist.get_world_size(group)

    def all_to_all_v(self, send, send_splits, recv, recv_splits):
        import torch.distributed as dist
        dist.all_to_all_single(torch.from_numpy(recv), torch.from_numpy(send),
                               list(recv_splits), list(send_splits),
                               group=self.group)

    def all_reduce_sum(self, data):
        import torch.distributed as dist
        dist.all_reduce(torch.from_numpy(data), group=self.group)


def _group_size(process_group, experts):
    """The ranks of `process_group` (None: the default group), checked to
    divide `experts`."""
    import torch.distributed as dist
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("process_group given, but torch.distributed is "
                           "not initialized (call "
                           "torch.distributed.init_process_group first)")
    size = dist.get_world_size(process_group)
    if experts is not None and experts % size:
        raise ValueError("the process group has %d ranks, which does not "
                         "divide the layer's %d experts (each rank holds "
                         "experts / ranks of them)" % (size, experts))
    return size


def _config_experts(config):
    """The routed experts of `config` (whatever the family calls them)."""
    text, _, _ = _config_text(config)
    import json
    fields = json.loads(text) if text.lstrip().startswith("{") else {}
    fields = fields.get("text_config", fields)
    for key in ("n_routed_experts", "num_experts", "num_local_experts",
                "moe_num_experts", "ffn_config"):
        value = fields.get(key)
        if isinstance(value, dict):
            value = value.get("moe_num_experts")
        if isinstance(value, int):
            return value
    return None


class MoELayer(torch.nn.Module):
    """A compiled MoE layer as a module: forward(x) maps [..., hidden] to
    the same shape (x's dtype; computed in the bundle's dtype, accumulated
    in f32).

    layer: a moe_compiler.Layer with weights bound.
    param_dtype: the dtype of its float parameters and buffers (float32:
        masters for the optimizer; replace_moe_blocks gives the model's
        own, as transformers' blocks hold them); gradients come in it. An
        FP8 layer's trained expert weights are float masters too (the
        codes times their scales to begin with), which the layer
        quantizes again, by its recipe, whenever they change.
    output: "tensor" returns y; "routing" returns (y, topk_ids,
        topk_weights); "pair" returns (y, topk_weights), the form of the
        GPT-OSS and Llama 4 blocks in transformers (whose decoder layers
        discard the second element).
    """

    def __init__(self, layer, output="tensor", param_dtype=torch.float32):
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
        converted = set()
        self._dtypes = {role: dtype for role, _, _, dtype
                        in layer._core.parameter_specs()}
        # An FP8 layer's trained expert weights are float masters, as
        # moe-train keeps them: their e4m3 codes times their block scales
        # to begin with; the layer quantizes them again (its recipe's
        # scales) whenever they change, and the backward pass's gradients
        # are theirs. Their scales are no tensors of the module.
        self._masters = {r for r in trained if _is_fp8_weight(self, r)}
        values = layer.parameters()
        for role, value in values.items():
            if role.endswith("_scale") and \
                    role[:-6] + "_weight" in self._masters:
                continue
            tensor = torch.from_numpy(value)
            if role in self._masters:
                tensor = _fp8_dequantize(
                    tensor, torch.from_numpy(values[role[:-7] + "_scale"]))
                converted.add(role)
            # Float values in the module's dtype (e4m3 codes and their
            # block scales as they are).
            scales = role.endswith("_scale") and _is_fp8_weight(
                self, role[:-6] + "_weight")
            if tensor.dtype == torch.float32 and \
                    param_dtype != torch.float32 and not scales:
                tensor = tensor.to(param_dtype)
                converted.add(role)
            if role in trained:
                self.register_parameter(role, torch.nn.Parameter(tensor))
                self._trained.append(role)
            else:
                self.register_buffer(role, tensor)
            self._roles.append(role)
        # (data pointer, version) of each tensor as the layer last saw it
        # (a converted one is bound again, rounded, before the first pass).
        self._seen = {role: None if role in converted
                      else self._stamp(getattr(self, role))
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
                    train=True, threads=None, output="tensor",
                    process_group=None, **compile_args):
        """Compiles `config` (see moe_compiler.compile) and loads it.

        process_group: shard the experts over a torch.distributed group
            (gloo for the host target): each rank holds experts / ranks
            of them (from `weights`, or `seed`, which gives the same layer
            for any number of ranks), and every forward and backward pass
            exchanges tokens with the other ranks, which must call the
            layer in step (the same number of times; their token counts
            may differ). The replicated weights' gradients are summed over
            the ranks, so that a loss summed over every rank's tokens gets
            one rank's gradients: do not also average them (keep the
            layer out of DDP).
        """
        communicator = None
        if process_group is not None:
            size = _group_size(process_group, _config_experts(config))
            if compile_args.setdefault("ep", size) != size:
                raise ValueError("ep=%d, but the process group has %d ranks"
                                 % (compile_args["ep"], size))
            communicator = _GroupCommunicator(process_group)
        bundle = _compile(config, train=train, **compile_args)
        return cls(bundle.load(weights=weights, prefix=prefix, seed=seed,
                               threads=threads, communicator=communicator),
                   output=output)

    def __getstate__(self):
        """The module's state with the loaded layer replaced by its bundle
        (the compiled code is not picklable; the parameters are the
        module's own tensors)."""
        if getattr(self.layer, "_communicator", None) is not None:
            raise TypeError("a MoELayer sharded over a process group does "
                            "not pickle or copy (its experts are this "
                            "rank's)")
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

    def _forward_device(self, x):
        """The pass on x's device memory (an sm_90a layer), on the current
        stream of x's device: outputs from PyTorch's caching allocator,
        nothing through the host, no host wait."""
        if self.layer.target != "sm_90a":
            raise ValueError("x is on %s, but the layer's bundle is for the "
                             "%s target (compile it with target='sm_90a', "
                             "or pass CPU tensors)"
                             % (x.device, self.layer.target))
        x_dtype, y_dtype = self.layer.device_dtypes
        flat = x.to(_TORCH_NAMES[x_dtype]).contiguous()
        tokens = flat.shape[0]
        y = torch.empty((tokens, self._hidden), dtype=_TORCH_NAMES[y_dtype],
                        device=x.device)
        ids = torch.empty((tokens, self._top_k), dtype=torch.int32,
                          device=x.device)
        weights = torch.empty((tokens, self._top_k), dtype=torch.float32,
                              device=x.device)
        # (A CPU x is refused by forward_into, naming what it takes.)
        stream = torch.cuda.current_stream(x.device) if x.is_cuda else 0
        self.layer.forward_into(flat, y, ids, weights, stream=stream)
        return y.float(), ids, weights

    def _backward_device(self, x, dy, params):
        """The backward pass on x's device memory (an sm_90a layer): dL/dx
        and the trained parameters' gradients in torch's caching
        allocator, nothing through the host, no host wait."""
        if self.layer.target != "sm_90a":
            raise ValueError("x is on %s, but the layer's bundle is for the "
                             "%s target (compile it with target='sm_90a', "
                             "or pass CPU tensors)"
                             % (x.device, self.layer.target))
        x_dtype = _TORCH_NAMES[self.layer.device_dtypes[0]]
        flat = x.to(x_dtype).contiguous()
        f32 = dict(dtype=torch.float32, device=x.device)
        grads = {"x": torch.empty(flat.shape, **f32)}
        for i in self._trained_index:
            grads[self._roles[i]] = torch.empty(params[i].shape, **f32)
        self.layer.backward_into(
            flat, dy.to(torch.float32).contiguous(), grads,
            stream=torch.cuda.current_stream(x.device))
        out = [grads["x"].to(x.dtype)]
        for i in self._trained_index:
            out.append(grads[self._roles[i]].to(device=params[i].device,
                                                 dtype=params[i].dtype))
        return out

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
                if tensor.device.type != "cpu" and \
                        self.layer.target != "sm_90a":
                    raise ValueError(
                        "parameter '%s' is on %s; the host target runs on "
                        "CPU tensors" % (role, tensor.device))
                # An sm_90a layer's parameters on the GPU are read back
                # once when they change (the layer uploads its copy).
                self.layer._core.set_parameter(
                    role, tensor.detach().cpu().contiguous())
                self._seen[role] = stamp

    def forward(self, x):
        hidden = self._hidden
        if not isinstance(x, torch.Tensor):
            raise TypeError("x must be a torch.Tensor, got %s"
                            % type(x).__name__)
        if x.dim() < 1 or x.shape[-1] != hidden:
            raise ValueError("x has shape %s, expected [..., %d] (float32, "
                             "bfloat16 or float16: a CPU tensor, or a CUDA "
                             "tensor for an sm_90a layer)"
                             % (list(x.shape), hidden))
        flat = x.reshape(-1, hidden).contiguous()
        params = [getattr(self, role) for role in self._roles]
        run = torch.ops.moe_compiler.layer_forward
        # Batches beyond the bundle's capacity in pieces of at most
        # max_tokens tokens; the ranks of a sharded layer agree on the
        # number of pieces (each piece is one exchange on every rank).
        cap = self._max_tokens
        pieces = max(1, -(-flat.shape[0] // cap))
        communicator = getattr(self.layer, "_communicator", None)
        if communicator is not None:
            import torch.distributed as dist
            most = torch.tensor([pieces])
            dist.all_reduce(most, op=dist.ReduceOp.MAX,
                            group=communicator.group)
            pieces = int(most)
        if pieces == 1:
            y, ids, weights = run(flat, params, self._handle)
        else:
            parts = [run(flat[i * cap:(i + 1) * cap], params, self._handle)
                     for i in range(pieces)]
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


def moe(x, weights, config, prefix="", dtype=None, target=None):
    """The MoE layer of `config` on x [..., hidden] with `weights`, for
    serving code that holds the weights itself: y, x's shape and dtype.

    weights: a state dict (name -> tensor) under the model's checkpoint
        names; `prefix` selects the layer's ("model.layers.3.mlp.").
    config: as moe_compiler.compile takes it (a path, a dict or a
        transformers config).
    dtype: the compute dtype ("f32", "bf16", "f16", "fp8"; None: x's).
    target: "host" or "sm_90a" (None: sm_90a for a CUDA x, which then
        runs on device memory, else host).

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
    if target is None:
        target = "sm_90a" if x.is_cuda else "host"
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

# The runtime's dtype names -> torch dtypes, for device buffers.
_TORCH_NAMES = {"f32": torch.float32, "bf16": torch.bfloat16,
                "f16": torch.float16, "i32": torch.int32}

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


def replace_moe_blocks(model, target=None, dtype=None, train=None,
                       threads=None, cache=True, max_tokens=4096,
                       process_group=None):
    """Swaps every MoE block of a transformers model (a family the importer
    supports) for a compiled MoELayer holding the block's weights, in place.

    The layer is compiled once from model.config, in the model's dtype
    unless `dtype` says otherwise ("f32", "bf16", "f16", "fp8"), for
    `target` (None: "sm_90a" for a model on a GPU, whose layers then run
    on its CUDA tensors, else "host"); train (default: whether the model
    is in training mode) also compiles the backward pass (on sm_90a its
    inputs and gradients go through the host). A forward pass of more than max_tokens tokens runs in
    pieces. Each block removed is kept, its tensors moved to the meta
    device, for restore_moe_blocks. model.state_dict() and
    load_state_dict() name the layers' tensors as transformers names its
    blocks'. process_group shards each layer's experts over the group's
    ranks, as MoELayer.from_config does (every rank holds the whole model
    and keeps its experts; the state dict then holds the layer's roles,
    this rank's experts). Returns the module paths replaced.
    """
    config = getattr(model, "config", None)
    if config is None:
        raise TypeError("model must be a transformers model (it has no "
                        ".config)")
    if train is None:
        train = model.training
    first = next(model.parameters(), None)
    if dtype is None:
        dtype = _DTYPES.get(first.dtype) if first is not None else None
    if target is None:
        target = "sm_90a" if first is not None and first.is_cuda else "host"
    ep = 1
    if process_group is not None:
        ep = _group_size(process_group, _config_experts(config))
    bundle = _compile(config, target=target, dtype=dtype, train=train,
                      max_tokens=max_tokens, cache=cache, ep=ep)
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
    # model.state_dict() and load_state_dict() under transformers' names.
    if not getattr(model, "_moe_compiler_hooks", False):
        model.register_state_dict_post_hook(_state_dict_hook)
        model.register_load_state_dict_pre_hook(_load_state_dict_hook)
        model._moe_compiler_hooks = True
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
        layer = bundle.load(weights=state, prefix=prefix, threads=threads,
                            communicator=_GroupCommunicator(process_group)
                            if process_group is not None else None)
        # Mimic the block's output: a tensor, or a pair whose second part
        # the decoder layer discards (GPT-OSS, Llama 4).
        held = next(block.parameters())
        with torch.no_grad():
            probe_x = torch.zeros(1, 1, layer.hidden_size, dtype=held.dtype,
                                  device=held.device)
            out = block(probe_x)
        output = "pair" if isinstance(out, tuple) else "tensor"
        new = MoELayer(layer, output=output,
                       param_dtype=held.dtype).to(held.device)
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


def _is_fp8_weight(module, role):
    """Whether the layer holds `role` as e4m3 codes (an FP8 layer's expert
    weight, whose block scales are role[:-7] + "_scale")."""
    return module._dtypes.get(role) == "f8E4M3FN"


def _holds_codes(module, role):
    """Whether the module holds `role` as e4m3 codes (an FP8 weight it
    does not train; a trained one is a float master)."""
    return _is_fp8_weight(module, role) and \
        role not in getattr(module, "_masters", ())


def _fp8_dequantize(codes, scales):
    """Float values of e4m3 `codes` [..., rows, cols] (uint8) with a scale
    per 128x128 block [..., ceil(rows/128), ceil(cols/128)]: code * scale,
    as the layer quantized them."""
    values = codes.view(torch.float8_e4m3fn).float()
    rows, cols = values.shape[-2:]
    scales = scales.reshape(values.shape[:-2] + (-1, (cols + 127) // 128))
    scales = scales.repeat_interleave(128, -2)[..., :rows, :]
    return values * scales.repeat_interleave(128, -1)[..., :cols]


def _layout_roles(module):
    """The roles a transformers block's tensors map onto: every one but
    an FP8 layer's block scales (which go with their weights)."""
    return [r for r in module._roles
            if not (r.endswith("_scale") and
                    _is_fp8_weight(module, r[:-6] + "_weight"))]


def _block_layout(model, path, block, module, what):
    """Where each element of the layer's roles (concatenated in
    _layout_roles order) is in transformers' block (its state_dict
    tensors concatenated): an int64 index per role element, and the
    block's (name, shape, dtype)s. Found by passing element indices both
    ways to the checkpoint's names: transformers' conversion from its
    block to the checkpoint (the one save_pretrained applies) and the
    layer's from its roles. Transient memory: 8 bytes per element."""
    state = block.state_dict()
    entries = [(n, tuple(t.shape), t.dtype) for n, t in state.items()]
    total = 0
    block_ids = {}
    for name, shape, _ in entries:
        count = 1
        for d in shape:
            count *= d
        block_ids["%s.%s" % (path, name)] = torch.arange(
            total, total + count, dtype=torch.int64).reshape(shape)
        total += count
    try:
        from transformers.core_model_loading import revert_weight_conversion
        block_ids = revert_weight_conversion(model, block_ids)
    except ImportError:  # transformers 4: names are the checkpoint's
        pass
    roles, offset = {}, 0
    for role in _layout_roles(module):
        tensor = getattr(module, role)
        roles[role] = torch.arange(offset, offset + tensor.numel(),
                                   dtype=torch.int64).reshape(tensor.shape)
        offset += tensor.numel()
    role_ids = module.layer.checkpoint_names(roles)
    where = torch.full((offset,), -1, dtype=torch.int64)
    for full, index in block_ids.items():
        rel = re.sub(r"^.*?layers\.\d+\.[A-Za-z_]+\.", "", full)
        if rel not in role_ids:
            raise ValueError("%s: the layer has no tensor '%s' that "
                             "transformers' block '%s' saves as '%s'"
                             % (what, rel, path, full))
        ours = torch.from_numpy(role_ids[rel]).reshape(-1)
        index = index.reshape(-1)
        if ours.numel() != index.numel():
            raise ValueError("%s: '%s' has %d elements, transformers' block "
                             "saves %d" % (what, rel, ours.numel(),
                                           index.numel()))
        where[ours] = index
    if offset != total or bool((where < 0).any()) or \
            bool((torch.bincount(where.clamp(min=0), minlength=total) != 1)
                 .any()):
        raise ValueError("%s: transformers' conversion of block '%s' is not "
                         "a rearrangement of its tensors (elements left "
                         "unset)" % (what, path))
    return where, entries


def _role_values(module):
    """The layer's values by role (_layout_roles order), float32 and flat:
    the module's tensors (the masters), an FP8 weight dequantized."""
    parts = []
    for role in _layout_roles(module):
        tensor = getattr(module, role).detach()
        if _holds_codes(module, role):
            tensor = _fp8_dequantize(tensor, getattr(
                module, role[:-7] + "_scale").detach())
        parts.append(tensor.reshape(-1).float())
    return torch.cat(parts) if parts else torch.empty(0)


def _block_state(model, path, module, what):
    """The layer's tensors as transformers' block (the one it replaced)
    holds them: name -> tensor, in the block's dtypes."""
    block, _ = module._original
    where, entries = _block_layout(model, path, block, module, what)
    flat = torch.empty(where.numel(), dtype=torch.float32)
    flat[where] = _role_values(module)
    out, offset = {}, 0
    for name, shape, dtype in entries:
        count = flat.new_empty(shape).numel()
        out[name] = flat[offset:offset + count].reshape(shape).to(dtype)
        offset += count
    return out


def _role_state(model, path, module, values, what):
    """The roles' tensors (name -> tensor, as the module holds them) from
    `values`, transformers' block's tensors by its names: an FP8 weight
    quantized by the layer (its codes and block scales)."""
    block, _ = module._original
    where, entries = _block_layout(model, path, block, module, what)
    flat = torch.cat([values[n].detach().reshape(-1).float().cpu()
                      for n, _, _ in entries])[where]
    out, offset = {}, 0
    for role in _layout_roles(module):
        current = getattr(module, role)
        value = flat[offset:offset + current.numel()].reshape(current.shape)
        offset += current.numel()
        if _holds_codes(module, role):
            scale = role[:-7] + "_scale"
            module.layer.set_parameter(role, value)
            out[role] = torch.from_numpy(module.layer._core.parameter(role))
            out[scale] = torch.from_numpy(module.layer._core.parameter(scale))
            module._seen[role] = module._seen[scale] = None
        else:
            out[role] = value.to(current.dtype)
    return out


def _replaced(model, sharded=False):
    """(path, MoELayer) of each block replace_moe_blocks swapped in `model`
    (with `sharded`, those sharded over a process group too)."""
    return [(path, m) for path, m in model.named_modules()
            if isinstance(m, MoELayer) and
            getattr(m, "_original", None) is not None and
            (sharded or getattr(m.layer, "_communicator", None) is None)]


def _state_dict_hook(model, state_dict, prefix, local_metadata):
    """model.state_dict() names a replaced block's tensors as transformers
    does (its block's names, layout and dtype), not by the layer's roles,
    so that save_pretrained writes a checkpoint any transformers loads."""
    for path, module in _replaced(model):
        if not any(prefix + path + "." + role in state_dict
                   for role in module._roles):
            continue
        for role in module._roles:
            state_dict.pop(prefix + path + "." + role, None)
        for name, value in _block_state(model, path, module,
                                        "state_dict").items():
            state_dict[prefix + path + "." + name] = value


def _load_state_dict_hook(model, state_dict, prefix, local_metadata, strict,
                          missing_keys, unexpected_keys, error_msgs):
    """model.load_state_dict() takes a replaced block's tensors under
    transformers' names (a state dict of the model before or after
    replace_moe_blocks), or under the layer's roles."""
    for path, module in _replaced(model):
        block, _ = module._original
        names = list(block.state_dict())
        keys = [prefix + path + "." + n for n in names]
        present = [k for k in keys if k in state_dict]
        if not present:
            continue
        if len(present) != len(keys):
            error_msgs.append(
                "moe_compiler: the state dict holds only some of the "
                "tensors of block '%s' (missing: %s)"
                % (prefix + path, ", ".join(k for k in keys
                                            if k not in state_dict)))
            continue
        values = {n: state_dict.pop(k) for n, k in zip(names, keys)}
        try:
            roles = _role_state(model, path, module, values,
                                "load_state_dict")
        except (ValueError, RuntimeError) as e:
            error_msgs.append(str(e))
            continue
        for role, value in roles.items():
            state_dict[prefix + path + "." + role] = value


def restore_moe_blocks(model):
    """Puts transformers' own MoE blocks back in place of the MoELayers that
    replace_moe_blocks put in `model`, holding the layers' current
    (trained) weights in the block's dtype, so that save_pretrained writes
    a checkpoint from_pretrained loads (with or without the compiler).
    Returns the module paths restored."""
    restored = []
    for path, module in _replaced(model, sharded=True):
        if getattr(module.layer, "_communicator", None) is not None:
            raise ValueError("restore_moe_blocks: the layer at '%s' is "
                             "sharded over a process group (this rank holds "
                             "only its experts)" % path)
        block, extra = module._original
        values = _block_state(model, path, module, "restore_moe_blocks")
        device = next(itertools.chain(module.parameters(),
                                      module.buffers()),
                      torch.empty(0)).device
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
