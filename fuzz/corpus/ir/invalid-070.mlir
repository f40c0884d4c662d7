func.func @f(%x: tensor<?x16xf32>, %i: tensor<?x2xi32>) {
  // expected-error @+1 {{expected a dynamic row count with a dynamic token count, got 64}}
  %r, %o, %m = moe.dispatch %x, %i {experts = 4} : tensor<?x16xf32>, tensor<?x2xi32> -> tensor<64x16xf32>, tensor<5xi32>, tensor<?x2xi32>
  return
}
