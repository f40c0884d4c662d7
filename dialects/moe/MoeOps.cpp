//===- MoeOps.cpp - Operations of the moe dialect -------------------------===//
//
// Part of moe-compiler.
//
//===----------------------------------------------------------------------===//

#include "moe/MoeOps.h"
#include "moe/Support/Routing.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/TypeUtilities.h"

#include <cmath>
#include <limits>

using namespace mlir;
using namespace mlir::moe;

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

static constexpr int64_t kDynamic = ShapedType::kDynamic;

/// The InferTypeOpInterface check accepts any result types of the right
/// count: the verifiers compare them with the inferred ones themselves
/// (verifyResultTypes), which gives a message naming the result and the
/// mismatch instead of the interface's generic one.
static bool areCompatibleTensorTypes(TypeRange lhs, TypeRange rhs) {
  return lhs.size() == rhs.size();
}

/// Checks the results of `op` against the types inferred from its operands:
/// same element type, and shapes that agree wherever both are static (the
/// declared type may be more static, e.g. a static token count).
template <typename OpT> static LogicalResult verifyResultTypes(OpT op) {
  SmallVector<Type> inferred;
  typename OpT::Adaptor adaptor(op);
  if (failed(OpT::inferReturnTypes(op.getContext(), op.getLoc(), adaptor,
                                   inferred)))
    return op.emitOpError() << "could not infer its result types";
  for (auto [index, pair] :
       llvm::enumerate(llvm::zip(inferred, op->getResultTypes()))) {
    auto [want, got] = pair;
    auto wantTensor = cast<RankedTensorType>(want);
    auto gotTensor = cast<RankedTensorType>(got);
    if (wantTensor.getElementType() != gotTensor.getElementType() ||
        failed(verifyCompatibleShape(wantTensor, gotTensor)))
      return op.emitOpError()
             << "expected result #" << index << " to be compatible with "
             << want << " (inferred from the operands), got " << got;
  }
  return success();
}

static RankedTensorType getTensor(ArrayRef<int64_t> shape, Type elementType) {
  return RankedTensorType::get(shape, elementType);
}

static RankedTensorType asRanked(Value value) {
  return cast<RankedTensorType>(value.getType());
}

/// Returns `size` if it can be a tensor dimension, else a dynamic size (the
/// verifier reports the bad value).
static int64_t asDim(int64_t size) { return size >= 0 ? size : kDynamic; }

/// Picks the static one of two sizes that must agree.
static int64_t mergeDims(int64_t a, int64_t b) {
  return ShapedType::isDynamic(a) ? b : a;
}

/// Checks that `type` has a static size in each of `dims`.
static LogicalResult requireStaticDims(Operation *op, StringRef what,
                                       RankedTensorType type,
                                       ArrayRef<int64_t> dims) {
  for (int64_t dim : dims)
    if (type.isDynamicDim(dim))
      return op->emitOpError()
             << "expected " << what << " to have a static size in dim " << dim
             << ", got " << type;
  return success();
}

/// Checks dimension `dim` of `type` against an expected size; either may be
/// dynamic, in which case nothing is checked.
static LogicalResult expectDim(Operation *op, StringRef what,
                               RankedTensorType type, int64_t dim,
                               int64_t expected, StringRef meaning) {
  int64_t actual = type.getDimSize(dim);
  if (ShapedType::isDynamic(actual) || ShapedType::isDynamic(expected) ||
      actual == expected)
    return success();
  return op->emitOpError() << "expected " << what << " dim " << dim << " ("
                           << meaning << ") to be " << expected << ", got "
                           << actual;
}

static LogicalResult expectElementType(Operation *op, StringRef what,
                                       Type actual, Type expected) {
  if (actual == expected)
    return success();
  return op->emitOpError() << "expected " << what << " element type "
                           << expected << ", got " << actual;
}

/// Checks that `offsets` is a static `[experts + 1]` vector and returns the
/// number of experts it describes.
static FailureOr<int64_t> getExpertsFromOffsets(Operation *op,
                                                RankedTensorType offsets) {
  if (offsets.isDynamicDim(0) || offsets.getDimSize(0) < 2)
    return op->emitOpError()
           << "expected offsets of static size experts + 1 >= 2, got "
           << offsets;
  return offsets.getDimSize(0) - 1;
}

//===----------------------------------------------------------------------===//
// LayerOp
//===----------------------------------------------------------------------===//

LogicalResult
LayerOp::inferReturnTypes(MLIRContext *, std::optional<Location>,
                          Adaptor adaptor,
                          SmallVectorImpl<Type> &inferredReturnTypes) {
  inferredReturnTypes.push_back(adaptor.getInput().getType());
  return success();
}

bool LayerOp::isCompatibleReturnTypes(TypeRange l, TypeRange r) {
  return areCompatibleTensorTypes(l, r);
}

/// Checks an optional operand that must be present exactly when `required`.
static LogicalResult checkPresence(Operation *op, Value value, bool required,
                                   StringRef operand, StringRef condition) {
  if (required && !value)
    return op->emitOpError()
           << "expected a " << operand << " operand since " << condition;
  if (!required && value)
    return op->emitOpError()
           << "unexpected " << operand << " operand unless " << condition;
  return success();
}

/// Checks that `value` has exactly the static shape `shape` and element
/// type `elementType`.
static LogicalResult expectShape(Operation *op, StringRef what, Value value,
                                 ArrayRef<int64_t> shape, Type elementType) {
  auto type = asRanked(value);
  if (type.getShape() != shape) {
    std::string expected;
    llvm::raw_string_ostream os(expected);
    llvm::interleave(shape, os, "x");
    return op->emitOpError() << "expected " << what << " of shape [" << expected
                             << "], got " << type;
  }
  return expectElementType(op, what, type.getElementType(), elementType);
}

