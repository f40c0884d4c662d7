func.func @f(%x: tensor<4611686018427387904x16xf32>, %i: tensor<4611686018427387904x2xi32>) {
  // expected-error @+1 {{padded row count for 4611686018427387904 tokens x 2 overflows}}
  %r, %o, %m = moe.dispatch %x, %i {experts = 4} : tensor<4611686018427387904x16xf32>, tensor<4611686018427387904x2xi32> -> tensor<?x16xf32>, tensor<5xi32>, tensor<4611686018427387904x2xi32>
  return
}
