// CUTLASS 3.x sm90 warp-specialized GEMMs whose PTX the emulator must run:
// D = alpha * A.B^T + beta * C in bf16 with f32 accumulation, A [M, K] and
// B [N, K] K-major, C and D [M, N] row-major, 128B-swizzled TMA tiles.
//
//   cooperative: 128x128x64 tiles, two consumer warpgroups on one tile,
//                a 2x1 cluster (B multicast to both CTAs of a cluster);
//   pingpong:    64x128x64 tiles, the two consumer warpgroups on
//                alternate tiles, no cluster.
//
// Built twice by generate.py: with --ptx for the kernels, and as a host
// program that builds each kernel's Params for a fixed problem with
// sentinel pointers and prints them as JSON with their relocations: where
// each pointer lies in the Params, and each tensor map with the arguments
// CUTLASS encoded it with (cuTensorMapEncodeTiled is defined here and
// records them, so the program needs no GPU and no driver). The test
// rebuilds the Params over its own allocations and launches the PTX.
#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/version.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/util/packed_stride.hpp"

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

using namespace cute;

namespace ref {

struct Encoded {
  int dtype;
  unsigned rank;
  unsigned long long address;
  unsigned long long dims[5], strides[5];
  unsigned box[5], elementStrides[5];
  int interleave, swizzle, l2, oob;
};
std::vector<Encoded> encoded;

} // namespace ref

extern "C" CUresult cuTensorMapEncodeTiled(
    CUtensorMap *map, CUtensorMapDataType dtype, cuuint32_t rank,
    void *address, const cuuint64_t *dims, const cuuint64_t *strides,
    const cuuint32_t *box, const cuuint32_t *elementStrides,
    CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
    CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob) {
  ref::Encoded e{};
  e.dtype = static_cast<int>(dtype);
  e.rank = rank;
  e.address = reinterpret_cast<unsigned long long>(address);
  for (unsigned i = 0; i < rank; ++i) {
    e.dims[i] = dims[i];
    e.box[i] = box[i];
    e.elementStrides[i] = elementStrides[i];
    if (i + 1 < rank)
      e.strides[i] = strides[i];
  }
  e.interleave = interleave;
  e.swizzle = swizzle;
  e.l2 = l2;
  e.oob = oob;
  // A marker the Params scan finds: "TMAP" and the map's index.
  std::memset(map, 0, sizeof(*map));
  unsigned marker[2] = {0x50414D54u,
                       static_cast<unsigned>(ref::encoded.size())};
  std::memcpy(map, marker, sizeof marker);
  ref::encoded.push_back(e);
  return CUDA_SUCCESS;
}

namespace ref {

using Element = cutlass::bfloat16_t;
using Accumulator = float;
constexpr int kAlign = 8;

template <class Tile, class Cluster, class MainloopSchedule,
          class EpilogueSchedule>
struct GemmOf {
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Tile, Cluster,
      cutlass::epilogue::collective::EpilogueTileAuto, Accumulator,
      Accumulator, Element, cutlass::layout::RowMajor, kAlign, Element,
      cutlass::layout::RowMajor, kAlign, EpilogueSchedule>::CollectiveOp;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Element,
      cutlass::layout::RowMajor, kAlign, Element, cutlass::layout::ColumnMajor,
      kAlign, Accumulator, Tile, Cluster,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename Epilogue::SharedStorage))>,
      MainloopSchedule>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>,
                                                      Mainloop, Epilogue>;
};

using Cooperative =
    GemmOf<Shape<_128, _128, _64>, Shape<_2, _1, _1>,
           cutlass::gemm::KernelTmaWarpSpecializedCooperative,
           cutlass::epilogue::TmaWarpSpecializedCooperative>::Kernel;
using Pingpong = GemmOf<Shape<_64, _128, _64>, Shape<_1, _1, _1>,
                        cutlass::gemm::KernelTmaWarpSpecializedPingpong,
                        cutlass::epilogue::TmaWarpSpecialized>::Kernel;

// Sentinel device addresses of A, B, C and D.
constexpr unsigned long long kSentinel[4] = {
    0x0000A00000000000ull, 0x0000B00000000000ull, 0x0000C00000000000ull,
    0x0000D00000000000ull};

