//===- Lowering.h - The SIMT kernel ops' patterns --------------*- C++ -*-===//
//
// Part of moe-compiler.
//
// Internal to convert-moegpu-kernels-to-gpu: each SIMT kernel op becomes its
// threads' code, built by a function `lower<Op>(op, e)` at the op (which is
// then erased) with the Emitter's shorthands. Each file registers its
// ops' patterns.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_CONVERSION_MOEGPUKERNELSTOGPU_LOWERING_H
#define MOE_CONVERSION_MOEGPUKERNELSTOGPU_LOWERING_H

#include "moe/Conversion/MoeGpuKernels.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

namespace mlir::moe::kernels {

/// The pattern of kernel op `OpT`: `Lower(op, e)` builds the code before
/// the op.
template <typename OpT, void (*Lower)(OpT, Emitter &)>
struct LowerKernel : OpRewritePattern<OpT> {
  using OpRewritePattern<OpT>::OpRewritePattern;

  LogicalResult matchAndRewrite(OpT op,
                                PatternRewriter &rewriter) const override {
    rewriter.setInsertionPoint(op);
    ImplicitLocOpBuilder b(op.getLoc(), rewriter);
    Emitter e{b};
    Lower(op, e);
    rewriter.eraseOp(op);
    return success();
  }
};

/// Token `token`'s chunk of `tokens` in `chunks`: chunk c holds tokens
/// [floor(T c / C), floor(T (c + 1) / C)), as the host target's chunks, so
/// t's is the largest c with T c < (t + 1) C: ((t + 1) C - 1) / T.
Value chunkOf(Emitter &e, Value token, Value tokens, int64_t chunks);

/// Runs `body(h, chunk)` for this thread's share of a row of `hidden`
/// 2-byte elements of type `element`: 16-byte chunks (vector<8>) when whole
/// rows are, every kRowThreads-th chunk from the thread's own; single
/// elements otherwise.
void forRowChunks(Emitter &e, Value tid, int64_t hidden, Type element,
                  function_ref<void(Value, Type)> body);

/// Row of the packed [G, 2F, H] gate/up weight that holds gate row `f`
/// (blocks of kGateUpBlock gate rows, then as many up rows); its up row
/// is kGateUpBlock further.
Value gateRow(Emitter &e, Value f);

void populateRoutingPatterns(RewritePatternSet &patterns);
void populateDispatchPatterns(RewritePatternSet &patterns);
void populateQuantizePatterns(RewritePatternSet &patterns);
void populateCombinePatterns(RewritePatternSet &patterns);
void populateTrainingPatterns(RewritePatternSet &patterns);
void populateExchangePatterns(RewritePatternSet &patterns);

} // namespace mlir::moe::kernels

#endif // MOE_CONVERSION_MOEGPUKERNELSTOGPU_LOWERING_H
