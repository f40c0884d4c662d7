//===- MoeToMoeGpu.cpp - An MoE layer as Hopper kernels and a schedule ----===//
//
// Part of moe-compiler.
//
//===----------------------------------------------------------------------===//

#include "LayerBuilder.h"
#include "moe/Conversion/Passes.h"
#include "moe/MoeOps.h"
#include "moe/Transforms/Autodiff.h"

#include "mlir/Dialect/UB/IR/UBOps.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/Transforms/DialectConversion.h"

namespace mlir::moe {
#define GEN_PASS_DEF_CONVERTMOETOMOEGPU
#include "moe/Conversion/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;
using namespace mlir::moe::lowering;

gpu::GPUFuncOp LayerBuilder::addKernel(StringRef name, ArrayRef<StringRef> args,
                                       moegpu::GridAttr grid, int64_t block,
                                       TypeRange workgroup,
                                       std::optional<int64_t> chunk) {
  SmallVector<Type> types;
  for (StringRef arg : args)
    types.push_back(memrefType(arg));
  OpBuilder b = builderAtEnd(kernels.getBody());
  auto func = gpu::GPUFuncOp::create(b, layer.getLoc(), name,
                                     b.getFunctionType(types, {}), workgroup);
  func->setAttr(gpu::GPUDialect::getKernelFuncAttrName(), b.getUnitAttr());
  b.setInsertionPointToEnd(&func.front());
  gpu::ReturnOp::create(b, layer.getLoc());

  addLaunch(func, args, grid, block, chunk);
  return func;
}

void LayerBuilder::addLaunch(gpu::GPUFuncOp func, ArrayRef<StringRef> args,
                             moegpu::GridAttr grid, int64_t block,
                             std::optional<int64_t> chunk) {
  OpBuilder sb = stepBuilder();
  moegpu::LaunchOp::create(
      sb, layer.getLoc(),
      SymbolRefAttr::get(kernels.getNameAttr(),
                         {FlatSymbolRefAttr::get(func.getNameAttr())}),
      symbols(args), grid, sb.getI64IntegerAttr(block),
      chunk ? sb.getI64IntegerAttr(*chunk) : IntegerAttr(), transportAttr());
}

LayerBuilder::Kernel LayerBuilder::kernelOf(gpu::GPUFuncOp func,
                                            ArrayRef<StringRef> args) {
  Kernel k{func, {}};
  for (StringRef arg : args)
    k.buffers.push_back(arg.str());
  return k;
}

void LayerBuilder::quantize(const Kernel &k, StringRef in, StringRef offsets,
                            StringRef out, StringRef scale, double minAmax) {
  kernelOp<moegpu::QuantizeOp>(k, k[in], offsets.empty() ? Value() : k[offsets],
                               k[out], k[scale],
                               Builder(ctx).getF64FloatAttr(minAmax));
}

moegpu::Scoring LayerBuilder::scoringOf(ScoringFunc scoring) {
  switch (scoring) {
  case ScoringFunc::Softmax: return moegpu::Scoring::Softmax;
  case ScoringFunc::Sigmoid: return moegpu::Scoring::Sigmoid;
  case ScoringFunc::Sparsemixer: return moegpu::Scoring::Sparsemixer;
  }
  llvm_unreachable("unknown scoring function");
}

/// The sm_90a kernels' element types; the diagnostic says how to convert.
static LogicalResult checkSm90Dtype(LayerOp layer) {
  Type dtype = layer.getConfig().getDtype();
  if (dtype.isBF16() || dtype.isF16())
    return success();
  return layer.emitOpError()
         << "has dtype " << dtype
         << "; the sm_90a kernels take bf16 or f16 layers (moe-compile "
            "--target=sm_90a --dtype=bf16 converts this one)";
}

/// FP8 experts (DeepSeek-V3's e4m3 with block scales): the forward pass,
/// and the training step with the block recipe on one rank.
static LogicalResult checkSm90Fp8(LayerOp layer, bool train, bool backward,
                                  int64_t alignment) {
  LayerConfigAttr config = layer.getConfig();
  if (!config.isFp8())
    return success();
  if (backward || config.getExpertBias())
    return layer.emitOpError()
           << "has FP8 experts, which sm_90a runs for the forward pass and "
              "the training step without expert biases so far"
           << (backward ? " (compile the backward pass with bf16 experts)"
                        : " (this layer has expert biases)");
  if (!train)
    return success();
  auto ep = static_cast<int64_t>(layer.getEpSize());
  if (config.getRecipe().getScaling() != Fp8Scaling::Block)
    return layer.emitOpError()
           << "has FP8 experts with the per-tensor recipe, whose training "
              "step sm_90a does not build (its e4m3 GEMMs take the block "
              "recipe's scales)";
  if (ep > 1)
    return layer.emitOpError()
           << "has FP8 experts and ep_size " << ep
           << ": sm_90a trains FP8 layers on one rank so far";
  if (alignment % kFp8Block != 0)
    return layer.emitOpError()
           << "trains FP8 experts with an alignment of " << alignment
           << "; the weight gradients' 128 x 1 tiles need a multiple of "
           << kFp8Block << " (each expert's rows start a tile)";
  return success();
}

LogicalResult LayerBuilder::build(ModuleOp module) {
  if (failed(checkSm90Dtype(layer)))
    return failure();
  Type dtype = config.getDtype();
  auto ep = static_cast<int64_t>(layer.getEpSize());
  // Token chunks of a sharded layer's exchanges: the dispatch sorts rows by
  // (chunk, expert), so each chunk's all-to-all can run beside the expert
  // GEMMs of the chunks before it.
  chunks = ep > 1 ? std::max<int64_t>(1, layer.getEpChunks()) : 1;
  // The device-initiated exchange beside the host-driven one (the runtime
  // runs one), whole or in chunks.
  lsa = ep > 1 && ep <= kMaxLsaRanks;
  if (SmPartitionAttr partition = layer.getPartitionAttr();
      partition && partition.getComm() > 0)
    commCtas = partition.getComm();
  // FP8 experts (DeepSeek-V3's e4m3 with block scales; checkSm90Fp8).
  bool fp8 = config.isFp8();
  // TMA rows of e4m3 are whole 16-byte units: K of every FP8 GEMM.
  if (fp8)
    for (auto [what, width] :
         {std::pair<StringRef, int64_t>{"a hidden size", config.getHidden()},
          {"an expert FFN width", config.getFfn()},
          {"a shared experts' FFN width", config.getSharedFfnTotal()}})
      if (width % 16 != 0)
        return layer.emitOpError()
               << "has FP8 experts and " << what << " of " << width
               << "; sm_90a needs a multiple of 16 (16-byte TMA rows of "
                  "e4m3)";
  if (alignment < 64 || alignment % 64 != 0)
    return layer.emitOpError()
           << "needs an alignment that is a multiple of 64 (the grouped "
              "GEMM's smallest M block) on sm_90a, got "
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
  // FP8: e4m3 weights and their 128 x 128 block scales (w13's: the gate's
  // blocks, then the up's).
  Type weightType = fp8 ? config.getExpertDtype() : dtype;
  int64_t hb = fp8Blocks(h), fb = fp8Blocks(f), sb = fp8Blocks(s);
  addBuffer("w13", weightType, {local, 2 * f, h}, "pack:gate_weight,up_weight");
  addBuffer("w2", weightType, {local, h, f}, "param:down_weight");
  if (fp8) {
    addBuffer("w13_scale", f32, {local, 2 * fb, hb},
              "concat:gate_scale,up_scale");
    addBuffer("w2_scale", f32, {local, hb, fb}, "param:down_scale");
  }
  // GPT-OSS: the router's bias, and the experts' biases (gate and up
  // interleaved as w13's rows are).
  if (config.getRouterBias())
    addBuffer("router_bias", routerType, {e}, "param:router_bias");
  if (config.getExpertBias()) {
    addBuffer("b13", dtype, {local, 2 * f}, "pack:gate_bias,up_bias");
    addBuffer("b2", dtype, {local, h}, "param:down_bias");
  }
  if (shared) {
    addBuffer("ws13", weightType, {1, 2 * s, h},
              "pack:shared_gate_weight,shared_up_weight");
    addBuffer("ws2", weightType, {1, h, s}, "param:shared_down_weight");
    if (fp8) {
      addBuffer("ws13_scale", f32, {1, 2 * sb, hb},
                "concat:shared_gate_scale,shared_up_scale");
      addBuffer("ws2_scale", f32, {1, hb, sb}, "param:shared_down_scale");
    }
  }
  bool gated = config.getSharedGate();
  if (gated)
    addBuffer("shared_expert_gate",
              cast<RankedTensorType>(layer.getSharedExpertGate().getType())
                  .getElementType(),
              {1, h}, "param:shared_expert_gate");
  if (config.getOutputBias())
    addBuffer("output_bias", dtype, {h}, "param:output_bias");
  addBuffer("router_logits", f32, {kTokens, e}, "scratch");
  // A 16-bit router's GEMM splits its K over CTAs when the hidden size is
  // long enough (its slices, and the count the kernel took).
  int64_t routerSplits = routerSplitsOf(h);
  if (routerType == dtype && routerSplits > 1) {
    addBuffer("router_partials", f32, {routerSplits, kTokens, e}, "scratch");
    addBuffer("router_splits", i32, {1}, "scratch");
  }
  addBuffer("topk_ids", i32, {kTokens, k}, "output");
  addBuffer("topk_weights", f32, {kTokens, k}, "output");
  // Counts, segment offsets and scatter cursors of (chunk, expert) pairs,
  // chunk-major (one chunk: the experts').
  addBuffer("counts", i32, {chunks * e}, "scratch");
  addBuffer("offsets", i32, {chunks * e + 1}, "scratch");
  addBuffer("cursors", i32, {chunks * e}, "scratch");
  if (shared)
    addBuffer("shared_offsets", i32, {2}, "scratch");
  // FP8 rows (without scale_input) are dispatched as codes only.
  if (!dispatchesCodes())
    addBuffer("rows", dtype, {kRows, h}, "scratch");
  addBuffer("row_map", i32, {kTokens, k}, "scratch");
  addBuffer("row_weight", f32, {kRows}, "scratch");
  addBuffer("act", dtype, {kRows, f}, "scratch");
  // The combine's destination is in the symmetric window: the experts'
  // ranks store their outputs straight into it.
  addBuffer("down", dtype, {kRows, h}, lsa ? "symmetric" : "scratch");
  if (shared) {
    addBuffer("shared_act", dtype, {kTokens, s}, "scratch");
    addBuffer("shared_out", dtype, {kTokens, h}, "scratch");
  }
  if (gated)
    addBuffer("shared_scale", f32, {kTokens}, "scratch");
  // FP8: each GEMM's input as e4m3 codes and per-row scales of 128
  // channels.
  if (fp8) {
    Type f8 = config.getExpertDtype();
    addBuffer("rows_q", f8, {kRows, h}, "scratch");
    addBuffer("rows_scale", f32, {kRows, hb}, "scratch");
    // A sharded rank quantizes the SwiGLU outputs of the rows it received
    // (ep_act_q below).
    if (ep == 1) {
      addBuffer("act_q", f8, {kRows, f}, "scratch");
      addBuffer("act_scale", f32, {kRows, fb}, "scratch");
    }
    if (shared || dispatchesCodes()) {
      addBuffer("x_q", f8, {kTokens, h}, "scratch");
      addBuffer("x_scale", f32, {kTokens, hb}, "scratch");
    }
    if (shared) {
      addBuffer("shared_act_q", f8, {kTokens, s}, "scratch");
      addBuffer("shared_act_scale", f32, {kTokens, sb}, "scratch");
    }
  }
  addBuffer("y", dtype, {kTokens, h}, "output");
  if (ep > 1) {
    // What the exchange brings this rank's experts, by (local expert,
    // source rank): offsets of those segments, of each expert's rows
    // (what the GEMMs group by), the rows, their routing weights, and the
    // experts' outputs that go back.
    addBuffer("ep_offsets", i32, {chunks * (e + 1)}, "scratch");
    for (int64_t c = 0; c < chunks; ++c)
      addBuffer(groupOffsets(c), i32, {local + 1}, "scratch");
    if (fp8) {
      Type f8 = config.getExpertDtype();
      addBuffer("ep_rows_q", f8, {kReceivedRows, h},
                lsa ? "symmetric" : "scratch");
      addBuffer("ep_rows_scale", f32, {kReceivedRows, hb},
                lsa ? "symmetric" : "scratch");
      addBuffer("ep_act_q", f8, {kReceivedRows, f}, "scratch");
      addBuffer("ep_act_scale", f32, {kReceivedRows, fb}, "scratch");
    } else {
      addBuffer("ep_rows", dtype, {kReceivedRows, h},
                lsa ? "symmetric" : "scratch");
    }
    addBuffer("ep_row_weight", f32, {kReceivedRows},
              lsa ? "symmetric" : "scratch");
    addBuffer("ep_act", dtype, {kReceivedRows, f}, "scratch");
    addBuffer("ep_down", dtype, {kReceivedRows, h}, "scratch");
  }
  if (lsa) {
    // The device-initiated exchange's own: every rank's sizes (ranks x
    // experts) and flags (one a rank, then one a send) in the window; the
    // signals this rank waited for on each flag, the pass's epoch, the
    // waits' status, the peers (the runtime's: distances, rank, limit,
    // capacity), and where this rank's segments start at their owners and
    // the received ones at their sources.
    // A training step's sends: the rows' dy and their gradients back.
    // FP8 rows' scales travel on a flag of their own (kFlagDispatchRows,
    // which only a training step uses otherwise).
    // In token chunks, a set of flags a chunk.
    int64_t flags = flagSlot(ep,
                             train || backward ? kFlagCombineRows
                             : fp8             ? kFlagDispatchRows
                                               : kFlagCombine,
                             chunks - 1) +
                    1;
    addBuffer("ep_table", i32, {ep * chunks * e}, "symmetric");
    addBuffer("ep_flags", i32, {flags}, "symmetric");
    addBuffer("ep_waited", i32, {flags}, "scratch");
    addBuffer("ep_epoch", i32, {1}, "scratch");
    addBuffer("ep_status", i32, {2}, "scratch");
    addBuffer("ep_peers", Builder(ctx).getI64Type(), {ep + 3}, "peers");
    addBuffer("send_pos", i32, {chunks * e}, "scratch");
    addBuffer("back_pos", i32, {chunks * e}, "scratch");
  }

  OpBuilder b = builderAtEnd(module.getBody());
  kernels = gpu::GPUModuleOp::create(b, layer.getLoc(), "moe_kernels");
  // The typed schedule beside the kernels: buffers and entry points.
  program = moegpu::ProgramOp::create(b, layer.getLoc());
  OpBuilder pb = builderAtEnd(&program.getBody().front());
  forward = moegpu::ScheduleOp::create(pb, layer.getLoc(), "forward");
  steps = &forward.getBody().front();

  // Routing: the logits on tensor cores (SIMT for an f32 router weight),
  // then one warp per token scores, selects and counts.
  addMemset("counts");
  if (routerType == dtype && routerSplits > 1) {
    launchGemm("router", Gemm("x", "router_weight", "", "router_partials")
                             .splitK("router_splits"));
    Kernel k = kernel("router_sum",
                      {"router_partials", "router_splits", "router_logits"},
                      gridOf(moegpu::GridKind::Tokens, 1), kRowThreads);
    kernelOp<moegpu::SumSplitsOp>(k, k["router_partials"], k["router_splits"],
                                  k["router_logits"]);
  } else if (routerType == dtype) {
    launchGemm("router", Gemm("x", "router_weight", "", "router_logits"));
  } else {
    Kernel k = kernel("router", {"x", "router_weight", "router_logits"},
                      gridOf(moegpu::GridKind::Tokens, kRouteWarps),
                      kRouteWarps * 32);
    kernelOp<moegpu::RouterLogitsOp>(k, k["x"], k["router_weight"],
                                     k["router_logits"]);
  }
  if (gated) {
    Kernel k = kernel("shared_gate", {"x", "shared_expert_gate", "shared_scale"},
                      gridOf(moegpu::GridKind::Tokens, kRouteWarps),
                      kRouteWarps * 32);
    kernelOp<moegpu::SharedGateOp>(k, k["x"], k["shared_expert_gate"],
                                   k["shared_scale"]);
  }
  SmallVector<StringRef> routeArgs{"router_logits"};
  if (config.getRouterBias())
    routeArgs.push_back("router_bias");
  if (bias)
    routeArgs.push_back("score_bias");
  routeArgs.append({"topk_ids", "topk_weights", "counts"});
  {
    Kernel k = kernel("route", routeArgs,
                      gridOf(moegpu::GridKind::Tokens, kRouteWarps),
                      kRouteWarps * 32);
    kernelOp<moegpu::RouteOp>(
        k, k["router_logits"], k.get("router_bias"), k.get("score_bias"),
        k["topk_ids"], k["topk_weights"], k["counts"],
        scoringOf(config.getScoring()), config.getGroups(),
        config.getTopkGroups(),
        config.getGroupScore() == GroupScore::SumTop2,
        config.getNormTopkProb(), APFloat(config.getRoutedScaleValue()),
        APFloat(config.getRouterJitterValue()), chunks);
  }
  SmallVector<StringRef> scanArgs{"topk_ids", "counts", "offsets", "cursors"};
  if (shared)
    scanArgs.push_back("shared_offsets");
  {
    Kernel k = kernel("dispatch_scan", scanArgs, gridOf(moegpu::GridKind::One),
                      kScanThreads);
    kernelOp<moegpu::DispatchScanOp>(k, k["topk_ids"], k["counts"],
                                     k["offsets"], k["cursors"],
                                     k.get("shared_offsets"), alignment);
  }
  // FP8: x is quantized once per token, before the dispatch copies its
  // codes and scales to its rows (the shared experts read them too). With
  // scale_input the rows are x times a weight: they are quantized after.
  bool quantizeTokens = dispatchesCodes();
  if (fp8 && (shared || quantizeTokens))
    quantize(kernel("quantize_x", {"x", "x_q", "x_scale"},
                    gridOf(moegpu::GridKind::Tokens, kQuantizeWarps),
                    kQuantizeWarps * 32),
             "x", "", "x_q", "x_scale");
  SmallVector<StringRef> scatterArgs{"x",       "topk_ids", "topk_weights",
                                     "cursors", "rows",     "row_map",
                                     "row_weight"};
  if (quantizeTokens) {
    scatterArgs[0] = "x_q";
    scatterArgs[4] = "rows_q";
    scatterArgs.append({"x_scale", "rows_scale"});
  }
  {
    Kernel k = kernel("dispatch_scatter", scatterArgs,
                      gridOf(moegpu::GridKind::Assignments, 1), kRowThreads);
    StringRef x = scatterArgs[0], rows = scatterArgs[4];
    kernelOp<moegpu::DispatchScatterOp>(
        k, k[x], k["topk_ids"], k["topk_weights"], k["cursors"], k[rows],
        k["row_map"], k["row_weight"], k.get("x_scale"), k.get("rows_scale"),
        config.getExperts(), chunks, config.getScaleInput());
  }
  if (fp8 && !quantizeTokens)
    quantize(kernel("quantize_rows", {"rows", "offsets", "rows_q", "rows_scale"},
                    gridOf(moegpu::GridKind::Rows, kQuantizeWarps),
                    kQuantizeWarps * 32),
             "rows", "offsets", "rows_q", "rows_scale");

  // The shared experts ran beside the device-initiated sends.
  bool sharedDone = false;
  if (ep > 1 && chunks > 1) {
    sharedDone = buildChunkedExperts(ep);
  } else if (ep > 1 && fp8) {
    // FP8 rows travel as codes, their scales beside them (device-
    // initiated: a send each, on flags of their own, beside the shared
    // experts).
    if (lsa) {
      buildDeviceCounts(ep);
      buildDeviceSend("ep_dispatch", ep, kFlagDispatch, "rows_q", "ep_rows_q",
                      "row_weight", "ep_row_weight");
      buildDeviceSend("ep_dispatch_scales", ep, kFlagDispatchRows, "rows_scale",
                      "ep_rows_scale");
      if (shared)
        launchFp8SharedExperts();
      sharedDone = shared;
    }
    addHostExchange(moegpu::ExchangeKind::Dispatch,
                    {"offsets", "rows_q", "row_weight", "ep_offsets",
                     "ep_group_offsets", "ep_rows_q", "ep_row_weight"});
    addHostExchange(moegpu::ExchangeKind::DispatchRows,
                    {"rows_scale", "ep_rows_scale"});
    if (lsa) {
      buildDeviceWait("ep_dispatch_wait", ep, kFlagDispatch);
      buildDeviceWait("ep_dispatch_scales_wait", ep, kFlagDispatchRows);
    }
    launchFp8Experts("ep_", "ep_group_offsets", std::nullopt);
    if (lsa)
      buildDeviceSend("ep_combine", ep, kFlagCombine, "ep_down", "down");
    addHostExchange(moegpu::ExchangeKind::Combine,
                    {"ep_offsets", "ep_down", "offsets", "down"});
    if (lsa)
      buildDeviceWait("ep_combine_wait", ep, kFlagCombine);
  } else if (ep > 1) {
    // The device-initiated sends run on the comm SMs beside the shared
    // experts, which need no exchanged row: the up projection while the
    // rows travel, the down projection while they come back.
    if (lsa) {
      buildDeviceCounts(ep);
      buildDeviceSend("ep_dispatch", ep, kFlagDispatch, "rows", "ep_rows",
                      "row_weight", "ep_row_weight");
      if (shared)
        launchGemm("shared_up", Gemm("x", "ws13", "shared_offsets",
                                     "shared_act", moegpu::Epilogue::SwiGLU));
    }
    addHostExchange(moegpu::ExchangeKind::Dispatch,
                    {"offsets", "rows", "row_weight", "ep_offsets",
                     "ep_group_offsets", "ep_rows", "ep_row_weight"});
    if (lsa)
      buildDeviceWait("ep_dispatch_wait", ep, kFlagDispatch);
    launchExperts("ep_rows", "ep_group_offsets", "ep_act", "ep_down",
                  "ep_row_weight", std::nullopt);
    if (lsa) {
      buildDeviceSend("ep_combine", ep, kFlagCombine, "ep_down", "down");
      if (shared)
        launchGemm("shared_down",
                   Gemm("shared_act", "ws2", "shared_offsets", "shared_out"));
      sharedDone = shared;
    }
    addHostExchange(moegpu::ExchangeKind::Combine,
                    {"ep_offsets", "ep_down", "offsets", "down"});
    if (lsa)
      buildDeviceWait("ep_combine_wait", ep, kFlagCombine);
  } else if (fp8) {
    launchFp8Experts("", "offsets", std::nullopt);
  } else {
    launchExperts("rows", "offsets", "act", "down", "row_weight", std::nullopt);
  }
  // Chunked, the shared experts' up projection ran beside the first
  // chunk's dispatch (buildChunkedExperts); the rest runs beside the last
  // chunk's way back.
  if (shared && fp8 && !sharedDone) {
    launchFp8SharedExperts();
  } else if (shared && chunks == 1 && !sharedDone) {
    launchGemm("shared_up", Gemm("x", "ws13", "shared_offsets", "shared_act",
                                 moegpu::Epilogue::SwiGLU));
  }
  if (shared && !fp8 && !sharedDone) {
    launchGemm("shared_down",
               Gemm("shared_act", "ws2", "shared_offsets", "shared_out"));
  }
  SmallVector<StringRef> combineArgs{"down", "row_map"};
  if (shared)
    combineArgs.push_back("shared_out");
  if (gated)
    combineArgs.push_back("shared_scale");
  if (config.getOutputBias())
    combineArgs.push_back("output_bias");
  combineArgs.push_back("y");
  {
    Kernel k = kernel("combine", combineArgs,
                      gridOf(moegpu::GridKind::Tokens, 1), kRowThreads);
    kernelOp<moegpu::CombineOp>(k, k["down"], k["row_map"], k.get("shared_out"),
                                k.get("shared_scale"), k.get("output_bias"),
                                k["y"]);
  }
  if (train || backward)
    buildTraining();

  // The buffers, ahead of the schedules in the program.
  OpBuilder bb = builderAtStart(&program.getBody().front());
  for (const Buffer &buf : buffers) {
    SmallVector<Attribute> dims;
    for (int64_t d : buf.shape)
      if (d < 0)
        dims.push_back(moegpu::BufferDimAttr::get(
            ctx, d == kTokens         ? moegpu::BufferDim::Tokens
                 : d == kRows         ? moegpu::BufferDim::Rows
                 : d == kReceivedRows ? moegpu::BufferDim::ReceivedRows
                 : d == kRowBlocks    ? moegpu::BufferDim::RowBlocks
                                      : moegpu::BufferDim::ReceivedRowBlocks));
    moegpu::BufferOp::create(bb, layer.getLoc(), buf.name,
                             memrefType(buf.name), bb.getArrayAttr(dims),
                             buf.source);
  }
  return success();
}

// The device-initiated exchange: ep_counts, then sends (on the comm SMs'
// CTAs) and their waits, steps of transport lsa. Flags: one a rank (the
// sizes), then one a send (kFlagDispatch... past the ranks').
void LayerBuilder::buildDeviceCounts(int64_t ep) {
  transport = moegpu::Transport::Lsa;
  SmallVector<std::string> groups;
  for (int64_t c = 0; c < chunks; ++c)
    groups.push_back(groupOffsets(c));
  SmallVector<StringRef> args{"offsets",  "ep_table", "ep_flags",
                              "ep_epoch", "ep_peers", "ep_offsets",
                              "send_pos", "back_pos", "ep_status"};
  args.append(groups.begin(), groups.end());
  Kernel k = kernel("ep_counts", args, fixedGrid(1), kRowThreads);
  SmallVector<Value> groupArgs;
  for (const std::string &g : groups)
    groupArgs.push_back(k[g]);
  kernelOp<moegpu::EpCountsOp>(k, k["offsets"], k["ep_table"], k["ep_flags"],
                               k["ep_epoch"], k["ep_peers"], k["ep_offsets"],
                               k["send_pos"], k["back_pos"], k["ep_status"],
                               groupArgs, ep);
  transport.reset();
}

/// A chunk's kernel of an exchange: `name`_c<chunk>.
static std::string chunkKernel(StringRef name, std::optional<int64_t> chunk) {
  return chunk ? (name + "_c" + Twine(*chunk)).str() : name.str();
}

void LayerBuilder::buildDeviceSend(StringRef name, int64_t ep, int64_t flag,
                                   StringRef rows, StringRef to,
                                   StringRef weights, StringRef toWeights,
                                   std::optional<int64_t> chunk) {
  transport = moegpu::Transport::Lsa;
  // Dispatch: this rank's segments by expert, each to its owner's
  // position; combine: the received segments back to their sources.
  bool dispatch = flag == kFlagDispatch || flag == kFlagDispatchRows;
  StringRef segments = dispatch ? "offsets" : "ep_offsets";
  StringRef positions = dispatch ? "send_pos" : "back_pos";
  SmallVector<StringRef> args{segments, positions, rows, to};
  if (!weights.empty())
    args.append({weights, toWeights});
  args.append({"ep_flags", "ep_status", "ep_peers"});
  Kernel k = kernel(chunkKernel(name, chunk), args, fixedGrid(commCtas),
                    kRowThreads, chunk);
  kernelOp<moegpu::EpSendOp>(
      k,
      dispatch ? moegpu::EpDirection::Dispatch : moegpu::EpDirection::Combine,
      k[segments], k[positions], k[rows], k[to],
      weights.empty() ? Value() : k[weights],
      toWeights.empty() ? Value() : k[toWeights], k["ep_flags"], k["ep_status"],
      k["ep_peers"], ep, flagSlot(ep, flag, chunk), chunk.value_or(0), chunks);
  transport.reset();
}

void LayerBuilder::buildDeviceWait(StringRef name, int64_t ep, int64_t flag,
                                   std::optional<int64_t> chunk) {
  transport = moegpu::Transport::Lsa;
  Kernel k = kernel(chunkKernel(name, chunk),
                    {"ep_flags", "ep_waited", "ep_status", "ep_peers"},
                    fixedGrid(1), 32, chunk);
  using ::moe::abi::ExchangeStatus;
  bool dispatch = flag == kFlagDispatch || flag == kFlagDispatchRows;
  auto code = static_cast<int64_t>(dispatch ? ExchangeStatus::DispatchTimeout
                                            : ExchangeStatus::CombineTimeout);
  kernelOp<moegpu::EpWaitOp>(k, k["ep_flags"], k["ep_waited"], k["ep_status"],
                             k["ep_peers"], ep, flagSlot(ep, flag, chunk),
                             commCtas, code);
  transport.reset();
}

void LayerBuilder::launchExperts(StringRef rows, StringRef groups,
                                 StringRef act, StringRef down,
                                 StringRef rowWeight,
                                 std::optional<int64_t> chunk) {
  // The experts' biases (GPT-OSS).
  bool bias = config.getExpertBias();
  launchGemm("expert_up",
             Gemm(rows, "w13", groups, act, moegpu::Epilogue::SwiGLU)
                 .withBias(bias ? "b13" : "")
                 .ofExperts(),
             chunk);
  launchGemm("expert_down",
             Gemm(act, "w2", groups, down, moegpu::Epilogue::RowScale)
                 .scaleRows(rowWeight)
                 .withBias(bias ? "b2" : ""),
             chunk);
}

void LayerBuilder::launchFp8Experts(StringRef prefix, StringRef groups,
                                    std::optional<int64_t> chunk) {
  auto rows = gridOf(prefix.empty() ? moegpu::GridKind::Rows
                                    : moegpu::GridKind::ReceivedRows,
                     kQuantizeWarps);
  // The rows came quantized (from the dispatch, or the exchange).
  auto name = [&](StringRef buffer) { return (prefix + buffer).str(); };
  std::string rowsQ = name("rows_q"), rowsScale = name("rows_scale"),
              act = name("act"), actQ = name("act_q"),
              actScale = name("act_scale"), down = name("down"),
              rowWeight = name("row_weight");
  launchGemm("expert_up",
             Gemm(rowsQ, "w13", groups, act, moegpu::Epilogue::SwiGLU)
                 .blockScales(rowsScale, "w13_scale")
                 .ofExperts(),
             chunk);
  launchKernel("quantize_act", {act, groups, actQ, actScale}, rows,
               kQuantizeWarps * 32, chunk, [&](gpu::GPUFuncOp f) {
                 quantize(kernelOf(f, {act, groups, actQ, actScale}), act,
                          groups, actQ, actScale);
               });
  launchGemm("expert_down",
             Gemm(actQ, "w2", groups, down, moegpu::Epilogue::RowScale)
                 .scaleRows(rowWeight)
                 .blockScales(actScale, "w2_scale"),
             chunk);
}

void LayerBuilder::launchFp8SharedExperts() {
  auto tokens = gridOf(moegpu::GridKind::Tokens, kQuantizeWarps);
  launchGemm("shared_up", Gemm("x_q", "ws13", "shared_offsets", "shared_act",
                               moegpu::Epilogue::SwiGLU)
                              .blockScales("x_scale", "ws13_scale"));
  quantize(kernel("quantize_shared_act",
                  {"shared_act", "shared_act_q", "shared_act_scale"}, tokens,
                  kQuantizeWarps * 32),
           "shared_act", "", "shared_act_q", "shared_act_scale");
  launchGemm("shared_down",
             Gemm("shared_act_q", "ws2", "shared_offsets", "shared_out")
                 .blockScales("shared_act_scale", "ws2_scale"));
}

bool LayerBuilder::buildChunkedExperts(int64_t ep) {
  bool fp8 = config.isFp8(), shared = config.hasSharedExperts();
  // Device-initiated: every chunk's sizes and layouts at once, then every
  // chunk's rows on the comm SMs, a send (and a flag) a chunk.
  if (lsa) {
    buildDeviceCounts(ep);
    for (int64_t c = 0; c < chunks; ++c) {
      if (fp8) {
        buildDeviceSend("ep_dispatch", ep, kFlagDispatch, "rows_q", "ep_rows_q",
                        "row_weight", "ep_row_weight", c);
        buildDeviceSend("ep_dispatch_scales", ep, kFlagDispatchRows,
                        "rows_scale", "ep_rows_scale", "", "", c);
      } else {
        buildDeviceSend("ep_dispatch", ep, kFlagDispatch, "rows", "ep_rows",
                        "row_weight", "ep_row_weight", c);
      }
    }
  }
  // Host-driven: one wait of the host for the device, every chunk's sizes
  // exchanged at once and the layout of what each chunk brings.
  SmallVector<std::string> plan{"offsets", "ep_offsets"};
  for (int64_t c = 0; c < chunks; ++c)
    plan.push_back(groupOffsets(c));
  SmallVector<StringRef> planArgs(plan.begin(), plan.end());
  addHostExchange(moegpu::ExchangeKind::DispatchPlan, planArgs);
  // Every chunk's rows and weights are enqueued on the communicator's
  // stream at once: chunk c + 1's move while chunk c's GEMMs run.
  for (int64_t c = 0; c < chunks; ++c) {
    if (fp8) {
      addHostExchange(moegpu::ExchangeKind::DispatchRows,
                      {"rows_q", "ep_rows_q"}, c);
      addHostExchange(moegpu::ExchangeKind::DispatchRows,
                      {"rows_scale", "ep_rows_scale"}, c);
    } else {
      addHostExchange(moegpu::ExchangeKind::DispatchRows, {"rows", "ep_rows"},
                      c);
    }
    addHostExchange(moegpu::ExchangeKind::DispatchRows,
                    {"row_weight", "ep_row_weight"}, c);
  }
  // The shared experts' up projection needs no exchanged rows: it runs
  // while the first chunk's rows travel (FP8: the device-initiated path
  // runs all of the shared experts there; the host-driven one after the
  // routed experts).
  if (shared && !fp8)
    launchGemm("shared_up", Gemm("x", "ws13", "shared_offsets", "shared_act",
                                 moegpu::Epilogue::SwiGLU));
  else if (shared && lsa)
    launchFp8SharedExperts();
  // Each chunk's GEMMs wait for its own rows only; its outputs go back as
  // soon as its down projection is done, beside the next chunk's GEMMs.
  for (int64_t c = 0; c < chunks; ++c) {
    if (lsa) {
      buildDeviceWait("ep_dispatch_wait", ep, kFlagDispatch, c);
      if (fp8)
        buildDeviceWait("ep_dispatch_scales_wait", ep, kFlagDispatchRows, c);
    }
    if (fp8)
      launchFp8Experts("ep_", groupOffsets(c), c);
    else
      launchExperts("ep_rows", groupOffsets(c), "ep_act", "ep_down",
                    "ep_row_weight", c);
    if (lsa)
      buildDeviceSend("ep_combine", ep, kFlagCombine, "ep_down", "down", "", "",
                      c);
    addHostExchange(moegpu::ExchangeKind::CombineRows, {"ep_down", "down"}, c);
  }
  if (!lsa)
    return false;
  // The shared experts' down projection covers the last chunk's way back;
  // the waits come after it.
  if (shared && !fp8)
    launchGemm("shared_down",
               Gemm("shared_act", "ws2", "shared_offsets", "shared_out"));
  for (int64_t c = 0; c < chunks; ++c)
    buildDeviceWait("ep_combine_wait", ep, kFlagCombine, c);
  return shared;
}

namespace {

/// moe.layer -> its kernels (a gpu.module) and the typed schedule beside
/// them, built through the rewriter; the layer's value becomes poison (the
/// pass then erases the function around it).
struct ConvertLayer : OpConversionPattern<LayerOp> {
  ConvertLayer(MLIRContext *ctx, int64_t alignment, bool train, bool backward,
               Type momentType)
      : OpConversionPattern(ctx), alignment(alignment), train(train),
        backward(backward), momentType(momentType) {}

