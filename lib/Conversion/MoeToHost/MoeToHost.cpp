//===- MoeToHost.cpp - moe primitives to upstream dialects for the host ---===//
//
// Part of moe-compiler.
//
// The GEMMs become register-blocked vector micro-kernels in scf.parallel
// loops (Gemm.cpp); the scoring functions and SwiGLU linalg.generic on
// tensors; routing-dependent ops (top-k, dispatch, combine) scf loops over
// buffers. Every accumulation is in f32. Each op
// family is a set of conversion patterns in a file of its own; this pass
// checks what the patterns cannot, then converts with the moe dialect
// illegal, so an op without a pattern is an error.
//
//===----------------------------------------------------------------------===//

#include "HostBuilders.h"
#include "moe/Conversion/Passes.h"
#include "moe/MoeOps.h"

#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/Transforms/DialectConversion.h"

namespace mlir::moe {
#define GEN_PASS_DEF_CONVERTMOETOHOST
#include "moe/Conversion/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

namespace {

/// Largest stack scratch one lowered op may use (per call, not per token).
constexpr int64_t kMaxStackScratchBytes = 1 << 20;

/// Stack scratch the lowering of `op` allocates, and what it scales with.
std::pair<int64_t, std::string> stackScratch(Operation *op) {
  if (auto topk = dyn_cast<TopKOp>(op)) {
    int64_t experts =
        cast<RankedTensorType>(topk.getScores().getType()).getDimSize(1);
    auto groups = static_cast<int64_t>(topk.getGroups());
    return {experts * 5 + groups * 5, "experts = " + std::to_string(experts)};
  }
  if (auto dispatch = dyn_cast<DispatchOp>(op)) {
    auto experts = static_cast<int64_t>(dispatch.getExperts());
    return {experts * 16, "experts = " + std::to_string(experts)};
  }
  return {0, ""};
}

/// A lowered op's result that goes straight to an output argument
/// (`materialize_in_destination` of `to_tensor` of its `memref.alloc`, into
/// a function argument used only after it, every write of the buffer
/// before it) is built in the argument: the allocation, and the copy
/// bufferization would make of it, go. The weight gradients of the
/// backward pass and of the training step (whose AdamW check then reads
/// them from the argument) are such results, hundreds of MB for a large
/// layer.
void buildInDestinations(Operation *root) {
  SmallVector<bufferization::MaterializeInDestinationOp> candidates;
  root->walk([&](bufferization::MaterializeInDestinationOp op) {
    candidates.push_back(op);
  });
  for (bufferization::MaterializeInDestinationOp op : candidates) {
    auto dest = dyn_cast<BlockArgument>(op.getDest());
    auto toTensor = op.getSource().getDefiningOp<bufferization::ToTensorOp>();
    if (!dest || !toTensor || !toTensor->hasOneUse())
      continue;
    bool usedAfter = llvm::all_of(dest.getUsers(), [&](Operation *user) {
      Operation *inBlock = op->getBlock()->findAncestorOpInBlock(*user);
      return user == op || (inBlock && op->isBeforeInBlock(inBlock));
    });
    if (!usedAfter)
      continue;
    auto alloc = toTensor.getBuffer().getDefiningOp<memref::AllocOp>();
    // Static shapes only: a dynamic size need not be the argument's.
    if (!alloc || alloc.getType() != dest.getType() ||
        !alloc.getType().hasStaticShape() ||
        alloc->getBlock() != op->getBlock())
      continue;
    bool writtenBefore = llvm::all_of(alloc->getUsers(), [&](Operation *user) {
      Operation *inBlock = op->getBlock()->findAncestorOpInBlock(*user);
      return inBlock && (inBlock == toTensor || inBlock->isBeforeInBlock(op));
    });
    if (!writtenBefore)
      continue;
    op.erase();
    toTensor.erase();
    alloc.replaceAllUsesWith(Value(dest));
    alloc.erase();
  }
}

struct ConvertMoeToHost
    : mlir::moe::impl::ConvertMoeToHostBase<ConvertMoeToHost> {
  using Base::Base;

  void runOnOperation() override {
    // What the patterns cannot check: the layer must be decomposed, each
    // op's stack scratch bounded, collectives inside a module.
    WalkResult walk = getOperation()->walk([&](Operation *op) {
      if (!isa<MoeDialect>(op->getDialect()))
        return WalkResult::advance();
      if (isa<LayerOp>(op)) {
        op->emitOpError() << "must be decomposed before convert-moe-to-host "
                             "(run moe-decompose-layer first)";
        return WalkResult::interrupt();
      }
      if (auto [bytes, reason] = stackScratch(op);
          bytes > kMaxStackScratchBytes) {
        op->emitOpError() << "needs " << bytes
                          << " bytes of stack scratch on the host (" << reason
                          << "), more than the " << kMaxStackScratchBytes
                          << "-byte limit";
        return WalkResult::interrupt();
      }
      if (isa<AllToAllOp, AllToAllStartOp, AllToAllWaitOp, AllReduceOp>(op) &&
          !op->getParentOfType<ModuleOp>()) {
        op->emitOpError() << "must be inside a module (its collective "
                             "calls go through the module's communicator "
                             "table)";
        return WalkResult::interrupt();
      }
      return WalkResult::advance();
    });
    if (walk.wasInterrupted())
      return signalPassFailure();

    MLIRContext *ctx = &getContext();
    if (auto module = dyn_cast<ModuleOp>(getOperation()))
      host::addCommTable(module);
    else if (auto module = getOperation()->getParentOfType<ModuleOp>())
      host::addCommTable(module);
    ConversionTarget target(*ctx);
    target.addIllegalDialect<MoeDialect>();
    target.markUnknownOpDynamicallyLegal([](Operation *) { return true; });
    RewritePatternSet patterns(ctx);
    host::PendingExchanges pending;
    llvm::StringMap<Operation *> kernels;
    host::VectorTarget vectors{
        vectorWidth.getValue(), vectorRegisters.getValue(),
        isa<ModuleOp>(getOperation()) ? &kernels : nullptr};
    if (vectors.width < 1 || (vectors.width & (vectors.width - 1)) != 0 ||
        vectors.registers < 16) {
      getOperation()->emitError()
          << "convert-moe-to-host: vector-width must be a power of two and "
             "vector-registers at least 16 (got "
          << vectors.width << " and " << vectors.registers << ")";
      return signalPassFailure();
    }
    host::populateRoutingPatterns(patterns, vectors);
    host::populateDispatchPatterns(patterns, vectors);
    host::populateExpertPatterns(patterns, vectors);
    host::populateCollectivePatterns(patterns, pending);
    if (failed(applyPartialConversion(getOperation(), target,
                                      std::move(patterns))))
      return signalPassFailure();
    buildInDestinations(getOperation());
  }
};

} // namespace
