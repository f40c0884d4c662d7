//===- Exchange.cpp - Device-initiated exchanges over symmetric memory ----===//
//
// Part of moe-compiler.
//
// The kernels of an expert-parallel exchange that the GPU runs without the
// host: ep_counts, ep_send and ep_wait. Every rank's buffers of the
// exchange lie at one offset of its symmetric window, so a peer's copy of
// a local buffer is its address plus the distance in `peers`. Data moves
// by plain stores into the peer's copy; a release (fence.acq_rel.sys, then
// st.release or red.release at system scope) publishes it, and the reader
// acquires (ld.acquire.sys) the flag before it reads. The memory-model
// instructions are inline PTX: their scope and order are the point.
//
//===----------------------------------------------------------------------===//

#include "Lowering.h"

using namespace mlir;
using namespace mlir::moe;
using namespace mlir::moe::kernels;
using ::moe::abi::ExchangeStatus;

namespace {

/// What every exchange kernel shares: the PTX of the memory model, byte
/// addresses of buffers, and the wait for a flag.
struct Exchange {
  Emitter &e;
  ImplicitLocOpBuilder &b;
  int64_t ranks;
  Value peers;

  Exchange(Emitter &e, int64_t ranks, Value peers)
      : e(e), b(e.b), ranks(ranks), peers(peers) {}

  Type i64() { return b.getI64Type(); }
  Type i32() { return b.getI32Type(); }
  Value c64(int64_t v) { return arith::ConstantIntOp::create(b, v, 64); }
  Value toI64(Value index) {
    return arith::IndexCastOp::create(b, i64(), index);
  }

  /// Inline PTX with side effects (never moved or merged).
  Value ptx(Type result, ValueRange operands, StringRef text,
            StringRef constraints) {
    auto op = LLVM::InlineAsmOp::create(
        b, result ? TypeRange{result} : TypeRange{}, operands, text,
        constraints, /*has_side_effects=*/true, /*is_align_stack=*/false,
        LLVM::tailcallkind::TailCallKind::None, LLVM::AsmDialectAttr(),
        ArrayAttr());
    return result ? op.getResult(0) : Value();
  }
  void fence() { ptx(Type(), {}, "fence.acq_rel.sys;", ""); }
  void storeRelease(Value address, Value v) {
    ptx(Type(), {address, v}, "st.release.sys.global.u32 [$0], $1;", "l,r");
  }
  void addRelease(Value address, Value v) {
    ptx(Type(), {address, v}, "red.release.sys.global.add.u32 [$0], $1;",
        "l,r");
  }
  Value loadAcquire(Value address) {
    return ptx(i32(), {address}, "ld.acquire.sys.global.u32 $0, [$1];",
               "=r,l");
  }
  Value globalTimer() {
    return ptx(i64(), {}, "mov.u64 $0, %globaltimer;", "=l");
  }
  void sleep() { ptx(Type(), {}, "nanosleep.u32 256;", ""); }

  /// The address (i64) of `memref`'s first byte.
  Value address(Value memref) {
    return toI64(memref::ExtractAlignedPointerAsIndexOp::create(b, memref));
  }
  /// Byte `offset` (i64) of `base` (i64) as a pointer.
  Value pointer(Value base, Value offset) {
    Value at = arith::AddIOp::create(b, base, offset);
    return LLVM::IntToPtrOp::create(
        b, LLVM::LLVMPointerType::get(b.getContext()), ValueRange{at});
  }
  /// Rank p's distance from this rank's window (i64), this rank (index)
  /// and the waits' limit in nanoseconds (i64).
  Value distance(Value p) { return e.load(peers, {p}); }
  Value rank() {
    return arith::IndexCastOp::create(b, b.getIndexType(),
                                      e.load(peers, {e.idx(ranks)}));
  }
  Value limit() { return e.load(peers, {e.idx(ranks + 1)}); }
  /// The rows a rank can receive (its received rows' capacity), i64.
  Value capacity() { return e.load(peers, {e.idx(ranks + 2)}); }

