// RUN: moe-opt %s --convert-moegpu-kernels-to-gpu -split-input-file | FileCheck %s

// The device-initiated exchange's memory model, in order. ep_counts: the
// sizes go to every rank's table by plain stores at the peer's address
// (this rank's address plus the distance in peers), a barrier, then thread
// 0 fences at system scope and stores each rank's flag with a release;
// the threads below `ranks` spin on the flags with acquire loads, reading
// %globaltimer against the limit (peers[ranks + 1]) and sleeping between
// tries; a barrier; the capacity check (peers[ranks + 2]) and the layouts.
// CHECK-LABEL: gpu.func @counts
// CHECK: gpu.barrier
// CHECK: scf.if
// CHECK: memref.extract_aligned_pointer_as_index %{{.*}} : memref<16xi32>
// CHECK: scf.for
// CHECK: memref.load %{{.*}} : memref<5xi64>
// CHECK: llvm.inttoptr
// CHECK: llvm.store %{{.*}}, %{{.*}} : i32, !llvm.ptr
// CHECK: gpu.barrier
// CHECK: llvm.inline_asm has_side_effects "fence.acq_rel.sys;"
// CHECK: scf.for
// CHECK: llvm.inline_asm has_side_effects "st.release.sys.global.u32 [$0], $1;", "l,r"
// CHECK: %[[START:.*]] = llvm.inline_asm has_side_effects "mov.u64 $0, %globaltimer;", "=l"
// CHECK: scf.while
// CHECK: llvm.inline_asm has_side_effects "ld.acquire.sys.global.u32 $0, [$1];", "=r,l"
// CHECK: arith.cmpi sge
// CHECK: llvm.inline_asm has_side_effects "mov.u64 $0, %globaltimer;"
// CHECK: arith.subi %{{.*}}, %[[START]] : i64
// CHECK: scf.condition
// CHECK: llvm.inline_asm has_side_effects "nanosleep.u32 256;"
// CHECK: memref.store %c1_i32{{[_0-9]*}}, %{{.*}}[%c0{{[_0-9]*}}] : memref<2xi32>
// CHECK: gpu.barrier
// CHECK: memref.load %{{.*}}[%c4{{[_0-9]*}}] : memref<5xi64>
// CHECK: arith.cmpi sgt
// CHECK: memref.store %c4_i32{{[_0-9]*}}, %{{.*}}[%c0{{[_0-9]*}}] : memref<2xi32>
// CHECK: gpu.barrier
gpu.module @k {
  gpu.func @counts(%o: memref<9xi32>, %t: memref<16xi32>, %f: memref<4xi32>, %e: memref<1xi32>, %p: memref<5xi64>,
                   %eo: memref<9xi32>, %g: memref<5xi32>, %s: memref<8xi32>, %b: memref<8xi32>, %st: memref<2xi32>) kernel {
    moegpu.ep_counts %o, %t, %f, %e, %p, %eo, %s, %b, %st groups(%g : memref<5xi32>) {ranks = 2 : i64}
      : memref<9xi32>, memref<16xi32>, memref<4xi32>, memref<1xi32>, memref<5xi64>, memref<9xi32>, memref<8xi32>, memref<8xi32>, memref<2xi32>
    gpu.return
  }
}

// -----

