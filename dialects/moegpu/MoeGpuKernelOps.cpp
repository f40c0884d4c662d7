//===- MoeGpuKernelOps.cpp - Verifiers of the SIMT kernel ops -------------===//
//
// Part of moe-compiler.
//
//===----------------------------------------------------------------------===//

#include "moegpu/MoeGpuDialect.h"

#include "moe/runtime/ScheduleAbi.h"

using namespace mlir;
using namespace mlir::moegpu;

namespace {

/// What an operand's element type must be.
enum class Elt { I32, I64, F32, Half, F8, HalfOrF32, HalfOrF8, Float };

StringRef describe(Elt e) {
  switch (e) {
  case Elt::I32: return "i32";
  case Elt::I64: return "i64";
  case Elt::F32: return "f32";
  case Elt::Half: return "bf16 or f16";
  case Elt::F8: return "f8E4M3FN";
  case Elt::HalfOrF32: return "bf16, f16 or f32";
  case Elt::HalfOrF8:
    return "bf16, f16 or f8E4M3FN";
  case Elt::Float: return "a float type";
  }
  return "";
}

bool matches(Elt e, Type t) {
  switch (e) {
  case Elt::I32: return t.isInteger(32);
  case Elt::I64: return t.isInteger(64);
  case Elt::F32: return t.isF32();
  case Elt::Half: return t.isBF16() || t.isF16();
  case Elt::F8: return isa<Float8E4M3FNType>(t);
  case Elt::HalfOrF32: return t.isBF16() || t.isF16() || t.isF32();
  case Elt::HalfOrF8:
    return t.isBF16() || t.isF16() || isa<Float8E4M3FNType>(t);
  case Elt::Float: return isa<FloatType>(t);
  }
  return false;
}

/// The checks of one kernel op's operands: each names the operand, what was
/// expected and what it got; the first failure is the op's one error.
struct Checker {
  Operation *op;
  bool ok = true;

  InFlightDiagnostic error() {
    ok = false;
    return op->emitOpError();
  }
  /// `value` (named `name`; absent values pass) has rank `rank` and an
  /// element type `elt`.
  Checker &memref(Value value, StringRef name, int64_t rank, Elt elt) {
    if (!ok || !value)
      return *this;
    auto type = cast<MemRefType>(value.getType());
    if (type.getRank() != rank)
      error() << "expects " << name << " of rank " << rank << ", got "
              << type;
    else if (!matches(elt, type.getElementType()))
      error() << "expects " << name << " of " << describe(elt) << ", got "
              << type;
    return *this;
  }
  /// Dimension `d` of `value` is `size` (unless either is dynamic); `what`
  /// says what the size is.
  Checker &dim(Value value, StringRef name, int64_t d, int64_t size,
               StringRef what) {
    if (!ok || !value)
      return *this;
    auto type = cast<MemRefType>(value.getType());
    int64_t got = type.getDimSize(d);
    if (!ShapedType::isDynamic(got) && !ShapedType::isDynamic(size) &&
        got != size)
      error() << "expects dimension " << d << " of " << name << " to be "
              << size << " (" << what << "), got " << type;
    return *this;
  }
  /// `value`'s dimension `d` is static.
  Checker &isStatic(Value value, StringRef name, int64_t d) {
    if (!ok || !value)
      return *this;
    auto type = cast<MemRefType>(value.getType());
    if (type.isDynamicDim(d))
      error() << "expects dimension " << d << " of " << name
              << " to be static, got " << type;
    return *this;
  }
  Checker &sameType(Value a, StringRef aName, Value b, StringRef bName) {
    if (!ok || !a || !b || a.getType() == b.getType())
      return *this;
    error() << "expects " << aName << " and " << bName
            << " to have one type, got " << a.getType() << " and "
            << b.getType();
    return *this;
  }
  Checker &positive(int64_t v, StringRef name) {
    if (ok && v < 1)
      error() << "expects " << name << " to be at least 1, got " << v;
    return *this;
  }
  LogicalResult result() const { return success(ok); }
};

int64_t dimOf(Value v, int64_t d) {
  return cast<MemRefType>(v.getType()).getDimSize(d);
}

} // namespace

LogicalResult RouterLogitsOp::verify() {
  Checker c{*this};
  c.memref(getX(), "x", 2, Elt::Float)
      .memref(getWeight(), "weight", 2, Elt::Float)
      .memref(getLogits(), "logits", 2, Elt::F32)
      .isStatic(getWeight(), "weight", 0)
      .isStatic(getX(), "x", 1)
      .dim(getWeight(), "weight", 1, dimOf(getX(), 1), "x's hidden size")
      .dim(getLogits(), "logits", 1, dimOf(getWeight(), 0),
           "the router's experts")
      .dim(getLogits(), "logits", 0, dimOf(getX(), 0), "x's tokens");
  return c.result();
}

LogicalResult SumSplitsOp::verify() {
  Checker c{*this};
  c.memref(getPartials(), "partials", 3, Elt::F32)
      .memref(getCount(), "count", 1, Elt::I32)
      .memref(getOut(), "out", 2, Elt::F32)
      .isStatic(getPartials(), "partials", 0)
      .isStatic(getPartials(), "partials", 2)
      .dim(getCount(), "count", 0, 1, "one slice count")
      .dim(getOut(), "out", 0, dimOf(getPartials(), 1), "the partials' rows")
      .dim(getOut(), "out", 1, dimOf(getPartials(), 2),
           "the partials' columns");
  return c.result();
}

LogicalResult SharedGateOp::verify() {
  Checker c{*this};
  c.memref(getX(), "x", 2, Elt::Float)
      .memref(getGate(), "gate", 2, Elt::Float)
      .memref(getScale(), "scale", 1, Elt::F32)
      .isStatic(getX(), "x", 1)
      .dim(getGate(), "gate", 0, 1, "one row")
      .dim(getGate(), "gate", 1, dimOf(getX(), 1), "x's hidden size")
      .dim(getScale(), "scale", 0, dimOf(getX(), 0), "x's tokens");
  return c.result();
}

