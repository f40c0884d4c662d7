// REQUIRES: ptxas
// RUN: moe-opt %s --moe-sm90-pipeline -o %t.mlir
// RUN: %python %S/Inputs/gpu_binary.py %t.mlir > %t.ptx
// RUN: FileCheck %s --check-prefix=PTX < %t.ptx
// RUN: ptxas -arch=sm_90a -v %t.ptx -o %t.cubin 2>&1 | FileCheck %s

// moegpu.quantize_columns (the 128 x 1 tiles, transposed) as ptxas takes
// it: no spills, one barrier, the shared tile (128 x 32 values, a column
// padded to 129) and the four warps' maxima. The rows are read 2 bytes a
// lane (a warp 64 bytes of a row), each lane's four codes stored in one
// 4-byte access (a warp a 128-byte line of the transposed output).
// CHECK: Compiling entry function 'quantize_columns' for 'sm_90a'
// CHECK: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
// CHECK: used 1 barriers, 17024 bytes smem
// PTX: .entry quantize_columns(
// PTX-DAG: ld.global.b16
// PTX-DAG: cvt.rn.satfinite.e4m3x2.f32
// PTX-DAG: bar.sync
// PTX-DAG: st.global.v2.b16
gpu.module @k {
  gpu.func @quantize_columns(%a: memref<?x4096xbf16>, %q: memref<4096x?xf8E4M3FN>, %s: memref<4096x?xf32>, %o: memref<9xi32>) kernel {
    moegpu.quantize_columns %a, %q, %s, %o : memref<?x4096xbf16>, memref<4096x?xf8E4M3FN>, memref<4096x?xf32>, memref<9xi32>
    gpu.return
  }
}

// moegpu.quantize_blocks at DeepSeek-V3's expert shape (2048 x 7168, with
// the transposed codes): no spills, one barrier, the block's maxima and
// the transposed byte tile in shared memory; the weights read 16 bytes a
// lane.
// RUN: moe-opt %S/Inputs/quantize-blocks.mlir --moe-sm90-pipeline -o %t-b.mlir
// RUN: %python %S/Inputs/gpu_binary.py %t-b.mlir > %t-b.ptx
// RUN: FileCheck %s --check-prefix=BPTX < %t-b.ptx
// RUN: ptxas -arch=sm_90a -v %t-b.ptx -o %t-b.cubin 2>&1 | FileCheck %s --check-prefix=BLOCKS
// BLOCKS: Compiling entry function 'quantize_blocks' for 'sm_90a'
// BLOCKS: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
// BLOCKS: used 1 barriers, 16928 bytes smem
// BPTX: .entry quantize_blocks(
// BPTX-DAG: ld.global.v4.b32
// BPTX-DAG: cvt.rn.satfinite.e4m3x2.f32
// BPTX-DAG: st.shared.b8

// moegpu.quantize_columns from e4m3 rows and their row scales (DeepSeek-V3's
// 7168 channels): a code a lane, decoded by cvt to f16 and scaled, the
// same tile and registers as from 16-bit rows.
// RUN: moe-opt %S/Inputs/quantize-fp8-columns.mlir --moe-sm90-pipeline -o %t-c.mlir
// RUN: %python %S/Inputs/gpu_binary.py %t-c.mlir > %t-c.ptx
// RUN: FileCheck %s --check-prefix=CPTX < %t-c.ptx
// RUN: ptxas -arch=sm_90a -v %t-c.ptx -o %t-c.cubin 2>&1 | FileCheck %s --check-prefix=CODES
// CODES: Compiling entry function 'quantize_rows_columns' for 'sm_90a'
// CODES: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
// CODES: used 1 barriers, 17024 bytes smem
// CPTX: .entry quantize_rows_columns(
// CPTX-DAG: ld.global.b8
// CPTX-DAG: cvt.rn.f16x2.e4m3x2
// CPTX-DAG: cvt.rn.satfinite.e4m3x2.f32
