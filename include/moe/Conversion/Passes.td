//===- Passes.td - Conversion passes of moe-compiler -------*- tablegen -*-===//
//
// Part of moe-compiler.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_CONVERSION_PASSES_TD
#define MOE_CONVERSION_PASSES_TD

include "mlir/Pass/PassBase.td"

def ConvertMoeToHost : Pass<"convert-moe-to-host"> {
  let summary = "Lower moe primitives to linalg, scf, arith and math for the "
                "host (CPU) target";
  let description = [{
    Rewrites every moe primitive into upstream dialects on tensors, ready for
    one-shot bufferization:

    - `moe.router`, `moe.swiglu`, `moe.shared_expert` become
      `linalg.generic` ops (GEMMs with the weight transposed, softmax or
      sigmoid, SwiGLU), accumulating in f32;
    - `moe.topk`, `moe.dispatch`, `moe.grouped_matmul` and `moe.combine`,
      whose access patterns depend on the routing, become `scf.for` loops
      over buffers (`bufferization.to_buffer` of the operands, fresh
      `memref.alloc` results returned through `bufferization.to_tensor`);
    - `moe.all_to_all` with `ep_size = 1` is the identity.

    `moe.layer` must be decomposed first (`moe-decompose-layer`), and an
    all-to-all over several ranks needs the distributed runtime; both are
    reported as errors. Expert ids outside `[0, experts)` reaching
    `moe.dispatch` are dropped (their row map entry is -1) and `moe.combine`
    skips row map entries outside the buffer, so no input makes the
    generated code read or write out of bounds.
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect", "::mlir::bufferization::BufferizationDialect",
    "::mlir::linalg::LinalgDialect", "::mlir::math::MathDialect",
    "::mlir::memref::MemRefDialect", "::mlir::scf::SCFDialect",
    "::mlir::tensor::TensorDialect"
  ];
}

#endif // MOE_CONVERSION_PASSES_TD
