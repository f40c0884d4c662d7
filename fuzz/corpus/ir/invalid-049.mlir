func.func @f(%x: tensor<?x8xf32>, %w: tensor<4x8xf32>) {
  // expected-error @+1 {{expected result #0 to be compatible with 'tensor<?x4xf32>' (inferred from the operands), got 'tensor<?x5xf32>'}}
  %s = moe.router %x, %w {scoring = #moe.scoring<softmax>} : tensor<?x8xf32>, tensor<4x8xf32> -> tensor<?x5xf32>
  return
}
