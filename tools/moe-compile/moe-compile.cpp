//===- moe-compile.cpp - Compile an MoE layer into a bundle ---------------===//
//
// Part of moe-compiler. Input: a .mlir file holding one moe.layer, or a
// model's Hugging Face config.json. Output: the verified moe-level module,
// LLVM IR, or a bundle the runtime runs. Bundles are cached (see --no-cache).
//
//===----------------------------------------------------------------------===//

#include "moe/Compiler/Compiler.h"
#include "moe/Version.h"
#include "moe/runtime/Support.h"

#include "mlir/IR/AsmState.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

#include <csignal>
#include <optional>
#include <cstring>
#include <sys/stat.h>

using namespace mlir;
using namespace mlir::moe;
namespace cl = llvm::cl;

static cl::OptionCategory category("moe-compile options");

static cl::opt<std::string> inputFile(cl::Positional,
                                      cl::desc("<input: a .mlir file, or a config.json or model "
                                               "directory>"),
                                      cl::init(""), cl::cat(category));
static cl::opt<std::string>
    hfConfig("hf-config",
             cl::desc("Import the layer from a Hugging Face config.json, "
                      "or a model directory holding one (a .json or "
                      "directory input is taken as this too)"),
             cl::value_desc("path"), cl::init(""), cl::cat(category));
static cl::opt<std::string> target("target", cl::desc("Target: host or sm_90a"),
                                   cl::init("host"), cl::cat(category));
static cl::opt<std::string> fp8Recipe(
    "fp8-recipe",
    cl::desc("How an fp8 layer's GEMMs scale their operands: block "
             "(DeepSeek-V3's: activations and gradients per 1 x 128 tile, "
             "weights per 128 x 128 block) or tensor (one scale per tensor) "
             "(default: the layer's own, else block)"),
    cl::init(""), cl::cat(category));
static cl::opt<std::string>
    dtype("dtype",
          cl::desc("Element type of the layer: f32, bf16, f16, or fp8 "
                   "(bf16 with e4m3 expert weights and 128 x 128 block "
                   "scales); a .mlir layer of another type is converted "
                   "(default: the .mlir layer's; for a config f32 on the "
                   "host, bf16 on sm_90a)"),
          cl::init(""), cl::cat(category));
static cl::opt<std::string>
    emit("emit",
         cl::desc("Output: mlir (the verified moe-level module, as parsed or "
                  "imported), llvm (host: optimized LLVM IR), ptx (sm_90a: "
                  "one PTX module with every kernel), cubin (sm_90a) or "
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
                       "host, 128 on sm_90a)"),
              cl::init(0), cl::cat(category));
static cl::opt<std::string>
    weightNames("weight-names",
                cl::desc("Checkpoint naming of the weights: deepseek, "
                         "mixtral, qwen, minimax, ernie, granite, hunyuan, "
                         "llama4, dbrx, jetmoe or gpt_oss "
                         "(default: from the config, else deepseek)"),
                cl::init(""), cl::cat(category));
static cl::opt<std::string>
    mcpu("mcpu",
         cl::desc("Host CPU to generate code for (default: a bundle carries "
                  "code for x86-64-v4, x86-64-v3 and baseline x86-64, and "
                  "the runtime loads the best the CPU runs; other emits "
                  "are for the generic CPU); 'native' for this machine "
                  "only, 'generic' for the baseline only, or an LLVM CPU "
                  "name"),
         cl::init(""), cl::cat(category));
static cl::opt<std::string>
    smPartition("sm-partition",
                cl::desc("sm_90a: SMS:COMM, the SMs of the GPU and those left "
                         "to communication; auto (or SMS:auto): the "
                         "performance model chooses COMM for a sharded "
                         "layer (none for one GPU) (default: the layer's "
                         "partition, auto for a sharded layer whose "
                         "partition keeps none, else 132:0)"),
                cl::init(""), cl::cat(category));
