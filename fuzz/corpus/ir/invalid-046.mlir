func.func @f(%x: tensor<?x8xf32>, %w: tensor<?x8xf32>) {
  // expected-error @+1 {{expected the weight to have a static size in dim 0, got 'tensor<?x8xf32>'}}
  %s = moe.router %x, %w {scoring = #moe.scoring<softmax>} : tensor<?x8xf32>, tensor<?x8xf32> -> tensor<?x?xf32>
  return
}
