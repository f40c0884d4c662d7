func.func @f(%x: tensor<?x8xbf16>, %w: tensor<4x8xf16>) {
  // expected-error @+1 {{expected weight element type f32 or 'bf16', got 'f16'}}
  %s = moe.router %x, %w {scoring = #moe.scoring<sigmoid>} : tensor<?x8xbf16>, tensor<4x8xf16> -> tensor<?x4xf32>
  return
}
