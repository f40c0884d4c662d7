// RUN: moe-opt %s --moe-host-pipeline="alignment=8" | FileCheck %s
// RUN: moe-opt %s --moe-host-pipeline | mlir-translate --mlir-to-llvmir | FileCheck %s --check-prefix=LLVMIR
// RUN: moe-opt %s --moe-host-pipeline="openmp=1" | FileCheck %s --check-prefix=OMP

// A whole layer on buffers (destination-passing style) goes down to the
// LLVM dialect, with the C interface for the runtime.
// CHECK-NOT: moe.
// CHECK-NOT: linalg.
// CHECK-NOT: scf.
// CHECK-NOT: memref.
// CHECK-NOT: bufferization.
// CHECK: llvm.func @layer(
// CHECK: llvm.call @malloc
// CHECK: llvm.call @free
// CHECK: llvm.func @_mlir_ciface_layer(
// LLVMIR: define void @_mlir_ciface_layer(ptr
// With OpenMP, the grouped GEMMs (over 4 experts and blocks of columns)
// hand out their iterations one at a time; the other parallel loops keep
// the static schedule. Gate, up and down call one private function (it
// takes the column count and depth at run time): one such loop in all.
// OMP-COUNT-3: llvm.call @moe_host_grouped_matmul(
// OMP-NOT: llvm.call @moe_host_grouped_matmul
// OMP-COUNT-1: omp.wsloop schedule(dynamic = %{{.*}} : i64)
// OMP-NOT: schedule(dynamic
func.func @layer(%x: memref<?x8xf32>, %wr: memref<4x8xf32>, %wg: memref<4x16x8xf32>,
                 %wu: memref<4x16x8xf32>, %wd: memref<4x8x16xf32>, %y: memref<?x8xf32>)
    attributes {llvm.emit_c_interface} {
  %xt = bufferization.to_tensor %x restrict : memref<?x8xf32> to tensor<?x8xf32>
  %rt = bufferization.to_tensor %wr restrict : memref<4x8xf32> to tensor<4x8xf32>
  %gt = bufferization.to_tensor %wg restrict : memref<4x16x8xf32> to tensor<4x16x8xf32>
  %ut = bufferization.to_tensor %wu restrict : memref<4x16x8xf32> to tensor<4x16x8xf32>
  %dt = bufferization.to_tensor %wd restrict : memref<4x8x16xf32> to tensor<4x8x16xf32>
  %yt = moe.layer %xt router(%rt) experts(%gt, %ut, %dt)
         {config = #moe.layer_config<hidden = 8, experts = 4, top_k = 2, norm_topk_prob = true, ffn = 16, dtype = f32>}
       : (tensor<?x8xf32>, tensor<4x8xf32>, tensor<4x16x8xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>) -> tensor<?x8xf32>
  bufferization.materialize_in_destination %yt in restrict writable %y : (tensor<?x8xf32>, memref<?x8xf32>) -> ()
  return
}
