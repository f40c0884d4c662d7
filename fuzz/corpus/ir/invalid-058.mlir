func.func @f(%s: tensor<?x8xf32>) {
  // expected-error @+1 {{expected 1 <= topk_groups <= groups (4), got 0}}
  %i, %w = moe.topk %s {k = 2, groups = 4, topk_groups = 0} : tensor<?x8xf32> -> tensor<?x2xi32>, tensor<?x2xf32>
  return
}
