//===- LayerBuilder.h - The sm_90a schedule of a layer ----------*- C++ -*-===//
//
// Part of moe-compiler.
//
// Internal to convert-moe-to-moegpu: the builder of one layer's schedule
// (buffers, launches, exchanges: the forward pass in MoeToMoeGpu.cpp, the
// training step in TrainingSchedule.cpp) and of its kernels, each a
// gpu.func whose body is one kernel op: moegpu.grouped_gemm (Forward.cpp)
// or a SIMT kernel op, which convert-moegpu-kernels-to-gpu lowers.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_CONVERSION_MOETOMOEGPU_LAYERBUILDER_H
#define MOE_CONVERSION_MOETOMOEGPU_LAYERBUILDER_H

#include "moe/MoeOps.h"
#include "moe/Transforms/Autodiff.h"
#include "moe/runtime/ScheduleAbi.h"
#include "moe/Conversion/MoeGpuKernels.h"
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


/// Shape markers of buffers sized at run time (the manifest's, from the
/// schedule ABI): the token count, the dispatched-row capacity, and the
/// rows an expert-parallel rank can receive (ranks x the capacity).
constexpr int64_t kTokens = static_cast<int64_t>(::moe::abi::BufferDim::Tokens);
constexpr int64_t kRows = static_cast<int64_t>(::moe::abi::BufferDim::Rows);
constexpr int64_t kReceivedRows =
    static_cast<int64_t>(::moe::abi::BufferDim::ReceivedRows);
/// Their blocks of 128 rows (per-column scales of the FP8 weight
/// gradients' operands).
constexpr int64_t kRowBlocks =
    static_cast<int64_t>(::moe::abi::BufferDim::RowBlocks);
constexpr int64_t kReceivedRowBlocks =
    static_cast<int64_t>(::moe::abi::BufferDim::ReceivedRowBlocks);
/// The device-initiated exchange: its sends' CTAs without a partition, and
/// the most ranks (ep_counts waits for rank t on thread t of 128).
constexpr int64_t kDefaultCommCtas = 20;
constexpr int64_t kMaxLsaRanks = 128;
/// Its sends' flags, after the ranks' flags of the sizes (the ABI's
/// ExchangeFlag): the forward pass's dispatch and combine, a training
/// step's rows' dy to the experts and their gradients back; in token
/// chunks, kFlagsPerChunk a chunk (chunk c's dispatch: ranks + c
/// kFlagsPerChunk + kFlagDispatch).
using ::moe::abi::ExchangeFlag;
constexpr int64_t kFlagDispatch = static_cast<int64_t>(ExchangeFlag::Dispatch),
                  kFlagCombine = static_cast<int64_t>(ExchangeFlag::Combine),
                  kFlagDispatchRows =
                      static_cast<int64_t>(ExchangeFlag::DispatchRows),
                  kFlagCombineRows =
                      static_cast<int64_t>(ExchangeFlag::CombineRows),
                  kFlagsPerChunk = ::moe::abi::kExchangeFlagsPerChunk;

/// One buffer of the schedule.
struct Buffer {
  std::string name;
  Type elementType;
  SmallVector<int64_t> shape; // kTokens, kRows or static sizes
  /// input | output | param:<role> | pack:<gate role>,<up role> | scratch
  std::string source;
};


