func.func @shared_swiglu_a2a(%x: tensor<?x8xf32>, %g: tensor<4x8xf32>, %u: tensor<4x8xf32>,
                             %d: tensor<8x4xf32>, %sg: tensor<1x8xf32>,
                             %rows: tensor<?x8xf32>, %off: tensor<5xi32>)
    -> (tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x8xf32>, tensor<5xi32>) {
  %s = moe.shared_expert %x, %g, %u, %d gate(%sg)
         : (tensor<?x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<8x4xf32>, tensor<1x8xf32>) -> tensor<?x8xf32>
  %a = moe.swiglu %x, %x : tensor<?x8xf32>
  %r, %o = moe.all_to_all %rows, %off {ep_size = 1, kind = #moe.all_to_all_kind<dispatch>}
      : tensor<?x8xf32>, tensor<5xi32> -> tensor<?x8xf32>, tensor<5xi32>
  return %s, %a, %r, %o : tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x8xf32>, tensor<5xi32>
}
