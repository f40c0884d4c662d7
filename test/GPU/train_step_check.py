#!/usr/bin/env python3
"""One sm_90a training step (moe-train --device=cuda, on a GPU or the PTX
emulator) against one step of the host bundle of the same layer.

Both runs take the same weights and batch (values bf16 represents
exactly, so both compute copies agree), dump their gradients and write a
checkpoint after the step. Compared: the loss and every gradient (the
host's are checked against finite differences elsewhere), AdamW's first
step on the GPU's own gradient (m, v and the updated f32 master, from
AdamW's definition), and the selection bias after DeepSeek's
auxiliary-loss-free update.

  train_step_check.py --config C --bundle SM90.moeb --host-bundle HOST.moeb
                      --moe-train P --work DIR [--tokens T] [--seed S]
                      [--tol TOL] [--steps N] [--moments f32|bf16]

With --steps N > 1 both run N steps: the last loss, the first step's
gradients and the final state (masters, moments, bias) are compared with
the host's. With --moments bf16 (both bundles compiled with
moe-compile --optimizer-state=bf16) the checkpoint's moments must be bf16,
the first step's each the nearest bf16 of the f32 update, and the master
moved by the unrounded moments.
"""
import argparse
import glob
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "Integration"))
sys.path.insert(0, os.path.join(HERE, "..", "Tools", "Inputs"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools", "gpu-check"))
import reference  # noqa: E402
from bundle_tool import read_manifest  # noqa: E402
from train_bench import rel, stacked  # noqa: E402
from optimizer_state_check import dtypes_of  # noqa: E402

LR, GAMMA, BETA1, BETA2, EPS = 1e-3, 1e-3, 0.9, 0.999, 1e-8


def bf16_round(a):
    return reference.bf16_to_f32(reference.f32_to_bf16_bits(np.asarray(a, np.float32)))


def train(moe_train, bundle, work, weights, batch, device, steps=1):
    grads = os.path.join(work, device + "-grads.safetensors")
    ckpt = os.path.join(work, device + "-ckpt")
    run = subprocess.run([moe_train, bundle, "--device=" + device, "--steps", str(steps),
                          "--lr", str(LR), "--bias-update", str(GAMMA),
                          "--weights", weights, "--inputs", batch,
                          "--dump-grads", grads, "--checkpoint", ckpt,
                          "--checkpoint-every", str(steps)], capture_output=True, text=True)
    if run.returncode:
        sys.exit("moe-train --device=%s failed:\n%s%s" % (device, run.stdout, run.stderr))
    # The last step's loss (its line before the summary).
    loss = float(run.stdout.split("step %d loss" % steps)[1].split()[0])
    state = glob.glob(os.path.join(ckpt, "step-*", "state.safetensors"))
    if len(state) != 1:
        sys.exit("moe-train --device=%s wrote no checkpoint" % device)
    return (loss, reference.read_safetensors(grads),
            reference.read_safetensors(state[0]), dtypes_of(state[0]))


def main():
    ap = argparse.ArgumentParser()
    for name in ("config", "bundle", "host-bundle", "moe-train", "work"):
        ap.add_argument("--" + name, required=True)
    ap.add_argument("--tokens", type=int, default=37)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--tol", type=float, default=2e-2)
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--steps", type=int, default=1)
    ap.add_argument("--moments", choices=("f32", "bf16"), default="f32")
    args = ap.parse_args()
    cfg = reference.Config(args.config)
    manifest = read_manifest(args.host_bundle)
    rng = np.random.default_rng(args.seed)
    weights = {}
    for p in manifest["parameters"]:
        shape = p["shape"][1:] if p["stack"] else p["shape"]
        bound = 0.1 if p["role"] == "score_bias" else 1.0 / np.sqrt(shape[-1])
        for i in range(max(p["stack"], 1)):
            weights[p["name"].replace("{i}", str(i))] = bf16_round(
                rng.uniform(-bound, bound, size=shape))
    x = bf16_round(rng.uniform(-1, 1, size=(args.tokens, cfg.hidden)))
    target = rng.uniform(-0.1, 0.1, size=x.shape).astype(np.float32)
    os.makedirs(args.work, exist_ok=True)
    wpath = os.path.join(args.work, "w.safetensors")
    batch = os.path.join(args.work, "batch.safetensors")
    reference.write_safetensors(wpath, weights)
    reference.write_safetensors(batch, {"x": x, "target": target})

    host_loss, host_grads, host_state, _ = train(args.moe_train, args.host_bundle,
                                              args.work, wpath, batch, "host",
                                              args.steps)
    loss, grads, state, dtypes = train(args.moe_train, args.bundle, args.work, wpath,
                               batch, "cuda", args.steps)
    failures = []

    def expect(what, err, bound):
        if args.verbose:
            print("%s: %.2e (bound %.0e)" % (what, err, bound))
        if not err <= bound:
            failures.append("%s: %.2e > %.0e" % (what, err, bound))

    expect("loss", rel(loss, host_loss), args.tol)
    names = sorted(host_grads)
    if sorted(grads) != names:
        failures.append("the runs dump different gradients")
    for n in names:
        expect(n + ".grad", rel(grads.get(n, 0), host_grads[n]), args.tol)
    # AdamW's first step on the GPU's own gradient: bias-corrected moments
    # m / (1 - beta1) = g and v / (1 - beta2) = g^2 (beta1 and beta2 as the
    # f32 values the kernels read).
    c1, c2 = 1 - float(np.float32(BETA1)), 1 - float(np.float32(BETA2))
    g = stacked(manifest, grads)
    w0 = stacked(manifest, weights)
    checked = 0
    for role, grad in g.items():
        if role == "score_bias" or role + ".m" not in state:
            continue
        for moment in (role + ".m", role + ".v"):
            if dtypes[moment] != args.moments.upper():
                failures.append("%s is %s, expected %s" %
                                (moment, dtypes[moment], args.moments.upper()))
        if args.steps > 1:
            # After several steps: the host's state, within what bf16
            # gradients move it (squares for v).
            expect(role + ".m", rel(state[role + ".m"], host_state[role + ".m"]),
                   args.tol)
            expect(role + ".v", rel(state[role + ".v"], host_state[role + ".v"]),
                   2 * args.tol)
            # The masters' movement: Adam moves each element by about lr
            # whatever its gradient's size, so elements whose gradient is
            # about zero (where bf16 and f32 disagree in sign) move either
            # way; the movement agrees to a few percent.
            expect(role + " (moved)", rel(state[role] - w0[role],
                                          host_state[role] - w0[role]),
                   5 * args.tol)
            checked += 1
            continue
        grad = grad.astype(np.float64)
        m, v = c1 * grad, c2 * grad * grad
        w = w0[role] - LR * (m / c1) / (np.sqrt(v / c2) + EPS)
        if args.moments == "bf16":
            # Kept as the nearest bf16 of the f32 update (f32 products, as
            # the step computes them from a zero state).
            g32 = grad.astype(np.float32)
            m = bf16_round(np.float32(c1) * g32).astype(np.float64)
            v = bf16_round(np.float32(c2) * (g32 * g32)).astype(np.float64)
        expect(role + ".m", rel(state[role + ".m"], m), 1e-6)
        expect(role + ".v", rel(state[role + ".v"], v), 1e-5)
        expect(role + " (updated)", rel(state[role], w), 1e-6)
        # The movement alone, which a master computed from rounded bf16
        # moments would miss by about 1e-3.
        expect(role + " (moved)", rel(state[role] - w0[role], w - w0[role]),
               1e-4)
        checked += 1
    if cfg.bias:
        expect("score_bias", float(np.abs(state["score_bias"] -
                                          host_state["score_bias"]).max()), 1e-6)
    for f in failures:
        print("FAIL " + f)
    print("train-step-check: loss and %d gradients, AdamW on %d weights, %d failed"
          % (len(names), checked, len(failures)))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
