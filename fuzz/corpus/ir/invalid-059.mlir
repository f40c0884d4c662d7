func.func @f(%s: tensor<?x8xf32>) {
  // expected-error @+1 {{expected k <= topk_groups * experts per group (1 * 2 = 2), got 3}}
  %i, %w = moe.topk %s {k = 3, groups = 4, topk_groups = 1} : tensor<?x8xf32> -> tensor<?x3xi32>, tensor<?x3xf32>
  return
}
