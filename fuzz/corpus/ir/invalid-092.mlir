func.func @f(%x: tensor<?x8xf32>, %g: tensor<4x8xf32>, %u: tensor<4x8xf32>, %d: tensor<8x4xf32>, %sg: tensor<2x8xf32>) {
  // expected-error @+1 {{expected expert gate of shape [1x8], got 'tensor<2x8xf32>'}}
  %y = moe.shared_expert %x, %g, %u, %d gate(%sg) : (tensor<?x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<8x4xf32>, tensor<2x8xf32>) -> tensor<?x8xf32>
  return
}