LogicalResult RouteOp::verify() {
  Checker c{*this};
  c.memref(getLogits(), "logits", 2, Elt::F32)
      .isStatic(getLogits(), "logits", 1)
      .memref(getRouterBias(), "router_bias", 1, Elt::Float)
      .memref(getScoreBias(), "score_bias", 1, Elt::F32)
      .memref(getIds(), "ids", 2, Elt::I32)
      .memref(getWeights(), "weights", 2, Elt::F32)
      .memref(getCounts(), "counts", 1, Elt::I32)
      .isStatic(getIds(), "ids", 1)
      .positive(getGroups(), "groups")
      .positive(getTopkGroups(), "topk_groups")
      .positive(getChunks(), "chunks");
  if (!c.ok)
    return failure();
  int64_t experts = getNumExperts(), k = getTopK();
  c.dim(getRouterBias(), "router_bias", 0, experts, "the experts")
      .dim(getScoreBias(), "score_bias", 0, experts, "the experts")
      .dim(getWeights(), "weights", 1, k, "ids' k")
      .dim(getIds(), "ids", 0, dimOf(getLogits(), 0), "logits' tokens")
      .dim(getWeights(), "weights", 0, dimOf(getLogits(), 0),
           "logits' tokens")
      .dim(getCounts(), "counts", 0, getChunks() * experts,
           "chunks x experts");
  if (!c.ok)
    return failure();
  if (k < 1 || k > experts)
    return emitOpError() << "expects between 1 and " << experts
                         << " experts a token (ids' k), got " << k;
  if (experts % getGroups() != 0)
    return emitOpError() << "expects groups to divide the " << experts
                         << " experts, got " << getGroups();
  if (getTopkGroups() > getGroups())
    return emitOpError() << "expects topk_groups of at most groups ("
                         << getGroups() << "), got " << getTopkGroups();
  if (getSumTop2() && getGroups() > 1 && experts / getGroups() < 2)
    return emitOpError() << "scores groups of one expert by sum_top2";
  if (getScoring() == Scoring::Sparsemixer && getGroups() > 1)
    return emitOpError() << "expects sparsemixer scoring without groups";
  return success();
}

LogicalResult DispatchScanOp::verify() {
  Checker c{*this};
  c.memref(getIds(), "ids", 2, Elt::I32)
      .memref(getCounts(), "counts", 1, Elt::I32)
      .memref(getOffsets(), "offsets", 1, Elt::I32)
      .memref(getCursors(), "cursors", 1, Elt::I32)
      .memref(getSharedOffsets(), "shared_offsets", 1, Elt::I32)
      .isStatic(getCounts(), "counts", 0)
      .positive(getAlignment(), "alignment");
  if (!c.ok)
    return failure();
  int64_t segments = dimOf(getCounts(), 0);
  c.dim(getOffsets(), "offsets", 0, segments + 1, "one more than counts")
      .dim(getCursors(), "cursors", 0, segments, "counts'")
      .dim(getSharedOffsets(), "shared_offsets", 0, 2, "[0, T]");
  return c.result();
}

LogicalResult DispatchScatterOp::verify() {
  bool codes = copiesCodes();
  if (static_cast<bool>(getXScale()) != static_cast<bool>(getRowScale()))
    return emitOpError() << "expects x_scale and row_scale together";
  Checker c{*this};
  c.memref(getX(), "x", 2, codes ? Elt::F8 : Elt::HalfOrF32)
      .isStatic(getX(), "x", 1)
      .memref(getIds(), "ids", 2, Elt::I32)
      .memref(getWeights(), "weights", 2, Elt::F32)
      .memref(getCursors(), "cursors", 1, Elt::I32)
      .memref(getRows(), "rows", 2, codes ? Elt::F8 : Elt::HalfOrF32)
      .memref(getRowMap(), "row_map", 2, Elt::I32)
      .memref(getRowWeight(), "row_weight", 1, Elt::F32)
      .memref(getXScale(), "x_scale", 2, Elt::F32)
      .memref(getRowScale(), "row_scale", 2, Elt::F32)
      .positive(getExperts(), "experts")
      .positive(getChunks(), "chunks");
  if (!c.ok)
    return failure();
  if (codes && getScaleInput())
    return emitOpError() << "scales rows (scale_input) that it copies as "
                            "e4m3 codes; quantize the scaled rows instead";
  if (cast<MemRefType>(getX().getType()).getElementType() !=
      cast<MemRefType>(getRows().getType()).getElementType())
    return emitOpError() << "expects x and rows of one element type, got "
                         << getX().getType() << " and " << getRows().getType();
  c.dim(getRows(), "rows", 1, dimOf(getX(), 1), "x's hidden size")
      .sameType(getIds(), "ids", getRowMap(), "row_map")
      .dim(getWeights(), "weights", 1, dimOf(getIds(), 1), "ids' k")
      .dim(getCursors(), "cursors", 0, getChunks() * getExperts(),
           "chunks x experts")
      .dim(getRowScale(), "row_scale", 1,
           getXScale() ? dimOf(getXScale(), 1) : 0, "x_scale's blocks");
  return c.result();
}

LogicalResult QuantizeOp::verify() {
  Checker c{*this};
  c.memref(getIn(), "in", 2, Elt::Half)
      .isStatic(getIn(), "in", 1)
      .memref(getOffsets(), "offsets", 1, Elt::I32)
      .isStatic(getOffsets(), "offsets", 0)
      .memref(getOut(), "out", 2, Elt::F8)
      .memref(getScale(), "scale", 2, Elt::F32);
  if (!c.ok)
    return failure();
  int64_t depth = dimOf(getIn(), 1);
  if (depth % 4 != 0)
    return emitOpError() << "expects rows of a multiple of 4 channels (a "
                            "lane's four codes), got "
                         << depth;
  c.dim(getOut(), "out", 1, depth, "in's channels")
      .dim(getScale(), "scale", 1, (depth + 127) / 128,
           "in's blocks of 128 channels")
      .dim(getOut(), "out", 0, dimOf(getIn(), 0), "in's rows")
      .dim(getScale(), "scale", 0, dimOf(getIn(), 0), "in's rows");
  if (c.ok && getOffsets() && dimOf(getOffsets(), 0) < 2)
    return emitOpError() << "expects offsets of at least one group ([G + 1], "
                            "G >= 1), got "
                         << getOffsets().getType();
  return c.result();
}

