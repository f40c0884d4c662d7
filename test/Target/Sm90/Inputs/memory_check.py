#!/usr/bin/env python3
"""Checks moe-compile --report's device memory against the bundle: the
total must be what the manifest's buffers take at their capacities (each
dimension: a size, or -1 tokens, -2 the dispatched rows, -3 the rows a
rank can receive, `received_row_capacity`), and the five parts must add up to
it. With --below, the total must be under that many bytes.

  memory_check.py BUNDLE REPORT [--below BYTES]
"""
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "Tools", "Inputs"))
from bundle_tool import read_manifest  # noqa: E402

SIZES = {"f32": 4, "bf16": 2, "f16": 2, "i32": 4, "i64": 8, "i8": 1, "u8": 1}
UNITS = {"B": 1, "kB": 1e3, "MB": 1e6, "GB": 1e9}


def parse_bytes(text):
    value, unit = text.split()
    return float(value) * UNITS[unit]


def main():
    bundle, report = sys.argv[1], sys.argv[2]
    below = float(sys.argv[4]) if len(sys.argv) > 4 and sys.argv[3] == "--below" else None
    m = read_manifest(bundle)
    gpu = m["gpu"]
    tokens, rows, ranks = m["max_tokens"], gpu["row_capacity"], m.get("expert_parallel", 1)
    received = gpu.get("received_row_capacity") or ranks * rows
    dims = {-1: tokens, -2: rows, -3: received}
    want = 0
    for b in gpu["buffers"]:
        n = SIZES[b["dtype"]]
        for d in b["shape"]:
            n *= dims.get(d, d)
        want += n
    text = open(report).read()
    total = re.search(r"device memory per rank \([^)]*\): ([0-9.]+ [kMG]?B)", text)
    if not total:
        sys.exit("memory-check: no device memory line in the report")
    got = parse_bytes(total.group(1))
    parts = [parse_bytes(p) for p in re.findall(
        r"^  (?:weights|optimizer state|gradients|activations|workspace)[^\n]*?([0-9.]+ [kMG]?B)$",
        text, re.M)]
    ok = True
    # The report rounds to 3 significant digits after the point.
    if len(parts) != 5 or abs(sum(parts) - got) > 0.02 * got + 1e4:
        print("memory-check: the parts %s do not add up to %s" % (parts, got))
        ok = False
    if abs(got - want) > 0.005 * want + 1e4:
        print("memory-check: the report says %.4g bytes, the buffers take %d" % (got, want))
        ok = False
    if below is not None and not want < below:
        print("memory-check: %d bytes is not below %d" % (want, below))
        ok = False
    print("memory-check: %s (%.2f GB)" % ("ok" if ok else "FAILED", want / 1e9))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
