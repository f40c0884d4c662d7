// RUN: moe-opt %s --convert-moe-to-moegpu=alignment=32 --verify-diagnostics
// RUN: moe-opt %s --convert-moe-to-moegpu=alignment=64 | FileCheck %s

// Segments are whole M blocks of the grouped GEMMs: 64 rows (one consumer
// warpgroup) at least.
// CHECK: moegpu.program
// CHECK: moegpu.buffer @offsets : memref<9xi32>
func.func @layer(%x: tensor<?x64xbf16>, %wr: tensor<8x64xbf16>, %wg: tensor<8x32x64xbf16>,
                 %wu: tensor<8x32x64xbf16>, %wd: tensor<8x64x32xbf16>) -> tensor<?x64xbf16> {
  // expected-error @+2 {{needs an alignment that is a multiple of 64 (the grouped GEMM's smallest M block) on sm_90a, got 32}}
  // expected-error @+1 {{failed to legalize operation 'moe.layer'}}
  %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd)
         {config = #moe.layer_config<hidden = 64, experts = 8, top_k = 2, ffn = 32, dtype = bf16>}
       : (tensor<?x64xbf16>, tensor<8x64xbf16>, tensor<8x32x64xbf16>, tensor<8x32x64xbf16>, tensor<8x64x32xbf16>) -> tensor<?x64xbf16>
  return %y : tensor<?x64xbf16>
}
