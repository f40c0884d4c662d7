// Numerics of moe.topk on the host, against values computed by hand.
// RUN: moe-opt %s --moe-host-pipeline | mlir-runner -e main -entry-point-result=void -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils | FileCheck %s

func.func private @printMemrefI32(memref<*xi32>) attributes {llvm.emit_c_interface}
func.func private @printMemrefF32(memref<*xf32>) attributes {llvm.emit_c_interface}

func.func @main() {
  // Two tokens, 8 experts in 4 groups of 2; bias shifts expert 7 up.
  %scores = arith.constant dense<[
      [0.10, 0.40, 0.30, 0.30, 0.90, 0.05, 0.20, 0.25],
      [0.50, 0.50, 0.50, 0.50, 0.10, 0.10, 0.10, 0.10]]> : tensor<2x8xf32>
  %bias = arith.constant dense<[0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.5]> : tensor<8xf32>
  // Token 0, biased: [.1 .4 | .3 .3 | .9 .05 | .2 .75]; sum of top-2 per
  // group: .5, .6, .95, .95 -> groups 2 and 3 (tie: both kept). Top-3 of
  // experts 4..7: 4 (.9), 7 (.75), 6 (.2). Unbiased weights .9, .25, .2
  // sum to 1.35; normalized and scaled by 2: 1.333333, .370370, .296296.
  // Token 1: groups .5+... = 1.0, 1.0, .2, .6 -> groups 0 and 1 (ties go
  // low). Experts 0..3 all .5: the lowest three, 0 1 2, each 2/3.
  %ids, %w = moe.topk %scores bias(%bias) {k = 3, groups = 4, topk_groups = 2,
               group_score = #moe.group_score<sum_top2>, normalize, scale = 2.0 : f64}
             : tensor<2x8xf32>, tensor<8xf32> -> tensor<2x3xi32>, tensor<2x3xf32>
  %idsm = bufferization.to_buffer %ids : tensor<2x3xi32> to memref<2x3xi32>
  %wm = bufferization.to_buffer %w : tensor<2x3xf32> to memref<2x3xf32>
  %idsu = memref.cast %idsm : memref<2x3xi32> to memref<*xi32>
  %wu = memref.cast %wm : memref<2x3xf32> to memref<*xf32>
  call @printMemrefI32(%idsu) : (memref<*xi32>) -> ()
  call @printMemrefF32(%wu) : (memref<*xf32>) -> ()
  return
}
// CHECK: [4,   7,   6]
// CHECK: [0,   1,   2]
// CHECK: [1.33333,   0.37037,   0.296296]
// CHECK: [0.666667,   0.666667,   0.666667]
