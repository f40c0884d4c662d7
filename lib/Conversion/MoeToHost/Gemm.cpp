//===- Gemm.cpp - Register-blocked GEMMs on the host ----------------------===//
//
// Part of moe-compiler.
//
// Every GEMM of the host target (the router, the shared experts, the grouped
// expert GEMMs and all their gradients) is one of two register-blocked
// micro-kernels written in the vector dialect, tiled for the caches and
// spread over threads with scf.parallel:
//
// - dot: C(i, j) = sum_k A(i, k) B(j, k), both operands contiguous in k
//   (the forward GEMMs, whose weights are [out, in]). An MR x NR block of
//   C is held as vector accumulators along k and reduced once at the end.
// - outer: C(i, j) = sum_p A(i, p) B(p, j), B contiguous in j (dX and dW).
//   An MR x (NV vectors) block of C is held in registers; each p
//   broadcasts MR scalars of A against NV vectors of B.
//
// Each element of C is summed by one thread in an order fixed by the
// shapes alone, so results do not depend on the number of threads.
//
//===----------------------------------------------------------------------===//

#include "HostBuilders.h"

#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;
using namespace mlir::moe;
using namespace mlir::moe::host;

namespace {

using Builder = host::Builder;

VectorType f32Vector(Builder &b, int64_t width) {
  return VectorType::get({width}, b.getF32Type());
}

Value zeroVector(Builder &b, int64_t width) {
  return arith::ConstantOp::create(
      b, DenseElementsAttr::get(f32Vector(b, width), b.getF32FloatAttr(0.0f)));
}

/// `acc + a * b`, which LLVM may fuse into one FMA where the host has one
/// (an `llvm.fma` would be a libm call per lane on hosts without).
Value multiplyAdd(Builder &b, Value acc, Value x, Value y) {
  auto flags = reductionFlags(b);
  return arith::AddFOp::create(b, acc, arith::MulFOp::create(b, x, y, flags),
                               flags);
}

/// `for (iv = lb; iv < ub; iv += step)` carrying `init`.
SmallVector<Value> stepLoop(
    Builder &b, Value lb, Value ub, int64_t step, ValueRange init,
    function_ref<SmallVector<Value>(Builder &, Value, ValueRange)> body) {
  auto loop = scf::ForOp::create(
      b, lb, ub, indexConst(b, step), init,
      [&](OpBuilder &nested, Location loc, Value iv, ValueRange carried) {
        Builder nb(loc, nested);
        scf::YieldOp::create(nb, body(nb, iv, carried));
      });
  return SmallVector<Value>(loop.getResults());
}

/// Covers [lo, hi) with blocks of `step` (`fn(start, step)`), then the
/// rest one at a time (`fn(start, 1)`), unless `hi - lo` is a multiple of
/// `multiple` and that of `step`.
void blocked(Builder &b, Value lo, Value hi, int64_t step,
             function_ref<void(Builder &, Value, int64_t)> fn,
             int64_t multiple = 1) {
  Value mainEnd = hi;
  if (step > 1) {
    Value length = arith::SubIOp::create(b, hi, lo);
    Value blocks = arith::DivUIOp::create(b, length, indexConst(b, step));
    mainEnd = arith::AddIOp::create(
        b, lo, arith::MulIOp::create(b, blocks, indexConst(b, step)));
  }
  stepLoop(b, lo, mainEnd, step, {},
           [&](Builder &b, Value start, ValueRange) -> SmallVector<Value> {
             fn(b, start, step);
             return {};
           });
  if (step > 1 && multiple % step != 0)
    stepLoop(b, mainEnd, hi, 1, {},
             [&](Builder &b, Value start, ValueRange) -> SmallVector<Value> {
               fn(b, start, 1);
               return {};
             });
}

/// The MR x NR block of the dot kernel: accumulators MR x NR, plus MR
/// vectors of A live (B is read from memory by the multiply-add).
std::pair<int64_t, int64_t> dotBlock(const VectorTarget &target) {
  // Four columns either way: layer widths are multiples of four, so no
  // column is left to a narrower block. With 32 registers five rows (20
  // accumulators): their A vectors (5 x depth floats) still stay in L1 as
  // the B block streams past, where six rows measured 10% slower.
  return target.registers >= 32 ? std::pair<int64_t, int64_t>{5, 4}
                                : std::pair<int64_t, int64_t>{3, 4};
}

/// The MR x NV block of the outer kernel: accumulators MR x NV, NV vectors
/// of B and one broadcast of A.
std::pair<int64_t, int64_t> outerBlock(const VectorTarget &target) {
  return target.registers >= 32 ? std::pair<int64_t, int64_t>{8, 3}
                                : std::pair<int64_t, int64_t>{6, 2};
}

/// Sums of A(i0 + ii, k) B(j0 + jj, k) over k in [kBegin, kEnd), which is
/// a multiple of `width` long, as mr x nr vectors.
SmallVector<Value> dotPartials(Builder &b, const DotGemm &g, Value i0, Value j0,
                               int64_t mr, int64_t nr, Value kBegin, Value kEnd,
                               int64_t width) {
  SmallVector<Value> init(mr * nr, zeroVector(b, width));
  return stepLoop(
      b, kBegin, kEnd, width, init,
      [&](Builder &b, Value k, ValueRange acc) -> SmallVector<Value> {
        SmallVector<Value> a;
        for (int64_t ii = 0; ii < mr; ++ii)
          a.push_back(g.aRow(b, offset(b, i0, ii), k, width));
        SmallVector<Value> next(acc);
        for (int64_t jj = 0; jj < nr; ++jj) {
          Value row = g.bRow(b, offset(b, j0, jj), k, width);
          for (int64_t ii = 0; ii < mr; ++ii)
            next[ii * nr + jj] = multiplyAdd(b, acc[ii * nr + jj], a[ii], row);
        }
        return next;
      });
}

void dotMicroKernel(Builder &b, const DotGemm &g, const VectorTarget &target,
                    Value i0, Value j0, int64_t mr, int64_t nr) {
  int64_t width = target.width;
  // Vectors over [0, vectorEnd), one lane over the rest (none when depth
  // is known to be a multiple of the width).
  bool tail = g.depthMultiple % width != 0;
  Value vectorEnd = vectorPart(b, g.depth, g.depthMultiple, width);
  SmallVector<Value> sums(mr * nr, f32Const(b, 0.0));
  auto addReduced = [&](ArrayRef<Value> partials) {
    for (auto [sum, partial] : llvm::zip(sums, partials))
      sum = arith::AddFOp::create(
          b, sum,
          vector::ReductionOp::create(b, vector::CombiningKind::ADD, partial,
                                      Value(), reductionFlags(b).getValue()));
  };
  addReduced(
      dotPartials(b, g, i0, j0, mr, nr, indexConst(b, 0), vectorEnd, width));
  if (tail)
    addReduced(dotPartials(b, g, i0, j0, mr, nr, vectorEnd, g.depth, 1));
  for (int64_t ii = 0; ii < mr; ++ii)
    for (int64_t jj = 0; jj < nr; ++jj)
      g.store(b, offset(b, i0, ii), offset(b, j0, jj), sums[ii * nr + jj]);
}

void outerMicroKernel(Builder &b, const OuterGemm &g, Value i0, Value j0,
                      int64_t mr, int64_t nv, int64_t width) {
  SmallVector<Value> init(mr * nv, zeroVector(b, width));
  SmallVector<Value> acc = stepLoop(
      b, g.pBegin, g.pEnd, 1, init,
      [&](Builder &b, Value p, ValueRange acc) -> SmallVector<Value> {
        SmallVector<Value> rows;
        for (int64_t v = 0; v < nv; ++v)
          rows.push_back(g.bRow(b, p, offset(b, j0, v * width), width));
        SmallVector<Value> next(acc);
        for (int64_t ii = 0; ii < mr; ++ii) {
          Value a = vector::BroadcastOp::create(
              b, f32Vector(b, width), g.aAt(b, offset(b, i0, ii), p));
          for (int64_t v = 0; v < nv; ++v)
            next[ii * nv + v] = multiplyAdd(b, acc[ii * nv + v], a, rows[v]);
        }
        return next;
      });
  for (int64_t ii = 0; ii < mr; ++ii)
    for (int64_t v = 0; v < nv; ++v)
      g.store(b, offset(b, i0, ii), offset(b, j0, v * width), acc[ii * nv + v]);
}

} // namespace

