"""Checks the imported layer of each family against transformers 5 itself:
a small model of the family (ForCausalLM, three layers) is saved by
transformers' save_pretrained as a sharded checkpoint (config.json,
model.safetensors.index.json and its shards, in the published per-expert
layout transformers writes); moe-compile reads that config.json, moe-run
reads the index with --layer 2, and its output must equal the MoE block of
layer 2 run by transformers on the same tokens.

usage: transformers_reference.py BIN_DIR WORK_DIR [CASE...]
"""
import os
import subprocess
import sys

import torch
import transformers
from safetensors.torch import load_file, save_file

BIN, WORK, ONLY = sys.argv[1], sys.argv[2], sys.argv[3:]
TOKENS = 37

# The attention and dense parts small (they are not compared); MLA and
# the DeepSeek-V3.2 indexer need their own sizes.
MODEL = dict(num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
             head_dim=16, intermediate_size=64, vocab_size=100,
             q_lora_rank=16, kv_lora_rank=16, qk_rope_head_dim=8,
             qk_nope_head_dim=8, v_head_dim=16, index_head_dim=16,
             index_n_heads=2, index_topk=4, bos_token_id=None,
             eos_token_id=None, pad_token_id=None)
LAYER = 2
SMALL_V3 = dict(hidden_size=64, n_routed_experts=16, num_experts_per_tok=4,
                n_group=4, topk_group=2, moe_intermediate_size=32,
                n_shared_experts=2, routed_scaling_factor=2.5,
                norm_topk_prob=True, first_k_dense_replace=1)
SMALL_PHI = dict(hidden_size=64, num_local_experts=8, num_experts_per_tok=2,
                 intermediate_size=40)
# case: (config class, causal-LM class, config fields)
CASES = {
    "deepseek_v3": ("DeepseekV3Config", "DeepseekV3ForCausalLM", SMALL_V3),
    "deepseek_v32": ("DeepseekV32Config", "DeepseekV32ForCausalLM", SMALL_V3),
    "glm4_moe": ("Glm4MoeConfig", "Glm4MoeForCausalLM",
                 dict(SMALL_V3, n_shared_experts=1, routed_scaling_factor=1.5)),
    "glm4_moe_lite": ("Glm4MoeLiteConfig", "Glm4MoeLiteForCausalLM",
                      dict(SMALL_V3, n_group=2, topk_group=1,
                           num_experts_per_tok=3)),
    # top-1: transformers 5 normalizes one weight to 1 as well.
    "glm4_moe-top1": ("Glm4MoeConfig", "Glm4MoeForCausalLM",
                      dict(SMALL_V3, num_experts_per_tok=1, n_group=1,
                           topk_group=1)),
    "dots1": ("Dots1Config", "Dots1ForCausalLM",
              dict(SMALL_V3, norm_topk_prob=False, n_group=1, topk_group=1)),
    "deepseek_v2": ("DeepseekV2Config", "DeepseekV2ForCausalLM",
                    dict(hidden_size=64, n_routed_experts=16,
                         num_experts_per_tok=3, moe_intermediate_size=32,
                         n_shared_experts=1, routed_scaling_factor=2.0,
                         topk_method="group_limited_greedy", n_group=4,
                         topk_group=2, first_k_dense_replace=1)),
    "deepseek_v2-greedy": ("DeepseekV2Config", "DeepseekV2ForCausalLM",
                           dict(hidden_size=64, n_routed_experts=16,
                                num_experts_per_tok=3,
                                moe_intermediate_size=32, n_shared_experts=1,
                                norm_topk_prob=True)),
    "mixtral": ("MixtralConfig", "MixtralForCausalLM",
                dict(hidden_size=64, num_local_experts=8,
                     num_experts_per_tok=2, intermediate_size=48)),
    "minimax": ("MiniMaxConfig", "MiniMaxForCausalLM",
                dict(hidden_size=64, num_local_experts=8,
                     num_experts_per_tok=3, intermediate_size=40)),
    "minimax_m2": ("MiniMaxM2Config", "MiniMaxM2ForCausalLM",
                   dict(hidden_size=64, num_local_experts=16,
                        num_experts_per_tok=4, intermediate_size=32)),
    # The checkpoint's input_linear.weight holds every expert's gate and up
    # projections ([E, 2F, H]); output_linear.weight the down projections.
    "granitemoe": ("GraniteMoeConfig", "GraniteMoeForCausalLM",
                   dict(hidden_size=64, num_local_experts=8,
                        num_experts_per_tok=3, intermediate_size=40)),
    # Softmax top-k renormalized and a shared MLP, both intermediate_size
    # wide; the router is gate.wg.
    "hunyuan_v1_moe": ("HunYuanMoEV1Config", "HunYuanMoEV1ForCausalLM",
                       dict(hidden_size=64, num_experts=8, moe_topk=3,
                            intermediate_size=40)),
    # The sigmoids of the top-2 logits scale the token before its experts;
    # gate_up_proj [E, H, 2F] and down_proj [E, F, H] hold every expert as
    # (in, out) matrices; MoE on layers 1 and 3 of 4.
    "llama4_text": ("Llama4TextConfig", "Llama4ForCausalLM",
                    dict(hidden_size=64, num_local_experts=8,
                         num_experts_per_tok=2, intermediate_size=40,
                         intermediate_size_mlp=48, num_hidden_layers=4,
                         interleave_moe_layer_step=2)),
    # Sparsemixer (inference form): two picks, each weighted by the softmax
    # of the logits within its margin (router_jitter_noise: the default
    # 0.01, and 0.3 so that several logits stay in).
    "phimoe": ("PhimoeConfig", "PhimoeForCausalLM", SMALL_PHI),
    "phimoe-wide": ("PhimoeConfig", "PhimoeForCausalLM",
                    dict(SMALL_PHI, router_jitter_noise=0.3)),
    # The MoE fields in ffn_config; w1, v1 and w2 of [E * F, H].
    "dbrx": ("DbrxConfig", "DbrxForCausalLM",
             dict(d_model=64, n_layers=3, n_heads=4,
                  attn_config=dict(kv_n_heads=2, rope_theta=10000.0),
                  ffn_config=dict(moe_num_experts=8, moe_top_k=3,
                                  ffn_hidden_size=40))),
    # GraniteMoE's tensors plus the block's output bias.
    "jetmoe": ("JetMoeConfig", "JetMoeForCausalLM",
               dict(hidden_size=64, num_local_experts=8,
                    num_experts_per_tok=2, intermediate_size=40,
                    kv_channels=16)),
    # A router bias, softmax over the top-k logits, expert biases, gate and
    # up in alternate columns of gate_up_proj [E, H, 2F]; a low
    # swiglu_limit so the clamp cuts many values, and a swiglu_alpha of its
    # own (transformers 5 reads both).
    "gpt_oss": ("GptOssConfig", "GptOssForCausalLM",
                dict(hidden_size=64, num_local_experts=8,
                     num_experts_per_tok=3, intermediate_size=40,
                     swiglu_limit=0.4, swiglu_alpha=1.5)),
    "olmoe": ("OlmoeConfig", "OlmoeForCausalLM",
              dict(hidden_size=64, num_experts=16, num_experts_per_tok=4,
                   intermediate_size=32)),
    "ernie4_5_moe": ("Ernie4_5_MoeConfig", "Ernie4_5_MoeForCausalLM",
                     dict(hidden_size=64, num_experts=16,
                          num_experts_per_tok=4, moe_intermediate_size=32,
                          moe_num_shared_experts=2, moe_layer_start_index=1)),
    "qwen2_moe": ("Qwen2MoeConfig", "Qwen2MoeForCausalLM",
                  dict(hidden_size=64, num_experts=8, num_experts_per_tok=2,
                       moe_intermediate_size=32,
                       shared_expert_intermediate_size=48,
                       norm_topk_prob=False)),
    # Every other layer sparse: layers 1 and 3 of 4 (decoder_sparse_step).
    "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM",
                  dict(hidden_size=64, num_experts=8, num_experts_per_tok=2,
                       moe_intermediate_size=32, norm_topk_prob=True,
                       num_hidden_layers=4, decoder_sparse_step=2)),
}


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        sys.exit("%s failed:\n%s%s" % (" ".join(cmd), r.stdout, r.stderr))


