// A bf16 layer whose router weight stays f32 (its logits come from the
// SIMT router kernel, not the bf16 tensor-core GEMM).
func.func @layer(%x: tensor<?x64xbf16>, %wr: tensor<8x64xf32>, %wg: tensor<8x32x64xbf16>,
                 %wu: tensor<8x32x64xbf16>, %wd: tensor<8x64x32xbf16>) -> tensor<?x64xbf16> {
  %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd)
         {config = #moe.layer_config<hidden = 64, experts = 8, top_k = 2, ffn = 32, dtype = bf16>}
       : (tensor<?x64xbf16>, tensor<8x64xf32>, tensor<8x32x64xbf16>, tensor<8x32x64xbf16>, tensor<8x64x32xbf16>) -> tensor<?x64xbf16>
  return %y : tensor<?x64xbf16>
}
