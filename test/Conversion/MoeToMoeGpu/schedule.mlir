// RUN: moe-opt %s --convert-moe-to-moegpu --split-input-file | FileCheck %s
// RUN: moe-opt %s --convert-moe-to-moegpu="train=true" --split-input-file | FileCheck %s --check-prefix=TRAIN

// The typed schedule convert-moe-to-moegpu builds beside the kernels: the
// buffers (run-time dimensions and sources) and the forward pass's steps,
// each launch's grid typed and its buffers checked against the kernel's
// arguments by the verifier.
// CHECK-LABEL: moegpu.program {
// CHECK-DAG: moegpu.buffer @x : memref<?x64xbf16> dims [#moegpu.dim<tokens>] source "input"
// CHECK-DAG: moegpu.buffer @router_weight : memref<8x64xbf16> dims [] source "param:router_weight"
// CHECK-DAG: moegpu.buffer @router_logits : memref<?x8xf32> dims [#moegpu.dim<tokens>] source "scratch"
// CHECK-DAG: moegpu.buffer @w13 : memref<8x64x64xbf16> dims [] source "pack:gate_weight,up_weight"
// CHECK-DAG: moegpu.buffer @w2 : memref<8x64x32xbf16> dims [] source "param:down_weight"
// CHECK-DAG: moegpu.buffer @rows : memref<?x64xbf16> dims [#moegpu.dim<rows>] source "scratch"
// CHECK-DAG: moegpu.buffer @row_weight : memref<?xf32> dims [#moegpu.dim<rows>] source "scratch"
// CHECK-DAG: moegpu.buffer @y : memref<?x64xbf16> dims [#moegpu.dim<tokens>] source "output"
// CHECK: moegpu.schedule "forward" {
// CHECK-NEXT: moegpu.memset @counts
// CHECK-NEXT: moegpu.launch @moe_kernels::@router [@x, @router_weight, @router_logits] grid <persistent> block 0
// CHECK-NEXT: moegpu.launch @moe_kernels::@route [@router_logits, @topk_ids, @topk_weights, @counts] grid <tokens, per_block = 4> block 128
// CHECK-NEXT: moegpu.launch @moe_kernels::@dispatch_scan [@topk_ids, @counts, @offsets, @cursors] grid <one> block 256
// CHECK-NEXT: moegpu.launch @moe_kernels::@dispatch_scatter [@x, @topk_ids, @topk_weights, @cursors, @rows, @row_map, @row_weight] grid <assignments, per_block = 1> block 128
// CHECK-NEXT: moegpu.launch @moe_kernels::@expert_up [@rows, @w13, @offsets, @act] grid <persistent> block 0
// CHECK-NEXT: moegpu.launch @moe_kernels::@expert_down [@act, @w2, @offsets, @down, @row_weight] grid <persistent> block 0
// CHECK-NEXT: moegpu.launch @moe_kernels::@combine [@down, @row_map, @y] grid <tokens, per_block = 1> block 128
// CHECK-NEXT: }
// CHECK-NOT: moegpu.schedule "train"

// With train=true a second schedule: compute copies of the masters, the
// forward steps again (padding rows zeroed before the scatter), the loss,
// the backward kernels and AdamW, on buffers of the training step's
// arguments (arg:<name>).
// TRAIN-LABEL: moegpu.program {
// TRAIN-DAG: moegpu.buffer @arg.router_weight : memref<8x64xf32> dims [] source "arg:router_weight"
// TRAIN-DAG: moegpu.buffer @arg.loss : memref<1xf32> dims [] source "arg:loss"
// TRAIN: moegpu.schedule "forward" {
// TRAIN: moegpu.schedule "train" {
// The compute copies, one kernel over the router's 8 x 64 and the
// experts' three 8 x 32 x 64 masters (194 CTAs of 256 threads for 49664
// elements), gate and up both into w13; then, once the step is decided,
// the check over every weight, the verdict (which marks the copies
// current) and AdamW, which writes the copies too.
// TRAIN-NEXT: moegpu.launch @moe_kernels::@train_compute_copies [@arg.router_weight, @router_weight, @arg.gate_weight, @w13, @arg.up_weight, @arg.down_weight, @w2, @copies_valid, @state_bounds] grid <fixed, size = 194> block 256
// TRAIN: moegpu.launch @moe_kernels::@route
// TRAIN: moegpu.memset @rows
// TRAIN-NEXT: moegpu.memset @row_weight
// TRAIN-NEXT: moegpu.launch @moe_kernels::@dispatch_scatter
// TRAIN: moegpu.memset @arg.loss
// TRAIN-NEXT: moegpu.launch @moe_kernels::@train_loss [@y, @arg.target, @arg.hyper, @dy, @arg.loss] grid <tokens, per_block = 1> block 128
// TRAIN: moegpu.memset @grad_max
// TRAIN-NEXT: moegpu.launch @moe_kernels::@train_grad_stats [@arg.router_weight.grad, @arg.gate_weight.grad, @arg.up_weight.grad, @arg.down_weight.grad, @arg.grad_sq, @grad_max]
// TRAIN-NEXT: moegpu.launch @moe_kernels::@train_update_check [{{.*}}@arg.down_weight.grad, @arg.hyper, @grad_max, @arg.bad_updates, @copies_valid, @state_bounds]
// TRAIN-NEXT: moegpu.launch @moe_kernels::@train_update_verdict [@arg.loss, @arg.grad_sq, @arg.bad_updates, @update_rejected, @copies_valid]
// TRAIN: moegpu.schedule "update" {
// TRAIN-NEXT: moegpu.launch @moe_kernels::@train_adamw [{{.*}}@arg.down_weight.grad, @router_weight, @w13, @w2, @arg.hyper, @state_bounds, @update_rejected] grid <fixed, size = 194> block 256
// TRAIN-NEXT: }
func.func @layer(%x: tensor<?x64xbf16>, %wr: tensor<8x64xbf16>, %wg: tensor<8x32x64xbf16>,
                 %wu: tensor<8x32x64xbf16>, %wd: tensor<8x64x32xbf16>) -> tensor<?x64xbf16> {
  %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd)
         {config = #moe.layer_config<hidden = 64, experts = 8, top_k = 2, ffn = 32, dtype = bf16>}
       : (tensor<?x64xbf16>, tensor<8x64xbf16>, tensor<8x32x64xbf16>, tensor<8x32x64xbf16>, tensor<8x64x32xbf16>) -> tensor<?x64xbf16>
  return %y : tensor<?x64xbf16>
}

