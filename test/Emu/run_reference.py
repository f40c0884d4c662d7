#!/usr/bin/env python3
"""Runs the reference PTX of other compilers (test/Emu/Inputs/reference/,
made by reference/generate.py: Triton's kernels, and nvcc's of CUTLASS's
sm90 GEMMs) through a CUDA driver and checks each kernel's output against
numpy, computed in float64 from the same inputs.

  run_reference.py DRIVER DIR [CASE...]

Prints one line per case: '<case>: ok (max error E of max |ref|)' or
'<case>: MISMATCH ...'; exits non-zero if any fails.
"""
import ctypes
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "Integration"))
from ptx_run import Driver, launch_ex  # noqa: E402
from reference import e4m3_values  # noqa: E402


def to_bf16(x):
    b = np.asarray(x, np.float32).view(np.uint32)
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)


def from_bf16(h):
    return (np.asarray(h).astype(np.uint32) << 16).view(np.float32)


class Case:
    def __init__(self, drv, directory, name, meta):
        self.drv, self.name, self.meta = drv, name, meta
        with open(os.path.join(directory, meta.get("ptx", name + ".ptx")), "rb") as f:
            text = f.read() + b"\0"
        self.module = ctypes.c_void_p()
        drv.check(drv.cu.cuModuleLoadData(ctypes.byref(self.module), text), name + ": load")
        self.fn = ctypes.c_void_p()
        drv.check(drv.cu.cuModuleGetFunction(ctypes.byref(self.fn), self.module,
                                             meta["kernel"].encode()), name + ": kernel")
        self.scratch = drv.alloc(256)

    def buffer(self, array):
        array = np.ascontiguousarray(array)
        ptr = self.drv.alloc(max(array.nbytes, 16))
        self.drv.upload(ptr, array.tobytes())
        return ptr

    def launch(self, grid, args):
        # Triton appends two scratch pointers to every kernel.
        if self.meta.get("compiler", "").startswith("triton"):
            args = list(args) + [ctypes.c_uint64(self.scratch)] * 2
        params = (ctypes.c_void_p * len(args))(
            *[ctypes.cast(ctypes.pointer(a), ctypes.c_void_p) for a in args])
        shared = self.meta["shared"]
        self.drv.check(self.drv.cu.cuFuncSetAttribute(self.fn, 8, shared), "attribute")
        rc = self.drv.cu.cuLaunchKernel(self.fn, grid[0], grid[1], 1, self.meta["threads"],
                                        1, 1, shared, None, params, None)
        if rc != 0:
            raise RuntimeError("launch: " + self.drv.error(rc))

    def read_bf16(self, ptr, shape):
        raw = self.drv.download(ptr, int(np.prod(shape)) * 2)
        return from_bf16(np.frombuffer(raw, np.uint16).reshape(shape))


def u64(p):
    return ctypes.c_uint64(p)


def i32(v):
    return ctypes.c_int32(v)