LogicalResult QuantizeColumnsOp::verify() {
  Checker c{*this};
  c.memref(getIn(), "in", 2, Elt::HalfOrF8)
      .isStatic(getIn(), "in", 1)
      .memref(getInScale(), "in_scale", 2, Elt::F32)
      .memref(getOut(), "out", 2, Elt::F8)
      .memref(getScale(), "scale", 2, Elt::F32)
      .memref(getOffsets(), "offsets", 1, Elt::I32)
      .isStatic(getOffsets(), "offsets", 0)
      .isStatic(getOut(), "out", 0)
      .isStatic(getScale(), "scale", 0);
  if (!c.ok)
    return failure();
  // e4m3 rows are read with their 1 x 128 scales, and only they are.
  bool codes = isa<Float8E4M3FNType>(
      cast<MemRefType>(getIn().getType()).getElementType());
  if (codes != static_cast<bool>(getInScale()))
    return emitOpError() << (codes ? "expects in_scale with e4m3 rows (their "
                                     "scales per 128 columns)"
                                   : "expects in_scale only with e4m3 rows");
  int64_t columns = dimOf(getIn(), 1), rows = dimOf(getIn(), 0);
  int64_t blocks =
      ShapedType::isDynamic(rows) ? ShapedType::kDynamic : (rows + 127) / 128;
  c.dim(getInScale(), "in_scale", 0, rows, "in's rows")
      .dim(getInScale(), "in_scale", 1, (columns + 127) / 128,
           "in's blocks of 128 columns")
      .dim(getOut(), "out", 0, columns, "in's columns")
      .dim(getOut(), "out", 1, rows, "in's rows")
      .dim(getScale(), "scale", 0, columns, "in's columns")
      .dim(getScale(), "scale", 1, blocks, "in's blocks of 128 rows");
  if (c.ok && dimOf(getOffsets(), 0) < 2)
    return emitOpError() << "expects offsets of at least one group ([G + 1], "
                            "G >= 1), got "
                         << getOffsets().getType();
  return c.result();
}

static LogicalResult verifyVerdict(Operation *op, Value rejected,
                                   StringRef name);

LogicalResult QuantizeBlocksOp::verify() {
  Checker c{*this};
  c.memref(getIn(), "in", 3, Elt::F32)
      .memref(getOut(), "out", 3, Elt::F8)
      .memref(getScale(), "scale", 3, Elt::F32)
      .memref(getTransposed(), "transposed", 3, Elt::F8)
      .memref(getTransposedScale(), "transposed_scale", 3, Elt::F32);
  if (!c.ok)
    return failure();
  if (getTransposedScale() && !getTransposed())
    return emitOpError() << "expects transposed_scale only with transposed";
  if (getUnless() && failed(verifyVerdict(*this, getUnless(), "unless")))
    return failure();
  auto type = cast<MemRefType>(getIn().getType());
  if (!type.hasStaticShape())
    return emitOpError() << "expects in of a static shape, got " << type;
  int64_t g = type.getDimSize(0), n = type.getDimSize(1),
          k = type.getDimSize(2);
  if (k % 4 != 0 || n % 4 != 0)
    return emitOpError() << "expects matrices whose rows and columns are "
                            "multiples of 4 (a lane's four codes), got "
                         << n << " x " << k;
  // A gate or up half of the packed weight: twice the rows and blocks,
  // and the transposed halves each from a multiple of 128 columns.
  bool packed = getLayout() != CopyLayout::Same;
  using ::moe::abi::kGateUpBlock;
  if (packed && n % kGateUpBlock != 0)
    return emitOpError() << "expects a gate or up matrix of a multiple of "
                         << kGateUpBlock
                         << " rows (the packed weight's blocks), got " << n;
  int64_t halves = packed ? 2 : 1;
  int64_t rowBlocks = (n + 127) / 128, colBlocks = (k + 127) / 128;
  StringRef rowsWhat = packed ? "twice in's rows: gate and up" : "in's rows";
  StringRef blocksWhat =
      packed ? "twice in's blocks of rows: gate and up" : "in's blocks of rows";
  c.dim(getOut(), "out", 0, g, "in's matrices")
      .dim(getOut(), "out", 1, halves * n, rowsWhat)
      .dim(getOut(), "out", 2, k, "in's columns")
      .dim(getScale(), "scale", 0, g, "in's matrices")
      .dim(getScale(), "scale", 1, halves * rowBlocks, blocksWhat)
      .dim(getScale(), "scale", 2, colBlocks, "in's blocks of columns")
      .dim(getTransposed(), "transposed", 0, g, "in's matrices")
      .dim(getTransposed(), "transposed", 1, k, "in's columns")
      .dim(getTransposed(), "transposed", 2, packed ? 2 * 128 * rowBlocks : n,
           packed ? "gate and up, each in's rows padded to a multiple of 128"
                  : "in's rows")
      .dim(getTransposedScale(), "transposed_scale", 0, g, "in's matrices")
      .dim(getTransposedScale(), "transposed_scale", 1, colBlocks,
           "in's blocks of columns")
      .dim(getTransposedScale(), "transposed_scale", 2, halves * rowBlocks,
           blocksWhat);
  return c.result();
}

