// RUN: moe-opt %s -split-input-file -moe-autodiff -verify-diagnostics | FileCheck %s

// The backward function: forward primitives recomputed, then the gradient
// ops from the combine back to the router. Numerics: test/Integration/grad-check.test.

// CHECK-LABEL: func.func @mixtral_backward
// CHECK-SAME: (%[[X:.*]]: tensor<?x8xf32>, %[[WR:.*]]: tensor<4x8xf32>, %[[WG:.*]]: tensor<4x4x8xf32>, %[[WU:.*]]: tensor<4x4x8xf32>, %[[WD:.*]]: tensor<4x8x4xf32>, %[[DY:.*]]: tensor<?x8xf32>)
// CHECK-SAME: -> (tensor<?x8xf32>, tensor<4x8xf32>, tensor<4x4x8xf32>, tensor<4x4x8xf32>, tensor<4x8x4xf32>)
// CHECK: %[[S:.*]] = moe.router %[[X]], %[[WR]]
// CHECK: %[[IDS:.*]], %[[W:.*]] = moe.topk %[[S]]
// CHECK: %[[ROWS:.*]], %[[OFF:.*]], %[[MAP:.*]] = moe.dispatch %[[X]], %[[IDS]]
// CHECK: %[[G:.*]] = moe.grouped_matmul %[[ROWS]], %[[WG]], %[[OFF]]
// CHECK: %[[U:.*]] = moe.grouped_matmul %[[ROWS]], %[[WU]], %[[OFF]]
// CHECK: %[[A:.*]] = moe.swiglu %[[G]], %[[U]]
// CHECK: %[[D:.*]] = moe.grouped_matmul %[[A]], %[[WD]], %[[OFF]]
// CHECK: %[[DD:.*]], %[[DW:.*]] = moe.combine_grad %[[DY]], %[[D]], %[[MAP]], %[[W]]
// CHECK: %[[DA:.*]] = moe.grouped_matmul_dx %[[DD]], %[[WD]], %[[OFF]]
// CHECK: %[[GD:.*]] = moe.grouped_matmul_dw %[[A]], %[[DD]], %[[OFF]]
// CHECK: %[[DG:.*]], %[[DU:.*]] = moe.swiglu_grad %[[G]], %[[U]], %[[DA]]
// CHECK-DAG: %[[DXU:.*]] = moe.grouped_matmul_dx %[[DU]], %[[WU]], %[[OFF]]
// CHECK-DAG: %[[DXG:.*]] = moe.grouped_matmul_dx %[[DG]], %[[WG]], %[[OFF]]
// CHECK: %[[DROWS:.*]] = arith.addf
// CHECK: %[[GG:.*]] = moe.grouped_matmul_dw %[[ROWS]], %[[DG]], %[[OFF]]
// CHECK: %[[GU:.*]] = moe.grouped_matmul_dw %[[ROWS]], %[[DU]], %[[OFF]]
// CHECK: %[[DXR:.*]] = moe.dispatch_grad %[[DROWS]], %[[MAP]]
// CHECK: %[[DS:.*]] = moe.topk_grad %[[S]], %[[IDS]], %[[DW]] {normalize}
// CHECK: %[[DX:.*]], %[[DWR:.*]] = moe.router_grad %[[X]], %[[WR]], %[[S]], %[[DS]] {scoring = #moe.scoring<softmax>}
// CHECK: %[[SUM:.*]] = arith.addf %[[DXR]], %[[DX]]
// CHECK: return %[[SUM]], %[[DWR]], %[[GG]], %[[GU]], %[[GD]]
func.func @mixtral(%x: tensor<?x8xf32>, %wr: tensor<4x8xf32>, %wg: tensor<4x4x8xf32>,
                   %wu: tensor<4x4x8xf32>, %wd: tensor<4x8x4xf32>) -> tensor<?x8xf32> {
  %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd)
      {config = #moe.layer_config<hidden = 8, experts = 4, top_k = 2, norm_topk_prob = true, ffn = 4, dtype = f32>}
      : (tensor<?x8xf32>, tensor<4x8xf32>, tensor<4x4x8xf32>, tensor<4x4x8xf32>, tensor<4x8x4xf32>) -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}