static cl::opt<int64_t>
    tileN("tile-n",
          cl::desc("sm_90a: BLOCK_N (64, 128, 192 or 256) of every grouped "
                   "GEMM whose N it divides, in place of the cost model's "
                   "choice (the router's GEMM keeps its own; an FP8 GEMM "
                   "takes it only where it also divides 128)"),
          cl::init(0), cl::cat(category));
static cl::opt<int64_t>
    tileM("tile-m",
          cl::desc("sm_90a: BLOCK_M of the GEMMs: 64 (one consumer "
                   "warpgroup; expert segments padded to 64 rows, half the "
                   "padding of few tokens per expert) or 128. Unset, a "
                   "bundle has both builds of the forward pass and runs 64 "
                   "at the token counts where the performance model finds "
                   "it faster (--report shows where)"),
          cl::init(0), cl::cat(category));
static cl::opt<int64_t> tileCluster(
    "tile-cluster",
    cl::desc("sm_90a: 2 runs the grouped GEMMs whose BLOCK_N is a multiple "
             "of 128 on clusters of 2 CTAs along M that share the B tile "
             "by TMA multicast (1: one CTA each)"),
    cl::init(1), cl::cat(category));
static cl::opt<bool>
    report("report",
           cl::desc("sm_90a: print each kernel's grid, block, shared memory, "
                    "registers, spills and tile (from ptxas -v) to stderr"),
           cl::init(false), cl::cat(category));
static cl::opt<std::string>
    ptxas("ptxas",
          cl::desc("sm_90a: the ptxas to make cubins with (default: "
                   "$MOE_PTXAS, the configured CUDA toolkit, PATH)"),
          cl::init(""), cl::cat(category));
static cl::opt<std::string> deviceMemory(
    "device-memory",
    cl::desc("sm_90a: warn when a rank's buffers need more device memory "
             "than this (e.g. 141G, 80GiB, or bytes)"),
    cl::init(""), cl::cat(category));
static cl::opt<bool>
    train("train",
          cl::desc("Also compile the training step (host and sm_90a): "
                   "forward, MSE loss, backward, AdamW, auxiliary-loss-free "
                   "bias update; run it with moe-train"),
          cl::init(false), cl::cat(category));
static cl::opt<std::string> optimizerState(
    "optimizer-state",
    cl::desc("With --train: the dtype AdamW keeps its moments in, f32 or "
             "bf16 (DeepSeek-V3's: half the optimizer's memory; host and "
             "sm_90a) (default: f32)"),
    cl::init(""), cl::cat(category));
static cl::opt<bool> backward(
    "backward",
    cl::desc("Also compile the layer's backward pass (host and sm_90a): "
             "the gradients of x and the weights from x and dL/dy, for a "
             "framework's autograd (the Python package's); with --ep, the "
             "replicated weights' gradients summed over the ranks"),
    cl::init(false), cl::cat(category));
static cl::opt<int64_t>
    ep("ep",
       cl::desc("Shard the experts over N expert-parallel ranks (host and "
                "sm_90a; run the bundle with mpirun -np N moe-run or "
                "moe-train)"),
       cl::init(1), cl::cat(category));
static cl::opt<int64_t> epChunks(
    "ep-chunks",
    cl::desc("With --ep: exchange each rank's tokens in N chunks, so one "
             "chunk's all-to-all overlaps another chunk's experts"),
    cl::init(1), cl::cat(category));
static cl::opt<bool> timing("timing", cl::desc("Print a timing report"),
                            cl::init(false), cl::cat(category));
static cl::opt<bool> noCache("no-cache",
                             cl::desc("Neither read nor write the compile "
                                      "cache ($MOE_CACHE_DIR)"),
                             cl::init(false), cl::cat(category));

static cl::opt<bool> printBuildIdentity(
    "print-build-identity",
    cl::desc("Print the build identity that cache keys include, and exit"),
    cl::init(false), cl::Hidden, cl::cat(category));

