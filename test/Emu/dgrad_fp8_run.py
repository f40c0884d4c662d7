#!/usr/bin/env python3
"""The FP8 input gradient of the gate and up projections as the sm_90a
step computes it, three lowered kernels chained on a CUDA driver (a GPU
or libcuda-emu.so), against float64 numpy over the recipe's quantized
operands:

  1. moegpu.quantize_blocks of the gate and of the up masters ([E, F, H]
     f32, the gate_rows and up_rows layouts): the transposed codes
     [E, H, 2 F'] (the gate's columns from 0, the up's from F' = F
     rounded up to 128) and the transposed block scales [E, ceil(H / 128),
     2 ceil(F / 128)];
  2. moegpu.quantize of the pre-activations' gradient dGU [R, 2 F'] (as
     act_grad's split layout writes it: dG, then dU from F') per row per
     128 columns;
  3. moegpu.grouped_gemm nt with block_scales over them: dX = dGU . W13,
     [R, H] in bf16, each expert's rows against its own weights.

  dgrad_fp8_run.py DRIVER --moe-opt PATH [--ffn F] [--hidden H] [--seed S]

The reference dequantizes with reference.quantize_weight (each of the
gate and up matrices per 128 x 128 block) and per 1 x 128 row tile of dG
and dU, and sums dG . Wg + dU . Wu in float64; the bound per element is
the f32 accumulation's (2^-20 of the sum of the products' magnitudes)
plus the bf16 output's rounding (2^-8 relative).
"""
import argparse
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "Integration"))
from ptx_run import Driver  # noqa: E402
from lowered_kernels import compile_module, run, simt, upload  # noqa: E402
from reference import (bf16_to_f32, dequantize_weight,  # noqa: E402
                       e4m3_values, f32_to_bf16_bits, quantize_weight,
                       tile_codes)


def module_text(e, f, h, fp, rows):
    nb, hb, kb = (f + 127) // 128, (h + 127) // 128, 2 * fp // 128
    w = "memref<%dx%dx%dxf32>" % (e, f, h)
    q13 = "memref<%dx%dx%dxf8E4M3FN>" % (e, 2 * f, h)
    s13 = "memref<%dx%dx%dxf32>" % (e, 2 * nb, hb)
    t13 = "memref<%dx%dx%dxf8E4M3FN>" % (e, h, 2 * fp)
    st13 = "memref<%dx%dx%dxf32>" % (e, hb, kb)
    dgu = "memref<?x%dxbf16>" % (2 * fp)
    codes = "memref<?x%dxf8E4M3FN>" % (2 * fp)
    scales = "memref<?x%dxf32>" % kb
    offsets = "memref<%dxi32>" % (e + 1)
    dx = "memref<?x%dxbf16>" % h
    text = "module attributes {gpu.container_module,\n"
    text += ("    moe.sm_partition = #moe.sm_partition<sms = 132, comm = 20>}"
             " {\n  gpu.module @k {\n")
    for half, layout in (("gate", "gate_rows"), ("up", "up_rows")):
        text += """    gpu.func @quantize_{half}(%w: {w}, %q: {q13}, %s: {s13},
        %t: {t13}, %st: {st13}) kernel {{
      moegpu.quantize_blocks %w, %q, %s transposed(%t : {t13})
        transposed_scale(%st : {st13})
        {{layout = #moegpu.copy_layout<{layout}>}} : {w}, {q13}, {s13}
      gpu.return
    }}
""".format(half=half, layout=layout, w=w, q13=q13, s13=s13, t13=t13,
           st13=st13)
    text += """    gpu.func @quantize_rows(%x: {dgu}, %o: {offsets}, %q: {codes},
        %s: {scales}) kernel {{
      moegpu.quantize %x, %q, %s offsets(%o : {offsets})
        : {dgu}, {codes}, {scales}
      gpu.return
    }}
    gpu.func @dgrad(%a: {codes}, %b: {t13}, %o: {offsets}, %c: {dx},
        %as: {scales}, %bs: {st13}) kernel {{
      moegpu.grouped_gemm %a, %b, %o, %c block_scales(%as, %bs
        : {scales}, {st13}) : {codes}, {t13}, {offsets}, {dx}
      gpu.return
    }}
  }}
}}
""".format(dgu=dgu, offsets=offsets, codes=codes, scales=scales, t13=t13,
           st13=st13, dx=dx)
    return text


