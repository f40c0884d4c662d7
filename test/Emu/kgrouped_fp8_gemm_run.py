#!/usr/bin/env python3
"""Runs the FP8 k-grouped GEMM (moegpu.grouped_gemm tn with block_scales:
DeepSeek-V3's weight gradient, dW_e = dY_e^T . X_e) on a CUDA driver (a GPU
or libcuda-emu.so) and checks every element of every group's result
against float64 numpy over the dequantized operands.

  kgrouped_fp8_gemm_run.py DRIVER --moe-opt PATH [--m M] [--n N]
      [--groups N,N,...] [--first ROWS] [--seed S] [--tile-n N]
      [--cluster 1|2] [--compile-only] [--time REPEATS]

The operands are quantized here, from the recipe (128 x 1 tiles: one scale
per column per 128 rows, amax / 448, codes the nearest e4m3 of x * 448 /
amax), and handed to the kernel transposed, [M, R] and [N, R], as
moegpu.quantize_columns writes them. Columns span magnitudes 2^-8 to 2^8
and each 128-row block has its own magnitude too, so a scale read from the
wrong column, row or k block shows; rows outside the groups hold large
values that must not be summed, and every group's [M, N] is written (an
empty group's zeros included). The bound per element is the f32
accumulation's: 2^-20 of the sum of the products' magnitudes.

The launch (grid, block, shared memory, cluster) and the tensor maps come
from the kernel's attributes (lowered_kernels.py), as the runtime reads
them from the bundle's manifest.
"""
import argparse
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "Integration"))
from ptx_run import Driver  # noqa: E402
from lowered_kernels import (compile_module, group_offsets, run,  # noqa: E402
                             upload)
from reference import e4m3_values, tile_codes  # noqa: E402

SENTINEL = 12345.0


