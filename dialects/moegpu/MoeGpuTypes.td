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
  }];
  let parameters = (ins "TileAttr":$tile, "Type":$element_type);
  let assemblyFormat = "`<` $tile `,` $element_type `>`";
}

#endif // MOE_DIALECT_MOEGPU_MOEGPUTYPES_TD
