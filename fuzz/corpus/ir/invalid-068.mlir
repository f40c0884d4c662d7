func.func @f(%x: tensor<5x16xf32>, %i: tensor<6x2xi32>) {
  // expected-error @+1 {{expected indices dim 0 (tokens) to be 5, got 6}}
  %r, %o, %m = moe.dispatch %x, %i {experts = 4} : tensor<5x16xf32>, tensor<6x2xi32> -> tensor<?x16xf32>, tensor<5xi32>, tensor<5x2xi32>
  return
}