Value mlir::moe::host::offset(Builder &b, Value base, int64_t delta) {
  return delta == 0 ? base
                    : Value(arith::AddIOp::create(b, base,
                                                  indexConst(b, delta)));
}

Value mlir::moe::host::loadVector(Builder &b, Value buffer, ValueRange indices,
                                  int64_t width) {
  Type elt = cast<MemRefType>(buffer.getType()).getElementType();
  Value v = vector::LoadOp::create(b, VectorType::get({width}, elt), buffer,
                                   indices);
  if (!elt.isF32())
    v = arith::ExtFOp::create(b, f32Vector(b, width), v);
  return v;
}

void mlir::moe::host::storeVector(Builder &b, Value value, Value buffer,
                                  ValueRange indices) {
  Type elt = cast<MemRefType>(buffer.getType()).getElementType();
  if (!elt.isF32())
    value = arith::TruncFOp::create(
        b,
        VectorType::get(cast<VectorType>(value.getType()).getShape(), elt),
        value);
  vector::StoreOp::create(b, value, buffer, indices);
}

void mlir::moe::host::withWeightPanel(
    Builder &b, Value weight, Value scales, ValueRange prefix, Value c0,
    Value c1, Value maxColumns, Value depth, int64_t depthMultiple,
    int64_t width, function_ref<void(Builder &, Value panel)> body) {
  // One iteration's panel (freed by the deallocation pipeline at the end
  // of the iteration; the allocator reuses the same block).
  Value panel =
      alloc(b,
            MemRefType::get({ShapedType::kDynamic, ShapedType::kDynamic},
                            b.getF32Type()),
            ValueRange{maxColumns, depth});
  forLoop(b, c0, c1, [&](Builder &b, Value c) {
    Value row = arith::SubIOp::create(b, c, c0);
    forLanes(b, depth, depthMultiple, width,
             [&](Builder &b, Value k, int64_t n) {
               SmallVector<Value> at(prefix);
               at.append({c, k});
               Value value = loadWeight(b, weight, scales, at, n);
               if (n == 1)
                 memref::StoreOp::create(b, value, panel, ValueRange{row, k});
               else
                 vector::StoreOp::create(b, value, panel, ValueRange{row, k});
             });
  });
  body(b, panel);
}

