#!/usr/bin/env python3
"""Compares moe-train's --save-weights file with the master weights of a
checkpoint's state (role names, experts stacked): prints 'equal' when every
saved tensor is its master's value (bit for bit), else the first that is
not. With --differs-from FILE, also counts the tensors that differ from
FILE's, and requires some (the weights did train; an expert that saw no
token keeps its weights when there is no weight decay)."""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference as r  # noqa: E402

# Checkpoint name (DeepSeek naming) -> (state name, stacked by expert).
ROLES = {"gate.weight": "router_weight",
         "gate.e_score_correction_bias": "score_bias",
         "gate_proj.weight": "gate_weight", "up_proj.weight": "up_weight",
         "down_proj.weight": "down_weight"}


def master(state, name, suffix=""):
    """The state's tensor of checkpoint name `name` (an expert's slice of
    the stacked one), or with `suffix` ".m" or ".v" its AdamW moment."""
    if name.startswith("experts."):
        _, e, rest = name.split(".", 2)
        return state[ROLES[rest] + suffix][int(e)]
    if name.startswith("shared_experts."):
        return state["shared_" + ROLES[name.split(".", 1)[1]] + suffix]
    return state[ROLES[name] + suffix]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("saved")
    ap.add_argument("state")
    ap.add_argument("--differs-from")
    args = ap.parse_args()
    saved = r.read_safetensors(args.saved)
    state = r.read_safetensors(args.state)
    before = r.read_safetensors(args.differs_from) if args.differs_from else {}
    changed = 0
    for name in sorted(saved):
        if not np.array_equal(saved[name], master(state, name)):
            print("differs from its master:", name)
            return
        if name in before and not np.array_equal(saved[name], before[name]):
            changed += 1
    if before and not changed:
        print("did not train")
        return
    print("equal: %d tensors" % len(saved) +
          (", %d trained" % changed if before else ""))


if __name__ == "__main__":
    main()
