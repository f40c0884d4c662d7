//===- MoeToMoeGpu.cpp - An MoE layer as Hopper kernels and a schedule ----===//
//
// Part of moe-compiler.
//
//===----------------------------------------------------------------------===//

#include "moe/Conversion/Passes.h"
#include "moe/MoeOps.h"
#include "moe/Transforms/Autodiff.h"
#include "moe/runtime/ScheduleAbi.h"
#include "moegpu/MoeGpuDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"

#include <cfloat>

namespace mlir::moe {
#define GEN_PASS_DEF_CONVERTMOETOMOEGPU
#include "moe/Conversion/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

namespace {

constexpr int64_t kRouteWarps = 4;
constexpr int64_t kCountThreads = 256;
constexpr int64_t kRowThreads = 128;
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

class LayerBuilder {
public:
  LayerBuilder(LayerOp layer, int64_t alignment, bool train)
      : layer(layer), config(layer.getConfig()), ctx(layer.getContext()),
        alignment(alignment), train(train) {}

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
                           TypeRange workgroup = {});
  /// A grid of `size` CTAs, fixed at compile time.
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
  OpBuilder stepBuilder() { return OpBuilder::atBlockEnd(steps); }
  /// An expert-parallel exchange the runtime carries out between the
  /// launches (see moegpu.exchange for `args`).
  void addExchange(moegpu::ExchangeKind kind, ArrayRef<StringRef> args) {
    OpBuilder b = stepBuilder();
    moegpu::ExchangeOp::create(b, layer.getLoc(), kind, symbols(args));
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

  void buildRoute(gpu::GPUFuncOp func);
  void buildCount(gpu::GPUFuncOp func);
  void buildScan(gpu::GPUFuncOp func);
  void buildScatter(gpu::GPUFuncOp func);
  void buildCombine(gpu::GPUFuncOp func);
  void buildGemm(gpu::GPUFuncOp func, moegpu::Epilogue epilogue);

  // The training step (TrainKernels below).
  void buildTraining();
  void buildConvert(gpu::GPUFuncOp func);
  void buildPack(gpu::GPUFuncOp func);
  void buildLoss(gpu::GPUFuncOp func);
  void buildRowTokens(gpu::GPUFuncOp func);
  void buildGatherRowDy(gpu::GPUFuncOp func);
  void buildScatterRowWeightGrad(gpu::GPUFuncOp func);
  void buildActGrad(gpu::GPUFuncOp func, bool weighted);
  void buildRowsGrad(gpu::GPUFuncOp func);
  void buildDownGrad(gpu::GPUFuncOp func, bool weighted);
  void buildGateUpGrad(gpu::GPUFuncOp func);
  void buildRouteGrad(gpu::GPUFuncOp func);
  void buildInputGrad(gpu::GPUFuncOp func);
  void buildRouterGrad(gpu::GPUFuncOp func);
  void buildLoad(gpu::GPUFuncOp func);
  void buildBias(gpu::GPUFuncOp func);
  void buildAdamW(gpu::GPUFuncOp func);

  LayerOp layer;
  LayerConfigAttr config;
  MLIRContext *ctx;
  int64_t alignment;
  bool train;
  gpu::GPUModuleOp kernels;
  SmallVector<Buffer> buffers;
  moegpu::ProgramOp program;
  moegpu::ScheduleOp forward, training;
  /// Where the steps go: the forward schedule, then the training schedule.
  Block *steps = nullptr;
};

gpu::GPUFuncOp LayerBuilder::addKernel(StringRef name, ArrayRef<StringRef> args,
                                       moegpu::GridAttr grid, int64_t block,
                                       TypeRange workgroup) {
  SmallVector<Type> types;
  for (StringRef arg : args)
    types.push_back(memrefType(arg));
  OpBuilder b = OpBuilder::atBlockEnd(kernels.getBody());
  auto func = gpu::GPUFuncOp::create(b, layer.getLoc(), name,
                                     b.getFunctionType(types, {}), workgroup);
  func->setAttr(gpu::GPUDialect::getKernelFuncAttrName(), b.getUnitAttr());
  b.setInsertionPointToEnd(&func.front());
  gpu::ReturnOp::create(b, layer.getLoc());

  OpBuilder sb = stepBuilder();
  moegpu::LaunchOp::create(
      sb, layer.getLoc(),
      SymbolRefAttr::get(kernels.getNameAttr(),
                         {FlatSymbolRefAttr::get(func.getNameAttr())}),
      symbols(args), grid, sb.getI64IntegerAttr(block));
  return func;
}

/// Builders of the SIMT kernels' arithmetic.
struct Emitter {
  ImplicitLocOpBuilder &b;
  Value idx(int64_t v) { return arith::ConstantIndexOp::create(b, v); }
  Value f32(double v) {
    return arith::ConstantFloatOp::create(b, b.getF32Type(),
                                          APFloat(static_cast<float>(v)));
  }
  Value i32(int64_t v) { return arith::ConstantIntOp::create(b, v, 32); }
  Value toF32(Value v) {
    return v.getType().isF32() ? v
                               : arith::ExtFOp::create(b, b.getF32Type(), v);
  }
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
  Value cmp(arith::CmpIPredicate p, Value l, Value r) {
    return arith::CmpIOp::create(b, p, l, r);
  }
  Value load(Value memref, ValueRange indices) {
    return memref::LoadOp::create(b, memref, indices);
  }
  void store(Value v, Value memref, ValueRange indices) {
    memref::StoreOp::create(b, v, memref, indices);
  }
  /// for (i = lb; i < ub; i += step) body(i, iterArgs) -> results.
  ValueRange loop(Value lb, Value ub, Value step, ValueRange init,
                  function_ref<SmallVector<Value>(Value, ValueRange)> body) {
    auto op = scf::ForOp::create(b, lb, ub, step, init);
    ImplicitLocOpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(op.getBody());
    SmallVector<Value> next =
        body(op.getInductionVar(), op.getRegionIterArgs());
    if (op.getBody()->mightHaveTerminator())
      op.getBody()->getTerminator()->erase();
    b.setInsertionPointToEnd(op.getBody());
    scf::YieldOp::create(b, next);
    return op.getResults();
  }
  void when(Value cond, function_ref<void()> body) {
    auto op = scf::IfOp::create(b, cond, /*withElseRegion=*/false);
    ImplicitLocOpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(op.thenBlock()->getTerminator());
    body();
  }
  Value add(Value l, Value r) { return arith::AddFOp::create(b, l, r); }
  Value sub(Value l, Value r) { return arith::SubFOp::create(b, l, r); }
  Value mul(Value l, Value r) { return arith::MulFOp::create(b, l, r); }
  Value div(Value l, Value r) { return arith::DivFOp::create(b, l, r); }
  Value addi(Value l, Value r) { return arith::AddIOp::create(b, l, r); }
  Value muli(Value l, Value r) { return arith::MulIOp::create(b, l, r); }
  Value divi(Value l, Value r) { return arith::DivUIOp::create(b, l, r); }
  Value remi(Value l, Value r) { return arith::RemUIOp::create(b, l, r); }
  Value index(Value i32) {
    return arith::IndexCastOp::create(b, b.getIndexType(), i32);
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
  /// The launch's thread index, `perBlock` threads to a CTA.
  Value globalThread(int64_t perBlock) {
    return addi(muli(block(), idx(perBlock)), thread());
  }
  Value dim(Value memref, int64_t i) {
    return memref::DimOp::create(b, memref, i);
  }
  void atomicAdd(Value v, Value memref, ValueRange indices) {
    memref::AtomicRMWOp::create(b, arith::AtomicRMWKind::addf, v, memref,
                                indices);
  }
  Value truncTo(Type type, Value v) {
    return type == v.getType() ? v : arith::TruncFOp::create(b, type, v);
  }
  /// The indices of element `linear` of a row-major memref.
  SmallVector<Value> delinearize(Value linear, Value memref) {
    auto type = cast<MemRefType>(memref.getType());
    SmallVector<Value> out(type.getRank());
    for (int64_t d = type.getRank() - 1; d >= 0; --d) {
      Value size = dim(memref, d);
      out[d] = d == 0 ? linear : remi(linear, size);
      linear = divi(linear, size);
    }
    return out;
  }
  /// `base` to the power `n` (f32, 0 <= n < 2^31) by squaring.
  Value powi(Value base, Value n) {
    Value exponent = arith::FPToUIOp::create(b, b.getI32Type(), n);
    ValueRange r = loop(
        idx(0), idx(31), idx(1), {f32(1.0), base},
        [&](Value bit, ValueRange it) {
          Value mask = arith::ShLIOp::create(
              b, i32(1), arith::IndexCastOp::create(b, b.getI32Type(), bit));
          Value set = cmp(arith::CmpIPredicate::ne,
                          arith::AndIOp::create(b, exponent, mask), i32(0));
          Value next =
              arith::SelectOp::create(b, set, mul(it[0], it[1]), it[0]);
          return SmallVector<Value>{next, mul(it[1], it[1])};
        });
    return r[0];
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

void LayerBuilder::buildRoute(gpu::GPUFuncOp func) {
  ImplicitLocOpBuilder b(layer.getLoc(), func.front().getTerminator());
  Emitter e{b};
  int64_t experts = config.getExperts(), hidden = config.getHidden();
  int64_t topK = config.getTopK(), groups = config.getGroups();
  bool bias = config.getScoreBias();
  Value x = func.getArgument(0), wr = func.getArgument(1);
  Value biasArg = bias ? func.getArgument(2) : Value();
  Value ids = func.getArgument(bias ? 3 : 2);
  Value weights = func.getArgument(bias ? 4 : 3);
  Value scores = func.getWorkgroupAttributions()[0];
  Value sel = func.getWorkgroupAttributions()[1];

  Value tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
  Value warp = arith::DivUIOp::create(b, tid, e.idx(32));
  Value lane = arith::RemUIOp::create(b, tid, e.idx(32));
  Value token = arith::AddIOp::create(
      b,
      arith::MulIOp::create(b, gpu::BlockIdOp::create(b, gpu::Dimension::x),
                            e.idx(kRouteWarps)),
      warp);
  Value tokens = memref::DimOp::create(b, x, 0);
  Value valid = e.cmp(arith::CmpIPredicate::ult, token, tokens);
  bool sigmoid = config.getScoring() == ScoringFunc::Sigmoid;

  // Router logits: lane l computes experts l, l + 32, ...
  e.when(valid, [&] {
    e.loop(lane, e.idx(experts), e.idx(32), {}, [&](Value ex, ValueRange) {
      Value acc = e.loop(
          e.idx(0), e.idx(hidden), e.idx(1), {e.f32(0)},
          [&](Value h, ValueRange it) {
            Value p = arith::MulFOp::create(b, e.toF32(e.load(x, {token, h})),
                                            e.toF32(e.load(wr, {ex, h})));
            return SmallVector<Value>{arith::AddFOp::create(b, it[0], p)};
          })[0];
      e.store(sigmoid ? e.sigmoid(acc) : acc, scores, {warp, ex});
      return SmallVector<Value>{};
    });
  });
  gpu::BarrierOp::create(b);

  Value leader = arith::AndIOp::create(
      b, valid, e.cmp(arith::CmpIPredicate::eq, lane, e.idx(0)));
  e.when(leader, [&] {
    Value zero = e.idx(0), one = e.idx(1), nE = e.idx(experts);
    if (!sigmoid) {
      Value max = e.loop(
          zero, nE, one, {e.f32(-INFINITY)}, [&](Value i, ValueRange it) {
            return SmallVector<Value>{
                arith::MaximumFOp::create(b, it[0], e.load(scores, {warp, i}))};
          })[0];
      Value sum =
          e.loop(zero, nE, one, {e.f32(0)}, [&](Value i, ValueRange it) {
            Value v =
                e.exp(arith::SubFOp::create(b, e.load(scores, {warp, i}), max));
            e.store(v, scores, {warp, i});
            return SmallVector<Value>{arith::AddFOp::create(b, it[0], v)};
          })[0];
      e.loop(zero, nE, one, {}, [&](Value i, ValueRange) {
        e.store(arith::DivFOp::create(b, e.load(scores, {warp, i}), sum),
                scores, {warp, i});
        return SmallVector<Value>{};
      });
    }
    // Selection scores: biased, NaN read as -inf (a NaN input never makes
    // the selection repeat or leave the experts), and masked outside the
    // kept groups. NaN in `sel` and `gsc` marks what is excluded.
    e.loop(zero, nE, one, {}, [&](Value i, ValueRange) {
      Value v = e.load(scores, {warp, i});
      if (bias)
        v = arith::AddFOp::create(b, v, e.load(biasArg, {i}));
      e.store(e.ordered(v), sel, {warp, i});
      return SmallVector<Value>{};
    });
    if (groups > 1) {
      Value gsc = func.getWorkgroupAttributions()[2];
      int64_t perGroup = config.getExpertsPerGroup();
      bool top2 = config.getGroupScore() == GroupScore::SumTop2;
      e.loop(zero, e.idx(groups), one, {}, [&](Value g, ValueRange) {
        Value first = arith::MulIOp::create(b, g, e.idx(perGroup));
        ValueRange best = e.loop(
            zero, e.idx(perGroup), one, {e.f32(-INFINITY), e.f32(-INFINITY)},
            [&](Value i, ValueRange it) {
              Value v = e.load(sel, {warp, arith::AddIOp::create(b, first, i)});
              Value gt1 =
                  arith::CmpFOp::create(b, arith::CmpFPredicate::OGT, v, it[0]);
              Value gt2 =
                  arith::CmpFOp::create(b, arith::CmpFPredicate::OGT, v, it[1]);
              Value m2 = arith::SelectOp::create(
                  b, gt1, it[0], arith::SelectOp::create(b, gt2, v, it[1]));
              Value m1 = arith::SelectOp::create(b, gt1, v, it[0]);
              return SmallVector<Value>{m1, m2};
            });
        Value score =
            top2 ? arith::AddFOp::create(b, best[0], best[1]) : best[0];
        e.store(e.ordered(score), gsc, {warp, g});
        return SmallVector<Value>{};
      });
      // Keep the topk_groups best groups: a kept group's score becomes
      // NaN (excluded from the next argmax), every other group's experts
      // are masked with NaN.
      e.loop(zero, e.idx(config.getTopkGroups()), one, {},
             [&](Value, ValueRange) {
               auto [g, v] = e.argmax(
                   groups, [&](Value i) { return e.load(gsc, {warp, i}); });
               (void)v;
               e.store(e.f32(NAN), gsc, {warp, g});
               return SmallVector<Value>{};
             });
      e.loop(zero, nE, one, {}, [&](Value i, ValueRange) {
        Value g = arith::DivUIOp::create(b, i, e.idx(perGroup));
        Value s = e.load(gsc, {warp, g});
        Value kept = arith::CmpFOp::create(b, arith::CmpFPredicate::UNO, s, s);
        e.when(arith::XOrIOp::create(b, kept,
                                     arith::ConstantIntOp::create(b, 1, 1)),
               [&] { e.store(e.f32(NAN), sel, {warp, i}); });
        return SmallVector<Value>{};
      });
    }
    // Top-k over the selection scores; weights from the unbiased scores.
    Value sum =
        e.loop(zero, e.idx(topK), one, {e.f32(0)}, [&](Value j, ValueRange it) {
          auto [best, v] = e.argmax(experts, [&](Value i) {
            return e.load(sel, {warp, i});
          });
          (void)v;
          Value w = e.load(scores, {warp, best});
          e.store(arith::IndexCastOp::create(b, b.getI32Type(), best), ids,
                  {token, j});
          e.store(w, weights, {token, j});
          e.store(e.f32(NAN), sel, {warp, best});
          return SmallVector<Value>{arith::AddFOp::create(b, it[0], w)};
        })[0];
    bool normalize = config.getNormTopkProb();
    double scale = config.getRoutedScaleValue();
    if (normalize || scale != 1.0)
      e.loop(zero, e.idx(topK), one, {}, [&](Value j, ValueRange) {
        Value w = e.load(weights, {token, j});
        if (normalize)
          w = arith::DivFOp::create(b, w, sum);
        if (scale != 1.0)
          w = arith::MulFOp::create(b, w, e.f32(scale));
        e.store(w, weights, {token, j});
        return SmallVector<Value>{};
      });
  });
}

void LayerBuilder::buildCount(gpu::GPUFuncOp func) {
  ImplicitLocOpBuilder b(layer.getLoc(), func.front().getTerminator());
  Emitter e{b};
  Value ids = func.getArgument(0), counts = func.getArgument(1);
  int64_t topK = config.getTopK();
  Value i = arith::AddIOp::create(
      b,
      arith::MulIOp::create(b, gpu::BlockIdOp::create(b, gpu::Dimension::x),
                            e.idx(kCountThreads)),
      gpu::ThreadIdOp::create(b, gpu::Dimension::x));
  Value n =
      arith::MulIOp::create(b, memref::DimOp::create(b, ids, 0), e.idx(topK));
  e.when(e.cmp(arith::CmpIPredicate::ult, i, n), [&] {
    Value id = e.load(ids, {arith::DivUIOp::create(b, i, e.idx(topK)),
                            arith::RemUIOp::create(b, i, e.idx(topK))});
    Value inRange = arith::AndIOp::create(
        b, e.cmp(arith::CmpIPredicate::sge, id, e.i32(0)),
        e.cmp(arith::CmpIPredicate::slt, id, e.i32(config.getExperts())));
    e.when(inRange, [&] {
      memref::AtomicRMWOp::create(
          b, arith::AtomicRMWKind::addi, e.i32(1), counts,
          ValueRange{arith::IndexCastOp::create(b, b.getIndexType(), id)});
    });
  });
}

void LayerBuilder::buildScan(gpu::GPUFuncOp func) {
  ImplicitLocOpBuilder b(layer.getLoc(), func.front().getTerminator());
  Emitter e{b};
  Value ids = func.getArgument(0), counts = func.getArgument(1);
  Value offsets = func.getArgument(2), cursors = func.getArgument(3);
  Value first = e.cmp(arith::CmpIPredicate::eq,
                      gpu::ThreadIdOp::create(b, gpu::Dimension::x), e.idx(0));
  e.when(first, [&] {
    e.store(e.i32(0), offsets, {e.idx(0)});
    Value a = e.i32(alignment);
    e.loop(e.idx(0), e.idx(config.getExperts()), e.idx(1), {e.i32(0)},
           [&](Value ex, ValueRange it) {
             e.store(it[0], cursors, {ex});
             Value c = e.load(counts, {ex});
             Value padded = arith::MulIOp::create(
                 b,
                 arith::DivUIOp::create(
                     b, arith::AddIOp::create(b, c, e.i32(alignment - 1)), a),
                 a);
             Value next = arith::AddIOp::create(b, it[0], padded);
             e.store(next, offsets, {arith::AddIOp::create(b, ex, e.idx(1))});
             return SmallVector<Value>{next};
           });
    if (func.getNumArguments() > 4) {
      Value shared = func.getArgument(4);
      e.store(e.i32(0), shared, {e.idx(0)});
      e.store(arith::IndexCastOp::create(b, b.getI32Type(),
                                         memref::DimOp::create(b, ids, 0)),
              shared, {e.idx(1)});
    }
  });
}

void LayerBuilder::buildScatter(gpu::GPUFuncOp func) {
  ImplicitLocOpBuilder b(layer.getLoc(), func.front().getTerminator());
  Emitter e{b};
  Value x = func.getArgument(0), ids = func.getArgument(1);
  Value weights = func.getArgument(2), cursors = func.getArgument(3);
  Value rows = func.getArgument(4), rowMap = func.getArgument(5);
  Value rowWeight = func.getArgument(6);
  Value pos = func.getWorkgroupAttributions()[0];
  int64_t topK = config.getTopK();
  Value i = gpu::BlockIdOp::create(b, gpu::Dimension::x);
  Value tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
  Value t = arith::DivUIOp::create(b, i, e.idx(topK));
  Value j = arith::RemUIOp::create(b, i, e.idx(topK));
  e.when(e.cmp(arith::CmpIPredicate::eq, tid, e.idx(0)), [&] {
    Value id = e.load(ids, {t, j});
    Value inRange = arith::AndIOp::create(
        b, e.cmp(arith::CmpIPredicate::sge, id, e.i32(0)),
        e.cmp(arith::CmpIPredicate::slt, id, e.i32(config.getExperts())));
    auto ifOp = scf::IfOp::create(b, b.getI32Type(), inRange, true);
    {
      ImplicitLocOpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(ifOp.thenBlock());
      Value p = memref::AtomicRMWOp::create(
          b, arith::AtomicRMWKind::addi, e.i32(1), cursors,
          ValueRange{arith::IndexCastOp::create(b, b.getIndexType(), id)});
      e.store(e.load(weights, {t, j}), rowWeight,
              {arith::IndexCastOp::create(b, b.getIndexType(), p)});
      scf::YieldOp::create(b, p);
      b.setInsertionPointToStart(ifOp.elseBlock());
      scf::YieldOp::create(b, e.i32(-1));
    }
    e.store(ifOp.getResult(0), rowMap, {t, j});
    e.store(ifOp.getResult(0), pos, {e.idx(0)});
  });
  gpu::BarrierOp::create(b);
  Value p = e.load(pos, {e.idx(0)});
  e.when(e.cmp(arith::CmpIPredicate::sge, p, e.i32(0)), [&] {
    Value row = arith::IndexCastOp::create(b, b.getIndexType(), p);
    e.loop(tid, e.idx(config.getHidden()), e.idx(kRowThreads), {},
           [&](Value h, ValueRange) {
             e.store(e.load(x, {t, h}), rows, {row, h});
             return SmallVector<Value>{};
           });
  });
}

void LayerBuilder::buildCombine(gpu::GPUFuncOp func) {
  ImplicitLocOpBuilder b(layer.getLoc(), func.front().getTerminator());
  Emitter e{b};
  Value down = func.getArgument(0), rowMap = func.getArgument(1);
  bool shared = config.hasSharedExperts();
  Value sharedOut = shared ? func.getArgument(2) : Value();
  Value y = func.getArgument(shared ? 3 : 2);
  Type outType = cast<MemRefType>(y.getType()).getElementType();
  Value t = gpu::BlockIdOp::create(b, gpu::Dimension::x);
  Value tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
  e.loop(
      tid, e.idx(config.getHidden()), e.idx(kRowThreads), {},
      [&](Value h, ValueRange) {
        Value acc = e.loop(
            e.idx(0), e.idx(config.getTopK()), e.idx(1), {e.f32(0)},
            [&](Value j, ValueRange it) {
              Value r = e.load(rowMap, {t, j});
              auto ifOp = scf::IfOp::create(
                  b, b.getF32Type(),
                  e.cmp(arith::CmpIPredicate::sge, r, e.i32(0)), true);
              {
                ImplicitLocOpBuilder::InsertionGuard guard(b);
                b.setInsertionPointToStart(ifOp.thenBlock());
                Value v = e.toF32(e.load(
                    down,
                    {arith::IndexCastOp::create(b, b.getIndexType(), r), h}));
                scf::YieldOp::create(
                    b, ValueRange{arith::AddFOp::create(b, it[0], v)});
                b.setInsertionPointToStart(ifOp.elseBlock());
                scf::YieldOp::create(b, it[0]);
              }
              return SmallVector<Value>{ifOp.getResult(0)};
            })[0];
        if (shared)
          acc =
              arith::AddFOp::create(b, acc, e.toF32(e.load(sharedOut, {t, h})));
        e.store(arith::TruncFOp::create(b, outType, acc), y, {t, h});
        return SmallVector<Value>{};
      });
}

void LayerBuilder::buildGemm(gpu::GPUFuncOp func, moegpu::Epilogue epilogue) {
  OpBuilder b(func.front().getTerminator());
  Value scale =
      epilogue == moegpu::Epilogue::RowScale ? func.getArgument(4) : Value();
  moegpu::GroupedGemmOp::create(b, layer.getLoc(), func.getArgument(0),
                                func.getArgument(1), func.getArgument(2),
                                func.getArgument(3), scale,
                                moegpu::EpilogueAttr::get(ctx, epilogue),
                                moegpu::TileAttr(), moegpu::SmRangeAttr());
}

//===----------------------------------------------------------------------===//
// The training step: SIMT kernels around the forward schedule
//===----------------------------------------------------------------------===//
//
// One CTA per dispatched row, token or weight row, its threads striding
// over the row's columns; sums in f32. Names follow the host's training
// step (moe/Transforms/Autodiff.h), whose gradients are checked against
// finite differences; these kernels compute the same quantities.

/// Row of the packed [G, 2F, H] gate/up weight that holds gate row `f`
/// (blocks of 8 gate rows, then 8 up rows); its up row is 8 further.
static Value gateRow(Emitter &e, Value f) {
  return e.addi(e.muli(e.divi(f, e.idx(8)), e.idx(16)), e.remi(f, e.idx(8)));
}

/// dst[i] = src[i] in dst's element type, over every element of two
/// memrefs of equal size.
void LayerBuilder::buildConvert(gpu::GPUFuncOp func) {
  ImplicitLocOpBuilder b(layer.getLoc(), func.front().getTerminator());
  Emitter e{b};
  Value src = func.getArgument(0), dst = func.getArgument(1);
  Type type = cast<MemRefType>(dst.getType()).getElementType();
  Value i = e.globalThread(kCountThreads);
  Value n = e.idx(cast<MemRefType>(src.getType()).getNumElements());
  e.when(e.cmp(arith::CmpIPredicate::ult, i, n), [&] {
    e.store(e.truncTo(type, e.load(src, e.delinearize(i, src))), dst,
            e.delinearize(i, dst));
  });
}

/// The packed [G, 2F, H] compute weight from f32 gate and up weights
/// ([G, F, H], or [F, H] for one group).
void LayerBuilder::buildPack(gpu::GPUFuncOp func) {
  ImplicitLocOpBuilder b(layer.getLoc(), func.front().getTerminator());
  Emitter e{b};
  Value gate = func.getArgument(0), up = func.getArgument(1);
  Value packed = func.getArgument(2);
  auto type = cast<MemRefType>(packed.getType());
  Value i = e.globalThread(kCountThreads);
  e.when(e.cmp(arith::CmpIPredicate::ult, i, e.idx(type.getNumElements())),
         [&] {
           SmallVector<Value> at = e.delinearize(i, packed);
           Value c = at[1];
           Value inBlock = e.remi(c, e.idx(16));
           Value f = e.addi(e.muli(e.divi(c, e.idx(16)), e.idx(8)),
                            e.remi(inBlock, e.idx(8)));
           Value isGate = e.cmp(arith::CmpIPredicate::ult, inBlock, e.idx(8));
           bool grouped = cast<MemRefType>(gate.getType()).getRank() == 3;
           SmallVector<Value> src{f, at[2]};
           if (grouped)
             src.insert(src.begin(), at[0]);
           Value v = arith::SelectOp::create(b, isGate, e.load(gate, src),
                                             e.load(up, src));
           e.store(e.truncTo(type.getElementType(), v), packed, at);
         });
}

/// dy = 2 (y - target) / (T * H); loss += sum of (y - target)^2 / (T * H),
/// T every rank's tokens (hyper[kHyperTokens], which the runtime fills).
void LayerBuilder::buildLoss(gpu::GPUFuncOp func) {
  ImplicitLocOpBuilder b(layer.getLoc(), func.front().getTerminator());
  Emitter e{b};
  Value y = func.getArgument(0), target = func.getArgument(1);
  Value hyper = func.getArgument(2), dy = func.getArgument(3);
  Value loss = func.getArgument(4);
  int64_t hidden = config.getHidden();
  Value t = e.block();
  Value count = e.mul(e.load(hyper, {e.idx(kHyperTokens)}),
                      e.f32(static_cast<double>(hidden)));
  Value partial = e.loop(
      e.thread(), e.idx(hidden), e.idx(kRowThreads), {e.f32(0)},
      [&](Value h, ValueRange it) {
        Value d = e.sub(e.toF32(e.load(y, {t, h})), e.load(target, {t, h}));
        e.store(e.div(e.mul(e.f32(2.0), d), count), dy, {t, h});
        return SmallVector<Value>{e.add(it[0], e.div(e.mul(d, d), count))};
      })[0];
  e.atomicAdd(partial, loss, {e.idx(0)});
}

/// row_token[r] = t * k + j + 1 for the row of assignment (t, j); padding
/// rows keep 0.
void LayerBuilder::buildRowTokens(gpu::GPUFuncOp func) {
  ImplicitLocOpBuilder b(layer.getLoc(), func.front().getTerminator());
  Emitter e{b};
  Value rowMap = func.getArgument(0), rowToken = func.getArgument(1);
  int64_t topK = config.getTopK();
  Value i = e.globalThread(kCountThreads);
  Value n = e.muli(e.dim(rowMap, 0), e.idx(topK));
  e.when(e.cmp(arith::CmpIPredicate::ult, i, n), [&] {
    Value r = e.load(rowMap, {e.divi(i, e.idx(topK)), e.remi(i, e.idx(topK))});
    e.when(e.cmp(arith::CmpIPredicate::sge, r, e.i32(0)), [&] {
      Value code =
          arith::IndexCastOp::create(b, b.getI32Type(), e.addi(i, e.idx(1)));
      e.store(code, rowToken, {e.index(r)});
    });
  });
}

/// The group of row `r` among `groups` ([G + 1] i32 offsets): the g with
/// groups[g] <= r < groups[g + 1] (a short scan: G is an expert count).
static Value groupOf(Emitter &e, ImplicitLocOpBuilder &b, Value groups,
                     Value r) {
  int64_t count = cast<MemRefType>(groups.getType()).getDimSize(0) - 1;
  Value rI32 = arith::IndexCastOp::create(b, b.getI32Type(), r);
  return e.loop(
      e.idx(1), e.idx(count), e.idx(1), {e.idx(0)},
      [&](Value g, ValueRange it) {
        Value past =
            e.cmp(arith::CmpIPredicate::sge, rI32, e.load(groups, {g}));
        return SmallVector<Value>{arith::SelectOp::create(b, past, g, it[0])};
      })[0];
}

/// Whether row `r` lies inside `groups`' last offset (rows past it are
/// capacity nobody wrote).
static Value inGroups(Emitter &e, Value groups, Value r) {
  int64_t count = cast<MemRefType>(groups.getType()).getDimSize(0) - 1;
  return e.cmp(arith::CmpIPredicate::ult, r,
               e.index(e.load(groups, {e.idx(count)})));
}

/// row_dy[r] = dy[t] for every dispatched row r of token t (padding rows
/// stay as the memset left them: zero).
void LayerBuilder::buildGatherRowDy(gpu::GPUFuncOp func) {
  ImplicitLocOpBuilder b(layer.getLoc(), func.front().getTerminator());
  Emitter e{b};
  Value dy = func.getArgument(0), rowToken = func.getArgument(1);
  Value offsets = func.getArgument(2), rowDy = func.getArgument(3);
  Value r = e.block();
  e.when(inGroups(e, offsets, r), [&] {
    Value code = e.load(rowToken, {r});
    e.when(e.cmp(arith::CmpIPredicate::sgt, code, e.i32(0)), [&] {
      Value t = e.divi(e.index(arith::SubIOp::create(b, code, e.i32(1))),
                       e.idx(config.getTopK()));
      e.columns(config.getHidden(), [&](Value h) {
        e.store(e.load(dy, {t, h}), rowDy, {r, h});
      });
    });
  });
}

/// dtw[t, j] = dtw_row[r] for the row r of assignment (t, j).
void LayerBuilder::buildScatterRowWeightGrad(gpu::GPUFuncOp func) {
  ImplicitLocOpBuilder b(layer.getLoc(), func.front().getTerminator());
  Emitter e{b};
  Value rowGrad = func.getArgument(0), rowToken = func.getArgument(1);
  Value offsets = func.getArgument(2), dtw = func.getArgument(3);
  int64_t topK = config.getTopK();
  Value i = e.globalThread(kCountThreads);
  e.when(inGroups(e, offsets, i), [&] {
    Value code = e.load(rowToken, {i});
    e.when(e.cmp(arith::CmpIPredicate::sgt, code, e.i32(0)), [&] {
      Value slot = e.index(arith::SubIOp::create(b, code, e.i32(1)));
      e.store(e.load(rowGrad, {i}), dtw,
              {e.divi(slot, e.idx(topK)), e.remi(slot, e.idx(topK))});
    });
  });
}

/// Per row r of group g (an expert's rows, or every token for the shared
/// experts) and FFN column f: the gate and up pre-activations g, u (the
/// row times the compute weights), gs = row_dy[r] . W2[g][:, f]; then
/// d_act = w * gs, dg = d_act * u * silu'(g), du = d_act * silu(g) into
/// dgu[r] = [dg, du] and, with routing weights, the weight's gradient
/// sum_f act * gs into row_grad[r]. Padding rows have zero rows, dy and
/// weight, so they contribute nothing.
void LayerBuilder::buildActGrad(gpu::GPUFuncOp func, bool weighted) {
  ImplicitLocOpBuilder b(layer.getLoc(), func.front().getTerminator());
  Emitter e{b};
  int64_t hidden = config.getHidden();
  // rows, w13, w2, row_dy, groups, dgu [, weight, row_grad]
  Value rows = func.getArgument(0), w13 = func.getArgument(1);
  Value w2 = func.getArgument(2), rowDy = func.getArgument(3);
  Value groups = func.getArgument(4), dgu = func.getArgument(5);
  int64_t ffn = cast<MemRefType>(dgu.getType()).getDimSize(1) / 2;
  Value r = e.block();
  e.when(inGroups(e, groups, r), [&] {
    Value ex = groupOf(e, b, groups, r);
    Value weight = weighted ? e.load(func.getArgument(6), {r}) : e.f32(1.0);
    Value partial = e.loop(
        e.thread(), e.idx(ffn), e.idx(kRowThreads), {e.f32(0)},
        [&](Value f, ValueRange it) {
          Value gr = gateRow(e, f), ur = e.addi(gateRow(e, f), e.idx(8));
          ValueRange sums = e.loop(
              e.idx(0), e.idx(hidden), e.idx(1), {e.f32(0), e.f32(0), e.f32(0)},
              [&](Value h, ValueRange acc) {
                Value xv = e.toF32(e.load(rows, {r, h}));
                return SmallVector<Value>{
                    e.add(acc[0], e.mul(xv, e.toF32(e.load(w13, {ex, gr, h})))),
                    e.add(acc[1], e.mul(xv, e.toF32(e.load(w13, {ex, ur, h})))),
                    e.add(acc[2], e.mul(e.load(rowDy, {r, h}),
                                        e.toF32(e.load(w2, {ex, h, f}))))};
              });
          Value g = sums[0], u = sums[1], gs = sums[2];
          Value sig = e.sigmoid(g);
          Value silu = e.mul(g, sig);
          Value dact = e.mul(weight, gs);
          // silu'(g) = sig * (1 + g * (1 - sig))
          Value dsilu =
              e.mul(sig, e.add(e.f32(1.0), e.mul(g, e.sub(e.f32(1.0), sig))));
          e.store(e.mul(e.mul(dact, u), dsilu), dgu, {r, f});
          e.store(e.mul(dact, silu), dgu, {r, e.addi(f, e.idx(ffn))});
          return SmallVector<Value>{e.add(it[0], e.mul(e.mul(silu, u), gs))};
        })[0];
    if (weighted)
      e.atomicAdd(partial, func.getArgument(7), {r});
  });
}

/// d_rows[r, h] = sum_f dg[r, f] Wg[g][f, h] + du[r, f] Wu[g][f, h].
void LayerBuilder::buildRowsGrad(gpu::GPUFuncOp func) {
  ImplicitLocOpBuilder b(layer.getLoc(), func.front().getTerminator());
  Emitter e{b};
  // w13, dgu, groups, drows
  Value w13 = func.getArgument(0), dgu = func.getArgument(1);
  Value groups = func.getArgument(2), drows = func.getArgument(3);
  int64_t ffn = cast<MemRefType>(dgu.getType()).getDimSize(1) / 2;
  Value r = e.block();
  e.when(inGroups(e, groups, r), [&] {
    Value ex = groupOf(e, b, groups, r);
    e.columns(config.getHidden(), [&](Value h) {
      Value acc = e.loop(e.idx(0), e.idx(ffn), e.idx(1), {e.f32(0)},
                         [&](Value f, ValueRange it) {
                           Value gr = gateRow(e, f);
                           Value ur = e.addi(gr, e.idx(8));
                           Value dg = e.load(dgu, {r, f});
                           Value du = e.load(dgu, {r, e.addi(f, e.idx(ffn))});
                           Value v = e.add(
                               e.mul(dg, e.toF32(e.load(w13, {ex, gr, h}))),
                               e.mul(du, e.toF32(e.load(w13, {ex, ur, h}))));
                           return SmallVector<Value>{e.add(it[0], v)};
                         })[0];
      e.store(acc, drows, {r, h});
    });
  });
}

/// The sum over the rows of group `g` of `body(r)`.
static Value sumOverGroup(Emitter &e, Value groups, Value g,
                          function_ref<Value(Value)> body) {
  Value begin = e.index(e.load(groups, {g}));
  Value end = e.index(e.load(groups, {e.addi(g, e.idx(1))}));
  return e.loop(begin, end, e.idx(1), {e.f32(0)}, [&](Value r, ValueRange it) {
    return SmallVector<Value>{e.add(it[0], body(r))};
  })[0];
}

/// dW2[g, h, f] = sum over group g's rows of (w * row_dy[r, h]) * act[r, f]
/// (grad [H, F] for one group).
void LayerBuilder::buildDownGrad(gpu::GPUFuncOp func, bool weighted) {
  ImplicitLocOpBuilder b(layer.getLoc(), func.front().getTerminator());
  Emitter e{b};
  int64_t hidden = config.getHidden();
  // act, row_dy, groups, grad [, weight]
  Value act = func.getArgument(0), rowDy = func.getArgument(1);
  Value groups = func.getArgument(2), grad = func.getArgument(3);
  int64_t ffn = cast<MemRefType>(act.getType()).getDimSize(1);
  bool stacked = cast<MemRefType>(grad.getType()).getRank() == 3;
  Value g = e.divi(e.block(), e.idx(hidden));
  Value h = e.remi(e.block(), e.idx(hidden));
  e.columns(ffn, [&](Value f) {
    Value acc = sumOverGroup(e, groups, g, [&](Value r) {
      Value dyv = e.load(rowDy, {r, h});
      if (weighted)
        dyv = e.mul(e.load(func.getArgument(4), {r}), dyv);
      return e.mul(dyv, e.toF32(e.load(act, {r, f})));
    });
    if (stacked)
      e.store(acc, grad, {g, h, f});
    else
      e.store(acc, grad, {h, f});
  });
}

/// dWg[g, c, h] (c < F) and dWu[g, c - F, h] = sum over group g's rows of
/// dgu[r, c] * rows[r, h] (grads [F, H] for one group).
void LayerBuilder::buildGateUpGrad(gpu::GPUFuncOp func) {
  ImplicitLocOpBuilder b(layer.getLoc(), func.front().getTerminator());
  Emitter e{b};
  // dgu, rows, groups, gate grad, up grad
  Value dgu = func.getArgument(0), rows = func.getArgument(1);
  Value groups = func.getArgument(2);
  Value gateGrad = func.getArgument(3), upGrad = func.getArgument(4);
  int64_t ffn = cast<MemRefType>(dgu.getType()).getDimSize(1) / 2;
  bool stacked = cast<MemRefType>(gateGrad.getType()).getRank() == 3;
  Value g = e.divi(e.block(), e.idx(2 * ffn));
  Value c = e.remi(e.block(), e.idx(2 * ffn));
  Value isGate = e.cmp(arith::CmpIPredicate::ult, c, e.idx(ffn));
  Value f = arith::SelectOp::create(b, isGate, c,
                                    arith::SubIOp::create(b, c, e.idx(ffn)));
  e.columns(config.getHidden(), [&](Value h) {
    Value acc = sumOverGroup(e, groups, g, [&](Value r) {
      return e.mul(e.load(dgu, {r, c}), e.toF32(e.load(rows, {r, h})));
    });
    SmallVector<Value> at{f, h};
    if (stacked)
      at.insert(at.begin(), g);
    auto ifOp = scf::IfOp::create(b, isGate, /*withElseRegion=*/true);
    {
      ImplicitLocOpBuilder::InsertionGuard guard(b);
      b.setInsertionPoint(ifOp.thenBlock()->getTerminator());
      e.store(acc, gateGrad, at);
      b.setInsertionPoint(ifOp.elseBlock()->getTerminator());
      e.store(acc, upGrad, at);
    }
  });
}

/// One thread per token: the scores again (router logits, then sigmoid or
/// softmax) into dl[t], the selected scores' gradient from the routing
/// weights' (moe.topk_grad), then the logits' (moe.router_grad), in place.
void LayerBuilder::buildRouteGrad(gpu::GPUFuncOp func) {
  ImplicitLocOpBuilder b(layer.getLoc(), func.front().getTerminator());
  Emitter e{b};
  int64_t hidden = config.getHidden(), experts = config.getExperts();
  int64_t topK = config.getTopK();
  bool sigmoid = config.getScoring() == ScoringFunc::Sigmoid;
  bool normalize = config.getNormTopkProb();
  double scale = config.getRoutedScaleValue();
  Value x = func.getArgument(0), wr = func.getArgument(1);
  Value ids = func.getArgument(2), dtw = func.getArgument(3);
  Value dl = func.getArgument(4);
  Value t = e.globalThread(kCountThreads);
  Value zero = e.idx(0), one = e.idx(1), nE = e.idx(experts), nK = e.idx(topK);
  e.when(e.cmp(arith::CmpIPredicate::ult, t, e.dim(x, 0)), [&] {
    e.loop(zero, nE, one, {}, [&](Value ex, ValueRange) {
      Value acc = e.loop(
          zero, e.idx(hidden), one, {e.f32(0)}, [&](Value h, ValueRange it) {
            Value p =
                e.mul(e.toF32(e.load(x, {t, h})), e.toF32(e.load(wr, {ex, h})));
            return SmallVector<Value>{e.add(it[0], p)};
          })[0];
      e.store(sigmoid ? e.sigmoid(acc) : acc, dl, {t, ex});
      return SmallVector<Value>{};
    });
    if (!sigmoid) {
      Value max = e.loop(
          zero, nE, one, {e.f32(-INFINITY)}, [&](Value i, ValueRange it) {
            return SmallVector<Value>{
                arith::MaximumFOp::create(b, it[0], e.load(dl, {t, i}))};
          })[0];
      Value sum =
          e.loop(zero, nE, one, {e.f32(0)}, [&](Value i, ValueRange it) {
            Value v = e.exp(e.sub(e.load(dl, {t, i}), max));
            e.store(v, dl, {t, i});
            return SmallVector<Value>{e.add(it[0], v)};
          })[0];
      e.loop(zero, nE, one, {}, [&](Value i, ValueRange) {
        e.store(e.div(e.load(dl, {t, i}), sum), dl, {t, i});
        return SmallVector<Value>{};
      });
    }
    auto selected = [&](Value j) {
      return e.load(dl, {t, e.index(e.load(ids, {t, j}))});
    };
    // Z and sum_j dw_j s_j over the selected experts.
    ValueRange zs = e.loop(
        zero, nK, one, {e.f32(0), e.f32(0)}, [&](Value j, ValueRange it) {
          Value sj = selected(j);
          return SmallVector<Value>{
              e.add(it[0], sj), e.add(it[1], e.mul(e.load(dtw, {t, j}), sj))};
        });
    Value z = normalize ? zs[0] : e.f32(1.0);
    auto scoreGrad = [&](Value j) {
      Value dw = e.load(dtw, {t, j});
      if (normalize)
        return e.div(e.mul(e.f32(scale), e.sub(dw, e.div(zs[1], z))), z);
      return e.mul(e.f32(scale), dw);
    };
    // softmax: sum_e ds_e s_e, nonzero only for selected experts.
    Value dot = e.loop(zero, nK, one, {e.f32(0)}, [&](Value j, ValueRange it) {
      return SmallVector<Value>{e.add(it[0], e.mul(scoreGrad(j), selected(j)))};
    })[0];
    e.loop(zero, nE, one, {}, [&](Value ex, ValueRange) {
      Value exI32 = arith::IndexCastOp::create(b, b.getI32Type(), ex);
      Value ds = e.loop(zero, nK, one, {e.f32(0)}, [&](Value j, ValueRange it) {
        Value hit = e.cmp(arith::CmpIPredicate::eq, e.load(ids, {t, j}), exI32);
        return SmallVector<Value>{
            arith::SelectOp::create(b, hit, scoreGrad(j), it[0])};
      })[0];
      Value s = e.load(dl, {t, ex});
      Value g = sigmoid ? e.mul(e.mul(ds, s), e.sub(e.f32(1.0), s))
                        : e.mul(s, e.sub(ds, dot));
      e.store(g, dl, {t, ex});
      return SmallVector<Value>{};
    });
  });
}

/// dx[t, h] = sum_j d_rows[row_map[t, j], h] (+ the shared experts' input
/// gradient) + sum_e dl[t, e] * router[e, h].
void LayerBuilder::buildInputGrad(gpu::GPUFuncOp func) {
  ImplicitLocOpBuilder b(layer.getLoc(), func.front().getTerminator());
  Emitter e{b};
  bool shared = config.hasSharedExperts();
  // drows, row_map, dl, router [, shared dx], dx
  Value drows = func.getArgument(0), rowMap = func.getArgument(1);
  Value dl = func.getArgument(2), wr = func.getArgument(3);
  Value sharedDx = shared ? func.getArgument(4) : Value();
  Value dx = func.getArgument(shared ? 5 : 4);
  Value t = e.block();
  e.columns(config.getHidden(), [&](Value h) {
    Value acc = e.loop(
        e.idx(0), e.idx(config.getTopK()), e.idx(1), {e.f32(0)},
        [&](Value j, ValueRange it) {
          Value r = e.load(rowMap, {t, j});
          auto ifOp = scf::IfOp::create(
              b, b.getF32Type(), e.cmp(arith::CmpIPredicate::sge, r, e.i32(0)),
              true);
          ImplicitLocOpBuilder::InsertionGuard guard(b);
          b.setInsertionPointToStart(ifOp.thenBlock());
          scf::YieldOp::create(
              b, ValueRange{e.add(it[0], e.load(drows, {e.index(r), h}))});
          b.setInsertionPointToStart(ifOp.elseBlock());
          scf::YieldOp::create(b, it[0]);
          return SmallVector<Value>{ifOp.getResult(0)};
        })[0];
    if (shared)
      acc = e.add(acc, e.load(sharedDx, {t, h}));
    acc = e.loop(
        e.idx(0), e.idx(config.getExperts()), e.idx(1), {acc},
        [&](Value ex, ValueRange it) {
          Value p = e.mul(e.load(dl, {t, ex}), e.toF32(e.load(wr, {ex, h})));
          return SmallVector<Value>{e.add(it[0], p)};
        })[0];
    e.store(acc, dx, {t, h});
  });
}

/// dRouter[e, h] = sum_t dl[t, e] * x[t, h].
void LayerBuilder::buildRouterGrad(gpu::GPUFuncOp func) {
  ImplicitLocOpBuilder b(layer.getLoc(), func.front().getTerminator());
  Emitter e{b};
  Value dl = func.getArgument(0), x = func.getArgument(1);
  Value grad = func.getArgument(2);
  Value ex = e.block();
  e.columns(config.getHidden(), [&](Value h) {
    Value acc = e.loop(
        e.idx(0), e.dim(x, 0), e.idx(1), {e.f32(0)},
        [&](Value t, ValueRange it) {
          Value p = e.mul(e.load(dl, {t, ex}), e.toF32(e.load(x, {t, h})));
          return SmallVector<Value>{e.add(it[0], p)};
        })[0];
    e.store(acc, grad, {ex, h});
  });
}

/// load[e] = this rank's tokens routed to expert e.
void LayerBuilder::buildLoad(gpu::GPUFuncOp func) {
  ImplicitLocOpBuilder b(layer.getLoc(), func.front().getTerminator());
  Emitter e{b};
  Value counts = func.getArgument(0), load = func.getArgument(1);
  Value ex = e.globalThread(kCountThreads);
  e.when(e.cmp(arith::CmpIPredicate::ult, ex, e.idx(config.getExperts())), [&] {
    e.store(arith::SIToFPOp::create(b, b.getF32Type(), e.load(counts, {ex})),
            load, {ex});
  });
}

/// bias.next = bias + gamma * sign(T * k / E - load), T every rank's
/// tokens (hyper[kHyperTokens]) and load summed over the ranks.
void LayerBuilder::buildBias(gpu::GPUFuncOp func) {
  ImplicitLocOpBuilder b(layer.getLoc(), func.front().getTerminator());
  Emitter e{b};
  Value load = func.getArgument(0), hyper = func.getArgument(1);
  Value bias = func.getArgument(2), next = func.getArgument(3);
  int64_t experts = config.getExperts();
  Value ex = e.globalThread(kCountThreads);
  e.when(e.cmp(arith::CmpIPredicate::ult, ex, e.idx(experts)), [&] {
    Value tokens = e.load(hyper, {e.idx(kHyperTokens)});
    Value mean =
        e.div(e.mul(tokens, e.f32(static_cast<double>(config.getTopK()))),
              e.f32(static_cast<double>(experts)));
    Value gamma = e.load(hyper, {e.idx(kHyperGamma)});
    Value d = e.sub(mean, e.load(load, {ex}));
    Value above =
        arith::CmpFOp::create(b, arith::CmpFPredicate::OGT, d, e.f32(0));
    Value below =
        arith::CmpFOp::create(b, arith::CmpFPredicate::OLT, d, e.f32(0));
    Value sign = arith::SelectOp::create(
        b, above, e.f32(1.0),
        arith::SelectOp::create(b, below, e.f32(-1.0), e.f32(0)));
    e.store(e.add(e.load(bias, {ex}), e.mul(gamma, sign)), next, {ex});
  });
}

/// AdamW with bias-corrected moments on one f32 master weight:
/// (p, m, v, grad, hyper) -> (p.next, m.next, v.next).
void LayerBuilder::buildAdamW(gpu::GPUFuncOp func) {
  ImplicitLocOpBuilder b(layer.getLoc(), func.front().getTerminator());
  Emitter e{b};
  Value p = func.getArgument(0), m = func.getArgument(1);
  Value v = func.getArgument(2), grad = func.getArgument(3);
  Value hyper = func.getArgument(4);
  Value pNext = func.getArgument(5), mNext = func.getArgument(6);
  Value vNext = func.getArgument(7);
  auto type = cast<MemRefType>(p.getType());
  Value i = e.globalThread(kCountThreads);
  e.when(e.cmp(arith::CmpIPredicate::ult, i, e.idx(type.getNumElements())),
         [&] {
           auto h = [&](TrainHyper k) { return e.load(hyper, {e.idx(k)}); };
           Value lr = h(kHyperLearningRate), step = h(kHyperStep);
           Value beta1 = h(kHyperBeta1), beta2 = h(kHyperBeta2);
           Value eps = h(kHyperEpsilon), decay = h(kHyperWeightDecay);
           Value one = e.f32(1.0);
           SmallVector<Value> at = e.delinearize(i, p);
           Value pv = e.load(p, at), g = e.load(grad, at);
           Value m2 =
               e.add(e.mul(beta1, e.load(m, at)), e.mul(e.sub(one, beta1), g));
           Value v2 = e.add(e.mul(beta2, e.load(v, at)),
                            e.mul(e.sub(one, beta2), e.mul(g, g)));
           Value mHat = e.div(m2, e.sub(one, e.powi(beta1, step)));
           Value vHat = e.div(v2, e.sub(one, e.powi(beta2, step)));
           Value update =
               e.add(e.div(mHat, e.add(e.sqrt(vHat), eps)), e.mul(decay, pv));
           e.store(e.sub(pv, e.mul(lr, update)), pNext, at);
           e.store(m2, mNext, at);
           e.store(v2, vNext, at);
         });
}

void LayerBuilder::buildTraining() {
  int64_t h = config.getHidden(), e = config.getExperts();
  int64_t f = config.getFfn(), s = config.getSharedFfnTotal();
  bool shared = config.hasSharedExperts(), bias = config.getScoreBias();
  auto ep = static_cast<int64_t>(layer.getEpSize());
  int64_t local = e / ep;
  Type f32 = Builder(ctx).getF32Type(), i32 = Builder(ctx).getI32Type();

  // The step's arguments: x and score_bias are the forward pass's own
  // buffers; the others are `arg.<name>`.
  std::vector<TrainArgument> args = listTrainArguments(layer);
  for (const TrainArgument &arg : args) {
    if (arg.name == "x" || arg.name == "score_bias")
      continue;
    SmallVector<int64_t> shape;
    for (int64_t d : arg.type.getShape())
      shape.push_back(ShapedType::isDynamic(d) ? kTokens : d);
    addBuffer("arg." + arg.name, arg.type.getElementType(), shape,
              "arg:" + arg.name);
  }
  auto arg = [](StringRef name) { return ("arg." + name).str(); };
  addBuffer("dy", f32, {kTokens, h}, "scratch");
  addBuffer("row_token", i32, {kRows}, "scratch");
  addBuffer("row_dy", f32, {kRows, h}, "scratch");
  addBuffer("row_weight_grad", f32, {kRows}, "scratch");
  addBuffer("dtw", f32, {kTokens, config.getTopK()}, "scratch");
  addBuffer("drows", f32, {kRows, h}, "scratch");
  addBuffer("dl", f32, {kTokens, e}, "scratch");
  if (shared) {
    addBuffer("shared_dgu", f32, {kTokens, 2 * s}, "scratch");
    addBuffer("shared_dx", f32, {kTokens, h}, "scratch");
  }
  // The experts' side: this rank's dispatched rows, or with expert
  // parallelism the rows it received, grouped by local expert.
  bool sharded = ep > 1;
  int64_t expertRows = sharded ? kReceivedRows : kRows;
  std::string xRows = sharded ? "ep_rows" : "rows";
  std::string xWeight = sharded ? "ep_row_weight" : "row_weight";
  std::string xGroups = sharded ? "ep_group_offsets" : "offsets";
  std::string xAct = sharded ? "ep_act" : "act";
  std::string xDy = sharded ? "ep_row_dy" : "row_dy";
  std::string xDrows = sharded ? "ep_drows" : "drows";
  std::string xWeightGrad = sharded ? "ep_row_weight_grad" : "row_weight_grad";
  addBuffer("dgu", f32, {expertRows, 2 * f}, "scratch");
  if (sharded) {
    addBuffer("ep_row_dy", f32, {kReceivedRows, h}, "scratch");
    addBuffer("ep_row_weight_grad", f32, {kReceivedRows}, "scratch");
    addBuffer("ep_drows", f32, {kReceivedRows, h}, "scratch");
  }
  moegpu::GridAttr expertGrid = gridOf(sharded ? moegpu::GridKind::ReceivedRows : moegpu::GridKind::Rows);

  steps = &training.getBody().front();
  auto elementGrid = [&](int64_t n) {
    return fixedGrid((n + kCountThreads - 1) / kCountThreads);
  };
  // Compute copies of the master weights.
  auto convert = [&](StringRef name, StringRef master, StringRef compute) {
    std::string src = arg(master), dst = compute.str();
    buildConvert(addKernel(name, {src, dst},
                           elementGrid(memrefType(src).getNumElements()),
                           kCountThreads));
  };
  convert("train_router_weight", "router_weight", "router_weight");
  buildPack(addKernel(
      "train_pack_gate_up", {arg("gate_weight"), arg("up_weight"), "w13"},
      elementGrid(memrefType("w13").getNumElements()), kCountThreads));
  convert("train_down_weight", "down_weight", "w2");
  if (shared) {
    buildPack(addKernel(
        "train_pack_shared_gate_up",
        {arg("shared_gate_weight"), arg("shared_up_weight"), "ws13"},
        elementGrid(memrefType("ws13").getNumElements()), kCountThreads));
    convert("train_shared_down_weight", "shared_down_weight", "ws2");
  }
  // The forward pass, with the padding rows of the dispatched rows and
  // their weights zeroed: the backward pass sums over whole segments.
  for (Operation &step : forward.getBody().front()) {
    if (auto launch = dyn_cast<moegpu::LaunchOp>(step);
        launch && launch.getKernel().getLeafReference() == "dispatch_scatter") {
      addMemset("rows");
      addMemset("row_weight");
    }
    OpBuilder b = stepBuilder();
    b.clone(step);
  }
  // Loss, and dy of every dispatched row.
  addMemset(arg("loss"));
  buildLoss(addKernel("train_loss",
                      {"y", arg("target"), arg("hyper"), "dy", arg("loss")},
                      gridOf(moegpu::GridKind::Tokens, 1), kRowThreads));
  addMemset("row_token");
  buildRowTokens(addKernel("train_row_tokens", {"row_map", "row_token"},
                           gridOf(moegpu::GridKind::Assignments, kCountThreads),
                           kCountThreads));
  addMemset("row_dy");
  buildGatherRowDy(addKernel("train_gather_row_dy",
                             {"dy", "row_token", "offsets", "row_dy"},
                             gridOf(moegpu::GridKind::Rows), kRowThreads));
  if (sharded)
    addExchange(moegpu::ExchangeKind::DispatchRows, {"row_dy", "ep_row_dy"});
  // The experts.
  addMemset(xWeightGrad);
  buildActGrad(
      addKernel("train_expert_act_grad",
                {xRows, "w13", "w2", xDy, xGroups, "dgu", xWeight, xWeightGrad},
                expertGrid, kRowThreads),
      /*weighted=*/true);
  buildRowsGrad(addKernel("train_expert_rows_grad",
                          {"w13", "dgu", xGroups, xDrows}, expertGrid,
                          kRowThreads));
  buildDownGrad(
      addKernel("train_expert_down_grad",
                {xAct, xDy, xGroups, arg("down_weight.grad"), xWeight},
                fixedGrid(local * h), kRowThreads),
      /*weighted=*/true);
  buildGateUpGrad(addKernel(
      "train_expert_gate_up_grad",
      {"dgu", xRows, xGroups, arg("gate_weight.grad"), arg("up_weight.grad")},
      fixedGrid(local * 2 * f), kRowThreads));
  if (sharded) {
    addExchange(moegpu::ExchangeKind::CombineRows, {"ep_drows", "drows"});
    addExchange(moegpu::ExchangeKind::CombineRows, {"ep_row_weight_grad", "row_weight_grad"});
  }
  addMemset("dtw");
  buildScatterRowWeightGrad(
      addKernel("train_scatter_row_weight_grad",
                {"row_weight_grad", "row_token", "offsets", "dtw"},
                gridOf(moegpu::GridKind::Rows, kCountThreads), kCountThreads));
  // Shared experts: one group of every token, weight 1.
  if (shared) {
    buildActGrad(
        addKernel("train_shared_act_grad",
                  {"x", "ws13", "ws2", "dy", "shared_offsets", "shared_dgu"},
                  gridOf(moegpu::GridKind::Tokens, 1), kRowThreads),
        /*weighted=*/false);
    buildRowsGrad(
        addKernel("train_shared_rows_grad",
                  {"ws13", "shared_dgu", "shared_offsets", "shared_dx"},
                  gridOf(moegpu::GridKind::Tokens, 1), kRowThreads));
    buildDownGrad(addKernel("train_shared_down_grad",
                            {"shared_act", "dy", "shared_offsets",
                             arg("shared_down_weight.grad")},
                            fixedGrid(h), kRowThreads),
                  /*weighted=*/false);
    buildGateUpGrad(addKernel("train_shared_gate_up_grad",
                              {"shared_dgu", "x", "shared_offsets",
                               arg("shared_gate_weight.grad"),
                               arg("shared_up_weight.grad")},
                              fixedGrid(2 * s), kRowThreads));
  }
  // Router and input.
  buildRouteGrad(addKernel("train_route_grad",
                           {"x", "router_weight", "topk_ids", "dtw", "dl"},
                           gridOf(moegpu::GridKind::Tokens, kCountThreads), kCountThreads));
  SmallVector<StringRef> dxArgs{"drows", "row_map", "dl", "router_weight"};
  std::string xGrad = arg("x.grad");
  if (shared)
    dxArgs.push_back("shared_dx");
  dxArgs.push_back(xGrad);
  buildInputGrad(
      addKernel("train_input_grad", dxArgs, gridOf(moegpu::GridKind::Tokens, 1), kRowThreads));
  buildRouterGrad(addKernel("train_router_grad",
                            {"dl", "x", arg("router_weight.grad")},
                            fixedGrid(e), kRowThreads));
  buildLoad(addKernel("train_load", {"counts", arg("load")}, elementGrid(e),
                      kCountThreads));
  // With expert parallelism: what every rank computed in part. Each
  // rank's experts already saw every token routed to them.
  if (sharded) {
    std::vector<std::string> sums{arg("loss"), arg("load"),
                                  arg("router_weight.grad")};
    if (shared)
      for (const char *w :
           {"shared_gate_weight", "shared_up_weight", "shared_down_weight"})
        sums.push_back(arg(std::string(w) + ".grad"));
    addAllReduce(SmallVector<StringRef>(sums.begin(), sums.end()));
  }
  if (bias)
    buildBias(addKernel(
        "train_bias",
        {arg("load"), arg("hyper"), "score_bias", arg("score_bias.next")},
        elementGrid(e), kCountThreads));
  for (auto [name, value] : listTrainedWeights(layer)) {
    std::string w = name.str();
    SmallVector<std::string> names{
        arg(w),       arg(w + ".m"),    arg(w + ".v"),      arg(w + ".grad"),
        arg("hyper"), arg(w + ".next"), arg(w + ".m.next"), arg(w + ".v.next")};
    buildAdamW(addKernel(
        "train_adamw_" + w, SmallVector<StringRef>(names.begin(), names.end()),
        elementGrid(memrefType(arg(w)).getNumElements()), kCountThreads));
  }
  steps = &forward.getBody().front();
}

LogicalResult LayerBuilder::build(ModuleOp module) {
  Type dtype = config.getDtype();
  if (!dtype.isBF16() && !dtype.isF16())
    return layer.emitOpError()
           << "has dtype " << dtype
           << "; the sm_90a kernels take bf16 or f16 layers (compile with "
              "--dtype=bf16)";
  auto ep = static_cast<int64_t>(layer.getEpSize());
  if (layer.getEpChunks() > 1)
    return layer.emitOpError()
           << "exchanges its tokens in " << layer.getEpChunks()
           << " chunks; chunked exchanges run on the host target only";
  if (config.getSharedGate())
    return layer.emitOpError() << "has a shared-expert gate (Qwen2-MoE), "
                                  "which the sm_90a target does not support "
                                  "yet";
  if (alignment < 128 || alignment % 128 != 0)
    return layer.emitOpError()
           << "needs an alignment that is a multiple of 128 (the grouped "
              "GEMM's M block) on sm_90a, got "
           << alignment;
  if (config.getGroups() > 1 && config.getExpertsPerGroup() < 2 &&
      config.getGroupScore() == GroupScore::SumTop2)
    return layer.emitOpError() << "scores groups of one expert by sum_top2";

  int64_t h = config.getHidden(), e = config.getExperts(), k = config.getTopK();
  int64_t f = config.getFfn(), s = config.getSharedFfnTotal();
  // This rank's experts: all of them, or E / ep when sharded.
  int64_t local = e / ep;
  Type f32 = Builder(ctx).getF32Type(), i32 = Builder(ctx).getI32Type();
  Type routerType = cast<RankedTensorType>(layer.getRouterWeight().getType())
                        .getElementType();
  bool shared = config.hasSharedExperts();
  bool bias = config.getScoreBias();

  addBuffer("x", dtype, {kTokens, h}, "input");
  addBuffer("router_weight", routerType, {e, h}, "param:router_weight");
  if (bias)
    addBuffer("score_bias", f32, {e}, "param:score_bias");
  addBuffer("w13", dtype, {local, 2 * f, h}, "pack:gate_weight,up_weight");
  addBuffer("w2", dtype, {local, h, f}, "param:down_weight");
  if (shared) {
    addBuffer("ws13", dtype, {1, 2 * s, h},
              "pack:shared_gate_weight,shared_up_weight");
    addBuffer("ws2", dtype, {1, h, s}, "param:shared_down_weight");
  }
  addBuffer("topk_ids", i32, {kTokens, k}, "output");
  addBuffer("topk_weights", f32, {kTokens, k}, "output");
  addBuffer("counts", i32, {e}, "scratch");
  addBuffer("offsets", i32, {e + 1}, "scratch");
  addBuffer("cursors", i32, {e}, "scratch");
  if (shared)
    addBuffer("shared_offsets", i32, {2}, "scratch");
  addBuffer("rows", dtype, {kRows, h}, "scratch");
  addBuffer("row_map", i32, {kTokens, k}, "scratch");
  addBuffer("row_weight", f32, {kRows}, "scratch");
  addBuffer("act", dtype, {kRows, f}, "scratch");
  addBuffer("down", dtype, {kRows, h}, "scratch");
  if (shared) {
    addBuffer("shared_act", dtype, {kTokens, s}, "scratch");
    addBuffer("shared_out", dtype, {kTokens, h}, "scratch");
  }
  addBuffer("y", dtype, {kTokens, h}, "output");
  if (ep > 1) {
    // What the exchange brings this rank's experts, by (local expert,
    // source rank): offsets of those segments, of each expert's rows
    // (what the GEMMs group by), the rows, their routing weights, and the
    // experts' outputs that go back.
    addBuffer("ep_offsets", i32, {e + 1}, "scratch");
    addBuffer("ep_group_offsets", i32, {local + 1}, "scratch");
    addBuffer("ep_rows", dtype, {kReceivedRows, h}, "scratch");
    addBuffer("ep_row_weight", f32, {kReceivedRows}, "scratch");
    addBuffer("ep_act", dtype, {kReceivedRows, f}, "scratch");
    addBuffer("ep_down", dtype, {kReceivedRows, h}, "scratch");
  }

  OpBuilder b = OpBuilder::atBlockEnd(module.getBody());
  kernels = gpu::GPUModuleOp::create(b, layer.getLoc(), "moe_kernels");
  // The typed schedule beside the kernels: buffers and entry points.
  program = moegpu::ProgramOp::create(b, layer.getLoc());
  OpBuilder pb = OpBuilder::atBlockEnd(&program.getBody().front());
  forward = moegpu::ScheduleOp::create(pb, layer.getLoc(), "forward");
  training = moegpu::ScheduleOp::create(pb, layer.getLoc(), "train");
  steps = &forward.getBody().front();
  auto wg = gpu::AddressSpaceAttr::get(ctx, gpu::AddressSpace::Workgroup);

  SmallVector<StringRef> routeArgs{"x", "router_weight"};
  if (bias)
    routeArgs.push_back("score_bias");
  routeArgs.append({"topk_ids", "topk_weights"});
  SmallVector<Type> routeScratch{
      MemRefType::get({kRouteWarps, e}, f32, AffineMap(), wg),
      MemRefType::get({kRouteWarps, e}, f32, AffineMap(), wg)};
  if (config.getGroups() > 1)
    routeScratch.push_back(MemRefType::get({kRouteWarps, config.getGroups()},
                                           f32, AffineMap(), wg));
  buildRoute(addKernel("route", routeArgs, gridOf(moegpu::GridKind::Tokens, kRouteWarps),
                       kRouteWarps * 32, routeScratch));

  addMemset("counts");
  buildCount(addKernel("dispatch_count", {"topk_ids", "counts"},
                       gridOf(moegpu::GridKind::Assignments, kCountThreads), kCountThreads));
  SmallVector<StringRef> scanArgs{"topk_ids", "counts", "offsets", "cursors"};
  if (shared)
    scanArgs.push_back("shared_offsets");
  buildScan(addKernel("dispatch_scan", scanArgs, gridOf(moegpu::GridKind::One), 1));
  buildScatter(addKernel("dispatch_scatter",
                         {"x", "topk_ids", "topk_weights", "cursors", "rows",
                          "row_map", "row_weight"},
                         gridOf(moegpu::GridKind::Assignments, 1), kRowThreads,
                         {MemRefType::get({1}, i32, AffineMap(), wg)}));

  if (ep > 1) {
    addExchange(moegpu::ExchangeKind::Dispatch, {"offsets", "rows", "row_weight", "ep_offsets",
                             "ep_group_offsets", "ep_rows", "ep_row_weight"});
    buildGemm(addKernel("expert_up",
                        {"ep_rows", "w13", "ep_group_offsets", "ep_act"},
                        gridOf(moegpu::GridKind::Persistent), 0),
              moegpu::Epilogue::SwiGLU);
    buildGemm(addKernel("expert_down",
                        {"ep_act", "w2", "ep_group_offsets", "ep_down",
                         "ep_row_weight"},
                        gridOf(moegpu::GridKind::Persistent), 0),
              moegpu::Epilogue::RowScale);
    addExchange(moegpu::ExchangeKind::Combine, {"ep_offsets", "ep_down", "offsets", "down"});
  } else {
    buildGemm(addKernel("expert_up", {"rows", "w13", "offsets", "act"},
                        gridOf(moegpu::GridKind::Persistent), 0),
              moegpu::Epilogue::SwiGLU);
    buildGemm(addKernel("expert_down",
                        {"act", "w2", "offsets", "down", "row_weight"},
                        gridOf(moegpu::GridKind::Persistent), 0),
              moegpu::Epilogue::RowScale);
  }
  if (shared) {
    buildGemm(addKernel("shared_up",
                        {"x", "ws13", "shared_offsets", "shared_act"},
                        gridOf(moegpu::GridKind::Persistent), 0),
              moegpu::Epilogue::SwiGLU);
    buildGemm(addKernel("shared_down",
                        {"shared_act", "ws2", "shared_offsets", "shared_out"},
                        gridOf(moegpu::GridKind::Persistent), 0),
              moegpu::Epilogue::None);
  }
  SmallVector<StringRef> combineArgs{"down", "row_map"};
  if (shared)
    combineArgs.push_back("shared_out");
  combineArgs.push_back("y");
  buildCombine(
      addKernel("combine", combineArgs, gridOf(moegpu::GridKind::Tokens, 1), kRowThreads));
  if (train)
    buildTraining();

  // The buffers, ahead of the schedules in the program.
  OpBuilder bb = OpBuilder::atBlockBegin(&program.getBody().front());
  for (const Buffer &buf : buffers) {
    SmallVector<Attribute> dims;
    for (int64_t d : buf.shape)
      if (d < 0)
        dims.push_back(moegpu::BufferDimAttr::get(
            ctx, d == kTokens ? moegpu::BufferDim::Tokens
                 : d == kRows ? moegpu::BufferDim::Rows
                              : moegpu::BufferDim::ReceivedRows));
    moegpu::BufferOp::create(bb, layer.getLoc(), buf.name,
                             memrefType(buf.name), bb.getArrayAttr(dims),
                             buf.source);
  }
  if (!train)
    training.erase();
  Builder attrs(ctx);
  module->setAttr("moegpu.alignment", attrs.getI64IntegerAttr(alignment));
  module->setAttr(gpu::GPUDialect::getContainerModuleAttrName(),
                  attrs.getUnitAttr());
  if (SmPartitionAttr partition = layer.getPartitionAttr())
    module->setAttr(MoeDialect::getSmPartitionAttrName(), partition);
  return success();
}

struct ConvertMoeToMoeGpu
    : public mlir::moe::impl::ConvertMoeToMoeGpuBase<ConvertMoeToMoeGpu> {
  using ConvertMoeToMoeGpuBase::ConvertMoeToMoeGpuBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<LayerOp> layers;
    module.walk([&](LayerOp layer) { layers.push_back(layer); });
    if (layers.size() != 1) {
      module.emitError() << "convert-moe-to-moegpu expects exactly one "
                            "moe.layer in the module, found "
                         << layers.size();
      return signalPassFailure();
    }
    LayerOp layer = layers.front();
    auto func = layer->getParentOfType<FunctionOpInterface>();
    if (!func || func->getParentOp() != module.getOperation()) {
      layer.emitOpError() << "must be in a function at the top of the module";
      return signalPassFailure();
    }
    if (auto partition = func->getAttrOfType<SmPartitionAttr>(
            MoeDialect::getSmPartitionAttrName());
        partition && !layer.getPartitionAttr())
      layer.setPartitionAttr(partition);
    if (failed(LayerBuilder(layer, alignment, train).build(module)))
      return signalPassFailure();
    func->erase();
  }
};

} // namespace
