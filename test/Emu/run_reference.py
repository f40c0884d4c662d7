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


RUNNERS = {
    "cutlass_cooperative": run_cutlass,
    "cutlass_pingpong": run_cutlass,
    "triton_matmul_bf16": lambda case, rng: run_matmul(case, rng, False),
    "triton_matmul_tn": run_matmul_tn,
    "triton_matmul_fp8": lambda case, rng: run_matmul(case, rng, True),
    "triton_matmul_tma": run_matmul_tma,
    "triton_fused_moe": run_fused_moe,
}


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
        err = float(np.abs(got - ref).max() / np.abs(ref).max())
        # The outputs are bf16: 2^-8 of the largest magnitude, and a few
        # units of rounding in the sums.
        if err <= 1e-2:
            print("%s: ok (max error %.1e of max |ref|)" % (name, err))
        else:
            print("%s: MISMATCH (max error %.3g of max |ref|)" % (name, err))
            failed += 1
    print("run-reference: %d kernels, %d failed" % (len(names), failed))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
