// RUN: moe-opt %s --convert-moegpu-kernels-to-gpu -split-input-file | FileCheck %s

// One CTA per token; each thread sums its 16-byte chunks (8 bf16) of the
// token's k rows in f32, skipping rows of -1; then the shared experts'
// output times the gate, then the output bias added to the sum rounded to
// bf16, and the result rounded to bf16.
// CHECK-LABEL: gpu.func @combine
// CHECK: %[[T:.*]] = gpu.block_id x
// CHECK: scf.for %[[H:.*]] = %{{.*}} to %c64{{[_0-9]*}} step %c1024
// CHECK: %[[ACC:.*]] = scf.for %[[J:.*]] = %c0{{[_0-9]*}} to %c2{{[_0-9]*}} step %c1{{[_0-9]*}} iter_args(%[[IT:.*]] = %{{.*}}) -> (vector<8xf32>)
// CHECK: %[[R:.*]] = memref.load %{{.*}}[%[[T]], %[[J]]] : memref<?x2xi32>
// CHECK: %[[HAS:.*]] = arith.cmpi sge, %[[R]], %c0_i32
// CHECK: scf.if %[[HAS]] -> (vector<8xf32>)
// CHECK: vector.load %{{.*}} : memref<?x64xbf16>, vector<8xbf16>
// CHECK: arith.extf %{{.*}} : vector<8xbf16> to vector<8xf32>
// CHECK: } else {
// CHECK: scf.yield %[[IT]] : vector<8xf32>
// CHECK: %[[SO:.*]] = vector.load %{{.*}}[%[[T]], %[[H]]] {{.*}} : memref<?x64xbf16>, vector<8xbf16>
// CHECK: %[[SOF:.*]] = arith.extf %[[SO]]
// CHECK: %[[G:.*]] = memref.load %{{.*}}[%[[T]]] : memref<?xf32>
// CHECK: %[[GV:.*]] = vector.broadcast %[[G]] : f32 to vector<8xf32>
// CHECK: %[[GATED:.*]] = arith.mulf %[[SOF]], %[[GV]]
// CHECK: %[[SUM:.*]] = arith.addf %[[ACC]], %[[GATED]]
// CHECK: %[[B:.*]] = vector.load %{{.*}}[%[[H]]] {{.*}} : memref<64xbf16>, vector<8xbf16>
// CHECK: %[[RND:.*]] = arith.truncf %[[SUM]] : vector<8xf32> to vector<8xbf16>
// CHECK: %[[RNDF:.*]] = arith.extf %[[RND]]
// CHECK: %[[BF:.*]] = arith.extf %[[B]]
// CHECK: %[[OUT:.*]] = arith.addf %[[RNDF]], %[[BF]]
// CHECK: %[[Y:.*]] = arith.truncf %[[OUT]] : vector<8xf32> to vector<8xbf16>
// CHECK: vector.store %[[Y]], %{{.*}}[%[[T]], %[[H]]]
gpu.module @k {
  gpu.func @combine(%d: memref<?x64xbf16>, %m: memref<?x2xi32>, %y: memref<?x64xbf16>, %so: memref<?x64xbf16>, %ss: memref<?xf32>, %ob: memref<64xbf16>) kernel {
    moegpu.combine %d, %m, %y shared(%so : memref<?x64xbf16>) shared_scale(%ss : memref<?xf32>) output_bias(%ob : memref<64xbf16>) : memref<?x64xbf16>, memref<?x2xi32>, memref<?x64xbf16>
    gpu.return
  }
}

// -----

// A row of 60 elements is not whole 16-byte chunks: one element a step.
// CHECK-LABEL: gpu.func @narrow
// CHECK: scf.for %[[H:.*]] = %{{.*}} to %c60{{[_0-9]*}} step %c128
// CHECK: memref.load %{{.*}} : memref<?x60xf16>
// CHECK: arith.extf %{{.*}} : f16 to f32
// CHECK: arith.truncf %{{.*}} : f32 to f16
// CHECK: memref.store
// CHECK-NOT: vector.
gpu.module @k {
  gpu.func @narrow(%d: memref<?x60xf16>, %m: memref<?x3xi32>, %y: memref<?x60xf16>) kernel {
    moegpu.combine %d, %m, %y : memref<?x60xf16>, memref<?x3xi32>, memref<?x60xf16>
    gpu.return
  }
}
