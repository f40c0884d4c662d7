func.func @f(%x: tensor<?x?xf32>, %w: tensor<4x8xf32>) {
  // expected-error @+1 {{expected the input to have a static size in dim 1, got 'tensor<?x?xf32>'}}
  %s = moe.router %x, %w {scoring = #moe.scoring<softmax>} : tensor<?x?xf32>, tensor<4x8xf32> -> tensor<?x4xf32>
  return
}