  /// Whether an earlier wait of this pass failed (uniform over the CTA).
  Value failedBefore(Value status) {
    return e.cmp(arith::CmpIPredicate::ne, e.load(status, {e.idx(0)}),
                 e.i32(0));
  }

  /// Spins until the i32 at `address` reaches `target` (acquire), up to
  /// the limit; true when the limit passed first. The counters wrap (a
  /// send adds a signal a CTA every pass): they are compared as serial
  /// numbers, `seen - target >= 0` modulo 2^32, right while the two are
  /// less than 2^31 signals apart.
  Value waitFor(Value address, Value target, Value limit) {
    Value start = globalTimer();
    Type i1 = b.getI1Type();
    Value no = arith::ConstantIntOp::create(b, 0, 1);
    auto loop = scf::WhileOp::create(
        b, TypeRange{i1}, ValueRange{no},
        [&](OpBuilder &, Location, ValueRange) {
          ImplicitLocOpBuilder::InsertionGuard guard(b);
          b.setInsertionPointToEnd(b.getBlock());
          Value seen = loadAcquire(address);
          Value arrived =
              e.cmp(arith::CmpIPredicate::sge,
                    arith::SubIOp::create(b, seen, target), e.i32(0));
          Value waited = arith::SubIOp::create(b, globalTimer(), start);
          Value late = e.cmp(arith::CmpIPredicate::sgt, waited, limit);
          Value yes = arith::ConstantIntOp::create(b, 1, 1);
          Value again = arith::AndIOp::create(
              b, arith::XOrIOp::create(b, arrived, yes),
              arith::XOrIOp::create(b, late, yes));
          Value timedOut = arith::AndIOp::create(
              b, late, arith::XOrIOp::create(b, arrived, yes));
          scf::ConditionOp::create(b, again, ValueRange{timedOut});
        },
        [&](OpBuilder &, Location, ValueRange carried) {
          ImplicitLocOpBuilder::InsertionGuard guard(b);
          b.setInsertionPointToEnd(b.getBlock());
          sleep();
          scf::YieldOp::create(b, carried);
        });
    return loop.getResult(0);
  }

  /// The largest i < segments with bounds[base + i] <= r: the segment of
  /// row r, by bisection over bounds (segments + 1 ascending offsets from
  /// `base`, bounds[base] <= r < bounds[base + segments]).
  Value segmentOf(Value bounds, int64_t base, int64_t segments, Value r) {
    int64_t steps = 1;
    while ((int64_t(1) << steps) < segments)
      ++steps;
    ValueRange found = e.loop(
        e.idx(0), e.idx(steps + 1), e.idx(1), {e.idx(0), e.idx(segments)},
        [&](Value, ValueRange it) {
          Value lo = it[0], hi = it[1];
          Value mid = e.divi(e.addi(lo, hi), e.idx(2));
          Value open = e.cmp(arith::CmpIPredicate::ugt, e.subi(hi, lo),
                             e.idx(1));
          Value below =
              e.cmp(arith::CmpIPredicate::sle,
                    e.index(e.load(bounds, {e.addi(mid, e.idx(base))})), r);
          Value up = arith::AndIOp::create(b, open, below);
          Value down = arith::AndIOp::create(
              b, open,
              arith::XOrIOp::create(b, below,
                                    arith::ConstantIntOp::create(b, 1, 1)));
          return SmallVector<Value>{arith::SelectOp::create(b, up, mid, lo),
                                    arith::SelectOp::create(b, down, mid, hi)};
        });
    return found[0];
  }
};

int64_t sizeOf(Value memref) {
  return cast<MemRefType>(memref.getType()).getDimSize(0);
}

} // namespace

