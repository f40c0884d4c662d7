"""Reads moe-compile --report from stdin and checks that the model's
estimate of the router (the GEMM and, when split, the slices' sum) at a
token count is under a bound: prints one line saying so, or the rows it
read and exits 1."""

import argparse
import sys


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, required=True)
    parser.add_argument("--under-us", type=float, required=True)
    args = parser.parse_args()
    rows = {}
    for line in sys.stdin:
        fields = line.split()
        # "tokens kernel GFLOP MB roofline estimate bound"
        if len(fields) == 7 and fields[0] == str(args.tokens) and \
                fields[1] in ("router", "router_sum"):
            rows[fields[1]] = float(fields[5])
    if "router" not in rows:
        print(f"router_model: no router row at {args.tokens} tokens")
        return 1
    total = sum(rows.values())
    names = " + ".join(sorted(rows))
    if total >= args.under_us:
        print(f"router_model: {names} at {args.tokens} tokens is "
              f"{total:.1f} us, not under {args.under_us:g} us")
        return 1
    print(f"router at {args.tokens} tokens: {names} under "
          f"{args.under_us:g} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
