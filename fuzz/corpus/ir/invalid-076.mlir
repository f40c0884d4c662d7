func.func @f(%x: tensor<?x8xf32>, %w: tensor<4x16x4xf32>, %o: tensor<5xi32>) {
  // expected-error @+1 {{expected weight dim 2 (reduction size of the input) to be 8, got 4}}
  %h = moe.grouped_matmul %x, %w, %o : tensor<?x8xf32>, tensor<4x16x4xf32>, tensor<5xi32> -> tensor<?x16xf32>
  return
}
