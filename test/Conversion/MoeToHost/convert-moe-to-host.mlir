// RUN: moe-opt %s --convert-moe-to-host --split-input-file | FileCheck %s

// Router: a GEMM with the weight transposed, accumulated in f32 from bf16
// operands, then sigmoid elementwise.
// CHECK-LABEL: func @router_sigmoid
// CHECK: %[[ZERO:.*]] = linalg.fill ins(%{{.*}} : f32) outs(%{{.*}} : tensor<?x8xf32>)
// CHECK: linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "reduction"]} ins(%{{.*}}, %{{.*}} : tensor<?x64xbf16>, tensor<8x64xbf16>) outs(%[[ZERO]] : tensor<?x8xf32>)
// CHECK: arith.extf %{{.*}} : bf16 to f32
// CHECK: arith.extf %{{.*}} : bf16 to f32
// CHECK: arith.mulf
// CHECK: arith.addf
// CHECK: linalg.generic
// CHECK: math.exp
// CHECK: arith.divf
// CHECK-NOT: moe.
func.func @router_sigmoid(%x: tensor<?x64xbf16>, %w: tensor<8x64xbf16>) -> tensor<?x8xf32> {
  %s = moe.router %x, %w {scoring = #moe.scoring<sigmoid>}
         : tensor<?x64xbf16>, tensor<8x64xbf16> -> tensor<?x8xf32>
  return %s : tensor<?x8xf32>
}

// -----

// Softmax: row max, exp of the difference, row sum, division.
// CHECK-LABEL: func @router_softmax
// CHECK: linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "reduction"]
// CHECK: linalg.generic {{.*}}iterator_types = ["parallel", "reduction"]
// CHECK: arith.maximumf
// CHECK: math.exp
// CHECK: linalg.generic {{.*}}iterator_types = ["parallel", "reduction"]
// CHECK: arith.addf
// CHECK: arith.divf
func.func @router_softmax(%x: tensor<?x64xf32>, %w: tensor<8x64xf32>) -> tensor<?x8xf32> {
  %s = moe.router %x, %w {scoring = #moe.scoring<softmax>}
         : tensor<?x64xf32>, tensor<8x64xf32> -> tensor<?x8xf32>
  return %s : tensor<?x8xf32>
}

// -----

// Top-k: loops over tokens on buffers; results come back as tensors.
// CHECK-LABEL: func @topk
// CHECK: bufferization.to_buffer %{{.*}} read_only : tensor<?x8xf32>
// CHECK: memref.alloc(%{{.*}}) : memref<?x2xi32>
// CHECK: memref.alloc(%{{.*}}) : memref<?x2xf32>
// CHECK: memref.alloca() : memref<8xf32>
// CHECK: memref.alloca() : memref<8xi1>
// CHECK: scf.for
// CHECK: arith.cmpf ogt
// CHECK: bufferization.to_tensor %{{.*}} restrict writable : memref<?x2xi32>
// CHECK: bufferization.to_tensor %{{.*}} restrict writable : memref<?x2xf32>
func.func @topk(%s: tensor<?x8xf32>, %b: tensor<8xf32>) -> (tensor<?x2xi32>, tensor<?x2xf32>) {
  %ids, %w = moe.topk %s bias(%b) {k = 2, groups = 4, topk_groups = 2,
               group_score = #moe.group_score<sum_top2>, normalize, scale = 2.5 : f64}
             : tensor<?x8xf32>, tensor<8xf32> -> tensor<?x2xi32>, tensor<?x2xf32>
  return %ids, %w : tensor<?x2xi32>, tensor<?x2xf32>
}

// -----

// Dispatch: histogram, aligned prefix sum, zero-filled rows, scatter.
// CHECK-LABEL: func @dispatch
// CHECK: memref.alloca() : memref<4xindex>
// CHECK: memref.alloc() : memref<5xi32>
// CHECK: memref.alloc(%{{.*}}) : memref<?x16xf32>
// CHECK: linalg.fill
// CHECK: memref.alloc(%{{.*}}) : memref<?x2xi32>
// CHECK: scf.if
// CHECK: bufferization.to_tensor
func.func @dispatch(%x: tensor<?x16xf32>, %ids: tensor<?x2xi32>)
    -> (tensor<?x16xf32>, tensor<5xi32>, tensor<?x2xi32>) {
  %rows, %off, %map = moe.dispatch %x, %ids {experts = 4, alignment = 8}
      : tensor<?x16xf32>, tensor<?x2xi32> -> tensor<?x16xf32>, tensor<5xi32>, tensor<?x2xi32>
  return %rows, %off, %map : tensor<?x16xf32>, tensor<5xi32>, tensor<?x2xi32>
}

// -----

// Grouped GEMM and combine: loops bounded by the offsets and the row map.
// CHECK-LABEL: func @gmm_combine
// CHECK: arith.minsi
// CHECK: scf.for
// CHECK: arith.mulf
// CHECK: arith.addf
// CHECK: memref.alloca() : memref<16xf32>
// CHECK: scf.if
func.func @gmm_combine(%rows: tensor<?x8xf32>, %w: tensor<4x16x8xf32>, %off: tensor<5xi32>,
                       %map: tensor<?x2xi32>, %wts: tensor<?x2xf32>) -> tensor<?x16xf32> {
  %h = moe.grouped_matmul %rows, %w, %off
         : tensor<?x8xf32>, tensor<4x16x8xf32>, tensor<5xi32> -> tensor<?x16xf32>
  %y = moe.combine %h, %map, %wts
         : tensor<?x16xf32>, tensor<?x2xi32>, tensor<?x2xf32> -> tensor<?x16xf32>
  return %y : tensor<?x16xf32>
}

// -----

// Shared expert with a gate; SwiGLU; a one-rank all-to-all is the identity.
// CHECK-LABEL: func @shared_swiglu_a2a
// CHECK: tensor.collapse_shape
// CHECK-NOT: moe.
// CHECK: return %{{.*}}, %arg5, %arg6
func.func @shared_swiglu_a2a(%x: tensor<?x8xf32>, %g: tensor<4x8xf32>, %u: tensor<4x8xf32>,
                             %d: tensor<8x4xf32>, %sg: tensor<1x8xf32>,
                             %rows: tensor<?x8xf32>, %off: tensor<5xi32>)
    -> (tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x8xf32>, tensor<5xi32>) {
  %s = moe.shared_expert %x, %g, %u, %d gate(%sg)
         : (tensor<?x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<8x4xf32>, tensor<1x8xf32>) -> tensor<?x8xf32>
  %a = moe.swiglu %x, %x : tensor<?x8xf32>
  %r, %o = moe.all_to_all %rows, %off {ep_size = 1, kind = #moe.all_to_all_kind<dispatch>}
      : tensor<?x8xf32>, tensor<5xi32> -> tensor<?x8xf32>, tensor<5xi32>
  return %s, %a, %r, %o : tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x8xf32>, tensor<5xi32>
}
