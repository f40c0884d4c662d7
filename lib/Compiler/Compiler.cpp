//===- Compiler.cpp - Compile one MoE layer -------------------------------===//
//
// Part of moe-compiler.
//
//===----------------------------------------------------------------------===//

#include "moe/Compiler/Compiler.h"
#include "Report.h"
#include "moe/Conversion/Passes.h"
#include "moe/Import/HFConfig.h"
#include "moe/MoeOps.h"
#include "moe/Pipelines/Pipelines.h"
#include "moe/Support/Nesting.h"
#include "moe/Support/Routing.h"
#include "moe/Target/Host.h"
#include "moe/Target/Sm90.h"
#include "moe/Transforms/Passes.h"
#include "moe/Version.h"
#include "moe/runtime/Bundle.h"
#include "moe/runtime/ScheduleAbi.h"
#include "moegpu/MoeGpuDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/Timing.h"
#include "mlir/Target/LLVMIR/Dialect/All.h"

#include "llvm/ADT/StringSwitch.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/TargetParser/Host.h"
#include "llvm/TargetParser/Triple.h"

#include <limits>

using namespace mlir;
using namespace mlir::moe;
namespace rt = ::moe::rt;

const char *const mlir::moe::kCompilerVersion = "moe-compiler " MOE_VERSION;

/// The comm SMs of a partition the model chooses.
static constexpr int64_t kAutoComm = -1;

/// "SMS:COMM" -> (sms, comm); "auto" -> (0, kAutoComm), "SMS:auto" ->
/// (sms, kAutoComm).
static std::optional<std::pair<int64_t, int64_t>>
parseSmPartition(llvm::StringRef text) {
  // auto: the SMs of the layer's partition (else 132), COMM the model's.
  if (text == "auto")
    return std::make_pair(int64_t(0), kAutoComm);
  auto [smsText, commText] = text.split(':');
  int64_t sms = 0, comm = 0;
  if (smsText.getAsInteger(10, sms) || sms < 1 || sms > ::moe::abi::kMaxSms)
    return std::nullopt;
  if (commText == "auto")
    return std::make_pair(sms, kAutoComm);
  if (commText.getAsInteger(10, comm) || comm < 0 || comm >= sms)
    return std::nullopt;
  return std::make_pair(sms, comm);
}

/// The sm_90a GEMMs' BLOCK_M.
static int64_t blockM(const CompileOptions &o) {
  return o.tileM ? o.tileM : 128;
}

int64_t mlir::moe::alignmentFor(const CompileOptions &o) {
  if (o.alignment)
    return o.alignment;
  // On sm_90a a segment is a whole number of the GEMMs' M blocks.
  return o.target == "sm_90a" ? blockM(o) : 1;
}

