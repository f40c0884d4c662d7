//===- MoeGpuDialect.cpp - The moegpu dialect -----------------------------===//
//
// Part of moe-compiler.
//
//===----------------------------------------------------------------------===//

#include "moegpu/MoeGpuDialect.h"
#include "moe/runtime/ScheduleAbi.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/TypeSwitch.h"

#include <algorithm>
#include <cmath>

using namespace mlir;
using namespace mlir::moegpu;

#include "moegpu/MoeGpuDialect.cpp.inc"
#include "moegpu/MoeGpuEnums.cpp.inc"

/// `type ,` of an optional operand, printed and parsed only when the
/// operand is there (grouped_gemm's offsets, between b's and c's types).
static ParseResult
parseOptionalTypeComma(OpAsmParser &parser,
                       std::optional<OpAsmParser::UnresolvedOperand> operand,
                       Type &type) {
  if (!operand)
    return success();
  return failure(parser.parseType(type) || parser.parseComma());
}

static void printOptionalTypeComma(OpAsmPrinter &printer, Operation *,
                                   Value operand, Type type) {
  if (operand)
    printer << type << ", ";
}

/// `[group,] row, col` of store_tile: two indices, or three with a group.
static ParseResult
parseTileIndices(OpAsmParser &parser,
                 std::optional<OpAsmParser::UnresolvedOperand> &group,
                 OpAsmParser::UnresolvedOperand &row,
                 OpAsmParser::UnresolvedOperand &col) {
  SmallVector<OpAsmParser::UnresolvedOperand, 3> indices;
  SMLoc loc = parser.getCurrentLocation();
  if (parser.parseOperandList(indices))
    return failure();
  if (indices.size() != 2 && indices.size() != 3)
    return parser.emitError(loc) << "expects [row, col] or [group, row, col]";
  if (indices.size() == 3)
    group = indices.front();
  row = indices.end()[-2];
  col = indices.back();
  return success();
}

static void printTileIndices(OpAsmPrinter &printer, Operation *, Value group,
                             Value row, Value col) {
  if (group)
    printer << group << ", ";
  printer << row << ", " << col;
}

#define GET_ATTRDEF_CLASSES
#include "moegpu/MoeGpuAttrs.cpp.inc"

#define GET_TYPEDEF_CLASSES
#include "moegpu/MoeGpuTypes.cpp.inc"

#define GET_OP_CLASSES
#include "moegpu/MoeGpuOps.cpp.inc"

void MoeGpuDialect::initialize() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "moegpu/MoeGpuAttrs.cpp.inc"
      >();
  addTypes<
#define GET_TYPEDEF_LIST
#include "moegpu/MoeGpuTypes.cpp.inc"
      >();
  addOperations<
#define GET_OP_LIST
#include "moegpu/MoeGpuOps.cpp.inc"
      >();
}

bool mlir::moegpu::isPaddedSegments(Value offsets) {
  auto type = offsets ? dyn_cast<MemRefType>(offsets.getType()) : MemRefType();
  return type && type.getRank() == 1 && !type.isDynamicDim(0) &&
         type.getDimSize(0) > 2;
}

bool mlir::moegpu::rowsEndOnBoxes(Value offsets) {
  if (!offsets)
    return true;
  auto type = dyn_cast<MemRefType>(offsets.getType());
  return isPaddedSegments(offsets) ||
         (type && type.getRank() == 1 && type.getShape()[0] == 2);
}

int64_t mlir::moegpu::splitCount(int64_t rows, int64_t blockM,
                                 int64_t columnBlocks, int64_t kBlocks,
                                 int64_t maxSplits, int64_t ctas) {
  int64_t tiles =
      std::max<int64_t>(1, llvm::divideCeil(rows, blockM) * columnBlocks);
  int64_t splits = std::clamp<int64_t>(
      ctas / tiles, 1, std::max<int64_t>(1, std::min(maxSplits, kBlocks)));
  return llvm::divideCeil(kBlocks, llvm::divideCeil(kBlocks, splits));
}

Value mlir::moegpu::buildSplitCount(ImplicitLocOpBuilder &b, Value rows,
                                    int64_t blockM, int64_t columnBlocks,
                                    int64_t kBlocks, int64_t maxSplits,
                                    Value ctas) {
  // One op a statement: the IR's order must not depend on the order in
  // which the C++ compiler evaluates a call's arguments.
  auto idx = [&](int64_t v) -> Value {
    return arith::ConstantIndexOp::create(b, v);
  };
  Value one = idx(1);
  Value mBlocks = arith::CeilDivUIOp::create(b, rows, idx(blockM));
  Value tiles = arith::MulIOp::create(b, mBlocks, idx(columnBlocks));
  tiles = arith::MaxUIOp::create(b, one, tiles);
  Value splits = arith::DivUIOp::create(b, ctas, tiles);
  splits = arith::MaxUIOp::create(b, splits, one);
  Value most = idx(std::max<int64_t>(1, std::min(maxSplits, kBlocks)));
  splits = arith::MinUIOp::create(b, splits, most);
  Value depth = idx(kBlocks);
  Value per = arith::CeilDivUIOp::create(b, depth, splits);
  return arith::CeilDivUIOp::create(b, depth, per);
}

