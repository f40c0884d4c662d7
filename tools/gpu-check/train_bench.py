#!/usr/bin/env python3
"""The GPU check's training parts that need no PyTorch (numpy only):

  train_bench.py steps MOE_TRAIN GPU.moeb HOST.moeb WORK --weights W --batch B
                       [--steps N]
      N steps (default 5) of the sm_90a bundle against N of the host
      bundle of the same layer, same weights and batch: every step's loss,
      and the final state (AdamW's moments, how far the masters moved, the
      selection bias).

  train_bench.py speed MOE_TRAIN GPU.moeb WORK [--steps N] [--tokens T]
      N steps (default 4) on random data with --trace; from the last step:
      its time, each GEMM kernel's time and rate (useful FLOPs: the routed
      rows, not the padding), and the backward GEMMs' rate together; then
      N steps untimed (CUDA graphs): the last step's wall clock against
      the sum of its kernels, and what the driver was asked in it.

Both print PASS/FAIL lines (speed always passes: it measures) and exit
non-zero on a failure. gpu_check.py calls them; run alone they work on
the PTX emulator too (MOE_CUDA_DRIVER=libcuda-emu.so), where times mean
nothing.
"""
import argparse
import glob
import json
import os
import re
import struct
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
# reference.py (safetensors in numpy) sits beside this file in a package,
# in test/Integration in the source tree.
for where in (HERE, os.path.join(HERE, "..", "..", "test", "Integration")):
    if os.path.exists(os.path.join(where, "reference.py")):
        sys.path.insert(0, where)
        break
import reference  # noqa: E402

LR, GAMMA = 1e-3, 1e-3


# Seconds one tool run may take before it counts as hung (a kernel waiting
# on an mbarrier that never completes spins for ever): the check goes on
# with the next piece instead of spending the GPU lease.
TOOL_TIMEOUT = float(os.environ.get("MOE_GPU_CHECK_TIMEOUT", "120"))


def run_tool(cmd):
    """subprocess.run with the tool timeout; a run past it is killed and
    reported as failed (returncode 124, what timeout(1) uses)."""
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=TOOL_TIMEOUT)
    except subprocess.TimeoutExpired as error:
        def text(b):
            return b.decode(errors="replace") if isinstance(b, bytes) else (b or "")
        return subprocess.CompletedProcess(
            cmd, 124, text(error.stdout),
            text(error.stderr) + "\n%s: killed after %.0f s (MOE_GPU_CHECK_TIMEOUT)\n"
            % (os.path.basename(cmd[0]), TOOL_TIMEOUT))


def rel(got, want):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    d = np.linalg.norm(want)
    return np.linalg.norm(got - want) / d if d > 0 else np.linalg.norm(got)


def run_steps(moe_train, bundle, work, device, weights, batch, steps):
    """Losses of every step and the state after the last."""
    ckpt = os.path.join(work, device + "-ckpt")
    cmd = [moe_train, bundle, "--device=" + device, "--steps", str(steps),
           "--lr", str(LR), "--bias-update", str(GAMMA), "--weights", weights,
           "--inputs", batch, "--checkpoint", ckpt, "--checkpoint-every", str(steps)]
    run = run_tool(cmd)
    if run.returncode:
        raise RuntimeError("moe-train --device=%s failed:\n%s%s"
                           % (device, run.stdout, run.stderr))
    losses = [float(v) for v in re.findall(r"^step \d+ loss (\S+)", run.stdout, re.M)]
    states = glob.glob(os.path.join(ckpt, "step-*", "state.safetensors"))
    if len(losses) != steps or len(states) != 1:
        raise RuntimeError("moe-train --device=%s: %d losses and %d checkpoints "
                           "for %d steps" % (device, len(losses), len(states), steps))
    return losses, reference.read_safetensors(states[0])


def stacked(manifest, raw):
    """A weights file's tensors under their roles (per-expert tensors
    stacked), as a checkpoint's state names them."""
    out = {}
    for p in manifest["parameters"]:
        if p["stack"]:
            out[p["role"]] = np.stack([raw[p["name"].replace("{i}", str(i))]
                                       for i in range(p["stack"])])
        elif p["name"] in raw:
            out[p["role"]] = raw[p["name"]]
    return out


