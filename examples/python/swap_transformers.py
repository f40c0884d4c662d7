#!/usr/bin/env python3
"""Swaps the MoE blocks of a transformers model for compiled layers holding
the model's own weights, and compares the logits. A small random Qwen3-MoE
model stands in for a real one (any family the importer supports works:
AutoModelForCausalLM.from_pretrained(...) then replace_moe_blocks).

    python examples/python/swap_transformers.py
"""
import torch
import transformers

from moe_compiler.torch import replace_moe_blocks

config = transformers.Qwen3MoeConfig(
    vocab_size=100, hidden_size=64, intermediate_size=64, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_experts=8,
    num_experts_per_tok=2, moe_intermediate_size=32, norm_topk_prob=True)
torch.manual_seed(0)
model = transformers.Qwen3MoeForCausalLM(config).eval()
tokens = torch.randint(0, 100, (1, 12))
with torch.no_grad():
    before = model(tokens).logits
print("replaced:", replace_moe_blocks(model))
with torch.no_grad():
    after = model(tokens).logits
print("max |logits difference| = %.3g (logits up to %.3g)" %
      ((after - before).abs().max().item(), before.abs().max().item()))
