//===- LayerBuilder.h - The sm_90a kernels and schedule of a layer ----*- C++ -*-===//
//
// Part of moe-compiler.
//
// Internal to convert-moe-to-moegpu: the builder of one layer's kernels
// (the forward kernels in Forward.cpp, the training step's in
// TrainingKernels.cpp and TrainingSchedule.cpp) and the typed schedule
// beside them, and the emitter of the SIMT kernels' arithmetic.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_CONVERSION_MOETOMOEGPU_LAYERBUILDER_H
#define MOE_CONVERSION_MOETOMOEGPU_LAYERBUILDER_H

#include "moe/MoeOps.h"
#include "moe/Transforms/Autodiff.h"
#include "moe/runtime/ScheduleAbi.h"
#include "moe/Conversion/KernelBuilder.h"
#include "moegpu/MoeGpuDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"

#include <cfloat>
#include <cmath>

namespace mlir::moe::lowering {


constexpr int64_t kRouteWarps = 4;
/// Threads of a CTA of the one-thread-per-element SIMT kernels.
constexpr int64_t kCountThreads = 256;
/// Most CTAs of a grid-stride kernel over a weight's elements (the
/// conversions, checks and AdamW): 8 of kCountThreads fill an H200 SM.
/// One element a thread with a CTA each ran at 0.6 TB/s on an H200 (CTA
/// launches, not bytes, bound it).
constexpr int64_t kStrideCtas = 132 * 8;
constexpr int64_t kRowThreads = 128;
/// Rows (one warp each) a CTA of the FP8 quantization kernels takes.
constexpr int64_t kQuantizeWarps = 8;
/// Threads of the one CTA that scans the expert counts.
constexpr int64_t kScanThreads = 256;
/// Bytes a thread copies at once in row copies and sums (one 16-byte
/// vector access: 8 bf16 or f16).
constexpr int64_t kChunkBytes = 16;
/// Shape markers of buffers sized at run time (the manifest's, from the
/// schedule ABI): the token count, the dispatched-row capacity, and the
/// rows an expert-parallel rank can receive (ranks x the capacity).
constexpr int64_t kTokens = static_cast<int64_t>(::moe::abi::BufferDim::Tokens);
constexpr int64_t kRows = static_cast<int64_t>(::moe::abi::BufferDim::Rows);
constexpr int64_t kReceivedRows =
    static_cast<int64_t>(::moe::abi::BufferDim::ReceivedRows);

/// One buffer of the schedule.
struct Buffer {
  std::string name;
  Type elementType;
  SmallVector<int64_t> shape; // kTokens, kRows or static sizes
  /// input | output | param:<role> | pack:<gate role>,<up role> | scratch
  std::string source;
};

struct Emitter;

class LayerBuilder {
public:
  /// Every op is created through builders that notify `listener` (the
  /// conversion's rewriter), so a failed conversion can undo them.
  LayerBuilder(LayerOp layer, int64_t alignment, bool train,
               OpBuilder::Listener *listener = nullptr)
      : layer(layer), config(layer.getConfig()), ctx(layer.getContext()),
        alignment(alignment), train(train), listener(listener) {}

