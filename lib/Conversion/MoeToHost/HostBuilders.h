//===- HostBuilders.h - Builders of the host lowerings ----------*- C++ -*-===//
//
// Part of moe-compiler.
//
// Internal to convert-moe-to-host: the small builders, the structured
// pieces on tensors and the pattern that lowers one moe op with a function
// of these, shared by the op families (Routing, Dispatch, Experts,
// Collectives).
//
//===----------------------------------------------------------------------===//

#ifndef MOE_CONVERSION_MOETOHOST_HOSTBUILDERS_H
#define MOE_CONVERSION_MOETOHOST_HOSTBUILDERS_H

#include "moe/MoeOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "mlir/Transforms/DialectConversion.h"

#include <functional>

namespace mlir::moe::host {

using Builder = ImplicitLocOpBuilder;
using BodyFn = function_ref<void(Builder &, Value)>;

/// The host's vector unit, as the GEMM micro-kernels block for it.
struct VectorTarget {
  /// f32 lanes of one vector register (4: SSE2 or NEON, 8: AVX2, 16:
  /// AVX-512).
  int64_t width = 4;
  /// Vector registers (16 on x86-64 up to AVX2, 32 with AVX-512 and on
  /// AArch64).
  int64_t registers = 16;
  /// Where the GEMMs are built in private functions of the enclosing
  /// module, one per distinct shape (callKernel): the functions built so
  /// far, by what their code depends on. Null builds them in place; the
  /// pass sets it where it runs on the module, which it may add symbols to.
  llvm::StringMap<Operation *> *kernels = nullptr;
};

//===----------------------------------------------------------------------===//
// Small builders
//===----------------------------------------------------------------------===//

Value indexConst(Builder &b, int64_t value);

Value f32Const(Builder &b, double value);

Value i32Const(Builder &b, int64_t value);

/// `base + delta` for an index (`base` itself for 0).
Value offset(Builder &b, Value base, int64_t delta);

/// Converts a float scalar to f32 (identity for f32).
Value toF32(Builder &b, Value value);

/// Converts an f32 scalar to `type` (identity for f32).
Value fromF32(Builder &b, Value value, Type type);

Value dim(Builder &b, Value shaped, int64_t index);

/// Dynamic sizes of `type` taken from `source`, a value of the same shape.
SmallVector<Value> dynamicSizes(Builder &b, ShapedType type, Value source);

/// `for (iv = lb; iv < ub; ++iv) body(iv)`.
void forLoop(Builder &b, Value lb, Value ub, BodyFn body);

void forLoop(Builder &b, int64_t ub, BodyFn body);

/// `body(h, n)` for the `n` elements from h on, over [0, length): vectors
/// of `width` lanes (n = width), then the last length % width elements as
/// vectors of one lane. For rows the lowering copies or sums itself, in
/// the host's vectors: LLVM then has no scalar loop left to vectorize,
/// unroll and give a remainder (less code, and less time compiling it).
void forLanes(Builder &b, int64_t length, int64_t width,
              function_ref<void(Builder &, Value h, int64_t n)> body);
/// The part of [0, length) whole vectors of `width` cover: `length`
/// itself when it is known to be a multiple of `multiple` and that of
/// `width`.
Value vectorPart(Builder &b, Value length, int64_t multiple, int64_t width);
/// forLanes over a length known at run time, a multiple of `multiple`
/// (the one-lane loop is left out when that makes it empty).
void forLanes(Builder &b, Value length, int64_t multiple, int64_t width,
              function_ref<void(Builder &, Value h, int64_t n)> body);

/// A loop carrying values: `init` in, the body's yielded values out.
ValueRange forLoopCarrying(
    Builder &b, Value lb, Value ub, ValueRange init,
    function_ref<SmallVector<Value>(Builder &, Value, ValueRange)> body);
/// The same, stepping by `step`.
ValueRange forLoopCarrying(
    Builder &b, Value lb, Value ub, int64_t step, ValueRange init,
    function_ref<SmallVector<Value>(Builder &, Value, ValueRange)> body);

/// Flags for dot-product reductions: the sum may be reassociated (and
/// multiply-adds fused), which lets LLVM vectorize it. The result differs
/// from a sequential sum only by rounding.
arith::FastMathFlagsAttr reductionFlags(Builder &b);

/// e^x of an f32 in arithmetic alone (a polynomial and the exponent
/// field; silu through it is within 1.2 ulp of the exact value); results
/// below 2^-125 are 0.
Value expInline(Builder &b, Value x);

/// Which exp a builder uses: libm's (`math.exp`, a call per element) or
/// `expInline`, which vectorizes. The routing keeps libm's, so that its
/// scores, and the experts they pick, are those of the references; the
/// SwiGLU activations, evaluated for every row and FFN column, take the
/// inline one.
enum class ExpKind { Libm, Inline };

/// 1 / (1 + e^-x).
Value sigmoid(Builder &b, Value x, ExpKind kind = ExpKind::Libm);

/// A fresh buffer of `type` with its dynamic sizes taken from `sizes`.
Value alloc(Builder &b, MemRefType type, ValueRange sizes = {});

/// A read-only buffer of `tensor`, for reads that follow at once (each call
/// makes a to_buffer of its own, which CSE does not merge).
Value asBuffer(Builder &b, Value tensor);

/// Hands a buffer written by the lowering back to tensor land, as a tensor
/// of the buffer's shape (the caller casts to a more static result type).
Value asTensor(Builder &b, Value buffer);

void fillBuffer(Builder &b, Value buffer, Value value);

/// Runs `body` on the buffers of `operands`: tensors the body reads (as
/// read-only buffers, `asBuffer`) and buffers it writes. Where
/// `target.kernels` is set, `body` is built once per module for each
/// distinct `kind`, operand types and target, in a private function
/// `moe_host_<kind>` taking the operands, and every use calls it: two ops
/// of the same shapes (DeepSeek-V3's gate and up projections, the forward
/// GEMMs the training step recomputes) share one copy of their code, which
/// LLVM then optimizes once. The call reads the tensors where it stands,
/// which one-shot bufferization sees (a buffer the caller took of a tensor
/// would not keep the tensor's buffer from being reused before the call).
/// Otherwise `body` is built in place. Either way `body` may use no value
/// of the caller but the buffers it is given, and everything static it
/// builds from must follow from `kind`, the operands' types and `target`.
/// Anything else static the body builds from (sizes its operands leave
/// dynamic) goes into `variant`: uses differing in it get functions of
/// their own.
void callKernel(Builder &b, const VectorTarget &target, StringRef kind,
                ValueRange operands,
                function_ref<void(Builder &, ValueRange)> body,
                StringRef variant = "");

//===----------------------------------------------------------------------===//
// Structured pieces on tensors
//===----------------------------------------------------------------------===//

/// `out[m, n] = sum_k lhs[m, k] * rhs[n, k]` in f32, as a tensor<MxNxf32>
/// (the dot micro-kernel, in parallel over blocks of rows and columns).
/// With `rhsScale`, rhs holds e4m3 codes with these block scales and lhs is
/// quantized per row per 128 of K first (quantizeRowsFp8).
Value matmulTransposeB(Builder &b, Value lhs, Value rhs,
                       const VectorTarget &target, Value rhsScale = Value(),
                       bool tensorScaled = false);

/// Applies `fn` elementwise to same-shaped 2-D tensors `inputs` (any float
/// types, passed to `fn` as f32) and returns a tensor of `elementType`.
Value elementwise(Builder &b, ValueRange inputs, Type elementType,
                  function_ref<Value(Builder &, ValueRange)> fn);

/// Reduces each row of a [T, E] f32 tensor with `combine`, starting from
/// `init`; returns a [T] f32 tensor.
Value reduceRows(Builder &b, Value input, double init,
                 function_ref<Value(Builder &, Value, Value)> combine);

/// `out[t, e] = fn(input[t, e], rowValue[t])` for a [T, E] f32 tensor and a
/// [T] f32 tensor.
Value withRowValue(Builder &b, Value input, Value rowValue,
                   function_ref<Value(Builder &, Value, Value)> fn);
/// `out[t, e] = fn(input[t, e], columnValue[e])` for a [T, E] f32 tensor
/// and an [E] tensor.
Value withColumnValue(Builder &b, Value input, Value columnValue,
                      function_ref<Value(Builder &, Value, Value)> fn);

/// Whether row map entry `r` names a row of a buffer of `rowCount` rows.
Value validRow(Builder &b, Value r, Value rowCount);

//===----------------------------------------------------------------------===//
// GEMMs (Gemm.cpp)
//===----------------------------------------------------------------------===//

/// Loads `width` consecutive elements of `buffer` from `indices` (along its
/// last dimension) as a vector of f32.
Value loadVector(Builder &b, Value buffer, ValueRange indices, int64_t width);

/// Stores a vector of f32 into `buffer` at `indices`, rounded to the
/// buffer's element type.
void storeVector(Builder &b, Value value, Value buffer, ValueRange indices);

/// C(i, j) = sum_k A(i, k) B(j, k) over i in [iBegin, iEnd), j in
/// [jBegin, jEnd), k in [0, depth): A and B are read `width` consecutive k
/// at a time (as f32 vectors), each sum is stored as an f32 scalar.
struct DotGemm {
  Value iBegin, iEnd, jBegin, jEnd, depth;
  std::function<Value(Builder &, Value i, Value k, int64_t width)> aRow;
  std::function<Value(Builder &, Value j, Value k, int64_t width)> bRow;
  std::function<void(Builder &, Value i, Value j, Value sum)> store;
  /// A number jEnd - jBegin is known to be a multiple of: the loops for
  /// the columns a register block does not cover are left out when it
  /// covers them all.
  int64_t jMultiple = 1;
  /// A number depth is known to be a multiple of: the loop for the k a
  /// vector does not cover is left out when a vector covers them all.
  int64_t depthMultiple = 1;
};

/// C(i, j) = sum_p A(i, p) B(p, j) over i in [iBegin, iEnd), j in
/// [jBegin, jEnd), p in [pBegin, pEnd): A is read one f32 scalar at a time,
/// B and C `width` consecutive j at a time (f32 vectors).
struct OuterGemm {
  Value iBegin, iEnd, pBegin, pEnd, jBegin, jEnd;
  std::function<Value(Builder &, Value i, Value p)> aAt;
  std::function<Value(Builder &, Value p, Value j, int64_t width)> bRow;
  std::function<void(Builder &, Value i, Value j, Value vector)> store;
  /// As DotGemm::jMultiple.
  int64_t jMultiple = 1;
  /// Optional: A(i..i+n-1, p) as an f32 vector (`n` rows of one p,
  /// consecutive in memory). With it, C's rows go in passes of 16 register
  /// blocks, each first copying its rows of A into a panel where the
  /// kernel's rows of one p are adjacent (instead of a page or more apart
  /// for each p), and the panel stays in L2 while every strip of B passes
  /// (instead of A being read again from memory for each strip).
  std::function<Value(Builder &, Value i, Value p, int64_t n)> aColumn;
};

/// C(i, j) = sum_k A(i, k) W(j, k) over i in [iBegin, iEnd), j in [c0, c1)
/// (at most maxColumns), k in [0, depth), as the dot GEMM computes it but
/// by the outer kernel: W's rows are first packed, as f32, into k-major
/// strips of the outer kernel's register block of columns, which it then
/// streams from the cache while broadcasting A. Worth it when the block has
/// enough rows to pay for the packing (about 1.5x the dot kernel's speed
/// on AVX-512: no horizontal sums, one B load per MR FMAs).
struct PackedGemm {
  Value iBegin, iEnd, c0, c1, depth, maxColumns;
  /// A(i, k) as an f32 scalar, and `width` consecutive k of W's row j as
  /// an f32 vector (a scalar for width 1; loadWeight's form).
  std::function<Value(Builder &, Value i, Value k)> aAt;
  std::function<Value(Builder &, Value j, Value k, int64_t width)> wRow;
  /// Stores `width` consecutive columns of C from j on (an f32 vector).
  std::function<void(Builder &, Value i, Value j, Value vector)> store;
  /// As DotGemm::jMultiple and DotGemm::depthMultiple.
  int64_t jMultiple = 1, depthMultiple = 1;
};

void emitDotGemm(Builder &b, const DotGemm &gemm, const VectorTarget &target);
void emitPackedGemm(Builder &b, const PackedGemm &gemm,
                    const VectorTarget &target);
/// The outer GEMM with B's block (at most maxColumns columns) first copied
/// into contiguous strips of the register block's columns.
void emitPackedOuterGemm(Builder &b, const OuterGemm &gemm, int64_t maxColumns,
                         const VectorTarget &target);
/// Columns of one strip of a packed GEMM's panel (the outer kernel's
/// register block of columns).
int64_t packedStripWidth(const VectorTarget &target);
void emitOuterGemm(Builder &b, const OuterGemm &gemm,
                   const VectorTarget &target);

/// Calls `body` with an f32 [maxColumns, depth] panel holding rows [c0, c1)
/// of `weight` (indexed `prefix..., row, k`) in f32: decoded and scaled
/// with `scales` if it holds e4m3 codes, widened if bf16 or f16. A GEMM's
/// parallel iteration converts its block of weights once, not once per
/// block of rows, and its dot kernel then reads plain f32 rows. `depth` is
/// a multiple of `depthMultiple`.
void withWeightPanel(Builder &b, Value weight, Value scales, ValueRange prefix,
                     Value c0, Value c1, Value maxColumns, Value depth,
                     int64_t depthMultiple, int64_t width,
                     function_ref<void(Builder &, Value panel)> body);

/// Rows a block of a GEMM needs for the packed (outer) kernel to be worth
/// its packing; fewer run the dot kernel on the weights as they are.
constexpr int64_t kPackedRows = 32;

/// Columns of W per parallel block of a GEMM of `depth` that may run
/// packed: whole strips (packedStripWidth), about 256 KiB of f32, at most
/// the columns there are (computed at run time).
Value packedColumnBlock(Builder &b, const VectorTarget &target, Value depth,
                        Value columns);

/// Columns of the dot kernel's register block.
int64_t dotRegisterColumns(const VectorTarget &target);

/// Columns of B per parallel block of a dot GEMM of `depth`, sized for the
/// cache as packedColumnBlock (whole register blocks of columns).
Value dotColumnBlock(Builder &b, const VectorTarget &target, Value depth,
                     Value columns);

/// What a GEMM kernel's code takes from the static sizes its operands
/// leave dynamic (so that GEMMs of different sizes share its code): numbers
/// its column count and depth are multiples of. The loops for the columns
/// or k a register block or vector does not cover are left out where these
/// say there are none.
struct SizeMultiples {
  int64_t columns = 1, depth = 1;