void mlir::moe::host::emitDotGemm(Builder &b, const DotGemm &g,
                                  const VectorTarget &target) {
  // (Plain variables: lambdas capture them, which C++17 does not allow
  // for structured bindings.)
  int64_t mr, nr;
  std::tie(mr, nr) = dotBlock(target);
  // Rows outer: the MR rows of A stay in L1 while the column block of B
  // (sized for L2 by the caller) streams past them.
  blocked(b, g.iBegin, g.iEnd, mr, [&](Builder &b, Value i0, int64_t m) {
    blocked(
        b, g.jBegin, g.jEnd, nr,
        [&](Builder &b, Value j0, int64_t n) {
          dotMicroKernel(b, g, target, i0, j0, m, n);
        },
        g.jMultiple);
  });
}

void mlir::moe::host::emitOuterGemm(Builder &b, const OuterGemm &blocks,
                                    const VectorTarget &target) {
  int64_t mr, nv;
  std::tie(mr, nv) = outerBlock(target);
  if (blocks.aColumn) {
    // Passes of 16 register blocks of rows, each first copying its rows of
    // A into a panel: panel[(i - i0) / mr][p - pBegin][(i - i0) % mr].
    int64_t rows = 16 * mr;
    OuterGemm g = blocks;
    g.aColumn = nullptr;
    Value panel = alloc(
        b, MemRefType::get({16, ShapedType::kDynamic, mr}, b.getF32Type()),
        ValueRange{arith::SubIOp::create(b, blocks.pEnd, blocks.pBegin)});
    stepLoop(
        b, blocks.iBegin, blocks.iEnd, rows, {},
        [&](Builder &b, Value i0, ValueRange) -> SmallVector<Value> {
          g.iBegin = i0;
          g.iEnd = arith::MinUIOp::create(b, offset(b, i0, rows), blocks.iEnd);
          Value count = arith::SubIOp::create(b, g.iEnd, i0);
          Value whole = arith::MulIOp::create(
              b, arith::DivUIOp::create(b, count, indexConst(b, mr)),
              indexConst(b, mr));
          forLoop(b, blocks.pBegin, blocks.pEnd, [&](Builder &b, Value p) {
            Value q = arith::SubIOp::create(b, p, blocks.pBegin);
            stepLoop(
                b, indexConst(b, 0), whole, mr, {},
                [&](Builder &b, Value ii, ValueRange) -> SmallVector<Value> {
                  Value group =
                      arith::DivUIOp::create(b, ii, indexConst(b, mr));
                  vector::StoreOp::create(
                      b,
                      blocks.aColumn(b, arith::AddIOp::create(b, i0, ii), p,
                                     mr),
                      panel, ValueRange{group, q, indexConst(b, 0)});
                  return {};
                });
            forLoop(b, whole, count, [&](Builder &b, Value ii) {
              Value group = arith::DivUIOp::create(b, ii, indexConst(b, mr));
              Value lane = arith::RemUIOp::create(b, ii, indexConst(b, mr));
              memref::StoreOp::create(
                  b, blocks.aAt(b, arith::AddIOp::create(b, i0, ii), p), panel,
                  ValueRange{group, q, lane});
            });
          });
          g.aAt = [&, i0](Builder &b, Value i, Value p) {
            Value rel = arith::SubIOp::create(b, i, i0);
            return memref::LoadOp::create(
                b, panel,
                ValueRange{arith::DivUIOp::create(b, rel, indexConst(b, mr)),
                           arith::SubIOp::create(b, p, blocks.pBegin),
                           arith::RemUIOp::create(b, rel, indexConst(b, mr))});
          };
          emitOuterGemm(b, g, target);
          return {};
        });
    return;
  }
  const OuterGemm &g = blocks;
  int64_t width = target.width;
  // Columns outer: the B panel of NV vectors by the p range stays in cache
  // while the row blocks of A pass. Column blocks of NV vectors, then of
  // one vector, then single columns.
  auto columns = [&](Value lo, Value hi, int64_t nvHere, int64_t w) -> Value {
    int64_t step = nvHere * w;
    Value length = arith::SubIOp::create(b, hi, lo);
    Value end = arith::AddIOp::create(
        b, lo,
        arith::MulIOp::create(
            b, arith::DivUIOp::create(b, length, indexConst(b, step)),
            indexConst(b, step)));
    stepLoop(b, lo, end, step, {},
             [&](Builder &b, Value j0, ValueRange) -> SmallVector<Value> {
               blocked(b, g.iBegin, g.iEnd, mr,
                       [&](Builder &b, Value i0, int64_t m) {
                         outerMicroKernel(b, g, i0, j0, m, nvHere, w);
                       });
               return {};
             });
    return end;
  };
  Value rest = columns(g.jBegin, g.jEnd, nv, width);
  if (g.jMultiple % (nv * width) == 0)
    return;
  if (nv > 1)
    rest = columns(rest, g.jEnd, 1, width);
  if (width > 1 && g.jMultiple % width != 0)
    columns(rest, g.jEnd, 1, 1);
}

