/*===- capi-forward.c - Drive a bundle through the C API ------------------===*\
|*                                                                            *|
|* Part of moe-compiler's tests: what a framework does through moe_runtime.h. *|
|* usage: capi-forward BUNDLE WEIGHTS PREFIX TOKENS                           *|
|* Reads x as TOKENS x hidden values t * 0.01 - h * 0.001, runs the layer and *|
|* prints the expert ids of token 0 and the sum of y.                         *|
\*===----------------------------------------------------------------------===*/

#include "moe_runtime.h"

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: capi-forward BUNDLE WEIGHTS PREFIX TOKENS\n");
    return 2;
  }
  moe_layer *layer = moe_layer_load(argv[1], "host");
  if (!layer) {
    fprintf(stderr, "error: %s\n", moe_last_error());
    return 1;
  }
  if (moe_layer_load_weights(layer, argv[2], argv[3]) != 0) {
    fprintf(stderr, "error: %s\n", moe_last_error());
    moe_layer_free(layer);
    return 1;
  }
  /* A bad thread count is an error; two threads give what one does. */
  if (moe_layer_set_threads(layer, 0) == 0) {
    fprintf(stderr, "error: 0 threads were accepted\n");
    moe_layer_free(layer);
    return 1;
  }
  printf("zero threads: %s\n", moe_last_error());
  if (moe_layer_set_threads(layer, 2) != 0) {
    fprintf(stderr, "error: %s\n", moe_last_error());
    moe_layer_free(layer);
    return 1;
  }
  int64_t tokens = atoll(argv[4]);
  int64_t hidden = moe_layer_hidden_size(layer), k = moe_layer_top_k(layer);
  float *x = malloc(sizeof(float) * tokens * hidden);
  float *y = malloc(sizeof(float) * tokens * hidden);
  int32_t *ids = malloc(sizeof(int32_t) * tokens * k);
  float *weights = malloc(sizeof(float) * tokens * k);
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t h = 0; h < hidden; ++h)
      x[t * hidden + h] = 0.01f * (float)t - 0.001f * (float)h;
  int rc = moe_layer_forward(layer, x, MOE_F32, tokens, y, ids, weights);
  if (rc != 0) {
    fprintf(stderr, "error: %s\n", moe_last_error());
  } else {
    double sum = 0;
    for (int64_t i = 0; i < tokens * hidden; ++i)
      sum += y[i];
    printf("token 0 experts:");
    for (int64_t j = 0; j < k; ++j)
      printf(" %d", ids[j]);
    printf("\nsum of y: %.6f\n", sum);
  }
  /* Too many tokens is an error, not a crash. */
  if (moe_layer_forward(layer, x, MOE_F32, moe_layer_max_tokens(layer) + 1, y,
                        ids, weights) == 0 ||
      moe_last_error()[0] == '\0') {
    fprintf(stderr, "error: an oversized forward was accepted\n");
    rc = 1;
  } else {
    printf("oversized forward: %s\n", moe_last_error());
  }
  free(x);
  free(y);
  free(ids);
  free(weights);
  moe_layer_free(layer);
  return rc == 0 ? 0 : 1;
}