LogicalResult CombineOp::verify() {
  if (getSharedScale() && !getSharedOut())
    return emitOpError() << "expects shared_scale only with shared";
  Checker c{*this};
  c.memref(getDown(), "down", 2, Elt::HalfOrF32)
      .memref(getRowMap(), "row_map", 2, Elt::I32)
      .isStatic(getRowMap(), "row_map", 1)
      .memref(getSharedOut(), "shared_out", 2, Elt::HalfOrF32)
      .memref(getSharedScale(), "shared_scale", 1, Elt::F32)
      .memref(getOutputBias(), "output_bias", 1, Elt::HalfOrF32)
      .memref(getY(), "y", 2, Elt::HalfOrF32)
      .isStatic(getY(), "y", 1);
  if (!c.ok)
    return failure();
  int64_t hidden = dimOf(getY(), 1);
  c.dim(getDown(), "down", 1, hidden, "y's hidden size")
      .sameType(getSharedOut(), "shared", getY(), "y")
      .dim(getOutputBias(), "output_bias", 0, hidden, "y's hidden size")
      .dim(getRowMap(), "row_map", 0, dimOf(getY(), 0), "y's tokens")
      .dim(getSharedScale(), "shared_scale", 0, dimOf(getY(), 0),
           "y's tokens");
  if (!c.ok)
    return failure();
  Type elt = cast<MemRefType>(getY().getType()).getElementType();
  for (auto [value, name] : {std::pair<Value, StringRef>{getDown(), "down"},
                             {getOutputBias(), "output_bias"}})
    if (value && cast<MemRefType>(value.getType()).getElementType() != elt)
      return emitOpError() << "expects " << name << " of y's element type "
                           << elt << ", got " << value.getType();
  return success();
}

//===----------------------------------------------------------------------===//
// The training step
//===----------------------------------------------------------------------===//

/// A verdict buffer (update_verdict's `rejected`): one f32.
static LogicalResult verifyVerdict(Operation *op, Value rejected,
                                   StringRef name) {
  auto type = dyn_cast<MemRefType>(rejected.getType());
  if (!type || type.getRank() != 1 || !type.getElementType().isF32() ||
      type.getDimSize(0) != 1)
    return op->emitOpError()
           << "expects " << name << " to be one f32 (memref<1xf32>), got "
           << rejected.getType();
  return success();
}

/// Master `i` (f32, static shape) and its compute copy in `layout`: `same`
/// as many elements; `gate_rows`/`up_rows` half the rows of a packed copy
/// of rank 2 (biases) or 3 (weights), the master without its group
/// dimension where there is one group.
static LogicalResult verifyCopy(Operation *op, size_t i, Value master,
                                Value copy, CopyLayout layout) {
  auto from = cast<MemRefType>(master.getType());
  auto to = cast<MemRefType>(copy.getType());
  if (!from.hasStaticShape() || !from.getElementType().isF32())
    return op->emitOpError() << "expects master " << i
                             << " to be f32 of static shape, got " << from;
  if (!to.hasStaticShape() || !isa<FloatType>(to.getElementType()))
    return op->emitOpError() << "expects copy " << i
                             << " of a float type and static shape, got " << to;
  if (layout == CopyLayout::Same) {
    if (from.getNumElements() != to.getNumElements())
      return op->emitOpError()
             << "expects copy " << i << " (same) with as many elements as "
             << "its master, got " << to << " for " << from;
    return success();
  }
  // The master has the packed copy's shape with half its rows, without the
  // group dimension for one group.
  SmallVector<int64_t> expected(to.getShape());
  if (to.getRank() == 2 || to.getRank() == 3)
    expected[1] /= 2;
  if (from.getRank() + 1 == to.getRank() && expected[0] == 1)
    expected.erase(expected.begin());
  if ((to.getRank() != 2 && to.getRank() != 3) || to.getDimSize(1) % 2 != 0 ||
      from.getShape() != ArrayRef<int64_t>(expected))
    return op->emitOpError()
           << "expects copy " << i << " (" << stringifyCopyLayout(layout)
           << ") to be a packed [G, 2F, H] or [G, 2F] copy of twice its "
              "master's rows, got "
           << to << " for " << from;
  return success();
}

static LogicalResult verifyCopies(Operation *op, ValueRange masters,
                                  ValueRange copies, ArrayAttr layouts) {
  size_t count = layouts ? layouts.size() : 0;
  if (copies.size() != masters.size() || count != masters.size())
    return op->emitOpError()
           << "expects one copy and one layout per master (" << masters.size()
           << "), got " << copies.size() << " and " << count;
  for (auto [i, master] : llvm::enumerate(masters))
    if (failed(verifyCopy(op, i, master, copies[i],
                          cast<CopyLayoutAttr>(layouts[i]).getValue())))
      return failure();
  return success();
}

/// The weights of an update: as many masters, moments and gradients, each
/// weight's four of one static shape, the master and gradient f32 and the
/// two moments both f32 or both bf16.
static LogicalResult verifyWeights(Operation *op, ValueRange params,
                                   ValueRange m, ValueRange v,
                                   ValueRange grads) {
  if (params.empty() || m.size() != params.size() ||
      v.size() != params.size() || grads.size() != params.size())
    return op->emitOpError()
           << "expects as many params, m, v and grads, at least one, got "
           << params.size() << ", " << m.size() << ", " << v.size() << " and "
           << grads.size();
  for (auto [i, p] : llvm::enumerate(params)) {
    auto type = cast<MemRefType>(p.getType());
    if (!type.hasStaticShape() || !type.getElementType().isF32())
      return op->emitOpError() << "expects master " << i
                               << " to be f32 of static shape, got " << type;
    if (grads[i].getType() != type)
      return op->emitOpError()
             << "expects grads " << i << " of its master's type " << type
             << ", got " << grads[i].getType();
    auto moment = cast<MemRefType>(m[i].getType());
    if (moment.getShape() != type.getShape() ||
        !(moment.getElementType().isF32() || moment.getElementType().isBF16()))
      return op->emitOpError()
             << "expects m " << i << " of its master's shape, f32 or bf16, got "
             << moment;
    if (v[i].getType() != moment)
      return op->emitOpError() << "expects v " << i << " of m's type " << moment
                               << ", got " << v[i].getType();
  }
  return success();
}

/// The state's bounds (update_check's): `[weights, 3]` i32, or any number
/// of weights where `weights` is negative.
static LogicalResult verifyBounds(Operation *op, Value bounds,
                                  int64_t weights) {
  auto type = cast<MemRefType>(bounds.getType());
  if (type.getRank() != 2 || !type.getElementType().isInteger(32) ||
      !type.hasStaticShape() || type.getDimSize(1) != 3 ||
      (weights >= 0 && type.getDimSize(0) != weights))
    return op->emitOpError()
           << "expects bounds of "
           << (weights >= 0 ? std::to_string(weights) : std::string("W"))
           << " x 3 i32 (each weight's largest |master|, |first moment| and "
              "second moment), got "
           << type;
  return success();
}

