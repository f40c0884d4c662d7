func.func @router_softmax(%x: tensor<?x64xf32>, %w: tensor<8x64xf32>) -> tensor<?x8xf32> {
  %s = moe.router %x, %w {scoring = #moe.scoring<softmax>}
         : tensor<?x64xf32>, tensor<8x64xf32> -> tensor<?x8xf32>
  return %s : tensor<?x8xf32>
}