class LayerBuilder {
public:
  /// Every op is created through builders that notify `listener` (the
  /// conversion's rewriter), so a failed conversion can undo them.
  /// AdamW's moments are of `momentType` (f32 when null).
  LayerBuilder(LayerOp layer, int64_t alignment, bool train, bool backward,
               Type momentType, OpBuilder::Listener *listener = nullptr)
      : layer(layer), config(layer.getConfig()), ctx(layer.getContext()),
        alignment(alignment), train(train), backward(backward),
        momentType(momentType), listener(listener) {}

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
  /// A kernel's function and the buffers its arguments are, in order.
  struct Kernel {
    mutable gpu::GPUFuncOp func;
    SmallVector<std::string> buffers;
    /// The argument that is buffer `name`, or null where the launch does
    /// not pass it (an absent optional operand of the kernel's op).
    Value get(StringRef name) const {
      for (auto [arg, buffer] : llvm::zip(func.getArguments(), buffers))
        if (buffer == name)
          return arg;
      return Value();
    }
    Value operator[](StringRef name) const {
      Value arg = get(name);
      assert(arg && "the buffer is not an argument of the kernel");
      return arg;
    }
  };
  static Kernel kernelOf(gpu::GPUFuncOp func, ArrayRef<StringRef> args);
  /// A kernel taking `args`, launched now; its body is one kernel op
  /// (kernelOp).
  Kernel kernel(StringRef name, ArrayRef<StringRef> args, moegpu::GridAttr grid,
                int64_t block, std::optional<int64_t> chunk = std::nullopt) {
    return kernelOf(addKernel(name, args, grid, block, {}, chunk), args);
  }
  /// Creates kernel op `OpT` from `operands` as the body of `k`.
  template <typename OpT, typename... Operands>
  OpT kernelOp(const Kernel &k, Operands &&...operands) {
    OpBuilder b = builderAt(k.func.front().getTerminator());
    return OpT::create(b, layer.getLoc(),
                       std::forward<Operands>(operands)...);
  }
  /// Whether `launch` runs a kernel whose body is an `OpT`.
  template <typename OpT>
  bool runs(moegpu::LaunchOp launch) {
    auto func = kernels.lookupSymbol<gpu::GPUFuncOp>(
        launch.getKernel().getLeafReference());
    return func && !func.front().empty() && isa<OpT>(func.front().front());
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
  /// The chunked exchanges and expert GEMMs of a sharded layer over `ep`
  /// ranks; true when they ran the shared experts too.
  bool buildChunkedExperts(int64_t ep);
  /// The device-initiated exchange of `ep` ranks (steps of transport
  /// lsa): ep_counts (every chunk's sizes and layouts); kernel `name`
  /// sending `rows` (and `weights`) into `to` (`toWeights`) on the peers,
  /// signalling `flag` (kFlag...: which way and which layout); kernel
  /// `name` waiting for `flag`. With `chunk`, the send moves that token
  /// chunk's rows and signals, and the wait waits for, that chunk's flag;
  /// the kernels are named `name`_c<chunk>.
  void buildDeviceCounts(int64_t ep);
  void buildDeviceSend(StringRef name, int64_t ep, int64_t flag, StringRef rows,
                       StringRef to, StringRef weights = "",
                       StringRef toWeights = "",
                       std::optional<int64_t> chunk = std::nullopt);
  void buildDeviceWait(StringRef name, int64_t ep, int64_t flag,
                       std::optional<int64_t> chunk = std::nullopt);
  /// The word of ep_flags of `flag` (of token chunk `chunk`).
  static int64_t flagSlot(int64_t ep, int64_t flag,
                          std::optional<int64_t> chunk) {
    return ep + flag + kFlagsPerChunk * chunk.value_or(0);
  }
  moegpu::TransportAttr transportAttr() const {
    return transport ? moegpu::TransportAttr::get(ctx, *transport)
                     : moegpu::TransportAttr();
  }
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
    moegpu::ExchangeOp::create(
        b, layer.getLoc(), kind, symbols(args),
        chunk ? b.getI64IntegerAttr(*chunk) : IntegerAttr(), transportAttr());
  }
  /// A host-driven exchange: with the device-initiated one beside it, the
  /// nccl transport's (the runtime runs one of the two).
  void addHostExchange(moegpu::ExchangeKind kind, ArrayRef<StringRef> args,
                       std::optional<int64_t> chunk = std::nullopt) {
    if (lsa)
      transport = moegpu::Transport::Nccl;
    addExchange(kind, args, chunk);
    transport.reset();
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

  /// A moegpu.grouped_gemm kernel: its operands by buffer (empty: absent;
  /// no offsets: a dense GEMM), its epilogue and layout.
  struct Gemm {
    Gemm(StringRef a, StringRef b, StringRef offsets, StringRef c,
         moegpu::Epilogue epilogue = moegpu::Epilogue::None,
         moegpu::GemmLayout layout = moegpu::GemmLayout::NT)
        : a(a), b(b), offsets(offsets), c(c), epilogue(epilogue),
          layout(layout) {}
    /// The row weight of a RowScale epilogue.
    Gemm &scaleRows(StringRef weight) {
      rowScale = weight;
      return *this;
    }
    /// FP8: the per-128 scales of a's codes and of b's blocks.
    Gemm &blockScales(StringRef a, StringRef b) {
      aScale = a;
      bScale = b;
      return *this;
    }
    /// The expert bias (GPT-OSS) the epilogue adds; empty: none.
    Gemm &withBias(StringRef buffer) {
      bias = buffer;
      return *this;
    }
    /// Split K over CTAs into c's slices; the kernel writes how many it
    /// took to `count`.
    Gemm &splitK(StringRef count) {
      splitCount = count;
      return *this;
    }
    /// The routed experts' up projection: SwiGLU as the layer clamps it.
    Gemm &ofExperts() {
      expert = true;
      return *this;
    }
    /// FP8 without the SwiGLU: b is the packed gate/up weight, whose
    /// scales are the gate's blocks then the up's.
    Gemm &gateUpScales() {
      gateUp = true;
      return *this;
    }
    /// The kernel's arguments, in the ABI's order: a, b, [offsets], c,
    /// [row scale], [a scale, b scale], [bias], [split count].
    SmallVector<StringRef> args() const;

    StringRef a, b, offsets, c;
    moegpu::Epilogue epilogue;
    moegpu::GemmLayout layout;
    StringRef rowScale, aScale, bScale, bias, splitCount;
    bool expert = false, gateUp = false;
  };
  /// Launches GEMM kernel `name` (of token chunk `chunk`) on a persistent
  /// grid; the kernel is made at its first launch.
  void launchGemm(StringRef name, const Gemm &gemm,
                  std::optional<int64_t> chunk = std::nullopt);
  /// FP8 (DeepSeek-V3's fine-grained e4m3): kernel `k`'s body quantizes
  /// buffer `in` into `out` and `scale`, the rows of `offsets`' groups
  /// (none: all rows); a block's largest magnitude taken as at least
  /// `minAmax` (the forward activations', or the gradients' 2^-100).
  void quantize(const Kernel &k, StringRef in, StringRef offsets, StringRef out,
                StringRef scale, double minAmax = kFp8MinAmax);
  static moegpu::Scoring scoringOf(ScoringFunc scoring);

  /// The training step: its buffers, kernels and schedules; with
  /// `backward`, the backward pass alone (its schedule "backward").
  void buildTraining();

  LayerOp layer;
  LayerConfigAttr config;
  MLIRContext *ctx;
  int64_t alignment;
  bool train;
  /// The backward pass alone (a framework's autograd), not a step.
  bool backward;
  /// AdamW's moments' element type (f32 or bf16; null: f32).
  Type momentType;
  /// Token chunks of the expert-parallel exchanges (1: not chunked).
  int64_t chunks = 1;
  /// Whether the forward pass has the device-initiated exchange (steps of
  /// transport lsa) beside the host-driven one (nccl), and the CTAs of its
  /// sends: the partition's comm SMs (DeepSeek-V3's 20 without one).
  bool lsa = false;
  int64_t commCtas = kDefaultCommCtas;
  /// The transport of the steps added now (none: every transport's).
  std::optional<moegpu::Transport> transport;
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


} // namespace mlir::moe::lowering

#endif // MOE_CONVERSION_MOETOMOEGPU_LAYERBUILDER_H
