// RUN: moe-opt %s -split-input-file -moe-select-tiles=report -verify-diagnostics | FileCheck %s
// RUN: moe-opt %s -split-input-file -moe-select-tiles=max-stages=4 | FileCheck %s --check-prefix=CAP

// Tile n: the first preferred size dividing N; stages: what fits in 227 KiB.

// CHECK-LABEL: func.func @deepseek_up
// CHECK: tile = #moegpu.tile<m = 128, n = 128, k = 64, stages = 7>
// CAP-LABEL: func.func @deepseek_up
// CAP: tile = #moegpu.tile<m = 128, n = 128, k = 64, stages = 4>
func.func @deepseek_up(%a: memref<?x7168xbf16>, %b: memref<256x4096x7168xbf16>, %o: memref<257xi32>, %c: memref<?x2048xbf16>) {
  // expected-remark @+1 {{tile 128x128x64, 7 stages, 229376 bytes of shared memory}}
  moegpu.grouped_gemm %a, %b, %o, %c {epilogue = #moegpu.epilogue<swiglu>} : memref<?x7168xbf16>, memref<256x4096x7168xbf16>, memref<257xi32>, memref<?x2048xbf16>
  return
}

// -----

// 192 divides 576 while 128 and 256 do not; 5 stages of 40 KiB fit.
// CHECK-LABEL: func.func @n576
// CHECK: tile = #moegpu.tile<m = 128, n = 192, k = 64, stages = 5>
func.func @n576(%a: memref<?x64xbf16>, %b: memref<4x576x64xbf16>, %o: memref<5xi32>, %c: memref<?x576xbf16>) {
  // expected-remark @+1 {{tile 128x192x64, 5 stages, 204800 bytes of shared memory}}
  moegpu.grouped_gemm %a, %b, %o, %c : memref<?x64xbf16>, memref<4x576x64xbf16>, memref<5xi32>, memref<?x576xbf16>
  return
}

// -----

// No candidate divides 200: 128 with a masked column tail.
// CHECK-LABEL: func.func @n200
// CHECK: tile = #moegpu.tile<m = 128, n = 128, k = 64, stages = 7>
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
