#!/usr/bin/env python3
"""The host target against PyTorch on the CPU, in one run (issue 20).

For each layer and token count: `moe-run` of a host bundle (seeded random
weights and tokens, saved), then the same forward pass in PyTorch eager
(the Hugging Face style loop over experts, float32, from the saved weights
and tokens; its output is checked against moe-run's), both with the same
number of threads; and a training step: `moe-train` (student and teacher on
fresh tokens, the compiled forward, MSE loss, backward and AdamW on every
weight) against PyTorch autograd and torch.optim.AdamW on the same layer.
Times are medians after a warm-up, of at least --repeat runs and of enough
runs to cover a quarter of a second (short passes). GFLOP/s counts the useful work (router,
k routed experts and the shared experts per token; a training step counts
3x its forward), against the machine's peak as `torch.matmul` of 2048 x 2048
float32 measures it with the same threads.

Prints a Markdown table; `--write-docs FILE` also replaces the table
between the markers `<!-- bench-vs-torch -->` and `<!-- /bench-vs-torch -->`
in FILE. Run through scripts/bench-vs-torch.sh (which makes a venv with a
CPU PyTorch).
"""
import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools", "gpu-check"))
from gpu_check import moe_layer, read_safetensors, route, stacked  # noqa: E402
from train_bench import read_manifest  # noqa: E402

LAYERS = {
    # name: (config.json, description)
    "mixtral": ({"model_type": "mixtral", "hidden_size": 2048,
                 "num_local_experts": 8, "num_experts_per_tok": 2,
                 "intermediate_size": 4096},
                "Mixtral-like (hidden 2048, 8 experts of 4096, top-2)"),
    "dsv3": ({"model_type": "deepseek_v3", "hidden_size": 1024,
              "n_routed_experts": 64, "num_experts_per_tok": 6,
              "n_group": 1, "topk_group": 1, "moe_intermediate_size": 512,
              "n_shared_experts": 1, "norm_topk_prob": True,
              "routed_scaling_factor": 2.5},
             "DeepSeek-V3-like (hidden 1024, 64 experts of 512, top-6, 1 shared)"),
    "tiny": ({"model_type": "deepseek_v3", "hidden_size": 64,
              "n_routed_experts": 16, "num_experts_per_tok": 4,
              "n_group": 1, "topk_group": 1, "moe_intermediate_size": 32,
              "n_shared_experts": 1, "norm_topk_prob": True,
              "routed_scaling_factor": 2.5},
             "tiny (hidden 64, 16 experts of 32, top-4, 1 shared)"),
}


def run(cmd):
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit("bench-vs-torch: %s failed (%d):\n%s%s" % (
            " ".join(cmd), result.returncode, result.stdout, result.stderr))
    return result.stdout


def forward_flops(layer, tokens):
    h, f, k = layer["hidden"], layer["ffn"], layer["top_k"]
    flops = 2 * h * layer["experts"] + k * 6 * h * f
    flops += layer["shared_experts"] * 6 * h * layer["shared_ffn"]
    return flops * tokens


