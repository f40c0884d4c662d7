//===- DynamicParallel.cpp - Marked scf.parallel to dynamic OpenMP loops --===//
//
// Part of moe-compiler.
//
// `convert-scf-to-openmp` gives every worksharing loop the default static
// schedule: thread t runs the t-th contiguous share of the iterations. The
// grouped GEMMs' iterations (an expert's block of columns) cost as much as
// the expert has rows, so their loops are marked `moe.schedule = "dynamic"`
// and lowered here first, with each thread taking the next iteration when
// it is done with the last.
//
//===----------------------------------------------------------------------===//

#include "moe/Conversion/Passes.h"
#include "moe/MoeDialect.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/OpenMP/OpenMPDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/PatternMatch.h"

namespace mlir::moe {
#define GEN_PASS_DEF_CONVERTDYNAMICPARALLELTOOPENMP
#include "moe/Conversion/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

namespace {

bool isMarkedDynamic(scf::ParallelOp loop) {
  auto schedule =
      loop->getAttrOfType<StringAttr>(MoeDialect::getScheduleAttrName());
  return schedule &&
         schedule.getValue() == MoeDialect::getDynamicScheduleName();
}

/// omp.parallel { omp.wsloop schedule(dynamic = 1) { omp.loop_nest (ivs)
/// { memref.alloca_scope { body } omp.yield } } omp.terminator }.
void lowerDynamic(scf::ParallelOp loop, IRRewriter &rewriter) {
  Location loc = loop.getLoc();
  rewriter.setInsertionPoint(loop);
  auto parallel =
      omp::ParallelOp::create(rewriter, loc, omp::ParallelOperands{});
  OpBuilder::InsertionGuard guard(rewriter);
  rewriter.createBlock(&parallel.getRegion());
  omp::WsloopOperands clauses;
  clauses.scheduleKind = omp::ClauseScheduleKindAttr::get(
      rewriter.getContext(), omp::ClauseScheduleKind::Dynamic);
  clauses.scheduleChunk = LLVM::ConstantOp::create(
      rewriter, loc, rewriter.getI64Type(), rewriter.getI64IntegerAttr(1));
  auto wsloop = omp::WsloopOp::create(rewriter, loc, clauses);
  omp::TerminatorOp::create(rewriter, loc);
  rewriter.createBlock(&wsloop.getRegion());
  auto nest = omp::LoopNestOp::create(
      rewriter, loc, loop.getNumLoops(), loop.getLowerBound(),
      loop.getUpperBound(), loop.getStep(), /*loop_inclusive=*/false,
      /*tile_sizes=*/nullptr);
  // The body (its block arguments are the induction variables) moves into
  // the nest; its operations then move into an alloca scope, so that an
  // alloca in the body is freed every iteration.
  rewriter.inlineRegionBefore(loop.getRegion(), nest.getRegion(),
                              nest.getRegion().begin());
  Block &entry = nest.getRegion().front();
  rewriter.eraseOp(entry.getTerminator()); // scf.reduce, with no operands.
  Block *ops = rewriter.splitBlock(&entry, entry.begin());
  rewriter.setInsertionPointToStart(&entry);
  auto scope = memref::AllocaScopeOp::create(rewriter, loc, TypeRange());
  omp::YieldOp::create(rewriter, loc, ValueRange());
  Block *scopeBlock = rewriter.createBlock(&scope.getBodyRegion());
  rewriter.mergeBlocks(ops, scopeBlock);
  rewriter.setInsertionPointToEnd(scopeBlock);
  memref::AllocaScopeReturnOp::create(rewriter, loc, ValueRange());
  rewriter.eraseOp(loop);
}

struct ConvertDynamicParallelToOpenMP
    : mlir::moe::impl::ConvertDynamicParallelToOpenMPBase<
          ConvertDynamicParallelToOpenMP> {
  void runOnOperation() override {
    SmallVector<scf::ParallelOp> marked;
    // Outermost first: a marked loop nested in another becomes part of the
    // outer one's body, which moves as a whole.
    getOperation()->walk<WalkOrder::PreOrder>([&](scf::ParallelOp loop) {
      if (isMarkedDynamic(loop))
        marked.push_back(loop);
    });
    IRRewriter rewriter(&getContext());
    for (scf::ParallelOp loop : marked) {
      if (loop.getNumReductions() != 0) {
        loop.emitOpError() << "with reductions cannot take the dynamic "
                              "schedule of `"
                           << MoeDialect::getScheduleAttrName() << "`";
        return signalPassFailure();
      }
      lowerDynamic(loop, rewriter);
    }
  }
};

} // namespace
