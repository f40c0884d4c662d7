//===- moe-opt.cpp - The moe-compiler optimizer driver --------------------===//
//
// Part of moe-compiler. mlir-opt with the project's dialects, passes and
// pipelines registered next to every upstream one.
//
//===----------------------------------------------------------------------===//

#include "moe/Conversion/Passes.h"
#include "moe/MoeDialect.h"
#include "moe/Pipelines/Pipelines.h"
#include "moe/Support/Nesting.h"
#include "moe/Version.h"
#include "moe/Transforms/Passes.h"
#include "moe/runtime/Support.h"
#include "moegpu/MoeGpuDialect.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/InitAllPasses.h"
#include "mlir/Target/LLVMIR/Dialect/All.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

#include "llvm/Config/llvm-config.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

/// The project's passes (include/moe/*/Passes.td) and pipelines
/// (registerPipelines), with their summaries, for the top of --help.
static void printProjectPasses(llvm::raw_ostream &os) {
  static const char *const passes[] = {"moe-decompose-layer",
                                       "moe-autodiff",
                                       "moe-expert-parallel",
                                       "moe-select-tiles",
                                       "moe-partition-sms",
                                       "convert-moe-to-host",
                                       "convert-dynamic-parallel-to-openmp",
                                       "convert-moe-to-moegpu",
                                       "convert-moegpu-kernels-to-gpu",
                                       "moegpu-warp-specialize",
                                       "convert-moegpu-to-nvgpu",
                                       "moegpu-tokens-from-memory",
                                       "moegpu-lower-kernels"};
  static const char *const pipelines[] = {
      "moe-graph-pipeline", "moe-host-pipeline", "moegpu-kernel-pipeline",
      "moe-sm90-pipeline"};
  os << "moe-compiler passes (their options are in the full list below):\n";
  for (const char *name : passes)
    if (const mlir::PassInfo *info = mlir::PassInfo::lookup(name))
      os << "  --" << name << "  " << info->getPassDescription() << "\n";
  os << "moe-compiler pipelines:\n";
  for (const char *name : pipelines)
    if (const mlir::PassPipelineInfo *info =
            mlir::PassPipelineInfo::lookup(name))
      os << "  --" << name << "  " << info->getPassDescription() << "\n";
  os << "\n";
}

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  mlir::registerAllDialects(registry);
  mlir::registerAllExtensions(registry);
  mlir::registerAllToLLVMIRTranslations(registry);
  registry.insert<mlir::moe::MoeDialect, mlir::moegpu::MoeGpuDialect>();

  mlir::registerAllPasses();
  mlir::moe::registerMoePasses();
  mlir::moe::registerMoeConversionPasses();
  mlir::moe::registerPipelines();

  // --help lists the project's passes and pipelines first (upstream's
  // follow, in MLIR's one alphabetical list).
  for (int i = 1; i < argc; ++i)
    if (llvm::StringRef(argv[i]) == "--help" ||
        llvm::StringRef(argv[i]) == "-help") {
      printProjectPasses(llvm::outs());
      break;
    }
  llvm::cl::SetVersionPrinter([](llvm::raw_ostream &os) {
    os << "moe-opt (moe-compiler " MOE_VERSION ", commit " MOE_GIT_COMMIT
          ")\n  LLVM " LLVM_VERSION_STRING "\n";
  });
  auto [inputName, outputName] = mlir::registerAndParseCLIOptions(
      argc, argv, "moe-compiler optimizer driver\n", registry);
  mlir::MlirOptMainConfig config = mlir::MlirOptMainConfig::createFromCLOptions();
  // Listing dialects or passes reads no input.
  if (config.shouldShowDialects() || config.shouldListPasses())
    return mlir::asMainReturnCode(
        mlir::MlirOptMain(argc, argv, inputName, outputName, registry));

  // The input is read here, so that its nesting is checked before MLIR's
  // recursive parser sees it (stdin can be read only once).
  std::string error;
  std::unique_ptr<llvm::MemoryBuffer> input =
      mlir::openInputFile(inputName, &error);
  if (!input) {
    llvm::errs() << "moe-opt: error: " << error << "\n";
    return 1;
  }
  std::string shownName = inputName == "-" ? "<stdin>" : inputName;
  if (std::string deep = mlir::moe::checkMlirNesting(
          input->getBufferStart(), input->getBufferSize(), shownName);
      !deep.empty()) {
    llvm::errs() << "moe-opt: error: " << deep << "\n";
    return 1;
  }
  if (outputName == "-")
    return mlir::asMainReturnCode(
        mlir::MlirOptMain(llvm::outs(), std::move(input), registry, config));
  // A named output is written once the passes succeeded, as every tool of
  // the project writes its outputs (rt::writeFileAtomically: a file
  // replaced atomically, a link followed, a device or FIFO written in
  // place without blocking on a FIFO nobody reads).
  std::string text;
  llvm::raw_string_ostream os(text);
  if (mlir::failed(mlir::MlirOptMain(os, std::move(input), registry, config)))
    return 1;
  os.flush();
  if (moe::rt::Status s =
          moe::rt::writeFileAtomically(outputName, text.data(), text.size());
      !s.ok()) {
    llvm::errs() << "moe-opt: error: " << s.error << "\n";
    return 1;
  }
  return 0;
}
