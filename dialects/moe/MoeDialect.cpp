//===- MoeDialect.cpp - The moe dialect -----------------------------------===//
//
// Part of moe-compiler.
//
//===----------------------------------------------------------------------===//

#include "moe/MoeDialect.h"
#include "moe/MoeOps.h"

#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::moe;

#include "moe/MoeDialect.cpp.inc"
#include "moe/MoeEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "moe/MoeAttrs.cpp.inc"

void MoeDialect::initialize() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "moe/MoeAttrs.cpp.inc"
      >();
  addOperations<
#define GET_OP_LIST
#include "moe/MoeOps.cpp.inc"
      >();
}

LogicalResult MoeDialect::verifyOperationAttribute(Operation *op,
                                                   NamedAttribute attr) {
  if (attr.getName() == getSmPartitionAttrName()) {
    if (!isa<SmPartitionAttr>(attr.getValue()))
      return op->emitError() << "expected '" << getSmPartitionAttrName()
                             << "' to be a #moe.sm_partition attribute, got "
                             << attr.getValue();
    return success();
  }
  if (attr.getName() == getScheduleAttrName()) {
    auto value = dyn_cast<StringAttr>(attr.getValue());
    if (op->getName().getStringRef() != "scf.parallel" || !value ||
        value.getValue() != getDynamicScheduleName())
      return op->emitError()
             << "expected '" << getScheduleAttrName() << "' to be \""
             << getDynamicScheduleName() << "\" on an scf.parallel, got "
             << attr.getValue() << " on " << op->getName();
    return success();
  }
  if (attr.getName() == getHostReadAttrName()) {
    if (op->getName().getStringRef() != "bufferization.to_buffer" ||
        !isa<IntegerAttr>(attr.getValue()))
      return op->emitError()
             << "expected '" << getHostReadAttrName()
             << "' to be an integer on a bufferization.to_buffer, got "
             << attr.getValue() << " on " << op->getName();
    return success();
  }
  return op->emitError() << "unknown moe dialect attribute '"
                         << attr.getName().getValue() << "'";
}
