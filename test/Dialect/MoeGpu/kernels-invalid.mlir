// RUN: moe-opt %s -split-input-file -verify-diagnostics

// One case per diagnostic of the SIMT kernel ops' verifiers.
gpu.module @k {
  gpu.func @f(%x: memref<?x64xbf16>, %w: memref<8x64xf32>, %l: memref<?x8xf16>) kernel {
    // expected-error @+1 {{'moegpu.router_logits' op expects logits of f32, got 'memref<?x8xf16>'}}
    moegpu.router_logits %x, %w, %l : memref<?x64xbf16>, memref<8x64xf32>, memref<?x8xf16>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%x: memref<?x64xbf16>, %w: memref<8x32xf32>, %l: memref<?x8xf32>) kernel {
    // expected-error @+1 {{'moegpu.router_logits' op expects dimension 1 of weight to be 64 (x's hidden size), got 'memref<8x32xf32>'}}
    moegpu.router_logits %x, %w, %l : memref<?x64xbf16>, memref<8x32xf32>, memref<?x8xf32>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%p: memref<4x?x8xf32>, %n: memref<2xi32>, %l: memref<?x8xf32>) kernel {
    // expected-error @+1 {{'moegpu.sum_splits' op expects dimension 0 of count to be 1 (one slice count), got 'memref<2xi32>'}}
    moegpu.sum_splits %p, %n, %l : memref<4x?x8xf32>, memref<2xi32>, memref<?x8xf32>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%p: memref<4x?x8xf32>, %n: memref<1xi32>, %l: memref<?x16xf32>) kernel {
    // expected-error @+1 {{'moegpu.sum_splits' op expects dimension 1 of out to be 8 (the partials' columns), got 'memref<?x16xf32>'}}
    moegpu.sum_splits %p, %n, %l : memref<4x?x8xf32>, memref<1xi32>, memref<?x16xf32>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%p: memref<?x?x8xf32>, %n: memref<1xi32>, %l: memref<?x8xf32>) kernel {
    // expected-error @+1 {{'moegpu.sum_splits' op expects dimension 0 of partials to be static, got 'memref<?x?x8xf32>'}}
    moegpu.sum_splits %p, %n, %l : memref<?x?x8xf32>, memref<1xi32>, memref<?x8xf32>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%x: memref<?x?xbf16>, %g: memref<1x64xbf16>, %s: memref<?xf32>) kernel {
    // expected-error @+1 {{'moegpu.shared_gate' op expects dimension 1 of x to be static, got 'memref<?x?xbf16>'}}
    moegpu.shared_gate %x, %g, %s : memref<?x?xbf16>, memref<1x64xbf16>, memref<?xf32>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%x: memref<?x64xbf16>, %g: memref<64xbf16>, %s: memref<?xf32>) kernel {
    // expected-error @+1 {{'moegpu.shared_gate' op expects gate of rank 2, got 'memref<64xbf16>'}}
    moegpu.shared_gate %x, %g, %s : memref<?x64xbf16>, memref<64xbf16>, memref<?xf32>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%l: memref<?x8xf32>, %i: memref<?x2xi32>, %w: memref<?x2xf32>, %c: memref<9xi32>) kernel {
    // expected-error @+1 {{'moegpu.route' op expects dimension 0 of counts to be 8 (chunks x experts), got 'memref<9xi32>'}}
    moegpu.route %l, %i, %w, %c {scoring = #moegpu.scoring<softmax>} : memref<?x8xf32>, memref<?x2xi32>, memref<?x2xf32>, memref<9xi32>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%l: memref<?x8xf32>, %i: memref<?x2xi32>, %w: memref<?x2xf32>, %c: memref<8xi32>) kernel {
    // expected-error @+1 {{'moegpu.route' op expects chunks to be at least 1, got 0}}
    moegpu.route %l, %i, %w, %c {scoring = #moegpu.scoring<softmax>, chunks = 0} : memref<?x8xf32>, memref<?x2xi32>, memref<?x2xf32>, memref<8xi32>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%l: memref<?x8xf32>, %i: memref<?x9xi32>, %w: memref<?x9xf32>, %c: memref<8xi32>) kernel {
    // expected-error @+1 {{'moegpu.route' op expects between 1 and 8 experts a token (ids' k), got 9}}
    moegpu.route %l, %i, %w, %c {scoring = #moegpu.scoring<softmax>} : memref<?x8xf32>, memref<?x9xi32>, memref<?x9xf32>, memref<8xi32>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%l: memref<?x8xf32>, %i: memref<?x2xi32>, %w: memref<?x2xf32>, %c: memref<8xi32>) kernel {
    // expected-error @+1 {{'moegpu.route' op expects groups to divide the 8 experts, got 3}}
    moegpu.route %l, %i, %w, %c {scoring = #moegpu.scoring<softmax>, groups = 3} : memref<?x8xf32>, memref<?x2xi32>, memref<?x2xf32>, memref<8xi32>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%l: memref<?x8xf32>, %i: memref<?x2xi32>, %w: memref<?x2xf32>, %c: memref<8xi32>) kernel {
    // expected-error @+1 {{'moegpu.route' op expects topk_groups of at most groups (2), got 3}}
    moegpu.route %l, %i, %w, %c {scoring = #moegpu.scoring<softmax>, groups = 2, topk_groups = 3} : memref<?x8xf32>, memref<?x2xi32>, memref<?x2xf32>, memref<8xi32>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%l: memref<?x8xf32>, %i: memref<?x2xi32>, %w: memref<?x2xf32>, %c: memref<8xi32>) kernel {
    // expected-error @+1 {{'moegpu.route' op scores groups of one expert by sum_top2}}
    moegpu.route %l, %i, %w, %c {scoring = #moegpu.scoring<sigmoid>, groups = 8, topk_groups = 2, sum_top2} : memref<?x8xf32>, memref<?x2xi32>, memref<?x2xf32>, memref<8xi32>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%l: memref<?x8xf32>, %i: memref<?x2xi32>, %w: memref<?x2xf32>, %c: memref<8xi32>) kernel {
    // expected-error @+1 {{'moegpu.route' op expects sparsemixer scoring without groups}}
    moegpu.route %l, %i, %w, %c {scoring = #moegpu.scoring<sparsemixer>, groups = 2} : memref<?x8xf32>, memref<?x2xi32>, memref<?x2xf32>, memref<8xi32>
    gpu.return
  }
}

// -----

func.func @f(%l: memref<?x8xf32>, %i: memref<?x2xi32>, %w: memref<?x2xf32>, %c: memref<8xi32>) {
  // expected-error @+1 {{'moegpu.route' op expects parent op 'gpu.func'}}
  moegpu.route %l, %i, %w, %c {scoring = #moegpu.scoring<softmax>} : memref<?x8xf32>, memref<?x2xi32>, memref<?x2xf32>, memref<8xi32>
  return
}

// -----

gpu.module @k {
  gpu.func @f(%i: memref<?x2xi32>, %c: memref<8xi32>, %o: memref<8xi32>, %cur: memref<8xi32>) kernel {
    // expected-error @+1 {{'moegpu.dispatch_scan' op expects dimension 0 of offsets to be 9 (one more than counts), got 'memref<8xi32>'}}
    moegpu.dispatch_scan %i, %c, %o, %cur {alignment = 128} : memref<?x2xi32>, memref<8xi32>, memref<8xi32>, memref<8xi32>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%x: memref<?x64xbf16>, %i: memref<?x2xi32>, %w: memref<?x2xf32>, %cur: memref<8xi32>, %r: memref<?x64xbf16>, %m: memref<?x2xi32>, %rw: memref<?xf32>, %s: memref<?x1xf32>) kernel {
    // expected-error @+1 {{'moegpu.dispatch_scatter' op expects x of f8E4M3FN, got 'memref<?x64xbf16>'}}
    moegpu.dispatch_scatter %x, %i, %w, %cur, %r, %m, %rw scales(%s, %s : memref<?x1xf32>, memref<?x1xf32>) {experts = 8} : memref<?x64xbf16>, memref<?x2xi32>, memref<?x2xf32>, memref<8xi32>, memref<?x64xbf16>, memref<?x2xi32>, memref<?xf32>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%x: memref<?x64xf8E4M3FN>, %i: memref<?x2xi32>, %w: memref<?x2xf32>, %cur: memref<8xi32>, %r: memref<?x64xf8E4M3FN>, %m: memref<?x2xi32>, %rw: memref<?xf32>, %s: memref<?x1xf32>) kernel {
    // expected-error @+1 {{'moegpu.dispatch_scatter' op scales rows (scale_input) that it copies as e4m3 codes; quantize the scaled rows instead}}
    moegpu.dispatch_scatter %x, %i, %w, %cur, %r, %m, %rw scales(%s, %s : memref<?x1xf32>, memref<?x1xf32>) {experts = 8, scale_input} : memref<?x64xf8E4M3FN>, memref<?x2xi32>, memref<?x2xf32>, memref<8xi32>, memref<?x64xf8E4M3FN>, memref<?x2xi32>, memref<?xf32>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%x: memref<?x64xbf16>, %i: memref<?x2xi32>, %w: memref<?x2xf32>, %cur: memref<8xi32>, %r: memref<?x64xf16>, %m: memref<?x2xi32>, %rw: memref<?xf32>) kernel {
    // expected-error @+1 {{'moegpu.dispatch_scatter' op expects x and rows of one element type, got 'memref<?x64xbf16>' and 'memref<?x64xf16>'}}
    moegpu.dispatch_scatter %x, %i, %w, %cur, %r, %m, %rw {experts = 8} : memref<?x64xbf16>, memref<?x2xi32>, memref<?x2xf32>, memref<8xi32>, memref<?x64xf16>, memref<?x2xi32>, memref<?xf32>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%x: memref<?x64xbf16>, %i: memref<?x2xi32>, %w: memref<?x2xf32>, %cur: memref<8xi32>, %r: memref<?x64xbf16>, %m: memref<?x3xi32>, %rw: memref<?xf32>) kernel {
    // expected-error @+1 {{'moegpu.dispatch_scatter' op expects ids and row_map to have one type, got 'memref<?x2xi32>' and 'memref<?x3xi32>'}}
    moegpu.dispatch_scatter %x, %i, %w, %cur, %r, %m, %rw {experts = 8} : memref<?x64xbf16>, memref<?x2xi32>, memref<?x2xf32>, memref<8xi32>, memref<?x64xbf16>, memref<?x3xi32>, memref<?xf32>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%a: memref<?x258xbf16>, %q: memref<?x258xf8E4M3FN>, %s: memref<?x3xf32>) kernel {
    // expected-error @+1 {{'moegpu.quantize' op expects rows of a multiple of 4 channels (a lane's four codes), got 258}}
    moegpu.quantize %a, %q, %s : memref<?x258xbf16>, memref<?x258xf8E4M3FN>, memref<?x3xf32>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%a: memref<?x256xbf16>, %q: memref<?x256xf8E4M3FN>, %s: memref<?x2xf32>, %o: memref<1xi32>) kernel {
    // expected-error @+1 {{'moegpu.quantize' op expects offsets of at least one group ([G + 1], G >= 1), got 'memref<1xi32>'}}
    moegpu.quantize %a, %q, %s offsets(%o : memref<1xi32>) : memref<?x256xbf16>, memref<?x256xf8E4M3FN>, memref<?x2xf32>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%d: memref<?x64xbf16>, %m: memref<?x2xi32>, %y: memref<?x64xbf16>, %ss: memref<?xf32>) kernel {
    // expected-error @+1 {{'moegpu.combine' op expects shared_scale only with shared}}
    moegpu.combine %d, %m, %y shared_scale(%ss : memref<?xf32>) : memref<?x64xbf16>, memref<?x2xi32>, memref<?x64xbf16>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%d: memref<?x64xf16>, %m: memref<?x2xi32>, %y: memref<?x64xbf16>) kernel {
    // expected-error @+1 {{'moegpu.combine' op expects down of y's element type 'bf16', got 'memref<?x64xf16>'}}
    moegpu.combine %d, %m, %y : memref<?x64xf16>, memref<?x2xi32>, memref<?x64xbf16>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%a: memref<8x64xf32>, %b: memref<8x32xbf16>) kernel {
    // expected-error @+1 {{'moegpu.compute_copies' op expects copy 0 (same) with as many elements as its master, got 'memref<8x32xbf16>' for 'memref<8x64xf32>'}}
    moegpu.compute_copies masters(%a : memref<8x64xf32>) copies(%b : memref<8x32xbf16>) layouts [#moegpu.copy_layout<same>]
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%g: memref<64xf32>, %c: memref<64xbf16>, %p: memref<128xbf16>) kernel {
    // expected-error @+1 {{'moegpu.compute_copies' op expects copy 1 (up_rows) to be a packed [G, 2F, H] or [G, 2F] copy of twice its master's rows, got 'memref<128xbf16>' for 'memref<64xf32>'}}
    moegpu.compute_copies masters(%g, %g : memref<64xf32>, memref<64xf32>) copies(%c, %p : memref<64xbf16>, memref<128xbf16>) layouts [#moegpu.copy_layout<same>, #moegpu.copy_layout<up_rows>]
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%g: memref<4x16x64xf32>, %p: memref<4x16x64xbf16>) kernel {
    // expected-error @+1 {{'moegpu.compute_copies' op expects copy 0 (gate_rows) to be a packed [G, 2F, H] or [G, 2F] copy of twice its master's rows, got 'memref<4x16x64xbf16>' for 'memref<4x16x64xf32>'}}
    moegpu.compute_copies masters(%g : memref<4x16x64xf32>) copies(%p : memref<4x16x64xbf16>) layouts [#moegpu.copy_layout<gate_rows>]
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%g: memref<16x64xbf16>, %p: memref<16x64xbf16>) kernel {
    // expected-error @+1 {{'moegpu.compute_copies' op expects master 0 to be f32 of static shape, got 'memref<16x64xbf16>'}}
    moegpu.compute_copies masters(%g : memref<16x64xbf16>) copies(%p : memref<16x64xbf16>) layouts [#moegpu.copy_layout<same>]
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%g: memref<16x64xf32>, %p: memref<16x64xbf16>) kernel {
    // expected-error @+1 {{'moegpu.compute_copies' op expects one copy and one layout per master (2), got 1 and 1}}
    moegpu.compute_copies masters(%g, %g : memref<16x64xf32>, memref<16x64xf32>) copies(%p : memref<16x64xbf16>) layouts [#moegpu.copy_layout<same>]
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%g: memref<16x64xf32>, %p: memref<16x64xbf16>, %v: memref<1xi32>) kernel {
    // expected-error @+1 {{'moegpu.compute_copies' op expects valid to be one f32 (memref<1xf32>), got 'memref<1xi32>'}}
    moegpu.compute_copies masters(%g : memref<16x64xf32>) copies(%p : memref<16x64xbf16>) layouts [#moegpu.copy_layout<same>] valid(%v : memref<1xi32>)
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%gu: memref<?x32xf32>, %gs: memref<?x16xf32>, %g: memref<5xi32>, %dgu: memref<?x32xbf16>, %dg: memref<?x16xbf16>, %du: memref<?x16xbf16>) kernel {
    // expected-error @+1 {{'moegpu.act_grad' op expects dimension 1 of dgu to be 256 (gate and up, each half of gu's columns padded to a multiple of 128), got 'memref<?x32xbf16>'}}
    moegpu.act_grad %gu, %gs, %g, %dgu, %dg, %du {split} : memref<?x32xf32>, memref<?x16xf32>, memref<5xi32>, memref<?x32xbf16>, memref<?x16xbf16>, memref<?x16xbf16>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%gu: memref<?x32xf32>, %gs: memref<?x16xf32>, %g: memref<5xi32>, %dgu: memref<?x32xbf16>, %dg: memref<?x16xbf16>, %du: memref<?x16xbf16>) kernel {
    // expected-error @+1 {{'moegpu.act_grad' op expects alpha and limit together}}
    moegpu.act_grad %gu, %gs, %g, %dgu, %dg, %du {alpha = 1.702 : f64} : memref<?x32xf32>, memref<?x16xf32>, memref<5xi32>, memref<?x32xbf16>, memref<?x16xbf16>, memref<?x16xbf16>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%gu: memref<?x32xf32>, %gs: memref<?x16xf32>, %g: memref<5xi32>, %dgu: memref<?x32xbf16>, %dg: memref<?x16xbf16>, %du: memref<?x16xbf16>, %dy: memref<?x64xbf16>, %b2: memref<4x64xbf16>) kernel {
    // expected-error @+1 {{'moegpu.act_grad' op expects the down bias (dy, b2) only with weight and row_grad}}
    moegpu.act_grad %gu, %gs, %g, %dgu, %dg, %du down_bias(%dy, %b2 : memref<?x64xbf16>, memref<4x64xbf16>) : memref<?x32xf32>, memref<?x16xf32>, memref<5xi32>, memref<?x32xbf16>, memref<?x16xbf16>, memref<?x16xbf16>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%gu: memref<?x24xf32>, %gs: memref<?x12xf32>, %g: memref<5xi32>, %dgu: memref<?x24xbf16>, %dg: memref<?x12xbf16>, %du: memref<?x12xbf16>) kernel {
    // expected-error @+1 {{'moegpu.act_grad' op expects gu of 2F columns, F a multiple of 8 (blocks of 8 gate and 8 up columns), got 'memref<?x24xf32>'}}
    moegpu.act_grad %gu, %gs, %g, %dgu, %dg, %du : memref<?x24xf32>, memref<?x12xf32>, memref<5xi32>, memref<?x24xbf16>, memref<?x12xbf16>, memref<?x12xbf16>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%l: memref<?x8xf32>, %i: memref<?x2xi32>, %t: memref<?x2xf32>, %dl: memref<?x8xf32>) kernel {
    // expected-error @+1 {{'moegpu.route_grad' op expects softmax or sigmoid scoring (sparsemixer has no gradient here)}}
    moegpu.route_grad %l, %i, %t, %dl {scoring = #moegpu.scoring<sparsemixer>} : memref<?x8xf32>, memref<?x2xi32>, memref<?x2xf32>, memref<?x8xf32>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%d: memref<?x64xbf16>, %m: memref<?x2xi32>, %dx: memref<?x64xf32>) kernel {
    // expected-error @+1 {{'moegpu.input_grad' op expects the router's part of dx as one of router_dx or router(dl, router)}}
    moegpu.input_grad %d, %m, %dx : memref<?x64xbf16>, memref<?x2xi32>, memref<?x64xf32>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%p: memref<?x64xf32>, %h: memref<16xf32>) kernel {
    // expected-error @+1 {{'moegpu.adamw' op expects master 0 to be f32 of static shape, got 'memref<?x64xf32>'}}
    moegpu.adamw %h params(%p : memref<?x64xf32>) m(%p : memref<?x64xf32>) v(%p : memref<?x64xf32>) grads(%p : memref<?x64xf32>) : memref<16xf32>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%p: memref<8x64xf32>, %h: memref<16xf32>, %s: memref<4xf32>, %gm: memref<1xi32>) kernel {
    // expected-error @+1 {{'moegpu.update_check' op expects bad of 1 f32 (one per weight), got 'memref<4xf32>'}}
    moegpu.update_check %h, %gm, %s params(%p : memref<8x64xf32>) m(%p : memref<8x64xf32>) v(%p : memref<8x64xf32>) grads(%p : memref<8x64xf32>) : memref<16xf32>, memref<1xi32>, memref<4xf32>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%p: memref<8x64xbf16>, %h: memref<16xf32>, %s: memref<4xf32>, %gm: memref<1xi32>) kernel {
    // expected-error @+1 {{'moegpu.update_check' op expects master 0 to be f32 of static shape, got 'memref<8x64xbf16>'}}
    moegpu.update_check %h, %gm, %s params(%p : memref<8x64xbf16>) m(%p : memref<8x64xbf16>) v(%p : memref<8x64xbf16>) grads(%p : memref<8x64xbf16>) : memref<16xf32>, memref<1xi32>, memref<4xf32>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%c: memref<12xi32>, %l: memref<8xf32>) kernel {
    // expected-error @+1 {{'moegpu.expert_load' op expects dimension 0 of counts to be 16 (chunks x experts), got 'memref<12xi32>'}}
    moegpu.expert_load %c, %l {chunks = 2} : memref<12xi32>, memref<8xf32>
    gpu.return
  }
}

// -----

// The pairs the custom form writes together, split in the generic form.
gpu.module @k {
  gpu.func @f(%gu: memref<?x32xf32>, %gs: memref<?x16xf32>, %g: memref<5xi32>, %dgu: memref<?x32xbf16>, %dg: memref<?x16xbf16>, %du: memref<?x16xbf16>, %w: memref<?xf32>) kernel {
    // expected-error @+1 {{'moegpu.act_grad' op expects weight and row_grad together}}
    "moegpu.act_grad"(%gu, %gs, %g, %dgu, %dg, %du, %w) <{operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0>}> : (memref<?x32xf32>, memref<?x16xf32>, memref<5xi32>, memref<?x32xbf16>, memref<?x16xbf16>, memref<?x16xbf16>, memref<?xf32>) -> ()
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%d: memref<?x64xbf16>, %m: memref<?x2xi32>, %dx: memref<?x64xf32>, %dl: memref<?x8xf32>) kernel {
    // expected-error @+1 {{'moegpu.input_grad' op expects dl and router together}}
    "moegpu.input_grad"(%d, %m, %dl, %dx) <{operandSegmentSizes = array<i32: 1, 1, 0, 0, 1, 0, 0, 0, 0, 1>}> : (memref<?x64xbf16>, memref<?x2xi32>, memref<?x8xf32>, memref<?x64xf32>) -> ()
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%d: memref<?x64xbf16>, %m: memref<?x2xi32>, %dx: memref<?x64xf32>, %rdx: memref<?x64xf32>, %dz: memref<?x1xf32>) kernel {
    // expected-error @+1 {{'moegpu.input_grad' op expects shared_dz and gate together}}
    "moegpu.input_grad"(%d, %m, %rdx, %dz, %dx) <{operandSegmentSizes = array<i32: 1, 1, 0, 1, 0, 0, 0, 1, 0, 1>}> : (memref<?x64xbf16>, memref<?x2xi32>, memref<?x64xf32>, memref<?x1xf32>, memref<?x64xf32>) -> ()
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%x: memref<?x64xf8E4M3FN>, %i: memref<?x2xi32>, %w: memref<?x2xf32>, %cur: memref<8xi32>, %r: memref<?x64xf8E4M3FN>, %m: memref<?x2xi32>, %rw: memref<?xf32>, %s: memref<?x1xf32>) kernel {
    // expected-error @+1 {{'moegpu.dispatch_scatter' op expects x_scale and row_scale together}}
    "moegpu.dispatch_scatter"(%x, %i, %w, %cur, %r, %m, %rw, %s) <{experts = 8 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 1, 1, 1, 0>}> : (memref<?x64xf8E4M3FN>, memref<?x2xi32>, memref<?x2xf32>, memref<8xi32>, memref<?x64xf8E4M3FN>, memref<?x2xi32>, memref<?xf32>, memref<?x1xf32>) -> ()
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%l: memref<1xf32>, %s: memref<4xf32>, %r: memref<2xf32>) kernel {
    // expected-error @+1 {{'moegpu.update_verdict' op expects rejected to be one f32 (memref<1xf32>), got 'memref<2xf32>'}}
    moegpu.update_verdict %l, %s, %s, %r : memref<1xf32>, memref<4xf32>, memref<2xf32>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%l: memref<2xf32>, %s: memref<4xf32>, %r: memref<1xf32>) kernel {
    // expected-error @+1 {{'moegpu.update_verdict' op expects loss to be one f32 (memref<1xf32>), got 'memref<2xf32>'}}
    moegpu.update_verdict %l, %s, %s, %r : memref<2xf32>, memref<4xf32>, memref<1xf32>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%l: memref<1xf32>, %s: memref<?xf32>, %r: memref<1xf32>) kernel {
    // expected-error @+1 {{'moegpu.update_verdict' op expects dimension 0 of grad_sq to be static, got 'memref<?xf32>'}}
    moegpu.update_verdict %l, %s, %s, %r : memref<1xf32>, memref<?xf32>, memref<1xf32>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%p: memref<8x64xf32>, %h: memref<16xf32>, %r: memref<1xi32>) kernel {
    // expected-error @+1 {{'moegpu.adamw' op expects rejected to be one f32 (memref<1xf32>), got 'memref<1xi32>'}}
    moegpu.adamw %h params(%p : memref<8x64xf32>) m(%p : memref<8x64xf32>) v(%p : memref<8x64xf32>) grads(%p : memref<8x64xf32>) rejected(%r : memref<1xi32>) : memref<16xf32>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%l: memref<8xf32>, %h: memref<16xf32>, %r: memref<4xf32>) kernel {
    // expected-error @+1 {{'moegpu.bias_update' op expects rejected to be one f32 (memref<1xf32>), got 'memref<4xf32>'}}
    moegpu.bias_update %l, %h, %l rejected(%r : memref<4xf32>) {top_k = 2} : memref<8xf32>, memref<16xf32>, memref<8xf32>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%p: memref<8x64xf32>, %h: memref<16xf32>) kernel {
    // expected-error @+1 {{'moegpu.adamw' op expects as many params, m, v and grads, at least one, got 2, 1, 1 and 1}}
    moegpu.adamw %h params(%p, %p : memref<8x64xf32>, memref<8x64xf32>) m(%p : memref<8x64xf32>) v(%p : memref<8x64xf32>) grads(%p : memref<8x64xf32>) : memref<16xf32>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%p: memref<8x64xf32>, %m: memref<64x8xf32>, %h: memref<16xf32>) kernel {
    // expected-error @+1 {{'moegpu.adamw' op expects m 0 of its master's shape, f32 or bf16, got 'memref<64x8xf32>'}}
    moegpu.adamw %h params(%p : memref<8x64xf32>) m(%m : memref<64x8xf32>) v(%p : memref<8x64xf32>) grads(%p : memref<8x64xf32>) : memref<16xf32>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%p: memref<8x64xf32>, %c: memref<8x64xbf16>, %h: memref<16xf32>) kernel {
    // expected-error @+1 {{'moegpu.adamw' op expects one copy and one layout per master (1), got 1 and 0}}
    moegpu.adamw %h params(%p : memref<8x64xf32>) m(%p : memref<8x64xf32>) v(%p : memref<8x64xf32>) grads(%p : memref<8x64xf32>) copies(%c : memref<8x64xbf16>) : memref<16xf32>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%l: memref<1xf32>, %s: memref<4xf32>, %c: memref<2xf32>) kernel {
    // expected-error @+1 {{'moegpu.update_verdict' op expects copies_valid to be one f32 (memref<1xf32>), got 'memref<2xf32>'}}
    moegpu.update_verdict %l, %s, %s, %l copies_valid(%c : memref<2xf32>) : memref<1xf32>, memref<4xf32>, memref<1xf32>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%p: memref<8x64xf32>, %h: memref<16xf32>, %s: memref<1xf32>, %gm: memref<1xf32>) kernel {
    // expected-error @+1 {{'moegpu.update_check' op expects grad_max of 1 i32 (one per weight), got 'memref<1xf32>'}}
    moegpu.update_check %h, %gm, %s params(%p : memref<8x64xf32>) m(%p : memref<8x64xf32>) v(%p : memref<8x64xf32>) grads(%p : memref<8x64xf32>) : memref<16xf32>, memref<1xf32>, memref<1xf32>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%p: memref<8x64xf32>, %h: memref<16xf32>, %s: memref<1xf32>, %gm: memref<1xi32>) kernel {
    // expected-error @+1 {{'moegpu.update_check' op expects valid and bounds together (the bounds hold while the flag is set)}}
    moegpu.update_check %h, %gm, %s params(%p : memref<8x64xf32>) m(%p : memref<8x64xf32>) v(%p : memref<8x64xf32>) grads(%p : memref<8x64xf32>) valid(%s : memref<1xf32>) : memref<16xf32>, memref<1xi32>, memref<1xf32>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%p: memref<8x64xf32>, %h: memref<16xf32>, %s: memref<1xf32>, %gm: memref<1xi32>, %b: memref<2x3xi32>) kernel {
    // expected-error @+1 {{'moegpu.update_check' op expects bounds of 1 x 3 i32 (each weight's largest |master|, |first moment| and second moment), got 'memref<2x3xi32>'}}
    moegpu.update_check %h, %gm, %s params(%p : memref<8x64xf32>) m(%p : memref<8x64xf32>) v(%p : memref<8x64xf32>) grads(%p : memref<8x64xf32>) valid(%s : memref<1xf32>) bounds(%b : memref<2x3xi32>) : memref<16xf32>, memref<1xi32>, memref<1xf32>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%p: memref<8x64xf32>, %h: memref<16xf32>, %b: memref<1x2xi32>) kernel {
    // expected-error @+1 {{'moegpu.adamw' op expects bounds of 1 x 3 i32 (each weight's largest |master|, |first moment| and second moment), got 'memref<1x2xi32>'}}
    moegpu.adamw %h params(%p : memref<8x64xf32>) m(%p : memref<8x64xf32>) v(%p : memref<8x64xf32>) grads(%p : memref<8x64xf32>) bounds(%b : memref<1x2xi32>) : memref<16xf32>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%g: memref<16x64xf32>, %p: memref<16x64xbf16>, %b: memref<1x3xi32>) kernel {
    // expected-error @+1 {{'moegpu.compute_copies' op expects valid with bounds (they are zeroed when the copies are made)}}
    moegpu.compute_copies masters(%g : memref<16x64xf32>) copies(%p : memref<16x64xbf16>) layouts [#moegpu.copy_layout<same>] bounds(%b : memref<1x3xi32>)
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%g: memref<8x64xf32>, %sq: memref<1xf32>, %gm: memref<2xi32>) kernel {
    // expected-error @+1 {{'moegpu.grad_stats' op expects grad_max of 1 i32 (one per weight), got 'memref<2xi32>'}}
    moegpu.grad_stats %sq, %gm grads(%g : memref<8x64xf32>) : memref<1xf32>, memref<2xi32>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%g: memref<8x64xbf16>, %sq: memref<1xf32>, %gm: memref<1xi32>) kernel {
    // expected-error @+1 {{'moegpu.grad_stats' op expects gradient 0 to be f32 of static shape, got 'memref<8x64xbf16>'}}
    moegpu.grad_stats %sq, %gm grads(%g : memref<8x64xbf16>) : memref<1xf32>, memref<1xi32>
    gpu.return
  }
}

// -----

// The device-initiated exchange's kernels.
gpu.module @k {
  gpu.func @f(%o: memref<9xi32>, %t: memref<16xi32>, %f: memref<4xi32>, %e: memref<1xi32>, %p: memref<4xi64>,
              %eo: memref<9xi32>, %g: memref<5xi32>, %s: memref<8xi32>, %b: memref<8xi32>, %st: memref<2xi32>) kernel {
    // expected-error @+1 {{'moegpu.ep_counts' op expects dimension 0 of peers to be 5 (a distance per rank, the rank, the limit and the capacity), got 'memref<4xi64>'}}
    moegpu.ep_counts %o, %t, %f, %e, %p, %eo, %s, %b, %st groups(%g : memref<5xi32>) {ranks = 2 : i64}
      : memref<9xi32>, memref<16xi32>, memref<4xi32>, memref<1xi32>, memref<4xi64>, memref<9xi32>, memref<8xi32>, memref<8xi32>, memref<2xi32>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%o: memref<10xi32>, %t: memref<18xi32>, %f: memref<4xi32>, %e: memref<1xi32>, %p: memref<5xi64>,
              %eo: memref<10xi32>, %g: memref<5xi32>, %s: memref<9xi32>, %b: memref<9xi32>, %st: memref<2xi32>) kernel {
    // expected-error @+1 {{'moegpu.ep_counts' op expects offsets of 1 chunk(s) of a multiple of 2 experts (one block a rank) plus one, got 'memref<10xi32>'}}
    moegpu.ep_counts %o, %t, %f, %e, %p, %eo, %s, %b, %st groups(%g : memref<5xi32>) {ranks = 2 : i64}
      : memref<10xi32>, memref<18xi32>, memref<4xi32>, memref<1xi32>, memref<5xi64>, memref<10xi32>, memref<9xi32>, memref<9xi32>, memref<2xi32>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%o: memref<9xi32>, %t: memref<8xi32>, %f: memref<4xi32>, %e: memref<1xi32>, %p: memref<5xi64>,
              %eo: memref<9xi32>, %g: memref<5xi32>, %s: memref<8xi32>, %b: memref<8xi32>, %st: memref<2xi32>) kernel {
    // expected-error @+1 {{'moegpu.ep_counts' op expects dimension 0 of table to be 16 (ranks x chunks x experts), got 'memref<8xi32>'}}
    moegpu.ep_counts %o, %t, %f, %e, %p, %eo, %s, %b, %st groups(%g : memref<5xi32>) {ranks = 2 : i64}
      : memref<9xi32>, memref<8xi32>, memref<4xi32>, memref<1xi32>, memref<5xi64>, memref<9xi32>, memref<8xi32>, memref<8xi32>, memref<2xi32>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%o: memref<9xi32>, %t: memref<16xi32>, %f: memref<1xi32>, %e: memref<1xi32>, %p: memref<5xi64>,
              %eo: memref<9xi32>, %g: memref<5xi32>, %s: memref<8xi32>, %b: memref<8xi32>, %st: memref<2xi32>) kernel {
    // expected-error @+1 {{'moegpu.ep_counts' op expects flags of at least 2 words (a flag per rank), got 'memref<1xi32>'}}
    moegpu.ep_counts %o, %t, %f, %e, %p, %eo, %s, %b, %st groups(%g : memref<5xi32>) {ranks = 2 : i64}
      : memref<9xi32>, memref<16xi32>, memref<1xi32>, memref<1xi32>, memref<5xi64>, memref<9xi32>, memref<8xi32>, memref<8xi32>, memref<2xi32>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%o: memref<9xi32>, %pos: memref<8xi32>, %r: memref<?x64xbf16>, %to: memref<?x64xf16>,
              %f: memref<4xi32>, %st: memref<2xi32>, %p: memref<5xi64>) kernel {
    // expected-error @+1 {{'moegpu.ep_send' op expects rows and to of one element type, got 'memref<?x64xbf16>' and 'memref<?x64xf16>'}}
    moegpu.ep_send <combine> %o, %pos, %r, %to, %f, %st, %p {ranks = 2 : i64, slot = 3 : i64}
      : memref<9xi32>, memref<8xi32>, memref<?x64xbf16>, memref<?x64xf16>, memref<4xi32>, memref<2xi32>, memref<5xi64>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%o: memref<9xi32>, %pos: memref<8xi32>, %r: memref<?x64xbf16>, %to: memref<?x64xbf16>,
              %f: memref<4xi32>, %st: memref<2xi32>, %p: memref<5xi64>) kernel {
    // expected-error @+1 {{'moegpu.ep_send' op expects slot 4 to be a word of flags ('memref<4xi32>') past the 2 flags of the sizes}}
    moegpu.ep_send <combine> %o, %pos, %r, %to, %f, %st, %p {ranks = 2 : i64, slot = 4 : i64}
      : memref<9xi32>, memref<8xi32>, memref<?x64xbf16>, memref<?x64xbf16>, memref<4xi32>, memref<2xi32>, memref<5xi64>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%o: memref<9xi32>, %pos: memref<7xi32>, %r: memref<?x64xbf16>, %to: memref<?x64xbf16>,
              %f: memref<4xi32>, %st: memref<2xi32>, %p: memref<5xi64>) kernel {
    // expected-error @+1 {{'moegpu.ep_send' op expects dimension 0 of positions to be 8 (a position per segment), got 'memref<7xi32>'}}
    moegpu.ep_send <dispatch> %o, %pos, %r, %to, %f, %st, %p {ranks = 2 : i64, slot = 2 : i64}
      : memref<9xi32>, memref<7xi32>, memref<?x64xbf16>, memref<?x64xbf16>, memref<4xi32>, memref<2xi32>, memref<5xi64>
    gpu.return
  }
}

// -----

// Token chunks: the send's chunk is one of them; its segments hold the
// chunks' (2 x 8 + 1 for a dispatch); the counts take a groups buffer a
// chunk, of the local experts + 1 each.
gpu.module @k {
  gpu.func @f(%o: memref<17xi32>, %pos: memref<16xi32>, %r: memref<?x64xbf16>, %to: memref<?x64xbf16>,
              %f: memref<8xi32>, %st: memref<2xi32>, %p: memref<5xi64>) kernel {
    // expected-error @+1 {{'moegpu.ep_send' op expects chunk 2 to be one of the 2 chunk(s)}}
    moegpu.ep_send <dispatch> %o, %pos, %r, %to, %f, %st, %p {ranks = 2 : i64, slot = 2 : i64, chunk = 2 : i64, chunks = 2 : i64}
      : memref<17xi32>, memref<16xi32>, memref<?x64xbf16>, memref<?x64xbf16>, memref<8xi32>, memref<2xi32>, memref<5xi64>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%o: memref<18xi32>, %pos: memref<16xi32>, %r: memref<?x64xbf16>, %to: memref<?x64xbf16>,
              %f: memref<8xi32>, %st: memref<2xi32>, %p: memref<5xi64>) kernel {
    // expected-error @+1 {{'moegpu.ep_send' op expects segments of 2 chunk(s) of a multiple of 2 experts (one block a rank), plus one, got 'memref<18xi32>'}}
    moegpu.ep_send <dispatch> %o, %pos, %r, %to, %f, %st, %p {ranks = 2 : i64, slot = 2 : i64, chunk = 1 : i64, chunks = 2 : i64}
      : memref<18xi32>, memref<16xi32>, memref<?x64xbf16>, memref<?x64xbf16>, memref<8xi32>, memref<2xi32>, memref<5xi64>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%o: memref<9xi32>, %t: memref<16xi32>, %f: memref<4xi32>, %e: memref<1xi32>, %p: memref<5xi64>,
              %eo: memref<9xi32>, %s: memref<8xi32>, %b: memref<8xi32>, %st: memref<2xi32>) kernel {
    // expected-error @+1 {{'moegpu.ep_counts' op expects the ep_group_offsets of at least one chunk}}
    "moegpu.ep_counts"(%o, %t, %f, %e, %p, %eo, %s, %b, %st) {ranks = 2 : i64}
      : (memref<9xi32>, memref<16xi32>, memref<4xi32>, memref<1xi32>, memref<5xi64>, memref<9xi32>, memref<8xi32>, memref<8xi32>, memref<2xi32>) -> ()
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%o: memref<17xi32>, %t: memref<32xi32>, %f: memref<8xi32>, %e: memref<1xi32>, %p: memref<5xi64>,
              %eo: memref<18xi32>, %g0: memref<5xi32>, %g1: memref<4xi32>, %s: memref<16xi32>, %b: memref<16xi32>,
              %st: memref<2xi32>) kernel {
    // expected-error @+1 {{'moegpu.ep_counts' op expects dimension 0 of ep_group_offsets to be 5 (local experts + 1), got 'memref<4xi32>'}}
    moegpu.ep_counts %o, %t, %f, %e, %p, %eo, %s, %b, %st groups(%g0, %g1 : memref<5xi32>, memref<4xi32>) {ranks = 2 : i64}
      : memref<17xi32>, memref<32xi32>, memref<8xi32>, memref<1xi32>, memref<5xi64>, memref<18xi32>, memref<16xi32>, memref<16xi32>, memref<2xi32>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%f: memref<4xi32>, %e: memref<4xi32>, %st: memref<3xi32>, %p: memref<5xi64>) kernel {
    // expected-error @+1 {{'moegpu.ep_wait' op expects dimension 0 of status to be 2 (a code and its rank or slot), got 'memref<3xi32>'}}
    moegpu.ep_wait %f, %e, %st, %p {ranks = 2 : i64, slot = 2 : i64, senders = 20 : i64, code = 2 : i64}
      : memref<4xi32>, memref<4xi32>, memref<3xi32>, memref<5xi64>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%f: memref<4xi32>, %e: memref<4xi32>, %st: memref<2xi32>, %p: memref<5xi64>) kernel {
    // expected-error @+1 {{'moegpu.ep_wait' op expects senders to be at least 1, got 0}}
    moegpu.ep_wait %f, %e, %st, %p {ranks = 2 : i64, slot = 2 : i64, senders = 0 : i64, code = 2 : i64}
      : memref<4xi32>, memref<4xi32>, memref<2xi32>, memref<5xi64>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%f: memref<4xi32>, %e: memref<4xi32>, %st: memref<2xi32>, %p: memref<5xi64>) kernel {
    // expected-error @+1 {{'moegpu.ep_wait' op expects slot 1 to be a word of flags ('memref<4xi32>') past the 2 flags of the sizes}}
    moegpu.ep_wait %f, %e, %st, %p {ranks = 2 : i64, slot = 1 : i64, senders = 20 : i64, code = 2 : i64}
      : memref<4xi32>, memref<4xi32>, memref<2xi32>, memref<5xi64>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%p: memref<8x64xf32>, %m: memref<8x64xf16>, %h: memref<16xf32>) kernel {
    // expected-error @+1 {{'moegpu.adamw' op expects m 0 of its master's shape, f32 or bf16, got 'memref<8x64xf16>'}}
    moegpu.adamw %h params(%p : memref<8x64xf32>) m(%m : memref<8x64xf16>) v(%m : memref<8x64xf16>) grads(%p : memref<8x64xf32>) : memref<16xf32>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%p: memref<8x64xf32>, %m: memref<8x64xbf16>, %h: memref<16xf32>) kernel {
    // expected-error @+1 {{'moegpu.adamw' op expects v 0 of m's type 'memref<8x64xbf16>', got 'memref<8x64xf32>'}}
    moegpu.adamw %h params(%p : memref<8x64xf32>) m(%m : memref<8x64xbf16>) v(%p : memref<8x64xf32>) grads(%p : memref<8x64xf32>) : memref<16xf32>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%p: memref<8x64xf32>, %g: memref<8x64xbf16>, %h: memref<16xf32>) kernel {
    // expected-error @+1 {{'moegpu.adamw' op expects grads 0 of its master's type 'memref<8x64xf32>', got 'memref<8x64xbf16>'}}
    moegpu.adamw %h params(%p : memref<8x64xf32>) m(%p : memref<8x64xf32>) v(%p : memref<8x64xf32>) grads(%g : memref<8x64xbf16>) : memref<16xf32>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%a: memref<?x256xbf16>, %q: memref<128x?xf8E4M3FN>, %s: memref<256x?xf32>, %o: memref<9xi32>) kernel {
    // expected-error @+1 {{'moegpu.quantize_columns' op expects dimension 0 of out to be 256 (in's columns), got 'memref<128x?xf8E4M3FN>'}}
    moegpu.quantize_columns %a, %q, %s, %o : memref<?x256xbf16>, memref<128x?xf8E4M3FN>, memref<256x?xf32>, memref<9xi32>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%a: memref<384x64xbf16>, %q: memref<64x384xf8E4M3FN>, %s: memref<64x4xf32>, %o: memref<9xi32>) kernel {
    // expected-error @+1 {{'moegpu.quantize_columns' op expects dimension 1 of scale to be 3 (in's blocks of 128 rows), got 'memref<64x4xf32>'}}
    moegpu.quantize_columns %a, %q, %s, %o : memref<384x64xbf16>, memref<64x384xf8E4M3FN>, memref<64x4xf32>, memref<9xi32>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%a: memref<?x64xf32>, %q: memref<64x?xf8E4M3FN>, %s: memref<64x?xf32>, %o: memref<9xi32>) kernel {
    // expected-error @+1 {{'moegpu.quantize_columns' op expects in of bf16, f16 or f8E4M3FN, got 'memref<?x64xf32>'}}
    moegpu.quantize_columns %a, %q, %s, %o : memref<?x64xf32>, memref<64x?xf8E4M3FN>, memref<64x?xf32>, memref<9xi32>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%a: memref<?x256xf8E4M3FN>, %q: memref<256x?xf8E4M3FN>, %s: memref<256x?xf32>, %o: memref<9xi32>) kernel {
    // expected-error @+1 {{'moegpu.quantize_columns' op expects in_scale with e4m3 rows (their scales per 128 columns)}}
    moegpu.quantize_columns %a, %q, %s, %o : memref<?x256xf8E4M3FN>, memref<256x?xf8E4M3FN>, memref<256x?xf32>, memref<9xi32>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%a: memref<?x256xbf16>, %q: memref<256x?xf8E4M3FN>, %s: memref<256x?xf32>, %o: memref<9xi32>, %rs: memref<?x2xf32>) kernel {
    // expected-error @+1 {{'moegpu.quantize_columns' op expects in_scale only with e4m3 rows}}
    moegpu.quantize_columns %a, %q, %s, %o in_scale(%rs : memref<?x2xf32>) : memref<?x256xbf16>, memref<256x?xf8E4M3FN>, memref<256x?xf32>, memref<9xi32>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%a: memref<?x256xf8E4M3FN>, %q: memref<256x?xf8E4M3FN>, %s: memref<256x?xf32>, %o: memref<9xi32>, %rs: memref<?x3xf32>) kernel {
    // expected-error @+1 {{'moegpu.quantize_columns' op expects dimension 1 of in_scale to be 2 (in's blocks of 128 columns), got 'memref<?x3xf32>'}}
    moegpu.quantize_columns %a, %q, %s, %o in_scale(%rs : memref<?x3xf32>) : memref<?x256xf8E4M3FN>, memref<256x?xf8E4M3FN>, memref<256x?xf32>, memref<9xi32>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%a: memref<?x64xbf16>, %q: memref<64x?xf8E4M3FN>, %s: memref<64x?xf32>, %o: memref<1xi32>) kernel {
    // expected-error @+1 {{'moegpu.quantize_columns' op expects offsets of at least one group ([G + 1], G >= 1), got 'memref<1xi32>'}}
    moegpu.quantize_columns %a, %q, %s, %o : memref<?x64xbf16>, memref<64x?xf8E4M3FN>, memref<64x?xf32>, memref<1xi32>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%a: memref<?x64xbf16>, %q: memref<?x?xf8E4M3FN>, %s: memref<64x?xf32>, %o: memref<9xi32>) kernel {
    // expected-error @+1 {{'moegpu.quantize_columns' op expects dimension 0 of out to be static, got 'memref<?x?xf8E4M3FN>'}}
    moegpu.quantize_columns %a, %q, %s, %o : memref<?x64xbf16>, memref<?x?xf8E4M3FN>, memref<64x?xf32>, memref<9xi32>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%w: memref<8x64x32xf32>, %q: memref<8x64x32xf8E4M3FN>, %s: memref<8x1x2xf32>) kernel {
    // expected-error @+1 {{'moegpu.quantize_blocks' op expects dimension 2 of scale to be 1 (in's blocks of columns), got 'memref<8x1x2xf32>'}}
    moegpu.quantize_blocks %w, %q, %s : memref<8x64x32xf32>, memref<8x64x32xf8E4M3FN>, memref<8x1x2xf32>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%w: memref<8x64x32xf32>, %q: memref<8x64x32xf8E4M3FN>, %s: memref<8x1x1xf32>, %t: memref<8x64x32xf8E4M3FN>) kernel {
    // expected-error @+1 {{'moegpu.quantize_blocks' op expects dimension 1 of transposed to be 32 (in's columns), got 'memref<8x64x32xf8E4M3FN>'}}
    moegpu.quantize_blocks %w, %q, %s transposed(%t : memref<8x64x32xf8E4M3FN>) : memref<8x64x32xf32>, memref<8x64x32xf8E4M3FN>, memref<8x1x1xf32>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%w: memref<8x64x32xf32>, %q: memref<8x64x32xf8E4M3FN>, %s: memref<8x1x1xf32>, %st: memref<8x1x1xf32>) kernel {
    // expected-error @+1 {{'moegpu.quantize_blocks' op expects transposed_scale only with transposed}}
    moegpu.quantize_blocks %w, %q, %s transposed_scale(%st : memref<8x1x1xf32>) : memref<8x64x32xf32>, memref<8x64x32xf8E4M3FN>, memref<8x1x1xf32>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%w: memref<8x36x32xf32>, %q: memref<8x72x32xf8E4M3FN>, %s: memref<8x2x1xf32>) kernel {
    // expected-error @+1 {{'moegpu.quantize_blocks' op expects a gate or up matrix of a multiple of 8 rows (the packed weight's blocks), got 36}}
    moegpu.quantize_blocks %w, %q, %s {layout = #moegpu.copy_layout<gate_rows>} : memref<8x36x32xf32>, memref<8x72x32xf8E4M3FN>, memref<8x2x1xf32>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%w: memref<8x64x32xf32>, %q: memref<8x64x32xf8E4M3FN>, %s: memref<8x2x1xf32>) kernel {
    // expected-error @+1 {{'moegpu.quantize_blocks' op expects dimension 1 of out to be 128 (twice in's rows: gate and up), got 'memref<8x64x32xf8E4M3FN>'}}
    moegpu.quantize_blocks %w, %q, %s {layout = #moegpu.copy_layout<up_rows>} : memref<8x64x32xf32>, memref<8x64x32xf8E4M3FN>, memref<8x2x1xf32>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%w: memref<8x64x32xf32>, %q: memref<8x128x32xf8E4M3FN>, %s: memref<8x2x1xf32>, %t: memref<8x32x128xf8E4M3FN>) kernel {
    // expected-error @+1 {{'moegpu.quantize_blocks' op expects dimension 2 of transposed to be 256 (gate and up, each in's rows padded to a multiple of 128), got 'memref<8x32x128xf8E4M3FN>'}}
    moegpu.quantize_blocks %w, %q, %s transposed(%t : memref<8x32x128xf8E4M3FN>) {layout = #moegpu.copy_layout<gate_rows>} : memref<8x64x32xf32>, memref<8x128x32xf8E4M3FN>, memref<8x2x1xf32>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%w: memref<8x64x32xf32>, %q: memref<8x128x32xf8E4M3FN>, %s: memref<8x2x1xf32>, %t: memref<8x32x256xf8E4M3FN>, %st: memref<8x1x1xf32>) kernel {
    // expected-error @+1 {{'moegpu.quantize_blocks' op expects dimension 2 of transposed_scale to be 2 (twice in's blocks of rows: gate and up), got 'memref<8x1x1xf32>'}}
    moegpu.quantize_blocks %w, %q, %s transposed(%t : memref<8x32x256xf8E4M3FN>) transposed_scale(%st : memref<8x1x1xf32>) {layout = #moegpu.copy_layout<gate_rows>} : memref<8x64x32xf32>, memref<8x128x32xf8E4M3FN>, memref<8x2x1xf32>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%w: memref<8x64x30xf32>, %q: memref<8x64x30xf8E4M3FN>, %s: memref<8x1x1xf32>) kernel {
    // expected-error @+1 {{'moegpu.quantize_blocks' op expects matrices whose rows and columns are multiples of 4 (a lane's four codes), got 64 x 30}}
    moegpu.quantize_blocks %w, %q, %s : memref<8x64x30xf32>, memref<8x64x30xf8E4M3FN>, memref<8x1x1xf32>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%w: memref<8x64x32xbf16>, %q: memref<8x64x32xf8E4M3FN>, %s: memref<8x1x1xf32>) kernel {
    // expected-error @+1 {{'moegpu.quantize_blocks' op expects in of f32, got 'memref<8x64x32xbf16>'}}
    moegpu.quantize_blocks %w, %q, %s : memref<8x64x32xbf16>, memref<8x64x32xf8E4M3FN>, memref<8x1x1xf32>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%w: memref<?x64x32xf32>, %q: memref<?x64x32xf8E4M3FN>, %s: memref<?x1x1xf32>) kernel {
    // expected-error @+1 {{'moegpu.quantize_blocks' op expects in of a static shape, got 'memref<?x64x32xf32>'}}
    moegpu.quantize_blocks %w, %q, %s : memref<?x64x32xf32>, memref<?x64x32xf8E4M3FN>, memref<?x1x1xf32>
    gpu.return
  }
}

// -----

// AdamW's copies of some weights: `copied` names them, in order.
gpu.module @k {
  gpu.func @f(%p: memref<8x64xf32>, %c: memref<8x64xbf16>, %h: memref<16xf32>) kernel {
    // expected-error @+1 {{'moegpu.adamw' op expects copied to hold ascending indices of params (< 2), got 0}}
    moegpu.adamw %h params(%p, %p : memref<8x64xf32>, memref<8x64xf32>) m(%p, %p : memref<8x64xf32>, memref<8x64xf32>) v(%p, %p : memref<8x64xf32>, memref<8x64xf32>) grads(%p, %p : memref<8x64xf32>, memref<8x64xf32>) copies(%c : memref<8x64xbf16>) layouts [#moegpu.copy_layout<same>] {copied = array<i64: 1, 0>} : memref<16xf32>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%p: memref<8x64xf32>, %c: memref<8x64xbf16>, %h: memref<16xf32>) kernel {
    // expected-error @+1 {{'moegpu.adamw' op expects one copy and one layout per master (2), got 1 and 1}}
    moegpu.adamw %h params(%p, %p : memref<8x64xf32>, memref<8x64xf32>) m(%p, %p : memref<8x64xf32>, memref<8x64xf32>) v(%p, %p : memref<8x64xf32>, memref<8x64xf32>) grads(%p, %p : memref<8x64xf32>, memref<8x64xf32>) copies(%c : memref<8x64xbf16>) layouts [#moegpu.copy_layout<same>] {copied = array<i64: 0, 1>} : memref<16xf32>
    gpu.return
  }
}

// -----

// quantize_blocks' flag is the step's copies_valid.
gpu.module @k {
  gpu.func @f(%w: memref<2x128x128xf32>, %q: memref<2x128x128xf8E4M3FN>, %s: memref<2x1x1xf32>, %v: memref<1xi32>) kernel {
    // expected-error @+1 {{'moegpu.quantize_blocks' op expects unless to be one f32 (memref<1xf32>), got 'memref<1xi32>'}}
    moegpu.quantize_blocks %w, %q, %s unless(%v : memref<1xi32>) : memref<2x128x128xf32>, memref<2x128x128xf8E4M3FN>, memref<2x1x1xf32>
    gpu.return
  }
}

// -----

// act_grad's combine: the routing weight's gradient from dy and the
// weighted outputs.
gpu.module @k {
  gpu.func @f(%gu: memref<?x32xf32>, %gs: memref<?x16xf32>, %g: memref<5xi32>, %dgu: memref<?x32xbf16>, %dg: memref<?x16xbf16>, %du: memref<?x16xbf16>, %dy: memref<?x64xbf16>, %down: memref<?x64xbf16>) kernel {
    // expected-error @+1 {{'moegpu.act_grad' op expects combine (dy, down) only with weight and row_grad, and not with the down bias}}
    moegpu.act_grad %gu, %gs, %g, %dgu, %dg, %du combine(%dy, %down : memref<?x64xbf16>, memref<?x64xbf16>) : memref<?x32xf32>, memref<?x16xf32>, memref<5xi32>, memref<?x32xbf16>, memref<?x16xbf16>, memref<?x16xbf16>
    gpu.return
  }
}

// -----

gpu.module @k {
  gpu.func @f(%gu: memref<?x32xf32>, %gs: memref<?x16xf32>, %g: memref<5xi32>, %dgu: memref<?x32xbf16>, %dg: memref<?x16xbf16>, %du: memref<?x16xbf16>, %w: memref<?xf32>, %rg: memref<?xf32>, %dy: memref<?x64xbf16>, %down: memref<?x32xbf16>) kernel {
    // expected-error @+1 {{'moegpu.act_grad' op expects dimension 1 of dy to be 32 (down's hidden size), got 'memref<?x64xbf16>'}}
    moegpu.act_grad %gu, %gs, %g, %dgu, %dg, %du weight(%w, %rg : memref<?xf32>, memref<?xf32>) combine(%dy, %down : memref<?x64xbf16>, memref<?x32xbf16>) : memref<?x32xf32>, memref<?x16xf32>, memref<5xi32>, memref<?x32xbf16>, memref<?x16xbf16>, memref<?x16xbf16>
    gpu.return
  }
}