bool mlir::moegpu::usesTmaStoreEpilogue(MemRefType c, bool rowsEndOnBoxes,
                                        bool kGrouped) {
  Type element = c.getElementType();
  int64_t bytes = element.isF32() ? 4 : element.isBF16() || element.isF16() ? 2
                                                                           : 0;
  int64_t width = c.getShape().back();
  if (!bytes || ShapedType::isDynamic(width) || width * bytes % 16 != 0)
    return false;
  // A split_k GEMM's slices of a run-time row count: a box clipped only
  // at the buffer's end would reach into the next slice.
  if (!kGrouped && c.getRank() == 3)
    return false;
  if (kGrouped) {
    int64_t rows = c.getRank() >= 2 ? c.getShape()[c.getRank() - 2] : 0;
    return !ShapedType::isDynamic(rows) && rows % 64 == 0;
  }
  return rowsEndOnBoxes;
}

int64_t mlir::moegpu::tmaStoreStagingBytes(int64_t consumers) {
  return consumers * 2 * 64 * 128;
}

Value mlir::moegpu::buildExp(ImplicitLocOpBuilder &b, Value x) {
  Value log2e = arith::ConstantOp::create(
      b, b.getF32FloatAttr(static_cast<float>(1.4426950408889634)));
  return LLVM::CallIntrinsicOp::create(
             b, b.getF32Type(), b.getStringAttr("llvm.nvvm.ex2.approx.ftz.f"),
             ValueRange{arith::MulFOp::create(b, x, log2e)})
      .getResult(0);
}

//===----------------------------------------------------------------------===//
// Attributes
//===----------------------------------------------------------------------===//

LogicalResult TileAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                               int64_t m, int64_t n, int64_t k,
                               int64_t stages, int64_t cluster) {
  if (m < 64 || m > 256 || m % 64 != 0)
    return emitError() << "tile m must be 64, 128, 192 or 256 (64 rows per "
                          "consumer warpgroup), got "
                       << m;
  if (n < 8 || n > 256 || n % 8 != 0)
    return emitError() << "tile n must be a multiple of 8 in [8, 256] (a "
                          "wgmma N), got "
                       << n;
  if (k != 64 && k != 128)
    return emitError() << "tile k must be 64 or 128 (one 128-byte swizzle "
                          "atom of 16-bit or 8-bit elements), got "
                       << k;
  if (stages < 2 || stages > 32)
    return emitError() << "tile stages must be in [2, 32], got " << stages;
  if (cluster != 1 && cluster != 2)
    return emitError() << "tile cluster must be 1 or 2, got " << cluster;
  // Each CTA of a pair loads half of B: half the rows of a K-major tile, or
  // half of an MN-major tile's 64-column boxes.
  if (cluster == 2 && n % 128 != 0)
    return emitError() << "tile cluster 2 needs n to be a multiple of 128 "
                          "(each CTA loads half of B), got "
                       << n;
  return success();
}

LogicalResult SmRangeAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                  int64_t first, int64_t count) {
  if (first < 0)
    return emitError() << "sm_range first must be >= 0, got " << first;
  if (count < 1 || count > 1024)
    return emitError() << "sm_range count must be in [1, 1024], got " << count;
  return success();
}

//===----------------------------------------------------------------------===//
// Ops
//===----------------------------------------------------------------------===//

/// Checks that `value` is a memref of rank `rank` whose element type
/// satisfies `elementOk`; `what` names the operand in the diagnostic.
static LogicalResult checkMemRef(Operation *op, Value value, StringRef what,
                                 int64_t rank, StringRef expected,
                                 function_ref<bool(Type)> elementOk) {
  auto type = cast<MemRefType>(value.getType());
  if (type.getRank() != rank || !elementOk(type.getElementType()))
    return op->emitOpError() << "expects " << what << " to be a rank-" << rank
                             << " memref of " << expected << ", got " << type;
  if (!type.getLayout().isIdentity())
    return op->emitOpError() << "expects " << what
                             << " to have the identity layout, got " << type;
  return success();
}

static bool isHalfFloat(Type type) { return type.isBF16() || type.isF16(); }

/// A scale operand is present exactly with the row_scale epilogue.
static LogicalResult checkScaleOperand(Operation *op, Epilogue epilogue,
                                       Value scale) {
  bool rowScale = epilogue == Epilogue::RowScale;
  if (rowScale == static_cast<bool>(scale))
    return success();
  return op->emitOpError() << (rowScale ? "expects a scale operand with the "
                                          "row_scale epilogue"
                                        : "expects no scale operand without "
                                          "the row_scale epilogue");
}

