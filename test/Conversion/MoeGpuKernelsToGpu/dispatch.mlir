// RUN: moe-opt %s --convert-moegpu-kernels-to-gpu -split-input-file | FileCheck %s

// The scan: one CTA of 256 threads, each summing its run of segments'
// counts rounded up to the alignment, a Hillis-Steele scan of the threads'
// sums in shared memory (a barrier after the sums are stored, then
// log2(256) = 8 steps, a barrier before and after each one's write), then each thread's cursors and offsets[e + 1]; thread 0
// writes offsets[0] = 0 and the shared experts' [0, T].
// CHECK-LABEL: gpu.func @scan
// CHECK-SAME: workgroup(%[[SUMS:.*]] : memref<256xi32, #gpu.address_space<workgroup>>)
// CHECK: %[[TID:.*]] = gpu.thread_id x
// CHECK: scf.for
// CHECK: %[[C:.*]] = memref.load %{{.*}}[%{{.*}}] : memref<8xi32>
// CHECK: %[[UP:.*]] = arith.addi %[[C]], %c63_i32{{[_0-9]*}}
// CHECK: %[[Q:.*]] = arith.divui %[[UP]], %c64_i32{{[_0-9]*}}
// CHECK: arith.muli %[[Q]], %c64_i32{{[_0-9]*}}
// CHECK: memref.store %{{.*}}, %[[SUMS]][%[[TID]]]
// CHECK-COUNT-17: gpu.barrier
// CHECK-NOT: gpu.barrier
// CHECK: scf.for
// CHECK: memref.store %{{.*}}, %{{.*}}[%{{.*}}] : memref<8xi32>
// CHECK: memref.store %{{.*}}, %{{.*}}[%{{.*}}] : memref<9xi32>
// CHECK: scf.if
// CHECK: memref.store %c0_i32{{[_0-9]*}}, %{{.*}}[%c0{{[_0-9]*}}] : memref<9xi32>
// CHECK: memref.store %c0_i32{{[_0-9]*}}, %{{.*}}[%c0{{[_0-9]*}}] : memref<2xi32>
// CHECK: %[[T:.*]] = memref.dim %{{.*}}, %c0{{[_0-9]*}} : memref<?x2xi32>
// CHECK: %[[TI:.*]] = arith.index_cast %[[T]] : index to i32
// CHECK: memref.store %[[TI]], %{{.*}}[%c1{{[_0-9]*}}] : memref<2xi32>
gpu.module @k {
  gpu.func @scan(%i: memref<?x2xi32>, %c: memref<8xi32>, %o: memref<9xi32>, %cur: memref<8xi32>, %s: memref<2xi32>) kernel {
    moegpu.dispatch_scan %i, %c, %o, %cur shared(%s : memref<2xi32>) {alignment = 64} : memref<?x2xi32>, memref<8xi32>, memref<9xi32>, memref<8xi32>
    gpu.return
  }
}

// -----

