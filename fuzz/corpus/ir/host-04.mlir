func.func @gmm_combine(%rows: tensor<?x8xf32>, %w: tensor<4x16x8xf32>, %off: tensor<5xi32>,
                       %map: tensor<?x2xi32>, %wts: tensor<?x2xf32>) -> tensor<?x16xf32> {
  %h = moe.grouped_matmul %rows, %w, %off
         : tensor<?x8xf32>, tensor<4x16x8xf32>, tensor<5xi32> -> tensor<?x16xf32>
  %y = moe.combine %h, %map, %wts
         : tensor<?x16xf32>, tensor<?x2xi32>, tensor<?x2xf32> -> tensor<?x16xf32>
  return %y : tensor<?x16xf32>
}
