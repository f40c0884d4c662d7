//===- MoeGpuDialect.td - The moegpu dialect ---------------*- tablegen -*-===//
//
// Part of moe-compiler.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_DIALECT_MOEGPU_MOEGPUDIALECT_TD
#define MOE_DIALECT_MOEGPU_MOEGPUDIALECT_TD

include "mlir/IR/OpBase.td"

def MoeGpu_Dialect : Dialect {
  let name = "moegpu";
  let cppNamespace = "::mlir::moegpu";
  let summary = "Kernel-level structure of Hopper MoE kernels";
  let description = [{
    The `moegpu` dialect says what a Hopper (sm_90a) kernel of an MoE layer
    is made of, above the level of single instructions:

    - `moegpu.grouped_gemm`: the whole per-expert GEMM over an
      expert-contiguous buffer, with its tile shape (`#moegpu.tile`), the SMs
      it may occupy (`#moegpu.sm_range`) and a fused epilogue;
    - after `moegpu-warp-specialize`: a shared-memory pipeline
      (`moegpu.pipeline.create`, full/empty barrier pairs per stage), warp
      roles with register budgets (`moegpu.warp_roles`: one TMA producer
      warpgroup, consumer warpgroups issuing wgmma), the persistent tile
      scheduler (`moegpu.tile_loop`) in each role, and the role's steps
      (`moegpu.produce`, `moegpu.mma`, `moegpu.store_tile`).

    `convert-moegpu-to-nvgpu` lowers all of it to `gpu`, `nvgpu` (TMA,
    mbarriers), `nvvm` (wgmma, setmaxnreg), `memref`, `scf` and `arith`.

    Operands are memrefs in global memory; the B operand (expert weights) is
    `[E, N, K]`, K contiguous, as in Hugging Face checkpoints, which is the
    K-major layout wgmma reads without transposition.
  }];
  let useDefaultAttributePrinterParser = 1;
  let useDefaultTypePrinterParser = 1;
}

class MoeGpu_Op<string mnemonic, list<Trait> traits = []>
    : Op<MoeGpu_Dialect, mnemonic, traits>;

#endif // MOE_DIALECT_MOEGPU_MOEGPUDIALECT_TD
