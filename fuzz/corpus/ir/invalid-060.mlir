func.func @f(%s: tensor<?x8xf32>) {
  // expected-error @+1 {{expected at least 2 experts per group with group_score = sum_top2, got 1}}
  %i, %w = moe.topk %s {k = 2, groups = 8, topk_groups = 2, group_score = #moe.group_score<sum_top2>} : tensor<?x8xf32> -> tensor<?x2xi32>, tensor<?x2xf32>
  return
}
