// RUN: moe-opt %s -split-input-file -moegpu-tokens-from-memory -verify-diagnostics | FileCheck %s

// Kernels launched on token-sized buffers read the count from @tokens,
// passed after the buffers and before the tensor-map pointers (whose
// records move up by one); their token-sized arguments get that many rows
// (a token dimension inside the shape makes the strides before it
// dynamic). Dimensions of other kinds keep the launch's sizes; kernels
// without token-sized buffers are left alone.

// A persistent grid: no guard (the kernel's tile loop has the count).
// CHECK-LABEL: gpu.func @rows
// CHECK-SAME: (%[[X:.*]]: memref<?x64xbf16>, %{{.*}}: memref<16x64xbf16>, %[[Y:.*]]: memref<?x16xf32>, %[[WORD:.*]]: memref<1xi32>, %{{.*}}: !llvm.ptr)
// CHECK-SAME: #moegpu.tensor_map<arg = 4, source = 0
// CHECK: %[[LOADED:.*]] = memref.load %[[WORD]][%{{.*}}] : memref<1xi32>
// CHECK: %[[T:.*]] = arith.index_castui %[[LOADED]] : i32 to index
// CHECK: memref.reinterpret_cast %[[X]] to offset: [0], sizes: [%[[T]], 64], strides: [64, 1] : memref<?x64xbf16> to memref<?x64xbf16>
// CHECK: %[[Y1:.*]] = memref.reinterpret_cast %[[Y]] to offset: [0], sizes: [%[[T]], 16], strides: [16, 1]
// CHECK: memref.dim %[[Y1]], %{{.*}} : memref<?x16xf32>
// CHECK-NOT: gpu.block_id

// On a grid of tokens, 4 a CTA: a CTA past the count returns.
// CHECK-LABEL: gpu.func @split
// CHECK-SAME: (%[[P:.*]]: memref<2x?x16xf32>, %[[R:.*]]: memref<?x8xf32>, %[[WORD:.*]]: memref<1xi32>)
// CHECK: %[[T:.*]] = arith.index_castui
// CHECK: %[[BLOCK:.*]] = gpu.block_id x
// CHECK: %[[FOUR:.*]] = arith.constant 4 : index
// CHECK: %[[FIRST:.*]] = arith.muli %[[BLOCK]], %[[FOUR]] : index
// CHECK: %[[PAST:.*]] = arith.cmpi uge, %[[FIRST]], %[[T]] : index
// CHECK: cf.cond_br %[[PAST]], ^[[DONE:.*]], ^[[BODY:[a-z0-9]*]]
// CHECK: ^[[DONE]]:
// CHECK-NEXT: gpu.return
// CHECK: ^[[BODY]]:
// CHECK: %[[STRIDE:.*]] = arith.muli %{{.*}}, %[[T]] : index
// CHECK-NOT: arith.muli
// CHECK: %[[P1:.*]] = memref.reinterpret_cast %[[P]] to offset: [0], sizes: [2, %[[T]], 16], strides: [%[[STRIDE]], 16, 1]
// CHECK: memref.dim %[[P1]]
// CHECK: memref.dim %[[R]]

// CHECK-LABEL: gpu.func @fixed
// CHECK-SAME: (%{{.*}}: memref<16xi32>) kernel {
// CHECK-NEXT: gpu.return

