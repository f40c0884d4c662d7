//===- moe-opt.cpp - The moe-compiler optimizer driver --------------------===//
//
// Part of moe-compiler. mlir-opt with the project's dialects, passes and
// pipelines registered next to every upstream one.
//
//===----------------------------------------------------------------------===//

#include "moe/Conversion/Passes.h"
#include "moe/MoeDialect.h"
#include "moe/Pipelines/Pipelines.h"
#include "moe/Transforms/Passes.h"
#include "moegpu/MoeGpuDialect.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/InitAllPasses.h"
#include "mlir/Target/LLVMIR/Dialect/All.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

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

  return mlir::asMainReturnCode(mlir::MlirOptMain(
      argc, argv, "moe-compiler optimizer driver\n", registry));
}
