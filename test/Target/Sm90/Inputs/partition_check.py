"""Checks a sharded layer's --report against its SM partition.

usage: partition_check.py REPORT TOP_K HIDDEN RANKS [MANIFEST_JSON]

From the report's own statements and the layer's shape (given, not read
from the report), it checks that:
  - the exchange's sends run on exactly the comm SMs and every persistent
    kernel on the others;
  - where the model chose the partition, the comm SMs are the fewest whose
    modelled time is within 1% of the fastest candidate's;
  - the bytes each rank sends are those of uniform routing (every rank's
    experts get 1 / RANKS of its T x TOP_K rows; a dispatched row carries
    HIDDEN bf16 values and its f32 routing weight, a combined one the
    values), and the sends' time is those bytes at the lesser of the
    link's and the comm SMs' bandwidth the report states, plus a launch
    each;
  - the pass in series is the layer's estimate in the model's projection,
    and the chunked pipeline is the rest, the first chunk's dispatch, the
    larger of the routed GEMMs and the other chunks' sends, and the last
    chunk's combine;
  - the bundle's NCCL CTA cap (comm_sms) is the partition's.
It prints one line per check for FileCheck.
"""

import json
import re
import sys

LAUNCH_US = 2.0


def close(a, b, tol=0.06):
    """Equal to the report's printed precision (two or one decimals)."""
    return abs(a - b) <= tol + 1e-3 * abs(b)


def main():
    report = open(sys.argv[1]).read().splitlines()
    top_k, hidden, ranks = (int(v) for v in sys.argv[2:5])
    manifest = json.load(open(sys.argv[5])) if len(sys.argv) > 5 else None

    part = next(l for l in report if l.startswith("SM partition "))
    sms, comm = (int(v) for v in re.match(r"SM partition (\d+):(\d+)", part).groups())

    # The kernel table: name, grid, "(persistent)" for persistent grids.
    table = []
    for line in report[1:]:
        if line.startswith("cluster "):
            break
        f = line.split()
        table.append((f[0], f[1], len(f) > 2 and f[2] == "(persistent)"))
    sends = [n for n, _, _ in table
             if n.startswith("ep_") and not n.endswith("_wait")
             and n != "ep_counts"]
    for name, grid, persistent in table:
        if name in sends and int(grid) != comm:
            sys.exit(f"{name} runs on {grid} CTAs, not the {comm} comm SMs")
        if persistent and int(grid) != sms - comm:
            sys.exit(f"{name} persists on {grid} SMs, not {sms - comm}")
    print(f"partition {sms}:{comm}: sends {' '.join(sends)} on {comm} SMs, "
          f"{sum(p for _, _, p in table)} persistent kernels on {sms - comm}")

    cand = [l for l in report if l.strip().startswith("comm SMs -> ")]
    if cand:
        pairs = [(int(c), float(us)) for c, us in
                 re.findall(r" (\d+):([0-9.]+)", cand[0].split(":", 1)[1])]
        best = min(us for _, us in pairs)
        fewest = min(c for c, us in pairs if us <= best * 1.01)
        if [c for c, _ in pairs] != list(range(2, 33, 2)):
            sys.exit(f"candidates {[c for c, _ in pairs]}, expected 2 .. 32")
        if fewest != comm:
            sys.exit(f"chose {comm} comm SMs; the fewest within 1% is {fewest}")
        print(f"chosen: {comm}, the fewest within 1% of the fastest "
              f"({best:.0f} us)")
    else:
        print("given")

    header = next(l for l in report if l.startswith("exchange and overlap"))
    link, eff, per_sm = (float(v) for v in re.search(
        r"NVLink (\d+) GB/s each way at (\d+)%, (\d+) GB/s a comm SM",
        header).groups())
    rate = min(link * eff / 100, comm * per_sm) * 1e9
    i = report.index(header) + 2
    layer = {}
    for line in report:
        m = re.match(r"\s*(\d+) layer\s+\S+\s+\S+\s+\S+\s+([0-9.]+)", line)
        if m:
            layer[int(m.group(1))] = float(m.group(2))
    rows = 0
    while i < len(report) and re.match(r"\s*\d+ ", report[i]):
        f = report[i].split()
        t = int(f[0])
        d_mb, c_mb, sends_us = float(f[1]), float(f[2]), float(f[3])
        routed, other, serial, piped = (float(v) for v in f[5:9])
        out_rows = t * top_k * (ranks - 1) / ranks
        d_bytes = out_rows * (2 * hidden + 4)
        c_bytes = out_rows * 2 * hidden
        if not (close(d_mb, d_bytes / 1e6, 0.006) and
                close(c_mb, c_bytes / 1e6, 0.006)):
            sys.exit(f"{t} tokens: {d_mb}/{c_mb} MB, expected "
                     f"{d_bytes / 1e6:.2f}/{c_bytes / 1e6:.2f}")
        d_us = d_bytes / rate * 1e6 + LAUNCH_US
        c_us = c_bytes / rate * 1e6 + LAUNCH_US
        if not close(sends_us, d_us + c_us):
            sys.exit(f"{t} tokens: sends {sends_us} us, expected "
                     f"{d_us + c_us:.1f}")
        if not close(serial, routed + other + d_us + c_us, 0.2):
            sys.exit(f"{t} tokens: serial {serial} us is not its parts' sum")
        if t in layer and not close(serial, layer[t], 0.2):
            sys.exit(f"{t} tokens: serial {serial} us, the model's layer "
                     f"{layer[t]}")
        n = 4
        want = other + d_us / n + max(routed, (d_us + c_us) * (n - 1) / n) + \
            c_us / n
        if not close(piped, want, 0.2):
            sys.exit(f"{t} tokens: pipelined {piped} us, expected {want:.1f}")
        rows += 1
        i += 1
    print(f"exchange: {rows} token counts match uniform routing at "
          f"{rate / 1e9:.0f} GB/s")
    if manifest is not None:
        got = manifest["gpu"]["comm_sms"]
        if got != comm:
            sys.exit(f"manifest comm_sms {got}, partition {comm}")
        print(f"manifest comm_sms {got}")


if __name__ == "__main__":
    main()
