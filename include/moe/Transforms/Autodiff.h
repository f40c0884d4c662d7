//===- Autodiff.h - Backward pass of an MoE layer ---------------*- C++ -*-===//
//
// Part of moe-compiler.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_TRANSFORMS_AUTODIFF_H
#define MOE_TRANSFORMS_AUTODIFF_H

#include "moe/Transforms/DecomposeLayer.h"

#include <string>
#include <vector>

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
/// whose config's getUntrainable() is not empty (sparsemixer routing) is
/// not supported (moe-autodiff reports it).
LayerGradients buildLayerBackward(OpBuilder &b, LayerOp layer,
                                  const DecomposedLayer &forward, Value dy);

/// One argument of the training step, in order: `x` (the layer's element
/// type) and `target` (f32), both [T, hidden]; `hyper` (8 f32, TrainHyper:
/// learning rate, step number from 1, beta1, beta2, epsilon, weight decay,
/// the bias update rate gamma, every rank's token count); per trained
/// weight `W` (router, gate, up, down, shared gate, up, down) its f32
/// master copy `W`, AdamW moments `W.m` and `W.v`; `score_bias` when the layer
/// has one; then the outputs: `score_bias.next`, `loss` ([1]), `load` ([E],
/// tokens routed to each expert), `x.grad` ([T, hidden] f32), `W.grad`
/// (f32), `grad_sq` and `bad_updates`.
struct TrainArgument {
  std::string name;
  bool output = false;
  RankedTensorType type;
};

/// The trained weights of `layer` by name (router, gate, up, down, then the
/// shared experts' gate, up, down), in the order buildLayerBackward returns
/// their gradients.
SmallVector<std::pair<StringRef, Value>> listTrainedWeights(LayerOp layer);

/// Entries of a training step's `hyper` argument.
enum TrainHyper {
  kHyperLearningRate,
  kHyperStep,
  kHyperBeta1,
  kHyperBeta2,
  kHyperEpsilon,
  kHyperWeightDecay,
  kHyperGamma,
  /// Every rank's tokens in the step: the sm_90a step reads it (the
  /// runtime fills it), the host step counts them itself.
  kHyperTokens,
  kHyperCount = 8
};

/// The arguments of a training step of `layer`: the host's `moe_train_step`
/// takes these. It computes the gradients but changes no state: AdamW
/// updates the weights and moments in place afterwards, in a second entry
/// (listTrainUpdateArguments) that the runtime runs once the step is known
/// finite; only the score bias's update comes out, as `score_bias.next`.
/// The last two outputs hold, per trained weight (in the order of the
/// `.grad` outputs), `grad_sq`, the sum of its gradient's squares, and
/// `bad_updates`, how many of its values the update would make
/// non-finite. AdamW's moments `W.m` and `W.v` are of `momentType` (f32
/// when null, or bf16); every other state is f32.
std::vector<TrainArgument> listTrainArguments(LayerOp layer,
                                              Type momentType = {});

/// The arguments of the host's `moe_train_update`, the AdamW update of a
/// finite step: `hyper`, then per trained weight W, `W`, `W.m` and `W.v`
/// (updated in place) and `W.grad` (the step's gradient output). All are
/// inputs; there are no outputs. The moments are of `momentType`, as in
/// listTrainArguments.
std::vector<TrainArgument> listTrainUpdateArguments(LayerOp layer,
                                                    Type momentType = {});

/// The arguments of the sm_90a training step, which keeps its state on the
/// device and updates it in place (a second schedule, "update", run once
/// the step is known finite): those of listTrainArguments without
/// `score_bias.next` (`bad_updates` counts the values the update would
/// make non-finite). The moments are of `momentType`, as in
/// listTrainArguments.
std::vector<TrainArgument> listDeviceTrainArguments(LayerOp layer,
                                                    Type momentType = {});

/// The arguments of the layer's vector-Jacobian product (the host's
/// `moe_backward`, for frameworks whose autograd calls it): `x` (the
/// layer's element type) and `dy` (f32), both [T, hidden]; each trained
/// weight `W` (f32, in listTrainedWeights' order) and `score_bias` when the
/// layer has one; then the outputs `x.grad` ([T, hidden] f32) and `W.grad`
/// (f32).
std::vector<TrainArgument> listBackwardArguments(LayerOp layer);

/// The arguments of the sm_90a backward pass (the "backward" schedule):
/// those of listBackwardArguments less the weights, which are the forward
/// pass's own buffers on the device (the layer's bound parameters): `x`,
/// `dy`, `x.grad` and each `W.grad`.
std::vector<TrainArgument> listDeviceBackwardArguments(LayerOp layer);

} // namespace mlir::moe

#endif // MOE_TRANSFORMS_AUTODIFF_H
