#!/usr/bin/env python3
"""Reads a Chrome trace of moe-run or moe-train (--trace) and reports which
exchanges on the communication stream's lane ran while a kernel ran on the
compute stream's lane: spans that intersect in time.

  trace_overlap.py TRACE.json

Prints `overlap: N of E exchanges beside kernels` and, for each such
exchange, the kernel it overlapped longest (or `overlap: none of E`).
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
            found.append((x["name"], best["name"], best_us))
    if not found:
        print(f"overlap: none of {len(exchanges)}")
        return
    print(f"overlap: {len(found)} of {len(exchanges)} exchanges beside kernels")
    for exchange, kernel, us in found:
        print(f"  {exchange} | {kernel} | {us / 1000:.3f} ms")


if __name__ == "__main__":
    main()
