//===- MoeToMoeGpu.cpp - An MoE layer as Hopper kernels and a schedule ----===//
//
// Part of moe-compiler.
//
//===----------------------------------------------------------------------===//

#include "moe/Conversion/Passes.h"
#include "moe/MoeOps.h"
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
/// Shape markers of buffers sized at run time.
constexpr int64_t kTokens = -1;
constexpr int64_t kRows = -2;

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
  LayerBuilder(LayerOp layer, int64_t alignment)
      : layer(layer), config(layer.getConfig()), ctx(layer.getContext()),
        alignment(alignment) {}

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
                           DictionaryAttr grid, int64_t block,
                           TypeRange workgroup = {});
  DictionaryAttr gridOf(StringRef kind, int64_t perBlock = 0) {
    Builder b(ctx);
    SmallVector<NamedAttribute> fields{
        b.getNamedAttr("kind", b.getStringAttr(kind))};
    if (perBlock)
      fields.push_back(
          b.getNamedAttr("per_block", b.getI64IntegerAttr(perBlock)));
    return b.getDictionaryAttr(fields);
  }
  void addMemset(StringRef buffer) {
    Builder b(ctx);
    schedule.push_back(b.getDictionaryAttr(
        {b.getNamedAttr("op", b.getStringAttr("memset")),
         b.getNamedAttr("buffer", b.getStringAttr(buffer))}));
  }

  void buildRoute(gpu::GPUFuncOp func);
  void buildCount(gpu::GPUFuncOp func);
  void buildScan(gpu::GPUFuncOp func);
  void buildScatter(gpu::GPUFuncOp func);
  void buildCombine(gpu::GPUFuncOp func);
  void buildGemm(gpu::GPUFuncOp func, moegpu::Epilogue epilogue);

  LayerOp layer;
  LayerConfigAttr config;
  MLIRContext *ctx;
  int64_t alignment;
  gpu::GPUModuleOp kernels;
  SmallVector<Buffer> buffers;
  SmallVector<Attribute> schedule;
};