std::string mlir::moe::validateOptions(const CompileOptions &o) {
  if (o.target != "host" && o.target != "sm_90a")
    return "unknown --target '" + o.target + "' (expected host or sm_90a)";
  if (o.target == "host" && o.emit != "mlir" && o.emit != "llvm" &&
      o.emit != "bundle")
    return "unknown --emit '" + o.emit +
           "' for --target=host (expected mlir, llvm or bundle)";
  if (o.target == "sm_90a" && o.emit != "mlir" && o.emit != "ptx" &&
      o.emit != "cubin" && o.emit != "bundle")
    return "unknown --emit '" + o.emit +
           "' for --target=sm_90a (expected mlir, ptx, cubin or bundle)";
  if (o.tileM && o.tileM != 64 && o.tileM != 128)
    return "--tile-m must be 64 or 128 (one or two consumer warpgroups of "
           "64 rows), got " +
           std::to_string(o.tileM);
  if (o.target == "sm_90a" && o.alignment && o.alignment % blockM(o) != 0)
    return "--alignment must be a multiple of " + std::to_string(blockM(o)) +
           " (the grouped GEMM's M block) for --target=sm_90a, got " +
           std::to_string(o.alignment) +
           (o.tileM == 64 ? "" : " (--tile-m 64 takes multiples of 64)");
  if (o.ep < 1 || o.ep > 4096)
    return "--ep must be in [1, 4096], got " + std::to_string(o.ep);
  if (o.epChunks < 1 || o.epChunks > 64)
    return "--ep-chunks must be in [1, 64], got " + std::to_string(o.epChunks);
  if (o.epChunks > 1 && o.ep == 1)
    return "--ep-chunks needs --ep > 1 (chunks overlap expert-parallel "
           "exchanges)";
  if (o.train && o.emit == "mlir")
    return "--train needs --emit=llvm or --emit=bundle";
  if (o.backward && o.target == "host" && o.emit == "mlir")
    return "--backward needs --emit=llvm or --emit=bundle";
  if (o.backward && o.target == "sm_90a" && o.emit != "bundle" &&
      o.emit != "ptx")
    return "--backward needs --emit=ptx or --emit=bundle for --target=sm_90a";
  if (o.backward && o.train && o.target == "sm_90a")
    return "--backward and --train are separate bundles for --target=sm_90a "
           "(a training step's bundle runs its backward kernels itself)";
  if (o.train && o.target == "sm_90a" && o.emit != "bundle" &&
      o.emit != "ptx")
    return "--train needs --emit=ptx or --emit=bundle for --target=sm_90a";
  if (o.target == "host" &&
      (!o.smPartition.empty() || o.report || o.deviceMemory || o.tileN ||
       o.tileM || o.tileCluster != 1))
    return std::string(o.report              ? "--report"
                       : o.deviceMemory      ? "--device-memory"
                       : o.tileN             ? "--tile-n"
                       : o.tileM             ? "--tile-m"
                       : o.tileCluster != 1 ? "--tile-cluster"
                                             : "--sm-partition") +
           " needs --target=sm_90a";
  if (o.tileCluster != 1 && o.tileCluster != 2)
    return "--tile-cluster must be 1 or 2 (CTAs sharing B by TMA "
           "multicast), got " +
           std::to_string(o.tileCluster);
  if (o.tileN && (o.tileN % 64 != 0 || o.tileN > 256 || o.tileN < 0))
    return "--tile-n must be 64, 128, 192 or 256 (wgmma's N, a whole number "
           "of 64-column TMA boxes), got " +
           std::to_string(o.tileN);
  if (!o.smPartition.empty() && !parseSmPartition(o.smPartition))
    return "--sm-partition must be SMS:COMM with 0 <= COMM < SMS <= 1024, "
           "auto or SMS:auto, got '" +
           o.smPartition + "'";
  if (o.maxTokens < 1 || o.maxTokens > std::numeric_limits<int32_t>::max())
    return "--max-tokens must be in [1, 2147483647], got " +
           std::to_string(o.maxTokens);
  if (o.alignment && !checkAlignment(o.alignment).empty())
    return "--alignment must be a power of two <= " +
           std::to_string(kMaxAlignment) + ", got " +
           std::to_string(o.alignment);
  if (!o.weightNames.empty() && !parseWeightNaming(o.weightNames))
    return "unknown --weight-names '" + o.weightNames +
           "' (expected deepseek, mixtral, qwen, minimax, ernie, granite, "
           "hunyuan, llama4, dbrx, jetmoe or gpt_oss)";
  if (!o.dtype.empty() && o.dtype != "f32" && o.dtype != "bf16" &&
      o.dtype != "f16" && o.dtype != "fp8")
    return "unknown --dtype '" + o.dtype +
           "' (expected f32, bf16, f16 or fp8)";
  if (!o.fp8Recipe.empty() && o.fp8Recipe != "block" && o.fp8Recipe != "tensor")
    return "unknown --fp8-recipe '" + o.fp8Recipe +
           "' (expected block or tensor)";
  if (!o.optimizerState.empty() && o.optimizerState != "f32" &&
      o.optimizerState != "bf16")
    return "unknown --optimizer-state '" + o.optimizerState +
           "' (expected f32 or bf16)";
  if (!o.optimizerState.empty() && !o.train)
    return "--optimizer-state=" + o.optimizerState +
           " is the training step's: add --train";
  return "";
}

/// AdamW's moments' element type (moe-compile --optimizer-state).
static Type momentTypeOf(const CompileOptions &options, MLIRContext &context) {
  Builder b(&context);
  if (options.optimizerState == "bf16")
    return b.getBF16Type();
  return b.getF32Type();
}

/// The runtime's dtype of an element type, by its MLIR name.
static std::optional<rt::DType> toDType(Type type) {
  std::string name;
  llvm::raw_string_ostream(name) << type;
  return rt::parseMlirName(name);
}

static std::vector<int64_t> toShape(RankedTensorType type) {
  std::vector<int64_t> shape;
  for (int64_t d : type.getShape())
    shape.push_back(ShapedType::isDynamic(d) ? -1 : d);
  return shape;
}

/// Where the layers are in the model's checkpoints (from a config.json).
struct CheckpointLayout {
  std::string prefix;
  std::vector<int64_t> moeLayers;
};

