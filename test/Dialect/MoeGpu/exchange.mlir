// RUN: moe-opt %s | moe-opt | FileCheck %s
// RUN: moe-opt %s -mlir-print-op-generic | moe-opt | FileCheck %s

// The device-initiated exchange's kernel ops round-trip: 2 ranks, 8
// experts (4 a rank), rows of 64 bf16.
gpu.module @k {
  // CHECK-LABEL: gpu.func @counts
  // CHECK: moegpu.ep_counts %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} groups(%{{.*}} : memref<5xi32>) {ranks = 2 : i64} : memref<9xi32>, memref<16xi32>, memref<4xi32>, memref<1xi32>, memref<5xi64>, memref<9xi32>, memref<8xi32>, memref<8xi32>, memref<2xi32>
  gpu.func @counts(%o: memref<9xi32>, %t: memref<16xi32>, %f: memref<4xi32>, %e: memref<1xi32>, %p: memref<5xi64>,
                   %eo: memref<9xi32>, %g: memref<5xi32>, %s: memref<8xi32>, %b: memref<8xi32>, %st: memref<2xi32>) kernel {
    moegpu.ep_counts %o, %t, %f, %e, %p, %eo, %s, %b, %st groups(%g : memref<5xi32>) {ranks = 2 : i64}
      : memref<9xi32>, memref<16xi32>, memref<4xi32>, memref<1xi32>, memref<5xi64>, memref<9xi32>, memref<8xi32>, memref<8xi32>, memref<2xi32>
    gpu.return
  }
  // CHECK-LABEL: gpu.func @send
  // CHECK: moegpu.ep_send <dispatch> %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, weights(%{{.*}}, %{{.*}} : memref<?xf32>, memref<?xf32>), %{{.*}}, %{{.*}}, %{{.*}} {ranks = 2 : i64, slot = 2 : i64}
  // CHECK: moegpu.ep_send <combine> %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {ranks = 2 : i64, slot = 3 : i64}
  gpu.func @send(%o: memref<9xi32>, %pos: memref<8xi32>, %r: memref<?x64xbf16>, %to: memref<?x64xbf16>,
                 %w: memref<?xf32>, %tw: memref<?xf32>, %f: memref<4xi32>, %st: memref<2xi32>, %p: memref<5xi64>) kernel {
    moegpu.ep_send <dispatch> %o, %pos, %r, %to, weights(%w, %tw : memref<?xf32>, memref<?xf32>), %f, %st, %p {ranks = 2 : i64, slot = 2 : i64}
      : memref<9xi32>, memref<8xi32>, memref<?x64xbf16>, memref<?x64xbf16>, memref<4xi32>, memref<2xi32>, memref<5xi64>
    moegpu.ep_send <combine> %o, %pos, %to, %r, %f, %st, %p {ranks = 2 : i64, slot = 3 : i64}
      : memref<9xi32>, memref<8xi32>, memref<?x64xbf16>, memref<?x64xbf16>, memref<4xi32>, memref<2xi32>, memref<5xi64>
    gpu.return
  }
  // CHECK-LABEL: gpu.func @wait
  // CHECK: moegpu.ep_wait %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {code = 2 : i64, ranks = 2 : i64, senders = 20 : i64, slot = 2 : i64} : memref<4xi32>, memref<4xi32>, memref<2xi32>, memref<5xi64>
  gpu.func @wait(%f: memref<4xi32>, %e: memref<4xi32>, %st: memref<2xi32>, %p: memref<5xi64>) kernel {
    moegpu.ep_wait %f, %e, %st, %p {ranks = 2 : i64, slot = 2 : i64, senders = 20 : i64, code = 2 : i64}
      : memref<4xi32>, memref<4xi32>, memref<2xi32>, memref<5xi64>
    gpu.return
  }
  // In 2 token chunks: every chunk's sizes and layouts (a group offsets
  // buffer a chunk), and chunk 1's sends on its own flags.
  // CHECK-LABEL: gpu.func @chunked
  // CHECK: moegpu.ep_counts {{.*}} groups(%{{.*}}, %{{.*}} : memref<5xi32>, memref<5xi32>) {ranks = 2 : i64} : memref<17xi32>, memref<32xi32>
  // CHECK: moegpu.ep_send <dispatch> {{.*}} {chunk = 1 : i64, chunks = 2 : i64, ranks = 2 : i64, slot = 6 : i64}
  // CHECK: moegpu.ep_send <combine> {{.*}} {chunk = 1 : i64, chunks = 2 : i64, ranks = 2 : i64, slot = 7 : i64}
  gpu.func @chunked(%o: memref<17xi32>, %t: memref<32xi32>, %f: memref<8xi32>, %e: memref<1xi32>, %p: memref<5xi64>,
                    %eo: memref<18xi32>, %g0: memref<5xi32>, %g1: memref<5xi32>, %s: memref<16xi32>, %b: memref<16xi32>,
                    %st: memref<2xi32>, %r: memref<?x64xbf16>, %to: memref<?x64xbf16>) kernel {
    moegpu.ep_counts %o, %t, %f, %e, %p, %eo, %s, %b, %st groups(%g0, %g1 : memref<5xi32>, memref<5xi32>) {ranks = 2 : i64}
      : memref<17xi32>, memref<32xi32>, memref<8xi32>, memref<1xi32>, memref<5xi64>, memref<18xi32>, memref<16xi32>, memref<16xi32>, memref<2xi32>
    moegpu.ep_send <dispatch> %o, %s, %r, %to, %f, %st, %p {ranks = 2 : i64, slot = 6 : i64, chunk = 1 : i64, chunks = 2 : i64}
      : memref<17xi32>, memref<16xi32>, memref<?x64xbf16>, memref<?x64xbf16>, memref<8xi32>, memref<2xi32>, memref<5xi64>
    moegpu.ep_send <combine> %eo, %b, %to, %r, %f, %st, %p {ranks = 2 : i64, slot = 7 : i64, chunk = 1 : i64, chunks = 2 : i64}
      : memref<18xi32>, memref<16xi32>, memref<?x64xbf16>, memref<?x64xbf16>, memref<8xi32>, memref<2xi32>, memref<5xi64>
    gpu.return
  }
}