LogicalResult LayerOp::verify() {
  LayerConfigAttr config = getConfig();
  Operation *op = getOperation();
  int64_t h = config.getHidden(), e = config.getExperts(), f = config.getFfn(),
          s = config.getSharedFfnTotal();
  Type dtype = config.getDtype();

  auto input = asRanked(getInput());
  if (failed(expectDim(op, "input", input, 1, h, "hidden")))
    return failure();
  if (input.isDynamicDim(1))
    return op->emitOpError() << "expected a static hidden size, got " << input;
  // Token counts index 32-bit grids and row maps.
  if (!input.isDynamicDim(0) &&
      input.getDimSize(0) > std::numeric_limits<int32_t>::max())
    return op->emitOpError()
           << "expected at most 2147483647 tokens, got " << input.getDimSize(0);
  if (failed(expectElementType(op, "input", input.getElementType(), dtype)))
    return failure();

  auto router = asRanked(getRouterWeight());
  Type routerElt = router.getElementType();
  if (routerElt != dtype && !routerElt.isF32())
    return emitOpError() << "expected router weight element type f32 or "
                         << dtype << ", got " << routerElt;
  if (failed(expectShape(op, "router weight", getRouterWeight(), {e, h},
                         routerElt)))
    return failure();

  if (failed(checkPresence(op, getScoreBias(), config.getScoreBias(),
                           "score-correction bias", "score_bias = true")))
    return failure();
  if (getScoreBias() &&
      failed(expectShape(op, "score-correction bias", getScoreBias(), {e},
                         Float32Type::get(getContext()))))
    return failure();

  auto ep = static_cast<int64_t>(getEpSize());
  if (ep < 1 || e % ep != 0)
    return emitOpError() << "expected ep_size to divide experts (" << e
                         << "), got " << ep;
  if (getEpChunks() < 1 || (getEpChunks() > 1 && ep == 1))
    return emitOpError() << "expected ep_chunks to be 1, or >= 1 with "
                            "ep_size > 1, got "
                         << getEpChunks();
  // Each rank holds E / ep_size experts.
  int64_t local = e / ep;
  Type weightElt = config.getExpertWeightType();
  if (failed(expectShape(op, "gate weight", getGateWeight(), {local, f, h},
                         weightElt)) ||
      failed(expectShape(op, "up weight", getUpWeight(), {local, f, h},
                         weightElt)) ||
      failed(expectShape(op, "down weight", getDownWeight(), {local, h, f},
                         weightElt)))
    return failure();

  if (failed(checkPresence(op, getSharedGateWeight(), config.hasSharedExperts(),
                           "shared expert", "shared_experts > 0")))
    return failure();
  if (getSharedGateWeight() &&
      (failed(expectShape(op, "shared gate weight", getSharedGateWeight(),
                          {s, h}, weightElt)) ||
       failed(expectShape(op, "shared up weight", getSharedUpWeight(), {s, h},
                          weightElt)) ||
       failed(expectShape(op, "shared down weight", getSharedDownWeight(),
                          {h, s}, weightElt))))
    return failure();

  // FP8 experts: one f32 scale per 128 x 128 block of each weight.
  Type f32 = Float32Type::get(getContext());
  auto blocks = fp8Blocks;
  if (failed(checkPresence(op, getGateScale(), config.isFp8(),
                           "scales(gate, up, down)",
                           "expert_dtype = f8E4M3FN")) ||
      (getGateScale() &&
       (failed(expectShape(op, "gate scale", getGateScale(),
                           {local, blocks(f), blocks(h)}, f32)) ||
        failed(expectShape(op, "up scale", getUpScale(),
                           {local, blocks(f), blocks(h)}, f32)) ||
        failed(expectShape(op, "down scale", getDownScale(),
                           {local, blocks(h), blocks(f)}, f32)))))
    return failure();
  if (failed(checkPresence(op, getSharedGateScale(),
                           config.isFp8() && config.hasSharedExperts(),
                           "shared_scales(gate, up, down)",
                           "expert_dtype = f8E4M3FN and shared experts")) ||
      (getSharedGateScale() &&
       (failed(expectShape(op, "shared gate scale", getSharedGateScale(),
                           {blocks(s), blocks(h)}, f32)) ||
        failed(expectShape(op, "shared up scale", getSharedUpScale(),
                           {blocks(s), blocks(h)}, f32)) ||
        failed(expectShape(op, "shared down scale", getSharedDownScale(),
                           {blocks(h), blocks(s)}, f32)))))
    return failure();

  if (failed(checkPresence(op, getSharedExpertGate(), config.getSharedGate(),
                           "shared_gate", "shared_gate = true")))
    return failure();
  if (getSharedExpertGate() &&
      failed(expectShape(op, "shared expert gate", getSharedExpertGate(),
                         {1, h}, dtype)))
    return failure();

  if (failed(checkPresence(op, getOutputBias(), config.getOutputBias(),
                           "block output bias", "output_bias = true")))
    return failure();
  if (getOutputBias() &&
      failed(expectShape(op, "output bias", getOutputBias(), {h}, dtype)))
    return failure();

  if (failed(checkPresence(op, getRouterBias(), config.getRouterBias(),
                           "router bias", "router_bias = true")))
    return failure();
  if (getRouterBias() && failed(expectShape(op, "router bias", getRouterBias(),
                                            {e}, routerElt)))
    return failure();
  for (auto [what, bias, n] :
       {std::tuple<StringRef, Value, int64_t>{"expert gate bias",
                                              getGateBias(), f},
        {"expert up bias", getUpBias(), f},
        {"expert down bias", getDownBias(), h}}) {
    if (failed(checkPresence(op, bias, config.getExpertBias(), what,
                             "expert_bias = true")))
      return failure();
    if (bias && failed(expectShape(op, what, bias, {local, n}, dtype)))
      return failure();
  }
  return verifyResultTypes(*this);
}