def check_steps(moe_train, gpu_bundle, host_bundle, work, weights, batch,
                steps=5, tol=2e-2, label=""):
    os.makedirs(work, exist_ok=True)
    host_losses, host_state = run_steps(moe_train, host_bundle, work, "host",
                                        weights, batch, steps)
    losses, state = run_steps(moe_train, gpu_bundle, work, "cuda", weights,
                              batch, steps)
    w0 = stacked(read_manifest(gpu_bundle), reference.read_safetensors(weights))
    worst = max(rel(a, b) for a, b in zip(losses, host_losses))
    ok = worst <= tol
    notes = []
    for name in sorted(host_state):
        if name.startswith("__") or name.endswith(".m") or name.endswith(".v"):
            continue
        if name == "score_bias":
            # In steps of gamma; one routing decision decided otherwise in
            # bf16 moves it by one.
            off = float(np.abs(state[name] - host_state[name]).max()) / GAMMA
            notes.append("bias %.0f gamma" % off)
            ok = ok and off <= 2.5
            continue
        if name + ".m" not in host_state:
            continue
        m = rel(state[name + ".m"], host_state[name + ".m"])
        v = rel(state[name + ".v"], host_state[name + ".v"])
        # Adam moves every element by about lr whatever its gradient, so
        # elements whose gradient is about zero move either way: the
        # movement agrees to a few percent.
        start = w0[name].astype(np.float64)
        moved = rel(state[name] - start, host_state[name] - start)
        ok = ok and m <= tol and v <= 2 * tol and moved <= 5 * tol
        worst_state = max(m, v / 2, moved / 5)
        notes.append("%s %.1e" % (name, worst_state))
    print("  %s train %s: %d steps vs the host, losses within %.1e (bound %.0e); "
          "state: %s" % ("PASS" if ok else "FAIL", label, steps, worst, tol,
                         ", ".join(notes)))
    return ok


# Useful FLOPs of the training step's GEMM kernels: the routed rows (T * k),
# the tokens for the shared experts and the router; K and N per kernel.
def gemm_flops(layer, tokens):
    h, f, e, k = layer["hidden"], layer["ffn"], layer["experts"], layer["top_k"]
    s = layer.get("shared_experts", 0) * layer.get("shared_ffn", 0)
    # The routed experts over T * k rows, the shared ones over T: the same
    # GEMMs of width f or s. Gate and up are one GEMM of twice the width in
    # the forward pass and its recomputation (gate_up), and in dX
    # (rows_grad); each has its own dW.
    def ffn(forward, train, rows, width):
        return {
            forward + "_up": 2 * rows * 2 * width * h,
            forward + "_down": 2 * rows * width * h,
            train + "_gate_up": 2 * rows * 2 * width * h,
            train + "_dact": 2 * rows * width * h,
            train + "_rows_grad": 2 * rows * 2 * width * h,
            train + "_down_grad": 2 * rows * h * width,
            train + "_gate_grad": 2 * rows * width * h,
            train + "_up_grad": 2 * rows * width * h,
        }
    flops = ffn("expert", "train_expert", tokens * k, f)
    flops.update({"router": 2 * tokens * e * h, "train_router_dx": 2 * tokens * e * h,
                  "train_router_grad": 2 * tokens * e * h})
    if s:
        flops.update(ffn("shared", "train_shared", tokens, s))
    return flops


