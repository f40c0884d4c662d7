// DeepSeek-V2 MoE layer (config.json: hidden_size 5120, n_routed_experts 160,
// num_experts_per_tok 6, n_group 8, topk_group 3, scoring_func softmax,
// topk_method group_limited_greedy, norm_topk_prob false,
// routed_scaling_factor 16.0, n_shared_experts 2, moe_intermediate_size 1536).
// The two shared experts act as one dense FFN of 2 x 1536 = 3072.
func.func @deepseek_v2(
    %x: tensor<?x5120xbf16>,
    %router: tensor<160x5120xbf16>,
    %gate: tensor<160x1536x5120xbf16>,
    %up: tensor<160x1536x5120xbf16>,
    %down: tensor<160x5120x1536xbf16>,
    %shared_gate: tensor<3072x5120xbf16>,
    %shared_up: tensor<3072x5120xbf16>,
    %shared_down: tensor<5120x3072xbf16>
) -> tensor<?x5120xbf16> {
  %y = moe.layer %x router(%router)
         experts(%gate, %up, %down)
         shared(%shared_gate, %shared_up, %shared_down)
         {config = #moe.layer_config<hidden = 5120, experts = 160, top_k = 6,
                                     groups = 8, topk_groups = 3,
                                     scoring = softmax, group_score = max,
                                     score_bias = false, norm_topk_prob = false,
                                     routed_scale = 16.0, ffn = 1536,
                                     shared_experts = 2, shared_ffn = 1536,
                                     dtype = bf16>}
       : (tensor<?x5120xbf16>, tensor<160x5120xbf16>,
          tensor<160x1536x5120xbf16>, tensor<160x1536x5120xbf16>,
          tensor<160x5120x1536xbf16>,
          tensor<3072x5120xbf16>, tensor<3072x5120xbf16>, tensor<5120x3072xbf16>)
       -> tensor<?x5120xbf16>
  return %y : tensor<?x5120xbf16>
}
