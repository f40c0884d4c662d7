#!/usr/bin/env python3
"""Gradient check of moe-autodiff on the host target.

Builds a small random layer, runs the backward function moe-autodiff adds
(through moe-opt --moe-host-pipeline and mlir-runner, in f32) and compares
every gradient with central finite differences of an independent float64
numpy forward pass written from the layer's definition:

  loss = sum(y * dy) for a fixed random dy, so d loss / d p is the
  vector-Jacobian product the backward function computes.

  grad_check.py --case deepseek|mixtral --moe-opt P --mlir-runner P
                --shared-libs A,B [--tokens T] [--seed S]
"""
import argparse
import re
import subprocess
import sys

import numpy as np

CASES = {
    # DeepSeek-V3 routing: sigmoid, selection bias, groups scored by their
    # two best, normalized and scaled weights, a shared expert.
    "deepseek": dict(hidden=8, experts=8, top_k=2, groups=4, topk_groups=2,
                     scoring="sigmoid", group_score="sum_top2", bias=True,
                     norm=True, scale=2.5, ffn=4, shared=4),
    # Mixtral routing: softmax over all experts, top-2, renormalized.
    "mixtral": dict(hidden=8, experts=4, top_k=2, groups=1, topk_groups=1,
                    scoring="softmax", group_score="max", bias=False,
                    norm=True, scale=1.0, ffn=4, shared=0),
}


def forward(c, p, x):
    """The layer in float64, from its definition."""
    logits = x @ p["router"].T
    if c["scoring"] == "sigmoid":
        s = 1.0 / (1.0 + np.exp(-logits))
    else:
        z = np.exp(logits - logits.max(axis=1, keepdims=True))
        s = z / z.sum(axis=1, keepdims=True)
    choice = s + p["bias"] if c["bias"] else s.copy()
    t_count, e = s.shape
    y = np.zeros_like(x)
    for t in range(t_count):
        allowed = np.ones(e, dtype=bool)
        if c["groups"] > 1:
            per = e // c["groups"]
            g = choice[t].reshape(c["groups"], per)
            if c["group_score"] == "sum_top2":
                gs = np.sort(g, axis=1)[:, -2:].sum(axis=1)
            else:
                gs = g.max(axis=1)
            kept = np.argsort(-gs, kind="stable")[: c["topk_groups"]]
            allowed = np.zeros(e, dtype=bool)
            for k in kept:
                allowed[k * per:(k + 1) * per] = True
        masked = np.where(allowed, choice[t], -np.inf)
        ids = np.argsort(-masked, kind="stable")[: c["top_k"]]
        w = s[t, ids]
        if c["norm"]:
            w = w / w.sum()
        w = w * c["scale"]
        for j, ex in enumerate(ids):
            y[t] += w[j] * ffn(x[t], p["gate"][ex], p["up"][ex], p["down"][ex])
    if c["shared"]:
        for t in range(t_count):
            y[t] += ffn(x[t], p["sgate"], p["sup"], p["sdown"])
    return y


def ffn(x, gate, up, down):
    g = gate @ x
    return down @ (g / (1.0 + np.exp(-g)) * (up @ x))


def dense(values):
    if values.ndim == 1:
        return "[" + ", ".join(repr(float(v)) for v in values) + "]"
    return "[" + ", ".join(dense(v) for v in values) + "]"


