#!/usr/bin/env python3
"""The sm_90a training schedule on the host, against the host's training step.

Runs the `train_steps` of an sm_90a training bundle the way the CUDA
backend does (buffers from the manifest, memsets and launches in order,
grids from their kinds), calling each SIMT kernel's host emulation from
`moe-compile --emit=host-emulation` (every thread of the launch, one after
another). The kernels that cannot run that way (the router, the row
scatter and the wgmma GEMMs, whose threads cooperate) are replaced by
numpy models of what they compute, written here from their definitions.
Then every output of the step (gradients, loss, load, AdamW state, bias)
is compared with one `moe-train` step of the host bundle of the same
layer, whose gradients are checked against finite differences elsewhere.

  sm90_train_emu.py --config C --bundle SM90.moeb --emu EMU.so
                    --host-bundle HOST.moeb --moe-train P --work DIR
                    [--tokens T] [--seed S] [--tol TOL]
"""
import argparse
import ctypes
import json
import os
import struct
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference  # noqa: E402

LR, GAMMA = 1e-3, 1e-3
NP = {"f32": np.float32, "bf16": np.uint16, "f16": np.float16, "i32": np.int32,
      "i64": np.int64}


def bf16_round(a):
    """float32 values rounded to bfloat16 (nearest even), as float32."""
    return reference.bf16_to_f32(reference.f32_to_bf16_bits(np.asarray(a, np.float32)))


def read_manifest(path):
    with open(path, "rb") as f:
        head = f.read(32)
        size, blobs = struct.unpack("<QQ", head[16:32])
        f.seek(32 + 8 * blobs)
        return json.loads(f.read(size))


class Buffers:
    """Host arrays for the program's buffers; bf16 held as float32 values."""

    def __init__(self, program, tokens):
        self.dtype, self.data = {}, {}
        for b in program["buffers"]:
            shape = [tokens if d == -1 else program["row_capacity"] if d == -2 else d
                     for d in b["shape"]]
            self.dtype[b["name"]] = b["dtype"]
            self.data[b["name"]] = np.zeros(shape, np.float32 if b["dtype"] == "bf16"
                                            else NP[b["dtype"]])

    def get(self, name):
        return self.data[name]

    def set(self, name, value):
        a = self.data[name]
        value = np.asarray(value).reshape(a.shape)
        a[...] = bf16_round(value) if self.dtype[name] == "bf16" else value.astype(a.dtype)

    def native(self, name):
        """The array as the kernel sees it (bf16 as its bits)."""
        a = self.data[name]
        if self.dtype[name] == "bf16":
            return reference.f32_to_bf16_bits(a).reshape(a.shape).copy()
        return a

    def store_native(self, name, raw):
        if self.dtype[name] == "bf16":
            self.data[name][...] = reference.bf16_to_f32(raw.ravel()).reshape(raw.shape)
        else:
            self.data[name][...] = raw


def descriptor(array):
    """A ranked memref descriptor of a C-contiguous array."""
    rank = array.ndim
    fields = [("allocated", ctypes.c_void_p), ("aligned", ctypes.c_void_p),
              ("offset", ctypes.c_int64)]
    if rank:
        fields += [("sizes", ctypes.c_int64 * rank), ("strides", ctypes.c_int64 * rank)]
    Desc = type("Desc%d" % rank, (ctypes.Structure,), {"_fields_": fields})
    d = Desc()
    d.allocated = d.aligned = array.ctypes.data
    d.offset = 0
    for i in range(rank):
        d.sizes[i] = array.shape[i]
        d.strides[i] = array.strides[i] // array.itemsize
    return d


