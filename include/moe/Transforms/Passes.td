//===- Passes.td - Transformation passes of moe-compiler ---*- tablegen -*-===//
//
// Part of moe-compiler.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_TRANSFORMS_PASSES_TD
#define MOE_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def MoeDecomposeLayer : Pass<"moe-decompose-layer"> {
  let summary = "Decompose moe.layer into its routing, expert and combine "
                "primitives";
  let description = [{
    Rewrites every `moe.layer` into the primitives of the dialect:

    ```
    %scores     = moe.router %x, %wr            (scoring of the config)
    %ids, %w    = moe.topk %scores [bias(%b)]   (group-limited top-k)
    %rows, %offsets, %map = moe.dispatch %x, %ids
    %g = moe.grouped_matmul %rows, %w_gate, %offsets
    %u = moe.grouped_matmul %rows, %w_up, %offsets
    %a = moe.swiglu %g, %u
    %d = moe.grouped_matmul %a, %w_down, %offsets
    %y = moe.combine %d, %map, %w
    %s = moe.shared_expert %x, ...              (when the layer has one)
    %out = arith.addf %y, %s
    ```

    Each expert's segment of the dispatched buffer is padded to `alignment`
    rows (the M block of the grouped GEMM). A layer's `partition` moves to
    the enclosing function as the `moe.sm_partition` attribute; two layers of
    one function with different partitions are an error.
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::tensor::TensorDialect"];
  let options = [
    Option<"alignment", "alignment", "int64_t", /*default=*/"128",
           "Rows each expert's segment of the dispatched buffer is padded "
           "to (a power of two: the grouped GEMM's M block)">
  ];
}

#endif // MOE_TRANSFORMS_PASSES_TD
