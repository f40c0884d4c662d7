//===- PartitionSms.cpp - SM ranges of persistent kernels -----------------===//
//
// Part of moe-compiler.
//
//===----------------------------------------------------------------------===//

#include "moe/MoeDialect.h"
#include "moe/Transforms/Passes.h"
#include "moe/runtime/ScheduleAbi.h"
#include "moegpu/MoeGpuDialect.h"

namespace mlir::moe {
#define GEN_PASS_DEF_MOEPARTITIONSMS
#include "moe/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moegpu;

namespace {

struct MoePartitionSms
    : public mlir::moe::impl::MoePartitionSmsBase<MoePartitionSms> {
  using MoePartitionSmsBase::MoePartitionSmsBase;

  void runOnOperation() override {
    WalkResult result = getOperation()->walk([&](GroupedGemmOp op) {
      int64_t computeSms = ::moe::abi::kDefaultSms;
      for (Operation *parent = op->getParentOp(); parent;
           parent = parent->getParentOp()) {
        if (auto partition = parent->getAttrOfType<mlir::moe::SmPartitionAttr>(
                mlir::moe::MoeDialect::getSmPartitionAttrName())) {
          computeSms = partition.getSms() - partition.getComm();
          break;
        }
      }
      SmRangeAttr range = op.getSmRangeAttr();
      // Pairs of CTAs (a tile's cluster of 2) take an even count of SMs.
      int64_t cluster = op.getTileAttr() ? op.getTileAttr().getCluster() : 1;
      if (!range) {
        op.setSmRangeAttr(SmRangeAttr::get(
            op.getContext(), 0, computeSms - computeSms % cluster));
        return WalkResult::advance();
      }
      if (range.getCount() % cluster != 0) {
        op.emitOpError() << "sm_range of " << range.getCount()
                         << " SMs for clusters of " << cluster
                         << " CTAs: expected a multiple of " << cluster;
        return WalkResult::interrupt();
      }
      if (range.getFirst() + range.getCount() > computeSms) {
        op.emitOpError() << "sm_range [" << range.getFirst() << ", "
                         << range.getFirst() + range.getCount()
                         << ") reaches past the " << computeSms
                         << " compute SMs of the partition";
        return WalkResult::interrupt();
      }
      return WalkResult::advance();
    });
    if (result.wasInterrupted())
      signalPassFailure();
  }
};

} // namespace
