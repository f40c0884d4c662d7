func.func @f(%x: tensor<?x8xf32>, %g: tensor<4x8xf32>, %u: tensor<8x8xf32>, %d: tensor<8x4xf32>) {
  // expected-error @+1 {{expected up weight of shape [4x8], got 'tensor<8x8xf32>'}}
  %y = moe.shared_expert %x, %g, %u, %d : (tensor<?x8xf32>, tensor<4x8xf32>, tensor<8x8xf32>, tensor<8x4xf32>) -> tensor<?x8xf32>
  return
}
