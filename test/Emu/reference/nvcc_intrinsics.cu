// CUDA intrinsics whose PTX (nvcc 13, sm_90a) uses instructions beyond
// plain arithmetic: bfind (__ffs, __clz), dp4a, vabsdiff4, match.any/all,
// bar.warp.sync (__syncwarp), the funnel shifts (shf), 128-bit products
// (mul.hi.u64, add.cc/addc) and libdevice's sinf with its large-argument
// reduction. One warp; run_reference.py checks each against numpy.
#include <cstdint>

extern "C" __global__ void intrinsics(unsigned *out, const unsigned *in, float *f,
                                      unsigned long long *w) {
  unsigned t = threadIdx.x;
  unsigned a = in[t], b = in[t + 32];
  out[t] = __ffs(a);
  out[t + 32] = __dp4a(a, b, 7u);
  out[t + 64] = __dp4a(static_cast<int>(a), static_cast<int>(b), 7);
  out[t + 96] = __vabsdiffu4(a, b);
  out[t + 128] = __match_any_sync(0xffffffffu, a & 3);
  __syncwarp();
  f[t] = sinf(f[t]);
  unsigned __int128 x =
      static_cast<unsigned __int128>(w[t]) * w[t + 32] + w[t + 64];
  w[t] = static_cast<unsigned long long>(x >> 64);
  out[t + 160] = __funnelshift_l(a, b, t);
  out[t + 192] = __funnelshift_rc(a, b, t + 16);
  out[t + 224] = __clz(a) + __ffsll(w[t]);
  int p = 0;
  out[t + 256] = __match_all_sync(0xffffffffu, a & 1, &p);
  out[t + 288] = p;
  out[t + 320] = __match_all_sync(0xffffffffu, 5u, &p);
  out[t + 352] = p;
  out[t + 384] = __sad(static_cast<int>(a), static_cast<int>(b), 3u);
}
