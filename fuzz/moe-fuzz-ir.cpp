//===- moe-fuzz-ir.cpp - Fuzz the moe dialect's parser and passes ---------===//
//
// Part of moe-compiler. Any text: parse, verify, and when it verifies run
// moe-decompose-layer and convert-moe-to-host. Nothing may crash.
//
//===----------------------------------------------------------------------===//

#include "moe/Conversion/Passes.h"
#include "moe/MoeDialect.h"
#include "moe/Support/Nesting.h"
#include "moe/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"

#include <cstddef>
#include <cstdint>

using namespace mlir;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  DialectRegistry registry;
  registry.insert<moe::MoeDialect, func::FuncDialect, arith::ArithDialect,
                  tensor::TensorDialect, linalg::LinalgDialect,
                  bufferization::BufferizationDialect, memref::MemRefDialect,
                  scf::SCFDialect, math::MathDialect>();
  MLIRContext context(registry);
  context.disableMultithreading();
  context.loadAllAvailableDialects();
  // Diagnostics are expected; swallow them.
  ScopedDiagnosticHandler quiet(&context,
                                [](Diagnostic &) { return success(); });
  // The MLIR lexer reads up to a terminating NUL, as every file buffer has.
  std::string text(reinterpret_cast<const char *>(data), size);
  // As every tool does: deep nesting is refused before the recursive
  // parser sees it.
  if (!moe::checkMlirNesting(text.data(), text.size(), "input").empty())
    return 0;
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(text, &context);
  if (!module || failed(verify(*module)))
    return 0;
  PassManager pm(&context);
  pm.enableVerifier(true);
  pm.addPass(moe::createMoeDecomposeLayer());
  pm.addPass(moe::createConvertMoeToHost());
  (void)pm.run(*module);
  return 0;
}
