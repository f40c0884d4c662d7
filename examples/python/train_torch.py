#!/usr/bin/env python3
"""Trains a compiled MoE layer with PyTorch's autograd and optimizer: the
layer's backward pass is the compiled one (train=True), the loss and AdamW
are torch's. The student learns to imitate a teacher with other weights.

    python examples/python/train_torch.py [config.json] [steps]
"""
import os
import sys

import torch

from moe_compiler.torch import MoELayer

here = os.path.dirname(os.path.abspath(__file__))
config = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    here, "..", "..", "test", "Integration", "Inputs", "deepseek-v3-tiny.json")
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 30

teacher = MoELayer.from_config(config, seed=1, train=False)
student = MoELayer.from_config(config, seed=2, train=True)
opt = torch.optim.AdamW(student.parameters(), lr=1e-2)
torch.manual_seed(0)
for step in range(1, steps + 1):
    x = torch.randn(64, student.layer.hidden_size)
    with torch.no_grad():
        target = teacher(x)
    loss = torch.nn.functional.mse_loss(student(x), target)
    opt.zero_grad()
    loss.backward()          # runs the bundle's compiled backward pass
    opt.step()               # the next forward pass sees the new weights
    if step == 1 or step % 10 == 0:
        print("step %3d  loss %.6f" % (step, loss.item()))
