// RUN: moe-opt %s | moe-opt | FileCheck %s
// RUN: moe-opt %s -mlir-print-op-generic | moe-opt | FileCheck %s

// Every SIMT kernel op, with and without its optional operands (the
// training step's ops after the forward ones).

gpu.module @k {
  // CHECK-LABEL: gpu.func @router
  // CHECK: moegpu.router_logits %{{.*}}, %{{.*}}, %{{.*}} : memref<?x64xbf16>, memref<8x64xf32>, memref<?x8xf32>
  gpu.func @router(%x: memref<?x64xbf16>, %w: memref<8x64xf32>, %l: memref<?x8xf32>) kernel {
    moegpu.router_logits %x, %w, %l : memref<?x64xbf16>, memref<8x64xf32>, memref<?x8xf32>
    gpu.return
  }
  // CHECK-LABEL: gpu.func @sum_splits
  // CHECK: moegpu.sum_splits %{{.*}}, %{{.*}}, %{{.*}} : memref<4x?x8xf32>, memref<1xi32>, memref<?x8xf32>
  gpu.func @sum_splits(%p: memref<4x?x8xf32>, %n: memref<1xi32>, %l: memref<?x8xf32>) kernel {
    moegpu.sum_splits %p, %n, %l : memref<4x?x8xf32>, memref<1xi32>, memref<?x8xf32>
    gpu.return
  }
  // CHECK-LABEL: gpu.func @shared_gate
  // CHECK: moegpu.shared_gate %{{.*}}, %{{.*}}, %{{.*}} : memref<?x64xbf16>, memref<1x64xbf16>, memref<?xf32>
  gpu.func @shared_gate(%x: memref<?x64xbf16>, %g: memref<1x64xbf16>, %s: memref<?xf32>) kernel {
    moegpu.shared_gate %x, %g, %s : memref<?x64xbf16>, memref<1x64xbf16>, memref<?xf32>
    gpu.return
  }
  // CHECK-LABEL: gpu.func @route
  // CHECK: moegpu.route %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {scoring = #moegpu.scoring<softmax>} : memref<?x8xf32>, memref<?x2xi32>, memref<?x2xf32>, memref<8xi32>
  // CHECK: moegpu.route %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} router_bias(%{{.*}} : memref<16xbf16>) score_bias(%{{.*}} : memref<16xf32>) {chunks = 2 : i64, groups = 4 : i64, normalize, routed_scale = 2.500000e+00 : f64, scoring = #moegpu.scoring<sigmoid>, sum_top2, topk_groups = 2 : i64} : memref<?x16xf32>, memref<?x4xi32>, memref<?x4xf32>, memref<32xi32>
  gpu.func @route(%l: memref<?x8xf32>, %i: memref<?x2xi32>, %w: memref<?x2xf32>, %c: memref<8xi32>,
                  %l2: memref<?x16xf32>, %rb: memref<16xbf16>, %sb: memref<16xf32>, %i2: memref<?x4xi32>, %w2: memref<?x4xf32>, %c2: memref<32xi32>) kernel {
    moegpu.route %l, %i, %w, %c {scoring = #moegpu.scoring<softmax>} : memref<?x8xf32>, memref<?x2xi32>, memref<?x2xf32>, memref<8xi32>
    moegpu.route %l2, %i2, %w2, %c2 router_bias(%rb : memref<16xbf16>) score_bias(%sb : memref<16xf32>) {scoring = #moegpu.scoring<sigmoid>, groups = 4, topk_groups = 2, sum_top2, normalize, routed_scale = 2.5, chunks = 2} : memref<?x16xf32>, memref<?x4xi32>, memref<?x4xf32>, memref<32xi32>
    gpu.return
  }
  // CHECK-LABEL: gpu.func @scan
  // CHECK: moegpu.dispatch_scan %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {alignment = 128 : i64} : memref<?x2xi32>, memref<8xi32>, memref<9xi32>, memref<8xi32>
  // CHECK: moegpu.dispatch_scan %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} shared(%{{.*}} : memref<2xi32>) {alignment = 64 : i64}
  gpu.func @scan(%i: memref<?x2xi32>, %c: memref<8xi32>, %o: memref<9xi32>, %cur: memref<8xi32>, %s: memref<2xi32>) kernel {
    moegpu.dispatch_scan %i, %c, %o, %cur {alignment = 128} : memref<?x2xi32>, memref<8xi32>, memref<9xi32>, memref<8xi32>
    moegpu.dispatch_scan %i, %c, %o, %cur shared(%s : memref<2xi32>) {alignment = 64} : memref<?x2xi32>, memref<8xi32>, memref<9xi32>, memref<8xi32>
    gpu.return
  }
  // CHECK-LABEL: gpu.func @scatter
  // CHECK: moegpu.dispatch_scatter %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {experts = 8 : i64, scale_input}
  // CHECK: moegpu.dispatch_scatter %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} scales(%{{.*}}, %{{.*}} : memref<?x1xf32>, memref<?x1xf32>) {chunks = 2 : i64, experts = 4 : i64}
  gpu.func @scatter(%x: memref<?x64xbf16>, %i: memref<?x2xi32>, %w: memref<?x2xf32>, %cur: memref<8xi32>, %r: memref<?x64xbf16>, %m: memref<?x2xi32>, %rw: memref<?xf32>,
                    %xq: memref<?x64xf8E4M3FN>, %rq: memref<?x64xf8E4M3FN>, %xs: memref<?x1xf32>, %rs: memref<?x1xf32>) kernel {
    moegpu.dispatch_scatter %x, %i, %w, %cur, %r, %m, %rw {experts = 8, scale_input} : memref<?x64xbf16>, memref<?x2xi32>, memref<?x2xf32>, memref<8xi32>, memref<?x64xbf16>, memref<?x2xi32>, memref<?xf32>
    moegpu.dispatch_scatter %xq, %i, %w, %cur, %rq, %m, %rw scales(%xs, %rs : memref<?x1xf32>, memref<?x1xf32>) {experts = 4, chunks = 2} : memref<?x64xf8E4M3FN>, memref<?x2xi32>, memref<?x2xf32>, memref<8xi32>, memref<?x64xf8E4M3FN>, memref<?x2xi32>, memref<?xf32>
    gpu.return
  }
  // CHECK-LABEL: gpu.func @quantize
  // CHECK: moegpu.quantize %{{.*}}, %{{.*}}, %{{.*}} : memref<?x256xbf16>, memref<?x256xf8E4M3FN>, memref<?x2xf32>
  // CHECK: moegpu.quantize %{{.*}}, %{{.*}}, %{{.*}} offsets(%{{.*}} : memref<9xi32>) : memref<?x256xbf16>, memref<?x256xf8E4M3FN>, memref<?x2xf32>
  gpu.func @quantize(%a: memref<?x256xbf16>, %q: memref<?x256xf8E4M3FN>, %s: memref<?x2xf32>, %o: memref<9xi32>) kernel {
    moegpu.quantize %a, %q, %s : memref<?x256xbf16>, memref<?x256xf8E4M3FN>, memref<?x2xf32>
    moegpu.quantize %a, %q, %s offsets(%o : memref<9xi32>) : memref<?x256xbf16>, memref<?x256xf8E4M3FN>, memref<?x2xf32>
    gpu.return
  }
  // CHECK-LABEL: gpu.func @quantize_columns
  // CHECK: moegpu.quantize_columns %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} : memref<?x256xbf16>, memref<256x?xf8E4M3FN>, memref<256x?xf32>, memref<9xi32>
  // CHECK: moegpu.quantize_columns %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} in_scale(%{{.*}} : memref<?x2xf32>) : memref<?x256xf8E4M3FN>, memref<256x?xf8E4M3FN>, memref<256x?xf32>, memref<9xi32>
  gpu.func @quantize_columns(%a: memref<?x256xbf16>, %q: memref<256x?xf8E4M3FN>, %s: memref<256x?xf32>, %o: memref<9xi32>, %c: memref<?x256xf8E4M3FN>, %cs: memref<?x2xf32>) kernel {
    moegpu.quantize_columns %a, %q, %s, %o : memref<?x256xbf16>, memref<256x?xf8E4M3FN>, memref<256x?xf32>, memref<9xi32>
    moegpu.quantize_columns %c, %q, %s, %o in_scale(%cs : memref<?x2xf32>) : memref<?x256xf8E4M3FN>, memref<256x?xf8E4M3FN>, memref<256x?xf32>, memref<9xi32>
    gpu.return
  }
  // CHECK-LABEL: gpu.func @quantize_blocks
  // CHECK: moegpu.quantize_blocks %{{.*}}, %{{.*}}, %{{.*}} : memref<8x64x32xf32>, memref<8x64x32xf8E4M3FN>, memref<8x1x1xf32>
  // CHECK: moegpu.quantize_blocks %{{.*}}, %{{.*}}, %{{.*}} transposed(%{{.*}} : memref<8x32x64xf8E4M3FN>) : memref<8x64x32xf32>, memref<8x64x32xf8E4M3FN>, memref<8x1x1xf32>
  // CHECK: moegpu.quantize_blocks %{{.*}}, %{{.*}}, %{{.*}} transposed(%{{.*}} : memref<8x32x256xf8E4M3FN>) transposed_scale(%{{.*}} : memref<8x1x2xf32>) {layout = #moegpu.copy_layout<up_rows>} : memref<8x64x32xf32>, memref<8x128x32xf8E4M3FN>, memref<8x2x1xf32>
  gpu.func @quantize_blocks(%w: memref<8x64x32xf32>, %q: memref<8x64x32xf8E4M3FN>, %s: memref<8x1x1xf32>, %t: memref<8x32x64xf8E4M3FN>, %q13: memref<8x128x32xf8E4M3FN>, %s13: memref<8x2x1xf32>, %t13: memref<8x32x256xf8E4M3FN>, %st13: memref<8x1x2xf32>) kernel {
    moegpu.quantize_blocks %w, %q, %s : memref<8x64x32xf32>, memref<8x64x32xf8E4M3FN>, memref<8x1x1xf32>
    moegpu.quantize_blocks %w, %q, %s transposed(%t : memref<8x32x64xf8E4M3FN>) : memref<8x64x32xf32>, memref<8x64x32xf8E4M3FN>, memref<8x1x1xf32>
    moegpu.quantize_blocks %w, %q13, %s13 transposed(%t13 : memref<8x32x256xf8E4M3FN>) transposed_scale(%st13 : memref<8x1x2xf32>) {layout = #moegpu.copy_layout<up_rows>} : memref<8x64x32xf32>, memref<8x128x32xf8E4M3FN>, memref<8x2x1xf32>
    gpu.return
  }
  // CHECK-LABEL: gpu.func @combine
  // CHECK: moegpu.combine %{{.*}}, %{{.*}}, %{{.*}} : memref<?x64xbf16>, memref<?x2xi32>, memref<?x64xbf16>
  // CHECK: moegpu.combine %{{.*}}, %{{.*}}, %{{.*}} shared(%{{.*}} : memref<?x64xbf16>) shared_scale(%{{.*}} : memref<?xf32>) output_bias(%{{.*}} : memref<64xbf16>) : memref<?x64xbf16>, memref<?x2xi32>, memref<?x64xbf16>
  gpu.func @combine(%d: memref<?x64xbf16>, %m: memref<?x2xi32>, %y: memref<?x64xbf16>, %so: memref<?x64xbf16>, %ss: memref<?xf32>, %ob: memref<64xbf16>) kernel {
    moegpu.combine %d, %m, %y : memref<?x64xbf16>, memref<?x2xi32>, memref<?x64xbf16>
    moegpu.combine %d, %m, %y shared(%so : memref<?x64xbf16>) shared_scale(%ss : memref<?xf32>) output_bias(%ob : memref<64xbf16>) : memref<?x64xbf16>, memref<?x2xi32>, memref<?x64xbf16>
    gpu.return
  }
  // CHECK-LABEL: gpu.func @t_copies
  // CHECK: moegpu.compute_copies masters(%{{.*}}, %{{.*}}, %{{.*}} : memref<4x16x64xf32>, memref<4x16x64xf32>, memref<8x64xf32>) copies(%{{.*}}, %{{.*}}, %{{.*}} : memref<4x32x64xbf16>, memref<4x32x64xbf16>, memref<1x8x64xbf16>) layouts [#moegpu.copy_layout<gate_rows>, #moegpu.copy_layout<up_rows>, #moegpu.copy_layout<same>] valid(%{{.*}} : memref<1xf32>) bounds(%{{.*}} : memref<3x3xi32>)
  // CHECK: moegpu.compute_copies masters(%{{.*}} : memref<8x64xf32>) copies(%{{.*}} : memref<1x8x64xbf16>) layouts [#moegpu.copy_layout<same>]{{$}}
  gpu.func @t_copies(%g: memref<4x16x64xf32>, %u: memref<4x16x64xf32>, %p: memref<4x32x64xbf16>, %a: memref<8x64xf32>, %b: memref<1x8x64xbf16>, %valid: memref<1xf32>, %bounds: memref<3x3xi32>) kernel {
    moegpu.compute_copies masters(%g, %u, %a : memref<4x16x64xf32>, memref<4x16x64xf32>, memref<8x64xf32>) copies(%p, %p, %b : memref<4x32x64xbf16>, memref<4x32x64xbf16>, memref<1x8x64xbf16>) layouts [#moegpu.copy_layout<gate_rows>, #moegpu.copy_layout<up_rows>, #moegpu.copy_layout<same>] valid(%valid : memref<1xf32>) bounds(%bounds : memref<3x3xi32>)
    moegpu.compute_copies masters(%a : memref<8x64xf32>) copies(%b : memref<1x8x64xbf16>) layouts [#moegpu.copy_layout<same>]
    gpu.return
  }
  // CHECK-LABEL: gpu.func @t_loss
  // CHECK: moegpu.mse_loss 
  gpu.func @t_loss(%y: memref<?x64xbf16>, %t: memref<?x64xf32>, %h: memref<16xf32>, %dy: memref<?x64xf32>, %l: memref<1xf32>) kernel {
    moegpu.mse_loss %y, %t, %h, %dy, %l : memref<?x64xbf16>, memref<?x64xf32>, memref<16xf32>, memref<?x64xf32>, memref<1xf32>
    gpu.return
  }
  // CHECK-LABEL: gpu.func @t_column_sum
  // CHECK: moegpu.column_sum 
  gpu.func @t_column_sum(%a: memref<?x64xf32>, %o: memref<64xf32>) kernel {
    moegpu.column_sum %a, %o : memref<?x64xf32>, memref<64xf32>
    gpu.return
  }
  // CHECK-LABEL: gpu.func @t_grouped_column_sum
  // CHECK: moegpu.grouped_column_sum {{.*}} {accumulate}
  gpu.func @t_grouped_column_sum(%a: memref<?x32xbf16>, %g: memref<5xi32>, %o: memref<4x32xf32>) kernel {
    moegpu.grouped_column_sum %a, %g, %o {accumulate} : memref<?x32xbf16>, memref<5xi32>, memref<4x32xf32>
    gpu.return
  }
  // CHECK-LABEL: gpu.func @t_row_tokens
  // CHECK: moegpu.row_tokens 
  gpu.func @t_row_tokens(%m: memref<?x2xi32>, %r: memref<?xi32>) kernel {
    moegpu.row_tokens %m, %r : memref<?x2xi32>, memref<?xi32>
    gpu.return
  }
  // CHECK-LABEL: gpu.func @t_gather_row_dy
  // CHECK: moegpu.gather_row_dy {{.*}} {top_k = 2 : i64}
  gpu.func @t_gather_row_dy(%dy: memref<?x64xf32>, %r: memref<?xi32>, %o: memref<5xi32>, %rd: memref<?x64xbf16>) kernel {
    moegpu.gather_row_dy %dy, %r, %o, %rd {top_k = 2} : memref<?x64xf32>, memref<?xi32>, memref<5xi32>, memref<?x64xbf16>
    gpu.return
  }
  // CHECK-LABEL: gpu.func @t_scatter_row_weight_grad
  // CHECK: moegpu.scatter_row_weight_grad 
  gpu.func @t_scatter_row_weight_grad(%g: memref<?xf32>, %r: memref<?xi32>, %o: memref<5xi32>, %d: memref<?x2xf32>) kernel {
    moegpu.scatter_row_weight_grad %g, %r, %o, %d : memref<?xf32>, memref<?xi32>, memref<5xi32>, memref<?x2xf32>
    gpu.return
  }
  // CHECK-LABEL: gpu.func @t_scaled_weight_grad
  // CHECK: moegpu.scaled_weight_grad 
  gpu.func @t_scaled_weight_grad(%d: memref<?x64xbf16>, %r: memref<?xi32>, %o: memref<5xi32>, %x: memref<?x64xbf16>, %g: memref<?xf32>) kernel {
    moegpu.scaled_weight_grad %d, %r, %o, %x, %g {top_k = 2} : memref<?x64xbf16>, memref<?xi32>, memref<5xi32>, memref<?x64xbf16>, memref<?xf32>
    gpu.return
  }
  // CHECK-LABEL: gpu.func @t_scale_rows
  // CHECK: moegpu.scale_rows {{.*}} weight(%{{.*}} : memref<?xf32>)
  gpu.func @t_scale_rows(%s: memref<?x64xf32>, %g: memref<5xi32>, %d: memref<?x64xbf16>, %w: memref<?xf32>) kernel {
    moegpu.scale_rows %s, %g, %d weight(%w : memref<?xf32>) : memref<?x64xf32>, memref<5xi32>, memref<?x64xbf16>
    gpu.return
  }
  // CHECK-LABEL: gpu.func @t_act_grad
  // CHECK: moegpu.act_grad {{.*}} weight(%{{.*}}, %{{.*}} : memref<?xf32>, memref<?xf32>) down_bias(%{{.*}}, %{{.*}} : memref<?x64xbf16>, memref<4x64xbf16>) {alpha = 1.702{{.*}} : f64, limit = 7.{{.*}} : f64}
  // CHECK: moegpu.act_grad {{.*}} {split} : {{.*}}, memref<?x256xbf16>,
  gpu.func @t_act_grad(%gu: memref<?x32xf32>, %gs: memref<?x16xf32>, %g: memref<5xi32>, %dgu: memref<?x32xbf16>, %dg: memref<?x16xbf16>, %du: memref<?x16xbf16>, %w: memref<?xf32>, %rg: memref<?xf32>, %dy: memref<?x64xbf16>, %b2: memref<4x64xbf16>, %dgs: memref<?x256xbf16>) kernel {
    moegpu.act_grad %gu, %gs, %g, %dgu, %dg, %du weight(%w, %rg : memref<?xf32>, memref<?xf32>) down_bias(%dy, %b2 : memref<?x64xbf16>, memref<4x64xbf16>) {alpha = 1.702 : f64, limit = 7.0 : f64} : memref<?x32xf32>, memref<?x16xf32>, memref<5xi32>, memref<?x32xbf16>, memref<?x16xbf16>, memref<?x16xbf16>
    moegpu.act_grad %gu, %gs, %g, %dgs, %dg, %du {split} : memref<?x32xf32>, memref<?x16xf32>, memref<5xi32>, memref<?x256xbf16>, memref<?x16xbf16>, memref<?x16xbf16>
    gpu.return
  }
  // CHECK-LABEL: gpu.func @t_route_grad
  // CHECK: moegpu.route_grad {{.*}} half(%{{.*}} : memref<?x8xbf16>) {normalize, routed_scale = 2.{{.*}} : f64, scoring = #moegpu.scoring<softmax>}
  gpu.func @t_route_grad(%l: memref<?x8xf32>, %i: memref<?x2xi32>, %t: memref<?x2xf32>, %dl: memref<?x8xf32>, %dh: memref<?x8xbf16>) kernel {
    moegpu.route_grad %l, %i, %t, %dl half(%dh : memref<?x8xbf16>) {scoring = #moegpu.scoring<softmax>, normalize, routed_scale = 2.0} : memref<?x8xf32>, memref<?x2xi32>, memref<?x2xf32>, memref<?x8xf32>
    gpu.return
  }
  // CHECK-LABEL: gpu.func @t_input_grad
  // CHECK: moegpu.input_grad {{.*}} router(%{{.*}}, %{{.*}} : memref<?x8xf32>, memref<8x64xf32>) shared(%{{.*}} : memref<?x64xf32>) gate(%{{.*}}, %{{.*}} : memref<?x1xf32>, memref<1x64xbf16>)
  gpu.func @t_input_grad(%d: memref<?x64xbf16>, %m: memref<?x2xi32>, %dx: memref<?x64xf32>, %dl: memref<?x8xf32>, %r: memref<8x64xf32>, %s: memref<?x64xf32>, %dz: memref<?x1xf32>, %g: memref<1x64xbf16>) kernel {
    moegpu.input_grad %d, %m, %dx router(%dl, %r : memref<?x8xf32>, memref<8x64xf32>) shared(%s : memref<?x64xf32>) gate(%dz, %g : memref<?x1xf32>, memref<1x64xbf16>) : memref<?x64xbf16>, memref<?x2xi32>, memref<?x64xf32>
    gpu.return
  }
  // CHECK-LABEL: gpu.func @t_shared_scale_grad
  // CHECK: moegpu.shared_scale_grad 
  gpu.func @t_shared_scale_grad(%dy: memref<?x64xf32>, %o: memref<?x64xbf16>, %s: memref<?xf32>, %dz: memref<?x1xf32>) kernel {
    moegpu.shared_scale_grad %dy, %o, %s, %dz : memref<?x64xf32>, memref<?x64xbf16>, memref<?xf32>, memref<?x1xf32>
    gpu.return
  }
  // CHECK-LABEL: gpu.func @t_router_grad
  // CHECK: moegpu.router_grad 
  gpu.func @t_router_grad(%dl: memref<?x8xf32>, %x: memref<?x64xbf16>, %g: memref<8x64xf32>) kernel {
    moegpu.router_grad %dl, %x, %g : memref<?x8xf32>, memref<?x64xbf16>, memref<8x64xf32>
    gpu.return
  }
  // CHECK-LABEL: gpu.func @t_token_offsets
  // CHECK: moegpu.token_offsets 
  gpu.func @t_token_offsets(%x: memref<?x64xbf16>, %o: memref<2xi32>) kernel {
    moegpu.token_offsets %x, %o : memref<?x64xbf16>, memref<2xi32>
    gpu.return
  }
  // CHECK-LABEL: gpu.func @t_expert_load
  // CHECK: moegpu.expert_load {{.*}} {chunks = 2 : i64}
  gpu.func @t_expert_load(%c: memref<16xi32>, %l: memref<8xf32>) kernel {
    moegpu.expert_load %c, %l {chunks = 2} : memref<16xi32>, memref<8xf32>
    gpu.return
  }
  // CHECK-LABEL: gpu.func @t_bias_update
  // CHECK: moegpu.bias_update 
  gpu.func @t_bias_update(%l: memref<8xf32>, %h: memref<16xf32>, %b: memref<8xf32>) kernel {
    moegpu.bias_update %l, %h, %b {top_k = 2} : memref<8xf32>, memref<16xf32>, memref<8xf32>
    gpu.return
  }
  // CHECK-LABEL: gpu.func @t_adamw
  // CHECK: moegpu.adamw %{{.*}} params(%{{.*}}, %{{.*}} : memref<8x64xf32>, memref<16xf32>) m(%{{.*}}, %{{.*}} : memref<8x64xf32>, memref<16xf32>) v(%{{.*}}, %{{.*}} : memref<8x64xf32>, memref<16xf32>) grads(%{{.*}}, %{{.*}} : memref<8x64xf32>, memref<16xf32>) : memref<16xf32>
  gpu.func @t_adamw(%p: memref<8x64xf32>, %m: memref<8x64xf32>, %v: memref<8x64xf32>, %g: memref<8x64xf32>, %h: memref<16xf32>) kernel {
    moegpu.adamw %h params(%p, %h : memref<8x64xf32>, memref<16xf32>) m(%m, %h : memref<8x64xf32>, memref<16xf32>) v(%v, %h : memref<8x64xf32>, memref<16xf32>) grads(%g, %h : memref<8x64xf32>, memref<16xf32>) : memref<16xf32>
    gpu.return
  }
  // CHECK-LABEL: gpu.func @t_adamw_verdict
  // CHECK: moegpu.adamw %{{.*}} params(%{{.*}} : memref<8x64xf32>) m(%{{.*}} : memref<8x64xf32>) v(%{{.*}} : memref<8x64xf32>) grads(%{{.*}} : memref<8x64xf32>) copies(%{{.*}} : memref<8x64xbf16>) layouts [#moegpu.copy_layout<same>] bounds(%{{.*}} : memref<1x3xi32>) rejected(%{{.*}} : memref<1xf32>) : memref<16xf32>
  // CHECK: moegpu.bias_update {{.*}} rejected(%{{.*}} : memref<1xf32>) {top_k = 2 : i64}
  gpu.func @t_adamw_verdict(%p: memref<8x64xf32>, %c: memref<8x64xbf16>, %h: memref<16xf32>, %r: memref<1xf32>, %l: memref<8xf32>, %b: memref<1x3xi32>) kernel {
    moegpu.adamw %h params(%p : memref<8x64xf32>) m(%p : memref<8x64xf32>) v(%p : memref<8x64xf32>) grads(%p : memref<8x64xf32>) copies(%c : memref<8x64xbf16>) layouts [#moegpu.copy_layout<same>] bounds(%b : memref<1x3xi32>) rejected(%r : memref<1xf32>) : memref<16xf32>
    moegpu.bias_update %l, %h, %l rejected(%r : memref<1xf32>) {top_k = 2} : memref<8xf32>, memref<16xf32>, memref<8xf32>
    gpu.return
  }
  // CHECK-LABEL: gpu.func @t_update_verdict
  // CHECK: moegpu.update_verdict %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} : memref<1xf32>, memref<4xf32>, memref<1xf32>
  // CHECK: moegpu.update_verdict %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} copies_valid(%{{.*}} : memref<1xf32>) : memref<1xf32>, memref<4xf32>, memref<1xf32>
  gpu.func @t_update_verdict(%l: memref<1xf32>, %s: memref<4xf32>, %r: memref<1xf32>) kernel {
    moegpu.update_verdict %l, %s, %s, %r : memref<1xf32>, memref<4xf32>, memref<1xf32>
    moegpu.update_verdict %l, %s, %s, %r copies_valid(%l : memref<1xf32>) : memref<1xf32>, memref<4xf32>, memref<1xf32>
    gpu.return
  }
  // CHECK-LABEL: gpu.func @t_grad_stats
  // CHECK: moegpu.grad_stats %{{.*}}, %{{.*}} grads(%{{.*}}, %{{.*}} : memref<8x64xf32>, memref<16xf32>) : memref<2xf32>, memref<2xi32>
  gpu.func @t_grad_stats(%g: memref<8x64xf32>, %h: memref<16xf32>, %sq: memref<2xf32>, %gm: memref<2xi32>) kernel {
    moegpu.grad_stats %sq, %gm grads(%g, %h : memref<8x64xf32>, memref<16xf32>) : memref<2xf32>, memref<2xi32>
    gpu.return
  }
  // CHECK-LABEL: gpu.func @t_update_check
  // CHECK: moegpu.update_check %{{.*}}, %{{.*}}, %{{.*}} params(%{{.*}}, %{{.*}} : memref<8x64xf32>, memref<16xf32>) m({{.*}}) v({{.*}}) grads({{.*}}) : memref<16xf32>, memref<2xi32>, memref<2xf32>
  // CHECK: moegpu.update_check {{.*}} grads({{.*}}) valid(%{{.*}} : memref<1xf32>) bounds(%{{.*}} : memref<2x3xi32>) : memref<16xf32>, memref<2xi32>, memref<2xf32>
  gpu.func @t_update_check(%p: memref<8x64xf32>, %m: memref<8x64xf32>, %v: memref<8x64xf32>, %g: memref<8x64xf32>, %h: memref<16xf32>, %gm: memref<2xi32>, %bad: memref<2xf32>, %valid: memref<1xf32>, %bounds: memref<2x3xi32>) kernel {
    moegpu.update_check %h, %gm, %bad params(%p, %h : memref<8x64xf32>, memref<16xf32>) m(%m, %h : memref<8x64xf32>, memref<16xf32>) v(%v, %h : memref<8x64xf32>, memref<16xf32>) grads(%g, %h : memref<8x64xf32>, memref<16xf32>) : memref<16xf32>, memref<2xi32>, memref<2xf32>
    moegpu.update_check %h, %gm, %bad params(%p, %h : memref<8x64xf32>, memref<16xf32>) m(%m, %h : memref<8x64xf32>, memref<16xf32>) v(%v, %h : memref<8x64xf32>, memref<16xf32>) grads(%g, %h : memref<8x64xf32>, memref<16xf32>) valid(%valid : memref<1xf32>) bounds(%bounds : memref<2x3xi32>) : memref<16xf32>, memref<2xi32>, memref<2xf32>
    gpu.return
  }
}
