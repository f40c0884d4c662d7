#!/usr/bin/env python3
"""Runs moegpu.quantize_columns (the 128 x 1 tiles of DeepSeek-V3's weight
gradients, transposed) on a CUDA driver (a GPU or libcuda-emu.so) and
checks every code and scale against the recipe, computed here with numpy.

  quantize_columns_run.py DRIVER --moe-opt PATH [--columns C]
      [--groups N,N,...] [--first ROWS] [--seed S] [--dtype bf16|f16]

The script writes a gpu.module with the one op for C columns, lowers it
with `moe-opt --moe-sm90-pipeline`, and runs it on a buffer of rows whose
groups hold the given row counts (each a multiple of 128), starting at
row --first (a multiple of 128: a token chunk's rows start past the
chunks before). Each column has its own magnitude (spanning 2^-12 to
2^12, and one column of zeros), so a shared scale would show. Checked:
every code of the groups' rows (the nearest e4m3 of x * (448 / a), ties
to even, saturated; a = the largest |x| of the column's 128 rows, at
least 1e-4, in f32), every scale (a / 448), and that nothing outside the
groups' rows was written.
"""
import argparse
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "Integration"))
from ptx_run import Driver  # noqa: E402
from lowered_kernels import (compile_module, group_offsets,  # noqa: E402
                             launch, memref)
from reference import e4m3_codes, e4m3_values, tile_codes  # noqa: E402

SENTINEL_CODE = 0x7F  # an e4m3 NaN: no quantized value is one
SENTINEL_SCALE = -1.0


def module_text(columns, groups, dtype):
    # e4m3 rows come with their scales per row per 128 columns.
    t = "f8E4M3FN" if dtype == "e4m3" else dtype
    scaled = dtype == "e4m3"
    blocks = (columns + 127) // 128
    arg = (", %%rs: memref<?x%dxf32>" % blocks) if scaled else ""
    use = (" in_scale(%%rs : memref<?x%dxf32>)" % blocks) if scaled else ""
    return """gpu.module @k {{
  gpu.func @quantize_columns(%in: memref<?x{c}x{t}>,
      %out: memref<{c}x?xf8E4M3FN>, %scale: memref<{c}x?xf32>,
      %offsets: memref<{g}xi32>{arg}) kernel {{
    moegpu.quantize_columns %in, %out, %scale, %offsets{use}
      : memref<?x{c}x{t}>, memref<{c}x?xf8E4M3FN>, memref<{c}x?xf32>,
        memref<{g}xi32>
    gpu.return
  }}
}}
""".format(c=columns, t=t, g=groups + 1, arg=arg, use=use)


def to_half_bits(x, dtype):
    x = np.asarray(x, np.float32)
    if dtype == "f16":
        return x.astype(np.float16).view(np.uint16)
    b = x.view(np.uint32)
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)


def from_half_bits(h, dtype):
    if dtype == "f16":
        return h.view(np.float16).astype(np.float32)
    return (h.astype(np.uint32) << 16).view(np.float32)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("driver")
    ap.add_argument("--moe-opt", required=True)
    ap.add_argument("--columns", type=int, default=72)
    ap.add_argument("--groups", default="128,0,384,128")
    ap.add_argument("--first", type=int, default=128)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--dtype", choices=("bf16", "f16", "e4m3"),
                    default="bf16")
    a = ap.parse_args()
    counts, offsets, rows = group_offsets(a.groups, a.first)
    cols = a.columns
    rng = np.random.default_rng(a.seed)
    # Column c's magnitude 2^(-12 + 24 c / C); the last column zero.
    if a.dtype == "f16":
        # f16 holds 2^-14 .. 65504: a narrower spread.
        span = 2.0 ** np.linspace(-6, 6, cols)
    else:
        span = 2.0 ** np.linspace(-12, 12, cols)
    x = rng.standard_normal((rows, cols)) * span
    x[:, -1] = 0
    row_blocks = (cols + 127) // 128
    if a.dtype == "e4m3":
        # The rows as the FP8 forward keeps them: codes and a scale per row
        # per 128 columns, standing for codes * scales.
        codes_in, row_scales = tile_codes(x, axis=1)
        bits = codes_in
        x = (e4m3_values()[codes_in].astype(np.float32) *
             np.repeat(row_scales, 128, axis=1)[:, :cols]).astype(np.float32)
    else:
        bits = to_half_bits(x, a.dtype)
        x = from_half_bits(bits, a.dtype)

    ptx, _ = compile_module(a.moe_opt, module_text(cols, len(counts), a.dtype))
    drv = Driver(a.driver)
    fn = drv.kernel(ptx, "quantize_columns")
    os.unlink(ptx)
    blocks = (rows + 127) // 128
    d_in = drv.alloc(bits.nbytes)
    d_out = drv.alloc(cols * rows)
    d_scale = drv.alloc(cols * blocks * 4)
    d_off = drv.alloc(offsets.nbytes)
    drv.upload(d_in, bits.tobytes())
    drv.upload(d_out, bytes([SENTINEL_CODE]) * (cols * rows))
    drv.upload(d_scale, np.full(cols * blocks, SENTINEL_SCALE,
                                np.float32).tobytes())
    drv.upload(d_off, offsets.tobytes())
    tiles = (cols + 31) // 32
    # Enough CTAs for the capacity (as a schedule launches it); those past
    # the groups' rows return at once.
    params = (memref(d_in, rows, cols) + memref(d_out, cols, rows) +
              memref(d_scale, cols, blocks) + memref(d_off, len(offsets)))
    if a.dtype == "e4m3":
        d_rs = drv.alloc(row_scales.nbytes)
        drv.upload(d_rs, np.ascontiguousarray(row_scales).tobytes())
        params += memref(d_rs, rows, row_blocks)
    launch(drv, fn, tiles * blocks, 128, params)
    codes = np.frombuffer(drv.download(d_out, cols * rows),
                          np.uint8).reshape(cols, rows)
    scales = np.frombuffer(drv.download(d_scale, cols * blocks * 4),
                           np.float32).reshape(cols, blocks)

    # The recipe, per column per 128 rows of the groups.
    want_codes = np.full((cols, rows), SENTINEL_CODE, np.uint8)
    want_scales = np.full((cols, blocks), SENTINEL_SCALE, np.float32)
    for r0 in range(int(offsets[0]), int(offsets[-1]), 128):
        tile = x[r0:r0 + 128].astype(np.float32)
        amax = np.maximum(np.abs(tile).max(axis=0), np.float32(1e-4))
        inverse = np.float32(448) / amax
        want_codes[:, r0:r0 + 128] = e4m3_codes((tile * inverse).astype(
            np.float32)).T
        want_scales[:, r0 // 128] = amax / np.float32(448)
    wrong_codes = int((codes != want_codes).sum())
    wrong_scales = int((scales != want_scales).sum())
    quantized = int(offsets[-1] - offsets[0])
    print("quantize_columns %s: %d columns x %d rows in %d groups: %d codes "
          "and %d scales differ" % (a.dtype, cols, quantized, len(counts),
                                    wrong_codes, wrong_scales))
    if wrong_codes or wrong_scales:
        c, r = np.argwhere(codes != want_codes)[0] if wrong_codes else (0, 0)
        print("first difference: column %d row %d: code 0x%02x, expected "
              "0x%02x" % (c, r, codes[c, r], want_codes[c, r]))
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    main()
