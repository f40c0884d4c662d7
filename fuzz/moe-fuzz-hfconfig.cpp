//===- moe-fuzz-hfconfig.cpp - Fuzz the config.json importer --------------===//
//
// Part of moe-compiler. Any bytes as a config.json: import, and when it
// imports build and verify the layer's module. Nothing may crash.
//
//===----------------------------------------------------------------------===//

#include "moe/Import/HFConfig.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"

#include <cstddef>
#include <cstdint>

using namespace mlir;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  MLIRContext context;
  context.disableMultithreading();
  context.loadDialect<moe::MoeDialect, func::FuncDialect>();
  ScopedDiagnosticHandler quiet(&context,
                                [](Diagnostic &) { return success(); });
  std::string error;
  llvm::StringRef text(reinterpret_cast<const char *>(data), size);
  std::optional<moe::ImportedConfig> imported = moe::importHFConfig(
      text, "fuzz.json", &context, Float32Type::get(&context), error);
  if (!imported) {
    if (error.empty())
      __builtin_trap(); // A failure must say why.
    return 0;
  }
  OwningOpRef<ModuleOp> module =
      moe::buildLayerModule(&context, imported->config, {});
  if (failed(verify(*module)))
    __builtin_trap(); // An accepted config must give a valid layer.
  return 0;
}