//===----------------------------------------------------------------------===//
// RouterOp
//===----------------------------------------------------------------------===//

LogicalResult
RouterOp::inferReturnTypes(MLIRContext *context, std::optional<Location>,
                           Adaptor adaptor,
                           SmallVectorImpl<Type> &inferredReturnTypes) {
  auto input = cast<RankedTensorType>(adaptor.getInput().getType());
  auto weight = cast<RankedTensorType>(adaptor.getWeight().getType());
  inferredReturnTypes.push_back(getTensor(
      {input.getDimSize(0), weight.getDimSize(0)}, Float32Type::get(context)));
  return success();
}

bool RouterOp::isCompatibleReturnTypes(TypeRange l, TypeRange r) {
  return areCompatibleTensorTypes(l, r);
}

LogicalResult RouterOp::verify() {
  Operation *op = getOperation();
  auto input = asRanked(getInput());
  auto weight = asRanked(getWeight());
  if (failed(requireStaticDims(op, "the input", input, {1})) ||
      failed(requireStaticDims(op, "the weight", weight, {0, 1})) ||
      failed(expectDim(op, "weight", weight, 1, input.getDimSize(1), "hidden")))
    return failure();
  Type elt = weight.getElementType();
  if (elt != input.getElementType() && !elt.isF32())
    return emitOpError() << "expected weight element type f32 or "
                         << input.getElementType() << ", got " << elt;
  if (getBias() && failed(expectShape(op, "bias", getBias(),
                                      {weight.getDimSize(0)}, elt)))
    return failure();
  return verifyResultTypes(*this);
}

//===----------------------------------------------------------------------===//
// TopKOp
//===----------------------------------------------------------------------===//

LogicalResult
TopKOp::inferReturnTypes(MLIRContext *context, std::optional<Location>,
                         Adaptor adaptor,
                         SmallVectorImpl<Type> &inferredReturnTypes) {
  auto scores = cast<RankedTensorType>(adaptor.getScores().getType());
  SmallVector<int64_t> shape = {scores.getDimSize(0),
                                asDim(static_cast<int64_t>(adaptor.getK()))};
  inferredReturnTypes.push_back(
      getTensor(shape, IntegerType::get(context, 32)));
  inferredReturnTypes.push_back(getTensor(shape, Float32Type::get(context)));
  return success();
}

bool TopKOp::isCompatibleReturnTypes(TypeRange l, TypeRange r) {
  return areCompatibleTensorTypes(l, r);
}

LogicalResult TopKOp::verify() {
  Operation *op = getOperation();
  auto scores = asRanked(getScores());
  if (failed(requireStaticDims(op, "scores", scores, {1})))
    return failure();
  int64_t experts = scores.getDimSize(1);
  if (getBias()) {
    auto bias = asRanked(getBias());
    if (failed(expectDim(op, "bias", bias, 0, experts, "experts")) ||
        failed(requireStaticDims(op, "the bias", bias, {0})))
      return failure();
  }
  auto k = static_cast<int64_t>(getK());
  auto groups = static_cast<int64_t>(getGroups());
  auto topkGroups = static_cast<int64_t>(getTopkGroups());
  std::string routing =
      checkGroupLimitedTopK(experts, k, groups, topkGroups,
                            getGroupScore() == GroupScore::SumTop2, "k");
  if (!routing.empty())
    return emitOpError() << routing;
  double scale = getScale().convertToDouble();
  if (!std::isfinite(scale) || scale <= 0.0)
    return emitOpError() << "expected a finite scale > 0, got " << scale;
  if (std::optional<llvm::APFloat> eps = getSparsemixer()) {
    double margin = eps->convertToDouble();
    if (!std::isfinite(margin) || margin < 0.0)
      return emitOpError() << "expected a finite sparsemixer margin >= 0, got "
                           << (margin < 0.0 ? "a negative value"
                                            : "inf or nan");
    if (k != 2 || groups != 1 || getBias() || getNormalize())
      return emitOpError() << "expected k = 2 and no bias, groups or "
                              "normalize with sparsemixer";
  }
  return verifyResultTypes(*this);
}

//===----------------------------------------------------------------------===//
// DispatchOp
//===----------------------------------------------------------------------===//

LogicalResult
DispatchOp::inferReturnTypes(MLIRContext *context, std::optional<Location>,
                             Adaptor adaptor,
                             SmallVectorImpl<Type> &inferredReturnTypes) {
  auto input = cast<RankedTensorType>(adaptor.getInput().getType());
  auto indices = cast<RankedTensorType>(adaptor.getIndices().getType());
  auto experts = static_cast<int64_t>(adaptor.getExperts());
  Type i32 = IntegerType::get(context, 32);
  inferredReturnTypes.push_back(
      getTensor({kDynamic, input.getDimSize(1)}, input.getElementType()));
  inferredReturnTypes.push_back(
      getTensor({experts >= 1 && experts < std::numeric_limits<int32_t>::max()
                     ? experts + 1
                     : kDynamic},
                i32));
  inferredReturnTypes.push_back(
      getTensor({mergeDims(input.getDimSize(0), indices.getDimSize(0)),
                 indices.getDimSize(1)},
                i32));
  return success();
}

