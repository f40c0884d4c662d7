#!/usr/bin/env python3
"""moe-compiler's one-call GPU check (H100/H200 with the CUDA driver and
PyTorch; no LLVM/MLIR needed).

For each sm_90a bundle of the package (see scripts/gpu-package.sh) it runs
`moe-run --device=cuda` on seeded random weights and inputs, with the device
buffers dumped after the pass, and checks every kernel on its own against
PyTorch computed from that kernel's inputs:

  route            top-k ids (as sets) and weights vs a float32 router
  dispatch_*       offsets = aligned prefix sum of the counts; every row a
                   copy of its token; routing weight per row
  expert_up        silu(rows Wg^T) * (rows Wu^T) per expert segment
  expert_down      (act W2^T) * routing weight per expert segment
  shared_up/down   the shared experts as dense FFNs
  combine          sum of a token's rows plus the shared output
  layer            y vs a float32 PyTorch MoE layer with its own routing

Training: for each bundle under train/ (moe-compile --train, the tiny
DeepSeek-V3 and Mixtral configs, and DeepSeek-V3's with AdamW's moments
in bf16), one `moe-train --device=cuda` step on a
batch written here; every gradient (--dump-grads) is checked against
PyTorch autograd of the float32 layer (routed as the device routed, from
moe-run's topk_ids), and the checkpointed AdamW state and bias against the
update rule applied to the step's own gradients; then 5 steps against the
host bundle of the same layer (train-host/: every loss, the final moments,
masters and bias). For each bundle under train-bench/ (a larger layer), the
time of a training step and of each GEMM kernel in it, with their rate
(tools/gpu-check/train_bench.py; not on the emulator).

FP8: the package's fp8/ bundle (the tiny DeepSeek-V3-like layer, e4m3
experts) runs on published FP8 weights for 1, 128 and 1000 tokens and is
checked against the host's outputs for them, computed where the package
was built (test/GPU/fp8_vs_host.py's bounds); off the emulator, each
fp8/speed-NAME bundle's kernel times are printed next to NAME's bf16
bundle's, at --tokens.

The C API's zero-copy pass (moe_layer_forward_device, what a framework's
CUDA tensors take) runs the first bundle on device memory (PyTorch CUDA
tensors; the emulated driver's memory under --emulator) against the
host-staged pass, then captured into the caller's CUDA graph and replayed
(tools/gpu-check/device_forward.py), with both times on a GPU.

It also runs `moe-comm-bench --device=cuda` on one rank: the NCCL
communicator is created (unique id, non-blocking init, CTA limits of the
comm SMs), and an uneven all-to-all and an f32 all-reduce on device memory
are checked element by element, with NCCL's own SM count and with 20 SMs.

Then one table: per kernel its time (CUDA events, median over repeats after a
warm-up), TFLOP/s or GB/s, next to torch.matmul in bf16 at the same FLOPs
(operands rotated beyond L2) and to a PyTorch MoE layer of the same config.
"""
import argparse
import json
import os
import re
import struct
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import device_forward  # noqa: E402
import train_bench  # noqa: E402
from train_bench import read_manifest, run_tool  # noqa: E402

# --------------------------------------------------------------------------
# Files: safetensors and the bundle's manifest (own readers)
# --------------------------------------------------------------------------
ST_DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16,
             "F16": torch.float16, "I32": torch.int32, "I64": torch.int64}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        dtype = ST_DTYPES[info["dtype"]]
        shape = info["shape"]
        if b == a:
            out[name] = torch.zeros(shape, dtype=dtype)
            continue
        raw = bytearray(data[base + a:base + b])
        out[name] = torch.frombuffer(raw, dtype=dtype).reshape(shape)
    return out


def write_safetensors(path, tensors):
    """float32 tensors to a safetensors file."""
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        data = t.detach().float().contiguous().cpu().numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))




def stacked(manifest, raw):
    """Role -> tensor from per-expert checkpoint names."""
    out = {}
    for p in manifest["parameters"]:
        if p["stack"]:
            out[p["role"]] = torch.stack(
                [raw[p["name"].replace("{i}", str(i))] for i in range(p["stack"])])
        elif p["name"] in raw:
            out[p["role"]] = raw[p["name"]]
    return out


