/* Compiles a Mixtral-style layer from its config.json text with the
 * compiler's C API, loads the bundle from memory with the runtime's C API,
 * and runs four tokens on seeded random weights. */
#include <moe_compiler.h>
#include <moe_runtime.h>

#include <stdio.h>
#include <string.h>

static const char kConfig[] =
    "{\"model_type\": \"mixtral\", \"hidden_size\": 32, "
    "\"num_local_experts\": 4, \"num_experts_per_tok\": 2, "
    "\"intermediate_size\": 48}";

int main(void) {
  moe_compile_options options;
  moe_compile_options_init(&options);
  options.max_tokens = 16;
  moe_compile_result *compiled = moe_compile(
      kConfig, strlen(kConfig), MOE_INPUT_HF_CONFIG, "config.json", &options);
  if (!moe_compile_result_ok(compiled)) {
    fprintf(stderr, "compile failed:\n%s",
            moe_compile_result_diagnostics(compiled));
    moe_compile_result_free(compiled);
    return 1;
  }
  size_t size = 0;
  const void *bundle = moe_compile_result_data(compiled, &size);
  printf("compiled a bundle of %zu bytes\n", size);

  moe_layer *layer = moe_layer_load_from_memory(bundle, size, "host");
  moe_compile_result_free(compiled);
  if (!layer || moe_layer_random_weights(layer, 1) != 0) {
    fprintf(stderr, "runtime: %s\n", moe_last_error());
    return 1;
  }
  enum { T = 4, H = 32, K = 2 };
  float x[T * H], y[T * H], w[T * K];
  int32_t ids[T * K];
  for (int i = 0; i < T * H; ++i)
    x[i] = (float)(i % 7) * 0.25f - 0.75f;
  if (moe_layer_forward(layer, x, MOE_F32, T, y, ids, w) != 0) {
    fprintf(stderr, "forward: %s\n", moe_last_error());
    moe_layer_free(layer);
    return 1;
  }
  for (int t = 0; t < T; ++t)
    printf("token %d: experts %d %d, weights %.4f + %.4f = %.4f\n", t,
           ids[t * K], ids[t * K + 1], w[t * K], w[t * K + 1],
           w[t * K] + w[t * K + 1]);

  /* A broken config is a diagnostic, not a crash. */
  const char *kBad = "{\"model_type\": \"mixtral\", \"hidden_size\": \"big\"}";
  moe_compile_result *bad = moe_compile(kBad, strlen(kBad), MOE_INPUT_HF_CONFIG,
                                        "bad.json", &options);
  printf("bad config: %s", moe_compile_result_diagnostics(bad));
  moe_compile_result_free(bad);
  moe_layer_free(layer);
  return 0;
}