// -----

// A layer sharded over two ranks: the dispatched rows and weights go to
// the experts' ranks between the scatter and the experts (received rows:
// ranks x the capacity), and the experts' outputs come back before the
// combine. Two ways each, of which the runtime runs one: the
// device-initiated kernels over the symmetric buffers (transport lsa,
// the sends on the 20 CTAs of DeepSeek-V3's comm SMs without a
// partition; flags 0-1 the ranks' sizes, 2 the dispatch's, 3 the
// combine's) and the host-driven exchanges (nccl).
// CHECK-LABEL: moegpu.program {
// CHECK-DAG: moegpu.buffer @ep_rows : memref<?x64xbf16> dims [#moegpu.dim<received_rows>] source "symmetric"
// CHECK-DAG: moegpu.buffer @ep_row_weight : memref<?xf32> dims [#moegpu.dim<received_rows>] source "symmetric"
// CHECK-DAG: moegpu.buffer @down : memref<?x64xbf16> dims [#moegpu.dim<rows>] source "symmetric"
// CHECK-DAG: moegpu.buffer @ep_table : memref<16xi32> dims [] source "symmetric"
// CHECK-DAG: moegpu.buffer @ep_flags : memref<4xi32> dims [] source "symmetric"
// CHECK-DAG: moegpu.buffer @ep_peers : memref<5xi64> dims [] source "peers"
// CHECK-DAG: moegpu.buffer @ep_act : memref<?x32xbf16> dims [#moegpu.dim<received_rows>] source "scratch"
// CHECK-DAG: moegpu.buffer @w13 : memref<4x64x64xbf16> dims [] source "pack:gate_weight,up_weight"
// CHECK: moegpu.schedule "forward" {
// CHECK: moegpu.launch @moe_kernels::@dispatch_scatter
// CHECK-NEXT: moegpu.launch @moe_kernels::@ep_counts [@offsets, @ep_table, @ep_flags, @ep_epoch, @ep_peers, @ep_offsets, @send_pos, @back_pos, @ep_status, @ep_group_offsets] grid <fixed, size = 1> block 128 {transport = #moegpu.transport<lsa>}
// CHECK-NEXT: moegpu.launch @moe_kernels::@ep_dispatch [@offsets, @send_pos, @rows, @ep_rows, @row_weight, @ep_row_weight, @ep_flags, @ep_status, @ep_peers] grid <fixed, size = 20> block 128 {transport = #moegpu.transport<lsa>}
// CHECK-NEXT: moegpu.exchange <dispatch> [@offsets, @rows, @row_weight, @ep_offsets, @ep_group_offsets, @ep_rows, @ep_row_weight] {transport = #moegpu.transport<nccl>}
// CHECK-NEXT: moegpu.launch @moe_kernels::@ep_dispatch_wait [@ep_flags, @ep_waited, @ep_status, @ep_peers] grid <fixed, size = 1> block 32 {transport = #moegpu.transport<lsa>}
// CHECK-NEXT: moegpu.launch @moe_kernels::@expert_up [@ep_rows, @w13, @ep_group_offsets, @ep_act] grid <persistent> block 0
// CHECK-NEXT: moegpu.launch @moe_kernels::@expert_down [@ep_act, @w2, @ep_group_offsets, @ep_down, @ep_row_weight] grid <persistent> block 0
// CHECK-NEXT: moegpu.launch @moe_kernels::@ep_combine [@ep_offsets, @back_pos, @ep_down, @down, @ep_flags, @ep_status, @ep_peers] grid <fixed, size = 20> block 128 {transport = #moegpu.transport<lsa>}
// CHECK-NEXT: moegpu.exchange <combine> [@ep_offsets, @ep_down, @offsets, @down] {transport = #moegpu.transport<nccl>}
// CHECK-NEXT: moegpu.launch @moe_kernels::@ep_combine_wait [@ep_flags, @ep_waited, @ep_status, @ep_peers] grid <fixed, size = 1> block 32 {transport = #moegpu.transport<lsa>}
// CHECK-NEXT: moegpu.launch @moe_kernels::@combine
// TRAIN-LABEL: moegpu.program {
// TRAIN: moegpu.schedule "train" {
// TRAIN: moegpu.exchange <dispatch_rows> [@row_dy, @ep_row_dy]
// TRAIN: moegpu.all_reduce
func.func @shard(%x: tensor<?x64xbf16>, %wr: tensor<8x64xbf16>, %wg: tensor<4x32x64xbf16>,
                 %wu: tensor<4x32x64xbf16>, %wd: tensor<4x64x32xbf16>) -> tensor<?x64xbf16> {
  %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd)
         {config = #moe.layer_config<hidden = 64, experts = 8, top_k = 2, ffn = 32, dtype = bf16>, ep_size = 2}
       : (tensor<?x64xbf16>, tensor<8x64xbf16>, tensor<4x32x64xbf16>, tensor<4x32x64xbf16>, tensor<4x64x32xbf16>) -> tensor<?x64xbf16>
  return %y : tensor<?x64xbf16>
}

