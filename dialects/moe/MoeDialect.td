//===- MoeDialect.td - The moe dialect ---------------------*- tablegen -*-===//
//
// Part of moe-compiler.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_DIALECT_MOE_MOEDIALECT_TD
#define MOE_DIALECT_MOE_MOEDIALECT_TD

include "mlir/IR/OpBase.td"

def Moe_Dialect : Dialect {
  let name = "moe";
  let cppNamespace = "::mlir::moe";
  let summary = "Graph-level Mixture-of-Experts layers and their primitives";
  let description = [{
    The `moe` dialect describes a Mixture-of-Experts (MoE) layer at tensor
    level. `moe.layer` carries the whole layer as one op with a
    `#moe.layer_config`; `moe-decompose-layer` rewrites it into the
    primitives the compiler schedules and lowers:

    ```
    moe.router -> moe.topk -> moe.dispatch -> moe.grouped_matmul (gate, up)
      -> moe.swiglu -> moe.grouped_matmul (down) -> moe.combine
    moe.shared_expert (dense, added to the routed output)
    ```

    `moe.all_to_all` is the expert-parallel exchange of dispatched rows.
    `#moe.sm_partition` records how many of the GPU's SMs the compute kernels
    may occupy and how many are left to communication.

    Weights use the layout of Hugging Face checkpoints: a projection from `K`
    to `N` features is stored as `[N, K]` (out, in), so `y = x * W^T`; the
    routed experts' weights are stacked along a leading expert dimension.
    The token count is dynamic (`?`); hidden, expert and FFN sizes are static.
  }];
  let useDefaultAttributePrinterParser = 1;
  let hasOperationAttrVerify = 1;
  let extraClassDeclaration = [{
    /// Name of the discardable attribute that carries a
    /// `#moe.sm_partition` on a function or module.
    static constexpr ::llvm::StringLiteral getSmPartitionAttrName() {
      return ::llvm::StringLiteral("moe.sm_partition");
    }
    /// Name of the discardable attribute with which the host lowering asks
    /// for a dynamic schedule of an `scf.parallel` loop (its only value,
    /// `"dynamic"`; see `convert-dynamic-parallel-to-openmp`).
    static constexpr ::llvm::StringLiteral getScheduleAttrName() {
      return ::llvm::StringLiteral("moe.schedule");
    }
    static constexpr ::llvm::StringLiteral getDynamicScheduleName() {
      return ::llvm::StringLiteral("dynamic");
    }
    /// Name of the discardable attribute that numbers each
    /// `bufferization.to_buffer` the host lowering reads a tensor through
    /// (an integer): CSE then never merges two of them, so each read stays
    /// where one-shot bufferization sees it.
    static constexpr ::llvm::StringLiteral getHostReadAttrName() {
      return ::llvm::StringLiteral("moe.host_read");
    }
  }];
}

/// Base class of every op of the dialect.
class Moe_Op<string mnemonic, list<Trait> traits = []>
    : Op<Moe_Dialect, mnemonic, traits>;

#endif // MOE_DIALECT_MOE_MOEDIALECT_TD
