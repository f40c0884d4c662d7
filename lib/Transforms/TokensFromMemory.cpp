//===- TokensFromMemory.cpp - The token count as a device word ------------===//
//
// Part of moe-compiler.
//
// A kernel sees the pass's token count in its memref arguments' sizes,
// which are kernel parameters: fixed when a CUDA graph captures the
// launch. This pass makes the kernels read it from a buffer the runtime
// writes before each pass instead, so that one graph serves every token
// count up to the one its launches were sized for.
//
//===----------------------------------------------------------------------===//

#include "moe/Transforms/Passes.h"
#include "moegpu/MoeGpuDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Arith/Utils/Utils.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlowOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/SymbolTable.h"

#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SmallPtrSet.h"

namespace mlir::moe {
#define GEN_PASS_DEF_MOEGPUTOKENSFROMMEMORY
#include "moe/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moegpu;

namespace {

/// The source of the token-count word, as moegpu.buffer and the manifest
/// spell it.
constexpr llvm::StringLiteral kTokensSource = "tokens";

/// What dynamic dimension `i` of `buffer`'s type stands for (or nothing
/// for a static one).
std::optional<BufferDim> dynamicDim(BufferOp buffer, unsigned i) {
  MemRefType type = buffer.getMemRefType();
  if (!type.isDynamicDim(i))
    return std::nullopt;
  auto dims = buffer.getDims().getAsRange<BufferDimAttr>();
  unsigned before = 0;
  for (unsigned d = 0; d < i; ++d)
    before += type.isDynamicDim(d);
  return (*std::next(dims.begin(), before)).getValue();
}

bool hasTokenDim(BufferOp buffer) {
  for (unsigned i = 0, e = buffer.getMemRefType().getRank(); i < e; ++i)
    if (dynamicDim(buffer, i) == BufferDim::Tokens)
      return true;
  return false;
}

/// One kernel's launches: the positions of its token-sized buffers (the
/// same for every launch) and how many buffers each passes.
struct KernelUse {
  SmallVector<unsigned> tokenArgs;
  SmallVector<BufferOp> argBuffers;
  SmallVector<LaunchOp> launches;
  GridAttr grid;
};

struct MoeGpuTokensFromMemory
    : public mlir::moe::impl::MoeGpuTokensFromMemoryBase<
          MoeGpuTokensFromMemory> {
  using MoeGpuTokensFromMemoryBase::MoeGpuTokensFromMemoryBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    for (auto program : module.getOps<ProgramOp>())
      if (failed(rewrite(module, program)))
        return signalPassFailure();
  }

