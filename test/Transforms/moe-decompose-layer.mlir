// RUN: moe-opt %s --moe-decompose-layer --split-input-file | FileCheck %s
// RUN: moe-opt %s --moe-decompose-layer=alignment=64 --split-input-file | FileCheck %s --check-prefix=ALIGN64

// DeepSeek-style routing with a Qwen2-style gated shared expert: every
// primitive, wired to the right weights.
// CHECK-LABEL: func @full
// CHECK-SAME: (%[[X:[a-z0-9_]+]]: tensor<?x64xbf16>, %[[WR:[a-z0-9_]+]]: tensor<16x64xf32>, %[[B:[a-z0-9_]+]]: tensor<16xf32>, %[[WG:[a-z0-9_]+]]: tensor<16x32x64xbf16>, %[[WU:[a-z0-9_]+]]: tensor<16x32x64xbf16>, %[[WD:[a-z0-9_]+]]: tensor<16x64x32xbf16>, %[[SG:[a-z0-9_]+]]: tensor<16x64xbf16>, %[[SU:[a-z0-9_]+]]: tensor<16x64xbf16>, %[[SD:[a-z0-9_]+]]: tensor<64x16xbf16>, %[[G:[a-z0-9_]+]]: tensor<1x64xbf16>)
// CHECK-SAME: attributes {moe.sm_partition = #moe.sm_partition<sms = 132, comm = 20>}
// CHECK-NOT: moe.layer
// CHECK: %[[S:.*]] = moe.router %[[X]], %[[WR]] {scoring = #moe.scoring<sigmoid>} : tensor<?x64xbf16>, tensor<16x64xf32> -> tensor<?x16xf32>
// CHECK: %[[IDS:.*]], %[[W:.*]] = moe.topk %[[S]] bias(%[[B]]) {group_score = #moe.group_score<sum_top2>, groups = 4 : i64, k = 4 : i64, normalize, scale = 2.500000e+00 : f64, topk_groups = 2 : i64} : tensor<?x16xf32>, tensor<16xf32> -> tensor<?x4xi32>, tensor<?x4xf32>
// CHECK: %[[ROWS:.*]], %[[OFF:.*]], %[[MAP:.*]] = moe.dispatch %[[X]], %[[IDS]] {experts = 16 : i64} : tensor<?x64xbf16>, tensor<?x4xi32> -> tensor<?x64xbf16>, tensor<17xi32>, tensor<?x4xi32>
// CHECK: %[[GATE:.*]] = moe.grouped_matmul %[[ROWS]], %[[WG]], %[[OFF]] : {{.*}} -> tensor<?x32xbf16>
// CHECK: %[[UP:.*]] = moe.grouped_matmul %[[ROWS]], %[[WU]], %[[OFF]] : {{.*}} -> tensor<?x32xbf16>
// CHECK: %[[ACT:.*]] = moe.swiglu %[[GATE]], %[[UP]] : tensor<?x32xbf16>
// CHECK: %[[DOWN:.*]] = moe.grouped_matmul %[[ACT]], %[[WD]], %[[OFF]] : {{.*}} -> tensor<?x64xbf16>
// CHECK: %[[ROUTED:.*]] = moe.combine %[[DOWN]], %[[MAP]], %[[W]] : tensor<?x64xbf16>, tensor<?x4xi32>, tensor<?x4xf32> -> tensor<?x64xbf16>
// CHECK: %[[SHARED:.*]] = moe.shared_expert %[[X]], %[[SG]], %[[SU]], %[[SD]] gate(%[[G]])
// CHECK: %[[Y:.*]] = arith.addf %[[ROUTED]], %[[SHARED]] : tensor<?x64xbf16>
// CHECK: return %[[Y]]
// ALIGN64-LABEL: func @full
// ALIGN64: moe.dispatch {{.*}} {alignment = 64 : i64, experts = 16 : i64}
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

// -----