def run_matmul(case, rng, fp8):
    M, N, K = 200, 136, 384
    if fp8:
        table = e4m3_values()
        # Codes of magnitude at most 2 (exponent field <= 7), either sign.
        small = np.array([c for c in range(256) if ((c >> 3) & 0xF) <= 7])
        a_codes = rng.choice(small, (M, K)).astype(np.uint8)
        b_codes = rng.choice(small, (K, N)).astype(np.uint8)
        a, b = table[a_codes], table[b_codes]
        pa, pb = case.buffer(a_codes), case.buffer(b_codes)
    else:
        a16 = to_bf16(rng.uniform(-1, 1, (M, K)))
        b16 = to_bf16(rng.uniform(-1, 1, (K, N)))
        a, b = from_bf16(a16).astype(np.float64), from_bf16(b16).astype(np.float64)
        pa, pb = case.buffer(a16), case.buffer(b16)
    pc = case.drv.alloc(M * N * 2)
    c = case.meta["constexprs"]
    grid = (-(-M // c["BLOCK_M"]), -(-N // c["BLOCK_N"]))
    case.launch(grid, [u64(pa), u64(pb), u64(pc), i32(M), i32(N), i32(K), i32(K), i32(N), i32(N)])
    return case.read_bf16(pc, (M, N)), a @ b


def run_matmul_tn(case, rng):
    # dW = dY^T . X in shape: M and N of 200 and 136, a reduction of 300
    # rows (not a multiple of the 64-row block).
    M, N, K = 200, 136, 300
    a16 = to_bf16(rng.uniform(-1, 1, (K, M)))
    b16 = to_bf16(rng.uniform(-1, 1, (K, N)))
    a, b = from_bf16(a16).astype(np.float64), from_bf16(b16).astype(np.float64)
    pa, pb = case.buffer(a16), case.buffer(b16)
    pc = case.drv.alloc(M * N * 2)
    c = case.meta["constexprs"]
    grid = (-(-M // c["BLOCK_M"]), -(-N // c["BLOCK_N"]))
    case.launch(grid, [u64(pa), u64(pb), u64(pc), i32(M), i32(N), i32(K), i32(M), i32(N), i32(N)])
    return case.read_bf16(pc, (M, N)), a.T @ b


def run_matmul_tma(case, rng):
    M, N, K = 300, 200, 192
    a16, b16 = to_bf16(rng.uniform(-1, 1, (M, K))), to_bf16(rng.uniform(-1, 1, (N, K)))
    pa, pb, pc = case.buffer(a16), case.buffer(b16), case.drv.alloc(M * N * 2)
    args = []
    for ptr, rows, cols, d in zip((pa, pb, pc), (M, N, M), (K, K, N),
                                  case.meta["tensor_descriptors"]):
        box = list(reversed(d["block"]))  # innermost first
        args += [case.drv.tensor_map(ptr, "bf16", [cols, rows], box, d["swizzle"]),
                 i32(rows), i32(cols), ctypes.c_int64(cols), ctypes.c_int64(1)]
    case.launch((case.meta["constexprs"]["NUM_SMS"], 1), args + [i32(M), i32(N), i32(K)])
    a, b = from_bf16(a16).astype(np.float64), from_bf16(b16).astype(np.float64)
    return case.read_bf16(pc, (M, N)), a @ b.T


def run_fused_moe(case, rng):
    c = case.meta["constexprs"]
    T, E, N, K, top_k, bm = 90, 6, 96, 128, c["TOP_K"], c["BLOCK_M"]
    x16 = to_bf16(rng.uniform(-1, 1, (T, K)))
    w16 = to_bf16(rng.uniform(-1, 1, (E, N, K)) / np.sqrt(K))
    experts = np.stack([rng.choice(E, top_k, replace=False) for _ in range(T)])
    weights = rng.uniform(0, 1, (T, top_k)).astype(np.float32)
    entries = T * top_k
    # Each expert's entries, padded to whole M blocks with `entries`.
    sorted_ids, expert_ids = [], []
    for e in range(E):
        mine = [t * top_k + s for t in range(T) for s in range(top_k) if experts[t, s] == e]
        blocks = -(-len(mine) // bm)
        sorted_ids += mine + [entries] * (blocks * bm - len(mine))
        expert_ids += [e] * blocks
    px, pw = case.buffer(x16), case.buffer(w16)
    py = case.drv.alloc(entries * N * 2)
    ptw = case.buffer(weights.reshape(-1))
    pids = case.buffer(np.array(sorted_ids, np.int32))
    pexp = case.buffer(np.array(expert_ids, np.int32))
    grid = (len(expert_ids), -(-N // c["BLOCK_N"]))
    case.launch(grid, [u64(px), u64(pw), u64(py), u64(ptw), u64(pids), u64(pexp),
                       i32(entries), i32(N), i32(K)])
    x, w = from_bf16(x16).astype(np.float64), from_bf16(w16).astype(np.float64)
    ref = np.zeros((entries, N))
    for t in range(T):
        for s in range(top_k):
            ref[t * top_k + s] = weights[t, s] * (w[experts[t, s]] @ x[t])
    return case.read_bf16(py, (entries, N)), ref


def run_cutlass(case, rng):
    """A CUTLASS kernel: its Params rebuilt over this run's buffers (each
    tensor map encoded again with the arguments CUTLASS gave, at the
    buffer's address), launched with its cluster shape.
    D = A.B^T + 0.5 C."""
    meta = case.meta
    M, N, K = meta["problem"]
    a16, b16 = to_bf16(rng.uniform(-1, 1, (M, K))), to_bf16(rng.uniform(-1, 1, (N, K)))
    c16 = to_bf16(rng.uniform(-1, 1, (M, N)))
    ptr = {"A": case.buffer(a16), "B": case.buffer(b16), "C": case.buffer(c16),
           "D": case.drv.alloc(M * N * 2)}
    params = bytearray(bytes.fromhex(meta["params"]))
    for p in meta["pointers"]:
        params[p["offset"]:p["offset"] + 8] = ptr[p["buffer"]].to_bytes(8, "little")
    cu = case.drv.cu
    for t in meta["tensor_maps"]:
        r = len(t["dims"])
        tmap = (ctypes.c_ubyte * 128)()
        rc = cu.cuTensorMapEncodeTiled(
            tmap, t["dtype"], r, ctypes.c_void_p(ptr[t["buffer"]] + t["byte_offset"]),
            (ctypes.c_ulonglong * r)(*t["dims"]),
            (ctypes.c_ulonglong * max(1, r - 1))(*(t["strides"] or [0])),
            (ctypes.c_uint * r)(*t["box"]), (ctypes.c_uint * r)(*t["element_strides"]),
            t["interleave"], t["swizzle"], t["l2"], t["oob"])
        if rc:
            raise RuntimeError("cuTensorMapEncodeTiled: " + case.drv.error(rc))
        params[t["offset"]:t["offset"] + 128] = bytes(tmap)
    buf = (ctypes.c_ubyte * len(params)).from_buffer(params)
    args = (ctypes.c_void_p * 1)(ctypes.cast(buf, ctypes.c_void_p))
    case.drv.check(cu.cuFuncSetAttribute(case.fn, 8, meta["shared"]), "attribute")
    rc = launch_ex(case.drv, case.fn, meta["grid"], meta["block"], meta["cluster"],
                   meta["shared"], args)
    if rc:
        raise RuntimeError("launch: " + case.drv.error(rc))
    a, b = from_bf16(a16).astype(np.float64), from_bf16(b16).astype(np.float64)
    return case.read_bf16(ptr["D"], (M, N)), a @ b.T + 0.5 * from_bf16(c16)


def run_rows(case, rng, kind):
    """A row kernel (one program per row) on [R, N] f32, N not a power of
    two so the masked tail is exercised."""
    R, N = 6, {"softmax": 1000, "layernorm": 500, "argmax": 250, "cumsum": 500}[kind]
    x = rng.uniform(-4, 4, (R, N)).astype(np.float32)
    px = case.buffer(x)
    if kind == "argmax":
        pout = case.drv.alloc(R * 4)
        case.launch((R, 1), [u64(px), u64(pout), i32(N), i32(N)])
        got = np.frombuffer(case.drv.download(pout, R * 4), np.int32).astype(np.float64)
        return got, np.argmax(x, axis=1).astype(np.float64)
    py = case.drv.alloc(R * N * 4)
    if kind == "layernorm":
        w = rng.uniform(0.5, 1.5, N).astype(np.float32)
        b = rng.uniform(-1, 1, N).astype(np.float32)
        eps = 1e-5
        case.launch((R, 1), [u64(px), u64(case.buffer(w)), u64(case.buffer(b)), u64(py),
                             i32(N), i32(N), ctypes.c_float(eps)])
        x64 = x.astype(np.float64)
        mean = x64.mean(axis=1, keepdims=True)
        var = ((x64 - mean) ** 2).mean(axis=1, keepdims=True)
        ref = (x64 - mean) / np.sqrt(var + eps) * w + b
    else:
        case.launch((R, 1), [u64(px), u64(py), i32(N), i32(N)])
        x64 = x.astype(np.float64)
        if kind == "softmax":
            e = np.exp(x64 - x64.max(axis=1, keepdims=True))
            ref = e / e.sum(axis=1, keepdims=True)
        else:
            ref = np.cumsum(x64, axis=1)
    got = np.frombuffer(case.drv.download(py, R * N * 4), np.float32).reshape(R, N)
    return got.astype(np.float64), ref


def run_topk(case, rng):
    R, N, K = 5, 200, case.meta["constexprs"]["K"]
    x = rng.permutation(R * N).reshape(R, N).astype(np.float32) / 7  # distinct
    pout = case.drv.alloc(R * K * 4)
    case.launch((R, 1), [u64(case.buffer(x)), u64(pout), i32(N), i32(N)])
    got = np.frombuffer(case.drv.download(pout, R * K * 4), np.float32).reshape(R, K)
    return got.astype(np.float64), -np.sort(-x.astype(np.float64), axis=1)[:, :K]


def run_flash_attention(case, rng):
    c = case.meta["constexprs"]
    S, D = 150, c["D"]
    q16, k16, v16 = (to_bf16(rng.uniform(-1, 1, (S, D))) for _ in range(3))
    scale = 1.0 / np.sqrt(D)
    po = case.drv.alloc(S * D * 4)
    case.launch((-(-S // c["BLOCK_M"]), 1),
                [u64(case.buffer(q16)), u64(case.buffer(k16)), u64(case.buffer(v16)),
                 u64(po), i32(S), ctypes.c_float(scale)])
    q, k, v = (from_bf16(t).astype(np.float64) for t in (q16, k16, v16))
    s = q @ k.T * scale
    p = np.exp(s - s.max(axis=1, keepdims=True))
    ref = (p / p.sum(axis=1, keepdims=True)) @ v
    got = np.frombuffer(case.drv.download(po, S * D * 4), np.float32).reshape(S, D)
    return got.astype(np.float64), ref


def run_matmul_int8(case, rng):
    M, N, K = 100, 72, 200
    a = rng.integers(-128, 128, (M, K)).astype(np.int8)
    b = rng.integers(-128, 128, (K, N)).astype(np.int8)
    pc = case.drv.alloc(M * N * 4)
    c = case.meta["constexprs"]
    grid = (-(-M // c["BLOCK_M"]), -(-N // c["BLOCK_N"]))
    case.launch(grid, [u64(case.buffer(a)), u64(case.buffer(b)), u64(pc), i32(M), i32(N),
                       i32(K), i32(K), i32(N), i32(N)])
    got = np.frombuffer(case.drv.download(pc, M * N * 4), np.int32).reshape(M, N)
    ref = a.astype(np.int64) @ b.astype(np.int64)
    # Exact: integer products and sums.
    return got.astype(np.float64), ref.astype(np.float64)


def run_nvcc_intrinsics(case, rng):
    """nvcc_intrinsics.cu: each output against its definition in the CUDA
    math API, computed here with numpy's integers and float64."""
    u32 = np.uint32
    a = rng.integers(0, 2**32, 32, dtype=np.uint64).astype(u32)
    b = rng.integers(0, 2**32, 32, dtype=np.uint64).astype(u32)
    a[5], a[9] = 0, 0x80000000  # __ffs and __clz at their ends
    f = np.concatenate([rng.uniform(-10, 10, 16), rng.uniform(1e4, 1e6, 12),
                        [0.0, 1e30, -3.0e7, 105615.0]]).astype(np.float32)
    w = rng.integers(0, 2**64, 96, dtype=np.uint64)
    pout, pin = case.drv.alloc(416 * 4), case.buffer(np.concatenate([a, b]))
    pf, pw = case.buffer(f), case.buffer(w)
    case.launch((1, 1), [u64(pout), u64(pin), u64(pf), u64(pw)])
    out = np.frombuffer(case.drv.download(pout, 416 * 4), u32).astype(np.int64)
    got_f = np.frombuffer(case.drv.download(pf, 32 * 4), np.float32).astype(np.float64)
    got_w = np.frombuffer(case.drv.download(pw, 96 * 8), np.uint64)

    def ffs(v):
        v = int(v)
        return (v & -v).bit_length() if v else 0

    def s8(v, i):
        x = (int(v) >> (8 * i)) & 0xFF
        return x - 256 if x >= 128 else x

    def u8(v, i):
        return (int(v) >> (8 * i)) & 0xFF

    def s32(v):
        v = int(v) & 0xFFFFFFFF
        return v - 2**32 if v >= 2**31 else v

    ref = np.zeros(416, np.int64)
    hi = [(int(w[t]) * int(w[t + 32]) + int(w[t + 64])) >> 64 for t in range(32)]
    for t in range(32):
        x, y = int(a[t]), int(b[t])
        ref[t] = ffs(x)
        ref[t + 32] = (7 + sum(u8(x, i) * u8(y, i) for i in range(4))) & 0xFFFFFFFF
        ref[t + 64] = (7 + sum(s8(x, i) * s8(y, i) for i in range(4))) & 0xFFFFFFFF
        ref[t + 96] = sum(abs(u8(x, i) - u8(y, i)) << (8 * i) for i in range(4))
        ref[t + 128] = sum(1 << j for j in range(32) if int(a[j]) & 3 == x & 3)
        both = (y << 32) | x
        ref[t + 160] = ((both << (t & 31)) >> 32) & 0xFFFFFFFF
        ref[t + 192] = (both >> min(t + 16, 32)) & 0xFFFFFFFF
        clz = 32 - x.bit_length()
        ref[t + 224] = (clz + ffs(hi[t])) & 0xFFFFFFFF
        same = all(int(a[j]) & 1 == x & 1 for j in range(32))
        ref[t + 256] = 0xFFFFFFFF if same else 0
        ref[t + 288] = int(same)
        ref[t + 320] = 0xFFFFFFFF
        ref[t + 352] = 1
        ref[t + 384] = (abs(s32(x) - s32(y)) + 3) & 0xFFFFFFFF
    # Integers must match exactly; sinf to a few units in the last place
    # of float32, and the 128-bit products' high words exactly.
    bad = np.flatnonzero(out != ref)
    if bad.size:
        raise RuntimeError("word %d: got %#x, expected %#x" %
                           (bad[0], out[bad[0]], ref[bad[0]]))
    if list(map(int, got_w[:32])) != hi:
        raise RuntimeError("__int128 high words differ")
    sin_err = float(np.abs(got_f - np.sin(f.astype(np.float64))).max())
    if sin_err > 4e-7:
        raise RuntimeError("sinf: error %.3g" % sin_err)
    return out.astype(np.float64), ref.astype(np.float64)


RUNNERS = {
    "cutlass_cooperative": run_cutlass,
    "cutlass_pingpong": run_cutlass,
    "triton_matmul_bf16": lambda case, rng: run_matmul(case, rng, False),
    "triton_matmul_tn": run_matmul_tn,
    "triton_matmul_fp8": lambda case, rng: run_matmul(case, rng, True),
    "triton_matmul_tma": run_matmul_tma,
    "triton_fused_moe": run_fused_moe,
    "triton_softmax": lambda case, rng: run_rows(case, rng, "softmax"),
    "triton_layernorm": lambda case, rng: run_rows(case, rng, "layernorm"),
    "triton_argmax": lambda case, rng: run_rows(case, rng, "argmax"),
    "triton_cumsum": lambda case, rng: run_rows(case, rng, "cumsum"),
    "triton_topk": run_topk,
    "triton_flash_attention": run_flash_attention,
    "triton_matmul_small": lambda case, rng: run_matmul(case, rng, False),
    "triton_matmul_int8": run_matmul_int8,
    "nvcc_intrinsics": run_nvcc_intrinsics,
}
# Kernels whose results are exact (indices, sorted values, integer sums).
EXACT = {"triton_argmax", "triton_topk", "triton_matmul_int8", "nvcc_intrinsics"}


def main():
    driver, directory = sys.argv[1], sys.argv[2]
    with open(os.path.join(directory, "kernels.json")) as f:
        kernels = json.load(f)
    names = sys.argv[3:] or sorted(kernels)
    drv = Driver(driver)
    failed = 0
    for name in names:
        rng = np.random.default_rng(sum(map(ord, name)))
        try:
            got, ref = RUNNERS[name](Case(drv, directory, name, kernels[name]), rng)
        except RuntimeError as e:
            print("%s: FAILED (%s)" % (name, e))
            failed += 1
            continue
        err = float(np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30))
        # The outputs are bf16: 2^-8 of the largest magnitude, and a few
        # units of rounding in the sums. Exact kernels must match exactly.
        if err <= (0.0 if name in EXACT else 1e-2):
            print("%s: ok (max error %.1e of max |ref|)" % (name, err))
        else:
            print("%s: MISMATCH (max error %.3g of max |ref|)" % (name, err))
            failed += 1
    print("run-reference: %d kernels, %d failed" % (len(names), failed))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
