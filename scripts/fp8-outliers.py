#!/usr/bin/env python3
"""The per-tensor ablation of DeepSeek-V3's FP8 recipe: tokens with outlier
channels, one training step's gradients with blockwise (1 x 128 tiles,
128 x 128 blocks) and per-tensor scales, and bf16's, against float64.

Activations of trained LLMs carry a few channels 100x to 1000x larger than
the rest; one scale for the whole tensor then spends e4m3's range on them
and leaves the other channels a few codes, where a 1 x 128 tile gives each
token's 128 channels their own. moe-train's teacher draws uniform tokens,
so this script builds the batch itself: T uniform tokens in [-1, 1] with
--outliers channels multiplied by R, and the columns of those channels in
every matrix that reads x (router, gate and up projections) divided by R,
in the teacher and the student alike, so that each R is the same function
with the same target (as in a trained model, whose weights absorb its
activations' outliers). The target is what a float64 teacher layer
(test/Integration/reference.py, seed 1) computes. One step of a student
(seed 2) with moe-train --dump-grads, compiled three ways (--dtype bf16,
fp8 with --fp8-recipe block, fp8 with tensor), is compared with the
float64 gradients of the same step without quantization
(fp8_train_check.py's model with its quantization off): per R and run,
the relative error (norm of the difference over the norm) of x's gradient
and the median and largest over the weights' gradients.

(Training on such a batch is no measure: AdamW moves the columns divided
by R as much as any, and every run, bf16's too, diverges for R >= 1000.)

  scripts/fp8-outliers.py [--config C] [--ratios 1,100,1000,10000,100000]
                          [--outliers 4] [--tokens 256] [--bin build/bin]

Needs numpy (scripts/torch-venv.sh's venv has it). Results are in
docs/Performance.md.
"""
import argparse
import os
import subprocess
import sys
import tempfile
from types import SimpleNamespace

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "test", "Integration"))
import reference  # noqa: E402
import fp8_train_check  # noqa: E402

RUNS = {"bf16": ["--dtype", "bf16"],
        "fp8 block": ["--dtype", "fp8", "--fp8-recipe", "block"],
        "fp8 tensor": ["--dtype", "fp8", "--fp8-recipe", "tensor"]}


def draw(config, seed, path, work):
    """Random f32 weights of `config` (reference.py's draws) at `path`."""
    inputs = os.path.join(work, "unused.safetensors")
    reference.generate(SimpleNamespace(
        config=config, tokens=1, seed=seed, weights=path, inputs=inputs,
        prefix="", dtype="f32", case="random", mxfp4=False, fp8=False))
    return reference.read_safetensors(path)


def smooth(cfg, tensors, channels, ratio):
    """`tensors` with the columns of `channels` of every matrix that reads
    x divided by `ratio`."""
    (eg, eu, _), (sg, su, _) = cfg.names()
    readers = {cfg.router_name(), sg, su}
    readers.update(n.format(i) for n in (eg, eu) for i in range(cfg.experts))
    out = dict(tensors)
    for name in readers & set(tensors):
        w = tensors[name].astype(np.float64).copy()
        w[:, channels] /= ratio
        out[name] = w
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default=os.path.join(
        ROOT, "test/Integration/Inputs/deepseek-v3-fp8.json"))
    ap.add_argument("--ratios", default="1,100,1000,10000,100000")
    ap.add_argument("--outliers", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--bin", default=os.path.join(ROOT, "build/bin"))
    args = ap.parse_args()
    cfg = reference.Config(args.config)
    ratios = [float(r) for r in args.ratios.split(",")]
    # The float64 step, quantization and bf16 rounding off.
    fp8_train_check.bf16 = lambda v: np.asarray(v, dtype=np.float64)
    exact = fp8_train_check.Recipe("block", plain=True)
    with tempfile.TemporaryDirectory() as work:
        teacher = draw(args.config, 1, os.path.join(work, "teacher.safetensors"),
                       work)
        student = draw(args.config, 2,
                       os.path.join(work, "student.safetensors"), work)
        bundles = {}
        for name, flags in RUNS.items():
            bundles[name] = os.path.join(work, name.replace(" ", "-") + ".moeb")
            subprocess.run([os.path.join(args.bin, "moe-compile"), "--hf-config",
                            args.config, "--train", "--max-tokens",
                            str(args.tokens), "-o", bundles[name]] + flags,
                           check=True)
        rng = np.random.default_rng(3)
        base = rng.uniform(-1, 1, size=(args.tokens, cfg.hidden))
        # Spread over the channels (different 128-channel tiles).
        channels = np.linspace(0, cfg.hidden - 1, args.outliers).astype(int)
        print("| outlier ratio | run | x's gradient | weights' gradients, "
              "median | largest |")
        print("|---:|---|---:|---:|---:|")
        for ratio in ratios:
            x = base.copy()
            x[:, channels] *= ratio
            target = reference.forward(
                cfg, smooth(cfg, teacher, channels, ratio), "", x)[0]
            target = target.astype(np.float32)
            batch = os.path.join(work, "batch.safetensors")
            reference.write_safetensors(batch, {
                "x": x.astype(np.float32), "target": target})
            smoothed = {k: v.astype(np.float32) for k, v in
                        smooth(cfg, student, channels, ratio).items()}
            weights = os.path.join(work, "student-%g.safetensors" % ratio)
            reference.write_safetensors(weights, smoothed)
            want = fp8_train_check.step(
                cfg, {k: v.astype(np.float64) for k, v in smoothed.items()},
                x.astype(np.float32).astype(np.float64),
                target.astype(np.float64), exact)
            for name, bundle in bundles.items():
                grads = os.path.join(work, "grads.safetensors")
                subprocess.run(
                    [os.path.join(args.bin, "moe-train"), bundle, "--steps",
                     "1", "--lr", "0", "--inputs", batch, "--weights",
                     weights, "--dump-grads", grads],
                    check=True, capture_output=True, text=True)
                got = reference.read_safetensors(grads)
                errors = {}
                for key, value in want.items():
                    norm = np.linalg.norm(value)
                    if norm > 0:
                        errors[key] = np.linalg.norm(
                            got[key].astype(np.float64) - value) / norm
                weight_errors = [e for k, e in errors.items() if k != "x"]
                print("| %g | %s | %.1e | %.1e | %.1e |" % (
                    ratio, name, errors["x"], np.median(weight_errors),
                    max(weight_errors)))


if __name__ == "__main__":
    main()