  /// For `columns` in blocks of whole `columnStep`s and `depth` in vectors
  /// of `width` (either size may be dynamic).
  static SizeMultiples of(int64_t columns, int64_t depth, int64_t columnStep,
                          int64_t width);
  /// For callKernel's `variant`.
  std::string key() const;
};

/// `value` (a ranked tensor or memref) cast to its type with the
/// dimensions `dims` dynamic.
Value withDynamicDims(Builder &b, Value value, ArrayRef<int64_t> dims);

/// Columns of C per parallel block of an outer GEMM (a multiple of the
/// register block's columns).
int64_t outerColumnBlock(const VectorTarget &target);

/// How the threads share a parallel loop's iterations: in contiguous equal
/// shares (iterations of equal cost), or one at a time as each thread
/// finishes its last (iterations whose cost depends on the routing).
enum class Schedule { Static, Dynamic };

/// `scf.parallel` over [0, counts[d]) in each dimension d; each iteration
/// must write elements no other iteration writes.
void parallelBlocks(Builder &b, ArrayRef<Value> counts,
                    function_ref<void(Builder &, ValueRange)> body,
                    Schedule schedule = Schedule::Static);

/// Tokens per iteration of the parallel loops over tokens.
constexpr int64_t kTokenBlock = 64;

/// `body(t)` for every token t in [0, tokens), in parallel blocks of
/// kTokenBlock tokens; each token's work must write only its own elements.
void forTokenBlocks(Builder &b, Value tokens, BodyFn body);

/// [lo, hi) of block `index` of `size` within [0, limit).
std::pair<Value, Value> blockRange(Builder &b, Value index, int64_t size,
                                   Value limit);
std::pair<Value, Value> blockRange(Builder &b, Value index, Value size,
                                   Value limit);

/// ceil(value / divisor) for a non-negative index.
Value ceilDiv(Builder &b, Value value, int64_t divisor);
Value ceilDiv(Builder &b, Value value, Value divisor);

//===----------------------------------------------------------------------===//
// FP8 (Fp8.cpp)
//===----------------------------------------------------------------------===//

/// The f32 values of e4m3 codes (f8E4M3FN or i8, scalar or vector).
Value decodeFp8(Builder &b, Value codes);

/// An f32 value (scalar or vector) rounded to the nearest e4m3 value, ties
/// to even, saturated at +-448; NaN stays NaN.
Value roundToFp8(Builder &b, Value value);

/// A [R, K] f32 buffer of `input` ([R, K], any float type) quantized as
/// DeepSeek-V3 quantizes activations, and dequantized: per row, per 128
/// channels, with `a` the block's largest magnitude (at least 1e-4), each
/// value becomes e4m3(x * (448 / a)) * (a / 448). In parallel over rows,
/// `width` channels at a time. Into `out` when given, else a new buffer;
/// `a` is at least `minAmax`.
Value quantizeRowsFp8(Builder &b, Value input, int64_t width,
                      Value out = Value(), double minAmax = kFp8MinAmax);

/// The same with one scale per segment [segments[e], segments[e+1]) (one
/// expert's rows; [E + 1] i32), rows outside every segment zero, or
/// without `segments` one scale for the whole of `input` (per-tensor
/// current scaling): `a` is the segment's or tensor's largest magnitude.
Value quantizeTensorFp8(Builder &b, Value input, Value segments, int64_t width,
                        Value out = Value(), double minAmax = kFp8MinAmax);

/// The same in 128 x 1 tiles: per column, per 128 rows counted from the
/// start of each segment [segments[e], segments[e+1]) ([E + 1] i32); rows
/// outside every segment are zero. In parallel over segments and columns.
Value quantizeColumnsFp8(Builder &b, Value input, Value segments, int64_t width,
                         Value out = Value(), double minAmax = kFp8MinAmax);

/// Writes the e4m3 `codes` and f32 block `scales` ([..., ceil(N/128),
/// ceil(K/128)]) of the f32 `weight` ([..., N, K]): per 128 x 128 block,
/// or with `perMatrix` one scale per [N, K] matrix in each of its blocks.
/// A block (matrix) of zeros gets the scale 1.
void quantizeWeightFp8(Builder &b, Value weight, Value codes, Value scales,
                       bool perMatrix);

/// `input` ([R, K] memref) as f32: itself if it is f32, else a widened
/// copy (in parallel over rows, `width` at a time), so that GEMMs read
/// plain f32 rows. A dynamic K is a multiple of `depthMultiple`.
Value widenRows(Builder &b, Value input, int64_t width,
                int64_t depthMultiple = 1);

/// `width` consecutive weights of `weight` at `indices` (along the last
/// dimension) in f32: decoded and scaled with `scales` if it holds e4m3
/// codes (loadFp8Weight), widened if 16-bit. A vector, or a scalar for
/// width 1.
Value loadWeight(Builder &b, Value weight, Value scales, ValueRange indices,
                 int64_t width);

/// `width` consecutive e4m3 weights of `codes` at `indices` (along the last
/// dimension; a scalar for width 1) as f32, times the scale of their 128 x
/// 128 block in `scales` (indexed as codes, its last two dimensions by
/// block).
Value loadFp8Weight(Builder &b, Value codes, Value scales, ValueRange indices,
                    int64_t width);

//===----------------------------------------------------------------------===//
// One op, one lowering function
//===----------------------------------------------------------------------===//

inline SmallVector<Value> values(Value v) { return {v}; }
inline SmallVector<Value> values(std::pair<Value, Value> v) {
  return {v.first, v.second};
}
inline SmallVector<Value> values(SmallVector<Value> v) { return v; }

/// Replaces `op` by `results`, each cast to the op's result type where the
/// lowering's is less static.
void replaceWithResults(ConversionPatternRewriter &rewriter, Operation *op,
                        ArrayRef<Value> results);

/// Lowers an `OpT` with a function building its results in front of it.
/// The op's operands are first set to their converted values, so the
/// function reads them through the op's own accessors.
template <typename OpT>
class LowerOp : public OpConversionPattern<OpT> {
public:
  using LowerFn = std::function<SmallVector<Value>(Builder &, OpT)>;
  LowerOp(MLIRContext *ctx, LowerFn lower)
      : OpConversionPattern<OpT>(ctx), lower(std::move(lower)) {}

