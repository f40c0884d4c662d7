//===- DialectTest.cpp - The moe dialect through its C++ API --------------===//
//
// Part of moe-compiler. What an embedding framework does: build layers and
// attributes from C++, with result types inferred and bad configurations
// reported through diagnostics rather than asserts.
//
//===----------------------------------------------------------------------===//

#include "moe/MoeOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"

#include <gtest/gtest.h>

#include <string>

using namespace mlir;
using namespace mlir::moe;

namespace {

class MoeDialectTest : public ::testing::Test {
protected:
  MoeDialectTest() { context.loadDialect<MoeDialect>(); }

  LayerConfigAttr tinyConfig(Type dtype) {
    return LayerConfigAttr::get(
        &context, /*hidden=*/int64_t(64), /*experts=*/int64_t(8),
        /*top_k=*/int64_t(2), /*groups=*/int64_t(4), /*topk_groups=*/int64_t(2),
        ScoringFunc::Sigmoid, GroupScore::SumTop2,
        /*score_bias=*/true, /*norm_topk_prob=*/true, llvm::APFloat(2.5),
        /*router_jitter=*/llvm::APFloat(0.0),
        /*ffn=*/int64_t(32), /*shared_experts=*/int64_t(1),
        /*shared_ffn=*/int64_t(16),
        /*shared_gate=*/false, /*scale_input=*/false,
        /*output_bias=*/false, /*router_bias=*/false, /*expert_bias=*/false,
        Activation::SwiGLU, /*swiglu_alpha=*/llvm::APFloat(1.702),
        /*swiglu_limit=*/llvm::APFloat(7.0), dtype, /*expert_dtype=*/Type(),
        /*fp8_recipe=*/Fp8RecipeAttr());
  }

  MLIRContext context;
};

TEST_F(MoeDialectTest, BuildLayerWithInferredType) {
  OpBuilder b(&context);
  Location loc = b.getUnknownLoc();
  Type f32 = b.getF32Type();
  LayerConfigAttr config = tinyConfig(f32);
  auto module = ModuleOp::create(loc);
  b.setInsertionPointToEnd(module.getBody());

  // Stand-ins for the operands: results of a test op with the right types.
  auto tensor = [&](ArrayRef<int64_t> shape) {
    return RankedTensorType::get(shape, f32);
  };
  SmallVector<Type> types = {tensor({ShapedType::kDynamic, 64}),
                             tensor({8, 64}),
                             RankedTensorType::get({8}, f32),
                             tensor({8, 32, 64}),
                             tensor({8, 32, 64}),
                             tensor({8, 64, 32}),
                             tensor({16, 64}),
                             tensor({16, 64}),
                             tensor({64, 16})};
  OperationState state(loc, "test.operands");
  state.addTypes(types);
  Operation *operands = b.create(state);
  auto v = [&](int i) { return operands->getResult(i); };

  auto layer = LayerOp::create(b, loc, v(0), v(1), v(2), v(3), v(4), v(5), v(6),
                               v(7), v(8), /*shared_expert_gate=*/Value(),
                               /*output_bias=*/Value(),
                               /*router_bias=*/Value(), /*gate_bias=*/Value(),
                               /*up_bias=*/Value(), /*down_bias=*/Value(),
                               /*gate_scale=*/Value(), /*up_scale=*/Value(),
                               /*down_scale=*/Value(),
                               /*shared_gate_scale=*/Value(),
                               /*shared_up_scale=*/Value(),
                               /*shared_down_scale=*/Value(), config,
                               /*partition=*/SmPartitionAttr());
  EXPECT_EQ(layer.getType(), types[0]);
  context.allowUnregisteredDialects();
  EXPECT_TRUE(succeeded(verify(module)));
  EXPECT_EQ(layer.getConfig().getSharedFfnTotal(), 16);
  EXPECT_EQ(layer.getConfig().getExpertsPerGroup(), 2);
  EXPECT_DOUBLE_EQ(layer.getConfig().getRoutedScaleValue(), 2.5);
  module->erase();
}

TEST_F(MoeDialectTest, BadConfigIsADiagnosticNotACrash) {
  std::string message;
  ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diag) {
    message = diag.str();
    return success();
  });
  auto loc = UnknownLoc::get(&context);
  // top_k = 9 > experts = 8.
  auto attr = LayerConfigAttr::getChecked(
      [&] { return emitError(loc); }, &context, int64_t(64), int64_t(8),
      int64_t(9), int64_t(1), int64_t(1), ScoringFunc::Softmax, GroupScore::Max,
      false, false, llvm::APFloat(1.0), llvm::APFloat(0.0), int64_t(32),
      int64_t(0), int64_t(0), false, false, false, false, false,
      Activation::SwiGLU, llvm::APFloat(1.702), llvm::APFloat(7.0),
      Type(Float32Type::get(&context)), Type(), Fp8RecipeAttr());
  EXPECT_FALSE(attr);
  EXPECT_EQ(message, "expected 1 <= top_k <= experts (8), got 9");

  auto partition = SmPartitionAttr::getChecked(
      [&] { return emitError(loc); }, &context, int64_t(132), int64_t(132));
  EXPECT_FALSE(partition);
  EXPECT_EQ(message, "expected 0 <= comm < sms (132), got 132");
}

TEST_F(MoeDialectTest, PartitionSplitsTheSms) {
  auto partition = SmPartitionAttr::get(&context, int64_t(132), int64_t(20));
  EXPECT_EQ(partition.getComputeSms(), 112);
}

} // namespace
