// The tiny layer with its input added to its output: a function that
// computes more than its layer (moe-compile --dtype does not rebuild it).
func.func @tiny(%x: tensor<?x64xf32>,
                %router: tensor<16x64xf32>,
                %bias: tensor<16xf32>,
                %gate: tensor<16x32x64xf32>,
                %up: tensor<16x32x64xf32>,
                %down: tensor<16x64x32xf32>,
                %shared_gate: tensor<32x64xf32>,
                %shared_up: tensor<32x64xf32>,
                %shared_down: tensor<64x32xf32>) -> tensor<?x64xf32> {
  %y = moe.layer %x router(%router, bias %bias)
         experts(%gate, %up, %down)
         shared(%shared_gate, %shared_up, %shared_down)
         {config = #moe.layer_config<hidden = 64, experts = 16, top_k = 4,
                                     groups = 4, topk_groups = 2,
                                     scoring = sigmoid, group_score = sum_top2,
                                     score_bias = true, norm_topk_prob = true,
                                     routed_scale = 2.5, ffn = 32,
                                     shared_experts = 1, shared_ffn = 32,
                                     dtype = f32>,
          partition = #moe.sm_partition<sms = 132, comm = 0>}
       : (tensor<?x64xf32>, tensor<16x64xf32>, tensor<16xf32>,
          tensor<16x32x64xf32>, tensor<16x32x64xf32>, tensor<16x64x32xf32>,
          tensor<32x64xf32>, tensor<32x64xf32>, tensor<64x32xf32>)
       -> tensor<?x64xf32>
  %z = arith.addf %y, %x : tensor<?x64xf32>
  return %z : tensor<?x64xf32>
}