// CHECK: moegpu.buffer @tokens : memref<1xi32> dims [] source "tokens"
// CHECK: moegpu.launch @k::@rows [@x, @w, @y, @tokens] grid <persistent>
// CHECK: moegpu.launch @k::@split [@p, @r, @tokens] grid <tokens, per_block = 4>
// CHECK: moegpu.launch @k::@fixed [@c] grid <one>
module attributes {gpu.container_module} {
  gpu.module @k {
    gpu.func @rows(%x: memref<?x64xbf16>, %w: memref<16x64xbf16>, %y: memref<?x16xf32>, %map: !llvm.ptr) kernel attributes {moegpu.tensor_maps = [#moegpu.tensor_map<arg = 3, source = 0, view = [-1, 64], box = [128, 64], swizzle = 128>]} {
      %c0 = arith.constant 0 : index
      %n = memref.dim %y, %c0 : memref<?x16xf32>
      %i = arith.index_cast %n : index to i32
      gpu.return
    }
    gpu.func @split(%p: memref<2x?x16xf32>, %r: memref<?x8xf32>) kernel {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %n = memref.dim %p, %c1 : memref<2x?x16xf32>
      %m = memref.dim %r, %c0 : memref<?x8xf32>
      gpu.return
    }
    gpu.func @fixed(%a: memref<16xi32>) kernel {
      gpu.return
    }
  }
  moegpu.program {
    moegpu.buffer @x : memref<?x64xbf16> dims [#moegpu.dim<tokens>] source "input"
    moegpu.buffer @w : memref<16x64xbf16> dims [] source "param:router_weight"
    moegpu.buffer @y : memref<?x16xf32> dims [#moegpu.dim<tokens>] source "scratch"
    moegpu.buffer @p : memref<2x?x16xf32> dims [#moegpu.dim<tokens>] source "scratch"
    moegpu.buffer @r : memref<?x8xf32> dims [#moegpu.dim<rows>] source "scratch"
    moegpu.buffer @c : memref<16xi32> dims [] source "scratch"
    moegpu.schedule "forward" {
      moegpu.launch @k::@rows [@x, @w, @y] grid <persistent> block 0
      moegpu.launch @k::@split [@p, @r] grid <tokens, per_block = 4> block 128
      moegpu.launch @k::@fixed [@c] grid <one> block 32
    }
  }
}

// -----

// A kernel on a grid of the token count needs a token-sized buffer.
module attributes {gpu.container_module} {
  gpu.module @k {
    gpu.func @blind(%a: memref<16xi32>) kernel {
      gpu.return
    }
  }
  moegpu.program {
    moegpu.buffer @c : memref<16xi32> dims [] source "scratch"
    moegpu.schedule "forward" {
      // expected-error @+1 {{launches kernel @k::@blind on a grid of the token count, but passes it no token-sized buffer: it could not tell the live tokens from its grid's}}
      moegpu.launch @k::@blind [@c] grid <tokens, per_block = 1> block 32
    }
  }
}

// -----

// One kernel, token-sized buffers at other arguments.
module attributes {gpu.container_module} {
  gpu.module @k {
    gpu.func @two(%a: memref<?x4xi32>, %b: memref<?x4xi32>) kernel {
      gpu.return
    }
  }
  moegpu.program {
    moegpu.buffer @t : memref<?x4xi32> dims [#moegpu.dim<tokens>] source "scratch"
    moegpu.buffer @r : memref<?x4xi32> dims [#moegpu.dim<rows>] source "scratch"
    moegpu.schedule "forward" {
      moegpu.launch @k::@two [@t, @r] grid <one> block 32
      // expected-error @+1 {{launches kernel @k::@two with token-sized buffers at other arguments than an earlier launch of it: one kernel cannot read both}}
      moegpu.launch @k::@two [@r, @t] grid <one> block 32
    }
  }
}

// -----

// A kernel on two grids of tokens cannot tell its live CTAs.
module attributes {gpu.container_module} {
  gpu.module @k {
    gpu.func @twice(%a: memref<?x4xi32>) kernel {
      gpu.return
    }
  }
  moegpu.program {
    moegpu.buffer @t : memref<?x4xi32> dims [#moegpu.dim<tokens>] source "scratch"
    moegpu.schedule "forward" {
      moegpu.launch @k::@twice [@t] grid <tokens, per_block = 1> block 32
      // expected-error @+1 {{launches kernel @k::@twice on grid #moegpu.grid<tokens, per_block = 4>, an earlier launch on #moegpu.grid<tokens, per_block = 1>: the kernel cannot tell which CTAs hold live tokens}}
      moegpu.launch @k::@twice [@t] grid <tokens, per_block = 4> block 32
    }
  }
}

// -----

// Run twice, the second run changes nothing: one word.
// CHECK-LABEL: gpu.func @again
// CHECK-SAME: (%{{.*}}: memref<?x4xi32>, %{{.*}}: memref<1xi32>)
// CHECK: moegpu.buffer @tokens
// CHECK-NOT: moegpu.buffer @tokens
// CHECK: moegpu.launch @k::@again [@t, @tokens]
module attributes {gpu.container_module} {
  gpu.module @k {
    gpu.func @again(%a: memref<?x4xi32>, %w: memref<1xi32>) kernel {
      gpu.return
    }
  }
  moegpu.program {
    moegpu.buffer @tokens : memref<1xi32> dims [] source "tokens"
    moegpu.buffer @t : memref<?x4xi32> dims [#moegpu.dim<tokens>] source "scratch"
    moegpu.schedule "forward" {
      moegpu.launch @k::@again [@t, @tokens] grid <one> block 32
    }
  }
}
