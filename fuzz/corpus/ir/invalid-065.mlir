func.func @f(%x: tensor<?x16xf32>, %i: tensor<?x2xi32>) {
  // expected-error @+1 {{expected alignment to be a power of two <= 65536, got 96}}
  %r, %o, %m = moe.dispatch %x, %i {experts = 4, alignment = 96} : tensor<?x16xf32>, tensor<?x2xi32> -> tensor<?x16xf32>, tensor<5xi32>, tensor<?x2xi32>
  return
}
