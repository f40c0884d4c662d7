#!/usr/bin/env python3
"""Reads a Chrome trace of moe-run or moe-train (--trace) and reports which
exchanges on the communication stream's lane ran while a kernel ran on the
compute stream's lane: spans that intersect in time.

  trace_overlap.py TRACE.json [--sms N]

Prints `overlap: N of E exchanges beside kernels` and, for each such
exchange, the kernel it overlapped longest (or `overlap: none of E`). The
communication lane holds NCCL's exchanges and the device-initiated sends'
kernels; a kernel's span carries its CTAs. With --sms, every pair of
kernels that overlap must fit the N SMs together (one CTA an SM, as the
persistent GEMMs and the sends take them): disjoint SMs.
"""
import json
import sys


def lanes(events):
    names = {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            names[e["args"]["name"]] = e["tid"]
    return names


def main():
    events = json.load(open(sys.argv[1]))["traceEvents"]
    sms = int(sys.argv[3]) if len(sys.argv) > 3 and sys.argv[2] == "--sms" else None
    names = lanes(events)
    kernel_lane = names.get("kernels (compute stream)")
    exchange_lane = names.get("exchanges (communication stream)")
    if kernel_lane is None or exchange_lane is None:
        sys.exit("trace_overlap: the trace has no compute or communication lane")
    spans = [e for e in events if e.get("ph") == "X"]
    kernels = [e for e in spans if e["tid"] == kernel_lane]
    exchanges = [e for e in spans if e["tid"] == exchange_lane]
    found = []
    for x in exchanges:
        best, best_us = None, 0.0
        for k in kernels:
            shared = min(x["ts"] + x["dur"], k["ts"] + k["dur"]) - max(x["ts"], k["ts"])
            if shared > best_us:
                best, best_us = k, shared
        if best is not None:
            found.append((x, best, best_us))
    if not found:
        print(f"overlap: none of {len(exchanges)}")
        return
    print(f"overlap: {len(found)} of {len(exchanges)} exchanges beside kernels")
    ctas = lambda e: e.get("args", {}).get("ctas", 0)
    for x, k, us in found:
        grids = f" | {ctas(x)} + {ctas(k)} CTAs" if ctas(x) else ""
        print(f"  {x['name']} | {k['name']} | {us / 1000:.3f} ms{grids}")
    if sms is None:
        return
    # Every kernel of the communication lane against every kernel it
    # overlaps at all.
    worst = 0
    for x in exchanges:
        for k in kernels:
            if min(x["ts"] + x["dur"], k["ts"] + k["dur"]) > max(x["ts"], k["ts"]):
                if not ctas(x) or not ctas(k):
                    continue
                worst = max(worst, ctas(x) + ctas(k))
                if ctas(x) + ctas(k) > sms:
                    print(f"SMs: {x['name']} ({ctas(x)} CTAs) beside "
                          f"{k['name']} ({ctas(k)}) exceed {sms}")
                    sys.exit(1)
    print(f"SMs: every overlap fits {sms} (at most {worst} CTAs at once)")


if __name__ == "__main__":
    main()
