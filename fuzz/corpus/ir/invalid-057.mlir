func.func @f(%s: tensor<?x8xf32>) {
  // expected-error @+1 {{expected groups to divide experts (8), got 3}}
  %i, %w = moe.topk %s {k = 2, groups = 3} : tensor<?x8xf32> -> tensor<?x2xi32>, tensor<?x2xf32>
  return
}