// -----

// Shared experts: one group of all tokens, gradients collapsed to [S, H].
// CHECK-LABEL: func.func @shared_backward
// CHECK-SAME: -> (tensor<?x8xf32>, tensor<4x8xf32>, tensor<4x4x8xf32>, tensor<4x4x8xf32>, tensor<4x8x4xf32>, tensor<6x8xf32>, tensor<6x8xf32>, tensor<8x6xf32>)
// CHECK: tensor.from_elements
// CHECK: tensor.expand_shape
// CHECK: moe.swiglu_grad
// CHECK: tensor.collapse_shape
func.func @shared(%x: tensor<?x8xf32>, %wr: tensor<4x8xf32>, %wg: tensor<4x4x8xf32>,
                  %wu: tensor<4x4x8xf32>, %wd: tensor<4x8x4xf32>, %sg: tensor<6x8xf32>,
                  %su: tensor<6x8xf32>, %sd: tensor<8x6xf32>) -> tensor<?x8xf32> {
  %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd) shared(%sg, %su, %sd)
      {config = #moe.layer_config<hidden = 8, experts = 4, top_k = 2, ffn = 4, shared_experts = 1, shared_ffn = 6, dtype = f32>}
      : (tensor<?x8xf32>, tensor<4x8xf32>, tensor<4x4x8xf32>, tensor<4x4x8xf32>, tensor<4x8x4xf32>, tensor<6x8xf32>, tensor<6x8xf32>, tensor<8x6xf32>) -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}

// -----

// Qwen2-MoE's gate on the shared output, s = sigmoid(x . g^T): a router of
// one expert whose score weights a combine of one row a token. The shared
// expert gets s * dy, the gate's score dy . down(a), and g its gradient
// through the sigmoid, which is also added to dx.
// CHECK-LABEL: func.func @gated_backward
// CHECK-SAME: %[[G:[a-z0-9]+]]: tensor<1x8xf32>, %[[DY:[a-z0-9]+]]: tensor<?x8xf32>)
// CHECK-SAME: -> (tensor<?x8xf32>, tensor<4x8xf32>, tensor<4x4x8xf32>, tensor<4x4x8xf32>, tensor<4x8x4xf32>, tensor<6x8xf32>, tensor<6x8xf32>, tensor<8x6xf32>, tensor<1x8xf32>)
// CHECK: %[[S:.*]] = moe.router %{{.*}}, %[[G]] {scoring = #moe.scoring<sigmoid>}
// CHECK: %[[OUT:.*]] = moe.grouped_matmul
// CHECK: %[[MAP:.*]] = tensor.generate
// CHECK: %[[DOUT:.*]], %[[DS:.*]] = moe.combine_grad %[[DY]], %[[OUT]], %[[MAP]], %[[S]]
// CHECK: %[[DXG:.*]], %[[DG:.*]] = moe.router_grad %{{.*}}, %[[G]], %[[S]], %[[DS]] {scoring = #moe.scoring<sigmoid>}
// CHECK: moe.grouped_matmul_dx %[[DOUT]]
// CHECK: arith.addf %{{.*}}, %[[DXG]]
// CHECK: return {{.*}}, %[[DG]] :
func.func @gated(%x: tensor<?x8xf32>, %wr: tensor<4x8xf32>, %wg: tensor<4x4x8xf32>,
                 %wu: tensor<4x4x8xf32>, %wd: tensor<4x8x4xf32>, %sg: tensor<6x8xf32>,
                 %su: tensor<6x8xf32>, %sd: tensor<8x6xf32>, %g: tensor<1x8xf32>) -> tensor<?x8xf32> {
  %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd) shared(%sg, %su, %sd) shared_gate(%g)
      {config = #moe.layer_config<hidden = 8, experts = 4, top_k = 2, ffn = 4, shared_experts = 1, shared_ffn = 6, shared_gate = true, dtype = f32>}
      : (tensor<?x8xf32>, tensor<4x8xf32>, tensor<4x4x8xf32>, tensor<4x4x8xf32>, tensor<4x8x4xf32>, tensor<6x8xf32>, tensor<6x8xf32>, tensor<8x6xf32>, tensor<1x8xf32>) -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}

