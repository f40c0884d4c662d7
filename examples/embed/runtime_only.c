/* Runs a bundle file with the runtime alone: runtime-only BUNDLE TOKENS. */
#include <moe_runtime.h>

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: runtime-only BUNDLE TOKENS\n");
    return 2;
  }
  moe_layer *layer = moe_layer_load(argv[1], "host");
  if (!layer || moe_layer_random_weights(layer, 7) != 0) {
    fprintf(stderr, "error: %s\n", moe_last_error());
    return 1;
  }
  int64_t tokens = atoll(argv[2]);
  int64_t h = moe_layer_hidden_size(layer), k = moe_layer_top_k(layer);
  float *x = calloc((size_t)(tokens * h), sizeof(float));
  float *y = calloc((size_t)(tokens * h), sizeof(float));
  float *w = calloc((size_t)(tokens * k), sizeof(float));
  int32_t *ids = calloc((size_t)(tokens * k), sizeof(int32_t));
  int rc = moe_layer_forward(layer, x, MOE_F32, tokens, y, ids, w);
  if (rc != 0)
    fprintf(stderr, "error: %s\n", moe_last_error());
  else
    printf("ran %lld tokens\n", (long long)tokens);
  free(x);
  free(y);
  free(w);
  free(ids);
  moe_layer_free(layer);
  return rc == 0 ? 0 : 1;
}
