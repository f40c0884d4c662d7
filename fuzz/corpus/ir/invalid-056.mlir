func.func @f(%s: tensor<?x8xf32>) {
  // expected-error @+1 {{expected 1 <= k <= experts (8), got 0}}
  %i, %w = moe.topk %s {k = 0} : tensor<?x8xf32> -> tensor<?x0xi32>, tensor<?x0xf32>
  return
}
