func.func @f(%x: tensor<?x16xf32>, %i: tensor<?x?xi32>) {
  // expected-error @+1 {{expected the indices to have a static size in dim 1, got 'tensor<?x?xi32>'}}
  %r, %o, %m = moe.dispatch %x, %i {experts = 4} : tensor<?x16xf32>, tensor<?x?xi32> -> tensor<?x16xf32>, tensor<5xi32>, tensor<?x?xi32>
  return
}
