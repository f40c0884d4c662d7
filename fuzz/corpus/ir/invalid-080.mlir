func.func @f(%x: tensor<?x8xf32>, %w: tensor<4x16x8xf32>, %o: tensor<4xi32>) {
  // expected-error @+1 {{expected offsets of size experts + 1 = 5, got 4}}
  %h = moe.grouped_matmul %x, %w, %o : tensor<?x8xf32>, tensor<4x16x8xf32>, tensor<4xi32> -> tensor<?x16xf32>
  return
}
