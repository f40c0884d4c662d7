func.func @f(%s: tensor<?x8xf32>) {
  // expected-error @+1 {{expected 1 <= k <= experts (8), got 9}}
  %i, %w = moe.topk %s {k = 9} : tensor<?x8xf32> -> tensor<?x9xi32>, tensor<?x9xf32>
  return
}
