#!/usr/bin/env python3
"""Runs the compiled device-initiated exchange (moegpu.ep_counts, ep_send
and ep_wait) on every rank of a job of processes, each with its own
emulated GPU and one symmetric window from libnccl-emu, and checks every
rank's results against a reference computed here from the routing.

  exchange_run.py DRIVER NCCL --moe-opt PATH [--ranks N] [--experts E]
      [--hidden H] [--grid G] [--passes P] [--chunks C] [--capacity C]
      [--stall-combine R] [--limit-ms L]

The script writes a gpu.module of the exchange's kernels (counts, then a
dispatch, a combine and their two waits a token chunk) for the shape, lowers it with `moe-opt
--moe-sm90-pipeline` and loads the PTX. Each pass: every rank routes a
random number of rows to every expert (seeded by pass and rank, so every
rank knows every rank's rows), counts, dispatches every chunk's rows and
weights into the experts' owners, waits for each chunk in turn and
checks what it received (rows and weights, while the later chunks may
still travel; the segment layouts), negates the received rows (the
"experts"), and combines them back chunk by chunk; it then checks that its own rows came back negated,
in place. Nothing goes through the host between ranks: the passes run
back to back, ordered only by the kernels' flags and epochs.

--capacity caps the rows a rank may receive (status 4 when exceeded);
--stall-combine R makes rank R stop before its combine, so the others'
combine waits run into the limit (status 3). Each rank prints one line a
pass ('rank R pass P: ok ...' or what differed) or its status.
"""
import argparse
import ctypes
import os
import random
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ptx_run import Driver  # noqa: E402
from lowered_kernels import compile_module, launch, memref  # noqa: E402
from peer_run import run_ranks  # noqa: E402


def module_text(n, experts, hidden, grid, chunks):
    """The kernels for n ranks, `experts` experts, rows of `hidden` bf16,
    `grid` CTAs a send and `chunks` token chunks: the counts, and a
    dispatch, a combine and their waits a chunk (chunk c's on flags
    n + 4c and n + 4c + 1, as the compiler lays them out)."""
    local = experts // n
    seg, t = chunks * experts, n * chunks * experts
    f, p = n + 4 * (chunks - 1) + 2, n + 3
    o, eo = seg + 1, chunks * (experts + 1)
    rows = "memref<?x%dxbf16>" % hidden
    g = "memref<%dxi32>" % (local + 1)
    groups = ", ".join("%%g%d" % c for c in range(chunks))
    group_args = "".join(", %%g%d: %s" % (c, g) for c in range(chunks))
    group_types = ", ".join([g] * chunks)
    text = """gpu.module @exchange {{
  gpu.func @counts(%o: memref<{o}xi32>, %t: memref<{t}xi32>,
      %f: memref<{f}xi32>, %e: memref<1xi32>, %p: memref<{p}xi64>,
      %eo: memref<{eo}xi32>, %s: memref<{seg}xi32>,
      %b: memref<{seg}xi32>, %st: memref<2xi32>{group_args}) kernel {{
    moegpu.ep_counts %o, %t, %f, %e, %p, %eo, %s, %b, %st groups({groups} : {group_types}) {{ranks = {n} : i64}}
      : memref<{o}xi32>, memref<{t}xi32>, memref<{f}xi32>, memref<1xi32>,
        memref<{p}xi64>, memref<{eo}xi32>, memref<{seg}xi32>,
        memref<{seg}xi32>, memref<2xi32>
    gpu.return
  }}
""".format(n=n, o=o, t=t, f=f, p=p, eo=eo, seg=seg, groups=groups,
           group_args=group_args, group_types=group_types)
    for c in range(chunks):
        text += """  gpu.func @dispatch{c}(%o: memref<{o}xi32>, %pos: memref<{seg}xi32>,
      %r: {rows}, %to: {rows}, %w: memref<?xf32>, %tw: memref<?xf32>,
      %f: memref<{f}xi32>, %st: memref<2xi32>, %p: memref<{p}xi64>) kernel {{
    moegpu.ep_send <dispatch> %o, %pos, %r, %to, weights(%w, %tw : memref<?xf32>, memref<?xf32>), %f, %st, %p {{ranks = {n} : i64, slot = {sd} : i64, chunk = {c} : i64, chunks = {chunks} : i64}}
      : memref<{o}xi32>, memref<{seg}xi32>, {rows}, {rows}, memref<{f}xi32>,
        memref<2xi32>, memref<{p}xi64>
    gpu.return
  }}
  gpu.func @combine{c}(%o: memref<{eo}xi32>, %pos: memref<{seg}xi32>,
      %r: {rows}, %to: {rows}, %f: memref<{f}xi32>, %st: memref<2xi32>,
      %p: memref<{p}xi64>) kernel {{
    moegpu.ep_send <combine> %o, %pos, %r, %to, %f, %st, %p {{ranks = {n} : i64, slot = {sc} : i64, chunk = {c} : i64, chunks = {chunks} : i64}}
      : memref<{eo}xi32>, memref<{seg}xi32>, {rows}, {rows}, memref<{f}xi32>,
        memref<2xi32>, memref<{p}xi64>
    gpu.return
  }}
  gpu.func @wait_dispatch{c}(%f: memref<{f}xi32>, %w: memref<{f}xi32>,
      %st: memref<2xi32>, %p: memref<{p}xi64>) kernel {{
    moegpu.ep_wait %f, %w, %st, %p {{ranks = {n} : i64, slot = {sd} : i64, senders = {grid} : i64, code = 2 : i64}}
      : memref<{f}xi32>, memref<{f}xi32>, memref<2xi32>, memref<{p}xi64>
    gpu.return
  }}
  gpu.func @wait_combine{c}(%f: memref<{f}xi32>, %w: memref<{f}xi32>,
      %st: memref<2xi32>, %p: memref<{p}xi64>) kernel {{
    moegpu.ep_wait %f, %w, %st, %p {{ranks = {n} : i64, slot = {sc} : i64, senders = {grid} : i64, code = 3 : i64}}
      : memref<{f}xi32>, memref<{f}xi32>, memref<2xi32>, memref<{p}xi64>
    gpu.return
  }}
""".format(c=c, n=n, o=o, eo=eo, seg=seg, f=f, p=p, rows=rows, grid=grid,
           chunks=chunks, sd=n + 4 * c, sc=n + 4 * c + 1)
    return text + "}\n"