// Mixtral-style: softmax top-2 without groups, bias or shared expert; the
// default topk attributes are not printed and no addition is emitted.
// CHECK-LABEL: func @no_shared
// CHECK-NOT: attributes
// CHECK: %[[S:.*]] = moe.router {{.*}} {scoring = #moe.scoring<softmax>}
// CHECK: moe.topk %[[S]] {k = 2 : i64, normalize} : tensor<?x4xf32> -> tensor<?x2xi32>, tensor<?x2xf32>
// CHECK: moe.dispatch
// CHECK: moe.combine
// CHECK-NOT: moe.shared_expert
// CHECK-NOT: arith.addf
// CHECK: return
func.func @no_shared(%x: tensor<?x8xf32>, %wr: tensor<4x8xf32>,
                     %wg: tensor<4x16x8xf32>, %wu: tensor<4x16x8xf32>,
                     %wd: tensor<4x8x16xf32>) -> tensor<?x8xf32> {
  %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd)
         {config = #moe.layer_config<hidden = 8, experts = 4, top_k = 2,
             norm_topk_prob = true, ffn = 16, dtype = f32>}
       : (tensor<?x8xf32>, tensor<4x8xf32>, tensor<4x16x8xf32>,
          tensor<4x16x8xf32>, tensor<4x8x16xf32>) -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}

// -----

// A declared result more static than the input gets a tensor.cast.
// CHECK-LABEL: func @static_result
// CHECK: %[[C:.*]] = moe.combine {{.*}} -> tensor<?x8xf32>
// CHECK: %[[Y:.*]] = tensor.cast %[[C]] : tensor<?x8xf32> to tensor<3x8xf32>
// CHECK: return %[[Y]] : tensor<3x8xf32>
func.func @static_result(%x: tensor<?x8xf32>, %wr: tensor<4x8xf32>,
                         %wg: tensor<4x16x8xf32>, %wu: tensor<4x16x8xf32>,
                         %wd: tensor<4x8x16xf32>) -> tensor<3x8xf32> {
  %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd)
         {config = #moe.layer_config<hidden = 8, experts = 4, top_k = 1,
             ffn = 16, dtype = f32>}
       : (tensor<?x8xf32>, tensor<4x8xf32>, tensor<4x16x8xf32>,
          tensor<4x16x8xf32>, tensor<4x8x16xf32>) -> tensor<3x8xf32>
  return %y : tensor<3x8xf32>
}

// -----

// With a static token count the dispatched buffer is still typed with a
// dynamic row count, which verifies; its static bound is the verifier's
// business.
// CHECK-LABEL: func @static_tokens
// CHECK: moe.dispatch {{.*}} : tensor<5x8xf32>, tensor<5x2xi32> -> tensor<?x8xf32>, tensor<5xi32>, tensor<5x2xi32>
// CHECK: moe.combine {{.*}} -> tensor<5x8xf32>
func.func @static_tokens(%x: tensor<5x8xf32>, %wr: tensor<4x8xf32>,
                         %wg: tensor<4x16x8xf32>, %wu: tensor<4x16x8xf32>,
                         %wd: tensor<4x8x16xf32>) -> tensor<5x8xf32> {
  %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd)
         {config = #moe.layer_config<hidden = 8, experts = 4, top_k = 2,
             ffn = 16, dtype = f32>}
       : (tensor<5x8xf32>, tensor<4x8xf32>, tensor<4x16x8xf32>,
          tensor<4x16x8xf32>, tensor<4x8x16xf32>) -> tensor<5x8xf32>
  return %y : tensor<5x8xf32>
}

// -----