static int fail(const llvm::Twine &message) {
  llvm::errs() << "moe-compile: error: " << message << "\n";
  return 1;
}

/// The compiler's diagnostics with the tool's prefix on each diagnostic's
/// first line, and the input file where a location was unknown.
static std::string prefixDiagnostics(llvm::StringRef text,
                                     llvm::StringRef inputName) {
  std::string out;
  while (!text.empty()) {
    auto [line, rest] = text.split('\n');
    text = rest;
    std::string fixed = line.str();
    if (llvm::StringRef(fixed).starts_with("<unknown>:0:"))
      fixed = inputName.str() + fixed.substr(strlen("<unknown>:0"));
    llvm::StringRef l(fixed);
    bool heading = false;
    for (const char *kind : {": error: ", ": warning: ", ": note: ",
                             ": remark: "})
      heading = heading || l.contains(kind);
    if (heading && !l.starts_with(" "))
      fixed = "moe-compile: " + fixed;
    out += fixed + "\n";
  }
  return out;
}

/// Writes the output: to stdout for "-", else as the runtime writes every
/// output (rt::writeFileAtomically: devices and FIFOs in place, without
/// blocking on a FIFO nobody reads; links followed; files atomically).
static int writeOutput(const std::string &path,
                       const std::vector<uint8_t> &bytes) {
  if (path == "-") {
    llvm::outs().write(reinterpret_cast<const char *>(bytes.data()),
                       bytes.size());
    llvm::outs().flush();
    if (llvm::outs().has_error()) {
      llvm::outs().clear_error();
      return fail("cannot write the output to stdout");
    }
    return 0;
  }
  if (::moe::rt::Status s =
          ::moe::rt::writeFileAtomically(path, bytes.data(), bytes.size());
      !s.ok())
    return fail(s.error);
  return 0;
}

/// "141G", "141GB", "80GiB", "512M", "1000000": decimal (k, M, G, T) or
/// binary (KiB, MiB, GiB, TiB) units, a trailing B optional.
static std::optional<uint64_t> parseByteSize(llvm::StringRef text) {
  llvm::StringRef digits = text.take_while(
      [](char c) { return llvm::isDigit(c) || c == '.'; });
  llvm::StringRef unit = text.drop_front(digits.size());
  double value = 0;
  if (digits.empty() || digits.getAsDouble(value))
    return std::nullopt;
  double scale = 1;
  std::string u = unit.lower();
  if (!u.empty() && u.back() == 'b')
    u.pop_back();
  if (u == "k") scale = 1e3;
  else if (u == "m") scale = 1e6;
  else if (u == "g") scale = 1e9;
  else if (u == "t") scale = 1e12;
  else if (u == "ki") scale = 1024.0;
  else if (u == "mi") scale = 1024.0 * 1024;
  else if (u == "gi") scale = 1024.0 * 1024 * 1024;
  else if (u == "ti") scale = 1024.0 * 1024 * 1024 * 1024;
  else if (!u.empty()) return std::nullopt;
  double bytes = value * scale;
  if (!(bytes >= 0) || bytes > 1.8e19)
    return std::nullopt;
  return static_cast<uint64_t>(bytes);
}

