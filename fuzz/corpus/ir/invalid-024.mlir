func.func @f(%x: tensor<?x16xf32>, %wr: tensor<4x8xf32>, %wg: tensor<4x4x8xf32>, %wu: tensor<4x4x8xf32>, %wd: tensor<4x8x4xf32>) -> tensor<?x8xf32> {
  // expected-error @+1 {{expected input dim 1 (hidden) to be 8, got 16}}
  %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd) {config = #moe.layer_config<hidden = 8, experts = 4, top_k = 2, ffn = 4, dtype = f32>}
       : (tensor<?x16xf32>, tensor<4x8xf32>, tensor<4x4x8xf32>, tensor<4x4x8xf32>, tensor<4x8x4xf32>) -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}