/// `alpha` and `limit` (the clamped SwiGLU) come together, with the swiglu
/// epilogue, finite and positive.
static LogicalResult verifyClamp(Operation *op, Epilogue epilogue,
                                 std::optional<APFloat> alpha,
                                 std::optional<APFloat> limit) {
  if (!alpha && !limit)
    return success();
  if (!alpha || !limit || epilogue != Epilogue::SwiGLU)
    return op->emitOpError() << "expects alpha and limit together, with the "
                                "swiglu epilogue";
  for (double v : {alpha->convertToDouble(), limit->convertToDouble()})
    if (!std::isfinite(v) || v <= 0.0)
      return op->emitOpError() << "expects a finite alpha and limit > 0";
  return success();
}

LogicalResult GroupedGemmOp::verifyBlockScales() {
  MemRefType a = getA().getType(), b = getB().getType();
  if (getLayout() == GemmLayout::NN || isDense())
    return emitOpError() << "expects FP8 block scales only on a grouped GEMM "
                            "of the nt or tn layout";
  // c's element type was checked with the other operands'.
  if (getEpilogue() == Epilogue::Accumulate)
    return emitOpError() << "expects an FP8 GEMM to write a bf16, f16 or f32 "
                            "c without accumulating";
  auto aScale = cast<MemRefType>(getAScale().getType());
  auto bScale = cast<MemRefType>(getBScale().getType());
  if (isKGrouped()) {
    // The transposed codes, [M, R] and [N, R], and a scale per column of
    // the untransposed operands per 128 of R.
    if (ShapedType::isDynamic(a.getDimSize(0)) ||
        ShapedType::isDynamic(b.getDimSize(0)))
      return emitOpError() << "expects an FP8 tn GEMM's a and b to be the "
                              "transposed codes [M, R] and [N, R] with "
                              "static M and N, got "
                           << a << " and " << b;
    int64_t r = a.getDimSize(1);
    if (!ShapedType::isDynamic(r) && r % 16 != 0)
      return emitOpError() << "expects an FP8 tn GEMM's R to be a multiple "
                              "of 16 (16-byte TMA strides of 1-byte "
                              "elements), got "
                           << r;
    int64_t kBlocks =
        ShapedType::isDynamic(r) ? r : llvm::divideCeil(r, int64_t{128});
    for (auto [scale, name, rows] : {std::tuple{aScale, "a_scale", getM()},
                                     std::tuple{bScale, "b_scale", getN()}}) {
      int64_t blocks = scale.getRank() == 2 ? scale.getDimSize(1) : 0;
      if (scale.getRank() != 2 || !scale.getElementType().isF32() ||
          scale.getDimSize(0) != rows ||
          (!ShapedType::isDynamic(kBlocks) && !ShapedType::isDynamic(blocks) &&
           blocks != kBlocks)) {
        InFlightDiagnostic diag = emitOpError()
                                  << "expects " << name << " to be f32 ["
                                  << rows << ", ";
        if (ShapedType::isDynamic(kBlocks))
          diag << "ceil(R / 128)";
        else
          diag << kBlocks;
        return diag << "] (one scale per column per 128 rows), got " << scale;
      }
    }
    return success();
  }
  if (!b.hasStaticShape() || ShapedType::isDynamic(a.getDimSize(1)))
    return emitOpError() << "expects an FP8 GEMM's b and a's columns to be "
                            "static";
  int64_t n = getN(), k = getK(), kBlocks = llvm::divideCeil(k, 128);
  if (k % 16 != 0)
    return emitOpError() << "expects an FP8 GEMM's K to be a multiple of 16 "
                            "(16-byte TMA strides of 1-byte elements), got "
                         << k;
  bool swiglu = getEpilogue() == Epilogue::SwiGLU || getGateUpScales();
  if (getGateUpScales() && n % (2 * ::moe::abi::kGateUpBlock) != 0)
    return emitOpError() << "expects gate_up_scales of a packed gate/up B "
                            "(blocks of "
                         << ::moe::abi::kGateUpBlock
                         << " gate rows then as many up rows), got N = " << n;
  // With swiglu the gate's blocks, then the up's.
  int64_t nBlocks =
      swiglu ? 2 * llvm::divideCeil(n / 2, 128) : llvm::divideCeil(n, 128);
  if (aScale.getRank() != 2 || !aScale.getElementType().isF32() ||
      aScale.getDimSize(1) != kBlocks ||
      (!ShapedType::isDynamic(a.getDimSize(0)) &&
       !ShapedType::isDynamic(aScale.getDimSize(0)) &&
       aScale.getDimSize(0) != a.getDimSize(0)))
    return emitOpError() << "expects a_scale to be f32 [rows of a, " << kBlocks
                         << "] (one scale per row per 128 of K), got "
                         << aScale;
  int64_t experts = getNumExperts();
  if (bScale.getRank() != 3 || !bScale.getElementType().isF32() ||
      bScale.getShape() != ArrayRef<int64_t>{experts, nBlocks, kBlocks})
    return emitOpError() << "expects b_scale to be f32 [" << experts << ", "
                         << nBlocks << ", " << kBlocks
                         << "] (one scale per 128 x 128 block"
                         << (swiglu ? ", gate blocks then up blocks" : "")
                         << "), got " << bScale;
  return success();
}