  LogicalResult build(ModuleOp module);

private:
  void addBuffer(StringRef name, Type type, ArrayRef<int64_t> shape,
                 StringRef source) {
    buffers.push_back(
        {name.str(), type, SmallVector<int64_t>(shape), source.str()});
  }
  const Buffer &buffer(StringRef name) const {
    for (const Buffer &b : buffers)
      if (b.name == name)
        return b;
    llvm_unreachable("unknown buffer");
  }
  MemRefType memrefType(StringRef name) const {
    const Buffer &b = buffer(name);
    SmallVector<int64_t> shape;
    for (int64_t d : b.shape)
      shape.push_back(d < 0 ? ShapedType::kDynamic : d);
    return MemRefType::get(shape, b.elementType);
  }
  /// Creates a kernel taking `args` and appends its launch to the schedule.
  gpu::GPUFuncOp addKernel(StringRef name, ArrayRef<StringRef> args,
                           moegpu::GridAttr grid, int64_t block,
                           TypeRange workgroup = {},
                           std::optional<int64_t> chunk = std::nullopt);
  /// Appends a launch of `func` on `args` (of token chunk `chunk`).
  void addLaunch(gpu::GPUFuncOp func, ArrayRef<StringRef> args,
                 moegpu::GridAttr grid, int64_t block,
                 std::optional<int64_t> chunk = std::nullopt);
  /// A launch of kernel `name` on `args` (once per token chunk): the
  /// kernel is made, by `build`, at its first launch.
  void launchKernel(StringRef name, ArrayRef<StringRef> args,
                    moegpu::GridAttr grid, int64_t block,
                    std::optional<int64_t> chunk,
                    function_ref<void(gpu::GPUFuncOp)> build) {
    if (auto it = launched.find(name); it != launched.end())
      return addLaunch(it->second, args, grid, block, chunk);
    gpu::GPUFuncOp func = addKernel(name, args, grid, block, {}, chunk);
    build(func);
    launched[name] = func;
  }
  /// The buffer of chunk c's received groups: each local expert's rows.
  static std::string groupOffsets(int64_t c) {
    return c == 0 ? "ep_group_offsets" : "ep_group_offsets.c" + std::to_string(c);
  }
  /// The chunked exchanges and expert GEMMs of a sharded layer.
  void buildChunkedExperts();
  /// Launches the experts' up and down projections over `rows` grouped by
  /// `groups` (of token chunk `chunk`), into `act` and `down`.
  void launchExperts(StringRef rows, StringRef groups, StringRef act,
                     StringRef down, StringRef rowWeight,
                     std::optional<int64_t> chunk);
  /// FP8 without scale_input: x is quantized once per token and the
  /// dispatch copies codes and scales to the rows (with scale_input the
  /// rows are x times a weight, dispatched in bf16 and quantized after).
  bool dispatchesCodes() const {
    return config.isFp8() && !config.getScaleInput();
  }
  /// FP8: the routed experts' GEMMs and the quantization between them on
  /// the quantized rows `prefix`rows_q grouped by `groups` (of token chunk
  /// `chunk`; prefix "ep_": the rows a sharded rank received), and the
  /// shared experts' on x.
  void launchFp8Experts(StringRef prefix, StringRef groups,
                        std::optional<int64_t> chunk);
  void launchFp8SharedExperts();
  /// A grid of `size` CTAs, fixed at compile time.
  /// The grid of a gridStride kernel over n elements.
  moegpu::GridAttr strideGrid(int64_t n) {
    return fixedGrid(
        std::min<int64_t>(kStrideCtas, llvm::divideCeil(n, kCountThreads)));
  }
  moegpu::GridAttr fixedGrid(int64_t size) {
    return moegpu::GridAttr::get(ctx, moegpu::GridKind::Fixed, 0, size);
  }
  moegpu::GridAttr gridOf(moegpu::GridKind kind, int64_t perBlock = 0) {
    return moegpu::GridAttr::get(ctx, kind, perBlock, 0);
  }
  /// Buffer names as symbol references.
  ArrayAttr symbols(ArrayRef<StringRef> names) {
    SmallVector<Attribute> refs;
    for (StringRef name : names)
      refs.push_back(FlatSymbolRefAttr::get(ctx, name));
    return ArrayAttr::get(ctx, refs);
  }
  /// Builders that notify the listener: before `op`, at the end or start
  /// of `block`, and at the end of a kernel's body (before its return).
  OpBuilder builderAt(Operation *op) {
    OpBuilder b(ctx, listener);
    b.setInsertionPoint(op);
    return b;
  }
  OpBuilder builderAtEnd(Block *block) {
    OpBuilder b(ctx, listener);
    b.setInsertionPointToEnd(block);
    return b;
  }
  OpBuilder builderAtStart(Block *block) {
    OpBuilder b(ctx, listener);
    b.setInsertionPointToStart(block);
    return b;
  }
  ImplicitLocOpBuilder kernelBody(gpu::GPUFuncOp func) {
    return ImplicitLocOpBuilder(layer.getLoc(),
                                builderAt(func.front().getTerminator()));
  }
  OpBuilder stepBuilder() { return builderAtEnd(steps); }
  /// An expert-parallel exchange the runtime carries out between the
  /// launches (see moegpu.exchange for `args`).
  void addExchange(moegpu::ExchangeKind kind, ArrayRef<StringRef> args,
                   std::optional<int64_t> chunk = std::nullopt) {
    OpBuilder b = stepBuilder();
    moegpu::ExchangeOp::create(b, layer.getLoc(), kind, symbols(args),
                               chunk ? b.getI64IntegerAttr(*chunk)
                                     : IntegerAttr());
  }
  /// An elementwise f32 sum over the ranks of each buffer, in place.
  void addAllReduce(ArrayRef<StringRef> args) {
    OpBuilder b = stepBuilder();
    moegpu::AllReduceOp::create(b, layer.getLoc(), symbols(args));
  }
  void addMemset(StringRef buffer) {
    OpBuilder b = stepBuilder();
    moegpu::MemsetOp::create(b, layer.getLoc(), buffer);
  }

