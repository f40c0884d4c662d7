//===- Collectives.cpp - Collectives on the host --------------------------===//
//
// Part of moe-compiler.
//
// moe.all_to_all(_start/_wait) and moe.all_reduce over several ranks
// become calls through the module's communicator table (see
// moe/runtime/CommAbi.h); over one rank they are the identity.
//
//===----------------------------------------------------------------------===//

#include "HostBuilders.h"

#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "moe/runtime/CommAbi.h"

using namespace mlir;
using namespace mlir::moe;
using namespace mlir::moe::host;

namespace {

using Builder = host::Builder;

/// A word of the module's communicator table (addCommTable makes it): an
/// exported, zero-initialized `i64` array the runtime fills after loading
/// the shared object (see moe/runtime/CommAbi.h).
using CommSlot = ::moe::comm::Slot;
constexpr int64_t kCommTableSize = ::moe::comm::kSlotCount;
constexpr const char *kCommTableName = ::moe::comm::kTableName;

Value commWord(Builder &b, CommSlot slot) {
  MLIRContext *ctx = b.getContext();
  auto i64 = b.getI64Type();
  auto tableType = LLVM::LLVMArrayType::get(i64, kCommTableSize);
  auto ptr = LLVM::LLVMPointerType::get(ctx);
  Value table = LLVM::AddressOfOp::create(b, ptr, kCommTableName);
  Value word = LLVM::GEPOp::create(
      b, ptr, tableType, table,
      ArrayRef<LLVM::GEPArg>{0, static_cast<int32_t>(slot)});
  return LLVM::LoadOp::create(b, i64, word);
}

/// Calls the runtime function in `slot` with the communicator context and
/// `args` (all i64); returns its i64 result when `hasResult`.
Value callComm(Builder &b, CommSlot slot, ArrayRef<Value> args,
               bool hasResult = false) {
  MLIRContext *ctx = b.getContext();
  auto i64 = b.getI64Type();
  Value fn = LLVM::IntToPtrOp::create(b, LLVM::LLVMPointerType::get(ctx),
                                      commWord(b, slot));
  SmallVector<Value> operands{fn, commWord(b, CommSlot::Context)};
  operands.append(args.begin(), args.end());
  SmallVector<Type> params(operands.size() - 1, i64);
  Type result = hasResult ? Type(i64) : LLVM::LLVMVoidType::get(ctx);
  auto call = LLVM::CallOp::create(
      b, LLVM::LLVMFunctionType::get(result, params), operands);
  return hasResult ? call.getResult() : Value();
}

/// The address of a buffer's first element (buffers here have the identity
/// layout, so the aligned pointer is the first element).
Value addressOf(Builder &b, Value buffer) {
  Value index = memref::ExtractAlignedPointerAsIndexOp::create(b, buffer);
  return arith::IndexCastOp::create(b, b.getI64Type(), index);
}

Value i64Const(Builder &b, int64_t value) {
  return arith::ConstantOp::create(b, b.getI64IntegerAttr(value));
}

/// Two calls: the exchange of segment sizes gives the output offsets, then
/// the rows move into a buffer of the size they announce, at once (a
/// blocking all-to-all) or in the background until the wait (a start).
/// Returns the output buffer, the output offsets as a tensor and, for a
/// start, the handle.
struct Exchange {
  Value out, outOffsets, handle;
};
Exchange lowerExchange(Builder &b, Operation *op, Value input, Value offsets,
                       AllToAllKind kindAttr, bool start) {
  auto inputType = cast<RankedTensorType>(input.getType());
  auto offsetsType = cast<RankedTensorType>(offsets.getType());
  int64_t experts = offsetsType.getDimSize(0) - 1;
  int64_t rowBytes =
      inputType.getDimSize(1) * (inputType.getElementTypeBitWidth() / 8);
  Value kind = i64Const(b, static_cast<int64_t>(kindAttr));
  Value inOffsets = asBuffer(b, offsets);
  Value outOffsets = alloc(b, MemRefType::get({experts + 1}, b.getI32Type()));
  callComm(b, CommSlot::ExchangeCounts,
           {kind, addressOf(b, inOffsets), addressOf(b, outOffsets),
            i64Const(b, experts)});
  Value used =
      memref::LoadOp::create(b, outOffsets, ValueRange{indexConst(b, experts)});
  Value rows = arith::IndexCastOp::create(b, b.getIndexType(), used);
  Value out =
      alloc(b,
            MemRefType::get({ShapedType::kDynamic, inputType.getDimSize(1)},
                            inputType.getElementType()),
            rows);
  Value handle =
      callComm(b, start ? CommSlot::StartRows : CommSlot::ExchangeRows,
               {kind, addressOf(b, asBuffer(b, input)), addressOf(b, inOffsets),
                addressOf(b, out), addressOf(b, outOffsets),
                i64Const(b, experts), i64Const(b, rowBytes)},
               /*hasResult=*/start);
  return {out, asTensor(b, outOffsets), handle};
}

SmallVector<Value> lowerAllToAll(Builder &b, AllToAllOp op) {
  Exchange e = lowerExchange(b, op, op.getInput(), op.getOffsets(),
                             op.getKind(), /*start=*/false);
  return {asTensor(b, e.out), e.outOffsets};
}

/// A copy of the input, summed in place over the ranks.
Value lowerAllReduce(Builder &b, AllReduceOp op) {
  auto type = cast<RankedTensorType>(op.getInput().getType());
  auto memrefType = MemRefType::get(type.getShape(), type.getElementType());
  Value in = asBuffer(b, op.getInput());
  Value out = alloc(b, memrefType, dynamicSizes(b, memrefType, in));
  memref::CopyOp::create(b, in, out);
  Value count = indexConst(b, 1);
  for (int64_t i = 0; i < type.getRank(); ++i)
    count = arith::MulIOp::create(b, count, dim(b, in, i));
  callComm(b, CommSlot::AllReduce,
           {addressOf(b, out),
            arith::IndexCastOp::create(b, b.getI64Type(), count)});
  return asTensor(b, out);
}

/// moe.all_to_all_start: the exchange runs in the background; the wait
/// (later in the block) hands its buffer out.
struct LowerStart : OpConversionPattern<AllToAllStartOp> {
  LowerStart(MLIRContext *ctx, PendingExchanges &pending)
      : OpConversionPattern(ctx), pending(pending) {}
  LogicalResult
  matchAndRewrite(AllToAllStartOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Builder b(op.getLoc(), rewriter);
    Exchange e = lowerExchange(b, op, adaptor.getInput(), adaptor.getOffsets(),
                               op.getKind(), /*start=*/true);
    pending[e.handle] = e.out;
    replaceWithResults(rewriter, op, {e.handle, e.outOffsets});
    return success();
  }
  PendingExchanges &pending;
};

struct LowerWait : OpConversionPattern<AllToAllWaitOp> {
  LowerWait(MLIRContext *ctx, PendingExchanges &pending)
      : OpConversionPattern(ctx), pending(pending) {}
  LogicalResult
  matchAndRewrite(AllToAllWaitOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    auto it = pending.find(adaptor.getHandle());
    if (it == pending.end())
      return op.emitOpError() << "has no lowered moe.all_to_all_start";
    Builder b(op.getLoc(), rewriter);
    callComm(b, CommSlot::Wait,
             {adaptor.getHandle()});
    replaceWithResults(rewriter, op, {asTensor(b, it->second)});
    return success();
  }
  PendingExchanges &pending;
};

} // namespace

