// RUN: moe-opt %s --moe-decompose-layer --split-input-file --verify-diagnostics
// RUN: not moe-opt %s --moe-decompose-layer=alignment=96 2>&1 | FileCheck %s --check-prefix=ALIGN

// ALIGN: error: moe-decompose-layer: expected alignment to be a power of two <= 65536, got 96

func.func @conflicting_partitions(%x: tensor<?x8xf32>, %wr: tensor<4x8xf32>,
                                  %wg: tensor<4x16x8xf32>,
                                  %wu: tensor<4x16x8xf32>,
                                  %wd: tensor<4x8x16xf32>)
    -> tensor<?x8xf32> {
  %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd)
         {config = #moe.layer_config<hidden = 8, experts = 4, top_k = 1,
             ffn = 16, dtype = f32>,
          partition = #moe.sm_partition<sms = 132, comm = 20>}
       : (tensor<?x8xf32>, tensor<4x8xf32>, tensor<4x16x8xf32>,
          tensor<4x16x8xf32>, tensor<4x8x16xf32>) -> tensor<?x8xf32>
  // expected-error @+1 {{'moe.layer' op partition #moe.sm_partition<sms = 132, comm = 24> conflicts with #moe.sm_partition<sms = 132, comm = 20> of another layer in the same function}}
  %z = moe.layer %y router(%wr) experts(%wg, %wu, %wd)
         {config = #moe.layer_config<hidden = 8, experts = 4, top_k = 1,
             ffn = 16, dtype = f32>,
          partition = #moe.sm_partition<sms = 132, comm = 24>}
       : (tensor<?x8xf32>, tensor<4x8xf32>, tensor<4x16x8xf32>,
          tensor<4x16x8xf32>, tensor<4x8x16xf32>) -> tensor<?x8xf32>
  return %z : tensor<?x8xf32>
}
