//===- HostBuilders.cpp - Builders of the host lowerings ------------------===//
//
// Part of moe-compiler.
//
//===----------------------------------------------------------------------===//

#include "HostBuilders.h"
#include "moe/Conversion/KernelBuilder.h"

#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

#include <atomic>
#include <limits>
#include <numeric>
#include <tuple>

using namespace mlir;
using namespace mlir::moe;

namespace mlir::moe::host {

Value indexConst(Builder &b, int64_t value) {
  return KernelBuilder{b}.idx(value);
}

Value f32Const(Builder &b, double value) { return KernelBuilder{b}.f32(value); }

Value i32Const(Builder &b, int64_t value) {
  return KernelBuilder{b}.i32(value);
}

Value toF32(Builder &b, Value value) { return KernelBuilder{b}.toF32(value); }

Value fromF32(Builder &b, Value value, Type type) {
  return KernelBuilder{b}.truncTo(type, value);
}

Value dim(Builder &b, Value shaped, int64_t index) {
  if (isa<RankedTensorType>(shaped.getType()))
    return tensor::DimOp::create(b, shaped, index);
  return memref::DimOp::create(b, shaped, index);
}

SmallVector<Value> dynamicSizes(Builder &b, ShapedType type, Value source) {
  SmallVector<Value> sizes;
  for (int64_t i = 0; i < type.getRank(); ++i)
    if (type.isDynamicDim(i))
      sizes.push_back(dim(b, source, i));
  return sizes;
}

void forLoop(Builder &b, Value lb, Value ub, BodyFn body) {
  Value one = indexConst(b, 1);
  scf::ForOp::create(
      b, lb, ub, one, ValueRange{},
      [&](OpBuilder &nested, Location loc, Value iv, ValueRange) {
        Builder nb(loc, nested);
        body(nb, iv);
        scf::YieldOp::create(nb);
      });
}

void forLanes(Builder &b, int64_t length, int64_t width,
              function_ref<void(Builder &, Value h, int64_t n)> body) {
  int64_t vectorEnd = width > 1 ? length / width * width : 0;
  auto lanes = [&](int64_t lb, int64_t ub, int64_t n) {
    if (lb == ub)
      return;
    scf::ForOp::create(
        b, indexConst(b, lb), indexConst(b, ub), indexConst(b, n), ValueRange{},
        [&](OpBuilder &nested, Location loc, Value h, ValueRange) {
          Builder nb(loc, nested);
          body(nb, h, n);
          scf::YieldOp::create(nb);
        });
  };
  lanes(0, vectorEnd, width);
  lanes(vectorEnd, length, 1);
}

Value vectorPart(Builder &b, Value length, int64_t multiple, int64_t width) {
  if (multiple % width == 0)
    return length;
  return arith::MulIOp::create(
      b, arith::DivUIOp::create(b, length, indexConst(b, width)),
      indexConst(b, width));
}

void forLanes(Builder &b, Value length, int64_t multiple, int64_t width,
              function_ref<void(Builder &, Value h, int64_t n)> body) {
  auto lanes = [&](Value lb, Value ub, int64_t n) {
    scf::ForOp::create(
        b, lb, ub, indexConst(b, n), ValueRange{},
        [&](OpBuilder &nested, Location loc, Value h, ValueRange) {
          Builder nb(loc, nested);
          body(nb, h, n);
          scf::YieldOp::create(nb);
        });
  };
  Value vectorEnd = indexConst(b, 0);
  if (width > 1) {
    vectorEnd = vectorPart(b, length, multiple, width);
    lanes(indexConst(b, 0), vectorEnd, width);
  }
  if (width == 1 || multiple % width != 0)
    lanes(vectorEnd, length, 1);
}

void forLoop(Builder &b, int64_t ub, BodyFn body) {
  forLoop(b, indexConst(b, 0), indexConst(b, ub), body);
}

ValueRange forLoopCarrying(
    Builder &b, Value lb, Value ub, ValueRange init,
    function_ref<SmallVector<Value>(Builder &, Value, ValueRange)> body) {
  return forLoopCarrying(b, lb, ub, 1, init, body);
}

ValueRange forLoopCarrying(
    Builder &b, Value lb, Value ub, int64_t step, ValueRange init,
    function_ref<SmallVector<Value>(Builder &, Value, ValueRange)> body) {
  auto loop = scf::ForOp::create(
      b, lb, ub, indexConst(b, step), init,
      [&](OpBuilder &nested, Location loc, Value iv, ValueRange carried) {
        Builder nb(loc, nested);
        scf::YieldOp::create(nb, body(nb, iv, carried));
      });
  return loop.getResults();
}

arith::FastMathFlagsAttr reductionFlags(Builder &b) {
  return arith::FastMathFlagsAttr::get(b.getContext(),
                                       arith::FastMathFlags::reassoc |
                                           arith::FastMathFlags::contract);
}

Value expInline(Builder &b, Value x) {
  // x = n ln2 + r with n = round(x / ln2) and |r| <= ln2 / 2 (ln2 in two
  // parts, Cody and Waite's, so that n * ln2's high part is exact), e^r by
  // Cephes' degree-7 polynomial for expf, and 2^n built in the exponent
  // field. silu through it is within 1.2 ulp of the exact value
  // (test/Integration/ops/silu-exp.mlir). No call, so that LLVM
  // vectorizes loops of it (libm's expf is one call per element).
  auto c = [&](double v) { return f32Const(b, v); };
  auto mul = [&](Value p, Value q) -> Value {
    return arith::MulFOp::create(b, p, q);
  };
  auto add = [&](Value p, Value q) -> Value {
    return arith::AddFOp::create(b, p, q);
  };
  auto clamp = [&](arith::CmpFPredicate beyond, double bound) {
    Value limit = c(bound);
    x = arith::SelectOp::create(b, arith::CmpFOp::create(b, beyond, x, limit),
                                limit, x);
  };
  // e^x overflows above 88.73 and is below 2^-125 under -86.7: clamped,
  // the first gives infinity through the product below and the second 0
  // (n = -126 makes the exponent field 0). NaN passes both compares and
  // stays NaN.
  clamp(arith::CmpFPredicate::OLT, -87.0);
  clamp(arith::CmpFPredicate::OGT, 88.8);
  // round(x / ln2) by adding 1.5 * 2^23: the sum's low mantissa bits hold
  // n as an integer.
  constexpr double kShifter = 12582912.0;
  Value shifted = add(mul(x, c(1.44269504088896341)), c(kShifter));
  Value n = arith::SubFOp::create(b, shifted, c(kShifter));
  Value r = arith::SubFOp::create(b, x, mul(n, c(0.693359375)));
  r = arith::SubFOp::create(b, r, mul(n, c(-2.12194440e-4)));
  Value p = c(1.9875691500e-4);
  for (double coefficient : {1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
                             1.6666665459e-1, 5.0000001201e-1})
    p = add(mul(p, r), c(coefficient));
  Value y = add(add(mul(p, mul(r, r)), r), c(1.0));
  // 2^(n - 1) from the exponent field, times 2y: n - 1 + 127 is in
  // [0, 254] for n in [-126, 128].
  Type i32 = b.getI32Type();
  Value bits =
      arith::SubIOp::create(b, arith::BitcastOp::create(b, i32, shifted),
                            arith::BitcastOp::create(b, i32, c(kShifter)));
  Value field = arith::ShLIOp::create(
      b, arith::AddIOp::create(b, bits, i32Const(b, 126)), i32Const(b, 23));
  Value scale = arith::BitcastOp::create(b, b.getF32Type(), field);
  return mul(add(y, y), scale);
}

Value sigmoid(Builder &b, Value x, ExpKind kind) {
  Value one = f32Const(b, 1.0);
  Value negated = arith::NegFOp::create(b, x);
  Value e = kind == ExpKind::Inline ? expInline(b, negated)
                                    : Value(math::ExpOp::create(b, negated));
  return arith::DivFOp::create(b, one, arith::AddFOp::create(b, one, e));
}

Value alloc(Builder &b, MemRefType type, ValueRange sizes) {
  return memref::AllocOp::create(b, type, sizes);
}

Value asBuffer(Builder &b, Value tensor) {
  auto type = cast<RankedTensorType>(tensor.getType());
  auto memrefType = MemRefType::get(type.getShape(), type.getElementType());
  auto op = bufferization::ToBufferOp::create(b, memrefType, tensor,
                                              /*read_only=*/true);
  // One-shot bufferization takes the buffer's reads to happen at the
  // to_buffer, and the lowering reads it right after. If CSE merged this
  // to_buffer into an earlier one of the same tensor, an op between the two
  // could reuse the tensor's buffer in place before these reads. A number
  // of its own keeps each to_buffer apart (CSE compares attributes); it
  // goes with the op at bufferization.
  static std::atomic<uint64_t> reads{0};
  op->setAttr(MoeDialect::getHostReadAttrName(), b.getI64IntegerAttr(reads++));
  return op;
}

Value asTensor(Builder &b, Value buffer) {
  auto type = cast<MemRefType>(buffer.getType());
  auto tensorType =
      RankedTensorType::get(type.getShape(), type.getElementType());
  return bufferization::ToTensorOp::create(b, tensorType, buffer,
                                           /*restrict=*/true,
                                           /*writable=*/true);
}

void fillBuffer(Builder &b, Value buffer, Value value) {
  linalg::FillOp::create(b, ValueRange{value}, ValueRange{buffer});
}

void callKernel(Builder &b, const VectorTarget &target, StringRef kind,
                ValueRange operands,
                function_ref<void(Builder &, ValueRange)> body,
                StringRef variant) {
  auto buffersOf = [](Builder &b, ValueRange values) {
    SmallVector<Value> buffers;
    for (Value value : values)
      buffers.push_back(
          isa<RankedTensorType>(value.getType()) ? asBuffer(b, value) : value);
    return buffers;
  };
  auto module =
      b.getInsertionBlock()->getParentOp()->getParentOfType<ModuleOp>();
  if (!target.kernels || !module) {
    body(b, buffersOf(b, operands));
    return;
  }
  // What the body's code depends on: a use with the same key calls the
  // same function.
  std::string key;
  llvm::raw_string_ostream os(key);
  os << kind << "; width " << target.width << ", registers "
     << target.registers;
  for (Value operand : operands)
    os << "; " << operand.getType();
  if (!variant.empty())
    os << "; " << variant;
  Operation *&callee = (*target.kernels)[key];
  if (!callee) {
    std::string base = ("moe_host_" + kind).str();
    std::string name = base;
    for (int i = 1; module.lookupSymbol(name); ++i)
      name = base + "_" + std::to_string(i);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToEnd(module.getBody());
    TypeRange types = operands.getTypes();
    auto function = func::FuncOp::create(
        b, name, FunctionType::get(b.getContext(), types, {}));
    function.setPrivate();
    // Internal in the shared object too (func-to-llvm reads the linkage
    // from this attribute): not exported, and LLVM may inline it.
    function->setAttr(
        "llvm.linkage",
        LLVM::LinkageAttr::get(b.getContext(), LLVM::Linkage::Internal));
    SmallVector<Location> locs(types.size(), b.getLoc());
    Block *entry = b.createBlock(&function.getBody(), {}, types, locs);
    body(b, buffersOf(b, entry->getArguments()));
    func::ReturnOp::create(b);
    callee = function;
  }
  func::CallOp::create(b, cast<func::FuncOp>(callee), operands);
}

SizeMultiples SizeMultiples::of(int64_t columns, int64_t depth,
                                int64_t columnStep, int64_t width) {
  SizeMultiples multiples;
  if (!ShapedType::isDynamic(columns))
    multiples.columns = std::gcd(columnStep, columns);
  if (!ShapedType::isDynamic(depth))
    multiples.depth = std::gcd(width, depth);
  return multiples;
}

std::string SizeMultiples::key() const {
  return "columns a multiple of " + std::to_string(columns) + ", depth of " +
         std::to_string(depth);
}

Value withDynamicDims(Builder &b, Value value, ArrayRef<int64_t> dims) {
  auto type = cast<ShapedType>(value.getType());
  SmallVector<int64_t> shape(type.getShape());
  for (int64_t d : dims)
    shape[d] = ShapedType::kDynamic;
  if (isa<MemRefType>(type))
    return memref::CastOp::create(
        b, MemRefType::get(shape, type.getElementType()), value);
  return tensor::CastOp::create(
      b, RankedTensorType::get(shape, type.getElementType()), value);
}

/// The body of matmulTransposeB over buffers: out = a w^T. The sizes may be
/// dynamic (`multiples` holds what the code takes from the static ones).
static void denseGemm(Builder &b, Value a, Value w, Value scales, Value out,
                      bool tensorScaled, const SizeMultiples &multiples,
                      const VectorTarget &target) {
  auto rhsType = cast<MemRefType>(w.getType());
  // The rows as f32 (quantized for FP8), converted once.
  a = !scales        ? widenRows(b, a, target.width, multiples.depth)
      : tensorScaled ? quantizeTensorFp8(b, a, Value(), target.width)
                     : quantizeRowsFp8(b, a, target.width);
  Value rows = dim(b, a, 0);
  Value columns = dim(b, w, 0), depth = dim(b, w, 1);
  // Many rows: the packed kernel, over blocks of rows large enough to pay
  // for packing their block of columns.
  constexpr int64_t kPackedRowBlock = 512;
  Value many = arith::CmpIOp::create(b, arith::CmpIPredicate::uge, rows,
                                     indexConst(b, kPackedRows));
  auto ifOp = scf::IfOp::create(b, many, /*withElseRegion=*/true);
  Builder packed(b.getLoc(), ifOp.getThenBodyBuilder());
  Value packedBlock = packedColumnBlock(packed, target, depth, columns);
  parallelBlocks(
      packed,
      {ceilDiv(packed, rows, kPackedRowBlock),
       ceilDiv(packed, columns, packedBlock)},
      [&](Builder &b, ValueRange block) {
        // (Plain variables: lambdas capture them, which C++17 does not
        // allow for structured bindings.)
        Value i0, i1, j0, j1;
        std::tie(i0, i1) = blockRange(b, block[0], kPackedRowBlock, rows);
        std::tie(j0, j1) = blockRange(b, block[1], packedBlock, columns);
        emitPackedGemm(
            b,
            {i0, i1, j0, j1, depth, packedBlock,
             [&](Builder &b, Value i, Value k) {
               return toF32(b, memref::LoadOp::create(b, a, ValueRange{i, k}));
             },
             [&](Builder &b, Value j, Value k, int64_t width) {
               return loadWeight(b, w, scales, {j, k}, width);
             },
             [&](Builder &b, Value i, Value j, Value v) {
               storeVector(b, v, out, {i, j});
             },
             multiples.columns, multiples.depth},
            target);
      });
  // Few rows: the dot kernel on the weights as they are, blocks of rows
  // by blocks of columns, one per parallel iteration.
  Builder few(b.getLoc(), ifOp.getElseBodyBuilder());
  constexpr int64_t kRowBlock = 64;
  Value columnBlock = dotColumnBlock(few, target, depth, columns);
  parallelBlocks(
      few, {ceilDiv(few, rows, kRowBlock), ceilDiv(few, columns, columnBlock)},
      [&](Builder &b, ValueRange block) {
        Value i0, i1, j0, j1;
        std::tie(i0, i1) = blockRange(b, block[0], kRowBlock, rows);
        std::tie(j0, j1) = blockRange(b, block[1], columnBlock, columns);
        auto run = [&](Builder &b, Value panel) {
          DotGemm gemm{i0, i1, j0, j1, depth,
                       [&](Builder &b, Value i, Value k, int64_t width) {
                         return loadVector(b, a, {i, k}, width);
                       },
                       [&](Builder &b, Value j, Value k, int64_t width) {
                         if (!panel)
                           return loadVector(b, w, {j, k}, width);
                         Value row = arith::SubIOp::create(b, j, j0);
                         return loadVector(b, panel, {row, k}, width);
                       },
                       [&](Builder &b, Value i, Value j, Value sum) {
                         memref::StoreOp::create(b, sum, out, ValueRange{i, j});
                       },
                       // Blocks are whole register blocks, and the last one
                       // a multiple of what the column count is.
                       std::gcd(multiples.columns, dotRegisterColumns(target)),
                       multiples.depth};
          emitDotGemm(b, gemm, target);
        };
        // FP8 or 16-bit weights: the block's weights converted once for
        // its rows.
        if (scales || !rhsType.getElementType().isF32())
          withWeightPanel(b, w, scales, {}, j0, j1, columnBlock, depth,
                          multiples.depth, target.width, run);
        else
          run(b, Value());
      });
}

Value matmulTransposeB(Builder &b, Value lhs, Value rhs,
                       const VectorTarget &target, Value rhsScale,
                       bool tensorScaled) {
  auto lhsType = cast<RankedTensorType>(lhs.getType());
  auto rhsType = cast<RankedTensorType>(rhs.getType());
  auto resultType = MemRefType::get(
      {lhsType.getDimSize(0), rhsType.getDimSize(0)}, b.getF32Type());
  SmallVector<Value> sizes;
  if (resultType.isDynamicDim(0))
    sizes.push_back(dim(b, lhs, 0));
  if (resultType.isDynamicDim(1))
    sizes.push_back(dim(b, rhs, 0));
  Value result = alloc(b, resultType, sizes);
  SizeMultiples multiples =
      SizeMultiples::of(rhsType.getDimSize(0), rhsType.getDimSize(1),
                        packedStripWidth(target), target.width);
  // Without FP8 scales (whose block counts follow the sizes) the kernel
  // takes the column count and depth at run time: the router and the
  // shared expert's projections share its code where `multiples` agree.
  SmallVector<Value> operands = {lhs, rhs, result};
  std::string variant;
  if (rhsScale) {
    operands.insert(operands.begin() + 2, rhsScale);
  } else {
    operands = {withDynamicDims(b, lhs, {1}), withDynamicDims(b, rhs, {0, 1}),
                withDynamicDims(b, result, {1})};
    variant = multiples.key();
  }
  callKernel(
      b, target,
      !rhsScale      ? "dense_gemm"
      : tensorScaled ? "dense_gemm_fp8_tensor"
                     : "dense_gemm_fp8",
      operands,
      [&](Builder &b, ValueRange args) {
        denseGemm(b, args[0], args[1], rhsScale ? args[2] : Value(),
                  args.back(), tensorScaled, multiples, target);
      },
      variant);
  return asTensor(b, result);
}

Value elementwise(Builder &b, ValueRange inputs, Type elementType,
                  function_ref<Value(Builder &, ValueRange)> fn) {
  auto type = cast<RankedTensorType>(inputs.front().getType());
  auto resultType = RankedTensorType::get(type.getShape(), elementType);
  Value empty = tensor::EmptyOp::create(
      b, resultType, dynamicSizes(b, resultType, inputs.front()));
  MLIRContext *ctx = b.getContext();
  SmallVector<AffineMap> maps(inputs.size() + 1,
                              AffineMap::getMultiDimIdentityMap(2, ctx));
  SmallVector<utils::IteratorType> iterators(2, utils::IteratorType::parallel);
  return linalg::GenericOp::create(
             b, TypeRange{resultType}, inputs, ValueRange{empty}, maps,
             iterators,
             [&](OpBuilder &nested, Location loc, ValueRange args) {
               Builder nb(loc, nested);
               SmallVector<Value> f32Args;
               for (Value arg : args.drop_back())
                 f32Args.push_back(toF32(nb, arg));
               linalg::YieldOp::create(
                   nb, ValueRange{fromF32(nb, fn(nb, f32Args), elementType)});
             })
      .getResult(0);
}

Value reduceRows(Builder &b, Value input, double init,
                 function_ref<Value(Builder &, Value, Value)> combine) {
  auto type = cast<RankedTensorType>(input.getType());
  auto resultType = RankedTensorType::get({type.getDimSize(0)}, b.getF32Type());
  Value empty = tensor::EmptyOp::create(b, resultType,
                                        dynamicSizes(b, resultType, input));
  Value filled = linalg::FillOp::create(b, ValueRange{f32Const(b, init)},
                                        ValueRange{empty})
                     .getResult(0);
  MLIRContext *ctx = b.getContext();
  AffineExpr t, e;
  bindDims(ctx, t, e);
  SmallVector<AffineMap> maps = {AffineMap::get(2, 0, {t, e}, ctx),
                                 AffineMap::get(2, 0, {t}, ctx)};
  SmallVector<utils::IteratorType> iterators = {utils::IteratorType::parallel,
                                                utils::IteratorType::reduction};
  return linalg::GenericOp::create(
             b, TypeRange{resultType}, ValueRange{input}, ValueRange{filled},
             maps, iterators,
             [&](OpBuilder &nested, Location loc, ValueRange args) {
               Builder nb(loc, nested);
               linalg::YieldOp::create(
                   nb, ValueRange{combine(nb, args[1], args[0])});
             })
      .getResult(0);
}

/// `out[t, e] = fn(input[t, e], vector[t or e])`: the vector indexed by
/// dimension `along` of the result.
static Value withBroadcast(Builder &b, Value input, Value vector,
                           unsigned along,
                           function_ref<Value(Builder &, Value, Value)> fn) {
  auto type = cast<RankedTensorType>(input.getType());
  Value empty = tensor::EmptyOp::create(b, type, dynamicSizes(b, type, input));
  MLIRContext *ctx = b.getContext();
  AffineExpr t, e;
  bindDims(ctx, t, e);
  SmallVector<AffineMap> maps = {AffineMap::get(2, 0, {t, e}, ctx),
                                 AffineMap::get(2, 0, {along ? e : t}, ctx),
                                 AffineMap::get(2, 0, {t, e}, ctx)};
  SmallVector<utils::IteratorType> iterators(2, utils::IteratorType::parallel);
  return linalg::GenericOp::create(
             b, TypeRange{type}, ValueRange{input, vector}, ValueRange{empty},
             maps, iterators,
             [&](OpBuilder &nested, Location loc, ValueRange args) {
               Builder nb(loc, nested);
               linalg::YieldOp::create(nb,
                                       ValueRange{fn(nb, args[0], args[1])});
             })
      .getResult(0);
}

Value withRowValue(Builder &b, Value input, Value rowValue,
                   function_ref<Value(Builder &, Value, Value)> fn) {
  return withBroadcast(b, input, rowValue, 0, fn);
}

Value withColumnValue(Builder &b, Value input, Value columnValue,
                      function_ref<Value(Builder &, Value, Value)> fn) {
  return withBroadcast(b, input, columnValue, 1, fn);
}

Value validRow(Builder &b, Value r, Value rowCount) {
  return arith::AndIOp::create(
      b,
      arith::CmpIOp::create(b, arith::CmpIPredicate::sge, r, indexConst(b, 0)),
      arith::CmpIOp::create(b, arith::CmpIPredicate::slt, r, rowCount));
}

void replaceWithResults(ConversionPatternRewriter &rewriter, Operation *op,
                        ArrayRef<Value> results) {
  Builder b(op->getLoc(), rewriter);
  SmallVector<Value> casted;
  for (auto [result, value] : llvm::zip(op->getResults(), results))
    casted.push_back(
        value.getType() == result.getType()
            ? value
            : Value(tensor::CastOp::create(b, result.getType(), value)));
  rewriter.replaceOp(op, casted);
}

} // namespace mlir::moe::host
