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
      I32EnumAttrCase<"RowScale", 2, "row_scale">
    ]> {
  let cppNamespace = "::mlir::moegpu";
  let genSpecializedAttr = 0;
}

def MoeGpu_EpilogueAttr : EnumAttr<MoeGpu_Dialect, MoeGpu_Epilogue,
                                   "epilogue"> {
  let assemblyFormat = "`<` $value `>`";
}

def MoeGpu_TileAttr : AttrDef<MoeGpu_Dialect, "Tile"> {
  let mnemonic = "tile";
  let summary = "Tile shape and pipeline depth of a warp-specialized GEMM";
  let description = [{
    `m x n` output tile per CTA, `k` columns of A and B per pipeline stage,
    `stages` shared-memory stages. `m / 64` consumer warpgroups each own 64
    rows (one `wgmma` M); `k = 64` bf16/f16 elements is one 128-byte
    swizzle atom per row.

    ```mlir
    #moegpu.tile<m = 128, n = 128, k = 64, stages = 6>
    ```
  }];
  let parameters = (ins "int64_t":$m, "int64_t":$n, "int64_t":$k,
                        "int64_t":$stages);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// Consumer warpgroups: one per 64 rows.
    int64_t getConsumers() const { return getM() / 64; }
    /// Bytes of one stage's A (m x k) and B (n x k) tiles, 2-byte elements.
    int64_t getABytes() const { return getM() * getK() * 2; }
    int64_t getBBytes() const { return getN() * getK() * 2; }
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

#endif // MOE_DIALECT_MOEGPU_MOEGPUATTRS_TD
