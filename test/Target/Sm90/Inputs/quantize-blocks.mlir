gpu.module @k {
  gpu.func @quantize_blocks(%w: memref<8x2048x7168xf32>, %q: memref<8x2048x7168xf8E4M3FN>, %s: memref<8x16x56xf32>, %t: memref<8x7168x2048xf8E4M3FN>) kernel {
    moegpu.quantize_blocks %w, %q, %s transposed(%t : memref<8x7168x2048xf8E4M3FN>) : memref<8x2048x7168xf32>, memref<8x2048x7168xf8E4M3FN>, memref<8x16x56xf32>
    gpu.return
  }
}
