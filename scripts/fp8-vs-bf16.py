#!/usr/bin/env python3
"""FP8 training against bf16 on moe-train's teacher-student task.

Compiles one config four ways for the host (--dtype bf16, --dtype fp8 with
DeepSeek-V3's blockwise recipe, --dtype fp8 --fp8-recipe tensor, and the
blockwise recipe with AdamW's moments in bf16 as DeepSeek-V3 kept them,
--optimizer-state bf16), trains
each with moe-train from the same seed (the same student and teacher draws
and the same tokens; an fp8 layer's weights are those draws quantized, and
its teacher computes in fp8 as well), and prints the loss curves side by
side with the relative gap of each fp8 run to bf16: at step 1 (before any
update: the quantized teacher and student alone) and over the last 50
steps.

  scripts/fp8-vs-bf16.py [--config C] [--steps 300] [--tokens 256]
                         [--lr 1e-3] [--seed 1] [--bin build/bin]

Results are in docs/Performance.md.
"""
import argparse
import os
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def losses(log):
    return [float(line.split()[3]) for line in log.splitlines()
            if line.startswith("step ")]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default=os.path.join(
        ROOT, "test/Integration/Inputs/deepseek-v3-fp8.json"))
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--lr", default="1e-3")
    ap.add_argument("--seed", default="1")
    ap.add_argument("--bin", default=os.path.join(ROOT, "build/bin"))
    args = ap.parse_args()
    runs = {"bf16": ["--dtype", "bf16"],
            "fp8 block": ["--dtype", "fp8"],
            "fp8 tensor": ["--dtype", "fp8", "--fp8-recipe", "tensor"],
            "fp8 block, bf16 moments": ["--dtype", "fp8",
                                        "--optimizer-state", "bf16"]}
    curves = {}
    with tempfile.TemporaryDirectory() as work:
        for name, flags in runs.items():
            bundle = os.path.join(work, name.replace(" ", "-").replace(
                ",", "") + ".moeb")
            subprocess.run([os.path.join(args.bin, "moe-compile"), "--hf-config",
                            args.config, "--train", "--max-tokens",
                            str(args.tokens), "-o", bundle] + flags, check=True)
            out = subprocess.run([os.path.join(args.bin, "moe-train"), bundle,
                                  "--steps", str(args.steps), "--tokens",
                                  str(args.tokens), "--lr", args.lr,
                                  "--seed", args.seed],
                                 check=True, capture_output=True, text=True)
            curves[name] = losses(out.stdout)
    names = list(runs)
    print("| step | " + " | ".join(names) + " |")
    print("|---:|" + "---:|" * len(names))
    marks = sorted({1, *range(50, args.steps + 1, 50), args.steps})
    for s in marks:
        print(f"| {s} | " + " | ".join(f"{curves[n][s - 1]:.6f}" for n in names) + " |")
    base = curves["bf16"]
    tail = range(max(0, args.steps - 50), args.steps)
    for n in names[1:]:
        gap1 = (curves[n][0] - base[0]) / base[0]
        gap = sum((curves[n][i] - base[i]) / base[i] for i in tail) / len(tail)
        print(f"{n}: relative gap to bf16 {100 * gap1:+.2f}% at step 1, "
              f"{100 * gap:+.2f}% over the last {len(tail)} steps")


if __name__ == "__main__":
    main()
