// RUN: moe-opt %s -split-input-file -verify-diagnostics

// One case per diagnostic of the moegpu dialect's attributes and verifiers.
// expected-error @+1 {{tile m must be 64, 128, 192 or 256 (64 rows per consumer warpgroup), got 96}}
func.func private @f() attributes {t = #moegpu.tile<m = 96, n = 128, k = 64, stages = 4>}

// -----

// expected-error @+1 {{tile n must be a multiple of 8 in [8, 256] (a wgmma N), got 264}}
func.func private @f() attributes {t = #moegpu.tile<m = 128, n = 264, k = 64, stages = 4>}

// -----

// expected-error @+1 {{tile k must be 64 or 128 (one 128-byte swizzle atom of 16-bit or 8-bit elements), got 32}}
func.func private @f() attributes {t = #moegpu.tile<m = 128, n = 128, k = 32, stages = 4>}

// -----

// expected-error @+1 {{tile stages must be in [2, 32], got 1}}
func.func private @f() attributes {t = #moegpu.tile<m = 128, n = 128, k = 64, stages = 1>}

// -----

// expected-error @+1 {{tile cluster must be 1 or 2, got 4}}
func.func private @f() attributes {t = #moegpu.tile<m = 128, n = 128, k = 64, stages = 4, cluster = 4>}

// -----

// expected-error @+1 {{tile cluster 2 needs n to be a multiple of 128 (each CTA loads half of B), got 64}}
func.func private @f() attributes {t = #moegpu.tile<m = 128, n = 64, k = 64, stages = 4, cluster = 2>}

// -----

// expected-error @+1 {{sm_range first must be >= 0, got -1}}
func.func private @f() attributes {r = #moegpu.sm_range<first = -1, count = 4>}

// -----

// expected-error @+1 {{sm_range count must be in [1, 1024], got 0}}
func.func private @f() attributes {r = #moegpu.sm_range<first = 0, count = 0>}

// -----

func.func @f(%a: memref<?x256xf32>, %b: memref<8x64x256xbf16>, %o: memref<9xi32>, %c: memref<?x64xbf16>) {
  // expected-error @+1 {{'moegpu.grouped_gemm' op expects a to be a rank-2 memref of bf16 or f16, got 'memref<?x256xf32>'}}
  moegpu.grouped_gemm %a, %b, %o, %c : memref<?x256xf32>, memref<8x64x256xbf16>, memref<9xi32>, memref<?x64xbf16>
  return
}

// -----

func.func @f(%a: memref<?x256xbf16>, %b: memref<64x256xbf16>, %o: memref<9xi32>, %c: memref<?x64xbf16>) {
  // expected-error @+1 {{'moegpu.grouped_gemm' op expects b to be a rank-3 memref of bf16 or f16, got 'memref<64x256xbf16>'}}
  moegpu.grouped_gemm %a, %b, %o, %c : memref<?x256xbf16>, memref<64x256xbf16>, memref<9xi32>, memref<?x64xbf16>
  return
}

// -----

func.func @f(%a: memref<?x256xbf16>, %b: memref<8x64x256xbf16>, %o: memref<9xi64>, %c: memref<?x64xbf16>) {
  // expected-error @+1 {{'moegpu.grouped_gemm' op expects offsets to be a rank-1 memref of i32, got 'memref<9xi64>'}}
  moegpu.grouped_gemm %a, %b, %o, %c : memref<?x256xbf16>, memref<8x64x256xbf16>, memref<9xi64>, memref<?x64xbf16>
  return
}

// -----

func.func @f(%a: memref<?x256xbf16>, %b: memref<8x64x256xbf16>, %o: memref<9xi32>, %c: memref<?x64xbf16, strided<[128, 1]>>) {
  // expected-error @+1 {{'moegpu.grouped_gemm' op expects c to have the identity layout, got 'memref<?x64xbf16, strided<[128, 1]>>'}}
  moegpu.grouped_gemm %a, %b, %o, %c : memref<?x256xbf16>, memref<8x64x256xbf16>, memref<9xi32>, memref<?x64xbf16, strided<[128, 1]>>
  return
}

// -----

func.func @f(%a: memref<?x256xbf16>, %b: memref<8x64x256xf16>, %o: memref<9xi32>, %c: memref<?x64xbf16>) {
  // expected-error @+1 {{'moegpu.grouped_gemm' op expects a and b to share their element type and c to have it too or be f32, got 'bf16', 'f16' and 'bf16'}}
  moegpu.grouped_gemm %a, %b, %o, %c : memref<?x256xbf16>, memref<8x64x256xf16>, memref<9xi32>, memref<?x64xbf16>
  return
}

// -----

func.func @f(%a: memref<?x256xbf16>, %b: memref<?x64x256xbf16>, %o: memref<9xi32>, %c: memref<?x64xbf16>) {
  // expected-error @+1 {{'moegpu.grouped_gemm' op expects b to have a static shape [E, N, K], got 'memref<?x64x256xbf16>'}}
  moegpu.grouped_gemm %a, %b, %o, %c : memref<?x256xbf16>, memref<?x64x256xbf16>, memref<9xi32>, memref<?x64xbf16>
  return
}

// -----

func.func @f(%a: memref<?x128xbf16>, %b: memref<8x64x256xbf16>, %o: memref<9xi32>, %c: memref<?x64xbf16>) {
  // expected-error @+1 {{'moegpu.grouped_gemm' op expects a to have 256 columns (the K of b), got 'memref<?x128xbf16>'}}
  moegpu.grouped_gemm %a, %b, %o, %c : memref<?x128xbf16>, memref<8x64x256xbf16>, memref<9xi32>, memref<?x64xbf16>
  return
}

// -----

func.func @f(%a: memref<?x100xbf16>, %b: memref<8x64x100xbf16>, %o: memref<9xi32>, %c: memref<?x64xbf16>) {
  // expected-error @+1 {{'moegpu.grouped_gemm' op expects K to be a multiple of 8 (16-byte TMA strides), got 100}}
  moegpu.grouped_gemm %a, %b, %o, %c : memref<?x100xbf16>, memref<8x64x100xbf16>, memref<9xi32>, memref<?x64xbf16>
  return
}

// -----

func.func @f(%a: memref<?x256xbf16>, %b: memref<8x60x256xbf16>, %o: memref<9xi32>, %c: memref<?x60xbf16>) {
  // expected-error @+1 {{'moegpu.grouped_gemm' op expects N to be a multiple of 8, got 60}}
  moegpu.grouped_gemm %a, %b, %o, %c : memref<?x256xbf16>, memref<8x60x256xbf16>, memref<9xi32>, memref<?x60xbf16>
  return
}

// -----

func.func @f(%a: memref<?x256xbf16>, %b: memref<8x64x256xbf16>, %o: memref<8xi32>, %c: memref<?x64xbf16>) {
  // expected-error @+1 {{'moegpu.grouped_gemm' op expects offsets to have 9 elements (experts + 1), got 'memref<8xi32>'}}
  moegpu.grouped_gemm %a, %b, %o, %c : memref<?x256xbf16>, memref<8x64x256xbf16>, memref<8xi32>, memref<?x64xbf16>
  return
}

// -----

func.func @f(%a: memref<?x256xbf16>, %b: memref<8x72x256xbf16>, %o: memref<9xi32>, %c: memref<?x36xbf16>) {
  // expected-error @+1 {{'moegpu.grouped_gemm' op expects N to be a multiple of 16 with the swiglu epilogue (interleaved blocks of 8 gate and 8 up rows), got 72}}
  moegpu.grouped_gemm %a, %b, %o, %c {epilogue = #moegpu.epilogue<swiglu>} : memref<?x256xbf16>, memref<8x72x256xbf16>, memref<9xi32>, memref<?x36xbf16>
  return
}

// -----

func.func @f(%a: memref<?x256xbf16>, %b: memref<8x64x256xbf16>, %o: memref<9xi32>, %c: memref<?x64xbf16>) {
  // expected-error @+1 {{'moegpu.grouped_gemm' op expects c to have 32 columns (N / 2 with swiglu), got 'memref<?x64xbf16>'}}
  moegpu.grouped_gemm %a, %b, %o, %c {epilogue = #moegpu.epilogue<swiglu>} : memref<?x256xbf16>, memref<8x64x256xbf16>, memref<9xi32>, memref<?x64xbf16>
  return
}

// -----

func.func @f(%a: memref<?x256xbf16>, %b: memref<8x64x256xbf16>, %o: memref<9xi32>, %c: memref<?x32xbf16>) {
  // expected-error @+1 {{'moegpu.grouped_gemm' op expects c to have 64 columns (N), got 'memref<?x32xbf16>'}}
  moegpu.grouped_gemm %a, %b, %o, %c : memref<?x256xbf16>, memref<8x64x256xbf16>, memref<9xi32>, memref<?x32xbf16>
  return
}

// -----

func.func @f(%a: memref<128x256xbf16>, %b: memref<8x64x256xbf16>, %o: memref<9xi32>, %c: memref<256x64xbf16>) {
  // expected-error @+1 {{'moegpu.grouped_gemm' op expects a and c to have the same rows, got 'memref<128x256xbf16>' and 'memref<256x64xbf16>'}}
  moegpu.grouped_gemm %a, %b, %o, %c : memref<128x256xbf16>, memref<8x64x256xbf16>, memref<9xi32>, memref<256x64xbf16>
  return
}

// -----

func.func @f(%a: memref<?x256xbf16>, %b: memref<8x64x256xbf16>, %o: memref<9xi32>, %c: memref<?x64xbf16>) {
  // expected-error @+1 {{'moegpu.grouped_gemm' op expects a scale operand with the row_scale epilogue}}
  moegpu.grouped_gemm %a, %b, %o, %c {epilogue = #moegpu.epilogue<row_scale>} : memref<?x256xbf16>, memref<8x64x256xbf16>, memref<9xi32>, memref<?x64xbf16>
  return
}

// -----

func.func @f(%a: memref<?x256xbf16>, %b: memref<8x64x256xbf16>, %o: memref<9xi32>, %c: memref<?x64xbf16>, %s: memref<?xf32>) {
  // expected-error @+1 {{'moegpu.grouped_gemm' op expects no scale operand without the row_scale epilogue}}
  moegpu.grouped_gemm %a, %b, %o, %c scale %s : memref<?x256xbf16>, memref<8x64x256xbf16>, memref<9xi32>, memref<?x64xbf16>, memref<?xf32>
  return
}

// -----

func.func @f(%a: memref<?x256xbf16>, %b: memref<8x64x256xbf16>, %o: memref<9xi32>, %c: memref<?x64xbf16>, %s: memref<?xbf16>) {
  // expected-error @+1 {{'moegpu.grouped_gemm' op expects scale to be a rank-1 memref of f32, got 'memref<?xbf16>'}}
  moegpu.grouped_gemm %a, %b, %o, %c scale %s {epilogue = #moegpu.epilogue<row_scale>} : memref<?x256xbf16>, memref<8x64x256xbf16>, memref<9xi32>, memref<?x64xbf16>, memref<?xbf16>
  return
}

// -----

func.func @f(%a: memref<?x256xbf16>, %b: memref<8x64x256xbf16>, %o: memref<9xi32>, %c: memref<?x32xbf16>) {
  // expected-error @+1 {{'moegpu.grouped_gemm' op expects tile n to be a multiple of 16 with the swiglu epilogue, got 24}}
  moegpu.grouped_gemm %a, %b, %o, %c {epilogue = #moegpu.epilogue<swiglu>, tile = #moegpu.tile<m = 128, n = 24, k = 64, stages = 4>} : memref<?x256xbf16>, memref<8x64x256xbf16>, memref<9xi32>, memref<?x32xbf16>
  return
}

// -----

func.func @f() {
  // expected-error @+1 {{'moegpu.warp_roles' op expects 1 to 4 consumer warpgroups, got 5}}
  moegpu.warp_roles consumers = 5, producer_regs = 40, consumer_regs = 64 producer {
  %z = arith.constant 0 : index
  } consumer {
  ^bb0(%wg: index):
  }
  return
}

// -----

func.func @f() {
  // expected-error @+1 {{'moegpu.warp_roles' op expects producer_regs to be a multiple of 8 in [24, 256] (setmaxnreg), got 20}}
  moegpu.warp_roles consumers = 2, producer_regs = 20, consumer_regs = 232 producer {
  %z = arith.constant 0 : index
  } consumer {
  ^bb0(%wg: index):
  }
  return
}

// -----

func.func @f() {
  // expected-error @+1 {{'moegpu.warp_roles' op expects consumer_regs to be a multiple of 8 in [24, 256] (setmaxnreg), got 230}}
  moegpu.warp_roles consumers = 2, producer_regs = 40, consumer_regs = 230 producer {
  %z = arith.constant 0 : index
  } consumer {
  ^bb0(%wg: index):
  }
  return
}

// -----

func.func @f() {
  // expected-error @+1 {{'moegpu.warp_roles' op register budgets need 66560 registers, more than the 65536 of an SM}}
  moegpu.warp_roles consumers = 2, producer_regs = 40, consumer_regs = 240 producer {
  %z = arith.constant 0 : index
  } consumer {
  ^bb0(%wg: index):
  }
  return
}

// -----

func.func @f() {
  // expected-error @+1 {{'moegpu.warp_roles' op expects the producer region to take no arguments}}
  moegpu.warp_roles consumers = 2, producer_regs = 40, consumer_regs = 232 producer {
  ^bb0(%x: index):
  } consumer {
  ^bb0(%wg: index):
  }
  return
}

// -----

func.func @f() {
  // expected-error @+1 {{'moegpu.warp_roles' op expects the consumer region to take one index argument (the consumer warpgroup)}}
  moegpu.warp_roles consumers = 2, producer_regs = 40, consumer_regs = 232 producer {
  %z = arith.constant 0 : index
  } consumer {
  ^bb0(%x: i32):
  }
  return
}

// -----

func.func @f(%o: memref<?xi32>) {
  // expected-error @+1 {{'moegpu.tile_loop' op expects offsets to be a static memref of at least 2 i32, got 'memref<?xi32>'}}
  moegpu.tile_loop %o : memref<?xi32> columns 64 tiles 128 x 64 x 64 depth 256 on #moegpu.sm_range<first = 0, count = 4> {
  ^bb0(%e: index, %r: index, %c: index, %s: index, %k: index, %f: index):
  }
  return
}

// -----

func.func @f(%o: memref<9xi32>) {
  // expected-error @+1 {{'moegpu.tile_loop' op expects positive columns and tile sizes}}
  moegpu.tile_loop %o : memref<9xi32> columns 64 tiles 128 x 0 x 64 depth 256 on #moegpu.sm_range<first = 0, count = 4> {
  ^bb0(%e: index, %r: index, %c: index, %s: index, %k: index, %f: index):
  }
  return
}

// -----

func.func @f(%o: memref<9xi32>) {
  // expected-error @+1 {{'moegpu.tile_loop' op expects the body to take six index arguments (group, row, column, first iteration, k blocks, first k block)}}
  moegpu.tile_loop %o : memref<9xi32> columns 64 tiles 128 x 64 x 64 depth 256 on #moegpu.sm_range<first = 0, count = 4> {
  ^bb0(%e: index, %r: index, %c: index):
  }
  return
}

// -----

func.func @f(%p: !moegpu.pipeline<#moegpu.tile<m = 64, n = 64, k = 64, stages = 4>, bf16>, %i: index, %acc: vector<64xf32>) {
  // expected-error @+1 {{'moegpu.mma' op expects a fragment of 32 f32 (a 64 x 64 tile over 128 threads), got 'vector<64xf32>'}}
  %r = moegpu.mma %p[%i], %acc, warpgroup %i : !moegpu.pipeline<#moegpu.tile<m = 64, n = 64, k = 64, stages = 4>, bf16>, vector<64xf32>
  return
}

// -----

func.func @f(%acc: vector<32xf32>, %c: memref<?x64xi32>, %i: index) {
  // expected-error @+1 {{'moegpu.store_tile' op expects c to be a rank-2 memref of bf16, f16 or f32, got 'memref<?x64xi32>'}}
  moegpu.store_tile %acc, %c[%i, %i], warpgroup %i, row_end %i : vector<32xf32>, memref<?x64xi32>
  return
}

// -----

func.func @f(%acc: vector<30xf32>, %c: memref<?x64xbf16>, %i: index) {
  // expected-error @+1 {{'moegpu.store_tile' op expects a fragment of a multiple of 4 f32, got 'vector<30xf32>'}}
  moegpu.store_tile %acc, %c[%i, %i], warpgroup %i, row_end %i : vector<30xf32>, memref<?x64xbf16>
  return
}

// -----

func.func @f(%acc: vector<12xf32>, %c: memref<?x64xbf16>, %i: index) {
  // expected-error @+1 {{'moegpu.store_tile' op expects a fragment of a multiple of 8 f32 with the swiglu epilogue, got 'vector<12xf32>'}}
  moegpu.store_tile %acc, %c[%i, %i], warpgroup %i, row_end %i {epilogue = #moegpu.epilogue<swiglu>} : vector<12xf32>, memref<?x64xbf16>
  return
}

// -----

func.func @f(%acc: vector<32xf32>, %c: memref<?x64xbf16>, %i: index) {
  // expected-error @+1 {{'moegpu.store_tile' op expects a scale operand with the row_scale epilogue}}
  moegpu.store_tile %acc, %c[%i, %i], warpgroup %i, row_end %i {epilogue = #moegpu.epilogue<row_scale>} : vector<32xf32>, memref<?x64xbf16>
  return
}

// -----

func.func @f(%acc: vector<32xf32>, %c: memref<?x64xbf16>, %i: index, %s: memref<?xf32>) {
  // expected-error @+1 {{'moegpu.store_tile' op expects no scale operand without the row_scale epilogue}}
  moegpu.store_tile %acc, %c[%i, %i], warpgroup %i, row_end %i scale %s : vector<32xf32>, memref<?x64xbf16>, memref<?xf32>
  return
}

// -----

// The typed schedule.
// expected-error @+1 {{a tokens grid needs per_block >= 1}}
func.func private @f() attributes {g = #moegpu.grid<tokens>}

// -----

// expected-error @+1 {{size applies to fixed grids (the CTAs, in [1, 2^31)) and rows and received_rows grids (CTAs a block of rows), got 0 for a fixed grid}}
func.func private @f() attributes {g = #moegpu.grid<fixed>}

// -----

// expected-error @+1 {{size applies to fixed grids (the CTAs, in [1, 2^31)) and rows and received_rows grids (CTAs a block of rows), got 3 for a tokens grid}}
func.func private @f() attributes {g = #moegpu.grid<tokens, per_block = 1, size = 3>}

// -----

// expected-error @+1 {{per_block applies to tokens, assignments, rows and received_rows grids and must not be negative, got 2 for a one grid}}
func.func private @f() attributes {g = #moegpu.grid<one, per_block = 2>}

// -----

moegpu.program {
  // expected-error @+1 {{has 1 dynamic dimension(s) but 0 entries in dims}}
  moegpu.buffer @x : memref<?x8xbf16> dims [] source "input"
}

// -----

moegpu.program {
  // expected-error @+1 {{has unknown source 'weights' (expected input, output, scratch, tokens, symmetric, peers, param:<role>, pack:<gate>,<up>, concat:<gate>,<up> or arg:<name>)}}
  moegpu.buffer @x : memref<8xbf16> dims [] source "weights"
}

// -----

moegpu.program {
  // expected-error @+1 {{is the exchange's peers and must be a static 1-D memref of i64, got 'memref<5xi32>'}}
  moegpu.buffer @ep_peers : memref<5xi32> dims [] source "peers"
}

// -----

// A packed source names exactly two roles.
moegpu.program {
  // expected-error @+1 {{has unknown source 'pack:gate_weight,up_weight,down_weight'}}
  moegpu.buffer @x : memref<8xbf16> dims [] source "pack:gate_weight,up_weight,down_weight"
}

// -----

moegpu.program {
  // expected-error @+1 {{has entry 'recompute', expected forward, train, update or backward}}
  moegpu.schedule "recompute" {
  }
}

// -----

moegpu.program {
  moegpu.schedule "forward" {
  }
  // expected-error @+1 {{repeats the schedule of entry 'forward'}}
  moegpu.schedule "forward" {
  }
}

// -----

moegpu.program {
  moegpu.schedule "forward" {
    // expected-error @+1 {{refers to unknown buffer @nothing}}
    moegpu.memset @nothing
  }
}

// -----

moegpu.program {
  moegpu.buffer @x : memref<8xbf16> dims [] source "input"
  moegpu.schedule "forward" {
    // expected-error @+1 {{launches unknown kernel @kernels::@none}}
    moegpu.launch @kernels::@none [@x] grid <one> block 32
  }
}

// -----

module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @k(%a: memref<8xf16>) kernel {
      gpu.return
    }
  }
  moegpu.program {
    moegpu.buffer @x : memref<8xbf16> dims [] source "input"
    moegpu.schedule "forward" {
      // expected-error @+1 {{passes buffer @x of type 'memref<8xbf16>' as argument 0 of kernel @kernels::@k, which takes 'memref<8xf16>'}}
      moegpu.launch @kernels::@k [@x] grid <one> block 32
    }
  }
}

// -----

module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @k(%a: memref<8xbf16>) kernel {
      gpu.return
    }
  }
  moegpu.program {
    moegpu.buffer @x : memref<8xbf16> dims [] source "input"
    moegpu.schedule "forward" {
      // expected-error @+1 {{passes 2 buffers to kernel @kernels::@k, which takes 1 arguments}}
      moegpu.launch @kernels::@k [@x, @x] grid <one> block 32
    }
  }
}

// -----

module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @k(%a: memref<8xbf16>) kernel {
      gpu.return
    }
  }
  moegpu.program {
    moegpu.buffer @x : memref<8xbf16> dims [] source "input"
    moegpu.schedule "forward" {
      // expected-error @+1 {{has block 2048, expected 0 (the kernel's own) to 1024}}
      moegpu.launch @kernels::@k [@x] grid <one> block 2048
    }
  }
}

// -----

module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @k(%a: memref<8xbf16>) kernel {
      gpu.return
    }
  }
  moegpu.program {
    moegpu.buffer @x : memref<8xbf16> dims [] source "input"
    moegpu.schedule "forward" {
      // expected-error @+1 {{has chunk -2; expected a chunk index >= 0}}
      moegpu.launch @kernels::@k [@x] grid <one> block 32 {chunk = -2 : i64}
    }
  }
}

// -----

moegpu.program {
  moegpu.buffer @x : memref<8xbf16> dims [] source "input"
  moegpu.schedule "forward" {
    // expected-error @+1 {{of kind dispatch takes 7 buffers, got 1}}
    moegpu.exchange <dispatch> [@x]
  }
}

// -----

moegpu.program {
  moegpu.buffer @x : memref<8xi32> dims [] source "scratch"
  moegpu.schedule "forward" {
    // expected-error @+1 {{of kind dispatch_plan takes the offsets, ep_offsets and one group-offsets buffer per chunk (at least 3 buffers), got 2}}
    moegpu.exchange <dispatch_plan> [@x, @x]
  }
}

// -----

moegpu.program {
  moegpu.buffer @x : memref<8xbf16> dims [] source "scratch"
  moegpu.schedule "forward" {
    // expected-error @+1 {{of kind combine takes no chunk (only dispatch_rows and combine_rows move one chunk's rows)}}
    moegpu.exchange <combine> [@x, @x, @x, @x] {chunk = 0 : i64}
  }
}

// -----

moegpu.program {
  moegpu.buffer @x : memref<8xbf16> dims [] source "scratch"
  moegpu.schedule "forward" {
    // expected-error @+1 {{has chunk -1; expected a chunk index >= 0}}
    moegpu.exchange <dispatch_rows> [@x, @x] {chunk = -1 : i64}
  }
}

// -----

moegpu.program {
  moegpu.buffer @x : memref<8xbf16> dims [] source "input"
  moegpu.schedule "forward" {
    // expected-error @+1 {{sums f32 buffers, and @x is 'memref<8xbf16>'}}
    moegpu.all_reduce [@x]
  }
}

// -----

moegpu.program {
  // expected-error @+1 {{cannot be in a moegpu.program (expected moegpu.buffer or moegpu.schedule)}}
  func.func private @f()
}

// -----

// expected-error @+1 {{'moegpu.memset' op expects parent op 'moegpu.schedule'}}
moegpu.memset @x

// -----

// Dense (no offsets): b is [N, K].
func.func @f(%a: memref<?x256xbf16>, %b: memref<1x64x256xbf16>, %c: memref<?x64xf32>) {
  // expected-error @+1 {{'moegpu.grouped_gemm' op expects b to be a rank-2 memref of bf16 or f16, got 'memref<1x64x256xbf16>'}}
  moegpu.grouped_gemm %a, %b, dense, %c : memref<?x256xbf16>, memref<1x64x256xbf16>, memref<?x64xf32>
  return
}

// -----

func.func @f(%a: memref<?x256xbf16>, %b: memref<60x256xbf16>, %c: memref<?x60xf16>) {
  // expected-error @+1 {{'moegpu.grouped_gemm' op expects a and b to share their element type and c to have it too or be f32, got 'bf16', 'bf16' and 'f16'}}
  moegpu.grouped_gemm %a, %b, dense, %c : memref<?x256xbf16>, memref<60x256xbf16>, memref<?x60xf16>
  return
}

// -----

func.func @f(%o: memref<9xi32>, %n: index) {
  // expected-error @+1 {{'moegpu.tile_loop' op expects either offsets or rows}}
  moegpu.tile_loop %o : memref<9xi32> rows %n columns 64 tiles 128 x 64 x 64 depth 256 on #moegpu.sm_range<first = 0, count = 4> {
  ^bb0(%e: index, %r: index, %c: index, %s: index, %k: index, %f: index):
  }
  return
}

// -----

func.func @f() {
  // expected-error @+1 {{'moegpu.tile_loop' op expects either offsets or rows}}
  moegpu.tile_loop columns 64 tiles 128 x 64 x 64 depth 256 on #moegpu.sm_range<first = 0, count = 4> {
  ^bb0(%e: index, %r: index, %c: index, %s: index, %k: index, %f: index):
  }
  return
}

// -----

func.func @f(%p: !moegpu.pipeline<#moegpu.tile<m = 64, n = 64, k = 64, stages = 4>, bf16>, %i: index, %acc: vector<32xf32>) {
  // expected-error @+1 {{'moegpu.mma' op expects pending to be 0 or 1, got 2}}
  %r = moegpu.mma %p[%i], %acc, warpgroup %i {pending = 2} : !moegpu.pipeline<#moegpu.tile<m = 64, n = 64, k = 64, stages = 4>, bf16>, vector<32xf32>
  return
}

// -----

func.func @f(%a: memref<?x512xbf16>, %b: memref<8x512x256xbf16>, %o: memref<9xi32>, %c: memref<?x256xbf16>) {
  // expected-error @+1 {{'moegpu.grouped_gemm' op accumulates into an f32 c, got 'bf16'}}
  moegpu.grouped_gemm %a, %b, %o, %c {layout = #moegpu.layout<nn>, epilogue = #moegpu.epilogue<accumulate>} : memref<?x512xbf16>, memref<8x512x256xbf16>, memref<9xi32>, memref<?x256xbf16>
  return
}

// -----

func.func @f(%a: memref<?x512xbf16>, %b: memref<8x512x256xbf16>, %o: memref<9xi32>, %c: memref<?x256xbf16>) {
  // expected-error @+1 {{'moegpu.grouped_gemm' op expects the nn layout to have the none, accumulate or row_scale epilogue, got swiglu}}
  moegpu.grouped_gemm %a, %b, %o, %c {layout = #moegpu.layout<nn>, epilogue = #moegpu.epilogue<swiglu>} : memref<?x512xbf16>, memref<8x512x256xbf16>, memref<9xi32>, memref<?x256xbf16>
  return
}

// -----

func.func @f(%a: memref<?x256xbf16>, %b: memref<8x512x256xbf16>, %o: memref<9xi32>, %c: memref<?x256xf32>) {
  // expected-error @+1 {{'moegpu.grouped_gemm' op expects a to have 512 columns (the K of b), got 'memref<?x256xbf16>'}}
  moegpu.grouped_gemm %a, %b, %o, %c {layout = #moegpu.layout<nn>} : memref<?x256xbf16>, memref<8x512x256xbf16>, memref<9xi32>, memref<?x256xf32>
  return
}

// -----

func.func @f(%a: memref<?x256xbf16>, %b: memref<?x64xbf16>, %c: memref<256x64xf32>) {
  // expected-error @+1 {{'moegpu.grouped_gemm' op expects offsets with the tn layout (the groups of the reduction's rows)}}
  moegpu.grouped_gemm %a, %b, dense, %c {layout = #moegpu.layout<tn>} : memref<?x256xbf16>, memref<?x64xbf16>, memref<256x64xf32>
  return
}

// -----

func.func @f(%a: memref<?x256xbf16>, %b: memref<?x64xbf16>, %o: memref<9xi32>, %c: memref<8x64x256xf32>) {
  // expected-error @+1 {{'moegpu.grouped_gemm' op expects c to be [8, 256, 64] (groups, a's columns, b's columns), got 'memref<8x64x256xf32>'}}
  moegpu.grouped_gemm %a, %b, %o, %c {layout = #moegpu.layout<tn>} : memref<?x256xbf16>, memref<?x64xbf16>, memref<9xi32>, memref<8x64x256xf32>
  return
}

// -----

func.func @f(%a: memref<?x256xbf16>, %b: memref<?x60xbf16>, %o: memref<9xi32>, %c: memref<8x256x60xf32>) {
  // expected-error @+1 {{'moegpu.grouped_gemm' op expects M and N to be multiples of 8 (16-byte TMA strides and wgmma's granule), got 'memref<?x256xbf16>' and 'memref<?x60xbf16>'}}
  moegpu.grouped_gemm %a, %b, %o, %c {layout = #moegpu.layout<tn>} : memref<?x256xbf16>, memref<?x60xbf16>, memref<9xi32>, memref<8x256x60xf32>
  return
}

// -----

func.func @f(%a: memref<128x256xbf16>, %b: memref<64x64xbf16>, %o: memref<9xi32>, %c: memref<8x256x64xf32>) {
  // expected-error @+1 {{'moegpu.grouped_gemm' op expects a and b to have the same rows (the reduction), got 'memref<128x256xbf16>' and 'memref<64x64xbf16>'}}
  moegpu.grouped_gemm %a, %b, %o, %c {layout = #moegpu.layout<tn>} : memref<128x256xbf16>, memref<64x64xbf16>, memref<9xi32>, memref<8x256x64xf32>
  return
}

// -----

func.func @f(%o: memref<9xi32>) {
  // expected-error @+1 {{'moegpu.tile_loop' op expects k_grouped to have offsets, rows and depth 0 (the groups' rows are the reduction)}}
  moegpu.tile_loop %o : memref<9xi32> k_grouped columns 64 tiles 128 x 64 x 64 depth 0 on #moegpu.sm_range<first = 0, count = 4> {
  ^bb0(%e: index, %r: index, %c: index, %s: index, %k: index, %f: index):
  }
  return
}

// -----

func.func @f(%o: memref<9xi32>) {
  // expected-error @+1 {{'moegpu.tile_loop' op expects a positive depth, got 0}}
  moegpu.tile_loop %o : memref<9xi32> columns 64 tiles 128 x 64 x 64 depth 0 on #moegpu.sm_range<first = 0, count = 4> {
  ^bb0(%e: index, %r: index, %c: index, %s: index, %k: index, %f: index):
  }
  return
}

// -----

func.func @f(%acc: vector<32xf32>, %c: memref<?x64xf32>, %i: index) {
  // expected-error @+1 {{'moegpu.store_tile' op expects c to be a rank-3 memref of bf16, f16 or f32 (indexed by a group), got 'memref<?x64xf32>'}}
  moegpu.store_tile %acc, %c[%i, %i, %i], warpgroup %i, row_end %i : vector<32xf32>, memref<?x64xf32>
  return
}

// -----

func.func @f(%acc: vector<32xf32>, %c: memref<?x64xf32>, %i: index) {
  // expected-error @+1 {{expects [row, col] or [group, row, col]}}
  moegpu.store_tile %acc, %c[%i], warpgroup %i, row_end %i : vector<32xf32>, memref<?x64xf32>
  return
}

// -----

func.func @f(%a: memref<?x256xbf16>, %b: memref<60x256xbf16>, %c: memref<?x60xf32>, %bias: memref<1x60xbf16>) {
  // expected-error @+1 {{'moegpu.grouped_gemm' op expects a bias only on a grouped GEMM of the nt layout}}
  moegpu.grouped_gemm %a, %b, dense, %c bias(%bias : memref<1x60xbf16>) : memref<?x256xbf16>, memref<60x256xbf16>, memref<?x60xf32>
  return
}

// -----

func.func @f(%a: memref<?x256xbf16>, %b: memref<8x64x256xbf16>, %o: memref<9xi32>, %c: memref<?x64xbf16>, %bias: memref<8x32xbf16>) {
  // expected-error @+1 {{'moegpu.grouped_gemm' op expects a bias of shape [8, 64] (groups, N) and element type 'bf16', got 'memref<8x32xbf16>'}}
  moegpu.grouped_gemm %a, %b, %o, %c bias(%bias : memref<8x32xbf16>) : memref<?x256xbf16>, memref<8x64x256xbf16>, memref<9xi32>, memref<?x64xbf16>
  return
}

// -----

func.func @f(%a: memref<?x256xbf16>, %b: memref<8x64x256xbf16>, %o: memref<9xi32>, %c: memref<?x64xbf16>) {
  // expected-error @+1 {{'moegpu.grouped_gemm' op expects alpha and limit together, with the swiglu epilogue}}
  moegpu.grouped_gemm %a, %b, %o, %c {alpha = 1.702 : f64, limit = 7.0 : f64} : memref<?x256xbf16>, memref<8x64x256xbf16>, memref<9xi32>, memref<?x64xbf16>
  return
}

// -----

func.func @f(%a: memref<?x256xf8E4M3FN>, %b: memref<8x64x256xf8E4M3FN>, %o: memref<9xi32>, %c: memref<?x64xbf16>, %as: memref<?x2xf32>) {
  // expected-error @+1 {{'moegpu.grouped_gemm' op expects a_scale and b_scale together}}
  "moegpu.grouped_gemm"(%a, %b, %o, %c, %as) {operandSegmentSizes = array<i32: 1, 1, 1, 1, 0, 0, 1, 0, 0>} : (memref<?x256xf8E4M3FN>, memref<8x64x256xf8E4M3FN>, memref<9xi32>, memref<?x64xbf16>, memref<?x2xf32>) -> ()
  return
}

// -----

func.func @f(%a: memref<?x256xbf16>, %b: memref<8x64x256xbf16>, %o: memref<9xi32>, %c: memref<?x64xbf16>, %as: memref<?x2xf32>, %bs: memref<8x1x2xf32>) {
  // expected-error @+1 {{'moegpu.grouped_gemm' op expects a to be a rank-2 memref of f8E4M3FN (with block scales), got 'memref<?x256xbf16>'}}
  moegpu.grouped_gemm %a, %b, %o, %c block_scales(%as, %bs : memref<?x2xf32>, memref<8x1x2xf32>) : memref<?x256xbf16>, memref<8x64x256xbf16>, memref<9xi32>, memref<?x64xbf16>
  return
}

// -----

func.func @f(%a: memref<?x256xf8E4M3FN>, %b: memref<8x64x256xf8E4M3FN>, %o: memref<9xi32>, %c: memref<?x64xbf16>) {
  // expected-error @+1 {{'moegpu.grouped_gemm' op expects a to be a rank-2 memref of bf16 or f16, got 'memref<?x256xf8E4M3FN>'}}
  moegpu.grouped_gemm %a, %b, %o, %c : memref<?x256xf8E4M3FN>, memref<8x64x256xf8E4M3FN>, memref<9xi32>, memref<?x64xbf16>
  return
}

// -----

func.func @f(%a: memref<?x256xf8E4M3FN>, %b: memref<8x64x256xf8E4M3FN>, %o: memref<9xi32>, %c: memref<?x256xf32>, %as: memref<?x2xf32>, %bs: memref<8x1x2xf32>) {
  // expected-error @+1 {{'moegpu.grouped_gemm' op expects FP8 block scales only on a grouped GEMM of the nt or tn layout}}
  moegpu.grouped_gemm %a, %b, %o, %c block_scales(%as, %bs : memref<?x2xf32>, memref<8x1x2xf32>) {layout = #moegpu.layout<nn>} : memref<?x256xf8E4M3FN>, memref<8x64x256xf8E4M3FN>, memref<9xi32>, memref<?x256xf32>
  return
}

// -----

func.func @f(%a: memref<?x256xf8E4M3FN>, %b: memref<8x64x256xf8E4M3FN>, %o: memref<9xi32>, %c: memref<?x64xf32>, %as: memref<?x2xf32>, %bs: memref<8x1x2xf32>) {
  // expected-error @+1 {{'moegpu.grouped_gemm' op expects an FP8 GEMM to write a bf16, f16 or f32 c without accumulating}}
  moegpu.grouped_gemm %a, %b, %o, %c block_scales(%as, %bs : memref<?x2xf32>, memref<8x1x2xf32>) {epilogue = #moegpu.epilogue<accumulate>} : memref<?x256xf8E4M3FN>, memref<8x64x256xf8E4M3FN>, memref<9xi32>, memref<?x64xf32>
  return
}

// -----

func.func @f(%a: memref<?x200xf8E4M3FN>, %b: memref<8x64x200xf8E4M3FN>, %o: memref<9xi32>, %c: memref<?x64xbf16>, %as: memref<?x2xf32>, %bs: memref<8x1x2xf32>) {
  // expected-error @+1 {{'moegpu.grouped_gemm' op expects an FP8 GEMM's K to be a multiple of 16 (16-byte TMA strides of 1-byte elements), got 200}}
  moegpu.grouped_gemm %a, %b, %o, %c block_scales(%as, %bs : memref<?x2xf32>, memref<8x1x2xf32>) : memref<?x200xf8E4M3FN>, memref<8x64x200xf8E4M3FN>, memref<9xi32>, memref<?x64xbf16>
  return
}

// -----

func.func @f(%a: memref<?x256xf8E4M3FN>, %b: memref<8x64x256xf8E4M3FN>, %o: memref<9xi32>, %c: memref<?x64xbf16>, %as: memref<?x3xf32>, %bs: memref<8x1x2xf32>) {
  // expected-error @+1 {{'moegpu.grouped_gemm' op expects a_scale to be f32 [rows of a, 2] (one scale per row per 128 of K), got 'memref<?x3xf32>'}}
  moegpu.grouped_gemm %a, %b, %o, %c block_scales(%as, %bs : memref<?x3xf32>, memref<8x1x2xf32>) : memref<?x256xf8E4M3FN>, memref<8x64x256xf8E4M3FN>, memref<9xi32>, memref<?x64xbf16>
  return
}

// -----

func.func @f(%a: memref<?x256xf8E4M3FN>, %b: memref<8x384x256xf8E4M3FN>, %o: memref<9xi32>, %c: memref<?x192xbf16>, %as: memref<?x2xf32>, %bs: memref<8x3x2xf32>) {
  // expected-error @+1 {{'moegpu.grouped_gemm' op expects b_scale to be f32 [8, 4, 2] (one scale per 128 x 128 block, gate blocks then up blocks), got 'memref<8x3x2xf32>'}}
  moegpu.grouped_gemm %a, %b, %o, %c block_scales(%as, %bs : memref<?x2xf32>, memref<8x3x2xf32>) {epilogue = #moegpu.epilogue<swiglu>} : memref<?x256xf8E4M3FN>, memref<8x384x256xf8E4M3FN>, memref<9xi32>, memref<?x192xbf16>
  return
}

// -----

// The pre-activations without the SwiGLU (gate_up_scales): the same
// packed B and its gate blocks then up blocks.
func.func @f(%a: memref<?x256xf8E4M3FN>, %b: memref<8x384x256xf8E4M3FN>, %o: memref<9xi32>, %c: memref<?x384xf32>, %as: memref<?x2xf32>, %bs: memref<8x3x2xf32>) {
  // expected-error @+1 {{'moegpu.grouped_gemm' op expects b_scale to be f32 [8, 4, 2] (one scale per 128 x 128 block, gate blocks then up blocks), got 'memref<8x3x2xf32>'}}
  moegpu.grouped_gemm %a, %b, %o, %c block_scales(%as, %bs : memref<?x2xf32>, memref<8x3x2xf32>) {gate_up_scales} : memref<?x256xf8E4M3FN>, memref<8x384x256xf8E4M3FN>, memref<9xi32>, memref<?x384xf32>
  return
}

// -----

func.func @f(%a: memref<?x256xf8E4M3FN>, %b: memref<8x40x256xf8E4M3FN>, %o: memref<9xi32>, %c: memref<?x40xf32>, %as: memref<?x2xf32>, %bs: memref<8x2x2xf32>) {
  // expected-error @+1 {{'moegpu.grouped_gemm' op expects gate_up_scales of a packed gate/up B (blocks of 8 gate rows then as many up rows), got N = 40}}
  moegpu.grouped_gemm %a, %b, %o, %c block_scales(%as, %bs : memref<?x2xf32>, memref<8x2x2xf32>) {gate_up_scales} : memref<?x256xf8E4M3FN>, memref<8x40x256xf8E4M3FN>, memref<9xi32>, memref<?x40xf32>
  return
}

// -----

func.func @f(%acc: vector<64xf32>, %as: memref<?x2xf32>, %bs: memref<?x4xf32>, %i: index) {
  // expected-error @+1 {{'moegpu.promote' op expects b_scale to be an f32 memref of rank 3 (groups, n blocks, k blocks) with static n blocks or of rank 2 (columns, k blocks) with static columns, got 'memref<?x4xf32>'}}
  %r = moegpu.promote %acc into %acc scales(%as, %bs)[%i, %i, %i, %i], warpgroup %i, row_end %i : vector<64xf32>, memref<?x2xf32>, memref<?x4xf32>
  return
}

// -----

func.func @f(%acc: vector<64xf32>, %as: memref<?x2xf32>, %bs: memref<8x4xf32>, %i: index) {
  // expected-error @+1 {{'moegpu.promote' op expects block scales of b (rank 3) with interleaved, got per-column scales 'memref<8x4xf32>'}}
  %r = moegpu.promote %acc into %acc scales(%as, %bs)[%i, %i, %i, %i], warpgroup %i, row_end %i {interleaved} : vector<64xf32>, memref<?x2xf32>, memref<8x4xf32>
  return
}

// -----

// An FP8 weight gradient takes the transposed codes, [M, R] and [N, R].
func.func @f(%a: memref<?x256xf8E4M3FN>, %b: memref<?x128xf8E4M3FN>, %o: memref<9xi32>, %c: memref<8x256x128xf32>, %as: memref<256x?xf32>, %bs: memref<128x?xf32>) {
  // expected-error @+1 {{'moegpu.grouped_gemm' op expects an FP8 tn GEMM's a and b to be the transposed codes [M, R] and [N, R] with static M and N, got 'memref<?x256xf8E4M3FN>' and 'memref<?x128xf8E4M3FN>'}}
  moegpu.grouped_gemm %a, %b, %o, %c block_scales(%as, %bs : memref<256x?xf32>, memref<128x?xf32>) {layout = #moegpu.layout<tn>} : memref<?x256xf8E4M3FN>, memref<?x128xf8E4M3FN>, memref<9xi32>, memref<8x256x128xf32>
  return
}

// -----

func.func @f(%a: memref<256x520xf8E4M3FN>, %b: memref<128x520xf8E4M3FN>, %o: memref<9xi32>, %c: memref<8x256x128xf32>, %as: memref<256x5xf32>, %bs: memref<128x5xf32>) {
  // expected-error @+1 {{'moegpu.grouped_gemm' op expects an FP8 tn GEMM's R to be a multiple of 16 (16-byte TMA strides of 1-byte elements), got 520}}
  moegpu.grouped_gemm %a, %b, %o, %c block_scales(%as, %bs : memref<256x5xf32>, memref<128x5xf32>) {layout = #moegpu.layout<tn>} : memref<256x520xf8E4M3FN>, memref<128x520xf8E4M3FN>, memref<9xi32>, memref<8x256x128xf32>
  return
}

// -----

func.func @f(%a: memref<256x512xf8E4M3FN>, %b: memref<128x512xf8E4M3FN>, %o: memref<9xi32>, %c: memref<8x256x128xf32>, %as: memref<256x4xf32>, %bs: memref<128x3xf32>) {
  // expected-error @+1 {{'moegpu.grouped_gemm' op expects b_scale to be f32 [128, 4] (one scale per column per 128 rows), got 'memref<128x3xf32>'}}
  moegpu.grouped_gemm %a, %b, %o, %c block_scales(%as, %bs : memref<256x4xf32>, memref<128x3xf32>) {layout = #moegpu.layout<tn>} : memref<256x512xf8E4M3FN>, memref<128x512xf8E4M3FN>, memref<9xi32>, memref<8x256x128xf32>
  return
}

// -----

func.func @f(%a: memref<256x?xf8E4M3FN>, %b: memref<128x?xf8E4M3FN>, %o: memref<9xi32>, %c: memref<8x256x128xf32>, %as: memref<128x?xf32>, %bs: memref<128x?xf32>) {
  // expected-error @+1 {{'moegpu.grouped_gemm' op expects a_scale to be f32 [256, ceil(R / 128)] (one scale per column per 128 rows), got 'memref<128x?xf32>'}}
  moegpu.grouped_gemm %a, %b, %o, %c block_scales(%as, %bs : memref<128x?xf32>, memref<128x?xf32>) {layout = #moegpu.layout<tn>} : memref<256x?xf8E4M3FN>, memref<128x?xf8E4M3FN>, memref<9xi32>, memref<8x256x128xf32>
  return
}

// -----

func.func @f(%a: memref<256x512xf8E4M3FN>, %b: memref<128x384xf8E4M3FN>, %o: memref<9xi32>, %c: memref<8x256x128xf32>, %as: memref<256x4xf32>, %bs: memref<128x4xf32>) {
  // expected-error @+1 {{'moegpu.grouped_gemm' op expects a and b to have the same columns (the reduction), got 'memref<256x512xf8E4M3FN>' and 'memref<128x384xf8E4M3FN>'}}
  moegpu.grouped_gemm %a, %b, %o, %c block_scales(%as, %bs : memref<256x4xf32>, memref<128x4xf32>) {layout = #moegpu.layout<tn>} : memref<256x512xf8E4M3FN>, memref<128x384xf8E4M3FN>, memref<9xi32>, memref<8x256x128xf32>
  return
}

// -----

func.func @f(%acc: vector<64xf32>, %as: memref<?xf32>, %bs: memref<8x4x2xf32>, %i: index) {
  // expected-error @+1 {{'moegpu.promote' op expects a_scale to be a rank-2 f32 memref (rows, k blocks), got 'memref<?xf32>'}}
  %r = moegpu.promote %acc into %acc scales(%as, %bs)[%i, %i, %i, %i], warpgroup %i, row_end %i : vector<64xf32>, memref<?xf32>, memref<8x4x2xf32>
  return
}

// -----

func.func @f(%acc: vector<64xf32>, %as: memref<?x2xf32>, %bs: memref<8x3x2xf32>, %i: index) {
  // expected-error @+1 {{'moegpu.promote' op expects an even number of n blocks (gate, then up) with interleaved, got 3}}
  %r = moegpu.promote %acc into %acc scales(%as, %bs)[%i, %i, %i, %i], warpgroup %i, row_end %i {interleaved} : vector<64xf32>, memref<?x2xf32>, memref<8x3x2xf32>
  return
}

// -----

// split_k: a dense nt GEMM into f32 slices, its count memref<1xi32>.
func.func @f(%a: memref<?x256xbf16>, %b: memref<1x64x256xbf16>, %o: memref<2xi32>, %c: memref<4x?x64xf32>, %n: memref<1xi32>) {
  // expected-error @+1 {{'moegpu.grouped_gemm' op expects split_k only on a dense GEMM of the nt layout with 16-bit operands and the none epilogue}}
  moegpu.grouped_gemm %a, %b, %o, %c split_k(%n : memref<1xi32>) : memref<?x256xbf16>, memref<1x64x256xbf16>, memref<2xi32>, memref<4x?x64xf32>
  return
}

// -----

func.func @f(%a: memref<?x256xbf16>, %b: memref<60x256xbf16>, %c: memref<1x?x60xf32>, %n: memref<1xi32>) {
  // expected-error @+1 {{'moegpu.grouped_gemm' op expects a split_k c of f32 with a static first dimension of at least 2 (the most slices), got 'memref<1x?x60xf32>'}}
  moegpu.grouped_gemm %a, %b, dense, %c split_k(%n : memref<1xi32>) : memref<?x256xbf16>, memref<60x256xbf16>, memref<1x?x60xf32>
  return
}

// -----

func.func @f(%a: memref<?x256xbf16>, %b: memref<60x256xbf16>, %c: memref<4x?x60xf32>, %n: memref<1xi64>) {
  // expected-error @+1 {{'moegpu.grouped_gemm' op expects the split count to be memref<1xi32>, got 'memref<1xi64>'}}
  moegpu.grouped_gemm %a, %b, dense, %c split_k(%n : memref<1xi64>) : memref<?x256xbf16>, memref<60x256xbf16>, memref<4x?x60xf32>
  return
}

// -----

func.func @f(%a: memref<?x256xbf16>, %b: memref<60x256xbf16>, %c: memref<4x?x30xf32>, %n: memref<1xi32>) {
  // expected-error @+1 {{'moegpu.grouped_gemm' op expects c to have 60 columns (N), got 'memref<4x?x30xf32>'}}
  moegpu.grouped_gemm %a, %b, dense, %c split_k(%n : memref<1xi32>) : memref<?x256xbf16>, memref<60x256xbf16>, memref<4x?x30xf32>
  return
}

// -----

func.func @f(%n: index) {
  // expected-error @+1 {{'moegpu.tile_loop' op expects at least 1 split, got 0}}
  moegpu.tile_loop rows %n columns 64 tiles 128 x 64 x 64 depth 256 on #moegpu.sm_range<first = 0, count = 4> attributes {splits = 0} {
  ^bb0(%e: index, %r: index, %c: index, %s: index, %k: index, %f: index):
  }
  return
}

// -----

func.func @f(%o: memref<9xi32>) {
  // expected-error @+1 {{'moegpu.tile_loop' op expects splits only over rows (one dense group)}}
  moegpu.tile_loop %o : memref<9xi32> columns 64 tiles 128 x 64 x 64 depth 256 on #moegpu.sm_range<first = 0, count = 4> attributes {splits = 2} {
  ^bb0(%e: index, %r: index, %c: index, %s: index, %k: index, %f: index):
  }
  return
}

// -----

func.func @f(%n: index, %count: memref<1xi32>) {
  // expected-error @+1 {{'moegpu.tile_loop' op expects a split_count of memref<1xi32> with splits above 1, got 'memref<1xi32>' with 1}}
  moegpu.tile_loop rows %n columns 64 tiles 128 x 64 x 64 depth 256 on #moegpu.sm_range<first = 0, count = 4> split_count(%count : memref<1xi32>) {
  ^bb0(%e: index, %r: index, %c: index, %s: index, %k: index, %f: index):
  }
  return
}
