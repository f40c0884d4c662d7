// RUN: moe-opt %s --moe-expert-parallel=ep=4 --split-input-file --verify-diagnostics
// RUN: not moe-opt %s --moe-expert-parallel=ep=0 2>&1 | FileCheck %s --check-prefix=ZERO

// ZERO: error: moe-expert-parallel: expected ep >= 1, got 0

func.func @six(%x: tensor<?x8xf32>, %wr: tensor<6x8xf32>, %wg: tensor<6x16x8xf32>,
               %wu: tensor<6x16x8xf32>, %wd: tensor<6x8x16xf32>) -> tensor<?x8xf32> {
  // expected-error @+1 {{'moe.layer' op has 6 experts, which moe-expert-parallel cannot shard over ep = 4 ranks}}
  %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd)
         {config = #moe.layer_config<hidden = 8, experts = 6, top_k = 2, ffn = 16, dtype = f32>}
       : (tensor<?x8xf32>, tensor<6x8xf32>, tensor<6x16x8xf32>, tensor<6x16x8xf32>, tensor<6x8x16xf32>) -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}

// -----

func.func @computed(%x: tensor<?x8xf32>, %wr: tensor<8x8xf32>, %wg: tensor<8x16x8xf32>,
                    %w: tensor<8x16x8xf32>, %wd: tensor<8x8x16xf32>) -> tensor<?x8xf32> {
  %wu = arith.negf %w : tensor<8x16x8xf32>
  // expected-error @+1 {{'moe.layer' op expected the up weight to be an argument of the enclosing function used only by the layer, so moe-expert-parallel can narrow it}}
  %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd)
         {config = #moe.layer_config<hidden = 8, experts = 8, top_k = 2, ffn = 16, dtype = f32>}
       : (tensor<?x8xf32>, tensor<8x8xf32>, tensor<8x16x8xf32>, tensor<8x16x8xf32>, tensor<8x8x16xf32>) -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}

// -----

func.func @sharded(%x: tensor<?x8xf32>, %wr: tensor<8x8xf32>, %wg: tensor<4x16x8xf32>,
                   %wu: tensor<4x16x8xf32>, %wd: tensor<4x8x16xf32>) -> tensor<?x8xf32> {
  // expected-error @+1 {{'moe.layer' op is already sharded (ep_size = 2)}}
  %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd)
         {config = #moe.layer_config<hidden = 8, experts = 8, top_k = 2, ffn = 16, dtype = f32>, ep_size = 2}
       : (tensor<?x8xf32>, tensor<8x8xf32>, tensor<4x16x8xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>) -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}
// RUN: not moe-opt %s --moe-expert-parallel="ep=2 chunks=0" 2>&1 | FileCheck %s --check-prefix=CHUNKS
// CHUNKS: error: moe-expert-parallel: expected chunks >= 1, got 0
