//===- Forward.cpp - The GEMM kernels of a layer --------------------------===//
//
// Part of moe-compiler.
//
// The grouped GEMMs' kernels: one moegpu.grouped_gemm each, for the
// warp-specialized lowering, its operands named by buffer. (The SIMT kernels'
// ops are made where they are launched; convert-moegpu-kernels-to-gpu lowers
// them.)
//
//===----------------------------------------------------------------------===//

#include "LayerBuilder.h"

using namespace mlir;
using namespace mlir::moe;
using namespace mlir::moe::lowering;

SmallVector<StringRef> LayerBuilder::Gemm::args() const {
  SmallVector<StringRef> list{a, b};
  if (!offsets.empty())
    list.push_back(offsets);
  list.push_back(c);
  for (StringRef optional : {rowScale, aScale, bScale, bias, splitCount})
    if (!optional.empty())
      list.push_back(optional);
  return list;
}

void LayerBuilder::launchGemm(StringRef name, const Gemm &gemm,
                              std::optional<int64_t> chunk) {
  SmallVector<StringRef> args = gemm.args();
  auto build = [&](gpu::GPUFuncOp func) {
    Kernel k = kernelOf(func, args);
    auto operand = [&](StringRef buffer) {
      return buffer.empty() ? Value() : k[buffer];
    };
    // GPT-OSS's clamped SwiGLU.
    FloatAttr alpha, limit;
    if (gemm.expert && gemm.epilogue == moegpu::Epilogue::SwiGLU &&
        config.isClamped()) {
      Builder attrs(ctx);
      alpha = attrs.getF64FloatAttr(config.getSwigluAlphaValue());
      limit = attrs.getF64FloatAttr(config.getSwigluLimitValue());
    }
    // FP8: the gate and up values are rounded to c's type before the
    // SwiGLU, as the host rounds its 16-bit projections.
    bool rounded =
        !gemm.aScale.empty() && gemm.epilogue == moegpu::Epilogue::SwiGLU;
    kernelOp<moegpu::GroupedGemmOp>(
        k, operand(gemm.a), operand(gemm.b), operand(gemm.offsets),
        operand(gemm.c), operand(gemm.rowScale), operand(gemm.bias),
        operand(gemm.aScale), operand(gemm.bScale), operand(gemm.splitCount),
        moegpu::EpilogueAttr::get(ctx, gemm.epilogue),
        moegpu::GemmLayoutAttr::get(ctx, gemm.layout), moegpu::TileAttr(),
        moegpu::SmRangeAttr(), alpha, limit,
        rounded ? UnitAttr::get(ctx) : UnitAttr(),
        gemm.gateUp ? UnitAttr::get(ctx) : UnitAttr());
  };
  launchKernel(name, args, gridOf(moegpu::GridKind::Persistent), 0, chunk,
               build);
}