int64_t mlir::moe::host::packedStripWidth(const VectorTarget &target) {
  return outerBlock(target).second * target.width;
}

void mlir::moe::host::emitPackedGemm(Builder &b, const PackedGemm &g,
                                     const VectorTarget &target) {
  int64_t strip = packedStripWidth(target);
  Value strips = ceilDiv(b, g.maxColumns, strip);
  // W's rows [c0, c1) as k-major strips: panel[s][k][jj] = W(c0 + s *
  // strip + jj, k). Within a strip k runs outer, so the strip's rows are
  // read a cache line at a time and the panel written in order.
  Value panel =
      alloc(b,
            MemRefType::get({ShapedType::kDynamic, ShapedType::kDynamic, strip},
                            b.getF32Type()),
            ValueRange{strips, g.depth});
  Value columns = arith::SubIOp::create(b, g.c1, g.c0);
  int64_t width = target.width;
  // k in [0, kVector) as width x width tiles, the rest (none when depth is
  // known to be a multiple of the width) one element at a time.
  bool kTail = width == 1 || g.depthMultiple % width != 0;
  Value kVector = width == 1 ? indexConst(b, 0)
                             : vectorPart(b, g.depth, g.depthMultiple, width);
  // Column j (relative to c0), element k: panel[j / strip][k][j % strip].
  auto packScalar = [&](Builder &b, Value j, Value k) {
    Value s = arith::DivUIOp::create(b, j, indexConst(b, strip));
    Value jj = arith::RemUIOp::create(b, j, indexConst(b, strip));
    memref::StoreOp::create(b,
                            g.wRow(b, arith::AddIOp::create(b, g.c0, j), k, 1),
                            panel, ValueRange{s, k, jj});
  };
  // Whole groups of `width` columns: width x width tiles read along k (as
  // vectors of W's rows), transposed in registers and written along the
  // strip's columns; k's tail one element at a time.
  Value groupsEnd = arith::MulIOp::create(
      b, arith::DivUIOp::create(b, columns, indexConst(b, width)),
      indexConst(b, width));
  auto tileType = VectorType::get({width, width}, b.getF32Type());
  stepLoop(
      b, indexConst(b, 0), groupsEnd, width, {},
      [&](Builder &b, Value j0, ValueRange) -> SmallVector<Value> {
        Value s = arith::DivUIOp::create(b, j0, indexConst(b, strip));
        Value jj = arith::RemUIOp::create(b, j0, indexConst(b, strip));
        Value first = arith::AddIOp::create(b, g.c0, j0);
        if (width > 1)
          stepLoop(
              b, indexConst(b, 0), kVector, width, {},
              [&](Builder &b, Value k0, ValueRange) -> SmallVector<Value> {
                Value tile = arith::ConstantOp::create(
                    b,
                    DenseElementsAttr::get(tileType, b.getF32FloatAttr(0.0f)));
                for (int64_t t = 0; t < width; ++t)
                  tile = vector::InsertOp::create(
                      b, g.wRow(b, offset(b, first, t), k0, width), tile, t);
                Value transposed = vector::TransposeOp::create(b, tile, {1, 0});
                for (int64_t t = 0; t < width; ++t)
                  vector::StoreOp::create(
                      b, vector::ExtractOp::create(b, transposed, t), panel,
                      ValueRange{s, offset(b, k0, t), jj});
                return {};
              });
        if (kTail)
          forLoop(b, kVector, g.depth, [&](Builder &b, Value k) {
            for (int64_t t = 0; t < width; ++t)
              packScalar(b, offset(b, j0, t), k);
          });
        return {};
      });
  // The last columns, fewer than `width`.
  forLoop(b, groupsEnd, columns, [&](Builder &b, Value j) {
    forLoop(b, indexConst(b, 0), g.depth,
            [&](Builder &b, Value k) { packScalar(b, j, k); });
  });
  // The outer kernel over the panel: its column blocks start at strip
  // boundaries, so column j is element (j - c0) % strip of strip (j - c0)
  // / strip.
  OuterGemm outer{g.iBegin,
                  g.iEnd,
                  indexConst(b, 0),
                  g.depth,
                  g.c0,
                  g.c1,
                  g.aAt,
                  [&](Builder &b, Value p, Value j, int64_t width) {
                    Value rel = arith::SubIOp::create(b, j, g.c0);
                    Value s =
                        arith::DivUIOp::create(b, rel, indexConst(b, strip));
                    Value jj =
                        arith::RemUIOp::create(b, rel, indexConst(b, strip));
                    return loadVector(b, panel, {s, p, jj}, width);
                  },
                  g.store,
                  g.jMultiple,
                  /*aColumn=*/nullptr};
  emitOuterGemm(b, outer, target);
}

