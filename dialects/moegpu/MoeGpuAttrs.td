//===- MoeGpuAttrs.td - Attributes of the moegpu dialect ---*- tablegen -*-===//
//
// Part of moe-compiler.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_DIALECT_MOEGPU_MOEGPUATTRS_TD
#define MOE_DIALECT_MOEGPU_MOEGPUATTRS_TD

include "moegpu/MoeGpuDialect.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"

//===----------------------------------------------------------------------===//
// Attributes
//===----------------------------------------------------------------------===//

def MoeGpu_Epilogue : I32EnumAttr<"Epilogue",
    "what a grouped GEMM does to its f32 accumulator before storing it", [
      I32EnumAttrCase<"None", 0, "none">,
      I32EnumAttrCase<"SwiGLU", 1, "swiglu">,
      I32EnumAttrCase<"RowScale", 2, "row_scale">,
      I32EnumAttrCase<"Accumulate", 3, "accumulate">
    ]> {
  let cppNamespace = "::mlir::moegpu";
  let genSpecializedAttr = 0;
}

def MoeGpu_EpilogueAttr : EnumAttr<MoeGpu_Dialect, MoeGpu_Epilogue,
                                   "epilogue"> {
  let assemblyFormat = "`<` $value `>`";
}

def MoeGpu_GemmLayout : I32EnumAttr<"GemmLayout",
    "which dimension of a grouped GEMM's operands is contiguous", [
      I32EnumAttrCase<"NT", 0, "nt">,
      I32EnumAttrCase<"NN", 1, "nn">,
      I32EnumAttrCase<"TN", 2, "tn">
    ]> {
  let cppNamespace = "::mlir::moegpu";
  let genSpecializedAttr = 0;
}

def MoeGpu_GemmLayoutAttr : EnumAttr<MoeGpu_Dialect, MoeGpu_GemmLayout,
                                     "layout"> {
  let assemblyFormat = "`<` $value `>`";
}

def MoeGpu_TileAttr : AttrDef<MoeGpu_Dialect, "Tile"> {
  let mnemonic = "tile";
  let summary = "Tile shape and pipeline depth of a warp-specialized GEMM";
  let description = [{
    `m x n` output tile per CTA, `k` columns of A and B per pipeline stage,
    `stages` shared-memory stages. `m / 64` consumer warpgroups each own 64
    rows (one `wgmma` M); a stage's row of A or B is one 128-byte swizzle
    atom: `k = 64` bf16/f16 elements, or `k = 128` e4m3 ones (one block of
    FP8 scales).

    `cluster = 2` (omitted when 1) pairs the CTAs of a cluster along M: the
    two take the M blocks 2i and 2i+1 of one N block, and each loads half
    of the shared B tile and multicasts it to both (TMA multicast), which
    halves B's traffic through L2 whenever both blocks belong to one group;
    when they do not, each loads its own B. The empty barriers of the two
    pipelines count both CTAs' consumers, so a slot is refilled only once
    both have read it.

    ```mlir
    #moegpu.tile<m = 128, n = 128, k = 64, stages = 6>
    #moegpu.tile<m = 128, n = 256, k = 64, stages = 4, cluster = 2>
    ```
  }];
  let parameters = (ins "int64_t":$m, "int64_t":$n, "int64_t":$k,
                        "int64_t":$stages,
                        DefaultValuedParameter<"int64_t", "1">:$cluster);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// Consumer warpgroups: one per 64 rows.
    int64_t getConsumers() const { return getM() / 64; }
    /// Bytes of one stage's A (m x k) and B (n x k) tiles: 128 per row.
    int64_t getABytes() const { return getM() * kStageRowBytes; }
    int64_t getBBytes() const { return getN() * kStageRowBytes; }
    /// Bytes of a stage's row of A or B (one 128-byte swizzle atom).
    static constexpr int64_t kStageRowBytes = 128;
    /// Bytes of an element of A and B: 2, or 1 with k = 128 (e4m3).
    int64_t getElementBytes() const { return kStageRowBytes / getK(); }
    int64_t getStageBytes() const { return getABytes() + getBBytes(); }
    /// Dynamic shared memory of the pipeline.
    int64_t getSharedMemoryBytes() const {
      return getStages() * getStageBytes();
    }
  }];
}