template <class Kernel>
void describe(const char *name, int M, int N, int K, bool last) {
  using StrideA = typename Kernel::StrideA;
  using StrideB = typename Kernel::StrideB;
  using StrideC = typename Kernel::StrideC;
  using StrideD = typename Kernel::StrideD;
  StrideA sa = cutlass::make_cute_packed_stride(StrideA{}, {M, K, 1});
  StrideB sb = cutlass::make_cute_packed_stride(StrideB{}, {N, K, 1});
  StrideC sc = cutlass::make_cute_packed_stride(StrideC{}, {M, N, 1});
  StrideD sd = cutlass::make_cute_packed_stride(StrideD{}, {M, N, 1});
  cutlass::KernelHardwareInfo hw;
  hw.device_id = 0;
  hw.sm_count = 132;
  typename Kernel::Arguments args{
      cutlass::gemm::GemmUniversalMode::kGemm,
      {M, N, K, 1},
      {reinterpret_cast<Element *>(kSentinel[0]), sa,
       reinterpret_cast<Element *>(kSentinel[1]), sb},
      {{1.0f, 0.5f},
       reinterpret_cast<Element *>(kSentinel[2]),
       sc,
       reinterpret_cast<Element *>(kSentinel[3]),
       sd},
      hw};
  encoded.clear();
  typename Kernel::Params params = Kernel::to_underlying_arguments(args, nullptr);
  std::vector<unsigned char> bytes(sizeof(params));
  std::memcpy(bytes.data(), &params, sizeof(params));
  dim3 grid = Kernel::get_grid_shape(params);
  dim3 block = Kernel::get_block_shape();
  using Cluster = typename Kernel::DispatchPolicy::ClusterShape;
  std::printf(" \"%s\": {\n  \"compiler\": \"nvcc %d.%d, CUTLASS %d.%d.%d\",\n",
              name, __CUDACC_VER_MAJOR__, __CUDACC_VER_MINOR__,
              CUTLASS_MAJOR, CUTLASS_MINOR, CUTLASS_PATCH);
  std::printf("  \"problem\": [%d, %d, %d],\n", M, N, K);
  std::printf("  \"grid\": [%u, %u, %u], \"block\": [%u, %u, %u],\n", grid.x,
              grid.y, grid.z, block.x, block.y, block.z);
  std::printf("  \"cluster\": [%d, %d, %d], \"shared\": %d,\n",
              int(size<0>(Cluster{})), int(size<1>(Cluster{})),
              int(size<2>(Cluster{})), int(Kernel::SharedStorageSize));
  std::printf("  \"params\": \"");
  for (unsigned char b : bytes)
    std::printf("%02x", b);
  std::printf("\",\n  \"pointers\": [");
  bool first = true;
  for (size_t off = 0; off + 8 <= bytes.size(); off += 8) {
    unsigned long long v;
    std::memcpy(&v, bytes.data() + off, 8);
    for (int i = 0; i < 4; ++i)
      if (v == kSentinel[i]) {
        std::printf("%s{\"offset\": %zu, \"buffer\": \"%c\"}", first ? "" : ", ",
                    off, "ABCD"[i]);
        first = false;
      }
  }
  std::printf("],\n  \"tensor_maps\": [");
  first = true;
  for (size_t off = 0; off + 8 <= bytes.size(); off += 64) {
    unsigned marker[2];
    std::memcpy(marker, bytes.data() + off, 8);
    if (marker[0] != 0x50414D54u || marker[1] >= encoded.size())
      continue;
    const Encoded &e = encoded[marker[1]];
    int buffer = -1;
    for (int i = 0; i < 4; ++i)
      if (e.address >= kSentinel[i] && e.address < kSentinel[i] + (1ull << 40))
        buffer = i;
    std::printf("%s\n   {\"offset\": %zu, \"buffer\": \"%c\", \"byte_offset\": %llu, "
                "\"dtype\": %d, \"dims\": [",
                first ? "" : ",", off, buffer >= 0 ? "ABCD"[buffer] : '?',
                buffer >= 0 ? e.address - kSentinel[buffer] : 0ull, e.dtype);
    for (unsigned i = 0; i < e.rank; ++i)
      std::printf("%s%llu", i ? ", " : "", e.dims[i]);
    std::printf("], \"strides\": [");
    for (unsigned i = 0; i + 1 < e.rank; ++i)
      std::printf("%s%llu", i ? ", " : "", e.strides[i]);
    std::printf("], \"box\": [");
    for (unsigned i = 0; i < e.rank; ++i)
      std::printf("%s%u", i ? ", " : "", e.box[i]);
    std::printf("], \"element_strides\": [");
    for (unsigned i = 0; i < e.rank; ++i)
      std::printf("%s%u", i ? ", " : "", e.elementStrides[i]);
    std::printf("], \"interleave\": %d, \"swizzle\": %d, \"l2\": %d, \"oob\": %d}",
                e.interleave, e.swizzle, e.l2, e.oob);
    first = false;
  }
  std::printf("]\n }%s\n", last ? "" : ",");
}

} // namespace ref

using namespace ref;

int main() {
  // Taking the kernels' addresses makes nvcc --ptx emit them.
  static const void *volatile kernels[] = {
      reinterpret_cast<const void *>(&cutlass::device_kernel<Cooperative>),
      reinterpret_cast<const void *>(&cutlass::device_kernel<Pingpong>)};
  (void)kernels;
  std::printf("{\n");
  describe<Cooperative>("cutlass_cooperative", 384, 256, 320, false);
  describe<Pingpong>("cutlass_pingpong", 200, 256, 192, true);
  std::printf("}\n");
  return 0;
}
