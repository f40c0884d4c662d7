func.func @topk(%s: tensor<?x8xf32>, %b: tensor<8xf32>) -> (tensor<?x2xi32>, tensor<?x2xf32>) {
  %ids, %w = moe.topk %s bias(%b) {k = 2, groups = 4, topk_groups = 2,
               group_score = #moe.group_score<sum_top2>, normalize, scale = 2.5 : f64}
             : tensor<?x8xf32>, tensor<8xf32> -> tensor<?x2xi32>, tensor<?x2xf32>
  return %ids, %w : tensor<?x2xi32>, tensor<?x2xf32>
}
