//===- CommTest.cpp - The collectives compiled code calls -----------------===//
//
// Part of moe-compiler. Ranks are threads of this process with a
// communicator of shared memory; each rank calls the functions of its
// CommContext's table as compiled code would, and the rows must land where
// moe.all_to_all says: by (local expert, source rank) after a dispatch, and
// back in place after a combine. The expected layouts are built here from
// the definition, not from the runtime's code.
//
//===----------------------------------------------------------------------===//

#include "moe/runtime/Comm.h"
#include "moe/runtime/CommAbi.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>
#include <random>
#include <thread>

using namespace moe::rt;

namespace {

/// What the ranks of one job share.
struct Shared {
  explicit Shared(int n) : n(n), posted(n) {}
  /// Waits for every rank.
  void barrier() {
    std::unique_lock<std::mutex> lock(mutex);
    uint64_t generation = this->generation;
    if (++arrived == n) {
      arrived = 0;
      ++this->generation;
      cv.notify_all();
      return;
    }
    cv.wait(lock, [&] { return this->generation != generation; });
  }
  struct Post {
    const char *send = nullptr;
    std::vector<size_t> bytes, offsets;
    float *data = nullptr;
  };
  int n;
  std::vector<Post> posted;
  std::mutex mutex;
  std::condition_variable cv;
  int arrived = 0;
  uint64_t generation = 0;
};

class ThreadCommunicator : public Communicator {
public:
  ThreadCommunicator(Shared &shared, int rank) : shared(shared), me(rank) {}
  int rank() const override { return me; }
  int size() const override { return shared.n; }
  std::string name() const override { return "threads"; }
  void allToAllV(const void *send, const std::vector<size_t> &bytes,
                 const std::vector<size_t> &sendOffsets, void *recv,
                 const std::vector<size_t> &recvBytes,
                 const std::vector<size_t> &recvOffsets) override {
    shared.posted[me] = {static_cast<const char *>(send), bytes, sendOffsets,
                         nullptr};
    shared.barrier();
    for (int s = 0; s < shared.n; ++s) {
      const Shared::Post &p = shared.posted[s];
      EXPECT_EQ(p.bytes[me], recvBytes[s]) << "rank " << me << " from " << s;
      if (p.bytes[me])
        std::memcpy(static_cast<char *>(recv) + recvOffsets[s],
                    p.send + p.offsets[me], p.bytes[me]);
    }
    shared.barrier();
  }
  void allToAll(const void *send, void *recv, size_t bytesPerRank) override {
    std::vector<size_t> bytes(shared.n, bytesPerRank), offsets(shared.n);
    for (int r = 0; r < shared.n; ++r)
      offsets[r] = r * bytesPerRank;
    allToAllV(send, bytes, offsets, recv, bytes, offsets);
  }
  void allReduceSum(float *data, size_t count) override {
    shared.posted[me].data = data;
    shared.barrier();
    std::vector<float> sum(count, 0.0f);
    for (int s = 0; s < shared.n; ++s)
      for (size_t i = 0; i < count; ++i)
        sum[i] += shared.posted[s].data[i];
    shared.barrier();
    std::memcpy(data, sum.data(), count * sizeof(float));
    shared.barrier();
  }
  [[noreturn]] void abort(const std::string &message, int) override {
    ADD_FAILURE() << message;
    std::abort();
  }

private:
  Shared &shared;
  int me;
};

/// Runs body(comm, rank) on one thread per rank, each with its rank's
/// communicator, and waits for all.
void onRanks(int ranks,
             const std::function<void(ThreadCommunicator &, int)> &body) {
  Shared shared(ranks);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < ranks; ++rank)
    threads.emplace_back([&, rank] {
      ThreadCommunicator comm(shared, rank);
      body(comm, rank);
    });
  for (std::thread &t : threads)
    t.join();
}

using Counts = void (*)(int64_t, int64_t, int64_t, int64_t, int64_t);
using Rows = void (*)(int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                      int64_t, int64_t);
using Start = int64_t (*)(int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                          int64_t, int64_t);
using Wait = void (*)(int64_t, int64_t);
using Reduce = void (*)(int64_t, int64_t, int64_t);

template <typename F>
F slot(const std::vector<int64_t> &table, moe::comm::Slot s) {
  return reinterpret_cast<F>(table[static_cast<size_t>(s)]);
}
int64_t address(const void *p) { return reinterpret_cast<int64_t>(p); }

/// One rank's dispatched rows: segment e holds `sizes[e]` rows whose value
/// encodes (rank, expert, row, column).
struct Dispatched {
  std::vector<int32_t> offsets;
  std::vector<float> rows;
};
float value(int rank, int64_t expert, int64_t row, int64_t col) {
  return static_cast<float>(rank * 1000000 + expert * 10000 + row * 10 + col);
}
Dispatched makeRows(int rank, const std::vector<int32_t> &sizes,
                    int64_t width) {
  Dispatched d;
  d.offsets.push_back(0);
  for (int32_t size : sizes)
    d.offsets.push_back(d.offsets.back() + size);
  for (size_t e = 0; e < sizes.size(); ++e)
    for (int32_t r = 0; r < sizes[e]; ++r)
      for (int64_t c = 0; c < width; ++c)
        d.rows.push_back(value(rank, static_cast<int64_t>(e), r, c));
  return d;
}