// ep_send: nothing after a failed wait; a warp a row, 16-byte loads of
// the row and 16-byte stores at the destination rank's address (rows of
// 128 bytes: 8 chunks), lane 0 the weight; then a barrier, and thread 0
// fences and adds 1 to the slot's flag (word 2, byte 8) of every rank
// with a release.
// CHECK-LABEL: gpu.func @send
// CHECK: %[[FAILED:.*]] = arith.cmpi ne
// CHECK: scf.if %[[FAILED]]
// CHECK: } else {
// CHECK: scf.for
// CHECK: scf.for
// CHECK: llvm.load %{{.*}} {alignment = 16 : i64} : !llvm.ptr -> vector<4xi32>
// CHECK: llvm.store %{{.*}}, %{{.*}} {alignment = 16 : i64} : vector<4xi32>, !llvm.ptr
// CHECK: llvm.store %{{.*}}, %{{.*}} {alignment = 4 : i64} : f32, !llvm.ptr
// CHECK: gpu.barrier
// CHECK: arith.addi %{{.*}}, %c8_i64
// CHECK: llvm.inline_asm has_side_effects "fence.acq_rel.sys;"
// CHECK: scf.for
// CHECK: llvm.inline_asm has_side_effects "red.release.sys.global.add.u32 [$0], $1;", "l,r" %{{.*}}, %c1_i32
gpu.module @k {
  gpu.func @send(%o: memref<9xi32>, %pos: memref<8xi32>, %r: memref<?x64xbf16>, %to: memref<?x64xbf16>,
                 %w: memref<?xf32>, %tw: memref<?xf32>, %f: memref<4xi32>, %st: memref<2xi32>, %p: memref<5xi64>) kernel {
    moegpu.ep_send <dispatch> %o, %pos, %r, %to, weights(%w, %tw : memref<?xf32>, memref<?xf32>), %f, %st, %p {ranks = 2 : i64, slot = 2 : i64}
      : memref<9xi32>, memref<8xi32>, memref<?x64xbf16>, memref<?x64xbf16>, memref<4xi32>, memref<2xi32>, memref<5xi64>
    gpu.return
  }
}

// -----

// Rows of 6 bytes (3 bf16): 2-byte accesses. No weights: no f32 store.
// CHECK-LABEL: gpu.func @narrow
// CHECK: llvm.load %{{.*}} {alignment = 2 : i64} : !llvm.ptr -> i16
// CHECK: llvm.store %{{.*}}, %{{.*}} {alignment = 2 : i64} : i16, !llvm.ptr
// CHECK-NOT: f32
// CHECK: gpu.barrier
gpu.module @k {
  gpu.func @narrow(%o: memref<9xi32>, %pos: memref<8xi32>, %r: memref<?x3xbf16>, %to: memref<?x3xbf16>,
                   %f: memref<4xi32>, %st: memref<2xi32>, %p: memref<5xi64>) kernel {
    moegpu.ep_send <combine> %o, %pos, %r, %to, %f, %st, %p {ranks = 2 : i64, slot = 3 : i64}
      : memref<9xi32>, memref<8xi32>, memref<?x3xbf16>, memref<?x3xbf16>, memref<4xi32>, memref<2xi32>, memref<5xi64>
    gpu.return
  }
}

// -----

// ep_wait: thread 0, unless a wait failed before, adds ranks * senders
// (2 * 20) to its count of the slot's signals (waited[3]) and spins until
// the slot's flag (word 3, byte 12) reaches it, then stores its code and
// slot on a timeout.
// CHECK-LABEL: gpu.func @wait
// CHECK: scf.if
// CHECK: scf.if
// CHECK: %[[WAITED:.*]] = memref.load %[[W:.*]][%c3{{[_0-9]*}}] : memref<4xi32>
// CHECK: %[[TARGET:.*]] = arith.addi %[[WAITED]], %c40_i32
// CHECK: memref.store %[[TARGET]], %[[W]][%c3{{[_0-9]*}}] : memref<4xi32>
// CHECK: arith.addi %{{.*}}, %c12_i64
// CHECK: scf.while
// CHECK: %[[SEEN:.*]] = llvm.inline_asm has_side_effects "ld.acquire.sys.global.u32 $0, [$1];"
// The counters wrap: compared as serial numbers, seen - target >= 0.
// CHECK: %[[AHEAD:.*]] = arith.subi %[[SEEN]], %[[TARGET]] : i32
// CHECK: arith.cmpi sge, %[[AHEAD]], %c0_i32
// CHECK: memref.store %c5_i32{{[_0-9]*}}, %{{.*}}[%c0{{[_0-9]*}}] : memref<2xi32>
// CHECK: memref.store %c3_i32{{[_0-9]*}}, %{{.*}}[%c1{{[_0-9]*}}] : memref<2xi32>
gpu.module @k {
  gpu.func @wait(%f: memref<4xi32>, %e: memref<4xi32>, %st: memref<2xi32>, %p: memref<5xi64>) kernel {
    moegpu.ep_wait %f, %e, %st, %p {ranks = 2 : i64, slot = 3 : i64, senders = 20 : i64, code = 5 : i64}
      : memref<4xi32>, memref<4xi32>, memref<2xi32>, memref<5xi64>
    gpu.return
  }
}