void mlir::moe::host::emitPackedOuterGemm(Builder &b, const OuterGemm &g,
                                          int64_t maxColumns,
                                          const VectorTarget &target) {
  int64_t strip = packedStripWidth(target);
  int64_t strips = (maxColumns + strip - 1) / strip;
  int64_t width = target.width;
  // B's rows [pBegin, pEnd), columns [jBegin, jEnd), copied into strips:
  // panel[s][p - pBegin][jj] = B(p, jBegin + s * strip + jj). The outer
  // kernel then streams one contiguous strip instead of rows a leading
  // dimension apart (a page or more each, for the layers' sizes).
  Value depth = arith::SubIOp::create(b, g.pEnd, g.pBegin);
  Value panel = alloc(
      b, MemRefType::get({strips, ShapedType::kDynamic, strip}, b.getF32Type()),
      ValueRange{depth});
  Value columns = arith::SubIOp::create(b, g.jEnd, g.jBegin);
  Value vectorEnd = arith::MulIOp::create(
      b, arith::DivUIOp::create(b, columns, indexConst(b, width)),
      indexConst(b, width));
  auto place = [&](Builder &b, Value p, Value j) -> std::pair<Value, Value> {
    Value s = arith::DivUIOp::create(b, j, indexConst(b, strip));
    return {s, arith::RemUIOp::create(b, j, indexConst(b, strip))};
  };
  forLoop(b, g.pBegin, g.pEnd, [&](Builder &b, Value p) {
    Value row = arith::SubIOp::create(b, p, g.pBegin);
    stepLoop(b, indexConst(b, 0), vectorEnd, width, {},
             [&](Builder &b, Value j, ValueRange) -> SmallVector<Value> {
               auto [s, jj] = place(b, p, j);
               vector::StoreOp::create(
                   b,
                   g.bRow(b, p, arith::AddIOp::create(b, g.jBegin, j), width),
                   panel, ValueRange{s, row, jj});
               return {};
             });
    forLoop(b, vectorEnd, columns, [&](Builder &b, Value j) {
      auto [s, jj] = place(b, p, j);
      vector::StoreOp::create(
          b, g.bRow(b, p, arith::AddIOp::create(b, g.jBegin, j), 1), panel,
          ValueRange{s, row, jj});
    });
  });
  OuterGemm packed = g;
  packed.bRow = [&](Builder &b, Value p, Value j, int64_t w) {
    Value rel = arith::SubIOp::create(b, j, g.jBegin);
    auto [s, jj] = place(b, p, rel);
    return loadVector(b, panel, {s, arith::SubIOp::create(b, p, g.pBegin), jj},
                      w);
  };
  emitOuterGemm(b, packed, target);
}

