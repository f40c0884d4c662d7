/*===- moe_compiler.h - C API of the moe-compiler compiler ---------*- C
-*-===*\
|*                                                                            *|
|* Part of moe-compiler. Compile a layer (MLIR text or a Hugging Face         *|
|* config.json) into a bundle in memory, with the options of moe-compile and  *|
|* diagnostics returned as text. Load the bundle with moe_runtime.h's         *|
|* moe_layer_load_from_memory.                                                *|
|*                                                                            *|
\*===----------------------------------------------------------------------===*/

#ifndef MOE_COMPILER_H
#define MOE_COMPILER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum moe_input_kind {
  MOE_INPUT_MLIR = 0,     /* text of a .mlir module with one moe.layer */
  MOE_INPUT_HF_CONFIG = 1 /* text of a Hugging Face config.json */
} moe_input_kind;

typedef struct moe_compile_options {
  const char *target;       /* "host" (NULL: host) */
  const char *emit;         /* "bundle" (NULL), "mlir" or "llvm" */
  const char *dtype;        /* "f32", "bf16", "f16" (NULL: the default) */
  int64_t max_tokens;       /* largest forward pass (0: 4096) */
  int64_t alignment;        /* rows per expert segment block (0: 1) */
  const char *weight_names; /* "deepseek", "mixtral", "qwen" (NULL: auto) */
  const char *mcpu;         /* host CPU: NULL (generic) or "native" */
  int use_cache; /* nonzero: use the compile cache ($MOE_CACHE_DIR) */
} moe_compile_options;

/** Sets every field to its default. */
void moe_compile_options_init(moe_compile_options *options);

typedef struct moe_compile_result moe_compile_result;

/** Compiles `input` (`input_size` bytes; `input_name` names it in
 *  diagnostics). Never returns NULL. */
moe_compile_result *moe_compile(const char *input, size_t input_size,
                                moe_input_kind kind, const char *input_name,
                                const moe_compile_options *options);
/** 1 when the compile succeeded. */
int moe_compile_result_ok(const moe_compile_result *result);
/** The output (bundle bytes, or MLIR/LLVM text); NULL on failure. */
const void *moe_compile_result_data(const moe_compile_result *result,
                                    size_t *size);
/** Everything the compiler said (errors with locations); "" if nothing. */
const char *moe_compile_result_diagnostics(const moe_compile_result *result);
void moe_compile_result_free(moe_compile_result *result);

/** The sm_90a PTX of a sharded layer's device-initiated exchange alone,
 *  as moe-comm-bench runs it: `ranks` ranks of `experts / ranks` experts
 *  each, rows of `hidden` bf16, sends on `ctas` CTAs (kernels `counts`,
 *  `dispatch`, `dispatch_wait`, `combine`, `combine_wait`). The result's
 *  data is the PTX text; its diagnostics say what failed. Never NULL. */
moe_compile_result *moe_compile_exchange_kernels(int64_t ranks, int64_t experts,
                                                 int64_t hidden, int64_t ctas);

#ifdef __cplusplus
}
#endif

#endif /* MOE_COMPILER_H */
