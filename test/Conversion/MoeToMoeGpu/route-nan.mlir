// RUN: moe-opt %s --convert-moe-to-moegpu --convert-moegpu-kernels-to-gpu \
// RUN:   | FileCheck %s

// The sm_90a route kernel's selection is NaN-safe: scores are read with NaN
// as -inf (cmpf uno + select), lanes past the experts hold NaN, NaN
// (0x7FC00000), not -inf, marks chosen experts and masked groups, and a
// warp-wide argmax never takes a NaN candidate, so no expert repeats and no
// index leaves [0, E) whatever the scores are. (Executed on the PTX
// emulator by test/GPU/moe-run-cuda.test.)
// CHECK-LABEL: gpu.func @route(
// Selection scores: NaN becomes -inf, slots past the experts NaN.
// CHECK: %[[NAN1:.*]] = arith.cmpf uno, %[[S:.*]], %[[S]] : f32
// CHECK: %[[ORD:.*]] = arith.select %[[NAN1]], %{{.*}}, %[[S]] : f32
// CHECK: arith.select %{{.*}}, %[[ORD]], %{{.*}} : f32
// Group scores: the best two of each lane, then a butterfly over lanes.
// CHECK: gpu.shuffle xor %{{.*}}, %c16_i32
// CHECK: gpu.shuffle xor %{{.*}}, %c1_i32
// Experts outside the kept groups are masked with NaN.
// CHECK: arith.constant 0x7FC00000 : f32
// Top-k: between lanes, a larger value or an equal one of a lower expert
// wins, but a NaN candidate never does (cmpf uno, negated); the chosen
// expert is then marked NaN in its lane.
// CHECK: %[[OV:.*]], %{{.*}} = gpu.shuffle xor %[[MV:.*]], %c16_i32{{.*}} : f32
// CHECK: %[[OI:.*]], %{{.*}} = gpu.shuffle xor %[[MI:.*]], %c16_i32{{.*}} : i32
// CHECK: arith.cmpf ogt, %[[OV]], %[[MV]] : f32
// CHECK: arith.cmpi slt, %[[OI]], %[[MI]] : i32
// CHECK: %[[ONAN:.*]] = arith.cmpf uno, %[[OV]], %[[OV]] : f32
// CHECK: arith.xori %[[ONAN]], %true : i1
// Lane 0 writes the ids and counts each choice for the dispatch.
// CHECK: memref.store %{{.*}}, %{{.*}} : memref<?x4xi32>
// CHECK: memref.atomic_rmw addi
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
