#!/usr/bin/env python3
"""Independent reference for the host-target integration tests.

Written from the model families' published definitions (the Hugging Face
modeling code of DeepSeek-V3/V2, Mixtral, Qwen2/Qwen3-MoE, GPT-OSS and the
other families below), in float64
numpy, reading config.json itself. It shares no code with the compiler or the
runtime: its safetensors reader and writer are its own, too.

  reference.py gen   --config C --tokens T --seed S --weights W --inputs X
                     [--prefix P] [--dtype f32|bf16] [--case NAME] [--mxfp4]
                     [--fp8]
  reference.py check --config C --weights W --inputs X --outputs Y
                     [--prefix P] [--tol TOL] [--fp8]

Cases for gen: random (default), ties (several experts with identical router
rows), one_expert (every token prefers expert 1 by a wide margin).
--mxfp4 (GPT-OSS) writes the experts' matrices as MXFP4 blocks and scales.
--fp8 writes the expert and shared matrices as e4m3 codes with 128 x 128
block scales (NAME_scale_inv), as DeepSeek-V3 publishes them; check --fp8
computes the layer with FP8 experts (see fp8_forward).
"""
import argparse
import json
import struct
import sys

import numpy as np

# --------------------------------------------------------------------------
# safetensors
# --------------------------------------------------------------------------
DTYPES = {"F32": np.float32, "F16": np.float16, "I32": np.int32, "I64": np.int64,
          "U8": np.uint8, "F8_E4M3": np.uint8}