failures = 0
for case, (config_cls, model_cls, fields) in CASES.items():
    if ONLY and case not in ONLY:
        continue
    torch.manual_seed(len(case))
    config = getattr(transformers, config_cls)(**dict(MODEL, **fields))
    model = getattr(transformers, model_cls)(config).float().eval()
    layer = LAYER + (1 if case in ("qwen3_moe", "llama4_text") else 0)
    decoders = (model.transformer.blocks if case == "dbrx"
                else model.model.layers)
    decoder = decoders[layer]
    block = (getattr(decoder, "block_sparse_moe", None) or
             getattr(decoder, "feed_forward", None) or
             getattr(decoder, "ffn", None) or decoder.mlp)
    with torch.no_grad():
        for name, p in list(block.named_parameters()) + list(
                block.named_buffers()):
            # Spread the scores so no two experts tie; a visible score bias.
            p.copy_((torch.rand_like(p) * 2 - 1) *
                    (0.1 if "bias" in name else 0.3))
    directory = os.path.join(WORK, case)
    model.save_pretrained(directory, max_shard_size="100KB")
    index = os.path.join(directory, "model.safetensors.index.json")
    if not os.path.exists(index):
        sys.exit("%s: save_pretrained wrote no sharded checkpoint" % case)
    x = torch.rand(TOKENS, config.hidden_size) * 2 - 1
    with torch.no_grad():
        y = block(x[None])
    if isinstance(y, tuple):
        y = y[0]
    y = y.reshape(TOKENS, -1)

    save_file({"x": x.contiguous()}, os.path.join(directory, "x.safetensors"))
    bundle = os.path.join(directory, "layer.moeb")
    run([BIN + "/moe-compile", "--hf-config",
         os.path.join(directory, "config.json"), "--no-cache", "-o", bundle])
    out = os.path.join(directory, "y.safetensors")
    run([BIN + "/moe-run", bundle, "--weights", index, "--layer", str(layer),
         "--inputs", os.path.join(directory, "x.safetensors"),
         "--outputs", out])
    ours = load_file(out)["y"].float()
    err = ((ours - y).abs().max() / y.abs().max()).item()
    ok = err < 1e-5
    failures += not ok
    print("%-20s layer %d max rel. diff %.1e %s" %
          (case, layer, err, "ok" if ok else "FAIL"))

# Layer 2 of the Qwen3-MoE model is dense (decoder_sparse_step 2): moe-run
# says so from the config transformers wrote.
if ONLY:
    sys.exit(1 if failures else 0)
directory = os.path.join(WORK, "qwen3_moe")
r = subprocess.run([BIN + "/moe-run", os.path.join(directory, "layer.moeb"),
                    "--weights",
                    os.path.join(directory, "model.safetensors.index.json"),
                    "--layer", "2", "--tokens", "2"],
                   capture_output=True, text=True)
print("qwen3_moe layer 2: exit %d: %s" % (r.returncode, r.stderr.strip()))
sys.exit(1 if failures else 0)
