#!/usr/bin/env python3
"""What the Python package adds to the runtime's own time, in one run.

For each layer and token count: `moe-run --repeat` (the forward pass inside
the C++ tool), `layer(x)` from numpy through moe_compiler (the same bundle
and weights; x copied in, outputs handed over), and a forward plus
backward pass of moe_compiler.torch.MoELayer (`y.sum().backward()`: the
compiled backward pass, which runs the forward pass again), next to the
same forward plus backward in PyTorch eager (bench_vs_torch.py's
Hugging Face style loop over the experts, autograd) on the same weights.
Bundles are for this machine's CPU (the package's default, mcpu="native").
Medians after a warm-up, all with the same threads. Prints a Markdown
table.

    PYTHONPATH=build/python_packages build/venv-torch/bin/python \
        scripts/bench-python.py [--bin build/bin] [--threads N]
"""
import argparse
import os
import platform
import re
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_vs_torch import LAYERS, TorchLayer, timed  # noqa: E402
from train_bench import read_manifest  # noqa: E402

import moe_compiler  # noqa: E402


def median_ms(fn, repeat):
    """Median milliseconds of fn() after a warm-up call."""
    return timed(fn, repeat) * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--layers", default="dsv3,tiny")
    ap.add_argument("--tokens", default="64,2048")
    args = ap.parse_args()
    import torch
    from moe_compiler.torch import MoELayer
    torch.set_num_threads(args.threads)
    env = dict(os.environ, MOE_NUM_THREADS=str(args.threads))
    print("%s, %d threads, Python %s, torch %s" % (
        platform.processor() or platform.machine(), args.threads,
        platform.python_version(), torch.__version__))
    print()
    print("| layer | tokens | moe-run forward | Python `layer(x)` | "
          "overhead | MoELayer forward + backward | / forward | "
          "PyTorch eager forward + backward | ours / torch (speed) |")
    print("|---|---|---|---|---|---|---|---|---|")
    work = tempfile.mkdtemp(prefix="bench-python-")
    for name in args.layers.split(","):
        config, description = LAYERS[name]
        bundle = moe_compiler.compile(config, train=True)
        path = os.path.join(work, name + ".moeb")
        bundle.save(path)
        layer = bundle.load(seed=1, threads=args.threads)
        module = MoELayer(bundle.load(seed=1, threads=args.threads))
        eager = TorchLayer(read_manifest(path)["layer"],
                           {role: torch.from_numpy(v)
                            for role, v in layer.parameters().items()})
        for tokens in [int(t) for t in args.tokens.split(",")]:
            out = subprocess.run(
                [os.path.join(args.bin, "moe-run"), path, "--random-weights",
                 "--seed", "1", "--tokens", str(tokens), "--repeat",
                 str(args.repeat)], capture_output=True, text=True, env=env)
            match = re.search(r"in ([0-9.]+) ms \(median", out.stdout)
            if out.returncode or not match:
                sys.exit("moe-run failed:\n" + out.stdout + out.stderr)
            native = float(match.group(1))
            x = np.random.default_rng(0).uniform(
                -1, 1, (tokens, layer.hidden_size)).astype(np.float32)
            python = median_ms(lambda: layer(x), args.repeat)
            xt = torch.from_numpy(x).requires_grad_()

            def step():
                module.zero_grad()
                module(xt).sum().backward()
            train = median_ms(step, args.repeat)

            def eager_step():
                eager.zero_grad()
                eager(xt).sum().backward()
            theirs = median_ms(eager_step, args.repeat)
            print("| %s | %d | %.3f ms | %.3f ms | %+.1f%% | %.3f ms | %.2fx "
                  "| %.3f ms | %.2f |"
                  % (description, tokens, native, python,
                     100 * (python / native - 1), train, train / python,
                     theirs, theirs / train))


if __name__ == "__main__":
    main()
