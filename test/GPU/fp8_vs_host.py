#!/usr/bin/env python3
"""FP8 layers on sm_90a against the host target.

vary-scales IN OUT: copies a published FP8 checkpoint, each 128 x 128 block
scale (NAME_scale_inv) multiplied by 2^((3 i + j + c) % 5 - 2), c from the
name: blocks of one weight, and the same block of two weights (gate and
up), then differ by up to 16x, so a GEMM that applies another block's
scale is off by a large factor, not within the noise.

vary-rows IN OUT: copies inputs, token t's x multiplied by 2^((3 t) % 9 - 4)
and each 128 channels c by 2^(c % 3): the activations' scales then differ
by up to 1024x between rows and blocks, so a GEMM that applies another
row's or block's scale is far off too.

compare GPU HOST [--max M] [--mean A]: the two runs' outputs choose the same
experts with routing weights within 1e-5, and y differs by at most M of
max |y| in any element and A of mean |y| on average. The FP8 GEMMs round
the SwiGLU's inputs to bf16 as the host does, so the SwiGLU outputs that
are quantized next agree; the routed outputs are still rounded at other
points (the routing weight applied before the bf16 rounding, not after),
which moves y by about a bf16 ulp: 0.2% of mean |y| on average. A value
quantized to the neighbouring e4m3 code moves by a whole step (1/16): a
few of those stay within the bounds, a wrong scale does not.
"""
import argparse
import os
import sys
import zlib

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "Integration"))
import reference as r  # noqa: E402


def vary_scales(args):
    tensors = {k: v.copy() for k, v in r.read_safetensors(args.input).items()}
    for name, scales in tensors.items():
        if name.endswith("_scale_inv"):
            i, j = np.indices(scales.shape)
            c = zlib.crc32(name.encode())
            scales *= np.exp2((3 * i + j + c) % 5 - 2).astype(scales.dtype)
    r.write_safetensors(args.output, tensors,
                        fp8=[k for k in tensors if k + "_scale_inv" in tensors])


def vary_rows(args):
    x = r.read_safetensors(args.input)["x"]
    rows = np.exp2((3 * np.arange(x.shape[0])) % 9 - 4)[:, None]
    blocks = np.exp2((np.arange(x.shape[1]) // 128) % 3)[None, :]
    r.write_safetensors(args.output, {"x": (x * rows * blocks).astype(x.dtype)})


# The bounds of `compare` (see the module's description).
MAX_ERROR, MEAN_ERROR = 0.01, 0.005


def check(gpu_path, host_path, max_error=MAX_ERROR, mean_error=MEAN_ERROR):
    """The agreement of the two runs' outputs as one 'ok: ...' line; raises
    ValueError saying what differs."""
    gpu, host = r.read_safetensors(gpu_path), r.read_safetensors(host_path)
    ids_g, ids_h = gpu["topk_ids"], host["topk_ids"]
    if ids_g.shape != ids_h.shape:
        raise ValueError(f"topk_ids: shapes {ids_g.shape} and {ids_h.shape}")
    for t in range(ids_g.shape[0]):
        if sorted(ids_g[t].tolist()) != sorted(ids_h[t].tolist()):
            raise ValueError(f"token {t}: experts {ids_g[t].tolist()} on the "
                             f"GPU, {ids_h[t].tolist()} on the host")
        order = {e: j for j, e in enumerate(ids_h[t].tolist())}
        for j, e in enumerate(ids_g[t].tolist()):
            w_g, w_h = gpu["topk_weights"][t, j], host["topk_weights"][t, order[e]]
            if abs(w_g - w_h) > 1e-5 * (1 + abs(w_h)):
                raise ValueError(f"token {t}: weight of expert {e} is {w_g} "
                                 f"on the GPU, {w_h} on the host")
    y_g = gpu["y"].astype(np.float64)
    y_h = host["y"].astype(np.float64)
    if y_g.shape != y_h.shape or not np.isfinite(y_g).all():
        raise ValueError(f"y: shape {y_g.shape} (host {y_h.shape}) or not "
                         f"finite")
    diff = np.abs(y_g - y_h)
    worst = diff.max() / max(np.abs(y_h).max(), 1e-30)
    mean = diff.mean() / max(np.abs(y_h).mean(), 1e-30)
    if worst > max_error or mean > mean_error:
        raise ValueError(f"y: GPU and host differ by {worst:.3g} of max |y| "
                         f"at most (bound {max_error}) and {mean:.3g} of "
                         f"mean |y| on average (bound {mean_error})")
    return (f"ok: {y_g.shape[0]} tokens, GPU and host within {max_error} of "
            f"max |y| and {mean_error} of mean |y| (at most {worst:.2g}, on "
            f"average {mean:.2g})")


def compare(args):
    try:
        print(check(args.gpu, args.host, args.max, args.mean))
    except ValueError as error:
        sys.exit(str(error))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    v = sub.add_parser("vary-scales")
    v.add_argument("input")
    v.add_argument("output")
    v = sub.add_parser("vary-rows")
    v.add_argument("input")
    v.add_argument("output")
    c = sub.add_parser("compare")
    c.add_argument("gpu")
    c.add_argument("host")
    c.add_argument("--max", type=float, default=MAX_ERROR)
    c.add_argument("--mean", type=float, default=MEAN_ERROR)
    args = parser.parse_args()
    {"vary-scales": vary_scales, "vary-rows": vary_rows,
     "compare": compare}[args.command](args)


if __name__ == "__main__":
    main()
