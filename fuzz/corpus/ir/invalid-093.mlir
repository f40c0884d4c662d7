func.func @f(%x: tensor<?x?xf32>, %off: tensor<17xi32>) {
  // expected-error @+1 {{expected the input to have a static size in dim 1, got 'tensor<?x?xf32>'}}
  %r, %o = moe.all_to_all %x, %off {ep_size = 4, kind = #moe.all_to_all_kind<dispatch>} : tensor<?x?xf32>, tensor<17xi32> -> tensor<?x?xf32>, tensor<17xi32>
  return
}