LogicalResult ComputeCopiesOp::verify() {
  if (getValid() && failed(verifyVerdict(*this, getValid(), "valid")))
    return failure();
  if (getBounds() && !getValid())
    return emitOpError() << "expects valid with bounds (they are zeroed "
                            "when the copies are made)";
  if (getBounds() && failed(verifyBounds(*this, getBounds(), -1)))
    return failure();
  if (getMasters().empty())
    return emitOpError() << "expects at least one master";
  return verifyCopies(*this, getMasters(), getCopies(), getLayouts());
}

LogicalResult MseLossOp::verify() {
  Checker c{*this};
  c.memref(getY(), "y", 2, Elt::HalfOrF32)
      .memref(getTarget(), "target", 2, Elt::F32)
      .memref(getHyper(), "hyper", 1, Elt::F32)
      .memref(getDy(), "dy", 2, Elt::F32)
      .memref(getLoss(), "loss", 1, Elt::F32)
      .isStatic(getY(), "y", 1)
      .sameType(getTarget(), "target", getDy(), "dy")
      .dim(getTarget(), "target", 1, dimOf(getY(), 1), "y's hidden size");
  return c.result();
}

LogicalResult ColumnSumOp::verify() {
  Checker c{*this};
  c.memref(getIn(), "in", 2, Elt::Float)
      .isStatic(getIn(), "in", 1)
      .memref(getOut(), "out", 1, Elt::F32)
      .dim(getOut(), "out", 0, dimOf(getIn(), 1), "in's columns");
  return c.result();
}

LogicalResult GroupedColumnSumOp::verify() {
  Checker c{*this};
  c.memref(getIn(), "in", 2, Elt::Float)
      .isStatic(getIn(), "in", 1)
      .memref(getGroups(), "groups", 1, Elt::I32)
      .isStatic(getGroups(), "groups", 0)
      .memref(getOut(), "out", 2, Elt::F32)
      .dim(getOut(), "out", 1, dimOf(getIn(), 1), "in's columns");
  if (!c.ok)
    return failure();
  c.dim(getOut(), "out", 0, dimOf(getGroups(), 0) - 1, "the groups");
  return c.result();
}

LogicalResult RowTokensOp::verify() {
  Checker c{*this};
  c.memref(getRowMap(), "row_map", 2, Elt::I32)
      .isStatic(getRowMap(), "row_map", 1)
      .memref(getRowToken(), "row_token", 1, Elt::I32);
  return c.result();
}

/// The (row_token, offsets) pair of the kernels that find each row's
/// assignment.
static void checkRowTokens(Checker &c, Value rowToken, Value offsets) {
  c.memref(rowToken, "row_token", 1, Elt::I32)
      .memref(offsets, "offsets", 1, Elt::I32)
      .isStatic(offsets, "offsets", 0);
}

LogicalResult GatherRowDyOp::verify() {
  Checker c{*this};
  checkRowTokens(c, getRowToken(), getOffsets());
  c.memref(getDy(), "dy", 2, Elt::F32)
      .isStatic(getDy(), "dy", 1)
      .memref(getRowDy(), "row_dy", 2, Elt::Half)
      .dim(getRowDy(), "row_dy", 1, dimOf(getDy(), 1), "dy's hidden size")
      .positive(getTopK(), "top_k");
  return c.result();
}

LogicalResult ScatterRowWeightGradOp::verify() {
  Checker c{*this};
  checkRowTokens(c, getRowToken(), getOffsets());
  c.memref(getRowGrad(), "row_grad", 1, Elt::F32)
      .memref(getDtw(), "dtw", 2, Elt::F32)
      .isStatic(getDtw(), "dtw", 1);
  return c.result();
}

LogicalResult ScaledWeightGradOp::verify() {
  Checker c{*this};
  checkRowTokens(c, getRowToken(), getOffsets());
  c.memref(getDrows(), "drows", 2, Elt::HalfOrF32)
      .isStatic(getDrows(), "drows", 1)
      .memref(getX(), "x", 2, Elt::HalfOrF32)
      .memref(getRowGrad(), "row_grad", 1, Elt::F32)
      .dim(getX(), "x", 1, dimOf(getDrows(), 1), "drows' hidden size")
      .positive(getTopK(), "top_k");
  return c.result();
}

LogicalResult ScaleRowsOp::verify() {
  Checker c{*this};
  c.memref(getSrc(), "src", 2, Elt::HalfOrF32)
      .isStatic(getSrc(), "src", 1)
      .memref(getGroups(), "groups", 1, Elt::I32)
      .isStatic(getGroups(), "groups", 0)
      .memref(getDst(), "dst", 2, Elt::Half)
      .memref(getWeight(), "weight", 1, Elt::F32)
      .dim(getDst(), "dst", 1, dimOf(getSrc(), 1), "src's columns");
  return c.result();
}