/// One CTA: the epoch, this rank's sizes into every rank's table, the
/// flags, the wait for every rank's, then the layouts from the table.
static void lowerEpCounts(moegpu::EpCountsOp op, Emitter &e) {
  ImplicitLocOpBuilder &b = e.b;
  int64_t n = op.getRanks(), chunks = op.getChunks();
  int64_t segments = sizeOf(op.getOffsets()) - 1;
  int64_t experts = segments / chunks, local = experts / n;
  Exchange x(e, n, op.getPeers());
  Value tid = e.thread();
  Value threads = gpu::BlockDimOp::create(b, gpu::Dimension::x);
  Value status = op.getStatus(), table = op.getTable();
  Value me = x.rank();
  Value zero = e.idx(0), one = e.idx(1);
  auto isThread0 = [&] { return e.cmp(arith::CmpIPredicate::eq, tid, zero); };
  auto notFailed = [&] {
    return arith::XOrIOp::create(b, x.failedBefore(status),
                                 arith::ConstantIntOp::create(b, 1, 1));
  };
  // Every thread reads the epoch before thread 0 advances it.
  Value epoch = arith::AddIOp::create(b, e.load(op.getEpoch(), {zero}),
                                      e.i32(1));
  Value failed = x.failedBefore(status);
  gpu::BarrierOp::create(b);
  auto go = scf::IfOp::create(b, failed, /*withElseRegion=*/true);
  ImplicitLocOpBuilder::InsertionGuard guard(b);
  b.setInsertionPoint(go.elseBlock()->getTerminator());
  e.when(isThread0(), [&] { e.store(epoch, op.getEpoch(), {zero}); });
  // This rank's sizes into row `me` of every rank's table.
  Value tableAt = x.address(table);
  e.loop(zero, e.idx(n), one, {}, [&](Value p, ValueRange) {
    Value there = arith::AddIOp::create(b, tableAt, x.distance(p));
    e.loop(tid, e.idx(segments), threads, {}, [&](Value i, ValueRange) {
      Value size =
          arith::SubIOp::create(b, e.load(op.getOffsets(), {e.addi(i, one)}),
                                e.load(op.getOffsets(), {i}));
      Value slot = e.addi(e.muli(me, e.idx(segments)), i);
      Value offset = arith::MulIOp::create(b, x.toI64(slot), x.c64(4));
      LLVM::StoreOp::create(b, size, x.pointer(there, offset));
      return SmallVector<Value>{};
    });
    return SmallVector<Value>{};
  });
  gpu::BarrierOp::create(b);
  // Published: flags[me] = epoch on every rank, after a fence that orders
  // every thread's stores of the CTA (the barrier) before it.
  Value flagsAt = x.address(op.getFlags());
  Value mine = arith::MulIOp::create(b, x.toI64(me), x.c64(4));
  e.when(isThread0(), [&] {
    x.fence();
    e.loop(zero, e.idx(n), one, {}, [&](Value p, ValueRange) {
      Value there = arith::AddIOp::create(b, flagsAt, x.distance(p));
      x.storeRelease(arith::AddIOp::create(b, there, mine), epoch);
      return SmallVector<Value>{};
    });
  });
  // Thread t waits for rank t's sizes.
  e.when(e.cmp(arith::CmpIPredicate::ult, tid, e.idx(n)), [&] {
    Value flag = arith::AddIOp::create(
        b, flagsAt, arith::MulIOp::create(b, x.toI64(tid), x.c64(4)));
    Value late = x.waitFor(flag, epoch, x.limit());
    e.when(late, [&] {
      e.store(e.i32(static_cast<int64_t>(ExchangeStatus::SizesTimeout)), status,
              {zero});
      e.store(arith::IndexCastOp::create(b, b.getI32Type(), tid), status,
              {e.idx(1)});
    });
  });
  gpu::BarrierOp::create(b);
  // Rank s's size of expert ex in chunk c: table[s C E + c E + ex].
  auto size = [&](Value s, Value c, Value ex) {
    return e.load(table, {e.addi(e.muli(s, e.idx(segments)),
                                 e.addi(e.muli(c, e.idx(experts)), ex))});
  };
  // Every rank's rows of experts [f0, f1) in chunk c, added to `init`.
  auto rowsOf = [&](Value c, Value f0, Value f1, Value init) {
    return e.loop(f0, f1, one, {init}, [&](Value f, ValueRange it) {
      return SmallVector<Value>{
          e.loop(zero, e.idx(n), one, {it[0]}, [&](Value s, ValueRange jt) {
            return SmallVector<Value>{
                arith::AddIOp::create(b, jt[0], size(s, c, f))};
          })[0]};
    })[0];
  };
  // What rank d receives in chunks [0, c): its experts' rows from every
  // rank (chunk c's rows start there).
  auto receivedBefore = [&](Value d, Value c) {
    Value first = e.muli(d, e.idx(local));
    return e.loop(zero, c, one, {e.i32(0)}, [&](Value cc, ValueRange it) {
      return SmallVector<Value>{
          rowsOf(cc, first, e.addi(first, e.idx(local)), it[0])};
    })[0];
  };
  // Every rank checks every rank's total against the capacity, from the
  // same table, so all stop alike: status [4, the rank] (the host path
  // fails the pass with the same check). The first rank over it is the
  // one reported.
  e.when(arith::AndIOp::create(b, isThread0(), notFailed()), [&] {
    e.loop(zero, e.idx(n), one, {}, [&](Value d, ValueRange) {
      Value total =
          arith::ExtSIOp::create(b, x.i64(), receivedBefore(d, e.idx(chunks)));
      Value over = arith::AndIOp::create(
          b, e.cmp(arith::CmpIPredicate::sgt, total, x.capacity()),
          notFailed());
      e.when(over, [&] {
        e.store(e.i32(static_cast<int64_t>(ExchangeStatus::Capacity)), status,
                {zero});
        e.store(arith::IndexCastOp::create(b, b.getI32Type(), d), status,
                {e.idx(1)});
      });
      return SmallVector<Value>{};
    });
  });
  gpu::BarrierOp::create(b);
  // The layouts, unless a wait or the check failed.
  e.when(notFailed(), [&] {
    e.loop(tid, e.idx(segments), threads, {}, [&](Value i, ValueRange) {
      Value c = e.divi(i, e.idx(experts)), ex = e.remi(i, e.idx(experts));
      // Where this rank's rows of (c, ex) start at ex's owner d: what d
      // received in the chunks before, every rank's rows of d's earlier
      // experts in chunk c, then the lower ranks' of ex.
      Value d = e.divi(ex, e.idx(local));
      Value before =
          rowsOf(c, e.muli(d, e.idx(local)), ex, receivedBefore(d, c));
      Value send = e.loop(zero, me, one, {before}, [&](Value s, ValueRange it) {
        return SmallVector<Value>{
            arith::AddIOp::create(b, it[0], size(s, c, ex))};
      })[0];
      e.store(send, op.getSendPos(), {i});
      // Where received segment ex of chunk c (local expert l, source s)
      // started in s's dispatched rows: s's rows of the chunks before,
      // then of chunk c's experts before mine * local + l.
      Value l = e.divi(ex, e.idx(n)), s = e.remi(ex, e.idx(n));
      Value expert = e.addi(e.muli(me, e.idx(local)), l);
      auto sourceRows = [&](Value cc, Value f1, Value init) {
        return e.loop(zero, f1, one, {init}, [&](Value f, ValueRange it) {
          return SmallVector<Value>{
              arith::AddIOp::create(b, it[0], size(s, cc, f))};
        })[0];
      };
      Value earlier =
          e.loop(zero, c, one, {e.i32(0)}, [&](Value cc, ValueRange it) {
            return SmallVector<Value>{sourceRows(cc, e.idx(experts), it[0])};
          })[0];
      e.store(sourceRows(c, expert, earlier), op.getBackPos(), {i});
      return SmallVector<Value>{};
    });
    // Chunk by chunk after the one before: the received segments by
    // (local expert, source), and each local expert's rows.
    e.when(isThread0(), [&] {
      Value acc = e.i32(0);
      for (auto [chunk, groups] : llvm::enumerate(op.getEpGroupOffsets())) {
        Value c = e.idx(static_cast<int64_t>(chunk));
        Value first = e.muli(c, e.idx(experts + 1));
        acc =
            e.loop(zero, e.idx(local), one, {acc}, [&](Value l, ValueRange it) {
              e.store(it[0], groups, {l});
              Value expert = e.addi(e.muli(me, e.idx(local)), l);
              return SmallVector<Value>{e.loop(
                  zero, e.idx(n), one, {it[0]}, [&](Value s, ValueRange jt) {
                    e.store(jt[0], op.getEpOffsets(),
                            {e.addi(first, e.addi(e.muli(l, e.idx(n)), s))});
                    return SmallVector<Value>{
                        arith::AddIOp::create(b, jt[0], size(s, c, expert))};
                  })[0]};
            })[0];
        e.store(acc, op.getEpOffsets(), {e.addi(first, e.idx(experts))});
        e.store(acc, groups, {e.idx(local)});
      }
    });
  });
}