  LogicalResult
  matchAndRewrite(OpT op, typename OpT::Adaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    rewriter.modifyOpInPlace(
        op, [&] { op->setOperands(adaptor.getOperands()); });
    Builder b(op.getLoc(), rewriter);
    SmallVector<Value> results = lower(b, op);
    if (results.size() != op->getNumResults())
      return rewriter.notifyMatchFailure(op, "lowering gave wrong arity");
    replaceWithResults(rewriter, op, results);
    return success();
  }

private:
  LowerFn lower;
};

/// Adds the lowering of `OpT` by `lower`.
template <typename OpT, typename Fn>
void addLowering(RewritePatternSet &patterns, Fn lower) {
  patterns.add<LowerOp<OpT>>(
      patterns.getContext(),
      [lower](Builder &b, OpT op) { return values(lower(b, op)); });
}

//===----------------------------------------------------------------------===//
// The op families
//===----------------------------------------------------------------------===//

/// moe.router, moe.topk and their gradients.
void populateRoutingPatterns(RewritePatternSet &patterns,
                             const VectorTarget &target);
/// moe.dispatch, moe.combine and their gradients.
void populateDispatchPatterns(RewritePatternSet &patterns,
                              const VectorTarget &target);
/// The experts: moe.grouped_matmul (and its dX, dW), moe.swiglu (and its
/// gradient), moe.shared_expert.
void populateExpertPatterns(RewritePatternSet &patterns,
                            const VectorTarget &target);

/// The started all-to-alls' output buffers, by their handle: the wait hands
/// the buffer out.
using PendingExchanges = DenseMap<Value, Value>;
/// Creates the module's communicator table if one of its collectives
/// spans several ranks (before the conversion, which adds only calls).
void addCommTable(ModuleOp module);
/// moe.all_to_all, moe.all_to_all_start/wait, moe.all_reduce.
void populateCollectivePatterns(RewritePatternSet &patterns,
                                PendingExchanges &pending);

} // namespace mlir::moe::host

#endif // MOE_CONVERSION_MOETOHOST_HOSTBUILDERS_H
