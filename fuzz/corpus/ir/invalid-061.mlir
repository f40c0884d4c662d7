func.func @f(%s: tensor<?x8xf32>) {
  // expected-error @+1 {{expected a finite scale > 0, got -1}}
  %i, %w = moe.topk %s {k = 2, scale = -1.0 : f64} : tensor<?x8xf32> -> tensor<?x2xi32>, tensor<?x2xf32>
  return
}
