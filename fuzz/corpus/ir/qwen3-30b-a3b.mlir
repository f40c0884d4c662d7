// Qwen3-30B-A3B MoE block (config.json: hidden_size 2048, num_experts 128,
// num_experts_per_tok 8, moe_intermediate_size 768, norm_topk_prob true):
// softmax, top-8, renormalized, no shared expert.
func.func @qwen3_30b_a3b(
    %x: tensor<?x2048xbf16>,
    %router: tensor<128x2048xbf16>,
    %gate: tensor<128x768x2048xbf16>,
    %up: tensor<128x768x2048xbf16>,
    %down: tensor<128x2048x768xbf16>
) -> tensor<?x2048xbf16> {
  %y = moe.layer %x router(%router)
         experts(%gate, %up, %down)
         {config = #moe.layer_config<hidden = 2048, experts = 128, top_k = 8,
                                     groups = 1, topk_groups = 1,
                                     scoring = softmax, group_score = max,
                                     score_bias = false, norm_topk_prob = true,
                                     routed_scale = 1.0, ffn = 768,
                                     shared_experts = 0, shared_ffn = 0,
                                     dtype = bf16>}
       : (tensor<?x2048xbf16>, tensor<128x2048xbf16>,
          tensor<128x768x2048xbf16>, tensor<128x768x2048xbf16>,
          tensor<128x2048x768xbf16>)
       -> tensor<?x2048xbf16>
  return %y : tensor<?x2048xbf16>
}
