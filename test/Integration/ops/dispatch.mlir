// Numerics of moe.dispatch on the host, against values worked out by hand.
// RUN: moe-opt %s --moe-host-pipeline | mlir-runner -e main -entry-point-result=void -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils | FileCheck %s

func.func private @printMemrefI32(memref<*xi32>) attributes {llvm.emit_c_interface}
func.func private @printMemrefF32(memref<*xf32>) attributes {llvm.emit_c_interface}

func.func @main() {
  %x = arith.constant dense<[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]> : tensor<3x2xf32>
  %ids = arith.constant dense<[[2, 0], [0, 1], [2, 1]]> : tensor<3x2xi32>
  // Two rows per expert, each segment padded to 4: offsets 0 4 8 12; within
  // an expert, tokens in order. 12 rows is the bound for 3 tokens x 2 over
  // 3 experts in blocks of 4.
  %rows, %off, %map = moe.dispatch %x, %ids {experts = 3, alignment = 4}
      : tensor<3x2xf32>, tensor<3x2xi32> -> tensor<12x2xf32>, tensor<4xi32>, tensor<3x2xi32>
  %off_m = bufferization.to_buffer %off : tensor<4xi32> to memref<4xi32>
  %off_u = memref.cast %off_m : memref<4xi32> to memref<*xi32>
  call @printMemrefI32(%off_u) : (memref<*xi32>) -> ()
  %map_m = bufferization.to_buffer %map : tensor<3x2xi32> to memref<3x2xi32>
  %map_u = memref.cast %map_m : memref<3x2xi32> to memref<*xi32>
  call @printMemrefI32(%map_u) : (memref<*xi32>) -> ()
  %rows_m = bufferization.to_buffer %rows : tensor<12x2xf32> to memref<12x2xf32>
  %rows_u = memref.cast %rows_m : memref<12x2xf32> to memref<*xf32>
  call @printMemrefF32(%rows_u) : (memref<*xf32>) -> ()

  // An out-of-range id is dropped: row map -1, no row.
  %x1 = arith.constant dense<[[7.0, 8.0]]> : tensor<1x2xf32>
  %bad = arith.constant dense<[[0, 7]]> : tensor<1x2xi32>
  %rows1, %off1, %map1 = moe.dispatch %x1, %bad {experts = 3, alignment = 2}
      : tensor<1x2xf32>, tensor<1x2xi32> -> tensor<4x2xf32>, tensor<4xi32>, tensor<1x2xi32>
  %off1_m = bufferization.to_buffer %off1 : tensor<4xi32> to memref<4xi32>
  %off1_u = memref.cast %off1_m : memref<4xi32> to memref<*xi32>
  call @printMemrefI32(%off1_u) : (memref<*xi32>) -> ()
  %map1_m = bufferization.to_buffer %map1 : tensor<1x2xi32> to memref<1x2xi32>
  %map1_u = memref.cast %map1_m : memref<1x2xi32> to memref<*xi32>
  call @printMemrefI32(%map1_u) : (memref<*xi32>) -> ()
  %rows1_m = bufferization.to_buffer %rows1 : tensor<4x2xf32> to memref<4x2xf32>
  %rows1_u = memref.cast %rows1_m : memref<4x2xf32> to memref<*xf32>
  call @printMemrefF32(%rows1_u) : (memref<*xf32>) -> ()
  return
}
// CHECK: [0,  4,  8,  12]
// CHECK: {{\[}}[8,   0],
// CHECK-NEXT: [1,   4],
// CHECK-NEXT: [9,   5]]
// CHECK: {{\[}}[1,   2],
// CHECK-NEXT: [3,   4],
// CHECK-NEXT: [0,   0],
// CHECK-NEXT: [0,   0],
// CHECK-NEXT: [3,   4],
// CHECK-NEXT: [5,   6],
// CHECK-NEXT: [0,   0],
// CHECK-NEXT: [0,   0],
// CHECK-NEXT: [1,   2],
// CHECK-NEXT: [5,   6],
// CHECK-NEXT: [0,   0],
// CHECK-NEXT: [0,   0]]
// CHECK: [0,  2,  2,  2]
// CHECK: {{\[}}[0,   -1]]
// CHECK: {{\[}}[7,   8],
// CHECK-NEXT: [0,   0],
// CHECK-NEXT: [0,   0],
// CHECK-NEXT: [0,   0]]