// -----

// expected-error @+1 {{'func.func' op holds 2 moe.layer ops; moe-autodiff differentiates one layer per function}}
func.func @two(%x: tensor<?x8xf32>, %wr: tensor<4x8xf32>, %wg: tensor<4x4x8xf32>,
               %wu: tensor<4x4x8xf32>, %wd: tensor<4x8x4xf32>) -> tensor<?x8xf32> {
  %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd)
      {config = #moe.layer_config<hidden = 8, experts = 4, top_k = 2, ffn = 4, dtype = f32>}
      : (tensor<?x8xf32>, tensor<4x8xf32>, tensor<4x4x8xf32>, tensor<4x4x8xf32>, tensor<4x8x4xf32>) -> tensor<?x8xf32>
  %z = moe.layer %y router(%wr) experts(%wg, %wu, %wd)
      {config = #moe.layer_config<hidden = 8, experts = 4, top_k = 2, ffn = 4, dtype = f32>}
      : (tensor<?x8xf32>, tensor<4x8xf32>, tensor<4x4x8xf32>, tensor<4x4x8xf32>, tensor<4x8x4xf32>) -> tensor<?x8xf32>
  return %z : tensor<?x8xf32>
}

// -----

// expected-error @+1 {{'func.func' op already has a function 'one_backward' next to it}}
func.func @one(%x: tensor<?x8xf32>, %wr: tensor<4x8xf32>, %wg: tensor<4x4x8xf32>,
               %wu: tensor<4x4x8xf32>, %wd: tensor<4x8x4xf32>) -> tensor<?x8xf32> {
  %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd)
      {config = #moe.layer_config<hidden = 8, experts = 4, top_k = 2, ffn = 4, dtype = f32>}
      : (tensor<?x8xf32>, tensor<4x8xf32>, tensor<4x4x8xf32>, tensor<4x4x8xf32>, tensor<4x8x4xf32>) -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}
func.func private @one_backward()

// -----

// Sparsemixer (Phi-3.5-MoE) has no backward pass yet.
func.func @mixer(%x: tensor<?x8xf32>, %wr: tensor<4x8xf32>, %wg: tensor<4x4x8xf32>,
                 %wu: tensor<4x4x8xf32>, %wd: tensor<4x8x4xf32>) -> tensor<?x8xf32> {
  // expected-error @+1 {{'moe.layer' op has no backward pass in moe-autodiff yet: it routes by sparsemixer (Phi-3.5-MoE)}}
  %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd)
      {config = #moe.layer_config<hidden = 8, experts = 4, top_k = 2, scoring = sparsemixer, router_jitter = 0.01, ffn = 4, dtype = f32>}
      : (tensor<?x8xf32>, tensor<4x8xf32>, tensor<4x4x8xf32>, tensor<4x4x8xf32>, tensor<4x8x4xf32>) -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}

// -----

// Llama 4 (scale_input): the combine's gradient with weights of one, then
// the scaled dispatch's, whose scale gradients feed the top-k's.
// CHECK-LABEL: func.func @scaled_backward
// CHECK: %[[ONES:.*]] = linalg.fill
// CHECK: moe.combine_grad %{{[a-z0-9_]+}}, %{{[a-z0-9_]+}}, %{{[a-z0-9_]+}}, %[[ONES]]
// CHECK: %[[DX:.*]], %[[DS:.*]] = moe.scaled_dispatch_grad
// CHECK: moe.topk_grad %{{[a-z0-9_]+}}, %{{[a-z0-9_]+}}, %[[DS]]
func.func @scaled(%x: tensor<?x8xf32>, %wr: tensor<4x8xf32>, %wg: tensor<4x4x8xf32>,
                  %wu: tensor<4x4x8xf32>, %wd: tensor<4x8x4xf32>) -> tensor<?x8xf32> {
  %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd)
      {config = #moe.layer_config<hidden = 8, experts = 4, top_k = 2, scoring = sigmoid, ffn = 4, scale_input = true, dtype = f32>}
      : (tensor<?x8xf32>, tensor<4x8xf32>, tensor<4x4x8xf32>, tensor<4x4x8xf32>, tensor<4x8x4xf32>) -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}
