func.func @f(%x: tensor<?x8xf32>, %g: tensor<4x8xf32>, %u: tensor<4x8xf32>, %d: tensor<4x8xf32>) {
  // expected-error @+1 {{expected down weight of shape [8x4], got 'tensor<4x8xf32>'}}
  %y = moe.shared_expert %x, %g, %u, %d : (tensor<?x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<?x8xf32>
  return
}