LogicalResult ActGradOp::verify() {
  if (static_cast<bool>(getWeight()) != static_cast<bool>(getRowGrad()))
    return emitOpError() << "expects weight and row_grad together";
  if (getDy() && !getWeight())
    return emitOpError() << "expects the down bias (dy, b2) only with "
                            "weight and row_grad";
  if (getOutDy() && (!getWeight() || getDy()))
    return emitOpError() << "expects combine (dy, down) only with weight and "
                            "row_grad, and not with the down bias";
  if (static_cast<bool>(getAlpha()) != static_cast<bool>(getLimit()))
    return emitOpError() << "expects alpha and limit together";
  Checker c{*this};
  c.memref(getGu(), "gu", 2, Elt::F32)
      .isStatic(getGu(), "gu", 1)
      .memref(getGs(), "gs", 2, Elt::F32)
      .memref(getGroups(), "groups", 1, Elt::I32)
      .isStatic(getGroups(), "groups", 0)
      .memref(getDgu(), "dgu", 2, Elt::Half)
      .memref(getDg(), "dg", 2, Elt::Half)
      .memref(getDu(), "du", 2, Elt::Half)
      .memref(getWeight(), "weight", 1, Elt::F32)
      .memref(getRowGrad(), "row_grad", 1, Elt::F32)
      .memref(getDy(), "dy", 2, Elt::Half)
      .memref(getB2(), "b2", 2, Elt::Half);
  if (!c.ok)
    return failure();
  int64_t ffn2 = dimOf(getGu(), 1);
  if (ffn2 % 16 != 0)
    return emitOpError() << "expects gu of 2F columns, F a multiple of 8 "
                            "(blocks of 8 gate and 8 up columns), got "
                         << getGu().getType();
  int64_t padded = 2 * 128 * ((ffn2 / 2 + 127) / 128);
  c.dim(getGs(), "gs", 1, ffn2 / 2, "half of gu's columns")
      .dim(getDgu(), "dgu", 1, getSplit() ? padded : ffn2,
           getSplit() ? "gate and up, each half of gu's columns padded to a "
                        "multiple of 128"
                      : "gu's columns")
      .sameType(getDg(), "dg", getDu(), "du")
      .dim(getDg(), "dg", 1, ffn2 / 2, "half of gu's columns");
  if (getB2())
    c.isStatic(getB2(), "b2", 1)
        .dim(getDy(), "dy", 1, dimOf(getB2(), 1), "b2's hidden size")
        .dim(getB2(), "b2", 0, dimOf(getGroups(), 0) - 1, "the groups");
  if (getOutDy())
    c.memref(getOutDy(), "dy", 2, Elt::Half)
        .memref(getDown(), "down", 2, Elt::Half)
        .isStatic(getDown(), "down", 1)
        .dim(getOutDy(), "dy", 1, dimOf(getDown(), 1), "down's hidden size");
  return c.result();
}

LogicalResult RouteGradOp::verify() {
  if (getScoring() == Scoring::Sparsemixer)
    return emitOpError() << "expects softmax or sigmoid scoring "
                            "(sparsemixer has no gradient here)";
  Checker c{*this};
  c.memref(getLogits(), "logits", 2, Elt::F32)
      .isStatic(getLogits(), "logits", 1)
      .memref(getRouterBias(), "router_bias", 1, Elt::Float)
      .memref(getIds(), "ids", 2, Elt::I32)
      .isStatic(getIds(), "ids", 1)
      .memref(getDtw(), "dtw", 2, Elt::F32)
      .memref(getDl(), "dl", 2, Elt::F32)
      .memref(getDlHalf(), "dl_half", 2, Elt::Half)
      .sameType(getLogits(), "logits", getDl(), "dl")
      .dim(getDtw(), "dtw", 1, dimOf(getIds(), 1), "ids' k")
      .dim(getRouterBias(), "router_bias", 0, dimOf(getLogits(), 1),
           "the experts")
      .dim(getDlHalf(), "dl_half", 1, dimOf(getLogits(), 1), "the experts");
  return c.result();
}

LogicalResult InputGradOp::verify() {
  if (static_cast<bool>(getRouterDx()) == static_cast<bool>(getDl()))
    return emitOpError() << "expects the router's part of dx as one of "
                            "router_dx or router(dl, router)";
  if (static_cast<bool>(getDl()) != static_cast<bool>(getRouter()))
    return emitOpError() << "expects dl and router together";
  if (static_cast<bool>(getSharedDz()) != static_cast<bool>(getGate()))
    return emitOpError() << "expects shared_dz and gate together";
  Checker c{*this};
  c.memref(getDrows(), "drows", 2, Elt::HalfOrF32)
      .memref(getRowMap(), "row_map", 2, Elt::I32)
      .isStatic(getRowMap(), "row_map", 1)
      .memref(getScales(), "scales", 2, Elt::F32)
      .memref(getRouterDx(), "router_dx", 2, Elt::F32)
      .memref(getDl(), "dl", 2, Elt::F32)
      .memref(getRouter(), "router", 2, Elt::Float)
      .memref(getSharedDx(), "shared_dx", 2, Elt::F32)
      .memref(getSharedDz(), "shared_dz", 2, Elt::F32)
      .memref(getGate(), "gate", 2, Elt::Float)
      .memref(getDx(), "dx", 2, Elt::F32)
      .isStatic(getDx(), "dx", 1);
  if (!c.ok)
    return failure();
  int64_t hidden = dimOf(getDx(), 1);
  c.dim(getDrows(), "drows", 1, hidden, "dx's hidden size")
      .dim(getRouterDx(), "router_dx", 1, hidden, "dx's hidden size")
      .dim(getRouter(), "router", 1, hidden, "dx's hidden size")
      .dim(getSharedDx(), "shared_dx", 1, hidden, "dx's hidden size")
      .dim(getGate(), "gate", 1, hidden, "dx's hidden size")
      .dim(getScales(), "scales", 1, dimOf(getRowMap(), 1), "row_map's k");
  if (getDl())
    c.isStatic(getRouter(), "router", 0)
        .dim(getDl(), "dl", 1, dimOf(getRouter(), 0), "the router's experts");
  return c.result();
}

LogicalResult SharedScaleGradOp::verify() {
  Checker c{*this};
  c.memref(getDy(), "dy", 2, Elt::F32)
      .isStatic(getDy(), "dy", 1)
      .memref(getOut(), "out", 2, Elt::HalfOrF32)
      .memref(getScale(), "scale", 1, Elt::F32)
      .memref(getDz(), "dz", 2, Elt::F32)
      .dim(getOut(), "out", 1, dimOf(getDy(), 1), "dy's hidden size")
      .dim(getDz(), "dz", 1, 1, "one logit a token");
  return c.result();
}

LogicalResult RouterGradOp::verify() {
  Checker c{*this};
  c.memref(getDl(), "dl", 2, Elt::F32)
      .memref(getX(), "x", 2, Elt::HalfOrF32)
      .memref(getGrad(), "grad", 2, Elt::F32)
      .isStatic(getGrad(), "grad", 1)
      .dim(getX(), "x", 1, dimOf(getGrad(), 1), "grad's hidden size")
      .dim(getDl(), "dl", 1, dimOf(getGrad(), 0), "grad's rows");
  return c.result();
}

