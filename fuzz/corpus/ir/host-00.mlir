func.func @router_sigmoid(%x: tensor<?x64xbf16>, %w: tensor<8x64xbf16>) -> tensor<?x8xf32> {
  %s = moe.router %x, %w {scoring = #moe.scoring<sigmoid>}
         : tensor<?x64xbf16>, tensor<8x64xbf16> -> tensor<?x8xf32>
  return %s : tensor<?x8xf32>
}
