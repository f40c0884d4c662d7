"""Compiles a gpu.module with moe-opt --moe-sm90-pipeline and launches its
kernels on a CUDA driver as the runtime does: each kernel's launch (grid,
block, shared memory, cluster) and tensor maps are read from its
attributes before the module becomes a binary (what the bundle's manifest
carries), and each tensor-map argument points at its 128-byte map in
device memory.

With MOE_KERNEL_CACHE set to a directory, each module's PTX and launches
are kept there under a hash of its text (and read from there when
present), so a machine without moe-opt (a GPU machine of the GPU check)
runs the kernels compiled here.
"""
import ctypes
import hashlib
import json
import os
import re
import shutil
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
    """Returns the PTX's path (a file of the caller's to delete) and, per
    kernel, its launch: a dict of grid, block, smem, cluster and maps
    ((arg, source, view rows, view columns, box rows, box columns) in
    argument order)."""
    cache = os.environ.get("MOE_KERNEL_CACHE")
    key = hashlib.sha256(text.encode()).hexdigest()[:24]
    if cache and os.path.exists(os.path.join(cache, key + ".json")):
        with open(os.path.join(cache, key + ".json")) as f:
            kernels = json.load(f)
        with open(os.path.join(cache, key + ".ptx")) as f:
            ptx = f.read()
    else:
        ptx, kernels = lower(moe_opt, text)
        if cache:
            os.makedirs(cache, exist_ok=True)
            with open(os.path.join(cache, key + ".ptx"), "w") as f:
                f.write(ptx)
            with open(os.path.join(cache, key + ".json"), "w") as f:
                json.dump(kernels, f)
    with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
        f.write(ptx)
    return f.name, kernels


def lower(moe_opt, text):
    """moe-opt's PTX of `text` and the launches of its kernels."""
    if not moe_opt or not (os.path.exists(moe_opt) or shutil.which(moe_opt)):
        sys.exit("no compiled kernels for this module in MOE_KERNEL_CACHE, "
                 "and no moe-opt to compile them")
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
            "maps": sorted([int(v) for v in t] for t in MAP.findall(line))}
    return ptx, kernels


def simt(grid, block):
    """The launch of a SIMT kernel (no shared memory, cluster or maps)."""
    return {"grid": grid, "block": block, "smem": 0, "cluster": 1,
            "maps": []}


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
    `grid` is given) and its tensor maps; returns a function that launches
    it again as it is (the maps encoded and uploaded once)."""
    params = parameters(drv, launch, args)
    drv.check(drv.cu.cuFuncSetAttribute(fn, 8, launch["smem"]),
              "shared memory")
    cluster = launch["cluster"]
    count = grid if grid is not None else launch["grid"]
    count -= count % cluster

    def again():
        rc = launch_ex(drv, fn, (count, 1, 1), (launch["block"], 1, 1),
                       (cluster, 1, 1), launch["smem"], params)
        drv.check(rc, "launch")
    again()
    return again


def parameters(drv, launch, args):
    """The kernel parameters of `args` and `launch`'s tensor maps (each
    encoded and put in device memory)."""
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
    # The words live as long as the array that points at them.
    params.words = words
    return params


def launch(drv, fn, grid, block, values):
    """cuLaunchKernel of `fn` on 64-bit parameters `values` (memref
    descriptors' words), without shared memory."""
    words = [ctypes.c_uint64(v) for v in values]
    params = (ctypes.c_void_p * len(words))(
        *[ctypes.cast(ctypes.pointer(w), ctypes.c_void_p) for w in words])
    rc = drv.cu.cuLaunchKernel(fn, grid, 1, 1, block, 1, 1, 0, None, params,
                               None)
    if rc != 0:
        raise RuntimeError("launch: " + drv.error(rc))


def upload(drv, array):
    """A device copy of numpy `array`; returns its address."""
    array = np.ascontiguousarray(array)
    ptr = drv.alloc(max(array.nbytes, 1))
    drv.upload(ptr, array.tobytes())
    return ptr


def group_offsets(text, first=0):
    """Groups of the row counts in `text` ("N,N,...", each a multiple of
    128: the schedule's alignment) from row `first`: the counts, the
    offsets ([G + 1] i32) and a capacity one block of 128 past them."""
    counts = [int(c) for c in text.split(",")]
    if any(c % 128 for c in counts) or first % 128:
        sys.exit("group rows and the first row must be multiples of 128")
    offsets = np.cumsum([first] + counts).astype(np.int32)
    return counts, offsets, int(offsets[-1]) + 128
