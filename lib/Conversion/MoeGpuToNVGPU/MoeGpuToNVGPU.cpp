//===- MoeGpuToNVGPU.cpp - moegpu kernels to gpu, nvgpu and nvvm ----------===//
//
// Part of moe-compiler.
//
//===----------------------------------------------------------------------===//

#include "moe/Conversion/KernelBuilder.h"
#include "moe/Conversion/Passes.h"
#include "moe/Transforms/Passes.h"
#include "moegpu/MoeGpuDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "mlir/IR/PatternMatch.h"
#include "llvm/ADT/TypeSwitch.h"

#include <map>
#include <tuple>

namespace mlir::moe {
#define GEN_PASS_DEF_CONVERTMOEGPUTONVGPU
#include "moe/Conversion/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moegpu;

namespace {

/// The kernel's dynamic shared memory.
constexpr StringLiteral kSharedMemoryName = "moegpu_smem";
/// Alignment of the dynamic shared memory: a 128-byte swizzled TMA box
/// repeats every 1024 bytes and must start on such a boundary.
constexpr int64_t kSharedMemoryAlignment = 1024;
/// Suspend-time hint of one mbarrier.try_wait (the wait loops until done).
constexpr int64_t kWaitTicks = 10000000;
/// Bytes of K one wgmma instruction reads per row: k = 16 of 16-bit
/// inputs, k = 32 of e4m3.
constexpr int64_t kWgmmaKBytes = 32;
/// Bits of a wgmma shared-memory descriptor besides the start address, in
/// the PTX ISA's canonical 128-byte-swizzled layouts: swizzle mode 1 (bits
/// 62-63), the stride byte offset (bits 32-45) and the leading byte offset
/// (bits 16-29), both in units of 16 bytes.
/// - K-major: 8 rows of 128 bytes repeat every 1024 bytes (the stride);
///   the leading offset is unused (16).
/// - MN-major, a TMA box of 64 rows of K by 64 elements of M or N: 8 rows
///   of K repeat every 1024 bytes (the stride) and the next 64 elements of
///   M or N are the next box, 8192 bytes on (the leading offset).
constexpr uint64_t kKMajorDescriptorBits =
    (1ull << 62) | (64ull << 32) | (1ull << 16);
constexpr uint64_t kMnMajorDescriptorBits =
    (1ull << 62) | (64ull << 32) | (512ull << 16);
/// Elements of M or N in one MN-major box (one 128-byte swizzle row).
constexpr int64_t kMnBox = 64;

Value constIndex(ImplicitLocOpBuilder &b, int64_t value) {
  return moe::KernelBuilder{b}.idx(value);
}

Value constI64(ImplicitLocOpBuilder &b, int64_t value) {
  return arith::ConstantIntOp::create(b, value, 64);
}

gpu::AddressSpaceAttr workgroupSpace(MLIRContext *ctx) {
  return gpu::AddressSpaceAttr::get(ctx, gpu::AddressSpace::Workgroup);
}

/// The epilogue's values of a thread's column pair in chunk `j` of its
/// wgmma fragment, row `half` (0: lane/4, 1: lane/4 + 8): silu(gate) * up
/// (SwiGLU: chunk j holds gate columns, j + 1 the same up columns; clamped
/// with `alpha` and `limit`), else the accumulators times the row's `scale`
/// (if any). With a bias, `biasCol` is the tile's first column plus the
/// thread's (2 * (lane % 4)): bias[expert, biasCol + 8 * chunk + i] joins
/// the accumulator first.
std::pair<Value, Value> epiloguePair(ImplicitLocOpBuilder &b, StoreTileOp op,
                                     int64_t j, int64_t half, Value scale,
                                     Value biasCol) {
  Type f32 = b.getF32Type();
  moe::KernelBuilder k{b};
  auto element = [&](int64_t chunk, int64_t i) -> Value {
    Value v = vector::ExtractOp::create(b, op.getAcc(), 4 * chunk + 2 * half + i);
    if (!op.getBias())
      return v;
    // Columns past the bias's (a partial last tile, stored nowhere) read
    // its last one.
    auto biasType = cast<MemRefType>(op.getBias().getType());
    Value col = arith::AddIOp::create(b, biasCol,
                                      constIndex(b, 8 * chunk + i));
    col = arith::MinUIOp::create(b, col,
                                 constIndex(b, biasType.getDimSize(1) - 1));
    Value bias = memref::LoadOp::create(b, op.getBias(),
                                        ValueRange{op.getExpert(), col});
    return arith::AddFOp::create(b, v, arith::ExtFOp::create(b, f32, bias));
  };
  // x * sigmoid(gain * x) = x / (1 + e^(-gain * x)).
  auto gated = [&](Value g, double gain) -> Value {
    Value scaled = gain == 1.0 ? g : arith::MulFOp::create(b, g, k.f32(gain));
    Value e = buildExp(b, arith::NegFOp::create(b, scaled));
    return arith::DivFOp::create(b, g, arith::AddFOp::create(b, k.f32(1.0), e));
  };
  if (op.getEpilogue() == Epilogue::SwiGLU) {
    std::optional<APFloat> alpha = op.getAlpha(), limit = op.getLimit();
    Type outType = cast<MemRefType>(op.getC().getType()).getElementType();
    auto rounded = [&](Value v) -> Value {
      if (!op.getRoundedInputs() || outType.isF32())
        return v;
      return arith::ExtFOp::create(
          b, f32, Value(arith::TruncFOp::create(b, outType, v)));
    };
    auto act = [&](int64_t i) -> Value {
      Value gate = rounded(element(j, i)), up = rounded(element(j + 1, i));
      if (!limit)
        return arith::MulFOp::create(b, gated(gate, 1.0), up);
      // GPT-OSS: (clamp(up, -l, l) + 1) * g * sigmoid(alpha * g), g =
      // min(gate, l).
      auto [g, u] = k.clampGateUp(gate, up, limit->convertToDouble());
      return arith::MulFOp::create(b, u, gated(g, alpha->convertToDouble()));
    };
    return {act(0), act(1)};
  }
  Value v0 = element(j, 0), v1 = element(j, 1);
  if (scale)
    return {arith::MulFOp::create(b, v0, scale),
            arith::MulFOp::create(b, v1, scale)};
  return {v0, v1};
}

/// The first bias column of a thread's fragment in a tile (see
/// epiloguePair), or null without a bias.
Value biasColumn(ImplicitLocOpBuilder &b, StoreTileOp op, Value quad) {
  if (!op.getBias())
    return Value();
  return arith::AddIOp::create(b, op.getCol(), quad);
}

struct PipelineInfo {
  Value full, empty;
  TileAttr tile;
  Type elementType;
};

/// Lowers the moegpu ops of one kernel.
class KernelLowering {
public:
  KernelLowering(gpu::GPUFuncOp func, memref::GlobalOp sharedMemory)
      : func(func), sharedMemory(sharedMemory), rewriter(func.getContext()) {}

  LogicalResult run();

private:
  LogicalResult lowerPipelineCreate(PipelineCreateOp op);
  LogicalResult lowerProduce(ProduceOp op);
  LogicalResult lowerMma(MmaOp op);
  LogicalResult lowerPromote(PromoteOp op);
  LogicalResult lowerRelease(ReleaseOp op);
  void releaseSlot(ImplicitLocOpBuilder &b, const PipelineInfo &info,
                   Value slot);
  LogicalResult lowerStoreTile(StoreTileOp op);
  void lowerTileLoop(TileLoopOp op);
  void lowerWarpRoles(WarpRolesOp op);

