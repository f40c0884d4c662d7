// RUN: moe-opt %s | moe-opt | FileCheck %s
// RUN: moe-opt %s -mlir-print-op-generic | moe-opt | FileCheck %s

// Every op and attribute of the moegpu dialect prints and parses back.

// CHECK-LABEL: func.func @grouped_gemm
// CHECK: moegpu.grouped_gemm %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {epilogue = #moegpu.epilogue<swiglu>, sm_range = #moegpu.sm_range<first = 0, count = 112>, tile = #moegpu.tile<m = 128, n = 128, k = 64, stages = 7>} : memref<?x256xbf16>, memref<8x512x256xbf16>, memref<9xi32>, memref<?x256xbf16>
// CHECK: moegpu.grouped_gemm %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} scale %{{.*}} {epilogue = #moegpu.epilogue<row_scale>} : memref<?x256xf16>, memref<8x64x256xf16>, memref<9xi32>, memref<?x64xf16>, memref<?xf32>
// CHECK: moegpu.grouped_gemm %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} : memref<?x256xbf16>, memref<1x64x256xbf16>, memref<2xi32>, memref<?x64xbf16>
// CHECK: moegpu.grouped_gemm %{{.*}}, %{{.*}}, dense, %{{.*}} : memref<?x256xbf16>, memref<60x256xbf16>, memref<?x60xf32>
// CHECK: moegpu.grouped_gemm %{{.*}}, %{{.*}}, dense, %{{.*}} split_k(%{{.*}} : memref<1xi32>) : memref<?x256xbf16>, memref<60x256xbf16>, memref<4x?x60xf32>
// CHECK: moegpu.grouped_gemm %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {layout = #moegpu.layout<nn>} : memref<?x512xbf16>, memref<8x512x256xbf16>, memref<9xi32>, memref<?x256xf32>
// CHECK: moegpu.grouped_gemm %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {layout = #moegpu.layout<tn>} : memref<?x256xbf16>, memref<?x64xbf16>, memref<9xi32>, memref<8x256x64xf32>
// CHECK: moegpu.grouped_gemm %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {layout = #moegpu.layout<tn>} : memref<?x256xbf16>, memref<?x64xbf16>, memref<2xi32>, memref<256x64xf32>
// CHECK: moegpu.grouped_gemm %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} block_scales(%{{.*}}, %{{.*}} : memref<256x?xf32>, memref<64x?xf32>) {layout = #moegpu.layout<tn>} : memref<256x?xf8E4M3FN>, memref<64x?xf8E4M3FN>, memref<9xi32>, memref<8x256x64xf32>
func.func @grouped_gemm(%a: memref<?x256xbf16>, %b: memref<8x512x256xbf16>,
                        %offsets: memref<9xi32>, %c: memref<?x256xbf16>,
                        %ah: memref<?x256xf16>, %bh: memref<8x64x256xf16>,
                        %ch: memref<?x64xf16>, %scale: memref<?xf32>,
                        %b1: memref<1x64x256xbf16>, %o1: memref<2xi32>,
                        %c1: memref<?x64xbf16>, %router: memref<60x256xbf16>,
                        %logits: memref<?x60xf32>, %dy: memref<?x512xbf16>,
                        %dx: memref<?x256xf32>, %act: memref<?x64xbf16>,
                        %dw: memref<8x256x64xf32>, %dw1: memref<256x64xf32>,
                        %partials: memref<4x?x60xf32>, %count: memref<1xi32>,
                        %at: memref<256x?xf8E4M3FN>, %bt: memref<64x?xf8E4M3FN>,
                        %ats: memref<256x?xf32>, %bts: memref<64x?xf32>) {
  moegpu.grouped_gemm %a, %b, %offsets, %c {epilogue = #moegpu.epilogue<swiglu>, tile = #moegpu.tile<m = 128, n = 128, k = 64, stages = 7>, sm_range = #moegpu.sm_range<first = 0, count = 112>} : memref<?x256xbf16>, memref<8x512x256xbf16>, memref<9xi32>, memref<?x256xbf16>
  moegpu.grouped_gemm %ah, %bh, %offsets, %ch scale %scale {epilogue = #moegpu.epilogue<row_scale>} : memref<?x256xf16>, memref<8x64x256xf16>, memref<9xi32>, memref<?x64xf16>, memref<?xf32>
  moegpu.grouped_gemm %a, %b1, %o1, %c1 {epilogue = #moegpu.epilogue<none>} : memref<?x256xbf16>, memref<1x64x256xbf16>, memref<2xi32>, memref<?x64xbf16>
  moegpu.grouped_gemm %a, %router, dense, %logits : memref<?x256xbf16>, memref<60x256xbf16>, memref<?x60xf32>
  moegpu.grouped_gemm %a, %router, dense, %partials split_k(%count : memref<1xi32>) : memref<?x256xbf16>, memref<60x256xbf16>, memref<4x?x60xf32>
  moegpu.grouped_gemm %dy, %b, %offsets, %dx {layout = #moegpu.layout<nn>} : memref<?x512xbf16>, memref<8x512x256xbf16>, memref<9xi32>, memref<?x256xf32>
  moegpu.grouped_gemm %a, %act, %offsets, %dw {layout = #moegpu.layout<tn>} : memref<?x256xbf16>, memref<?x64xbf16>, memref<9xi32>, memref<8x256x64xf32>
  moegpu.grouped_gemm %a, %act, %o1, %dw1 {layout = #moegpu.layout<tn>} : memref<?x256xbf16>, memref<?x64xbf16>, memref<2xi32>, memref<256x64xf32>
  moegpu.grouped_gemm %at, %bt, %offsets, %dw block_scales(%ats, %bts : memref<256x?xf32>, memref<64x?xf32>) {layout = #moegpu.layout<tn>} : memref<256x?xf8E4M3FN>, memref<64x?xf8E4M3FN>, memref<9xi32>, memref<8x256x64xf32>
  return
}

// CHECK-LABEL: func.func @specialized
// CHECK: %[[P:.*]] = moegpu.pipeline.create : <<m = 64, n = 64, k = 64, stages = 4>, bf16>
// CHECK: moegpu.warp_roles consumers = 1, producer_regs = 40, consumer_regs = 232 producer {
// CHECK:   moegpu.tile_loop %{{.*}} : memref<9xi32> columns 64 tiles 64 x 64 x 64 depth 256 on <first = 0, count = 4> {
// CHECK:   ^bb0(%{{.*}}: index, %{{.*}}: index, %{{.*}}: index, %{{.*}}: index, %{{.*}}: index, %{{.*}}: index):
// CHECK:     moegpu.produce %[[P]][%{{.*}}], %{{.*}}[%{{.*}}, %{{.*}}], %{{.*}}[%{{.*}}, %{{.*}}] : <<m = 64, n = 64, k = 64, stages = 4>, bf16>, memref<?x256xbf16>, memref<8x64x256xbf16>
// CHECK: } consumer {
// CHECK: ^bb0(%[[WG:.*]]: index):
// CHECK:     moegpu.tile_loop rows %{{.*}} columns 60 tiles 64 x 64 x 64 depth 256 on <first = 0, count = 4> {
// CHECK:     moegpu.tile_loop rows %{{.*}} columns 60 tiles 64 x 64 x 64 depth 256 on <first = 0, count = 4> split_count(%{{.*}} : memref<1xi32>) attributes {splits = 4 : i64} {
// CHECK:     moegpu.tile_loop %{{.*}} : memref<9xi32> k_grouped rows %{{.*}} columns 64 tiles 64 x 64 x 64 depth 0 on <first = 0, count = 4> {
// CHECK:     %[[ACC1:.*]] = moegpu.mma %[[P]][%{{.*}}], %{{.*}}, warpgroup %[[WG]] {pending = 1 : i64}
// CHECK:     moegpu.release %[[P]][%{{.*}}] : <<m = 64, n = 64, k = 64, stages = 4>, bf16>
// CHECK:     moegpu.release %[[P]][%{{.*}}] drain : <<m = 64, n = 64, k = 64, stages = 4>, bf16>
// CHECK:     moegpu.drain %[[P]] : <<m = 64, n = 64, k = 64, stages = 4>, bf16>
// CHECK:     %[[ACC:.*]] = moegpu.mma %[[P]][%{{.*}}], %{{.*}}, warpgroup %[[WG]] : <<m = 64, n = 64, k = 64, stages = 4>, bf16>, vector<32xf32>
// CHECK:     moegpu.store_tile %[[ACC]], %{{.*}}[%{{.*}}, %{{.*}}], warpgroup %[[WG]], row_end %{{.*}} scale %{{.*}} {epilogue = #moegpu.epilogue<row_scale>} : vector<32xf32>, memref<?x64xbf16>, memref<?xf32>
// CHECK:     %[[Q:.*]] = moegpu.pipeline.create : <<m = 64, n = 64, k = 64, stages = 4>, bf16, tn>
// CHECK:     moegpu.store_tile %{{.*}}, %{{.*}}[%{{.*}}, %{{.*}}, %{{.*}}], warpgroup %[[WG]], row_end %{{.*}} : vector<32xf32>, memref<8x256x64xf32>
func.func @specialized(%a: memref<?x256xbf16>, %b: memref<8x64x256xbf16>,
                       %offsets: memref<9xi32>, %c: memref<?x64xbf16>,
                       %scale: memref<?xf32>, %k: index, %end: index,
                       %dw: memref<8x256x64xf32>, %count: memref<1xi32>) {
  %p = moegpu.pipeline.create : !moegpu.pipeline<#moegpu.tile<m = 64, n = 64, k = 64, stages = 4>, bf16>
  moegpu.warp_roles consumers = 1, producer_regs = 40, consumer_regs = 232 producer {
    moegpu.tile_loop %offsets : memref<9xi32> columns 64 tiles 64 x 64 x 64 depth 256 on #moegpu.sm_range<first = 0, count = 4> {
    ^bb0(%e: index, %row: index, %col: index, %seq: index, %kb: index, %kf: index):
      moegpu.produce %p[%seq], %a[%row, %k], %b[%col, %k] : !moegpu.pipeline<#moegpu.tile<m = 64, n = 64, k = 64, stages = 4>, bf16>, memref<?x256xbf16>, memref<8x64x256xbf16>
    }
  } consumer {
  ^bb0(%wg: index):
    moegpu.tile_loop rows %end columns 60 tiles 64 x 64 x 64 depth 256 on #moegpu.sm_range<first = 0, count = 4> {
    ^bb0(%e: index, %row: index, %col: index, %seq: index, %kb: index, %kf: index):
    }
    moegpu.tile_loop rows %end columns 60 tiles 64 x 64 x 64 depth 256 on #moegpu.sm_range<first = 0, count = 4> split_count(%count : memref<1xi32>) attributes {splits = 4} {
    ^bb0(%e: index, %row: index, %col: index, %seq: index, %kb: index, %kf: index):
    }
    moegpu.tile_loop %offsets : memref<9xi32> k_grouped rows %end columns 64 tiles 64 x 64 x 64 depth 0 on #moegpu.sm_range<first = 0, count = 4> {
    ^bb0(%e: index, %row: index, %col: index, %seq: index, %kb: index, %kf: index):
    }
    moegpu.tile_loop %offsets : memref<9xi32> columns 64 tiles 64 x 64 x 64 depth 256 on #moegpu.sm_range<first = 0, count = 4> {
    ^bb0(%e: index, %row: index, %col: index, %seq: index, %kb: index, %kf: index):
      %zero = arith.constant dense<0.0> : vector<32xf32>
      %acc1 = moegpu.mma %p[%seq], %zero, warpgroup %wg {pending = 1} : !moegpu.pipeline<#moegpu.tile<m = 64, n = 64, k = 64, stages = 4>, bf16>, vector<32xf32>
      moegpu.release %p[%seq] : !moegpu.pipeline<#moegpu.tile<m = 64, n = 64, k = 64, stages = 4>, bf16>
      moegpu.release %p[%seq] drain : !moegpu.pipeline<#moegpu.tile<m = 64, n = 64, k = 64, stages = 4>, bf16>
      moegpu.drain %p : !moegpu.pipeline<#moegpu.tile<m = 64, n = 64, k = 64, stages = 4>, bf16>
      %acc = moegpu.mma %p[%seq], %zero, warpgroup %wg : !moegpu.pipeline<#moegpu.tile<m = 64, n = 64, k = 64, stages = 4>, bf16>, vector<32xf32>
      moegpu.store_tile %acc, %c[%row, %col], warpgroup %wg, row_end %end scale %scale {epilogue = #moegpu.epilogue<row_scale>} : vector<32xf32>, memref<?x64xbf16>, memref<?xf32>
      %q = moegpu.pipeline.create : !moegpu.pipeline<#moegpu.tile<m = 64, n = 64, k = 64, stages = 4>, bf16, tn>
      moegpu.store_tile %acc, %dw[%e, %row, %col], warpgroup %wg, row_end %end : vector<32xf32>, memref<8x256x64xf32>
    }
  }
  return
}

// GPT-OSS's expert GEMMs: biases, the clamped SwiGLU.
// CHECK-LABEL: func.func @biased
// CHECK: moegpu.grouped_gemm %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} bias(%{{.*}} : memref<8x512xbf16>) {alpha = 1.702000e+00 : f64, epilogue = #moegpu.epilogue<swiglu>, limit = 7.000000e+00 : f64} : memref<?x256xbf16>, memref<8x512x256xbf16>, memref<9xi32>, memref<?x256xbf16>
// CHECK: moegpu.grouped_gemm %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} scale %{{.*}} bias(%{{.*}} : memref<8x256xbf16>) {epilogue = #moegpu.epilogue<row_scale>} : memref<?x256xbf16>, memref<8x256x256xbf16>, memref<9xi32>, memref<?x256xbf16>, memref<?xf32>
func.func @biased(%a: memref<?x256xbf16>, %b: memref<8x512x256xbf16>,
                  %offsets: memref<9xi32>, %c: memref<?x256xbf16>,
                  %bias: memref<8x512xbf16>, %bd: memref<8x256x256xbf16>,
                  %scale: memref<?xf32>, %biasd: memref<8x256xbf16>) {
  moegpu.grouped_gemm %a, %b, %offsets, %c bias(%bias : memref<8x512xbf16>) {epilogue = #moegpu.epilogue<swiglu>, alpha = 1.702 : f64, limit = 7.0 : f64} : memref<?x256xbf16>, memref<8x512x256xbf16>, memref<9xi32>, memref<?x256xbf16>
  moegpu.grouped_gemm %a, %bd, %offsets, %c scale %scale bias(%biasd : memref<8x256xbf16>) {epilogue = #moegpu.epilogue<row_scale>} : memref<?x256xbf16>, memref<8x256x256xbf16>, memref<9xi32>, memref<?x256xbf16>, memref<?xf32>
  return
}

// CHECK-LABEL: func.func @fp8_gemm
// CHECK: moegpu.grouped_gemm %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} block_scales(%{{.*}}, %{{.*}} : memref<?x2xf32>, memref<8x4x2xf32>) {epilogue = #moegpu.epilogue<swiglu>, rounded_inputs} : memref<?x256xf8E4M3FN>, memref<8x384x256xf8E4M3FN>, memref<9xi32>, memref<?x192xbf16>
// CHECK: moegpu.promote %{{.*}} into %{{.*}} scales(%{{.*}}, %{{.*}}) [%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}], warpgroup %{{.*}}, row_end %{{.*}} {interleaved} : vector<64xf32>, memref<?x2xf32>, memref<8x4x2xf32>
func.func @fp8_gemm(%a: memref<?x256xf8E4M3FN>, %b: memref<8x384x256xf8E4M3FN>,
                    %offsets: memref<9xi32>, %c: memref<?x192xbf16>,
                    %as: memref<?x2xf32>, %bs: memref<8x4x2xf32>,
                    %acc: vector<64xf32>, %i: index) -> vector<64xf32> {
  moegpu.grouped_gemm %a, %b, %offsets, %c block_scales(%as, %bs : memref<?x2xf32>, memref<8x4x2xf32>) {epilogue = #moegpu.epilogue<swiglu>, rounded_inputs} : memref<?x256xf8E4M3FN>, memref<8x384x256xf8E4M3FN>, memref<9xi32>, memref<?x192xbf16>
  %r = moegpu.promote %acc into %acc scales(%as, %bs)[%i, %i, %i, %i], warpgroup %i, row_end %i {interleaved} : vector<64xf32>, memref<?x2xf32>, memref<8x4x2xf32>
  return %r : vector<64xf32>
}
