func.func @f(%x: tensor<5x16xf32>, %i: tensor<5x2xi32>) {
  // expected-error @+1 {{expected 32 rows (the padded upper bound for 5 tokens x 2 over 4 experts with alignment 8), got 40}}
  %r, %o, %m = moe.dispatch %x, %i {experts = 4, alignment = 8} : tensor<5x16xf32>, tensor<5x2xi32> -> tensor<40x16xf32>, tensor<5xi32>, tensor<5x2xi32>
  return
}
