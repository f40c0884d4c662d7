#!/usr/bin/env python3
"""Runs one kernel of a PTX file on a CUDA driver (libcuda-emu.so or a real
libcuda.so.1) through the driver API, with ctypes: the emulator's tests.

  ptx_run.py DRIVER FILE.ptx --kernel NAME [--grid X,Y,Z] [--block X,Y,Z]
      [--cluster X,Y,Z | --plain | --cooperative] [--shared BYTES]
      [--buf NAME=BYTES[:INIT]]...  INIT: zero (default), iota-u32, iota-f32
      [--args ARG ...]  ARG: p:NAME[+OFFSET] | u32:V | u64:V | s32:V | f32:V
                        | tmap:NAME:DTYPE:DIMS:BOX:SWIZZLE (128 bytes by value)
                        | gtmap:NAME:DTYPE:DIMS:BOX:SWIZZLE (pointer to it)
      [--print NAME:FMT:COUNT]...  FMT: u32, s32, f32, bf16, hex

DIMS and BOX list sizes innermost first, separated by 'x' (e.g. 64x128);
a tensor map's rows are packed. Prints 'launch: ok' or 'launch: <the
driver's error string>' (exit status 1), then each printed buffer.
"""
import argparse
import ctypes
import struct
import sys

DTYPES = {"u8": (0, 1), "u16": (1, 2), "u32": (2, 4), "f16": (6, 2),
          "f32": (7, 4), "bf16": (9, 2)}


class Driver:
    def __init__(self, path):
        self.cu = ctypes.CDLL(path)
        self.check(self.cu.cuInit(0), "cuInit")
        ctx = ctypes.c_void_p()
        self.check(self.cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0),
                   "cuDevicePrimaryCtxRetain")
        self.check(self.cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")

    def error(self, rc):
        text = ctypes.c_char_p()
        if self.cu.cuGetErrorString(rc, ctypes.byref(text)) == 0 and text.value:
            return text.value.decode()
        return "CUDA error %d" % rc

    def check(self, rc, what):
        if rc != 0:
            print("%s: %s" % (what, self.error(rc)))
            sys.exit(1)

    def alloc(self, size):
        ptr = ctypes.c_uint64()
        self.check(self.cu.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(size)),
                   "cuMemAlloc")
        return ptr.value

    def kernel(self, path, name):
        """Loads the PTX file at `path`; returns its kernel `name`."""
        with open(path, "rb") as f:
            text = f.read() + b"\0"
        module = ctypes.c_void_p()
        self.check(self.cu.cuModuleLoadData(ctypes.byref(module), text),
                   "load")
        fn = ctypes.c_void_p()
        self.check(self.cu.cuModuleGetFunction(ctypes.byref(fn), module,
                                               name.encode()), "kernel")
        return fn

    def upload(self, ptr, data):
        self.check(self.cu.cuMemcpyHtoD_v2(ctypes.c_uint64(ptr), data,
                                           ctypes.c_size_t(len(data))), "cuMemcpyHtoD")

    def download(self, ptr, size):
        buf = ctypes.create_string_buffer(size)
        self.check(self.cu.cuMemcpyDtoH_v2(buf, ctypes.c_uint64(ptr),
                                           ctypes.c_size_t(size)), "cuMemcpyDtoH")
        return buf.raw

    def tensor_map(self, ptr, dtype, dims, box, swizzle):
        code, size = DTYPES[dtype]
        rank = len(dims)
        gdims = (ctypes.c_ulonglong * rank)(*dims)
        strides = []
        stride = size
        for d in dims[:-1]:
            stride *= d
            strides.append(stride)
        gstrides = (ctypes.c_ulonglong * max(1, rank - 1))(*(strides or [0]))
        boxes = (ctypes.c_uint * rank)(*box)
        estrides = (ctypes.c_uint * rank)(*([1] * rank))
        tmap = (ctypes.c_ubyte * 128)()
        self.check(self.cu.cuTensorMapEncodeTiled(
            tmap, code, rank, ctypes.c_void_p(ptr), gdims, gstrides, boxes,
            estrides, 0, swizzle, 0, 0), "cuTensorMapEncodeTiled")
        return tmap


class LaunchAttribute(ctypes.Structure):
    """CUlaunchAttribute: an id, padding, a 64-byte value."""
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4),
                ("value", ctypes.c_uint * 16)]


class LaunchConfig(ctypes.Structure):
    """CUlaunchConfig."""
    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3),
                ("shared", ctypes.c_uint), ("stream", ctypes.c_void_p),
                ("attrs", ctypes.POINTER(LaunchAttribute)), ("numAttrs", ctypes.c_uint)]


