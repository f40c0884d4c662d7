// RUN: moe-opt %s -split-input-file -moe-partition-sms -verify-diagnostics | FileCheck %s

// The partition of the nearest enclosing op (the module's included) wins;
// with none, all 132 SMs of an H100/H200 SXM compute.

// CHECK-LABEL: func.func @deepseek
// CHECK: sm_range = #moegpu.sm_range<first = 0, count = 112>
func.func @deepseek(%a: memref<?x64xbf16>, %b: memref<4x64x64xbf16>, %o: memref<5xi32>, %c: memref<?x64xbf16>) attributes {moe.sm_partition = #moe.sm_partition<sms = 132, comm = 20>} {
  moegpu.grouped_gemm %a, %b, %o, %c : memref<?x64xbf16>, memref<4x64x64xbf16>, memref<5xi32>, memref<?x64xbf16>
  return
}

// -----

// CHECK-LABEL: func.func @default
// CHECK: sm_range = #moegpu.sm_range<first = 0, count = 132>
func.func @default(%a: memref<?x64xbf16>, %b: memref<4x64x64xbf16>, %o: memref<5xi32>, %c: memref<?x64xbf16>) {
  moegpu.grouped_gemm %a, %b, %o, %c : memref<?x64xbf16>, memref<4x64x64xbf16>, memref<5xi32>, memref<?x64xbf16>
  return
}

// -----

// CHECK-LABEL: func.func @from_module
// CHECK: sm_range = #moegpu.sm_range<first = 0, count = 70>
module attributes {moe.sm_partition = #moe.sm_partition<sms = 78, comm = 8>} {
  func.func @from_module(%a: memref<?x64xbf16>, %b: memref<4x64x64xbf16>, %o: memref<5xi32>, %c: memref<?x64xbf16>) {
    moegpu.grouped_gemm %a, %b, %o, %c : memref<?x64xbf16>, memref<4x64x64xbf16>, memref<5xi32>, memref<?x64xbf16>
    return
  }
}

// -----

module attributes {moe.sm_partition = #moe.sm_partition<sms = 132, comm = 20>} {
  func.func @too_wide(%a: memref<?x64xbf16>, %b: memref<4x64x64xbf16>, %o: memref<5xi32>, %c: memref<?x64xbf16>) {
    // expected-error @+1 {{'moegpu.grouped_gemm' op sm_range [8, 120) reaches past the 112 compute SMs of the partition}}
    moegpu.grouped_gemm %a, %b, %o, %c {sm_range = #moegpu.sm_range<first = 8, count = 112>} : memref<?x64xbf16>, memref<4x64x64xbf16>, memref<5xi32>, memref<?x64xbf16>
    return
  }
}

// -----

// Pairs of CTAs take an even count: 131 compute SMs give 130.
// CHECK-LABEL: func.func @pairs
// CHECK: sm_range = #moegpu.sm_range<first = 0, count = 130>
module attributes {moe.sm_partition = #moe.sm_partition<sms = 132, comm = 1>} {
  func.func @pairs(%a: memref<?x64xbf16>, %b: memref<4x128x64xbf16>, %o: memref<5xi32>, %c: memref<?x128xbf16>) {
    moegpu.grouped_gemm %a, %b, %o, %c {tile = #moegpu.tile<m = 128, n = 128, k = 64, stages = 4, cluster = 2>} : memref<?x64xbf16>, memref<4x128x64xbf16>, memref<5xi32>, memref<?x128xbf16>
    return
  }
}

// -----

func.func @odd_pairs(%a: memref<?x64xbf16>, %b: memref<4x128x64xbf16>, %o: memref<5xi32>, %c: memref<?x128xbf16>) {
  // expected-error @+1 {{'moegpu.grouped_gemm' op sm_range of 65 SMs for clusters of 2 CTAs: expected a multiple of 2}}
  moegpu.grouped_gemm %a, %b, %o, %c {tile = #moegpu.tile<m = 128, n = 128, k = 64, stages = 4, cluster = 2>, sm_range = #moegpu.sm_range<first = 0, count = 65>} : memref<?x64xbf16>, memref<4x128x64xbf16>, memref<5xi32>, memref<?x128xbf16>
  return
}