// Two layers in one function with the same partition; each is decomposed.
// CHECK-LABEL: func @two_layers
// CHECK-SAME: attributes {moe.sm_partition = #moe.sm_partition<sms = 132, comm = 20>}
// CHECK-COUNT-2: moe.combine
// CHECK-NOT: moe.layer
func.func @two_layers(%x: tensor<?x8xf32>, %wr: tensor<4x8xf32>,
                      %wg: tensor<4x16x8xf32>, %wu: tensor<4x16x8xf32>,
                      %wd: tensor<4x8x16xf32>) -> tensor<?x8xf32> {
  %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd)
         {config = #moe.layer_config<hidden = 8, experts = 4, top_k = 1,
             ffn = 16, dtype = f32>,
          partition = #moe.sm_partition<sms = 132, comm = 20>}
       : (tensor<?x8xf32>, tensor<4x8xf32>, tensor<4x16x8xf32>,
          tensor<4x16x8xf32>, tensor<4x8x16xf32>) -> tensor<?x8xf32>
  %z = moe.layer %y router(%wr) experts(%wg, %wu, %wd)
         {config = #moe.layer_config<hidden = 8, experts = 4, top_k = 1,
             ffn = 16, dtype = f32>,
          partition = #moe.sm_partition<sms = 132, comm = 20>}
       : (tensor<?x8xf32>, tensor<4x8xf32>, tensor<4x16x8xf32>,
          tensor<4x16x8xf32>, tensor<4x8x16xf32>) -> tensor<?x8xf32>
  return %z : tensor<?x8xf32>
}

// -----

// CHECK-LABEL: func @negative_no_layer
// CHECK-NEXT: %[[S:.*]] = moe.router
// CHECK-NEXT: return %[[S]]
func.func @negative_no_layer(%x: tensor<?x8xf32>, %w: tensor<4x8xf32>)
    -> tensor<?x4xf32> {
  %s = moe.router %x, %w {scoring = #moe.scoring<softmax>}
         : tensor<?x8xf32>, tensor<4x8xf32> -> tensor<?x4xf32>
  return %s : tensor<?x4xf32>
}

// -----

// scale_input (Llama 4): the routed weights go to the dispatch, which
// scales the rows; the combine sums them unweighted.
// CHECK-LABEL: func @scaled_input
// CHECK: %[[IDS:.*]], %[[W:.*]] = moe.topk
// CHECK: moe.dispatch %{{[a-z0-9_]+}}, %[[IDS]] scales %[[W]] {experts = 4 : i64}
// CHECK: moe.combine %{{[a-z0-9_]+}}, %{{[a-z0-9_]+}} : tensor<?x8xbf16>, tensor<?x1xi32> -> tensor<?x8xbf16>
func.func @scaled_input(%x: tensor<?x8xbf16>, %wr: tensor<4x8xbf16>,
                        %wg: tensor<4x4x8xbf16>, %wu: tensor<4x4x8xbf16>,
                        %wd: tensor<4x8x4xbf16>) -> tensor<?x8xbf16> {
  %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd)
      {config = #moe.layer_config<hidden = 8, experts = 4, top_k = 1, scoring = sigmoid, ffn = 4, scale_input = true, dtype = bf16>}
      : (tensor<?x8xbf16>, tensor<4x8xbf16>, tensor<4x4x8xbf16>, tensor<4x4x8xbf16>, tensor<4x8x4xbf16>) -> tensor<?x8xbf16>
  return %y : tensor<?x8xbf16>
}

// -----

// Sparsemixer (Phi-3.5-MoE): the router passes the logits on, the top-k
// takes the layer's router_jitter as its margin.
// CHECK-LABEL: func @sparsemixer
// CHECK: moe.router %{{[a-z0-9_]+}}, %{{[a-z0-9_]+}} {scoring = #moe.scoring<sparsemixer>}
// CHECK: moe.topk %{{[a-z0-9_]+}} {k = 2 : i64, sparsemixer = 2.000000e-02 : f64}
func.func @sparsemixer(%x: tensor<?x8xf32>, %wr: tensor<4x8xf32>,
                       %wg: tensor<4x4x8xf32>, %wu: tensor<4x4x8xf32>,
                       %wd: tensor<4x8x4xf32>) -> tensor<?x8xf32> {
  %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd)
      {config = #moe.layer_config<hidden = 8, experts = 4, top_k = 2, scoring = sparsemixer, router_jitter = 0.02, ffn = 4, dtype = f32>}
      : (tensor<?x8xf32>, tensor<4x8xf32>, tensor<4x4x8xf32>, tensor<4x4x8xf32>, tensor<4x8x4xf32>) -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}

// -----

// output_bias (JetMoE): broadcast over the tokens and added last.
// CHECK-LABEL: func @output_bias
// CHECK: %[[ROUTED:.*]] = moe.combine
// CHECK: %[[ROWS:.*]] = linalg.broadcast ins(%{{[a-z0-9_]+}} : tensor<8xf32>) outs(%{{[a-z0-9_]+}} : tensor<?x8xf32>) dimensions = [0]
// CHECK: arith.addf %[[ROUTED]], %[[ROWS]] : tensor<?x8xf32>
func.func @output_bias(%x: tensor<?x8xf32>, %wr: tensor<4x8xf32>,
                       %wg: tensor<4x4x8xf32>, %wu: tensor<4x4x8xf32>,
                       %wd: tensor<4x8x4xf32>, %b: tensor<8xf32>) -> tensor<?x8xf32> {
  %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd) output_bias(%b)
      {config = #moe.layer_config<hidden = 8, experts = 4, top_k = 2, norm_topk_prob = true, ffn = 4, output_bias = true, dtype = f32>}
      : (tensor<?x8xf32>, tensor<4x8xf32>, tensor<4x4x8xf32>, tensor<4x4x8xf32>, tensor<4x8x4xf32>, tensor<8xf32>) -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}
