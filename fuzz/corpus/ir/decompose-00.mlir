func.func @full(%x: tensor<?x64xbf16>, %wr: tensor<16x64xf32>,
                %b: tensor<16xf32>, %wg: tensor<16x32x64xbf16>,
                %wu: tensor<16x32x64xbf16>, %wd: tensor<16x64x32xbf16>,
                %sg: tensor<16x64xbf16>, %su: tensor<16x64xbf16>,
                %sd: tensor<64x16xbf16>, %g: tensor<1x64xbf16>)
    -> tensor<?x64xbf16> {
  %y = moe.layer %x router(%wr, bias %b) experts(%wg, %wu, %wd)
         shared(%sg, %su, %sd) shared_gate(%g)
         {config = #moe.layer_config<hidden = 64, experts = 16, top_k = 4,
             groups = 4, topk_groups = 2, scoring = sigmoid,
             group_score = sum_top2, score_bias = true, norm_topk_prob = true,
             routed_scale = 2.5, ffn = 32, shared_experts = 2, shared_ffn = 8,
             shared_gate = true, dtype = bf16>,
          partition = #moe.sm_partition<sms = 132, comm = 20>}
       : (tensor<?x64xbf16>, tensor<16x64xf32>, tensor<16xf32>,
          tensor<16x32x64xbf16>, tensor<16x32x64xbf16>, tensor<16x64x32xbf16>,
          tensor<16x64xbf16>, tensor<16x64xbf16>, tensor<64x16xbf16>,
          tensor<1x64xbf16>) -> tensor<?x64xbf16>
  return %y : tensor<?x64xbf16>
}
