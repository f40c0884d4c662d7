// RUN: moe-opt %s | moe-opt | FileCheck %s
// RUN: moe-opt %s --mlir-print-op-generic | moe-opt | FileCheck %s

// CHECK-LABEL: func @layer_full
// CHECK: moe.layer %{{[a-z0-9_]+}} router(%{{[a-z0-9_]+}}, bias %{{[a-z0-9_]+}}) experts(%{{[a-z0-9_]+}}, %{{[a-z0-9_]+}}, %{{[a-z0-9_]+}}) shared(%{{[a-z0-9_]+}}, %{{[a-z0-9_]+}}, %{{[a-z0-9_]+}}) shared_gate(%{{[a-z0-9_]+}})
// CHECK-SAME: config = #moe.layer_config<hidden = 64, experts = 16, top_k = 4, groups = 4, topk_groups = 2, scoring = sigmoid, group_score = sum_top2, score_bias = true, norm_topk_prob = true, routed_scale = 2.5, ffn = 32, shared_experts = 2, shared_ffn = 8, shared_gate = true, dtype = bf16>
// CHECK-SAME: partition = #moe.sm_partition<sms = 132, comm = 20>
// CHECK-SAME: -> tensor<?x64xbf16>
func.func @layer_full(%x: tensor<?x64xbf16>, %wr: tensor<16x64xf32>,
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

// Parameters at their defaults are not printed; the fields may come in any
// order; an integer routed_scale prints as a float literal.
// CHECK-LABEL: func @layer_minimal
// CHECK: moe.layer %{{[a-z0-9_]+}} router(%{{[a-z0-9_]+}}) experts(%{{[a-z0-9_]+}}, %{{[a-z0-9_]+}}, %{{[a-z0-9_]+}}) {config = #moe.layer_config<hidden = 8, experts = 4, top_k = 1, routed_scale = 16.0, ffn = 4, dtype = f32>}
// CHECK-SAME: -> tensor<3x8xf32>
func.func @layer_minimal(%x: tensor<3x8xf32>, %wr: tensor<4x8xf32>,
                         %wg: tensor<4x4x8xf32>, %wu: tensor<4x4x8xf32>,
                         %wd: tensor<4x8x4xf32>) -> tensor<3x8xf32> {
  %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd)
         {config = #moe.layer_config<dtype = f32, ffn = 4, top_k = 1,
             experts = 4, hidden = 8, routed_scale = 16, groups = 1,
             score_bias = false>}
       : (tensor<3x8xf32>, tensor<4x8xf32>, tensor<4x4x8xf32>,
          tensor<4x4x8xf32>, tensor<4x8x4xf32>) -> tensor<3x8xf32>
  return %y : tensor<3x8xf32>
}