static rt::Manifest buildManifest(LayerConfigAttr config, WeightNaming naming,
                                  const std::vector<EntryArgument> &args,
                                  const CompileOptions &o,
                                  const CheckpointLayout &checkpoint) {
  rt::Manifest m;
  m.checkpointPrefix = checkpoint.prefix;
  m.moeLayers = checkpoint.moeLayers;
  m.target = "host";
  m.compiler = kCompilerVersion;
  m.entry = kHostPackedEntryName.str();
  m.maxTokens = o.maxTokens;
  m.staticTokens = o.staticTokens;
  rt::LayerSpec &l = m.layer;
  l.family = stringifyWeightNaming(naming).str();
  l.hidden = config.getHidden();
  l.experts = config.getExperts();
  l.topK = config.getTopK();
  l.groups = config.getGroups();
  l.topkGroups = config.getTopkGroups();
  l.scoring = stringifyScoringFunc(config.getScoring()).str();
  l.groupScore = stringifyGroupScore(config.getGroupScore()).str();
  l.scoreBias = config.getScoreBias();
  l.normTopkProb = config.getNormTopkProb();
  l.routedScale = config.getRoutedScaleValue();
  l.ffn = config.getFfn();
  l.sharedExperts = config.getSharedExperts();
  l.sharedFfn = config.getSharedFfn();
  l.sharedGate = config.getSharedGate();
  l.scaleInput = config.getScaleInput();
  l.outputBias = config.getOutputBias();
  l.routerBias = config.getRouterBias();
  l.expertBias = config.getExpertBias();
  l.activation = stringifyActivation(config.getActivation()).str();
  l.swigluAlpha = config.getSwigluAlphaValue();
  l.swigluLimit = config.getSwigluLimitValue();
  llvm::raw_string_ostream(l.dtype) << config.getDtype();
  if (config.isFp8()) {
    llvm::raw_string_ostream(l.expertDtype) << config.getExpertDtype();
    l.fp8Scaling = stringifyFp8Scaling(config.getRecipe().getScaling()).str();
  }
  l.alignment = alignmentFor(o);
  for (const EntryArgument &arg : args) {
    rt::DType dt = *toDType(arg.type.getElementType());
    switch (arg.kind) {
    case EntryArgument::Kind::Input:
      m.inputs.push_back({arg.role, dt, toShape(arg.type)});
      break;
    case EntryArgument::Kind::Output:
      m.outputs.push_back({arg.role, dt, toShape(arg.type)});
      break;
    case EntryArgument::Kind::Parameter: {
      rt::ParameterSpec p;
      p.role = arg.role;
      p.name = hfWeightName(naming, arg.role);
      // Expert weights stack the experts along dim 0, from one tensor per
      // expert or one tensor of them all.
      bool expert = arg.role == "gate_weight" || arg.role == "up_weight" ||
                    arg.role == "down_weight" || arg.role == "gate_bias" ||
                    arg.role == "up_bias" || arg.role == "down_bias" ||
                    arg.role == "gate_scale" || arg.role == "up_scale" ||
                    arg.role == "down_scale";
      p.stack = p.name.find("{i}") != std::string::npos || expert
                    ? arg.type.getDimSize(0)
                    : 0;
      std::tie(p.part, p.parts) = hfWeightPart(naming, arg.role);
      p.transposed = hfWeightTransposed(naming, arg.role);
      p.flat = hfWeightFlat(naming, arg.role);
      p.interleaved = hfWeightInterleaved(naming, arg.role);
      p.dtype = dt;
      p.shape = toShape(arg.type);
      m.parameters.push_back(std::move(p));
      break;
    }
    }
  }
  m.schedule = {m.entry};
  return m;
}

static void setText(CompileResult &result, llvm::StringRef text) {
  result.output.assign(text.begin(), text.end());
}

/// Whether `variant` (a forward pass's build) names only buffers of
/// `program`, each as `program` declares it.
static bool sharesBuffers(const rt::GpuProgram &program,
                          const rt::GpuProgram &variant) {
  for (const rt::GpuBuffer &v : variant.buffers) {
    auto same = llvm::find_if(program.buffers, [&](const rt::GpuBuffer &b) {
      return b.name == v.name && b.dtype == v.dtype && b.shape == v.shape &&
             b.source == v.source;
    });
    if (same == program.buffers.end())
      return false;
  }
  return variant.rowCapacity <= program.rowCapacity;
}