def unpack_gate_up(w13):
    """[G, 2F, H] packed (8 gate rows, 8 up rows, ...) -> gate, up [G, F, H]."""
    g, two_f, h = w13.shape
    blocks = w13.reshape(g, two_f // 16, 2, 8, h)
    return (blocks[:, :, 0].reshape(g, two_f // 2, h),
            blocks[:, :, 1].reshape(g, two_f // 2, h))


def swiglu_gemm(rows, w13):
    gate, up = unpack_gate_up(w13[None] if w13.ndim == 2 else w13)
    g = rows @ gate[0].T
    return reference.silu(g) * (rows @ up[0].T)


class Models:
    """The kernels whose threads cooperate, from their definitions."""

    def __init__(self, cfg, buf, tokens):
        self.cfg, self.buf, self.tokens = cfg, buf, tokens

    def route(self, args):
        b, cfg = self.buf, self.cfg
        x, router = b.get(args[0]).astype(np.float64), b.get(args[1]).astype(np.float64)
        bias = b.get(args[2]).astype(np.float64) if cfg.bias else None
        ids, weights = reference.route(cfg, x @ router.T, bias)
        b.set(args[-2], ids)
        b.set(args[-1], weights)

    def dispatch_scatter(self, args):
        x, ids, weights, cursors, rows, row_map, row_weight = args
        b = self.buf
        cur = b.get(cursors)
        for t in range(self.tokens):
            for j in range(self.cfg.k):
                e = int(b.get(ids)[t, j])
                p = int(cur[e])
                cur[e] += 1
                b.get(row_weight)[p] = b.get(weights)[t, j]
                b.get(row_map)[t, j] = p
                b.get(rows)[p] = b.get(x)[t]

    def gemm(self, kernel, args):
        b = self.buf
        a, w, offsets, out = (b.get(n) for n in args[:4])
        result = np.zeros(out.shape, np.float64)
        for e in range(w.shape[0]):
            lo, hi = int(offsets[e]), int(offsets[e + 1])
            if hi <= lo:
                continue
            seg = a[lo:hi].astype(np.float64)
            if kernel.endswith("_up"):
                result[lo:hi] = swiglu_gemm(seg, w[e].astype(np.float64))
            else:
                result[lo:hi] = seg @ w[e].astype(np.float64).T
                if len(args) > 4:
                    result[lo:hi] *= b.get(args[4])[lo:hi, None]
        b.set(args[3], result)


def run_schedule(args, manifest, lib, buf, models, tokens):
    program = manifest["gpu"]
    k = manifest["layer"]["top_k"]
    emulated = 0
    for step in program["train_steps"]:
        if step["op"] == "memset":
            buf.get(step["buffer"])[...] = 0
            continue
        kernel, names = step["kernel"], step["args"]
        kind, per = step["grid"], max(step["per_block"], 1)
        grid = {"tokens": -(-tokens // per), "assignments": -(-tokens * k // per),
                "rows": program["row_capacity"], "one": 1}.get(kind, step["grid_size"])
        fn = getattr(lib, "_mlir_ciface_emu_" + kernel, None)
        if fn is None:
            if kernel == "route":
                models.route(names)
            elif kernel == "dispatch_scatter":
                models.dispatch_scatter(names)
            else:
                models.gemm(kernel, names)
            continue
        arrays = [buf.native(n) for n in names]
        descs = [descriptor(a) for a in arrays]
        fn.argtypes = [ctypes.c_void_p] * len(descs) + [ctypes.c_int64] * 2
        fn(*[ctypes.addressof(d) for d in descs], grid, step["block"])
        for n, a in zip(names, arrays):
            buf.store_native(n, a)
        emulated += 1
    return emulated


def stacked(manifest, raw):
    out = {}
    for p in manifest["parameters"]:
        if p["stack"]:
            out[p["role"]] = np.stack([raw[p["name"].replace("{i}", str(i))]
                                       for i in range(p["stack"])])
        elif p["name"] in raw:
            out[p["role"]] = raw[p["name"]]
    return out


def rel(got, want):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    d = np.linalg.norm(want)
    return np.linalg.norm(got - want) / d if d > 0 else np.linalg.norm(got)


def main():
    ap = argparse.ArgumentParser()
    for name in ("config", "bundle", "emu", "host-bundle", "moe-train", "work"):
        ap.add_argument("--" + name, required=True)
    ap.add_argument("--tokens", type=int, default=37)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--tol", type=float, default=2e-2)
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args()
    cfg = reference.Config(args.config)
    manifest = read_manifest(args.bundle)
    tokens = args.tokens
    rng = np.random.default_rng(args.seed)

    # Weights and a batch that bf16 represents exactly, so the host's and
    # the schedule's compute copies agree.
    weights = {}
    for p in manifest["parameters"]:
        shape = p["shape"][1:] if p["stack"] else p["shape"]
        bound = 0.1 if p["role"] == "score_bias" else 1.0 / np.sqrt(shape[-1])
        for i in range(max(p["stack"], 1)):
            name = p["name"].replace("{i}", str(i))
            weights[name] = bf16_round(rng.uniform(-bound, bound, size=shape))
    x = bf16_round(rng.uniform(-1, 1, size=(tokens, cfg.hidden)))
    target = rng.uniform(-0.1, 0.1, size=x.shape).astype(np.float32)
    os.makedirs(args.work, exist_ok=True)
    wpath = os.path.join(args.work, "w.safetensors")
    batch = os.path.join(args.work, "batch.safetensors")
    grads = os.path.join(args.work, "grads.safetensors")
    ckpt = os.path.join(args.work, "ckpt")
    reference.write_safetensors(wpath, weights)
    reference.write_safetensors(batch, {"x": x, "target": target})

    run = subprocess.run([args.moe_train, args.host_bundle, "--steps", "1", "--lr", str(LR),
                          "--bias-update", str(GAMMA), "--weights", wpath, "--inputs", batch,
                          "--dump-grads", grads, "--checkpoint", ckpt,
                          "--checkpoint-every", "1"], capture_output=True, text=True)
    if run.returncode:
        sys.exit("moe-train failed:\n" + run.stdout + run.stderr)
    host_loss = float(run.stdout.split("loss")[1].split()[0])
    host_grads = reference.read_safetensors(grads)
    step_dir = sorted(os.listdir(ckpt))[-1]
    host_state = reference.read_safetensors(os.path.join(ckpt, step_dir, "state.safetensors"))

    # The schedule's arguments, as the CUDA backend binds them.
    buf = Buffers(manifest["gpu"], tokens)
    masters = stacked(manifest, weights)
    hyper = np.array([LR, 1, 0.9, 0.999, 1e-8, 0, GAMMA, 0], np.float32)
    for a in manifest["train"]["arguments"]:
        if a["output"]:
            continue
        name = a["name"]
        value = {"x": x, "target": target, "hyper": hyper}.get(name)
        if value is None:
            value = masters[name] if name in masters else np.zeros(a["shape"], np.float32)
        buf.set(name if name in ("x", "score_bias") else "arg." + name, value)
    lib = ctypes.CDLL(os.path.abspath(args.emu))
    emulated = run_schedule(args, manifest, lib, buf, Models(cfg, buf, tokens), tokens)

    failures = []

    def expect(what, err, bound):
        if not err <= bound:
            failures.append(f"{what}: {err:.2e} > {bound:.0e}")

    expect("loss", rel(buf.get("arg.loss")[0], host_loss), args.tol)
    if args.verbose:
        print(f"loss {buf.get('arg.loss')[0]:.6g}, host {host_loss:.6g}")
    hg = stacked(manifest, host_grads)
    hg["x"] = host_grads["x"]
    names = [n for n in masters if n != "score_bias"] + ["x"]
    for n in names:
        g = buf.get("arg." + n + ".grad").astype(np.float64)
        expect(n + ".grad", rel(g, hg[n]), args.tol)
        if n == "x":
            continue
        # AdamW's first step from the schedule's own gradient: exact up to
        # f32 rounding (the host's update of a gradient that is nearly
        # zero may take the other sign, so it is not the reference here).
        # (beta1 and beta2 as the f32 values the kernel reads.)
        c1, c2 = 1 - float(np.float32(0.9)), 1 - float(np.float32(0.999))
        m, v = c1 * g, c2 * g * g
        w = masters[n] - LR * (m / c1) / (np.sqrt(v / c2) + 1e-8)
        expect(n + ".m", rel(buf.get("arg." + n + ".m.next"), m), 1e-6)
        expect(n + ".v", rel(buf.get("arg." + n + ".v.next"), v), 1e-5)
        expect(n + " (updated)", rel(buf.get("arg." + n + ".next"), w), 1e-6)
        if args.verbose:
            print(f"{n}: grad {rel(g, hg[n]):.2e} vs the host")
    load = buf.get("arg.load")
    expect("load", float(np.abs(load.sum() - tokens * cfg.k)), 0)
    if cfg.bias:
        expect("score_bias", float(np.abs(buf.get("arg.score_bias.next") -
                                          host_state["score_bias"]).max()), 1e-6)
    for f in failures:
        print("FAIL " + f)
    print(f"sm90-train-emu: {emulated} kernels emulated, {len(names)} gradients, "
          f"{len(failures)} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
