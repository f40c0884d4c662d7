func.func @f(%x: tensor<?x?xf32>, %g: tensor<4x8xf32>, %u: tensor<4x8xf32>, %d: tensor<8x4xf32>) {
  // expected-error @+1 {{expected the input to have a static size in dim 1, got 'tensor<?x?xf32>'}}
  %y = moe.shared_expert %x, %g, %u, %d : (tensor<?x?xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<8x4xf32>) -> tensor<?x?xf32>
  return
}
