#!/usr/bin/env python3
"""What FP8 experts cost in accuracy on the host: a DeepSeek-V3-like layer
(hidden 1024, 64 experts of 512, top-6, 1 shared) compiled in bf16 and with
--dtype fp8, run by moe-run on the same bf16 weights and inputs, against
test/Integration/reference.py's float64 layer (no quantization), and the fp8
bundle against the reference's own FP8 layer.

  scripts/fp8-error.py [--bin build/bin] [--tokens 1,128,1000] [--work DIR]

Prints a markdown table: relative errors max|y - ref| / max|ref| and
||y - ref|| / ||ref||, and the tokens whose output is off by more than
1e-4 of max|ref| (against the FP8 reference: the tokens where a value
rounded to the neighbouring bf16 and then e4m3 value). Needs numpy.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "test", "Integration"))
import reference  # noqa: E402

CONFIG = {"model_type": "deepseek_v3", "hidden_size": 1024,
          "n_routed_experts": 64, "num_experts_per_tok": 6, "n_group": 8,
          "topk_group": 4, "moe_intermediate_size": 512,
          "n_shared_experts": 1, "norm_topk_prob": True,
          "routed_scaling_factor": 2.5}


def run(cmd):
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


def errors(y, ref):
    scale = np.abs(ref).max()
    off = (np.abs(y - ref).max(axis=1) > 1e-4 * scale).sum()
    return (np.abs(y - ref).max() / scale,
            np.linalg.norm(y - ref) / np.linalg.norm(ref), off)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    parser.add_argument("--tokens", default="1,128,1000")
    parser.add_argument("--work", default="")
    args = parser.parse_args()
    work = args.work or tempfile.mkdtemp(prefix="fp8-error-")
    config = os.path.join(work, "config.json")
    with open(config, "w") as f:
        json.dump(CONFIG, f)
    cfg = reference.Config(config)
    bundles = {}
    for dtype in ("bf16", "fp8"):
        bundles[dtype] = os.path.join(work, dtype + ".moeb")
        run([os.path.join(args.bin, "moe-compile"), "--hf-config", config,
             "--dtype", dtype, "-o", bundles[dtype]])
    print("| tokens | bundle | against | max rel. error | norm rel. error "
          "| tokens off by > 1e-4 |")
    print("|---|---|---|---|---|---|")
    for tokens in [int(t) for t in args.tokens.split(",")]:
        weights = os.path.join(work, f"w{tokens}.safetensors")
        inputs = os.path.join(work, f"x{tokens}.safetensors")
        gen = argparse.Namespace(config=config, tokens=tokens, seed=tokens,
                                 weights=weights, inputs=inputs, prefix="",
                                 dtype="bf16", case="random", mxfp4=False,
                                 fp8=False)
        reference.generate(gen)
        tensors = reference.read_safetensors(weights)
        x = reference.read_safetensors(inputs)["x"].astype(np.float64)
        exact, _, _ = reference.forward(cfg, tensors, "", x)
        fp8_ref, _, _ = reference.fp8_forward(cfg, tensors, "", x)
        for dtype, bundle in bundles.items():
            out = os.path.join(work, f"y-{dtype}-{tokens}.safetensors")
            run([os.path.join(args.bin, "moe-run"), bundle, "--weights",
                 weights, "--inputs", inputs, "--outputs", out])
            y = reference.read_safetensors(out)["y"].astype(np.float64)
            against = [("float64, unquantized", exact)]
            if dtype == "fp8":
                against.append(("reference FP8 layer", fp8_ref))
            for name, ref in against:
                top, norm, off = errors(y, ref)
                print(f"| {tokens} | {dtype} | {name} | {top:.2e} | {norm:.2e} "
                      f"| {off} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
