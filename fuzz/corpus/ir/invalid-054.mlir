func.func @f(%s: tensor<?x8xf32>, %b: tensor<?xf32>) {
  // expected-error @+1 {{expected the bias to have a static size in dim 0, got 'tensor<?xf32>'}}
  %i, %w = moe.topk %s bias(%b) {k = 2} : tensor<?x8xf32>, tensor<?xf32> -> tensor<?x2xi32>, tensor<?x2xf32>
  return
}
