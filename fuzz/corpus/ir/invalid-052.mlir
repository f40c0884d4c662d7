func.func @f(%s: tensor<?x?xf32>) {
  // expected-error @+1 {{expected scores to have a static size in dim 1, got 'tensor<?x?xf32>'}}
  %i, %w = moe.topk %s {k = 2} : tensor<?x?xf32> -> tensor<?x2xi32>, tensor<?x2xf32>
  return
}
