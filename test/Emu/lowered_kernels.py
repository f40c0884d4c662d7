"""Compiles a gpu.module with moe-opt --moe-sm90-pipeline and launches its
kernels on a CUDA driver as the runtime does: each kernel's launch (grid,
block, shared memory, cluster) and tensor maps are read from its
attributes before the module becomes a binary (what the bundle's manifest
carries), and each tensor-map argument points at its 128-byte map in
device memory.
"""
import ctypes
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

from ptx_run import launch_ex

LAUNCH = re.compile(r"kernel_launch<grid = (\d+), block = (\d+), smem = (\d+)"
                    r"(?:, tile = <[^>]*?(?:cluster = (\d+))?>)?")
MAP = re.compile(r"tensor_map<arg = (\d+), source = (\d+), view = "
                 r"\[(-?\d+), (-?\d+)\], box = \[(\d+), (\d+)\]")


def compile_module(moe_opt, text):
    """Returns the PTX's path and, per kernel, its launch: a dict of grid,
    block, smem, cluster and maps ((arg, source, view rows, view columns,
    box rows, box columns) in argument order)."""
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "kernels.mlir")
        with open(src, "w") as f:
            f.write(text)
        out = subprocess.run(
            [moe_opt, src, "--moe-sm90-pipeline",
             "--mlir-print-ir-before=gpu-module-to-binary"],
            capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit("moe-opt failed:\n" + out.stderr)
    found = re.findall(r'assembly = "((?:[^"\\]|\\.)*)"', out.stdout)
    if len(found) != 1:
        sys.exit("moe-opt made no PTX")
    ptx = re.sub(r'\\([0-9A-Fa-f]{2})',
                 lambda m: chr(int(m.group(1), 16)), found[0])
    kernels = {}
    for line in out.stderr.splitlines():
        name = re.search(r"llvm\.func @(\w+)\(", line)
        launch = LAUNCH.search(line)
        if not name or not launch:
            continue
        kernels[name.group(1)] = {
            "grid": int(launch.group(1)), "block": int(launch.group(2)),
            "smem": int(launch.group(3)),
            "cluster": int(launch.group(4) or 1),
            "maps": sorted(tuple(map(int, t)) for t in MAP.findall(line))}
    with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
        f.write(ptx)
    return f.name, kernels


def memref(ptr, *sizes):
    """The descriptor of a contiguous memref as kernel parameters."""
    strides = []
    stride = 1
    for s in reversed(sizes):
        strides.insert(0, stride)
        stride *= s
    return [ptr, ptr, 0] + list(sizes) + strides


def run(drv, fn, launch, args, grid=None):
    """Launches `fn` on `args` (a (pointer, shape, TMA element type or
    None) per memref argument) with `launch`'s shape (its grid unless
    `grid` is given) and its tensor maps."""
    values = []
    for ptr, shape, _ in args:
        values += memref(ptr, *shape)
    for _, source, view_rows, view_cols, box_rows, box_cols in launch["maps"]:
        ptr, shape, dtype = args[source]
        total = int(np.prod(shape))
        cols = view_cols if view_cols >= 0 else total // view_rows
        rows = view_rows if view_rows >= 0 else total // cols
        tmap = drv.tensor_map(ptr, dtype, [cols, rows], [box_cols, box_rows],
                              3)
        at = drv.alloc(128)
        drv.upload(at, bytes(tmap))
        values.append(at)
    words = [ctypes.c_uint64(v) for v in values]
    params = (ctypes.c_void_p * len(words))(
        *[ctypes.cast(ctypes.pointer(w), ctypes.c_void_p) for w in words])
    drv.check(drv.cu.cuFuncSetAttribute(fn, 8, launch["smem"]),
              "shared memory")
    cluster = launch["cluster"]
    count = grid if grid is not None else launch["grid"]
    count -= count % cluster
    rc = launch_ex(drv, fn, (count, 1, 1), (launch["block"], 1, 1),
                   (cluster, 1, 1), launch["smem"], params)
    drv.check(rc, "launch")
