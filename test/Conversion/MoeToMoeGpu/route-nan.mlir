// RUN: moe-opt %s --convert-moe-to-moegpu | FileCheck %s

// The sm_90a route kernel's selection is NaN-safe: scores are read with NaN
// as -inf (cmpf uno + select), the argmax skips NaN (cmpf ord), and NaN
// (0x7FC00000), not -inf, marks chosen experts, kept groups and masked
// experts, so no expert repeats and no index leaves [0, E) whatever the
// scores are. (Executed on the host target by test/Tools/moe-run.test; the
// kernel itself runs only on a GPU until the PTX emulator lands.)
// CHECK-LABEL: gpu.func @route(
// Selection scores: NaN becomes -inf.
// CHECK: %[[NAN1:.*]] = arith.cmpf uno, %[[S:.*]], %[[S]] : f32
// CHECK: arith.select %[[NAN1]], %{{.*}}, %[[S]] : f32
// Group scores likewise.
// CHECK: arith.cmpf uno
// Kept groups are chosen by an argmax that skips NaN and are marked NaN.
// CHECK: arith.cmpf ord
// CHECK: arith.constant 0x7FC00000 : f32
// Experts outside the kept groups are masked with NaN.
// CHECK: arith.cmpf uno
// CHECK: arith.constant 0x7FC00000 : f32
// Top-k: the argmax skips NaN; each chosen expert is marked NaN.
// CHECK: arith.cmpf ord
// CHECK: memref.store %{{.*}}, %{{.*}} : memref<?x4xi32>
// CHECK: arith.constant 0x7FC00000 : f32
// CHECK-LABEL: gpu.func @
func.func @tiny(%x: tensor<?x64xbf16>,
                %router: tensor<16x64xbf16>,
                %bias: tensor<16xf32>,
                %gate: tensor<16x32x64xbf16>,
                %up: tensor<16x32x64xbf16>,
                %down: tensor<16x64x32xbf16>,
                %shared_gate: tensor<32x64xbf16>,
                %shared_up: tensor<32x64xbf16>,
                %shared_down: tensor<64x32xbf16>) -> tensor<?x64xbf16> {
  %y = moe.layer %x router(%router, bias %bias)
         experts(%gate, %up, %down)
         shared(%shared_gate, %shared_up, %shared_down)
         {config = #moe.layer_config<hidden = 64, experts = 16, top_k = 4,
                                     groups = 4, topk_groups = 2,
                                     scoring = sigmoid, group_score = sum_top2,
                                     score_bias = true, norm_topk_prob = true,
                                     routed_scale = 2.5, ffn = 32,
                                     shared_experts = 1, shared_ffn = 32,
                                     dtype = bf16>,
          partition = #moe.sm_partition<sms = 132, comm = 20>}
       : (tensor<?x64xbf16>, tensor<16x64xbf16>, tensor<16xf32>,
          tensor<16x32x64xbf16>, tensor<16x32x64xbf16>, tensor<16x64x32xbf16>,
          tensor<32x64xbf16>, tensor<32x64xbf16>, tensor<64x32xbf16>)
       -> tensor<?x64xbf16>
  return %y : tensor<?x64xbf16>
}
