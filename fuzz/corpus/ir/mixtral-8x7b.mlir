// Mixtral-8x7B MoE block (config.json: hidden_size 4096, num_local_experts 8,
// num_experts_per_tok 2, intermediate_size 14336): softmax over all experts,
// top-2, renormalized.
func.func @mixtral_8x7b(
    %x: tensor<?x4096xbf16>,
    %router: tensor<8x4096xbf16>,
    %gate: tensor<8x14336x4096xbf16>,
    %up: tensor<8x14336x4096xbf16>,
    %down: tensor<8x4096x14336xbf16>
) -> tensor<?x4096xbf16> {
  %y = moe.layer %x router(%router)
         experts(%gate, %up, %down)
         {config = #moe.layer_config<hidden = 4096, experts = 8, top_k = 2,
                                     groups = 1, topk_groups = 1,
                                     scoring = softmax, group_score = max,
                                     score_bias = false, norm_topk_prob = true,
                                     routed_scale = 1.0, ffn = 14336,
                                     shared_experts = 0, shared_ffn = 0,
                                     dtype = bf16>}
       : (tensor<?x4096xbf16>, tensor<8x4096xbf16>,
          tensor<8x14336x4096xbf16>, tensor<8x14336x4096xbf16>,
          tensor<8x4096x14336xbf16>)
       -> tensor<?x4096xbf16>
  return %y : tensor<?x4096xbf16>
}
