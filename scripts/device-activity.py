#!/usr/bin/env python3
"""What a forward and a backward pass ask of the CUDA driver, staged
through host arrays (`layer(x)`, `layer.backward`) and on device memory
(`layer.forward_into`, `layer.backward_into`), counted by the
runtime in front of the driver (Layer.activity). For docs/Performance.md:

  MOE_CUDA_DRIVER=build/lib/libcuda-emu.so PYTHONPATH=build/python_packages \
    build/venv-torch/bin/python scripts/device-activity.py [CONFIG] [TOKENS]

The device buffers are the driver's own memory ($MOE_CUDA_DRIVER: the PTX
emulator, or a real driver), allocated here and handed over through
__cuda_array_interface__."""
import ctypes
import os
import sys

import numpy as np

import moe_compiler

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "test", "Python"))
from device_memory import DeviceArray  # noqa: E402


def main():
    config = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        ROOT, "test", "Integration", "Inputs", "deepseek-v3-tiny.json")
    tokens = int(sys.argv[2]) if len(sys.argv) > 2 else 37
    driver = ctypes.CDLL(os.environ["MOE_CUDA_DRIVER"])
    layer = moe_compiler.compile(config, target="sm_90a", dtype="f16",
                                 max_tokens=64, train=True).load(seed=3)
    h, k = layer.hidden_size, layer.top_k
    x = (np.random.default_rng(0).standard_normal((tokens, h)) * 0.5) \
        .astype(np.float16)

    def counted(label, run):
        before = layer.activity()
        run()
        after = layer.activity()
        print(label, {n: after[n] - before[n] for n in sorted(after)})

    for label in ("staged, first", "staged, after"):
        counted(label, lambda: layer(x))
    args = (DeviceArray(driver, (tokens, h), np.float16, x),
            DeviceArray(driver, (tokens, h), np.float16),
            DeviceArray(driver, (tokens, k), np.int32),
            DeviceArray(driver, (tokens, k), np.float32))
    for label in ("device memory, first", "device memory, after"):
        counted(label, lambda: layer.forward_into(*args))
    dy = np.random.default_rng(1).standard_normal((tokens, h)) \
        .astype(np.float32)
    for label in ("backward staged, first", "backward staged, after"):
        counted(label, lambda: layer.backward(x, dy))
    shapes = {r: p.shape for r, p in layer.parameters().items()}
    grads = {r: DeviceArray(driver, (tokens, h) if r == "x" else shapes[r],
                            np.float32)
             for r in ["x"] + layer.trained_parameters()}
    dyd = DeviceArray(driver, (tokens, h), np.float32, dy)
    for label in ("backward device memory, first",
                  "backward device memory, after"):
        counted(label, lambda: layer.backward_into(args[0], dyd, grads))


if __name__ == "__main__":
    main()
