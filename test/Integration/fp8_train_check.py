#!/usr/bin/env python3
"""One FP8 training step of moe-train against a float64 model of the recipe.

Runs `moe-train --steps 1 --lr 0 --dump-grads` on an FP8 bundle (moe-compile
--dtype fp8 --train) and compares every dumped gradient with the same step
computed here in float64 from the recipe's definition (DeepSeek-V3, section
3.3; or per-tensor current scaling), not from the compiler's kernels:

- masters: the layer's e4m3 weights times their block scales; each step
  quantizes them again (per 128 x 128 block, or one scale per matrix);
- Fprop: each projection's input quantized per token per 128 channels
  (1 x 128), or per tensor (per tensor is per GEMM: one expert's rows);
- Dgrad: the output gradient quantized 1 x 128 (or per tensor) against the
  e4m3 weight;
- Wgrad: both operands quantized 128 x 1, per channel per 128 rows of one
  expert (tokens in ascending order), or per tensor;
- the router, the routing weights and the combine unquantized;
- tensors between the steps rounded to bf16, the layer's dtype (or, with
  --dtype f32, not rounded).

A tile whose largest magnitude is a (at least 1e-4) maps it to 448: values
e4m3(v * 448 / a) (nearest, ties to even), scale a / 448.

The comparison is per tensor, of the relative error ||got - want|| / ||want||.
In f32 only the sums' rounding separates the two (1e-6 or less). In bf16 a
value that rounds to the neighbouring bf16 value in one of them, when it
is the largest of a 128 x 1 tile, moves that tile's scale and so every
code of the tile: such tensors differ by up to 1e-2. With --plain the
model leaves out every quantization (training in the layer's dtype): the
same tolerance then fails, which shows that the check sees the recipe.

  fp8_train_check.py --config C --weights W --inputs X --bundle B
                     --moe-train P --work DIR [--recipe block|tensor]
                     [--dtype bf16|f32] [--tol TOL] [--plain]
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference  # noqa: E402
import train_grad_check  # noqa: E402
from reference import E4M3, e4m3_codes, sigmoid, silu, softmax  # noqa: E402

# The layer's dtype: bf16 rounds the tensors between the steps (--dtype
# fp8), f32 (an FP8 layer written in MLIR with f32 activations) leaves
# only the f32 sums, so that the model must match to their rounding.
bf16 = reference.bf16

F448 = np.float32(448)


def fake_quant(block_values, amax, floor=np.float32(2.0 ** -100)):
    """Values (f32) quantized with the scale of `amax` (at least `floor`:
    1e-4 for the forward activations, 2^-100 for the backward operands,
    which are gradients or meet them) and dequantized."""
    amax = np.maximum(np.asarray(amax, dtype=np.float32), floor)
    v = np.asarray(block_values, dtype=np.float32)
    q = E4M3[e4m3_codes(v * (F448 / amax))]
    return q * (amax / F448).astype(np.float64)


class Recipe:
    def __init__(self, kind, plain, requantized_rows=False):
        self.kind, self.plain = kind, plain
        # sm_90a keeps a projection's input as its Fprop codes (1 x 128)
        # and turns those values into Wgrad's 128 x 1 tiles, as DeepSeek-V3
        # cached its activations in FP8: the rows are quantized twice.
        self.requantized_rows = requantized_rows

    def rows(self, a, floor=np.float32(2.0 ** -100)):
        """1 x 128 tiles (or the whole tensor)."""
        if self.plain:
            return a
        a = np.asarray(a, dtype=np.float32)
        if self.kind == "tensor":
            return fake_quant(a, np.abs(a).max(initial=0.0), floor)
        out = np.empty(a.shape)
        for k in range(0, a.shape[1], 128):
            blk = a[:, k:k + 128]
            out[:, k:k + 128] = fake_quant(blk, np.abs(blk).max(axis=1, keepdims=True), floor)
        return out

    def activations(self, a):
        """The input of a forward projection."""
        return self.rows(a, np.float32(1e-4))

    def columns(self, a):
        """128 x 1 tiles of one expert's rows (or the whole tensor)."""
        if self.plain:
            return a
        a = np.asarray(a, dtype=np.float32)
        if self.kind == "tensor":
            return fake_quant(a, np.abs(a).max(initial=0.0))
        out = np.empty(a.shape)
        for r in range(0, a.shape[0], 128):
            blk = a[r:r + 128]
            out[r:r + 128] = fake_quant(blk, np.abs(blk).max(axis=0, keepdims=True))
        return out

    def weight(self, w):
        """A master matrix as the step's e4m3 codes represent it."""
        if self.plain:
            return w
        w = np.asarray(w, dtype=np.float32)
        if self.kind == "tensor":
            amax = np.float32(np.abs(w).max())
            if amax < np.finfo(np.float32).tiny:
                return E4M3[e4m3_codes(w)]
            return E4M3[e4m3_codes(w * (F448 / amax))] * np.float64(amax / F448)
        return reference.dequantize_weight(*reference.quantize_weight(w))


