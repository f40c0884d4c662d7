// RUN: moe-opt %s -split-input-file -moe-select-tiles=report -verify-diagnostics | FileCheck %s
// RUN: moe-opt %s -split-input-file -moe-select-tiles=max-stages=4 | FileCheck %s --check-prefix=CAP
// RUN: moe-opt %s -split-input-file -moe-select-tiles=tile-n=128 | FileCheck %s --check-prefix=FORCE
// RUN: not moe-opt %s -split-input-file -moe-select-tiles=tile-n=100 2>&1 | FileCheck %s --check-prefix=BAD
// BAD: moe-select-tiles: tile-n must be 0, 64, 128, 192 or 256, got 100
// RUN: moe-opt %s -split-input-file -moe-select-tiles=cluster=2 | FileCheck %s --check-prefix=PAIR
// RUN: not moe-opt %s -split-input-file -moe-select-tiles=cluster=3 2>&1 | FileCheck %s --check-prefix=BADPAIR
// BADPAIR: moe-select-tiles: cluster must be 1 or 2, got 3
// RUN: moe-opt %s -split-input-file -moe-select-tiles=tile-m=64 | FileCheck %s --check-prefix=M64
// RUN: not moe-opt %s -split-input-file -moe-select-tiles=tile-m=32 2>&1 | FileCheck %s --check-prefix=BADM
// BADM: moe-select-tiles: tile-m must be 0, 64 or 128, got 32
// RUN: not moe-opt %s -split-input-file -moe-select-tiles=tile-m=128 2>&1 | FileCheck %s --check-prefix=SPAN
// SPAN: moe-select-tiles: tile-m 128 does not divide the segments' alignment 64

// Tile n: 256 for a K-major GEMM with a 16-bit result whose N it divides,
// else the first preferred size dividing N; stages: what fits in 227 KiB.

