func.func @f(%x: tensor<?x8xf32>, %w: tensor<4x8xf32>) {
  // expected-error @+1 {{'moe.router' op result #0 must be 2D tensor of 32-bit float values, but got 'tensor<?x4xbf16>'}}
  %s = moe.router %x, %w {scoring = #moe.scoring<softmax>} : tensor<?x8xf32>, tensor<4x8xf32> -> tensor<?x4xbf16>
  return
}