class Ffn:
    """One SwiGLU FFN on rows `a` (in expert order), forward and backward."""

    def __init__(self, recipe, a, gate, up, down):
        self.r, self.a = recipe, a
        self.w = [recipe.weight(m) for m in (gate, up, down)]
        qa = recipe.activations(a)
        self.g = bf16(qa @ self.w[0].T)
        self.u = bf16(qa @ self.w[1].T)
        self.h = bf16(silu(self.g) * self.u)
        self.out = bf16(recipe.activations(self.h) @ self.w[2].T)

    def backward(self, d_out):
        r = self.r
        d_out = bf16(d_out)
        dh = bf16(r.rows(d_out) @ self.w[2])
        g_down = r.columns(d_out).T @ r.columns(self.h)
        s = sigmoid(self.g)
        dg = bf16(dh * self.u * s * (1 + self.g * (1 - s)))
        du = bf16(dh * self.g * s)
        da = bf16(bf16(r.rows(dg) @ self.w[0]) + bf16(r.rows(du) @ self.w[1]))
        qa = r.columns(r.activations(self.a) if r.requantized_rows else self.a)
        return da, r.columns(dg).T @ qa, r.columns(du).T @ qa, g_down


def route_grad(cfg, logits, ids, d_weights):
    """d loss / d logits [T, E] for the routing weights' gradient [T, k]."""
    d_logits = np.zeros_like(logits)
    for t in range(logits.shape[0]):
        chosen, dw = ids[t], d_weights[t]
        if cfg.type == "deepseek_v3":
            s = sigmoid(logits[t])
            sel = s[chosen]
            if cfg.k > 1 and cfg.norm:
                total = sel.sum() + 1e-20
                ds = cfg.scale * (dw / total - (dw * sel).sum() / total ** 2)
            else:
                ds = cfg.scale * dw
            d_logits[t, chosen] = ds * s[chosen] * (1 - s[chosen])
        elif cfg.type in ("mixtral", "qwen2_moe", "qwen3_moe"):
            p = softmax(logits[t])
            sel = p[chosen]
            if cfg.type == "mixtral" or cfg.norm:
                total = sel.sum()
                dsel = dw / total - (dw * sel).sum() / total ** 2
            else:
                dsel = dw
            dp = np.zeros_like(p)
            dp[chosen] = dsel
            d_logits[t] = p * (dp - (p * dp).sum())
        else:
            sys.exit(f"fp8_train_check.py: no routing gradient for {cfg.type}")
    return d_logits


def step(cfg, tensors, x, target, recipe):
    """Gradients of one step, by checkpoint name (and "x")."""
    get = lambda n: tensors[n].astype(np.float64)
    x = bf16(x)
    wr = get(cfg.router_name())
    logits = x @ wr.T
    bias = get("gate.e_score_correction_bias") if cfg.bias else None
    ids, weights = reference.route(cfg, logits, bias)
    (eg, eu, ed), (sg, su, sd) = cfg.names()
    tokens, hidden = x.shape
    routed = np.zeros_like(x)
    experts = {}
    for e in range(cfg.experts):
        rows = [(t, j) for t in range(tokens) for j in range(cfg.k) if ids[t, j] == e]
        if not rows:
            continue
        ts = np.array([t for t, _ in rows])
        ffn = Ffn(recipe, x[ts], get(eg.format(e)), get(eu.format(e)), get(ed.format(e)))
        experts[e] = (rows, ffn)
        for i, (t, j) in enumerate(rows):
            routed[t] += weights[t, j] * ffn.out[i]
    y = bf16(routed)
    shared = None
    if cfg.shared_ffn:
        shared = Ffn(recipe, x, get(sg), get(su), get(sd))
        y = bf16(y + shared.out)
    count = tokens * hidden
    dy = bf16(2.0 * (y - target) / count)
    # Every trained tensor (the bias only steers selection; the weights
    # file also holds a tensor of another module).
    grads = {n: np.zeros(tensors[n].shape) for n in tensors
             if not n.endswith("e_score_correction_bias") and not n.startswith("model.")}
    dx = np.zeros_like(x)
    d_weights = np.zeros_like(weights)
    for e, (rows, ffn) in experts.items():
        d_out = np.stack([weights[t, j] * dy[t] for t, j in rows])
        for i, (t, j) in enumerate(rows):
            d_weights[t, j] = dy[t] @ ffn.out[i]
        da, g_gate, g_up, g_down = ffn.backward(d_out)
        grads[eg.format(e)], grads[eu.format(e)], grads[ed.format(e)] = g_gate, g_up, g_down
        for i, (t, _) in enumerate(rows):
            dx[t] += da[i]
    if shared is not None:
        da, grads[sg], grads[su], grads[sd] = shared.backward(dy)
        dx += da
    d_logits = route_grad(cfg, logits, ids, d_weights)
    grads[cfg.router_name()] = d_logits.T @ x
    grads["x"] = dx + d_logits @ wr
    return grads