/// A warp a row, the grid's warps striding over the rows; then each CTA
/// signals every rank.
static void lowerEpSend(moegpu::EpSendOp op, Emitter &e) {
  ImplicitLocOpBuilder &b = e.b;
  int64_t n = op.getRanks(), chunk = op.getChunk();
  int64_t experts = sizeOf(op.getPositions()) / op.getChunks();
  int64_t local = experts / n;
  bool dispatch = op.getDirection() == moegpu::EpDirection::Dispatch;
  // The chunk's E segments: dispatch, from bound chunk E of the chunks'
  // C E + 1; combine, from chunk (E + 1) of the chunks' C (E + 1).
  int64_t base = chunk * (dispatch ? experts : experts + 1);
  int64_t positionBase = chunk * experts;
  Exchange x(e, n, op.getPeers());
  Value zero = e.idx(0);
  auto rowsType = cast<MemRefType>(op.getRows().getType());
  int64_t rowBytes =
      rowsType.getDimSize(1) * rowsType.getElementTypeBitWidth() / 8;
  // The widest access that divides a row: 16 bytes where it can.
  int64_t access = 16;
  while (rowBytes % access)
    access /= 2;
  Type accessType =
      access == 16 ? Type(VectorType::get({4}, b.getI32Type()))
                   : Type(b.getIntegerType(static_cast<unsigned>(access * 8)));
  int64_t accesses = rowBytes / access;
  Value tid = e.thread();
  int64_t warps = kRowThreads / 32;
  auto go = scf::IfOp::create(b, x.failedBefore(op.getStatus()),
                              /*withElseRegion=*/true);
  ImplicitLocOpBuilder::InsertionGuard guard(b);
  b.setInsertionPoint(go.elseBlock()->getTerminator());
  auto [lane, firstRow] = e.warpRow(warps);
  Value stride = e.muli(gpu::GridDimOp::create(b, gpu::Dimension::x),
                        e.idx(warps));
  Value begin = e.index(e.load(op.getSegments(), {e.idx(base)}));
  Value end = e.index(e.load(op.getSegments(), {e.idx(base + experts)}));
  Value from = x.address(op.getRows()), to = x.address(op.getTo());
  Value fromWeights = op.getWeights() ? x.address(op.getWeights()) : Value();
  Value toWeights = op.getToWeights() ? x.address(op.getToWeights()) : Value();
  e.loop(e.addi(begin, firstRow), end, stride, {}, [&](Value r, ValueRange) {
    Value seg = x.segmentOf(op.getSegments(), base, experts, r);
    Value dest = dispatch ? e.divi(seg, e.idx(local)) : e.remi(seg, e.idx(n));
    Value segStart =
        e.index(e.load(op.getSegments(), {e.addi(seg, e.idx(base))}));
    Value pos = e.addi(
        e.index(e.load(op.getPositions(), {e.addi(seg, e.idx(positionBase))})),
        e.subi(r, segStart));
    Value there = x.distance(dest);
    Value src = arith::MulIOp::create(b, x.toI64(r), x.c64(rowBytes));
    Value dst = arith::AddIOp::create(
        b, there, arith::MulIOp::create(b, x.toI64(pos), x.c64(rowBytes)));
    e.loop(lane, e.idx(accesses), e.idx(32), {}, [&](Value c, ValueRange) {
      Value at = arith::MulIOp::create(b, x.toI64(c), x.c64(access));
      Value v = LLVM::LoadOp::create(
          b, accessType, x.pointer(from, arith::AddIOp::create(b, src, at)),
          access);
      LLVM::StoreOp::create(
          b, v, x.pointer(to, arith::AddIOp::create(b, dst, at)), access);
      return SmallVector<Value>{};
    });
    if (fromWeights)
      e.when(e.cmp(arith::CmpIPredicate::eq, lane, zero), [&] {
        Value w = e.load(op.getWeights(), {r});
        Value at = arith::AddIOp::create(
            b, there, arith::MulIOp::create(b, x.toI64(pos), x.c64(4)));
        LLVM::StoreOp::create(b, w, x.pointer(toWeights, at), 4);
      });
    return SmallVector<Value>{};
  });
  gpu::BarrierOp::create(b);
  // Every row of this CTA is stored (the barrier), then published.
  Value flagAt = arith::AddIOp::create(b, x.address(op.getFlags()),
                                       x.c64(4 * op.getSlot()));
  e.when(e.cmp(arith::CmpIPredicate::eq, tid, zero), [&] {
    x.fence();
    e.loop(zero, e.idx(n), e.idx(1), {}, [&](Value p, ValueRange) {
      x.addRelease(arith::AddIOp::create(b, flagAt, x.distance(p)), e.i32(1));
      return SmallVector<Value>{};
    });
  });
}

