func.func @f(%s: tensor<?x8xf32>, %b: tensor<4xf32>) {
  // expected-error @+1 {{expected bias dim 0 (experts) to be 8, got 4}}
  %i, %w = moe.topk %s bias(%b) {k = 2} : tensor<?x8xf32>, tensor<4xf32> -> tensor<?x2xi32>, tensor<?x2xf32>
  return
}
