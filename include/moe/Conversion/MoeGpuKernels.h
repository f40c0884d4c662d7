//===- MoeGpuKernels.h - The SIMT kernels' shapes and builder ---*- C++ -*-===//
//
// Part of moe-compiler.
//
// What the schedule (convert-moe-to-moegpu) and the SIMT kernels' lowering
// (convert-moegpu-kernels-to-gpu) share: the CTA shapes each kernel is
// launched with and written for, and the builder of the kernels' code.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_CONVERSION_MOEGPUKERNELS_H
#define MOE_CONVERSION_MOEGPUKERNELS_H

#include "moe/Conversion/KernelBuilder.h"
#include "moe/runtime/ScheduleAbi.h"
#include "moegpu/MoeGpuDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "mlir/IR/PatternMatch.h"

#include <algorithm>
#include <cmath>

namespace mlir::moe {

/// Rows (one warp each) of a CTA of the routing kernels (router_logits,
/// shared_gate, route).
constexpr int64_t kRouteWarps = 4;
/// Most slices of a split-K router GEMM, and the fewest k blocks (of 64)
/// a slice walks, so that its TMA pipeline still overlaps loads with
/// wgmma: DeepSeek-V3's H = 7168 is 112 k blocks in 28 slices.
constexpr int64_t kMaxRouterSplits = 32;
constexpr int64_t kMinSliceKBlocks = 4;
/// The most slices the router GEMM of hidden size `hidden` splits K into
/// (1: not split).
inline int64_t routerSplitsOf(int64_t hidden) {
  return std::min<int64_t>(
      kMaxRouterSplits,
      std::max<int64_t>(1, (hidden + 63) / 64 / kMinSliceKBlocks));
}
/// Threads of a CTA of the one-thread-per-element SIMT kernels.
constexpr int64_t kCountThreads = 256;
/// Most CTAs of a grid-stride kernel over a weight's elements (the
/// conversions, checks and AdamW): 8 of kCountThreads fill an H200 SM.
/// One element a thread with a CTA each ran at 0.6 TB/s on an H200 (CTA
/// launches, not bytes, bound it).
constexpr int64_t kStrideCtas = 132 * 8;
/// Threads of a CTA that owns one row (token, dispatched row or weight
/// row), striding over its columns.
constexpr int64_t kRowThreads = 128;
/// Rows (one warp each) a CTA of the FP8 quantization kernels takes.
constexpr int64_t kQuantizeWarps = 8;
/// moegpu.quantize_columns: a CTA of this many threads takes a tile of 128
/// rows (one FP8 block) and kColumnTile columns.
constexpr int64_t kColumnThreads = 128;
constexpr int64_t kColumnTile = 32;
/// moegpu.quantize_blocks: a CTA of this many threads a 128 x 128 block.
constexpr int64_t kBlockThreads = 256;
/// Threads of the one CTA that scans the expert counts.
constexpr int64_t kScanThreads = 256;
/// Bytes a thread copies at once in row copies and sums (one 16-byte
/// vector access: 8 bf16 or f16).
constexpr int64_t kChunkBytes = 16;
/// Rows of the packed [G, 2F, H] gate/up weight are interleaved in blocks
/// of this many gate rows, then as many up rows (the schedule ABI's, which
/// the runtime packs by).
constexpr int64_t kGateUpBlock = ::moe::abi::kGateUpBlock;
static_assert(kGateUpBlock == 8,
              "convert-moegpu-to-nvgpu's SwiGLU epilogue finds a gate column "
              "and its up column in neighbouring 8-column wgmma chunks");

/// The patterns of convert-moegpu-kernels-to-gpu: each SIMT kernel op
/// becomes its threads' code in the gpu.func around it.
void populateMoeGpuKernelsToGpuPatterns(RewritePatternSet &patterns);

/// The SIMT kernels' builder: KernelBuilder's shorthands and what only the
/// GPU has (thread and block ids, SFU math, atomics, warp-level selection).
struct Emitter : KernelBuilder {
  explicit Emitter(ImplicitLocOpBuilder &b) : KernelBuilder{b} {}
  Value exp(Value x) { return moegpu::buildExp(b, x); }
  /// IEEE square root (sqrt.rn.f32): math.sqrt would become a libdevice
  /// call, as math.exp would.
  Value sqrt(Value x) {
    return LLVM::CallIntrinsicOp::create(b, b.getF32Type(),
                                         b.getStringAttr("llvm.nvvm.sqrt.rn.f"),
                                         ValueRange{x})
        .getResult(0);
  }
  Value sigmoid(Value x) {
    return arith::DivFOp::create(
        b, f32(1.0),
        arith::AddFOp::create(b, f32(1.0), exp(arith::NegFOp::create(b, x))));
  }
  Value block() { return gpu::BlockIdOp::create(b, gpu::Dimension::x); }
  Value thread() { return gpu::ThreadIdOp::create(b, gpu::Dimension::x); }
  /// body(c) for the columns c < n this thread of a kRowThreads-wide CTA
  /// owns (c = thread, thread + kRowThreads, ...).
  void columns(int64_t n, function_ref<void(Value)> body) {
    loop(thread(), idx(n), idx(kRowThreads), {}, [&](Value c, ValueRange) {
      body(c);
      return SmallVector<Value>{};
    });
  }
  /// init + sum of term(i) for i from lb to ub by step, in f32, in order.
  Value sum(Value lb, Value ub, Value step, Value init,
            function_ref<Value(Value)> term) {
    return loop(lb, ub, step, {init}, [&](Value i, ValueRange it) {
      return SmallVector<Value>{add(it[0], term(i))};
    })[0];
  }
  /// The lane and the row of a kernel of one warp per row, `warps` warps
  /// to a CTA.
  std::pair<Value, Value> warpRow(int64_t warps) {
    Value lane = remi(thread(), idx(32));
    Value row = addi(muli(block(), idx(warps)), divi(thread(), idx(32)));
    return {lane, row};
  }
  /// The launch's thread index, `perBlock` threads to a CTA.
  Value globalThread(int64_t perBlock) {
    return addi(muli(block(), idx(perBlock)), thread());
  }
  void atomicAdd(Value v, Value memref, ValueRange indices) {
    memref::AtomicRMWOp::create(b, arith::AtomicRMWKind::addf, v, memref,
                                indices);
  }
  /// body(i, carried) for the elements i < n this thread owns in a
  /// grid-stride loop over a one-dimensional grid of kCountThreads-wide
  /// CTAs, carrying values from `init` -> their final values.
  ValueRange gridStride(int64_t n, ValueRange init,
                        function_ref<SmallVector<Value>(Value, ValueRange)> body) {
    Value stride =
        muli(gpu::GridDimOp::create(b, gpu::Dimension::x), idx(kCountThreads));
    return loop(globalThread(kCountThreads), idx(n), stride, init, body);
  }
  void gridStride(int64_t n, function_ref<void(Value)> body) {
    gridStride(n, {}, [&](Value i, ValueRange) {
      body(i);
      return SmallVector<Value>{};
    });
  }
  /// The sum of `v` over the warp, in every lane (butterfly shuffles).
  Value warpSum(Value v) {
    for (int32_t offset = 16; offset >= 1; offset /= 2)
      v = add(v, gpu::ShuffleOp::create(b, v, offset, 32,
                                        gpu::ShuffleMode::XOR)
                     .getShuffleResult());
    return v;
  }
  /// memref[indices] += the sum of `v` over the warp: one atomic per warp
  /// instead of one per thread (a CTA's 128 atomics on one address
  /// serialize in L2). Every lane of the warp must reach it.
  void warpAtomicAdd(Value v, Value memref, ValueRange indices) {
    Value sum = warpSum(v);
    Value lane = remi(thread(), idx(32));
    when(cmp(arith::CmpIPredicate::eq, lane, idx(0)),
         [&] { atomicAdd(sum, memref, indices); });
  }
  /// Index of the largest of `n` values from `get` (ties: the lower
  /// index), skipping NaN, which marks what is excluded (chosen or masked):
  /// with any value not NaN, never an excluded index.
  std::pair<Value, Value> argmax(int64_t n, function_ref<Value(Value)> get) {
    Value no = arith::ConstantIntOp::create(b, 0, 1);
    Value yes = arith::ConstantIntOp::create(b, 1, 1);
    ValueRange r = loop(
        idx(0), idx(n), idx(1), {idx(0), f32(-INFINITY), no},
        [&](Value i, ValueRange it) {
          Value v = get(i);
          Value ordered =
              arith::CmpFOp::create(b, arith::CmpFPredicate::ORD, v, v);
          Value gt =
              arith::CmpFOp::create(b, arith::CmpFPredicate::OGT, v, it[1]);
          Value first = arith::XOrIOp::create(b, it[2], yes);
          Value take = arith::AndIOp::create(
              b, ordered, arith::OrIOp::create(b, first, gt));
          return SmallVector<Value>{arith::SelectOp::create(b, take, i, it[0]),
                                    arith::SelectOp::create(b, take, v, it[1]),
                                    arith::OrIOp::create(b, it[2], take)};
        });
    return {r[0], r[1]};
  }
  /// `v`, or -inf where it is NaN: scores compare as ordered values.
  Value ordered(Value v) {
    Value nan = arith::CmpFOp::create(b, arith::CmpFPredicate::UNO, v, v);
    return arith::SelectOp::create(b, nan, f32(-INFINITY), v);
  }
};

} // namespace mlir::moe

#endif // MOE_CONVERSION_MOEGPUKERNELS_H
