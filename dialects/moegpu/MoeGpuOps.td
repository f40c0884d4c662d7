//===- MoeGpuOps.td - Operations of the moegpu dialect -----*- tablegen -*-===//
//
// Part of moe-compiler.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_DIALECT_MOEGPU_MOEGPUOPS_TD
#define MOE_DIALECT_MOEGPU_MOEGPUOPS_TD

include "moegpu/MoeGpuTypes.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/ControlFlowInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

//===----------------------------------------------------------------------===//
// Ops
//===----------------------------------------------------------------------===//

/// Memory operands by what an op does to them: reads, writes, or both.
def MoeGpu_In : Arg<AnyMemRef, "", [MemRead]>;
def MoeGpu_Out : Arg<AnyMemRef, "", [MemWrite]>;
def MoeGpu_InOut : Arg<AnyMemRef, "", [MemRead, MemWrite]>;
def MoeGpu_OptIn : Arg<Optional<AnyMemRef>, "", [MemRead]>;
def MoeGpu_OptOut : Arg<Optional<AnyMemRef>, "", [MemWrite]>;

def MoeGpu_GroupedGemmOp : MoeGpu_Op<"grouped_gemm",
    [AttrSizedOperandSegments]> {
  let summary = "Per-expert GEMM over an expert-contiguous buffer";
  let description = [{
    `acc[r, n] = sum_k a[r, k] * b[e, n, k]` (f32) for every row `r` in
    `[offsets[e], offsets[e+1])`, then the epilogue writes `c`:

    - `none`: `c[r, n] = acc[r, n]`;
    - `row_scale`: `c[r, n] = acc[r, n] * scale[r]` (the routing weight of
      the down projection);
    - `swiglu`: `b` holds gate and up rows interleaved in blocks of 8
      (rows `16j .. 16j+7` are gate rows `8j ..`, rows `16j+8 .. 16j+15` up
      rows `8j ..`), and `c[r, f] = silu(gate) * up` has `N / 2` columns.
    - `accumulate`: `c[r, n] += acc[r, n]` into an f32 `c` (a weight
      gradient summed over chunks of its rows, one launch after another;
      every element has one writer, so no atomics).

    `bias` (`[E, N]`, a's element type, rows in b's order; GPT-OSS's expert
    biases) is added to `acc[r, n]` first, `bias[e, n]` for the rows of
    group e. `alpha` and `limit` make `swiglu` GPT-OSS's clamped form,
    `(clamp(up, -limit, limit) + 1) * g * sigmoid(alpha * g)` with
    `g = min(gate, limit)`.

    Each expert's segment starts at a multiple of the tile's `m` (the
    dispatch alignment); rows from `offsets[E]` on are not written. `a` is
    `[R, K]`, `b` `[E, N, K]`, `offsets` `[E + 1]` i32, `c` `[R, N]` (or
    `[R, N / 2]`), `scale` `[R]` f32; `a` and `b` share a 16-bit float
    element type, which `c` has too or is f32. `tile` and `sm_range` are
    chosen by `moe-select-tiles` and `moe-partition-sms` when absent.

    `dense` in place of `offsets` makes it one group of all `R` rows of `a`
    (`R` any count) with `b` `[N, K]`: a plain GEMM, such as the router's
    logits `[T, E] = x . router^T` in f32. Its N need not be a multiple of 8.

    `block_scales(a_scale, b_scale)` makes it an FP8 GEMM as DeepSeek-V3
    computes it: `a` and `b` hold e4m3 codes (`f8E4M3FN`), `a_scale`
    `[R, ceil(K / 128)]` one f32 scale per row per 128 of K and `b_scale`
    `[E, ceil(N / 128), ceil(K / 128)]` one per 128 x 128 block of each
    group's B. The tensor core sums each 128 of K on its own, and that
    partial sum times both scales joins the f32 accumulator (DeepGEMM's
    promotion). With `swiglu`, b's rows interleave gate and up rows in
    blocks of 8 and `b_scale` holds the gate's `ceil(N / 256)` blocks then
    the up's; `gate_up_scales` says the same of an FP8 GEMM without the
    SwiGLU (the training step's pre-activations, kept for the SwiGLU's
    gradient). The layout is `nt` (`c` bf16, f16 or f32) or `tn` (below).

    `rounded_inputs` (with `swiglu`) rounds the gate and up values to c's
    element type before the SwiGLU, as a framework's 16-bit projections
    are rounded before their activation: what the host computes, so that
    an FP8 layer's SwiGLU outputs, which are quantized next, agree with it.

    `split_k(count)` splits a dense `nt` GEMM's reduction over CTAs, for
    few rows and a long K (the router at a serving step's 1-256 tokens,
    whose few output tiles would leave most SMs idle while they walk all of
    K). `c` is then f32 `[S, R, N]`: slice `s` of the `S` slices at most
    holds `sum_k a[r, k] * b[n, k]` over its k blocks, and the kernel picks
    the slices `s' <= S` at run time from the rows, the grid and K (see
    `moegpu::splitCount`), writes `s'` to `count` (`memref<1xi32>`) and
    leaves slices from `s'` on alone. A `moegpu.sum_splits` after it adds
    the slices in order, so the result does not depend on the schedule.
    The epilogue is `none`.

    `layout` names the operands' storage as DeepGEMM does, `n` for an
    operand read along its rows of K (K-major) and `t` for one read down
    its columns (MN-major, transposed by wgmma):

    - `nt` (the default): the form above, `b` `[E, N, K]`;
    - `nn`: `acc[r, n] = sum_k a[r, k] * b[e, k, n]` with `b` `[E, K, N]`
      (or `[K, N]` dense): a backward pass's `dX = dY . W`, reading the
      forward's weights as they are;
    - `tn`: the groups split the reduction instead of the output rows:
      `c[e, m, n] = sum_r a[r, m] * b[r, n]` over the rows `r` in
      `[offsets[e], offsets[e+1])`, `a` `[R, M]`, `b` `[R, N]` and `c`
      `[E, M, N]` (`[M, N]` for one group): a weight
      gradient `dW_e = dY_e^T . X_e`. Rows of a group past a multiple of
      64 must hold zeros in `a` or `b` (the dispatch's padding rows do);
      an empty group's `c[e]` is zero. The epilogue is `none`.

    `tn` with `block_scales` is the FP8 weight gradient as DeepSeek-V3
    computes it. e4m3 wgmma reads both operands K-major, so `a` and `b`
    hold the transposed codes, `a` `[M, R]` and `b` `[N, R]` (what
    `moegpu.quantize_columns` writes), with `a_scale` `[M, ceil(R / 128)]`
    and `b_scale` `[N, ceil(R / 128)]`: one scale per column of the
    untransposed operands per 128 of their rows (the recipe's 128 x 1
    tiles). The groups' bounds are multiples of 128, so each 128 rows of
    a group are one block of both operands' scales, and each k block's
    partial sum joins the accumulator times its row's and its column's
    scale. `R` is a multiple of 16 (the codes' 16-byte TMA rows).

    ```mlir
    moegpu.grouped_gemm %a, %b, %offsets, %c {epilogue = #moegpu.epilogue<swiglu>}
      : memref<?x7168xbf16>, memref<256x4096x7168xbf16>, memref<257xi32>,
        memref<?x2048xbf16>
    moegpu.grouped_gemm %x, %router, dense, %logits
      : memref<?x7168xbf16>, memref<256x7168xbf16>, memref<?x256xf32>
    moegpu.grouped_gemm %x, %router, dense, %partials split_k(%count
      : memref<1xi32>)
      : memref<?x7168xbf16>, memref<256x7168xbf16>, memref<28x?x256xf32>
    ```
  }];
  let arguments = (ins MoeGpu_In:$a, MoeGpu_In:$b,
                       MoeGpu_OptIn:$offsets, MoeGpu_InOut:$c,
                       MoeGpu_OptIn:$scale,
                       MoeGpu_OptIn:$bias,
                       MoeGpu_OptIn:$a_scale,
                       MoeGpu_OptIn:$b_scale,
                       MoeGpu_OptOut:$split_count,
                       DefaultValuedAttr<MoeGpu_EpilogueAttr,
                           "::mlir::moegpu::Epilogue::None">:$epilogue,
                       DefaultValuedAttr<MoeGpu_GemmLayoutAttr,
                           "::mlir::moegpu::GemmLayout::NT">:$layout,
                       OptionalAttr<MoeGpu_TileAttr>:$tile,
                       OptionalAttr<MoeGpu_SmRangeAttr>:$sm_range,
                       OptionalAttr<F64Attr>:$alpha,
                       OptionalAttr<F64Attr>:$limit,
                       UnitAttr:$rounded_inputs,
                       UnitAttr:$gate_up_scales);
  let assemblyFormat = [{
    $a `,` $b `,` ($offsets^):(`dense`)? `,` $c (`scale` $scale^)?
    (`bias` `(` $bias^ `:` type($bias) `)`)?
    (`block_scales` `(` $a_scale^ `,` $b_scale `:` type($a_scale) `,`
     type($b_scale) `)`)?
    (`split_k` `(` $split_count^ `:` type($split_count) `)`)? attr-dict
    `:` type($a) `,` type($b) `,`
    custom<OptionalTypeComma>(ref($offsets), type($offsets)) type($c)
    (`,` type($scale)^)?
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// Groups: b is [E, N, K] (nt) or [E, K, N] (nn), or rank 2 dense;
    /// with tn, the offsets' segments.
    int64_t getNumExperts() {
      if (isDense())
        return 1;
      if (isKGrouped())
        return getOffsets().getType().getDimSize(0) - 1;
      return getB().getType().getDimSize(0);
    }
    /// Output rows per group: all of a's rows but with tn, a's columns.
    int64_t getM() {
      if (!isKGrouped())
        return ::mlir::ShapedType::kDynamic;
      return getA().getType().getDimSize(isFp8() ? 0 : 1);
    }
    int64_t getN() {
      auto shape = getB().getType().getShape();
      return getStorageLayout() == GemmLayout::NT ? shape.end()[-2]
                                                  : shape.back();
    }
    /// How the operands are stored: the layout, but an FP8 tn GEMM's
    /// operands are transposed codes, both K-major (as nt's).
    GemmLayout getStorageLayout() {
      return isKGrouped() && isFp8() ? GemmLayout::NT : getLayout();
    }
    /// The reduction's length (dynamic with tn: the group's rows).
    int64_t getK() {
      auto shape = getB().getType().getShape();
      switch (getLayout()) {
      case GemmLayout::NT: return shape.back();
      case GemmLayout::NN: return shape.end()[-2];
      case GemmLayout::TN: return ::mlir::ShapedType::kDynamic;
      }
      return ::mlir::ShapedType::kDynamic;
    }
    /// Columns of `c`.
    int64_t getOutputColumns() { return getC().getType().getShape().back(); }
    /// One group of all of `a`'s rows (no offsets).
    bool isDense() { return !getOffsets(); }
    /// The groups split the reduction (tn), not the output rows.
    bool isKGrouped() { return getLayout() == GemmLayout::TN; }
    /// e4m3 operands with block scales.
    bool isFp8() { return static_cast<bool>(getAScale()); }
    /// The reduction split over CTAs into `c`'s slices (split_k).
    bool isSplitK() { return static_cast<bool>(getSplitCount()); }
    /// The most slices of a split_k GEMM (c's first dimension), else 1.
    int64_t getMaxSplits() {
      return isSplitK() ? getC().getType().getDimSize(0) : 1;
    }
    /// The FP8 GEMM's operands and scales (verify()'s part for them).
    ::llvm::LogicalResult verifyBlockScales();
  }];
}

def MoeGpu_PipelineCreateOp : MoeGpu_Op<"pipeline.create"> {
  let summary = "Allocate a shared-memory pipeline and initialize its barriers";
  let description = [{
    Carves the pipeline's slots out of the kernel's dynamic shared memory and
    initializes one `full` barrier (arrival count 1: the producer) and one
    `empty` barrier (arrival count: the tile's consumer warpgroups) per
    slot, then synchronizes the CTA. Must run on every thread of the CTA,
    before the warp roles split.
  }];
  let results = (outs MoeGpu_PipelineType:$pipeline);
  let assemblyFormat = "attr-dict `:` type($pipeline)";
}

def MoeGpu_WarpRolesOp : MoeGpu_Op<"warp_roles", [
    RecursiveMemoryEffects, NoTerminator]> {
  let summary = "Split the CTA into a producer and consumer warpgroups";
  let description = [{
    The CTA has `consumers + 1` warpgroups of 128 threads. Warpgroups
    `0 .. consumers-1` run the `consumer` region with their index as the
    block argument, after raising their register budget to `consumer_regs`;
    the last warpgroup lowers its budget to `producer_regs` and one of its
    threads runs the `producer` region. The budgets must fit the SM's 64K
    registers: `128 * (producer_regs + consumers * consumer_regs) <= 65536`.

    ```mlir
    moegpu.warp_roles consumers = 2, producer_regs = 40, consumer_regs = 232
    producer {
      ...
    } consumer {
    ^bb0(%wg: index):
      ...
    }
    ```
  }];
  let arguments = (ins I64Attr:$consumers, I64Attr:$producer_regs,
                       I64Attr:$consumer_regs);
  let regions = (region SizedRegion<1>:$producer, SizedRegion<1>:$consumer);
  let assemblyFormat = [{
    `consumers` `=` $consumers `,` `producer_regs` `=` $producer_regs `,`
    `consumer_regs` `=` $consumer_regs attr-dict-with-keyword
    `producer` $producer `consumer` $consumer
  }];
  let hasVerifier = 1;
}

def MoeGpu_TileLoopOp : MoeGpu_Op<"tile_loop", [
    AttrSizedOperandSegments, RecursiveMemoryEffects, SingleBlockImplicitTerminator<"YieldOp">]> {
  let summary = "Persistent scheduler over the tiles of a grouped GEMM";
  let description = [{
    Enumerates the `block_m x block_n` output tiles of a grouped problem with
    `columns` output columns whose row segments are given by `offsets`
    (`[E + 1]` i32, each segment a multiple of `block_m` rows), or of one
    group of `rows` rows (any count) in their place, and runs the
    body for the tiles of this CTA: tile `t = blockIdx.x + i * count` for
    `i = 0, 1, ...`, with `count` the SMs of `sm_range` (the grid). Tiles are
    numbered row block first, so CTAs running at the same time share an A
    row block. Each tile reduces over `depth` in blocks of `block_k`.

    With `k_grouped` the offsets split the reduction instead: every group
    has the same `rows` output rows (the tiles are group-major, then row
    block, then column block) and a tile of group `e` reduces over its
    `offsets[e+1] - offsets[e]` rows (`depth` is then 0).

    `splits` above 1 (with `rows`, not `k_grouped`) splits the reduction:
    the loop takes `s' = moegpu::splitCount(rows, block_m, column blocks,
    k blocks, splits, grid)` slices of `ceil(k blocks / s')` k blocks (the
    last one the rest), the tiles are slice-major, and a tile's group is
    its slice. `split_count` (`memref<1xi32>`) gets `s'` from the first
    thread of the grid.

    The body's arguments are the tile's group, first row, first column, the
    pipeline iteration of its first k block (the k blocks of this CTA's
    earlier tiles), its count of k blocks and the index of its first k
    block (0 unless split).

    ```mlir
    moegpu.tile_loop %offsets : memref<257xi32> columns 4096 tiles 128 x 128
        x 64 depth 7168 on #moegpu.sm_range<first = 0, count = 112> {
    ^bb0(%expert: index, %row: index, %col: index, %iter: index,
         %kblocks: index, %kfirst: index):
      ...
    }
    ```
  }];
  let arguments = (ins Optional<AnyMemRef>:$offsets, Optional<Index>:$rows,
                       I64Attr:$columns, I64Attr:$block_m,
                       I64Attr:$block_n, I64Attr:$depth, I64Attr:$block_k,
                       UnitAttr:$k_grouped, MoeGpu_SmRangeAttr:$sm_range,
                       DefaultValuedAttr<I64Attr, "1">:$splits,
                       Arg<Optional<AnyMemRef>, "", [MemWrite]>:$split_count);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    ($offsets^ `:` type($offsets))? (`k_grouped` $k_grouped^)?
    (`rows` $rows^)? `columns` $columns
    `tiles` $block_m `x` $block_n `x` $block_k `depth` $depth
    `on` $sm_range
    (`split_count` `(` $split_count^ `:` type($split_count) `)`)?
    attr-dict-with-keyword $body
  }];
  let hasVerifier = 1;
}

def MoeGpu_YieldOp : MoeGpu_Op<"yield", [Pure, Terminator,
    ParentOneOf<["TileLoopOp"]>]> {
  let summary = "Terminator of moegpu.tile_loop";
  let assemblyFormat = "attr-dict";
}

def MoeGpu_ProduceOp : MoeGpu_Op<"produce"> {
  let summary = "Fill one pipeline slot with A and B tiles through TMA";
  let description = [{
    For pipeline iteration `iter`: waits until the slot is empty, announces
    the slot's byte count on its `full` barrier and issues the TMA loads of
    the `m x k` A tile and the `n x k` B tile, each at `[mn, k]`: a
    K-major operand's box starts at row `mn`, column `k` (B viewed as
    `[E * N, K]`); an MN-major one's (see `!moegpu.pipeline`) at row `k`,
    column `mn` (B of `nn` viewed as `[E * K, N]`), in boxes of 64
    columns. Out-of-bounds elements are zero. Runs on one thread of the
    producer warpgroup.
  }];
  let arguments = (ins Arg<MoeGpu_PipelineType, "its slots' tiles",
                           [MemWrite]>:$pipeline, Index:$iter,
                       MoeGpu_In:$a, Index:$a_mn, Index:$a_k, MoeGpu_In:$b,
                       Index:$b_mn, Index:$b_k);
  let assemblyFormat = [{
    $pipeline `[` $iter `]` `,` $a `[` $a_mn `,` $a_k `]` `,`
    $b `[` $b_mn `,` $b_k `]` attr-dict `:` type($pipeline) `,` type($a) `,`
    type($b)
  }];
}