LogicalResult GroupedGemmOp::verify() {
  auto isI32 = [](Type t) { return t.isInteger(32); };
  auto isF32 = [](Type t) { return t.isF32(); };
  auto isOutput = [](Type t) { return isHalfFloat(t) || t.isF32(); };
  GemmLayout layout = getLayout();
  bool kGrouped = isKGrouped();
  if (kGrouped && isDense())
    return emitOpError() << "expects offsets with the tn layout (the groups "
                            "of the reduction's rows)";
  // b is [E, N, K] / [E, K, N], or rank 2 dense; with tn it is [R, N] and
  // c [E, M, N], or [M, N] for one group.
  int64_t bRank = kGrouped || isDense() ? 2 : 3;
  bool split = isSplitK();
  int64_t cRank = (kGrouped && getNumExperts() > 1) || split ? 3 : 2;
  if (static_cast<bool>(getAScale()) != static_cast<bool>(getBScale()))
    return emitOpError() << "expects a_scale and b_scale together";
  bool fp8 = isFp8();
  auto isOperand = [&](Type t) {
    return fp8 ? isa<Float8E4M3FNType>(t) : isHalfFloat(t);
  };
  StringRef operandTypes = fp8 ? "f8E4M3FN (with block scales)" : "bf16 or f16";
  if (failed(checkMemRef(*this, getA(), "a", 2, operandTypes, isOperand)) ||
      failed(checkMemRef(*this, getB(), "b", bRank, operandTypes, isOperand)) ||
      (getOffsets() &&
       failed(checkMemRef(*this, getOffsets(), "offsets", 1, "i32", isI32))) ||
      failed(
          checkMemRef(*this, getC(), "c", cRank, "bf16, f16 or f32", isOutput)))
    return failure();
  MemRefType a = getA().getType(), b = getB().getType(), c = getC().getType();
  if (split) {
    auto count = cast<MemRefType>(getSplitCount().getType());
    if (!isDense() || layout != GemmLayout::NT || fp8 ||
        getEpilogue() != Epilogue::None || getScale() || getBias())
      return emitOpError() << "expects split_k only on a dense GEMM of the nt "
                              "layout with 16-bit operands and the none "
                              "epilogue";
    if (!c.getElementType().isF32() || c.isDynamicDim(0) || c.getDimSize(0) < 2)
      return emitOpError() << "expects a split_k c of f32 with a static "
                              "first dimension of at least 2 (the most "
                              "slices), got "
                           << c;
    if (count.getRank() != 1 || count.getDimSize(0) != 1 ||
        !count.getElementType().isInteger(32))
      return emitOpError() << "expects the split count to be memref<1xi32>, "
                              "got "
                           << count;
  }
  // Past a split_k c's slices, its rows and columns.
  int64_t cRow = split ? 1 : 0;
  if (fp8) {
    if (failed(verifyBlockScales()))
      return failure();
  } else if (a.getElementType() != b.getElementType() ||
             (a.getElementType() != c.getElementType() &&
              !c.getElementType().isF32()))
    return emitOpError() << "expects a and b to share their element type and "
                            "c to have it too or be f32, got "
                         << a.getElementType() << ", " << b.getElementType()
                         << " and " << c.getElementType();
  if (getEpilogue() == Epilogue::Accumulate && !c.getElementType().isF32())
    return emitOpError() << "accumulates into an f32 c, got "
                         << c.getElementType();
  if (getEpilogue() != Epilogue::None &&
      getEpilogue() != Epilogue::Accumulate && layout != GemmLayout::NT &&
      !(layout == GemmLayout::NN && getEpilogue() == Epilogue::RowScale))
    return emitOpError() << "expects the " << stringifyGemmLayout(layout)
                         << " layout to have the "
                         << (layout == GemmLayout::NN
                                 ? "none, accumulate or row_scale"
                                 : "none or accumulate")
                         << " epilogue, got "
                         << stringifyEpilogue(getEpilogue());
  if (getBias() && (isDense() || layout != GemmLayout::NT))
    return emitOpError() << "expects a bias only on a grouped GEMM of the nt "
                            "layout";
  if (failed(verifyClamp(*this, getEpilogue(), getAlpha(), getLimit())))
    return failure();
  if (kGrouped) {
    // The reduction runs down a's and b's rows, or along the transposed
    // codes' rows (FP8).
    int64_t m = getM(), n = getN(), rDim = fp8 ? 1 : 0;
    if (m % 8 != 0 || n % 8 != 0)
      return emitOpError() << "expects M and N to be multiples of 8 (16-byte "
                              "TMA strides and wgmma's granule), got "
                           << a << " and " << b;
    if (!ShapedType::isDynamic(a.getDimSize(rDim)) &&
        !ShapedType::isDynamic(b.getDimSize(rDim)) &&
        a.getDimSize(rDim) != b.getDimSize(rDim))
      return emitOpError() << "expects a and b to have the same "
                           << (fp8 ? "columns" : "rows")
                           << " (the reduction), got " << a << " and " << b;
    if (!c.hasStaticShape())
      return emitOpError() << "expects c to have a static shape, got " << c;
    int64_t groups = getNumExperts();
    SmallVector<int64_t> expected{m, n};
    if (cRank == 3)
      expected.insert(expected.begin(), groups);
    if (c.getShape() != ArrayRef<int64_t>(expected)) {
      InFlightDiagnostic diag = emitOpError() << "expects c to be [";
      llvm::interleaveComma(expected, diag);
      return diag << "] (" << (cRank == 3 ? "groups, " : "")
                  << "a's columns, b's columns), got " << c;
    }
    if (failed(checkScaleOperand(*this, getEpilogue(), getScale())))
      return failure();
    return success();
  }
  if (!b.hasStaticShape())
    return emitOpError() << "expects b to have a static shape "
                         << (isDense() ? "" : "[E, ")
                         << (layout == GemmLayout::NT ? "N, K]" : "K, N]")
                         << ", got " << b;
  int64_t experts = getNumExperts(), n = getN(), k = getK();
  if (a.getDimSize(1) != k)
    return emitOpError() << "expects a to have " << k
                         << " columns (the K of b), got " << a;
  if (k % 8 != 0)
    return emitOpError() << "expects K to be a multiple of 8 (16-byte TMA "
                            "strides), got "
                         << k;
  // Each group's B rows start at a multiple of 8 (wgmma's N granule); one
  // dense group masks whatever N it has. An N-major B's rows are N wide.
  if (n % 8 != 0 && (!isDense() || layout == GemmLayout::NN))
    return emitOpError() << "expects N to be a multiple of 8, got " << n;
  if (auto offsets = dyn_cast_if_present<MemRefType>(
          getOffsets() ? getOffsets().getType() : Type());
      offsets && offsets.getDimSize(0) != experts + 1)
    return emitOpError() << "expects offsets to have " << experts + 1
                         << " elements (experts + 1), got " << offsets;
  bool swiglu = getEpilogue() == Epilogue::SwiGLU;
  if (swiglu && n % 16 != 0)
    return emitOpError() << "expects N to be a multiple of 16 with the swiglu "
                            "epilogue (interleaved blocks of 8 gate and 8 up "
                            "rows), got "
                         << n;
  int64_t columns = swiglu ? n / 2 : n;
  if (c.getDimSize(cRow + 1) != columns)
    return emitOpError() << "expects c to have " << columns << " columns"
                         << (swiglu ? " (N / 2 with swiglu)" : " (N)")
                         << ", got " << c;
  if (!ShapedType::isDynamic(a.getDimSize(0)) &&
      !ShapedType::isDynamic(c.getDimSize(cRow)) &&
      a.getDimSize(0) != c.getDimSize(cRow))
    return emitOpError() << "expects a and c to have the same rows, got " << a
                         << " and " << c;
  if (failed(checkScaleOperand(*this, getEpilogue(), getScale())) ||
      (getScale() &&
       failed(checkMemRef(*this, getScale(), "scale", 1, "f32", isF32))))
    return failure();
  if (TileAttr tile = getTileAttr(); tile && swiglu && tile.getN() % 16 != 0)
    return emitOpError() << "expects tile n to be a multiple of 16 with the "
                            "swiglu epilogue, got "
                         << tile.getN();
  if (Value bias = getBias()) {
    auto biasType = cast<MemRefType>(bias.getType());
    if (biasType.getRank() != 2 || biasType.getDimSize(0) != experts ||
        biasType.getDimSize(1) != n ||
        biasType.getElementType() != a.getElementType())
      return emitOpError() << "expects a bias of shape [" << experts << ", "
                           << n << "] (groups, N) and element type "
                           << a.getElementType() << ", got " << biasType;
  }
  return success();
}

