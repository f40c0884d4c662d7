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
  /// up projections, the SwiGLU activation and the down projection of the
  /// dispatched rows.
  Value scores, rows, offsets, rowMap, gate, up, act, down;
};

/// Emits the primitives of `layer` at the builder's insertion point (the
/// layer itself is left in place). `alignment` must be a power of two.
DecomposedLayer decomposeLayer(OpBuilder &builder, LayerOp layer,
                               int64_t alignment);

} // namespace mlir::moe

#endif // MOE_TRANSFORMS_DECOMPOSELAYER_H