def row_tiles(x):
    """x [R, C] per row per 128 columns, dequantized (float64): the
    recipe's 1 x 128 tiles."""
    codes, scales = tile_codes(x, axis=1)
    full = np.repeat(scales.astype(np.float64), 128, axis=1)[:, :x.shape[1]]
    return e4m3_values().astype(np.float64)[codes] * full


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("driver")
    ap.add_argument("--moe-opt", required=True)
    ap.add_argument("--ffn", type=int, default=200)
    ap.add_argument("--hidden", type=int, default=136)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    e, f, h = 2, a.ffn, a.hidden
    fp = 128 * ((f + 127) // 128)
    nb, hb, kb = (f + 127) // 128, (h + 127) // 128, 2 * fp // 128
    counts = [128, 256]  # rows per expert, from row 0
    offsets = np.cumsum([0] + counts).astype(np.int32)
    rows = int(offsets[-1])
    rng = np.random.default_rng(a.seed)
    gate = rng.standard_normal((e, f, h)).astype(np.float32) * 0.05
    up = rng.standard_normal((e, f, h)).astype(np.float32) * 0.02
    dg = rng.standard_normal((rows, f)) * 2.0 ** rng.uniform(-6, 6, (rows, 1))
    du = rng.standard_normal((rows, f)) * 2.0 ** rng.uniform(-6, 6, (rows, 1))
    dgu = np.zeros((rows, 2 * fp), np.float32)
    dgu[:, :f], dgu[:, fp:fp + f] = dg, du
    dgu_bits = f32_to_bf16_bits(dgu)
    dgu = bf16_to_f32(dgu_bits)

    ptx, kernels = compile_module(a.moe_opt, module_text(e, f, h, fp, rows))
    drv = Driver(a.driver)
    fns = {name: drv.kernel(ptx, name) for name in
           ("quantize_gate", "quantize_up", "quantize_rows", "dgrad")}
    os.unlink(ptx)

    d_gate, d_up = upload(drv, gate), upload(drv, up)
    d_q13 = upload(drv, np.zeros((e, 2 * f, h), np.uint8))
    d_s13 = upload(drv, np.zeros((e, 2 * nb, hb), np.float32))
    d_t13 = upload(drv, np.zeros((e, h, 2 * fp), np.uint8))  # padding: zeros
    d_st13 = upload(drv, np.zeros((e, hb, kb), np.float32))
    d_dgu, d_off = upload(drv, dgu_bits), upload(drv, offsets)
    d_codes = upload(drv, np.zeros((rows, 2 * fp), np.uint8))
    d_scales = upload(drv, np.zeros((rows, kb), np.float32))
    d_dx = upload(drv, np.zeros((rows, h), np.uint16))
    for name, d_w in (("quantize_gate", d_gate), ("quantize_up", d_up)):
        run(drv, fns[name], simt(e * nb * hb, 256),
            [(d_w, (e, f, h), None), (d_q13, (e, 2 * f, h), None),
             (d_s13, (e, 2 * nb, hb), None), (d_t13, (e, h, 2 * fp), None),
             (d_st13, (e, hb, kb), None)])
    run(drv, fns["quantize_rows"], simt((rows + 7) // 8, 256),
        [(d_dgu, (rows, 2 * fp), None), (d_off, (e + 1,), None),
         (d_codes, (rows, 2 * fp), None), (d_scales, (rows, kb), None)])
    run(drv, fns["dgrad"], kernels["dgrad"],
        [(d_codes, (rows, 2 * fp), "u8"), (d_t13, (e, h, 2 * fp), "u8"),
         (d_off, (e + 1,), None), (d_dx, (rows, h), "bf16"),
         (d_scales, (rows, kb), None), (d_st13, (e, hb, kb), None)])
    dx = bf16_to_f32(np.frombuffer(drv.download(d_dx, rows * h * 2),
                                      np.uint16).reshape(rows, h))

    # The recipe in float64: each weight matrix per 128 x 128 block, dG
    # and dU per row per 128 of their own columns.
    dgq, duq = row_tiles(dgu[:, :fp])[:, :f], row_tiles(dgu[:, fp:])[:, :f]
    bad, worst = 0, 0.0
    for x in range(e):
        r0, r1 = int(offsets[x]), int(offsets[x + 1])
        wg = dequantize_weight(*quantize_weight(gate[x]))
        wu = dequantize_weight(*quantize_weight(up[x]))
        want = dgq[r0:r1] @ wg + duq[r0:r1] @ wu
        bound = (np.abs(dgq[r0:r1]) @ np.abs(wg) +
                 np.abs(duq[r0:r1]) @ np.abs(wu)) * 2.0 ** -20 + \
            np.abs(want) * 2.0 ** -8
        err = np.abs(dx[r0:r1] - want)
        bad += int((err > bound).sum())
        worst = max(worst, float((err / np.maximum(bound, 1e-300)).max()))
    print("fp8 dgrad of gate and up, F = %d, H = %d, %d rows: %d of %d "
          "elements past the bound" % (f, h, rows, bad, rows * h))
    if bad:
        print("worst error over its bound: %.3g" % worst)
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    main()