bool DispatchOp::isCompatibleReturnTypes(TypeRange l, TypeRange r) {
  return areCompatibleTensorTypes(l, r);
}

LogicalResult DispatchOp::verify() {
  Operation *op = getOperation();
  auto input = asRanked(getInput());
  auto indices = asRanked(getIndices());
  auto experts = static_cast<int64_t>(getExperts());
  auto alignment = static_cast<int64_t>(getAlignment());
  if (experts < 1 || experts > std::numeric_limits<int32_t>::max())
    return emitOpError() << "expected 1 <= experts <= 2147483647, got "
                         << experts;
  if (std::string why = checkAlignment(alignment); !why.empty())
    return emitOpError() << why;
  if (failed(requireStaticDims(op, "the indices", indices, {1})) ||
      failed(
          expectDim(op, "indices", indices, 0, input.getDimSize(0), "tokens")))
    return failure();
  int64_t k = indices.getDimSize(1);
  if (k < 1 || k > experts)
    return emitOpError() << "expected 1 <= experts per token <= experts ("
                         << experts << "), got " << k;
  if (getScales() &&
      failed(verifyCompatibleShape(indices, asRanked(getScales()))))
    return emitOpError() << "expected indices and scales of the same shape, "
                            "got "
                         << indices << " and " << asRanked(getScales());

  int64_t tokens = mergeDims(input.getDimSize(0), indices.getDimSize(0));
  int64_t rows = asRanked(getRows()).getDimSize(0);
  if (ShapedType::isDynamic(tokens)) {
    if (!ShapedType::isDynamic(rows))
      return emitOpError() << "expected a dynamic row count with a dynamic "
                              "token count, got "
                           << rows;
    return verifyResultTypes(*this);
  }
  std::optional<int64_t> bound =
      paddedRowsUpperBound(tokens, k, experts, alignment);
  if (!bound)
    return emitOpError() << "padded row count for " << tokens << " tokens x "
                         << k << " overflows";
  if (!ShapedType::isDynamic(rows) && rows != *bound)
    return emitOpError() << "expected " << *bound
                         << " rows (the padded upper bound for " << tokens
                         << " tokens x " << k << " over " << experts
                         << " experts with alignment " << alignment << "), got "
                         << rows;
  return verifyResultTypes(*this);
}

//===----------------------------------------------------------------------===//
// GroupedMatmulOp
//===----------------------------------------------------------------------===//

LogicalResult
GroupedMatmulOp::inferReturnTypes(MLIRContext *, std::optional<Location>,
                                  Adaptor adaptor,
                                  SmallVectorImpl<Type> &inferredReturnTypes) {
  auto input = cast<RankedTensorType>(adaptor.getInput().getType());
  auto weight = cast<RankedTensorType>(adaptor.getWeight().getType());
  inferredReturnTypes.push_back(getTensor(
      {input.getDimSize(0), weight.getDimSize(1)}, input.getElementType()));
  return success();
}

bool GroupedMatmulOp::isCompatibleReturnTypes(TypeRange l, TypeRange r) {
  return areCompatibleTensorTypes(l, r);
}

/// An e4m3 weight (`[..., N, K]`) needs its block scales (`[..., N / 128,
/// K / 128]` rounded up, f32) and other weights none.
static LogicalResult verifyFp8Weight(Operation *op, StringRef what,
                                     RankedTensorType weight, Value scale,
                                     StringRef scaleName) {
  bool fp8 = isa<Float8E4M3FNType>(weight.getElementType());
  if (fp8 && !scale)
    return op->emitOpError() << "expected a " << scaleName
                             << " operand for the e4m3 " << what;
  if (!fp8 && scale)
    return op->emitOpError() << "unexpected " << scaleName
                             << " operand: the " << what << " is "
                             << weight.getElementType() << ", not e4m3";
  if (!scale)
    return success();
  SmallVector<int64_t> shape(weight.getShape());
  for (size_t d = shape.size() - 2; d < shape.size(); ++d)
    shape[d] = fp8Blocks(shape[d]);
  return expectShape(op, scaleName, scale, shape,
                     Float32Type::get(op->getContext()));
}

/// The checks a grouped GEMM and its input gradient share: `rows` (`[R, X]`,
/// X static) against the static `[E, N, K]` weight on its dim `weightDim`,
/// their element types, and offsets of size E + 1.
static LogicalResult verifyGroupedGemm(Operation *op, StringRef rowsName,
                                       RankedTensorType rows,
                                       RankedTensorType weight,
                                       int64_t weightDim, StringRef meaning,
                                       RankedTensorType offsets) {
  if (failed(requireStaticDims(op, rowsName, rows, {1})) ||
      failed(requireStaticDims(op, "the weight", weight, {0, 1, 2})) ||
      failed(expectDim(op, "weight", weight, weightDim, rows.getDimSize(1),
                       meaning)) ||
      (!isa<Float8E4M3FNType>(weight.getElementType()) &&
       failed(expectElementType(op, "weight", weight.getElementType(),
                                rows.getElementType()))))
    return failure();
  FailureOr<int64_t> experts = getExpertsFromOffsets(op, offsets);
  if (failed(experts))
    return failure();
  if (*experts != weight.getDimSize(0))
    return op->emitOpError()
           << "expected offsets of size experts + 1 = "
           << weight.getDimSize(0) + 1 << ", got " << *experts + 1;
  return success();
}

