//===- Compiler.cpp - C API of the moe-compiler compiler ------------------===//
//
// Part of moe-compiler.
//
//===----------------------------------------------------------------------===//

#include "moe_compiler.h"

#include "moe/Compiler/Compiler.h"

using namespace mlir::moe;

struct moe_compile_result {
  bool ok = false;
  std::vector<uint8_t> output;
  std::string diagnostics;
};

void moe_compile_options_init(moe_compile_options *options) {
  if (!options)
    return;
  *options = moe_compile_options{};
}

moe_compile_result *moe_compile(const char *input, size_t input_size,
                                moe_input_kind kind, const char *input_name,
                                const moe_compile_options *options) {
  auto *result = new moe_compile_result();
  if (!input && input_size > 0) {
    result->diagnostics = "error: moe_compile: input is NULL\n";
    return result;
  }
  if (kind != MOE_INPUT_MLIR && kind != MOE_INPUT_HF_CONFIG) {
    result->diagnostics = "error: moe_compile: unknown input kind\n";
    return result;
  }
  moe_compile_options defaults;
  moe_compile_options_init(&defaults);
  const moe_compile_options &o = options ? *options : defaults;
  CompileOptions opts;
  if (o.target)
    opts.target = o.target;
  if (o.emit)
    opts.emit = o.emit;
  if (o.dtype)
    opts.dtype = o.dtype;
  if (o.max_tokens)
    opts.maxTokens = o.max_tokens;
  if (o.alignment)
    opts.alignment = o.alignment;
  if (o.weight_names)
    opts.weightNames = o.weight_names;
  if (o.mcpu)
    opts.mcpu = o.mcpu;
  std::string text(input ? input : "", input_size);
  InputKind inputKind =
      kind == MOE_INPUT_MLIR ? InputKind::Mlir : InputKind::HFConfig;
  std::string name = input_name ? input_name : "<input>";

  CompileResult compiled =
      compileCached(text, name, inputKind, opts, o.use_cache != 0);
  result->diagnostics = compiled.diagnostics;
  if (!compiled.error.empty())
    result->diagnostics += "error: " + compiled.error + "\n";
  result->ok = compiled.ok();
  if (result->ok)
    result->output = std::move(compiled.output);
  return result;
}

int moe_compile_result_ok(const moe_compile_result *result) {
  return result && result->ok ? 1 : 0;
}

const void *moe_compile_result_data(const moe_compile_result *result,
                                    size_t *size) {
  if (!result || !result->ok) {
    if (size)
      *size = 0;
    return nullptr;
  }
  if (size)
    *size = result->output.size();
  return result->output.data();
}

const char *moe_compile_result_diagnostics(const moe_compile_result *result) {
  return result ? result->diagnostics.c_str() : "";
}

void moe_compile_result_free(moe_compile_result *result) { delete result; }

moe_compile_result *moe_compile_exchange_kernels(int64_t ranks, int64_t experts,
                                                 int64_t hidden, int64_t ctas) {
  auto *result = new moe_compile_result();
  mlir::moe::ExchangeKernelShape shape;
  shape.ranks = ranks;
  shape.experts = experts;
  shape.hidden = hidden;
  shape.ctas = ctas;
  mlir::moe::ExchangeKernels kernels = mlir::moe::compileExchangeKernels(shape);
  if (!kernels.error.empty()) {
    result->diagnostics = "error: " + kernels.error + "\n";
    return result;
  }
  result->output.assign(kernels.ptx.begin(), kernels.ptx.end());
  result->ok = true;
  return result;
}