def MoeGpu_SmRangeAttr : AttrDef<MoeGpu_Dialect, "SmRange"> {
  let mnemonic = "sm_range";
  let summary = "The SMs a persistent kernel may occupy";
  let description = [{
    A persistent kernel launches exactly `count` CTAs, one per SM, and its
    tile scheduler strides over the tiles by `count`. `first` records where
    the range starts in the partition (compute SMs come first; the
    communication SMs follow them).

    ```mlir
    #moegpu.sm_range<first = 0, count = 112>
    ```
  }];
  let parameters = (ins "int64_t":$first, "int64_t":$count);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

//===----------------------------------------------------------------------===//
// The schedule's attributes (see moe/runtime/ScheduleAbi.h)
//===----------------------------------------------------------------------===//

def MoeGpu_GridKind : I32EnumAttr<"GridKind",
    "how many CTAs a launch of the schedule gets", [
      I32EnumAttrCase<"Tokens", 0, "tokens">,
      I32EnumAttrCase<"Assignments", 1, "assignments">,
      I32EnumAttrCase<"Rows", 2, "rows">,
      I32EnumAttrCase<"ReceivedRows", 3, "received_rows">,
      I32EnumAttrCase<"One", 4, "one">,
      I32EnumAttrCase<"Persistent", 5, "persistent">,
      I32EnumAttrCase<"Fixed", 6, "fixed">
    ]> {
  let cppNamespace = "::mlir::moegpu";
  let genSpecializedAttr = 0;
}

def MoeGpu_GridAttr : AttrDef<MoeGpu_Dialect, "Grid"> {
  let mnemonic = "grid";
  let summary = "How a launch's grid is sized at run time";
  let description = [{
    `tokens`: `ceil(T / per_block)` CTAs; `assignments`: `ceil(T * k /
    per_block)`; `rows` and `received_rows`: `ceil(capacity / per_block)`
    over the dispatched rows' (or an expert-parallel rank's received rows')
    capacity, one row per CTA when `per_block` is 0, and `size` CTAs a
    block of rows when set (`moegpu.quantize_columns`: a CTA per 32
    columns of each 128 rows); `one`: a single CTA; `persistent`: the
    kernel's own grid (its `#moegpu.sm_range`); `fixed`: `size` CTAs.

    ```mlir
    #moegpu.grid<tokens, per_block = 4>
    #moegpu.grid<rows, per_block = 128, size = 56>
    #moegpu.grid<fixed, size = 112>
    ```
  }];
  let parameters = (ins EnumParameter<MoeGpu_GridKind>:$kind,
                        DefaultValuedParameter<"int64_t", "0">:$per_block,
                        DefaultValuedParameter<"int64_t", "0">:$size);
  let assemblyFormat = "`<` $kind (`,` struct($per_block, $size)^)? `>`";
  let genVerifyDecl = 1;
}

def MoeGpu_BufferDim : I32EnumAttr<"BufferDim",
    "what a buffer's dynamic dimension stands for", [
      I32EnumAttrCase<"Tokens", 0, "tokens">,
      I32EnumAttrCase<"Rows", 1, "rows">,
      I32EnumAttrCase<"ReceivedRows", 2, "received_rows">,
      I32EnumAttrCase<"RowBlocks", 3, "row_blocks">,
      I32EnumAttrCase<"ReceivedRowBlocks", 4, "received_row_blocks">
    ]> {
  let cppNamespace = "::mlir::moegpu";
  let genSpecializedAttr = 0;
}

def MoeGpu_BufferDimAttr : EnumAttr<MoeGpu_Dialect, MoeGpu_BufferDim, "dim"> {
  let assemblyFormat = "`<` $value `>`";
}

def MoeGpu_ExchangeKind : I32EnumAttr<"ExchangeKind",
    "an expert-parallel exchange between the launches", [
      I32EnumAttrCase<"Dispatch", 0, "dispatch">,
      I32EnumAttrCase<"Combine", 1, "combine">,
      I32EnumAttrCase<"DispatchRows", 2, "dispatch_rows">,
      I32EnumAttrCase<"CombineRows", 3, "combine_rows">,
      I32EnumAttrCase<"DispatchPlan", 4, "dispatch_plan">
    ]> {
  let cppNamespace = "::mlir::moegpu";
  let genSpecializedAttr = 0;
}

def MoeGpu_ExchangeKindAttr : EnumAttr<MoeGpu_Dialect, MoeGpu_ExchangeKind,
                                       "exchange"> {
  let assemblyFormat = "`<` $value `>`";
}

def MoeGpu_Transport : I32EnumAttr<"Transport",
    "how a step's expert-parallel exchange moves rows", [
      I32EnumAttrCase<"Lsa", 0, "lsa">,
      I32EnumAttrCase<"Nccl", 1, "nccl">
    ]> {
  let cppNamespace = "::mlir::moegpu";
  let genSpecializedAttr = 0;
}

def MoeGpu_TransportAttr : EnumAttr<MoeGpu_Dialect, MoeGpu_Transport,
                                    "transport"> {
  let assemblyFormat = "`<` $value `>`";
}

def MoeGpu_KernelLaunchAttr : AttrDef<MoeGpu_Dialect, "KernelLaunch"> {
  let mnemonic = "kernel_launch";
  let summary = "Launch configuration a lowered kernel was built for";
  let description = [{
    Set on a `gpu.func` by `convert-moegpu-to-nvgpu`: the grid of a
    persistent kernel (0 when the schedule sizes it), the CTA size, the
    dynamic shared memory in bytes and, for a GEMM, its tile.

    ```mlir
    #moegpu.kernel_launch<grid = 132, block = 384, smem = 229376,
                          tile = #moegpu.tile<m = 128, n = 128, k = 64, stages = 7>>
    ```
  }];
  let parameters = (ins "int64_t":$grid, "int64_t":$block, "int64_t":$smem,
                        OptionalParameter<"::mlir::moegpu::TileAttr">:$tile);
  let assemblyFormat = "`<` struct(params) `>`";
}

def MoeGpu_TensorMapAttr : AttrDef<MoeGpu_Dialect, "TensorMap"> {
  let mnemonic = "tensor_map";
  let summary = "A TMA descriptor the runtime encodes for a kernel argument";
  let description = [{
    Kernel parameter `arg` is a pointer to the 128-byte map of the buffer
    passed as argument `source`, viewed as `view` rows x columns (rows -1,
    or columns -1 beside static rows: the buffer's), loaded in boxes of
    `box`, with a `swizzle`-byte swizzle.

    ```mlir
    #moegpu.tensor_map<arg = 4, source = 0, view = [-1, 7168], box = [128, 64], swizzle = 128>
    ```
  }];
  let parameters = (ins "int64_t":$arg, "int64_t":$source,
                        ArrayRefParameter<"int64_t">:$view,
                        ArrayRefParameter<"int64_t">:$box, "int64_t":$swizzle);
  let assemblyFormat = [{
    `<` `arg` `=` $arg `,` `source` `=` $source `,` `view` `=` `[` $view `]`
    `,` `box` `=` `[` $box `]` `,` `swizzle` `=` $swizzle `>`
  }];
}

#endif // MOE_DIALECT_MOEGPU_MOEGPUATTRS_TD