int main(int argc, char **argv) {
  // LLVM's crash handlers take SIGXFSZ; a caller that ignores it (to see
  // EFBIG from a file size limit instead) keeps it ignored.
  struct sigaction xfsz;
  bool ignoreXfsz =
      ::sigaction(SIGXFSZ, nullptr, &xfsz) == 0 && xfsz.sa_handler == SIG_IGN;
  llvm::InitLLVM init(argc, argv);
  if (ignoreXfsz)
    std::signal(SIGXFSZ, SIG_IGN);
  registerAsmPrinterCLOptions();
  registerMLIRContextCLOptions();
  registerPassManagerCLOptions();
  // Only the tool's own options in --help; LLVM's and MLIR's (still
  // accepted) under --help-hidden.
  for (auto &[name, option] : cl::getRegisteredOptions()) {
    bool own = llvm::is_contained(option->Categories, &category);
    if (!own && name != "help" && name != "help-hidden" && name != "version" &&
        option->getOptionHiddenFlag() == cl::NotHidden)
      option->setHiddenFlag(cl::Hidden);
  }
  cl::SetVersionPrinter([](llvm::raw_ostream &os) {
    os << "moe-compile (moe-compiler " MOE_VERSION ", commit " MOE_GIT_COMMIT
          ")\n  LLVM " LLVM_VERSION_STRING "\n";
  });
  cl::ParseCommandLineOptions(argc, argv, "moe-compiler: MoE layer compiler\n");

  if (printBuildIdentity) {
    llvm::outs() << buildIdentity() << "\n";
    return 0;
  }
  if (inputFile.empty() == hfConfig.empty())
    return fail("give exactly one input: a .mlir file, or a config.json or "
                "model directory (--hf-config=PATH, or as the input)");
  CompileOptions options;
  options.target = target;
  options.emit = emit;
  options.dtype = dtype;
  options.fp8Recipe = fp8Recipe;
  options.maxTokens = maxTokens;
  options.alignment = alignment;
  options.weightNames = weightNames;
  options.mcpu = mcpu;
  options.timing = timing;
  options.smPartition = smPartition;
  options.tileN = tileN;
  options.tileM = tileM;
  options.tileCluster = tileCluster;
  options.report = report;
  options.ptxas = ptxas;
  if (!deviceMemory.empty()) {
    std::optional<uint64_t> bytes = parseByteSize(deviceMemory);
    if (!bytes || *bytes == 0)
      return fail("--device-memory must be a size such as 141G, 80GiB or "
                  "1000000 (bytes), got '" +
                  deviceMemory + "'");
    options.deviceMemory = *bytes;
  }
  options.train = train;
  options.optimizerState = optimizerState;
  options.backward = backward;
  options.ep = ep;
  options.epChunks = epChunks;
  options.passManagerCLOptions = true;
  if (std::string error = validateOptions(options); !error.empty())
    return fail(error);
  if ((emit == "bundle" || emit == "cubin") &&
      outputFile == "-")
    return fail("--emit=" + emit + " needs an output file (-o PATH)");

  InputKind kind = hfConfig.empty() ? InputKind::Mlir : InputKind::HFConfig;
  std::string inputName = hfConfig.empty() ? inputFile : hfConfig;
  // As Hugging Face users pass a model: its directory, or its config.json
  // without --hf-config (a .json input, or a directory, is a config).
  {
    ::moe::rt::Expected<std::string> resolved =
        ::moe::rt::resolveModelPath(inputName, "config");
    if (!resolved)
      return fail(resolved.message());
    bool wasDirectory = *resolved != inputName;
    if (kind == InputKind::Mlir &&
        (wasDirectory || llvm::StringRef(inputName).ends_with(".json")))
      kind = InputKind::HFConfig;
    inputName = *resolved;
  }
  // Regular files only (never a device or FIFO), of a sane size.
  ::moe::rt::Expected<std::vector<uint8_t>> bytes =
      ::moe::rt::readFile(inputName, 256u << 20);
  if (!bytes)
    return fail(bytes.message());
  std::string input(bytes->begin(), bytes->end());

  CompileResult result =
      compileCached(input, inputName, kind, options, /*useCache=*/!noCache);
  llvm::errs() << prefixDiagnostics(result.diagnostics, inputName);
  if (!result.error.empty())
    return fail(result.error);
  if (!result.diagnostics.empty())
    return 1;
  if (!result.warning.empty())
    llvm::errs() << "moe-compile: warning: " << result.warning << "\n";
  llvm::errs() << result.report;
  return writeOutput(outputFile, result.output);
}
