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

// Resource limits are checked before code generation, naming the op.
func.func @huge_topk(%s: tensor<?x262144xf32>) -> tensor<?x2xi32> {
  // expected-error @+1 {{'moe.topk' op needs 1310725 bytes of stack scratch on the host (experts = 262144), more than the 1048576-byte limit}}
  %ids, %w = moe.topk %s {k = 2} : tensor<?x262144xf32> -> tensor<?x2xi32>, tensor<?x2xf32>
  return %ids : tensor<?x2xi32>
}

// -----

func.func @huge_dispatch(%x: tensor<?x8xf32>, %ids: tensor<?x2xi32>) -> tensor<?x8xf32> {
  // expected-error @+1 {{'moe.dispatch' op needs 1120000 bytes of stack scratch on the host (experts = 70000), more than the 1048576-byte limit}}
  %r, %o, %m = moe.dispatch %x, %ids {experts = 70000}
      : tensor<?x8xf32>, tensor<?x2xi32> -> tensor<?x8xf32>, tensor<70001xi32>, tensor<?x2xi32>
  return %r : tensor<?x8xf32>
}

