func.func @f(%x: tensor<?x8xf32>, %w: tensor<4x16x8xf32>, %o: tensor<1xi32>) {
  // expected-error @+1 {{expected offsets of static size experts + 1 >= 2, got 'tensor<1xi32>'}}
  %h = moe.grouped_matmul %x, %w, %o : tensor<?x8xf32>, tensor<4x16x8xf32>, tensor<1xi32> -> tensor<?x16xf32>
  return
}