/// What rank `rank` must hold after a dispatch, from moe.all_to_all's
/// definition: segment (l, s) holds source s's rows of expert
/// rank * local + l, where `sizes[s][e]` rows of expert e left source s.
Dispatched received(int rank, int ranks,
                    const std::vector<std::vector<int32_t>> &sizes,
                    int64_t width) {
  int64_t local = static_cast<int64_t>(sizes[0].size()) / ranks;
  Dispatched d;
  d.offsets.push_back(0);
  for (int64_t l = 0; l < local; ++l)
    for (int s = 0; s < ranks; ++s) {
      int64_t e = rank * local + l;
      for (int32_t r = 0; r < sizes[s][e]; ++r)
        for (int64_t c = 0; c < width; ++c)
          d.rows.push_back(value(s, e, r, c));
      d.offsets.push_back(d.offsets.back() + sizes[s][e]);
    }
  return d;
}

/// Runs a dispatch and a combine on every rank (started and waited when
/// `async`), checking both layouts.
void exchange(int ranks, int64_t experts, int64_t width, bool async,
              unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<std::vector<int32_t>> sizes(ranks);
  for (auto &s : sizes)
    for (int64_t e = 0; e < experts; ++e)
      s.push_back(static_cast<int32_t>(rng() % 4)); // empty segments too
  onRanks(ranks, [&](ThreadCommunicator &comm, int rank) {
    CommContext context(comm);
    std::vector<int64_t> table = context.table();
    int64_t ctx = table[0];
    int64_t rowBytes = width * sizeof(float);
    Dispatched mine = makeRows(rank, sizes[rank], width);
    auto run = [&](int64_t kind, const std::vector<float> &in,
                   const std::vector<int32_t> &inOffsets,
                   std::vector<int32_t> &outOffsets) {
      outOffsets.assign(experts + 1, -1);
      slot<Counts>(table, moe::comm::Slot::ExchangeCounts)(
          ctx, kind, address(inOffsets.data()), address(outOffsets.data()),
          experts);
      std::vector<float> out(outOffsets[experts] * width, -1.0f);
      int64_t args[] = {ctx,
                        kind,
                        address(in.data()),
                        address(inOffsets.data()),
                        address(out.data()),
                        address(outOffsets.data()),
                        experts,
                        rowBytes};
      if (async) {
        int64_t handle = slot<Start>(table, moe::comm::Slot::StartRows)(
            args[0], args[1], args[2], args[3], args[4], args[5], args[6],
            args[7]);
        slot<Wait>(table, moe::comm::Slot::Wait)(ctx, handle);
      } else {
        slot<Rows>(table, moe::comm::Slot::ExchangeRows)(
            args[0], args[1], args[2], args[3], args[4], args[5], args[6],
            args[7]);
      }
      return out;
    };
    // Dispatch: segment (l, s) holds source s's rows of expert
    // rank * local + l.
    std::vector<int32_t> recvOffsets;
    std::vector<float> recv = run(0, mine.rows, mine.offsets, recvOffsets);
    Dispatched expected = received(rank, ranks, sizes, width);
    EXPECT_EQ(recvOffsets, expected.offsets) << "rank " << rank;
    EXPECT_EQ(recv, expected.rows) << "rank " << rank;
    // Combine: everything back where it was.
    std::vector<int32_t> backOffsets;
    std::vector<float> back = run(1, recv, recvOffsets, backOffsets);
    EXPECT_EQ(backOffsets, mine.offsets) << "rank " << rank;
    EXPECT_EQ(back, mine.rows) << "rank " << rank;
    // The sum over ranks, in place.
    std::vector<float> sum{static_cast<float>(rank), 1.0f};
    slot<Reduce>(table, moe::comm::Slot::AllReduce)(ctx, address(sum.data()),
                                                    2);
    EXPECT_EQ(sum[0], ranks * (ranks - 1) / 2.0f);
    EXPECT_EQ(sum[1], static_cast<float>(ranks));
    // The trace: the collectives and the code between them.
    bool compute = false, collective = false;
    for (const CommEvent &e : comm.takeEvents())
      (e.compute ? compute : collective) = true;
    EXPECT_TRUE(compute);
    EXPECT_FALSE(collective); // this communicator records none
  });
}

TEST(CommContext, DispatchAndCombineOfThreeRanks) {
  exchange(3, 6, 3, /*async=*/false, 1);
}

TEST(CommContext, StartedExchangesOfFourRanks) {
  exchange(4, 8, 2, /*async=*/true, 2);
}

