// One rank's share of an expert-parallel layer (2 of 8 experts).
func.func @shard(%x: tensor<?x64xbf16>, %wr: tensor<8x64xbf16>, %wg: tensor<4x32x64xbf16>,
                 %wu: tensor<4x32x64xbf16>, %wd: tensor<4x64x32xbf16>) -> tensor<?x64xbf16> {
  %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd)
         {config = #moe.layer_config<hidden = 64, experts = 8, top_k = 2, ffn = 32, dtype = bf16>, ep_size = 2}
       : (tensor<?x64xbf16>, tensor<8x64xbf16>, tensor<4x32x64xbf16>, tensor<4x32x64xbf16>, tensor<4x64x32xbf16>) -> tensor<?x64xbf16>
  return %y : tensor<?x64xbf16>
}
