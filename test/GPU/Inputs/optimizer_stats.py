"""Compares the emulator's kernel statistics (MOE_EMU_STATS) of a one-step
and a longer training run: each optimizer kernel's launches, and whether
its later launches did the first one's work (AdamW: every step alike) or
less (the compute copies and the state's check: the flag set after the
first step)."""

import sys


def read_stats(path):
    stats = {}
    for line in open(path):
        fields = line.split()
        if len(fields) == 7 and fields[0] == "moe-emu:" and \
                fields[2].isdigit():
            stats[fields[1]] = (int(fields[2]), int(fields[3]))
    return stats


def main():
    one, more = read_stats(sys.argv[1]), read_stats(sys.argv[2])
    kernels = ("train_grad_stats", "train_update_check", "train_adamw",
               "train_compute_copies")
    for k in kernels:
        if k not in one or k not in more:
            print(f"{k}: not launched")
            return 1
        print(f"{k}: {one[k][0]} launches in one step, {more[k][0]} in "
              f"the other run")
    # Warp instructions of the first step's launch, and of each later one
    # (the emulator's counts do not depend on timing).
    for k in kernels:
        (n1, first), (n, total) = one[k], more[k]
        if n1 != 1 or n < 2:
            continue
        # The other run's first launch does the one-step run's work (a
        # resumed run's too: it uploaded its state), the rest `later` each.
        later = (total - first) / (n - 1)
        if later == first:
            print(f"{k}: each step alike")
        elif 0 < later < first:
            print(f"{k}: later steps do less")
        else:
            print(f"{k}: later launches run {later:.0f} warp instructions, "
                  f"the first {first}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
