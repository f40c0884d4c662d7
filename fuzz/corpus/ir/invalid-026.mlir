func.func @f(%x: tensor<?x8xbf16>, %wr: tensor<4x8xf32>, %wg: tensor<4x4x8xf32>, %wu: tensor<4x4x8xf32>, %wd: tensor<4x8x4xf32>) -> tensor<?x8xbf16> {
  // expected-error @+1 {{expected input element type 'f32', got 'bf16'}}
  %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd) {config = #moe.layer_config<hidden = 8, experts = 4, top_k = 2, ffn = 4, dtype = f32>}
       : (tensor<?x8xbf16>, tensor<4x8xf32>, tensor<4x4x8xf32>, tensor<4x4x8xf32>, tensor<4x8x4xf32>) -> tensor<?x8xbf16>
  return %y : tensor<?x8xbf16>
}
