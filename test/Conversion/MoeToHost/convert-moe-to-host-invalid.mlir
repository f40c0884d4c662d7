// RUN: moe-opt %s --convert-moe-to-host --split-input-file --verify-diagnostics

func.func @layer(%x: tensor<?x8xf32>, %wr: tensor<4x8xf32>, %wg: tensor<4x16x8xf32>,
                 %wu: tensor<4x16x8xf32>, %wd: tensor<4x8x16xf32>) -> tensor<?x8xf32> {
  // expected-error @+1 {{'moe.layer' op must be decomposed before convert-moe-to-host (run moe-decompose-layer first)}}
  %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd)
         {config = #moe.layer_config<hidden = 8, experts = 4, top_k = 1, ffn = 16, dtype = f32>}
       : (tensor<?x8xf32>, tensor<4x8xf32>, tensor<4x16x8xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>) -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}

// -----

func.func @a2a(%rows: tensor<?x8xf32>, %off: tensor<5xi32>) -> tensor<?x8xf32> {
  // expected-error @+1 {{'moe.all_to_all' op with ep_size = 2 needs the distributed runtime; convert-moe-to-host only lowers ep_size = 1}}
  %r, %o = moe.all_to_all %rows, %off {ep_size = 2, kind = #moe.all_to_all_kind<dispatch>}
      : tensor<?x8xf32>, tensor<5xi32> -> tensor<?x8xf32>, tensor<5xi32>
  return %r : tensor<?x8xf32>
}