def by_role(cfg, grads):
    """step()'s gradients of a layer with shared experts under the
    runtime's roles (experts stacked), and x's."""
    (eg, eu, ed), (sg, su, sd) = cfg.names()
    stacked = lambda name: np.stack(
        [grads[name.format(e)] for e in range(cfg.experts)])
    return {"x": grads["x"], "router_weight": grads[cfg.router_name()],
            "gate_weight": stacked(eg), "up_weight": stacked(eu),
            "down_weight": stacked(ed), "shared_gate_weight": grads[sg],
            "shared_up_weight": grads[su], "shared_down_weight": grads[sd]}


def main():
    ap = argparse.ArgumentParser()
    for name in ("config", "weights", "inputs", "bundle", "moe-train", "work"):
        ap.add_argument("--" + name, required=True)
    ap.add_argument("--recipe", default="block", choices=("block", "tensor"))
    ap.add_argument("--dtype", default="bf16", choices=("bf16", "f32"))
    ap.add_argument("--tol", type=float, default=1e-2)
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--plain", action="store_true",
                    help="model bf16 training instead (the check must then fail)")
    ap.add_argument("--device", default="host",
                    help="moe-train's --device (cuda: an sm_90a bundle)")
    ap.add_argument("--requantized-rows", action="store_true",
                    help="Wgrad's rows from their Fprop codes (sm_90a)")
    args = ap.parse_args()
    if args.dtype == "f32":
        global bf16
        bf16 = lambda v: np.asarray(v, dtype=np.float64)  # noqa: E731
    cfg = reference.Config(args.config)
    raw = reference.read_safetensors(args.weights)
    # The masters: the published e4m3 weights (reference.py gen --fp8)
    # times their scales.
    tensors = {}
    for name, value in raw.items():
        if name.endswith("_scale_inv"):
            continue
        if name + "_scale_inv" in raw:
            tensors[name] = reference.dequantize_weight(value, raw[name + "_scale_inv"])
        else:
            tensors[name] = value.astype(np.float64)
    x = reference.read_safetensors(args.inputs)["x"].astype(np.float64)
    target, got = train_grad_check.one_step(args, x,
                                            np.random.default_rng(args.seed),
                                            ["--device", args.device])
    want = step(cfg, tensors, x, target,
                Recipe(args.recipe, args.plain, args.requantized_rows))
    failures, worst, best = 0, 0.0, np.inf
    for name in sorted(want):
        if name not in got:
            sys.exit(f"the dump lacks '{name}'")
        g = got[name].astype(np.float64)
        norm = np.linalg.norm(want[name])
        err = np.linalg.norm(g - want[name]) / max(norm, 1e-30)
        worst, best = max(worst, err), min(best, err)
        if os.environ.get("FP8_CHECK_VERBOSE"):
            print(f"{name}: {err:.2e}")
        if err > args.tol:
            failures += 1
            print(f"FAIL {name}: relative error {err:.2e}")
    model = f"{args.dtype} (no quantization)" if args.plain else args.recipe
    print(f"fp8-train-check {model}: {len(want)} tensors, {failures} failed, "
          f"relative errors {best:.1e} to {worst:.1e}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