static CompileResult &compileForSm90(ModuleOp module, LayerOp layer,
                                     WeightNaming naming,
                                     const CheckpointLayout &checkpoint,
                                     const CompileOptions &options,
                                     TimingScope &timing,
                                     CompileResult &result) {
  // The parameters and tensors the runtime binds, as for the host target.
  std::vector<EntryArgument> arguments = entryArguments(layer);
  LayerConfigAttr config = layer.getConfig();
  // (Read before the kernel pipeline erases the layer's function.)
  auto ranks = static_cast<int64_t>(layer.getEpSize());
  int64_t chunks = std::max<int64_t>(1, layer.getEpChunks());
  Sm90LayerShape shape;
  shape.hidden = config.getHidden();
  shape.ffn = config.getFfn();
  shape.experts = config.getExperts();
  shape.topK = config.getTopK();
  shape.sharedFfn = config.getSharedFfnTotal();
  shape.alignment = alignmentFor(options);
  shape.ranks = ranks;
  shape.fp8 = config.isFp8();
  // The SM partition: the one given, else the layer's; the model chooses
  // the comm SMs for --sm-partition=auto (or SMS:auto) and, by default, for
  // a sharded layer whose own partition keeps none for its exchanges.
  SmPartitionAttr written = layer.getPartitionAttr();
  int64_t sms = written ? written.getSms() : ::moe::abi::kDefaultSms;
  int64_t comm = written ? written.getComm() : 0;
  if (!options.smPartition.empty()) {
    auto [givenSms, givenComm] = *parseSmPartition(options.smPartition);
    sms = givenSms ? givenSms : sms;
    comm = givenComm;
  } else if (ranks > 1 && comm == 0) {
    comm = kAutoComm;
  }
  std::vector<std::pair<int64_t, double>> candidates;
  if (comm == kAutoComm)
    comm = ranks > 1 ? chooseCommSms(shape, sms, options.maxTokens, chunks,
                                     &candidates)
                     : 0;
  // Written back unless the layer has none and keeps the default 132:0.
  if (written || !options.smPartition.empty() || comm != 0)
    layer.setPartitionAttr(
        SmPartitionAttr::get(module.getContext(), sms, comm));
  // The sm_90a step keeps its state on the device (no `.next` outputs).
  std::vector<TrainArgument> trainArguments, backwardArguments;
  if (options.train)
    trainArguments = listDeviceTrainArguments(
        layer, momentTypeOf(options, *module.getContext()));
  if (options.backward)
    backwardArguments = listDeviceBackwardArguments(layer);
  // SMs kept for communication serve the all-to-alls of a sharded layer;
  // without one they only stand idle.
  if (SmPartitionAttr partition = layer.getPartitionAttr();
      partition && partition.getComm() > 0 && ranks == 1)
    result.warning =
        "the layer keeps " + std::to_string(partition.getComm()) + " of " +
        std::to_string(partition.getSms()) +
        " SMs for communication but is not sharded (--ep): they stay idle "
        "and its GEMMs run on " +
        std::to_string(partition.getSms() - partition.getComm()) +
        "; a partition with comm = 0 (--sm-partition=" +
        std::to_string(partition.getSms()) + ":0) gives them all " +
        std::to_string(partition.getSms());
  Sm90Options sm90;
  sm90.train = options.train;
  sm90.optimizerState =
      options.optimizerState.empty() ? "f32" : options.optimizerState;
  sm90.backward = options.backward;
  sm90.alignment = alignmentFor(options);
  sm90.maxTokens = options.maxTokens;
  sm90.tileN = options.tileN;
  sm90.tileM = options.tileM;
  sm90.cluster = options.tileCluster;
  sm90.cubin = options.emit != "ptx" || options.report;
  sm90.ptxas = options.ptxas;
  // A bundle or report whose tiles the options leave to the compiler also
  // gets the forward pass with 64-row tiles (one consumer warpgroup,
  // segments padded to 64 rows) for the token counts at which the model
  // finds it faster: small T, where 128-row tiles are mostly padding.
  // One GPU, 16-bit experts and unpaired CTAs, as --tile-m 64 takes them.
  OwningOpRef<ModuleOp> variantModule;
  if ((options.emit == "bundle" || options.report) && !options.tileM &&
      !options.alignment && options.tileCluster == 1 && ranks == 1 &&
      !config.isFp8())
    variantModule = module.clone();
  std::optional<Sm90Result> compiled =
      compileSm90(module, sm90, timing, result.error);
  if (!compiled) {
    if (!result.diagnostics.empty())
      result.error.clear();
    return result;
  }
  compiled->program.tileM = blockM(options);
  std::optional<Sm90Result> variant;
  int64_t variantTokens = 0;
  if (variantModule) {
    Sm90Options small = sm90;
    small.tileM = 64;
    small.alignment = 64;
    small.train = false;
    small.optimizerState = "f32";
    TimingScope scope = timing.nest("BLOCK_M 64 forward pass");
    variant = compileSm90(*variantModule, small, scope, result.error);
    if (!variant) {
      if (!result.diagnostics.empty())
        result.error.clear();
      return result;
    }
    if (!sharesBuffers(compiled->program, variant->program)) {
      result.error = "internal error: the BLOCK_M 64 forward pass declares "
                     "buffers other than the program's";
      return result;
    }
    variantTokens =
        variantBucket(shape, compiled->kernels, sm90.alignment,
                      variant->kernels, small.alignment, options.maxTokens);
  }
  // What each rank allocates, against the budget given.
  rt::GpuMemoryPlan memory =
      rt::planGpuMemory(compiled->program, options.maxTokens, ranks);
  if (options.deviceMemory && memory.total() > options.deviceMemory) {
    std::string over = "each rank needs " + rt::formatBytes(memory.total()) +
                       " of device memory, more than the " +
                       rt::formatBytes(options.deviceMemory) +
                       " of --device-memory (--report itemizes it; more "
                       "ranks (--ep) or fewer tokens (--max-tokens) need "
                       "less)";
    result.warning =
        result.warning.empty() ? over : result.warning + "; " + over;
  }
  if (options.report) {
    result.report = formatKernelTable(compiled->kernels) +
                    formatModelProjection(compiled->kernels, shape,
                                          options.maxTokens, options.train);
    if (ranks > 1)
      result.report += formatPartition(compiled->kernels, shape, sms, comm,
                                       chunks, options.maxTokens, candidates);
    result.report += formatMemoryPlan(memory, options.maxTokens, ranks);
    if (variant)
      result.report += formatTileVariants(
          shape, compiled->kernels, sm90.alignment, variant->kernels,
          /*variantAlignment=*/64, variantTokens, options.maxTokens);
  }
  if (options.emit == "ptx") {
    setText(result, compiled->ptx);
    return result;
  }
  if (options.emit == "cubin") {
    result.output = std::move(compiled->cubin);
    return result;
  }
  rt::Bundle bundle;
  bundle.manifest =
      buildManifest(config, naming, arguments, options, checkpoint);
  bundle.manifest.target = "sm_90a";
  bundle.manifest.entry = "";
  bundle.manifest.schedule.clear();
  for (const rt::GpuStep &step : compiled->program.steps)
    if (step.kind == ::moe::abi::StepKind::Launch)
      bundle.manifest.schedule.push_back(step.kernel);
  bundle.manifest.gpu = std::move(compiled->program);
  bundle.manifest.expertParallel = ranks;
  if (variant && variantTokens > 0) {
    rt::GpuVariant v;
    v.tileM = 64;
    v.maxTokens = variantTokens;
    v.rowCapacity = variant->program.rowCapacity;
    v.blob = 2;
    v.steps = std::move(variant->program.steps);
    bundle.manifest.gpu.variants.push_back(std::move(v));
  }
  if (options.train) {
    // The runtime runs the training schedule for this entry point.
    bundle.manifest.train.entry = "train_steps";
    bundle.manifest.train.stateOnDevice = true;
    for (const TrainArgument &arg : trainArguments)
      bundle.manifest.train.arguments.push_back(
          {arg.name, arg.output, *toDType(arg.type.getElementType()),
           toShape(arg.type)});
  }
  if (options.backward) {
    // The runtime runs the backward schedule for this entry point.
    bundle.manifest.backward.entry = "backward_steps";
    for (const TrainArgument &arg : backwardArguments)
      bundle.manifest.backward.arguments.push_back(
          {arg.name, arg.output, *toDType(arg.type.getElementType()),
           toShape(arg.type)});
  }
  // The cubin, and beside it the PTX it was assembled from (NUL-ended): a
  // driver that cannot run the cubin (a newer GPU, the emulator) JITs it,
  // as with a fatbinary's PTX.
  bundle.blobs.push_back(std::move(compiled->cubin));
  std::vector<uint8_t> ptx(compiled->ptx.begin(), compiled->ptx.end());
  ptx.push_back(0);
  bundle.blobs.push_back(std::move(ptx));
  if (!bundle.manifest.gpu.variants.empty()) {
    bundle.blobs.push_back(std::move(variant->cubin));
    std::vector<uint8_t> variantPtx(variant->ptx.begin(), variant->ptx.end());
    variantPtx.push_back(0);
    bundle.blobs.push_back(std::move(variantPtx));
  }
  result.output = rt::serializeBundle(bundle);
  return result;
}