def compile_ptx(moe_opt, text):
    """The PTX file of `text` lowered by moe-opt (lowered_kernels.py)."""
    return compile_module(moe_opt, text)[0]


def routing(a, pass_no, rank):
    """Rank `rank`'s rows of pass `pass_no`: rows per (chunk, expert)
    segment, chunk-major, the rows' bf16 bytes (by segment) and their f32
    weights."""
    rng = random.Random(1000003 * pass_no + 7919 * rank + a.seed)
    counts = [rng.randrange(0, a.max_rows + 1)
              for _ in range(a.chunks * a.experts)]
    total = sum(counts)
    # Finite bf16s: the high halves of floats in [-4, 4).
    rows = b"".join(struct.pack("<f", rng.uniform(-4, 4))[2:]
                    for _ in range(total * a.hidden))
    weights = [rng.uniform(0, 1) for _ in range(total)]
    return counts, rows, weights


def negate(rows):
    out = bytearray(rows)
    for i in range(1, len(out), 2):
        out[i] ^= 0x80
    return bytes(out)


def i32s(data):
    return list(struct.unpack("<%di" % (len(data) // 4), data))


def f32s(values):
    return struct.pack("<%df" % len(values), *values)


def rank_main(a, ptx, uid, rank, out):
    n, experts, hidden = a.ranks, a.experts, a.hidden
    local = experts // n
    row_bytes = 2 * hidden
    drv = Driver(a.driver)
    nccl = ctypes.CDLL(a.nccl)
    nccl.ncclGetLastError.restype = ctypes.c_char_p
    comm = ctypes.c_void_p()
    assert nccl.ncclCommInitRank(ctypes.byref(comm), n, uid, rank) == 0
    try:
        return exchange(a, ptx, rank, out, drv, nccl, comm)
    finally:
        # The others may still write this rank's window: leave together.
        out.flush()
        nccl.ncclCommDestroy(comm)


def exchange(a, ptx, rank, out, drv, nccl, comm):
    n, experts, hidden, chunks = a.ranks, a.experts, a.hidden, a.chunks
    local = experts // n
    seg = chunks * experts
    flag_words = n + 4 * (chunks - 1) + 2
    row_bytes = 2 * hidden
    # The window: every rank's buffers of the exchange at one offset.
    cap = a.capacity if a.capacity >= 0 else n * seg * a.max_rows
    most = seg * a.max_rows
    layout = {}
    at = 0
    for name, size in (("table", 4 * n * seg), ("flags", 4 * flag_words),
                       ("recv", row_bytes * max(cap, 1)),
                       ("recv_w", 4 * max(cap, 1)),
                       ("back", row_bytes * max(most, 1))):
        layout[name] = at
        at += (size + 255) // 256 * 256
    window = ctypes.c_void_p()
    assert nccl.ncclMemAlloc(ctypes.byref(window), ctypes.c_size_t(at)) == 0
    drv.upload(window.value, b"\0" * at)
    # The counters as a long run leaves them (--counters-at): the flags
    # (before the collective registration, so before any peer signals),
    # the waits' targets and the epoch.
    start = struct.pack("<I", a.counters_at % (1 << 32))
    drv.upload(window.value + layout["flags"], start * flag_words)
    win = ctypes.c_void_p()
    rc = nccl.ncclCommWindowRegister(comm, window, ctypes.c_size_t(at),
                                     ctypes.byref(win), 1)
    assert rc == 0, nccl.ncclGetLastError(comm)
    # NCCL's window fields: lsaFlatBase at 8, stride4G at 24.
    fields = drv.download(win.value, 32)
    flat = struct.unpack_from("<Q", fields, 8)[0]
    stride = struct.unpack_from("<I", fields, 24)[0] << 32
    w = {k: window.value + v for k, v in layout.items()}
    # Local buffers.
    sizes = [("offsets", 4 * (seg + 1)), ("epoch", 4),
             ("waited", 4 * flag_words), ("peers", 8 * (n + 3)),
             ("ep_offsets", 4 * chunks * (experts + 1)),
             ("send_pos", 4 * seg), ("back_pos", 4 * seg), ("status", 8),
             ("rows", row_bytes * max(most, 1)),
             ("weights", 4 * max(most, 1)),
             ("outputs", row_bytes * max(cap, 1))]
    sizes += [("groups%d" % c, 4 * (local + 1)) for c in range(chunks)]
    mem = {k: drv.alloc(s) for k, s in sizes}
    drv.upload(mem["epoch"], start)
    drv.upload(mem["waited"], start * flag_words)
    drv.upload(mem["status"], b"\0" * 8)
    distances = [(flat + p * stride - window.value) % (1 << 64)
                 for p in range(n)]
    drv.upload(mem["peers"], struct.pack(
        "<%dQ" % (n + 3), *(distances + [rank, a.limit_ms * 1000000, cap])))
    fn = {"counts": drv.kernel(ptx, "counts")}
    for c in range(chunks):
        for k in ("dispatch", "combine", "wait_dispatch", "wait_combine"):
            fn[k + str(c)] = drv.kernel(ptx, k + str(c))
    common = (memref(w["flags"], flag_words), memref(mem["status"], 2),
              memref(mem["peers"], n + 3))
    failed = 0

    def stopped(pass_no):
        """Waits for the kernels; prints and returns the status they
        stopped with (0: none)."""
        drv.check(drv.cu.cuCtxSynchronize(), "synchronize")
        code = i32s(drv.download(mem["status"], 8))
        if code[0]:
            out.write("rank %d pass %d: status %d %d\n" % (rank, pass_no,
                                                          code[0], code[1]))
        return code[0]

    for pass_no in range(a.passes):
        every = [routing(a, pass_no, s) for s in range(n)]
        counts, rows, weights = every[rank]
        total = sum(counts)
        offsets = [0]
        for c in counts:
            offsets.append(offsets[-1] + c)
        drv.upload(mem["offsets"], struct.pack("<%di" % (seg + 1), *offsets))
        if total:
            drv.upload(mem["rows"], rows)
            drv.upload(mem["weights"], f32s(weights))
        flags, st, peers = common
        launch(drv, fn["counts"], 1, 128,
               memref(mem["offsets"], seg + 1) +
               memref(w["table"], n * seg) + flags +
               memref(mem["epoch"], 1) + peers +
               memref(mem["ep_offsets"], chunks * (experts + 1)) +
               memref(mem["send_pos"], seg) +
               memref(mem["back_pos"], seg) + st +
               sum((memref(mem["groups%d" % c], local + 1)
                    for c in range(chunks)), []))
        # A rank that sends late: the others' waits must hold until its
        # rows are there.
        if rank == a.late_rank:
            time.sleep(0.5)
        for c in range(chunks):
            launch(drv, fn["dispatch%d" % c], a.grid, 128,
                   memref(mem["offsets"], seg + 1) +
                   memref(mem["send_pos"], seg) +
                   memref(mem["rows"], total, hidden) +
                   memref(w["recv"], cap, hidden) +
                   memref(mem["weights"], total) +
                   memref(w["recv_w"], cap) + flags + st + peers)
        # What this rank must have received: chunk by chunk after the
        # chunk before, for each local expert, each source's rows of it in
        # source order.
        want_off, want_groups, want_rows, want_w = [], [], [], []
        got_total = 0
        for c in range(chunks):
            groups, chunk_rows, chunk_w = [], [], []
            for l in range(local):
                i = c * experts + rank * local + l
                groups.append(got_total)
                for s in range(n):
                    c_s, rows_s, w_s = every[s]
                    first = sum(c_s[:i])
                    want_off.append(got_total)
                    chunk_rows.append(rows_s[first * row_bytes:
                                             (first + c_s[i]) * row_bytes])
                    chunk_w.extend(w_s[first:first + c_s[i]])
                    got_total += c_s[i]
            want_off.append(got_total)
            groups.append(got_total)
            want_groups.append(groups)
            want_rows.append(b"".join(chunk_rows))
            want_w.append(chunk_w)
        errors = []
        got_all = []
        for c in range(chunks):
            # Chunk c's flag says chunk c's rows are here, while the later
            # chunks' may still travel.
            launch(drv, fn["wait_dispatch%d" % c], 1, 32,
                   flags + memref(mem["waited"], flag_words) + st + peers)
            if stopped(pass_no):
                return 0
            base = want_groups[c][0]
            got = drv.download(w["recv"] + base * row_bytes,
                               len(want_rows[c])) if want_rows[c] else b""
            if got != want_rows[c]:
                bad = next(i for i in range(len(got))
                           if got[i] != want_rows[c][i])
                errors.append("chunk %d received row %d"
                              % (c, base + bad // row_bytes))
            if want_w[c] and drv.download(w["recv_w"] + 4 * base,
                                          4 * len(want_w[c])) != \
                    f32s(want_w[c]):
                errors.append("chunk %d received weights" % c)
            got_all.append(got)
        if i32s(drv.download(mem["ep_offsets"],
                             4 * chunks * (experts + 1))) != want_off:
            errors.append("ep_offsets")
        for c in range(chunks):
            if i32s(drv.download(mem["groups%d" % c], 4 * (local + 1))) != \
                    want_groups[c]:
                errors.append("ep_group_offsets of chunk %d" % c)
        if rank == a.stall_combine:
            out.write("rank %d pass %d: stalls before its combine\n"
                      % (rank, pass_no))
            return 0
        # The experts negate their rows; each chunk's go back on its own.
        for c in range(chunks):
            if got_all[c]:
                drv.upload(mem["outputs"] + want_groups[c][0] * row_bytes,
                           negate(got_all[c]))
            launch(drv, fn["combine%d" % c], a.grid, 128,
                   memref(mem["ep_offsets"], chunks * (experts + 1)) +
                   memref(mem["back_pos"], seg) +
                   memref(mem["outputs"], got_total, hidden) +
                   memref(w["back"], most, hidden) + flags + st + peers)
        for c in range(chunks):
            launch(drv, fn["wait_combine%d" % c], 1, 32,
                   flags + memref(mem["waited"], flag_words) + st + peers)
        if stopped(pass_no):
            return 0
        if total and drv.download(w["back"], row_bytes * total) != \
                negate(rows):
            errors.append("combined rows")
        if errors:
            failed = 1
            out.write("rank %d pass %d: wrong %s\n" % (rank, pass_no,
                                                      ", ".join(errors)))
        else:
            out.write("rank %d pass %d: ok, %d rows sent, %d received\n" %
                      (rank, pass_no, total, got_total))
        out.flush()
    return failed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("driver")
    ap.add_argument("nccl")
    ap.add_argument("--moe-opt", required=True)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--experts", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--grid", type=int, default=3)
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--chunks", type=int, default=1,
                    help="token chunks: a send and a wait a chunk each way")
    ap.add_argument("--max-rows", type=int, default=5)
    ap.add_argument("--capacity", type=int, default=-1)
    ap.add_argument("--stall-combine", type=int, default=-1)
    ap.add_argument("--limit-ms", type=int, default=60000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--late-rank", type=int, default=-1,
                    help="this rank waits 0.5 s before each dispatch")
    ap.add_argument("--counters-at", type=int, default=0,
                    help="the flags, the waits' targets and the epoch "
                         "start at this u32 (as after a long run)")
    a = ap.parse_args()
    os.environ["MOE_CUDA_DRIVER"] = a.driver
    ptx = compile_ptx(a.moe_opt, module_text(a.ranks, a.experts, a.hidden,
                                             a.grid, a.chunks))
    status = run_ranks(a.nccl, a.ranks,
                       lambda uid, rank, out: rank_main(a, ptx, uid, rank,
                                                        out))
    os.unlink(ptx)
    return status


if __name__ == "__main__":
    sys.exit(main())
