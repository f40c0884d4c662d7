// RUN: moe-opt %s --convert-moe-to-moegpu --split-input-file --verify-diagnostics

// The layer is the one moe op the conversion takes: a primitive beside it
// (no sm_90a kernel of its own) fails to legalize instead of being left
// behind.
func.func @layer(%x: tensor<?x64xbf16>, %wr: tensor<8x64xbf16>, %wg: tensor<8x32x64xbf16>,
                 %wu: tensor<8x32x64xbf16>, %wd: tensor<8x64x32xbf16>) -> tensor<?x64xbf16> {
  %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd)
         {config = #moe.layer_config<hidden = 64, experts = 8, top_k = 2, ffn = 32, dtype = bf16>}
       : (tensor<?x64xbf16>, tensor<8x64xbf16>, tensor<8x32x64xbf16>, tensor<8x32x64xbf16>, tensor<8x64x32xbf16>) -> tensor<?x64xbf16>
  return %y : tensor<?x64xbf16>
}
func.func @stray(%x: tensor<4x64xf32>, %w: tensor<8x64xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{failed to legalize operation 'moe.router' that was explicitly marked illegal}}
  %s = moe.router %x, %w {scoring = #moe.scoring<softmax>} : tensor<4x64xf32>, tensor<8x64xf32> -> tensor<4x8xf32>
  return %s : tensor<4x8xf32>
}

// -----

// A layer the kernels cannot take is one error at the layer (no "failed
// to legalize" after it), and nothing of the conversion is left.
func.func @f32_layer(%x: tensor<?x64xf32>, %wr: tensor<8x64xf32>, %wg: tensor<8x32x64xf32>,
                     %wu: tensor<8x32x64xf32>, %wd: tensor<8x64x32xf32>) -> tensor<?x64xf32> {
  // expected-error @+1 {{'moe.layer' op has dtype 'f32'; the sm_90a kernels take bf16 or f16 layers (moe-compile --target=sm_90a --dtype=bf16 converts this one)}}
  %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd)
         {config = #moe.layer_config<hidden = 64, experts = 8, top_k = 2, ffn = 32, dtype = f32>}
       : (tensor<?x64xf32>, tensor<8x64xf32>, tensor<8x32x64xf32>, tensor<8x32x64xf32>, tensor<8x64x32xf32>) -> tensor<?x64xf32>
  return %y : tensor<?x64xf32>
}

// -----

// expected-error @+1 {{convert-moe-to-moegpu expects exactly one moe.layer in the module, found 0}}
module {
}
