func.func @f(%x: tensor<?x8xf32>, %off: tensor<?xi32>) {
  // expected-error @+1 {{expected offsets of static size experts + 1 >= 2, got 'tensor<?xi32>'}}
  %r, %o = moe.all_to_all %x, %off {ep_size = 4, kind = #moe.all_to_all_kind<dispatch>} : tensor<?x8xf32>, tensor<?xi32> -> tensor<?x8xf32>, tensor<?xi32>
  return
}
