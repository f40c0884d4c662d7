//===- moe-compile.cpp - Compile an MoE layer into a bundle ---------------===//
//
// Part of moe-compiler. Input: a .mlir file holding one moe.layer, or a
// model's Hugging Face config.json. Output: the lowered MLIR, LLVM IR, or a
// bundle the runtime runs.
//
//===----------------------------------------------------------------------===//

#include "moe/Import/HFConfig.h"
#include "moe/MoeOps.h"
#include "moe/Pipelines/Pipelines.h"
#include "moe/Support/Routing.h"
#include "moe/Target/Host.h"
#include "moe/runtime/Bundle.h"

#include "mlir/IR/AsmState.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Support/Timing.h"

#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace mlir::moe;
namespace cl = llvm::cl;
namespace rt = ::moe::rt;

static cl::OptionCategory category("moe-compile options");

static cl::opt<std::string> inputFile(cl::Positional,
                                      cl::desc("<input .mlir file>"),
                                      cl::init(""), cl::cat(category));
static cl::opt<std::string>
    hfConfig("hf-config",
             cl::desc("Import the layer from a Hugging Face "
                      "config.json instead of a .mlir file"),
             cl::value_desc("path"), cl::init(""), cl::cat(category));
static cl::opt<std::string> target("target", cl::desc("Target: host or sm_90a"),
                                   cl::init("host"), cl::cat(category));
static cl::opt<std::string>
    dtypeOpt("dtype",
             cl::desc("Compute element type of an imported config: f32, "
                      "bf16 or f16 (default f32 on the host, bf16 on sm_90a)"),
             cl::init(""), cl::cat(category));
static cl::opt<std::string>
    emit("emit",
         cl::desc("Output: mlir (the verified moe-level module, as "
                  "parsed or imported), llvm (optimized LLVM IR) or "
                  "bundle"),
         cl::init("bundle"), cl::cat(category));
static cl::opt<std::string> outputFile("o", cl::desc("Output file"),
                                       cl::value_desc("path"), cl::init("-"),
                                       cl::cat(category));
static cl::opt<int64_t>
    maxTokens("max-tokens",
              cl::desc("Largest token count a forward pass may take"),
              cl::init(4096), cl::cat(category));
static cl::opt<int64_t>
    alignment("alignment",
              cl::desc("Row alignment of each expert's segment of the "
                       "dispatched buffer (power of two; default 1 on the "
                       "host)"),
              cl::init(1), cl::cat(category));
static cl::opt<std::string>
    weightNames("weight-names",
                cl::desc("Checkpoint naming of the weights: deepseek, "
                         "mixtral or qwen (default: from the config, else "
                         "deepseek)"),
                cl::init(""), cl::cat(category));
static cl::opt<std::string>
    mcpu("mcpu",
         cl::desc("Host CPU to generate code for: empty for the "
                  "target's generic CPU, 'native' for this machine"),
         cl::init(""), cl::cat(category));
static cl::opt<bool> timing("timing", cl::desc("Print a timing report"),
                            cl::init(false), cl::cat(category));

static constexpr const char *kVersion = "moe-compiler 0.1.0";

static int fail(const llvm::Twine &message) {
  llvm::errs() << "moe-compile: error: " << message << "\n";
  return 1;
}

static std::optional<rt::DType> toDType(Type type) {
  if (type.isF32())
    return rt::DType::F32;
  if (type.isBF16())
    return rt::DType::BF16;
  if (type.isF16())
    return rt::DType::F16;
  if (type.isInteger(32))
    return rt::DType::I32;
  return std::nullopt;
}

static std::vector<int64_t> toShape(RankedTensorType type) {
  std::vector<int64_t> shape;
  for (int64_t d : type.getShape())
    shape.push_back(ShapedType::isDynamic(d) ? -1 : d);
  return shape;
}

