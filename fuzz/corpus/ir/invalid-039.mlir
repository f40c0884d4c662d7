func.func @f(%x: tensor<?x8xf32>, %wr: tensor<4x8xf32>, %wg: tensor<4x4x8xf32>, %wu: tensor<4x4x8xf32>, %wd: tensor<4x8x4xf32>, %sg: tensor<8x8xf32>, %su: tensor<8x4xf32>, %sd: tensor<8x8xf32>) -> tensor<?x8xf32> {
  // expected-error @+1 {{expected shared up weight of shape [8x8], got 'tensor<8x4xf32>'}}
  %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd) shared(%sg, %su, %sd) {config = #moe.layer_config<hidden = 8, experts = 4, top_k = 2, ffn = 4, dtype = f32, shared_experts = 2, shared_ffn = 4>}
       : (tensor<?x8xf32>, tensor<4x8xf32>, tensor<4x4x8xf32>, tensor<4x4x8xf32>, tensor<4x8x4xf32>, tensor<8x8xf32>, tensor<8x4xf32>, tensor<8x8xf32>) -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}