def measure(moe_train, bundle, work, steps=4, tokens=None, seed=1, label=""):
    os.makedirs(work, exist_ok=True)
    manifest = read_manifest(bundle)
    tokens = tokens or manifest["max_tokens"]
    trace = os.path.join(work, "trace.json")
    run = run_tool([moe_train, bundle, "--device=cuda", "--steps", str(steps),
                    "--tokens", str(tokens), "--seed", str(seed), "--trace", trace])
    if run.returncode:
        print("  FAIL train speed %s: moe-train failed\n%s%s"
              % (label, run.stdout, run.stderr))
        return False
    events = json.load(open(trace))["traceEvents"]
    lanes = {e["tid"]: e["args"]["name"] for e in events if e.get("ph") == "M"}
    step_lane = next(t for t, n in lanes.items() if n.startswith("training step"))
    kernel_lane = next((t for t, n in lanes.items() if n.startswith("kernels")), None)
    last = "step %d" % steps
    step_ms = next(e["dur"] / 1e3 for e in events
                   if e.get("tid") == step_lane and e["name"].startswith(last + ":"))
    kernels = {}
    for e in events:
        if e.get("tid") == kernel_lane and e["name"].startswith(last + ": "):
            name = e["name"][len(last) + 2:]
            kernels[name] = kernels.get(name, 0.0) + e["dur"] / 1e3
    flops = gemm_flops(manifest["layer"], tokens)
    print("  train speed %s: %d tokens, step %.2f ms (%.0f tokens/s)"
          % (label, tokens, step_ms, tokens / step_ms * 1e3))
    backward_flops = backward_ms = 0.0
    for name, ms in kernels.items():
        if name not in flops:
            continue
        rate = flops[name] / (ms / 1e3) / 1e12 if ms > 0 else 0.0
        print("    %-26s %9.3f ms %8.1f TFLOP/s" % (name, ms, rate))
        if name.startswith("train_"):
            backward_flops += flops[name]
            backward_ms += ms
    if backward_ms > 0:
        print("    %-26s %9.3f ms %8.1f TFLOP/s" % (
            "backward GEMMs", backward_ms, backward_flops / (backward_ms / 1e3) / 1e12))
    # The same steps untimed: each is then one CUDA graph launch and one
    # wait (moe-train --activity says so); the last step's wall clock
    # against the sum of its kernels above is the host's share.
    run = run_tool([moe_train, bundle, "--device=cuda", "--steps", str(steps),
                    "--tokens", str(tokens), "--seed", str(seed), "--activity"])
    if run.returncode:
        print("  FAIL train speed %s: moe-train (graphs) failed\n%s%s"
              % (label, run.stdout, run.stderr))
        return False
    rates = re.findall(r"^step %d loss \S+ tokens/s ([0-9.]+)" % steps,
                       run.stdout, re.M)
    driver = re.findall(r"^moe-train: driver, step %d: (.*)$" % steps,
                        run.stdout, re.M)
    kernel_ms = sum(kernels.values())
    if rates and float(rates[0]) > 0:
        graph_ms = tokens / float(rates[0]) * 1e3
        print("  train speed %s, graph replayed: step %.2f ms, kernels %.2f ms "
              "(host %.1f%%); driver: %s"
              % (label, graph_ms, kernel_ms,
                 100.0 * max(graph_ms - kernel_ms, 0.0) / graph_ms,
                 driver[0] if driver else "?"))
    print("  PASS train speed %s (measured)" % label)
    return True


def read_manifest(path):
    """A bundle's manifest: its JSON after the 32-byte header and the blob
    table (runtime Bundle.h)."""
    with open(path, "rb") as f:
        head = f.read(32)
        manifest_size, blob_count = struct.unpack("<QQ", head[16:32])
        f.seek(32 + 8 * blob_count)
        return json.loads(f.read(manifest_size))


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("steps")
    for a in ("moe_train", "gpu_bundle", "host_bundle", "work"):
        s.add_argument(a)
    s.add_argument("--weights", required=True)
    s.add_argument("--batch", required=True)
    s.add_argument("--steps", type=int, default=5)
    p = sub.add_parser("speed")
    for a in ("moe_train", "bundle", "work"):
        p.add_argument(a)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--tokens", type=int, default=None)
    args = ap.parse_args()
    if args.cmd == "steps":
        ok = check_steps(args.moe_train, args.gpu_bundle, args.host_bundle, args.work,
                         args.weights, args.batch, args.steps,
                         label=os.path.basename(args.gpu_bundle))
    else:
        ok = measure(args.moe_train, args.bundle, args.work, args.steps, args.tokens,
                     label=os.path.basename(args.bundle))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
