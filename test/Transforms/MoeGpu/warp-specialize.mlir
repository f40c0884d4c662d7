// RUN: moe-opt %s -split-input-file -moegpu-warp-specialize -verify-diagnostics | FileCheck %s

// A grouped GEMM becomes a pipeline, a TMA producer and wgmma consumers
// that walk the same persistent tile sequence.

// CHECK-LABEL: func.func @down
// CHECK-SAME: (%[[A:.*]]: memref<?x2048xbf16>, %[[B:.*]]: memref<256x7168x2048xbf16>, %[[O:.*]]: memref<257xi32>, %[[C:.*]]: memref<?x7168xbf16>, %[[S:.*]]: memref<?xf32>)
// CHECK: %[[P:.*]] = moegpu.pipeline.create : <<m = 128, n = 128, k = 64, stages = 7>, bf16>
// CHECK: moegpu.warp_roles consumers = 2, producer_regs = 40, consumer_regs = 232 producer {
// CHECK:   moegpu.tile_loop %[[O]] : memref<257xi32> columns 7168 tiles 128 x 128 x 64 depth 2048 on <first = 0, count = 112> {
// CHECK:   ^bb0(%[[E:.*]]: index, %[[ROW:.*]]: index, %[[COL:.*]]: index, %[[BASE:.*]]: index, %[[KBS:.*]]: index, %{{.*}}: index):
// CHECK:     %[[N:.*]] = arith.constant 7168 : index
// CHECK:     %[[EN:.*]] = arith.muli %[[E]], %[[N]]
// CHECK:     %[[BROW:.*]] = arith.addi %[[EN]], %[[COL]]
// CHECK:     scf.for %[[KI:.*]] = %{{.*}} to %[[KBS]] step
// CHECK:       %[[IT:.*]] = arith.addi %[[BASE]], %[[KI]]
// CHECK:       %[[K:.*]] = arith.muli %[[KI]], %{{.*}}
// CHECK:       moegpu.produce %[[P]][%[[IT]]], %[[A]][%[[ROW]], %[[K]]], %[[B]][%[[BROW]], %[[K]]]
// CHECK: } consumer {
// CHECK: ^bb0(%[[WG:.*]]: index):
// CHECK:   moegpu.tile_loop %[[O]] : memref<257xi32> columns 7168 tiles 128 x 128 x 64 depth 2048 on <first = 0, count = 112> {
// CHECK:   ^bb0(%[[E2:.*]]: index, %[[ROW2:.*]]: index, %[[COL2:.*]]: index, %[[BASE2:.*]]: index, %[[KBS2:.*]]: index, %{{.*}}: index):
// The tile's first k block ignores the accumulator (`first`); then one
// wgmma batch stays in flight: each k-block's mma gives back the previous
// k-block's slot, and the last is drained after the loop.
// CHECK:     %[[FIRST:.*]] = moegpu.mma %[[P]][%[[BASE2]]], %{{.*}}, warpgroup %[[WG]] {first, pending = 1 : i64}
// CHECK:     %[[ACC:.*]] = scf.for %[[KJ:.*]] = {{.*}} iter_args(%[[X:.*]] = %[[FIRST]]) -> (vector<64xf32>)
// CHECK:       %[[IT2:.*]] = arith.addi %{{.*}}, %[[KJ]]
// CHECK:       moegpu.mma %[[P]][%[[IT2]]], %[[X]], warpgroup %[[WG]] {pending = 1 : i64}
// CHECK:       scf.if
// CHECK:         %[[PREV:.*]] = arith.subi %[[IT2]], %{{.*}}
// CHECK:         moegpu.release %[[P]][%[[PREV]]] :
// CHECK:     %[[PAST:.*]] = arith.addi %[[BASE2]], %[[KBS2]]
// CHECK:     %[[LAST:.*]] = arith.subi %[[PAST]], %{{.*}}
// CHECK:     moegpu.release %[[P]][%[[LAST]]] drain :
// CHECK:     %[[NEXT:.*]] = arith.addi %[[E2]], %{{.*}}
// CHECK:     %[[END:.*]] = memref.load %[[O]][%[[NEXT]]]
// CHECK:     %[[ENDI:.*]] = arith.index_cast %[[END]]
// CHECK:     moegpu.store_tile %[[ACC]], %[[C]][%[[ROW2]], %[[COL2]]], warpgroup %[[WG]], row_end %[[ENDI]] scale %[[S]] {epilogue = #moegpu.epilogue<row_scale>}
// CHECK-NOT: moegpu.grouped_gemm
func.func @down(%a: memref<?x2048xbf16>, %b: memref<256x7168x2048xbf16>, %o: memref<257xi32>, %c: memref<?x7168xbf16>, %s: memref<?xf32>) {
  moegpu.grouped_gemm %a, %b, %o, %c scale %s {epilogue = #moegpu.epilogue<row_scale>, tile = #moegpu.tile<m = 128, n = 128, k = 64, stages = 7>, sm_range = #moegpu.sm_range<first = 0, count = 112>} : memref<?x2048xbf16>, memref<256x7168x2048xbf16>, memref<257xi32>, memref<?x7168xbf16>, memref<?xf32>
  return
}

// -----

// One consumer warpgroup for a 64-row tile; its budget is capped at 232.
// CHECK-LABEL: func.func @one_consumer
// CHECK: moegpu.warp_roles consumers = 1, producer_regs = 40, consumer_regs = 232
// CHECK: vector<128xf32>
func.func @one_consumer(%a: memref<?x64xbf16>, %b: memref<2x256x64xbf16>, %o: memref<3xi32>, %c: memref<?x256xbf16>) {
  moegpu.grouped_gemm %a, %b, %o, %c {tile = #moegpu.tile<m = 64, n = 256, k = 64, stages = 4>, sm_range = #moegpu.sm_range<first = 0, count = 8>} : memref<?x64xbf16>, memref<2x256x64xbf16>, memref<3xi32>, memref<?x256xbf16>
  return
}

// -----

func.func @no_tile(%a: memref<?x64xbf16>, %b: memref<4x64x64xbf16>, %o: memref<5xi32>, %c: memref<?x64xbf16>) {
  // expected-error @+1 {{'moegpu.grouped_gemm' op needs a tile and an sm_range to be warp specialized (run moe-select-tiles and moe-partition-sms first)}}
  moegpu.grouped_gemm %a, %b, %o, %c : memref<?x64xbf16>, memref<4x64x64xbf16>, memref<5xi32>, memref<?x64xbf16>
  return
}

// -----

func.func @too_much_smem(%a: memref<?x64xbf16>, %b: memref<4x256x64xbf16>, %o: memref<5xi32>, %c: memref<?x256xbf16>) {
  // expected-error @+1 {{'moegpu.grouped_gemm' op tile needs 262144 bytes of shared memory, more than the 232448 a CTA may opt in to}}
  moegpu.grouped_gemm %a, %b, %o, %c {tile = #moegpu.tile<m = 256, n = 256, k = 64, stages = 4>, sm_range = #moegpu.sm_range<first = 0, count = 8>} : memref<?x64xbf16>, memref<4x256x64xbf16>, memref<5xi32>, memref<?x256xbf16>
  return
}

// -----

func.func @too_few_registers(%a: memref<?x64xbf16>, %b: memref<4x256x64xbf16>, %o: memref<5xi32>, %c: memref<?x256xbf16>) {
  // expected-error @+1 {{'moegpu.grouped_gemm' op tile 256x256 leaves 112 registers per consumer thread, too few for 128 accumulators}}
  moegpu.grouped_gemm %a, %b, %o, %c {tile = #moegpu.tile<m = 256, n = 256, k = 64, stages = 2>, sm_range = #moegpu.sm_range<first = 0, count = 8>} : memref<?x64xbf16>, memref<4x256x64xbf16>, memref<5xi32>, memref<?x256xbf16>
  return
}

// -----

// dX = dY . W: B read as stored, [E, K, N], from row e * K + k.
// CHECK-LABEL: func.func @dx
// CHECK: %[[P:.*]] = moegpu.pipeline.create : <<m = 128, n = 128, k = 64, stages = 7>, bf16, nn>
// CHECK: moegpu.tile_loop %{{.*}} : memref<9xi32> columns 256 tiles 128 x 128 x 64 depth 512
// CHECK: ^bb0(%[[E:.*]]: index, %[[ROW:.*]]: index, %[[COL:.*]]: index, %{{.*}}: index, %{{.*}}: index, %{{.*}}: index):
// CHECK:   %[[EK:.*]] = arith.muli %[[E]], %c512
// CHECK:   scf.for
// CHECK:     %[[K:.*]] = arith.muli
// CHECK:     %[[BK:.*]] = arith.addi %[[EK]], %[[K]]
// CHECK:     moegpu.produce %[[P]][%{{.*}}], %{{.*}}[%[[ROW]], %[[K]]], %{{.*}}[%[[COL]], %[[BK]]]
// CHECK: moegpu.store_tile %{{.*}}, %{{.*}}[%{{.*}}, %{{.*}}], warpgroup
func.func @dx(%a: memref<?x512xbf16>, %b: memref<8x512x256xbf16>, %o: memref<9xi32>, %c: memref<?x256xf32>) {
  moegpu.grouped_gemm %a, %b, %o, %c {layout = #moegpu.layout<nn>, tile = #moegpu.tile<m = 128, n = 128, k = 64, stages = 7>, sm_range = #moegpu.sm_range<first = 0, count = 16>} : memref<?x512xbf16>, memref<8x512x256xbf16>, memref<9xi32>, memref<?x256xf32>
  return
}

// -----

// dW_e = dY_e^T . X_e: the group's rows are the reduction, its k blocks
// counted per tile; an empty group drains nothing and stores zeros.
// CHECK-LABEL: func.func @dw
// CHECK: %[[P:.*]] = moegpu.pipeline.create : <<m = 128, n = 128, k = 64, stages = 7>, bf16, tn>
// CHECK: moegpu.tile_loop %[[O:.*]] : memref<9xi32> k_grouped rows %{{.*}} columns 256 tiles 128 x 128 x 64 depth 0
// CHECK: ^bb0(%[[E:.*]]: index, %[[ROW:.*]]: index, %[[COL:.*]]: index, %{{.*}}: index, %[[KBS:.*]]: index, %{{.*}}: index):
// CHECK:   %[[START:.*]] = memref.load %[[O]][%[[E]]]
// CHECK:   %[[FIRST:.*]] = arith.index_cast %[[START]]
// CHECK:   scf.for %{{.*}} = %{{.*}} to %[[KBS]]
// CHECK:     %[[K:.*]] = arith.muli
// CHECK:     %[[R:.*]] = arith.addi %[[FIRST]], %[[K]]
// CHECK:     moegpu.produce %[[P]][%{{.*}}], %{{.*}}[%[[ROW]], %[[R]]], %{{.*}}[%[[COL]], %[[R]]]
// CHECK: } consumer {
// CHECK: ^bb0(%{{.*}}: index, %[[ROW2:.*]]: index, %[[COL2:.*]]: index, %{{.*}}: index, %[[KBS2:.*]]: index, %{{.*}}: index):
// The wait for the last batch is on every path (else ptxas serializes
// the kernel's wgmma); only the slot release is conditional.
// CHECK:   moegpu.drain %[[P]]
// CHECK:   %[[ANY:.*]] = arith.cmpi ugt, %[[KBS2]], %c0
// CHECK:   scf.if %[[ANY]] {
// CHECK:     moegpu.release %[[P]][%{{.*}}] :
// CHECK:   moegpu.store_tile %{{.*}}, %{{.*}}[%{{.*}}, %[[ROW2]], %[[COL2]]], warpgroup %{{.*}}, row_end %{{.*}} : vector<64xf32>, memref<8x384x256xf32>
func.func @dw(%a: memref<?x384xbf16>, %b: memref<?x256xbf16>, %o: memref<9xi32>, %c: memref<8x384x256xf32>) {
  moegpu.grouped_gemm %a, %b, %o, %c {layout = #moegpu.layout<tn>, tile = #moegpu.tile<m = 128, n = 128, k = 64, stages = 7>, sm_range = #moegpu.sm_range<first = 0, count = 16>} : memref<?x384xbf16>, memref<?x256xbf16>, memref<9xi32>, memref<8x384x256xf32>
  return
}

// -----

// FP8: each k block is its own wgmma batch from zero (pending 0: complete,
// its slot released), then scaled into the accumulator.
// CHECK-LABEL: func.func @fp8_up
// CHECK: moegpu.pipeline.create : <<m = 128, n = 128, k = 128, stages = 6>, f8E4M3FN>
// CHECK: moegpu.produce
// CHECK: scf.for {{.*}} iter_args(%[[ACC:.*]] = %{{.*}}) -> (vector<64xf32>)
// CHECK: %[[PART:.*]] = moegpu.mma %{{.*}}[%{{.*}}], %{{.*}}, warpgroup %{{.*}} {first} :
// CHECK: moegpu.promote %[[PART]] into %[[ACC]] scales(%{{.*}}, %{{.*}}) [%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}], warpgroup %{{.*}}, row_end %{{.*}} {interleaved}
// CHECK-NOT: moegpu.release
// CHECK: moegpu.store_tile {{.*}}rounded_inputs
func.func @fp8_up(%a: memref<?x256xf8E4M3FN>, %b: memref<8x384x256xf8E4M3FN>, %o: memref<9xi32>, %c: memref<?x192xbf16>, %as: memref<?x2xf32>, %bs: memref<8x4x2xf32>) {
  moegpu.grouped_gemm %a, %b, %o, %c block_scales(%as, %bs : memref<?x2xf32>, memref<8x4x2xf32>) {epilogue = #moegpu.epilogue<swiglu>, rounded_inputs, tile = #moegpu.tile<m = 128, n = 128, k = 128, stages = 6>, sm_range = #moegpu.sm_range<first = 0, count = 8>} : memref<?x256xf8E4M3FN>, memref<8x384x256xf8E4M3FN>, memref<9xi32>, memref<?x192xbf16>
  return
}

// -----

// The FP8 weight gradient: the transposed codes are K-major (the pipeline
// of the nt layout), the groups' rows split the reduction, and a tile's k
// blocks count from its group's first row / 128 in the per-column scales.
// Its columns take no block of b's scales, so a 192-column tile is one.
// CHECK-LABEL: func.func @fp8_wgrad
// CHECK: %[[P:.*]] = moegpu.pipeline.create : <<m = 128, n = 192, k = 128, stages = 4>, f8E4M3FN>
// CHECK: moegpu.produce %[[P]]
// CHECK: } consumer {
// CHECK: %[[START:.*]] = memref.load %{{.*}}[%{{.*}}] : memref<9xi32>
// CHECK: %[[ROW:.*]] = arith.index_cast %[[START]]
// CHECK: %[[FIRST:.*]] = arith.divui %[[ROW]], %{{.*}} : index
// CHECK: scf.for %[[KB:.*]] = {{.*}} iter_args(%[[ACC:.*]] = %{{.*}}) -> (vector<96xf32>)
// CHECK: %[[PART:.*]] = moegpu.mma %[[P]][%{{.*}}], %{{.*}}, warpgroup %{{.*}} {first} :
// CHECK: %[[BLOCK:.*]] = arith.addi %[[FIRST]], %[[KB]] : index
// CHECK: moegpu.promote %[[PART]] into %[[ACC]] scales(%{{.*}}, %{{.*}}) [%{{.*}}, %{{.*}}, %{{.*}}, %[[BLOCK]]], warpgroup %{{.*}}, row_end %{{.*}} : vector<96xf32>, memref<256x?xf32>, memref<192x?xf32>
// CHECK: moegpu.store_tile
func.func @fp8_wgrad(%a: memref<256x?xf8E4M3FN>, %b: memref<192x?xf8E4M3FN>, %o: memref<9xi32>, %c: memref<8x256x192xf32>, %as: memref<256x?xf32>, %bs: memref<192x?xf32>) {
  moegpu.grouped_gemm %a, %b, %o, %c block_scales(%as, %bs : memref<256x?xf32>, memref<192x?xf32>) {layout = #moegpu.layout<tn>, tile = #moegpu.tile<m = 128, n = 192, k = 128, stages = 4>, sm_range = #moegpu.sm_range<first = 0, count = 8>} : memref<256x?xf8E4M3FN>, memref<192x?xf8E4M3FN>, memref<9xi32>, memref<8x256x192xf32>
  return
}

// -----

func.func @fp8_wide(%a: memref<?x256xf8E4M3FN>, %b: memref<8x384x256xf8E4M3FN>, %o: memref<9xi32>, %c: memref<?x384xbf16>, %as: memref<?x2xf32>, %bs: memref<8x3x2xf32>) {
  // expected-error @+1 {{'moegpu.grouped_gemm' op FP8 tile 128x192x128 must have k = 128 (one block of scales) and an n that divides 128 (one block of b's scales)}}
  moegpu.grouped_gemm %a, %b, %o, %c block_scales(%as, %bs : memref<?x2xf32>, memref<8x3x2xf32>) {tile = #moegpu.tile<m = 128, n = 192, k = 128, stages = 4>, sm_range = #moegpu.sm_range<first = 0, count = 8>} : memref<?x256xf8E4M3FN>, memref<8x384x256xf8E4M3FN>, memref<9xi32>, memref<?x384xbf16>
  return
}

// -----

func.func @fp8_registers(%a: memref<?x256xf8E4M3FN>, %b: memref<8x256x256xf8E4M3FN>, %o: memref<9xi32>, %c: memref<?x256xbf16>, %as: memref<?x2xf32>, %bs: memref<8x2x2xf32>) {
  // expected-error @+1 {{'moegpu.grouped_gemm' op tile 128x256 leaves 232 registers per consumer thread, too few for 256 accumulators}}
  moegpu.grouped_gemm %a, %b, %o, %c block_scales(%as, %bs : memref<?x2xf32>, memref<8x2x2xf32>) {tile = #moegpu.tile<m = 128, n = 256, k = 128, stages = 4>, sm_range = #moegpu.sm_range<first = 0, count = 8>} : memref<?x256xf8E4M3FN>, memref<8x256x256xf8E4M3FN>, memref<9xi32>, memref<?x256xbf16>
  return
}

// -----

func.func @k128_bf16(%a: memref<?x64xbf16>, %b: memref<4x64x64xbf16>, %o: memref<5xi32>, %c: memref<?x64xbf16>) {
  // expected-error @+1 {{'moegpu.grouped_gemm' op tile k 128 is for FP8; 16-bit operands take k = 64}}
  moegpu.grouped_gemm %a, %b, %o, %c {tile = #moegpu.tile<m = 128, n = 64, k = 128, stages = 4>, sm_range = #moegpu.sm_range<first = 0, count = 8>} : memref<?x64xbf16>, memref<4x64x64xbf16>, memref<5xi32>, memref<?x64xbf16>
  return
}

// -----

// Split K (the router at few tokens): both loops take the slices; the
// producer's boxes start at the slice's first k block, the consumers'
// loop reports the slice count and stores each slice's partial sums from
// registers into c's slice (the group argument).
// CHECK-LABEL: func.func @split_router
// CHECK-SAME: (%[[A:.*]]: memref<?x512xbf16>, %[[B:.*]]: memref<16x512xbf16>, %[[C:.*]]: memref<2x?x16xf32>, %[[N:.*]]: memref<1xi32>)
// CHECK: producer {
// CHECK:   moegpu.tile_loop rows %[[ROWS:.*]] columns 16 tiles 128 x 64 x 64 depth 512 on <first = 0, count = 132> attributes {splits = 2 : i64} {
// CHECK:   ^bb0(%{{.*}}: index, %[[ROW:.*]]: index, %[[COL:.*]]: index, %[[BASE:.*]]: index, %{{.*}}: index, %[[KF:.*]]: index):
// CHECK:     %[[K0:.*]] = arith.muli %[[KF]], %{{.*}}
// CHECK:     scf.for %[[KB:.*]] =
// CHECK:       %[[KK:.*]] = arith.muli %[[KB]]
// CHECK:       %[[K:.*]] = arith.addi %[[K0]], %[[KK]]
// CHECK:       moegpu.produce %{{.*}}, %[[A]][%[[ROW]], %[[K]]], %[[B]][%[[COL]], %[[K]]]
// CHECK: } consumer {
// CHECK:   moegpu.tile_loop rows %[[ROWS]] columns 16 tiles 128 x 64 x 64 depth 512 on <first = 0, count = 132> split_count(%[[N]] : memref<1xi32>) attributes {splits = 2 : i64} {
// CHECK:   ^bb0(%[[SLICE:[^:]*]]: index, %[[ROW2:[^:]*]]: index, %[[COL2:[^:]*]]: index,
// CHECK:     moegpu.store_tile %{{.*}}, %[[C]][%[[SLICE]], %[[ROW2]], %[[COL2]]], warpgroup %{{.*}}, row_end %[[ROWS]] :
func.func @split_router(%a: memref<?x512xbf16>, %b: memref<16x512xbf16>, %c: memref<2x?x16xf32>, %n: memref<1xi32>) {
  moegpu.grouped_gemm %a, %b, dense, %c split_k(%n : memref<1xi32>) {tile = #moegpu.tile<m = 128, n = 64, k = 64, stages = 8>, sm_range = #moegpu.sm_range<first = 0, count = 132>} : memref<?x512xbf16>, memref<16x512xbf16>, memref<2x?x16xf32>
  return
}