LogicalResult WarpRolesOp::verify() {
  int64_t consumers = getConsumers();
  if (consumers < 1 || consumers > 4)
    return emitOpError() << "expects 1 to 4 consumer warpgroups, got "
                         << consumers;
  for (auto [name, regs] :
       {std::pair<StringRef, int64_t>{"producer_regs", getProducerRegs()},
        {"consumer_regs", getConsumerRegs()}})
    if (regs < 24 || regs > 256 || regs % 8 != 0)
      return emitOpError() << "expects " << name
                           << " to be a multiple of 8 in [24, 256] "
                              "(setmaxnreg), got "
                           << regs;
  int64_t total =
      kWarpgroupThreads * (getProducerRegs() + consumers * getConsumerRegs());
  if (total > kRegistersPerSm)
    return emitOpError() << "register budgets need " << total
                         << " registers, more than the " << kRegistersPerSm
                         << " of an SM";
  if (getProducer().front().getNumArguments() != 0)
    return emitOpError() << "expects the producer region to take no arguments";
  Block &consumer = getConsumer().front();
  if (consumer.getNumArguments() != 1 ||
      !consumer.getArgument(0).getType().isIndex())
    return emitOpError() << "expects the consumer region to take one index "
                            "argument (the consumer warpgroup)";
  return success();
}

