#!/usr/bin/env python3
"""One AdamW step of moe-train against a float64 AdamW written from the
update rule, with the moments kept in --moments (f32 or bf16).

Trains --steps K steps on one batch with a checkpoint, then resumes for
step K + 1 with --dump-grads and a second checkpoint, and recomputes step
K + 1 from the step-K state and the dumped gradients:

  m' = b1 m + (1 - b1) g           v' = b2 v + (1 - b2) g^2
  p' = p - lr ((m' / c1) / (sqrt(v' / c2) + eps) + wd p)

(c1 = 1 - b1^t, c2 = 1 - b2^t, t = K + 1), the master from the unrounded
moments. With bf16 moments the checkpoint must hold them as bf16, each the
nearest bf16 of m' and v' (round to nearest even; a value off by one bf16
step only where f32 arithmetic lands on the other side of a tie); with f32
moments, f32 values within f32 rounding of m' and v'. Prints one line per
kind of tensor and exits 1 on a failure.

  optimizer_state_check.py --bundle B --moe-train P --weights W
                           --inputs X --work DIR --moments f32|bf16
"""
import argparse
import json
import os
import struct
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference  # noqa: E402
from saved_vs_state import master  # noqa: E402

# moe-train's (TrainOptions'), as the step gets them: f32 values (1 - b
# is exact in f32 for b in [0.5, 1]).
B1, B2, EPS = (float(np.float32(v)) for v in (0.9, 0.999, 1e-8))


def dtypes_of(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    return {k: v["dtype"] for k, v in header.items() if k != "__metadata__"}


def bf16_round(x):
    """float64 -> the nearest bf16 (ties to even), as float64."""
    f = np.asarray(x, dtype=np.float32)
    bits = f.view(np.uint32).astype(np.uint64)
    # The f32 nearest x first: exact here unless x has more than 24 bits,
    # and then an error far below a bf16 step (checked against by `ties`).
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16
    return rounded.astype(np.uint32).view(np.float32).astype(np.float64)


def run(cmd):
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        sys.exit("%s failed:\n%s%s" % (cmd[0], done.stdout, done.stderr))


def main():
    ap = argparse.ArgumentParser()
    for name in ("bundle", "moe-train", "weights", "inputs", "work"):
        ap.add_argument("--" + name, required=True)
    ap.add_argument("--moments", choices=("f32", "bf16"), required=True)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--lr", type=float, default=1e-2)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    args = ap.parse_args()

    rng = np.random.default_rng(7)
    x = reference.read_safetensors(args.inputs)["x"].astype(np.float32)
    target = rng.uniform(-0.1, 0.1, size=x.shape).astype(np.float32)
    batch = os.path.join(args.work, "batch.safetensors")
    reference.write_safetensors(batch, {"x": x, "target": target})
    k = args.steps
    before, after = (os.path.join(args.work, d) for d in ("ck-k", "ck-k1"))
    grads_path = os.path.join(args.work, "grads.safetensors")
    common = [args.moe_train, args.bundle, "--inputs", batch, "--weights",
              args.weights, "--lr", repr(args.lr), "--weight-decay",
              repr(args.weight_decay)]
    run(common + ["--steps", str(k), "--checkpoint", before])
    run(common + ["--steps", str(k + 1), "--resume", before, "--dump-grads",
                  grads_path, "--checkpoint", after])
    paths = [os.path.join(d, "step-%012d" % s, "state.safetensors")
             for d, s in ((before, k), (after, k + 1))]
    old = reference.read_safetensors(paths[0])
    new = reference.read_safetensors(paths[1])
    kinds = dtypes_of(paths[1])
    grads = reference.read_safetensors(grads_path)

    t = k + 1
    c1, c2 = 1 - B1 ** t, 1 - B2 ** t
    lr, wd = (float(np.float32(v)) for v in (args.lr, args.weight_decay))
    ok = True
    worst = {"master": 0.0, "moments": 0.0}
    counted = exact = 0
    want_dtype = "BF16" if args.moments == "bf16" else "F32"
    for key in sorted(k for k in kinds if k.endswith((".m", ".v"))):
        if kinds[key] != want_dtype:
            print("FAIL %s is %s, expected %s" % (key, kinds[key], want_dtype))
            return 1
    for name in sorted(grads):
        if name == "x" or name.endswith("e_score_correction_bias"):
            continue

        def part(state, suffix=""):
            return master(state, name, suffix).astype(np.float64)

        g = grads[name].astype(np.float64)
        p, m, v = part(old), part(old, ".m"), part(old, ".v")
        m2 = B1 * m + (1 - B1) * g
        v2 = B2 * v + (1 - B2) * g * g
        p2 = p - lr * ((m2 / c1) / (np.sqrt(v2 / c2) + EPS) + wd * p)
        got_p, got_m, got_v = part(new), part(new, ".m"), part(new, ".v")
        err = np.abs(got_p - p2) / (np.abs(p2) + lr)
        worst["master"] = max(worst["master"], float(err.max()))
        ok = ok and err.max() < 1e-5
        # Each moment's scale: the magnitude of its terms (m' may cancel).
        for moment, got, want, scale in (
                (".m", got_m, m2, B1 * np.abs(m) + (1 - B1) * np.abs(g)),
                (".v", got_v, v2, v2)):
            scale = scale + 1e-30
            if args.moments == "bf16":
                nearest = bf16_round(want)
                counted += want.size
                exact += int((got == nearest).sum())
                # Off the nearest only at a tie's f32 rounding: one bf16
                # step (2^-7 relative at most) from it, and then within
                # f32 error of the midpoint between the two.
                miss = got != nearest
                mid = (got + nearest) / 2
                ties = np.abs(want - mid) <= 1e-6 * scale
                if np.any(miss & ~ties):
                    print("FAIL %s of %s: not the nearest bf16 of the "
                          "update at %d elements"
                          % (moment, name, int((miss & ~ties).sum())))
                    ok = False
                err = np.abs(got - want) / scale
            else:
                err = np.abs(got - want) / scale
                ok = ok and err.max() < 1e-5
            worst["moments"] = max(worst["moments"], float(err.max()))
    print("master weights: max rel err %.1e (bound 1e-5)" % worst["master"])
    if args.moments == "bf16":
        print("moments: %s, %d of %d the nearest bf16 of the update, "
              "max rel err %.1e" % (want_dtype, exact, counted,
                                    worst["moments"]))
    else:
        print("moments: %s, max rel err %.1e (bound 1e-5)"
              % (want_dtype, worst["moments"]))
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