  /// Router logits [T, E] in f32: a dense wgmma GEMM when the router
  /// weight has the layer's 16-bit type, SIMT when it is f32.
  void buildRouterGemm(gpu::GPUFuncOp func);
  void buildRouterLogits(gpu::GPUFuncOp func);
  /// Qwen2-MoE's per-token scale of the shared experts' output,
  /// sigmoid(x . g) in f32: one warp per token.
  void buildSharedGate(gpu::GPUFuncOp func);
  /// Scores, group-limited top-k and the per-expert counts from logits.
  void buildRoute(gpu::GPUFuncOp func);
  void buildScan(gpu::GPUFuncOp func);
  /// The chunk of `token` among `tokens` (index values).
  Value chunkOf(Emitter &e, Value token, Value tokens);
  void forRowChunks(Emitter &e, Value tid,
                    function_ref<void(Value, Type)> body);
  void buildScatter(gpu::GPUFuncOp func);
  Value sparsemixerWeight(Emitter &e, ArrayRef<Value> score,
                          ArrayRef<Value> expert, ArrayRef<Value> inRange,
                          ArrayRef<Value> chosen, Value m);
  void buildCombine(gpu::GPUFuncOp func);
  /// A grouped GEMM kernel on (a, b, offsets, c [, scale]), or a dense one
  /// on (a, b, c [, scale]); `bias`, `alpha` and `limit` as on
  /// moegpu.grouped_gemm.
  void buildGemm(gpu::GPUFuncOp func, moegpu::Epilogue epilogue,
                 moegpu::GemmLayout layout = moegpu::GemmLayout::NT,
                 bool dense = false, Value bias = Value(),
                 FloatAttr alpha = FloatAttr(), FloatAttr limit = FloatAttr());
  /// The routed experts' up (SwiGLU) or down (row scale) projection:
  /// buildGemm, with the expert bias (the kernel's last argument) and the
  /// layer's activation.
  void buildExpertGemm(gpu::GPUFuncOp func, moegpu::Epilogue epilogue);
  /// FP8 (DeepSeek-V3's fine-grained e4m3): the rows of a 16-bit buffer
  /// quantized per row per 128 channels, on (in, [offsets,] codes,
  /// scales); with `segmented` the rows of offsets' segments (from its first
  /// element to its last).
  void buildQuantize(gpu::GPUFuncOp func, bool segmented);
  /// An FP8 grouped GEMM on (a codes, b codes, offsets, c [, row weight],
  /// a scales, b scales); `expert` gives it the layer's activation.
  void buildFp8Gemm(gpu::GPUFuncOp func, moegpu::Epilogue epilogue,
                    bool expert);