LogicalResult TileLoopOp::verify() {
  if (!getOffsets() && !getRows())
    return emitOpError() << "expects either offsets or rows";
  if (getOffsets() && getRows() && !getKGrouped())
    return emitOpError() << "expects either offsets or rows";
  if (getOffsets()) {
    auto offsets = cast<MemRefType>(getOffsets().getType());
    if (offsets.getRank() != 1 || !offsets.getElementType().isInteger(32) ||
        ShapedType::isDynamic(offsets.getDimSize(0)) ||
        offsets.getDimSize(0) < 2)
      return emitOpError() << "expects offsets to be a static memref of at "
                              "least 2 i32, got "
                           << offsets;
  }
  if (getColumns() < 1 || getBlockM() < 1 || getBlockN() < 1 ||
      getBlockK() < 1)
    return emitOpError() << "expects positive columns and tile sizes";
  if (getKGrouped() && (!getOffsets() || !getRows() || getDepth() != 0))
    return emitOpError() << "expects k_grouped to have offsets, rows and "
                            "depth 0 (the groups' rows are the reduction)";
  if (!getKGrouped() && getDepth() < 1)
    return emitOpError() << "expects a positive depth, got " << getDepth();
  if (getSplits() < 1)
    return emitOpError() << "expects at least 1 split, got " << getSplits();
  if (getSplits() > 1 && (getOffsets() || getKGrouped()))
    return emitOpError() << "expects splits only over rows (one dense group)";
  if (Value count = getSplitCount()) {
    auto type = cast<MemRefType>(count.getType());
    if (getSplits() < 2 || type.getRank() != 1 || type.getDimSize(0) != 1 ||
        !type.getElementType().isInteger(32))
      return emitOpError() << "expects a split_count of memref<1xi32> with "
                              "splits above 1, got "
                           << type << " with " << getSplits();
  }
  Block &body = getBody().front();
  if (body.getNumArguments() != 6 ||
      !llvm::all_of(body.getArgumentTypes(),
                    [](Type t) { return t.isIndex(); }))
    return emitOpError() << "expects the body to take six index arguments "
                            "(group, row, column, first iteration, k blocks, "
                            "first k block)";
  return success();
}

LogicalResult MmaOp::verify() {
  if (getPending() > 1)
    return emitOpError() << "expects pending to be 0 or 1, got "
                         << getPending();
  TileAttr tile = getPipeline().getType().getTile();
  int64_t expected = tile.getN() / 2;
  if (getAcc().getType().getNumElements() != expected)
    return emitOpError() << "expects a fragment of " << expected
                         << " f32 (a 64 x " << tile.getN()
                         << " tile over 128 threads), got "
                         << getAcc().getType();
  return success();
}

LogicalResult PromoteOp::verify() {
  auto aScale = cast<MemRefType>(getAScale().getType());
  auto bScale = cast<MemRefType>(getBScale().getType());
  if (aScale.getRank() != 2 || !aScale.getElementType().isF32())
    return emitOpError() << "expects a_scale to be a rank-2 f32 memref (rows, "
                            "k blocks), got "
                         << aScale;
  bool perColumn = bScale.getRank() == 2;
  if ((bScale.getRank() != 3 && !perColumn) ||
      !bScale.getElementType().isF32() ||
      ShapedType::isDynamic(bScale.getDimSize(perColumn ? 0 : 1)))
    return emitOpError() << "expects b_scale to be an f32 memref of rank 3 "
                            "(groups, n blocks, k blocks) with static n "
                            "blocks or of rank 2 (columns, k blocks) with "
                            "static columns, got "
                         << bScale;
  if (perColumn && getInterleaved())
    return emitOpError() << "expects block scales of b (rank 3) with "
                            "interleaved, got per-column scales "
                         << bScale;
  if (getInterleaved() && bScale.getDimSize(1) % 2 != 0)
    return emitOpError() << "expects an even number of n blocks (gate, then "
                            "up) with interleaved, got "
                         << bScale.getDimSize(1);
  return success();
}