  FailureOr<Value> getTensorMap(Operation *user, Value source, int64_t boxRows,
                                Type elementType, int64_t boxCols = kMnBox);
  /// The epilogue through shared memory and TMA stores. false when it does
  /// not apply (the tile's columns are not whole boxes, or its stages
  /// leave no room for the staging): the caller stores from registers.
  FailureOr<bool> lowerStoreTileByTma(StoreTileOp op);
  Value sharedMemoryBase(ImplicitLocOpBuilder &b) {
    return memref::GetGlobalOp::create(b, sharedMemory.getType(),
                                       sharedMemory.getSymName());
  }
  Value threadInWarpgroup(ImplicitLocOpBuilder &b) {
    Value tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
    return arith::RemUIOp::create(b, tid, constIndex(b, kWarpgroupThreads));
  }
  /// Slot and round of pipeline iteration `iter`.
  std::pair<Value, Value> slotAndRound(ImplicitLocOpBuilder &b, Value iter,
                                       int64_t stages) {
    Value s = constIndex(b, stages);
    return {arith::RemUIOp::create(b, iter, s),
            arith::DivUIOp::create(b, iter, s)};
  }
  /// True when `round` is odd: the parity of the barrier phase to wait for.
  Value oddRound(ImplicitLocOpBuilder &b, Value round) {
    Value bit = arith::RemUIOp::create(b, round, constIndex(b, 2));
    return arith::CmpIOp::create(b, arith::CmpIPredicate::eq, bit,
                                 constIndex(b, 1));
  }

  gpu::GPUFuncOp func;
  memref::GlobalOp sharedMemory;
  IRRewriter rewriter;
  DenseMap<Value, PipelineInfo> pipelines;
  std::map<std::tuple<unsigned, int64_t, int64_t>, Value> tensorMaps;
  /// The kernel's epilogue leaves TMA stores in flight (waited for before
  /// the consumers exit).
  bool tmaStores = false;
  SmallVector<Attribute> tensorMapRecords; // #moegpu.tensor_map
  int64_t sharedMemoryBytes = 0;
  int64_t blockThreads = 0;
  int64_t gridSize = 0;
  /// CTAs of the kernel's clusters (the pipeline tile's): with 2, a pair
  /// takes the M blocks 2i and 2i+1 of one N block and shares B.
  int64_t cluster = 1;
  /// Per producer tile loop: this CTA's rank in its pair, and whether
  /// both blocks of the pair's tile lie in one group (B is shared).
  DenseMap<Operation *, std::pair<Value, Value>> pairs;

