//===- MoeGpuTypes.td - Types of the moegpu dialect --------*- tablegen -*-===//
//
// Part of moe-compiler.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_DIALECT_MOEGPU_MOEGPUTYPES_TD
#define MOE_DIALECT_MOEGPU_MOEGPUTYPES_TD

include "moegpu/MoeGpuAttrs.td"
include "mlir/IR/AttrTypeBase.td"

//===----------------------------------------------------------------------===//
// Types
//===----------------------------------------------------------------------===//

def MoeGpu_PipelineType : TypeDef<MoeGpu_Dialect, "Pipeline"> {
  let mnemonic = "pipeline";
  let summary = "A multi-stage shared-memory pipeline of A/B tiles";
  let description = [{
    `stages` slots in dynamic shared memory, each holding one `m x k` A tile
    and one `n x k` B tile (128-byte swizzled, as TMA writes them and wgmma
    reads them), with a `full` barrier (the producer's TMA bytes landed) and
    an `empty` barrier (every consumer warpgroup released the slot) per
    slot. Pipeline iteration `i` uses slot `i % stages` in phase
    `(i / stages) % 2`. `element_type` is the 16-bit float type of A and B.

    `layout` says how the tiles sit in a slot (see `moegpu.grouped_gemm`):
    a K-major operand is `rows x k` with 128-byte rows of K; an MN-major
    one (B with `nn`, A and B with `tn`) is `rows / 64` boxes of `k x 64`,
    each row 64 elements of M or N, and wgmma reads it transposed.
  }];
  let parameters = (ins "TileAttr":$tile, "Type":$element_type,
                        DefaultValuedParameter<"GemmLayout",
                            "GemmLayout::NT">:$layout);
  let assemblyFormat = "`<` $tile `,` $element_type (`,` $layout^)? `>`";
  let extraClassDeclaration = [{
    /// A is read M-major (rows of M) and B N-major.
    bool isAMnMajor() const { return getLayout() == GemmLayout::TN; }
    bool isBMnMajor() const { return getLayout() != GemmLayout::NT; }
  }];
}

#endif // MOE_DIALECT_MOEGPU_MOEGPUTYPES_TD