LogicalResult StoreTileOp::verify() {
  auto c = cast<MemRefType>(getC().getType());
  int64_t rank = getGroup() ? 3 : 2;
  if (c.getRank() != rank ||
      !(isHalfFloat(c.getElementType()) || c.getElementType().isF32()))
    return emitOpError() << "expects c to be a rank-" << rank
                         << " memref of bf16, f16 or f32"
                         << (getGroup() ? " (indexed by a group)" : "")
                         << ", got " << c;
  int64_t fragment = getAcc().getType().getNumElements();
  if (fragment % 4 != 0)
    return emitOpError() << "expects a fragment of a multiple of 4 f32, got "
                         << getAcc().getType();
  if (getEpilogue() == Epilogue::SwiGLU && fragment % 8 != 0)
    return emitOpError() << "expects a fragment of a multiple of 8 f32 with "
                            "the swiglu epilogue, got "
                         << getAcc().getType();
  if (static_cast<bool>(getBias()) != static_cast<bool>(getExpert()))
    return emitOpError() << "expects a bias and its expert together";
  if (failed(verifyClamp(*this, getEpilogue(), getAlpha(), getLimit())))
    return failure();
  return checkScaleOperand(*this, getEpilogue(), getScale());
}

//===----------------------------------------------------------------------===//
// The schedule
//===----------------------------------------------------------------------===//

LogicalResult GridAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                               GridKind kind, int64_t perBlock, int64_t size) {
  bool perBlockGrid = kind == GridKind::Tokens ||
                      kind == GridKind::Assignments ||
                      kind == GridKind::Rows ||
                      kind == GridKind::ReceivedRows;
  if (perBlock < 0 || (!perBlockGrid && perBlock != 0))
    return emitError() << "per_block applies to tokens, assignments, rows and "
                          "received_rows grids and must not be negative, got "
                       << perBlock << " for a " << stringifyGridKind(kind)
                       << " grid";
  if ((kind == GridKind::Tokens || kind == GridKind::Assignments) &&
      perBlock < 1)
    return emitError() << "a " << stringifyGridKind(kind)
                       << " grid needs per_block >= 1";
  bool rowsGrid = kind == GridKind::Rows || kind == GridKind::ReceivedRows;
  if (kind == GridKind::Fixed ? size < 1 || size > INT32_MAX
      : rowsGrid              ? size < 0 || size > INT32_MAX
                              : size != 0)
    return emitError() << "size applies to fixed grids (the CTAs, in [1, "
                          "2^31)) and rows and received_rows grids (CTAs a "
                          "block of rows), got "
                       << size << " for a " << stringifyGridKind(kind)
                       << " grid";
  return success();
}

void ProgramOp::build(OpBuilder &builder, OperationState &state) {
  state.addRegion()->emplaceBlock();
}

LogicalResult ProgramOp::verifyRegions() {
  llvm::StringSet<> entries;
  for (Operation &op : getBody().front()) {
    if (auto schedule = dyn_cast<ScheduleOp>(op)) {
      if (!entries.insert(schedule.getEntry()).second)
        return schedule.emitOpError()
               << "repeats the schedule of entry '" << schedule.getEntry()
               << "'";
      continue;
    }
    if (!isa<BufferOp>(op))
      return op.emitOpError() << "cannot be in a moegpu.program (expected "
                                 "moegpu.buffer or moegpu.schedule)";
  }
  return success();
}

LogicalResult BufferOp::verify() {
  MemRefType type = getMemRefType();
  if (getDims().size() != type.getNumDynamicDims())
    return emitOpError() << "has " << type.getNumDynamicDims()
                         << " dynamic dimension(s) but " << getDims().size()
                         << " entries in dims";
  StringRef source = getSource();
  std::optional<::moe::abi::BufferSource> parsed =
      ::moe::abi::parseBufferSource(source);
  if (!parsed)
    return emitOpError() << "has unknown source '" << source
                         << "' (expected input, output, scratch, tokens, "
                            "symmetric, peers, param:<role>, "
                            "pack:<gate>,<up>, concat:<gate>,<up> or "
                            "arg:<name>)";
  if (parsed->kind == ::moe::abi::SourceKind::Peers &&
      (type.getRank() != 1 || !type.hasStaticShape() ||
       !type.getElementType().isInteger(64)))
    return emitOpError() << "is the exchange's peers and must be a static "
                            "1-D memref of i64, got "
                         << type;
  return success();
}

void ScheduleOp::build(OpBuilder &builder, OperationState &state,
                       StringRef entry) {
  state.addAttribute(getEntryAttrName(state.name),
                     builder.getStringAttr(entry));
  state.addRegion()->emplaceBlock();
}

