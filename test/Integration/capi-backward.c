/*===- capi-backward.c - The backward pass through the C API --------------===*\
|*                                                                            *|
|* Part of moe-compiler's tests: what a framework's autograd does through     *|
|* moe_runtime.h. usage: capi-backward BUNDLE DEVICE TOKENS OUTDIR            *|
|* Binds random weights (seed 5), x = t * 0.01 - h * 0.001 and dy = sin of    *|
|* the index, runs moe_layer_backward and writes each gradient's f32 values   *|
|* to OUTDIR/NAME.f32; prints the gradients and the errors a caller meets.    *|
\*===----------------------------------------------------------------------===*/

#include "moe_runtime.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: capi-backward BUNDLE DEVICE TOKENS OUTDIR\n");
    return 2;
  }
  moe_layer *layer = moe_layer_load(argv[1], argv[2]);
  if (!layer || moe_layer_random_weights(layer, 5) != 0) {
    fprintf(stderr, "error: %s\n", moe_last_error());
    return 1;
  }
  int64_t tokens = atoll(argv[3]);
  int64_t hidden = moe_layer_hidden_size(layer);
  int64_t count = moe_layer_gradient_count(layer);
  printf("%lld gradients\n", (long long)count);
  float *x = malloc(sizeof(float) * tokens * hidden);
  float *dy = malloc(sizeof(float) * tokens * hidden);
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t h = 0; h < hidden; ++h) {
      x[t * hidden + h] = 0.01f * (float)t - 0.001f * (float)h;
      dy[t * hidden + h] = sinf((float)(t * hidden + h));
    }
  float **grads = calloc((size_t)(count > 0 ? count : 1), sizeof(float *));
  for (int64_t i = 0; i < count; ++i) {
    int64_t n = moe_layer_gradient_elements(layer, i);
    if (i == 0)
      n *= tokens;
    printf("gradient %lld: %s, %lld values\n", (long long)i,
           moe_layer_gradient_name(layer, i), (long long)n);
    grads[i] = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
  }
  int rc = moe_layer_backward(layer, x, MOE_F32, dy, tokens, grads, count);
  if (rc != 0) {
    fprintf(stderr, "error: %s\n", moe_last_error());
  } else {
    for (int64_t i = 0; i < count; ++i) {
      int64_t n = moe_layer_gradient_elements(layer, i) * (i == 0 ? tokens : 1);
      char path[4096];
      snprintf(path, sizeof path, "%s/%s.f32", argv[4],
               moe_layer_gradient_name(layer, i));
      FILE *f = fopen(path, "wb");
      if (!f || fwrite(grads[i], sizeof(float), (size_t)n, f) != (size_t)n) {
        fprintf(stderr, "error: cannot write %s\n", path);
        rc = 1;
      }
      if (f)
        fclose(f);
    }
  }
  /* What a caller gets wrong: the gradient count, an index past it. */
  if (moe_layer_backward(layer, x, MOE_F32, dy, tokens, grads, count - 1) == 0)
    rc = 1;
  printf("short list: %s\n", moe_last_error());
  if (moe_layer_gradient_name(layer, count) != NULL ||
      moe_layer_gradient_elements(layer, -1) != -1)
    rc = 1;
  for (int64_t i = 0; i < count; ++i)
    free(grads[i]);
  free(grads);
  free(x);
  free(dy);
  moe_layer_free(layer);
  return rc == 0 ? 0 : 1;
}