def median(values):
    values = sorted(values)
    return values[len(values) // 2]


# Seconds of repeats a timing covers at least (short work runs more times).
MIN_TIMED = 0.25


def repeats_for(seconds, repeat):
    """Repeats of work that takes `seconds` to cover MIN_TIMED."""
    return max(repeat, min(1000, int(MIN_TIMED / max(seconds, 1e-6)) + 1))


def timed(fn, repeats):
    fn()
    start = time.perf_counter()
    fn()
    repeats = repeats_for(time.perf_counter() - start, repeats)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return median(times)


def cpu_name():
    """The CPU's model name (the table's numbers depend on it)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def matmul_peak(repeats=5):
    a = torch.randn(2048, 2048)
    b = torch.randn(2048, 2048)
    seconds = timed(lambda: torch.matmul(a, b), repeats)
    return 2 * 2048 ** 3 / seconds / 1e9


class TorchLayer(torch.nn.Module):
    """The layer as trainable float32 parameters, one per expert and
    projection as in a Hugging Face module's nn.Linear experts (a stacked
    [E, ...] parameter indexed per expert would make autograd build a
    full-size gradient per expert); forward as moe_layer."""

    def __init__(self, layer, weights):
        super().__init__()
        self.layer = layer
        self.experts = torch.nn.ModuleDict()
        self.dense = torch.nn.ParameterDict()
        for role, t in weights.items():
            if role == "score_bias":
                continue
            if role in ("gate_weight", "up_weight", "down_weight"):
                self.experts[role] = torch.nn.ParameterList(
                    [torch.nn.Parameter(e.float().clone()) for e in t])
            else:
                self.dense[role] = torch.nn.Parameter(t.float().clone())
        self.register_buffer("bias", weights.get(
            "score_bias", torch.zeros(layer["experts"])).float().clone())

    def forward(self, x):
        w = dict(self.dense.items())
        w.update({role: list(p) for role, p in self.experts.items()})
        return moe_layer(self.layer, x, w, self.bias)


def write_config(work, name):
    path = os.path.join(work, name + ".json")
    with open(path, "w") as f:
        json.dump(LAYERS[name][0], f)
    return path


def mcpu_flag(args):
    """--mcpu for moe-compile, or nothing for its default."""
    return ["--mcpu=" + args.mcpu] if args.mcpu else []


def ours_forward(args, work, name, tokens):
    """moe-run's time; its weights, tokens and outputs stay for PyTorch."""
    cfg = write_config(work, name)
    base = os.path.join(work, "%s-%d" % (name, tokens))
    bundle = base + ".moeb"
    run([args.bin + "/moe-compile", "--hf-config", cfg, "--max-tokens",
         str(tokens), "--no-cache", "-o", bundle] + mcpu_flag(args))
    files = {n: base + "-" + n + ".safetensors" for n in ("w", "x", "y")}
    def moe_run(repeat, extra):
        out = run([args.bin + "/moe-run", bundle, "--random-weights",
                   "--tokens", str(tokens), "--repeat", str(repeat),
                   "--threads", str(args.threads)] + extra)
        return float(re.search(r"in ([0-9.]+) ms", out).group(1)) / 1e3

    ours = moe_run(args.repeat, ["--save-weights", files["w"], "--save-inputs",
                                 files["x"], "--outputs", files["y"]])
    if ours * args.repeat < MIN_TIMED:
        # A short pass again with enough repeats: the first milliseconds of a
        # process on two threads are sometimes twice as slow (1.5 or 3.5 ms
        # for the tiny layer, medians of 5), which a median of 5 does not
        # smooth out.
        ours = moe_run(repeats_for(ours, args.repeat), [])
    return {"manifest": read_manifest(bundle), "ours": ours, "files": files}


def torch_forward(args, name, tokens, item):
    """PyTorch's time on moe-run's weights and tokens, and the relative
    difference of the two outputs."""
    manifest = item["manifest"]
    layer = manifest["layer"]
    files = item["files"]
    w = {role: t.float() for role, t in
         stacked(manifest, read_safetensors(files["w"])).items()}
    bias = w.get("score_bias", torch.zeros(layer["experts"]))
    x = read_safetensors(files["x"])["x"].float()
    want = read_safetensors(files["y"])["y"].float()
    with torch.no_grad():
        got = moe_layer(layer, x, w, bias)
        err = ((got - want).norm() / want.norm()).item()
        if err > 1e-4:
            sys.exit("bench-vs-torch: %s T=%d: PyTorch and moe-run differ "
                     "(relative error %.2e)" % (name, tokens, err))
        theirs = timed(lambda: moe_layer(layer, x, w, bias), args.repeat)
    return theirs, err


def ours_train(args, work, name, tokens):
    """moe-train's median step time after the warm-up steps."""
    cfg = write_config(work, name)
    bundle = os.path.join(work, "%s-%d-train.moeb" % (name, tokens))
    run([args.bin + "/moe-compile", "--hf-config", cfg, "--train",
         "--max-tokens", str(tokens), "--no-cache"] + mcpu_flag(args) + [
         "-o", bundle])
    out = run([args.bin + "/moe-train", bundle, "--steps",
               str(args.train_steps), "--tokens", str(tokens), "--seed", "1",
               "--threads", str(args.threads)])
    rates = [float(m) for m in re.findall(r"tokens/s ([0-9.]+)", out)]
    # The first two steps are the warm-up: the first faults in the step's
    # buffers, the second the spare ones the runtime then reuses.
    manifest = read_manifest(bundle)
    os.remove(bundle)
    return {"manifest": manifest, "ours": tokens / median(rates[2:])}