# --------------------------------------------------------------------------
# PyTorch references, written from the layer's definition
# --------------------------------------------------------------------------
def route(layer, x, router, bias):
    """Float32 router and group-limited top-k: (ids [T,k], weights [T,k])."""
    logits = x.float() @ router.float().t()
    if layer["scoring"] == "sigmoid":
        scores = torch.sigmoid(logits)
    else:
        scores = torch.softmax(logits, dim=-1)
    choice = scores + bias.float() if layer["score_bias"] else scores.clone()
    groups = layer["groups"]
    if groups > 1:
        t, e = choice.shape
        grouped = choice.view(t, groups, e // groups)
        if layer["group_score"] == "sum_top2":
            gscore = grouped.topk(2, dim=-1).values.sum(-1)
        else:
            gscore = grouped.max(-1).values
        kept = gscore.topk(layer["topk_groups"], dim=-1).indices
        mask = torch.zeros_like(gscore, dtype=torch.bool)
        mask.scatter_(1, kept, True)
        choice = choice.masked_fill(
            ~mask.repeat_interleave(e // groups, dim=1), float("-inf"))
    ids = choice.topk(layer["top_k"], dim=-1).indices
    weights = scores.gather(1, ids)
    if layer["norm_topk_prob"]:
        weights = weights / weights.sum(-1, keepdim=True)
    return ids, weights * layer["routed_scale"]


def ffn(x, gate, up, down):
    """SwiGLU FFN in float32: silu(x Wg^T) * (x Wu^T) Wd^T."""
    xf = x.float()
    act = torch.nn.functional.silu(xf @ gate.float().t()) * (xf @ up.float().t())
    return act @ down.float().t()


def moe_layer(layer, x, w, bias):
    """The whole layer in float32 with PyTorch's own routing."""
    ids, weights = route(layer, x, w["router_weight"], bias)
    y = torch.zeros(x.shape[0], x.shape[1], dtype=torch.float32, device=x.device)
    for e in range(layer["experts"]):
        tok, slot = (ids == e).nonzero(as_tuple=True)
        if tok.numel() == 0:
            continue
        out = ffn(x[tok], w["gate_weight"][e], w["up_weight"][e],
                  w["down_weight"][e])
        y.index_add_(0, tok, out * weights[tok, slot].unsqueeze(1))
    if layer["shared_experts"]:
        y += ffn(x, w["shared_gate_weight"], w["shared_up_weight"],
                 w["shared_down_weight"])
    return y


def rel_error(got, want):
    got, want = got.float(), want.float()
    denom = want.norm().item()
    return (got - want).norm().item() / denom if denom > 0 else got.norm().item()


def bench(fn, repeats):
    """Median milliseconds of fn() over `repeats` runs (CUDA events)."""
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2]


def matmul_ms(m, n, k, repeats, l2_bytes):
    """torch.matmul bf16 [m,k] x [k,n], operands rotated beyond twice L2."""
    per = 2 * (m * k + k * n)
    copies = max(1, min(8, (2 * l2_bytes + per - 1) // per))
    a = [torch.randn(m, k, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
    b = [torch.randn(k, n, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
    state = {"i": 0}

    def step():
        i = state["i"] = (state["i"] + 1) % copies
        torch.matmul(a[i], b[i])
    return bench(step, repeats)


def kernel_times(stdout):
    """{kernel: median ms} from moe-run --profile's `moe-run: kernel NAME
    MS ms (median of N)` lines (a chunk's launch is `NAME (chunk C)`)."""
    times = {}
    for line in stdout.splitlines():
        m = re.match(r"moe-run: kernel (.+?)\s+([0-9.]+) ms", line)
        if m:
            times[m.group(1)] = float(m.group(2))
    return times


# --------------------------------------------------------------------------
# The performance model against the device
# --------------------------------------------------------------------------
MODEL_ROW = re.compile(r"\s*(\d+) (\S+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)"
                       r"\s+([0-9.]+)\s+(tensor|L2|memory|SIMT)\s*$")


def model_rows(report):
    """{tokens: {kernel: (MB, roofline us, estimate us, bound)}} from the
    model's table in moe-compile --report's output."""
    rows = {}
    with open(report) as f:
        for line in f:
            m = MODEL_ROW.match(line)
            if m:
                rows.setdefault(int(m.group(1)), {})[m.group(2)] = (
                    float(m.group(4)), float(m.group(5)), float(m.group(6)),
                    m.group(7))
    return rows


def check_model(args, bundle, report):
    """Each kernel's device time next to the model's estimate and roofline
    at the token counts the report projects (kernels only, random weights):
    measured / estimate says how far the model is, roofline / measured how
    far the kernel is, and the traffic over the time what a memory-bound
    kernel reached of 4.8 TB/s."""
    name = os.path.basename(bundle)[:-len(".moeb")]
    ok = True
    for tokens, kernels in sorted(model_rows(report).items()):
        run = run_tool([args.moe_run, bundle, "--device=cuda", "--random-weights",
                        "--seed", str(args.seed), "--tokens", str(tokens),
                        "--repeat", str(1 if args.emulator else min(args.repeats, 10)),
                        "--profile"])
        if run.returncode != 0:
            print(f"  {name} @ {tokens}: moe-run failed:\n{run.stdout}{run.stderr}")
            ok = False
            continue
        times = kernel_times(run.stdout)
        total = {"measured": 0.0, "estimate": 0.0, "roofline": 0.0}
        for kernel, (mb, roofline, estimate, bound) in kernels.items():
            if kernel not in times:
                continue
            us = times[kernel] * 1e3
            total["measured"] += us
            total["estimate"] += estimate
            total["roofline"] += roofline
            print(f"  {name:22s} {tokens:5d} {kernel:17s} {us:10.1f} us  model "
                  f"{estimate:9.1f} ({bound:6s}) x{us / estimate:5.2f}  roofline "
                  f"{roofline:9.1f} ({roofline / us:4.0%})  {mb / us:5.2f} TB/s")
        if total["measured"] > 0:
            # The report rounds a tiny layer's rooflines to 0.0 us.
            over = (f"{total['measured'] / total['roofline']:.2f}x"
                    if total["roofline"] > 0 else "-")
            print(f"  {name:22s} {tokens:5d} {'layer':17s} {total['measured']:10.1f} us  "
                  f"model {total['estimate']:9.1f} x{total['measured'] / total['estimate']:5.2f}"
                  f"  roofline {total['roofline']:9.1f} (measured {over} of it)")
    return ok


# --------------------------------------------------------------------------
# FP8
# --------------------------------------------------------------------------
def check_fp8(args):
    """The fp8/ bundle against the host's outputs, then (off the emulator)
    each fp8/speed-NAME bundle's kernel times beside NAME's bf16 ones."""
    sys.path.insert(0, args.package)
    import fp8_vs_host  # noqa: E402 (the package's copy)
    fp8 = os.path.join(args.package, "fp8")
    work = os.path.join(args.work, "fp8")
    os.makedirs(work, exist_ok=True)
    ok = True
    bundle = os.path.join(fp8, "deepseek-v3-fp8.moeb")
    for t in (1, 128, 1000):
        outputs = os.path.join(work, f"y-{t}.safetensors")
        run = run_tool([args.moe_run, bundle, "--device=cuda",
                        "--weights", os.path.join(fp8, f"weights-{t}.safetensors"),
                        "--inputs", os.path.join(fp8, f"inputs-{t}.safetensors"),
                        "--outputs", outputs])
        if run.returncode != 0:
            print(f"  FAIL fp8 {t} tokens: moe-run failed:\n{run.stdout}{run.stderr}")
            ok = False
            continue
        try:
            said = fp8_vs_host.check(
                outputs, os.path.join(fp8, f"host-{t}.safetensors"))
            print(f"  PASS fp8 {t} tokens vs host: {said}")
        except ValueError as failure:
            print(f"  FAIL fp8 {t} tokens vs host: {failure}")
            ok = False
    if args.emulator:
        return ok
    for speed in sorted(b for b in os.listdir(fp8)
                        if b.startswith("speed-") and b.endswith(".moeb")):
        name = speed[len("speed-"):-len(".moeb")]
        times = {}
        for label, path in (("fp8", os.path.join(fp8, speed)),
                            ("bf16", os.path.join(args.package, "bundles",
                                                  name + ".moeb"))):
            if not os.path.exists(path):
                continue
            run = run_tool([args.moe_run, path, "--device=cuda",
                            "--random-weights", "--seed", str(args.seed),
                            "--tokens", str(args.tokens),
                            "--repeat", str(args.repeats), "--profile"])
            if run.returncode != 0:
                print(f"  FAIL fp8 speed {name} ({label}): moe-run failed:\n"
                      f"{run.stdout}{run.stderr}")
                ok = False
                continue
            times[label] = kernel_times(run.stdout)
        for label, kernels in times.items():
            detail = ", ".join(f"{k} {v:.4f}" for k, v in kernels.items())
            print(f"  {name} {label} @ {args.tokens} tokens: kernels "
                  f"{sum(kernels.values()):.4f} ms ({detail})")
    return ok


# --------------------------------------------------------------------------
# One bundle
# --------------------------------------------------------------------------
def check_bundle(args, bundle, rows_out):
    name = os.path.basename(bundle)[:-len(".moeb")]
    manifest = read_manifest(bundle)
    layer = manifest["layer"]
    tokens = min(args.tokens, manifest["max_tokens"])
    work = os.path.join(args.work, name)
    os.makedirs(work, exist_ok=True)
    files = {k: os.path.join(work, k + ".safetensors")
             for k in ("weights", "inputs", "outputs", "buffers")}
    cmd = [args.moe_run, bundle, "--device=cuda", "--random-weights",
           "--seed", str(args.seed), "--tokens", str(tokens),
           "--save-weights", files["weights"], "--save-inputs", files["inputs"],
           "--outputs", files["outputs"], "--dump-buffers", files["buffers"]]
    if not args.emulator:
        cmd += ["--repeat", str(args.repeats), "--profile"]
    started = time.time()
    run = run_tool(cmd)
    if run.returncode != 0:
        print(f"{name}: moe-run failed:\n{run.stdout}{run.stderr}")
        return False
    kernel_ms = kernel_times(run.stdout)
    print(f"{name}: moe-run {time.time() - started:.1f} s; " +
          run.stdout.strip().splitlines()[-1])

    dev = args.reference_device
    dtypes = {p["role"]: p["dtype"] for p in manifest["parameters"]}
    w = {role: t.to(dev).to(torch.bfloat16 if dtypes[role] == "bf16" else torch.float32)
         for role, t in stacked(manifest, read_safetensors(files["weights"])).items()}
    bias = w.get("score_bias", torch.zeros(layer["experts"], device=dev))
    buf = {k: v.to(dev) for k, v in read_safetensors(files["buffers"]).items()}
    # The device's own bf16 copy of the input: every check starts from it.
    x = buf["x"]
    k, e_count = layer["top_k"], layer["experts"]
    align = layer["alignment"]
    # A bundle with a BLOCK_M 64 build of the forward pass runs it at small
    # token counts (moe-run names the build it ran): its expert segments
    # are padded to its tile's rows.
    ran = re.search(r"\(BLOCK_M (\d+) code\)", run.stdout)
    own = manifest.get("gpu", {}).get("tile_m", 0)
    if ran and own and int(ran.group(1)) != own:
        align = int(ran.group(1))
    ok = True
    results = []

    def record(kernel, err, bound, note=""):
        nonlocal ok
        passed = err <= bound
        ok = ok and passed
        results.append((kernel, err, bound, passed, note))

    # route: ids as sets, weights where the sets agree.
    ref_ids, ref_w = route(layer, x, w["router_weight"], bias)
    gpu_ids = buf["topk_ids"].long()
    gpu_w = buf["topk_weights"].float()
    same = (gpu_ids.sort(-1).values == ref_ids.sort(-1).values).all(-1)
    record("route (ids)", 1.0 - same.float().mean().item(), 0.01,
           f"{int((~same).sum())} of {tokens} tokens differ")
    if same.any():
        order_g = gpu_ids.argsort(-1)
        order_r = ref_ids.argsort(-1)
        record("route (weights)",
               rel_error(gpu_w.gather(1, order_g)[same],
                         ref_w.gather(1, order_r)[same]), 1e-3)

    # dispatch: counts, aligned offsets, row copies and row weights.
    counts = torch.bincount(gpu_ids.flatten(), minlength=e_count)
    padded = (counts + align - 1) // align * align
    offsets = torch.cat([torch.zeros(1, device=dev, dtype=torch.long),
                         padded.cumsum(0)])
    record("dispatch_scan", float((buf["offsets"].long() != offsets).sum()), 0)
    row_map = buf["row_map"].long()
    expert_of_row = torch.searchsorted(offsets, row_map.flatten(), right=True) - 1
    in_segment = (expert_of_row == gpu_ids.flatten()).all().item()
    distinct = row_map.flatten().unique().numel() == row_map.numel()
    record("dispatch_scatter (map)", 0.0 if in_segment and distinct else 1.0, 0)
    rows = buf["rows"]
    copies = rows[row_map.flatten()].view(tokens, k, -1)
    record("dispatch_scatter (rows)",
           float((copies != x.unsqueeze(1)).sum()), 0)
    record("dispatch_scatter (weights)",
           rel_error(buf["row_weight"][row_map], gpu_w), 0)

    # expert GEMMs per segment, from the dumped inputs.
    up_err, down_err, live = [], [], []
    for e in range(e_count):
        lo, n = int(offsets[e]), int(counts[e])
        if n == 0:
            continue
        seg = slice(lo, lo + n)
        a = rows[seg].float()
        act_ref = (torch.nn.functional.silu(a @ w["gate_weight"][e].float().t())
                   * (a @ w["up_weight"][e].float().t()))
        up_err.append((buf["act"][seg].float() - act_ref).norm() ** 2)
        live.append(act_ref.norm() ** 2)
        down_ref = ((buf["act"][seg].float() @ w["down_weight"][e].float().t())
                    * buf["row_weight"][seg].unsqueeze(1))
        down_err.append(((buf["down"][seg].float() - down_ref).norm() ** 2,
                         down_ref.norm() ** 2))
    record("expert_up", (sum(up_err) / sum(live)).sqrt().item(), 1e-2)
    record("expert_down", (sum(d for d, _ in down_err)
                           / sum(r for _, r in down_err)).sqrt().item(), 1e-2)
    shared = layer["shared_experts"] > 0
    if shared:
        xf = x.float()
        sact_ref = (torch.nn.functional.silu(xf @ w["shared_gate_weight"].float().t())
                    * (xf @ w["shared_up_weight"].float().t()))
        record("shared_up", rel_error(buf["shared_act"], sact_ref), 1e-2)
        record("shared_down",
               rel_error(buf["shared_out"],
                         buf["shared_act"].float() @ w["shared_down_weight"].float().t()),
               1e-2)
    combined = buf["down"][row_map.flatten()].float().view(tokens, k, -1).sum(1)
    if shared:
        combined += buf["shared_out"].float()
    record("combine", rel_error(buf["y"], combined), 1e-2)
    y = read_safetensors(files["outputs"])["y"].to(dev)
    record("layer (vs PyTorch)", rel_error(y, moe_layer(layer, x, w, bias)), 2e-2)

    for kernel, err, bound, passed, note in results:
        print(f"  {'PASS' if passed else 'FAIL'} {kernel:28s} rel err {err:.2e} "
              f"(bound {bound:.0e}) {note}")

    if args.emulator:
        # The emulator's times say nothing about a GPU's.
        return ok
    # Timings next to PyTorch.
    h, f = layer["hidden"], layer["ffn"]
    s = layer["shared_experts"] * layer["shared_ffn"]
    assigned = tokens * k
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    shapes = {
        "expert_up": (assigned, 2 * f, h), "expert_down": (assigned, h, f),
        "shared_up": (tokens, 2 * s, h), "shared_down": (tokens, h, s)}
    bytes_moved = {
        "router": 2 * tokens * h + 2 * e_count * h + 4 * tokens * e_count,
        "route": 4 * tokens * e_count + 12 * tokens * k,
        "dispatch_scan": 8 * e_count,
        "dispatch_scatter": 4 * assigned * h + 8 * assigned,
        "combine": 2 * assigned * h + 2 * tokens * h * (2 if shared else 1)}
    for kernel, ms in kernel_ms.items():
        if kernel in shapes:
            m, n, kk = shapes[kernel]
            flops = 2.0 * m * n * kk
            torch_ms = matmul_ms(m, n, kk, args.repeats, l2)
            rows_out.append((name, kernel, f"{m}x{n}x{kk}", ms,
                             f"{flops / ms / 1e9:.1f} TFLOP/s",
                             f"{torch_ms:.4f} ms, {flops / torch_ms / 1e9:.1f} TFLOP/s"))
        else:
            moved = bytes_moved.get(kernel, 0)
            rows_out.append((name, kernel, f"T={tokens}", ms,
                             f"{moved / ms / 1e6:.1f} GB/s", "-"))
    total = sum(kernel_ms.values())
    torch_layer = bench(lambda: moe_layer(layer, x, w, bias), max(3, args.repeats // 4))
    rows_out.append((name, "whole layer", f"T={tokens}", total,
                     f"{tokens / total * 1e3:.0f} tokens/s",
                     f"PyTorch MoE layer {torch_layer:.3f} ms"))
    del w, buf
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return ok


def check_training(args, bundle):
    """One training step on the GPU against autograd and the AdamW rule."""
    name = os.path.basename(bundle)[:-len(".moeb")]
    manifest = read_manifest(bundle)
    layer = manifest["layer"]
    tokens = min(512, manifest["max_tokens"])
    work = os.path.join(args.work, "train-" + name)
    os.makedirs(work, exist_ok=True)
    f = {k: os.path.join(work, k + ".safetensors")
         for k in ("weights", "inputs", "outputs", "batch", "grads")}
    run = run_tool(
        [args.moe_run, bundle, "--device=cuda", "--random-weights", "--seed",
         str(args.seed), "--tokens", str(tokens), "--save-weights", f["weights"],
         "--save-inputs", f["inputs"], "--outputs", f["outputs"]])
    if run.returncode:
        print(f"  FAIL train {name}: moe-run failed\n{run.stdout}{run.stderr}")
        return False
    dev = args.reference_device
    w0 = {k: v.to(dev).float() for k, v in
          stacked(manifest, read_safetensors(f["weights"])).items()}
    x = read_safetensors(f["inputs"])["x"].to(dev).float()
    ids = read_safetensors(f["outputs"])["topk_ids"].to(dev).long()
    gen = torch.Generator(device="cpu").manual_seed(args.seed)
    target = (torch.rand(x.shape, generator=gen) * 0.2 - 0.1).to(dev)
    write_safetensors(f["batch"], {"x": x, "target": target})
    lr, gamma = 1e-3, 1e-3
    ckpt = os.path.join(work, "ckpt")
    started = time.time()
    run = run_tool(
        [args.moe_train, bundle, "--device=cuda", "--steps", "1", "--lr", str(lr),
         "--bias-update", str(gamma), "--weights", f["weights"], "--inputs",
         f["batch"], "--dump-grads", f["grads"], "--checkpoint", ckpt,
         "--checkpoint-every", "1"])
    if run.returncode:
        print(f"  FAIL train {name}: moe-train failed\n{run.stdout}{run.stderr}")
        return False
    seconds = time.time() - started

    # Autograd of the float32 layer, routed as the device routed.
    p = {k: v.clone().requires_grad_(k != "score_bias") for k, v in w0.items()}
    xr = x.clone().requires_grad_(True)
    logits = xr @ p["router_weight"].t()
    scores = torch.sigmoid(logits) if layer["scoring"] == "sigmoid" else torch.softmax(logits, -1)
    weights = scores.gather(1, ids)
    if layer["norm_topk_prob"]:
        weights = weights / weights.sum(-1, keepdim=True)
    weights = weights * layer["routed_scale"]
    y = torch.zeros_like(xr)
    for e in range(layer["experts"]):
        tok, slot = (ids == e).nonzero(as_tuple=True)
        if tok.numel():
            out = ffn(xr[tok], p["gate_weight"][e], p["up_weight"][e], p["down_weight"][e])
            y = y.index_add(0, tok, out * weights[tok, slot].unsqueeze(1))
    if layer["shared_experts"]:
        y = y + ffn(xr, p["shared_gate_weight"], p["shared_up_weight"], p["shared_down_weight"])
    loss = ((y - target) ** 2).mean()
    loss.backward()

    raw = {k: v.to(dev) for k, v in read_safetensors(f["grads"]).items()}
    got = stacked(manifest, raw)
    got["x"] = raw["x"]
    want = {k: v.grad for k, v in p.items() if v.grad is not None}
    want["x"] = xr.grad
    ok = True
    worst = 0.0
    for k, g in want.items():
        err = rel_error(got[k].float(), g)
        worst = max(worst, err)
        if err > 3e-2:
            ok = False
            print(f"  FAIL train {name}: gradient of {k} rel err {err:.2e}")
    print(f"  {'PASS' if ok else 'FAIL'} train {name + ' gradients':22s} "
          f"max rel err {worst:.2e} (bound 3e-2) vs autograd; step {seconds:.2f} s")

    # AdamW's first step from the step's own gradients, and the bias rule.
    steps = sorted(os.listdir(ckpt))
    state = {k: v.to(dev) for k, v in read_safetensors(
        os.path.join(ckpt, steps[-1], "state.safetensors")).items()}
    # The hyperparameters as the step reads them (f32; 1 - b is exact in
    # f32), and v's product in the step's order: bf16 moments are the
    # nearest bf16 of exactly these f32 values.
    b1, b2, eps = (float(torch.tensor(v, dtype=torch.float32))
                   for v in (0.9, 0.999, 1e-8))
    adam_ok, adam_worst = True, 0.0
    for k in p:
        if k == "score_bias":
            continue
        g = got[k].float()
        m, v = (1 - b1) * g, (1 - b2) * (g * g)
        nxt = w0[k] - lr * ((m / (1 - b1)) / ((v / (1 - b2)).sqrt() + eps))
        for key, ref in ((k, nxt), (k + ".m", m), (k + ".v", v)):
            # Moments kept in bf16 (--optimizer-state=bf16): the nearest
            # bf16 of the f32 update; the master from the unrounded ones.
            ref = ref.to(state[key].dtype).float()
            err = rel_error(state[key].float(), ref)
            adam_worst = max(adam_worst, err)
            adam_ok = adam_ok and err < 1e-4
    if layer["score_bias"]:
        load = torch.bincount(ids.flatten(), minlength=layer["experts"]).float()
        mean = tokens * layer["top_k"] / layer["experts"]
        ref = w0["score_bias"] + gamma * torch.sign(mean - load)
        err = (state["score_bias"] - ref).abs().max().item()
        adam_worst = max(adam_worst, err)
        adam_ok = adam_ok and err < 1e-6
    print(f"  {'PASS' if adam_ok else 'FAIL'} train {name + ' AdamW, bias':22s} "
          f"max rel err {adam_worst:.2e} (bound 1e-4)")
    # Several steps, the state kept on the device, against the host's.
    host = os.path.join(args.package, "bundles", "train-host", name + ".moeb")
    steps_ok = True
    if os.path.exists(host):
        steps_ok = train_bench.check_steps(
            args.moe_train, bundle, host, os.path.join(work, "steps"),
            f["weights"], f["batch"], steps=5, label=name)
    return ok and adam_ok and steps_ok


def check_comm(args):
    """NCCL through the runtime's device communicator, one rank."""
    ok = True
    for sms in (0, 20):
        cmd = [args.moe_comm_bench, "--device=cuda", "--bytes", str(16 << 20),
               "--iters", "20", "--timeout", "60"]
        if sms:
            cmd += ["--comm-sms", str(sms)]
        run = run_tool(cmd)
        lines = [line for line in run.stdout.splitlines()
                 if line.startswith(("all_to_all", "all_reduce"))]
        passed = run.returncode == 0 and len(lines) == 2 and all(
            line.endswith(" ok") for line in lines)
        label = f"nccl ({sms or 'default'} SMs)"
        print(f"  {'PASS' if passed else 'FAIL'} {label:28s} "
              f"{'; '.join(' '.join(line.split()) for line in lines)}")
        if not passed:
            print(run.stdout + run.stderr)
        ok = ok and passed
    return ok


def check_kernels(args):
    """The kernels on their own (kernels/checks: test/Emu's harnesses, each
    against numpy) on this device, from the PTX compiled into
    kernels/cache when the package was made; a harness run with --time
    also reports its launches' time."""
    directory = os.path.join(args.package, "kernels")
    driver = os.environ.get("MOE_CUDA_DRIVER", "libcuda.so.1")
    env = dict(os.environ, MOE_KERNEL_CACHE=os.path.join(directory, "cache"))
    ok = True
    with open(os.path.join(directory, "checks")) as f:
        lines = [line.split() for line in f if line.strip()]
    for words in lines:
        if args.emulator and "--time" in words:
            continue
        run = subprocess.run(
            [sys.executable, os.path.join(directory, words[0]), driver,
             "--moe-opt", ""] + words[1:],
            capture_output=True, text=True, env=env)
        out = run.stdout.strip().splitlines()
        passed = run.returncode == 0 and "ok" in out
        said = out[0] if out else (run.stderr.strip().splitlines() or ["?"])[-1]
        print(f"  {'PASS' if passed else 'FAIL'} {said}")
        for line in out:
            if line.startswith("time:"):
                print(f"    {line}")
        if not passed:
            print(run.stdout + run.stderr)
        ok = ok and passed
    return ok


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--package", required=True,
                        help="directory from scripts/gpu-package.sh")
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--small-tokens", type=int, nargs="*", default=[256],
                        help="token counts at which every forward bundle is also "
                             "timed, kernels only (where BLOCK_M 64 variants, "
                             "--tile-m 64, should pay)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--work", default=None,
                        help="scratch directory (default PACKAGE/work)")
    parser.add_argument("--emulator", action="store_true",
                        help="the device is the PTX emulator (MOE_CUDA_DRIVER=libcuda-emu.so, "
                             "MOE_NCCL=libnccl-emu.so): PyTorch computes the references on the "
                             "CPU and no times are taken")
    args = parser.parse_args()
    args.reference_device = "cpu" if args.emulator else "cuda"
    args.moe_run = os.path.join(args.package, "bin", "moe-run")
    args.moe_comm_bench = os.path.join(args.package, "bin", "moe-comm-bench")
    args.moe_train = os.path.join(args.package, "bin", "moe-train")
    args.work = args.work or os.path.join(args.package, "work")
    if args.emulator:
        if "libcuda-emu" not in os.environ.get("MOE_CUDA_DRIVER", ""):
            sys.exit("gpu_check.py: --emulator needs MOE_CUDA_DRIVER set to libcuda-emu.so")
        print(f"device: the PTX emulator ({os.environ['MOE_CUDA_DRIVER']}), "
              f"references on the CPU, torch {torch.__version__}")
    else:
        if not torch.cuda.is_available():
            sys.exit("gpu_check.py: PyTorch sees no CUDA device")
        props = torch.cuda.get_device_properties(0)
        print(f"device: {props.name}, {props.multi_processor_count} SMs, "
              f"sm_{props.major}{props.minor}, torch {torch.__version__}")
    bundles = sorted(os.path.join(args.package, "bundles", b)
                     for b in os.listdir(os.path.join(args.package, "bundles"))
                     if b.endswith(".moeb"))
    rows = []
    ok = True
    # The forward pass first (the product's main job), then training, the
    # communicator and the training step's speed.
    for bundle in bundles:
        try:
            ok = check_bundle(args, bundle, rows) and ok
        except Exception as error:  # one bundle's failure must not hide the rest
            print(f"{bundle}: check failed: {error!r}")
            ok = False
    if rows:
        print(f"{'layer':18s} {'kernel':17s} {'shape':18s} {'time ms':>9s} "
              f"{'rate':>18s}  torch")
        for layer, kernel, shape, ms, rate, ref in rows:
            print(f"{layer:18s} {kernel:17s} {shape:18s} {ms:9.4f} {rate:>18s}  {ref}")
        print()
    # Few tokens per expert: each bundle's kernel times alone (the checks
    # above ran at --tokens), so tile variants compare where padding costs.
    for small in ([] if args.emulator else args.small_tokens):
        for bundle in bundles:
            name = os.path.basename(bundle)[:-len(".moeb")]
            run = run_tool([args.moe_run, bundle, "--device=cuda", "--random-weights",
                            "--seed", str(args.seed), "--tokens", str(small),
                            "--repeat", str(args.repeats), "--profile"])
            if run.returncode != 0:
                print(f"{name} @ {small} tokens: moe-run failed:\n{run.stdout}{run.stderr}")
                ok = False
                continue
            times = kernel_times(run.stdout)
            detail = ", ".join(f"{k} {v:.4f}" for k, v in times.items()
                               if k.startswith(("expert", "shared")))
            print(f"{name} @ {small} tokens: kernels {sum(times.values()):.4f} ms ({detail})")
    # The model's projections (--report) against the device, kernel by
    # kernel: every forward bundle and the full DeepSeek-V3 layer (model/:
    # 256 experts, memory-bound at these counts). On the emulator one
    # bundle, for the check's own sake: its times are not a GPU's.
    print("the performance model against the device (us; model x "
          "measured/estimate; share of the roofline; traffic/time)"
          + (" [emulator: not a GPU's times]" if args.emulator else ""))
    model_dir = os.path.join(args.package, "model")
    reports = []
    for bundle in bundles + sorted(
            os.path.join(model_dir, b) for b in
            (os.listdir(model_dir) if os.path.isdir(model_dir) else [])
            if b.endswith(".moeb")):
        report = bundle[:-len(".moeb")] + ".report"
        if os.path.exists(report):
            reports.append((bundle, report))
    for bundle, report in reports[:1] if args.emulator else reports:
        try:
            ok = check_model(args, bundle, report) and ok
        except Exception as error:
            print(f"  {bundle}: model check failed: {error!r}")
            ok = False
    if os.path.isdir(os.path.join(args.package, "fp8")):
        print("fp8")
        try:
            ok = check_fp8(args) and ok
        except Exception as error:
            print(f"  FAIL fp8: {error!r}")
            ok = False
    if bundles:
        print("device memory (the C API's zero-copy pass)")
        try:
            ok = device_forward.check(
                args.package, bundles[0], min(args.tokens, 256),
                args.emulator, seed=args.seed, repeats=args.repeats) and ok
        except Exception as error:
            print(f"  FAIL device forward: {error!r}")
            ok = False
    backward_dir = os.path.join(args.package, "bundles", "backward")
    if os.path.isdir(backward_dir):
        for name in sorted(os.listdir(backward_dir)):
            try:
                ok = device_forward.check_backward(
                    args.package, os.path.join(backward_dir, name),
                    min(args.tokens, 256), args.emulator, seed=args.seed,
                    repeats=args.repeats) and ok
            except Exception as error:
                print(f"  FAIL device backward: {error!r}")
                ok = False
    if os.path.isdir(os.path.join(args.package, "kernels")):
        print("kernels (the FP8 step's, against numpy)")
        try:
            ok = check_kernels(args) and ok
        except Exception as error:
            print(f"  FAIL kernels: {error!r}")
            ok = False
    print("communicator")
    ok = check_comm(args) and ok
    train_dir = os.path.join(args.package, "bundles", "train")
    if os.path.isdir(train_dir):
        print("training step")
        for b in sorted(os.listdir(train_dir)):
            if b.endswith(".moeb"):
                try:
                    ok = check_training(args, os.path.join(train_dir, b)) and ok
                except Exception as error:
                    print(f"  FAIL train {b}: {error!r}")
                    ok = False
    bench_dir = os.path.join(args.package, "bundles", "train-bench")
    if os.path.isdir(bench_dir) and not args.emulator:
        print("training step speed (the last of 4 steps, CUDA events)")
        for b in sorted(os.listdir(bench_dir)):
            if b.endswith(".moeb"):
                try:
                    ok = train_bench.measure(
                        args.moe_train, os.path.join(bench_dir, b),
                        os.path.join(args.work, "speed-" + b[:-5]),
                        label=b[:-5]) and ok
                except Exception as error:
                    print(f"  FAIL train speed {b}: {error!r}")
                    ok = False
    print("\nALL CHECKS PASSED" if ok else "\nSOME CHECKS FAILED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