void mlir::moe::host::parallelBlocks(
    Builder &b, ArrayRef<Value> counts,
    function_ref<void(Builder &, ValueRange)> body, Schedule schedule) {
  // Dimensions of one iteration are left out of the loop (index 0): the
  // canonicalizer would drop them, rebuilding the loop without its
  // schedule.
  SmallVector<bool> unit;
  SmallVector<Value> loopCounts;
  for (Value count : counts) {
    unit.push_back(isConstantIntValue(count, 1));
    if (!unit.back())
      loopCounts.push_back(count);
  }
  if (loopCounts.empty()) {
    body(b, SmallVector<Value>(counts.size(), indexConst(b, 0)));
    return;
  }
  SmallVector<Value> lower(loopCounts.size(), indexConst(b, 0));
  SmallVector<Value> steps(loopCounts.size(), indexConst(b, 1));
  auto loop = scf::ParallelOp::create(
      b, lower, loopCounts, steps,
      [&](OpBuilder &nested, Location loc, ValueRange ivs) {
        Builder nb(loc, nested);
        SmallVector<Value> all;
        auto iv = ivs.begin();
        for (bool isUnit : unit)
          all.push_back(isUnit ? indexConst(nb, 0) : *iv++);
        body(nb, all);
      });
  if (schedule == Schedule::Dynamic)
    loop->setAttr(MoeDialect::getScheduleAttrName(),
                  b.getStringAttr(MoeDialect::getDynamicScheduleName()));
}