  LogicalResult
  matchAndRewrite(LayerOp layer, OpAdaptor,
                  ConversionPatternRewriter &rewriter) const override {
    auto module = layer->getParentOfType<ModuleOp>();
    if (failed(LayerBuilder(layer, alignment, train, backward, momentType,
                            rewriter.getListener())
                   .build(module)))
      return failure();
    rewriter.replaceOpWithNewOp<ub::PoisonOp>(layer, layer.getType());
    return success();
  }

  int64_t alignment;
  bool train, backward;
  Type momentType;
};

struct ConvertMoeToMoeGpu
    : public mlir::moe::impl::ConvertMoeToMoeGpuBase<ConvertMoeToMoeGpu> {
  using ConvertMoeToMoeGpuBase::ConvertMoeToMoeGpuBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    int64_t count = 0;
    LayerOp layer = getOnlyLayer(module, &count);
    if (!layer) {
      module.emitError() << "convert-moe-to-moegpu expects exactly one "
                            "moe.layer in the module, found "
                         << count;
      return signalPassFailure();
    }
    auto func = layer->getParentOfType<FunctionOpInterface>();
    if (!func || func->getParentOp() != module.getOperation()) {
      layer.emitOpError() << "must be in a function at the top of the module";
      return signalPassFailure();
    }
    if (auto partition = func->getAttrOfType<SmPartitionAttr>(
            MoeDialect::getSmPartitionAttrName());
        partition && !layer.getPartitionAttr())
      layer.setPartitionAttr(partition);
    SmPartitionAttr partition = layer.getPartitionAttr();
    if (std::string why = layer.getConfig().getUntrainable();
        (train || backward) && !why.empty()) {
      layer.emitOpError() << "has no "
                          << (train ? "training step" : "backward pass")
                          << " yet: " << why;
      return signalPassFailure();
    }

    // Checked before the conversion, so that the error is the only one
    // (a failed pattern would add "failed to legalize").
    if (failed(checkSm90Dtype(layer)) ||
        failed(checkSm90Fp8(layer, train, backward, alignment)))
      return signalPassFailure();

    // The layer is the one moe op this conversion takes; any other left in
    // the module (a primitive the sm_90a target has no kernel for) fails
    // to legalize.
    MLIRContext *ctx = &getContext();
    ConversionTarget target(*ctx);
    target.addIllegalDialect<MoeDialect>();
    target.markUnknownOpDynamicallyLegal([](Operation *) { return true; });
    RewritePatternSet patterns(ctx);
    if (train && backward) {
      layer.emitOpError() << "takes train or backward, not both (a training "
                             "step's bundle already has its backward kernels)";
      return signalPassFailure();
    }
    if (optimizerState != "f32" && optimizerState != "bf16") {
      module.emitError() << "convert-moe-to-moegpu: unknown optimizer-state '"
                         << optimizerState << "' (expected f32 or bf16)";
      return signalPassFailure();
    }
    if (optimizerState == "bf16" && !train) {
      layer.emitOpError() << "optimizer-state=bf16 is the training step's: "
                             "add train";
      return signalPassFailure();
    }
    Builder types(ctx);
    Type moments = optimizerState == "bf16" ? Type(types.getBF16Type())
                                            : Type(types.getF32Type());
    patterns.add<ConvertLayer>(ctx, alignment, train, backward, moments);
    if (failed(applyPartialConversion(module, target, std::move(patterns))))
      return signalPassFailure();

    // The host function around the layer has served its purpose: the
    // schedule is the entry point now.
    func->erase();
    Builder attrs(ctx);
    module->setAttr("moegpu.alignment", attrs.getI64IntegerAttr(alignment));
    module->setAttr(gpu::GPUDialect::getContainerModuleAttrName(),
                    attrs.getUnitAttr());
    if (partition)
      module->setAttr(MoeDialect::getSmPartitionAttrName(), partition);
  }
};

} // namespace