LogicalResult TokenOffsetsOp::verify() {
  Checker c{*this};
  c.memref(getX(), "x", 2, Elt::HalfOrF32)
      .memref(getOffsets(), "offsets", 1, Elt::I32)
      .dim(getOffsets(), "offsets", 0, 2, "[0, T]");
  return c.result();
}

LogicalResult ExpertLoadOp::verify() {
  Checker c{*this};
  c.memref(getCounts(), "counts", 1, Elt::I32)
      .memref(getLoad(), "load", 1, Elt::F32)
      .isStatic(getLoad(), "load", 0)
      .positive(getChunks(), "chunks");
  if (!c.ok)
    return failure();
  c.dim(getCounts(), "counts", 0, getChunks() * dimOf(getLoad(), 0),
        "chunks x experts");
  return c.result();
}

LogicalResult BiasUpdateOp::verify() {
  if (getRejected() && failed(verifyVerdict(*this, getRejected(), "rejected")))
    return failure();
  Checker c{*this};
  c.memref(getLoad(), "load", 1, Elt::F32)
      .isStatic(getLoad(), "load", 0)
      .memref(getHyper(), "hyper", 1, Elt::F32)
      .memref(getBias(), "bias", 1, Elt::F32)
      .sameType(getLoad(), "load", getBias(), "bias")
      .positive(getTopK(), "top_k");
  return c.result();
}

LogicalResult AdamWOp::verify() {
  if (getRejected() && failed(verifyVerdict(*this, getRejected(), "rejected")))
    return failure();
  Checker c{*this};
  c.memref(getHyper(), "hyper", 1, Elt::F32);
  if (!c.ok ||
      failed(verifyWeights(*this, getParams(), getM(), getV(), getGrads())))
    return failure();
  if (getBounds() &&
      failed(verifyBounds(*this, getBounds(), getParams().size())))
    return failure();
  if (getCopies().empty() && !getLayouts() && !getCopied())
    return success();
  SmallVector<Value> masters(getParams());
  if (std::optional<ArrayRef<int64_t>> copied = getCopied()) {
    masters.clear();
    int64_t previous = -1;
    for (int64_t i : *copied) {
      if (i <= previous || i >= static_cast<int64_t>(getParams().size()))
        return emitOpError()
               << "expects copied to hold ascending indices of params (< "
               << getParams().size() << "), got " << i;
      masters.push_back(getParams()[i]);
      previous = i;
    }
  }
  return verifyCopies(*this, masters, getCopies(),
                      getLayouts().value_or(nullptr));
}

/// `value` is `[weights]` of `elt` (i32 or f32), one entry per weight.
static LogicalResult verifyPerWeight(Operation *op, Value value, StringRef name,
                                     bool isI32, size_t weights) {
  auto type = cast<MemRefType>(value.getType());
  bool eltOk = isI32 ? type.getElementType().isInteger(32)
                     : type.getElementType().isF32();
  if (type.getRank() != 1 || !eltOk || !type.hasStaticShape() ||
      type.getDimSize(0) != static_cast<int64_t>(weights))
    return op->emitOpError()
           << "expects " << name << " of " << weights << " "
           << (isI32 ? "i32" : "f32") << " (one per weight), got " << type;
  return success();
}

LogicalResult GradStatsOp::verify() {
  if (getGrads().empty())
    return emitOpError() << "expects at least one gradient";
  for (auto [i, g] : llvm::enumerate(getGrads())) {
    auto type = cast<MemRefType>(g.getType());
    if (!type.hasStaticShape() || !type.getElementType().isF32())
      return emitOpError() << "expects gradient " << i
                           << " to be f32 of static shape, got " << type;
  }
  size_t n = getGrads().size();
  if (failed(verifyPerWeight(*this, getGradSq(), "grad_sq", false, n)) ||
      failed(verifyPerWeight(*this, getGradMax(), "grad_max", true, n)))
    return failure();
  return success();
}

LogicalResult UpdateCheckOp::verify() {
  Checker c{*this};
  c.memref(getHyper(), "hyper", 1, Elt::F32);
  if (!c.ok ||
      failed(verifyWeights(*this, getParams(), getM(), getV(), getGrads())))
    return failure();
  size_t n = getParams().size();
  if (failed(verifyPerWeight(*this, getGradMax(), "grad_max", true, n)) ||
      failed(verifyPerWeight(*this, getBad(), "bad", false, n)))
    return failure();
  if (static_cast<bool>(getValid()) != static_cast<bool>(getBounds()))
    return emitOpError() << "expects valid and bounds together (the bounds "
                            "hold while the flag is set)";
  if (getValid() && (failed(verifyVerdict(*this, getValid(), "valid")) ||
                     failed(verifyBounds(*this, getBounds(), n))))
    return failure();
  return success();
}

LogicalResult UpdateVerdictOp::verify() {
  if (failed(verifyVerdict(*this, getLoss(), "loss")) ||
      failed(verifyVerdict(*this, getRejected(), "rejected")) ||
      (getCopiesValid() &&
       failed(verifyVerdict(*this, getCopiesValid(), "copies_valid"))))
    return failure();
  Checker c{*this};
  c.memref(getGradSq(), "grad_sq", 1, Elt::F32)
      .isStatic(getGradSq(), "grad_sq", 0);
  return c.result();
}

//===----------------------------------------------------------------------===//
// Device-initiated exchanges
//===----------------------------------------------------------------------===//

