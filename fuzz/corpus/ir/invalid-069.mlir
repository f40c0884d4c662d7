func.func @f(%x: tensor<?x16xf32>, %i: tensor<?x5xi32>) {
  // expected-error @+1 {{expected 1 <= experts per token <= experts (4), got 5}}
  %r, %o, %m = moe.dispatch %x, %i {experts = 4} : tensor<?x16xf32>, tensor<?x5xi32> -> tensor<?x16xf32>, tensor<5xi32>, tensor<?x5xi32>
  return
}