void mlir::moe::host::addCommTable(ModuleOp module) {
  bool needed = false;
  module.walk([&](Operation *op) {
    if (auto a2a = dyn_cast<AllToAllOp>(op))
      needed |= a2a.getEpSize() != 1;
    else if (auto reduce = dyn_cast<AllReduceOp>(op))
      needed |= reduce.getEpSize() != 1;
    else
      needed |= isa<AllToAllStartOp, AllToAllWaitOp>(op);
  });
  if (!needed || module.lookupSymbol(kCommTableName))
    return;
  OpBuilder global = OpBuilder::atBlockBegin(module.getBody());
  auto i64 = global.getI64Type();
  LLVM::GlobalOp::create(
      global, module.getLoc(), LLVM::LLVMArrayType::get(i64, kCommTableSize),
      /*isConstant=*/false, LLVM::Linkage::External, kCommTableName,
      DenseElementsAttr::get(RankedTensorType::get({kCommTableSize}, i64),
                             global.getI64IntegerAttr(0).getValue()));
}

void mlir::moe::host::populateCollectivePatterns(RewritePatternSet &patterns,
                                                 PendingExchanges &pending) {
  addLowering<AllToAllOp>(patterns, [](Builder &b, AllToAllOp op) {
    return op.getEpSize() == 1
               ? SmallVector<Value>{op.getInput(), op.getOffsets()}
               : lowerAllToAll(b, op);
  });
  addLowering<AllReduceOp>(patterns, [](Builder &b, AllReduceOp op) {
    return op.getEpSize() == 1 ? op.getInput() : lowerAllReduce(b, op);
  });
  patterns.add<LowerStart, LowerWait>(patterns.getContext(), pending);
}
