func.func @f(%x: tensor<?x8xf32>, %w: tensor<4x16x?xf32>, %o: tensor<5xi32>) {
  // expected-error @+1 {{expected the weight to have a static size in dim 2, got 'tensor<4x16x?xf32>'}}
  %h = moe.grouped_matmul %x, %w, %o : tensor<?x8xf32>, tensor<4x16x?xf32>, tensor<5xi32> -> tensor<?x16xf32>
  return
}
