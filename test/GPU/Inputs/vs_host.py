#!/usr/bin/env python3
"""Compares moe-run's outputs on the GPU (or the PTX emulator) with the host
target's for the same weights and inputs.

Every token must pick the same experts, but for at most `--max-disagree`
of them (bf16 GEMMs that sum in another order may break a near tie of
router scores the other way); on the tokens that agree, y must match
within `--tol` of the largest |y|, and the routing weights within `--tol`.
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..",
                                "Integration"))
import reference  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("host")
    p.add_argument("gpu")
    p.add_argument("--tol", type=float, default=2e-2)
    p.add_argument("--max-disagree", type=float, default=0.01,
                   help="most tokens (a fraction) whose experts may differ")
    p.add_argument("--label", default="gpu")
    a = p.parse_args()
    h = reference.read_safetensors(a.host)
    g = reference.read_safetensors(a.gpu)
    for name in ("y", "topk_ids", "topk_weights"):
        if h[name].shape != g[name].shape:
            sys.exit("%s: '%s' is %s on the host, %s on the gpu"
                     % (a.label, name, h[name].shape, g[name].shape))
    hi = np.sort(h["topk_ids"], axis=1)
    gi = np.sort(g["topk_ids"], axis=1)
    same = (hi == gi).all(axis=1)
    tokens = same.size
    if (~same).sum() > a.max_disagree * tokens:
        sys.exit("%s: %d of %d tokens pick other experts than on the host"
                 % (a.label, (~same).sum(), tokens))
    hy = h["y"].astype(np.float64)[same]
    gy = g["y"].astype(np.float64)[same]
    scale = max(np.abs(h["y"]).max(), 1e-30)
    err = np.abs(hy - gy).max() / scale if hy.size else 0.0
    if err > a.tol:
        sys.exit("%s: y differs from the host's by %.3g of its largest "
                 "value (tolerance %g)" % (a.label, err, a.tol))
    order_h = np.argsort(h["topk_ids"], axis=1)
    order_g = np.argsort(g["topk_ids"], axis=1)
    hw = np.take_along_axis(h["topk_weights"], order_h, 1)[same]
    gw = np.take_along_axis(g["topk_weights"], order_g, 1)[same]
    werr = np.abs(hw.astype(np.float64) - gw).max() if hw.size else 0.0
    if werr > a.tol:
        sys.exit("%s: the routing weights differ from the host's by %.3g "
                 "(tolerance %g)" % (a.label, werr, a.tol))
    print("%s: %d tokens match the host (%d pick other experts), y within "
          "%.2g" % (a.label, tokens, (~same).sum(), err))


if __name__ == "__main__":
    main()