def torch_train(args, tokens, item):
    """The same step in PyTorch: student and teacher, MSE, autograd,
    AdamW."""
    manifest = item["manifest"]
    layer = manifest["layer"]
    torch.manual_seed(1)
    weights = {}
    for p in manifest["parameters"]:
        shape = p["shape"]
        scale = 1.0 / (shape[-1] ** 0.5)
        weights[p["role"]] = (torch.rand(shape) * 2 - 1) * scale
    student = TorchLayer(layer, weights)
    teacher = TorchLayer(layer, {k: v * 1.1 for k, v in weights.items()})
    optimizer = torch.optim.AdamW(student.parameters(), lr=1e-3)

    def step():
        x = torch.rand(tokens, layer["hidden"]) * 2 - 1
        with torch.no_grad():
            target = teacher(x)
        optimizer.zero_grad(set_to_none=False)
        loss = torch.nn.functional.mse_loss(student(x), target)
        loss.backward()
        optimizer.step()
    return timed(step, max(3, args.train_steps - 2))


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--mcpu", default="",
                    help="moe-compile --mcpu (default: moe-compile's own, a "
                         "bundle with every x86-64 level)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--train-steps", type=int, default=6)
    ap.add_argument("--forward", default="mixtral:64,mixtral:2048,dsv3:64,"
                    "dsv3:2048,tiny:64,tiny:2048",
                    help="layer:tokens pairs of forward passes")
    ap.add_argument("--train", default="dsv3:64,dsv3:512,dsv3:2048,tiny:64,"
                    "tiny:2048,mixtral:64,mixtral:2048",
                    help="layer:tokens pairs of training steps")
    ap.add_argument("--write-docs", default=None)
    args = ap.parse_args()
    if args.train_steps < 3:
        ap.error("--train-steps must be at least 3 (two are the warm-up)")
    torch.set_num_threads(args.threads)
    forward = [(n, int(t)) for n, t in
               (i.split(":") for i in filter(None, args.forward.split(",")))]
    train = [(n, int(t)) for n, t in
             (i.split(":") for i in filter(None, args.train.split(",")))]
    rows = []
    # The weights, tokens and outputs moe-run saves for PyTorch go to memory
    # where there is a tmpfs, so that no writeback of a large layer's
    # weights (0.8 GB for the Mixtral-like one) runs while later runs are
    # timed.
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.TemporaryDirectory(dir=shm) as work:
        # Each item's two runs one right after the other, so that both see
        # the same machine (a shared VM's speed drifts by 10% or more over
        # minutes). PyTorch's threads (in this process) spin for a while
        # after its work; a pause before each of our runs lets them sleep
        # instead of competing with moe-run's for the cores.
        peak = matmul_peak()
        for name, tokens in forward:
            time.sleep(1.0)
            item = ours_forward(args, work, name, tokens)
            theirs, err = torch_forward(args, name, tokens, item)
            flops = forward_flops(item["manifest"]["layer"], tokens)
            rows.append(("forward", name, tokens, item["ours"], theirs, flops,
                         "%.0e" % err))
            print("forward %s T=%d: ours %.2f ms, torch %.2f ms" %
                  (name, tokens, item["ours"] * 1e3, theirs * 1e3), flush=True)
        for name, tokens in train:
            time.sleep(1.0)
            item = ours_train(args, work, name, tokens)
            theirs = torch_train(args, tokens, item)
            flops = 3 * forward_flops(item["manifest"]["layer"], tokens)
            rows.append(("training step", name, tokens, item["ours"], theirs,
                         flops, ""))
            print("train %s T=%d: ours %.2f ms, torch %.2f ms" %
                  (name, tokens, item["ours"] * 1e3, theirs * 1e3), flush=True)
    lines = [
        "`scripts/bench-vs-torch.sh --threads %d` (moe-compile %s; "
        "PyTorch %s, %d threads; %s, %d cores). Peak: torch.matmul 2048 x "
        "2048 f32 at %.0f GFLOP/s." % (args.threads,
                                      "--mcpu=" + args.mcpu if args.mcpu
                                      else "without --mcpu",
                                      torch.__version__, args.threads,
                                      cpu_name(),
                                      os.cpu_count(), peak),
        "",
        "| work | layer | tokens | moe-compile host ms | GFLOP/s (of peak) "
        "| PyTorch eager ms | GFLOP/s | ours / torch (speed) | y rel. diff |",
        "|---|---|---|---|---|---|---|---|---|"]
    for work, name, tokens, ours, theirs, flops, err in rows:
        lines.append("| %s | %s | %d | %.2f | %.1f (%.0f%%) | %.2f | %.1f | "
                     "%.2f | %s |" % (work, LAYERS[name][1], tokens, ours * 1e3,
                                     flops / ours / 1e9,
                                     100 * flops / ours / 1e9 / peak,
                                     theirs * 1e3, flops / theirs / 1e9,
                                     theirs / ours, err))
    table = "\n".join(lines)
    print()
    print(table)
    if args.write_docs:
        with open(args.write_docs) as f:
            text = f.read()
        begin, end = "<!-- bench-vs-torch -->", "<!-- /bench-vs-torch -->"
        if begin not in text or end not in text:
            sys.exit("bench-vs-torch: %s has no %s ... %s markers" %
                     (args.write_docs, begin, end))
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        with open(args.write_docs, "w") as f:
            f.write(head + begin + "\n" + table + "\n" + end + tail)


if __name__ == "__main__":
    main()
