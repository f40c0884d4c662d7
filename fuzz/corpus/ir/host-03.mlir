func.func @dispatch(%x: tensor<?x16xf32>, %ids: tensor<?x2xi32>)
    -> (tensor<?x16xf32>, tensor<5xi32>, tensor<?x2xi32>) {
  %rows, %off, %map = moe.dispatch %x, %ids {experts = 4, alignment = 8}
      : tensor<?x16xf32>, tensor<?x2xi32> -> tensor<?x16xf32>, tensor<5xi32>, tensor<?x2xi32>
  return %rows, %off, %map : tensor<?x16xf32>, tensor<5xi32>, tensor<?x2xi32>
}