def launch_ex(drv, fn, grid, block, cluster, shared, params,
              cooperative=False):
    """cuLaunchKernelEx with a cluster dimension (or cooperative); returns
    the CUresult."""
    attr = LaunchAttribute()
    if cooperative:
        attr.id = 2  # CU_LAUNCH_ATTRIBUTE_COOPERATIVE
        attr.value[0] = 1
    else:
        attr.id = 4  # CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        attr.value[0], attr.value[1], attr.value[2] = cluster
    config = LaunchConfig((ctypes.c_uint * 3)(*grid), (ctypes.c_uint * 3)(*block),
                          shared, None, ctypes.pointer(attr), 1)
    return drv.cu.cuLaunchKernelEx(ctypes.byref(config), fn, params, None)


def triple(text):
    parts = [int(x) for x in text.split(",")]
    return (parts + [1, 1, 1])[:3]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("driver")
    ap.add_argument("ptx")
    ap.add_argument("--kernel", required=True)
    ap.add_argument("--grid", default="1")
    ap.add_argument("--block", default="32")
    ap.add_argument("--cluster", default="1")
    ap.add_argument("--plain", action="store_true",
                    help="launch with cuLaunchKernel (no cluster attribute)")
    ap.add_argument("--cooperative", action="store_true",
                    help="a cooperative launch: every CTA resident at once")
    ap.add_argument("--shared", type=int, default=0)
    ap.add_argument("--buf", action="append", default=[])
    ap.add_argument("--args", nargs="*", default=[])
    ap.add_argument("--print", action="append", default=[], dest="prints")
    a = ap.parse_args()

    drv = Driver(a.driver)
    fn = drv.kernel(a.ptx, a.kernel)
    bufs = {}
    for spec in a.buf:
        name, rest = spec.split("=")
        size, _, init = rest.partition(":")
        size = int(size)
        ptr = drv.alloc(size)
        if init == "iota-u32":
            data = struct.pack("<%dI" % (size // 4), *range(size // 4))
        elif init == "iota-f32":
            data = struct.pack("<%df" % (size // 4), *map(float, range(size // 4)))
        else:
            data = bytes(size)
        drv.upload(ptr, data)
        bufs[name] = (ptr, size)

    holders = []
    for arg in a.args:
        kind, _, value = arg.partition(":")
        if kind == "p":
            name, _, off = value.partition("+")
            holders.append(ctypes.c_uint64(bufs[name][0] + int(off or 0)))
        elif kind == "u32":
            holders.append(ctypes.c_uint32(int(value, 0)))
        elif kind == "s32":
            holders.append(ctypes.c_int32(int(value, 0)))
        elif kind == "u64":
            holders.append(ctypes.c_uint64(int(value, 0)))
        elif kind == "f32":
            holders.append(ctypes.c_float(float(value)))
        elif kind in ("tmap", "gtmap"):
            name, dtype, dims, box, swizzle = value.split(":")
            tmap = drv.tensor_map(bufs[name][0], dtype,
                                  [int(x) for x in dims.split("x")],
                                  [int(x) for x in box.split("x")], int(swizzle))
            if kind == "tmap":
                holders.append(tmap)
            else:
                ptr = drv.alloc(128)
                drv.upload(ptr, bytes(tmap))
                holders.append(ctypes.c_uint64(ptr))
        else:
            sys.exit("ptx_run: unknown argument kind '%s'" % kind)
    params = (ctypes.c_void_p * max(1, len(holders)))(
        *[ctypes.cast(ctypes.pointer(h), ctypes.c_void_p) for h in holders])
    g, b = triple(a.grid), triple(a.block)
    if a.shared > 48 * 1024:
        drv.check(drv.cu.cuFuncSetAttribute(fn, 8, a.shared), "shared")
    if a.plain:
        rc = drv.cu.cuLaunchKernel(fn, g[0], g[1], g[2], b[0], b[1], b[2], a.shared,
                                   None, params, None)
    else:
        rc = launch_ex(drv, fn, g, b, triple(a.cluster), a.shared, params,
                       a.cooperative)
    if rc == 0:
        rc = drv.cu.cuCtxSynchronize()
    if rc != 0:
        print("launch: %s" % drv.error(rc))
        sys.stdout.flush()
        sys.exit(1)
    print("launch: ok")
    for spec in a.prints:
        name, fmt, count = spec.split(":")
        count = int(count)
        ptr, size = bufs[name]
        width = 2 if fmt == "bf16" else 4
        raw = drv.download(ptr, count * width)
        if fmt == "bf16":
            vals = [struct.unpack("<f", struct.pack("<I", h << 16))[0]
                    for h in struct.unpack("<%dH" % count, raw)]
        else:
            code = {"u32": "I", "s32": "i", "f32": "f", "hex": "I"}[fmt]
            vals = struct.unpack("<%d%s" % (count, code), raw)
        if fmt == "hex":
            text = " ".join("%08x" % v for v in vals)
        elif fmt in ("f32", "bf16"):
            text = " ".join("%g" % v for v in vals)
        else:
            text = " ".join(str(v) for v in vals)
        print("%s: %s" % (name, text))


if __name__ == "__main__":
    main()
