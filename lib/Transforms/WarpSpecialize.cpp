//===- WarpSpecialize.cpp - Producer/consumer form of grouped GEMMs -------===//
//
// Part of moe-compiler.
//
//===----------------------------------------------------------------------===//

#include "moe/Transforms/Passes.h"
#include "moegpu/MoeGpuDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Builders.h"

namespace mlir::moe {
#define GEN_PASS_DEF_MOEGPUWARPSPECIALIZE
#include "moe/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moegpu;

namespace {

/// Register budget of the producer warpgroup: it only issues TMA.
constexpr int64_t kProducerRegisters = 40;
/// Most registers a consumer thread asks for (the accumulator of a 64x256
/// tile is 128 of them).
constexpr int64_t kMaxConsumerRegisters = 232;

/// The tile's place in a `moegpu.tile_loop`: its group (a split_k GEMM's
/// slice), first row and column, the pipeline iteration of its first k
/// block, its k blocks and the first of them.
struct TileArgs {
  Value group, row, col, base, kBlocks, kFirst;
};

/// Builds a `moegpu.tile_loop` for `op` (over `rows` rows when it is dense,
/// of `rows` output rows per group when it is k-grouped) whose body
/// `buildBody` fills. `splitCount` (a split_k GEMM's consumers) gets the
/// slices the launch takes.
void buildTileLoop(
    OpBuilder &b, GroupedGemmOp op, Value rows, Value splitCount,
    function_ref<void(OpBuilder &, const TileArgs &)> buildBody) {
  Location loc = op.getLoc();
  TileAttr tile = op.getTileAttr();
  bool kGrouped = op.isKGrouped();
  auto loop = TileLoopOp::create(
      b, loc, op.getOffsets(), rows, op.getN(), tile.getM(), tile.getN(),
      kGrouped ? 0 : op.getK(), tile.getK(), kGrouped, op.getSmRangeAttr(),
      op.getMaxSplits(), splitCount);
  Type index = b.getIndexType();
  SmallVector<Type> types(6, index);
  SmallVector<Location> locs(6, loc);
  Block *body = b.createBlock(&loop.getBody(), {}, types, locs);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(body);
  buildBody(b,
            {body->getArgument(0), body->getArgument(1), body->getArgument(2),
             body->getArgument(3), body->getArgument(4), body->getArgument(5)});
  YieldOp::create(b, loc);
}

LogicalResult specialize(GroupedGemmOp op) {
  TileAttr tile = op.getTileAttr();
  SmRangeAttr range = op.getSmRangeAttr();
  if (!tile || !range)
    return op.emitOpError() << "needs a tile and an sm_range to be warp "
                               "specialized (run moe-select-tiles and "
                               "moe-partition-sms first)";
  if (tile.getSharedMemoryBytes() > kMaxSharedMemoryBytes)
    return op.emitOpError() << "tile needs " << tile.getSharedMemoryBytes()
                            << " bytes of shared memory, more than the "
                            << kMaxSharedMemoryBytes << " a CTA may opt in to";

  MLIRContext *ctx = op.getContext();
  Location loc = op.getLoc();
  OpBuilder b(op);
  Type elementType = op.getA().getType().getElementType();
  GemmLayout layout = op.getLayout();
  bool kGrouped = op.isKGrouped();
  int64_t consumers = tile.getConsumers();
  int64_t budget = kRegistersPerSm / kWarpgroupThreads - kProducerRegisters;
  int64_t consumerRegs =
      std::min(kMaxConsumerRegisters, budget / consumers / 8 * 8);
  // An FP8 tile holds a k block's partial sums beside the accumulator.
  bool fp8 = op.isFp8();
  int64_t accumulators = tile.getN() / 2 * (fp8 ? 2 : 1);
  if (consumerRegs < accumulators + 24)
    return op.emitOpError()
           << "tile " << tile.getM() << "x" << tile.getN() << " leaves "
           << consumerRegs << " registers per consumer thread, too few for "
           << accumulators << " accumulators";
  // A k-grouped FP8 GEMM scales each column on its own; the others take
  // one block of b's scales per tile.
  if (fp8 && (tile.getK() != 128 || (!kGrouped && 128 % tile.getN() != 0)))
    return op.emitOpError()
           << "FP8 tile " << tile.getM() << "x" << tile.getN() << "x"
           << tile.getK()
           << " must have k = 128 (one block of scales) and an n that "
              "divides 128 (one block of b's scales)";
  if (!fp8 && tile.getK() != 64)
    return op.emitOpError() << "tile k " << tile.getK()
                            << " is for FP8; 16-bit operands take k = 64";
  int64_t n = op.getN(), k = op.getK();
  auto constant = [&](OpBuilder &builder, int64_t v) -> Value {
    return arith::ConstantIndexOp::create(builder, loc, v);
  };

  // A dense GEMM's one group: all of a's rows; a k-grouped one's output
  // rows per group: a's columns.
  Value rows;
  if (kGrouped)
    rows = constant(b, op.getM());
  else if (op.isDense())
    rows = memref::DimOp::create(b, loc, op.getA(), 0);

  Value pipeline = PipelineCreateOp::create(
      b, loc, PipelineType::get(ctx, tile, elementType, op.getStorageLayout()));
  auto roles =
      WarpRolesOp::create(b, loc, consumers, kProducerRegisters, consumerRegs);

  // The first reduction row of a k-grouped tile: its group's first row.
  auto groupStart = [&](OpBuilder &b, Value group) -> Value {
    Value start = memref::LoadOp::create(b, loc, op.getOffsets(), group);
    return arith::IndexCastOp::create(b, loc, b.getIndexType(), start);
  };

  // Producer: one thread walks the tiles and fills slots with TMA.
  {
    OpBuilder::InsertionGuard guard(b);
    b.createBlock(&roles.getProducer());
    buildTileLoop(b, op, rows, Value(),
                  [&](OpBuilder &b, const TileArgs &t) {
                    Value group = t.group, row = t.row, col = t.col;
                    Value base = t.base, kBlocks = t.kBlocks;
                    // Where the tile's A and B boxes start, [mn, k]: a
                    // group's B rows (nt) or B's K rows (nn) or the
                    // group's reduction rows (tn) come first; a split_k
                    // slice starts at its first k block.
                    Value bMn = col, aK0, bK0;
                    switch (layout) {
                    case GemmLayout::NT:
                      if (op.isSplitK()) {
                        aK0 = bK0 = arith::MulIOp::create(
                            b, loc, t.kFirst, constant(b, tile.getK()));
                        break;
                      }
                      bMn = arith::AddIOp::create(
                          b, loc,
                          arith::MulIOp::create(b, loc, group, constant(b, n)),
                          col);
                      break;
                    case GemmLayout::NN:
                      bK0 = arith::MulIOp::create(b, loc, group, constant(b, k));
                      break;
                    case GemmLayout::TN:
                      aK0 = bK0 = groupStart(b, group);
                      break;
                    }
                    auto plus = [&](OpBuilder &b, Value start, Value kk) {
                      return start ? arith::AddIOp::create(b, loc, start, kk)
                                   : kk;
                    };
                    scf::ForOp::create(
                        b, loc, constant(b, 0), kBlocks, constant(b, 1),
                        ValueRange{},
                        [&](OpBuilder &b, Location loc, Value kb, ValueRange) {
                          Value iter = arith::AddIOp::create(b, loc, base, kb);
                          Value kk = arith::MulIOp::create(
                              b, loc, kb, constant(b, tile.getK()));
                          Value aK = plus(b, aK0, kk);
                          Value bK = bK0 == aK0 ? aK : plus(b, bK0, kk);
                          ProduceOp::create(b, loc, pipeline, iter, op.getA(),
                                            row, aK, op.getB(), bMn, bK);
                          scf::YieldOp::create(b, loc);
                        });
                  });
  }

  // Consumers: every warpgroup walks the same tiles, accumulates its 64
  // rows over the slots and runs the epilogue.
  {
    OpBuilder::InsertionGuard guard(b);
    Block *consumer =
        b.createBlock(&roles.getConsumer(), {}, {b.getIndexType()}, {loc});
    Value warpgroup = consumer->getArgument(0);
    auto fragmentType = VectorType::get({tile.getN() / 2}, b.getF32Type());
    buildTileLoop(
        b, op, rows, op.getSplitCount(), [&](OpBuilder &b, const TileArgs &t) {
          Value group = t.group, row = t.row, col = t.col;
          Value base = t.base, kBlocks = t.kBlocks;
          Value zero = arith::ConstantOp::create(
              b, loc, DenseElementsAttr::get(fragmentType, 0.0f));
          // Where the tile's group ends: a dense GEMM's rows, or the
          // group's offset.
          auto endOfRows = [&]() -> Value {
            if (rows)
              return rows;
            Value next = arith::AddIOp::create(b, loc, group, constant(b, 1));
            Value end = memref::LoadOp::create(b, loc, op.getOffsets(), next);
            return arith::IndexCastOp::create(b, loc, b.getIndexType(), end);
          };
          // The epilogue of the tile's accumulator, its rows ending at
          // rowEnd (a rank-3 c, k-grouped or split_k, is indexed by group
          // or slice first).
          auto storeTile = [&](Value acc, Value rowEnd) {
            bool grouped = op.getC().getType().getRank() == 3;
            StoreTileOp::create(b, loc, acc, op.getC(),
                                grouped ? group : Value(), row, col, warpgroup,
                                rowEnd, op.getScale(), op.getBias(),
                                op.getBias() ? group : Value(),
                                op.getEpilogueAttr(), op.getAlphaAttr(),
                                op.getLimitAttr(), op.getRoundedInputsAttr());
          };
          if (fp8) {
            Value rowEnd = endOfRows();
            // A k-grouped tile's k blocks count from its group's first row
            // (a multiple of 128) in the scales.
            Value firstBlock;
            if (kGrouped)
              firstBlock = arith::DivUIOp::create(b, loc, groupStart(b, group),
                                                  constant(b, 128));
            // Each k block is its own wgmma batch from zero, complete (and
            // its slot released) before its scaled sums join the
            // accumulator.
            auto kLoop = scf::ForOp::create(
                b, loc, constant(b, 0), kBlocks, constant(b, 1),
                ValueRange{zero},
                [&](OpBuilder &b, Location loc, Value kb, ValueRange acc) {
                  Value iter = arith::AddIOp::create(b, loc, base, kb);
                  Value partial =
                      MmaOp::create(b, loc, fragmentType, pipeline, iter, zero,
                                    warpgroup, /*pending=*/0, /*first=*/true);
                  Value block =
                      firstBlock ? arith::AddIOp::create(b, loc, firstBlock, kb)
                                 : kb;
                  Value sum = PromoteOp::create(
                      b, loc, fragmentType, acc.front(), partial,
                      op.getAScale(), op.getBScale(), group, row, col, block,
                      warpgroup, rowEnd,
                      op.getEpilogue() == Epilogue::SwiGLU ||
                          op.getGateUpScales());
                  scf::YieldOp::create(b, loc, sum);
                });
            storeTile(kLoop.getResult(0), rowEnd);
            return;
          }
          // A tile with a fixed depth (at least one k block) starts with
          // its first block's wgmma ignoring the accumulator (`first`:
          // scale-d 0), so no zeros are moved into the accumulator
          // registers after the fence; a k-grouped tile may have none
          // and starts from zeros.
          Value start = constant(b, 0), init = zero;
          if (!kGrouped) {
            init = MmaOp::create(b, loc, fragmentType, pipeline, base, zero,
                                 warpgroup, /*pending=*/1, /*first=*/true);
            start = constant(b, 1);
          }
          auto kLoop = scf::ForOp::create(
              b, loc, start, kBlocks, constant(b, 1), ValueRange{init},
              [&](OpBuilder &b, Location loc, Value kb, ValueRange acc) {
                // One wgmma batch stays in flight: this iteration's
                // completes the previous one, whose slot goes back.
                Value iter = arith::AddIOp::create(b, loc, base, kb);
                Value next =
                    MmaOp::create(b, loc, fragmentType, pipeline, iter,
                                  acc.front(), warpgroup, /*pending=*/1);
                Value later = arith::CmpIOp::create(
                    b, loc, arith::CmpIPredicate::ugt, kb, constant(b, 0));
                scf::IfOp::create(b, loc, later, [&](OpBuilder &b,
                                                     Location loc) {
                  Value previous =
                      arith::SubIOp::create(b, loc, iter, constant(b, 1));
                  ReleaseOp::create(b, loc, pipeline, previous,
                                    /*drain=*/false);
                  scf::YieldOp::create(b, loc);
                });
                scf::YieldOp::create(b, loc, next);
              });
          // The last batch: wait for it, then give its slot back. A
          // k-grouped tile of an empty group has no slot, and stores
          // zeros; it still waits on every path, or ptxas, unable to tell
          // the accumulator is complete where the epilogue reads it,
          // serializes every wgmma of the kernel.
          Value last = arith::SubIOp::create(
              b, loc, arith::AddIOp::create(b, loc, base, kBlocks),
              constant(b, 1));
          if (kGrouped) {
            DrainOp::create(b, loc, pipeline);
            Value any = arith::CmpIOp::create(
                b, loc, arith::CmpIPredicate::ugt, kBlocks, constant(b, 0));
            scf::IfOp::create(b, loc, any, [&](OpBuilder &b, Location loc) {
              ReleaseOp::create(b, loc, pipeline, last, /*drain=*/false);
              scf::YieldOp::create(b, loc);
            });
          } else {
            ReleaseOp::create(b, loc, pipeline, last, /*drain=*/true);
          }
          storeTile(kLoop.getResult(0), endOfRows());
        });
  }
  op.erase();
  return success();
}

struct MoeGpuWarpSpecialize
    : public mlir::moe::impl::MoeGpuWarpSpecializeBase<MoeGpuWarpSpecialize> {
  void runOnOperation() override {
    SmallVector<GroupedGemmOp> gemms;
    getOperation()->walk([&](GroupedGemmOp op) { gemms.push_back(op); });
    for (GroupedGemmOp op : gemms)
      if (failed(specialize(op)))
        return signalPassFailure();
  }
};

} // namespace
