"""Calls moe_compile_exchange_kernels(ranks, experts, hidden, ctas) of the
compiler's C API through ctypes; prints `ok N`, then the PTX or the
diagnostics."""
import ctypes
import sys

lib = ctypes.CDLL(sys.argv[1])
lib.moe_compile_exchange_kernels.restype = ctypes.c_void_p
lib.moe_compile_exchange_kernels.argtypes = [ctypes.c_int64] * 4
lib.moe_compile_result_ok.argtypes = [ctypes.c_void_p]
lib.moe_compile_result_data.restype = ctypes.c_void_p
lib.moe_compile_result_data.argtypes = [ctypes.c_void_p,
                                        ctypes.POINTER(ctypes.c_size_t)]
lib.moe_compile_result_diagnostics.restype = ctypes.c_char_p
lib.moe_compile_result_diagnostics.argtypes = [ctypes.c_void_p]
lib.moe_compile_result_free.argtypes = [ctypes.c_void_p]
result = lib.moe_compile_exchange_kernels(*[int(a) for a in sys.argv[2:6]])
ok = lib.moe_compile_result_ok(result)
print("ok", ok)
if ok:
    size = ctypes.c_size_t()
    data = lib.moe_compile_result_data(result, ctypes.byref(size))
    print(ctypes.string_at(data, size.value).decode())
else:
    print(lib.moe_compile_result_diagnostics(result).decode(), end="")
lib.moe_compile_result_free(result)
