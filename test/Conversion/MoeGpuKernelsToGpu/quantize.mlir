// RUN: moe-opt %s --convert-moegpu-kernels-to-gpu | FileCheck %s
// The umbrella pass on kernels alone (it loads the math dialect the
// quantizations build in): no kernel op is left.
// RUN: moe-opt %s --moegpu-lower-kernels | FileCheck %s --check-prefix=UMBRELLA
// UMBRELLA-LABEL: gpu.func @quantize(
// UMBRELLA-NOT: moegpu.
// UMBRELLA: gpu.func @quantize_columns(
// UMBRELLA-NOT: moegpu.
// UMBRELLA: gpu.func @quantize_blocks(
// UMBRELLA-NOT: moegpu.

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

// 128 x 1 tiles, transposed: a CTA of 128 threads takes 128 rows (from
// offsets[0] on, up to offsets[G]) of 32 columns (ceil(72 / 32) = 3 column
// tiles); warp w reads rows w, w + 4, ... of its lane's column (the last
// column's index for lanes past 72, their values zeroed) into a padded
// column-major shared tile (129 floats a column), keeping the column's
// largest magnitude; after the barrier each warp takes columns w, w + 4,
// ...: the four warps' maxima floored at 1e-4, and per lane four rows'
// codes stored as one 4-byte vector into the transposed output, the
// scale by lane 0 at the block's row / 128.
// CHECK-LABEL: gpu.func @quantize_columns
// CHECK-SAME: workgroup(%[[TILE:.*]] : memref<4128xf32, #gpu.address_space<workgroup>>, %[[PART:.*]] : memref<4x32xf32, #gpu.address_space<workgroup>>)
// CHECK: arith.remui %{{.*}}, %c3{{[_0-9]*}} : index
// CHECK: %[[FIRST:.*]] = memref.load %{{.*}}[%c0{{[_0-9]*}}] : memref<5xi32>
// CHECK: %[[LAST:.*]] = memref.load %{{.*}}[%c4{{[_0-9]*}}] : memref<5xi32>
// CHECK: scf.if
// CHECK: arith.minui %{{.*}}, %c71{{[_0-9]*}} : index
// CHECK: scf.for %[[R:.*]] = %{{.*}} to %c128{{[_0-9]*}} step %c4{{[_0-9]*}} iter_args
// CHECK: memref.load %{{.*}} : memref<?x72xbf16>
// CHECK: arith.select
// CHECK: memref.store %{{.*}}, %[[TILE]][%{{.*}}] : memref<4128xf32, #gpu.address_space<workgroup>>
// CHECK: math.absf
// CHECK: arith.maximumf
// CHECK: memref.store %{{.*}}, %[[PART]][%{{.*}}, %{{.*}}] : memref<4x32xf32, #gpu.address_space<workgroup>>
// CHECK: gpu.barrier
// CHECK: scf.for %{{.*}} = %{{.*}} to %c32{{[_0-9]*}} step %c4{{[_0-9]*}}
// CHECK: arith.constant 9.99999974E-5 : f32
// CHECK-COUNT-4: memref.load %[[PART]]
// CHECK: arith.divf
// CHECK-COUNT-4: memref.load %[[TILE]]
// CHECK: nvvm.convert.f32x2.to.f8x2 {{.*}} {rnd = #nvvm.fp_rnd_mode<rn>, sat = #nvvm.sat_mode<satfinite>}
// CHECK: nvvm.convert.f32x2.to.f8x2
// CHECK: vector.store %{{.*}}, %{{.*}} {alignment = 4 : i64} : memref<72x?xf8E4M3FN>, vector<4xf8E4M3FN>
// CHECK: memref.store %{{.*}} : memref<72x?xf32>
gpu.module @columns {
  gpu.func @quantize_columns(%a: memref<?x72xbf16>, %q: memref<72x?xf8E4M3FN>, %s: memref<72x?xf32>, %o: memref<5xi32>) kernel {
    moegpu.quantize_columns %a, %q, %s, %o : memref<?x72xbf16>, memref<72x?xf8E4M3FN>, memref<72x?xf32>, memref<5xi32>
    gpu.return
  }
}

// 128 x 128 blocks, one CTA of 256 threads each (block index: matrix,
// row block, column block, the last fastest): sixteen 16-byte loads a
// thread (rows w + 8 p, columns 4 l .. 4 l + 3; zeros outside), the
// block's maximum by a vector reduction, a butterfly and the eight warps'
// through shared memory; a block of zeros gets the scale 1 (and an
// inverse of 1). Each row's four codes one 4-byte store; with the
// transposed codes, bytes into a 132-byte-pitch shared tile, a barrier,
// and 4-byte reads of its columns stored as rows of the transposed output.
// CHECK-LABEL: gpu.func @quantize_blocks
// CHECK-SAME: workgroup(%[[MAX:.*]] : memref<8xf32, #gpu.address_space<workgroup>>, %[[T:.*]] : memref<16896xi8, #gpu.address_space<workgroup>>)
// CHECK-COUNT-16: vector.load %{{.*}} {alignment = 16 : i64} : memref<2x200x136xf32>, vector<4xf32>
// CHECK: gpu.shuffle xor %{{.*}}, %c16_i32
// CHECK: memref.store %{{.*}}, %[[MAX]]
// CHECK: gpu.barrier
// CHECK: arith.cmpf olt, %{{.*}}, %cst{{.*}} : f32
// CHECK: memref.store %{{.*}} : memref<2x2x2xf32>
// CHECK: nvvm.convert.f32x2.to.f8x2
// CHECK: vector.store %{{.*}} {alignment = 4 : i64} : memref<2x200x136xf8E4M3FN>, vector<4xf8E4M3FN>
// CHECK: memref.store %{{.*}}, %[[T]]
// CHECK: gpu.barrier
// CHECK: vector.load %[[T]]
// CHECK: vector.store %{{.*}} {alignment = 4 : i64} : memref<2x136x200xf8E4M3FN>, vector<4xf8E4M3FN>
gpu.module @blocks {
  gpu.func @quantize_blocks(%w: memref<2x200x136xf32>, %q: memref<2x200x136xf8E4M3FN>, %s: memref<2x2x2xf32>, %t: memref<2x136x200xf8E4M3FN>) kernel {
    moegpu.quantize_blocks %w, %q, %s transposed(%t : memref<2x136x200xf8E4M3FN>) : memref<2x200x136xf32>, memref<2x200x136xf8E4M3FN>, memref<2x2x2xf32>
    gpu.return
  }
}