static rt::Manifest buildManifest(LayerConfigAttr config, WeightNaming naming,
                                  const std::vector<EntryArgument> &args) {
  rt::Manifest m;
  m.target = "host";
  m.compiler = kVersion;
  m.entry = kHostPackedEntryName.str();
  m.maxTokens = maxTokens;
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
  std::string dtype;
  llvm::raw_string_ostream(dtype) << config.getDtype();
  l.dtype = dtype;
  l.alignment = alignment;
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
      p.stack =
          p.name.find("{i}") != std::string::npos ? arg.type.getDimSize(0) : 0;
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

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  registerAsmPrinterCLOptions();
  registerMLIRContextCLOptions();
  registerPassManagerCLOptions();
  cl::HideUnrelatedOptions({&category, &cl::getGeneralCategory()});
  cl::ParseCommandLineOptions(argc, argv, "moe-compiler: MoE layer compiler\n");

  // Options.
  if (inputFile.empty() == hfConfig.empty())
    return fail("give exactly one input: a .mlir file or --hf-config=PATH");
  if (target == "sm_90a")
    return fail("--target=sm_90a: the Hopper target is not available in this "
                "build yet; use --target=host");
  if (target != "host")
    return fail("unknown --target '" + target + "' (expected host or sm_90a)");
  if (emit != "mlir" && emit != "llvm" && emit != "bundle")
    return fail("unknown --emit '" + emit +
                "' (expected mlir, llvm or bundle)");
  if (emit == "bundle" && outputFile == "-")
    return fail("--emit=bundle needs an output file (-o PATH)");
  if (maxTokens < 1 || maxTokens > std::numeric_limits<int32_t>::max())
    return fail("--max-tokens must be in [1, 2147483647], got " +
                llvm::Twine(maxTokens.getValue()));
  if (!isPowerOfTwo(alignment) || alignment > (1 << 16))
    return fail("--alignment must be a power of two <= 65536, got " +
                llvm::Twine(alignment.getValue()));
  std::optional<WeightNaming> naming;
  if (!weightNames.empty()) {
    naming = parseWeightNaming(weightNames);
    if (!naming)
      return fail("unknown --weight-names '" + weightNames +
                  "' (expected deepseek, mixtral or qwen)");
  }

  DialectRegistry registry;
  registerAllDialects(registry);
  registerAllExtensions(registry);
  registry.insert<MoeDialect>();
  MLIRContext context(registry);
  context.loadAllAvailableDialects();

  DefaultTimingManager timingManager;
  timingManager.setEnabled(timing);
  TimingScope rootTiming = timingManager.getRootScope();

  llvm::SourceMgr sourceMgr;
  SourceMgrDiagnosticHandler diagnostics(sourceMgr, &context);

  Type dtype;
  if (!dtypeOpt.empty()) {
    dtype = llvm::StringSwitch<Type>(dtypeOpt)
                .Case("f32", Float32Type::get(&context))
                .Case("bf16", BFloat16Type::get(&context))
                .Case("f16", Float16Type::get(&context))
                .Default(Type());
    if (!dtype)
      return fail("unknown --dtype '" + dtypeOpt +
                  "' (expected f32, bf16 or f16)");
  }

  // Input.
  OwningOpRef<ModuleOp> module;
  {
    TimingScope scope = rootTiming.nest("Import");
    if (!hfConfig.empty()) {
      auto buffer = llvm::MemoryBuffer::getFile(hfConfig);
      if (!buffer)
        return fail("cannot read '" + hfConfig +
                    "': " + buffer.getError().message());
      std::string error;
      std::optional<ImportedConfig> imported =
          importHFConfig((*buffer)->getBuffer(), hfConfig, &context,
                         dtype ? dtype : Float32Type::get(&context), error);
      if (!imported)
        return fail(error);
      if (!naming)
        naming = imported->naming;
      module = buildLayerModule(&context, imported->config, SmPartitionAttr());
    } else {
      std::string error;
      auto buffer = openInputFile(inputFile, &error);
      if (!buffer)
        return fail(error);
      sourceMgr.AddNewSourceBuffer(std::move(buffer), llvm::SMLoc());
      module = parseSourceFile<ModuleOp>(sourceMgr, &context);
      if (!module)
        return 1; // The diagnostic is out.
    }
  }

  SmallVector<LayerOp> layers;
  module->walk([&](LayerOp layer) { layers.push_back(layer); });
  if (layers.size() != 1)
    return fail("expected exactly one moe.layer in the input, found " +
                llvm::Twine(layers.size()));
  LayerOp layer = layers.front();
  LayerConfigAttr config = layer.getConfig();
  if (dtype && hfConfig.empty() && config.getDtype() != dtype) {
    std::string have;
    llvm::raw_string_ostream(have) << config.getDtype();
    return fail("--dtype=" + dtypeOpt + " conflicts with the layer's dtype " +
                have + " in '" + inputFile + "'");
  }

  std::string error;
  auto output = openOutputFile(outputFile, &error);
  if (!output)
    return fail(error);
  if (emit == "mlir") {
    if (failed(verify(*module)))
      return 1;
    module->print(output->os());
    output->keep();
    return 0;
  }

  std::vector<EntryArgument> arguments;
  OwningOpRef<ModuleOp> entry = buildHostEntry(layer, alignment, arguments);

  {
    PassManager pm(&context);
    if (failed(applyPassManagerCLOptions(pm)))
      return 1;
    TimingScope pipelineTiming = rootTiming.nest("Host pipeline");
    pm.enableTiming(pipelineTiming);
    HostPipelineOptions options;
    options.alignment = alignment;
    buildHostPipeline(pm, options);
    if (failed(pm.run(*entry)))
      return 1;
  }
  addPackedEntry(*entry, arguments.size());

  llvm::LLVMContext llvmContext;
  std::unique_ptr<llvm::Module> llvmModule;
  {
    TimingScope scope = rootTiming.nest("Translate and optimize");
    llvmModule = translateForHost(*entry, llvmContext, mcpu);
    if (!llvmModule)
      return 1;
  }
  if (emit == "llvm") {
    llvmModule->print(output->os(), nullptr);
    output->keep();
    return 0;
  }

  rt::Bundle bundle;
  bundle.manifest =
      buildManifest(config, naming.value_or(WeightNaming::DeepSeek), arguments);
  bundle.blobs.emplace_back();
  {
    TimingScope scope = rootTiming.nest("Code generation and link");
    if (!emitSharedObject(*llvmModule, mcpu, bundle.blobs.back(), error))
      return fail(error);
  }
  std::vector<uint8_t> bytes = rt::serializeBundle(bundle);
  output->os().write(reinterpret_cast<const char *>(bytes.data()),
                     bytes.size());
  output->keep();
  return 0;
}
