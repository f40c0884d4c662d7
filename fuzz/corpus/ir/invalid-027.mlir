func.func @f(%x: tensor<?x8xbf16>, %wr: tensor<4x8xf16>, %wg: tensor<4x4x8xbf16>, %wu: tensor<4x4x8xbf16>, %wd: tensor<4x8x4xbf16>) -> tensor<?x8xbf16> {
  // expected-error @+1 {{expected router weight element type f32 or 'bf16', got 'f16'}}
  %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd) {config = #moe.layer_config<hidden = 8, experts = 4, top_k = 2, ffn = 4, dtype = bf16>}
       : (tensor<?x8xbf16>, tensor<4x8xf16>, tensor<4x4x8xbf16>, tensor<4x4x8xbf16>, tensor<4x8x4xbf16>) -> tensor<?x8xbf16>
  return %y : tensor<?x8xbf16>
}