def MoeGpu_MmaOp : MoeGpu_Op<"mma", [AllTypesMatch<["acc", "result"]>]> {
  let summary = "Accumulate one pipeline slot into a warpgroup's fragment";
  let description = [{
    For pipeline iteration `iter`: waits until the slot is full, runs the
    wgmma instructions of the slot's `k` columns for the 64 rows of
    consumer warpgroup `warpgroup` against the slot's `n` B rows as one
    commit group, then waits until at most `pending` groups are in flight.
    With `pending = 0` the slot is read and released here; with
    `pending = 1` (one batch kept in flight while the next slot is waited
    for) the previous iteration's group is complete instead, and
    `moegpu.release` gives back its slot. The accumulator is this thread's
    fragment of the warpgroup's `64 x n` f32 tile: element `4 * j + 2 * h +
    v` is row `16 * warp + lane / 4 + 8 * h`, column `8 * j + 2 * (lane %
    4) + v`. With `first` (a tile's first k block) `acc` is not read: the
    first wgmma's scale-d is 0, so no zeros are written to the accumulator
    registers between the fence and the wgmma.
  }];
  let arguments = (ins MoeGpu_PipelineType:$pipeline, Index:$iter,
                       VectorOfRankAndType<[1], [F32]>:$acc, Index:$warpgroup,
                       DefaultValuedAttr<I64Attr, "0">:$pending,
                       UnitAttr:$first);
  let results = (outs VectorOfRankAndType<[1], [F32]>:$result);
  let assemblyFormat = [{
    $pipeline `[` $iter `]` `,` $acc `,` `warpgroup` $warpgroup attr-dict `:`
    type($pipeline) `,` type($acc)
  }];
  let hasVerifier = 1;
}

def MoeGpu_PromoteOp : MoeGpu_Op<"promote",
    [AllTypesMatch<["acc", "partial", "result"]>]> {
  let summary = "Add an FP8 k block's partial sums, scaled, to the accumulator";
  let description = [{
    `result[i] = acc[i] + partial[i] * a_scale[r, k_block] *
    b_scale[group, s, k_block]` for each element `i` of this thread's
    fragment of consumer warpgroup `warpgroup`'s tile (layout as in
    `moegpu.mma`), whose row `r` counts from `row + 64 * warpgroup` and
    column `c` from `col`: `s = c / 128`, or with `interleaved` (gate and
    up rows of B in blocks of 8, b_scale's gate blocks then its up blocks)
    `c / 256` for a gate column and that plus half of b_scale's blocks for
    an up column. Rows at or past `row_end` read the scale of row
    `row_end - 1` (they are not stored). A rank-2 `b_scale` (`[N, k
    blocks]`, the k-grouped weight gradient's) holds one scale per column:
    b's scale is `b_scale[c, k_block]`, columns past N reading column
    `N - 1`'s; `group` is then unused. `partial` is one k block's
    `moegpu.mma` (its own wgmma batch, complete). DeepGEMM's promotion: the
    tensor core's FP8 sums keep about 14 bits, the accumulator 24.
  }];
  let arguments = (ins VectorOfRankAndType<[1], [F32]>:$acc,
                       VectorOfRankAndType<[1], [F32]>:$partial,
                       AnyMemRef:$a_scale, AnyMemRef:$b_scale, Index:$group,
                       Index:$row, Index:$col, Index:$k_block,
                       Index:$warpgroup, Index:$row_end,
                       UnitAttr:$interleaved);
  let results = (outs VectorOfRankAndType<[1], [F32]>:$result);
  let assemblyFormat = [{
    $partial `into` $acc `scales` `(` $a_scale `,` $b_scale `)` `[` $group `,`
    $row `,` $col `,` $k_block `]` `,` `warpgroup` $warpgroup `,` `row_end`
    $row_end attr-dict `:` type($acc) `,` type($a_scale) `,` type($b_scale)
  }];
  let hasVerifier = 1;
}

def MoeGpu_ReleaseOp : MoeGpu_Op<"release"> {
  let summary = "Give back the slot of a pipeline iteration to the producer";
  let description = [{
    One thread of the warpgroup arrives on the `empty` barrier of iteration
    `iter`'s slot, whose wgmma group must be complete: after a later
    `moegpu.mma` with `pending = 1`, or with `drain`, which first waits for
    every wgmma group of the warpgroup (the end of a tile's k loop).
  }];
  let arguments = (ins MoeGpu_PipelineType:$pipeline, Index:$iter,
                       UnitAttr:$drain);
  let assemblyFormat = [{
    $pipeline `[` $iter `]` (`drain` $drain^)? attr-dict `:` type($pipeline)
  }];
}

def MoeGpu_DrainOp : MoeGpu_Op<"drain"> {
  let summary = "Wait for every wgmma group of the warpgroup";
  let description = [{
    `wgmma.wait_group 0`: the accumulator may be read after it on every
    path. A k-grouped tile that ran no k block has no slot to release, so
    it drains here and releases its last slot (if any) under a condition.
  }];
  let arguments = (ins MoeGpu_PipelineType:$pipeline);
  let assemblyFormat = "$pipeline attr-dict `:` type($pipeline)";
}

def MoeGpu_StoreTileOp : MoeGpu_Op<"store_tile", [AttrSizedOperandSegments]> {
  let summary = "Apply the epilogue to a warpgroup's fragment and store it";
  let description = [{
    Stores this thread's part of consumer warpgroup `warpgroup`'s `64 x n`
    tile (fragment layout as in `moegpu.mma`) at rows from
    `row + 64 * warpgroup`, columns from `col`, skipping rows at or past
    `row_end` and columns past `c`'s width. With `swiglu`, fragment columns
    come in interleaved gate/up blocks of 8 and the stored column is
    `col / 2 + ...`; with `row_scale` each row is multiplied by
    `scale[row]`. A rank-3 `c` (a k-grouped GEMM's `[E, M, N]`) is indexed
    by `group` first. `bias`, `alpha`, `limit` and `rounded_inputs` are
    the grouped GEMM's; the tile's rows are of group `expert`.
  }];
  let arguments = (ins VectorOfRankAndType<[1], [F32]>:$acc,
                       MoeGpu_InOut:$c, Optional<Index>:$group,
                       Index:$row, Index:$col, Index:$warpgroup, Index:$row_end,
                       MoeGpu_OptIn:$scale,
                       MoeGpu_OptIn:$bias,
                       Optional<Index>:$expert,
                       DefaultValuedAttr<MoeGpu_EpilogueAttr,
                           "::mlir::moegpu::Epilogue::None">:$epilogue,
                       OptionalAttr<F64Attr>:$alpha,
                       OptionalAttr<F64Attr>:$limit,
                       UnitAttr:$rounded_inputs);
  let assemblyFormat = [{
    $acc `,` $c `[` custom<TileIndices>($group, $row, $col) `]` `,` `warpgroup` $warpgroup `,`
    `row_end` $row_end (`scale` $scale^)?
    (`bias` `(` $bias^ `[` $expert `]` `:` type($bias) `)`)?
    attr-dict `:` type($acc) `,` type($c) (`,` type($scale)^)?
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// The schedule: what the runtime allocates and runs
//===----------------------------------------------------------------------===//

def MoeGpu_ProgramOp : MoeGpu_Op<"program", [
    SymbolTable, NoTerminator, SingleBlock, NoRegionArguments]> {
  let summary = "The buffers and launch sequences of a compiled layer";
  let description = [{
    What `convert-moe-to-moegpu` leaves beside the kernels' `gpu.module`:
    the device buffers (`moegpu.buffer`) and one `moegpu.schedule` per
    entry point (`forward`; with a training step `train`, up to the
    gradients and the check of the update, and `update`, which updates the
    state in place and which the runtime runs only for a finite step). The sm_90a
    target turns it into the bundle's manifest (`GpuProgram` in
    moe/runtime/Bundle.h) and erases it before the kernels become PTX.

    ```mlir
    moegpu.program {
      moegpu.buffer @x : memref<?x64xbf16> dims [#moegpu.dim<tokens>] source "input"
      moegpu.schedule "forward" {
        moegpu.launch @moe_kernels::@route(@x, @router) grid <tokens, per_block = 4> block 128
      }
    }
    ```
  }];
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "attr-dict-with-keyword $body";
  let hasRegionVerifier = 1;
  let skipDefaultBuilders = 1;
  let builders = [OpBuilder<(ins)>];
}

def MoeGpu_BufferOp : MoeGpu_Op<"buffer", [
    Symbol, HasParent<"ProgramOp">]> {
  let summary = "A device buffer of the schedule";
  let description = [{
    `type`'s dynamic dimensions are sized at run time, in order, by `dims`
    (the token count, the dispatched-row capacity, or the rows an
    expert-parallel rank can receive). `source` says where its contents
    come from: `input`, `output`, `scratch`, `tokens` (one i32, the
    pass's token count, which the runtime writes), `param:<role>` (a layer
    parameter), `pack:<gate role>,<up role>` (gate and up weights
    interleaved in blocks of 8 rows), `concat:<gate role>,<up role>` (the
    gate's FP8 block scales, then the up's, along the second to last
    dimension) or `arg:<name>` (an argument of the training step).
  }];
  let arguments = (ins SymbolNameAttr:$sym_name,
                       TypeAttrOf<AnyMemRef>:$type,
                       TypedArrayAttrBase<MoeGpu_BufferDimAttr,
                                          "buffer dimensions">:$dims,
                       StrAttr:$source);
  let assemblyFormat = [{
    $sym_name `:` $type `dims` $dims `source` $source attr-dict
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    ::mlir::MemRefType getMemRefType() {
      return ::llvm::cast<::mlir::MemRefType>(getType());
    }
  }];
}

def MoeGpu_ScheduleOp : MoeGpu_Op<"schedule", [
    HasParent<"ProgramOp">, NoTerminator, SingleBlock, NoRegionArguments]> {
  let summary = "The steps of one entry point, in order";
  let description = [{
    `forward` (one forward pass), `train` (one training step up to its
    verdict), `update` (the step's update, where it is finite) or
    `backward` (a framework's backward pass: the forward pass again, then
    the gradients from the caller's dy): launches, memsets and, for sharded
    layers, exchanges and all-reduces, run in order on the compute stream
    (collectives on the communicator's).
  }];
  let arguments = (ins StrAttr:$entry);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "$entry attr-dict-with-keyword $body";
  let hasVerifier = 1;
  let skipDefaultBuilders = 1;
  let builders = [OpBuilder<(ins "::llvm::StringRef":$entry)>];
}

class MoeGpu_StepOp<string mnemonic, list<Trait> traits = []>
    : MoeGpu_Op<mnemonic, !listconcat(traits, [
          HasParent<"ScheduleOp">,
          DeclareOpInterfaceMethods<SymbolUserOpInterface>])>;

def MoeGpu_LaunchOp : MoeGpu_StepOp<"launch"> {
  let summary = "Launch a kernel on buffers";
  let description = [{
    Launches `kernel` (a `gpu.func` of the kernels' `gpu.module`) with the
    buffers `args` as its leading memref arguments (tensor-map pointers the
    lowering adds come after them), on a grid sized by `grid` and `block`
    threads per CTA (0: the kernel's own, from its `#moegpu.kernel_launch`).
    A launch with a `chunk` works on that token chunk's share of its
    buffers only (a chunked expert-parallel exchange's rows): it waits for
    that chunk's exchanges, not the other chunks'.

    A launch or an exchange with a `transport` is one of two ways of
    moving a sharded pass's rows, and the runtime runs the steps of the
    one it chose for its communicator and skips the other's: `lsa`, the
    device-initiated exchange kernels over symmetric memory (one node's
    NVLink domain), or `nccl`, the host-driven exchanges. Steps without
    one always run.
  }];
  let arguments = (ins SymbolRefAttr:$kernel, FlatSymbolRefArrayAttr:$args,
                       MoeGpu_GridAttr:$grid, I64Attr:$block,
                       OptionalAttr<I64Attr>:$chunk,
                       OptionalAttr<MoeGpu_TransportAttr>:$transport);
  let assemblyFormat = [{
    $kernel $args `grid` $grid `block` $block attr-dict
  }];
}

def MoeGpu_MemsetOp : MoeGpu_StepOp<"memset"> {
  let summary = "Zero a buffer (its whole capacity)";
  let arguments = (ins FlatSymbolRefAttr:$buffer);
  let assemblyFormat = "$buffer attr-dict";
}

def MoeGpu_ExchangeOp : MoeGpu_StepOp<"exchange"> {
  let summary = "An expert-parallel exchange of rows between the ranks";
  let description = [{
    `dispatch` takes `[offsets, rows, row_weight, ep_offsets,
    ep_group_offsets, ep_rows, ep_row_weight]`: every expert's segment of
    rows and weights goes to its rank, which lays them out by (local expert,
    source rank); `combine` takes `[ep_offsets, ep_down, offsets, down]`:
    back; `dispatch_rows` and `combine_rows` take `[from, to]`: other rows
    of the last dispatch's segments, either way.

    Chunked exchanges (`--ep-chunks`): `dispatch_plan` takes `[offsets,
    ep_offsets, ep_group_offsets of chunk 0, ..., of chunk C - 1]`, where
    `offsets` are the dispatched segments of (chunk, expert) pairs,
    chunk-major; it exchanges every chunk's sizes (the one point where the
    host waits for the device) and lays out what each chunk brings after
    the chunk before. Then `dispatch_rows` and `combine_rows` with a
    `chunk` move that chunk's segments only, on the communicator's stream.
  }];
  let arguments = (ins MoeGpu_ExchangeKindAttr:$kind,
                       FlatSymbolRefArrayAttr:$args,
                       OptionalAttr<I64Attr>:$chunk,
                       OptionalAttr<MoeGpu_TransportAttr>:$transport);
  let assemblyFormat = "$kind $args attr-dict";
  let hasVerifier = 1;
}

def MoeGpu_AllReduceOp : MoeGpu_StepOp<"all_reduce"> {
  let summary = "Sum f32 buffers over the ranks, in place";
  let arguments = (ins FlatSymbolRefArrayAttr:$args);
  let assemblyFormat = "$args attr-dict";
}

#endif // MOE_DIALECT_MOEGPU_MOEGPUOPS_TD
