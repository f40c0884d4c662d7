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

// -----

// Over several ranks the collectives call the runtime through the module's
// communicator table: word 0 is the context, 1 the exchange of segment
// sizes, 2 the exchange of rows, 3 the in-place sum (4 and 5: below). The
// rows land in a buffer sized by the exchanged offsets.
// CHECK: llvm.mlir.global external @moe_comm(dense<0> : tensor<6xi64>) {{.*}} : !llvm.array<6 x i64>
// CHECK-LABEL: func @collectives
// CHECK: %[[OUT_OFF:.*]] = memref.alloc() : memref<5xi32>
// CHECK: %[[T1:.*]] = llvm.mlir.addressof @moe_comm
// CHECK: llvm.getelementptr %[[T1]][0, 1]
// CHECK: %[[COUNTS:.*]] = llvm.inttoptr
// CHECK: llvm.getelementptr %{{.*}}[0, 0]
// CHECK: %[[CTX:.*]] = llvm.load
// CHECK: llvm.call %[[COUNTS]](%[[CTX]], %c1_i64, %{{.*}}, %{{.*}}, %c4_i64) : !llvm.ptr, (i64, i64, i64, i64, i64) -> ()
// CHECK: %[[USED:.*]] = memref.load %[[OUT_OFF]][%c4]
// CHECK: %[[ROWS:.*]] = arith.index_cast %[[USED]]
// CHECK: memref.alloc(%[[ROWS]]) : memref<?x8xbf16>
// CHECK: llvm.getelementptr %{{.*}}[0, 2]
// CHECK: llvm.call %{{.*}}(%{{.*}}, %c1_i64, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %c4_i64{{[_0-9]*}}, %c16_i64) : !llvm.ptr, (i64, i64, i64, i64, i64, i64, i64, i64) -> ()
// CHECK: %[[SUM:.*]] = memref.alloc() : memref<4x6xf32>
// CHECK: memref.copy %{{.*}}, %[[SUM]]
// CHECK: llvm.getelementptr %{{.*}}[0, 3]
// CHECK: llvm.call %{{.*}}(%{{.*}}, %{{.*}}, %{{.*}}) : !llvm.ptr, (i64, i64, i64) -> ()
// CHECK: bufferization.to_tensor %[[SUM]]
// CHECK-NOT: moe.
func.func @collectives(%rows: tensor<?x8xbf16>, %off: tensor<5xi32>, %g: tensor<4x6xf32>)
    -> (tensor<?x8xbf16>, tensor<5xi32>, tensor<4x6xf32>) {
  %r, %o = moe.all_to_all %rows, %off {ep_size = 2, kind = #moe.all_to_all_kind<combine>}
      : tensor<?x8xbf16>, tensor<5xi32> -> tensor<?x8xbf16>, tensor<5xi32>
  %s = moe.all_reduce %g {ep_size = 2} : tensor<4x6xf32>
  return %r, %o, %s : tensor<?x8xbf16>, tensor<5xi32>, tensor<4x6xf32>
}

// -----

// One rank: the identity.
// CHECK-LABEL: func @one_rank
// CHECK-NOT: llvm.call
// CHECK: return %arg0
func.func @one_rank(%g: tensor<4x6xf32>) -> tensor<4x6xf32> {
  %s = moe.all_reduce %g {ep_size = 1} : tensor<4x6xf32>
  return %s : tensor<4x6xf32>
}

// -----

// A started all-to-all: sizes at once, the rows through the start function
// (word 4), which returns a handle the wait (word 5) takes; the rows'
// buffer becomes the wait's result.
// CHECK-LABEL: func @started
// CHECK: %[[OUT:.*]] = memref.alloc(%{{.*}}) : memref<?x8xf32>
// CHECK: llvm.getelementptr %{{.*}}[0, 4]
// CHECK: %[[H:.*]] = llvm.call %{{.*}}(%{{.*}}) : !llvm.ptr, (i64, i64, i64, i64, i64, i64, i64, i64) -> i64
// CHECK: arith.negf
// CHECK: llvm.getelementptr %{{.*}}[0, 5]
// CHECK: llvm.call %{{.*}}(%{{.*}}, %[[H]]) : !llvm.ptr, (i64, i64) -> ()
// CHECK: bufferization.to_tensor %[[OUT]]
func.func @started(%rows: tensor<?x8xf32>, %off: tensor<5xi32>, %other: tensor<4xf32>)
    -> (tensor<?x8xf32>, tensor<4xf32>) {
  %h, %o = moe.all_to_all_start %rows, %off {ep_size = 2, kind = #moe.all_to_all_kind<dispatch>}
      : tensor<?x8xf32>, tensor<5xi32> -> tensor<5xi32>
  %n = arith.negf %other : tensor<4xf32>
  %r = moe.all_to_all_wait %h : tensor<?x8xf32>
  return %r, %n : tensor<?x8xf32>, tensor<4xf32>
}
