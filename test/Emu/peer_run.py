#!/usr/bin/env python3
"""Runs one kernel of a PTX file on every rank of a job of processes, each
with its own emulated GPU (libcuda-emu.so) and one symmetric memory window
from libnccl-emu.so: the emulator's tests of peer memory.

  peer_run.py DRIVER NCCL FILE.ptx --kernel NAME --ranks N [--bytes B]
      [--skip R] [--print COUNT]

The kernel takes (window handle, this rank's copy, rank, ranks) as four
u64/u32 parameters and runs as one CTA of 32 threads. Rank R skips the
launch with --skip R (a peer that never writes). Each rank then prints
'rank R: launch: ok' (or the driver's error) and the first COUNT u32
words of its own copy.
"""
import argparse
import ctypes
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ptx_run import Driver  # noqa: E402


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]


def rank_main(a, uid, rank, out):
    os.environ["MOE_CUDA_DRIVER"] = a.driver
    drv = Driver(a.driver)
    nccl = ctypes.CDLL(a.nccl)
    nccl.ncclGetLastError.restype = ctypes.c_char_p
    comm = ctypes.c_void_p()
    rc = nccl.ncclCommInitRank(ctypes.byref(comm), a.ranks, uid, rank)
    assert rc == 0, "ncclCommInitRank: %d" % rc
    local = ctypes.c_void_p()
    assert nccl.ncclMemAlloc(ctypes.byref(local), ctypes.c_size_t(a.bytes)) == 0
    drv.upload(local.value, b"\0" * a.bytes)
    win = ctypes.c_void_p()
    rc = nccl.ncclCommWindowRegister(comm, local, ctypes.c_size_t(a.bytes),
                                     ctypes.byref(win), 1)
    assert rc == 0, "ncclCommWindowRegister: %s" % \
        nccl.ncclGetLastError(comm)
    fn = drv.kernel(a.ptx, a.kernel)
    lines = []
    failed = 0
    if rank != a.skip:
        values = [ctypes.c_uint64(win.value), ctypes.c_uint64(local.value),
                  ctypes.c_uint32(rank), ctypes.c_uint32(a.ranks)]
        params = (ctypes.c_void_p * 4)(
            *[ctypes.cast(ctypes.pointer(v), ctypes.c_void_p) for v in values])
        rc = drv.cu.cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, None, params, None)
        if rc == 0:
            rc = drv.cu.cuCtxSynchronize()
        lines.append("rank %d: launch: %s" % (rank, "ok" if rc == 0
                                               else drv.error(rc)))
        failed = 1 if rc else 0
        if rc == 0:
            words = drv.download(local.value, 4 * a.print_count)
            lines.append("rank %d: %s" % (rank, " ".join(
                str(int.from_bytes(words[i:i + 4], "little"))
                for i in range(0, len(words), 4))))
    else:
        lines.append("rank %d: skipped" % rank)
    out.write("\n".join(lines) + "\n")
    out.flush()
    # The others may still read this rank's copy: leave together.
    nccl.ncclCommDestroy(comm)
    return failed


def run_ranks(nccl_path, ranks, body):
    """Runs body(uid, rank, out) in a process a rank, all of one NCCL
    unique id; prints each rank's output (the file `out`) in rank order.
    Returns 1 when a rank failed (an exception, reported, or a non-zero
    result), else 0."""
    nccl = ctypes.CDLL(nccl_path)
    uid = UniqueId()
    assert nccl.ncclGetUniqueId(ctypes.byref(uid)) == 0
    children = []
    for rank in range(ranks):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            with os.fdopen(w, "w") as out:
                try:
                    code = body(uid, rank, out)
                except Exception as e:  # reported, then a failed rank
                    out.write("rank %d: error: %s\n" % (rank, e))
                    code = 1
            os._exit(code)
        os.close(w)
        children.append((pid, r))
    status = 0
    for pid, r in children:
        with os.fdopen(r) as f:
            sys.stdout.write(f.read())
        _, code = os.waitpid(pid, 0)
        status = status or (1 if code else 0)
    return status


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("driver")
    ap.add_argument("nccl")
    ap.add_argument("ptx")
    ap.add_argument("--kernel", required=True)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--bytes", type=int, default=4096)
    ap.add_argument("--skip", type=int, default=-1)
    ap.add_argument("--print", type=int, default=8, dest="print_count")
    a = ap.parse_args()
    return run_ranks(a.nccl, a.ranks,
                     lambda uid, rank, out: rank_main(a, uid, rank, out))


if __name__ == "__main__":
    sys.exit(main())
