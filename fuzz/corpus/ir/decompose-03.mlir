func.func @static_tokens(%x: tensor<5x8xf32>, %wr: tensor<4x8xf32>,
                         %wg: tensor<4x16x8xf32>, %wu: tensor<4x16x8xf32>,
                         %wd: tensor<4x8x16xf32>) -> tensor<5x8xf32> {
  %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd)
         {config = #moe.layer_config<hidden = 8, experts = 4, top_k = 2,
             ffn = 16, dtype = f32>}
       : (tensor<5x8xf32>, tensor<4x8xf32>, tensor<4x16x8xf32>,
          tensor<4x16x8xf32>, tensor<4x8x16xf32>) -> tensor<5x8xf32>
  return %y : tensor<5x8xf32>
}
