"""Reads moe-compile --train --report from stdin and checks that the
"of which the optimizer" line is the sum of the training table's compute
copies, gradient statistics, update check, verdict, AdamW and
bias-update rows, and its share
of the step line's total."""

import sys


def main():
    rows, step, optimizer, share = {}, None, None, None
    in_step = False
    for line in sys.stdin:
        if line.startswith("training step,"):
            in_step = True
            continue
        if not in_step:
            continue
        fields = line.split()
        if line.startswith("of which the optimizer"):
            optimizer = float(fields[4])
            share = float(fields[5].strip("(%"))
        elif fields and fields[0] == "step":
            step = float(fields[2])
        elif len(fields) == 5 and fields[0].startswith("train_"):
            rows[fields[0]] = float(fields[4])
    names = ("train_compute_copies", "train_grad_stats",
             "train_update_check", "train_update_verdict", "train_adamw",
             "train_bias")

    def is_optimizer(name):
        return name in names
    expected = sum(us for name, us in rows.items() if is_optimizer(name))
    if optimizer is None or step is None:
        print("optimizer_sum: no optimizer or step line")
        return 1
    # Each row is printed to 0.1 us.
    slack = 0.05 * (len(rows) + 1)
    if abs(optimizer - expected) > slack or \
            abs(share - 100 * optimizer / step) > 0.1:
        print(f"optimizer_sum: {optimizer} us ({share}%) but the rows sum "
              f"to {expected:.1f} us of a {step} us step")
        return 1
    print("optimizer_sum: the optimizer line is its kernels' sum")
    return 0


if __name__ == "__main__":
    sys.exit(main())
