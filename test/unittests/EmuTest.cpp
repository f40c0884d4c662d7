//===- EmuTest.cpp - The PTX emulator's number formats and parser ---------===//
//
// Properties of the narrow float formats that follow from their
// definitions, checked over every code (or a million random f32 values),
// and the parser's scoping rules. No expected value comes from the code
// under test.
//
//===----------------------------------------------------------------------===//

#include "Float.h"
#include "Ptx.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

using namespace moe::emu;

namespace {

struct Named {
  const char *name;
  Format format;
  uint32_t codes;
};

const Named kFormats[] = {{"f16", kF16, 1u << 16},
                          {"bf16", kBF16, 1u << 16},
                          {"e4m3", kE4M3, 256},
                          {"e5m2", kE5M2, 256}};

TEST(EmuFloat, EveryFiniteCodeRoundTrips) {
  for (const Named &n : kFormats)
    for (uint32_t c = 0; c < n.codes; ++c) {
      double v = decode(c, n.format);
      if (std::isnan(v))
        continue;
      for (Round r : {Round::Nearest, Round::Zero, Round::Down, Round::Up})
        ASSERT_EQ(encode(v, n.format, r), c)
            << n.name << " code " << c << " value " << v;
    }
}

TEST(EmuFloat, MidpointsRoundAsTheModesSay) {
  // Between two adjacent positive finite codes a and a + 1 (their values
  // increase with the code), the midpoint goes to the even code when
  // rounding to nearest, down to a toward zero or -inf, up to a + 1
  // toward +inf; negated, the directed modes swap.
  for (const Named &n : kFormats) {
    uint32_t signBit = n.codes >> 1;
    for (uint32_t a = 0; a + 1 < signBit; ++a) {
      double lo = decode(a, n.format), hi = decode(a + 1, n.format);
      if (std::isnan(lo) || std::isnan(hi) || std::isinf(hi))
        continue;
      double mid = (lo + hi) / 2;
      uint32_t even = (a % 2 == 0) ? a : a + 1;
      ASSERT_EQ(encode(mid, n.format, Round::Nearest), even) << n.name << " " << a;
      ASSERT_EQ(encode(mid, n.format, Round::Zero), a) << n.name << " " << a;
      ASSERT_EQ(encode(mid, n.format, Round::Down), a) << n.name << " " << a;
      ASSERT_EQ(encode(mid, n.format, Round::Up), a + 1) << n.name << " " << a;
      ASSERT_EQ(encode(-mid, n.format, Round::Down), (a + 1) | signBit);
      ASSERT_EQ(encode(-mid, n.format, Round::Up), a | signBit);
    }
  }
}

TEST(EmuFloat, OverflowAndSaturation) {
  // e4m3 has no infinity: 448 is its largest value, NaN is 0x7f.
  EXPECT_EQ(decode(0x7E, kE4M3), 448.0);
  EXPECT_EQ(encode(1e9, kE4M3, Round::Nearest, true), 0x7Eu);
  EXPECT_EQ(encode(-1e9, kE4M3, Round::Nearest, true), 0xFEu);
  EXPECT_EQ(encode(1e9, kE4M3, Round::Nearest), 0x7Fu);
  EXPECT_EQ(encode(NAN, kE4M3, Round::Nearest, true), 0x7Fu);
  // f16: 65520 is halfway between 65504 and 2^16, so nearest overflows to
  // +inf; toward zero it stays 65504.
  EXPECT_EQ(encode(65520.0, kF16, Round::Nearest), 0x7C00u);
  EXPECT_EQ(encode(65520.0, kF16, Round::Zero), 0x7BFFu);
  EXPECT_EQ(encode(INFINITY, kBF16, Round::Nearest), 0x7F80u);
  EXPECT_EQ(encode(INFINITY, kE5M2, Round::Nearest, true), 0x7Bu);
  // The smallest subnormals: 2^-24 (f16), 2^-133 (bf16), 2^-9 (e4m3).
  EXPECT_EQ(encode(std::ldexp(1.0, -24), kF16, Round::Nearest), 1u);
  EXPECT_EQ(encode(std::ldexp(1.0, -133), kBF16, Round::Nearest), 1u);
  EXPECT_EQ(encode(std::ldexp(1.0, -9), kE4M3, Round::Nearest), 1u);
  EXPECT_EQ(encode(std::ldexp(1.0, -26), kF16, Round::Nearest), 0u);
}

TEST(EmuFloat, FastBf16AgreesWithTheGeneralEncoder) {
  std::mt19937 rng(7);
  for (int i = 0; i < 1000000; ++i) {
    uint32_t bits = rng();
    float f = bitsToF32(bits);
    if (std::isnan(f))
      continue;
    ASSERT_EQ(f32ToBf16(f), encode(f, kBF16, Round::Nearest)) << std::hex << bits;
  }
  EXPECT_EQ(f32ToBf16(NAN), 0x7FFFu);
}

std::unique_ptr<Module> parse(const std::string &body, std::string &error) {
  return parseModule(".version 8.0\n.target sm_90a\n.address_size 64\n"
                     ".visible .entry k()\n{\n" + body + "\n}\n",
                     "t.ptx", error);
}

TEST(EmuParser, InlineScopesHaveTheirOwnRegistersAndLabels) {
  // Two inline-asm blocks declare the same predicate and labels.
  std::string block = "{\n.reg .pred P1;\nW: setp.ne.b32 P1, 1, 0;\n"
                      "@P1 bra.uni D;\nbra.uni W;\nD:\n}\n";
  std::string error;
  auto m = parse(block + block + "ret;", error);
  ASSERT_TRUE(m) << error;
  const Kernel &k = m->kernels[0];
  // Each bra.uni D jumps to the label of its own block.
  std::vector<int> targets;
  for (const Instr &in : k.code)
    if (in.op == Op::Bra && in.guard >= 0)
      targets.push_back(in.ops[0].target);
  ASSERT_EQ(targets.size(), 2u);
  EXPECT_EQ(targets[0], 3);
  EXPECT_EQ(targets[1], 6);
}

TEST(EmuParser, LabelErrorsNameTheLine) {
  std::string error;
  EXPECT_FALSE(parse("bra.uni NOWHERE;\nret;", error));
  EXPECT_EQ(error, "t.ptx:6: unknown label or name 'NOWHERE'");
  EXPECT_FALSE(parse("L: ret;\nL: ret;", error));
  EXPECT_EQ(error, "t.ptx:7: label 'L' is defined twice");
  EXPECT_FALSE(parse(".reg .b32 %r<2>;\nmov.u32 %r2, 0;", error));
  EXPECT_EQ(error, "t.ptx:7: unknown register '%r2'");
}

} // namespace