/// Gives the layer a dynamic token dimension (tensor.cast on its input and
/// back on its output), so that every lowering sees the one form they
/// handle; the bundle then enforces the static count.
static void relaxTokenDimension(LayerOp layer) {
  OpBuilder b(layer);
  Location loc = layer.getLoc();
  auto dynamicRows = [](RankedTensorType type) {
    return RankedTensorType::get({ShapedType::kDynamic, type.getDimSize(1)},
                                 type.getElementType());
  };
  auto inType = cast<RankedTensorType>(layer.getInput().getType());
  Value relaxed =
      tensor::CastOp::create(b, loc, dynamicRows(inType), layer.getInput());
  layer.getInputMutable().assign(relaxed);
  Value y = layer.getOutput();
  auto outType = cast<RankedTensorType>(y.getType());
  y.setType(dynamicRows(outType));
  b.setInsertionPointAfter(layer);
  auto back = tensor::CastOp::create(b, loc, outType, y);
  y.replaceAllUsesExcept(back.getResult(), back);
}

/// `c` with element type `dtype` and expert weights of `expertDtype` (null:
/// `dtype`).
static LayerConfigAttr withDtype(LayerConfigAttr c, Type dtype,
                                 Type expertDtype, Fp8RecipeAttr recipe) {
  return LayerConfigAttr::get(
      c.getContext(), c.getHidden(), c.getExperts(), c.getTopK(), c.getGroups(),
      c.getTopkGroups(), c.getScoring(), c.getGroupScore(), c.getScoreBias(),
      c.getNormTopkProb(), c.getRoutedScale(), c.getRouterJitter(), c.getFfn(),
      c.getSharedExperts(), c.getSharedFfn(), c.getSharedGate(),
      c.getScaleInput(), c.getOutputBias(), c.getRouterBias(),
      c.getExpertBias(), c.getActivation(), c.getSwigluAlpha(),
      c.getSwigluLimit(), dtype, expertDtype, recipe);
}

/// Whether `layer`'s function only passes its arguments, in order, to the
/// layer and returns its result (as moe-compile's imported configs and the
/// examples are): such a layer can be rebuilt in another dtype.
static bool isLayerOnly(LayerOp layer) {
  auto func = dyn_cast_or_null<func::FuncOp>(layer->getParentOp());
  if (!func || !func.getBody().hasOneBlock())
    return false;
  Block &body = func.getBody().front();
  if (body.getOperations().size() != 2 ||
      layer->getNumOperands() != body.getNumArguments())
    return false;
  for (auto [operand, arg] :
       llvm::zip(layer->getOperands(), body.getArguments()))
    if (operand != arg)
      return false;
  auto ret = dyn_cast<func::ReturnOp>(body.getTerminator());
  return ret && ret->getNumOperands() == 1 &&
         ret->getOperand(0) == layer->getResult(0);
}

