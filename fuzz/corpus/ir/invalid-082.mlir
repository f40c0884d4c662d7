func.func @f(%r: tensor<?x16xf32>, %m: tensor<?x?xi32>, %w: tensor<?x2xf32>) {
  // expected-error @+1 {{expected the row map to have a static size in dim 1, got 'tensor<?x?xi32>'}}
  %y = moe.combine %r, %m, %w : tensor<?x16xf32>, tensor<?x?xi32>, tensor<?x2xf32> -> tensor<?x16xf32>
  return
}
