#!/usr/bin/env python3
"""Compiles an MoE layer from a Hugging Face config.json and runs it on numpy
arrays: the smallest use of the moe_compiler package.

    python examples/python/run_layer.py [config.json] [weights.safetensors PREFIX]

Without weights the layer gets seeded random ones.
"""
import os
import sys

import numpy as np

import moe_compiler

here = os.path.dirname(os.path.abspath(__file__))
config = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    here, "..", "..", "test", "Integration", "Inputs", "qwen3-moe-tiny.json")
bundle = moe_compiler.compile(config, max_tokens=256)   # cached after the first
if len(sys.argv) > 3:
    layer = bundle.load(weights=sys.argv[2], prefix=sys.argv[3])
else:
    layer = bundle.load(seed=0)
print("layer: hidden %d, %d experts, top-%d, %s" %
      (layer.hidden_size, layer.num_experts, layer.top_k, layer.dtype))

x = np.random.default_rng(0).standard_normal((16, layer.hidden_size),
                                             dtype=np.float32)
y, topk_ids, topk_weights = layer(x)
print("y", y.shape, "|y| = %.4f" % np.linalg.norm(y))
print("token 0 goes to experts", topk_ids[0].tolist(), "with weights",
      np.round(topk_weights[0], 4).tolist())
