func.func @f(%r: tensor<?x16xf32>, %m: tensor<?x2xi32>, %w: tensor<?x3xf32>) {
  // expected-error @+1 {{expected row map and weights of the same shape, got 'tensor<?x2xi32>' and 'tensor<?x3xf32>'}}
  %y = moe.combine %r, %m, %w : tensor<?x16xf32>, tensor<?x2xi32>, tensor<?x3xf32> -> tensor<?x16xf32>
  return
}
