#!/usr/bin/env python3
"""Stream capture and CUDA graphs on a CUDA driver (the emulator's, or a
GPU's), through the driver API with ctypes:

  graph_capture.py DRIVER add_one.ptx

A capture records work without running it; a launch of the instantiated
graph runs it, reading page-locked host memory when it runs (so each
launch sees the bytes written there before it); a host wait, a
synchronous copy, an allocation or a copy from pageable memory inside a
capture fails with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED (900) and ends
the capture as invalidated (901). Prints one line per check.
"""
import ctypes
import sys

N = 64
GLOBAL, THREAD_LOCAL = 0, 1


def main():
    cu = ctypes.CDLL(sys.argv[1])

    def ok(rc, what):
        if rc != 0:
            print("%s: CUDA error %d" % (what, rc))
            sys.exit(1)

    ok(cu.cuInit(0), "cuInit")
    ctx = ctypes.c_void_p()
    ok(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0), "retain")
    ok(cu.cuCtxSetCurrent(ctx), "current")
    module, fn = ctypes.c_void_p(), ctypes.c_void_p()
    ok(cu.cuModuleLoadData(ctypes.byref(module),
                           open(sys.argv[2], "rb").read() + b"\0"), "load")
    ok(cu.cuModuleGetFunction(ctypes.byref(fn), module, b"add_one"), "function")
    stream = ctypes.c_void_p()
    ok(cu.cuStreamCreate(ctypes.byref(stream), 1), "stream")
    d_in, d_out = ctypes.c_uint64(), ctypes.c_uint64()
    ok(cu.cuMemAlloc_v2(ctypes.byref(d_in), ctypes.c_size_t(4 * N)), "alloc")
    ok(cu.cuMemAlloc_v2(ctypes.byref(d_out), ctypes.c_size_t(4 * N)), "alloc")
    h_in, h_out = ctypes.c_void_p(), ctypes.c_void_p()
    ok(cu.cuMemAllocHost_v2(ctypes.byref(h_in), ctypes.c_size_t(4 * N)), "pinned")
    ok(cu.cuMemAllocHost_v2(ctypes.byref(h_out), ctypes.c_size_t(4 * N)), "pinned")
    host_in = (ctypes.c_uint32 * N).from_address(h_in.value)
    host_out = (ctypes.c_uint32 * N).from_address(h_out.value)
    n = ctypes.c_uint32(N)
    params = (ctypes.c_void_p * 3)(ctypes.addressof(d_in), ctypes.addressof(d_out),
                                   ctypes.addressof(n))
    size = ctypes.c_size_t(4 * N)

    def enqueue():
        ok(cu.cuMemcpyHtoDAsync_v2(d_in, h_in, size, stream), "HtoD")
        ok(cu.cuLaunchKernel(fn, 1, 1, 1, N, 1, 1, 0, stream, params, None),
           "launch")
        ok(cu.cuMemcpyDtoHAsync_v2(h_out, d_out, size, stream), "DtoH")

    # Capture: nothing runs until the graph is launched.
    for i in range(N):
        host_in[i] = i
        host_out[i] = 0
    ok(cu.cuStreamBeginCapture_v2(stream, THREAD_LOCAL), "begin")
    status = ctypes.c_int()
    ok(cu.cuStreamIsCapturing(stream, ctypes.byref(status)), "is capturing")
    enqueue()
    graph, exec_ = ctypes.c_void_p(), ctypes.c_void_p()
    ok(cu.cuStreamEndCapture(stream, ctypes.byref(graph)), "end")
    ok(cu.cuGraphInstantiateWithFlags(ctypes.byref(exec_), graph,
                                      ctypes.c_ulonglong(0)), "instantiate")
    ok(cu.cuGraphDestroy(graph), "graph destroy")
    ok(cu.cuStreamSynchronize(stream), "sync")
    print("capturing status %d; after capture: out[5] = %d" %
          (status.value, host_out[5]))

    # Each launch reads the pinned input as it is then.
    for base in (100, 1000):
        for i in range(N):
            host_in[i] = base + i
        ok(cu.cuGraphLaunch(exec_, stream), "graph launch")
        ok(cu.cuStreamSynchronize(stream), "sync")
        good = all(host_out[i] == base + i + 1 for i in range(N))
        print("launch with inputs from %d: %s" % (base, "ok" if good else
                                                   "wrong: %d" % host_out[0]))
    ok(cu.cuGraphExecDestroy(exec_), "exec destroy")

    # Unsafe calls inside a capture.
    def refused(name, call, mode=THREAD_LOCAL):
        ok(cu.cuStreamBeginCapture_v2(stream, mode), "begin")
        rc = call()
        g = ctypes.c_void_p()
        end = cu.cuStreamEndCapture(stream, ctypes.byref(g))
        print("%s in a capture: %d, then end capture: %d" % (name, rc, end))

    refused("cuStreamSynchronize", lambda: cu.cuStreamSynchronize(stream))
    refused("cuMemcpyHtoD", lambda: cu.cuMemcpyHtoD_v2(d_in, h_in, size))
    p = ctypes.c_uint64()
    refused("cuMemAlloc", lambda: cu.cuMemAlloc_v2(ctypes.byref(p), size))
    pageable = ctypes.create_string_buffer(4 * N)
    refused("pageable cuMemcpyHtoDAsync",
            lambda: cu.cuMemcpyHtoDAsync_v2(d_in, pageable, size, stream))
    refused("cuCtxSynchronize (global mode)", lambda: cu.cuCtxSynchronize(),
            GLOBAL)
    # The stream works as before after a failed capture.
    enqueue()
    ok(cu.cuStreamSynchronize(stream), "sync")
    print("after the failed captures: out[3] = %d" % host_out[3])

    # Fork and join: a second stream joins the capture by waiting for an
    # event recorded in it, adds one in its lane, and is joined back by
    # the first stream's wait for its own event: out = in + 2.
    side = ctypes.c_void_p()
    ok(cu.cuStreamCreate(ctypes.byref(side), 1), "side stream")
    forked, joined = ctypes.c_void_p(), ctypes.c_void_p()
    ok(cu.cuEventCreate(ctypes.byref(forked), 2), "event")
    ok(cu.cuEventCreate(ctypes.byref(joined), 2), "event")
    d_mid = ctypes.c_uint64()
    ok(cu.cuMemAlloc_v2(ctypes.byref(d_mid), size), "alloc")
    first = (ctypes.c_void_p * 3)(ctypes.addressof(d_in), ctypes.addressof(d_mid),
                                  ctypes.addressof(n))
    second = (ctypes.c_void_p * 3)(ctypes.addressof(d_mid),
                                   ctypes.addressof(d_out), ctypes.addressof(n))
    ok(cu.cuStreamBeginCapture_v2(stream, THREAD_LOCAL), "begin")
    ok(cu.cuMemcpyHtoDAsync_v2(d_in, h_in, size, stream), "HtoD")
    ok(cu.cuEventRecord(forked, stream), "record (fork)")
    ok(cu.cuStreamWaitEvent(side, forked, 0), "wait (fork)")
    ok(cu.cuStreamIsCapturing(side, ctypes.byref(status)), "is capturing")
    side_status = status.value
    ok(cu.cuLaunchKernel(fn, 1, 1, 1, N, 1, 1, 0, side, first, None), "launch")
    ok(cu.cuEventRecord(joined, side), "record (join)")
    ok(cu.cuStreamWaitEvent(stream, joined, 0), "wait (join)")
    ok(cu.cuLaunchKernel(fn, 1, 1, 1, N, 1, 1, 0, stream, second, None),
       "launch")
    ok(cu.cuMemcpyDtoHAsync_v2(h_out, d_out, size, stream), "DtoH")
    g = ctypes.c_void_p()
    ok(cu.cuStreamEndCapture(stream, ctypes.byref(g)), "end (fork and join)")
    ok(cu.cuStreamIsCapturing(side, ctypes.byref(status)), "is capturing")
    print("fork: the side stream captures (%d), after the end not (%d)" %
          (side_status, status.value))
    ok(cu.cuGraphInstantiateWithFlags(ctypes.byref(exec_), g,
                                      ctypes.c_ulonglong(0)), "instantiate")
    for i in range(N):
        host_in[i] = 7 * i
        host_out[i] = 0
    ok(cu.cuGraphLaunch(exec_, stream), "graph launch")
    ok(cu.cuStreamSynchronize(stream), "sync")
    good = all(host_out[i] == 7 * i + 2 for i in range(N))
    print("fork and join: %s" % ("ok" if good else "wrong: out[1] = %d" %
                                 host_out[1]))
    ok(cu.cuGraphExecDestroy(exec_), "exec destroy")
    ok(cu.cuGraphDestroy(g), "graph destroy")

    # A forked stream that is never joined back: the capture fails with
    # CUDA_ERROR_STREAM_CAPTURE_UNJOINED (904), and both streams go on.
    ok(cu.cuStreamBeginCapture_v2(stream, THREAD_LOCAL), "begin")
    ok(cu.cuEventRecord(forked, stream), "record (fork)")
    ok(cu.cuStreamWaitEvent(side, forked, 0), "wait (fork)")
    ok(cu.cuLaunchKernel(fn, 1, 1, 1, N, 1, 1, 0, side, first, None), "launch")
    end = cu.cuStreamEndCapture(stream, ctypes.byref(g))
    ok(cu.cuLaunchKernel(fn, 1, 1, 1, N, 1, 1, 0, side, first, None), "launch")
    ok(cu.cuStreamSynchronize(side), "sync")
    print("unjoined fork: end capture: %d; the side stream runs: ok" % end)


if __name__ == "__main__":
    main()
