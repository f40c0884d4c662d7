// RUN: moe-opt %s --convert-moegpu-kernels-to-gpu -split-input-file | FileCheck %s

// The training step's SIMT kernels, one split per op.

// Only when valid[0] == 0 (the host wrote a master): a grid-stride loop
// of 256-thread CTAs per master, one after another. The gate master's
// row f goes to packed row (f / 8) * 16 + f % 8, the up master's 8 rows
// further; a `same` copy takes each element at its row-major position
// (the copy's group dimension of 1 the master lacks). Each rounded to
// bf16.
// CHECK-LABEL: gpu.func @compute_copies
// CHECK: %[[VALID:.*]] = memref.load %arg5[%{{.*}}] : memref<1xf32>
// CHECK: %[[STALE:.*]] = arith.cmpf oeq, %[[VALID]], %{{.*}} : f32
// CHECK: scf.if %[[STALE]] {
// CHECK: %[[STRIDE:.*]] = arith.muli %{{.*}}, %c256{{[_0-9]*}}
// CHECK: scf.for %{{.*}} = %{{.*}} to %c4096{{[_0-9]*}} step %[[STRIDE]]
// CHECK: %[[G:.*]] = memref.load %arg0[%[[E:.*]], %[[F:.*]], %[[H:.*]]] : memref<4x16x64xf32>
// CHECK: %[[GB:.*]] = arith.truncf %[[G]] : f32 to bf16
// CHECK: %[[LO:.*]] = arith.remui %[[F]], %c8{{[_0-9]*}}
// CHECK: %[[HI:.*]] = arith.divui %[[F]], %c8{{[_0-9]*}}
// CHECK: %[[BASE:.*]] = arith.muli %[[HI]], %c16{{[_0-9]*}}
// CHECK: %[[ROW:.*]] = arith.addi %[[BASE]], %[[LO]]
// CHECK: memref.store %[[GB]], %arg2[%[[E]], %[[ROW]], %[[H]]] : memref<4x32x64xbf16>
// CHECK: scf.for %{{.*}} = %{{.*}} to %c4096{{[_0-9]*}} step
// CHECK: %[[U:.*]] = memref.load %arg1[%[[E2:.*]], %[[F2:.*]], %[[H2:.*]]] : memref<4x16x64xf32>
// CHECK: %[[UB:.*]] = arith.truncf %[[U]] : f32 to bf16
// CHECK: %[[GROW:.*]] = arith.addi
// CHECK: %[[UROW:.*]] = arith.addi %[[GROW]], %c8{{[_0-9]*}}
// CHECK: memref.store %[[UB]], %arg2[%[[E2]], %[[UROW]], %[[H2]]] : memref<4x32x64xbf16>
// CHECK: scf.for %{{.*}} = %{{.*}} to %c512{{[_0-9]*}} step
// CHECK: %[[A:.*]] = memref.load %arg3[%{{.*}}, %{{.*}}] : memref<8x64xf32>
// CHECK: %[[AB:.*]] = arith.truncf %[[A]] : f32 to bf16
// CHECK: memref.store %[[AB]], %arg4[%{{.*}}, %{{.*}}, %{{.*}}] : memref<1x8x64xbf16>
gpu.module @k {
  gpu.func @compute_copies(%g: memref<4x16x64xf32>, %u: memref<4x16x64xf32>, %p: memref<4x32x64xbf16>, %a: memref<8x64xf32>, %b: memref<1x8x64xbf16>, %valid: memref<1xf32>) kernel {
    moegpu.compute_copies masters(%g, %u, %a : memref<4x16x64xf32>, memref<4x16x64xf32>, memref<8x64xf32>) copies(%p, %p, %b : memref<4x32x64xbf16>, memref<4x32x64xbf16>, memref<1x8x64xbf16>) layouts [#moegpu.copy_layout<gate_rows>, #moegpu.copy_layout<up_rows>, #moegpu.copy_layout<same>] valid(%valid : memref<1xf32>)
    gpu.return
  }
}

// -----

// Without a flag: always, no condition before the loop.
// CHECK-LABEL: gpu.func @compute_copies_always
// CHECK-NOT: scf.if
// CHECK: scf.for %{{.*}} = %{{.*}} to %c512{{[_0-9]*}} step
gpu.module @k {
  gpu.func @compute_copies_always(%a: memref<8x64xf32>, %b: memref<8x64xbf16>) kernel {
    moegpu.compute_copies masters(%a : memref<8x64xf32>) copies(%b : memref<8x64xbf16>) layouts [#moegpu.copy_layout<same>]
    gpu.return
  }
}

// -----

// A CTA per token: dy = 2 (y - target) / (T H) with T = hyper[7] (the
// tokens), the squares summed over the warp and added by lane 0.
// CHECK-LABEL: gpu.func @loss
// CHECK: %[[T:.*]] = memref.load %{{.*}}[%c7] : memref<16xf32>
// CHECK: %[[N:.*]] = arith.mulf %[[T]], %{{.*}} : f32
// CHECK: %[[D:.*]] = arith.subf %{{.*}}, %{{.*}} : f32
// CHECK: %[[D2:.*]] = arith.mulf %{{.*}}, %[[D]] : f32
// CHECK: %[[G:.*]] = arith.divf %[[D2]], %[[N]] : f32
// CHECK: memref.store %[[G]], %{{.*}} : memref<?x64xf32>
// CHECK: %[[SQ:.*]] = arith.mulf %[[D]], %[[D]] : f32
// CHECK: arith.divf %[[SQ]], %[[N]] : f32
// CHECK-COUNT-5: gpu.shuffle xor
// CHECK: memref.atomic_rmw addf %{{.*}}, %{{.*}}[%c0{{[_0-9]*}}] : (f32, memref<1xf32>) -> f32
gpu.module @k {
  gpu.func @loss(%y: memref<?x64xbf16>, %t: memref<?x64xf32>, %h: memref<16xf32>, %dy: memref<?x64xf32>, %l: memref<1xf32>) kernel {
    moegpu.mse_loss %y, %t, %h, %dy, %l : memref<?x64xbf16>, memref<?x64xf32>, memref<16xf32>, memref<?x64xf32>, memref<1xf32>
    gpu.return
  }
}

// -----

// A thread per column, the rows summed in order.
// CHECK-LABEL: gpu.func @column_sum
// CHECK: %[[C:.*]] = arith.addi
// CHECK: arith.cmpi ult, %[[C]], %c64
// CHECK: %[[S:.*]] = scf.for %[[T:.*]] = %c0{{[_0-9]*}} to %{{.*}} step %c1 iter_args
// CHECK: memref.load %{{.*}}[%[[T]], %[[C]]] : memref<?x64xf32>
// CHECK: memref.store %[[S]], %{{.*}}[%[[C]]] : memref<64xf32>
gpu.module @k {
  gpu.func @column_sum(%a: memref<?x64xf32>, %o: memref<64xf32>) kernel {
    moegpu.column_sum %a, %o : memref<?x64xf32>, memref<64xf32>
    gpu.return
  }
}

// -----

// A CTA per group, its rows [groups[g], groups[g + 1]) summed onto what
// out holds (accumulate).
// CHECK-LABEL: gpu.func @grouped_column_sum
// CHECK: %[[G:.*]] = gpu.block_id x
// CHECK: %[[LO:.*]] = memref.load %{{.*}}[%[[G]]] : memref<5xi32>
// CHECK: %[[G1:.*]] = arith.addi %[[G]], %c1
// CHECK: %[[HI:.*]] = memref.load %{{.*}}[%[[G1]]] : memref<5xi32>
// CHECK: %[[OLD:.*]] = memref.load %{{.*}}[%[[G]], %{{.*}}] : memref<4x32xf32>
// CHECK: %[[S:.*]] = scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%{{.*}} = %[[OLD]])
// CHECK: memref.store %[[S]], %{{.*}}[%[[G]], %{{.*}}] : memref<4x32xf32>
gpu.module @k {
  gpu.func @grouped_column_sum(%a: memref<?x32xbf16>, %g: memref<5xi32>, %o: memref<4x32xf32>) kernel {
    moegpu.grouped_column_sum %a, %g, %o {accumulate} : memref<?x32xbf16>, memref<5xi32>, memref<4x32xf32>
    gpu.return
  }
}

// -----

// A thread per assignment i = t * k + j: row_token[row_map[t, j]] =
// i + 1 where the assignment has a row.
// CHECK-LABEL: gpu.func @row_tokens
// CHECK: %[[I:.*]] = arith.addi
// CHECK: %[[R:.*]] = memref.load %{{.*}} : memref<?x2xi32>
// CHECK: %[[HAS:.*]] = arith.cmpi sge, %[[R]], %c0_i32
// CHECK: scf.if %[[HAS]]
// CHECK: %[[I1:.*]] = arith.addi %[[I]], %c1
// CHECK: %[[CODE:.*]] = arith.index_cast %[[I1]] : index to i32
// CHECK: memref.store %[[CODE]], %{{.*}} : memref<?xi32>
gpu.module @k {
  gpu.func @row_tokens(%m: memref<?x2xi32>, %r: memref<?xi32>) kernel {
    moegpu.row_tokens %m, %r : memref<?x2xi32>, memref<?xi32>
    gpu.return
  }
}

// -----

// A CTA per row inside [offsets[0], offsets[4]) whose row_token is an
// assignment: the row gets dy of token (row_token - 1) / k in bf16.
// CHECK-LABEL: gpu.func @gather_row_dy
// CHECK: %[[R:.*]] = gpu.block_id x
// CHECK-DAG: memref.load %{{.*}}[%c0] : memref<5xi32>
// CHECK-DAG: memref.load %{{.*}}[%c4] : memref<5xi32>
// CHECK: %[[CODE:.*]] = memref.load %{{.*}}[%[[R]]] : memref<?xi32>
// CHECK: arith.cmpi sgt, %[[CODE]], %c0_i32
// CHECK: %[[SLOT:.*]] = arith.subi %[[CODE]], %c1_i32
// CHECK: %[[SI:.*]] = arith.index_cast %[[SLOT]]
// CHECK: %[[T:.*]] = arith.divui %[[SI]], %c2
// CHECK: %[[V:.*]] = memref.load %{{.*}}[%[[T]], %{{.*}}] : memref<?x64xf32>
// CHECK: %[[H:.*]] = arith.truncf %[[V]] : f32 to bf16
// CHECK: memref.store %[[H]], %{{.*}}[%[[R]], %{{.*}}] : memref<?x64xbf16>
gpu.module @k {
  gpu.func @gather_row_dy(%dy: memref<?x64xf32>, %r: memref<?xi32>, %o: memref<5xi32>, %rd: memref<?x64xbf16>) kernel {
    moegpu.gather_row_dy %dy, %r, %o, %rd {top_k = 2} : memref<?x64xf32>, memref<?xi32>, memref<5xi32>, memref<?x64xbf16>
    gpu.return
  }
}

// -----

// A thread per row: dtw[slot / k, slot % k] = row_grad[r].
// CHECK-LABEL: gpu.func @scatter_row_weight_grad
// CHECK: %[[CODE:.*]] = memref.load %{{.*}} : memref<?xi32>
// CHECK: %[[SLOT:.*]] = arith.subi %[[CODE]], %c1_i32
// CHECK: %[[SI:.*]] = arith.index_cast %[[SLOT]]
// CHECK: %[[T:.*]] = arith.divui %[[SI]], %c2
// CHECK: %[[J:.*]] = arith.remui %[[SI]], %c2
// CHECK: %[[G:.*]] = memref.load %{{.*}} : memref<?xf32>
// CHECK: memref.store %[[G]], %{{.*}}[%[[T]], %[[J]]] : memref<?x2xf32>
gpu.module @k {
  gpu.func @scatter_row_weight_grad(%g: memref<?xf32>, %r: memref<?xi32>, %o: memref<5xi32>, %d: memref<?x2xf32>) kernel {
    moegpu.scatter_row_weight_grad %g, %r, %o, %d : memref<?xf32>, memref<?xi32>, memref<5xi32>, memref<?x2xf32>
    gpu.return
  }
}

// -----

// A CTA per assigned row: drows[r] . x[t] summed over the warp, one
// atomic per warp into row_grad[r].
// CHECK-LABEL: gpu.func @scaled_weight_grad
// CHECK: %[[R:.*]] = gpu.block_id x
// CHECK: %[[T:.*]] = arith.divui %{{.*}}, %c2
// CHECK-DAG: memref.load %{{.*}}[%[[T]], %{{.*}}] : memref<?x64xbf16>
// CHECK-DAG: memref.load %{{.*}}[%[[R]], %{{.*}}] : memref<?x64xbf16>
// CHECK-COUNT-5: gpu.shuffle xor
// CHECK: memref.atomic_rmw addf %{{.*}}, %{{.*}}[%[[R]]] : (f32, memref<?xf32>) -> f32
gpu.module @k {
  gpu.func @scaled_weight_grad(%d: memref<?x64xbf16>, %r: memref<?xi32>, %o: memref<5xi32>, %x: memref<?x64xbf16>, %g: memref<?xf32>) kernel {
    moegpu.scaled_weight_grad %d, %r, %o, %x, %g {top_k = 2} : memref<?x64xbf16>, memref<?xi32>, memref<5xi32>, memref<?x64xbf16>, memref<?xf32>
    gpu.return
  }
}

// -----

// A CTA per row of the groups: dst = weight[r] * src in bf16.
// CHECK-LABEL: gpu.func @scale_rows
// CHECK: %[[R:.*]] = gpu.block_id x
// CHECK: %[[W:.*]] = memref.load %{{.*}}[%[[R]]] : memref<?xf32>
// CHECK: %[[V:.*]] = memref.load %{{.*}}[%[[R]], %{{.*}}] : memref<?x64xf32>
// CHECK: %[[P:.*]] = arith.mulf %[[W]], %[[V]] : f32
// CHECK: %[[H:.*]] = arith.truncf %[[P]] : f32 to bf16
// CHECK: memref.store %[[H]], %{{.*}}[%[[R]], %{{.*}}] : memref<?x64xbf16>
gpu.module @k {
  gpu.func @scale_rows(%s: memref<?x64xf32>, %g: memref<5xi32>, %d: memref<?x64xbf16>, %w: memref<?xf32>) kernel {
    moegpu.scale_rows %s, %g, %d weight(%w : memref<?xf32>) : memref<?x64xf32>, memref<5xi32>, memref<?x64xbf16>
    gpu.return
  }
}

// -----

// GPT-OSS's clamped SwiGLU backward: gate row (f / 8) * 16 + f % 8 of
// gu, up row 8 further; gate clamped above, up on both sides (plus one);
// no gradient where a clamp cuts; dg and du into dgu at the packed rows
// and into dg and du; the weight's gradient with the down bias's part
// dy . b2[e] (e by a binary search of the groups), one atomic per warp.
// CHECK-LABEL: gpu.func @act_grad
// CHECK: %[[LO:.*]] = arith.remui %[[F:.*]], %c8
// CHECK: %[[HI:.*]] = arith.divui %[[F]], %c8
// CHECK: %[[B:.*]] = arith.muli %[[HI]], %c16
// CHECK: %[[GR:.*]] = arith.addi %[[B]], %[[LO]]
// CHECK: %[[UR:.*]] = arith.addi %[[GR]], %c8
// CHECK: %[[GATE:.*]] = memref.load %{{.*}}[%{{.*}}, %[[GR]]] : memref<?x32xf32>
// CHECK: %[[UP:.*]] = memref.load %{{.*}}[%{{.*}}, %[[UR]]] : memref<?x32xf32>
// CHECK: arith.minimumf %[[GATE]]
// CHECK: arith.minimumf %[[UP]]
// CHECK: arith.maximumf
// CHECK: arith.cmpf ole, %[[GATE]]
// CHECK: arith.select
// CHECK: arith.select
// CHECK: memref.store %{{.*}}, %{{.*}}[%{{.*}}, %[[GR]]] : memref<?x32xbf16>
// CHECK: memref.store %{{.*}}, %{{.*}}[%{{.*}}, %[[UR]]] : memref<?x32xbf16>
// CHECK: memref.store %{{.*}} : memref<?x16xbf16>
// CHECK: memref.store %{{.*}} : memref<?x16xbf16>
// CHECK: arith.minui
// CHECK: arith.select %{{.*}}, %{{.*}}, %{{.*}} : index
// CHECK: arith.minui
// CHECK: %[[E:.*]] = arith.select %{{.*}}, %{{.*}}, %{{.*}} : index
// CHECK: memref.load %{{.*}}[%[[E]], %{{.*}}] : memref<4x64xbf16>
// CHECK: memref.atomic_rmw addf %{{.*}} : (f32, memref<?xf32>) -> f32
gpu.module @k {
  gpu.func @act_grad(%gu: memref<?x32xf32>, %gs: memref<?x16xf32>, %g: memref<5xi32>, %dgu: memref<?x32xbf16>, %dg: memref<?x16xbf16>, %du: memref<?x16xbf16>, %w: memref<?xf32>, %rg: memref<?xf32>, %dy: memref<?x64xbf16>, %b2: memref<4x64xbf16>) kernel {
    moegpu.act_grad %gu, %gs, %g, %dgu, %dg, %du weight(%w, %rg : memref<?xf32>, memref<?xf32>) down_bias(%dy, %b2 : memref<?x64xbf16>, memref<4x64xbf16>) {alpha = 1.702 : f64, limit = 7.0 : f64} : memref<?x32xf32>, memref<?x16xf32>, memref<5xi32>, memref<?x32xbf16>, memref<?x16xbf16>, memref<?x16xbf16>
    gpu.return
  }
}

// -----

// A thread per token: softmax of the logits again into dl, the selected
// scores' sum Z and sum dw s; each selected score's gradient
// scale * (dw - sum dw s / Z) / Z, then the logits' s (ds - sum ds s),
// also stored in bf16.
// CHECK-LABEL: gpu.func @route_grad
// CHECK: scf.for
// CHECK: llvm.call_intrinsic "llvm.nvvm.ex2.approx.ftz.f"
// CHECK: %[[ZS:.*]]:2 = scf.for
// CHECK: %[[DOT:.*]] = scf.for
// CHECK: arith.divf %[[ZS]]#1, %[[ZS]]#0 : f32
// CHECK: scf.for %{{.*}} = %c0 to %c8
// CHECK: %[[DS:.*]] = scf.for
// CHECK: arith.cmpi eq
// CHECK: %[[S:.*]] = memref.load %{{.*}} : memref<?x8xf32>
// CHECK: %[[D:.*]] = arith.subf %[[DS]], %[[DOT]] : f32
// CHECK: %[[G:.*]] = arith.mulf %[[S]], %[[D]] : f32
// CHECK: memref.store %[[G]], %{{.*}} : memref<?x8xf32>
// CHECK: %[[H:.*]] = arith.truncf %[[G]] : f32 to bf16
// CHECK: memref.store %[[H]], %{{.*}} : memref<?x8xbf16>
gpu.module @k {
  gpu.func @route_grad(%l: memref<?x8xf32>, %i: memref<?x2xi32>, %t: memref<?x2xf32>, %dl: memref<?x8xf32>, %dh: memref<?x8xbf16>) kernel {
    moegpu.route_grad %l, %i, %t, %dl half(%dh : memref<?x8xbf16>) {scoring = #moegpu.scoring<softmax>, normalize, routed_scale = 2.0} : memref<?x8xf32>, memref<?x2xi32>, memref<?x2xf32>, memref<?x8xf32>
    gpu.return
  }
}

// -----

// A CTA per token: its rows' gradients summed (rows of -1 skipped), plus
// the shared experts', plus dz * gate, plus sum_e dl[t, e] router[e, h].
// CHECK-LABEL: gpu.func @input_grad
// CHECK: %[[ROWS:.*]] = scf.for
// CHECK: arith.cmpi sge
// CHECK: %[[SH:.*]] = memref.load %{{.*}} : memref<?x64xf32>
// CHECK: %[[A1:.*]] = arith.addf %[[ROWS]], %[[SH]] : f32
// CHECK-DAG: %[[G:.*]] = memref.load %{{.*}} : memref<1x64xbf16>
// CHECK-DAG: %[[DZ:.*]] = memref.load %{{.*}} : memref<?x1xf32>
// CHECK: %[[A2:.*]] = arith.addf %[[A1]], %{{.*}} : f32
// CHECK: %[[DX:.*]] = scf.for %[[E:.*]] = %c0{{[_0-9]*}} to %c8 step %{{.*}} iter_args(%{{.*}} = %[[A2]])
// CHECK-DAG: memref.load %{{.*}}[%[[E]], %{{.*}}] : memref<8x64xf32>
// CHECK-DAG: memref.load %{{.*}}[%{{.*}}, %[[E]]] : memref<?x8xf32>
// CHECK: memref.store %[[DX]], %{{.*}} : memref<?x64xf32>
gpu.module @k {
  gpu.func @input_grad(%d: memref<?x64xbf16>, %m: memref<?x2xi32>, %dx: memref<?x64xf32>, %dl: memref<?x8xf32>, %r: memref<8x64xf32>, %s: memref<?x64xf32>, %dz: memref<?x1xf32>, %g: memref<1x64xbf16>) kernel {
    moegpu.input_grad %d, %m, %dx router(%dl, %r : memref<?x8xf32>, memref<8x64xf32>) shared(%s : memref<?x64xf32>) gate(%dz, %g : memref<?x1xf32>, memref<1x64xbf16>) : memref<?x64xbf16>, memref<?x2xi32>, memref<?x64xf32>
    gpu.return
  }
}

// -----

// A warp per token: (dy . out) * s * (1 - s), stored by lane 0.
// CHECK-LABEL: gpu.func @shared_scale_grad
// CHECK: scf.for
// CHECK-COUNT-5: gpu.shuffle xor
// CHECK: %[[S:.*]] = memref.load %{{.*}} : memref<?xf32>
// CHECK: %[[ONE_S:.*]] = arith.subf %{{.*}}, %[[S]] : f32
// CHECK: %[[SIG:.*]] = arith.mulf %[[S]], %[[ONE_S]] : f32
// CHECK: %[[G:.*]] = arith.mulf %{{.*}}, %[[SIG]] : f32
// CHECK: scf.if
// CHECK: memref.store %[[G]], %{{.*}} : memref<?x1xf32>
gpu.module @k {
  gpu.func @shared_scale_grad(%dy: memref<?x64xf32>, %o: memref<?x64xbf16>, %s: memref<?xf32>, %dz: memref<?x1xf32>) kernel {
    moegpu.shared_scale_grad %dy, %o, %s, %dz : memref<?x64xf32>, memref<?x64xbf16>, memref<?xf32>, memref<?x1xf32>
    gpu.return
  }
}

// -----

// A CTA per expert row, a thread per column: sum_t dl[t, e] x[t, h].
// CHECK-LABEL: gpu.func @router_grad
// CHECK: %[[E:.*]] = gpu.block_id x
// CHECK: %[[ACC:.*]] = scf.for %[[T:.*]] = %c0{{[_0-9]*}} to %{{.*}} step
// CHECK-DAG: memref.load %{{.*}}[%[[T]], %{{.*}}] : memref<?x64xbf16>
// CHECK-DAG: memref.load %{{.*}}[%[[T]], %[[E]]] : memref<?x8xf32>
// CHECK: memref.store %[[ACC]], %{{.*}}[%[[E]], %{{.*}}] : memref<8x64xf32>
gpu.module @k {
  gpu.func @router_grad(%dl: memref<?x8xf32>, %x: memref<?x64xbf16>, %g: memref<8x64xf32>) kernel {
    moegpu.router_grad %dl, %x, %g : memref<?x8xf32>, memref<?x64xbf16>, memref<8x64xf32>
    gpu.return
  }
}

// -----

// Thread 0 writes [0, T].
// CHECK-LABEL: gpu.func @token_offsets
// CHECK: scf.if
// CHECK: memref.store %c0_i32, %{{.*}}[%c0{{[_0-9]*}}] : memref<2xi32>
// CHECK: %[[T:.*]] = memref.dim %{{.*}}, %c0{{[_0-9]*}} : memref<?x64xbf16>
// CHECK: %[[TI:.*]] = arith.index_cast %[[T]] : index to i32
// CHECK: memref.store %[[TI]], %{{.*}}[%c1] : memref<2xi32>
gpu.module @k {
  gpu.func @token_offsets(%x: memref<?x64xbf16>, %o: memref<2xi32>) kernel {
    moegpu.token_offsets %x, %o : memref<?x64xbf16>, memref<2xi32>
    gpu.return
  }
}

// -----

// A thread per expert: its counts of both chunks (e and 8 + e) as f32.
// CHECK-LABEL: gpu.func @expert_load
// CHECK: %[[E:.*]] = arith.addi
// CHECK: arith.cmpi ult, %[[E]], %c8
// CHECK: memref.load %{{.*}} : memref<16xi32>
// CHECK: %[[E8:.*]] = arith.addi %[[E]], %c8
// CHECK: memref.load %{{.*}}[%[[E8]]] : memref<16xi32>
// CHECK: %[[F:.*]] = arith.sitofp %{{.*}} : i32 to f32
// CHECK: memref.store %[[F]], %{{.*}}[%[[E]]] : memref<8xf32>
gpu.module @k {
  gpu.func @expert_load(%c: memref<16xi32>, %l: memref<8xf32>) kernel {
    moegpu.expert_load %c, %l {chunks = 2} : memref<16xi32>, memref<8xf32>
    gpu.return
  }
}

// -----

// A thread per expert: bias += gamma * sign(T * k / E - load), T and
// gamma from hyper.
// CHECK-LABEL: gpu.func @bias_update
// CHECK: %[[T:.*]] = memref.load %{{.*}}[%c7] : memref<16xf32>
// CHECK: %[[TK:.*]] = arith.mulf %[[T]], %{{.*}} : f32
// CHECK: %[[MEAN:.*]] = arith.divf %[[TK]], %{{.*}} : f32
// CHECK: %[[GAMMA:.*]] = memref.load %{{.*}}[%c6] : memref<16xf32>
// CHECK: %[[D:.*]] = arith.subf %[[MEAN]], %{{.*}} : f32
// CHECK: arith.cmpf ogt, %[[D]]
// CHECK: arith.cmpf olt, %[[D]]
// CHECK: arith.select
// CHECK: %[[SIGN:.*]] = arith.select
// CHECK: %[[STEP:.*]] = arith.mulf %[[GAMMA]], %[[SIGN]] : f32
// CHECK: arith.addf %{{.*}}, %[[STEP]] : f32
gpu.module @k {
  gpu.func @bias_update(%l: memref<8xf32>, %h: memref<16xf32>, %b: memref<8xf32>) kernel {
    moegpu.bias_update %l, %h, %b {top_k = 2} : memref<8xf32>, memref<16xf32>, memref<8xf32>
    gpu.return
  }
}

// -----

// A grid-stride loop per weight, one after the other: the moments, their
// bias corrections (powers of the betas by squaring), sqrt.rn, and p, m
// and v stored in place; the second weight's new master also rounded into
// its compute copy.
// CHECK-LABEL: gpu.func @adamw
// CHECK: scf.for %{{.*}} = %{{.*}} to %c512{{[_0-9]*}} step
// CHECK: llvm.call_intrinsic "llvm.nvvm.sqrt.rn.f"
// CHECK: memref.store %{{.*}} : memref<8x64xf32>
// CHECK: memref.store %{{.*}} : memref<8x64xf32>
// CHECK: memref.store %{{.*}} : memref<8x64xf32>
// CHECK-NOT: truncf
// CHECK: scf.for %{{.*}} = %{{.*}} to %c16{{[_0-9]*}} step
// CHECK: llvm.call_intrinsic "llvm.nvvm.sqrt.rn.f"
// CHECK: memref.store %[[P:.*]], %arg5[%{{.*}}] : memref<16xf32>
// CHECK: memref.store %{{.*}} : memref<16xf32>
// CHECK: memref.store %{{.*}} : memref<16xf32>
// CHECK: %[[C:.*]] = arith.truncf %[[P]] : f32 to bf16
// CHECK: memref.store %[[C]], %arg6[%{{.*}}] : memref<16xbf16>
gpu.module @k {
  gpu.func @adamw(%p: memref<8x64xf32>, %m: memref<8x64xf32>, %v: memref<8x64xf32>, %g: memref<8x64xf32>, %h: memref<16xf32>, %q: memref<16xf32>, %qc: memref<16xbf16>, %pc: memref<8x64xf32>) kernel {
    moegpu.adamw %h params(%p, %q : memref<8x64xf32>, memref<16xf32>) m(%m, %q : memref<8x64xf32>, memref<16xf32>) v(%v, %q : memref<8x64xf32>, memref<16xf32>) grads(%g, %q : memref<8x64xf32>, memref<16xf32>) copies(%pc, %qc : memref<8x64xf32>, memref<16xbf16>) layouts [#moegpu.copy_layout<same>, #moegpu.copy_layout<same>] : memref<16xf32>
    gpu.return
  }
}

// -----

// Per weight: the count of elements whose update would be non-finite (x
// - x != 0), added by one atomic per warp at the weight's index (0, then
// 1); nothing stored to the weights or their moments. Without the flag
// and the bounds, every element is read.
// CHECK-LABEL: gpu.func @update_check
// CHECK-NOT: scf.if
// CHECK: scf.for %{{.*}} = %{{.*}} to %c512{{[_0-9]*}} step
// CHECK: llvm.call_intrinsic "llvm.nvvm.sqrt.rn.f"
// CHECK: arith.cmpf oeq
// CHECK-NOT: memref.store
// CHECK: memref.atomic_rmw addf %{{.*}}, %{{.*}}[%c0{{[_0-9]*}}] : (f32, memref<2xf32>) -> f32
// CHECK: scf.for %{{.*}} = %{{.*}} to %c16{{[_0-9]*}} step
// CHECK-NOT: memref.store
// CHECK: memref.atomic_rmw addf %{{.*}}, %{{.*}}[%c1{{[_0-9]*}}] : (f32, memref<2xf32>) -> f32
gpu.module @k {
  gpu.func @update_check(%p: memref<8x64xf32>, %m: memref<8x64xf32>, %v: memref<8x64xf32>, %g: memref<8x64xf32>, %h: memref<16xf32>, %gm: memref<2xi32>, %bad: memref<2xf32>) kernel {
    moegpu.update_check %h, %gm, %bad params(%p, %h : memref<8x64xf32>, memref<16xf32>) m(%m, %h : memref<8x64xf32>, memref<16xf32>) v(%v, %h : memref<8x64xf32>, memref<16xf32>) grads(%g, %h : memref<8x64xf32>, memref<16xf32>) : memref<16xf32>, memref<2xi32>, memref<2xf32>
    gpu.return
  }
}

// -----

// With the flag and the bounds: the state is read (and its bounds taken,
// an unsigned atomic max of the magnitudes' bits per warp) only where the
// flag is clear or the bounds cannot show the update finite: |m'|, the
// square of the largest |g|, v', the corrected moments, the update and
// |p'| each at most a quarter of the largest float.
// CHECK-LABEL: gpu.func @update_check_bounds
// CHECK: %[[FLAG:.*]] = memref.load %arg8[%{{.*}}] : memref<1xf32>
// CHECK: %[[KNOWN:.*]] = arith.cmpf one, %[[FLAG]], %{{.*}} : f32
// CHECK: %[[P:.*]] = memref.load %arg9[%{{.*}}, %c0{{[_0-9]*}}] : memref<1x3xi32>
// CHECK: arith.bitcast %[[P]] : i32 to f32
// CHECK: %[[G:.*]] = memref.load %arg5[%{{.*}}] : memref<1xi32>
// CHECK: arith.constant 8.50705867E+37 : f32
// CHECK: %[[SKIP:.*]] = arith.andi %[[KNOWN]], %{{.*}} : i1
// CHECK: %[[READ:.*]] = arith.xori %[[SKIP]], %{{.*}} : i1
// CHECK: scf.if %[[READ]] {
// CHECK: scf.for
// CHECK: arith.andi %{{.*}}, %c2147483647{{[_a-z0-9]*}} : i32
// CHECK: arith.maxui
// CHECK: memref.atomic_rmw addf
// CHECK: gpu.shuffle xor
// CHECK: memref.atomic_rmw maxu %{{.*}}, %arg9[%{{.*}}, %{{.*}}] : (i32, memref<1x3xi32>) -> i32
gpu.module @k {
  gpu.func @update_check_bounds(%p: memref<8x64xf32>, %m: memref<8x64xf32>, %v: memref<8x64xf32>, %g: memref<8x64xf32>, %h: memref<16xf32>, %gm: memref<1xi32>, %bad: memref<1xf32>, %unused: memref<1xf32>, %valid: memref<1xf32>, %bounds: memref<1x3xi32>) kernel {
    moegpu.update_check %h, %gm, %bad params(%p : memref<8x64xf32>) m(%m : memref<8x64xf32>) v(%v : memref<8x64xf32>) grads(%g : memref<8x64xf32>) valid(%valid : memref<1xf32>) bounds(%bounds : memref<1x3xi32>) : memref<16xf32>, memref<1xi32>, memref<1xf32>
    gpu.return
  }
}

// -----

// Each gradient read once: the squares summed (one atomic add per warp)
// and the largest magnitude's bits (one unsigned atomic max per warp).
// CHECK-LABEL: gpu.func @grad_stats
// CHECK: scf.for %{{.*}} = %{{.*}} to %c512{{[_0-9]*}} step
// CHECK: %[[G:.*]] = memref.load %arg0
// CHECK: arith.mulf %[[G]], %[[G]] : f32
// CHECK: %[[BITS:.*]] = arith.bitcast %[[G]] : f32 to i32
// CHECK: arith.andi %[[BITS]], %{{.*}} : i32
// CHECK: arith.maxui
// CHECK: memref.atomic_rmw addf %{{.*}}, %arg1[%{{.*}}] : (f32, memref<1xf32>) -> f32
// CHECK: memref.atomic_rmw maxu %{{.*}}, %arg2[%{{.*}}] : (i32, memref<1xi32>) -> i32
gpu.module @k {
  gpu.func @grad_stats(%g: memref<8x64xf32>, %sq: memref<1xf32>, %gm: memref<1xi32>) kernel {
    moegpu.grad_stats %sq, %gm grads(%g : memref<8x64xf32>) : memref<1xf32>, memref<1xi32>
    gpu.return
  }
}

// -----

// With bounds: the new master's, first moment's and second moment's
// magnitudes carried as unsigned maxima through the loop (a negative
// second moment as +inf's bits), then one atomic max per warp each.
// CHECK-LABEL: gpu.func @adamw_bounds
// CHECK: scf.for {{.*}} iter_args({{.*}}) -> (i32, i32, i32)
// CHECK: llvm.call_intrinsic "llvm.nvvm.sqrt.rn.f"
// CHECK: arith.cmpf olt
// CHECK: arith.select %{{.*}}, %c2139095040{{[_a-z0-9]*}}, %{{.*}} : i32
// CHECK: arith.maxui
// CHECK-COUNT-3: memref.atomic_rmw maxu %{{.*}}, %arg5[%{{.*}}, %{{.*}}] : (i32, memref<1x3xi32>) -> i32
gpu.module @k {
  gpu.func @adamw_bounds(%p: memref<8x64xf32>, %m: memref<8x64xf32>, %v: memref<8x64xf32>, %g: memref<8x64xf32>, %h: memref<16xf32>, %b: memref<1x3xi32>) kernel {
    moegpu.adamw %h params(%p : memref<8x64xf32>) m(%m : memref<8x64xf32>) v(%v : memref<8x64xf32>) grads(%g : memref<8x64xf32>) bounds(%b : memref<1x3xi32>) : memref<16xf32>
    gpu.return
  }
}

// -----

// Moments in bf16 (moe-compile --optimizer-state=bf16): widened when
// loaded; the master from the unrounded moments, each moment rounded once
// when stored, and the bounds taken from the stored (rounded) moments.
// CHECK-LABEL: gpu.func @adamw_bf16_moments
// CHECK: %[[M0:.*]] = memref.load %arg1[%{{.*}}, %{{.*}}] : memref<8x64xbf16>
// CHECK: arith.extf %[[M0]] : bf16 to f32
// CHECK: %[[V0:.*]] = memref.load %arg2[%{{.*}}, %{{.*}}] : memref<8x64xbf16>
// CHECK: arith.extf %[[V0]] : bf16 to f32
// CHECK: llvm.call_intrinsic "llvm.nvvm.sqrt.rn.f"
// CHECK: %[[P:.*]] = arith.subf
// CHECK: %[[M:.*]] = arith.truncf %{{.*}} : f32 to bf16
// CHECK: %[[MW:.*]] = arith.extf %[[M]] : bf16 to f32
// CHECK: %[[V:.*]] = arith.truncf %{{.*}} : f32 to bf16
// CHECK: %[[VW:.*]] = arith.extf %[[V]] : bf16 to f32
// CHECK: memref.store %[[P]], %arg0[{{.*}}] : memref<8x64xf32>
// CHECK: memref.store %[[M]], %arg1[{{.*}}] : memref<8x64xbf16>
// CHECK: memref.store %[[V]], %arg2[{{.*}}] : memref<8x64xbf16>
// CHECK: arith.bitcast %[[MW]] : f32 to i32
// CHECK: arith.cmpf olt, %[[VW]]
gpu.module @k {
  gpu.func @adamw_bf16_moments(%p: memref<8x64xf32>, %m: memref<8x64xbf16>, %v: memref<8x64xbf16>, %g: memref<8x64xf32>, %h: memref<16xf32>, %b: memref<1x3xi32>) kernel {
    moegpu.adamw %h params(%p : memref<8x64xf32>) m(%m : memref<8x64xbf16>) v(%v : memref<8x64xbf16>) grads(%g : memref<8x64xf32>) bounds(%b : memref<1x3xi32>) : memref<16xf32>
    gpu.return
  }
}

// -----

// The check with bf16 moments: the new moments rounded as AdamW would
// store them before the finiteness test (an f32 moment above bf16's
// largest finite value rounds to infinity).
// CHECK-LABEL: gpu.func @update_check_bf16_moments
// CHECK: arith.extf %{{.*}} : bf16 to f32
// CHECK: llvm.call_intrinsic "llvm.nvvm.sqrt.rn.f"
// CHECK: %[[M:.*]] = arith.truncf %{{.*}} : f32 to bf16
// CHECK: %[[MW:.*]] = arith.extf %[[M]] : bf16 to f32
// CHECK: arith.subf %[[MW]], %[[MW]] : f32
// CHECK-NOT: memref.store
// CHECK: memref.atomic_rmw addf
gpu.module @k {
  gpu.func @update_check_bf16_moments(%p: memref<8x64xf32>, %m: memref<8x64xbf16>, %v: memref<8x64xbf16>, %g: memref<8x64xf32>, %h: memref<16xf32>, %gm: memref<1xi32>, %bad: memref<1xf32>) kernel {
    moegpu.update_check %h, %gm, %bad params(%p : memref<8x64xf32>) m(%m : memref<8x64xbf16>) v(%v : memref<8x64xbf16>) grads(%g : memref<8x64xf32>) : memref<16xf32>, memref<1xi32>, memref<1xf32>
    gpu.return
  }
}

// -----

// With bounds, the copies' kernel (when it makes them) zeroes them first.
// CHECK-LABEL: gpu.func @compute_copies_bounds
// CHECK: scf.if
// CHECK: scf.for %{{.*}} = %{{.*}} to %c6{{[_0-9]*}} step
// CHECK: memref.store %c0_i32{{[_0-9]*}}, %arg3[%{{.*}}, %{{.*}}] : memref<2x3xi32>
// CHECK: scf.for %{{.*}} = %{{.*}} to %c512{{[_0-9]*}} step
gpu.module @k {
  gpu.func @compute_copies_bounds(%a: memref<8x64xf32>, %c: memref<8x64xbf16>, %valid: memref<1xf32>, %b: memref<2x3xi32>) kernel {
    moegpu.compute_copies masters(%a : memref<8x64xf32>) copies(%c : memref<8x64xbf16>) layouts [#moegpu.copy_layout<same>] valid(%valid : memref<1xf32>) bounds(%b : memref<2x3xi32>)
    gpu.return
  }
}

// -----

// With a verdict, AdamW's loops run only when rejected[0] == 0.
// CHECK-LABEL: gpu.func @adamw_verdict
// CHECK: %[[R:.*]] = memref.load %{{.*}}[%{{.*}}] : memref<1xf32>
// CHECK: %[[OK:.*]] = arith.cmpf oeq, %[[R]], %{{.*}} : f32
// CHECK: scf.if %[[OK]] {
// CHECK: scf.for
// CHECK: llvm.call_intrinsic "llvm.nvvm.sqrt.rn.f"
// CHECK: memref.store %{{.*}} : memref<8x64xf32>
gpu.module @k {
  gpu.func @adamw_verdict(%p: memref<8x64xf32>, %m: memref<8x64xf32>, %v: memref<8x64xf32>, %g: memref<8x64xf32>, %h: memref<16xf32>, %r: memref<1xf32>) kernel {
    moegpu.adamw %h params(%p : memref<8x64xf32>) m(%m : memref<8x64xf32>) v(%v : memref<8x64xf32>) grads(%g : memref<8x64xf32>) rejected(%r : memref<1xf32>) : memref<16xf32>
    gpu.return
  }
}

// -----

// The bias update too: its thread's expert only when the step is kept.
// CHECK-LABEL: gpu.func @bias_update_verdict
// CHECK: %[[R:.*]] = memref.load %{{.*}}[%{{.*}}] : memref<1xf32>
// CHECK: %[[OK:.*]] = arith.cmpf oeq, %[[R]], %{{.*}} : f32
// CHECK: scf.if %[[OK]] {
// CHECK: scf.if
// CHECK: arith.cmpf ogt
gpu.module @k {
  gpu.func @bias_update_verdict(%l: memref<8xf32>, %h: memref<16xf32>, %b: memref<8xf32>, %r: memref<1xf32>) kernel {
    moegpu.bias_update %l, %h, %b rejected(%r : memref<1xf32>) {top_k = 2} : memref<8xf32>, memref<16xf32>, memref<8xf32>
    gpu.return
  }
}

// -----

// Thread 0 alone: the loss finite (x - x == 0), and per weight its
// grad_sq finite and its bad count 0, all anded; rejected = ok ? 0 : 1.
// CHECK-LABEL: gpu.func @update_verdict
// CHECK: scf.if
// CHECK: %[[L:.*]] = memref.load %{{.*}}[%{{.*}}] : memref<1xf32>
// CHECK: %[[LD:.*]] = arith.subf %[[L]], %[[L]] : f32
// CHECK: %[[LOK:.*]] = arith.cmpf oeq, %[[LD]], %{{.*}} : f32
// CHECK: %[[B0:.*]] = memref.load %{{.*}}[%{{.*}}] : memref<2xf32>
// CHECK: %[[NONE0:.*]] = arith.cmpf oeq, %[[B0]], %{{.*}} : f32
// CHECK: %[[S0:.*]] = memref.load %{{.*}}[%{{.*}}] : memref<2xf32>
// CHECK: arith.subf %[[S0]], %[[S0]] : f32
// CHECK: arith.andi
// CHECK: %[[OK0:.*]] = arith.andi %[[LOK]], %{{.*}} : i1
// CHECK: memref.load %{{.*}}[%{{.*}}] : memref<2xf32>
// CHECK: memref.load %{{.*}}[%{{.*}}] : memref<2xf32>
// CHECK: %[[OK1:.*]] = arith.andi %[[OK0]], %{{.*}} : i1
// CHECK: %[[V:.*]] = arith.select %[[OK1]], %{{.*}}, %{{.*}} : f32
// CHECK: memref.store %[[V]], %{{.*}}[%{{.*}}] : memref<1xf32>
gpu.module @k {
  gpu.func @update_verdict(%l: memref<1xf32>, %s: memref<2xf32>, %b: memref<2xf32>, %r: memref<1xf32>) kernel {
    moegpu.update_verdict %l, %s, %b, %r : memref<1xf32>, memref<2xf32>, memref<1xf32>
    gpu.return
  }
}

// -----

// With copies_valid: 1 stored into it after the verdict, whatever it is
// (the update rewrites the masters and their copies, or neither).
// CHECK-LABEL: gpu.func @update_verdict_copies
// CHECK: scf.if
// CHECK: %[[V:.*]] = arith.select %{{.*}}, %{{.*}}, %{{.*}} : f32
// CHECK: memref.store %[[V]], %arg3[%{{.*}}] : memref<1xf32>
// CHECK: %[[ONE:.*]] = arith.constant 1.000000e+00 : f32
// CHECK: memref.store %[[ONE]], %arg4[%{{.*}}] : memref<1xf32>
gpu.module @k {
  gpu.func @update_verdict_copies(%l: memref<1xf32>, %s: memref<2xf32>, %b: memref<2xf32>, %r: memref<1xf32>, %c: memref<1xf32>) kernel {
    moegpu.update_verdict %l, %s, %b, %r copies_valid(%c : memref<1xf32>) : memref<1xf32>, memref<2xf32>, memref<1xf32>
    gpu.return
  }
}
