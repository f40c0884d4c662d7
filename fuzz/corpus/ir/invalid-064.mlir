func.func @f(%x: tensor<?x16xf32>, %i: tensor<?x2xi32>) {
  // expected-error @+1 {{expected 1 <= experts <= 2147483647, got 0}}
  %r, %o, %m = moe.dispatch %x, %i {experts = 0} : tensor<?x16xf32>, tensor<?x2xi32> -> tensor<?x16xf32>, tensor<?xi32>, tensor<?x2xi32>
  return
}
