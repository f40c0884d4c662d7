//===- SelectTiles.cpp - Tile shapes of grouped GEMMs ---------------------===//
//
// Part of moe-compiler.
//
//===----------------------------------------------------------------------===//

#include "moe/Transforms/Passes.h"
#include "moegpu/MoeGpuDialect.h"

namespace mlir::moe {
#define GEN_PASS_DEF_MOESELECTTILES
#include "moe/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moegpu;

namespace {

/// Shared memory kept out of the pipeline: the static mbarriers and the
/// padding that puts the dynamic region on a 1024-byte boundary.
constexpr int64_t kReservedSharedMemory = 1024;

TileAttr selectTile(MLIRContext *ctx, int64_t n, bool swiglu,
                    int64_t maxStages) {
  constexpr int64_t m = 128, k = 64;
  int64_t tileN = 0;
  for (int64_t candidate : {128, 256, 192, 64, 160, 224, 96, 32, 16}) {
    if (swiglu && candidate % 16 != 0)
      continue;
    if (n % candidate == 0) {
      tileN = candidate;
      break;
    }
  }
  if (!tileN)
    tileN = 128;
  int64_t stageBytes = (m + tileN) * k * 2;
  int64_t stages = std::min(
      maxStages, (kMaxSharedMemoryBytes - kReservedSharedMemory) / stageBytes);
  return TileAttr::get(ctx, m, tileN, k, stages);
}

struct MoeSelectTiles
    : public mlir::moe::impl::MoeSelectTilesBase<MoeSelectTiles> {
  using MoeSelectTilesBase::MoeSelectTilesBase;

  void runOnOperation() override {
    if (maxStages < 2) {
      getOperation()->emitError()
          << "moe-select-tiles: max-stages must be at least 2, got "
          << static_cast<int64_t>(maxStages);
      return signalPassFailure();
    }
    getOperation()->walk([&](GroupedGemmOp op) {
      if (!op.getTileAttr())
        op.setTileAttr(selectTile(op.getContext(), op.getN(),
                                  op.getEpilogue() == Epilogue::SwiGLU,
                                  maxStages));
      if (report) {
        TileAttr tile = op.getTileAttr();
        op.emitRemark() << "tile " << tile.getM() << "x" << tile.getN() << "x"
                        << tile.getK() << ", " << tile.getStages()
                        << " stages, " << tile.getSharedMemoryBytes()
                        << " bytes of shared memory";
      }
    });
  }
};

} // namespace
