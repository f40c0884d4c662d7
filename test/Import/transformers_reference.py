"""Checks the imported layer of each family against its transformers 5 MoE
module: the config.json is the one transformers writes for a small config
(save_pretrained), the weights are the module's own, renamed to the
published checkpoints' per-expert layout, and the output of moe-run on the
host target must equal the module's forward pass.

usage: transformers_reference.py BIN_DIR WORK_DIR
"""
import importlib
import os
import subprocess
import sys

import torch
import transformers
from safetensors.torch import load_file, save_file

BIN, WORK = sys.argv[1], sys.argv[2]
TOKENS = 37

# family: (config class, MoE module class, config fields)
SMALL_V3 = dict(hidden_size=64, n_routed_experts=16, num_experts_per_tok=4,
                n_group=4, topk_group=2, moe_intermediate_size=32,
                n_shared_experts=2, routed_scaling_factor=2.5,
                norm_topk_prob=True)
CASES = {
    "deepseek_v3": ("DeepseekV3Config", "DeepseekV3MoE", SMALL_V3),
    "deepseek_v32": ("DeepseekV32Config", "DeepseekV32MoE", SMALL_V3),
    "glm4_moe": ("Glm4MoeConfig", "Glm4MoeMoE",
                 dict(SMALL_V3, n_shared_experts=1, routed_scaling_factor=1.5)),
    # top-1: transformers 5 normalizes one weight to 1 as well.
    "glm4_moe-top1": ("Glm4MoeConfig", "Glm4MoeMoE",
                      dict(SMALL_V3, num_experts_per_tok=1, n_group=1,
                           topk_group=1)),
    "dots1": ("Dots1Config", "Dots1MoE",
              dict(SMALL_V3, norm_topk_prob=False, n_group=1, topk_group=1)),
    "deepseek_v2": ("DeepseekV2Config", "DeepseekV2Moe",
                    dict(hidden_size=64, n_routed_experts=16,
                         num_experts_per_tok=3, moe_intermediate_size=32,
                         n_shared_experts=1, routed_scaling_factor=2.0,
                         topk_method="group_limited_greedy", n_group=4,
                         topk_group=2)),
    "deepseek_v2-greedy": ("DeepseekV2Config", "DeepseekV2Moe",
                           dict(hidden_size=64, n_routed_experts=16,
                                num_experts_per_tok=3,
                                moe_intermediate_size=32, n_shared_experts=1,
                                norm_topk_prob=True)),
    "mixtral": ("MixtralConfig", "MixtralSparseMoeBlock",
                dict(hidden_size=64, num_local_experts=8,
                     num_experts_per_tok=2, intermediate_size=48)),
    "minimax": ("MiniMaxConfig", "MiniMaxSparseMoeBlock",
                dict(hidden_size=64, num_local_experts=8,
                     num_experts_per_tok=3, intermediate_size=40)),
    "minimax_m2": ("MiniMaxM2Config", "MiniMaxM2SparseMoeBlock",
                   dict(hidden_size=64, num_local_experts=16,
                        num_experts_per_tok=4, intermediate_size=32)),
    "olmoe": ("OlmoeConfig", "OlmoeSparseMoeBlock",
              dict(hidden_size=64, num_experts=16, num_experts_per_tok=4,
                   intermediate_size=32)),
    "qwen2_moe": ("Qwen2MoeConfig", "Qwen2MoeSparseMoeBlock",
                  dict(hidden_size=64, num_experts=8, num_experts_per_tok=2,
                       moe_intermediate_size=32,
                       shared_expert_intermediate_size=48,
                       norm_topk_prob=False)),
    "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeSparseMoeBlock",
                  dict(hidden_size=64, num_experts=8, num_experts_per_tok=2,
                       moe_intermediate_size=32, norm_topk_prob=True)),
}


def hub_names(state, mixtral):
    """The module's fused expert tensors as published checkpoints name them
    (gate_up_proj [E, 2F, H]: gate rows first, then up)."""
    out = {}
    for name, t in state.items():
        if name == "experts.gate_up_proj":
            f = t.shape[1] // 2
            for e in range(t.shape[0]):
                g, u = ("w1", "w3") if mixtral else ("gate_proj", "up_proj")
                out["experts.%d.%s.weight" % (e, g)] = t[e, :f]
                out["experts.%d.%s.weight" % (e, u)] = t[e, f:]
        elif name == "experts.down_proj":
            for e in range(t.shape[0]):
                d = "w2" if mixtral else "down_proj"
                out["experts.%d.%s.weight" % (e, d)] = t[e]
        else:
            out[name] = t
    return {k: v.contiguous().float() for k, v in out.items()}


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        sys.exit("%s failed:\n%s%s" % (" ".join(cmd), r.stdout, r.stderr))


failures = 0
for case, (config_cls, module_cls, fields) in CASES.items():
    family = case.split("-")[0]
    torch.manual_seed(len(case))
    config = getattr(transformers, config_cls)(**fields)
    directory = os.path.join(WORK, case)
    config.save_pretrained(directory)
    modeling = importlib.import_module(
        "transformers.models.%s.modeling_%s" % (family, family))
    module = getattr(modeling, module_cls)(config).float().eval()
    with torch.no_grad():
        for name, p in list(module.named_parameters()) + list(
                module.named_buffers()):
            # Spread scores so no two experts tie; a visible score bias.
            p.copy_((torch.rand_like(p) * 2 - 1) *
                    (0.1 if "bias" in name else 0.3))
    x = torch.rand(TOKENS, config.hidden_size) * 2 - 1
    with torch.no_grad():
        y = module(x[None])
    if isinstance(y, tuple):
        y = y[0]
    y = y.reshape(TOKENS, -1)

    weights = os.path.join(directory, "weights.safetensors")
    save_file(hub_names(module.state_dict(), family in ("mixtral", "minimax",
                                                        "minimax_m2")),
              weights)
    save_file({"x": x.contiguous()}, os.path.join(directory, "x.safetensors"))
    bundle = os.path.join(directory, "layer.moeb")
    run([BIN + "/moe-compile", "--hf-config",
         os.path.join(directory, "config.json"), "--no-cache", "-o", bundle])
    out = os.path.join(directory, "y.safetensors")
    run([BIN + "/moe-run", bundle, "--weights", weights, "--inputs",
         os.path.join(directory, "x.safetensors"), "--outputs", out])
    ours = load_file(out)["y"].float()
    err = ((ours - y).abs().max() / y.abs().max()).item()
    ok = err < 1e-5
    failures += not ok
    print("%-20s max rel. diff %.1e %s" % (case, err, "ok" if ok else "FAIL"))
sys.exit(1 if failures else 0)