// -----

// In 2 token chunks: one ep_counts for every chunk's sizes and layouts
// (a table of ranks x chunks x experts, a groups buffer a chunk), a send,
// a flag and a wait a chunk each way (chunk c's dispatch on flag
// 2 + 4c, its combine on 3 + 4c). Chunk 1's rows travel while chunk 0's
// GEMMs run, chunk 0's go back during chunk 1's; the combine waits come
// last. The host-driven plan and rows beside them (nccl).
// CHECK-LABEL: gpu.func @ep_dispatch_c1
// CHECK: moegpu.ep_send <dispatch> {{.*}} {chunk = 1 : i64, chunks = 2 : i64, ranks = 2 : i64, slot = 6 : i64}
// CHECK-LABEL: gpu.func @ep_combine_c1
// CHECK: moegpu.ep_send <combine> {{.*}} {chunk = 1 : i64, chunks = 2 : i64, ranks = 2 : i64, slot = 7 : i64}
// CHECK-LABEL: gpu.func @ep_combine_wait_c1
// CHECK: moegpu.ep_wait {{.*}} slot = 7 : i64
// CHECK-LABEL: moegpu.program {
// CHECK-DAG: moegpu.buffer @ep_table : memref<32xi32> dims [] source "symmetric"
// CHECK-DAG: moegpu.buffer @ep_flags : memref<8xi32> dims [] source "symmetric"
// CHECK-DAG: moegpu.buffer @send_pos : memref<16xi32> dims [] source "scratch"
// CHECK-DAG: moegpu.buffer @back_pos : memref<16xi32> dims [] source "scratch"
// CHECK: moegpu.schedule "forward" {
// CHECK: moegpu.launch @moe_kernels::@dispatch_scatter
// CHECK-NEXT: moegpu.launch @moe_kernels::@ep_counts [@offsets, @ep_table, @ep_flags, @ep_epoch, @ep_peers, @ep_offsets, @send_pos, @back_pos, @ep_status, @ep_group_offsets, @ep_group_offsets.c1] grid <fixed, size = 1> block 128 {transport = #moegpu.transport<lsa>}
// CHECK-NEXT: moegpu.launch @moe_kernels::@ep_dispatch_c0 [@offsets, @send_pos, @rows, @ep_rows, @row_weight, @ep_row_weight, @ep_flags, @ep_status, @ep_peers] grid <fixed, size = 20> block 128 {chunk = 0 : i64, transport = #moegpu.transport<lsa>}
// CHECK-NEXT: moegpu.launch @moe_kernels::@ep_dispatch_c1 {{.*}} {chunk = 1 : i64, transport = #moegpu.transport<lsa>}
// CHECK-NEXT: moegpu.exchange <dispatch_plan> [@offsets, @ep_offsets, @ep_group_offsets, @ep_group_offsets.c1] {transport = #moegpu.transport<nccl>}
// CHECK-COUNT-4: moegpu.exchange <dispatch_rows> {{.*}} {chunk = {{[01]}} : i64, transport = #moegpu.transport<nccl>}
// CHECK-NEXT: moegpu.launch @moe_kernels::@ep_dispatch_wait_c0 [@ep_flags, @ep_waited, @ep_status, @ep_peers] grid <fixed, size = 1> block 32 {chunk = 0 : i64, transport = #moegpu.transport<lsa>}
// CHECK-NEXT: moegpu.launch @moe_kernels::@expert_up [@ep_rows, @w13, @ep_group_offsets, @ep_act] grid <persistent> block 0 {chunk = 0 : i64}
// CHECK-NEXT: moegpu.launch @moe_kernels::@expert_down {{.*}} {chunk = 0 : i64}
// CHECK-NEXT: moegpu.launch @moe_kernels::@ep_combine_c0 [@ep_offsets, @back_pos, @ep_down, @down, @ep_flags, @ep_status, @ep_peers] grid <fixed, size = 20> block 128 {chunk = 0 : i64, transport = #moegpu.transport<lsa>}
// CHECK-NEXT: moegpu.exchange <combine_rows> [@ep_down, @down] {chunk = 0 : i64, transport = #moegpu.transport<nccl>}
// CHECK-NEXT: moegpu.launch @moe_kernels::@ep_dispatch_wait_c1 {{.*}} {chunk = 1 : i64, transport = #moegpu.transport<lsa>}
// CHECK-NEXT: moegpu.launch @moe_kernels::@expert_up [@ep_rows, @w13, @ep_group_offsets.c1, @ep_act] grid <persistent> block 0 {chunk = 1 : i64}
// CHECK-NEXT: moegpu.launch @moe_kernels::@expert_down {{.*}} {chunk = 1 : i64}
// CHECK-NEXT: moegpu.launch @moe_kernels::@ep_combine_c1 {{.*}} {chunk = 1 : i64, transport = #moegpu.transport<lsa>}
// CHECK-NEXT: moegpu.exchange <combine_rows> [@ep_down, @down] {chunk = 1 : i64, transport = #moegpu.transport<nccl>}
// CHECK-NEXT: moegpu.launch @moe_kernels::@ep_combine_wait_c0 {{.*}} {chunk = 0 : i64, transport = #moegpu.transport<lsa>}
// CHECK-NEXT: moegpu.launch @moe_kernels::@ep_combine_wait_c1 {{.*}} {chunk = 1 : i64, transport = #moegpu.transport<lsa>}
// CHECK-NEXT: moegpu.launch @moe_kernels::@combine
func.func @chunked(%x: tensor<?x64xbf16>, %wr: tensor<8x64xbf16>, %wg: tensor<4x32x64xbf16>,
                   %wu: tensor<4x32x64xbf16>, %wd: tensor<4x64x32xbf16>) -> tensor<?x64xbf16> {
  %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd)
         {config = #moe.layer_config<hidden = 64, experts = 8, top_k = 2, ffn = 32, dtype = bf16>, ep_size = 2, ep_chunks = 2}
       : (tensor<?x64xbf16>, tensor<8x64xbf16>, tensor<4x32x64xbf16>, tensor<4x32x64xbf16>, tensor<4x64x32xbf16>) -> tensor<?x64xbf16>
  return %y : tensor<?x64xbf16>
}