def bf16_to_f32(raw):
    return (raw.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16_bits(values):
    bits = values.astype(np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    base = 8 + n
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        raw = data[base + begin : base + end]
        if entry["dtype"] == "BF16":
            array = bf16_to_f32(np.frombuffer(raw, dtype=np.uint16))
        else:
            array = np.frombuffer(raw, dtype=DTYPES[entry["dtype"]])
        tensors[name] = array.reshape(entry["shape"])
    return tensors


def write_safetensors(path, tensors, bf16=False, fp8=()):
    header, chunks, offset = {}, [], 0
    for name in sorted(tensors):
        array = np.ascontiguousarray(tensors[name])
        if array.dtype == np.float32 and bf16 and not name.endswith("_scale_inv"):
            raw, dtype = f32_to_bf16_bits(array).tobytes(), "BF16"
        else:
            dtype = {np.dtype(np.float32): "F32", np.dtype(np.int32): "I32",
                     np.dtype(np.uint8): "U8"}[array.dtype]
            # e4m3 codes are uint8 arrays whose name says what they are.
            if name in fp8:
                dtype = "F8_E4M3"
            raw = array.tobytes()
        header[name] = {"dtype": dtype, "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))


# --------------------------------------------------------------------------
# The families, from their definitions
# --------------------------------------------------------------------------
class Config:
    def __init__(self, path):
        with open(path) as f:
            c = json.load(f)
        # A multimodal wrapper (Llama 4) keeps the language model's config
        # in text_config.
        c = c.get("text_config", c)
        self.type = c["model_type"]
        self.hidden = c["d_model"] if self.type == "dbrx" else c["hidden_size"]
        k = c.get("moe_topk", c.get("num_experts_per_tok"))
        # Hunyuan writes one top-k per layer; the layers must agree.
        self.k = k[0] if isinstance(k, list) else k
        self.shared_ffn = 0
        self.shared_gate = False
        self.bias = False
        self.scale_input = False
        if self.type.startswith("deepseek"):
            self.experts = c["n_routed_experts"]
            self.ffn = c["moe_intermediate_size"]
            self.groups = c.get("n_group", 1)
            self.topk_groups = c.get("topk_group", 1)
            self.norm = c.get("norm_topk_prob", False)
            self.scale = c.get("routed_scaling_factor", 1.0)
            self.shared_ffn = c.get("n_shared_experts", 0) * self.ffn
            self.method = c.get("topk_method", "noaux_tc" if self.type == "deepseek_v3" else "greedy")
            self.bias = self.type == "deepseek_v3"
        elif self.type == "hunyuan_v1_moe":
            # transformers 5: experts and the one shared MLP are
            # intermediate_size wide; softmax, top-k, renormalized.
            self.experts = c["num_experts"]
            self.ffn = c["intermediate_size"]
            self.shared_ffn = self.ffn
            self.norm = True
        elif self.type == "dbrx":
            # Softmax, top-k, divided by their sum (p = 1) or not at all.
            ffn = c.get("ffn_config", {})
            self.experts = ffn.get("moe_num_experts", 4)
            self.k = ffn.get("moe_top_k", 1)
            self.ffn = ffn.get("ffn_hidden_size", 3584)
            self.norm = ffn.get("moe_normalize_expert_weights", 1.0) is not None
        elif self.type == "llama4_text":
            # The sigmoids of the top-k logits (not renormalized) multiply
            # the token before its experts; a shared MLP as wide as one.
            self.experts = c["num_local_experts"]
            self.ffn = c["intermediate_size"]
            self.shared_ffn = self.ffn
            self.scale_input = True
        elif self.type == "gpt_oss":
            # Softmax over the top-k biased logits; experts with biases
            # and the clamped SwiGLU.
            self.experts = c["num_local_experts"]
            self.ffn = c["intermediate_size"]
            self.alpha = c.get("swiglu_alpha", 1.702)
            self.limit = c.get("swiglu_limit", 7.0)
        elif self.type in ("mixtral", "granitemoe", "phimoe", "jetmoe"):
            self.experts = c["num_local_experts"]
            self.ffn = c["intermediate_size"]
            self.jitter = c.get("router_jitter_noise", 0.01)
        else:  # qwen2_moe, qwen3_moe
            self.experts = c["num_experts"]
            self.ffn = c["moe_intermediate_size"]
            self.norm = c.get("norm_topk_prob", False)
            if self.type == "qwen2_moe":
                self.shared_ffn = c.get("shared_expert_intermediate_size", 0)
                self.shared_gate = self.shared_ffn > 0

    def router_name(self):
        return {"granitemoe": "router.layer.weight",
                "jetmoe": "router.layer.weight",
                "hunyuan_v1_moe": "gate.wg.weight",
                "llama4_text": "router.weight",
                "gpt_oss": "router.weight",
                "dbrx": "router.layer.weight"}.get(self.type, "gate.weight")

    def expert_tensors(self, get, e):
        """Expert e's (gate [F, H], up [F, H], down [H, F]); GraniteMoE keeps
        every expert's gate and up in input_linear [E, 2F, H] (gate first)
        and the down projections in output_linear [E, H, F]; Llama 4 keeps
        them as (in, out) matrices: gate_up_proj [E, H, 2F] (gate first) and
        down_proj [E, F, H]."""
        if self.type == "dbrx":
            # Every expert's [F, H] matrices stacked as rows: w1 (gate), v1
            # (up) and w2, the down projection as (in, out).
            e_f_h = lambda name: get(name).reshape(self.experts, self.ffn, self.hidden)[e]
            return (e_f_h("experts.mlp.w1"), e_f_h("experts.mlp.v1"),
                    e_f_h("experts.mlp.w2").T)
        if self.type == "llama4_text":
            gate_up = get("experts.gate_up_proj")[e]
            return (gate_up[:, :self.ffn].T, gate_up[:, self.ffn:].T,
                    get("experts.down_proj")[e].T)
        if self.type == "gpt_oss":
            # Columns of gate_up_proj [E, H, 2F] alternate gate and up.
            gate_up = get("experts.gate_up_proj")[e]
            return gate_up[:, 0::2].T, gate_up[:, 1::2].T, get("experts.down_proj")[e].T
        if self.type in ("granitemoe", "jetmoe"):
            gate_up = get("input_linear.weight")[e]
            return gate_up[:self.ffn], gate_up[self.ffn:], get("output_linear.weight")[e]
        (eg, eu, ed), _ = self.names()
        return get(eg.format(e)), get(eu.format(e)), get(ed.format(e))

    def names(self):
        """Checkpoint names: router, bias, per-expert (gate, up, down), shared."""
        if self.type in ("mixtral", "phimoe"):
            expert = ("experts.{}.w1.weight", "experts.{}.w3.weight", "experts.{}.w2.weight")
        else:
            expert = tuple("experts.{}.%s_proj.weight" % p for p in ("gate", "up", "down"))
        shared_prefix = {"qwen2_moe": "shared_expert.",
                         "llama4_text": "shared_expert.",
                         "hunyuan_v1_moe": "shared_mlp."}.get(self.type, "shared_experts.")
        shared = tuple(shared_prefix + "%s_proj.weight" % p for p in ("gate", "up", "down"))
        return expert, shared


def sigmoid(v):
    return 1.0 / (1.0 + np.exp(-v))


def softmax(v):
    e = np.exp(v - v.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def top_indices(values, k):
    """Indices of the k largest, best first; ties go to the lower index."""
    return np.argsort(-values, kind="stable")[:k]


def sparsemixer(s, jitter):
    """Phi-3.5-MoE's two picks at inference: the best logit m1, then the
    best of the others m2; pick i weighs 1 / sum exp(s - m_i) over the
    logits still free within the margin (m_i - s) / max(|s|, m_i) <=
    2 jitter."""
    free = np.ones(len(s), dtype=bool)
    chosen, weights = [], []
    for _ in range(2):
        i = int(top_indices(np.where(free, s, -np.inf), 1)[0])
        m = s[i]
        with np.errstate(divide="ignore", invalid="ignore"):
            outside = (m - s) / np.maximum(np.abs(s), m) > 2 * jitter
        keep = free & ~outside
        weights.append(1.0 / np.exp(s[keep] - m).sum())
        chosen.append(i)
        free[i] = False
    return np.array(chosen), np.array(weights)


def route(cfg, logits, bias):
    """Expert ids [T, k] and weights [T, k] for router logits [T, E]."""
    tokens = logits.shape[0]
    ids = np.zeros((tokens, cfg.k), dtype=np.int64)
    weights = np.zeros((tokens, cfg.k))
    for t in range(tokens):
        if cfg.type == "deepseek_v3":
            scores = sigmoid(logits[t])
            choice = scores + bias
            per = cfg.experts // cfg.groups
            grouped = choice.reshape(cfg.groups, per)
            group_score = np.sort(grouped, axis=-1)[:, -2:].sum(axis=-1)
            kept = top_indices(group_score, cfg.topk_groups)
            masked = np.full(cfg.experts, -np.inf)
            for g in kept:
                masked[g * per:(g + 1) * per] = choice[g * per:(g + 1) * per]
            chosen = top_indices(masked, cfg.k)
            w = scores[chosen]
            if cfg.k > 1 and cfg.norm:
                w = w / (w.sum() + 1e-20)
            w = w * cfg.scale
        elif cfg.type == "deepseek_v2":
            scores = softmax(logits[t])
            if cfg.method == "group_limited_greedy":
                per = cfg.experts // cfg.groups
                group_score = scores.reshape(cfg.groups, per).max(axis=-1)
                kept = top_indices(group_score, cfg.topk_groups)
                masked = np.zeros(cfg.experts)
                for g in kept:
                    masked[g * per:(g + 1) * per] = scores[g * per:(g + 1) * per]
            else:
                masked = scores
            chosen = top_indices(masked, cfg.k)
            w = scores[chosen]
            if cfg.k > 1 and cfg.norm:
                w = w / (w.sum() + 1e-20)
            else:
                w = w * cfg.scale
        elif cfg.type == "phimoe":
            chosen, w = sparsemixer(logits[t], cfg.jitter)
        elif cfg.type == "llama4_text":
            chosen = top_indices(logits[t], cfg.k)
            w = sigmoid(logits[t][chosen])
        elif cfg.type == "gpt_oss":
            chosen = top_indices(logits[t], cfg.k)
            w = softmax(logits[t][chosen])
        else:  # mixtral, qwen2_moe, qwen3_moe
            scores = softmax(logits[t])
            chosen = top_indices(scores, cfg.k)
            w = scores[chosen]
            if cfg.type in ("mixtral", "granitemoe", "jetmoe") or cfg.norm:
                w = w / w.sum()
        ids[t], weights[t] = chosen, w
    return ids, weights


def silu(v):
    return v * sigmoid(v)


def ffn(x, gate, up, down):
    return (silu(x @ gate.T) * (x @ up.T)) @ down.T


def gpt_oss_expert(cfg, get, e, x):
    """GPT-OSS's expert e: biased projections, interleaved gate and up
    columns, the clamped SwiGLU (up + 1) * g * sigmoid(alpha g)."""
    gate_up = x @ get("experts.gate_up_proj")[e] + get("experts.gate_up_proj_bias")[e]
    gate = np.minimum(gate_up[..., 0::2], cfg.limit)
    up = np.clip(gate_up[..., 1::2], -cfg.limit, cfg.limit)
    act = (up + 1) * gate * sigmoid(cfg.alpha * gate)
    return act @ get("experts.down_proj")[e] + get("experts.down_proj_bias")[e]


E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                 -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])


def from_mxfp4(blocks, scales):
    """OCP MXFP4: [..., G, 16] bytes of two e2m1 codes (low nibble first)
    and [..., G] e8m0 scales (2^(s - 127)) -> [..., G * 32] float64."""
    codes = np.stack([blocks & 0xF, blocks >> 4], axis=-1).reshape(*blocks.shape[:-1], 32)
    values = E2M1[codes] * np.exp2(scales.astype(np.float64) - 127)[..., None]
    return values.reshape(*scales.shape[:-1], scales.shape[-1] * 32)


# --------------------------------------------------------------------------
# FP8 as DeepSeek-V3 computes it (OCP e4m3fn, 128 x 128 weight blocks,
# activations per token per 128 channels)
# --------------------------------------------------------------------------
def e4m3_values():
    """The value of every e4m3fn code: 1 sign bit, 4 exponent bits (bias
    7), 3 mantissa bits; exponent 0 is subnormal (m / 8 * 2^-6); no
    infinities, S.1111.111 is NaN."""
    values = np.empty(256)
    for code in range(256):
        sign = -1.0 if code & 0x80 else 1.0
        e, m = (code >> 3) & 0xF, code & 0x7
        if e == 0xF and m == 0x7:
            values[code] = np.nan
        elif e == 0:
            values[code] = sign * m / 8 * 2.0 ** -6
        else:
            values[code] = sign * (1 + m / 8) * 2.0 ** (e - 7)
    return values


E4M3 = e4m3_values()
# Codes 0..126 are the non-negative finite values in increasing order.
E4M3_GRID = E4M3[:127]


def e4m3_codes(v):
    """The code of the e4m3 value nearest to each of v (ties to the even
    code), saturated at +-448."""
    v = np.asarray(v, dtype=np.float64)
    a = np.minimum(np.abs(v), 448.0)
    hi = np.clip(np.searchsorted(E4M3_GRID, a), 0, 126)
    lo = np.maximum(hi - 1, 0)
    d_lo, d_hi = a - E4M3_GRID[lo], E4M3_GRID[hi] - a
    code = np.where(d_lo < d_hi, lo, np.where(d_hi < d_lo, hi,
                                               np.where(lo % 2 == 0, lo, hi)))
    return (code | np.where(np.signbit(v), 0x80, 0)).astype(np.uint8)


def quantize_weight(w):
    """An (out, in) matrix as e4m3 codes and [ceil(out/128), ceil(in/128)]
    f32 scales: a block's largest magnitude a maps to 448 (w * (448 / a)
    in float32), its scale is a / 448; a block of zeros gets scale 1."""
    w = np.asarray(w, dtype=np.float32)
    rows, cols = w.shape
    codes = np.zeros(w.shape, dtype=np.uint8)
    scales = np.ones(((rows + 127) // 128, (cols + 127) // 128), dtype=np.float32)
    for r in range(0, rows, 128):
        for c in range(0, cols, 128):
            block = w[r:r + 128, c:c + 128]
            amax = np.float32(np.abs(block).max())
            if amax < np.finfo(np.float32).tiny:
                codes[r:r + 128, c:c + 128] = e4m3_codes(block)
                continue
            codes[r:r + 128, c:c + 128] = e4m3_codes(block * (np.float32(448) / amax))
            scales[r // 128, c // 128] = amax / np.float32(448)
    return codes, scales


def dequantize_weight(codes, scales):
    rows, cols = codes.shape
    full = np.repeat(np.repeat(scales.astype(np.float64), 128, 0), 128, 1)
    return E4M3[codes] * full[:rows, :cols]


def tile_codes(x, axis=1):
    """The recipe's tiles of x [R, C]: 1 x 128 (axis 1, per row per 128
    columns) or 128 x 1 (axis 0, per column per 128 rows). Returns the
    e4m3 codes (x's shape) and the f32 scales a / 448, with a the tile's
    largest magnitude (at least 1e-4): [R, ceil(C / 128)] or
    [ceil(R / 128), C]."""
    x = np.asarray(x, dtype=np.float32)
    codes = np.empty(x.shape, np.uint8)
    blocks = -(-x.shape[axis] // 128)
    shape = list(x.shape)
    shape[axis] = blocks
    scales = np.empty(shape, np.float32)
    for b in range(blocks):
        at = [slice(None)] * 2
        at[axis] = slice(128 * b, 128 * b + 128)
        tile = x[tuple(at)]
        amax = np.maximum(np.abs(tile).max(axis=axis, keepdims=True),
                          np.float32(1e-4))
        codes[tuple(at)] = e4m3_codes(tile * (np.float32(448) / amax))
        at[axis] = slice(b, b + 1)
        scales[tuple(at)] = amax / np.float32(448)
    return codes, scales


def quantize_rows(x):
    """Activations [T, K] quantized per token per 128 channels and
    dequantized, in float32: a = max(block max |x|, 1e-4), the values
    e4m3(x * (448 / a)) times a / 448."""
    x = np.asarray(x, dtype=np.float32)
    out = np.empty_like(x)
    for k in range(0, x.shape[-1], 128):
        block = x[..., k:k + 128]
        amax = np.maximum(np.abs(block).max(axis=-1, keepdims=True), np.float32(1e-4))
        q = E4M3[e4m3_codes(block * (np.float32(448) / amax))].astype(np.float32)
        out[..., k:k + 128] = q * (amax / np.float32(448))
    return out


def bf16(v):
    """Rounded to bfloat16 (to nearest even), as float64."""
    return bf16_to_f32(f32_to_bf16_bits(np.asarray(v, dtype=np.float32))).astype(np.float64)


def fp8_forward(cfg, tensors, prefix, x):
    """The layer with FP8 experts (--dtype fp8): bf16 activations, expert
    and shared weights e4m3 with 128 x 128 block scales (read as published,
    or quantized from float weights), each projection's input quantized per
    token per 128 channels; projections, the SwiGLU, the combined and the
    shared outputs and their sum are rounded to bf16 as a bf16 framework's
    modules round them."""
    if cfg.type in ("gpt_oss", "jetmoe") or cfg.shared_gate:
        raise SystemExit(f"reference.py: no FP8 reference for {cfg.type}")
    x = bf16(x)  # the layer takes its input in bf16
    dequantized = {}
    for name in tensors:
        if name + "_scale_inv" in tensors:
            dequantized[name] = dequantize_weight(tensors[name], tensors[name + "_scale_inv"])
    get = lambda name: dequantized.get(prefix + name, tensors[prefix + name].astype(np.float64))

    def weight(name_or_matrix, published):
        if published:
            return name_or_matrix
        return dequantize_weight(*quantize_weight(name_or_matrix))

    def project(a, w):
        return bf16(quantize_rows(a).astype(np.float64) @ w.T)

    def expert_ffn(a, gate, up, down):
        h = bf16(silu(project(a, gate)) * project(a, up))
        return project(h, down)

    logits = x @ get(cfg.router_name()).T
    bias = get("gate.e_score_correction_bias") if cfg.bias else None
    ids, weights = route(cfg, logits, bias)
    (eg, _, _), (sg, su, sd) = cfg.names()
    published = prefix + eg.format(0) in dequantized
    experts = {}
    y = np.zeros_like(x)
    for t in range(x.shape[0]):
        routed = np.zeros(x.shape[1])
        for j in range(cfg.k):
            e = int(ids[t, j])
            if e not in experts:
                experts[e] = [weight(m, published) for m in cfg.expert_tensors(get, e)]
            if cfg.scale_input:
                # Llama 4 multiplies two bf16 tensors: the weight rounds first.
                scaled = bf16(bf16(weights[t, j:j + 1])[0] * x[t])
                routed += expert_ffn(scaled[None], *experts[e])[0]
            else:
                routed += weights[t, j] * expert_ffn(x[t][None], *experts[e])[0]
        y[t] = bf16(routed)
    if cfg.shared_ffn:
        shared_published = prefix + sg in dequantized
        shared = expert_ffn(x, *[weight(get(n), shared_published) for n in (sg, su, sd)])
        y = bf16(y + shared)
    return y, ids, weights


def forward(cfg, tensors, prefix, x):
    tensors = dict(tensors)
    for name in [n for n in tensors if n.endswith("_blocks")]:
        # MXFP4 [E, R, C / 32, 16] is the (out, in) matrix: GPT-OSS's bf16
        # tensors are (in, out).
        base = name[:-len("_blocks")]
        tensors[base] = np.swapaxes(from_mxfp4(tensors[name], tensors[base + "_scales"]), -1, -2)
    get = lambda name: tensors[prefix + name].astype(np.float64)
    logits = x @ get(cfg.router_name()).T
    if cfg.type == "gpt_oss":
        logits = logits + get("router.bias")
    bias = get("gate.e_score_correction_bias") if cfg.bias else None
    ids, weights = route(cfg, logits, bias)
    _, (sg, su, sd) = cfg.names()
    y = np.zeros_like(x)
    for t in range(x.shape[0]):
        for j in range(cfg.k):
            if cfg.type == "gpt_oss":
                y[t] += weights[t, j] * gpt_oss_expert(cfg, get, ids[t, j], x[t])
                continue
            expert = cfg.expert_tensors(get, ids[t, j])
            if cfg.scale_input:
                y[t] += ffn(weights[t, j] * x[t], *expert)
            else:
                y[t] += weights[t, j] * ffn(x[t], *expert)
    if cfg.shared_ffn:
        shared = ffn(x, get(sg), get(su), get(sd))
        if cfg.shared_gate:
            shared = shared * sigmoid(x @ get("shared_expert_gate.weight").T)
        y += shared
    if cfg.type == "jetmoe":
        y += get("bias")  # JetMoE's bias on the block's output
    return y, ids, weights


# --------------------------------------------------------------------------
# Commands
# --------------------------------------------------------------------------
def generate(args):
    cfg = Config(args.config)
    rng = np.random.default_rng(args.seed)
    h, f, e = cfg.hidden, cfg.ffn, cfg.experts
    u = lambda shape, bound: rng.uniform(-bound, bound, size=shape).astype(np.float32)
    p = args.prefix
    tensors = {p + cfg.router_name(): u((e, h), 1.0 / np.sqrt(h))}
    if cfg.bias:
        tensors[p + "gate.e_score_correction_bias"] = u((e,), 0.1)
    (eg, eu, ed), (sg, su, sd) = cfg.names()
    if cfg.type == "dbrx":
        for name in ("experts.mlp.w1", "experts.mlp.v1"):
            tensors[p + name] = u((e * f, h), 1.0 / np.sqrt(h))
        tensors[p + "experts.mlp.w2"] = u((e * f, h), 1.0 / np.sqrt(f))
    elif cfg.type == "gpt_oss":
        # Wide enough that the clamp at the limit cuts some gate and up
        # values (above 7, the default) and leaves the others.
        tensors[p + "router.bias"] = u((e,), 0.5)
        tensors[p + "experts.gate_up_proj"] = u((e, h, 2 * f), 3.0 / np.sqrt(h))
        tensors[p + "experts.gate_up_proj_bias"] = u((e, 2 * f), 9.0)
        tensors[p + "experts.down_proj"] = u((e, f, h), 1.0 / np.sqrt(f))
        tensors[p + "experts.down_proj_bias"] = u((e, h), 3.0)
        if args.mxfp4:
            for name, columns in (("experts.gate_up_proj", h), ("experts.down_proj", f)):
                rows = tensors.pop(p + name).shape[2]
                groups = columns // 32
                tensors[p + name + "_blocks"] = rng.integers(
                    0, 256, size=(e, rows, groups, 16), dtype=np.uint8)
                # 2^-3 .. 2^-1: e2m1's 6 times that stays near the bf16 sizes.
                tensors[p + name + "_scales"] = rng.integers(
                    124, 127, size=(e, rows, groups), dtype=np.uint8)
    elif cfg.type == "llama4_text":
        tensors[p + "experts.gate_up_proj"] = u((e, h, 2 * f), 1.0 / np.sqrt(h))
        tensors[p + "experts.down_proj"] = u((e, f, h), 1.0 / np.sqrt(f))
    elif cfg.type in ("granitemoe", "jetmoe"):
        if cfg.type == "jetmoe":
            tensors[p + "bias"] = u((h,), 0.5)
        tensors[p + "input_linear.weight"] = u((e, 2 * f, h), 1.0 / np.sqrt(h))
        tensors[p + "output_linear.weight"] = u((e, h, f), 1.0 / np.sqrt(f))
    else:
        for i in range(e):
            tensors[p + eg.format(i)] = u((f, h), 1.0 / np.sqrt(h))
            tensors[p + eu.format(i)] = u((f, h), 1.0 / np.sqrt(h))
            tensors[p + ed.format(i)] = u((h, f), 1.0 / np.sqrt(f))
    if cfg.shared_ffn:
        s = cfg.shared_ffn
        tensors[p + sg] = u((s, h), 1.0 / np.sqrt(h))
        tensors[p + su] = u((s, h), 1.0 / np.sqrt(h))
        tensors[p + sd] = u((h, s), 1.0 / np.sqrt(s))
        if cfg.shared_gate:
            tensors[p + "shared_expert_gate.weight"] = u((1, h), 1.0 / np.sqrt(h))
    # Unrelated tensors of the checkpoint around the layer.
    tensors["model.embed_tokens.weight"] = u((4, h), 1.0)
    x = u((args.tokens, h), 1.0)
    router = tensors[p + cfg.router_name()]
    if args.case == "ties":
        # Experts 1, 2, 3 (and, with groups, a whole second group) score
        # exactly alike: the lower index must win.
        for i in (2, 3):
            router[i] = router[1]
        if cfg.type.startswith("deepseek") and cfg.groups > 1:
            per = e // cfg.groups
            router[per:2 * per] = router[0:per]
            if cfg.bias:
                b = tensors[p + "gate.e_score_correction_bias"]
                b[per:2 * per] = b[0:per]
    elif args.case == "one_expert":
        # Positive inputs and a strongly positive row 1: every token's best
        # expert is 1; with k = 1 the other experts get no token.
        x = np.abs(x)
        router[:] = -np.abs(router)
        router[1] = np.abs(router[1]) + 1.0
    fp8 = []
    if getattr(args, "fp8", False):
        # Published FP8 (DeepSeek-V3): each expert and shared matrix as
        # e4m3 codes with its 128 x 128 block scales.
        names = [eg.format(i) for i in range(e)] + [eu.format(i) for i in range(e)]
        names += [ed.format(i) for i in range(e)]
        names += [sg, su, sd] if cfg.shared_ffn else []
        for name in names:
            codes, scales = quantize_weight(tensors[p + name])
            tensors[p + name] = codes
            tensors[p + name + "_scale_inv"] = scales
            fp8.append(p + name)
    write_safetensors(args.weights, tensors, bf16=args.dtype == "bf16", fp8=fp8)
    write_safetensors(args.inputs, {"x": x}, bf16=args.dtype == "bf16")


def check(args):
    cfg = Config(args.config)
    tensors = read_safetensors(args.weights)
    x = read_safetensors(args.inputs)["x"].astype(np.float64)
    out = read_safetensors(args.outputs)
    y_ref, ids_ref, w_ref = (fp8_forward if getattr(args, "fp8", False) else forward)(cfg, tensors, args.prefix, x)
    y, ids, w = out["y"], out["topk_ids"], out["topk_weights"]
    problems = []
    if y.shape != y_ref.shape or ids.shape != ids_ref.shape:
        problems.append(f"shapes: y {y.shape} vs {y_ref.shape}, ids {ids.shape} vs {ids_ref.shape}")
    else:
        for t in range(x.shape[0]):
            if sorted(ids[t].tolist()) != sorted(ids_ref[t].tolist()):
                problems.append(f"token {t}: experts {ids[t].tolist()}, reference {ids_ref[t].tolist()}")
                continue
            order = {e: j for j, e in enumerate(ids_ref[t])}
            for j, e in enumerate(ids[t]):
                ref = w_ref[t, order[e]]
                if abs(w[t, j] - ref) > args.tol * (1 + abs(ref)):
                    problems.append(f"token {t}: weight of expert {e} is {w[t, j]}, reference {ref}")
        scale = 1.0 + np.abs(y_ref).max(initial=0.0)
        per_token = np.abs(y - y_ref).max(axis=1, initial=0.0) / scale
        err = per_token.max(initial=0.0)
        if getattr(args, "fp8", False):
            # A value the host's f32 sums and the reference's f64 ones round
            # to neighbouring bf16 values can then quantize to neighbouring
            # e4m3 codes: its token's output moves by up to 20x the
            # tolerance. A few such tokens are allowed; a wrong quantization
            # moves most tokens (ties not to even: half of them).
            off = per_token > args.tol
            allowed = max(1, x.shape[0] // 50)
            if off.sum() > allowed or err > 20 * args.tol:
                problems.append(
                    f"y: {off.sum()} of {x.shape[0]} tokens off by more than "
                    f"{args.tol} of max |y| (at most {allowed} may be, by up "
                    f"to {20 * args.tol:g}); max error {err:.3g}")
        elif err > args.tol:
            problems.append(f"y: max error {err:.3g} relative to max |y| exceeds {args.tol}")
    if problems:
        print("MISMATCH against the reference:\n  " + "\n  ".join(problems[:10]))
        return 1
    print(f"ok: {x.shape[0]} tokens of {cfg.type} match the reference "
          f"(tolerance {args.tol})")
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("gen")
    gen.add_argument("--config", required=True)
    gen.add_argument("--tokens", type=int, required=True)
    gen.add_argument("--seed", type=int, default=0)
    gen.add_argument("--weights", required=True)
    gen.add_argument("--inputs", required=True)
    gen.add_argument("--prefix", default="")
    gen.add_argument("--dtype", default="f32", choices=["f32", "bf16"])
    gen.add_argument("--case", default="random", choices=["random", "ties", "one_expert"])
    gen.add_argument("--mxfp4", action="store_true")
    gen.add_argument("--fp8", action="store_true",
                     help="write the expert and shared weights as e4m3 with block scales")
    chk = sub.add_parser("check")
    chk.add_argument("--config", required=True)
    chk.add_argument("--weights", required=True)
    chk.add_argument("--inputs", required=True)
    chk.add_argument("--outputs", required=True)
    chk.add_argument("--prefix", default="")
    chk.add_argument("--tol", type=float, default=2e-5)
    chk.add_argument("--fp8", action="store_true",
                     help="the layer's experts are FP8 (moe-compile --dtype fp8)")
    args = parser.parse_args()
    return generate(args) or 0 if args.command == "gen" else check(args)


if __name__ == "__main__":
    sys.exit(main())
