// RUN: moe-opt %s --convert-moegpu-kernels-to-gpu -split-input-file | FileCheck %s
// (The route kernel's NaN-safe selection and group limit, as the layer's
// conversion makes it: test/Conversion/MoeToMoeGpu/route-nan.mlir.)

// The route kernel, softmax and normalized: one warp per token (4 a CTA);
// the softmax's max and sum are butterflies over the lanes (5 shuffles
// each), exp is ex2.approx of x * log2(e); k picks in a loop, lane 0
// storing the id and score and counting the pick; after the loop the
// weights are divided by the picks' sum and scaled by routed_scale.
// CHECK-LABEL: gpu.func @route
// CHECK: %[[LANE:.*]] = arith.remui %{{.*}}, %c32
// CHECK: %[[B:.*]] = arith.muli %{{.*}}, %c4
// CHECK: %[[T:.*]] = arith.addi %[[B]], %{{.*}}
// CHECK: %[[N:.*]] = memref.dim %{{.*}}, %c0
// CHECK: %[[IN:.*]] = arith.cmpi ult, %[[T]], %[[N]]
// CHECK: scf.if %[[IN]]
// CHECK: %[[S:.*]] = memref.load %{{.*}}[%[[T]], %{{.*}}] : memref<?x8xf32>
// CHECK-COUNT-5: gpu.shuffle xor
// CHECK: %[[MAX:.*]] = arith.maximumf
// CHECK: %[[D:.*]] = arith.subf %[[S]], %[[MAX]]
// CHECK: %[[X:.*]] = arith.mulf %[[D]], %{{.*}}
// CHECK: %[[E:.*]] = llvm.call_intrinsic "llvm.nvvm.ex2.approx.ftz.f"(%[[X]])
// CHECK-COUNT-5: gpu.shuffle xor
// CHECK: %[[SUM:.*]] = arith.addf
// CHECK: arith.divf %[[E]], %[[SUM]]
// CHECK: %[[PICKS:.*]]:2 = scf.for %[[J:.*]] = %c0{{[_0-9]*}} to %c2 step %c1{{[_0-9]*}} iter_args
// CHECK: scf.if
// CHECK: memref.store %{{.*}}, %{{.*}}[%[[T]], %[[J]]] : memref<?x2xi32>
// CHECK: memref.store %{{.*}}, %{{.*}}[%[[T]], %[[J]]] : memref<?x2xf32>
// CHECK: memref.atomic_rmw addi %c1_i32{{[_0-9]*}}, %{{.*}} : (i32, memref<8xi32>) -> i32
// CHECK: scf.for %[[J2:.*]] =
// CHECK: %[[W:.*]] = memref.load %{{.*}}[%[[T]], %[[J2]]] : memref<?x2xf32>
// CHECK: %[[NW:.*]] = arith.divf %[[W]], %[[PICKS]]#1
// CHECK: %[[SW:.*]] = arith.mulf %[[NW]], %[[SCALE:.*]] : f32
// CHECK: memref.store %[[SW]], %{{.*}}[%[[T]], %[[J2]]]
gpu.module @k {
  gpu.func @route(%l: memref<?x8xf32>, %i: memref<?x2xi32>, %w: memref<?x2xf32>, %c: memref<8xi32>) kernel {
    moegpu.route %l, %i, %w, %c {scoring = #moegpu.scoring<softmax>, normalize, routed_scale = 2.5} : memref<?x8xf32>, memref<?x2xi32>, memref<?x2xf32>, memref<8xi32>
    gpu.return
  }
}

// -----

// Sparsemixer picks unrolled (k = 2), each weight a warp sum of exp(s - m)
// over the logits within twice the jitter of the pick; no normalization.
// CHECK-LABEL: gpu.func @mixer
// CHECK-NOT: scf.for
// CHECK: arith.cmpf ogt
// CHECK: llvm.call_intrinsic "llvm.nvvm.ex2.approx.ftz.f"
// CHECK: arith.divf %cst{{.*}}, %{{.*}} : f32
// CHECK: arith.divf %cst{{.*}}, %{{.*}} : f32
// CHECK: scf.if
// CHECK-COUNT-2: memref.atomic_rmw addi
// CHECK-NOT: memref.load %{{.*}} : memref<?x2xf32>
gpu.module @k {
  gpu.func @mixer(%l: memref<?x8xf32>, %i: memref<?x2xi32>, %w: memref<?x2xf32>, %c: memref<8xi32>) kernel {
    moegpu.route %l, %i, %w, %c {scoring = #moegpu.scoring<sparsemixer>, normalize, jitter = 0.01} : memref<?x8xf32>, memref<?x2xi32>, memref<?x2xf32>, memref<8xi32>
    gpu.return
  }
}

// -----

// The f32 router's logits: one warp per token, lane l taking experts l,
// l + 32, ..., each a sum over the hidden size in order.
// CHECK-LABEL: gpu.func @router
// CHECK: scf.if
// CHECK: scf.for %[[E:.*]] = %{{.*}} to %c8 step %c32
// CHECK: %[[ACC:.*]] = scf.for %[[H:.*]] = %c0{{[_0-9]*}} to %c64 step %c1
// CHECK-DAG: memref.load %{{.*}}[%{{.*}}, %[[H]]] : memref<?x64xbf16>
// CHECK-DAG: memref.load %{{.*}}[%[[E]], %[[H]]] : memref<8x64xf32>
// CHECK: memref.store %[[ACC]], %{{.*}}[%{{.*}}, %[[E]]] : memref<?x8xf32>
gpu.module @k {
  gpu.func @router(%x: memref<?x64xbf16>, %w: memref<8x64xf32>, %l: memref<?x8xf32>) kernel {
    moegpu.router_logits %x, %w, %l : memref<?x64xbf16>, memref<8x64xf32>, memref<?x8xf32>
    gpu.return
  }
}

// -----

// Qwen2-MoE's shared-expert gate: a warp's dot product, a butterfly sum,
// sigmoid as 1 / (1 + exp(-x)), stored by lane 0.
// CHECK-LABEL: gpu.func @shared_gate
// CHECK: scf.for
// CHECK: memref.load %{{.*}} : memref<1x64xbf16>
// CHECK-COUNT-5: gpu.shuffle xor
// CHECK: %[[NEG:.*]] = arith.negf
// CHECK: llvm.call_intrinsic "llvm.nvvm.ex2.approx.ftz.f"
// CHECK: %[[G:.*]] = arith.divf
// CHECK: scf.if
// CHECK: memref.store %[[G]], %{{.*}} : memref<?xf32>
gpu.module @k {
  gpu.func @shared_gate(%x: memref<?x64xbf16>, %g: memref<1x64xbf16>, %s: memref<?xf32>) kernel {
    moegpu.shared_gate %x, %g, %s : memref<?x64xbf16>, memref<1x64xbf16>, memref<?xf32>
    gpu.return
  }
}

// -----

// The split router's sum: one CTA per token, its threads striding over the
// experts; the slices the GEMM took (count[0]) added in slice order.
// CHECK-LABEL: gpu.func @sum_splits
// CHECK: %[[T:.*]] = gpu.block_id x
// CHECK: %[[TID:.*]] = gpu.thread_id x
// CHECK: %[[STEP:.*]] = gpu.block_dim x
// CHECK: scf.if
// CHECK: %[[N:.*]] = memref.load %{{.*}}[%{{.*}}] : memref<1xi32>
// CHECK: %[[NI:.*]] = arith.index_cast %[[N]] : i32 to index
// CHECK: scf.for %[[E:.*]] = %[[TID]] to %c8{{[_0-9]*}} step %[[STEP]]
// CHECK: %[[SUM:.*]] = scf.for %[[S:.*]] = %c0{{[_0-9]*}} to %[[NI]] step %c1{{[_0-9]*}} iter_args(%[[ACC:.*]] = %{{.*}}) -> (f32)
// CHECK: %[[P:.*]] = memref.load %{{.*}}[%[[S]], %[[T]], %[[E]]] : memref<4x?x8xf32>
// CHECK: %[[NEXT:.*]] = arith.addf %[[ACC]], %[[P]] : f32
// CHECK: scf.yield %[[NEXT]]
// CHECK: memref.store %[[SUM]], %{{.*}}[%[[T]], %[[E]]] : memref<?x8xf32>
gpu.module @k {
  gpu.func @sum_splits(%p: memref<4x?x8xf32>, %n: memref<1xi32>, %l: memref<?x8xf32>) kernel {
    moegpu.sum_splits %p, %n, %l : memref<4x?x8xf32>, memref<1xi32>, memref<?x8xf32>
    gpu.return
  }
}
