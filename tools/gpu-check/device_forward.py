"""The zero-copy forward pass of the C API (moe_layer_forward_device, what a
framework's CUDA tensors go through) against the host-staged pass
(moe_layer_forward) of the same layer, on device memory this check
allocates: PyTorch CUDA tensors on a GPU, the emulated driver's memory
under --emulator (PyTorch has no CUDA there). Then the pass captured into
the caller's CUDA graph (torch.cuda.graph on a GPU, the driver's stream
capture on the emulator) and replayed on new inputs. On a GPU, the time
of a pass both ways (CUDA events around the device pass; wall clock around
the staged one, which waits for the device by design). Then the backward
pass of a --backward bundle the same two ways (check_backward)."""
import ctypes
import os
import time

import torch

MOE_F32, MOE_BF16, MOE_F16 = 0, 1, 2
TORCH_DTYPES = {MOE_F32: torch.float32, MOE_BF16: torch.bfloat16,
                MOE_F16: torch.float16}


def runtime(package):
    lib = ctypes.CDLL(os.path.join(package, "lib", "libmoe_runtime.so"))
    lib.moe_last_error.restype = ctypes.c_char_p
    lib.moe_layer_load.restype = ctypes.c_void_p
    lib.moe_layer_load.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    lib.moe_layer_free.argtypes = [ctypes.c_void_p]
    lib.moe_layer_random_weights.argtypes = [ctypes.c_void_p,
                                             ctypes.c_uint64]
    for f in ("hidden_size", "top_k", "max_tokens"):
        fn = getattr(lib, "moe_layer_" + f)
        fn.restype = ctypes.c_int64
        fn.argtypes = [ctypes.c_void_p]
    lib.moe_layer_forward.argtypes = [
        ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int64,
        ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    lib.moe_layer_device_dtypes.argtypes = [
        ctypes.c_void_p, ctypes.POINTER(ctypes.c_int),
        ctypes.POINTER(ctypes.c_int)]
    lib.moe_layer_forward_device.argtypes = [
        ctypes.c_void_p, ctypes.c_uint64, ctypes.c_int64, ctypes.c_uint64,
        ctypes.c_uint64, ctypes.c_uint64, ctypes.c_void_p]
    lib.moe_layer_gradient_count.restype = ctypes.c_int64
    lib.moe_layer_gradient_count.argtypes = [ctypes.c_void_p]
    lib.moe_layer_gradient_name.restype = ctypes.c_char_p
    lib.moe_layer_gradient_name.argtypes = [ctypes.c_void_p, ctypes.c_int64]
    lib.moe_layer_gradient_elements.restype = ctypes.c_int64
    lib.moe_layer_gradient_elements.argtypes = [ctypes.c_void_p,
                                                ctypes.c_int64]
    lib.moe_layer_backward.argtypes = [
        ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p,
        ctypes.c_int64, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int64]
    lib.moe_layer_backward_device.argtypes = [
        ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int64,
        ctypes.POINTER(ctypes.c_uint64), ctypes.c_int64, ctypes.c_void_p]
    return lib


class EmulatedMemory:
    """Device buffers of the emulated driver ($MOE_CUDA_DRIVER, the library
    the runtime opens), for PyTorch CPU tensors' contents."""

    def __init__(self):
        self.driver = ctypes.CDLL(os.environ["MOE_CUDA_DRIVER"])

    def put(self, tensor):
        tensor = tensor.contiguous()
        ptr = ctypes.c_uint64()
        nbytes = tensor.numel() * tensor.element_size()
        assert self.driver.cuMemAlloc_v2(ctypes.byref(ptr),
                                         ctypes.c_size_t(max(nbytes, 1))) == 0
        self.write(ptr.value, tensor)
        return ptr.value

    def write(self, ptr, tensor):
        tensor = tensor.contiguous()
        nbytes = tensor.numel() * tensor.element_size()
        assert self.driver.cuMemcpyHtoD_v2(
            ctypes.c_uint64(ptr), ctypes.c_void_p(tensor.data_ptr()),
            ctypes.c_size_t(nbytes)) == 0

    def get(self, ptr, like):
        out = torch.empty_like(like)
        assert self.driver.cuMemcpyDtoH_v2(
            ctypes.c_void_p(out.data_ptr()), ctypes.c_uint64(ptr),
            ctypes.c_size_t(out.numel() * out.element_size())) == 0
        return out


def check(package, bundle, tokens, emulator, seed=1, repeats=20):
    """Prints PASS/FAIL lines; returns whether every check passed."""
    lib = runtime(package)
    layer = lib.moe_layer_load(bundle.encode(), b"cuda")
    if not layer:
        print("  FAIL device forward: " + lib.moe_last_error().decode())
        return False
    try:
        return _check(lib, layer, tokens, emulator, seed, repeats)
    finally:
        lib.moe_layer_free(layer)


def _check(lib, layer, tokens, emulator, seed, repeats):
    assert lib.moe_layer_random_weights(layer, seed) == 0
    hidden, k = lib.moe_layer_hidden_size(layer), lib.moe_layer_top_k(layer)
    tokens = min(tokens, lib.moe_layer_max_tokens(layer))
    x_code, y_code = ctypes.c_int(), ctypes.c_int()
    assert lib.moe_layer_device_dtypes(layer, ctypes.byref(x_code),
                                       ctypes.byref(y_code)) == 0
    x_dtype, y_dtype = TORCH_DTYPES[x_code.value], TORCH_DTYPES[y_code.value]
    gen = torch.Generator().manual_seed(seed)

    def staged(x):
        """The host-staged pass on CPU tensors: y f32, ids, weights."""
        x = x.to(x_dtype).contiguous()
        y = torch.empty(tokens, hidden)
        ids = torch.empty(tokens, k, dtype=torch.int32)
        w = torch.empty(tokens, k)
        rc = lib.moe_layer_forward(layer, x.data_ptr(), x_code.value, tokens,
                                   y.data_ptr(), ids.data_ptr(), w.data_ptr())
        assert rc == 0, lib.moe_last_error().decode()
        return y, ids, w

    shapes = [((tokens, hidden), y_dtype), ((tokens, k), torch.int32),
              ((tokens, k), torch.float32)]
    x = torch.randn(tokens, hidden, generator=gen)
    if emulator:
        mem = EmulatedMemory()
        xd = mem.put(x.to(x_dtype))
        outs = [mem.put(torch.zeros(s, dtype=d)) for s, d in shapes]
        ptrs = [xd] + outs
        read = [lambda p=p, s=s, d=d: mem.get(p, torch.empty(s, dtype=d))
                for p, (s, d) in zip(outs, shapes)]
        stream = None
    else:
        xt = x.to(x_dtype).cuda()
        outs_t = [torch.empty(s, dtype=d, device="cuda") for s, d in shapes]
        ptrs = [xt.data_ptr()] + [t.data_ptr() for t in outs_t]
        read = [lambda t=t: t.cpu() for t in outs_t]
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)

    def device_pass(on=stream):
        rc = lib.moe_layer_forward_device(layer, ptrs[0], tokens, ptrs[1],
                                          ptrs[2], ptrs[3], on)
        assert rc == 0, lib.moe_last_error().decode()

    def compare(label, x):
        # The device's work done first: the staged pass uses the layer's
        # own buffers, which a replay of a captured pass writes too (as
        # any captured graph's static buffers).
        if not emulator:
            torch.cuda.synchronize()
        else:
            assert mem.driver.cuCtxSynchronize() == 0
        y, ids, w = (r() for r in read)
        want_y, want_ids, want_w = staged(x)
        same = torch.equal(ids, want_ids) and torch.equal(w, want_w) and \
            torch.equal(y.float(), want_y)
        print(f"  {'PASS' if same else 'FAIL'} {label:28s} {tokens} tokens, "
              f"{'equal to the staged pass' if same else 'differs'}")
        return same

    device_pass()
    ok = compare("device forward (zero-copy)", x)
    # Captured into the caller's graph, replayed on new inputs.
    x2 = torch.randn(tokens, hidden, generator=gen)
    if emulator:
        cap = ctypes.c_void_p()
        drv = mem.driver
        assert drv.cuStreamCreate(ctypes.byref(cap), 0) == 0
        assert drv.cuStreamBeginCapture_v2(cap, 0) == 0
        device_pass(cap)
        graph, graph_exec = ctypes.c_void_p(), ctypes.c_void_p()
        assert drv.cuStreamEndCapture(cap, ctypes.byref(graph)) == 0
        assert drv.cuGraphInstantiateWithFlags(
            ctypes.byref(graph_exec), graph, ctypes.c_ulonglong(0)) == 0
        mem.write(ptrs[0], x2.to(x_dtype))
        assert drv.cuGraphLaunch(graph_exec, cap) == 0
    else:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            device_pass(ctypes.c_void_p(
                torch.cuda.current_stream().cuda_stream))
        xt.copy_(x2.to(x_dtype))
        graph.replay()
    ok = compare("device forward in a CUDA graph", x2) and ok
    if emulator:
        return ok
    # Times: the device pass (no host wait inside) and the staged one.
    start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
    times = []
    for _ in range(repeats):
        start.record()
        device_pass()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    staged_times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        staged(x)
        staged_times.append((time.perf_counter() - t0) * 1e3)
    graph_times = []
    for _ in range(repeats):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        graph_times.append(start.elapsed_time(end))
    med = lambda v: sorted(v)[len(v) // 2]  # noqa: E731
    print(f"  device forward {tokens} tokens: {med(times):.4f} ms on device "
          f"pointers, {med(graph_times):.4f} ms as a torch CUDA graph, "
          f"{med(staged_times):.4f} ms staged through the host")
    return ok


def check_backward(package, bundle, tokens, emulator, seed=1, repeats=20):
    """The backward pass (a bundle compiled with --backward) on device
    memory (moe_layer_backward_device) against the host-staged one
    (moe_layer_backward) of the same layer; on a GPU both times. Prints
    PASS/FAIL lines; returns whether they agree."""
    lib = runtime(package)
    layer = lib.moe_layer_load(bundle.encode(), b"cuda")
    if not layer:
        print("  FAIL device backward: " + lib.moe_last_error().decode())
        return False
    try:
        return _check_backward(lib, layer, tokens, emulator, seed, repeats)
    finally:
        lib.moe_layer_free(layer)


def _check_backward(lib, layer, tokens, emulator, seed, repeats):
    assert lib.moe_layer_random_weights(layer, seed) == 0
    hidden = lib.moe_layer_hidden_size(layer)
    tokens = min(tokens, lib.moe_layer_max_tokens(layer))
    x_code, y_code = ctypes.c_int(), ctypes.c_int()
    assert lib.moe_layer_device_dtypes(layer, ctypes.byref(x_code),
                                       ctypes.byref(y_code)) == 0
    x_dtype = TORCH_DTYPES[x_code.value]
    count = lib.moe_layer_gradient_count(layer)
    names = [lib.moe_layer_gradient_name(layer, i).decode()
             for i in range(count)]
    sizes = [lib.moe_layer_gradient_elements(layer, i) * (tokens if i == 0
                                                          else 1)
             for i in range(count)]
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, hidden, generator=gen).to(x_dtype)
    dy = torch.randn(tokens, hidden, generator=gen)

    def staged():
        grads = [torch.empty(n) for n in sizes]
        ptrs = (ctypes.c_void_p * count)(*[g.data_ptr() for g in grads])
        rc = lib.moe_layer_backward(layer, x.data_ptr(), x_code.value,
                                    dy.data_ptr(), tokens, ptrs, count)
        assert rc == 0, lib.moe_last_error().decode()
        return grads

    if emulator:
        mem = EmulatedMemory()
        xd, dyd = mem.put(x), mem.put(dy)
        outs = [mem.put(torch.zeros(n)) for n in sizes]
        read = lambda: [mem.get(p, torch.empty(n))  # noqa: E731
                        for p, n in zip(outs, sizes)]
        stream = None
    else:
        xt, dyt = x.cuda(), dy.cuda()
        xd, dyd = xt.data_ptr(), dyt.data_ptr()
        outs_t = [torch.empty(n, device="cuda") for n in sizes]
        outs = [t.data_ptr() for t in outs_t]
        read = lambda: [t.cpu() for t in outs_t]  # noqa: E731
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    out_ptrs = (ctypes.c_uint64 * count)(*outs)

    def device_pass():
        rc = lib.moe_layer_backward_device(layer, xd, dyd, tokens, out_ptrs,
                                           count, stream)
        assert rc == 0, lib.moe_last_error().decode()

    device_pass()
    if emulator:
        assert mem.driver.cuCtxSynchronize() == 0
    else:
        torch.cuda.synchronize()
    got, want = read(), staged()
    # The same kernels both ways; the routing weights' gradients sum by
    # atomics, whose order a GPU does not fix.
    errors = {n: float((g - w).abs().max() / max(float(w.abs().max()), 1e-30))
              for n, g, w in zip(names, got, want)}
    worst = max(errors, key=errors.get)
    same = errors[worst] <= 1e-5
    print(f"  {'PASS' if same else 'FAIL'} device backward (zero-copy)  "
          f"{tokens} tokens, {count} gradients "
          f"{'equal to the staged pass' if same else 'differ'} "
          f"(largest difference {errors[worst]:.1e}, {worst})")
    if emulator or not same:
        return same
    start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
    times, staged_times = [], []
    for _ in range(repeats):
        start.record()
        device_pass()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    for _ in range(repeats):
        t0 = time.perf_counter()
        staged()
        staged_times.append((time.perf_counter() - t0) * 1e3)
    med = lambda v: sorted(v)[len(v) // 2]  # noqa: E731
    print(f"  device backward {tokens} tokens: {med(times):.4f} ms on device "
          f"pointers, {med(staged_times):.4f} ms staged through the host")
    return same
