#!/usr/bin/env python3
"""moe-train --dump-grads against finite differences of reference.py.

Writes a batch (the tokens of --inputs and a seeded random target), runs
one step of `moe-train --dump-grads` with the given weights, and compares
the dumped gradients of the MSE loss (mean over all elements of
(y - target)^2) with central differences of reference.py's float64 forward
pass, on a seeded sample of elements of every tensor and of x.

  train_grad_check.py --config C --weights W --inputs X --bundle B
                      --moe-train P --work DIR [--samples N] [--tol TOL]
                      [--device host|cuda]

With --device=cuda the step runs the sm_90a training schedule (bf16
compute: loosen --tol to bf16's precision).
"""
import argparse
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference  # noqa: E402


def one_step(args, x, rng, flags=()):
    """Runs one step of args.moe_train on args.bundle with args.weights, the
    tokens x and a target drawn from `rng` (in args.work), without an
    update; returns the target (float64) and the dumped gradients."""
    target = rng.uniform(-0.1, 0.1, size=x.shape).astype(np.float32)
    batch = os.path.join(args.work, "batch.safetensors")
    grads_path = os.path.join(args.work, "grads.safetensors")
    reference.write_safetensors(batch, {"x": x.astype(np.float32), "target": target})
    run = subprocess.run([args.moe_train, args.bundle, "--steps", "1", "--lr", "0",
                          "--inputs", batch, "--weights", args.weights,
                          "--dump-grads", grads_path, *flags],
                         capture_output=True, text=True)
    if run.returncode:
        sys.exit("moe-train failed:\n" + run.stdout + run.stderr)
    return target.astype(np.float64), reference.read_safetensors(grads_path)


def main():
    ap = argparse.ArgumentParser()
    for name in ("config", "weights", "inputs", "bundle", "moe-train", "work"):
        ap.add_argument("--" + name, required=True)
    ap.add_argument("--samples", type=int, default=12)
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--tol", type=float, default=1e-3)
    ap.add_argument("--device", default="host")
    args = ap.parse_args()
    cfg = reference.Config(args.config)
    weights = {k: v.astype(np.float64) for k, v in reference.read_safetensors(args.weights).items()}
    x = reference.read_safetensors(args.inputs)["x"].astype(np.float64)
    rng = np.random.default_rng(args.seed)
    target, grads = one_step(args, x, rng, ["--device", args.device])

    def loss(tensors, xv):
        y = reference.forward(cfg, tensors, "", xv)[0]
        return float(((y - target) ** 2).mean())

    eps = 1e-6
    failures = 0
    # Every trained tensor of the layer (the bias only steers selection; the
    # weights file also holds a tensor of another module).
    names = sorted(n for n in weights
                   if not n.endswith("e_score_correction_bias") and not n.startswith("model."))
    missing = [n for n in names + ["x"] if n not in grads]
    extra = [n for n in grads if n not in names + ["x"]]
    if missing or extra:
        sys.exit(f"the dump lacks {missing} and has unexpected {extra}")
    for name in names + ["x"]:
        base = x if name == "x" else weights[name]
        got = grads[name].astype(np.float64).ravel()
        picks = rng.choice(base.size, size=min(args.samples, base.size), replace=False)
        worst = 0.0
        scale = max(np.abs(got).max(), 1e-12)
        for i in picks:
            plus, minus = base.copy().ravel(), base.copy().ravel()
            plus[i] += eps
            minus[i] -= eps
            if name == "x":
                fd = (loss(weights, plus.reshape(base.shape)) -
                      loss(weights, minus.reshape(base.shape))) / (2 * eps)
            else:
                fd = (loss({**weights, name: plus.reshape(base.shape)}, x) -
                      loss({**weights, name: minus.reshape(base.shape)}, x)) / (2 * eps)
            worst = max(worst, abs(got[i] - fd) / scale)
        if worst > args.tol:
            failures += 1
            print(f"FAIL {name}: max error {worst:.2e} relative to max |grad| {scale:.3g}")
    print(f"train-grad-check: {len(names) + 1} tensors, {failures} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