// -----

// An f32 router weight beside bf16 experts: the logits come from a SIMT
// kernel (one warp per token), not the bf16 tensor-core GEMM.
// CHECK-LABEL: moegpu.program {
// CHECK-DAG: moegpu.buffer @router_weight : memref<8x64xf32> dims [] source "param:router_weight"
// CHECK: moegpu.launch @moe_kernels::@router [@x, @router_weight, @router_logits] grid <tokens, per_block = 4> block 128
// CHECK-NEXT: moegpu.launch @moe_kernels::@route [@router_logits, @topk_ids, @topk_weights, @counts] grid <tokens, per_block = 4> block 128
func.func @layer(%x: tensor<?x64xbf16>, %wr: tensor<8x64xf32>, %wg: tensor<8x32x64xbf16>,
                 %wu: tensor<8x32x64xbf16>, %wd: tensor<8x64x32xbf16>) -> tensor<?x64xbf16> {
  %y = moe.layer %x router(%wr) experts(%wg, %wu, %wd)
         {config = #moe.layer_config<hidden = 64, experts = 8, top_k = 2, ffn = 32, dtype = bf16>}
       : (tensor<?x64xbf16>, tensor<8x64xf32>, tensor<8x32x64xbf16>, tensor<8x32x64xbf16>, tensor<8x64x32xbf16>) -> tensor<?x64xbf16>
  return %y : tensor<?x64xbf16>
}
