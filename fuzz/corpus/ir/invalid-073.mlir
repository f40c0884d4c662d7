func.func @f(%x: tensor<?x16xf32>, %i: tensor<?x2xi32>) {
  // expected-error @+1 {{expected result #1 to be compatible with 'tensor<5xi32>' (inferred from the operands), got 'tensor<4xi32>'}}
  %r, %o, %m = moe.dispatch %x, %i {experts = 4} : tensor<?x16xf32>, tensor<?x2xi32> -> tensor<?x16xf32>, tensor<4xi32>, tensor<?x2xi32>
  return
}
