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

    def __init__(self, program, tokens, ranks=1):
        self.dtype, self.data = {}, {}
        sizes = {-1: tokens, -2: program["row_capacity"],
                 -3: ranks * program["row_capacity"]}
        for b in program["buffers"]:
            shape = [sizes.get(d, d) for d in b["shape"]]
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


class Exchanges:
    """The collectives of a sharded schedule, from moe.all_to_all's
    definition: rank s's segment of expert e = d * local + l goes to rank d,
    which lays what it receives out by (local expert, source rank)."""

    def __init__(self, bufs, experts):
        self.bufs, self.experts = bufs, experts
        self.ranks = len(bufs)
        self.local = experts // self.ranks
        self.sent = self.received = None

    def segments(self, offsets, r, e):
        return int(offsets[r][e]), int(offsets[r][e + 1])

    def dispatch(self, args):
        off, rows, weight, ep_off, ep_groups, ep_rows, ep_weight = args
        n, local = self.ranks, self.local
        self.sent = [self.bufs[s].get(off).astype(np.int64).copy() for s in range(n)]
        self.received = []
        for d in range(n):
            out = [0]
            for l in range(local):
                for s in range(n):
                    lo, hi = self.segments(self.sent, s, d * local + l)
                    out.append(out[-1] + hi - lo)
            self.received.append(np.array(out))
            groups = [out[l * n] for l in range(local + 1)]
            self.bufs[d].set(ep_off, out)
            self.bufs[d].set(ep_groups, groups)
        self.move(rows, ep_rows, forth=True)
        self.move(weight, ep_weight, forth=True)

    def move(self, src, dst, forth):
        """Rows of every (source, expert) segment, to the expert's rank
        (forth) or back."""
        n, local = self.ranks, self.local
        for s in range(n):
            for d in range(n):
                for l in range(local):
                    e = d * local + l
                    lo, hi = self.segments(self.sent, s, e)
                    at = int(self.received[d][l * n + s])
                    if forth:
                        self.bufs[d].get(dst)[at:at + hi - lo] = self.bufs[s].get(src)[lo:hi]
                    else:
                        self.bufs[s].get(dst)[lo:hi] = self.bufs[d].get(src)[at:at + hi - lo]

    def run(self, step):
        names = step["args"]
        if step["op"] == "all_reduce":
            for name in names:
                total = sum(b.get(name).astype(np.float64) for b in self.bufs)
                for b in self.bufs:
                    b.set(name, total)
        elif step["exchange"] == "dispatch":
            self.dispatch(names)
        elif step["exchange"] == "combine":
            self.move(names[1], names[3], forth=False)
        elif step["exchange"] == "dispatch_rows":
            self.move(names[0], names[1], forth=True)
        else:
            self.move(names[0], names[1], forth=False)


