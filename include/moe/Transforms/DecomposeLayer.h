//===- DecomposeLayer.h - moe.layer to its primitives -----------*- C++ -*-===//
//
// Part of moe-compiler.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_TRANSFORMS_DECOMPOSELAYER_H
#define MOE_TRANSFORMS_DECOMPOSELAYER_H

#include "moe/MoeOps.h"

#include "mlir/IR/Builders.h"

namespace mlir::moe {

/// The values a decomposed layer produces.
struct DecomposedLayer {
  /// The layer's output, of the layer's result type.
  Value output;
  /// `[T, k]` i32 expert ids and f32 routing weights from `moe.topk`.
  Value indices;
  Value weights;
  /// The intermediates (what a backward pass needs): `[T, E]` f32 router
  /// scores; the dispatched rows, expert offsets and row map; the gate and
  /// up projections and the SwiGLU activation of the rows this rank's
  /// experts compute, and their down projection back in dispatch order.
  Value scores, rows, offsets, rowMap, gate, up, act, down;
  /// The rows this rank's experts compute, their `[E + 1]` offsets by
  /// (local expert, source rank) and the `[E / ep + 1]` offsets of the
  /// local experts. Without expert parallelism: rows, offsets, offsets.
  Value localRows, recvOffsets, localOffsets;
};

/// Every `ep`-th entry of the `[E + 1]` offsets an all-to-all dispatch
/// returns: the `[E / ep + 1]` offsets of this rank's experts.
Value localExpertOffsets(OpBuilder &builder, Location loc, Value recvOffsets,
                         int64_t ep);

/// Emits the primitives of `layer` at the builder's insertion point (the
/// layer itself is left in place). `alignment` must be a power of two.
DecomposedLayer decomposeLayer(OpBuilder &builder, LayerOp layer,
                               int64_t alignment);

} // namespace mlir::moe

#endif // MOE_TRANSFORMS_DECOMPOSELAYER_H