// CHECK-LABEL: func @primitives
func.func @primitives(%x: tensor<?x64xf16>, %wr: tensor<8x64xf16>,
                      %b: tensor<8xf32>, %wg: tensor<8x32x64xf16>,
                      %wd: tensor<8x64x32xf16>) -> tensor<?x64xf16> {
  // CHECK: %[[S:.*]] = moe.router %{{[a-z0-9_]+}}, %{{[a-z0-9_]+}} {scoring = #moe.scoring<softmax>} : tensor<?x64xf16>, tensor<8x64xf16> -> tensor<?x8xf32>
  %s = moe.router %x, %wr {scoring = #moe.scoring<softmax>}
         : tensor<?x64xf16>, tensor<8x64xf16> -> tensor<?x8xf32>
  // CHECK: %[[IDS:.*]], %[[W:.*]] = moe.topk %[[S]] bias(%{{[a-z0-9_]+}}) {group_score = #moe.group_score<sum_top2>, groups = 4 : i64, k = 2 : i64, normalize, scale = 2.500000e+00 : f64, topk_groups = 2 : i64} : tensor<?x8xf32>, tensor<8xf32> -> tensor<?x2xi32>, tensor<?x2xf32>
  %ids, %w = moe.topk %s bias(%b) {k = 2, groups = 4, topk_groups = 2,
               group_score = #moe.group_score<sum_top2>, normalize,
               scale = 2.5 : f64}
             : tensor<?x8xf32>, tensor<8xf32> -> tensor<?x2xi32>, tensor<?x2xf32>
  // CHECK: %[[ROWS:.*]], %[[OFF:.*]], %[[MAP:.*]] = moe.dispatch %{{[a-z0-9_]+}}, %[[IDS]] {alignment = 64 : i64, experts = 8 : i64} : tensor<?x64xf16>, tensor<?x2xi32> -> tensor<?x64xf16>, tensor<9xi32>, tensor<?x2xi32>
  %rows, %off, %map = moe.dispatch %x, %ids {experts = 8, alignment = 64}
      : tensor<?x64xf16>, tensor<?x2xi32>
      -> tensor<?x64xf16>, tensor<9xi32>, tensor<?x2xi32>
  // CHECK: %[[H:.*]] = moe.grouped_matmul %[[ROWS]], %{{[a-z0-9_]+}}, %[[OFF]] : tensor<?x64xf16>, tensor<8x32x64xf16>, tensor<9xi32> -> tensor<?x32xf16>
  %h = moe.grouped_matmul %rows, %wg, %off
         : tensor<?x64xf16>, tensor<8x32x64xf16>, tensor<9xi32>
         -> tensor<?x32xf16>
  // CHECK: %[[A:.*]] = moe.swiglu %[[H]], %[[H]] : tensor<?x32xf16>
  %a = moe.swiglu %h, %h : tensor<?x32xf16>
  // CHECK: %[[D:.*]] = moe.grouped_matmul %[[A]]
  %d = moe.grouped_matmul %a, %wd, %off
         : tensor<?x32xf16>, tensor<8x64x32xf16>, tensor<9xi32>
         -> tensor<?x64xf16>
  // CHECK: %[[Y:.*]] = moe.combine %[[D]], %[[MAP]], %[[W]] : tensor<?x64xf16>, tensor<?x2xi32>, tensor<?x2xf32> -> tensor<?x64xf16>
  %y = moe.combine %d, %map, %w
         : tensor<?x64xf16>, tensor<?x2xi32>, tensor<?x2xf32> -> tensor<?x64xf16>
  // CHECK: return %[[Y]]
  return %y : tensor<?x64xf16>
}

// A static token count gives the dispatched buffer its static upper bound:
// 5 tokens x 2 slots over 4 experts in blocks of 8 is at most 4 blocks.
// CHECK-LABEL: func @dispatch_static
// CHECK: moe.dispatch {{.*}} -> tensor<32x16xf32>, tensor<5xi32>, tensor<5x2xi32>
func.func @dispatch_static(%x: tensor<5x16xf32>, %ids: tensor<5x2xi32>)
    -> tensor<32x16xf32> {
  %rows, %off, %map = moe.dispatch %x, %ids {experts = 4, alignment = 8}
      : tensor<5x16xf32>, tensor<5x2xi32>
      -> tensor<32x16xf32>, tensor<5xi32>, tensor<5x2xi32>
  return %rows : tensor<32x16xf32>
}

// CHECK-LABEL: func @shared_expert
// CHECK: moe.shared_expert %{{[a-z0-9_]+}}, %{{[a-z0-9_]+}}, %{{[a-z0-9_]+}}, %{{[a-z0-9_]+}} : (tensor<?x64xf32>, tensor<48x64xf32>, tensor<48x64xf32>, tensor<64x48xf32>) -> tensor<?x64xf32>
// CHECK: moe.shared_expert %{{[a-z0-9_]+}}, %{{[a-z0-9_]+}}, %{{[a-z0-9_]+}}, %{{[a-z0-9_]+}} gate(%{{[a-z0-9_]+}}) : (tensor<?x64xf32>, tensor<48x64xf32>, tensor<48x64xf32>, tensor<64x48xf32>, tensor<1x64xf32>) -> tensor<?x64xf32>
func.func @shared_expert(%x: tensor<?x64xf32>, %g: tensor<48x64xf32>,
                         %u: tensor<48x64xf32>, %d: tensor<64x48xf32>,
                         %sg: tensor<1x64xf32>) -> tensor<?x64xf32> {
  %a = moe.shared_expert %x, %g, %u, %d
         : (tensor<?x64xf32>, tensor<48x64xf32>, tensor<48x64xf32>,
            tensor<64x48xf32>) -> tensor<?x64xf32>
  %b = moe.shared_expert %x, %g, %u, %d gate(%sg)
         : (tensor<?x64xf32>, tensor<48x64xf32>, tensor<48x64xf32>,
            tensor<64x48xf32>, tensor<1x64xf32>) -> tensor<?x64xf32>
  %c = arith.addf %a, %b : tensor<?x64xf32>
  return %c : tensor<?x64xf32>
}

// CHECK-LABEL: func @all_to_all
// CHECK: moe.all_to_all %{{[a-z0-9_]+}}, %{{[a-z0-9_]+}} {ep_size = 4 : i64, kind = #moe.all_to_all_kind<dispatch>} : tensor<?x64xbf16>, tensor<17xi32> -> tensor<?x64xbf16>, tensor<17xi32>
// CHECK: moe.all_to_all %{{[a-z0-9_]+}}, %{{[a-z0-9_]+}} {ep_size = 4 : i64, kind = #moe.all_to_all_kind<combine>}
func.func @all_to_all(%rows: tensor<?x64xbf16>, %off: tensor<17xi32>)
    -> tensor<?x64xbf16> {
  %recv, %recv_off = moe.all_to_all %rows, %off
      {ep_size = 4, kind = #moe.all_to_all_kind<dispatch>}
      : tensor<?x64xbf16>, tensor<17xi32> -> tensor<?x64xbf16>, tensor<17xi32>
  %back, %back_off = moe.all_to_all %recv, %recv_off
      {ep_size = 4, kind = #moe.all_to_all_kind<combine>}
      : tensor<?x64xbf16>, tensor<17xi32> -> tensor<?x64xbf16>, tensor<17xi32>
  return %back : tensor<?x64xbf16>
}

// The partition can also sit on a function.
// CHECK-LABEL: func @partitioned
// CHECK-SAME: attributes {moe.sm_partition = #moe.sm_partition<sms = 78, comm = 0>}
func.func @partitioned() attributes {
    moe.sm_partition = #moe.sm_partition<sms = 78, comm = 0>} {
  return
}

// The gradients of the expert computation.
// CHECK-LABEL: func @gradients
// CHECK: %{{.*}}, %{{.*}} = moe.swiglu_grad %{{.*}}, %{{.*}}, %{{.*}} : tensor<?x32xbf16>
// CHECK: moe.grouped_matmul_dx %{{.*}}, %{{.*}}, %{{.*}} : tensor<?x32xbf16>, tensor<8x32x64xbf16>, tensor<9xi32> -> tensor<?x64xbf16>
// CHECK: moe.grouped_matmul_dw %{{.*}}, %{{.*}}, %{{.*}} : tensor<?x64xbf16>, tensor<?x32xbf16>, tensor<9xi32> -> tensor<8x32x64xf32>
func.func @gradients(%g: tensor<?x32xbf16>, %u: tensor<?x32xbf16>,
                     %dy: tensor<?x32xbf16>, %w: tensor<8x32x64xbf16>,
                     %off: tensor<9xi32>, %x: tensor<?x64xbf16>) {
  %dg, %du = moe.swiglu_grad %g, %u, %dy : tensor<?x32xbf16>
  %dx = moe.grouped_matmul_dx %dy, %w, %off
      : tensor<?x32xbf16>, tensor<8x32x64xbf16>, tensor<9xi32> -> tensor<?x64xbf16>
  %dw = moe.grouped_matmul_dw %x, %dy, %off
      : tensor<?x64xbf16>, tensor<?x32xbf16>, tensor<9xi32> -> tensor<8x32x64xf32>
  return
}

// CHECK-LABEL: func @routing_gradients
// CHECK: moe.combine_grad %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} : tensor<?x64xf32>, tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32> -> tensor<?x64xf32>, tensor<?x2xf32>
// CHECK: moe.dispatch_grad %{{.*}}, %{{.*}} : tensor<?x64xf32>, tensor<?x2xi32> -> tensor<?x64xf32>
func.func @routing_gradients(%dy: tensor<?x64xf32>, %rows: tensor<?x64xf32>,
                             %map: tensor<?x2xi32>, %w: tensor<?x2xf32>) {
  %drows, %dw = moe.combine_grad %dy, %rows, %map, %w
      : tensor<?x64xf32>, tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>
      -> tensor<?x64xf32>, tensor<?x2xf32>
  %dx = moe.dispatch_grad %drows, %map
      : tensor<?x64xf32>, tensor<?x2xi32> -> tensor<?x64xf32>
  return
}

// CHECK-LABEL: func @router_gradients
// CHECK: moe.topk_grad %{{.*}}, %{{.*}}, %{{.*}} {normalize, scale = 2.500000e+00 : f64} : tensor<?x8xf32>, tensor<?x2xi32>, tensor<?x2xf32> -> tensor<?x8xf32>
// CHECK: moe.router_grad %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {scoring = #moe.scoring<sigmoid>} : tensor<?x64xbf16>, tensor<8x64xbf16>, tensor<?x8xf32>, tensor<?x8xf32> -> tensor<?x64xbf16>, tensor<8x64xf32>
func.func @router_gradients(%x: tensor<?x64xbf16>, %w: tensor<8x64xbf16>,
                            %s: tensor<?x8xf32>, %ids: tensor<?x2xi32>,
                            %dw: tensor<?x2xf32>) {
  %ds = moe.topk_grad %s, %ids, %dw {normalize, scale = 2.5 : f64}
      : tensor<?x8xf32>, tensor<?x2xi32>, tensor<?x2xf32> -> tensor<?x8xf32>
  %dx, %dwr = moe.router_grad %x, %w, %s, %ds {scoring = #moe.scoring<sigmoid>}
      : tensor<?x64xbf16>, tensor<8x64xbf16>, tensor<?x8xf32>, tensor<?x8xf32>
      -> tensor<?x64xbf16>, tensor<8x64xf32>
  return
}

// CHECK-LABEL: func @all_reduce
// CHECK: moe.all_reduce %{{.*}} {ep_size = 2 : i64} : tensor<8x64xf32>
func.func @all_reduce(%g: tensor<8x64xf32>) -> tensor<8x64xf32> {
  %s = moe.all_reduce %g {ep_size = 2} : tensor<8x64xf32>
  return %s : tensor<8x64xf32>
}

// One rank's share of an expert-parallel layer: 2 of 8 experts.
// CHECK-LABEL: func @layer_shard
// CHECK: moe.layer {{.*}}ep_size = 4 : i64
func.func @layer_shard(%x: tensor<?x8xf32>, %wr: tensor<8x8xf32>, %wg: tensor<2x16x8xf32>,
                       %wu: tensor<2x16x8xf32>, %wd: tensor<2x8x16xf32>) -> tensor<?x8xf32> {
  %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd)
         {config = #moe.layer_config<hidden = 8, experts = 8, top_k = 2, ffn = 16, dtype = f32>, ep_size = 4}
       : (tensor<?x8xf32>, tensor<8x8xf32>, tensor<2x16x8xf32>, tensor<2x16x8xf32>, tensor<2x8x16xf32>) -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}

// CHECK-LABEL: func @all_to_all_async
// CHECK: %[[H:.*]], %{{.*}} = moe.all_to_all_start %{{.*}}, %{{.*}} {ep_size = 2 : i64, kind = #moe.all_to_all_kind<dispatch>} : tensor<?x64xbf16>, tensor<17xi32> -> tensor<17xi32>
// CHECK: moe.all_to_all_wait %[[H]] : tensor<?x64xbf16>
func.func @all_to_all_async(%rows: tensor<?x64xbf16>, %off: tensor<17xi32>)
    -> (tensor<?x64xbf16>, tensor<17xi32>) {
  %h, %o = moe.all_to_all_start %rows, %off
      {ep_size = 2, kind = #moe.all_to_all_kind<dispatch>}
      : tensor<?x64xbf16>, tensor<17xi32> -> tensor<17xi32>
  %r = moe.all_to_all_wait %h : tensor<?x64xbf16>
  return %r, %o : tensor<?x64xbf16>, tensor<17xi32>
}

// Llama 4's order: the rows scaled on dispatch, summed as they are.
// CHECK-LABEL: func @scaled_dispatch
// CHECK: moe.dispatch %{{[a-z0-9_]+}}, %{{[a-z0-9_]+}} scales %{{[a-z0-9_]+}} {experts = 4 : i64} : tensor<?x16xbf16>, tensor<?x2xi32>, tensor<?x2xf32> -> tensor<?x16xbf16>, tensor<5xi32>, tensor<?x2xi32>
// CHECK: moe.combine %{{[a-z0-9_]+}}, %{{[a-z0-9_]+}} : tensor<?x16xbf16>, tensor<?x2xi32> -> tensor<?x16xbf16>
func.func @scaled_dispatch(%x: tensor<?x16xbf16>, %ids: tensor<?x2xi32>,
                           %w: tensor<?x2xf32>) -> tensor<?x16xbf16> {
  %rows, %off, %map = moe.dispatch %x, %ids scales %w {experts = 4}
      : tensor<?x16xbf16>, tensor<?x2xi32>, tensor<?x2xf32>
      -> tensor<?x16xbf16>, tensor<5xi32>, tensor<?x2xi32>
  %y = moe.combine %rows, %map
         : tensor<?x16xbf16>, tensor<?x2xi32> -> tensor<?x16xbf16>
  return %y : tensor<?x16xbf16>
}

// Sparsemixer: the router's logits, two picks with a margin.
// CHECK-LABEL: func @sparsemixer
// CHECK: moe.router %{{[a-z0-9_]+}}, %{{[a-z0-9_]+}} {scoring = #moe.scoring<sparsemixer>}
// CHECK: moe.topk %{{[a-z0-9_]+}} {k = 2 : i64, sparsemixer = 1.000000e-02 : f64}
func.func @sparsemixer(%x: tensor<?x16xf32>, %wr: tensor<8x16xf32>)
    -> tensor<?x2xf32> {
  %s = moe.router %x, %wr {scoring = #moe.scoring<sparsemixer>}
         : tensor<?x16xf32>, tensor<8x16xf32> -> tensor<?x8xf32>
  %ids, %w = moe.topk %s {k = 2, sparsemixer = 0.01 : f64}
             : tensor<?x8xf32> -> tensor<?x2xi32>, tensor<?x2xf32>
  return %w : tensor<?x2xf32>
}

// GPT-OSS: a router bias, expert biases, the clamped SwiGLU.
// CHECK-LABEL: func @gpt_oss_layer
// CHECK: moe.layer %{{[a-z0-9_]+}} router(%{{[a-z0-9_]+}}) experts(%{{[a-z0-9_]+}}, %{{[a-z0-9_]+}}, %{{[a-z0-9_]+}}) router_bias(%{{[a-z0-9_]+}}) expert_bias(%{{[a-z0-9_]+}}, %{{[a-z0-9_]+}}, %{{[a-z0-9_]+}}) {config = #moe.layer_config<hidden = 16, experts = 4, top_k = 2, norm_topk_prob = true, ffn = 8, router_bias = true, expert_bias = true, activation = clamped_swiglu, swiglu_limit = 5.0, dtype = bf16>}
func.func @gpt_oss_layer(%x: tensor<?x16xbf16>, %wr: tensor<4x16xbf16>,
                         %wg: tensor<4x8x16xbf16>, %wu: tensor<4x8x16xbf16>,
                         %wd: tensor<4x16x8xbf16>, %br: tensor<4xbf16>,
                         %bg: tensor<4x8xbf16>, %bu: tensor<4x8xbf16>,
                         %bd: tensor<4x16xbf16>) -> tensor<?x16xbf16> {
  %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd) router_bias(%br)
         expert_bias(%bg, %bu, %bd)
         {config = #moe.layer_config<hidden = 16, experts = 4, top_k = 2,
            norm_topk_prob = true, ffn = 8, router_bias = true,
            expert_bias = true, activation = clamped_swiglu,
            swiglu_limit = 5.0, dtype = bf16>}
       : (tensor<?x16xbf16>, tensor<4x16xbf16>, tensor<4x8x16xbf16>,
          tensor<4x8x16xbf16>, tensor<4x16x8xbf16>, tensor<4xbf16>,
          tensor<4x8xbf16>, tensor<4x8xbf16>, tensor<4x16xbf16>)
       -> tensor<?x16xbf16>
  return %y : tensor<?x16xbf16>
}

// CHECK-LABEL: func @gpt_oss_primitives
// CHECK: moe.router %{{[a-z0-9_]+}}, %{{[a-z0-9_]+}} bias %{{[a-z0-9_]+}} {scoring = #moe.scoring<softmax>} : tensor<?x16xbf16>, tensor<4x16xbf16>, tensor<4xbf16> -> tensor<?x4xf32>
// CHECK: moe.grouped_matmul %{{[a-z0-9_]+}}, %{{[a-z0-9_]+}}, %{{[a-z0-9_]+}} bias %{{[a-z0-9_]+}} : tensor<?x16xbf16>, tensor<4x8x16xbf16>, tensor<5xi32>, tensor<4x8xbf16> -> tensor<?x8xbf16>
// CHECK: moe.swiglu %{{[a-z0-9_]+}}, %{{[a-z0-9_]+}} {alpha = 1.702000e+00 : f64, limit = 7.000000e+00 : f64} : tensor<?x8xbf16>
func.func @gpt_oss_primitives(%x: tensor<?x16xbf16>, %wr: tensor<4x16xbf16>,
                              %br: tensor<4xbf16>, %w: tensor<4x8x16xbf16>,
                              %b: tensor<4x8xbf16>, %off: tensor<5xi32>)
    -> (tensor<?x4xf32>, tensor<?x8xbf16>) {
  %s = moe.router %x, %wr bias %br {scoring = #moe.scoring<softmax>}
         : tensor<?x16xbf16>, tensor<4x16xbf16>, tensor<4xbf16>
         -> tensor<?x4xf32>
  %g = moe.grouped_matmul %x, %w, %off bias %b
         : tensor<?x16xbf16>, tensor<4x8x16xbf16>, tensor<5xi32>,
           tensor<4x8xbf16> -> tensor<?x8xbf16>
  %a = moe.swiglu %g, %g {alpha = 1.702 : f64, limit = 7.0 : f64}
         : tensor<?x8xbf16>
  return %s, %a : tensor<?x4xf32>, tensor<?x8xbf16>
}

// FP8 experts: e4m3 weights with their 128 x 128 block scales.
// CHECK-LABEL: func.func @fp8_layer
// CHECK: moe.layer %{{.*}} router(%{{.*}}) experts(%{{.*}}, %{{.*}}, %{{.*}}) scales(%{{.*}}, %{{.*}}, %{{.*}}) shared(%{{.*}}, %{{.*}}, %{{.*}}) shared_scales(%{{.*}}, %{{.*}}, %{{.*}}) {config = #moe.layer_config<hidden = 256, experts = 4, top_k = 2, ffn = 192, shared_experts = 1, shared_ffn = 192, dtype = bf16, expert_dtype = f8E4M3FN>}
func.func @fp8_layer(%x: tensor<?x256xbf16>, %wr: tensor<4x256xbf16>,
                     %wg: tensor<4x192x256xf8E4M3FN>, %wd: tensor<4x256x192xf8E4M3FN>,
                     %sg: tensor<4x2x2xf32>,
                     %shg: tensor<192x256xf8E4M3FN>, %shd: tensor<256x192xf8E4M3FN>,
                     %ssg: tensor<2x2xf32>) -> tensor<?x256xbf16> {
  %y = moe.layer %x router(%wr) experts(%wg, %wg, %wd) scales(%sg, %sg, %sg)
         shared(%shg, %shg, %shd) shared_scales(%ssg, %ssg, %ssg)
         {config = #moe.layer_config<hidden = 256, experts = 4, top_k = 2,
                                     ffn = 192, shared_experts = 1,
                                     shared_ffn = 192, dtype = bf16,
                                     expert_dtype = f8E4M3FN>}
       : (tensor<?x256xbf16>, tensor<4x256xbf16>, tensor<4x192x256xf8E4M3FN>,
          tensor<4x192x256xf8E4M3FN>, tensor<4x256x192xf8E4M3FN>,
          tensor<192x256xf8E4M3FN>, tensor<192x256xf8E4M3FN>,
          tensor<256x192xf8E4M3FN>,
          tensor<4x2x2xf32>, tensor<4x2x2xf32>, tensor<4x2x2xf32>,
          tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<?x256xbf16>
  return %y : tensor<?x256xbf16>
}

// CHECK-LABEL: func.func @fp8_ops
func.func @fp8_ops(%rows: tensor<?x256xbf16>, %w: tensor<4x192x256xf8E4M3FN>,
                   %off: tensor<5xi32>, %s: tensor<4x2x2xf32>,
                   %g: tensor<192x256xf8E4M3FN>, %d: tensor<256x192xf8E4M3FN>,
                   %gs: tensor<2x2xf32>) -> (tensor<?x192xbf16>, tensor<?x256xbf16>) {
  // CHECK: moe.grouped_matmul %{{.*}}, %{{.*}}, %{{.*}} scale %{{.*}} : tensor<?x256xbf16>, tensor<4x192x256xf8E4M3FN>, tensor<5xi32> scale tensor<4x2x2xf32> -> tensor<?x192xbf16>
  %h = moe.grouped_matmul %rows, %w, %off scale %s
         : tensor<?x256xbf16>, tensor<4x192x256xf8E4M3FN>, tensor<5xi32>
           scale tensor<4x2x2xf32> -> tensor<?x192xbf16>
  // CHECK: moe.shared_expert %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} scales(%{{.*}}, %{{.*}}, %{{.*}})
  %y = moe.shared_expert %rows, %g, %g, %d scales(%gs, %gs, %gs)
         : (tensor<?x256xbf16>, tensor<192x256xf8E4M3FN>,
            tensor<192x256xf8E4M3FN>, tensor<256x192xf8E4M3FN>,
            tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>)
         -> tensor<?x256xbf16>
  return %h, %y : tensor<?x192xbf16>, tensor<?x256xbf16>
}

// FP8 training's ops: the recipe, operands quantized per row, per column
// within segments and per segment, weights to codes and block scales, and
// Dgrad against e4m3 codes.
// CHECK-LABEL: func @fp8_training
// CHECK: moe.fp8_quantize %{{.*}} {recipe = #moe.fp8_recipe<>} : tensor<?x256xbf16> -> tensor<?x256xf32>
// CHECK: moe.fp8_quantize %{{.*}} segments %{{.*}} {recipe = #moe.fp8_recipe<>, transposed} : tensor<?x256xbf16>, tensor<5xi32> -> tensor<?x256xf32>
// CHECK: moe.fp8_quantize %{{.*}} segments %{{.*}} {recipe = #moe.fp8_recipe<scaling = tensor>} : tensor<?x256xbf16>, tensor<5xi32> -> tensor<?x256xf32>
// CHECK: moe.fp8_quantize_weight %{{.*}} {recipe = #moe.fp8_recipe<>} : tensor<4x256x192xf32> -> tensor<4x256x192xf8E4M3FN>, tensor<4x2x2xf32>
// CHECK: moe.grouped_matmul_dx %{{.*}}, %{{.*}}, %{{.*}} scale %{{.*}} : tensor<?x256xf32>, tensor<4x256x192xf8E4M3FN>, tensor<5xi32> scale tensor<4x2x2xf32> -> tensor<?x192xf32>
// CHECK: expert_dtype = f8E4M3FN, fp8_recipe = <scaling = tensor>>
func.func @fp8_training(%g: tensor<?x256xbf16>, %o: tensor<5xi32>,
                        %w: tensor<4x256x192xf32>) -> tensor<?x192xf32> {
  %r = moe.fp8_quantize %g {recipe = #moe.fp8_recipe<scaling = block, block = 128>} : tensor<?x256xbf16> -> tensor<?x256xf32>
  %c = moe.fp8_quantize %g segments %o {recipe = #moe.fp8_recipe<>, transposed} : tensor<?x256xbf16>, tensor<5xi32> -> tensor<?x256xf32>
  %t = moe.fp8_quantize %g segments %o {recipe = #moe.fp8_recipe<scaling = tensor>} : tensor<?x256xbf16>, tensor<5xi32> -> tensor<?x256xf32>
  %codes, %scales = moe.fp8_quantize_weight %w {recipe = #moe.fp8_recipe<>} : tensor<4x256x192xf32> -> tensor<4x256x192xf8E4M3FN>, tensor<4x2x2xf32>
  %dx = moe.grouped_matmul_dx %r, %codes, %o scale %scales : tensor<?x256xf32>, tensor<4x256x192xf8E4M3FN>, tensor<5xi32> scale tensor<4x2x2xf32> -> tensor<?x192xf32>
  return %dx : tensor<?x192xf32>
}
func.func private @fp8_config() attributes {c = #moe.layer_config<hidden = 8, experts = 4, top_k = 1, ffn = 4, dtype = bf16, expert_dtype = f8E4M3FN, fp8_recipe = #moe.fp8_recipe<scaling = tensor>>}
