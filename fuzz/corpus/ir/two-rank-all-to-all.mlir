// An all-to-all over two ranks: the host pipeline cannot lower it yet.
func.func @exchange(%rows: tensor<?x8xf32>, %off: tensor<5xi32>) -> tensor<?x8xf32> {
  %r, %o = moe.all_to_all %rows, %off {ep_size = 2, kind = #moe.all_to_all_kind<dispatch>}
      : tensor<?x8xf32>, tensor<5xi32> -> tensor<?x8xf32>, tensor<5xi32>
  return %r : tensor<?x8xf32>
}
