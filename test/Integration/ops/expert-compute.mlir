// Numerics of moe.grouped_matmul, moe.swiglu and moe.combine on the host,
// against values worked out by hand.
// RUN: moe-opt %s --moe-host-pipeline | mlir-runner -e main -entry-point-result=void -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils | FileCheck %s

func.func private @printMemrefI32(memref<*xi32>) attributes {llvm.emit_c_interface}
func.func private @printMemrefF32(memref<*xf32>) attributes {llvm.emit_c_interface}

func.func @main() {
  %rows = arith.constant dense<[[1.0, 2.0], [3.0, 4.0], [0.0, 0.0], [5.0, 6.0], [7.0, 8.0]]> : tensor<5x2xf32>
  // Expert 0 is the identity, expert 1 maps (a, b) to (a + b, 2a - b). The
  // last offset runs past the 5 rows and is clamped.
  %w = arith.constant dense<[[[1.0, 0.0], [0.0, 1.0]], [[1.0, 1.0], [2.0, -1.0]]]> : tensor<2x2x2xf32>
  %off = arith.constant dense<[0, 3, 9]> : tensor<3xi32>
  %h = moe.grouped_matmul %rows, %w, %off
         : tensor<5x2xf32>, tensor<2x2x2xf32>, tensor<3xi32> -> tensor<5x2xf32>
  %h_m = bufferization.to_buffer %h : tensor<5x2xf32> to memref<5x2xf32>
  %h_u = memref.cast %h_m : memref<5x2xf32> to memref<*xf32>
  call @printMemrefF32(%h_u) : (memref<*xf32>) -> ()

  %g = arith.constant dense<[[0.0, 1.0, -1.0, 2.0]]> : tensor<1x4xf32>
  %u = arith.constant dense<[[1.0, 2.0, 3.0, 4.0]]> : tensor<1x4xf32>
  %a = moe.swiglu %g, %u : tensor<1x4xf32>
  %a_m = bufferization.to_buffer %a : tensor<1x4xf32> to memref<1x4xf32>
  %a_u = memref.cast %a_m : memref<1x4xf32> to memref<*xf32>
  call @printMemrefF32(%a_u) : (memref<*xf32>) -> ()

  %r = arith.constant dense<[[1.0, 1.0], [2.0, 2.0], [3.0, 3.0], [4.0, 4.0]]> : tensor<4x2xf32>
  %map = arith.constant dense<[[0, 3], [2, -1]]> : tensor<2x2xi32>
  %cw = arith.constant dense<[[0.5, 0.25], [2.0, 9.0]]> : tensor<2x2xf32>
  %y = moe.combine %r, %map, %cw
         : tensor<4x2xf32>, tensor<2x2xi32>, tensor<2x2xf32> -> tensor<2x2xf32>
  %y_m = bufferization.to_buffer %y : tensor<2x2xf32> to memref<2x2xf32>
  %y_u = memref.cast %y_m : memref<2x2xf32> to memref<*xf32>
  call @printMemrefF32(%y_u) : (memref<*xf32>) -> ()

  // Rows no segment covers are zero, wherever they lie: offsets out of
  // order give expert 0 rows 2 and 3, and experts 1 and 2 none (their
  // segments [4, 4) and [1, 1) are empty), so rows 0, 1, 4 and 5 are
  // outside every segment. All rows are ones, expert 0 sums its inputs.
  %ones = arith.constant dense<1.0> : tensor<6x2xf32>
  %w3 = arith.constant dense<1.0> : tensor<3x2x2xf32>
  %gaps = arith.constant dense<[2, 4, 1, 1]> : tensor<4xi32>
  %g3 = moe.grouped_matmul %ones, %w3, %gaps
         : tensor<6x2xf32>, tensor<3x2x2xf32>, tensor<4xi32> -> tensor<6x2xf32>
  %g3_m = bufferization.to_buffer %g3 : tensor<6x2xf32> to memref<6x2xf32>
  %g3_u = memref.cast %g3_m : memref<6x2xf32> to memref<*xf32>
  call @printMemrefF32(%g3_u) : (memref<*xf32>) -> ()
  return
}
// CHECK: {{\[}}[1,   2],
// CHECK-NEXT: [3,   4],
// CHECK-NEXT: [0,   0],
// CHECK-NEXT: [11,   4],
// CHECK-NEXT: [15,   6]]
// silu(x) = x / (1 + exp(-x)): 0, 0.731059 * 2, -0.268941 * 3, 1.761594 * 4.
// CHECK: [0,   1.46212,   -0.806824,   7.04638]
// 0.5 * row 0 + 0.25 * row 3; 2 * row 2 (a -1 row is skipped).
// CHECK: {{\[}}[1.5,   1.5],
// CHECK-NEXT: [6,   6]]
// CHECK: {{\[}}[0,   0],
// CHECK-NEXT: [0,   0],
// CHECK-NEXT: [2,   2],
// CHECK-NEXT: [2,   2],
// CHECK-NEXT: [0,   0],
// CHECK-NEXT: [0,   0]]
