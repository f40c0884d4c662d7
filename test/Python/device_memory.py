"""Device memory of the CUDA driver the runtime opens ($MOE_CUDA_DRIVER:
the PTX emulator in the suite), for the tests and scripts that hand the
layer device buffers (test_package.py, ep_worker.py,
scripts/device-activity.py)."""
import ctypes

import numpy as np


class DeviceArray:
    """Device memory of the emulated driver (the one the runtime opens:
    $MOE_CUDA_DRIVER), handed over as PyTorch hands a CUDA tensor to
    libraries that take __cuda_array_interface__."""
    # (uint16 holds bf16 bits, which __cuda_array_interface__ cannot name.)
    TYPESTRS = {np.dtype(np.float16): "<f2", np.dtype(np.float32): "<f4",
                np.dtype(np.int32): "<i4", np.dtype(np.uint16): "<u2"}

    def __init__(self, driver, shape, dtype, values=None):
        self.driver, self.shape, self.dtype = driver, shape, np.dtype(dtype)
        self.nbytes = int(np.prod(shape)) * self.dtype.itemsize
        ptr = ctypes.c_uint64()
        assert driver.cuMemAlloc_v2(ctypes.byref(ptr),
                                    ctypes.c_size_t(max(self.nbytes, 1))) == 0
        self.ptr = ptr.value
        if values is not None:
            host = np.ascontiguousarray(values, self.dtype)
            assert driver.cuMemcpyHtoD_v2(
                ctypes.c_uint64(self.ptr), host.ctypes.data_as(
                    ctypes.c_void_p), ctypes.c_size_t(self.nbytes)) == 0
        self.__cuda_array_interface__ = {
            "shape": shape, "typestr": self.TYPESTRS[self.dtype],
            "data": (self.ptr, False), "strides": None, "version": 3}

    def read(self):
        host = np.empty(self.shape, self.dtype)
        assert self.driver.cuMemcpyDtoH_v2(
            host.ctypes.data_as(ctypes.c_void_p), ctypes.c_uint64(self.ptr),
            ctypes.c_size_t(self.nbytes)) == 0
        return host

    def __del__(self):
        self.driver.cuMemFree_v2(ctypes.c_uint64(self.ptr))