  /// Rank and B-sharing flag of the pair tile `loop`'s body works on.
  std::pair<Value, Value> pairOf(TileLoopOp loop);
  /// barrier.cluster.arrive + wait by every thread of the cluster.
  void clusterSync(ImplicitLocOpBuilder &b) {
    NVVM::ClusterArriveOp::create(b, UnitAttr());
    NVVM::ClusterWaitOp::create(b, UnitAttr());
  }
};

LogicalResult KernelLowering::lowerPipelineCreate(PipelineCreateOp op) {
  if (!pipelines.empty())
    return op.emitOpError()
           << "is the second pipeline of kernel @" << func.getName()
           << "; a kernel holds one pipeline";
  MLIRContext *ctx = op.getContext();
  ImplicitLocOpBuilder b(op.getLoc(), op);
  PipelineType type = op.getPipeline().getType();
  TileAttr tile = type.getTile();
  auto groupType =
      nvgpu::MBarrierGroupType::get(ctx, workgroupSpace(ctx), tile.getStages());
  Value full = nvgpu::MBarrierCreateOp::create(b, groupType);
  Value empty = nvgpu::MBarrierCreateOp::create(b, groupType);
  Value tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
  Value first =
      arith::CmpIOp::create(b, arith::CmpIPredicate::eq, tid, constIndex(b, 0));
  auto ifOp = scf::IfOp::create(b, first, /*withElseRegion=*/false);
  {
    ImplicitLocOpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(ifOp.thenBlock()->getTerminator());
    Value one = constIndex(b, 1);
    // With a pair, a slot is refilled (in both CTAs, by multicast) once
    // the consumers of both have read it.
    Value consumers = constIndex(b, tile.getConsumers() * tile.getCluster());
    for (int64_t s = 0; s < tile.getStages(); ++s) {
      Value slot = constIndex(b, s);
      nvgpu::MBarrierInitOp::create(b, full, one, slot, Value());
      nvgpu::MBarrierInitOp::create(b, empty, consumers, slot, Value());
    }
    NVVM::FenceMbarrierInitOp::create(b);
  }
  cluster = tile.getCluster();
  // The peer's barriers must be initialized before it is multicast to or
  // arrived on.
  if (cluster > 1)
    clusterSync(b);
  else
    gpu::BarrierOp::create(b);
  pipelines[op.getPipeline()] = {full, empty, tile, type.getElementType()};
  sharedMemoryBytes = tile.getSharedMemoryBytes();
  blockThreads = (tile.getConsumers() + 1) * kWarpgroupThreads;
  return success();
}

FailureOr<Value> KernelLowering::getTensorMap(Operation *user, Value source,
                                              int64_t boxRows, Type elementType,
                                              int64_t boxCols) {
  auto arg = dyn_cast<BlockArgument>(source);
  if (!arg || arg.getOwner() != &func.front())
    return user->emitOpError()
           << "needs its TMA source to be an argument of kernel @"
           << func.getName() << " (the runtime encodes its tensor map)";
  auto key = std::make_tuple(arg.getArgNumber(), boxRows, boxCols);
  if (auto it = tensorMaps.find(key); it != tensorMaps.end())
    return it->second;

  MLIRContext *ctx = func.getContext();
  auto boxType = MemRefType::get({boxRows, boxCols}, elementType, AffineMap(),
                                 workgroupSpace(ctx));
  auto mapType = nvgpu::TensorMapDescriptorType::get(
      ctx, boxType, nvgpu::TensorMapSwizzleKind::SWIZZLE_128B,
      nvgpu::TensorMapL2PromoKind::L2PROMO_256B,
      nvgpu::TensorMapOOBKind::OOB_ZERO,
      nvgpu::TensorMapInterleaveKind::INTERLEAVE_NONE);
  unsigned index = func.getNumArguments();
  if (failed(func.insertArgument(index, LLVM::LLVMPointerType::get(ctx),
                                 DictionaryAttr(), source.getLoc())))
    return user->emitOpError()
           << "cannot add a tensor-map argument to @" << func.getName();
  ImplicitLocOpBuilder b(source.getLoc(), &func.front(), func.front().begin());
  Value map = UnrealizedConversionCastOp::create(
                  b, mapType, ValueRange{func.getArgument(index)})
                  .getResult(0);
  tensorMaps[key] = map;

  // The 2-D view the map describes: leading dimensions folded into rows
  // (-1: sized by the buffer at run time).
  auto sourceType = cast<MemRefType>(source.getType());
  int64_t rows = 1;
  for (int64_t d : sourceType.getShape().drop_back())
    rows = (ShapedType::isDynamic(d) || rows < 0) ? -1 : rows * d;
  tensorMapRecords.push_back(TensorMapAttr::get(
      ctx, index, arg.getArgNumber(), {rows, sourceType.getShape().back()},
      {boxRows, boxCols}, /*swizzle=*/128));
  return map;
}

LogicalResult KernelLowering::lowerProduce(ProduceOp op) {
  const PipelineInfo &info = pipelines.lookup(op.getPipeline());
  if (!info.full)
    return op.emitOpError() << "uses a pipeline not created in its kernel";
  TileAttr tile = info.tile;
  PipelineType type = op.getPipeline().getType();
  bool aMn = type.isAMnMajor(), bMn = type.isBMnMajor();
  if ((aMn && tile.getM() % kMnBox != 0) || (bMn && tile.getN() % kMnBox != 0))
    return op.emitOpError() << "needs the tile's M-major and N-major sides to "
                               "be multiples of "
                            << kMnBox << ", got " << tile.getM() << "x"
                            << tile.getN();
  // A K-major tile is one box of its rows; an MN-major one boxes of 64 rows
  // of K.
  // A K-major box row is the stage's 128-byte row: tile k elements (64 of
  // 16 bits or 128 of e4m3).
  FailureOr<Value> aMap =
      getTensorMap(op, op.getA(), aMn ? tile.getK() : tile.getM(),
                   info.elementType, aMn ? kMnBox : tile.getK());
  FailureOr<Value> bMap =
      getTensorMap(op, op.getB(), bMn ? tile.getK() : tile.getN(),
                   info.elementType, bMn ? kMnBox : tile.getK());
  if (failed(aMap) || failed(bMap))
    return failure();

  MLIRContext *ctx = op.getContext();
  ImplicitLocOpBuilder b(op.getLoc(), op);
  // (Plain variables: lambdas capture `slot`, which C++17 does not allow
  // for structured bindings.)
  Value slot, round;
  std::tie(slot, round) = slotAndRound(b, op.getIter(), tile.getStages());
  // A fresh barrier counts as having completed the phase before phase 0,
  // so the first round waits for parity 1 and passes at once.
  Value parity = arith::XOrIOp::create(b, oddRound(b, round),
                                       arith::ConstantIntOp::create(b, 1, 1));
  nvgpu::MBarrierTryWaitParityOp::create(b, info.empty, parity,
                                         constIndex(b, kWaitTicks), slot);
  nvgpu::MBarrierArriveExpectTxOp::create(
      b, info.full, constIndex(b, tile.getStageBytes()), slot, Value());

  Value base = sharedMemoryBase(b);
  Value aOffset =
      arith::MulIOp::create(b, slot, constIndex(b, tile.getStageBytes()));
  Value bOffset =
      arith::AddIOp::create(b, aOffset, constIndex(b, tile.getABytes()));
  // A slot's boxes: rows of 128 bytes.
  int64_t rowElements = TileAttr::kStageRowBytes / tile.getElementBytes();
  auto view = [&](Value offset, int64_t rows) -> Value {
    auto type = MemRefType::get({rows, rowElements}, info.elementType,
                                AffineMap(), workgroupSpace(ctx));
    return memref::ViewOp::create(b, type, base, offset, ValueRange{});
  };
  // TMA coordinates run innermost first: (column, row).
  auto load = [&](Value offset, Value map, bool mnMajor, int64_t extent,
                  Value mn, Value k) {
    if (!mnMajor) {
      nvgpu::TmaAsyncLoadOp::create(b, view(offset, extent), info.full, map,
                                    ValueRange{k, mn}, slot, Value(), Value());
      return;
    }
    int64_t boxBytes = tile.getK() * kMnBox * 2;
    for (int64_t i = 0; i < extent / kMnBox; ++i) {
      Value at = arith::AddIOp::create(b, offset, constIndex(b, i * boxBytes));
      Value column = arith::AddIOp::create(b, mn, constIndex(b, i * kMnBox));
      nvgpu::TmaAsyncLoadOp::create(b, view(at, tile.getK()), info.full, map,
                                    ValueRange{column, k}, slot, Value(),
                                    Value());
    }
  };
  load(aOffset, *aMap, aMn, tile.getM(), op.getAMn(), op.getAK());
  if (cluster == 1) {
    load(bOffset, *bMap, bMn, tile.getN(), op.getBMn(), op.getBK());
    op.erase();
    return success();
  }
  // A pair: B in two halves (half the rows of a K-major tile, half the
  // 64-column boxes of an MN-major one). When both CTAs' blocks are in one
  // group, each loads its half and multicasts it to both; otherwise each
  // loads both halves itself. Either way its full barrier sees the whole
  // stage's bytes.
  auto loop = op->getParentOfType<TileLoopOp>();
  if (!loop)
    return op.emitOpError() << "of a paired pipeline must be inside a "
                               "moegpu.tile_loop";
  int64_t half = tile.getN() / 2;
  FailureOr<Value> halfMap =
      bMn ? bMap
          : getTensorMap(op, op.getB(), half, info.elementType, tile.getK());
  if (failed(halfMap))
    return failure();
  Value rank, shared;
  std::tie(rank, shared) = pairOf(loop);
  int64_t halfBytes = tile.getBBytes() / 2;
  auto viewIn = [&](ImplicitLocOpBuilder &b, Value offset,
                    int64_t rows) -> Value {
    auto type = MemRefType::get({rows, rowElements}, info.elementType,
                                AffineMap(), workgroupSpace(ctx));
    return memref::ViewOp::create(b, type, base, offset, ValueRange{});
  };
  auto loadHalf = [&](ImplicitLocOpBuilder &b, Value h, Value mask) {
    Value offset = arith::AddIOp::create(
        b, bOffset, arith::MulIOp::create(b, h, constIndex(b, halfBytes)));
    Value mn = arith::AddIOp::create(
        b, op.getBMn(), arith::MulIOp::create(b, h, constIndex(b, half)));
    if (!bMn) {
      nvgpu::TmaAsyncLoadOp::create(b, viewIn(b, offset, half), info.full,
                                    *halfMap, ValueRange{op.getBK(), mn}, slot,
                                    mask, Value());
      return;
    }
    int64_t boxBytes = tile.getK() * kMnBox * 2;
    for (int64_t i = 0; i < half / kMnBox; ++i) {
      Value at = arith::AddIOp::create(b, offset, constIndex(b, i * boxBytes));
      Value column = arith::AddIOp::create(b, mn, constIndex(b, i * kMnBox));
      nvgpu::TmaAsyncLoadOp::create(b, viewIn(b, at, tile.getK()), info.full,
                                    *halfMap, ValueRange{column, op.getBK()},
                                    slot, mask, Value());
    }
  };
  auto ifOp = scf::IfOp::create(b, shared, /*withElseRegion=*/true);
  {
    ImplicitLocOpBuilder tb(op.getLoc(), ifOp.thenBlock()->getTerminator());
    Value both = arith::ConstantIntOp::create(tb, 3, 16);
    loadHalf(tb, rank, both);
    ImplicitLocOpBuilder eb(op.getLoc(), ifOp.elseBlock()->getTerminator());
    loadHalf(eb, constIndex(eb, 0), Value());
    loadHalf(eb, constIndex(eb, 1), Value());
  }
  op.erase();
  return success();
}

std::pair<Value, Value> KernelLowering::pairOf(TileLoopOp loop) {
  if (auto it = pairs.find(loop); it != pairs.end())
    return it->second;
  Block &body = loop.getBody().front();
  ImplicitLocOpBuilder b(loop.getLoc(), &body, body.begin());
  Value group = body.getArgument(0), row = body.getArgument(1);
  Value rank = arith::RemUIOp::create(
      b, gpu::BlockIdOp::create(b, gpu::Dimension::x), constIndex(b, 2));
  // The other block of the pair: one block on for rank 0, one back for 1.
  Value first = arith::CmpIOp::create(b, arith::CmpIPredicate::eq, rank,
                                      constIndex(b, 0));
  Value blockM = constIndex(b, loop.getBlockM());
  Value peer = arith::SelectOp::create(b, first,
                                       arith::AddIOp::create(b, row, blockM),
                                       arith::SubIOp::create(b, row, blockM));
  auto loadOffset = [&](Value index) -> Value {
    Value v = memref::LoadOp::create(b, loop.getOffsets(), ValueRange{index});
    return arith::IndexCastUIOp::create(b, b.getIndexType(), v);
  };
  // Both blocks hold rows (the last pair of an odd count has one) and,
  // for a grouped GEMM over row segments, the same group's: the two CTAs
  // decide alike.
  Value offsets = loop.getOffsets();
  bool segments = offsets && !loop.getKGrouped();
  int64_t groups =
      offsets ? cast<MemRefType>(offsets.getType()).getDimSize(0) - 1 : 1;
  Value rows = segments ? loadOffset(constIndex(b, groups)) : loop.getRows();
  auto below = [&](Value l, Value r) {
    return arith::CmpIOp::create(b, arith::CmpIPredicate::ult, l, r);
  };
  Value shared = arith::AndIOp::create(b, below(row, rows), below(peer, rows));
  if (segments) {
    Value begin = loadOffset(group);
    Value end = loadOffset(arith::AddIOp::create(b, group, constIndex(b, 1)));
    Value inGroup = arith::AndIOp::create(
        b,
        arith::CmpIOp::create(b, arith::CmpIPredicate::uge, peer, begin),
        below(peer, end));
    shared = arith::AndIOp::create(b, shared, inGroup);
  }
  return pairs[loop] = {rank, shared};
}

LogicalResult KernelLowering::lowerMma(MmaOp op) {
  const PipelineInfo &info = pipelines.lookup(op.getPipeline());
  if (!info.full)
    return op.emitOpError() << "uses a pipeline not created in its kernel";
  TileAttr tile = info.tile;
  MLIRContext *ctx = op.getContext();
  ImplicitLocOpBuilder b(op.getLoc(), op);
  auto [slot, round] = slotAndRound(b, op.getIter(), tile.getStages());
  nvgpu::MBarrierTryWaitParityOp::create(b, info.full, oddRound(b, round),
                                         constIndex(b, kWaitTicks), slot);

  // Shared-memory descriptors of this warpgroup's 64 A rows and the B tile.
  Value base =
      memref::ExtractAlignedPointerAsIndexOp::create(b, sharedMemoryBase(b));
  Value stage = arith::AddIOp::create(
      b, base,
      arith::MulIOp::create(b, slot, constIndex(b, tile.getStageBytes())));
  Value aAddress = arith::AddIOp::create(
      b, stage,
      arith::MulIOp::create(b, op.getWarpgroup(),
                            constIndex(b, 64 * TileAttr::kStageRowBytes)));
  Value bAddress =
      arith::AddIOp::create(b, stage, constIndex(b, tile.getABytes()));
  PipelineType type = op.getPipeline().getType();
  bool aMn = type.isAMnMajor(), bMn = type.isBMnMajor();
  auto descriptor = [&](Value address, bool mnMajor) -> Value {
    Value a = arith::IndexCastUIOp::create(b, b.getI64Type(), address);
    a = arith::ShRUIOp::create(b, a, constI64(b, 4));
    a = arith::AndIOp::create(b, a, constI64(b, 0x3FFF));
    uint64_t bits = mnMajor ? kMnMajorDescriptorBits : kKMajorDescriptorBits;
    return arith::OrIOp::create(b, a,
                                constI64(b, static_cast<int64_t>(bits)));
  };
  // A warpgroup's 64 A rows: 64 K-major rows of 128 bytes, or the 64-wide
  // box of an M-major tile; both 8192 bytes.
  Value aDesc = descriptor(aAddress, aMn), bDesc = descriptor(bAddress, bMn);

  int64_t fragment = op.getAcc().getType().getNumElements();
  Type f32 = b.getF32Type();
  auto structType =
      LLVM::LLVMStructType::getLiteral(ctx, SmallVector<Type>(fragment, f32));
  // A tile's first k block ignores the accumulator (scale-d 0 below): its
  // registers stay undefined rather than being zeroed after the fence.
  Value acc = LLVM::UndefOp::create(b, structType);
  for (int64_t i = 0; i < fragment && !op.getFirst(); ++i) {
    Value v = vector::ExtractOp::create(b, op.getAcc(), i);
    acc = LLVM::InsertValueOp::create(b, acc, v, i);
  }
  NVVM::WGMMATypes inputType =
      isa<Float8E4M3FNType>(info.elementType) ? NVVM::WGMMATypes::e4m3
      : info.elementType.isBF16()             ? NVVM::WGMMATypes::bf16
                                              : NVVM::WGMMATypes::f16;
  int64_t wgmmaK = kWgmmaKBytes / tile.getElementBytes();
  auto shape = NVVM::MMAShapeAttr::get(ctx, 64, tile.getN(), wgmmaK);
  NVVM::WgmmaFenceAlignedOp::create(b);
  // Each k step (16 of 16 bits, 32 of e4m3) advances a K-major
  // descriptor by 32 bytes (2 in the descriptor's 16-byte units) inside
  // the 128-byte swizzle atom, and an MN-major one (16-bit only) by 16 rows
  // of 128 bytes (128 units). wgmma reads an MN-major operand transposed:
  // A in column layout, B in row layout.
  auto advance = [&](Value desc, bool mnMajor, int64_t step) -> Value {
    if (!step)
      return desc;
    int64_t units =
        mnMajor ? step * wgmmaK * 128 / 16 : step * kWgmmaKBytes / 16;
    return arith::AddIOp::create(b, desc, constI64(b, units));
  };
  for (int64_t step = 0; step < tile.getK() / wgmmaK; ++step) {
    acc = NVVM::WgmmaMmaAsyncOp::create(
        b, structType, acc, advance(aDesc, aMn, step),
        advance(bDesc, bMn, step), shape, inputType, inputType,
        NVVM::WGMMATypes::f32,
        op.getFirst() && step == 0 ? NVVM::WGMMAScaleOut::zero
                                   : NVVM::WGMMAScaleOut::one,
        NVVM::WGMMAScaleIn::one, NVVM::WGMMAScaleIn::one,
        aMn ? NVVM::MMALayout::col : NVVM::MMALayout::row,
        bMn ? NVVM::MMALayout::row : NVVM::MMALayout::col,
        /*satfinite=*/NVVM::MMAIntOverflowAttr());
  }
  NVVM::WgmmaGroupSyncAlignedOp::create(b);
  NVVM::WgmmaWaitGroupSyncOp::create(b, op.getPending());

  SmallVector<Value> elements;
  for (int64_t i = 0; i < fragment; ++i)
    elements.push_back(LLVM::ExtractValueOp::create(b, acc, i));
  Value result =
      vector::FromElementsOp::create(b, op.getAcc().getType(), elements);

  // With nothing left in flight the slot is free now.
  if (op.getPending() == 0)
    releaseSlot(b, info, slot);
  rewriter.replaceOp(op, result);
  return success();
}

LogicalResult KernelLowering::lowerPromote(PromoteOp op) {
  ImplicitLocOpBuilder b(op.getLoc(), op);
  auto fragmentType = op.getAcc().getType();
  int64_t fragment = fragmentType.getNumElements(), n = 2 * fragment;
  // One scale of b per (gate or up) column block of the tile: its columns
  // lie in one block of 128 (256 interleaved), as its start is a multiple
  // of its width.
  if (n > 128 || 128 % n != 0)
    return op.emitOpError() << "needs a tile n that divides 128 (one block "
                               "of b's scales), got "
                            << n;
  Value t = threadInWarpgroup(b);
  Value warp = arith::DivUIOp::create(b, t, constIndex(b, 32));
  Value lane = arith::RemUIOp::create(b, t, constIndex(b, 32));
  // The thread's rows: 16 * warp + lane / 4 and 8 further, of the
  // warpgroup's 64; those past the group's end read its last row's scale.
  Value first = arith::AddIOp::create(
      b,
      arith::AddIOp::create(
          b, op.getRow(),
          arith::MulIOp::create(b, op.getWarpgroup(), constIndex(b, 64))),
      arith::AddIOp::create(b,
                            arith::MulIOp::create(b, warp, constIndex(b, 16)),
                            arith::DivUIOp::create(b, lane, constIndex(b, 4))));
  Value lastRow = arith::SubIOp::create(b, op.getRowEnd(), constIndex(b, 1));
  Value aScale[2];
  for (int64_t h = 0; h < 2; ++h) {
    Value r = arith::MinUIOp::create(
        b, arith::AddIOp::create(b, first, constIndex(b, 8 * h)), lastRow);
    aScale[h] = memref::LoadOp::create(b, op.getAScale(),
                                       ValueRange{r, op.getKBlock()});
  }
  bool interleaved = op.getInterleaved();
  int64_t blocks = cast<MemRefType>(op.getBScale().getType()).getDimSize(1);
  Value block = arith::DivUIOp::create(b, op.getCol(),
                                       constIndex(b, interleaved ? 256 : 128));
  Value bScale[2];
  bScale[0] = memref::LoadOp::create(
      b, op.getBScale(), ValueRange{op.getGroup(), block, op.getKBlock()});
  bScale[1] = bScale[0];
  if (interleaved)
    bScale[1] = memref::LoadOp::create(
        b, op.getBScale(),
        ValueRange{op.getGroup(),
                   arith::AddIOp::create(b, block, constIndex(b, blocks / 2)),
                   op.getKBlock()});
  // Element 4 * j + 2 * h + v: row half h, column block j (gate columns
  // for even j when interleaved).
  Value factor[2][2];
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t p = 0; p < 2; ++p)
      factor[h][p] = arith::MulFOp::create(b, aScale[h], bScale[p]);
  SmallVector<Value> factors;
  for (int64_t i = 0; i < fragment; ++i)
    factors.push_back(factor[(i / 2) % 2][interleaved ? (i / 4) % 2 : 0]);
  Value scales = vector::FromElementsOp::create(b, fragmentType, factors);
  rewriter.replaceOp(
      op,
      math::FmaOp::create(b, op.getPartial(), scales, op.getAcc()).getResult());
  return success();
}

void KernelLowering::releaseSlot(ImplicitLocOpBuilder &b,
                                 const PipelineInfo &info, Value slot) {
  // One thread per warpgroup arrives on the slot's empty barrier.
  Value leader = arith::CmpIOp::create(b, arith::CmpIPredicate::eq,
                                       threadInWarpgroup(b), constIndex(b, 0));
  auto ifOp = scf::IfOp::create(b, leader, /*withElseRegion=*/false);
  ImplicitLocOpBuilder::InsertionGuard guard(b);
  b.setInsertionPoint(ifOp.thenBlock()->getTerminator());
  nvgpu::MBarrierArriveOp::create(
      b, nvgpu::MBarrierTokenType::get(b.getContext()), info.empty, slot);
  if (cluster == 1)
    return;
  // And on the same slot's barrier of the other CTA of the pair, whose
  // producer multicasts into this CTA's slot too.
  MLIRContext *ctx = b.getContext();
  Value local = nvgpu::MBarrierGetOp::create(b, b.getI32Type(), info.empty,
                                             slot);
  Value pointer = LLVM::IntToPtrOp::create(
      b, LLVM::LLVMPointerType::get(ctx, /*shared=*/3), local);
  Value rank = NVVM::ClusterId::create(b, b.getI32Type());
  Value peer = arith::XOrIOp::create(b, rank,
                                     arith::ConstantIntOp::create(b, 1, 32));
  Value remote = NVVM::MapaOp::create(
      b, LLVM::LLVMPointerType::get(ctx, /*shared_cluster=*/7), pointer, peer);
  NVVM::MBarrierArriveOp::create(b, Type(), remote, Value(),
                                 NVVM::MemScopeKind::CLUSTER, false);
}

LogicalResult KernelLowering::lowerRelease(ReleaseOp op) {
  const PipelineInfo &info = pipelines.lookup(op.getPipeline());
  if (!info.full)
    return op.emitOpError() << "uses a pipeline not created in its kernel";
  ImplicitLocOpBuilder b(op.getLoc(), op);
  if (op.getDrain())
    NVVM::WgmmaWaitGroupSyncOp::create(b, 0);
  Value slot = slotAndRound(b, op.getIter(), info.tile.getStages()).first;
  releaseSlot(b, info, slot);
  op.erase();
  return success();
}

LogicalResult KernelLowering::lowerStoreTile(StoreTileOp op) {
  // Accumulating reads c: from registers (each element has one thread).
  bool accumulate = op.getEpilogue() == Epilogue::Accumulate;
  if (auto loop = op->getParentOfType<TileLoopOp>();
      loop && !accumulate &&
      usesTmaStoreEpilogue(op.getC().getType(),
                           !loop.getKGrouped() &&
                               rowsEndOnBoxes(loop.getOffsets()),
                           loop.getKGrouped())) {
    FailureOr<bool> done = lowerStoreTileByTma(op);
    if (failed(done))
      return failure();
    if (*done)
      return success();
  }
  ImplicitLocOpBuilder b(op.getLoc(), op);
  Value c = op.getC();
  auto cType = cast<MemRefType>(c.getType());
  Type outType = cType.getElementType();
  Value columns = memref::DimOp::create(b, c, cType.getRank() - 1);
  Value t = threadInWarpgroup(b);
  Value warp = arith::DivUIOp::create(b, t, constIndex(b, 32));
  Value lane = arith::RemUIOp::create(b, t, constIndex(b, 32));
  Value row0 = arith::AddIOp::create(
      b, op.getRow(),
      arith::AddIOp::create(
          b,
          arith::AddIOp::create(
              b, arith::MulIOp::create(b, op.getWarpgroup(), constIndex(b, 64)),
              arith::MulIOp::create(b, warp, constIndex(b, 16))),
          arith::DivUIOp::create(b, lane, constIndex(b, 4))));
  Value quad = arith::MulIOp::create(
      b, arith::RemUIOp::create(b, lane, constIndex(b, 4)), constIndex(b, 2));
  bool swiglu = op.getEpilogue() == Epilogue::SwiGLU;
  Value col0 = op.getCol();
  if (swiglu)
    col0 = arith::DivUIOp::create(b, col0, constIndex(b, 2));
  int64_t chunks = op.getAcc().getType().getNumElements() / 4;

  for (int64_t half = 0; half < 2; ++half) {
    Value row = arith::AddIOp::create(b, row0, constIndex(b, 8 * half));
    Value inRows = arith::CmpIOp::create(b, arith::CmpIPredicate::ult, row,
                                         op.getRowEnd());
    auto rowIf = scf::IfOp::create(b, inRows, /*withElseRegion=*/false);
    ImplicitLocOpBuilder rb(op.getLoc(), rowIf.thenBlock()->getTerminator());
    Value scale;
    if (op.getScale())
      scale = memref::LoadOp::create(rb, op.getScale(), ValueRange{row});
    Value biasCol = biasColumn(rb, op, quad);
    for (int64_t j = 0; j < chunks; j += swiglu ? 2 : 1) {
      auto [v0, v1] = epiloguePair(rb, op, j, half, scale, biasCol);
      Value col = arith::AddIOp::create(
          rb, col0, constIndex(rb, (swiglu ? 4 : 8) * j));
      col = arith::AddIOp::create(rb, col, quad);
      Value inColumns =
          arith::CmpIOp::create(rb, arith::CmpIPredicate::ult, col, columns);
      auto colIf = scf::IfOp::create(rb, inColumns, /*withElseRegion=*/false);
      ImplicitLocOpBuilder sb(op.getLoc(), colIf.thenBlock()->getTerminator());
      auto narrow = [&](Value v) -> Value {
        return outType.isF32() ? v : arith::TruncFOp::create(sb, outType, v);
      };
      auto at = [&](Value column) -> SmallVector<Value> {
        if (op.getGroup())
          return {op.getGroup(), row, column};
        return {row, column};
      };
      // A thread's two adjacent columns in one store (a warp's row of
      // the fragment then fills whole 32-byte sectors) where the row
      // width is even: the pair's first column is, so it is aligned.
      int64_t width = cType.getShape().back();
      if (!ShapedType::isDynamic(width) && width % 2 == 0) {
        auto pairType = VectorType::get({2}, outType);
        IntegerAttr align =
            sb.getI64IntegerAttr(2 * outType.getIntOrFloatBitWidth() / 8);
        Value pair = vector::FromElementsOp::create(
            sb, pairType, ValueRange{narrow(v0), narrow(v1)});
        if (accumulate)
          pair = arith::AddFOp::create(
              sb, vector::LoadOp::create(sb, pairType, c, at(col),
                                         /*nontemporal=*/false, align),
              pair);
        vector::StoreOp::create(sb, pair, c, at(col), /*nontemporal=*/false,
                                align);
        continue;
      }
      // c[i] = v, or c[i] += v.
      auto put = [&](Value v, ValueRange i) {
        if (accumulate)
          v = arith::AddFOp::create(sb, memref::LoadOp::create(sb, c, i), v);
        memref::StoreOp::create(sb, v, c, i);
      };
      put(narrow(v0), at(col));
      Value next = arith::AddIOp::create(sb, col, constIndex(sb, 1));
      // A dense GEMM's N may be odd: its last pair has one column.
      if (ShapedType::isDynamic(width) || width % 2 != 0) {
        Value inside =
            arith::CmpIOp::create(sb, arith::CmpIPredicate::ult, next, columns);
        auto lastIf = scf::IfOp::create(sb, inside, /*withElseRegion=*/false);
        sb.setInsertionPoint(lastIf.thenBlock()->getTerminator());
      }
      put(narrow(v1), at(next));
    }
  }
  op.erase();
  return success();
}

FailureOr<bool> KernelLowering::lowerStoreTileByTma(StoreTileOp op) {
  const PipelineInfo &info = pipelines.begin()->second;
  TileAttr tile = info.tile;
  auto cType = cast<MemRefType>(op.getC().getType());
  Type outType = cType.getElementType();
  int64_t bytes = outType.getIntOrFloatBitWidth() / 8;
  // A box is 64 rows of 128 bytes (the 128-byte swizzle's row).
  int64_t boxCols = 128 / bytes;
  bool swiglu = op.getEpilogue() == Epilogue::SwiGLU;
  int64_t outCols = swiglu ? tile.getN() / 2 : tile.getN();
  // A tile given with more stages than leave room for the staging (the
  // tile selection reserves it) stores from registers.
  if (outCols % boxCols != 0 || pipelines.size() != 1 ||
      tile.getSharedMemoryBytes() + tmaStoreStagingBytes(tile.getConsumers()) >
          kMaxSharedMemoryBytes - kReservedSharedMemoryBytes)
    return false;
  int64_t boxes = outCols / boxCols;
  constexpr int64_t kBoxBytes = 64 * 128;
  FailureOr<Value> map =
      getTensorMap(op, op.getC(), 64, outType, boxCols);
  if (failed(map))
    return failure();
  MLIRContext *ctx = op.getContext();
  ImplicitLocOpBuilder b(op.getLoc(), op);
  Type i32 = b.getI32Type();
  Value wg = op.getWarpgroup();
  Value t = threadInWarpgroup(b);
  Value warp = arith::DivUIOp::create(b, t, constIndex(b, 32));
  Value lane = arith::RemUIOp::create(b, t, constIndex(b, 32));
  // A thread's fragment: rows warp*16 + lane/4 (+8), column pairs at
  // 2 * (lane % 4) in every 8 (or, SwiGLU, in every 4 of the output).
  Value quarter = arith::DivUIOp::create(b, lane, constIndex(b, 4));
  Value quad = arith::MulIOp::create(
      b, arith::RemUIOp::create(b, lane, constIndex(b, 4)), constIndex(b, 2));
  Value firstRow = arith::AddIOp::create(
      b, op.getRow(), arith::MulIOp::create(b, wg, constIndex(b, 64)));
  // This warpgroup's 64 rows are in the group, or wholly past its end (a
  // k-grouped GEMM of 64 rows; the second CTA of a pair past the last
  // block): they store nothing.
  Value stores = arith::CmpIOp::create(b, arith::CmpIPredicate::ult, firstRow,
                                       op.getRowEnd());
  auto ifOp = scf::IfOp::create(b, stores, /*withElseRegion=*/false);
  ImplicitLocOpBuilder sb(op.getLoc(), ifOp.thenBlock()->getTerminator());
  int64_t pipelineBytes = tile.getSharedMemoryBytes();
  sharedMemoryBytes = pipelineBytes + tmaStoreStagingBytes(tile.getConsumers());
  tmaStores = true;
  Value base = sharedMemoryBase(sb);
  Value staging = arith::AddIOp::create(
      sb, constIndex(sb, pipelineBytes),
      arith::MulIOp::create(sb, wg, constIndex(sb, 2 * kBoxBytes)));
  Value leader = arith::CmpIOp::create(sb, arith::CmpIPredicate::eq, t,
                                       constIndex(sb, 0));
  // Named barrier 1 + wg: this warpgroup's 128 threads.
  Value barrierId = arith::IndexCastOp::create(
      sb, i32, arith::AddIOp::create(sb, wg, constIndex(sb, 1)));
  Value barrierThreads = arith::ConstantIntOp::create(sb, kWarpgroupThreads, 32);
  auto warpgroupBarrier = [&] {
    NVVM::BarrierOp::create(sb, TypeRange{}, barrierId, barrierThreads,
                            NVVM::BarrierReductionAttr(), Value());
  };
  auto whenLeader = [&](function_ref<void(ImplicitLocOpBuilder &)> body) {
    auto leaderIf = scf::IfOp::create(sb, leader, /*withElseRegion=*/false);
    ImplicitLocOpBuilder lb(op.getLoc(), leaderIf.thenBlock()->getTerminator());
    body(lb);
  };
  Value scale0, scale1;
  if (op.getScale()) {
    // Rows past the group's end (a box the TMA unit clips) read its last
    // row's scale.
    Value lastRow =
        arith::SubIOp::create(sb, op.getRowEnd(), constIndex(sb, 1));
    Value row0 = arith::AddIOp::create(
        sb, firstRow,
        arith::AddIOp::create(
            sb, arith::MulIOp::create(sb, warp, constIndex(sb, 16)), quarter));
    for (int64_t h = 0; h < 2; ++h) {
      Value r = arith::MinUIOp::create(
          sb, arith::AddIOp::create(sb, row0, constIndex(sb, 8 * h)), lastRow);
      (h ? scale1 : scale0) =
          memref::LoadOp::create(sb, op.getScale(), ValueRange{r});
    }
  }
  auto narrow = [&](Value v) -> Value {
    return outType.isF32() ? v : arith::TruncFOp::create(sb, outType, v);
  };
  auto flatType = MemRefType::get({64 * boxCols}, outType, AffineMap(),
                                  workgroupSpace(ctx));
  auto boxType = MemRefType::get({64, boxCols}, outType, AffineMap(),
                                 workgroupSpace(ctx));
  Value outCol0 = op.getCol();
  if (swiglu)
    outCol0 = arith::DivUIOp::create(sb, outCol0, constIndex(sb, 2));
  Value outRow = firstRow;
  if (op.getGroup())
    outRow = arith::AddIOp::create(
        sb, outRow,
        arith::MulIOp::create(
            sb, op.getGroup(),
            constIndex(sb, cType.getShape()[cType.getRank() - 2])));
  // Per fragment row: the box row's first byte and its swizzle (the
  // 16-byte chunk index is XORed with the row modulo 8, which is lane/4).
  Value rowBytes[2];
  for (int64_t half = 0; half < 2; ++half) {
    Value r = arith::AddIOp::create(
        sb, arith::MulIOp::create(sb, warp, constIndex(sb, 16)),
        arith::AddIOp::create(sb, quarter, constIndex(sb, 8 * half)));
    rowBytes[half] = arith::MulIOp::create(sb, r, constIndex(sb, 128));
  }
  Value quadBytes = arith::MulIOp::create(sb, quad, constIndex(sb, bytes));
  Value biasCol = biasColumn(sb, op, quad);
  for (int64_t box = 0; box < boxes; ++box) {
    Value offset = arith::AddIOp::create(
        sb, staging, constIndex(sb, (box % 2) * kBoxBytes));
    // The store that last read this buffer (two boxes back, or the last
    // tile's) is done reading; the other buffer's may still be.
    whenLeader([&](ImplicitLocOpBuilder &lb) {
      NVVM::CpAsyncBulkWaitGroupOp::create(lb, box == 0 ? 0 : 1,
                                           lb.getUnitAttr());
    });
    warpgroupBarrier();
    Value flat = memref::ViewOp::create(sb, flatType, base, offset,
                                        ValueRange{});
    int64_t perBox = boxCols / (swiglu ? 4 : 8);
    for (int64_t jj = 0; jj < perBox; jj += swiglu ? 2 : 1) {
      int64_t j = box * perBox + jj;
      for (int64_t half = 0; half < 2; ++half) {
        auto [v0, v1] =
            epiloguePair(sb, op, j, half, half ? scale1 : scale0, biasCol);
        // Byte of the pair in the box row, before the swizzle.
        int64_t colInBox = (swiglu ? 4 : 8) * jj;
        Value cb = arith::AddIOp::create(
            sb, constIndex(sb, colInBox * bytes), quadBytes);
        Value chunk = arith::XOrIOp::create(
            sb, arith::DivUIOp::create(sb, cb, constIndex(sb, 16)), quarter);
        Value at = arith::AddIOp::create(
            sb, rowBytes[half],
            arith::AddIOp::create(
                sb, arith::MulIOp::create(sb, chunk, constIndex(sb, 16)),
                arith::RemUIOp::create(sb, cb, constIndex(sb, 16))));
        Value index = arith::DivUIOp::create(sb, at, constIndex(sb, bytes));
        auto pairType = VectorType::get({2}, outType);
        Value pair = vector::FromElementsOp::create(
            sb, pairType, ValueRange{narrow(v0), narrow(v1)});
        vector::StoreOp::create(sb, pair, flat, ValueRange{index},
                                /*nontemporal=*/false,
                                sb.getI64IntegerAttr(2 * bytes));
      }
    }
    // The writes, visible to the TMA unit, then one thread stores the box.
    NVVM::FenceProxyOp::create(
        sb, NVVM::ProxyKind::async_shared,
        NVVM::SharedSpaceAttr::get(ctx, NVVM::SharedSpace::shared_cta));
    warpgroupBarrier();
    whenLeader([&](ImplicitLocOpBuilder &lb) {
      Value boxView =
          memref::ViewOp::create(lb, boxType, base, offset, ValueRange{});
      Value col = arith::AddIOp::create(lb, outCol0,
                                        constIndex(lb, box * boxCols));
      nvgpu::TmaAsyncStoreOp::create(lb, boxView, *map,
                                     ValueRange{col, outRow}, Value());
      NVVM::CpAsyncBulkCommitGroupOp::create(lb);
    });
  }
  op.erase();
  return true;
}

void KernelLowering::lowerTileLoop(TileLoopOp op) {
  ImplicitLocOpBuilder b(op.getLoc(), op);
  // A dense loop (rows, no offsets) has one group: group 0 for every tile.
  Value offsets = op.getOffsets();
  bool kGrouped = op.getKGrouped();
  int64_t groups =
      offsets ? cast<MemRefType>(offsets.getType()).getDimSize(0) - 1 : 1;
  int64_t blockM = op.getBlockM(), blockN = op.getBlockN();
  int64_t blockK = op.getBlockK();
  gridSize = op.getSmRange().getCount();

  Value blockId = gpu::BlockIdOp::create(b, gpu::Dimension::x);
  Value gridDim = gpu::GridDimOp::create(b, gpu::Dimension::x);
  // A pair walks pair tiles (two M blocks of one N block) by cluster;
  // its CTAs take the pair's first and second M block by rank.
  Value rank;
  if (cluster > 1) {
    rank = arith::RemUIOp::create(b, blockId, constIndex(b, cluster));
    blockId = arith::DivUIOp::create(b, blockId, constIndex(b, cluster));
    gridDim = arith::DivUIOp::create(b, gridDim, constIndex(b, cluster));
  }
  auto loadOffset = [&](ImplicitLocOpBuilder &b, Value index) -> Value {
    Value v = memref::LoadOp::create(b, offsets, ValueRange{index});
    return arith::IndexCastUIOp::create(b, b.getIndexType(), v);
  };
  // Row blocks: of the groups' rows, from the first group's start (a
  // chunk of a chunked exchange starts after the chunks before it), or
  // of one group's output rows (k-grouped).
  Value first = offsets && !kGrouped ? loadOffset(b, constIndex(b, 0))
                                     : Value();
  Value rows = op.getRows();
  if (first)
    rows = arith::SubIOp::create(b, loadOffset(b, constIndex(b, groups)),
                                 first);
  Value mBlocks = arith::CeilDivUIOp::create(b, rows, constIndex(b, blockM));
  if (cluster > 1)
    mBlocks = arith::CeilDivUIOp::create(b, mBlocks, constIndex(b, cluster));
  Value nBlocks = constIndex(b, llvm::divideCeil(op.getColumns(), blockN));
  Value tiles = arith::MulIOp::create(b, mBlocks, nBlocks);
  if (kGrouped)
    tiles = arith::MulIOp::create(b, tiles, constIndex(b, groups));
  // The pipeline iteration is carried by the loop: no division by the grid
  // size, and k-grouped tiles of different depths count right.
  auto loop = scf::ForOp::create(b, blockId, tiles, gridDim,
                                 ValueRange{constIndex(b, 0)});
  ImplicitLocOpBuilder lb =
      ImplicitLocOpBuilder::atBlockEnd(op.getLoc(), loop.getBody());
  Value tile = loop.getInductionVar();
  Value base = loop.getRegionIterArgs().front();
  Value group, row, col, kBlocks;
  // The M block of a tile's (pair's) row block index for this CTA.
  auto rowOf = [&](ImplicitLocOpBuilder &b, Value mBlock) -> Value {
    if (cluster > 1)
      mBlock = arith::AddIOp::create(
          b, arith::MulIOp::create(b, mBlock, constIndex(b, cluster)), rank);
    return arith::MulIOp::create(b, mBlock, constIndex(b, blockM));
  };
  if (kGrouped) {
    Value perGroup = arith::MulIOp::create(lb, mBlocks, nBlocks);
    group = arith::DivUIOp::create(lb, tile, perGroup);
    Value within = arith::RemUIOp::create(lb, tile, perGroup);
    row = rowOf(lb, arith::DivUIOp::create(lb, within, nBlocks));
    col = arith::MulIOp::create(
        lb, arith::RemUIOp::create(lb, within, nBlocks), constIndex(lb, blockN));
    Value begin = loadOffset(lb, group);
    Value end =
        loadOffset(lb, arith::AddIOp::create(lb, group, constIndex(lb, 1)));
    kBlocks = arith::CeilDivUIOp::create(
        lb, arith::SubIOp::create(lb, end, begin), constIndex(lb, blockK));
  } else {
    row = rowOf(lb, arith::DivUIOp::create(lb, tile, nBlocks));
    if (first)
      row = arith::AddIOp::create(lb, first, row);
    col = arith::MulIOp::create(
        lb, arith::RemUIOp::create(lb, tile, nBlocks), constIndex(lb, blockN));
    kBlocks = constIndex(lb, llvm::divideCeil(op.getDepth(), blockK));
    // The group whose segment holds `row`: offsets[lo] <= row <
    // offsets[hi] narrows to hi = lo + 1 in ceil(log2(E)) steps.
    Value lo = constIndex(lb, 0), hi = constIndex(lb, groups);
    for (int64_t span = groups; span > 1; span = (span + 1) / 2) {
      Value mid = arith::DivUIOp::create(lb, arith::AddIOp::create(lb, lo, hi),
                                         constIndex(lb, 2));
      Value below = arith::CmpIOp::create(lb, arith::CmpIPredicate::ule,
                                          loadOffset(lb, mid), row);
      lo = arith::SelectOp::create(lb, below, mid, lo);
      hi = arith::SelectOp::create(lb, below, hi, mid);
    }
    group = lo;
  }
  auto next = scf::YieldOp::create(
      lb, ValueRange{arith::AddIOp::create(lb, base, kBlocks)});
  Block &body = op.getBody().front();
  Operation *yield = body.getTerminator();
  rewriter.eraseOp(yield);
  rewriter.inlineBlockBefore(&body, next,
                             ValueRange{group, row, col, base, kBlocks});
  rewriter.eraseOp(op);
}

void KernelLowering::lowerWarpRoles(WarpRolesOp op) {
  // setmaxnreg moves registers between the warpgroups of a CTA whose own
  // count ptxas fixes; unless the kernel pins it, ptxas gives it only what
  // the code needs (68 for these GEMMs) and the consumers' inc would wait
  // forever. One CTA per SM (.minnctapersm 1) lets ptxas give the most its
  // threads can have, which the plan needs; the target checks ptxas's
  // count against kRequiredRegistersAttrName.
  Builder attrs(op.getContext());
  int64_t threads = (op.getConsumers() + 1) * kWarpgroupThreads;
  int64_t planned = (op.getProducerRegs() +
                     op.getConsumers() * op.getConsumerRegs()) *
                    kWarpgroupThreads;
  int64_t perThread = llvm::divideCeil(planned, threads);
  func->setAttr(NVVM::NVVMDialect::getMinctasmAttrName(),
                attrs.getI32IntegerAttr(1));
  // One consumer warpgroup (BLOCK_M 64): the CTA's 256 threads may each
  // hold all 255 registers, so nothing moves between the warpgroups and
  // ptxas's own count serves both.
  bool rebalance = op.getConsumers() > 1;
  if (rebalance)
    func->setAttr(kRequiredRegistersAttrName,
                  attrs.getI64IntegerAttr(llvm::alignTo(perThread, 8)));
  ImplicitLocOpBuilder b(op.getLoc(), op);
  Value tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
  Value warpgroup =
      arith::DivUIOp::create(b, tid, constIndex(b, kWarpgroupThreads));
  Value producer = arith::CmpIOp::create(b, arith::CmpIPredicate::eq, warpgroup,
                                         constIndex(b, op.getConsumers()));
  auto ifOp = scf::IfOp::create(b, producer, /*withElseRegion=*/true);

  ImplicitLocOpBuilder pb(op.getLoc(), ifOp.thenBlock()->getTerminator());
  if (rebalance)
    NVVM::SetMaxRegisterOp::create(pb, op.getProducerRegs(),
                                   NVVM::SetMaxRegisterAction::decrease);
  Value leader = arith::CmpIOp::create(
      pb, arith::CmpIPredicate::eq, threadInWarpgroup(pb), constIndex(pb, 0));
  auto leaderIf = scf::IfOp::create(pb, leader, /*withElseRegion=*/false);
  rewriter.inlineBlockBefore(&op.getProducer().front(),
                             leaderIf.thenBlock()->getTerminator());

  ImplicitLocOpBuilder cb(op.getLoc(), ifOp.elseBlock()->getTerminator());
  if (rebalance)
    NVVM::SetMaxRegisterOp::create(cb, op.getConsumerRegs(),
                                   NVVM::SetMaxRegisterAction::increase);
  rewriter.inlineBlockBefore(&op.getConsumer().front(),
                             ifOp.elseBlock()->getTerminator(),
                             ValueRange{warpgroup});
  // The epilogue's last TMA stores complete before the consumers exit.
  if (tmaStores) {
    cb.setInsertionPoint(ifOp.elseBlock()->getTerminator());
    NVVM::CpAsyncBulkWaitGroupOp::create(cb, 0, UnitAttr());
  }
  // A CTA of a pair leaves only when the other is done with its barriers
  // and shared memory (its consumers arrive on this CTA's barriers).
  if (cluster > 1) {
    b.setInsertionPointAfter(ifOp);
    clusterSync(b);
  }
  rewriter.eraseOp(op);
}

LogicalResult KernelLowering::run() {
  SmallVector<PipelineCreateOp> creates;
  SmallVector<Operation *> steps;
  SmallVector<TileLoopOp> loops;
  SmallVector<WarpRolesOp> roles;
  func.walk([&](Operation *op) {
    if (auto create = dyn_cast<PipelineCreateOp>(op))
      creates.push_back(create);
    else if (isa<ProduceOp, MmaOp, PromoteOp, ReleaseOp, DrainOp, StoreTileOp>(
                 op))
      steps.push_back(op);
    else if (auto loop = dyn_cast<TileLoopOp>(op))
      loops.push_back(loop);
    else if (auto role = dyn_cast<WarpRolesOp>(op))
      roles.push_back(role);
  });
  if (creates.empty() && steps.empty() && loops.empty() && roles.empty())
    return success();
  if (!func.isKernel())
    return func.emitOpError() << "holds moegpu ops but is not a kernel";

  for (PipelineCreateOp op : creates)
    if (failed(lowerPipelineCreate(op)))
      return failure();
  for (Operation *op : steps) {
    LogicalResult result =
        TypeSwitch<Operation *, LogicalResult>(op)
            .Case([&](ProduceOp p) { return lowerProduce(p); })
            .Case([&](MmaOp m) { return lowerMma(m); })
            .Case([&](PromoteOp p) { return lowerPromote(p); })
            .Case([&](ReleaseOp r) { return lowerRelease(r); })
            .Case([&](DrainOp d) {
              ImplicitLocOpBuilder b(d.getLoc(), d);
              NVVM::WgmmaWaitGroupSyncOp::create(b, 0);
              d.erase();
              return success();
            })
            .Case([&](StoreTileOp s) { return lowerStoreTile(s); });
    if (failed(result))
      return failure();
  }
  for (TileLoopOp op : loops)
    lowerTileLoop(op);
  for (WarpRolesOp op : roles)
    lowerWarpRoles(op);
  for (PipelineCreateOp op : creates) {
    if (!op->use_empty())
      return op.emitOpError() << "is still used after lowering";
    op.erase();
  }

  MLIRContext *ctx = func.getContext();
  Builder attrs(ctx);
  if (blockThreads)
    func->setAttr(
        NVVM::NVVMDialect::getMaxntidAttrName(),
        attrs.getDenseI32ArrayAttr({static_cast<int32_t>(blockThreads), 1, 1}));
  func->setAttr(kKernelLaunchAttrName,
                KernelLaunchAttr::get(ctx, gridSize, blockThreads,
                                      sharedMemoryBytes,
                                      pipelines.empty()
                                          ? TileAttr()
                                          : pipelines.begin()->second.tile));
  func->setAttr(kTensorMapsAttrName, attrs.getArrayAttr(tensorMapRecords));
  if (tmaStores)
    func->setAttr(kTmaStoreEpilogueAttrName, attrs.getUnitAttr());
  return success();
}

struct ConvertMoeGpuToNVGPU
    : public mlir::moe::impl::ConvertMoeGpuToNVGPUBase<ConvertMoeGpuToNVGPU> {
  void runOnOperation() override {
    gpu::GPUModuleOp module = getOperation();
    bool needed = false;
    module.walk([&](Operation *op) {
      if (isa<PipelineCreateOp>(op))
        needed = true;
    });
    memref::GlobalOp sharedMemory =
        module.lookupSymbol<memref::GlobalOp>(kSharedMemoryName);
    if (needed && !sharedMemory) {
      MLIRContext *ctx = module.getContext();
      OpBuilder b = OpBuilder::atBlockBegin(module.getBody());
      auto type =
          MemRefType::get({0}, b.getI8Type(), AffineMap(), workgroupSpace(ctx));
      sharedMemory = memref::GlobalOp::create(
          b, module.getLoc(), kSharedMemoryName,
          /*sym_visibility=*/StringAttr(), type,
          /*initial_value=*/Attribute(), /*constant=*/false,
          b.getI64IntegerAttr(kSharedMemoryAlignment));
    }
    for (auto func : module.getOps<gpu::GPUFuncOp>()) {
      if (failed(KernelLowering(func, sharedMemory).run()))
        return signalPassFailure();
      // Programmatic dependent launch: let the next kernel be scheduled
      // now, and touch memory only once the previous one is complete.
      if (func.isKernel() && !func.getBody().empty()) {
        OpBuilder b = OpBuilder::atBlockBegin(&func.getBody().front());
        NVVM::GriddepcontrolOp::create(
            b, func.getLoc(), NVVM::GridDepActionKind::launch_dependents);
        NVVM::GriddepcontrolOp::create(b, func.getLoc(),
                                       NVVM::GridDepActionKind::wait);
      }
    }
  }
};


} // namespace