LogicalResult GroupedMatmulOp::verify() {
  if (failed(verifyGroupedGemm(
          *this, "the input", asRanked(getInput()), asRanked(getWeight()), 2,
          "reduction size of the input", asRanked(getOffsets()))))
    return failure();
  auto weight = asRanked(getWeight());
  Type inputElt = asRanked(getInput()).getElementType();
  if (getBias() &&
      failed(expectShape(getOperation(), "bias", getBias(),
                         {weight.getDimSize(0), weight.getDimSize(1)},
                         inputElt)))
    return failure();
  if (failed(verifyFp8Weight(getOperation(), "weight", weight, getScale(),
                             "scale")))
    return failure();
  return verifyResultTypes(*this);
}

//===----------------------------------------------------------------------===//
// SwiGLUOp
//===----------------------------------------------------------------------===//

LogicalResult SwiGLUOp::verify() {
  if (static_cast<bool>(getAlpha()) != static_cast<bool>(getLimit()))
    return emitOpError() << "expected both alpha and limit (the clamped "
                            "SwiGLU) or neither";
  for (auto [what, value] : {std::pair<StringRef, std::optional<APFloat>>{
                                 "alpha", getAlpha()},
                             {"limit", getLimit()}})
    if (value && !(std::isfinite(value->convertToDouble()) &&
                   value->convertToDouble() > 0.0))
      return emitOpError() << "expected a finite " << what << " > 0";
  return success();
}

//===----------------------------------------------------------------------===//
// CombineOp
//===----------------------------------------------------------------------===//

LogicalResult
CombineOp::inferReturnTypes(MLIRContext *, std::optional<Location>,
                            Adaptor adaptor,
                            SmallVectorImpl<Type> &inferredReturnTypes) {
  auto rows = cast<RankedTensorType>(adaptor.getRows().getType());
  auto rowMap = cast<RankedTensorType>(adaptor.getRowMap().getType());
  int64_t tokens = rowMap.getDimSize(0);
  if (adaptor.getWeights())
    tokens = mergeDims(
        tokens,
        cast<RankedTensorType>(adaptor.getWeights().getType()).getDimSize(0));
  inferredReturnTypes.push_back(
      getTensor({tokens, rows.getDimSize(1)}, rows.getElementType()));
  return success();
}

bool CombineOp::isCompatibleReturnTypes(TypeRange l, TypeRange r) {
  return areCompatibleTensorTypes(l, r);
}

LogicalResult CombineOp::verify() {
  Operation *op = getOperation();
  auto rowMap = asRanked(getRowMap());
  if (failed(requireStaticDims(op, "the row map", rowMap, {1})) ||
      failed(requireStaticDims(op, "the rows", asRanked(getRows()), {1})))
    return failure();
  if (!getWeights())
    return verifyResultTypes(*this);
  auto weights = asRanked(getWeights());
  if (failed(verifyCompatibleShape(rowMap, weights)))
    return emitOpError() << "expected row map and weights of the same shape, "
                            "got "
                         << rowMap << " and " << weights;
  return verifyResultTypes(*this);
}

//===----------------------------------------------------------------------===//
// SharedExpertOp
//===----------------------------------------------------------------------===//

LogicalResult
SharedExpertOp::inferReturnTypes(MLIRContext *, std::optional<Location>,
                                 Adaptor adaptor,
                                 SmallVectorImpl<Type> &inferredReturnTypes) {
  inferredReturnTypes.push_back(adaptor.getInput().getType());
  return success();
}

bool SharedExpertOp::isCompatibleReturnTypes(TypeRange l, TypeRange r) {
  return areCompatibleTensorTypes(l, r);
}

LogicalResult SharedExpertOp::verify() {
  Operation *op = getOperation();
  auto input = asRanked(getInput());
  if (failed(requireStaticDims(op, "the input", input, {1})))
    return failure();
  auto gate = asRanked(getGateWeight());
  if (failed(requireStaticDims(op, "the gate weight", gate, {0, 1})))
    return failure();
  int64_t h = input.getDimSize(1), s = gate.getDimSize(0);
  Type elt = input.getElementType();
  // The weights are the input's type or e4m3 (with block scales).
  Type weightElt = isa<Float8E4M3FNType>(gate.getElementType())
                       ? gate.getElementType()
                       : elt;
  if (failed(expectShape(op, "gate weight", getGateWeight(), {s, h},
                         weightElt)) ||
      failed(expectShape(op, "up weight", getUpWeight(), {s, h}, weightElt)) ||
      failed(expectShape(op, "down weight", getDownWeight(), {h, s},
                         weightElt)))
    return failure();
  for (auto [what, weight, scale, scaleName] :
       {std::tuple<StringRef, Value, Value, StringRef>{
            "gate weight", getGateWeight(), getGateScale(), "gate scale"},
        {"up weight", getUpWeight(), getUpScale(), "up scale"},
        {"down weight", getDownWeight(), getDownScale(), "down scale"}})
    if (failed(verifyFp8Weight(op, what, asRanked(weight), scale, scaleName)))
      return failure();
  if (getExpertGate() &&
      failed(expectShape(op, "expert gate", getExpertGate(), {1, h}, elt)))
    return failure();
  return verifyResultTypes(*this);
}

//===----------------------------------------------------------------------===//
// AllToAllOp
//===----------------------------------------------------------------------===//

LogicalResult
AllToAllOp::inferReturnTypes(MLIRContext *, std::optional<Location>,
                             Adaptor adaptor,
                             SmallVectorImpl<Type> &inferredReturnTypes) {
  auto input = cast<RankedTensorType>(adaptor.getInput().getType());
  inferredReturnTypes.push_back(
      getTensor({kDynamic, input.getDimSize(1)}, input.getElementType()));
  inferredReturnTypes.push_back(adaptor.getOffsets().getType());
  return success();
}

bool AllToAllOp::isCompatibleReturnTypes(TypeRange l, TypeRange r) {
  return areCompatibleTensorTypes(l, r);
}

