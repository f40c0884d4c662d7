func.func @f(%x: tensor<?x8xf32>, %w: tensor<4x16xf32>) {
  // expected-error @+1 {{expected weight dim 1 (hidden) to be 8, got 16}}
  %s = moe.router %x, %w {scoring = #moe.scoring<softmax>} : tensor<?x8xf32>, tensor<4x16xf32> -> tensor<?x4xf32>
  return
}
