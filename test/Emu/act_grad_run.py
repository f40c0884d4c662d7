#!/usr/bin/env python3
"""Runs moegpu.act_grad (the SwiGLU backward of each dispatched row) on a
CUDA driver (a GPU or libcuda-emu.so) and checks its outputs against the
derivative written here from the math, in float64.

  act_grad_run.py DRIVER --moe-opt PATH [--ffn F] [--split] [--seed S]

gu holds each row's gate and up pre-activations, interleaved as the packed
weight's rows (blocks of 8 gate, then 8 up columns), gs the gradient of
the activation before the routing weight w. With a = silu(g) = g s(g):
dg = w gs u s(g) (1 + g (1 - s(g))), du = w gs a, each rounded to bf16
(within one bf16 ulp of the float64 value: the kernel computes in f32),
and the routing weight's gradient sum_f a u gs (f32 sums, 1e-5 relative).
dgu is interleaved as gu, or with --split the gate's columns then the
up's from F rounded up to 128; its other columns (a sentinel) must stay
as they were. Rows outside the groups are not touched.
"""
import argparse
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "Integration"))
from ptx_run import Driver  # noqa: E402
from lowered_kernels import (compile_module, launch, memref,  # noqa: E402
                             upload)

SENTINEL = 0x7FC1  # a bf16 NaN no gradient is


def module_text(ffn, dgu_cols, split):
    attr = " {split}" if split else ""
    return """gpu.module @k {{
  gpu.func @act_grad(%gu: memref<?x{f2}xf32>, %gs: memref<?x{f}xf32>,
      %g: memref<3xi32>, %dgu: memref<?x{d}xbf16>, %dg: memref<?x{f}xbf16>,
      %du: memref<?x{f}xbf16>, %w: memref<?xf32>, %rg: memref<?xf32>) kernel {{
    moegpu.act_grad %gu, %gs, %g, %dgu, %dg, %du
      weight(%w, %rg : memref<?xf32>, memref<?xf32>){attr}
      : memref<?x{f2}xf32>, memref<?x{f}xf32>, memref<3xi32>,
        memref<?x{d}xbf16>, memref<?x{f}xbf16>, memref<?x{f}xbf16>
    gpu.return
  }}
}}
""".format(f=ffn, f2=2 * ffn, d=dgu_cols, attr=attr)


def bf16_value(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("driver")
    ap.add_argument("--moe-opt", required=True)
    ap.add_argument("--ffn", type=int, default=200)
    ap.add_argument("--split", action="store_true")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    ffn, rows = a.ffn, 12
    offsets = np.array([2, 6, 10], np.int32)  # rows 2 .. 9 in two groups
    padded = 128 * ((ffn + 127) // 128)
    dgu_cols = 2 * padded if a.split else 2 * ffn
    rng = np.random.default_rng(a.seed)
    gu = (rng.standard_normal((rows, 2 * ffn)) * 3).astype(np.float32)
    gs = rng.standard_normal((rows, ffn)).astype(np.float32)
    w = rng.uniform(0.1, 1, rows).astype(np.float32)

    ptx, _ = compile_module(a.moe_opt, module_text(ffn, dgu_cols, a.split))
    drv = Driver(a.driver)
    fn = drv.kernel(ptx, "act_grad")
    os.unlink(ptx)

    d_gu, d_gs = upload(drv, gu), upload(drv, gs)
    d_g, d_w = upload(drv, offsets), upload(drv, w)
    d_dgu = upload(drv, np.full((rows, dgu_cols), SENTINEL, np.uint16))
    d_dg = upload(drv, np.full((rows, ffn), SENTINEL, np.uint16))
    d_du = upload(drv, np.full((rows, ffn), SENTINEL, np.uint16))
    d_rg = upload(drv, np.zeros(rows, np.float32))
    launch(drv, fn, rows, 128,
           memref(d_gu, rows, 2 * ffn) + memref(d_gs, rows, ffn) +
           memref(d_g, 3) + memref(d_dgu, rows, dgu_cols) +
           memref(d_dg, rows, ffn) + memref(d_du, rows, ffn) +
           memref(d_w, rows) + memref(d_rg, rows))

    def download(ptr, shape, dtype):
        count = int(np.prod(shape))
        return np.frombuffer(drv.download(ptr, count * np.dtype(dtype).itemsize),
                             dtype).reshape(shape)

    dgu = download(d_dgu, (rows, dgu_cols), np.uint16)
    dg = download(d_dg, (rows, ffn), np.uint16)
    du = download(d_du, (rows, ffn), np.uint16)
    rg = download(d_rg, (rows,), np.float32)

    # The math, in float64: gate f at column 16 (f // 8) + f % 8, up 8 on.
    f = np.arange(ffn)
    gate_col = 16 * (f // 8) + f % 8
    g = gu[:, gate_col].astype(np.float64)
    u = gu[:, gate_col + 8].astype(np.float64)
    s = 1 / (1 + np.exp(-g))
    act = g * s
    dact = w[:, None].astype(np.float64) * gs
    want_dg = dact * u * s * (1 + g * (1 - s))
    want_du = dact * act
    want_rg = (act * u * gs).sum(axis=1)
    inside = (np.arange(rows) >= offsets[0]) & (np.arange(rows) < offsets[-1])

    bad = 0
    for name, got, want in (("dg", dg, want_dg), ("du", du, want_du)):
        value = bf16_value(got[inside])
        ulp = np.maximum(np.abs(want[inside]), 1e-30) * 2.0 ** -7
        wrong = int((np.abs(value - want[inside]) > ulp).sum())
        if wrong:
            print("%s: %d values past one bf16 ulp" % (name, wrong))
        bad += wrong
        if (got[~inside] != SENTINEL).any():
            print("%s: rows outside the groups written" % name)
            bad += 1
    # dgu holds the same bits as dg and du, where the layout puts them.
    want_dgu = np.full((rows, dgu_cols), SENTINEL, np.uint16)
    gate_at = f if a.split else gate_col
    up_at = f + padded if a.split else gate_col + 8
    want_dgu[np.ix_(inside, gate_at)] = dg[inside]
    want_dgu[np.ix_(inside, up_at)] = du[inside]
    wrong_dgu = int((dgu != want_dgu).sum())
    if wrong_dgu:
        print("dgu: %d values differ from dg and du at the layout's places"
              % wrong_dgu)
    bad += wrong_dgu
    rel = np.abs(rg[inside] - want_rg[inside]) / np.maximum(
        np.abs(want_rg[inside]), 1e-30)
    if (rel > 1e-5).any() or (rg[~inside] != 0).any():
        print("row_grad: worst relative error %.3g" % rel.max())
        bad += 1
    print("act_grad %s F = %d: %d wrong" % ("split" if a.split else
                                            "interleaved", ffn, bad))
    if bad:
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    main()