gpu::GPUFuncOp LayerBuilder::addKernel(StringRef name, ArrayRef<StringRef> args,
                                       DictionaryAttr grid, int64_t block,
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

  SmallVector<Attribute> argNames;
  for (StringRef arg : args)
    argNames.push_back(b.getStringAttr(arg));
  schedule.push_back(b.getDictionaryAttr({
      b.getNamedAttr("op", b.getStringAttr("launch")),
      b.getNamedAttr("kernel", b.getStringAttr(name)),
      b.getNamedAttr("args", b.getArrayAttr(argNames)),
      b.getNamedAttr("grid", grid),
      b.getNamedAttr("block", b.getI64IntegerAttr(block)),
  }));
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
  /// Index of the largest of `n` values from `get` (ties: the lower index).
  std::pair<Value, Value> argmax(int64_t n, function_ref<Value(Value)> get) {
    ValueRange r = loop(
        idx(0), idx(n), idx(1), {idx(0), f32(-INFINITY)},
        [&](Value i, ValueRange it) {
          Value v = get(i);
          Value gt =
              arith::CmpFOp::create(b, arith::CmpFPredicate::OGT, v, it[1]);
          return SmallVector<Value>{arith::SelectOp::create(b, gt, i, it[0]),
                                    arith::SelectOp::create(b, gt, v, it[1])};
        });
    return {r[0], r[1]};
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
    // Selection scores: biased, and masked outside the kept groups.
    e.loop(zero, nE, one, {}, [&](Value i, ValueRange) {
      Value v = e.load(scores, {warp, i});
      if (bias)
        v = arith::AddFOp::create(b, v, e.load(biasArg, {i}));
      e.store(v, sel, {warp, i});
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
        e.store(score, gsc, {warp, g});
        return SmallVector<Value>{};
      });
      // Keep the topk_groups best groups: a kept group's score becomes
      // +inf, every other group's experts are masked.
      e.loop(zero, e.idx(config.getTopkGroups()), one, {},
             [&](Value, ValueRange) {
               auto [g, v] = e.argmax(groups, [&](Value i) {
                 Value s = e.load(gsc, {warp, i});
                 Value kept = arith::CmpFOp::create(
                     b, arith::CmpFPredicate::OEQ, s, e.f32(INFINITY));
                 return arith::SelectOp::create(b, kept, e.f32(-INFINITY), s)
                     .getResult();
               });
               (void)v;
               e.store(e.f32(INFINITY), gsc, {warp, g});
               return SmallVector<Value>{};
             });
      e.loop(zero, nE, one, {}, [&](Value i, ValueRange) {
        Value g = arith::DivUIOp::create(b, i, e.idx(perGroup));
        Value kept =
            arith::CmpFOp::create(b, arith::CmpFPredicate::OEQ,
                                  e.load(gsc, {warp, g}), e.f32(INFINITY));
        e.when(arith::XOrIOp::create(b, kept,
                                     arith::ConstantIntOp::create(b, 1, 1)),
               [&] {
                 e.store(e.f32(-FLT_MAX), sel, {warp, i});
               });
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
          e.store(e.f32(-INFINITY), sel, {warp, best});
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

LogicalResult LayerBuilder::build(ModuleOp module) {
  Type dtype = config.getDtype();
  if (!dtype.isBF16() && !dtype.isF16())
    return layer.emitOpError()
           << "has dtype " << dtype
           << "; the sm_90a kernels take bf16 or f16 layers (compile with "
              "--dtype=bf16)";
  if (layer.getEpSize() != 1)
    return layer.emitOpError()
           << "is sharded over " << layer.getEpSize()
           << " expert-parallel ranks, which the sm_90a target does not "
              "support yet (its exchanges run on the host target)";
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
  Type f32 = Builder(ctx).getF32Type(), i32 = Builder(ctx).getI32Type();
  Type routerType = cast<RankedTensorType>(layer.getRouterWeight().getType())
                        .getElementType();
  bool shared = config.hasSharedExperts();
  bool bias = config.getScoreBias();

  addBuffer("x", dtype, {kTokens, h}, "input");
  addBuffer("router_weight", routerType, {e, h}, "param:router_weight");
  if (bias)
    addBuffer("score_bias", f32, {e}, "param:score_bias");
  addBuffer("w13", dtype, {e, 2 * f, h}, "pack:gate_weight,up_weight");
  addBuffer("w2", dtype, {e, h, f}, "param:down_weight");
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

  OpBuilder b = OpBuilder::atBlockEnd(module.getBody());
  kernels = gpu::GPUModuleOp::create(b, layer.getLoc(), "moe_kernels");
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
  buildRoute(addKernel("route", routeArgs, gridOf("tokens", kRouteWarps),
                       kRouteWarps * 32, routeScratch));

  addMemset("counts");
  buildCount(addKernel("dispatch_count", {"topk_ids", "counts"},
                       gridOf("assignments", kCountThreads), kCountThreads));
  SmallVector<StringRef> scanArgs{"topk_ids", "counts", "offsets", "cursors"};
  if (shared)
    scanArgs.push_back("shared_offsets");
  buildScan(addKernel("dispatch_scan", scanArgs, gridOf("one"), 1));
  buildScatter(addKernel("dispatch_scatter",
                         {"x", "topk_ids", "topk_weights", "cursors", "rows",
                          "row_map", "row_weight"},
                         gridOf("assignments", 1), kRowThreads,
                         {MemRefType::get({1}, i32, AffineMap(), wg)}));

  buildGemm(addKernel("expert_up", {"rows", "w13", "offsets", "act"},
                      gridOf("persistent"), 0),
            moegpu::Epilogue::SwiGLU);
  buildGemm(addKernel("expert_down",
                      {"act", "w2", "offsets", "down", "row_weight"},
                      gridOf("persistent"), 0),
            moegpu::Epilogue::RowScale);
  if (shared) {
    buildGemm(addKernel("shared_up",
                        {"x", "ws13", "shared_offsets", "shared_act"},
                        gridOf("persistent"), 0),
              moegpu::Epilogue::SwiGLU);
    buildGemm(addKernel("shared_down",
                        {"shared_act", "ws2", "shared_offsets", "shared_out"},
                        gridOf("persistent"), 0),
              moegpu::Epilogue::None);
  }
  SmallVector<StringRef> combineArgs{"down", "row_map"};
  if (shared)
    combineArgs.push_back("shared_out");
  combineArgs.push_back("y");
  buildCombine(
      addKernel("combine", combineArgs, gridOf("tokens", 1), kRowThreads));

  Builder attrs(ctx);
  SmallVector<Attribute> bufferAttrs;
  for (const Buffer &buf : buffers)
    bufferAttrs.push_back(attrs.getDictionaryAttr({
        attrs.getNamedAttr("name", attrs.getStringAttr(buf.name)),
        attrs.getNamedAttr("type", TypeAttr::get(buf.elementType)),
        attrs.getNamedAttr("shape", attrs.getDenseI64ArrayAttr(buf.shape)),
        attrs.getNamedAttr("source", attrs.getStringAttr(buf.source)),
    }));
  module->setAttr("moegpu.buffers", attrs.getArrayAttr(bufferAttrs));
  module->setAttr("moegpu.schedule", attrs.getArrayAttr(schedule));
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
    if (failed(LayerBuilder(layer, alignment).build(module)))
      return signalPassFailure();
    func->erase();
  }
};

} // namespace