  // The training step (TrainKernels below).
  void buildTraining();
  void buildConvert(gpu::GPUFuncOp func);
  void buildPack(gpu::GPUFuncOp func);
  void buildLoss(gpu::GPUFuncOp func);
  void buildRowTokens(gpu::GPUFuncOp func);
  void buildGatherRowDy(gpu::GPUFuncOp func);
  void buildScatterRowWeightGrad(gpu::GPUFuncOp func);
  void buildActGrad(gpu::GPUFuncOp func, bool weighted);
  void buildScaleToHalf(gpu::GPUFuncOp func, bool weighted);
  void buildRouteGrad(gpu::GPUFuncOp func);
  /// With `routerGemm` the router's part of dx comes from a GEMM's output.
  void buildInputGrad(gpu::GPUFuncOp func, bool routerGemm);
  void buildTokenOffsets(gpu::GPUFuncOp func);
  void buildRouterGrad(gpu::GPUFuncOp func);
  void buildSharedScaleGrad(gpu::GPUFuncOp func);
  void buildLoad(gpu::GPUFuncOp func);
  void buildColumnSum(gpu::GPUFuncOp func);
  void buildScaledWeightGrad(gpu::GPUFuncOp func);
  void buildGroupedColumnSum(gpu::GPUFuncOp func, bool accumulate);
  void buildBias(gpu::GPUFuncOp func);
  void buildAdamW(gpu::GPUFuncOp func);
  void buildUpdateCheck(gpu::GPUFuncOp func, int64_t index);

