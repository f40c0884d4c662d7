//===- Autodiff.h - Backward pass of an MoE layer ---------------*- C++ -*-===//
//
// Part of moe-compiler.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_TRANSFORMS_AUTODIFF_H
#define MOE_TRANSFORMS_AUTODIFF_H

#include "moe/Transforms/DecomposeLayer.h"

namespace mlir::moe {

/// The gradients of a layer's loss: `input` has the type of the layer's
/// input; `weights` are f32, for the router, gate, up and down weights and,
/// with shared experts, the shared gate, up and down weights.
struct LayerGradients {
  Value input;
  SmallVector<Value> weights;
};

/// Emits, at the builder's insertion point, the backward primitives of
/// `layer` whose forward primitives `forward` decomposeLayer emitted, for
/// the gradient `dy` of a loss with respect to the layer's output. A layer
/// with a shared-expert gate is not supported (moe-autodiff reports it).
LayerGradients buildLayerBackward(OpBuilder &b, LayerOp layer,
                                  const DecomposedLayer &forward, Value dy);

} // namespace mlir::moe

#endif // MOE_TRANSFORMS_AUTODIFF_H
