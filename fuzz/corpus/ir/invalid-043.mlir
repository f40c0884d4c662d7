func.func @f(%x: tensor<?x8xf32>, %wr: tensor<4x8xf32>, %wg: tensor<4x4x8xf32>, %wu: tensor<4x4x8xf32>, %wd: tensor<4x8x4xf32>, %sg: tensor<4x8xf32>, %su: tensor<4x8xf32>, %sd: tensor<8x4xf32>, %g: tensor<8x1xf32>) -> tensor<?x8xf32> {
  // expected-error @+1 {{expected shared expert gate of shape [1x8], got 'tensor<8x1xf32>'}}
  %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd) shared(%sg, %su, %sd) shared_gate(%g) {config = #moe.layer_config<hidden = 8, experts = 4, top_k = 2, ffn = 4, dtype = f32, shared_experts = 1, shared_ffn = 4, shared_gate = true>}
       : (tensor<?x8xf32>, tensor<4x8xf32>, tensor<4x4x8xf32>, tensor<4x4x8xf32>, tensor<4x8x4xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<8x4xf32>, tensor<8x1xf32>) -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}
