// The dispatched rows as the FP8 forward keeps them (e4m3 codes with a
// scale per row per 128 columns) at DeepSeek-V3's hidden size, turned into
// the weight gradient's 128 x 1 tiles.
gpu.module @k {
  gpu.func @quantize_rows_columns(%a: memref<?x7168xf8E4M3FN>, %q: memref<7168x?xf8E4M3FN>, %s: memref<7168x?xf32>, %o: memref<9xi32>, %rs: memref<?x56xf32>) kernel {
    moegpu.quantize_columns %a, %q, %s, %o in_scale(%rs : memref<?x56xf32>) : memref<?x7168xf8E4M3FN>, memref<7168x?xf8E4M3FN>, memref<7168x?xf32>, memref<9xi32>
    gpu.return
  }
}
