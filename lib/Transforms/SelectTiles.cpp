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

TileAttr selectTile(MLIRContext *ctx, int64_t n, bool swiglu, bool dense,
                    bool nMajor, bool halfOutput, int64_t maxStages,
                    int64_t forcedN, int64_t forcedM, int64_t cluster,
                    bool tmaStore, bool fp8) {
  // BLOCK_M 128 (two consumer warpgroups) unless asked for 64 (one): with
  // few rows per expert each segment is padded to half as many rows.
  const int64_t m = forcedM ? forcedM : 128;
  // A stage's row is one 128-byte swizzle atom: 64 16-bit elements, or
  // 128 e4m3 ones, one block of FP8 scales.
  const int64_t k = fp8 ? 128 : 64;
  int64_t tileN = 0;
  // A BLOCK_N asked for (moe-compile --tile-n) where it divides N.
  if (forcedN && !dense && n % forcedN == 0 && (!fp8 || 128 % forcedN == 0))
    tileN = forcedN;
  // FP8: one block of b's scales per tile (an n that divides 128), and
  // the k block's partial sums beside the accumulator leave no room for
  // 256 columns.
  if (fp8 && !tileN) {
    for (int64_t candidate : {128, 64, 32, 16})
      if (!tileN && n % candidate == 0 && (!swiglu || candidate % 16 == 0))
        tileN = candidate;
    if (!tileN)
      tileN = 128;
  }
  // A dense GEMM (the router's logits over the experts: N = 8 to 384, K =
  // hidden, and as few rows as tokens) takes N blocks of at most 64
  // columns, rounded up to wgmma's granule of 8: with T = 128 one M block
  // is 4 CTAs of DeepSeek-V3's 256 experts instead of 1, and with T = 4096
  // 128 CTAs (one wave) instead of 32; each rereads its A rows, from L2.
  // Columns past N read zero rows of B (TMA's out-of-bounds fill) and are
  // not stored.
  if (!tileN && dense && !nMajor)
    tileN = std::min<int64_t>(llvm::alignTo(n, swiglu ? 16 : 8), 64);
  // 128x256 where it measured faster on an H200 (docs/Performance.md,
  // 2026-11-30): the K-major (nt) GEMMs that store 16-bit results. Each
  // wgmma reads its A fragment once per 256 columns instead of 128, and a
  // tile's loads are 48 KB per k-block for 2x the FLOPs of 32 KB. Measured
  // against 128x128: DeepSeek-V3's expert_up 4.08 -> 3.44 ms, expert_down
  // 2.26 -> 2.04, Mixtral's expert_down 1.95 -> 1.55; no shape slower by
  // more than 1.2%. The training step's f32-output nt GEMM, its k-grouped
  // tn GEMMs and the nn GEMM (which spills at 256) were as fast or faster
  // at 128 and keep it.
  if (!tileN && !dense && !nMajor && halfOutput && n % 256 == 0)
    tileN = 256;
  // Otherwise the first of these that divides N. An N-major B (the nn and
  // tn layouts of the backward pass) is loaded in TMA boxes of 64
  // columns: its tile is a multiple of 64 (the last box of an N that is
  // not reads zeros past N).
  for (int64_t candidate : {128, 256, 192, 64, 160, 224, 96, 32, 16}) {
    if (tileN || (swiglu && candidate % 16 != 0) ||
        (nMajor && candidate % 64 != 0))
      continue;
    if (n % candidate == 0)
      tileN = candidate;
  }
  if (!tileN)
    tileN = nMajor && n <= 64 ? 64 : 128;
  int64_t stageBytes = (m + tileN) * TileAttr::kStageRowBytes;
  // The pipeline's stages in what the epilogue's staging leaves.
  int64_t staging = tmaStore ? tmaStoreStagingBytes(m / 64) : 0;
  int64_t stages = std::min(
      maxStages,
      (kMaxSharedMemoryBytes - kReservedSharedMemoryBytes - staging) /
          stageBytes);
  // A pair of CTAs sharing B (moe-compile --tile-cluster=2) where B's
  // halves are whole boxes.
  return TileAttr::get(ctx, m, tileN, k, stages,
                       cluster == 2 && pairSharesB(tileN) ? 2 : 1);
}

struct MoeSelectTiles
    : public mlir::moe::impl::MoeSelectTilesBase<MoeSelectTiles> {
  using MoeSelectTilesBase::MoeSelectTilesBase;

  void runOnOperation() override {
    if (tileN < 0 || tileN % 64 != 0 || tileN > 256) {
      getOperation()->emitError()
          << "moe-select-tiles: tile-n must be 0, 64, 128, 192 or 256, got "
          << static_cast<int64_t>(tileN);
      return signalPassFailure();
    }
    if (tileM != 0 && tileM != 64 && tileM != 128) {
      getOperation()->emitError()
          << "moe-select-tiles: tile-m must be 0, 64 or 128, got "
          << static_cast<int64_t>(tileM);
      return signalPassFailure();
    }
    if (cluster != 1 && cluster != 2) {
      getOperation()->emitError()
          << "moe-select-tiles: cluster must be 1 or 2, got "
          << static_cast<int64_t>(cluster);
      return signalPassFailure();
    }
    if (maxStages < 2) {
      getOperation()->emitError()
          << "moe-select-tiles: max-stages must be at least 2, got "
          << static_cast<int64_t>(maxStages);
      return signalPassFailure();
    }
    // Segments padded to fewer rows than a 128-row tile (--alignment 64)
    // take 64-row tiles: a tile never spans two experts.
    int64_t blockM = tileM;
    if (auto alignment = getOperation()->getAttrOfType<IntegerAttr>(
            "moegpu.alignment")) {
      int64_t a = alignment.getInt();
      if (blockM && a % blockM != 0) {
        getOperation()->emitError()
            << "moe-select-tiles: tile-m " << blockM
            << " does not divide the segments' alignment " << a;
        return signalPassFailure();
      }
      if (!blockM && a % 128 != 0)
        blockM = 64;
    }
    getOperation()->walk([&](GroupedGemmOp op) {
      if (!op.getTileAttr())
        op.setTileAttr(selectTile(
            op.getContext(), op.getN(), op.getEpilogue() == Epilogue::SwiGLU,
            op.isDense(), op.getLayout() != GemmLayout::NT,
            op.getC().getType().getElementType().getIntOrFloatBitWidth() == 16,
            maxStages, tileN, blockM, cluster,
            op.getEpilogue() != Epilogue::Accumulate &&
                usesTmaStoreEpilogue(op.getC().getType(),
                                     op.getLayout() != GemmLayout::TN &&
                                         rowsEndOnBoxes(op.getOffsets()),
                                     op.getLayout() == GemmLayout::TN),
            op.isFp8()));
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
