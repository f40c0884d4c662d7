// Numerics of the expert-computation gradients on the host, against values
// worked out by hand.
// RUN: moe-opt %s --moe-host-pipeline | mlir-runner -e main -entry-point-result=void -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils | FileCheck %s

func.func private @printMemrefF32(memref<*xf32>) attributes {llvm.emit_c_interface}

func.func @print2(%t: tensor<?x?xf32>) {
  %m = bufferization.to_buffer %t : tensor<?x?xf32> to memref<?x?xf32>
  %u = memref.cast %m : memref<?x?xf32> to memref<*xf32>
  call @printMemrefF32(%u) : (memref<*xf32>) -> ()
  return
}

func.func @main() {
  // silu(g) * u: at g = 0, s = 1/2 and d silu/dg = 1/2; at g = 2,
  // s = 0.880797, d silu/dg = s (1 + 2 (1 - s)) = 1.090784 and
  // silu(2) = 1.761594.
  %g = arith.constant dense<[[0.0, 2.0]]> : tensor<1x2xf32>
  %u = arith.constant dense<[[3.0, -1.0]]> : tensor<1x2xf32>
  %dy = arith.constant dense<[[1.0, 0.5]]> : tensor<1x2xf32>
  %dg, %du = moe.swiglu_grad %g, %u, %dy : tensor<1x2xf32>
  %dg_d = tensor.cast %dg : tensor<1x2xf32> to tensor<?x?xf32>
  call @print2(%dg_d) : (tensor<?x?xf32>) -> ()
  // CHECK: [1.5, -0.545392]
  %du_d = tensor.cast %du : tensor<1x2xf32> to tensor<?x?xf32>
  call @print2(%du_d) : (tensor<?x?xf32>) -> ()
  // CHECK: [0, 0.880797]

  // Three experts, N = 2, K = 3; rows 0-1 are expert 0's, expert 1 has none,
  // row 2 is expert 2's, row 3 lies past offsets[E].
  %w = arith.constant dense<[[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]],
                             [[7.0, 7.0, 7.0], [7.0, 7.0, 7.0]],
                             [[1.0, 0.0, -1.0], [0.0, 1.0, 0.0]]]> : tensor<3x2x3xf32>
  %off = arith.constant dense<[0, 2, 2, 3]> : tensor<4xi32>
  %grad = arith.constant dense<[[1.0, 0.0], [0.0, 1.0], [2.0, 3.0], [9.0, 9.0]]> : tensor<4x2xf32>
  // dx[r] = grad[r] * w[e]: rows of w[0], then 2 w[2][0] + 3 w[2][1], then 0.
  %dx = moe.grouped_matmul_dx %grad, %w, %off
      : tensor<4x2xf32>, tensor<3x2x3xf32>, tensor<4xi32> -> tensor<4x3xf32>
  %dx_d = tensor.cast %dx : tensor<4x3xf32> to tensor<?x?xf32>
  call @print2(%dx_d) : (tensor<?x?xf32>) -> ()
  // CHECK: [1, 2, 3]
  // CHECK-NEXT: [4, 5, 6]
  // CHECK-NEXT: [2, 3, -2]
  // CHECK-NEXT: [0, 0, 0]

  // dw[e][n] = sum over e's rows of grad[r][n] * x[r]: expert 0 gets
  // x0 and x1, expert 1 nothing, expert 2 gets 2 x2 and 3 x2; x3 is ignored.
  %x = arith.constant dense<[[1.0, 1.0, 1.0], [1.0, 0.0, 2.0], [3.0, 1.0, 0.0], [5.0, 5.0, 5.0]]> : tensor<4x3xf32>
  %dw = moe.grouped_matmul_dw %x, %grad, %off
      : tensor<4x3xf32>, tensor<4x2xf32>, tensor<4xi32> -> tensor<3x2x3xf32>
  %dw_c = tensor.collapse_shape %dw [[0, 1], [2]] : tensor<3x2x3xf32> into tensor<6x3xf32>
  %dw_d = tensor.cast %dw_c : tensor<6x3xf32> to tensor<?x?xf32>
  call @print2(%dw_d) : (tensor<?x?xf32>) -> ()
  // CHECK: [1, 1, 1]
  // CHECK-NEXT: [1, 0, 2]
  // CHECK-NEXT: [0, 0, 0]
  // CHECK-NEXT: [0, 0, 0]
  // CHECK-NEXT: [6, 2, 0]
  // CHECK-NEXT: [9, 3, 0]
  // combine: y[t] = sum_j w[t][j] rows[map[t][j]]; entry 9 lies outside the
  // buffer. rows_grad[map[t][j]] = w[t][j] dy[t]; weights_grad[t][j] =
  // <dy[t], rows[map[t][j]]>: <(1,-1),(5,6)> = -1, <(1,-1),(1,2)> = -1,
  // <(2,0.5),(3,4)> = 8, and 0 for the entry outside.
  %rows = arith.constant dense<[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]]> : tensor<4x2xf32>
  %map = arith.constant dense<[[2, 0], [1, 9]]> : tensor<2x2xi32>
  %cw = arith.constant dense<[[0.5, 2.0], [3.0, 1.0]]> : tensor<2x2xf32>
  %dy2 = arith.constant dense<[[1.0, -1.0], [2.0, 0.5]]> : tensor<2x2xf32>
  %drows, %dcw = moe.combine_grad %dy2, %rows, %map, %cw
      : tensor<2x2xf32>, tensor<4x2xf32>, tensor<2x2xi32>, tensor<2x2xf32>
      -> tensor<4x2xf32>, tensor<2x2xf32>
  %drows_d = tensor.cast %drows : tensor<4x2xf32> to tensor<?x?xf32>
  call @print2(%drows_d) : (tensor<?x?xf32>) -> ()
  // CHECK: [2, -2]
  // CHECK-NEXT: [6, 1.5]
  // CHECK-NEXT: [0.5, -0.5]
  // CHECK-NEXT: [0, 0]
  %dcw_d = tensor.cast %dcw : tensor<2x2xf32> to tensor<?x?xf32>
  call @print2(%dcw_d) : (tensor<?x?xf32>) -> ()
  // CHECK: [-1, -1]
  // CHECK-NEXT: [8, 0]

  // dispatch: x_grad[t] = sum_j rows_grad[map[t][j]], skipping -1.
  %rg = arith.constant dense<[[1.0, 1.0], [2.0, 2.0], [3.0, 3.0], [4.0, 4.0]]> : tensor<4x2xf32>
  %dmap = arith.constant dense<[[0, 3], [2, -1]]> : tensor<2x2xi32>
  %dx2 = moe.dispatch_grad %rg, %dmap : tensor<4x2xf32>, tensor<2x2xi32> -> tensor<2x2xf32>
  %dx2_d = tensor.cast %dx2 : tensor<2x2xf32> to tensor<?x?xf32>
  call @print2(%dx2_d) : (tensor<?x?xf32>) -> ()
  // CHECK: [5, 5]
  // CHECK-NEXT: [3, 3]
  // topk weights w_j = scale s_j / Z: with s = (0.1, 0.4, 0.2, 0.3), ids
  // (1, 3) and dw = (1, 2): without normalize, scale 2.5 gives 2.5 dw at the
  // chosen experts; with normalize (Z = 0.7, sum dw s = 1), the gradients
  // are (1 - 1/0.7)/0.7 = -0.612245 and (2 - 1/0.7)/0.7 = 0.816327.
  %ts = arith.constant dense<[[0.1, 0.4, 0.2, 0.3]]> : tensor<1x4xf32>
  %tid = arith.constant dense<[[1, 3]]> : tensor<1x2xi32>
  %tdw = arith.constant dense<[[1.0, 2.0]]> : tensor<1x2xf32>
  %ds1 = moe.topk_grad %ts, %tid, %tdw {scale = 2.5 : f64}
      : tensor<1x4xf32>, tensor<1x2xi32>, tensor<1x2xf32> -> tensor<1x4xf32>
  %ds1_d = tensor.cast %ds1 : tensor<1x4xf32> to tensor<?x?xf32>
  call @print2(%ds1_d) : (tensor<?x?xf32>) -> ()
  // CHECK: [0, 2.5, 0, 5]
  %ds2 = moe.topk_grad %ts, %tid, %tdw {normalize}
      : tensor<1x4xf32>, tensor<1x2xi32>, tensor<1x2xf32> -> tensor<1x4xf32>
  %ds2_d = tensor.cast %ds2 : tensor<1x4xf32> to tensor<?x?xf32>
  call @print2(%ds2_d) : (tensor<?x?xf32>) -> ()
  // CHECK: [0, -0.612245, 0, 0.816327]

  // router: x = (1, 2), w = identity, logits (1, 2), ds = (1, -1).
  // sigmoid: s = (0.731059, 0.880797), g = ds s (1 - s) = (0.196612,
  // -0.104994); dx = g w = g; dw[e] = g[e] x.
  %rx = arith.constant dense<[[1.0, 2.0]]> : tensor<1x2xf32>
  %rw = arith.constant dense<[[1.0, 0.0], [0.0, 1.0]]> : tensor<2x2xf32>
  %rs = moe.router %rx, %rw {scoring = #moe.scoring<sigmoid>} : tensor<1x2xf32>, tensor<2x2xf32> -> tensor<1x2xf32>
  %rds = arith.constant dense<[[1.0, -1.0]]> : tensor<1x2xf32>
  %rdx, %rdw = moe.router_grad %rx, %rw, %rs, %rds {scoring = #moe.scoring<sigmoid>}
      : tensor<1x2xf32>, tensor<2x2xf32>, tensor<1x2xf32>, tensor<1x2xf32>
      -> tensor<1x2xf32>, tensor<2x2xf32>
  %rdx_d = tensor.cast %rdx : tensor<1x2xf32> to tensor<?x?xf32>
  call @print2(%rdx_d) : (tensor<?x?xf32>) -> ()
  // CHECK: [0.196612, -0.104994]
  %rdw_d = tensor.cast %rdw : tensor<2x2xf32> to tensor<?x?xf32>
  call @print2(%rdw_d) : (tensor<?x?xf32>) -> ()
  // CHECK: [0.196612, 0.393224]
  // CHECK-NEXT: [-0.104994, -0.209987]
  // softmax: s = (0.268941, 0.731059), <ds, s> = -0.462117,
  // g = s (ds - <ds, s>) = (0.393224, -0.393224).
  %ss = moe.router %rx, %rw {scoring = #moe.scoring<softmax>} : tensor<1x2xf32>, tensor<2x2xf32> -> tensor<1x2xf32>
  %sdx, %sdw = moe.router_grad %rx, %rw, %ss, %rds {scoring = #moe.scoring<softmax>}
      : tensor<1x2xf32>, tensor<2x2xf32>, tensor<1x2xf32>, tensor<1x2xf32>
      -> tensor<1x2xf32>, tensor<2x2xf32>
  %sdx_d = tensor.cast %sdx : tensor<1x2xf32> to tensor<?x?xf32>
  call @print2(%sdx_d) : (tensor<?x?xf32>) -> ()
  // CHECK: [0.393224, -0.393224]
  %sdw_d = tensor.cast %sdw : tensor<2x2xf32> to tensor<?x?xf32>
  call @print2(%sdw_d) : (tensor<?x?xf32>) -> ()
  // CHECK: [0.393224, 0.786448]
  // CHECK-NEXT: [-0.393224, -0.786448]
  return
}
