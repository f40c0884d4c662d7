//===- EmulateOnHost.cpp - SIMT kernels as host loops ---------------------===//
//
// Part of moe-compiler. The training kernels of the sm_90a target are SIMT
// code whose threads share nothing but atomics; as host functions that run
// their threads one after another they can be checked on machines without
// a GPU.
//
//===----------------------------------------------------------------------===//

#include "moe/Transforms/Passes.h"
#include "moegpu/MoeGpuDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/IRMapping.h"

namespace mlir::moe {
#define GEN_PASS_DEF_MOEGPUEMULATEONHOST
#include "moe/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;

namespace {

/// Whether `func`'s threads only share atomics and disjoint stores, as far
/// as its ops tell: no barrier, shuffle, workgroup memory or GPU-only op.
bool emulatable(gpu::GPUFuncOp func) {
  if (!func.getWorkgroupAttributions().empty() ||
      !func.getPrivateAttributions().empty() || !func.getBody().hasOneBlock())
    return false;
  WalkResult result = func.walk([](Operation *op) {
    Dialect *dialect = op->getDialect();
    StringRef ns = dialect ? dialect->getNamespace() : "";
    if (auto call = dyn_cast<LLVM::CallIntrinsicOp>(op)) {
      StringRef name = call.getIntrin();
      return name == "llvm.nvvm.ex2.approx.ftz.f" ||
                     name == "llvm.nvvm.sqrt.rn.f"
                 ? WalkResult::advance()
                 : WalkResult::interrupt();
    }
    if (isa<gpu::BlockIdOp, gpu::ThreadIdOp, gpu::BlockDimOp, gpu::GridDimOp,
            gpu::ReturnOp, gpu::GPUFuncOp>(op))
      return WalkResult::advance();
    if (ns == "arith" || ns == "scf" || ns == "memref" || ns == "math")
      return WalkResult::advance();
    return WalkResult::interrupt();
  });
  return !result.wasInterrupted();
}

void emulate(gpu::GPUFuncOp kernel, ModuleOp module) {
  Location loc = kernel.getLoc();
  OpBuilder b = OpBuilder::atBlockEnd(module.getBody());
  SmallVector<Type> types(kernel.getArgumentTypes());
  types.append({b.getIndexType(), b.getIndexType()});
  auto func = func::FuncOp::create(b, loc, ("emu_" + kernel.getName()).str(),
                                   b.getFunctionType(types, {}));
  func->setAttr("llvm.emit_c_interface", b.getUnitAttr());
  Block *entry = func.addEntryBlock();
  b.setInsertionPointToStart(entry);
  unsigned n = kernel.getNumArguments();
  Value grid = entry->getArgument(n), block = entry->getArgument(n + 1);
  Value zero = arith::ConstantIndexOp::create(b, loc, 0);
  Value one = arith::ConstantIndexOp::create(b, loc, 1);
  auto blocks = scf::ForOp::create(b, loc, zero, grid, one);
  b.setInsertionPointToStart(blocks.getBody());
  auto threads = scf::ForOp::create(b, loc, zero, block, one);
  b.setInsertionPoint(threads.getBody()->getTerminator());
  Value bx = blocks.getInductionVar(), tx = threads.getInductionVar();

  IRMapping mapping;
  for (unsigned i = 0; i < n; ++i)
    mapping.map(kernel.getArgument(i), entry->getArgument(i));
  for (Operation &op : kernel.front().without_terminator())
    b.clone(op, mapping);
  // The launch's coordinates, then the SFU intrinsics, once every op is
  // cloned (the mapping refers to the clones).
  SmallVector<Operation *> cloned;
  threads.getBody()->walk([&](Operation *inner) { cloned.push_back(inner); });
  for (Operation *inner : cloned) {
    OpBuilder rb(inner);
    Value replacement;
    auto pick = [&](gpu::Dimension d, Value xValue, Value other) {
      return d == gpu::Dimension::x ? xValue : other;
    };
    if (auto id = dyn_cast<gpu::BlockIdOp>(inner))
      replacement = pick(id.getDimension(), bx, zero);
    else if (auto id = dyn_cast<gpu::ThreadIdOp>(inner))
      replacement = pick(id.getDimension(), tx, zero);
    else if (auto dim = dyn_cast<gpu::BlockDimOp>(inner))
      replacement = pick(dim.getDimension(), block, one);
    else if (auto dim = dyn_cast<gpu::GridDimOp>(inner))
      replacement = pick(dim.getDimension(), grid, one);
    else if (auto call = dyn_cast<LLVM::CallIntrinsicOp>(inner)) {
      Value arg = call.getArgs()[0];
      replacement = call.getIntrin() == "llvm.nvvm.sqrt.rn.f"
                        ? Value(math::SqrtOp::create(rb, inner->getLoc(), arg))
                        : Value(math::Exp2Op::create(rb, inner->getLoc(), arg));
    }
    if (!replacement)
      continue;
    inner->getResult(0).replaceAllUsesWith(replacement);
    inner->erase();
  }
  b.setInsertionPointToEnd(entry);
  func::ReturnOp::create(b, loc);
}

struct MoeGpuEmulateOnHost
    : public mlir::moe::impl::MoeGpuEmulateOnHostBase<MoeGpuEmulateOnHost> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto kernels = module.lookupSymbol<gpu::GPUModuleOp>("moe_kernels");
    if (!kernels) {
      module.emitError() << "moegpu-emulate-on-host expects the "
                            "gpu.module @moe_kernels of convert-moe-to-moegpu";
      return signalPassFailure();
    }
    Builder b(module.getContext());
    SmallVector<Attribute> skipped;
    for (auto kernel : kernels.getOps<gpu::GPUFuncOp>()) {
      if (emulatable(kernel))
        emulate(kernel, module);
      else
        skipped.push_back(b.getStringAttr(kernel.getName()));
    }
    module->setAttr("moegpu.not_emulated", b.getArrayAttr(skipped));
    // The schedule launches the kernels this pass replaces: it goes too
    // (the host emulation runs a bundle's manifest, not this module).
    for (auto program :
         llvm::make_early_inc_range(module.getOps<moegpu::ProgramOp>()))
      program.erase();
    kernels.erase();
    module->removeAttr(gpu::GPUDialect::getContainerModuleAttrName());
  }
};

} // namespace
