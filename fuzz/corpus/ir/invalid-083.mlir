func.func @f(%r: tensor<?x?xf32>, %m: tensor<?x2xi32>, %w: tensor<?x2xf32>) {
  // expected-error @+1 {{expected the rows to have a static size in dim 1, got 'tensor<?x?xf32>'}}
  %y = moe.combine %r, %m, %w : tensor<?x?xf32>, tensor<?x2xi32>, tensor<?x2xf32> -> tensor<?x?xf32>
  return
}