def run_schedule(manifest, lib, bufs, models, tokens):
    """Every rank's training schedule in lockstep; returns the launches
    emulated per rank."""
    program = manifest["gpu"]
    k = manifest["layer"]["top_k"]
    ranks = len(bufs)
    exchanges = Exchanges(bufs, manifest["layer"]["experts"])
    emulated = 0
    for step in program["train_steps"]:
        if step["op"] in ("exchange", "all_reduce"):
            exchanges.run(step)
            continue
        for r in range(ranks):
            buf = bufs[r]
            if step["op"] == "memset":
                buf.get(step["buffer"])[...] = 0
                continue
            kernel, names = step["kernel"], step["args"]
            kind, per = step["grid"], max(step["per_block"], 1)
            capacity = program["row_capacity"]
            grid = {"tokens": -(-tokens // per), "assignments": -(-tokens * k // per),
                    "rows": -(-capacity // per),
                    "received_rows": -(-ranks * capacity // per), "one": 1}.get(
                        kind, step["grid_size"])
            fn = getattr(lib, "_mlir_ciface_emu_" + kernel, None)
            if fn is None:
                if kernel == "route":
                    models[r].route(names)
                elif kernel == "dispatch_scatter":
                    models[r].dispatch_scatter(names)
                else:
                    models[r].gemm(kernel, names)
                continue
            arrays = [buf.native(n) for n in names]
            descs = [descriptor(a) for a in arrays]
            fn.argtypes = [ctypes.c_void_p] * len(descs) + [ctypes.c_int64] * 2
            fn(*[ctypes.addressof(d) for d in descs], grid, step["block"])
            for n, a in zip(names, arrays):
                buf.store_native(n, a)
            if r == 0:
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
    host_manifest = read_manifest(args.host_bundle)
    ranks = manifest.get("expert_parallel", 1)
    tokens = args.tokens
    if tokens % ranks:
        sys.exit(f"--tokens {tokens} does not split over {ranks} ranks")
    rng = np.random.default_rng(args.seed)

    # Every expert's weights (global names) and a batch that bf16
    # represents exactly, so the host's and the schedule's compute copies
    # agree.
    weights = {}
    for p in host_manifest["parameters"]:
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

    # The reference: one rank of the host target (sharding does not change
    # a step's results there, test/Integration/expert-parallel.test).
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
    hg = stacked(host_manifest, host_grads)
    hg["x"] = host_grads["x"]
    masters = stacked(host_manifest, weights)
    stacked_roles = {p["role"] for p in host_manifest["parameters"] if p["stack"]}
    local = cfg.experts // ranks
    per = tokens // ranks

    def share(name, value, r):
        """Rank r's part: its experts, its tokens, or all of a replica."""
        if name in stacked_roles:
            return value[r * local:(r + 1) * local]
        if name in ("x", "target"):
            return value[r * per:(r + 1) * per]
        return value

    # Every rank's arguments, as the CUDA backend binds them. The last
    # entry of hyper is every rank's token count, which the runtime fills.
    hyper = np.array([LR, 1, 0.9, 0.999, 1e-8, 0, GAMMA, tokens], np.float32)
    bufs, models = [], []
    for r in range(ranks):
        buf = Buffers(manifest["gpu"], per, ranks)
        for a in manifest["train"]["arguments"]:
            if a["output"]:
                continue
            name = a["name"]
            if name == "hyper":
                value = hyper
            elif name in ("x", "target"):
                value = share(name, x if name == "x" else target, r)
            elif name in masters:
                value = share(name, masters[name], r)
            else:  # moments start at zero, in this rank's shape
                value = np.zeros(a["shape"], np.float32)
            buf.set(name if name in ("x", "score_bias") else "arg." + name, value)
        bufs.append(buf)
        models.append(Models(cfg, buf, per))
    lib = ctypes.CDLL(os.path.abspath(args.emu))
    emulated = run_schedule(manifest, lib, bufs, models, per)

    failures = []

    def expect(what, err, bound):
        if not err <= bound:
            failures.append(f"{what}: {err:.2e} > {bound:.0e}")

    names = [n for n in masters if n != "score_bias"] + ["x"]
    c1, c2 = 1 - float(np.float32(0.9)), 1 - float(np.float32(0.999))
    for r, buf in enumerate(bufs):
        at = f" (rank {r})" if ranks > 1 else ""
        expect("loss" + at, rel(buf.get("arg.loss")[0], host_loss), args.tol)
        if args.verbose:
            print(f"loss{at} {buf.get('arg.loss')[0]:.6g}, host {host_loss:.6g}")
        for n in names:
            g = buf.get("arg." + n + ".grad").astype(np.float64)
            expect(n + ".grad" + at, rel(g, share(n, hg[n], r)), args.tol)
            if args.verbose:
                print(f"{n}{at}: grad {rel(g, share(n, hg[n], r)):.2e} vs the host")
            if n == "x":
                continue
            # AdamW's first step from the schedule's own gradient: exact up
            # to f32 rounding (the host's update of a gradient that is
            # nearly zero may take the other sign, so it is not the
            # reference here). beta1 and beta2 as the f32 values the kernel
            # reads.
            m, v = c1 * g, c2 * g * g
            w = share(n, masters[n], r) - LR * (m / c1) / (np.sqrt(v / c2) + 1e-8)
            expect(n + ".m" + at, rel(buf.get("arg." + n + ".m.next"), m), 1e-6)
            expect(n + ".v" + at, rel(buf.get("arg." + n + ".v.next"), v), 1e-5)
            expect(n + " (updated)" + at, rel(buf.get("arg." + n + ".next"), w), 1e-6)
        # Every rank's load: the sum over the ranks.
        expect("load" + at, float(np.abs(buf.get("arg.load").sum() - tokens * cfg.k)), 0)
        if cfg.bias:
            expect("score_bias" + at, float(np.abs(buf.get("arg.score_bias.next") -
                                                   host_state["score_bias"]).max()), 1e-6)
    for f in failures:
        print("FAIL " + f)
    print(f"sm90-train-emu: {ranks} rank(s), {emulated} kernels emulated, "
          f"{len(names)} gradients, {len(failures)} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