// CHECK-LABEL: func.func @deepseek_up
// CHECK: tile = #moegpu.tile<m = 128, n = 256, k = 64, stages = 4>
// CAP-LABEL: func.func @deepseek_up
// CAP: tile = #moegpu.tile<m = 128, n = 256, k = 64, stages = 4>
// FORCE-LABEL: func.func @deepseek_up
// FORCE: tile = #moegpu.tile<m = 128, n = 128, k = 64, stages = 6>
// BLOCK_M 64: one consumer warpgroup, 40 KiB a stage, 16 KiB of staging.
// M64-LABEL: func.func @deepseek_up
// M64: tile = #moegpu.tile<m = 64, n = 256, k = 64, stages = 5>
// PAIR-LABEL: func.func @deepseek_up
// PAIR: tile = #moegpu.tile<m = 128, n = 256, k = 64, stages = 4, cluster = 2>
func.func @deepseek_up(%a: memref<?x7168xbf16>, %b: memref<256x4096x7168xbf16>, %o: memref<257xi32>, %c: memref<?x2048xbf16>) {
  // expected-remark @+1 {{tile 128x256x64, 4 stages, 196608 bytes of shared memory}}
  moegpu.grouped_gemm %a, %b, %o, %c {epilogue = #moegpu.epilogue<swiglu>} : memref<?x7168xbf16>, memref<256x4096x7168xbf16>, memref<257xi32>, memref<?x2048xbf16>
  return
}

// -----

// 192 divides 576 while 128 and 256 do not; 4 stages of 40 KiB fit beside
// the TMA-store epilogue's 32 KiB of staging.
// CHECK-LABEL: func.func @n576
// CHECK: tile = #moegpu.tile<m = 128, n = 192, k = 64, stages = 4>
func.func @n576(%a: memref<?x64xbf16>, %b: memref<4x576x64xbf16>, %o: memref<5xi32>, %c: memref<?x576xbf16>) {
  // expected-remark @+1 {{tile 128x192x64, 4 stages, 163840 bytes of shared memory}}
  moegpu.grouped_gemm %a, %b, %o, %c : memref<?x64xbf16>, memref<4x576x64xbf16>, memref<5xi32>, memref<?x576xbf16>
  return
}

// -----

// No candidate divides 200: 128 with a masked column tail (the TMA store
// stops at the tensor's 200 columns), 6 stages beside the staging.
// CHECK-LABEL: func.func @n200
// CHECK: tile = #moegpu.tile<m = 128, n = 128, k = 64, stages = 6>
func.func @n200(%a: memref<?x64xbf16>, %b: memref<4x200x64xbf16>, %o: memref<5xi32>, %c: memref<?x200xbf16>) {
  // expected-remark @+1 {{tile 128x128x64}}
  moegpu.grouped_gemm %a, %b, %o, %c : memref<?x64xbf16>, memref<4x200x64xbf16>, memref<5xi32>, memref<?x200xbf16>
  return
}

// -----

// An explicit tile is kept.
// CHECK-LABEL: func.func @kept
// CHECK: tile = #moegpu.tile<m = 64, n = 64, k = 64, stages = 3>
func.func @kept(%a: memref<?x64xbf16>, %b: memref<4x64x64xbf16>, %o: memref<5xi32>, %c: memref<?x64xbf16>) {
  // expected-remark @+1 {{tile 64x64x64, 3 stages, 49152 bytes of shared memory}}
  moegpu.grouped_gemm %a, %b, %o, %c {tile = #moegpu.tile<m = 64, n = 64, k = 64, stages = 3>} : memref<?x64xbf16>, memref<4x64x64xbf16>, memref<5xi32>, memref<?x64xbf16>
  return
}

// -----

// An f32 result (the training step's recomputed pre-activations) keeps 128
// columns: it measured no faster at 256. 6 stages leave the TMA-store
// epilogue its staging.
// CHECK-LABEL: func.func @f32_out
// CHECK: tile = #moegpu.tile<m = 128, n = 128, k = 64, stages = 6>
func.func @f32_out(%a: memref<?x2048xbf16>, %b: memref<8x512x2048xbf16>, %o: memref<9xi32>, %c: memref<?x512xf32>) {
  // expected-remark @+1 {{tile 128x128x64, 6 stages}}
  moegpu.grouped_gemm %a, %b, %o, %c : memref<?x2048xbf16>, memref<8x512x2048xbf16>, memref<9xi32>, memref<?x512xf32>
  return
}

// -----

// The router's dense GEMM keeps its 64-column blocks, also under tile-n.
// CHECK-LABEL: func.func @router
// CHECK: tile = #moegpu.tile<m = 128, n = 64, k = 64, stages = 8>
// FORCE-LABEL: func.func @router
// FORCE: tile = #moegpu.tile<m = 128, n = 64, k = 64, stages = 8>
// M64-LABEL: func.func @router
// M64: tile = #moegpu.tile<m = 64, n = 64, k = 64, stages = 8>
// A 64-column tile has no whole halves of B to share: one CTA each.
// PAIR-LABEL: func.func @router
// PAIR: tile = #moegpu.tile<m = 128, n = 64, k = 64, stages = 8>}
func.func @router(%a: memref<?x2048xbf16>, %b: memref<256x2048xbf16>, %c: memref<?x256xf32>) {
  // expected-remark @+1 {{tile 128x64x64, 8 stages}}
  moegpu.grouped_gemm %a, %b, dense, %c : memref<?x2048xbf16>, memref<256x2048xbf16>, memref<?x256xf32>
  return
}

// -----

// Segments padded to 64 rows (moegpu.alignment, as --tile-m 64 sets it)
// take 64-row tiles: one consumer warpgroup, and a tile never spans two
// experts.
// CHECK-LABEL: func.func @aligned_64
// CHECK: tile = #moegpu.tile<m = 64,
module attributes {moegpu.alignment = 64 : i64} {
  func.func @aligned_64(%a: memref<?x2048xbf16>, %b: memref<8x512x2048xbf16>, %o: memref<9xi32>, %c: memref<?x512xbf16>) {
    // expected-remark @+1 {{tile 64x256x64, 5 stages}}
    moegpu.grouped_gemm %a, %b, %o, %c : memref<?x2048xbf16>, memref<8x512x2048xbf16>, memref<9xi32>, memref<?x512xbf16>
    return
  }
}

// -----

// FP8: k = 128 (one 128-byte row of e4m3, one block of scales) and the
// largest n dividing 128 and N: one block of b's scales per tile, and the
// k block's partial sums fit beside the accumulator.
// CHECK-LABEL: func.func @fp8_up
// CHECK: tile = #moegpu.tile<m = 128, n = 128, k = 128, stages = 6>
// FORCE-LABEL: func.func @fp8_up
// FORCE: tile = #moegpu.tile<m = 128, n = 128, k = 128, stages = 6>
func.func @fp8_up(%a: memref<?x7168xf8E4M3FN>, %b: memref<256x4096x7168xf8E4M3FN>, %o: memref<257xi32>, %c: memref<?x2048xbf16>, %as: memref<?x56xf32>, %bs: memref<256x32x56xf32>) {
  // expected-remark @+1 {{tile 128x128x128, 6 stages, 196608 bytes of shared memory}}
  moegpu.grouped_gemm %a, %b, %o, %c block_scales(%as, %bs : memref<?x56xf32>, memref<256x32x56xf32>) {epilogue = #moegpu.epilogue<swiglu>} : memref<?x7168xf8E4M3FN>, memref<256x4096x7168xf8E4M3FN>, memref<257xi32>, memref<?x2048xbf16>
  return
}
