func.func @f(%s: tensor<?x8xf32>) {
  // expected-error @+1 {{expected result #0 to be compatible with 'tensor<?x2xi32>' (inferred from the operands), got 'tensor<?x3xi32>'}}
  %i, %w = moe.topk %s {k = 2} : tensor<?x8xf32> -> tensor<?x3xi32>, tensor<?x3xf32>
  return
}