/// The operands of an all-to-all: rows of a static width, `[E + 1]`
/// offsets, and an `ep_size` dividing E (at least `minRanks`).
static LogicalResult verifyExchange(Operation *op, Value input, Value offsets,
                                    int64_t ep, int64_t minRanks) {
  if (failed(requireStaticDims(op, "the input", asRanked(input), {1})))
    return failure();
  FailureOr<int64_t> experts = getExpertsFromOffsets(op, asRanked(offsets));
  if (failed(experts))
    return failure();
  if (ep < minRanks || ep > *experts || *experts % ep != 0)
    return op->emitOpError()
           << "expected ep_size" << (minRanks > 1 ? " > 1" : "")
           << " to divide experts (" << *experts << "), got " << ep;
  return success();
}

LogicalResult AllToAllOp::verify() {
  if (failed(verifyExchange(getOperation(), getInput(), getOffsets(),
                            static_cast<int64_t>(getEpSize()), 1)))
    return failure();
  return verifyResultTypes(*this);
}

//===----------------------------------------------------------------------===//
// AllToAllStartOp, AllToAllWaitOp
//===----------------------------------------------------------------------===//

LogicalResult AllToAllStartOp::verify() {
  Operation *op = getOperation();
  if (failed(verifyExchange(op, getInput(), getOffsets(),
                            static_cast<int64_t>(getEpSize()), 2)))
    return failure();
  if (getOutputOffsets().getType() != getOffsets().getType())
    return emitOpError() << "expected output offsets of type "
                         << getOffsets().getType() << ", got "
                         << getOutputOffsets().getType();
  Value handle = getHandle();
  if (!handle.hasOneUse() || !isa<AllToAllWaitOp>(*handle.user_begin()) ||
      handle.user_begin()->getBlock() != op->getBlock())
    return emitOpError() << "expected its handle to be used by exactly one "
                            "moe.all_to_all_wait in the same block";
  return success();
}

LogicalResult AllToAllWaitOp::verify() {
  auto start = getHandle().getDefiningOp<AllToAllStartOp>();
  if (!start)
    return emitOpError() << "expected a handle from moe.all_to_all_start";
  auto input = asRanked(start.getInput());
  auto output = asRanked(getOutput());
  if (output.getDimSize(1) != input.getDimSize(1) ||
      output.getElementType() != input.getElementType() ||
      !output.isDynamicDim(0))
    return emitOpError() << "expected result of type "
                         << RankedTensorType::get(
                                {ShapedType::kDynamic, input.getDimSize(1)},
                                input.getElementType())
                         << " (rows of the start's input), got " << output;
  return success();
}

//===----------------------------------------------------------------------===//
// AllReduceOp
//===----------------------------------------------------------------------===//

LogicalResult AllReduceOp::verify() {
  if (getEpSize() < 1)
    return emitOpError() << "expected ep_size >= 1, got " << getEpSize();
  return success();
}

#define GET_OP_CLASSES
#include "moe/MoeOps.cpp.inc"

//===----------------------------------------------------------------------===//
// GroupedMatmulDxOp
//===----------------------------------------------------------------------===//

LogicalResult GroupedMatmulDxOp::inferReturnTypes(
    MLIRContext *, std::optional<Location>, Adaptor adaptor,
    SmallVectorImpl<Type> &inferredReturnTypes) {
  auto grad = cast<RankedTensorType>(adaptor.getGrad().getType());
  auto weight = cast<RankedTensorType>(adaptor.getWeight().getType());
  inferredReturnTypes.push_back(getTensor(
      {grad.getDimSize(0), weight.getDimSize(2)}, grad.getElementType()));
  return success();
}

bool GroupedMatmulDxOp::isCompatibleReturnTypes(TypeRange l, TypeRange r) {
  return areCompatibleTensorTypes(l, r);
}

LogicalResult GroupedMatmulDxOp::verify() {
  if (failed(verifyGroupedGemm(
          *this, "the gradient", asRanked(getGrad()), asRanked(getWeight()), 1,
          "output size of the gradient", asRanked(getOffsets()))) ||
      failed(verifyFp8Weight(getOperation(), "weight", asRanked(getWeight()),
                             getScale(), "scale")))
    return failure();
  return verifyResultTypes(*this);
}

//===----------------------------------------------------------------------===//
// Fp8QuantizeOp, Fp8QuantizeWeightOp
//===----------------------------------------------------------------------===//

LogicalResult
Fp8QuantizeOp::inferReturnTypes(MLIRContext *ctx, std::optional<Location>,
                                Adaptor adaptor,
                                SmallVectorImpl<Type> &inferredReturnTypes) {
  auto input = cast<RankedTensorType>(adaptor.getInput().getType());
  inferredReturnTypes.push_back(
      getTensor(input.getShape(), Float32Type::get(ctx)));
  return success();
}

bool Fp8QuantizeOp::isCompatibleReturnTypes(TypeRange l, TypeRange r) {
  return areCompatibleTensorTypes(l, r);
}

LogicalResult Fp8QuantizeOp::verify() {
  Operation *op = getOperation();
  if (failed(requireStaticDims(op, "the input", asRanked(getInput()), {1})))
    return failure();
  if (getSegments() &&
      failed(getExpertsFromOffsets(op, asRanked(getSegments()))))
    return failure();
  if (getTransposed() && getRecipe().isBlockwise() && !getSegments())
    return emitOpError() << "expected segments for 128 x 1 tiles "
                            "(transposed, scaling = block)";
  return verifyResultTypes(*this);
}

