// RUN: moe-opt %s --convert-moegpu-kernels-to-gpu | FileCheck %s

// One warp per row (8 rows a CTA), the rows of the offsets' groups only
// (from offsets[0] to offsets[G]); per block of 128 channels each lane
// takes four, the block's largest magnitude is a butterfly max over the
// lanes, floored at 1e-4; the codes are v * 448 / amax converted by
// cvt.rn.satfinite (two a time, the second operand first), stored by
// lanes inside the row; lane 0 stores the scale amax / 448.
// CHECK-LABEL: gpu.func @quantize
// CHECK: %[[FIRST:.*]] = memref.load %{{.*}}[%c0{{[_0-9]*}}] : memref<9xi32>
// CHECK: %[[LAST:.*]] = memref.load %{{.*}}[%c8{{[_0-9]*}}] : memref<9xi32>
// CHECK: %[[END:.*]] = arith.index_cast %[[LAST]]
// CHECK: arith.cmpi ult, %[[ROW:.*]], %[[END]]
// CHECK: scf.for %[[KB:.*]] = %c0{{[_0-9]*}} to %c2{{[_0-9]*}} step
// CHECK: math.absf
// CHECK: gpu.shuffle xor %{{.*}}, %c16_i32
// CHECK: gpu.shuffle xor %{{.*}}, %c1_i32
// CHECK: %[[AMAX:.*]] = arith.maximumf %{{.*}}, %[[FLOOR:cst.*]] : f32
// CHECK: %[[INV:.*]] = arith.divf %[[C448:cst.*]], %[[AMAX]] : f32
// CHECK: nvvm.convert.f32x2.to.f8x2 {{.*}} {rnd = #nvvm.fp_rnd_mode<rn>, sat = #nvvm.sat_mode<satfinite>} : vector<2xi8>(f8E4M3FN)
// CHECK: nvvm.convert.f32x2.to.f8x2
// CHECK: vector.shuffle {{.*}} [0, 1, 2, 3] : vector<2xi8>, vector<2xi8>
// CHECK: vector.store %{{.*}}, %{{.*}} {alignment = 4 : i64} : memref<?x256xf8E4M3FN>, vector<4xf8E4M3FN>
// CHECK: %[[SCALE:.*]] = arith.divf %[[AMAX]], %{{.*}} : f32
// CHECK: memref.store %[[SCALE]], %{{.*}}[%[[ROW2:.*]], %[[KB]]] : memref<?x2xf32>
gpu.module @k {
  gpu.func @quantize(%a: memref<?x256xbf16>, %q: memref<?x256xf8E4M3FN>, %s: memref<?x2xf32>, %o: memref<9xi32>) kernel {
    moegpu.quantize %a, %q, %s offsets(%o : memref<9xi32>) : memref<?x256xbf16>, memref<?x256xf8E4M3FN>, memref<?x2xf32>
    gpu.return
  }
}
