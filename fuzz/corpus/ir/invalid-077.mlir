func.func @f(%x: tensor<?x8xf32>, %w: tensor<4x16x8xbf16>, %o: tensor<5xi32>) {
  // expected-error @+1 {{expected weight element type 'f32', got 'bf16'}}
  %h = moe.grouped_matmul %x, %w, %o : tensor<?x8xf32>, tensor<4x16x8xbf16>, tensor<5xi32> -> tensor<?x16xf32>
  return
}