  LayerOp layer;
  LayerConfigAttr config;
  MLIRContext *ctx;
  int64_t alignment;
  bool train;
  /// Token chunks of the expert-parallel exchanges (1: not chunked).
  int64_t chunks = 1;
  /// The kernels launchKernel made, by name.
  llvm::StringMap<gpu::GPUFuncOp> launched;
  gpu::GPUModuleOp kernels;
  SmallVector<Buffer> buffers;
  moegpu::ProgramOp program;
  moegpu::ScheduleOp forward, training, update;
  OpBuilder::Listener *listener;
  /// Where the steps go: the forward schedule, then the training schedule.
  Block *steps = nullptr;
};


/// The SIMT kernels' builder: KernelBuilder's shorthands and what only the
/// GPU has (thread and block ids, SFU math, atomics, warp-level selection).
struct Emitter : KernelBuilder {
  explicit Emitter(ImplicitLocOpBuilder &b) : KernelBuilder{b} {}
  Value exp(Value x) { return moegpu::buildExp(b, x); }
  /// IEEE square root (sqrt.rn.f32): math.sqrt would become a libdevice
  /// call, as math.exp would.
  Value sqrt(Value x) {
    return LLVM::CallIntrinsicOp::create(b, b.getF32Type(),
                                         b.getStringAttr("llvm.nvvm.sqrt.rn.f"),
                                         ValueRange{x})
        .getResult(0);
  }
  Value sigmoid(Value x) {
    return arith::DivFOp::create(
        b, f32(1.0),
        arith::AddFOp::create(b, f32(1.0), exp(arith::NegFOp::create(b, x))));
  }
  Value block() { return gpu::BlockIdOp::create(b, gpu::Dimension::x); }
  Value thread() { return gpu::ThreadIdOp::create(b, gpu::Dimension::x); }
  /// body(c) for the columns c < n this thread of a kRowThreads-wide CTA
  /// owns (c = thread, thread + kRowThreads, ...).
  void columns(int64_t n, function_ref<void(Value)> body) {
    loop(thread(), idx(n), idx(kRowThreads), {}, [&](Value c, ValueRange) {
      body(c);
      return SmallVector<Value>{};
    });
  }
  /// init + sum of term(i) for i from lb to ub by step, in f32, in order.
  Value sum(Value lb, Value ub, Value step, Value init,
            function_ref<Value(Value)> term) {
    return loop(lb, ub, step, {init}, [&](Value i, ValueRange it) {
      return SmallVector<Value>{add(it[0], term(i))};
    })[0];
  }
  /// The launch's thread index, `perBlock` threads to a CTA.
  Value globalThread(int64_t perBlock) {
    return addi(muli(block(), idx(perBlock)), thread());
  }
  void atomicAdd(Value v, Value memref, ValueRange indices) {
    memref::AtomicRMWOp::create(b, arith::AtomicRMWKind::addf, v, memref,
                                indices);
  }
  /// body(i, carried) for the elements i < n this thread owns in a
  /// grid-stride loop over a one-dimensional grid of kCountThreads-wide
  /// CTAs, carrying values from `init` -> their final values.
  ValueRange gridStride(int64_t n, ValueRange init,
                        function_ref<SmallVector<Value>(Value, ValueRange)> body) {
    Value stride =
        muli(gpu::GridDimOp::create(b, gpu::Dimension::x), idx(kCountThreads));
    return loop(globalThread(kCountThreads), idx(n), stride, init, body);
  }
  void gridStride(int64_t n, function_ref<void(Value)> body) {
    gridStride(n, {}, [&](Value i, ValueRange) {
      body(i);
      return SmallVector<Value>{};
    });
  }
  /// The sum of `v` over the warp, in every lane (butterfly shuffles).
  Value warpSum(Value v) {
    for (int32_t offset = 16; offset >= 1; offset /= 2)
      v = add(v, gpu::ShuffleOp::create(b, v, offset, 32,
                                        gpu::ShuffleMode::XOR)
                     .getShuffleResult());
    return v;
  }
  /// memref[indices] += the sum of `v` over the warp: one atomic per warp
  /// instead of one per thread (a CTA's 128 atomics on one address
  /// serialize in L2). Every lane of the warp must reach it.
  void warpAtomicAdd(Value v, Value memref, ValueRange indices) {
    Value sum = warpSum(v);
    Value lane = remi(thread(), idx(32));
    when(cmp(arith::CmpIPredicate::eq, lane, idx(0)),
         [&] { atomicAdd(sum, memref, indices); });
  }
  /// Index of the largest of `n` values from `get` (ties: the lower
  /// index), skipping NaN, which marks what is excluded (chosen or masked):
  /// with any value not NaN, never an excluded index.
  std::pair<Value, Value> argmax(int64_t n, function_ref<Value(Value)> get) {
    Value no = arith::ConstantIntOp::create(b, 0, 1);
    Value yes = arith::ConstantIntOp::create(b, 1, 1);
    ValueRange r = loop(
        idx(0), idx(n), idx(1), {idx(0), f32(-INFINITY), no},
        [&](Value i, ValueRange it) {
          Value v = get(i);
          Value ordered =
              arith::CmpFOp::create(b, arith::CmpFPredicate::ORD, v, v);
          Value gt =
              arith::CmpFOp::create(b, arith::CmpFPredicate::OGT, v, it[1]);
          Value first = arith::XOrIOp::create(b, it[2], yes);
          Value take = arith::AndIOp::create(
              b, ordered, arith::OrIOp::create(b, first, gt));
          return SmallVector<Value>{arith::SelectOp::create(b, take, i, it[0]),
                                    arith::SelectOp::create(b, take, v, it[1]),
                                    arith::OrIOp::create(b, it[2], take)};
        });
    return {r[0], r[1]};
  }
  /// `v`, or -inf where it is NaN: scores compare as ordered values.
  Value ordered(Value v) {
    Value nan = arith::CmpFOp::create(b, arith::CmpFPredicate::UNO, v, v);
    return arith::SelectOp::create(b, nan, f32(-INFINITY), v);
  }
};

} // namespace mlir::moe::lowering

#endif // MOE_CONVERSION_MOETOMOEGPU_LAYERBUILDER_H
