// RUN: moe-opt %s --convert-moe-to-host --split-input-file | FileCheck %s
// RUN: moe-opt %s --convert-moe-to-host="vector-width=16 vector-registers=32" --split-input-file | FileCheck %s --check-prefix=WIDE
// RUN: not moe-opt %s --convert-moe-to-host="vector-width=6" --split-input-file 2>&1 | FileCheck %s --check-prefix=BADWIDTH
// BADWIDTH: error: convert-moe-to-host: vector-width must be a power of two and vector-registers at least 16 (got 6 and 16)

// Router: the tokens widened to f32 once (in parallel over them); then,
// with at least 32 tokens, the weights packed, widened to f32, into
// k-major strips (4 x 4 tiles transposed in registers) for the outer
// micro-kernel (a 6 x 2 block of vectors of 4 f32, broadcasting each
// token's value); with fewer, the dot micro-kernel (a 3 x 4 block of
// vectors of 4 f32 along the hidden dimension, the weights from an f32
// copy), reduced once per logit. Then sigmoid elementwise. The GEMM is
// built in a private function of the module, which every GEMM of the same
// shapes calls (@shared_swiglu_a2a below).
// CHECK-LABEL: func @router_sigmoid
// CHECK: %[[LOGITS:.*]] = memref.alloc(%{{.*}}) : memref<?x8xf32>
// CHECK: %[[X:.*]] = tensor.cast %arg0 : tensor<?x64xbf16> to tensor<?x?xbf16>
// CHECK: %[[W:.*]] = tensor.cast %arg1 : tensor<8x64xbf16> to tensor<?x?xbf16>
// CHECK: %[[L:.*]] = memref.cast %[[LOGITS]] : memref<?x8xf32> to memref<?x?xf32>
// CHECK: call @moe_host_dense_gemm(%[[X]], %[[W]], %[[L]]) : (tensor<?x?xbf16>, tensor<?x?xbf16>, memref<?x?xf32>) -> ()
// CHECK: bufferization.to_tensor %[[LOGITS]]
// CHECK: linalg.generic
// CHECK: math.exp
// CHECK: arith.divf
// CHECK: func.func private @moe_host_dense_gemm(%{{.*}}: tensor<?x?xbf16>, %{{.*}}: tensor<?x?xbf16>, %[[OUT:.*]]: memref<?x?xf32>) attributes {llvm.linkage = #llvm.linkage<internal>}
// CHECK: %[[ROWS32:.*]] = memref.alloc(%{{.*}}, %{{.*}}) : memref<?x?xf32>
// CHECK: scf.parallel
// CHECK: vector.load %{{.*}} : memref<?x?xbf16>, vector<4xbf16>
// CHECK: arith.extf %{{.*}} : vector<4xbf16> to vector<4xf32>
// CHECK: vector.store %{{.*}}, %[[ROWS32]]
// CHECK: scf.if
// CHECK: scf.parallel
// CHECK: memref.alloc(%{{.*}}, %{{.*}}) : memref<?x?x8xf32>
// CHECK: vector.load %{{.*}} : memref<?x?xbf16>, vector<4xbf16>
// CHECK: vector.transpose %{{.*}}, [1, 0] : vector<4x4xf32> to vector<4x4xf32>
// CHECK: scf.for {{.*}} iter_args({{([^,]*, ){11}[^,]*}}) -> (vector<4xf32>, {{.*}}vector<4xf32>)
// CHECK: vector.load %{{.*}} : memref<?x?x8xf32>, vector<4xf32>
// CHECK: vector.broadcast %{{.*}} : f32 to vector<4xf32>
// CHECK: } else {
// CHECK: scf.parallel
// CHECK: memref.alloc(%{{.*}}, %{{.*}}) : memref<?x?xf32>
// CHECK: scf.for {{.*}} iter_args({{([^,]*, ){11}[^,]*}}) -> (vector<4xf32>, {{.*}}vector<4xf32>)
// CHECK: vector.load %[[ROWS32]]{{.*}} : memref<?x?xf32>, vector<4xf32>
// CHECK: vector.load %{{.*}} : memref<?x?xf32>, vector<4xf32>
// CHECK: arith.mulf %{{.*}} fastmath<reassoc,contract> : vector<4xf32>
// CHECK: arith.addf %{{.*}} fastmath<reassoc,contract> : vector<4xf32>
// CHECK: vector.reduction <add>, %{{.*}} fastmath<reassoc,contract> : vector<4xf32> into f32
// CHECK: memref.store %{{.*}}, %[[OUT]]
// CHECK: return
// CHECK-NOT: moe.
func.func @router_sigmoid(%x: tensor<?x64xbf16>, %w: tensor<8x64xbf16>) -> tensor<?x8xf32> {
  %s = moe.router %x, %w {scoring = #moe.scoring<sigmoid>}
         : tensor<?x64xbf16>, tensor<8x64xbf16> -> tensor<?x8xf32>
  return %s : tensor<?x8xf32>
}

// -----

// Softmax: row max, exp of the difference, row sum, division.
// CHECK-LABEL: func @router_softmax
// CHECK: call @moe_host_dense_gemm
// CHECK: linalg.generic {{.*}}iterator_types = ["parallel", "reduction"]
// CHECK: arith.maximumf
// CHECK: math.exp
// CHECK: linalg.generic {{.*}}iterator_types = ["parallel", "reduction"]
// CHECK: arith.addf
// CHECK: arith.divf
// CHECK: func.func private @moe_host_dense_gemm
// CHECK: vector.reduction <add>
func.func @router_softmax(%x: tensor<?x64xf32>, %w: tensor<8x64xf32>) -> tensor<?x8xf32> {
  %s = moe.router %x, %w {scoring = #moe.scoring<softmax>}
         : tensor<?x64xf32>, tensor<8x64xf32> -> tensor<?x8xf32>
  return %s : tensor<?x8xf32>
}

// -----

// Top-k: a parallel loop over blocks of 64 tokens on buffers, each block
// with its own rows of scratch; results come back as tensors.
// CHECK-LABEL: func @topk
// CHECK: bufferization.to_buffer %{{.*}} read_only {moe.host_read = {{[0-9]+}} : i64} : tensor<?x8xf32>
// CHECK: memref.alloc(%{{.*}}) : memref<?x2xi32>
// CHECK: memref.alloc(%{{.*}}) : memref<?x2xf32>
// CHECK: %[[BLOCKS:.*]] = arith.divui %{{.*}}, %c64
// CHECK: %[[SELECT:.*]] = memref.alloc(%[[BLOCKS]]) : memref<?x8xf32>
// CHECK: memref.alloc(%[[BLOCKS]]) : memref<?x8xi1>
// CHECK: memref.alloc(%[[BLOCKS]]) : memref<?x4xf32>
// CHECK: memref.alloc(%[[BLOCKS]]) : memref<?x4xi1>
// CHECK: scf.parallel (%[[R:.*]]) = (%{{.*}}) to (%[[BLOCKS]])
// CHECK: scf.for
// CHECK: memref.store %{{.*}}, %[[SELECT]][%[[R]], %{{.*}}]
// CHECK: arith.cmpf ogt
// CHECK: bufferization.to_tensor %{{.*}} restrict writable : memref<?x2xi32>
// CHECK: bufferization.to_tensor %{{.*}} restrict writable : memref<?x2xf32>
func.func @topk(%s: tensor<?x8xf32>, %b: tensor<8xf32>) -> (tensor<?x2xi32>, tensor<?x2xf32>) {
  %ids, %w = moe.topk %s bias(%b) {k = 2, groups = 4, topk_groups = 2,
               group_score = #moe.group_score<sum_top2>, normalize, scale = 2.5 : f64}
             : tensor<?x8xf32>, tensor<8xf32> -> tensor<?x2xi32>, tensor<?x2xf32>
  return %ids, %w : tensor<?x2xi32>, tensor<?x2xf32>
}

// -----

// Dispatch: histogram, aligned prefix sum, zero-filled rows (there is
// padding), the row map, then the rows copied in parallel over blocks of
// tokens, a vector (4 lanes by default) at a time.
// CHECK-LABEL: func @dispatch
// CHECK: memref.alloca() : memref<4xindex>
// CHECK: memref.alloc() : memref<5xi32>
// CHECK: %[[ROWS:.*]] = memref.alloc(%{{.*}}) : memref<?x16xf32>
// CHECK: linalg.fill
// CHECK: %[[MAP:.*]] = memref.alloc(%{{.*}}) : memref<?x2xi32>
// CHECK: scf.if
// CHECK: memref.store %{{.*}}, %[[MAP]]
// CHECK: scf.parallel
// CHECK: memref.load %[[MAP]]
// CHECK: arith.cmpi sge
// CHECK: scf.if
// CHECK: scf.for %{{.*}} = %{{.*}} to %c16{{.*}} step %c4
// CHECK: vector.load %{{.*}} : memref<?x16xf32>, vector<4xf32>
// CHECK: vector.store %{{.*}}, %[[ROWS]][%{{.*}}, %{{.*}}] : memref<?x16xf32>, vector<4xf32>
// CHECK: bufferization.to_tensor
func.func @dispatch(%x: tensor<?x16xf32>, %ids: tensor<?x2xi32>)
    -> (tensor<?x16xf32>, tensor<5xi32>, tensor<?x2xi32>) {
  %rows, %off, %map = moe.dispatch %x, %ids {experts = 4, alignment = 8}
      : tensor<?x16xf32>, tensor<?x2xi32> -> tensor<?x16xf32>, tensor<5xi32>, tensor<?x2xi32>
  return %rows, %off, %map : tensor<?x16xf32>, tensor<5xi32>, tensor<?x2xi32>
}

// -----

// Without padding (alignment 1, rows as many as slots) every row is copied:
// no fill.
// CHECK-LABEL: func @dispatch_unpadded
// CHECK-NOT: linalg.fill ins(%{{.*}} : f32)
// CHECK: scf.parallel
func.func @dispatch_unpadded(%x: tensor<?x16xf32>, %ids: tensor<?x2xi32>)
    -> (tensor<?x16xf32>, tensor<5xi32>, tensor<?x2xi32>) {
  %rows, %off, %map = moe.dispatch %x, %ids {experts = 4, alignment = 1}
      : tensor<?x16xf32>, tensor<?x2xi32> -> tensor<?x16xf32>, tensor<5xi32>, tensor<?x2xi32>
  return %rows, %off, %map : tensor<?x16xf32>, tensor<5xi32>, tensor<?x2xi32>
}

// -----

// A width that is not a multiple of the vector's: the last elements are
// copied as vectors of one lane.
// CHECK-LABEL: func @dispatch_tail
// CHECK: scf.for %{{.*}} = %{{.*}} to %c4{{.*}} step %c4
// CHECK: vector.load %{{.*}} : memref<?x6xf32>, vector<4xf32>
// CHECK: scf.for %{{.*}} = %c4{{.*}} to %c6{{.*}} step %c1
// CHECK: vector.load %{{.*}} : memref<?x6xf32>, vector<1xf32>
// CHECK: vector.store %{{.*}} : memref<?x6xf32>, vector<1xf32>
func.func @dispatch_tail(%x: tensor<?x6xf32>, %ids: tensor<?x2xi32>)
    -> (tensor<?x6xf32>, tensor<5xi32>, tensor<?x2xi32>) {
  %rows, %off, %map = moe.dispatch %x, %ids {experts = 4, alignment = 1}
      : tensor<?x6xf32>, tensor<?x2xi32> -> tensor<?x6xf32>, tensor<5xi32>, tensor<?x2xi32>
  return %rows, %off, %map : tensor<?x6xf32>, tensor<5xi32>, tensor<?x2xi32>
}

// -----

// Grouped GEMM and combine: per expert (its rows bounded by the clamped
// offsets), in parallel over experts and blocks of columns: an expert of
// at least 32 rows packs its block of weights into k-major strips (4 x 4
// tiles transposed in registers) for the outer micro-kernel; one of fewer
// runs the dot micro-kernel on the weights as they are. Then the combine,
// in parallel over blocks of tokens, each output vector the sum of the
// token's rows (entries outside the buffer add nothing), without scratch
// memory. With AVX-512's vectors the packed strips are 48 columns wide
// (an 8 x 3 block of vectors of 16), the dot kernel's register block is
// 5 x 4. The kernel takes the depth at run time, known to be a multiple
// of 8 only: its vector loop over k is followed by a one-lane loop, which
// alone runs for a depth of 8.
// CHECK-LABEL: func @gmm_combine
// CHECK: %[[H:.*]] = memref.alloc(%{{.*}}) : memref<?x16xf32>
// The kernel takes the column count and depth at run time.
// CHECK: %[[HD:.*]] = memref.cast %[[H]] : memref<?x16xf32> to memref<?x?xf32>
// CHECK: call @moe_host_grouped_matmul(%{{.*}}, %{{.*}}, %{{.*}}, %[[HD]]) : (tensor<?x?xf32>, tensor<4x?x?xf32>, tensor<5xi32>, memref<?x?xf32>) -> ()
// CHECK: bufferization.to_tensor %[[H]]
// CHECK-NOT: memref.alloca
// CHECK: scf.parallel
// CHECK: vector.load %{{.*}} : memref<?x16xf32>, vector<4xf32>
// CHECK: arith.select %{{.*}}, %{{.*}}, %{{.*}} : vector<4xf32>
// CHECK: vector.store %{{.*}} : memref<?x16xf32>, vector<4xf32>
// CHECK-NOT: moe.schedule
// CHECK: bufferization.to_tensor
// CHECK: func.func private @moe_host_grouped_matmul(
// First the rows no segment covers are zeroed (the gaps between the
// segments, found in one pass over the offsets, and the rows after the
// last), not the whole output.
// CHECK: %[[END:.*]] = scf.for %{{.*}} = %{{.*}} to %c4 step %{{.*}} iter_args
// CHECK: memref.store %cst, %[[OUT:.*]][%{{.*}}, %{{.*}}] : memref<?x?xf32>
// CHECK: scf.for %{{.*}} = %[[END]] to
// CHECK: memref.store %cst, %[[OUT]]
// The loop runs over the experts and blocks of columns, whose width
// follows the depth and column count.
// CHECK: scf.parallel (%[[E:.*]], %{{.*}}) = (%{{.*}}) to (%c4{{.*}}, %{{.*}})
// CHECK: memref.load %{{.*}}[%[[E]]] : memref<5xi32>
// CHECK: arith.minsi
// CHECK: scf.if
// CHECK: memref.alloc(%{{.*}}, %{{.*}}) : memref<?x?x8xf32>
// CHECK: vector.load %{{.*}} : memref<4x?x?xf32>, vector<4xf32>
// CHECK: vector.transpose
// CHECK: scf.for {{.*}} iter_args({{([^,]*, ){11}[^,]*}}) -> (vector<4xf32>,
// CHECK: vector.broadcast
// CHECK: } else {
// CHECK: scf.for
// CHECK: vector.load %{{.*}} : memref<4x?x?xf32>, vector<4xf32>
// CHECK: arith.mulf
// CHECK: arith.addf
// Experts get different numbers of rows: the threads take the loop's
// iterations one at a time.
// CHECK: } {moe.schedule = "dynamic"}
// WIDE-LABEL: func @gmm_combine
// WIDE: func.func private @moe_host_grouped_matmul(
// WIDE: scf.parallel
// WIDE: scf.if
// WIDE: memref.alloc(%{{.*}}, %{{.*}}) : memref<?x?x48xf32>
// WIDE: scf.for {{.*}} iter_args({{([^,]*, ){23}[^,]*}}) -> (vector<16xf32>,
// WIDE: } else {
// WIDE: scf.for {{.*}} iter_args({{([^,]*, ){19}[^,]*}}) -> (vector<16xf32>,
// WIDE: scf.for {{.*}} iter_args({{([^,]*, ){19}[^,]*}}) -> (vector<1xf32>,
// WIDE-LABEL: func @shared_swiglu_a2a
func.func @gmm_combine(%rows: tensor<?x8xf32>, %w: tensor<4x16x8xf32>, %off: tensor<5xi32>,
                       %map: tensor<?x2xi32>, %wts: tensor<?x2xf32>) -> tensor<?x16xf32> {
  %h = moe.grouped_matmul %rows, %w, %off
         : tensor<?x8xf32>, tensor<4x16x8xf32>, tensor<5xi32> -> tensor<?x16xf32>
  %y = moe.combine %h, %map, %wts
         : tensor<?x16xf32>, tensor<?x2xi32>, tensor<?x2xf32> -> tensor<?x16xf32>
  return %y : tensor<?x16xf32>
}

// -----

// Grouped GEMMs of different sizes share one function when what their code
// takes from the sizes agrees: whole strips of columns (8 here) and a depth
// that is a multiple of the vector width (4). Six columns are not whole
// strips: that GEMM gets a function of its own.
// CHECK-LABEL: func @gmm_shared
// CHECK: call @moe_host_grouped_matmul(%{{.*}}) : (tensor<?x?xf32>, tensor<4x?x?xf32>, tensor<5xi32>, memref<?x?xf32>) -> ()
// CHECK: call @moe_host_grouped_matmul(%{{.*}}) : (tensor<?x?xf32>, tensor<4x?x?xf32>, tensor<5xi32>, memref<?x?xf32>) -> ()
// CHECK: call @moe_host_grouped_matmul_1(%{{.*}}) : (tensor<?x?xf32>, tensor<4x?x?xf32>, tensor<5xi32>, memref<?x?xf32>) -> ()
// CHECK: func.func private @moe_host_grouped_matmul(
// CHECK: func.func private @moe_host_grouped_matmul_1(
// CHECK-NOT: func.func
func.func @gmm_shared(%rows: tensor<?x8xf32>, %up: tensor<4x16x8xf32>,
                      %down: tensor<4x8x16xf32>, %odd: tensor<4x6x8xf32>,
                      %off: tensor<5xi32>)
    -> (tensor<?x8xf32>, tensor<?x6xf32>) {
  %h = moe.grouped_matmul %rows, %up, %off
         : tensor<?x8xf32>, tensor<4x16x8xf32>, tensor<5xi32> -> tensor<?x16xf32>
  %y = moe.grouped_matmul %h, %down, %off
         : tensor<?x16xf32>, tensor<4x8x16xf32>, tensor<5xi32> -> tensor<?x8xf32>
  %z = moe.grouped_matmul %rows, %odd, %off
         : tensor<?x8xf32>, tensor<4x6x8xf32>, tensor<5xi32> -> tensor<?x6xf32>
  return %y, %z : tensor<?x8xf32>, tensor<?x6xf32>
}

// -----

// So do dense GEMMs: the router (8 x 16) and the shared expert's gate, up
// (8 x 16) and down (16 x 8) projections all call one function.
// CHECK-LABEL: func @dense_shared
// CHECK-COUNT-4: call @moe_host_dense_gemm(%{{.*}}) : (tensor<?x?xf32>, tensor<?x?xf32>, memref<?x?xf32>) -> ()
// CHECK: func.func private @moe_host_dense_gemm(
// CHECK-NOT: func.func
func.func @dense_shared(%x: tensor<?x16xf32>, %wr: tensor<8x16xf32>,
                        %g: tensor<8x16xf32>, %u: tensor<8x16xf32>,
                        %d: tensor<16x8xf32>)
    -> (tensor<?x8xf32>, tensor<?x16xf32>) {
  %s = moe.router %x, %wr {scoring = #moe.scoring<sigmoid>}
         : tensor<?x16xf32>, tensor<8x16xf32> -> tensor<?x8xf32>
  %y = moe.shared_expert %x, %g, %u, %d
         : (tensor<?x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>, tensor<16x8xf32>) -> tensor<?x16xf32>
  return %s, %y : tensor<?x8xf32>, tensor<?x16xf32>
}

// -----

// Shared expert with a gate; SwiGLU; a one-rank all-to-all is the identity.
// The GEMMs take their sizes at run time; the gate and up projections (4
// columns, whole register blocks) call one function; the down projection
// (a depth of 4, one vector) and the expert gate (one column) each have
// their own.
// CHECK-LABEL: func @shared_swiglu_a2a
// CHECK: %[[G:.*]] = tensor.cast %arg1 : tensor<4x8xf32> to tensor<?x?xf32>
// CHECK: call @moe_host_dense_gemm(%{{.*}}, %[[G]], %{{.*}}) : (tensor<?x?xf32>, tensor<?x?xf32>, memref<?x?xf32>) -> ()
// CHECK: %[[U:.*]] = tensor.cast %arg2 : tensor<4x8xf32> to tensor<?x?xf32>
// CHECK: call @moe_host_dense_gemm(%{{.*}}, %[[U]], %{{.*}}) : (tensor<?x?xf32>, tensor<?x?xf32>, memref<?x?xf32>) -> ()
// CHECK: %[[D:.*]] = tensor.cast %arg3 : tensor<8x4xf32> to tensor<?x?xf32>
// CHECK: call @moe_host_dense_gemm_1(%{{.*}}, %[[D]], %{{.*}}) : (tensor<?x?xf32>, tensor<?x?xf32>, memref<?x?xf32>) -> ()
// CHECK: %[[EG:.*]] = tensor.cast %arg4 : tensor<1x8xf32> to tensor<?x?xf32>
// CHECK: call @moe_host_dense_gemm_2(%{{.*}}, %[[EG]], %{{.*}}) : (tensor<?x?xf32>, tensor<?x?xf32>, memref<?x?xf32>) -> ()
// CHECK: tensor.collapse_shape
// CHECK-NOT: moe.
// CHECK: return %{{.*}}, %arg5, %arg6
// CHECK: func.func private @moe_host_dense_gemm(
// CHECK: func.func private @moe_host_dense_gemm_1(
// CHECK: func.func private @moe_host_dense_gemm_2(
// CHECK-NOT: func.func
func.func @shared_swiglu_a2a(%x: tensor<?x8xf32>, %g: tensor<4x8xf32>, %u: tensor<4x8xf32>,
                             %d: tensor<8x4xf32>, %sg: tensor<1x8xf32>,
                             %rows: tensor<?x8xf32>, %off: tensor<5xi32>)
    -> (tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x8xf32>, tensor<5xi32>) {
  %s = moe.shared_expert %x, %g, %u, %d gate(%sg)
         : (tensor<?x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<8x4xf32>, tensor<1x8xf32>) -> tensor<?x8xf32>
  %a = moe.swiglu %x, %x : tensor<?x8xf32>
  %r, %o = moe.all_to_all %rows, %off {ep_size = 1, kind = #moe.all_to_all_kind<dispatch>}
      : tensor<?x8xf32>, tensor<5xi32> -> tensor<?x8xf32>, tensor<5xi32>
  return %s, %a, %r, %o : tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x8xf32>, tensor<5xi32>
}

// -----

// Over several ranks the collectives call the runtime through the module's
// communicator table: word 0 is the context, 1 the exchange of segment
// sizes, 2 the exchange of rows, 3 the in-place sum (4 and 5: below). The
// rows land in a buffer sized by the exchanged offsets.
// CHECK: llvm.mlir.global external @moe_comm(dense<0> : tensor<6xi64>) {{.*}} : !llvm.array<6 x i64>
// CHECK-LABEL: func @collectives
// CHECK: %[[OUT_OFF:.*]] = memref.alloc() : memref<5xi32>
// CHECK: %[[T1:.*]] = llvm.mlir.addressof @moe_comm
// CHECK: llvm.getelementptr %[[T1]][0, 1]
// CHECK: %[[COUNTS:.*]] = llvm.inttoptr
// CHECK: llvm.getelementptr %{{.*}}[0, 0]
// CHECK: %[[CTX:.*]] = llvm.load
// CHECK: llvm.call %[[COUNTS]](%[[CTX]], %c1_i64, %{{.*}}, %{{.*}}, %c4_i64) : !llvm.ptr, (i64, i64, i64, i64, i64) -> ()
// CHECK: %[[USED:.*]] = memref.load %[[OUT_OFF]][%c4]
// CHECK: %[[ROWS:.*]] = arith.index_cast %[[USED]]
// CHECK: memref.alloc(%[[ROWS]]) : memref<?x8xbf16>
// CHECK: llvm.getelementptr %{{.*}}[0, 2]
// CHECK: llvm.call %{{.*}}(%{{.*}}, %c1_i64, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %c4_i64{{[_0-9]*}}, %c16_i64) : !llvm.ptr, (i64, i64, i64, i64, i64, i64, i64, i64) -> ()
// CHECK: %[[SUM:.*]] = memref.alloc() : memref<4x6xf32>
// CHECK: memref.copy %{{.*}}, %[[SUM]]
// CHECK: llvm.getelementptr %{{.*}}[0, 3]
// CHECK: llvm.call %{{.*}}(%{{.*}}, %{{.*}}, %{{.*}}) : !llvm.ptr, (i64, i64, i64) -> ()
// CHECK: bufferization.to_tensor %[[SUM]]
// CHECK-NOT: moe.
func.func @collectives(%rows: tensor<?x8xbf16>, %off: tensor<5xi32>, %g: tensor<4x6xf32>)
    -> (tensor<?x8xbf16>, tensor<5xi32>, tensor<4x6xf32>) {
  %r, %o = moe.all_to_all %rows, %off {ep_size = 2, kind = #moe.all_to_all_kind<combine>}
      : tensor<?x8xbf16>, tensor<5xi32> -> tensor<?x8xbf16>, tensor<5xi32>
  %s = moe.all_reduce %g {ep_size = 2} : tensor<4x6xf32>
  return %r, %o, %s : tensor<?x8xbf16>, tensor<5xi32>, tensor<4x6xf32>
}

// -----

// One rank: the identity.
// CHECK-LABEL: func @one_rank
// CHECK-NOT: llvm.call
// CHECK: return %arg0
func.func @one_rank(%g: tensor<4x6xf32>) -> tensor<4x6xf32> {
  %s = moe.all_reduce %g {ep_size = 1} : tensor<4x6xf32>
  return %s : tensor<4x6xf32>
}

// -----

// A started all-to-all: sizes at once, the rows through the start function
// (word 4), which returns a handle the wait (word 5) takes; the rows'
// buffer becomes the wait's result.
// CHECK-LABEL: func @started
// CHECK: %[[OUT:.*]] = memref.alloc(%{{.*}}) : memref<?x8xf32>
// CHECK: llvm.getelementptr %{{.*}}[0, 4]
// CHECK: %[[H:.*]] = llvm.call %{{.*}}(%{{.*}}) : !llvm.ptr, (i64, i64, i64, i64, i64, i64, i64, i64) -> i64
// CHECK: arith.negf
// CHECK: llvm.getelementptr %{{.*}}[0, 5]
// CHECK: llvm.call %{{.*}}(%{{.*}}, %[[H]]) : !llvm.ptr, (i64, i64) -> ()
// CHECK: bufferization.to_tensor %[[OUT]]
func.func @started(%rows: tensor<?x8xf32>, %off: tensor<5xi32>, %other: tensor<4xf32>)
    -> (tensor<?x8xf32>, tensor<4xf32>) {
  %h, %o = moe.all_to_all_start %rows, %off {ep_size = 2, kind = #moe.all_to_all_kind<dispatch>}
      : tensor<?x8xf32>, tensor<5xi32> -> tensor<5xi32>
  %n = arith.negf %other : tensor<4xf32>
  %r = moe.all_to_all_wait %h : tensor<?x8xf32>
  return %r, %n : tensor<?x8xf32>, tensor<4xf32>
}

// -----

// dX and dW: the outer-product micro-kernel, in parallel over experts and
// blocks of columns: each row of the reduction broadcasts scalars of the
// gradient against vectors of the weight (dX) or of the input (dW).
// CHECK-LABEL: func @grouped_gradients
// CHECK: call @moe_host_grouped_matmul_dx(
// CHECK: call @moe_host_grouped_matmul_dw(
// CHECK: func.func private @moe_host_grouped_matmul_dx(
// CHECK: scf.parallel
// CHECK: vector.load %{{.*}} : memref<3x8x16xf32>, vector<4xf32>
// CHECK: vector.broadcast %{{.*}} : f32 to vector<4xf32>
// CHECK: vector.store %{{.*}} : memref<?x16xf32>, vector<4xf32>
// CHECK: } {moe.schedule = "dynamic"}
// CHECK: func.func private @moe_host_grouped_matmul_dw(
// CHECK: scf.parallel
// CHECK: vector.load %{{.*}} : memref<?x16xf32>, vector<4xf32>
// CHECK: vector.broadcast %{{.*}} : f32 to vector<4xf32>
// CHECK: vector.store %{{.*}} : memref<3x8x16xf32>, vector<4xf32>
// CHECK: } {moe.schedule = "dynamic"}
func.func @grouped_gradients(%grad: tensor<?x8xf32>, %w: tensor<3x8x16xf32>,
                             %x: tensor<?x16xf32>, %off: tensor<4xi32>)
    -> (tensor<?x16xf32>, tensor<3x8x16xf32>) {
  %dx = moe.grouped_matmul_dx %grad, %w, %off
      : tensor<?x8xf32>, tensor<3x8x16xf32>, tensor<4xi32> -> tensor<?x16xf32>
  %dw = moe.grouped_matmul_dw %x, %grad, %off
      : tensor<?x16xf32>, tensor<?x8xf32>, tensor<4xi32> -> tensor<3x8x16xf32>
  return %dx, %dw : tensor<?x16xf32>, tensor<3x8x16xf32>
}

// -----

// A weight gradient that goes straight to an output argument (the backward
// entry's `W.grad`) is built in it: no allocation and no copy.
// CHECK-LABEL: func.func @gradient_in_destination
// CHECK-SAME: %[[OUT:[a-z0-9]+]]: memref<3x8x16xf32>
// CHECK-NOT: memref.alloc() : memref<3x8x16xf32>
// CHECK: call @moe_host_grouped_matmul_dw(%{{.*}}, %{{.*}}, %{{.*}}, %[[OUT]])
// CHECK-NOT: materialize_in_destination
// CHECK: return
func.func @gradient_in_destination(%grad: tensor<?x8xf32>,
                                   %x: tensor<?x16xf32>, %off: tensor<4xi32>,
                                   %out: memref<3x8x16xf32>) {
  %dw = moe.grouped_matmul_dw %x, %grad, %off
      : tensor<?x16xf32>, tensor<?x8xf32>, tensor<4xi32> -> tensor<3x8x16xf32>
  bufferization.materialize_in_destination %dw in restrict writable %out
      : (tensor<3x8x16xf32>, memref<3x8x16xf32>) -> ()
  return
}

// A destination read after the materialization too (the training step's
// AdamW check reads its gradients there) is still built in.
// CHECK-LABEL: func.func @gradient_read_after
// CHECK-SAME: %[[OUT:[a-z0-9]+]]: memref<3x8x16xf32>
// CHECK-NOT: memref.alloc() : memref<3x8x16xf32>
// CHECK-NOT: materialize_in_destination
// CHECK: memref.load %[[OUT]]
func.func @gradient_read_after(%grad: tensor<?x8xf32>, %x: tensor<?x16xf32>,
                               %off: tensor<4xi32>, %out: memref<3x8x16xf32>)
    -> f32 {
  %dw = moe.grouped_matmul_dw %x, %grad, %off
      : tensor<?x16xf32>, tensor<?x8xf32>, tensor<4xi32> -> tensor<3x8x16xf32>
  bufferization.materialize_in_destination %dw in restrict writable %out
      : (tensor<3x8x16xf32>, memref<3x8x16xf32>) -> ()
  %c0 = arith.constant 0 : index
  %v = memref.load %out[%c0, %c0, %c0] : memref<3x8x16xf32>
  return %v : f32
}

// A destination used before the materialization (it may be read while
// the result is computed), or an allocation of another type, keeps the
// copy.
// CHECK-LABEL: func.func @gradient_copied
// CHECK: memref.alloc() : memref<3x8x16xf32>
// CHECK: materialize_in_destination
func.func @gradient_copied(%grad: tensor<?x8xf32>, %x: tensor<?x16xf32>,
                           %off: tensor<4xi32>, %out: memref<3x8x16xf32>)
    -> f32 {
  %c0 = arith.constant 0 : index
  %v = memref.load %out[%c0, %c0, %c0] : memref<3x8x16xf32>
  %dw = moe.grouped_matmul_dw %x, %grad, %off
      : tensor<?x16xf32>, tensor<?x8xf32>, tensor<4xi32> -> tensor<3x8x16xf32>
  bufferization.materialize_in_destination %dw in restrict writable %out
      : (tensor<3x8x16xf32>, memref<3x8x16xf32>) -> ()
  return %v : f32
}
