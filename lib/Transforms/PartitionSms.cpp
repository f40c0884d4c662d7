//===- PartitionSms.cpp - SM ranges of persistent kernels -----------------===//
//
// Part of moe-compiler.
//
//===----------------------------------------------------------------------===//

#include "moe/MoeDialect.h"
#include "moe/Transforms/Passes.h"
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
    if (sms < 1 || comm < 0 || comm >= sms) {
      getOperation()->emitError()
          << "moe-partition-sms: expected 0 <= comm < sms, got sms = "
          << static_cast<int64_t>(sms)
          << ", comm = " << static_cast<int64_t>(comm);
      return signalPassFailure();
    }
    WalkResult result = getOperation()->walk([&](GroupedGemmOp op) {
      int64_t computeSms = sms - comm;
      for (Operation *parent = op->getParentOp(); parent;
           parent = parent->getParentOp()) {
        if (auto partition = parent->getAttrOfType<moe::SmPartitionAttr>(
                moe::MoeDialect::getSmPartitionAttrName())) {
          computeSms = partition.getSms() - partition.getComm();
          break;
        }
      }
      SmRangeAttr range = op.getSmRangeAttr();
      if (!range) {
        op.setSmRangeAttr(SmRangeAttr::get(op.getContext(), 0, computeSms));
        return WalkResult::advance();
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
