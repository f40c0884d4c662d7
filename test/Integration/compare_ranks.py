#!/usr/bin/env python3
"""Compares expert-parallel training runs with a single-rank run.

losses: the "step N loss L" lines of several moe-train outputs agree within
float32 reduction-order tolerance.

outputs: the --outputs files of moe-run on R ranks (PREFIX.rank0..R-1
.safetensors), each rank's rows in rank order, equal the single-rank ones.

grads: the --dump-grads files of a job of R ranks (PREFIX.rank0..R-1
.safetensors) together hold the single-rank gradients: each expert's tensors
on the rank that owns it, the replicated weights' (all-reduced) gradients
equal on every rank, and each rank's rows of x in rank order.
"""
import argparse
import json
import re
import struct
import sys

import numpy as np


def read_safetensors(path):
    with open(path, "rb") as f:
        size = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(size))
        data = f.read()
    dtypes = {"F32": np.float32, "I64": np.int64, "I32": np.int32}
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        out[name] = np.frombuffer(data[begin:end], dtype=dtypes[info["dtype"]]).reshape(info["shape"])
    return out


def losses(path):
    values = {}
    for line in open(path):
        m = re.match(r"step (\d+) loss (\S+)", line)
        if m:
            values[int(m.group(1))] = float(m.group(2))
    return values


def close(a, b, rtol):
    scale = max(float(np.max(np.abs(b))), 1e-30)
    return float(np.max(np.abs(a - b))) <= rtol * scale


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    l = sub.add_parser("losses")
    l.add_argument("reference")
    l.add_argument("others", nargs="+")
    l.add_argument("--rtol", type=float, default=1e-4)
    o = sub.add_parser("outputs")
    o.add_argument("reference")
    o.add_argument("prefix")
    o.add_argument("--ranks", type=int, required=True)
    o.add_argument("--rtol", type=float, default=1e-5)
    g = sub.add_parser("grads")
    g.add_argument("reference")
    g.add_argument("prefix")
    g.add_argument("--ranks", type=int, required=True)
    g.add_argument("--rtol", type=float, default=1e-4)
    a = p.parse_args()

    if a.cmd == "losses":
        ref = losses(a.reference)
        if not ref:
            sys.exit("compare_ranks: no losses in " + a.reference)
        for other in a.others:
            got = losses(other)
            if sorted(got) != sorted(ref):
                sys.exit(f"compare_ranks: {other} has steps {sorted(got)}, expected {sorted(ref)}")
            for step, value in ref.items():
                if abs(got[step] - value) > a.rtol * abs(value):
                    sys.exit(f"compare_ranks: FAIL {other} step {step}: loss {got[step]} vs {value}")
        print(f"compare_ranks: {len(ref)} steps agree in {len(a.others)} runs")
        return

    if a.cmd == "outputs":
        ref = read_safetensors(a.reference)
        parts = [read_safetensors(f"{a.prefix}.rank{r}.safetensors") for r in range(a.ranks)]
        failed = 0
        for name, want in ref.items():
            got = np.concatenate([part[name] for part in parts])
            exact = want.dtype.kind == "i"
            if got.shape != want.shape or (np.any(got != want) if exact else not close(got, want, a.rtol)):
                print(f"FAIL {name}")
                failed += 1
        print(f"compare_ranks: {len(ref)} outputs, {failed} failed")
        sys.exit(1 if failed else 0)

    ref = read_safetensors(a.reference)
    parts = [read_safetensors(f"{a.prefix}.rank{r}.safetensors") for r in range(a.ranks)]
    failed = 0
    for name, want in ref.items():
        holders = [part[name] for part in parts if name in part]
        if name == "x":
            got = np.concatenate(holders)
        elif len(holders) == 1:
            got = holders[0]
        elif len(holders) == a.ranks:
            for h in holders[1:]:
                if not np.array_equal(h, holders[0]):
                    print(f"FAIL {name}: the ranks disagree")
                    failed += 1
            got = holders[0]
        else:
            print(f"FAIL {name}: on {len(holders)} of {a.ranks} ranks")
            failed += 1
            continue
        if got.shape != want.shape or not close(got, want, a.rtol):
            print(f"FAIL {name}: {got.shape} vs {want.shape}")
            failed += 1
    extra = set().union(*parts) - set(ref)
    for name in sorted(extra):
        print(f"FAIL {name}: not in the single-rank gradients")
        failed += 1
    print(f"compare_ranks: {len(ref)} tensors, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
