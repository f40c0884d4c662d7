//===- RoutingTest.cpp - Tests of the routing shape arithmetic ------------===//
//
// Part of moe-compiler. The bound is checked against brute force: every
// routing of a few tokens (each picking k distinct experts) and every
// distribution of rows over the experts.
//
//===----------------------------------------------------------------------===//

#include "moe/Support/Routing.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

using mlir::moe::isPowerOfTwo;
using mlir::moe::paddedRowsUpperBound;

namespace {

int64_t paddedTotal(const std::vector<int64_t> &counts, int64_t alignment) {
  int64_t total = 0;
  for (int64_t c : counts)
    total += (c + alignment - 1) / alignment * alignment;
  return total;
}

/// Largest padded total over every way of putting `rows` rows on `experts`
/// experts (no limit per expert).
int64_t bruteForceMaxOverCounts(int64_t rows, int64_t experts,
                                int64_t alignment) {
  std::vector<int64_t> counts(experts, 0);
  int64_t best = 0;
  std::function<void(int64_t, int64_t)> place = [&](int64_t e, int64_t left) {
    if (e == experts - 1) {
      counts[e] = left;
      best = std::max(best, paddedTotal(counts, alignment));
      return;
    }
    for (int64_t c = 0; c <= left; ++c) {
      counts[e] = c;
      place(e + 1, left - c);
    }
  };
  place(0, rows);
  return best;
}

/// Largest padded total over every routing of `tokens` tokens, each picking
/// `k` distinct experts.
int64_t bruteForceMaxOverRoutings(int64_t tokens, int64_t k, int64_t experts,
                                  int64_t alignment) {
  std::vector<std::vector<int64_t>> choices;
  for (uint32_t mask = 0; mask < (1u << experts); ++mask) {
    if (__builtin_popcount(mask) != k)
      continue;
    std::vector<int64_t> chosen;
    for (int64_t e = 0; e < experts; ++e)
      if (mask & (1u << e))
        chosen.push_back(e);
    choices.push_back(chosen);
  }
  std::vector<int64_t> counts(experts, 0);
  int64_t best = 0;
  std::function<void(int64_t)> route = [&](int64_t t) {
    if (t == tokens) {
      best = std::max(best, paddedTotal(counts, alignment));
      return;
    }
    for (const auto &chosen : choices) {
      for (int64_t e : chosen)
        ++counts[e];
      route(t + 1);
      for (int64_t e : chosen)
        --counts[e];
    }
  };
  route(0);
  return best;
}

TEST(RoutingTest, PowerOfTwo) {
  EXPECT_TRUE(isPowerOfTwo(1));
  EXPECT_TRUE(isPowerOfTwo(128));
  EXPECT_TRUE(isPowerOfTwo(int64_t(1) << 62));
  EXPECT_FALSE(isPowerOfTwo(0));
  EXPECT_FALSE(isPowerOfTwo(-4));
  EXPECT_FALSE(isPowerOfTwo(96));
}

TEST(RoutingTest, BoundIsTheMaximumOverRowDistributions) {
  for (int64_t rows = 0; rows <= 12; ++rows)
    for (int64_t experts = 1; experts <= 4; ++experts)
      for (int64_t alignment : {1, 2, 4, 8}) {
        std::optional<int64_t> bound =
            paddedRowsUpperBound(rows, 1, experts, alignment);
        ASSERT_TRUE(bound.has_value());
        EXPECT_EQ(*bound, bruteForceMaxOverCounts(rows, experts, alignment))
            << "rows=" << rows << " experts=" << experts
            << " alignment=" << alignment;
      }
}

TEST(RoutingTest, BoundCoversEveryRouting) {
  for (int64_t tokens = 0; tokens <= 3; ++tokens)
    for (int64_t experts = 1; experts <= 4; ++experts)
      for (int64_t k = 1; k <= std::min<int64_t>(experts, 2); ++k)
        for (int64_t alignment : {1, 2, 4}) {
          std::optional<int64_t> bound =
              paddedRowsUpperBound(tokens, k, experts, alignment);
          ASSERT_TRUE(bound.has_value());
          EXPECT_GE(*bound,
                    bruteForceMaxOverRoutings(tokens, k, experts, alignment))
              << "tokens=" << tokens << " k=" << k << " experts=" << experts
              << " alignment=" << alignment;
        }
}

TEST(RoutingTest, HandWorkedBounds) {
  // 10 rows over 4 experts, blocks of 8: (7, 1, 1, 1) needs 4 blocks.
  EXPECT_EQ(paddedRowsUpperBound(5, 2, 4, 8), 32);
  // DeepSeek-V3, 4096 tokens: 256 experts get one block each, the other
  // 32768 - 256 rows fill 254 more blocks of 128.
  EXPECT_EQ(paddedRowsUpperBound(4096, 8, 256, 128), (256 + 254) * 128);
  EXPECT_EQ(paddedRowsUpperBound(0, 8, 256, 128), 0);
}

TEST(RoutingTest, BadSizesAndOverflow) {
  EXPECT_FALSE(paddedRowsUpperBound(-1, 2, 4, 8).has_value());
  EXPECT_FALSE(paddedRowsUpperBound(4, 0, 4, 8).has_value());
  EXPECT_FALSE(paddedRowsUpperBound(4, 2, 0, 8).has_value());
  EXPECT_FALSE(paddedRowsUpperBound(4, 2, 4, 0).has_value());
  int64_t big = std::numeric_limits<int64_t>::max() / 2;
  EXPECT_FALSE(paddedRowsUpperBound(big, 4, 4, 8).has_value());
}

} // namespace