def tensor_type(shape):
    return "tensor<" + "x".join(str(d) for d in shape) + "xf32>"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", choices=CASES, required=True)
    ap.add_argument("--moe-opt", required=True)
    ap.add_argument("--mlir-runner", required=True)
    ap.add_argument("--shared-libs", required=True)
    ap.add_argument("--tokens", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--tol", type=float, default=1e-4)
    args = ap.parse_args()
    c = CASES[args.case]
    rng = np.random.default_rng(args.seed)
    h, e, f, s_ffn, t = c["hidden"], c["experts"], c["ffn"], c["shared"], args.tokens

    def rand(*shape):
        return rng.uniform(-1.0, 1.0, size=shape).astype(np.float32).astype(np.float64)

    p = {"router": rand(e, h), "gate": rand(e, f, h), "up": rand(e, f, h),
         "down": rand(e, h, f)}
    if c["bias"]:
        p["bias"] = rand(e) * 0.1
    if s_ffn:
        p["sgate"], p["sup"], p["sdown"] = rand(s_ffn, h), rand(s_ffn, h), rand(h, s_ffn)
    x, dy = rand(t, h), rand(t, h)

    # The forward function, as moe-autodiff's input.
    names = ["router"] + (["bias"] if c["bias"] else []) + ["gate", "up", "down"]
    if s_ffn:
        names += ["sgate", "sup", "sdown"]
    shapes = {n: p[n].shape for n in names}
    cfg = (f"hidden = {h}, experts = {e}, top_k = {c['top_k']}, groups = {c['groups']}, "
           f"topk_groups = {c['topk_groups']}, scoring = {c['scoring']}, "
           f"group_score = {c['group_score']}, score_bias = {str(c['bias']).lower()}, "
           f"norm_topk_prob = {str(c['norm']).lower()}, routed_scale = {c['scale']}, "
           f"ffn = {f}, shared_experts = {1 if s_ffn else 0}, shared_ffn = {s_ffn}, dtype = f32")
    arg_types = [f"tensor<?x{h}xf32>"] + [tensor_type(shapes[n]) for n in names]
    params = ", ".join(f"%a{i}: {ty}" for i, ty in enumerate(arg_types))
    router = "%a1, bias %a2" if c["bias"] else "%a1"
    first = 3 if c["bias"] else 2
    experts = f"%a{first}, %a{first + 1}, %a{first + 2}"
    shared = f" shared(%a{first + 3}, %a{first + 4}, %a{first + 5})" if s_ffn else ""
    source = (f"func.func @layer({params}) -> tensor<?x{h}xf32> {{\n"
              f"  %y = moe.layer %a0 router({router}) experts({experts}){shared}\n"
              f"      {{config = #moe.layer_config<{cfg}>}}\n"
              f"      : ({', '.join(arg_types)}) -> tensor<?x{h}xf32>\n"
              f"  return %y : tensor<?x{h}xf32>\n}}\n")
    differentiated = subprocess.run([args.moe_opt, "-", "-moe-autodiff"], input=source,
                                    capture_output=True, text=True)
    if differentiated.returncode:
        sys.exit("moe-opt -moe-autodiff failed:\n" + differentiated.stderr)

    # A main that calls @layer_backward on the constants and prints its
    # results in order.
    grads = ["x", "router", "gate", "up", "down"] + (["sgate", "sup", "sdown"] if s_ffn else [])
    lines = ["func.func private @printMemrefF32(memref<*xf32>) attributes {llvm.emit_c_interface}",
             "func.func @main() {"]
    call_args, call_types = [], []
    for name, value in [("x", x)] + [(n, p[n]) for n in names] + [("dy", dy)]:
        ty = tensor_type(value.shape)
        lines.append(f"  %c_{name} = arith.constant dense<{dense(value)}> : {ty}")
        if name in ("x", "dy"):
            lines.append(f"  %{name}_d = tensor.cast %c_{name} : {ty} to tensor<?x{h}xf32>")
            call_args.append(f"%{name}_d")
            call_types.append(f"tensor<?x{h}xf32>")
        else:
            call_args.append(f"%c_{name}")
            call_types.append(ty)
    result_types = [f"tensor<?x{h}xf32>"] + [tensor_type(p[n].shape) for n in grads[1:]]
    lines.append(f"  %r:{len(grads)} = call @layer_backward({', '.join(call_args)}) : "
                 f"({', '.join(call_types)}) -> ({', '.join(result_types)})")
    for i, ty in enumerate(result_types):
        mem = ty.replace("tensor<", "memref<")
        lines.append(f"  %m{i} = bufferization.to_buffer %r#{i} : {ty} to {mem}")
        lines.append(f"  %u{i} = memref.cast %m{i} : {mem} to memref<*xf32>")
        lines.append(f"  call @printMemrefF32(%u{i}) : (memref<*xf32>) -> ()")
    lines += ["  return", "}"]
    module = differentiated.stdout.rstrip()
    assert module.endswith("}")
    program = module[:-1] + "\n" + "\n".join(lines) + "\n}\n"
    lowered = subprocess.run([args.moe_opt, "-", "--moe-host-pipeline"], input=program,
                             capture_output=True, text=True)
    if lowered.returncode:
        sys.exit("moe-opt --moe-host-pipeline failed:\n" + lowered.stderr)
    ran = subprocess.run([args.mlir_runner, "-e", "main", "-entry-point-result=void",
                          "-shared-libs=" + args.shared_libs], input=lowered.stdout,
                         capture_output=True, text=True)
    if ran.returncode:
        sys.exit("mlir-runner failed:\n" + ran.stderr)
    blocks = ran.stdout.split("Unranked Memref")[1:]
    number = re.compile(r"-?(?:\d+\.?\d*(?:e[-+]?\d+)?|nan|inf)")
    ours = []
    for block in blocks:
        data = block.split("data =", 1)[1]
        ours.append(np.array([float(v) for v in number.findall(data)]))

    # Central differences of loss = sum(y * dy) in float64.
    def loss(params, xv):
        return float((forward(c, params, xv) * dy).sum())

    eps = 1e-6
    failures = 0
    for name, got in zip(grads, ours):
        base = x if name == "x" else p[name]
        fd = np.zeros(base.size)
        for i in range(base.size):
            plus, minus = base.copy().ravel(), base.copy().ravel()
            plus[i] += eps
            minus[i] -= eps
            if name == "x":
                lp = loss(p, plus.reshape(base.shape))
                lm = loss(p, minus.reshape(base.shape))
            else:
                lp = loss({**p, name: plus.reshape(base.shape)}, x)
                lm = loss({**p, name: minus.reshape(base.shape)}, x)
            fd[i] = (lp - lm) / (2 * eps)
        if got.size != fd.size:
            print(f"FAIL {name}: {got.size} values, expected {fd.size}")
            failures += 1
            continue
        err = np.abs(got - fd).max() / max(1.0, np.abs(fd).max())
        ok = err <= args.tol
        failures += not ok
        print(f"{'ok  ' if ok else 'FAIL'} d{name}: max error {err:.2e} "
              f"(relative to max |grad| {np.abs(fd).max():.3g}), tolerance {args.tol}")
    print(f"grad-check {args.case}: {'PASS' if not failures else 'FAIL'}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