std::pair<Value, Value> mlir::moe::host::blockRange(Builder &b, Value index,
                                                    int64_t size, Value limit) {
  return blockRange(b, index, indexConst(b, size), limit);
}

std::pair<Value, Value> mlir::moe::host::blockRange(Builder &b, Value index,
                                                    Value size, Value limit) {
  Value lo = arith::MulIOp::create(b, index, size);
  Value hi =
      arith::MinUIOp::create(b, arith::AddIOp::create(b, lo, size), limit);
  return {lo, hi};
}

void mlir::moe::host::forTokenBlocks(Builder &b, Value tokens, BodyFn body) {
  parallelBlocks(b, {ceilDiv(b, tokens, kTokenBlock)},
                 [&](Builder &b, ValueRange block) {
                   auto [t0, t1] = blockRange(b, block[0], kTokenBlock, tokens);
                   forLoop(b, t0, t1, body);
                 });
}

Value mlir::moe::host::ceilDiv(Builder &b, Value value, int64_t divisor) {
  return arith::DivUIOp::create(
      b, arith::AddIOp::create(b, value, indexConst(b, divisor - 1)),
      indexConst(b, divisor));
}

Value mlir::moe::host::ceilDiv(Builder &b, Value value, Value divisor) {
  Value last = arith::SubIOp::create(b, divisor, indexConst(b, 1));
  return arith::DivUIOp::create(b, arith::AddIOp::create(b, value, last),
                                divisor);
}

/// About 256 KiB of f32 of B per block of columns (half of a small L2) at
/// this depth, whole multiples of `step` columns, at most the columns there
/// are.
static Value cacheColumnBlock(host::Builder &b, int64_t step, Value depth,
                              Value columns) {
  Value one = indexConst(b, 1), stepSize = indexConst(b, step);
  Value perDepth = arith::DivUIOp::create(
      b, indexConst(b, 64 * 1024), arith::MaxUIOp::create(b, depth, one));
  Value block = arith::MaxUIOp::create(
      b, stepSize,
      arith::MulIOp::create(b, arith::DivUIOp::create(b, perDepth, stepSize),
                            stepSize));
  return arith::MinUIOp::create(b, block,
                                arith::MaxUIOp::create(b, columns, one));
}

Value mlir::moe::host::packedColumnBlock(Builder &b, const VectorTarget &target,
                                         Value depth, Value columns) {
  return cacheColumnBlock(b, packedStripWidth(target), depth, columns);
}

int64_t mlir::moe::host::dotRegisterColumns(const VectorTarget &target) {
  return dotBlock(target).second;
}

Value mlir::moe::host::dotColumnBlock(Builder &b, const VectorTarget &target,
                                      Value depth, Value columns) {
  return cacheColumnBlock(b, dotRegisterColumns(target), depth, columns);
}

int64_t mlir::moe::host::outerColumnBlock(const VectorTarget &target) {
  return 2 * outerBlock(target).second * target.width;
}