LogicalResult Fp8QuantizeWeightOp::verify() {
  auto weight = asRanked(getWeight());
  if (weight.getRank() < 2 || !weight.hasStaticShape())
    return emitOpError() << "expected a static weight of rank 2 or more, got "
                         << weight;
  if (failed(expectShape(getOperation(), "codes", getCodes(), weight.getShape(),
                         getCodes().getType().getElementType())))
    return failure();
  return verifyFp8Weight(getOperation(), "codes", asRanked(getCodes()),
                         getScales(), "scales");
}

//===----------------------------------------------------------------------===//
// GroupedMatmulDwOp
//===----------------------------------------------------------------------===//

LogicalResult GroupedMatmulDwOp::inferReturnTypes(
    MLIRContext *ctx, std::optional<Location>, Adaptor adaptor,
    SmallVectorImpl<Type> &inferredReturnTypes) {
  auto input = cast<RankedTensorType>(adaptor.getInput().getType());
  auto grad = cast<RankedTensorType>(adaptor.getGrad().getType());
  auto offsets = cast<RankedTensorType>(adaptor.getOffsets().getType());
  int64_t experts =
      offsets.isDynamicDim(0) ? kDynamic : asDim(offsets.getDimSize(0) - 1);
  inferredReturnTypes.push_back(
      getTensor({experts, grad.getDimSize(1), input.getDimSize(1)},
                Float32Type::get(ctx)));
  return success();
}

bool GroupedMatmulDwOp::isCompatibleReturnTypes(TypeRange l, TypeRange r) {
  return areCompatibleTensorTypes(l, r);
}

LogicalResult GroupedMatmulDwOp::verify() {
  Operation *op = getOperation();
  auto input = asRanked(getInput());
  auto grad = asRanked(getGrad());
  if (failed(requireStaticDims(op, "the input", input, {1})) ||
      failed(requireStaticDims(op, "the gradient", grad, {1})) ||
      failed(expectDim(op, "gradient", grad, 0, input.getDimSize(0),
                       "rows of the input")) ||
      failed(expectElementType(op, "gradient", grad.getElementType(),
                               input.getElementType())) ||
      failed(getExpertsFromOffsets(op, asRanked(getOffsets()))))
    return failure();
  return verifyResultTypes(*this);
}

//===----------------------------------------------------------------------===//
// CombineGradOp
//===----------------------------------------------------------------------===//

LogicalResult
CombineGradOp::inferReturnTypes(MLIRContext *ctx, std::optional<Location>,
                                Adaptor adaptor,
                                SmallVectorImpl<Type> &inferredReturnTypes) {
  auto grad = cast<RankedTensorType>(adaptor.getGrad().getType());
  auto rowMap = cast<RankedTensorType>(adaptor.getRowMap().getType());
  auto weights = cast<RankedTensorType>(adaptor.getWeights().getType());
  inferredReturnTypes.push_back(adaptor.getRows().getType());
  int64_t tokens =
      mergeDims(grad.getDimSize(0),
                mergeDims(rowMap.getDimSize(0), weights.getDimSize(0)));
  inferredReturnTypes.push_back(getTensor(
      {tokens, mergeDims(rowMap.getDimSize(1), weights.getDimSize(1))},
      Float32Type::get(ctx)));
  return success();
}

bool CombineGradOp::isCompatibleReturnTypes(TypeRange l, TypeRange r) {
  return areCompatibleTensorTypes(l, r);
}

LogicalResult CombineGradOp::verify() {
  Operation *op = getOperation();
  auto grad = asRanked(getGrad());
  auto rows = asRanked(getRows());
  auto rowMap = asRanked(getRowMap());
  auto weights = asRanked(getWeights());
  if (failed(requireStaticDims(op, "the gradient", grad, {1})) ||
      failed(expectDim(op, "rows", rows, 1, grad.getDimSize(1),
                       "hidden size of the gradient")) ||
      failed(expectElementType(op, "rows", rows.getElementType(),
                               grad.getElementType())) ||
      failed(requireStaticDims(op, "the row map", rowMap, {1})) ||
      failed(expectDim(op, "row map", rowMap, 0, grad.getDimSize(0),
                       "tokens of the gradient")) ||
      failed(expectDim(op, "weights", weights, 0, rowMap.getDimSize(0),
                       "tokens of the row map")) ||
      failed(expectDim(op, "weights", weights, 1, rowMap.getDimSize(1),
                       "k of the row map")))
    return failure();
  return verifyResultTypes(*this);
}

//===----------------------------------------------------------------------===//
// DispatchGradOp
//===----------------------------------------------------------------------===//

LogicalResult
DispatchGradOp::inferReturnTypes(MLIRContext *, std::optional<Location>,
                                 Adaptor adaptor,
                                 SmallVectorImpl<Type> &inferredReturnTypes) {
  auto rowsGrad = cast<RankedTensorType>(adaptor.getRowsGrad().getType());
  auto rowMap = cast<RankedTensorType>(adaptor.getRowMap().getType());
  inferredReturnTypes.push_back(
      getTensor({rowMap.getDimSize(0), rowsGrad.getDimSize(1)},
                rowsGrad.getElementType()));
  return success();
}

bool DispatchGradOp::isCompatibleReturnTypes(TypeRange l, TypeRange r) {
  return areCompatibleTensorTypes(l, r);
}

LogicalResult DispatchGradOp::verify() {
  Operation *op = getOperation();
  if (failed(requireStaticDims(op, "the row gradient", asRanked(getRowsGrad()),
                               {1})) ||
      failed(requireStaticDims(op, "the row map", asRanked(getRowMap()), {1})))
    return failure();
  return verifyResultTypes(*this);
}

