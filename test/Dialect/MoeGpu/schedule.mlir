// RUN: moe-opt %s | moe-opt | FileCheck %s

// The typed schedule round-trips: buffers with their run-time dimensions
// and sources, and every kind of step.
// CHECK-LABEL: moegpu.program {
// CHECK: moegpu.buffer @x : memref<?x8xbf16> dims [#moegpu.dim<tokens>] source "input"
// CHECK: moegpu.buffer @rows : memref<?x8xbf16> dims [#moegpu.dim<rows>] source "scratch"
// CHECK: moegpu.buffer @ep_rows : memref<?x8xbf16> dims [#moegpu.dim<received_rows>] source "scratch"
// CHECK: moegpu.buffer @w13 : memref<4x32x8xbf16> dims [] source "pack:gate_weight,up_weight"
// CHECK: moegpu.buffer @loss : memref<1xf32> dims [] source "arg:loss"
// CHECK: moegpu.schedule "forward" {
// CHECK-NEXT: moegpu.memset @rows
// CHECK-NEXT: moegpu.launch @kernels::@copy [@x, @rows] grid <tokens, per_block = 4> block 128
// CHECK-NEXT: moegpu.launch @kernels::@copy [@x, @rows] grid <fixed, size = 132> block 0
// CHECK-NEXT: moegpu.launch @kernels::@copy [@x, @rows] grid <rows> block 128
// CHECK-NEXT: moegpu.exchange <dispatch_rows> [@rows, @ep_rows]
// CHECK-NEXT: moegpu.exchange <dispatch_plan> [@offsets, @ep_offsets, @groups0, @groups1]
// CHECK-NEXT: moegpu.exchange <dispatch_rows> [@rows, @ep_rows] {chunk = 1 : i64}
// CHECK-NEXT: moegpu.launch @kernels::@copy [@x, @rows] grid <rows> block 128 {chunk = 1 : i64}
// CHECK-NEXT: moegpu.all_reduce [@loss]
// CHECK: moegpu.schedule "train" {
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @copy(%a: memref<?x8xbf16>, %b: memref<?x8xbf16>) kernel {
      gpu.return
    }
  }
  moegpu.program {
    moegpu.buffer @x : memref<?x8xbf16> dims [#moegpu.dim<tokens>] source "input"
    moegpu.buffer @rows : memref<?x8xbf16> dims [#moegpu.dim<rows>] source "scratch"
    moegpu.buffer @ep_rows : memref<?x8xbf16> dims [#moegpu.dim<received_rows>] source "scratch"
    moegpu.buffer @w13 : memref<4x32x8xbf16> dims [] source "pack:gate_weight,up_weight"
    moegpu.buffer @loss : memref<1xf32> dims [] source "arg:loss"
    moegpu.buffer @offsets : memref<17xi32> dims [] source "scratch"
    moegpu.buffer @ep_offsets : memref<18xi32> dims [] source "scratch"
    moegpu.buffer @groups0 : memref<5xi32> dims [] source "scratch"
    moegpu.buffer @groups1 : memref<5xi32> dims [] source "scratch"
    moegpu.schedule "forward" {
      moegpu.memset @rows
      moegpu.launch @kernels::@copy [@x, @rows] grid <tokens, per_block = 4> block 128
      moegpu.launch @kernels::@copy [@x, @rows] grid <fixed, size = 132> block 0
      moegpu.launch @kernels::@copy [@x, @rows] grid <rows> block 128
      moegpu.exchange <dispatch_rows> [@rows, @ep_rows]
      moegpu.exchange <dispatch_plan> [@offsets, @ep_offsets, @groups0, @groups1]
      moegpu.exchange <dispatch_rows> [@rows, @ep_rows] {chunk = 1 : i64}
      moegpu.launch @kernels::@copy [@x, @rows] grid <rows> block 128 {chunk = 1 : i64}
      moegpu.all_reduce [@loss]
    }
    moegpu.schedule "train" {
      moegpu.memset @loss
    }
  }
}
