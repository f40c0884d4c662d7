#!/usr/bin/env python3
"""Runs moegpu.quantize_blocks (f32 weights as e4m3 codes with one scale
per 128 x 128 block, and the codes transposed) on a CUDA driver (a GPU or
libcuda-emu.so) and checks every code and scale against the recipe
(reference.quantize_weight, numpy).

  quantize_blocks_run.py DRIVER --moe-opt PATH [--shape G,N,K]
      [--no-transposed] [--layout same|gate_rows|up_rows] [--seed S]

The weights: each block of a different magnitude (2^-20 to 2^20), one
block all zeros (scale 1, as the host quantizes it), and the matrices'
last blocks partial unless N and K are multiples of 128. With the
transposed codes the transposed scales are checked too. With --layout
gate_rows or up_rows the matrix is one half of the packed gate/up weight:
its rows go to rows 16 j .. 16 j + 7 (gate) or 16 j + 8 .. (up) of the
packed codes for rows 8 j .., its blocks of scales to the first or the
second half, its transposed codes to columns from 0 or from N rounded up
to 128; the other half's places (filled with a sentinel) must stay as
they were.
"""
import argparse
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "Integration"))
from ptx_run import Driver  # noqa: E402
from lowered_kernels import compile_module, launch, memref  # noqa: E402
from reference import quantize_weight  # noqa: E402


SENTINEL_CODE = 0x7F  # an e4m3 NaN: no quantized value is one
SENTINEL_SCALE = -1.0


def module_text(g, n, k, transposed, layout):
    halves = 1 if layout == "same" else 2
    nb, kb = (n + 127) // 128, (k + 127) // 128
    tn = n if layout == "same" else 2 * 128 * nb
    f8 = "memref<%dx%dx%dxf8E4M3FN>" % (g, halves * n, k)
    f8t = "memref<%dx%dx%dxf8E4M3FN>" % (g, k, tn)
    sc = "memref<%dx%dx%dxf32>" % (g, halves * nb, kb)
    sct = "memref<%dx%dx%dxf32>" % (g, kb, halves * nb)
    w = "memref<%dx%dx%dxf32>" % (g, n, k)
    t_arg = (", %%t: %s, %%st: %s" % (f8t, sct)) if transposed else ""
    t_use = (" transposed(%%t : %s) transposed_scale(%%st : %s)" % (f8t, sct)
             if transposed else "")
    attr = ("" if layout == "same" else
            " {layout = #moegpu.copy_layout<%s>}" % layout)
    return """gpu.module @k {{
  gpu.func @quantize_blocks(%w: {w}, %q: {f8}, %s: {sc}{t_arg}) kernel {{
    moegpu.quantize_blocks %w, %q, %s{t_use}{attr} : {w}, {f8}, {sc}
    gpu.return
  }}
}}
""".format(w=w, f8=f8, sc=sc, t_arg=t_arg, t_use=t_use, attr=attr)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("driver")
    ap.add_argument("--moe-opt", required=True)
    ap.add_argument("--shape", default="3,200,136")
    ap.add_argument("--no-transposed", action="store_true")
    ap.add_argument("--layout", choices=("same", "gate_rows", "up_rows"),
                    default="same")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    g, n, k = (int(v) for v in a.shape.split(","))
    transposed = not a.no_transposed
    nb, kb = (n + 127) // 128, (k + 127) // 128
    halves = 1 if a.layout == "same" else 2
    up = a.layout == "up_rows"
    tn = n if a.layout == "same" else 2 * 128 * nb
    rng = np.random.default_rng(a.seed)
    w = rng.standard_normal((g, n, k)).astype(np.float32)
    exps = np.linspace(-20, 20, g * nb * kb)
    for idx, e in enumerate(exps):
        m, i, j = idx // (nb * kb), idx // kb % nb, idx % kb
        w[m, 128 * i:128 * i + 128, 128 * j:128 * j + 128] *= np.float32(2.0 ** e)
    w[0, :128, :128] = 0  # a block of zeros

    ptx, _ = compile_module(a.moe_opt, module_text(g, n, k, transposed, a.layout))
    drv = Driver(a.driver)
    fn = drv.kernel(ptx, "quantize_blocks")
    os.unlink(ptx)

    def filled(count, value, dtype):
        ptr = drv.alloc(count * np.dtype(dtype).itemsize)
        drv.upload(ptr, np.full(count, value, dtype).tobytes())
        return ptr

    d_w = drv.alloc(w.nbytes)
    drv.upload(d_w, w.tobytes())
    d_q = filled(g * halves * n * k, SENTINEL_CODE, np.uint8)
    d_s = filled(g * halves * nb * kb, SENTINEL_SCALE, np.float32)
    params = (memref(d_w, g, n, k) + memref(d_q, g, halves * n, k) +
              memref(d_s, g, halves * nb, kb))
    if transposed:
        d_t = filled(g * k * tn, SENTINEL_CODE, np.uint8)
        d_st = filled(g * kb * halves * nb, SENTINEL_SCALE, np.float32)
        params += memref(d_t, g, k, tn) + memref(d_st, g, kb, halves * nb)
    launch(drv, fn, g * nb * kb, 256, params)

    def download(ptr, shape, dtype):
        count = int(np.prod(shape))
        raw = drv.download(ptr, count * np.dtype(dtype).itemsize)
        return np.frombuffer(raw, dtype).reshape(shape)

    codes = download(d_q, (g, halves * n, k), np.uint8)
    scales = download(d_s, (g, halves * nb, kb), np.float32)
    # Where the matrix's rows, blocks and transposed columns go.
    f = np.arange(n)
    rows = f if a.layout == "same" else 16 * (f // 8) + f % 8 + (8 if up else 0)
    blocks = np.arange(nb) + (nb if up else 0)
    tcols = f + (128 * nb if up else 0)
    want_all = np.full((g, halves * n, k), SENTINEL_CODE, np.uint8)
    want_scales = np.full((g, halves * nb, kb), SENTINEL_SCALE, np.float32)
    want_t = np.full((g, k, tn), SENTINEL_CODE, np.uint8)
    want_st = np.full((g, kb, halves * nb), SENTINEL_SCALE, np.float32)
    for m in range(g):
        c, sc = quantize_weight(w[m])
        want_all[m, rows] = c
        want_scales[m, blocks] = sc
        want_t[m][:, tcols] = c.T
        want_st[m][:, blocks] = sc.T
    wrong_codes = int((codes != want_all).sum())
    wrong_scales = int((scales != want_scales).sum())
    wrong_t = 0
    if transposed:
        t = download(d_t, (g, k, tn), np.uint8)
        st = download(d_st, (g, kb, halves * nb), np.float32)
        wrong_t = int((t != want_t).sum()) + int((st != want_st).sum())
    print("quantize_blocks %dx%dx%d%s: %d codes, %d scales%s differ" % (
        g, n, k, "" if a.layout == "same" else " " + a.layout, wrong_codes,
        wrong_scales,
        (", %d transposed codes and scales" % wrong_t) if transposed else ""))
    if wrong_codes or wrong_scales or wrong_t:
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    main()
