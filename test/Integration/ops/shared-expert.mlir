// Numerics of moe.shared_expert on the host, against values worked out by hand.
// RUN: moe-opt %s --moe-host-pipeline | mlir-runner -e main -entry-point-result=void -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils | FileCheck %s

func.func private @printMemrefI32(memref<*xi32>) attributes {llvm.emit_c_interface}
func.func private @printMemrefF32(memref<*xf32>) attributes {llvm.emit_c_interface}

func.func @main() {
  %x = arith.constant dense<[[1.0, 2.0]]> : tensor<1x2xf32>
  %g = arith.constant dense<[[1.0, 0.0]]> : tensor<1x2xf32>
  %u = arith.constant dense<[[0.0, 1.0]]> : tensor<1x2xf32>
  %d = arith.constant dense<[[1.0], [-2.0]]> : tensor<2x1xf32>
  %sg = arith.constant dense<[[0.0, 1.0]]> : tensor<1x2xf32>
  // silu(1) * 2 = 1.462117, then down: (1.462117, -2.924234).
  %y = moe.shared_expert %x, %g, %u, %d
         : (tensor<1x2xf32>, tensor<1x2xf32>, tensor<1x2xf32>, tensor<2x1xf32>) -> tensor<1x2xf32>
  // Times sigmoid(x . (0, 1)) = sigmoid(2) = 0.880797.
  %z = moe.shared_expert %x, %g, %u, %d gate(%sg)
         : (tensor<1x2xf32>, tensor<1x2xf32>, tensor<1x2xf32>, tensor<2x1xf32>, tensor<1x2xf32>) -> tensor<1x2xf32>
  %y_m = bufferization.to_buffer %y : tensor<1x2xf32> to memref<1x2xf32>
  %y_u = memref.cast %y_m : memref<1x2xf32> to memref<*xf32>
  call @printMemrefF32(%y_u) : (memref<*xf32>) -> ()
  %z_m = bufferization.to_buffer %z : tensor<1x2xf32> to memref<1x2xf32>
  %z_u = memref.cast %z_m : memref<1x2xf32> to memref<*xf32>
  call @printMemrefF32(%z_u) : (memref<*xf32>) -> ()
  return
}
// CHECK: [1.46212,   -2.92423]
// CHECK: [1.28783,   -2.57566]