// The scatter: one CTA per assignment (block id = t * k + j), none past
// the tokens; thread 0 takes the row from the expert's cursor (an atomic
// add) when the id is in [0, experts), else -1, and shares it through
// shared memory; the CTA's threads copy the token's row in 16-byte vectors
// (8 bf16) of the row.
// CHECK-LABEL: gpu.func @scatter
// CHECK-SAME: workgroup(%[[POS:.*]] : memref<1xi32, #gpu.address_space<workgroup>>)
// CHECK: %[[I:.*]] = gpu.block_id x
// CHECK: %[[T:.*]] = arith.divui %[[I]], %c2{{[_0-9]*}}
// CHECK: %[[TOKENS:.*]] = memref.dim %{{.*}}, %c0{{[_0-9]*}} : memref<?x2xi32>
// CHECK: %[[LIVE:.*]] = arith.cmpi ult, %[[T]], %[[TOKENS]]
// CHECK: scf.if %[[LIVE]] {
// CHECK: arith.remui %[[I]], %c2{{[_0-9]*}}
// CHECK: %[[ID:.*]] = memref.load %{{.*}} : memref<?x2xi32>
// CHECK-DAG: arith.cmpi sge, %[[ID]], %c0_i32{{[_0-9]*}}
// CHECK-DAG: arith.cmpi slt, %[[ID]], %c8_i32{{[_0-9]*}}
// CHECK: %[[ROW:.*]] = scf.if %{{.*}} -> (i32)
// CHECK: %[[P:.*]] = memref.atomic_rmw addi %c1_i32{{[_0-9]*}}, %{{.*}} : (i32, memref<8xi32>) -> i32
// CHECK: memref.load %{{.*}} : memref<?x2xf32>
// CHECK: memref.store %{{.*}}, %{{.*}} : memref<?xf32>
// CHECK: scf.yield %[[P]] : i32
// CHECK: } else {
// CHECK: scf.yield %c-1_i32{{[_0-9]*}} : i32
// CHECK: memref.store %[[ROW]], %{{.*}} : memref<?x2xi32>
// CHECK: memref.store %[[ROW]], %[[POS]]
// CHECK: gpu.barrier
// CHECK: vector.load %{{.*}} : memref<?x64xbf16>, vector<8xbf16>
// CHECK: vector.store %{{.*}} : memref<?x64xbf16>, vector<8xbf16>
gpu.module @k {
  gpu.func @scatter(%x: memref<?x64xbf16>, %i: memref<?x2xi32>, %w: memref<?x2xf32>, %cur: memref<8xi32>, %r: memref<?x64xbf16>, %m: memref<?x2xi32>, %rw: memref<?xf32>) kernel {
    moegpu.dispatch_scatter %x, %i, %w, %cur, %r, %m, %rw {experts = 8} : memref<?x64xbf16>, memref<?x2xi32>, memref<?x2xf32>, memref<8xi32>, memref<?x64xbf16>, memref<?x2xi32>, memref<?xf32>
    gpu.return
  }
}

// -----

// Chunked (two token chunks): the segment is chunk * experts + expert,
// the chunk ((t + 1) * 2 - 1) / T.
// CHECK-LABEL: gpu.func @chunked
// CHECK: %[[T1:.*]] = arith.addi %{{.*}}, %c1{{[_0-9]*}}
// CHECK: %[[S:.*]] = arith.muli %[[T1]], %c2{{[_0-9]*}}
// CHECK: %[[S1:.*]] = arith.subi %[[S]], %c1{{[_0-9]*}}
// CHECK: %[[CH:.*]] = arith.divui %[[S1]], %{{.*}}
// CHECK: %[[BASE:.*]] = arith.muli %[[CH]], %c4{{[_0-9]*}}
// CHECK: arith.addi %[[BASE]], %{{.*}}
// CHECK: memref.atomic_rmw addi %c1_i32{{[_0-9]*}}, %{{.*}} : (i32, memref<8xi32>) -> i32
// FP8 codes: a row is 16-byte vectors of e4m3 codes, then its scales.
// CHECK: vector.load %{{.*}} : memref<?x64xf8E4M3FN>, vector<16xf8E4M3FN>
// CHECK: vector.store %{{.*}} : memref<?x64xf8E4M3FN>, vector<16xf8E4M3FN>
// CHECK: memref.load %{{.*}} : memref<?x1xf32>
// CHECK: memref.store %{{.*}} : memref<?x1xf32>
gpu.module @k {
  gpu.func @chunked(%xq: memref<?x64xf8E4M3FN>, %i: memref<?x2xi32>, %w: memref<?x2xf32>, %cur: memref<8xi32>, %rq: memref<?x64xf8E4M3FN>, %m: memref<?x2xi32>, %rw: memref<?xf32>, %xs: memref<?x1xf32>, %rs: memref<?x1xf32>) kernel {
    moegpu.dispatch_scatter %xq, %i, %w, %cur, %rq, %m, %rw scales(%xs, %rs : memref<?x1xf32>, memref<?x1xf32>) {experts = 4, chunks = 2} : memref<?x64xf8E4M3FN>, memref<?x2xi32>, memref<?x2xf32>, memref<8xi32>, memref<?x64xf8E4M3FN>, memref<?x2xi32>, memref<?xf32>
    gpu.return
  }
}
