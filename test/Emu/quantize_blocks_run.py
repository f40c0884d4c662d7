#!/usr/bin/env python3
"""Runs moegpu.quantize_blocks (f32 weights as e4m3 codes with one scale
per 128 x 128 block, and the codes transposed) on a CUDA driver (a GPU or
libcuda-emu.so) and checks every code and scale against the recipe
(reference.quantize_weight, numpy).

  quantize_blocks_run.py DRIVER --moe-opt PATH [--shape G,N,K]
      [--no-transposed] [--seed S]

The weights: each block of a different magnitude (2^-20 to 2^20), one
block all zeros (scale 1, as the host quantizes it), and the matrices'
last blocks partial unless N and K are multiples of 128.
"""
import argparse
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "Integration"))
from ptx_run import Driver  # noqa: E402
from exchange_run import compile_ptx, launch, memref  # noqa: E402
from reference import quantize_weight  # noqa: E402


def module_text(g, n, k, transposed):
    f8 = "memref<%dx%dx%dxf8E4M3FN>" % (g, n, k)
    f8t = "memref<%dx%dx%dxf8E4M3FN>" % (g, k, n)
    sc = "memref<%dx%dx%dxf32>" % (g, (n + 127) // 128, (k + 127) // 128)
    w = "memref<%dx%dx%dxf32>" % (g, n, k)
    t_arg = (", %%t: %s" % f8t) if transposed else ""
    t_use = (" transposed(%%t : %s)" % f8t) if transposed else ""
    return """gpu.module @k {{
  gpu.func @quantize_blocks(%w: {w}, %q: {f8}, %s: {sc}{t_arg}) kernel {{
    moegpu.quantize_blocks %w, %q, %s{t_use} : {w}, {f8}, {sc}
    gpu.return
  }}
}}
""".format(w=w, f8=f8, sc=sc, t_arg=t_arg, t_use=t_use)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("driver")
    ap.add_argument("--moe-opt", required=True)
    ap.add_argument("--shape", default="3,200,136")
    ap.add_argument("--no-transposed", action="store_true")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    g, n, k = (int(v) for v in a.shape.split(","))
    transposed = not a.no_transposed
    nb, kb = (n + 127) // 128, (k + 127) // 128
    rng = np.random.default_rng(a.seed)
    w = rng.standard_normal((g, n, k)).astype(np.float32)
    exps = np.linspace(-20, 20, g * nb * kb)
    for idx, e in enumerate(exps):
        m, i, j = idx // (nb * kb), idx // kb % nb, idx % kb
        w[m, 128 * i:128 * i + 128, 128 * j:128 * j + 128] *= np.float32(2.0 ** e)
    w[0, :128, :128] = 0  # a block of zeros

    ptx = compile_ptx(a.moe_opt, module_text(g, n, k, transposed))
    drv = Driver(a.driver)
    fn = drv.kernel(ptx, "quantize_blocks")
    os.unlink(ptx)
    d_w = drv.alloc(w.nbytes)
    d_q = drv.alloc(g * n * k)
    d_s = drv.alloc(g * nb * kb * 4)
    drv.upload(d_w, w.tobytes())
    params = memref(d_w, g, n, k) + memref(d_q, g, n, k) + memref(d_s, g, nb, kb)
    if transposed:
        d_t = drv.alloc(g * n * k)
        params += memref(d_t, g, k, n)
    launch(drv, fn, g * nb * kb, 256, params)
    codes = np.frombuffer(drv.download(d_q, g * n * k), np.uint8).reshape(g, n, k)
    scales = np.frombuffer(drv.download(d_s, g * nb * kb * 4),
                           np.float32).reshape(g, nb, kb)
    wrong_codes = wrong_scales = wrong_t = 0
    for m in range(g):
        want_codes, want_scales = quantize_weight(w[m])
        wrong_codes += int((codes[m] != want_codes).sum())
        wrong_scales += int((scales[m] != want_scales).sum())
        if transposed:
            t = np.frombuffer(drv.download(d_t + m * n * k, n * k),
                              np.uint8).reshape(k, n)
            wrong_t += int((t != want_codes.T).sum())
    print("quantize_blocks %dx%dx%d: %d codes, %d scales%s differ" % (
        g, n, k, wrong_codes, wrong_scales,
        (", %d transposed codes" % wrong_t) if transposed else ""))
    if wrong_codes or wrong_scales or wrong_t:
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    main()
