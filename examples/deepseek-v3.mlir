// DeepSeek-V3 MoE layer (config.json: hidden_size 7168, n_routed_experts 256,
// num_experts_per_tok 8, n_group 8, topk_group 4, scoring_func sigmoid,
// topk_method noaux_tc, norm_topk_prob true, routed_scaling_factor 2.5,
// n_shared_experts 1, moe_intermediate_size 2048), on all 132 SMs of an
// H100/H200. Sharded over ranks, DeepSeek-V3 left 20 of them to
// communication: moe-compile --ep 8 --sm-partition=132:20 (an unsharded
// layer keeps none: they would stand idle).
func.func @deepseek_v3(
    %x: tensor<?x7168xbf16>,
    %router: tensor<256x7168xbf16>,
    %bias: tensor<256xf32>,
    %gate: tensor<256x2048x7168xbf16>,
    %up: tensor<256x2048x7168xbf16>,
    %down: tensor<256x7168x2048xbf16>,
    %shared_gate: tensor<2048x7168xbf16>,
    %shared_up: tensor<2048x7168xbf16>,
    %shared_down: tensor<7168x2048xbf16>
) -> tensor<?x7168xbf16> {
  %y = moe.layer %x router(%router, bias %bias)
         experts(%gate, %up, %down)
         shared(%shared_gate, %shared_up, %shared_down)
         {config = #moe.layer_config<hidden = 7168, experts = 256, top_k = 8,
                                     groups = 8, topk_groups = 4,
                                     scoring = sigmoid, group_score = sum_top2,
                                     score_bias = true, norm_topk_prob = true,
                                     routed_scale = 2.5, ffn = 2048,
                                     shared_experts = 1, shared_ffn = 2048,
                                     dtype = bf16>,
          partition = #moe.sm_partition<sms = 132, comm = 0>}
       : (tensor<?x7168xbf16>, tensor<256x7168xbf16>, tensor<256xf32>,
          tensor<256x2048x7168xbf16>, tensor<256x2048x7168xbf16>,
          tensor<256x7168x2048xbf16>,
          tensor<2048x7168xbf16>, tensor<2048x7168xbf16>, tensor<7168x2048xbf16>)
       -> tensor<?x7168xbf16>
  return %y : tensor<?x7168xbf16>
}
