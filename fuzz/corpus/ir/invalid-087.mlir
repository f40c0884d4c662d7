func.func @f(%x: tensor<?x8xf32>, %g: tensor<?x8xf32>, %u: tensor<4x8xf32>, %d: tensor<8x4xf32>) {
  // expected-error @+1 {{expected the gate weight to have a static size in dim 0, got 'tensor<?x8xf32>'}}
  %y = moe.shared_expert %x, %g, %u, %d : (tensor<?x8xf32>, tensor<?x8xf32>, tensor<4x8xf32>, tensor<8x4xf32>) -> tensor<?x8xf32>
  return
}
