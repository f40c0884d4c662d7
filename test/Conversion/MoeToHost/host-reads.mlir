// RUN: moe-opt %s --convert-moe-to-host --cse | FileCheck %s

// Each op the host lowering builds inline reads its tensors through a
// to_buffer of its own, numbered so that CSE leaves the two reads of %x
// apart: one-shot bufferization takes a buffer's reads to happen at its
// to_buffer, so with the second merged into the first it could let the
// multiply reuse %x's buffer in place before the second dispatch copies
// from it.
// CHECK-LABEL: func @two_dispatches
// CHECK: %[[X:.*]] = arith.addf
// CHECK: bufferization.to_buffer %[[X]] read_only {moe.host_read = [[FIRST:[0-9]+]] : i64}
// CHECK: arith.mulf %[[X]], %[[X]]
// CHECK: bufferization.to_buffer %[[X]] read_only {moe.host_read = [[SECOND:[0-9]+]] : i64}
// CHECK-NOT: moe.host_read = [[FIRST]] :
func.func @two_dispatches(%in: tensor<?x16xf32>, %ids: tensor<?x2xi32>,
                          %ids2: tensor<?x2xi32>)
    -> (tensor<?x16xf32>, tensor<?x16xf32>, tensor<?x16xf32>) {
  %x = arith.addf %in, %in : tensor<?x16xf32>
  %rows, %off, %map = moe.dispatch %x, %ids {experts = 4, alignment = 1}
      : tensor<?x16xf32>, tensor<?x2xi32> -> tensor<?x16xf32>, tensor<5xi32>, tensor<?x2xi32>
  %sq = arith.mulf %x, %x : tensor<?x16xf32>
  %rows2, %off2, %map2 = moe.dispatch %x, %ids2 {experts = 4, alignment = 1}
      : tensor<?x16xf32>, tensor<?x2xi32> -> tensor<?x16xf32>, tensor<5xi32>, tensor<?x2xi32>
  return %rows, %sq, %rows2 : tensor<?x16xf32>, tensor<?x16xf32>, tensor<?x16xf32>
}
