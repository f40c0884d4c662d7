#!/usr/bin/env python3
"""The FP8 weight gradient of the gate projection as the sm_90a step
computes it, two lowered kernels chained on a CUDA driver (a GPU or
libcuda-emu.so), against float64 numpy over the recipe's quantized
operands:

  1. moegpu.quantize_columns of the gate pre-activations' gradient dG
     ([R, F] bf16) and of the dispatched rows as the FP8 forward keeps
     them (e4m3 codes [R, H] with a scale per row per 128 columns): each
     transposed into 128 x 1 tiles, [F, R] and [H, R], with a scale per
     column per 128 rows;
  2. moegpu.grouped_gemm tn with block_scales over them:
     dWg[e] = dG_e^T . X_e, [E, F, H] in f32, each expert's rows the
     reduction.

  wgrad_fp8_run.py DRIVER --moe-opt PATH [--ffn F] [--hidden H]
      [--groups N,N,...] [--seed S]

The rows' capacity is dynamic in both kernels (the transposed buffers'
length, and the GEMM's tensor maps over them, from the buffer). The
reference takes dG's and the rows' values (the rows: codes times their
scales), quantizes both per 128 x 1 tile from each group's first row, and
sums in float64; the bound per element is the f32 accumulation's (2^-20
of the sum of the products' magnitudes).
"""
import argparse
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "Integration"))
from ptx_run import Driver  # noqa: E402
from lowered_kernels import (compile_module, group_offsets, run,  # noqa: E402
                             simt, upload)
from reference import (bf16_to_f32, e4m3_values,  # noqa: E402
                       f32_to_bf16_bits, tile_codes)


def module_text(e, f, h):
    hb = (h + 127) // 128
    dg = "memref<?x%dxbf16>" % f
    rows = "memref<?x%dxf8E4M3FN>" % h
    row_scales = "memref<?x%dxf32>" % hb
    dgt, xt = "memref<%dx?xf8E4M3FN>" % f, "memref<%dx?xf8E4M3FN>" % h
    dgs, xs = "memref<%dx?xf32>" % f, "memref<%dx?xf32>" % h
    offsets = "memref<%dxi32>" % (e + 1)
    dw = "memref<%dx%dx%dxf32>" % (e, f, h)
    return """module attributes {{gpu.container_module,
    moe.sm_partition = #moe.sm_partition<sms = 132, comm = 20>}} {{
  gpu.module @k {{
    gpu.func @columns_dg(%in: {dg}, %out: {dgt}, %s: {dgs}, %o: {offsets})
        kernel {{
      moegpu.quantize_columns %in, %out, %s, %o
        : {dg}, {dgt}, {dgs}, {offsets}
      gpu.return
    }}
    gpu.func @columns_rows(%in: {rows}, %out: {xt}, %s: {xs},
        %o: {offsets}, %rs: {row_scales}) kernel {{
      moegpu.quantize_columns %in, %out, %s, %o in_scale(%rs : {row_scales})
        : {rows}, {xt}, {xs}, {offsets}
      gpu.return
    }}
    gpu.func @wgrad(%a: {dgt}, %b: {xt}, %o: {offsets}, %c: {dw},
        %as: {dgs}, %bs: {xs}) kernel {{
      moegpu.grouped_gemm %a, %b, %o, %c block_scales(%as, %bs
        : {dgs}, {xs}) {{layout = #moegpu.layout<tn>}}
        : {dgt}, {xt}, {offsets}, {dw}
      gpu.return
    }}
  }}
}}
""".format(dg=dg, rows=rows, row_scales=row_scales, dgt=dgt, xt=xt, dgs=dgs,
           xs=xs, offsets=offsets, dw=dw)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("driver")
    ap.add_argument("--moe-opt", required=True)
    ap.add_argument("--ffn", type=int, default=72)
    ap.add_argument("--hidden", type=int, default=200)
    ap.add_argument("--groups", default="256,0,128")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    f, h = a.ffn, a.hidden
    counts, offsets, rows = group_offsets(a.groups)
    e = len(counts)
    blocks, hb = rows // 128, (h + 127) // 128
    rng = np.random.default_rng(a.seed)
    # dG: each column its own magnitude; the rows: each row's (as tokens').
    dg_bits = f32_to_bf16_bits(rng.standard_normal((rows, f)) *
                           2.0 ** rng.uniform(-8, 8, f))
    dg = bf16_to_f32(dg_bits)
    x = rng.standard_normal((rows, h)) * 2.0 ** rng.uniform(-6, 6, (rows, 1))
    row_codes, row_scales = tile_codes(x, axis=1)
    table = e4m3_values().astype(np.float32)
    x = table[row_codes] * np.repeat(row_scales, 128, axis=1)[:, :h]

    ptx, kernels = compile_module(a.moe_opt, module_text(e, f, h))
    drv = Driver(a.driver)
    fns = {name: drv.kernel(ptx, name)
           for name in ("columns_dg", "columns_rows", "wgrad")}
    os.unlink(ptx)
    d_dg, d_rows = upload(drv, dg_bits), upload(drv, row_codes)
    d_rs, d_off = upload(drv, row_scales), upload(drv, offsets)
    d_dgt = upload(drv, np.zeros((f, rows), np.uint8))
    d_xt = upload(drv, np.zeros((h, rows), np.uint8))
    d_dgs = upload(drv, np.zeros((f, blocks), np.float32))
    d_xs = upload(drv, np.zeros((h, blocks), np.float32))
    d_dw = upload(drv, np.full((e, f, h), np.nan, np.float32))
    # A CTA per 32 columns per 128 rows of the capacity, as the schedule
    # launches them.
    run(drv, fns["columns_dg"], simt((f + 31) // 32 * blocks, 128),
        [(d_dg, (rows, f), None), (d_dgt, (f, rows), None),
         (d_dgs, (f, blocks), None), (d_off, (e + 1,), None)])
    run(drv, fns["columns_rows"], simt((h + 31) // 32 * blocks, 128),
        [(d_rows, (rows, h), None), (d_xt, (h, rows), None),
         (d_xs, (h, blocks), None), (d_off, (e + 1,), None),
         (d_rs, (rows, hb), None)])
    run(drv, fns["wgrad"], kernels["wgrad"],
        [(d_dgt, (f, rows), "u8"), (d_xt, (h, rows), "u8"),
         (d_off, (e + 1,), None), (d_dw, (e, f, h), "f32"),
         (d_dgs, (f, blocks), None), (d_xs, (h, blocks), None)])
    dw = np.frombuffer(drv.download(d_dw, e * f * h * 4),
                       np.float32).reshape(e, f, h).astype(np.float64)

    # The recipe: both operands per 128 x 1 tile of each group's rows.
    values = e4m3_values().astype(np.float64)
    bad = 0
    for g in range(e):
        r0, r1 = int(offsets[g]), int(offsets[g + 1])
        if r0 == r1:
            bad += int((dw[g] != 0).sum())
            continue
        qa, sa = tile_codes(dg[r0:r1], axis=0)
        qb, sb = tile_codes(x[r0:r1], axis=0)
        da = values[qa] * np.repeat(sa, 128, axis=0).astype(np.float64)
        db = values[qb] * np.repeat(sb, 128, axis=0).astype(np.float64)
        want = da.T @ db
        bound = np.abs(da).T @ np.abs(db) * 2.0 ** -20
        bad += int((np.abs(dw[g] - want) > bound).sum())
    print("fp8 wgrad of the gate, F = %d, H = %d over %s rows: %d of %d "
          "elements past the bound" % (f, h, a.groups, bad, e * f * h))
    if bad:
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    main()