/// One thread waits for every CTA of every rank's ep_send of this pass.
static void lowerEpWait(moegpu::EpWaitOp op, Emitter &e) {
  ImplicitLocOpBuilder &b = e.b;
  Exchange x(e, op.getRanks(), op.getPeers());
  Value zero = e.idx(0);
  Value status = op.getStatus();
  e.when(e.cmp(arith::CmpIPredicate::eq, e.thread(), zero), [&] {
    e.when(arith::XOrIOp::create(b, x.failedBefore(status),
                                 arith::ConstantIntOp::create(b, 1, 1)),
           [&] {
             Value slot = e.idx(op.getSlot());
             Value target =
                 arith::AddIOp::create(b, e.load(op.getWaited(), {slot}),
                                       e.i32(op.getRanks() * op.getSenders()));
             e.store(target, op.getWaited(), {slot});
             Value flag = arith::AddIOp::create(b, x.address(op.getFlags()),
                                                x.c64(4 * op.getSlot()));
             Value late = x.waitFor(flag, target, x.limit());
             e.when(late, [&] {
               e.store(e.i32(op.getCode()), status, {zero});
               e.store(e.i32(op.getSlot()), status, {e.idx(1)});
             });
           });
  });
}

void kernels::populateExchangePatterns(RewritePatternSet &patterns) {
  patterns.add<LowerKernel<moegpu::EpCountsOp, lowerEpCounts>,
               LowerKernel<moegpu::EpSendOp, lowerEpSend>,
               LowerKernel<moegpu::EpWaitOp, lowerEpWait>>(
      patterns.getContext());
}