namespace {

/// The operands every exchange kernel shares: `peers` holds a distance per
/// rank, this rank, the waits' limit and the received rows' capacity; `status`
/// two words; `flags` i32 words, `slot` one of them.
void checkExchange(Checker &c, int64_t ranks, Value peers, Value status,
                   Value flags) {
  c.positive(ranks, "ranks")
      .memref(peers, "peers", 1, Elt::I64)
      .dim(peers, "peers", 0, ranks + 3,
           "a distance per rank, the rank, the limit and the capacity")
      .memref(status, "status", 1, Elt::I32)
      .dim(status, "status", 0, 2, "a code and its rank or slot")
      .memref(flags, "flags", 1, Elt::I32)
      .isStatic(flags, "flags", 0);
}

/// A send's flag: a word of `flags` past the ranks' flags of the sizes.
void checkSlot(Checker &c, int64_t slot, int64_t ranks, Value flags) {
  if (c.ok && (slot < ranks || slot >= dimOf(flags, 0)))
    c.error() << "expects slot " << slot << " to be a word of flags ("
              << flags.getType() << ") past the " << ranks
              << " flags of the sizes";
}

/// Experts (E, from `offsets` of C x E + 1 for C token chunks), a multiple
/// of `ranks`.
int64_t expertsOf(Checker &c, Value offsets, int64_t ranks, int64_t chunks) {
  c.memref(offsets, "offsets", 1, Elt::I32).isStatic(offsets, "offsets", 0);
  if (!c.ok)
    return 0;
  int64_t segments = dimOf(offsets, 0) - 1;
  int64_t experts = segments / chunks;
  if (segments < 1 || segments % chunks || experts % ranks)
    c.error() << "expects offsets of " << chunks
              << " chunk(s) of a multiple of " << ranks
              << " experts (one block a rank) plus one, got "
              << offsets.getType();
  return experts;
}

} // namespace

LogicalResult EpCountsOp::verify() {
  Checker c{*this};
  int64_t ranks = getRanks();
  checkExchange(c, ranks, getPeers(), getStatus(), getFlags());
  int64_t chunks = getChunks();
  if (c.ok && chunks < 1)
    c.error() << "expects the ep_group_offsets of at least one chunk";
  int64_t e = c.ok ? expertsOf(c, getOffsets(), ranks, chunks) : 0;
  if (!c.ok)
    return failure();
  c.memref(getTable(), "table", 1, Elt::I32)
      .dim(getTable(), "table", 0, ranks * chunks * e,
           "ranks x chunks x experts")
      .memref(getEpoch(), "epoch", 1, Elt::I32)
      .dim(getEpoch(), "epoch", 0, 1, "one word")
      .memref(getEpOffsets(), "ep_offsets", 1, Elt::I32)
      .dim(getEpOffsets(), "ep_offsets", 0, chunks * (e + 1),
           "chunks x (experts + 1)")
      .memref(getSendPos(), "send_pos", 1, Elt::I32)
      .dim(getSendPos(), "send_pos", 0, chunks * e, "chunks x experts")
      .memref(getBackPos(), "back_pos", 1, Elt::I32)
      .dim(getBackPos(), "back_pos", 0, chunks * e, "chunks x experts");
  for (Value groups : getEpGroupOffsets())
    c.memref(groups, "ep_group_offsets", 1, Elt::I32)
        .dim(groups, "ep_group_offsets", 0, e / ranks + 1, "local experts + 1");
  if (c.ok && dimOf(getFlags(), 0) < ranks)
    c.error() << "expects flags of at least " << ranks
              << " words (a flag per rank), got " << getFlags().getType();
  return c.result();
}

LogicalResult EpSendOp::verify() {
  Checker c{*this};
  int64_t ranks = getRanks();
  int64_t chunks = getChunks(), chunk = getChunk();
  checkExchange(c, ranks, getPeers(), getStatus(), getFlags());
  c.positive(chunks, "chunks");
  if (c.ok && (chunk < 0 || chunk >= chunks))
    c.error() << "expects chunk " << chunk << " to be one of the " << chunks
              << " chunk(s)";
  // Dispatch: the chunks' segments by expert, C x E + 1 offsets; combine:
  // each chunk's E received segments and its end, C x (E + 1).
  c.memref(getSegments(), "segments", 1, Elt::I32)
      .isStatic(getSegments(), "segments", 0);
  if (!c.ok)
    return failure();
  bool dispatch = getDirection() == EpDirection::Dispatch;
  int64_t bounds = dimOf(getSegments(), 0);
  int64_t e = dispatch ? (bounds - 1) / chunks : bounds / chunks - 1;
  if (e < 1 || e % ranks ||
      (dispatch ? (bounds - 1) % chunks : bounds % chunks))
    c.error() << "expects segments of " << chunks
              << " chunk(s) of a multiple of " << ranks
              << " experts (one block a rank), "
              << (dispatch ? "plus one" : "each plus one") << ", got "
              << getSegments().getType();
  c.memref(getPositions(), "positions", 1, Elt::I32)
      .dim(getPositions(), "positions", 0, chunks * e,
           "a position per segment");
  c.memref(getRows(), "rows", 2, Elt::Float)
      .isStatic(getRows(), "rows", 1)
      .memref(getTo(), "to", 2, Elt::Float)
      .dim(getTo(), "to", 1, dimOf(getRows(), 1), "the rows' width");
  if (c.ok && cast<MemRefType>(getRows().getType()).getElementType() !=
                  cast<MemRefType>(getTo().getType()).getElementType())
    c.error() << "expects rows and to of one element type, got "
              << getRows().getType() << " and " << getTo().getType();
  if (c.ok && static_cast<bool>(getWeights()) != static_cast<bool>(getToWeights()))
    c.error() << "expects weights and to_weights together";
  c.memref(getWeights(), "weights", 1, Elt::F32)
      .memref(getToWeights(), "to_weights", 1, Elt::F32);
  checkSlot(c, getSlot(), ranks, getFlags());
  return c.result();
}

LogicalResult EpWaitOp::verify() {
  Checker c{*this};
  checkExchange(c, getRanks(), getPeers(), getStatus(), getFlags());
  c.memref(getWaited(), "waited", 1, Elt::I32);
  if (c.ok)
    c.dim(getWaited(), "waited", 0, dimOf(getFlags(), 0), "a count a flag");
  c.positive(getSenders(), "senders").positive(getCode(), "code");
  checkSlot(c, getSlot(), getRanks(), getFlags());
  return c.result();
}
