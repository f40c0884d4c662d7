func.func @f(%r: tensor<?x16xf32>, %m: tensor<7x2xi32>, %w: tensor<?x2xf32>) {
  // expected-error @+1 {{expected result #0 to be compatible with 'tensor<7x16xf32>' (inferred from the operands), got 'tensor<8x16xf32>'}}
  %y = moe.combine %r, %m, %w : tensor<?x16xf32>, tensor<7x2xi32>, tensor<?x2xf32> -> tensor<8x16xf32>
  return
}
