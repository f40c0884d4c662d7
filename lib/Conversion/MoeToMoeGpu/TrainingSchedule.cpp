//===- TrainingSchedule.cpp - The training step's schedule ----------------===//
//
// Part of moe-compiler.
//
// The step's kernels and buffers around the forward schedule: compute
// copies of the masters, the forward pass, the loss, the backward kernels,
// the load and bias update and AdamW. The backward pass alone (a
// framework's autograd) is the same schedule from the caller's dy on the
// bound weights, without the copies, the loss and what follows the
// gradients.
//
//===----------------------------------------------------------------------===//

#include "LayerBuilder.h"

#include <deque>

using namespace mlir;
using namespace mlir::moe;
using namespace mlir::moe::lowering;

/// The scales of e4m3 codes `codes`: `x_q`'s are `x_scale`, `w13`'s
/// `w13_scale`.
static std::string scaleOf(StringRef codes) {
  codes.consume_back("_q");
  return (codes + "_scale").str();
}

void LayerBuilder::buildTraining() {
  int64_t h = config.getHidden(), e = config.getExperts();
  int64_t f = config.getFfn(), s = config.getSharedFfnTotal();
  bool shared = config.hasSharedExperts(), bias = config.getScoreBias();
  auto ep = static_cast<int64_t>(layer.getEpSize());
  Type f32 = Builder(ctx).getF32Type(), i32 = Builder(ctx).getI32Type();

  // The step's arguments: x and score_bias are the forward pass's own
  // buffers; the others are `arg.<name>`. The backward pass's dy is the
  // step's own buffer (the loss's gradient there).
  std::vector<TrainArgument> args =
      backward ? listDeviceBackwardArguments(layer)
               : listDeviceTrainArguments(layer, momentType);
  for (const TrainArgument &arg : args) {
    if (arg.name == "x" || arg.name == "score_bias" || arg.name == "dy")
      continue;
    SmallVector<int64_t> shape;
    for (int64_t d : arg.type.getShape())
      shape.push_back(ShapedType::isDynamic(d) ? kTokens : d);
    addBuffer("arg." + arg.name, arg.type.getElementType(), shape,
              "arg:" + arg.name);
  }
  auto arg = [](StringRef name) { return ("arg." + name).str(); };
  // The dispatched rows' output gradient and input gradient travel (and
  // are kept) in the compute type, as the backward GEMMs read and write
  // them: half the bytes of f32 in the exchanges and in memory.
  Type half = memrefType("x").getElementType();
  // FP8 (DeepSeek-V3's recipe, the block scaling): every backward GEMM in
  // e4m3 with f32 promotion per 128 of K. The gate and up gradients go
  // split at F' = 128 ceil(F / 128) (act_grad `split`), so that each
  // 128 columns of the input gradient's reduction hold one of them.
  bool fp8 = config.isFp8();
  Type f8 = fp8 ? config.getExpertDtype() : Type();
  int64_t hb = fp8Blocks(h), fb = fp8Blocks(f), sb = fp8Blocks(s);
  int64_t dguWidth = fp8 ? 2 * fb * kFp8Block : 2 * f;
  int64_t sharedDguWidth = fp8 ? 2 * sb * kFp8Block : 2 * s;
  addBuffer("dy", f32, {kTokens, h}, backward ? "arg:dy" : "scratch");
  addBuffer("row_token", i32, {kRows}, "scratch");
  addBuffer("row_dy", half, {kRows, h}, "scratch");
  // With the device-initiated exchange the experts' ranks store the rows'
  // gradients straight into these two.
  addBuffer("row_weight_grad", f32, {kRows}, lsa ? "symmetric" : "scratch");
  addBuffer("dtw", f32, {kTokens, config.getTopK()}, "scratch");
  addBuffer("drows", half, {kRows, h}, lsa ? "symmetric" : "scratch");
  addBuffer("dl", f32, {kTokens, e}, "scratch");
  if (shared) {
    addBuffer("dy_half", half, {kTokens, h}, "scratch");
    addBuffer("shared_gu", f32, {kTokens, 2 * s}, "scratch");
    addBuffer("shared_gs", f32, {kTokens, s}, "scratch");
    addBuffer("shared_dgu", half, {kTokens, sharedDguWidth}, "scratch");
    addBuffer("shared_dg", half, {kTokens, s}, "scratch");
    addBuffer("shared_du", half, {kTokens, s}, "scratch");
    addBuffer("shared_dx", f32, {kTokens, h}, "scratch");
  }
  // Qwen2-MoE's gate on the shared output: its logit's gradient a token.
  bool gated = config.getSharedGate();
  if (gated)
    addBuffer("shared_dz", f32, {kTokens, 1}, "scratch");
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
  // The backward GEMMs' other operands in the compute type: the output
  // gradient times the routing weight, and the gate/up pre-activations'
  // gradient, interleaved as w13's rows for dX and split for dW.
  addBuffer("dyw", half, {expertRows, h}, "scratch");
  addBuffer("gu", f32, {expertRows, 2 * f}, "scratch");
  addBuffer("gs", f32, {expertRows, f}, "scratch");
  addBuffer("dgu", half, {expertRows, dguWidth}, "scratch");
  addBuffer("dg", half, {expertRows, f}, "scratch");
  addBuffer("du", half, {expertRows, f}, "scratch");
  // FP8's operands: the weights' transposed codes and scales (the input
  // gradients' B, K-major), the 1 x 128 codes of the Dgrad GEMMs' A, and
  // the 128 x 1 codes of the weight gradients' two operands, transposed
  // (each column's rows, per 128 rows of an expert): `t_h` holds dY w
  // then the rows, `t_f` the activation then dG, `t_f2` dU (the shared
  // experts' `t_s` and `t_s2` theirs of width S).
  auto addCodes = [&](StringRef name, ArrayRef<int64_t> shape,
                      ArrayRef<int64_t> scaleShape) {
    addBuffer(name, f8, shape, "scratch");
    addBuffer(scaleOf(name), f32, scaleShape, "scratch");
  };
  int64_t local = e / ep;
  if (fp8) {
    addCodes("w13_t", {local, h, dguWidth}, {local, hb, 2 * fb});
    addCodes("w2_t", {local, f, h}, {local, fb, hb});
    addCodes("row_dy_q", {kRows, h}, {kRows, hb});
    addCodes("dgu_q", {kRows, dguWidth}, {kRows, 2 * fb});
    addCodes("t_h", {h, kRows}, {h, kRowBlocks});
    addCodes("t_f", {f, kRows}, {f, kRowBlocks});
    addCodes("t_f2", {f, kRows}, {f, kRowBlocks});
    if (shared) {
      addCodes("ws13_t", {1, h, sharedDguWidth}, {1, hb, 2 * sb});
      addCodes("ws2_t", {1, s, h}, {1, sb, hb});
      addCodes("shared_dy_q", {kTokens, h}, {kTokens, hb});
      addCodes("shared_dgu_q", {kTokens, sharedDguWidth}, {kTokens, 2 * sb});
      addCodes("t_s", {s, kRows}, {s, kRowBlocks});
      addCodes("t_s2", {s, kRows}, {s, kRowBlocks});
    }
  }
  if (sharded) {
    addBuffer("ep_row_dy", half, {kReceivedRows, h},
              lsa ? "symmetric" : "scratch");
    addBuffer("ep_row_weight_grad", f32, {kReceivedRows}, "scratch");
    addBuffer("ep_drows", half, {kReceivedRows, h}, "scratch");
  }
  moegpu::GridAttr expertGrid = gridOf(sharded ? moegpu::GridKind::ReceivedRows : moegpu::GridKind::Rows);

  OpBuilder pb = builderAtEnd(&program.getBody().front());
  training = moegpu::ScheduleOp::create(pb, layer.getLoc(),
                                        backward ? "backward" : "train");
  steps = &training.getBody().front();
  auto elementGrid = [&](int64_t n) {
    return fixedGrid((n + kCountThreads - 1) / kCountThreads);
  };
  // Compute copies of the master weights, gate and up interleaved
  // (kGateUpBlock rows each) as the SwiGLU GEMM reads them: made here only
  // when the host wrote a master (the runtime clears copies_valid, the
  // verdict sets it); AdamW rewrites them with the masters.
  struct CopySpec {
    std::string master, copy;
    moegpu::CopyLayout layout;
  };
  SmallVector<CopySpec> copySpecs;
  auto convert = [&](StringRef master, StringRef compute) {
    copySpecs.push_back(
        {master.str(), compute.str(), moegpu::CopyLayout::Same});
  };
  auto pack = [&](StringRef gate, StringRef up, StringRef packed) {
    copySpecs.push_back(
        {gate.str(), packed.str(), moegpu::CopyLayout::GateRows});
    copySpecs.push_back({up.str(), packed.str(), moegpu::CopyLayout::UpRows});
  };
  // FP8 experts' masters become e4m3 codes per 128 x 128 block instead
  // (moegpu.quantize_blocks): the forward's codes and scales and the
  // transposed ones of the input gradients, quantized when the host wrote
  // a master and after each update.
  struct BlockSpec {
    std::string master, codes;
    moegpu::CopyLayout layout;
  };
  SmallVector<BlockSpec> blockSpecs;
  auto expertWeights = [&](StringRef gate, StringRef up, StringRef down,
                           StringRef packed, StringRef downCodes) {
    if (!fp8) {
      pack(gate, up, packed);
      convert(down, downCodes);
      return;
    }
    blockSpecs.push_back(
        {gate.str(), packed.str(), moegpu::CopyLayout::GateRows});
    blockSpecs.push_back({up.str(), packed.str(), moegpu::CopyLayout::UpRows});
    blockSpecs.push_back(
        {down.str(), downCodes.str(), moegpu::CopyLayout::Same});
  };
  convert("router_weight", "router_weight");
  expertWeights("gate_weight", "up_weight", "down_weight", "w13", "w2");
  if (shared)
    expertWeights("shared_gate_weight", "shared_up_weight",
                  "shared_down_weight", "ws13", "ws2");
  if (gated)
    convert("shared_expert_gate", "shared_expert_gate");
  bool outputBias = config.getOutputBias();
  if (outputBias)
    convert("output_bias", "output_bias");
  // GPT-OSS's router and expert biases.
  bool routerBias = config.getRouterBias(), expertBias = config.getExpertBias();
  if (routerBias)
    convert("router_bias", "router_bias");
  if (expertBias) {
    pack("gate_bias", "up_bias", "b13");
    convert("down_bias", "b2");
  }
  if (!backward)
    addBuffer("copies_valid", f32, {1}, "scratch");
  // Each trained weight's largest |master|, |first moment| and second
  // moment (f32 bits): update_check takes them from the state after the
  // host wrote it, AdamW keeps them, and with them the check reads only
  // the gradients (grad_stats) in a step after the first.
  int64_t weightCount = listTrainedWeights(layer).size();
  if (!backward)
    addBuffer("state_bounds", i32, {weightCount, 3}, "scratch");
  auto layoutsOf = [&](ArrayRef<const CopySpec *> specs) {
    SmallVector<Attribute> layouts;
    for (const CopySpec *c : specs)
      layouts.push_back(moegpu::CopyLayoutAttr::get(ctx, c->layout));
    return ArrayAttr::get(ctx, layouts);
  };
  // (The backward pass reads the bound weights themselves.)
  if (!backward) {
    llvm::SetVector<StringRef> names;
    SmallVector<std::string> masters;
    for (const CopySpec &c : copySpecs)
      masters.push_back(arg(c.master));
    for (auto [c, master] : llvm::zip(copySpecs, masters)) {
      names.insert(master);
      names.insert(c.copy);
    }
    names.insert("copies_valid");
    names.insert("state_bounds");
    int64_t elements = 0;
    for (const std::string &m : masters)
      elements += memrefType(m).getNumElements();
    Kernel k = kernel("train_compute_copies", names.getArrayRef(),
                      strideGrid(elements), kCountThreads);
    SmallVector<Value> from, to;
    SmallVector<const CopySpec *> specs;
    for (auto [c, master] : llvm::zip(copySpecs, masters)) {
      from.push_back(k[master]);
      to.push_back(k[c.copy]);
      specs.push_back(&c);
    }
    kernelOp<moegpu::ComputeCopiesOp>(k, from, to, layoutsOf(specs),
                                      k["copies_valid"], k["state_bounds"]);
  }
  // FP8: each expert master's codes and scales, and the transposed ones,
  // a CTA per 128 x 128 block; in the step only when the host wrote a
  // master (`unless` copies_valid), and after each update.
  auto quantizeMasters = [&](StringRef prefix, bool always) {
    for (const BlockSpec &spec : blockSpecs) {
      std::string master = arg(spec.master), codes = spec.codes;
      std::string scale = scaleOf(codes), transposed = codes + "_t",
                  transposedScale = scaleOf(transposed);
      SmallVector<StringRef> names{master, codes, scale, transposed,
                                   transposedScale};
      if (!always)
        names.push_back("copies_valid");
      // A shared expert's [N, K] master is one matrix of [1, N, K].
      MemRefType type = memrefType(master);
      SmallVector<int64_t> shape(type.getShape());
      if (shape.size() == 2)
        shape.insert(shape.begin(), 1);
      int64_t ctas = shape[0] * fp8Blocks(shape[1]) * fp8Blocks(shape[2]);
      Kernel k = kernel((prefix + spec.master).str(), names, fixedGrid(ctas),
                        kBlockThreads);
      Value in = k[master];
      if (type.getRank() == 2) {
        OpBuilder b = builderAt(k.func.front().getTerminator());
        in = memref::ExpandShapeOp::create(
            b, layer.getLoc(), MemRefType::get(shape, type.getElementType()),
            in, ArrayRef<ReassociationIndices>{{0, 1}, {2}});
      }
      kernelOp<moegpu::QuantizeBlocksOp>(
          k, in, k[codes], k[scale], k[transposed], k[transposedScale],
          always ? Value() : k["copies_valid"],
          moegpu::CopyLayoutAttr::get(ctx, spec.layout));
    }
  };
  if (!backward)
    quantizeMasters("train_quantize_", /*always=*/false);
  // The forward pass, with the padding rows of the dispatched rows and
  // their weights zeroed: the backward pass sums over whole segments.
  for (Operation &step : forward.getBody().front()) {
    if (auto launch = dyn_cast<moegpu::LaunchOp>(step);
        launch && runs<moegpu::DispatchScatterOp>(launch)) {
      // FP8 tokens dispatch their codes and scales (a padding row's
      // garbage code could be a NaN, which a zero scale keeps).
      if (dispatchesCodes()) {
        addMemset("rows_q");
        addMemset("rows_scale");
      } else {
        addMemset("rows");
      }
      addMemset("row_weight");
    }
    OpBuilder b = stepBuilder();
    b.clone(step);
  }
  // Loss, and dy of every dispatched row (the backward pass's is the
  // caller's).
  if (!backward) {
    addMemset(arg("loss"));
    std::string target = arg("target"), hyper = arg("hyper"),
                loss = arg("loss");
    Kernel k = kernel("train_loss", {"y", target, hyper, "dy", loss},
                      gridOf(moegpu::GridKind::Tokens, 1), kRowThreads);
    kernelOp<moegpu::MseLossOp>(k, k["y"], k[target], k[hyper], k["dy"],
                                k[loss]);
  }
  // A column sum: the gradient of a bias added to every row.
  auto columnSum = [&](StringRef name, StringRef in, StringRef out,
                       int64_t columns) {
    Kernel k = kernel(name, {in, out}, elementGrid(columns), kCountThreads);
    kernelOp<moegpu::ColumnSumOp>(k, k[in], k[out]);
  };
  // JetMoE's output bias: the sum of dy over the tokens.
  if (outputBias)
    columnSum("train_output_bias_grad", "dy", arg("output_bias.grad"), h);
  addMemset("row_token");
  {
    Kernel k = kernel("train_row_tokens", {"row_map", "row_token"},
                      gridOf(moegpu::GridKind::Assignments, kCountThreads),
                      kCountThreads);
    kernelOp<moegpu::RowTokensOp>(k, k["row_map"], k["row_token"]);
  }
  addMemset("row_dy");
  {
    Kernel k = kernel("train_gather_row_dy",
                      {"dy", "row_token", "offsets", "row_dy"},
                      gridOf(moegpu::GridKind::Rows), kRowThreads);
    kernelOp<moegpu::GatherRowDyOp>(k, k["dy"], k["row_token"], k["offsets"],
                                    k["row_dy"], config.getTopK());
  }
  // The rows' dy go to the experts' ranks: all at once, or chunk by chunk
  // as the forward pass's rows went (each chunk's backward below waits for
  // its own).
  bool chunked = sharded && chunks > 1;
  int64_t passes = chunked ? chunks : 1;
  auto chunkOf = [&](int64_t c) {
    return chunked ? std::optional<int64_t>(c) : std::nullopt;
  };
  for (int64_t c = 0; lsa && c < passes; ++c)
    buildDeviceSend("ep_dispatch_dy", ep, kFlagDispatchRows, "row_dy",
                    "ep_row_dy", "", "", chunkOf(c));
  for (int64_t c = 0; sharded && c < passes; ++c)
    addHostExchange(moegpu::ExchangeKind::DispatchRows, {"row_dy", "ep_row_dy"},
                    chunked ? std::optional<int64_t>(c) : std::nullopt);
  auto none = moegpu::Epilogue::None;
  auto nn = moegpu::GemmLayout::NN, tn = moegpu::GemmLayout::TN;
  // FP8: rows `in` of `groups` as 1 x 128 codes `out` and scales
  // (`grid`: the rows' kind), and as 128 x 1 codes of each column,
  // transposed (`in_scale`: e4m3 rows with their 1 x 128 scales).
  auto quantizeRows = [&](StringRef name, StringRef in, StringRef groups,
                          StringRef out, moegpu::GridKind grid,
                          std::optional<int64_t> chunk) {
    std::string scale = scaleOf(out);
    SmallVector<StringRef> names{in, groups, out, scale};
    launchKernel(name, names, gridOf(grid, kQuantizeWarps), kQuantizeWarps * 32,
                 chunk, [&](gpu::GPUFuncOp f) {
                   quantize(kernelOf(f, names), in, groups, out, scale,
                            kFp8MinGradAmax);
                 });
  };
  auto quantizeColumns = [&](StringRef name, StringRef in, StringRef inScale,
                             StringRef groups, StringRef out,
                             std::optional<int64_t> chunk) {
    std::string scale = scaleOf(out);
    SmallVector<StringRef> names{in, out, scale, groups};
    if (!inScale.empty())
      names.push_back(inScale);
    int64_t columns = memrefType(in).getDimSize(1);
    auto grid = moegpu::GridAttr::get(
        ctx, sharded ? moegpu::GridKind::ReceivedRows : moegpu::GridKind::Rows,
        kFp8Block, llvm::divideCeil(columns, kColumnTile));
    launchKernel(name, names, grid, kColumnThreads, chunk,
                 [&](gpu::GPUFuncOp f) {
                   Kernel k = kernelOf(f, names);
                   kernelOp<moegpu::QuantizeColumnsOp>(
                       k, k[in], k[out], k[scale], k[groups], k.get(inScale),
                       Builder(ctx).getF64FloatAttr(kFp8MinGradAmax));
                 });
  };
  // An e4m3 GEMM: a's and b's codes with their scales (scaleOf).
  std::deque<std::string> scaleNames;
  auto fp8Gemm = [&](StringRef a, StringRef b, StringRef groups, StringRef c,
                     moegpu::Epilogue epilogue = moegpu::Epilogue::None,
                     moegpu::GemmLayout layout = moegpu::GemmLayout::NT) {
    Gemm g(a, b, groups, c, epilogue, layout);
    StringRef aScale = scaleNames.emplace_back(scaleOf(a));
    StringRef bScale = scaleNames.emplace_back(scaleOf(b));
    g.blockScales(aScale, bScale);
    return g;
  };
  // FP8 weight gradients of the routed (`expert_`) or shared experts
  // (`shared_`, their weights' names too): 128 x 1 codes of dY w and the
  // activation for dW2, then of the rows' Fprop codes, dG and dU for dWg
  // and dWu (`t_h` holds dY w, then the rows), into k-grouped e4m3 GEMMs.
  struct Fp8WeightGrads {
    StringRef dyw, act, rows, rowsScale, dg, du, tF, tF2;
  };
  auto fp8WeightGrads = [&](StringRef who, const Fp8WeightGrads &o,
                            StringRef groups, StringRef suffix,
                            moegpu::Epilogue epilogue,
                            std::optional<int64_t> chunk) {
    std::string prefix = who == "shared" ? "shared_" : "";
    auto name = [&](StringRef what) {
      return ("train_" + who + "_" + what + suffix).str();
    };
    auto grad = [&](StringRef weight) {
      return arg(prefix + weight.str() + "_weight.grad");
    };
    quantizeColumns(name("columns_dyw"), o.dyw, "", groups, "t_h", chunk);
    quantizeColumns(name("columns_act"), o.act, "", groups, o.tF, chunk);
    launchGemm(name("down_grad"),
               fp8Gemm("t_h", o.tF, groups, grad("down"), epilogue, tn), chunk);
    quantizeColumns(name("columns_rows"), o.rows, o.rowsScale, groups, "t_h",
                    chunk);
    quantizeColumns(name("columns_dg"), o.dg, "", groups, o.tF, chunk);
    quantizeColumns(name("columns_du"), o.du, "", groups, o.tF2, chunk);
    launchGemm(name("gate_grad"),
               fp8Gemm(o.tF, "t_h", groups, grad("gate"), epilogue, tn), chunk);
    launchGemm(name("up_grad"),
               fp8Gemm(o.tF2, "t_h", groups, grad("up"), epilogue, tn), chunk);
  };
  // Shared experts (first: with expert parallelism they run while the
  // rows' dy travel, on the comm SMs or NCCL's stream): one group of every
  // token, weight 1. Their weight gradients reduce over the tokens in blocks of
  // 64 rows: rows past T are zero in dG and dU (the memsets) and in x (the
  // runtime clears the rows past an input's tokens).
  if (shared) {
    addMemset("dy_half");
    // Gated, the shared output's gradient is dy scaled by the gate, and
    // the gate's logit gets dy . shared_out through the sigmoid.
    SmallVector<StringRef> dyArgs{"dy", "shared_offsets", "dy_half"};
    if (gated) {
      dyArgs.push_back("shared_scale");
      Kernel k = kernel("train_shared_scale_grad",
                        {"dy", "shared_out", "shared_scale", "shared_dz"},
                        gridOf(moegpu::GridKind::Tokens, kRouteWarps),
                        kRouteWarps * 32);
      kernelOp<moegpu::SharedScaleGradOp>(k, k["dy"], k["shared_out"],
                                          k["shared_scale"], k["shared_dz"]);
      std::string grad = arg("shared_expert_gate.grad");
      Kernel g = kernel("train_shared_expert_gate_grad",
                        {"shared_dz", "x", grad}, fixedGrid(1), kRowThreads);
      kernelOp<moegpu::RouterGradOp>(g, g["shared_dz"], g["x"], g[grad]);
    }
    {
      Kernel k = kernel("train_shared_dy", dyArgs,
                        gridOf(moegpu::GridKind::Tokens, 1), kRowThreads);
      kernelOp<moegpu::ScaleRowsOp>(k, k["dy"], k["shared_offsets"],
                                    k["dy_half"], k.get("shared_scale"));
    }
    // FP8: the pre-activations from the forward's codes of x, and dY
    // quantized 1 x 128 against the down weight's transposed codes.
    if (fp8) {
      launchGemm(
          "train_shared_gate_up",
          fp8Gemm("x_q", "ws13", "shared_offsets", "shared_gu").gateUpScales());
      quantizeRows("train_shared_quantize_dy", "dy_half", "shared_offsets",
                   "shared_dy_q", moegpu::GridKind::Tokens, std::nullopt);
      launchGemm("train_shared_dact", fp8Gemm("shared_dy_q", "ws2_t",
                                              "shared_offsets", "shared_gs"));
    } else {
      launchGemm("train_shared_gate_up",
                 Gemm("x", "ws13", "shared_offsets", "shared_gu"));
      launchGemm("train_shared_dact", Gemm("dy_half", "ws2", "shared_offsets",
                                           "shared_gs", none, nn));
    }
    addMemset("shared_dg");
    addMemset("shared_du");
    {
      Kernel k = kernel("train_shared_act_grad",
                        {"shared_gu", "shared_gs", "shared_offsets",
                         "shared_dgu", "shared_dg", "shared_du"},
                        gridOf(moegpu::GridKind::Tokens, 1), kRowThreads);
      auto op = kernelOp<moegpu::ActGradOp>(
          k, k["shared_gu"], k["shared_gs"], k["shared_offsets"],
          k["shared_dgu"], k["shared_dg"], k["shared_du"], Value(), Value(),
          Value(), Value(), Value(), Value(), FloatAttr(), FloatAttr());
      op.setSplit(fp8);
      op.setRoundedInputs(fp8);
    }
    if (fp8) {
      // dX from the split gradient's 1 x 128 codes against the gate and
      // up weights' transposed codes; the weight gradients with x's
      // forward codes as the rows. The tiles past T count as zeros.
      quantizeRows("train_shared_quantize_dgu", "shared_dgu", "shared_offsets",
                   "shared_dgu_q", moegpu::GridKind::Tokens, std::nullopt);
      launchGemm(
          "train_shared_rows_grad",
          fp8Gemm("shared_dgu_q", "ws13_t", "shared_offsets", "shared_dx"));
      fp8WeightGrads("shared",
                     {"dy_half", "shared_act", "x_q", "x_scale", "shared_dg",
                      "shared_du", "t_s", "t_s2"},
                     "shared_offsets", "", none, std::nullopt);
    } else {
      launchGemm(
          "train_shared_rows_grad",
          Gemm("shared_dgu", "ws13", "shared_offsets", "shared_dx", none, nn));
      launchGemm("train_shared_down_grad",
                 Gemm("dy_half", "shared_act", "shared_offsets",
                      arg("shared_down_weight.grad"), none, tn));
      launchGemm("train_shared_gate_grad",
                 Gemm("shared_dg", "x", "shared_offsets",
                      arg("shared_gate_weight.grad"), none, tn));
      launchGemm("train_shared_up_grad",
                 Gemm("shared_du", "x", "shared_offsets",
                      arg("shared_up_weight.grad"), none, tn));
    }
  }
  // The routing weights' gradients are summed into (atomics per row).
  addMemset(xWeightGrad);
  // The experts, every GEMM on tensor cores: the gate and up
  // pre-activations again, GU = X . W13^T (nt, as the forward pass), and
  // GS = dY . W2 (nn); the SwiGLU backward elementwise; then dX = dGU . W13
  // (nn), dW2 = (w dY)^T . act and dWg, dWu = dG^T . X, dU^T . X (tn,
  // k-grouped over each expert's rows). Chunked, each chunk's rows go
  // through all of it on that chunk's groups, its rows' gradients go back
  // as soon as they are complete, and the weight gradients of the chunks
  // after the first accumulate into the first's.
  for (int64_t c = 0; c < passes; ++c) {
    std::optional<int64_t> chunk = chunkOf(c);
    std::string groups = chunked ? groupOffsets(c) : xGroups;
    // The chunk's dy travelled on the comm SMs beside the shared experts'
    // backward (and the chunks' before).
    if (lsa)
      buildDeviceWait("ep_dispatch_dy_wait", ep, kFlagDispatchRows, chunk);
    SmallVector<StringRef> dyArgs{xDy, groups, "dyw", xWeight};
    launchKernel("train_expert_dy", dyArgs, expertGrid, kRowThreads, chunk,
                 [&](gpu::GPUFuncOp f) {
                   Kernel k = kernelOf(f, dyArgs);
                   kernelOp<moegpu::ScaleRowsOp>(k, k[xDy], k[groups],
                                                 k["dyw"], k[xWeight]);
                 });
    // GPT-OSS: the pre-activations with the gate and up biases. FP8: from
    // the dispatched rows' codes, and dY quantized 1 x 128 against the
    // down weight's transposed codes.
    if (fp8) {
      launchGemm("train_expert_gate_up",
                 fp8Gemm("rows_q", "w13", groups, "gu").gateUpScales(), chunk);
      // The down projection's output gradient is w dY (dyw): its codes
      // give the weighted gs (act_grad's `combine`).
      quantizeRows("train_expert_quantize_dy", "dyw", groups, "row_dy_q",
                   moegpu::GridKind::Rows, chunk);
      launchGemm("train_expert_dact", fp8Gemm("row_dy_q", "w2_t", groups, "gs"),
                 chunk);
    } else {
      launchGemm(
          "train_expert_gate_up",
          Gemm(xRows, "w13", groups, "gu").withBias(expertBias ? "b13" : ""),
          chunk);
      launchGemm("train_expert_dact", Gemm(xDy, "w2", groups, "gs", none, nn),
                 chunk);
    }
    SmallVector<StringRef> actArgs{"gu", "gs", groups,  "dgu",
                                   "dg", "du", xWeight, xWeightGrad};
    if (expertBias)
      actArgs.append({xDy, "b2"});
    // FP8: the routing weights' gradients from the combine, unquantized
    // (gs comes from dY's codes).
    std::string xDown = sharded ? "ep_down" : "down";
    if (fp8)
      actArgs.append({xDy, xDown});
    launchKernel("train_expert_act_grad", actArgs, expertGrid, kRowThreads,
                 chunk, [&](gpu::GPUFuncOp f) {
                   Kernel k = kernelOf(f, actArgs);
                   // GPT-OSS's clamped SwiGLU.
                   FloatAttr alpha, limit;
                   if (config.isClamped()) {
                     Builder attrs(ctx);
                     alpha = attrs.getF64FloatAttr(
                         config.getSwigluAlphaValue());
                     limit = attrs.getF64FloatAttr(
                         config.getSwigluLimitValue());
                   }
                   auto op = kernelOp<moegpu::ActGradOp>(
                       k, k["gu"], k["gs"], k[groups], k["dgu"], k["dg"],
                       k["du"], k[xWeight], k[xWeightGrad],
                       expertBias ? k[xDy] : Value(), k.get("b2"),
                       fp8 ? k[xDy] : Value(), fp8 ? k[xDown] : Value(), alpha,
                       limit);
                   op.setSplit(fp8);
                   op.setRoundedInputs(fp8);
                 });
    // With expert parallelism each gradient goes back to its token's rank
    // as soon as it is complete: the exchanges run on the communicator's
    // stream beside the weight gradients' GEMMs, which do not touch them.
    if (sharded)
      addHostExchange(moegpu::ExchangeKind::CombineRows,
                      {"ep_row_weight_grad", "row_weight_grad"}, chunk);
    if (fp8) {
      quantizeRows("train_expert_quantize_dgu", "dgu", groups, "dgu_q",
                   moegpu::GridKind::Rows, chunk);
      launchGemm("train_expert_rows_grad",
                 fp8Gemm("dgu_q", "w13_t", groups, xDrows), chunk);
    } else {
      launchGemm("train_expert_rows_grad",
                 Gemm("dgu", "w13", groups, xDrows, none, nn), chunk);
    }
    if (sharded)
      addHostExchange(moegpu::ExchangeKind::CombineRows, {"ep_drows", "drows"},
                      chunk);
    // Device-initiated: both gradients back in one send (the weights'
    // beside the rows'), waited for after the weight gradients' GEMMs.
    if (lsa)
      buildDeviceSend("ep_combine_grads", ep, kFlagCombineRows, "ep_drows",
                      "drows", "ep_row_weight_grad", "row_weight_grad", chunk);
    // The first pass stores the weight gradients, later ones add to them.
    std::string suffix = c == 0 ? "" : "_acc";
    auto epilogue = c == 0 ? none : moegpu::Epilogue::Accumulate;
    std::string downGrad = arg("down_weight.grad"),
                gateGrad = arg("gate_weight.grad"),
                upGrad = arg("up_weight.grad");
    if (fp8) {
      // The weight gradients from each expert's rows: the dispatched rows'
      // codes turned around.
      fp8WeightGrads("expert",
                     {"dyw", xAct, "rows_q", "rows_scale", "dg", "du", "t_f",
                      "t_f2"},
                     groups, suffix, epilogue, chunk);
    } else {
      launchGemm("train_expert_down_grad" + suffix,
                 Gemm("dyw", xAct, groups, downGrad, epilogue, tn), chunk);
      launchGemm("train_expert_gate_grad" + suffix,
                 Gemm("dg", xRows, groups, gateGrad, epilogue, tn), chunk);
      launchGemm("train_expert_up_grad" + suffix,
                 Gemm("du", xRows, groups, upGrad, epilogue, tn), chunk);
    }
    // GPT-OSS: each expert's bias gradients, its rows' column sums of the
    // pre-activations' and the (weighted) output's gradients.
    if (expertBias)
      for (auto [name, rowsGrad] :
           {std::pair<StringRef, StringRef>{"gate_bias", "dg"},
            {"up_bias", "du"},
            {"down_bias", "dyw"}})
      {
        std::string grad = arg((name + ".grad").str());
        SmallVector<StringRef> sumArgs{rowsGrad, groups, grad};
        launchKernel(("train_expert_" + name + "_grad" + suffix).str(),
                     sumArgs, fixedGrid(memrefType("b2").getDimSize(0)),
                     kRowThreads, chunk, [&, c](gpu::GPUFuncOp f) {
                       Kernel k = kernelOf(f, sumArgs);
                       kernelOp<moegpu::GroupedColumnSumOp>(
                           k, k[rowsGrad], k[groups], k[grad],
                           /*accumulate=*/c > 0);
                     });
      }
  }
  for (int64_t c = 0; lsa && c < passes; ++c)
    buildDeviceWait("ep_combine_grads_wait", ep, kFlagCombineRows, chunkOf(c));
  // Llama 4: the routing weights scaled the rows, not the outputs (whose
  // row weights were 1): their gradients are the rows' gradients dotted
  // with the tokens, in place of what the experts' backward summed.
  if (config.getScaleInput()) {
    addMemset("row_weight_grad");
    Kernel k = kernel("train_scaled_weight_grad",
                      {"drows", "row_token", "offsets", "x", "row_weight_grad"},
                      gridOf(moegpu::GridKind::Rows), kRowThreads);
    kernelOp<moegpu::ScaledWeightGradOp>(k, k["drows"], k["row_token"],
                                         k["offsets"], k["x"],
                                         k["row_weight_grad"], config.getTopK());
  }
  addMemset("dtw");
  {
    Kernel k = kernel("train_scatter_row_weight_grad",
                      {"row_weight_grad", "row_token", "offsets", "dtw"},
                      gridOf(moegpu::GridKind::Rows, kCountThreads),
                      kCountThreads);
    kernelOp<moegpu::ScatterRowWeightGradOp>(
        k, k["row_weight_grad"], k["row_token"], k["offsets"], k["dtw"]);
  }
  // Router and input. The router's gradients are GEMMs over the experts
  // (dRouter = dl^T . x, tn over one group of every token; its part of dx
  // = dl . router, nn) when the router weight is in the compute type and
  // the experts fill 16-byte rows; SIMT otherwise (an f32 router weight).
  Type routerType = memrefType("router_weight").getElementType();
  bool routerGemm = !routerType.isF32() && e % 8 == 0;
  SmallVector<StringRef> routeArgs{"router_logits"};
  if (routerBias)
    routeArgs.push_back("router_bias");
  routeArgs.append({"topk_ids", "dtw", "dl"});
  if (routerGemm) {
    addBuffer("dl_half", routerType, {kTokens, e}, "scratch");
    addBuffer("token_offsets", i32, {2}, "scratch");
    addBuffer("router_dx", f32, {kTokens, h}, "scratch");
    routeArgs.push_back("dl_half");
    // Rows past T are zero in dl_half and x: the GEMM reduces over whole
    // blocks of 64 tokens.
    addMemset("dl_half");
  }
  {
    Kernel k = kernel("train_route_grad", routeArgs,
                      gridOf(moegpu::GridKind::Tokens, kCountThreads),
                      kCountThreads);
    kernelOp<moegpu::RouteGradOp>(
        k, k["router_logits"], k.get("router_bias"), k["topk_ids"], k["dtw"],
        k["dl"], k.get("dl_half"), scoringOf(config.getScoring()),
        config.getNormTopkProb(), APFloat(config.getRoutedScaleValue()));
  }
  if (routerGemm) {
    launchGemm("train_router_dx",
               Gemm("dl_half", "router_weight", "", "router_dx", none, nn));
    Kernel k = kernel("train_token_offsets", {"x", "token_offsets"},
                      gridOf(moegpu::GridKind::One), 32);
    kernelOp<moegpu::TokenOffsetsOp>(k, k["x"], k["token_offsets"]);
    launchGemm("train_router_grad", Gemm("dl_half", "x", "token_offsets",
                                         arg("router_weight.grad"), none, tn));
  }
  SmallVector<StringRef> dxArgs{"drows", "row_map"};
  if (config.getScaleInput())
    dxArgs.push_back("topk_weights");
  if (routerGemm) {
    dxArgs.push_back("router_dx");
  } else {
    dxArgs.push_back("dl");
    dxArgs.push_back("router_weight");
  }
  std::string xGrad = arg("x.grad");
  if (shared)
    dxArgs.push_back("shared_dx");
  if (gated) {
    dxArgs.push_back("shared_dz");
    dxArgs.push_back("shared_expert_gate");
  }
  dxArgs.push_back(xGrad);
  {
    Kernel k = kernel("train_input_grad", dxArgs,
                      gridOf(moegpu::GridKind::Tokens, 1), kRowThreads);
    kernelOp<moegpu::InputGradOp>(
        k, k["drows"], k["row_map"], k.get("topk_weights"),
        k.get("router_dx"), k.get("dl"), k.get("router_weight"),
        k.get("shared_dx"), k.get("shared_dz"), k.get("shared_expert_gate"),
        k[xGrad]);
  }
  if (!routerGemm) {
    std::string grad = arg("router_weight.grad");
    Kernel k = kernel("train_router_grad", {"dl", "x", grad}, fixedGrid(e),
                      kRowThreads);
    kernelOp<moegpu::RouterGradOp>(k, k["dl"], k["x"], k[grad]);
  }
  // GPT-OSS's router bias: the logits' gradient summed over the tokens.
  if (routerBias)
    columnSum("train_router_bias_grad", "dl", arg("router_bias.grad"), e);
  if (!backward) {
    std::string load = arg("load");
    Kernel k = kernel("train_load", {"counts", load}, elementGrid(e),
                      kCountThreads);
    kernelOp<moegpu::ExpertLoadOp>(k, k["counts"], k[load], chunks);
  }
  // With expert parallelism: what every rank computed in part. Each
  // rank's experts already saw every token routed to them. (The backward
  // pass sums the replicated weights' gradients as the step does: a
  // framework's optimizer sees the gradients over every rank's tokens.)
  if (sharded) {
    std::vector<std::string> sums;
    if (!backward)
      sums = {arg("loss"), arg("load")};
    sums.push_back(arg("router_weight.grad"));
    if (shared)
      for (const char *w :
           {"shared_gate_weight", "shared_up_weight", "shared_down_weight"})
        sums.push_back(arg(std::string(w) + ".grad"));
    if (gated)
      sums.push_back(arg("shared_expert_gate.grad"));
    if (outputBias)
      sums.push_back(arg("output_bias.grad"));
    if (routerBias)
      sums.push_back(arg("router_bias.grad"));
    addAllReduce(SmallVector<StringRef>(sums.begin(), sums.end()));
  }
  if (backward) {
    steps = &forward.getBody().front();
    return;
  }
  // Before anything changes: each weight's sum of gradient squares and
  // how many values its update would make non-finite; from them and the
  // loss the step's verdict, which the update's kernels read (they
  // change nothing for a step that is not finite): no host decision
  // between the step and its update.
  addMemset(arg("grad_sq"));
  addMemset(arg("bad_updates"));
  SmallVector<std::pair<StringRef, Value>> trained = listTrainedWeights(layer);
  // Every weight's master, moments and gradient, and its compute copy, in
  // the order of `trained` (grad_sq's and bad_updates' entries).
  SmallVector<std::string> masters, moments1, moments2, grads;
  // The compute copies, of the weights at `copied` (an FP8 expert's
  // master has codes instead, quantized after the update).
  SmallVector<const CopySpec *> copyOf;
  SmallVector<int64_t> copied;
  for (auto [i, entry] : llvm::enumerate(trained)) {
    std::string w = entry.first.str();
    masters.push_back(arg(w));
    moments1.push_back(arg(w + ".m"));
    moments2.push_back(arg(w + ".v"));
    grads.push_back(arg(w + ".grad"));
    const CopySpec *spec = llvm::find_if(
        copySpecs, [&](const CopySpec &c) { return c.master == w; });
    if (spec == copySpecs.end()) {
      assert(llvm::any_of(blockSpecs,
                          [&](const BlockSpec &b) { return b.master == w; }) &&
             "a trained weight without a copy");
      continue;
    }
    copyOf.push_back(spec);
    copied.push_back(static_cast<int64_t>(i));
  }
  int64_t trainedElements = 0;
  for (const std::string &m : masters)
    trainedElements += memrefType(m).getNumElements();
  // The arguments of the update's two kernels: the weights' buffers, each
  // once, then `extra`.
  auto weightArgs = [&](ArrayRef<StringRef> extra, bool copies) {
    llvm::SetVector<StringRef> names;
    for (auto *list : {&masters, &moments1, &moments2, &grads})
      for (const std::string &n : *list)
        names.insert(n);
    if (copies)
      for (const CopySpec *c : copyOf)
        names.insert(c->copy);
    for (StringRef n : extra)
      names.insert(n);
    return SmallVector<StringRef>(names.begin(), names.end());
  };
  auto valuesOf = [](const Kernel &k, ArrayRef<std::string> names) {
    SmallVector<Value> values;
    for (const std::string &n : names)
      values.push_back(k[n]);
    return values;
  };
  // The gradients' norms and largest magnitudes, then the check, which
  // reads the state only where the bounds do not show the update finite.
  addBuffer("grad_max", i32, {weightCount}, "scratch");
  addMemset("grad_max");
  {
    std::string gradSq = arg("grad_sq");
    llvm::SetVector<StringRef> names;
    for (const std::string &g : grads)
      names.insert(g);
    names.insert(gradSq);
    names.insert("grad_max");
    Kernel k = kernel("train_grad_stats", names.getArrayRef(),
                      strideGrid(trainedElements), kCountThreads);
    kernelOp<moegpu::GradStatsOp>(k, k[gradSq], k["grad_max"],
                                  valuesOf(k, grads));
  }
  {
    std::string hyper = arg("hyper"), bad = arg("bad_updates");
    SmallVector<StringRef> names = weightArgs(
        {hyper, "grad_max", bad, "copies_valid", "state_bounds"}, false);
    Kernel k = kernel("train_update_check", names, strideGrid(trainedElements),
                      kCountThreads);
    kernelOp<moegpu::UpdateCheckOp>(k, k[hyper], k["grad_max"], k[bad],
                                    valuesOf(k, masters), valuesOf(k, moments1),
                                    valuesOf(k, moments2), valuesOf(k, grads),
                                    k["copies_valid"], k["state_bounds"]);
  }
  addBuffer("update_rejected", f32, {1}, "scratch");
  {
    std::string loss = arg("loss"), gradSq = arg("grad_sq"),
                bad = arg("bad_updates");
    Kernel k = kernel("train_update_verdict",
                      {loss, gradSq, bad, "update_rejected", "copies_valid"},
                      gridOf(moegpu::GridKind::One), 32);
    kernelOp<moegpu::UpdateVerdictOp>(k, k[loss], k[gradSq], k[bad],
                                      k["update_rejected"], k["copies_valid"]);
  }
  // Every rank decides alike: a step rejected anywhere is rejected.
  if (sharded)
    addAllReduce({"update_rejected"});

  // The update, in place: the selection bias, then AdamW on every master
  // (and its compute copy), one launch.
  OpBuilder ub = builderAtEnd(&program.getBody().front());
  update = moegpu::ScheduleOp::create(ub, layer.getLoc(), "update");
  steps = &update.getBody().front();
  if (bias) {
    std::string load = arg("load"), hyper = arg("hyper");
    Kernel k =
        kernel("train_bias", {load, hyper, "score_bias", "update_rejected"},
               elementGrid(e), kCountThreads);
    kernelOp<moegpu::BiasUpdateOp>(k, k[load], k[hyper], k["score_bias"],
                                   k["update_rejected"], config.getTopK());
  }
  {
    std::string hyper = arg("hyper");
    SmallVector<StringRef> names =
        weightArgs({hyper, "state_bounds", "update_rejected"}, true);
    Kernel k = kernel("train_adamw", names, strideGrid(trainedElements),
                      kCountThreads);
    SmallVector<Value> copies;
    for (const CopySpec *c : copyOf)
      copies.push_back(k[c->copy]);
    bool all = copied.size() == masters.size();
    kernelOp<moegpu::AdamWOp>(
        k, k[hyper], valuesOf(k, masters), valuesOf(k, moments1),
        valuesOf(k, moments2), valuesOf(k, grads), copies, layoutsOf(copyOf),
        all ? DenseI64ArrayAttr() : DenseI64ArrayAttr::get(ctx, copied),
        k["state_bounds"], k["update_rejected"]);
  }
  // FP8: the new masters' codes, which the next forward pass reads.
  quantizeMasters("update_quantize_", /*always=*/true);
  steps = &forward.getBody().front();
}