/// The CPUs a compile builds host code for: --mcpu's one ("generic" is
/// the target's baseline), or, for a bundle without --mcpu on x86-64,
/// every level of rt::kHostCpuLevels, best first.
static std::vector<std::string> hostCpusFor(const CompileOptions &options) {
  if (options.mcpu == "generic")
    return {""};
  if (!options.mcpu.empty() || options.emit != "bundle" ||
      !llvm::Triple(llvm::sys::getProcessTriple()).isX86())
    return {options.mcpu};
  std::vector<std::string> levels;
  for (const char *level : rt::kHostCpuLevels)
    levels.push_back(level);
  return levels;
}

/// The layer's host entry points (forward, and the training step, its
/// update and the backward pass when asked), lowered through the host
/// pipeline for `cpu`'s vector unit and translated to LLVM IR (optimized
/// here unless it is for a bundle, whose module emitSharedObject optimizes
/// part by part). Null after setting `result`'s error.
static std::unique_ptr<llvm::Module>
lowerHostCode(LayerOp layer, llvm::StringRef cpu, const CompileOptions &options,
              TimingScope &rootTiming, std::vector<EntryArgument> &arguments,
              std::vector<TrainArgument> &trainArguments,
              std::vector<TrainArgument> &updateArguments,
              std::vector<TrainArgument> &backwardArguments,
              std::unique_ptr<llvm::LLVMContext> &llvmContext,
              CompileResult &result) {
  MLIRContext &context = *layer->getContext();
  arguments.clear();
  OwningOpRef<ModuleOp> entry =
      buildHostEntry(layer, alignmentFor(options), arguments);
  if (options.train) {
    Type moments = momentTypeOf(options, context);
    trainArguments = addHostTrainEntry(*entry, layer, moments);
    updateArguments = addHostTrainUpdateEntry(*entry, layer, moments);
  }
  if (options.backward)
    backwardArguments = addHostBackwardEntry(*entry, layer);
  {
    PassManager pm(&context);
    if (options.passManagerCLOptions && failed(applyPassManagerCLOptions(pm))) {
      result.error = "invalid pass manager options";
      return nullptr;
    }
    TimingScope pipelineTiming = rootTiming.nest("Host pipeline");
    pm.enableTiming(pipelineTiming);
    HostPipelineOptions pipelineOptions;
    pipelineOptions.alignment = alignmentFor(options);
    // A bundle's shared object brings the allocator that keeps buffers
    // (emitSharedObject); LLVM IR for elsewhere calls malloc and free.
    pipelineOptions.reuseBuffers = options.emit == "bundle";
    HostVectorUnit vectors;
    if (!getHostVectorUnit(cpu, vectors, result.error))
      return nullptr;
    pipelineOptions.vectorWidth = vectors.width;
    pipelineOptions.vectorRegisters = vectors.registers;
    // A bundle's shared object links the OpenMP runtime (emitSharedObject).
    pipelineOptions.openmp = options.emit == "bundle";
    buildHostPipeline(pm, pipelineOptions);
    if (failed(pm.run(*entry))) {
      if (result.diagnostics.empty())
        result.error = "the host pipeline failed";
      return nullptr;
    }
  }
  addPackedEntry(*entry, arguments.size());
  if (options.train) {
    addPackedEntry(*entry, trainArguments.size(), kHostTrainEntryName,
                   kHostTrainPackedEntryName);
    addPackedEntry(*entry, updateArguments.size(), kHostTrainUpdateEntryName,
                   kHostTrainUpdatePackedEntryName);
  }
  if (options.backward)
    addPackedEntry(*entry, backwardArguments.size(), kHostBackwardEntryName,
                   kHostBackwardPackedEntryName);
  addSoftFloatHelpers(*entry);

  // A bundle's module is optimized part by part (emitSharedObject).
  bool bundle = options.emit == "bundle";
  TimingScope scope =
      rootTiming.nest(bundle ? "Translate" : "Translate and optimize");
  llvmContext = std::make_unique<llvm::LLVMContext>();
  std::unique_ptr<llvm::Module> llvmModule =
      translateForHost(*entry, *llvmContext, cpu, /*optimize=*/!bundle);
  if (!llvmModule && result.diagnostics.empty())
    result.error = "translation to LLVM IR failed";
  return llvmModule;
}