TEST(CommContext, OneExpertPerRank) { exchange(2, 2, 5, /*async=*/true, 3); }

// The device exchange's plan: applied as NCCL would (the n-th send to a
// peer lands in that peer's n-th receive from this rank), it gives the
// layouts moe.all_to_all defines, in both directions.
void planned(int ranks, int64_t experts, int64_t width, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<std::vector<int32_t>> sizes(ranks);
  for (auto &s : sizes)
    for (int64_t e = 0; e < experts; ++e)
      s.push_back(static_cast<int32_t>(rng() % 4));
  size_t rowBytes = width * sizeof(float);
  std::vector<Dispatched> mine;
  for (int r = 0; r < ranks; ++r)
    mine.push_back(makeRows(r, sizes[r], width));
  // The receiving offsets, from the offsets exchange on thread ranks.
  std::vector<std::vector<int32_t>> recvOffsets(ranks), backOffsets(ranks);
  onRanks(ranks, [&](ThreadCommunicator &comm, int r) {
    recvOffsets[r].assign(experts + 1, -1);
    exchangeOffsets(comm, moe::comm::Kind::Dispatch, mine[r].offsets.data(),
                    recvOffsets[r].data(), experts);
    backOffsets[r].assign(experts + 1, -1);
    exchangeOffsets(comm, moe::comm::Kind::Combine, recvOffsets[r].data(),
                    backOffsets[r].data(), experts);
  });
  // Applies every rank's plan; `in[r]` and `out[r]` are rank r's buffers.
  auto apply = [&](moe::comm::Kind kind,
                   const std::vector<std::vector<int32_t>> &inOff,
                   const std::vector<std::vector<int32_t>> &outOff,
                   const std::vector<std::vector<float>> &in,
                   std::vector<std::vector<float>> &out) {
    std::vector<ExchangePlan> plans;
    for (int r = 0; r < ranks; ++r) {
      plans.push_back(planExchange(kind, inOff[r].data(), outOff[r].data(),
                                   experts, ranks, rowBytes));
      out[r].assign(outOff[r][experts] * width, -1.0f);
    }
    for (int src = 0; src < ranks; ++src)
      for (int dst = 0; dst < ranks; ++dst) {
        std::vector<SegmentTransfer> sends, recvs;
        for (const SegmentTransfer &t : plans[src].sends)
          if (t.peer == dst)
            sends.push_back(t);
        for (const SegmentTransfer &t : plans[dst].recvs)
          if (t.peer == src)
            recvs.push_back(t);
        ASSERT_EQ(sends.size(), recvs.size());
        for (size_t i = 0; i < sends.size(); ++i) {
          ASSERT_EQ(sends[i].bytes, recvs[i].bytes)
              << src << " -> " << dst << " transfer " << i;
          std::memcpy(
              reinterpret_cast<char *>(out[dst].data()) + recvs[i].offset,
              reinterpret_cast<const char *>(in[src].data()) + sends[i].offset,
              sends[i].bytes);
        }
      }
  };
  std::vector<std::vector<int32_t>> dispatchOff(ranks);
  std::vector<std::vector<float>> rowsIn(ranks), recv(ranks), back(ranks);
  for (int r = 0; r < ranks; ++r) {
    dispatchOff[r] = mine[r].offsets;
    rowsIn[r] = mine[r].rows;
  }
  apply(moe::comm::Kind::Dispatch, dispatchOff, recvOffsets, rowsIn, recv);
  for (int r = 0; r < ranks; ++r)
    EXPECT_EQ(recv[r], received(r, ranks, sizes, width).rows) << "rank " << r;
  apply(moe::comm::Kind::Combine, recvOffsets, backOffsets, recv, back);
  for (int r = 0; r < ranks; ++r) {
    EXPECT_EQ(backOffsets[r], mine[r].offsets) << "rank " << r;
    EXPECT_EQ(back[r], mine[r].rows) << "rank " << r;
  }
}

TEST(ExchangePlan, TwoRanks) { planned(2, 4, 3, 7); }
TEST(ExchangePlan, ThreeRanksTwoExpertsEach) { planned(3, 6, 2, 8); }
TEST(ExchangePlan, FourRanksOneExpertEach) { planned(4, 4, 5, 9); }

// How the NCCL communicator shares its unique id: every rank ends with the
// root's bytes, whatever it held before.
TEST(Broadcast, EveryRankGetsTheRootsBytes) {
  for (int root : {0, 2}) {
    onRanks(3, [&](ThreadCommunicator &comm, int rank) {
      std::vector<char> data(37);
      for (size_t i = 0; i < data.size(); ++i)
        data[i] = static_cast<char>(rank * 50 + i);
      broadcast(comm, data.data(), data.size(), root);
      for (size_t i = 0; i < data.size(); ++i)
        EXPECT_EQ(data[i], static_cast<char>(root * 50 + i))
            << "rank " << rank << " byte " << i;
    });
  }
}

} // namespace
