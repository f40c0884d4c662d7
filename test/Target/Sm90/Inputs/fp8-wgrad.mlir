// DeepSeek-V3's FP8 weight gradients per expert (256 experts): the down
// projection's dW [7168, 2048] = dY^T . h and the gate and up
// projections' dW [4096, 7168] = d(gate, up)^T . x, from the transposed
// codes of a capacity of rows.
module attributes {gpu.container_module, moe.sm_partition = #moe.sm_partition<sms = 132, comm = 20>} {
  gpu.module @k {
    gpu.func @dw_down(%dy: memref<7168x?xf8E4M3FN>, %h: memref<2048x?xf8E4M3FN>, %o: memref<257xi32>, %dw: memref<256x7168x2048xf32>, %dys: memref<7168x?xf32>, %hs: memref<2048x?xf32>) kernel {
      moegpu.grouped_gemm %dy, %h, %o, %dw block_scales(%dys, %hs : memref<7168x?xf32>, memref<2048x?xf32>) {layout = #moegpu.layout<tn>} : memref<7168x?xf8E4M3FN>, memref<2048x?xf8E4M3FN>, memref<257xi32>, memref<256x7168x2048xf32>
      gpu.return
    }
    gpu.func @dw_up(%dg: memref<4096x?xf8E4M3FN>, %x: memref<7168x?xf8E4M3FN>, %o: memref<257xi32>, %dw: memref<256x4096x7168xf32>, %dgs: memref<4096x?xf32>, %xs: memref<7168x?xf32>) kernel {
      moegpu.grouped_gemm %dg, %x, %o, %dw block_scales(%dgs, %xs : memref<4096x?xf32>, memref<7168x?xf32>) {layout = #moegpu.layout<tn>} : memref<4096x?xf8E4M3FN>, memref<7168x?xf8E4M3FN>, memref<257xi32>, memref<256x4096x7168xf32>
      gpu.return
    }
  }
}