CompileResult mlir::moe::compile(const std::string &input,
                                 const std::string &inputName, InputKind kind,
                                 const CompileOptions &givenOptions) {
  CompileResult result;
  CompileOptions options = givenOptions;
  result.error = validateOptions(options);
  if (!result.error.empty())
    return result;

  DialectRegistry registry;
  registerAllDialects(registry);
  registerAllExtensions(registry);
  registry.insert<MoeDialect, moegpu::MoeGpuDialect>();
  registerAllToLLVMIRTranslations(registry);
  MLIRContext context(registry);
  context.loadAllAvailableDialects();
  // One line per problem: the op is named by the diagnostic's location.
  context.printOpOnDiagnostic(false);

  DefaultTimingManager timingManager;
  timingManager.setEnabled(options.timing);
  TimingScope rootTiming = timingManager.getRootScope();

  llvm::SourceMgr sourceMgr;
  llvm::raw_string_ostream diagnosticStream(result.diagnostics);
  SourceMgrDiagnosticHandler diagnostics(sourceMgr, &context, diagnosticStream);

  Type dtype = llvm::StringSwitch<Type>(options.dtype)
                   .Case("f32", Float32Type::get(&context))
                   .Case("bf16", BFloat16Type::get(&context))
                   .Case("f16", Float16Type::get(&context))
                   .Case("fp8", BFloat16Type::get(&context))
                   .Default(Type());
  // fp8: bf16 activations, e4m3 expert weights with block scales.
  Type expertDtype = options.dtype == "fp8"
                         ? Type(Float8E4M3FNType::get(&context))
                         : Type();
  std::optional<WeightNaming> naming = parseWeightNaming(options.weightNames);

  OwningOpRef<ModuleOp> module;
  CheckpointLayout checkpoint;
  {
    TimingScope scope = rootTiming.nest("Import");
    if (kind == InputKind::HFConfig) {
      std::optional<ImportedConfig> imported = importHFConfig(
          input, inputName, &context,
          dtype                        ? dtype
          : options.target == "sm_90a" ? Type(BFloat16Type::get(&context))
                                       : Type(Float32Type::get(&context)),
          result.error, expertDtype);
      if (!imported)
        return result;
      if (!naming)
        naming = imported->naming;
      checkpoint = {imported->checkpointPrefix, imported->moeLayers};
      module = buildLayerModule(&context, imported->config, SmPartitionAttr());
      // Diagnostics about the imported layer name the config file.
      Location fileLoc = FileLineColLoc::get(&context, inputName, 1, 1);
      // (Warnings go to result.warning: any diagnostic fails a compile.)
      for (const std::string &warning : imported->warnings)
        result.warning += (result.warning.empty() ? "" : "; ") + inputName +
                          ": " + warning;
      module->walk([&](Operation *op) { op->setLoc(fileLoc); });
    } else {
      if (std::string deep =
              checkMlirNesting(input.data(), input.size(), inputName);
          !deep.empty()) {
        result.error = deep;
        return result;
      }
      sourceMgr.AddNewSourceBuffer(
          llvm::MemoryBuffer::getMemBufferCopy(input, inputName),
          llvm::SMLoc());
      module = parseSourceFile<ModuleOp>(sourceMgr, &context);
      if (!module) {
        if (result.diagnostics.empty())
          result.error = "cannot parse '" + inputName + "'";
        return result;
      }
    }
  }

  int64_t count = 0;
  LayerOp layer = getOnlyLayer(*module, &count);
  if (!layer) {
    result.error = "expected exactly one moe.layer in the input, found " +
                   std::to_string(count);
    return result;
  }
  LayerConfigAttr config = layer.getConfig();
  if (std::string why = config.getUntrainable();
      (options.train || options.backward) && !why.empty()) {
    const char *flag = options.train ? "--train" : "--backward";
    result.error = std::string(flag) +
                   ": the layer has no backward pass yet: " + why +
                   "; compile it without " + flag;
    return result;
  }
  // A static token count: the bundle takes exactly that many tokens.
  if (auto inType = cast<RankedTensorType>(layer.getInput().getType());
      !inType.isDynamicDim(0)) {
    int64_t tokens = inType.getDimSize(0);
    if (tokens < 1) {
      emitError(layer.getLoc())
          << "expected a static token count of at least 1, got " << tokens;
      return result;
    }
    options.staticTokens = options.maxTokens = tokens;
    relaxTokenDimension(layer);
  }
  // --dtype on an MLIR layer of another dtype converts it: the layer is
  // rebuilt from its config with the new element types (the function's
  // arguments are the layer's tensors, which the runtime loads and
  // converts from any dtype).
  if (dtype && kind == InputKind::Mlir &&
      (config.getDtype() != dtype ||
       (expertDtype && config.getExpertWeightType() != expertDtype) ||
       (!expertDtype && config.getExpertDtype()))) {
    if (!isLayerOnly(layer)) {
      result.error = "--dtype=" + options.dtype + " converts a layer whose "
                     "function only passes its arguments to the moe.layer "
                     "and returns its result; '" + inputName +
                     "' computes more around it: give the layer's tensors "
                     "the element type you want in the input instead";
      return result;
    }
    SmPartitionAttr partition = layer.getPartitionAttr();
    if (!partition)
      if (auto func = layer->getParentOfType<FunctionOpInterface>())
        partition = func->getAttrOfType<SmPartitionAttr>(
            MoeDialect::getSmPartitionAttrName());
    module = buildLayerModule(
        &context,
        withDtype(config, dtype, expertDtype,
                  expertDtype ? config.getFp8Recipe() : Fp8RecipeAttr()),
        partition);
    Location fileLoc = FileLineColLoc::get(&context, inputName, 1, 1);
    module->walk([&](Operation *op) { op->setLoc(fileLoc); });
    layer = getOnlyLayer(*module, &count);
    config = layer.getConfig();
  }
  if (!options.fp8Recipe.empty()) {
    if (!config.isFp8()) {
      result.error = "--fp8-recipe=" + options.fp8Recipe +
                     " applies to a layer with fp8 experts: add --dtype fp8";
      return result;
    }
    auto recipe = Fp8RecipeAttr::get(
        &context,
        options.fp8Recipe == "tensor" ? Fp8Scaling::Tensor : Fp8Scaling::Block,
        128);
    config =
        withDtype(config, config.getDtype(), config.getExpertDtype(), recipe);
    layer.setConfigAttr(config);
  }
  // The sm_90a FP8 step: DeepSeek-V3's block recipe on one rank so far.
  if ((options.train || options.backward) && config.isFp8() &&
      options.target == "sm_90a") {
    std::string why;
    if (options.backward)
      why = "--backward of a layer with fp8 experts is built for the host "
            "target only so far (sm_90a trains fp8 layers in its own "
            "step, --train)";
    else if (config.getRecipe().getScaling() != Fp8Scaling::Block)
      why = "--train --fp8-recipe=tensor is built for the host target only "
            "(sm_90a's e4m3 GEMMs take the block recipe's 1 x 128, 128 x 1 "
            "and 128 x 128 scales)";
    else if (options.ep > 1)
      why = "--train of a layer with fp8 experts runs on one rank on sm_90a "
            "so far (--ep " +
            std::to_string(options.ep) +
            "): train it with --target host, or with bf16 experts for "
            "--ep";
    if (!why.empty()) {
      result.error = why;
      return result;
    }
  }
  if (options.ep > 1) {
    PassManager pm(&context);
    pm.addPass(createMoeExpertParallel(
        MoeExpertParallelOptions{options.ep, options.epChunks}));
    if (failed(pm.run(*module))) {
      if (result.diagnostics.empty())
        result.error = "moe-expert-parallel failed";
      return result;
    }
  }

  if (options.emit == "mlir") {
    if (failed(verify(*module))) {
      if (result.diagnostics.empty())
        result.error = "the module does not verify";
      return result;
    }
    std::string text;
    llvm::raw_string_ostream os(text);
    module->print(os);
    setText(result, text);
    return result;
  }

  if (options.target == "sm_90a")
    return compileForSm90(*module, layer,
                          naming.value_or(WeightNaming::DeepSeek), checkpoint,
                          options, rootTiming, result);

  // The CPUs the host code is built for: one (--mcpu, or any emit but a
  // bundle), or, for a bundle with no --mcpu on x86-64, each level of
  // rt::kHostCpuLevels, the runtime taking the best this CPU runs.
  std::vector<std::string> cpus = hostCpusFor(options);
  std::vector<EntryArgument> arguments;
  std::vector<TrainArgument> trainArguments, updateArguments,
      backwardArguments;
  std::vector<std::vector<uint8_t>> objects;
  for (const std::string &cpu : cpus) {
    std::unique_ptr<llvm::LLVMContext> llvmContext;
    std::unique_ptr<llvm::Module> llvmModule = lowerHostCode(
        layer, cpu, options, rootTiming, arguments, trainArguments,
        updateArguments, backwardArguments, llvmContext, result);
    if (!llvmModule)
      return result;
    if (options.emit == "llvm") {
      std::string text;
      llvm::raw_string_ostream os(text);
      llvmModule->print(os, nullptr);
      setText(result, text);
      return result;
    }
    objects.emplace_back();
    TimingScope scope =
        rootTiming.nest("Optimization, code generation and link");
    if (!emitSharedObject(*llvmModule, cpu, objects.back(), result.error))
      return result;
  }

  rt::Bundle bundle;
  bundle.manifest =
      buildManifest(config, naming.value_or(WeightNaming::DeepSeek), arguments,
                    options, checkpoint);
  // From the layer: --ep, or a layer the input already sharded.
  bundle.manifest.expertParallel = static_cast<int64_t>(layer.getEpSize());
  if (cpus.size() > 1)
    bundle.manifest.hostCpus = cpus;
  auto describe = [](rt::TrainSpec &spec, llvm::StringRef entry,
                     const std::vector<TrainArgument> &args) {
    spec.entry = entry.str();
    for (const TrainArgument &arg : args)
      spec.arguments.push_back({arg.name, arg.output,
                                *toDType(arg.type.getElementType()),
                                toShape(arg.type)});
  };
  if (options.train) {
    describe(bundle.manifest.train, kHostTrainPackedEntryName, trainArguments);
    bundle.manifest.train.update = std::make_shared<rt::TrainSpec>();
    describe(*bundle.manifest.train.update, kHostTrainUpdatePackedEntryName,
             updateArguments);
  }
  if (options.backward)
    describe(bundle.manifest.backward, kHostBackwardPackedEntryName,
             backwardArguments);
  bundle.blobs = std::move(objects);
  result.output = rt::serializeBundle(bundle);
  return result;
}
