// RUN: moe-opt %s --moe-expert-parallel=ep=4 | FileCheck %s
// RUN: moe-opt %s --moe-expert-parallel=ep=4 --moe-decompose-layer=alignment=1 | FileCheck %s --check-prefix=DECOMP
// RUN: moe-opt %s --moe-expert-parallel=ep=4 --moe-autodiff | FileCheck %s --check-prefix=BWD
// RUN: moe-opt %s --moe-expert-parallel=ep=1 | FileCheck %s --check-prefix=ONE

// Each rank holds a quarter of the experts; the router stays whole.
// CHECK-LABEL: func.func @layer(
// CHECK-SAME: %{{.*}}: tensor<?x8xf32>, %{{.*}}: tensor<8x8xf32>, %{{.*}}: tensor<2x16x8xf32>, %{{.*}}: tensor<2x16x8xf32>, %{{.*}}: tensor<2x8x16xf32>)
// CHECK: moe.layer {{.*}}ep_size = 4 : i64
// CHECK-SAME: tensor<2x16x8xf32>, tensor<2x16x8xf32>, tensor<2x8x16xf32>
// ONE: tensor<8x16x8xf32>
// ONE-NOT: ep_size

// Forward: rows go to the experts' ranks, the local GEMMs use every 4th
// offset (one per local expert), and the outputs come back for the combine.
// DECOMP: %[[ROWS:.*]], %[[OFF:.*]], %[[MAP:.*]] = moe.dispatch
// DECOMP: %[[RECV:.*]], %[[RECV_OFF:.*]] = moe.all_to_all %[[ROWS]], %[[OFF]] {ep_size = 4 : i64, kind = #moe.all_to_all_kind<dispatch>}
// DECOMP: %[[LOCAL:.*]] = tensor.extract_slice %[[RECV_OFF]][0] [3] [4] : tensor<9xi32> to tensor<3xi32>
// DECOMP: moe.grouped_matmul %[[RECV]], %{{.*}}, %[[LOCAL]] : tensor<?x8xf32>, tensor<2x16x8xf32>, tensor<3xi32>
// DECOMP: %[[DOWN:.*]] = moe.grouped_matmul %{{.*}}, %{{.*}}, %[[LOCAL]] : tensor<?x16xf32>, tensor<2x8x16xf32>, tensor<3xi32>
// DECOMP: %[[BACK:.*]], %{{.*}} = moe.all_to_all %[[DOWN]], %[[RECV_OFF]] {ep_size = 4 : i64, kind = #moe.all_to_all_kind<combine>}
// DECOMP: moe.combine %[[BACK]], %[[MAP]]

// Backward: the gradients of the expert outputs go to the experts' ranks
// and those of the expert inputs come back, around the local GEMMs.
// BWD-LABEL: func.func @layer_backward
// BWD: moe.combine_grad
// BWD: moe.all_to_all %{{.*}}, %{{.*}} {ep_size = 4 : i64, kind = #moe.all_to_all_kind<dispatch>}
// BWD: moe.grouped_matmul_dw {{.*}} -> tensor<2x8x16xf32>
// BWD: moe.grouped_matmul_dw {{.*}} -> tensor<2x16x8xf32>
// BWD: moe.all_to_all %{{.*}}, %{{.*}} {ep_size = 4 : i64, kind = #moe.all_to_all_kind<combine>}
// BWD: moe.dispatch_grad
func.func @layer(%x: tensor<?x8xf32>, %wr: tensor<8x8xf32>, %wg: tensor<8x16x8xf32>,
                 %wu: tensor<8x16x8xf32>, %wd: tensor<8x8x16xf32>) -> tensor<?x8xf32> {
  %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd)
         {config = #moe.layer_config<hidden = 8, experts = 8, top_k = 2, ffn = 16, dtype = f32>}
       : (tensor<?x8xf32>, tensor<8x8xf32>, tensor<8x16x8xf32>, tensor<8x16x8xf32>, tensor<8x8x16xf32>) -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}

// With chunks, every chunk's exchange starts before the first chunk's
// experts run, and each chunk's outputs start back before the combines.
// RUN: moe-opt %s --moe-expert-parallel="ep=4 chunks=2" --moe-decompose-layer=alignment=1 | FileCheck %s --check-prefix=CHUNKS
// CHUNKS: %[[T:.*]] = tensor.dim %arg0, %c0
// CHUNKS: %[[X0:.*]] = tensor.extract_slice %arg0[%{{.*}}, 0] [%{{.*}}, 8] [1, 1] : tensor<?x8xf32> to tensor<?x8xf32>
// CHUNKS: moe.dispatch %[[X0]]
// CHUNKS: moe.dispatch
// CHUNKS: %[[H0:.*]], %{{.*}} = moe.all_to_all_start {{.*}}kind = #moe.all_to_all_kind<dispatch>
// CHUNKS: %[[H1:.*]], %{{.*}} = moe.all_to_all_start {{.*}}kind = #moe.all_to_all_kind<dispatch>
// CHUNKS: moe.all_to_all_wait %[[H0]] : tensor<?x8xf32>
// CHUNKS: moe.grouped_matmul
// CHUNKS: moe.all_to_all_wait %[[H1]] : tensor<?x8xf32>
// CHUNKS: %[[B0:.*]], %{{.*}} = moe.all_to_all_start {{.*}}kind = #moe.all_to_all_kind<combine>
// CHUNKS: %[[B1:.*]], %{{.*}} = moe.all_to_all_start {{.*}}kind = #moe.all_to_all_kind<combine>
// CHUNKS: moe.all_to_all_wait %[[B0]]
// CHUNKS: moe.combine
// CHUNKS: tensor.insert_slice
// CHUNKS: moe.all_to_all_wait %[[B1]]
// CHUNKS: moe.combine
// CHUNKS: tensor.insert_slice
// RUN: moe-opt %s --moe-expert-parallel="ep=4 chunks=2" --moe-autodiff | FileCheck %s --check-prefix=CHUNKBWD
// CHUNKBWD-LABEL: func.func @layer_backward
// CHUNKBWD-COUNT-4: moe.all_to_all_start
// CHUNKBWD: moe.combine_grad
// CHUNKBWD: moe.combine_grad
// CHUNKBWD: moe.all_to_all_start
// CHUNKBWD: moe.all_to_all_start
// CHUNKBWD: moe.dispatch_grad
// CHUNKBWD: moe.dispatch_grad
// CHUNKBWD: moe.topk_grad