//===----------------------------------------------------------------------===//
// ScaledDispatchGradOp
//===----------------------------------------------------------------------===//

LogicalResult ScaledDispatchGradOp::inferReturnTypes(
    MLIRContext *, std::optional<Location>, Adaptor adaptor,
    SmallVectorImpl<Type> &inferredReturnTypes) {
  auto rowsGrad = cast<RankedTensorType>(adaptor.getRowsGrad().getType());
  auto rowMap = cast<RankedTensorType>(adaptor.getRowMap().getType());
  inferredReturnTypes.push_back(
      getTensor({rowMap.getDimSize(0), rowsGrad.getDimSize(1)},
                rowsGrad.getElementType()));
  inferredReturnTypes.push_back(
      getTensor(rowMap.getShape(), Float32Type::get(rowMap.getContext())));
  return success();
}

bool ScaledDispatchGradOp::isCompatibleReturnTypes(TypeRange l, TypeRange r) {
  return areCompatibleTensorTypes(l, r);
}

LogicalResult ScaledDispatchGradOp::verify() {
  Operation *op = getOperation();
  auto rowMap = asRanked(getRowMap());
  auto input = asRanked(getInput());
  if (failed(requireStaticDims(op, "the row gradient", asRanked(getRowsGrad()),
                               {1})) ||
      failed(requireStaticDims(op, "the row map", rowMap, {1})) ||
      failed(expectDim(op, "input", input, 1,
                       asRanked(getRowsGrad()).getDimSize(1), "hidden")))
    return failure();
  if (failed(verifyCompatibleShape(rowMap, asRanked(getScales()))))
    return emitOpError() << "expected row map and scales of the same shape, "
                            "got "
                         << rowMap << " and " << asRanked(getScales());
  return verifyResultTypes(*this);
}

//===----------------------------------------------------------------------===//
// TopKGradOp
//===----------------------------------------------------------------------===//

LogicalResult
TopKGradOp::inferReturnTypes(MLIRContext *, std::optional<Location>,
                             Adaptor adaptor,
                             SmallVectorImpl<Type> &inferredReturnTypes) {
  inferredReturnTypes.push_back(adaptor.getScores().getType());
  return success();
}

bool TopKGradOp::isCompatibleReturnTypes(TypeRange l, TypeRange r) {
  return areCompatibleTensorTypes(l, r);
}

LogicalResult TopKGradOp::verify() {
  Operation *op = getOperation();
  auto scores = asRanked(getScores());
  auto ids = asRanked(getIndices());
  auto weightsGrad = asRanked(getWeightsGrad());
  if (failed(requireStaticDims(op, "the scores", scores, {1})) ||
      failed(requireStaticDims(op, "the ids", ids, {1})) ||
      failed(expectDim(op, "ids", ids, 0, scores.getDimSize(0),
                       "tokens of the scores")) ||
      failed(expectDim(op, "weight gradient", weightsGrad, 0, ids.getDimSize(0),
                       "tokens of the ids")) ||
      failed(expectDim(op, "weight gradient", weightsGrad, 1, ids.getDimSize(1),
                       "k of the ids")))
    return failure();
  if (ids.getDimSize(1) > scores.getDimSize(1))
    return emitOpError() << "expected k = " << ids.getDimSize(1)
                         << " to be at most the " << scores.getDimSize(1)
                         << " experts of the scores";
  if (!(getScale().convertToDouble() > 0.0))
    return emitOpError() << "expected a positive scale, got "
                         << getScale().convertToDouble();
  return verifyResultTypes(*this);
}

//===----------------------------------------------------------------------===//
// RouterGradOp
//===----------------------------------------------------------------------===//

LogicalResult
RouterGradOp::inferReturnTypes(MLIRContext *ctx, std::optional<Location>,
                               Adaptor adaptor,
                               SmallVectorImpl<Type> &inferredReturnTypes) {
  auto weight = cast<RankedTensorType>(adaptor.getWeight().getType());
  inferredReturnTypes.push_back(adaptor.getInput().getType());
  inferredReturnTypes.push_back(
      getTensor(weight.getShape(), Float32Type::get(ctx)));
  return success();
}

bool RouterGradOp::isCompatibleReturnTypes(TypeRange l, TypeRange r) {
  return areCompatibleTensorTypes(l, r);
}

LogicalResult RouterGradOp::verify() {
  Operation *op = getOperation();
  auto input = asRanked(getInput());
  auto weight = asRanked(getWeight());
  auto scores = asRanked(getScores());
  auto scoresGrad = asRanked(getScoresGrad());
  if (failed(requireStaticDims(op, "the input", input, {1})) ||
      failed(requireStaticDims(op, "the weight", weight, {0, 1})) ||
      failed(expectDim(op, "weight", weight, 1, input.getDimSize(1),
                       "hidden size of the input")) ||
      failed(expectDim(op, "scores", scores, 0, input.getDimSize(0),
                       "tokens of the input")) ||
      failed(expectDim(op, "scores", scores, 1, weight.getDimSize(0),
                       "experts of the weight")) ||
      failed(expectDim(op, "score gradient", scoresGrad, 0,
                       scores.getDimSize(0), "tokens of the scores")) ||
      failed(expectDim(op, "score gradient", scoresGrad, 1,
                       scores.getDimSize(1), "experts of the scores")))
    return failure();
  return verifyResultTypes(*this);
}

LayerOp mlir::moe::getOnlyLayer(Operation *root, int64_t *count) {
  LayerOp only;
  int64_t found = 0;
  root->walk([&](LayerOp layer) {
    only = layer;
    ++found;
  });
  if (count)
    *count = found;
  return found == 1 ? only : LayerOp();
}