  LogicalResult rewrite(ModuleOp module, ProgramOp program);
  /// Gives `func` the word at argument `index` and its token-sized
  /// arguments that many tokens.
  void rewriteKernel(gpu::GPUFuncOp func, const KernelUse &use, unsigned index);
};

LogicalResult MoeGpuTokensFromMemory::rewrite(ModuleOp module,
                                              ProgramOp program) {
  SymbolTable buffers(program);
  // Run before: the launches pass the word already.
  for (auto buffer : program.getOps<BufferOp>())
    if (buffer.getSource() == kTokensSource)
      return success();

  llvm::MapVector<Operation *, KernelUse> kernels;
  WalkResult walked =
      program.walk([&](LaunchOp launch) {
        auto func = SymbolTable::lookupNearestSymbolFrom<gpu::GPUFuncOp>(
            module, launch.getKernel());
        if (!func)
          return WalkResult::advance(); // the launch's verifier says so
        SmallVector<unsigned> tokenArgs;
        SmallVector<BufferOp> argBuffers;
        for (auto [i, ref] : llvm::enumerate(
                 launch.getArgs().getAsRange<FlatSymbolRefAttr>())) {
          auto buffer = buffers.lookup<BufferOp>(ref.getValue());
          if (!buffer)
            return WalkResult::advance();
          argBuffers.push_back(buffer);
          if (hasTokenDim(buffer))
            tokenArgs.push_back(i);
        }
        GridKind grid = launch.getGrid().getKind();
        if (tokenArgs.empty() &&
            (grid == GridKind::Tokens || grid == GridKind::Assignments)) {
          launch.emitOpError()
              << "launches kernel " << launch.getKernel()
              << " on a grid of the token count, but passes it no token-sized "
                 "buffer: it could not tell the live tokens from its grid's";
          return WalkResult::interrupt();
        }
        if (tokenArgs.empty())
          return WalkResult::advance();
        auto [it, first] = kernels.insert({func, KernelUse{}});
        KernelUse &use = it->second;
        if (first) {
          use.tokenArgs = tokenArgs;
          use.argBuffers = argBuffers;
          use.grid = launch.getGrid();
        } else if (use.tokenArgs != tokenArgs ||
                   use.argBuffers.size() != argBuffers.size()) {
          launch.emitOpError()
              << "launches kernel " << launch.getKernel()
              << " with token-sized buffers at other arguments than an earlier "
                 "launch of it: one kernel cannot read both";
          return WalkResult::interrupt();
        } else if (grid == GridKind::Tokens && use.grid != launch.getGrid()) {
          launch.emitOpError()
              << "launches kernel " << launch.getKernel() << " on grid "
              << launch.getGrid() << ", an earlier launch on " << use.grid
              << ": the kernel cannot tell which CTAs hold live tokens";
          return WalkResult::interrupt();
        }
        use.launches.push_back(launch);
        return WalkResult::advance();
      });
  if (walked.wasInterrupted())
    return failure();
  if (kernels.empty())
    return success();

  // The word, first among the buffers.
  MLIRContext *ctx = module.getContext();
  OpBuilder b(ctx);
  b.setInsertionPointToStart(&program.getBody().front());
  auto word = BufferOp::create(b, program.getLoc(), "tokens",
                               MemRefType::get({1}, IntegerType::get(ctx, 32)),
                               b.getArrayAttr({}), kTokensSource);
  // (A buffer of that name already: the table renames the word.)
  StringAttr name = buffers.insert(word);
  auto ref = FlatSymbolRefAttr::get(name);

  for (auto &[op, use] : kernels) {
    for (LaunchOp launch : use.launches) {
      SmallVector<Attribute> args(launch.getArgs().getValue());
      args.push_back(ref);
      launch.setArgsAttr(ArrayAttr::get(ctx, args));
    }
    rewriteKernel(cast<gpu::GPUFuncOp>(op), use, use.argBuffers.size());
  }
  return success();
}

void MoeGpuTokensFromMemory::rewriteKernel(gpu::GPUFuncOp func,
                                           const KernelUse &use,
                                           unsigned index) {
  MLIRContext *ctx = func.getContext();
  Location loc = func.getLoc();
  auto wordType = MemRefType::get({1}, IntegerType::get(ctx, 32));
  (void)func.insertArgument(index, wordType, DictionaryAttr(), loc);
  // The tensor-map pointers after the buffers move up by one.
  if (auto maps = func->getAttrOfType<ArrayAttr>(kTensorMapsAttrName)) {
    SmallVector<Attribute> moved;
    for (auto map : maps.getAsRange<TensorMapAttr>())
      moved.push_back(TensorMapAttr::get(
          ctx, map.getArg() >= index ? map.getArg() + 1 : map.getArg(),
          map.getSource(), map.getView(), map.getBox(), map.getSwizzle()));
    func->setAttr(kTensorMapsAttrName, ArrayAttr::get(ctx, moved));
  }

  OpBuilder b(ctx);
  b.setInsertionPointToStart(&func.front());
  Value zero = arith::ConstantIndexOp::create(b, loc, 0);
  Value loaded =
      memref::LoadOp::create(b, loc, func.getArgument(index), ValueRange{zero});
  Value tokens = arith::IndexCastUIOp::create(b, loc, b.getIndexType(), loaded);

  // On a grid of the token count, a CTA whose first token is past the
  // live ones returns: the launch is then the live count's, whatever
  // count it was sized for. (Assignment grids: the kernel ops guard their
  // assignment.)
  if (use.grid.getKind() == GridKind::Tokens) {
    Value block = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
    int64_t perBlock = std::max<int64_t>(use.grid.getPerBlock(), 1);
    Value firstToken = arith::MulIOp::create(
        b, loc, block, arith::ConstantIndexOp::create(b, loc, perBlock));
    Value past = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::uge,
                                       firstToken, tokens);
    Block *entry = b.getInsertionBlock();
    Block *body = entry->splitBlock(b.getInsertionPoint());
    Block *done = b.createBlock(body);
    gpu::ReturnOp::create(b, loc);
    b.setInsertionPointToEnd(entry);
    cf::CondBranchOp::create(b, loc, past, done, ValueRange{}, body,
                             ValueRange{});
    b.setInsertionPointToStart(body);
  }

  for (unsigned arg : use.tokenArgs) {
    BlockArgument value = func.getArgument(arg);
    auto type = cast<MemRefType>(value.getType());
    BufferOp buffer = use.argBuffers[arg];
    llvm::SmallPtrSet<Operation *, 8> made;
    // Sizes: the word's for the token dimensions, the launch's for the
    // others; row-major strides from them.
    SmallVector<OpFoldResult> sizes;
    for (unsigned i = 0, e = type.getRank(); i < e; ++i) {
      std::optional<BufferDim> dim = dynamicDim(buffer, i);
      if (!dim) {
        sizes.push_back(b.getIndexAttr(type.getDimSize(i)));
        continue;
      }
      if (*dim == BufferDim::Tokens) {
        sizes.push_back(tokens);
        continue;
      }
      auto size = memref::DimOp::create(b, loc, value, i);
      made.insert(size);
      sizes.push_back(size.getResult());
    }
    SmallVector<OpFoldResult> strides(sizes.size());
    OpFoldResult stride = b.getIndexAttr(1);
    for (size_t i = sizes.size(); i-- > 0;) {
      strides[i] = stride;
      if (i == 0)
        break;
      std::optional<int64_t> s = getConstantIntValue(stride);
      std::optional<int64_t> n = getConstantIntValue(sizes[i]);
      if (s && n) {
        stride = b.getIndexAttr(*s * *n);
        continue;
      }
      Value lhs = getValueOrCreateConstantIndexOp(b, loc, stride);
      Value rhs = getValueOrCreateConstantIndexOp(b, loc, sizes[i]);
      stride = arith::MulIOp::create(b, loc, lhs, rhs).getResult();
    }
    auto cast = memref::ReinterpretCastOp::create(
        b, loc, type, value, b.getIndexAttr(0), sizes, strides);
    made.insert(cast);
    value.replaceUsesWithIf(cast.getResult(), [&](OpOperand &operand) {
      return !made.contains(operand.getOwner());
    });
  }
}

} // namespace
