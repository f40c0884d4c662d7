//===- ExchangeKernels.cpp - The device-initiated exchange alone ----------===//
//
// Part of moe-compiler. The kernels of a sharded layer's device-initiated
// exchange without the layer around them (moe-comm-bench times them beside
// NCCL's all-to-all): the same kernel ops the schedule holds, through the
// same sm_90a pipeline.
//
//===----------------------------------------------------------------------===//

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVMIR/Dialect/All.h"
#include "moe/Compiler/Compiler.h"
#include "moe/Pipelines/Pipelines.h"
#include "moe/runtime/ScheduleAbi.h"
#include "moegpu/MoeGpuDialect.h"

using namespace mlir;
using namespace mlir::moe;

namespace {

/// Builds the kernels of one gpu.module: each a gpu.func over memrefs
/// whose body is one kernel op.
struct ExchangeModule {
  ExchangeModule(MLIRContext &ctx, const ExchangeKernelShape &shape)
      : b(&ctx), loc(b.getUnknownLoc()), shape(shape) {}

  MemRefType i32s(int64_t n) { return MemRefType::get({n}, b.getI32Type()); }
  MemRefType rows() {
    return MemRefType::get({ShapedType::kDynamic, shape.hidden},
                           b.getBF16Type());
  }
  MemRefType weights() {
    return MemRefType::get({ShapedType::kDynamic}, b.getF32Type());
  }

  /// A kernel `name` over `types`; its arguments, with the builder inside.
  Block::BlockArgListType kernel(StringRef name, ArrayRef<Type> types) {
    b.setInsertionPointToEnd(gpuModule.getBody());
    auto func =
        gpu::GPUFuncOp::create(b, loc, name, b.getFunctionType(types, {}));
    func->setAttr(gpu::GPUDialect::getKernelFuncAttrName(), b.getUnitAttr());
    b.setInsertionPointToEnd(&func.front());
    gpu::ReturnOp::create(b, loc);
    b.setInsertionPoint(func.front().getTerminator());
    return func.getArguments();
  }

  OwningOpRef<ModuleOp> build();

  OpBuilder b;
  Location loc;
  const ExchangeKernelShape &shape;
  gpu::GPUModuleOp gpuModule;
};

OwningOpRef<ModuleOp> ExchangeModule::build() {
  using ::moe::abi::ExchangeFlag;
  using ::moe::abi::ExchangeStatus;
  int64_t n = shape.ranks, e = shape.experts, local = e / n;
  // The flags the schedule of a whole forward pass has: one a rank, then
  // the dispatch's and the combine's.
  int64_t dispatchSlot = n + static_cast<int64_t>(ExchangeFlag::Dispatch);
  int64_t combineSlot = n + static_cast<int64_t>(ExchangeFlag::Combine);
  int64_t flagWords = combineSlot + 1;
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  module->getOperation()->setAttr(gpu::GPUDialect::getContainerModuleAttrName(),
                                  b.getUnitAttr());
  b.setInsertionPointToEnd(module->getBody());
  gpuModule = gpu::GPUModuleOp::create(b, loc, "moe_kernels");

  MemRefType offsets = i32s(e + 1), flags = i32s(flagWords), status = i32s(2),
             perRank = i32s(e),
             peers = MemRefType::get({n + 3}, b.getI64Type());
  {
    auto a =
        kernel("counts", {offsets, i32s(n * e), flags, i32s(1), peers, offsets,
                          perRank, perRank, status, i32s(local + 1)});
    moegpu::EpCountsOp::create(b, loc, a[0], a[1], a[2], a[3], a[4], a[5], a[6],
                               a[7], a[8], ValueRange{a[9]}, n);
  }
  auto send = [&](StringRef name, moegpu::EpDirection direction, int64_t slot) {
    bool dispatch = direction == moegpu::EpDirection::Dispatch;
    SmallVector<Type> types{offsets, perRank, rows(), rows()};
    if (dispatch)
      types.append({weights(), weights()});
    types.append({flags, status, peers});
    auto a = kernel(name, types);
    size_t k = dispatch ? 6 : 4;
    moegpu::EpSendOp::create(b, loc, direction, a[0], a[1], a[2], a[3],
                             dispatch ? a[4] : Value(),
                             dispatch ? a[5] : Value(), a[k], a[k + 1],
                             a[k + 2], n, slot, /*chunk=*/0, /*chunks=*/1);
  };
  auto wait = [&](StringRef name, int64_t slot, ExchangeStatus code) {
    auto a = kernel(name, {flags, flags, status, peers});
    moegpu::EpWaitOp::create(b, loc, a[0], a[1], a[2], a[3], n, slot,
                             shape.ctas, static_cast<int64_t>(code));
  };
  send("dispatch", moegpu::EpDirection::Dispatch, dispatchSlot);
  wait("dispatch_wait", dispatchSlot, ExchangeStatus::DispatchTimeout);
  send("combine", moegpu::EpDirection::Combine, combineSlot);
  wait("combine_wait", combineSlot, ExchangeStatus::CombineTimeout);
  return module;
}

} // namespace

ExchangeKernels
mlir::moe::compileExchangeKernels(const ExchangeKernelShape &shape) {
  ExchangeKernels result;
  if (shape.ranks < 2 || shape.ranks > 128 || shape.experts < shape.ranks ||
      shape.experts % shape.ranks || shape.hidden < 1 || shape.ctas < 1) {
    result.error = "the exchange needs 2 to 128 ranks, experts a multiple of "
                   "the ranks, rows of at least one element and a CTA";
    return result;
  }
  DialectRegistry registry;
  registerAllDialects(registry);
  registerAllExtensions(registry);
  registry.insert<moegpu::MoeGpuDialect>();
  registerAllToLLVMIRTranslations(registry);
  MLIRContext context(registry);
  context.loadAllAvailableDialects();
  context.printOpOnDiagnostic(false);
  std::string diagnostics;
  ScopedDiagnosticHandler handler(&context, [&](Diagnostic &d) {
    if (d.getSeverity() == DiagnosticSeverity::Error)
      diagnostics += d.str() + "\n";
    return success();
  });

  ExchangeModule builder(context, shape);
  OwningOpRef<ModuleOp> module = builder.build();
  PassManager pm(&context);
  Sm90PipelineOptions options;
  buildSm90Pipeline(pm, options);
  if (failed(verify(*module)) || failed(pm.run(*module))) {
    result.error = "lowering the exchange's kernels failed: " + diagnostics;
    return result;
  }
  auto binary = module->lookupSymbol<gpu::BinaryOp>("moe_kernels");
  auto object = binary && !binary.getObjects().empty()
                    ? dyn_cast<gpu::ObjectAttr>(binary.getObjects()[0])
                    : gpu::ObjectAttr();
  if (!object) {
    result.error = "the exchange's kernels made no PTX";
    return result;
  }
  result.ptx = object.getObject().str();
  return result;
}
