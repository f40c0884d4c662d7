// Numerics of moe.router on the host, against values computed by hand.
// RUN: moe-opt %s --moe-host-pipeline | mlir-runner -e main -entry-point-result=void -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils | FileCheck %s

func.func private @printMemrefI32(memref<*xi32>) attributes {llvm.emit_c_interface}
func.func private @printMemrefF32(memref<*xf32>) attributes {llvm.emit_c_interface}

func.func @main() {
  %x = arith.constant dense<[[1.0, 0.0], [0.0, 2.0]]> : tensor<2x2xf32>
  %w = arith.constant dense<[[1.0, 1.0], [0.0, 1.0], [2.0, 0.0]]> : tensor<3x2xf32>
  // Logits: [1, 0, 2] and [2, 2, 0].
  %soft = moe.router %x, %w {scoring = #moe.scoring<softmax>}
            : tensor<2x2xf32>, tensor<3x2xf32> -> tensor<2x3xf32>
  %sig = moe.router %x, %w {scoring = #moe.scoring<sigmoid>}
            : tensor<2x2xf32>, tensor<3x2xf32> -> tensor<2x3xf32>
  %soft_m = bufferization.to_buffer %soft : tensor<2x3xf32> to memref<2x3xf32>
  %soft_u = memref.cast %soft_m : memref<2x3xf32> to memref<*xf32>
  call @printMemrefF32(%soft_u) : (memref<*xf32>) -> ()
  %sig_m = bufferization.to_buffer %sig : tensor<2x3xf32> to memref<2x3xf32>
  %sig_u = memref.cast %sig_m : memref<2x3xf32> to memref<*xf32>
  call @printMemrefF32(%sig_u) : (memref<*xf32>) -> ()
  return
}
// e / (1 + e + e^2), 1 / (...), e^2 / (...); e^2 / (2 e^2 + 1), ...
// CHECK: [0.244728,   0.0900306,   0.665241]
// CHECK: [0.468311,   0.468311,   0.0633789]
// CHECK: [0.731059,   0.5,   0.880797]
// CHECK: [0.880797,   0.880797,   0.5]