def module_text(m, n, groups, tile_n, cluster):
    tile = ""
    if tile_n:
        tile = (", tile = #moegpu.tile<m = 128, n = %d, k = 128, stages = 4%s>"
                % (tile_n, ", cluster = 2" if cluster == 2 else ""))
    # One group's c is [M, N].
    c = "%dx%d" % (m, n) if groups == 1 else "%dx%dx%d" % (groups, m, n)
    types = ("memref<{m}x?xf8E4M3FN>, memref<{n}x?xf8E4M3FN>, "
             "memref<{g}xi32>, memref<{c}xf32>").format(
                 m=m, n=n, g=groups + 1, c=c)
    return """module attributes {{gpu.container_module,
    moe.sm_partition = #moe.sm_partition<sms = 132, comm = 20>}} {{
  gpu.module @k {{
    gpu.func @dw(%a: memref<{m}x?xf8E4M3FN>, %b: memref<{n}x?xf8E4M3FN>,
        %o: memref<{g}xi32>, %c: memref<{c}xf32>,
        %as: memref<{m}x?xf32>, %bs: memref<{n}x?xf32>) kernel {{
      moegpu.grouped_gemm %a, %b, %o, %c block_scales(%as, %bs
        : memref<{m}x?xf32>, memref<{n}x?xf32>)
        {{layout = #moegpu.layout<tn>{tile}}} : {types}
      gpu.return
    }}
  }}
}}
""".format(m=m, n=n, g=groups + 1, c=c, tile=tile, types=types)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("driver")
    ap.add_argument("--moe-opt", required=True)
    ap.add_argument("--m", type=int, default=136)
    ap.add_argument("--n", type=int, default=72)
    ap.add_argument("--groups", default="128,0,256,128")
    ap.add_argument("--first", type=int, default=128)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--tile-n", type=int, default=0,
                    help="the tile's n (default: moe-select-tiles' choice)")
    ap.add_argument("--cluster", type=int, choices=(1, 2), default=1,
                    help="with --tile-n: CTA pairs sharing b's tile")
    ap.add_argument("--compile-only", action="store_true",
                    help="compile (into MOE_KERNEL_CACHE) and stop")
    ap.add_argument("--time", type=int, default=0, metavar="REPEATS",
                    help="then time REPEATS launches (a GPU's numbers)")
    ap.add_argument("--no-check", action="store_true",
                    help="with --time: skip the float64 reference (large "
                         "shapes)")
    a = ap.parse_args()
    counts, offsets, rows = group_offsets(a.groups, a.first)
    m, n, groups = a.m, a.n, len(counts)
    ptx, kernels = compile_module(
        a.moe_opt, module_text(m, n, groups, a.tile_n, a.cluster))
    if a.compile_only:
        os.unlink(ptx)
        print("compiled")
        return
    rng = np.random.default_rng(a.seed)

    def operand(cols):
        x = rng.standard_normal((rows, cols))
        x *= 2.0 ** rng.uniform(-8, 8, cols)             # per column
        x *= 2.0 ** rng.uniform(-4, 4, (rows // 128, 1)).repeat(128, 0)
        x[:a.first] = 1e4                                 # not summed
        x[int(offsets[-1]):] = -1e4
        return x

    x_a, x_b = operand(m), operand(n)
    # The 128 x 1 tiles: scales [R / 128, C], transposed as the kernel
    # takes them.
    codes_a, scale_a = tile_codes(x_a, axis=0)
    codes_b, scale_b = tile_codes(x_b, axis=0)
    scale_a, scale_b = scale_a.T.copy(), scale_b.T.copy()
    if not a.no_check:
        table = e4m3_values().astype(np.float64)
        kb = np.arange(rows) // 128
        deq_a = table[codes_a] * scale_a.T[kb].astype(np.float64)
        deq_b = table[codes_b] * scale_b.T[kb].astype(np.float64)

    drv = Driver(a.driver)
    fn = drv.kernel(ptx, "dw")
    os.unlink(ptx)

    blocks = rows // 128

    d_a, d_b = upload(drv, codes_a.T), upload(drv, codes_b.T)
    d_off = upload(drv, offsets)
    d_c = upload(drv, np.full((groups, m, n), SENTINEL, np.float32))
    d_as, d_bs = upload(drv, scale_a), upload(drv, scale_b)
    args = [(d_a, (m, rows), "u8"), (d_b, (n, rows), "u8"),
            (d_off, (groups + 1,), None),
            (d_c, (groups, m, n) if groups > 1 else (m, n), "f32"),
            (d_as, (m, blocks), None), (d_bs, (n, blocks), None)]
    again = run(drv, fn, kernels["dw"], args)
    got = np.frombuffer(drv.download(d_c, groups * m * n * 4),
                        np.float32).reshape(groups, m, n).astype(np.float64)

    worst, bad = 0.0, 0
    for e in range(0 if a.no_check else groups):
        r0, r1 = int(offsets[e]), int(offsets[e + 1])
        want = deq_a[r0:r1].T @ deq_b[r0:r1]
        bound = np.abs(deq_a[r0:r1]).T @ np.abs(deq_b[r0:r1])
        err = np.abs(got[e] - want)
        bad += int((err > bound * 2.0 ** -20).sum())
        with np.errstate(invalid="ignore", divide="ignore"):
            ratio = np.where(bound > 0, err / bound, err)
        worst = max(worst, float(ratio.max()))
    if a.no_check:
        print("k-grouped fp8 gemm %dx%d over %s rows: not checked"
              % (m, n, a.groups))
    else:
        print("k-grouped fp8 gemm %dx%d over %s rows: %d of %d elements past "
              "the bound" % (m, n, a.groups, bad, groups * m * n))
    if bad:
        print("worst error over the bound's sum: %.3g" % worst)
        sys.exit(1)
    print("ok")
    if a.time:
        # The same launch again, back to back (its parameters and tensor
        # maps made once).
        summed = sum(counts)
        drv.check(drv.cu.cuCtxSynchronize(), "synchronize")
        start = time.perf_counter()
        for _ in range(a.time):
            again()
        drv.check(drv.cu.cuCtxSynchronize(), "synchronize")
        seconds = (time.perf_counter() - start) / a.time
        print("time: %.1f us a launch, %.0f TFLOP/s (2 x %d rows x %d x %d)"
              % (1e6 * seconds, 2.0 * summed * m * n / seconds / 1e12, summed,
                 m, n))


if __name__ == "__main__":
    main()
