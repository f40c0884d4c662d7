func.func @negative_no_layer(%x: tensor<?x8xf32>, %w: tensor<4x8xf32>)
    -> tensor<?x4xf32> {
  %s = moe.router %x, %w {scoring = #moe.scoring<softmax>}
         : tensor<?x8xf32>, tensor<4x8xf32> -> tensor<?x4xf32>
  return %s : tensor<?x4xf32>
}
