func.func @f(%x: tensor<?x8xf32>, %off: tensor<17xi32>) {
  // expected-error @+1 {{expected ep_size to divide experts (16), got 32}}
  %r, %o = moe.all_to_all %x, %off {ep_size = 32, kind = #moe.all_to_all_kind<combine>} : tensor<?x8xf32>, tensor<17xi32> -> tensor<?x8xf32>, tensor<17xi32>
  return
}
