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

/// The expert computation of one chunk of a layer's tokens (all of them
/// unless the layer exchanges its tokens in several chunks).
struct ExpertChunk {
  /// The chunk's first token and token count; null for a single chunk.
  Value begin, size;
  /// The dispatched rows, `[E + 1]` expert offsets and `[T, k]` row map.
  Value rows, offsets, rowMap;
  /// The rows this rank's experts compute, their `[E + 1]` offsets by
  /// (local expert, source rank) and the `[E / ep + 1]` offsets of the
  /// local experts. Without expert parallelism: rows, offsets, offsets.
  Value localRows, recvOffsets, localOffsets;
  /// The gate and up projections and the SwiGLU activation of the local
  /// rows, and their down projection back in dispatch order.
  Value gate, up, act, down;
};

/// The values a decomposed layer produces.
struct DecomposedLayer {
  /// The layer's output, of the layer's result type.
  Value output;
  /// `[T, k]` i32 expert ids and f32 routing weights from `moe.topk`.
  Value indices;
  Value weights;
  /// `[T, E]` f32 router scores.
  Value scores;
  /// The intermediates of the experts (what a backward pass needs).
  SmallVector<ExpertChunk> chunks;
};

/// Every `ep`-th entry of the `[E + 1]` offsets an all-to-all dispatch
/// returns: the `[E / ep + 1]` offsets of this rank's experts.
Value localExpertOffsets(OpBuilder &builder, Location loc, Value recvOffsets,
                         int64_t ep);

/// `floor(chunk * tokens / chunks)`: the first token of a chunk.
Value chunkBound(OpBuilder &builder, Location loc, Value tokens, int64_t chunk,
                 int64_t chunks);
/// A tensor.empty of `tensor`'s type, its dynamic sizes taken from it.
Value emptyLike(OpBuilder &builder, Location loc, Value tensor);
/// Rows `[begin, begin + size)` of a rank-2 tensor, and the reverse.
Value sliceRows(OpBuilder &builder, Location loc, Value tensor, Value begin,
                Value size);
Value insertRows(OpBuilder &builder, Location loc, Value part, Value whole,
                 Value begin);

/// All-to-alls of several chunks: one blocking `moe.all_to_all` for a
/// single chunk; otherwise every chunk's `moe.all_to_all_start` now and its
/// wait in finishExchange.
struct ExchangeStarts {
  SmallVector<Value> outputs, handles, outputOffsets;
  SmallVector<Type> types;
};
ExchangeStarts startExchange(OpBuilder &builder, Location loc,
                             ArrayRef<Value> inputs, ArrayRef<Value> offsets,
                             int64_t ep, AllToAllKind kind);
Value finishExchange(OpBuilder &builder, Location loc,
                     const ExchangeStarts &starts, size_t chunk);

/// Emits the primitives of `layer` at the builder's insertion point (the
/// layer itself is left in place). `alignment` must be a power of two.
DecomposedLayer decomposeLayer(OpBuilder &builder, LayerOp layer,
                               int64_t alignment);

} // namespace mlir::moe

#endif // MOE_TRANSFORMS_DECOMPOSELAYER_H
