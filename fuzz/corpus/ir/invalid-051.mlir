func.func @f(%x: tensor<?x8xi32>, %w: tensor<4x8xf32>) {
  // expected-error @+1 {{'moe.router' op operand #0 must be 2D tensor of 32-bit float or bfloat16 type or 16-bit float values, but got 'tensor<?x8xi32>'}}
  %s = moe.router %x, %w {scoring = #moe.scoring<softmax>} : tensor<?x8xi32>, tensor<4x8xf32> -> tensor<?x4xf32>
  return
}