LogicalResult ScheduleOp::verify() {
  if (!llvm::is_contained({"forward", "train", "update", "backward"},
                          getEntry()))
    return emitOpError() << "has entry '" << getEntry()
                         << "', expected forward, train, update or backward";
  return success();
}

/// The buffer `name` of the program around `op`, or an error.
static FailureOr<BufferOp> lookupBuffer(Operation *op,
                                        SymbolTableCollection &symbols,
                                        FlatSymbolRefAttr name) {
  auto program = op->getParentOfType<ProgramOp>();
  auto buffer = symbols.lookupSymbolIn<BufferOp>(program, name);
  if (!buffer)
    return op->emitOpError() << "refers to unknown buffer " << name;
  return buffer;
}

static LogicalResult verifyBuffers(Operation *op, ArrayAttr args,
                                   SymbolTableCollection &symbols,
                                   SmallVectorImpl<BufferOp> *found = nullptr) {
  for (auto name : args.getAsRange<FlatSymbolRefAttr>()) {
    FailureOr<BufferOp> buffer = lookupBuffer(op, symbols, name);
    if (failed(buffer))
      return failure();
    if (found)
      found->push_back(*buffer);
  }
  return success();
}

LogicalResult LaunchOp::verifySymbolUses(SymbolTableCollection &symbols) {
  SmallVector<BufferOp> buffers;
  if (failed(verifyBuffers(*this, getArgs(), symbols, &buffers)))
    return failure();
  Operation *top = (*this)->getParentOfType<ProgramOp>()->getParentOp();
  Operation *kernel =
      top ? symbols.lookupSymbolIn(top, getKernel()) : nullptr;
  if (!kernel)
    return emitOpError() << "launches unknown kernel " << getKernel();
  // Checked while the kernel is still a gpu.func (the lowering turns it
  // into an LLVM function later).
  if (auto func = dyn_cast<gpu::GPUFuncOp>(kernel)) {
    ArrayRef<Type> inputs = func.getArgumentTypes();
    if (inputs.size() < buffers.size())
      return emitOpError() << "passes " << buffers.size()
                           << " buffers to kernel " << getKernel()
                           << ", which takes " << inputs.size()
                           << " arguments";
    for (auto [i, buffer] : llvm::enumerate(buffers))
      if (inputs[i] != buffer.getType())
        return emitOpError()
               << "passes buffer @" << buffer.getSymName() << " of type "
               << buffer.getType() << " as argument " << i << " of kernel "
               << getKernel() << ", which takes " << inputs[i];
  }
  if (getBlock() > 1024)
    return emitOpError() << "has block " << getBlock()
                         << ", expected 0 (the kernel's own) to 1024";
  if (std::optional<int64_t> chunk = getChunk(); chunk && *chunk < 0)
    return emitOpError() << "has chunk " << *chunk
                         << "; expected a chunk index >= 0";
  return success();
}

LogicalResult MemsetOp::verifySymbolUses(SymbolTableCollection &symbols) {
  return lookupBuffer(*this, symbols, getBufferAttr());
}

LogicalResult ExchangeOp::verify() {
  ExchangeKind kind = getKind();
  if (std::optional<int64_t> chunk = getChunk()) {
    if (kind != ExchangeKind::DispatchRows && kind != ExchangeKind::CombineRows)
      return emitOpError() << "of kind " << stringifyExchangeKind(kind)
                           << " takes no chunk (only dispatch_rows and "
                              "combine_rows move one chunk's rows)";
    if (*chunk < 0)
      return emitOpError() << "has chunk " << *chunk
                           << "; expected a chunk index >= 0";
  }
  if (kind == ExchangeKind::DispatchPlan) {
    if (getArgs().size() < 3)
      return emitOpError() << "of kind dispatch_plan takes the offsets, "
                              "ep_offsets and one group-offsets buffer per "
                              "chunk (at least 3 buffers), got "
                           << getArgs().size();
    return success();
  }
  size_t arity = kind == ExchangeKind::Dispatch  ? 7
                 : kind == ExchangeKind::Combine ? 4
                                                 : 2;
  if (getArgs().size() != arity)
    return emitOpError() << "of kind " << stringifyExchangeKind(getKind())
                         << " takes " << arity << " buffers, got "
                         << getArgs().size();
  return success();
}

LogicalResult ExchangeOp::verifySymbolUses(SymbolTableCollection &symbols) {
  return verifyBuffers(*this, getArgs(), symbols);
}

LogicalResult AllReduceOp::verifySymbolUses(SymbolTableCollection &symbols) {
  SmallVector<BufferOp> buffers;
  if (failed(verifyBuffers(*this, getArgs(), symbols, &buffers)))
    return failure();
  for (BufferOp buffer : buffers)
    if (!buffer.getMemRefType().getElementType().isF32())
      return emitOpError() << "sums f32 buffers, and @" << buffer.getSymName()
                           << " is " << buffer.getType();
  return success();
}
