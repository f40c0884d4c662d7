func.func @f(%x: tensor<?x?xf32>, %w: tensor<4x16x8xf32>, %o: tensor<5xi32>) {
  // expected-error @+1 {{expected the input to have a static size in dim 1, got 'tensor<?x?xf32>'}}
  %h = moe.grouped_matmul %x, %w, %o : tensor<?x?xf32>, tensor<4x16x8xf32>, tensor<5xi32> -> tensor<?x16xf32>
  return
}
