//===- Float.h - Narrow floating-point formats, bit-exact -------*- C++ -*-===//
//
// Part of moe-compiler's PTX emulator (private). Encodes a double into f16,
// bf16, tf32, e4m3 and e5m2 with each of PTX's rounding modes (nearest
// even, toward zero, down, up), subnormals, overflow and saturation, and
// decodes them back. Written from the IEEE 754 and OCP FP8 definitions.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_EMU_LIB_FLOAT_H
#define MOE_EMU_LIB_FLOAT_H

#include <cmath>
#include <cstdint>
#include <cstring>

namespace moe::emu {

enum class Round : uint8_t { Nearest, Zero, Down, Up };

struct Format {
  int expBits, manBits, bias;
  bool hasInf;        // e4m3 has none: its top code is NaN only
  uint32_t maxFinite; // bits of the largest finite magnitude
  uint32_t nan;       // the canonical NaN
};

constexpr Format kF16{5, 10, 15, true, 0x7BFF, 0x7FFF};
constexpr Format kBF16{8, 7, 127, true, 0x7F7F, 0x7FFF};
constexpr Format kTF32{8, 10, 127, true, 0x7F7FE000 >> 13, 0x7FFFFFFF >> 13};
constexpr Format kE4M3{4, 3, 7, false, 0x7E, 0x7F};
constexpr Format kE5M2{5, 2, 15, true, 0x7B, 0x7F};
constexpr Format kF32{8, 23, 127, true, 0x7F7FFFFF, 0x7FFFFFFF};

inline float bitsToF32(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
inline uint32_t f32ToBits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}
inline double bitsToF64(uint64_t b) {
  double d;
  std::memcpy(&d, &b, 8);
  return d;
}
inline uint64_t f64ToBits(double d) {
  uint64_t b;
  std::memcpy(&b, &d, 8);
  return b;
}

/// Encodes `x` (exactly representable in double) into `f`, rounding once.
/// `satfinite`: overflow and infinities give the largest finite value, NaN
/// stays NaN.
inline uint32_t encode(double x, const Format &f, Round r,
                       bool satfinite = false) {
  int total = 1 + f.expBits + f.manBits;
  uint32_t signBit = std::signbit(x) ? 1u << (total - 1) : 0;
  if (std::isnan(x))
    return f.nan;
  double ax = std::fabs(x);
  uint32_t infBits = ((1u << f.expBits) - 1) << f.manBits;
  auto overflow = [&]() -> uint32_t {
    if (satfinite)
      return signBit | f.maxFinite;
    bool toMax = r == Round::Zero || (r == Round::Down && !signBit) ||
                 (r == Round::Up && signBit);
    if (toMax)
      return signBit | f.maxFinite;
    return f.hasInf ? (signBit | infBits) : (signBit | f.nan);
  };
  if (std::isinf(ax))
    return satfinite || !f.hasInf ? (satfinite ? signBit | f.maxFinite
                                               : signBit | f.nan)
                                  : signBit | infBits;
  if (ax == 0)
    return signBit;
  int e = 0;
  std::frexp(ax, &e);
  int exponent = e - 1; // ax in [2^exponent, 2^(exponent+1))
  int emin = 1 - f.bias;
  int quantum = (exponent > emin ? exponent : emin) - f.manBits;
  double scaled = std::ldexp(ax, -quantum);
  double whole = std::floor(scaled);
  double frac = scaled - whole;
  uint64_t sig = static_cast<uint64_t>(whole);
  bool up = false;
  switch (r) {
  case Round::Nearest:
    up = frac > 0.5 || (frac == 0.5 && (sig & 1));
    break;
  case Round::Zero:
    break;
  case Round::Down:
    up = signBit && frac > 0;
    break;
  case Round::Up:
    up = !signBit && frac > 0;
    break;
  }
  sig += up;
  if (sig >> (f.manBits + 1)) {
    sig >>= 1;
    ++quantum;
  }
  uint32_t bits;
  if (sig >> f.manBits) {
    int64_t expField = quantum + f.manBits + f.bias;
    if (expField >= (1 << f.expBits) - (f.hasInf ? 1 : 0))
      return overflow();
    bits = static_cast<uint32_t>(expField << f.manBits) |
           static_cast<uint32_t>(sig & ((1u << f.manBits) - 1));
  } else {
    bits = static_cast<uint32_t>(sig);
  }
  if (!f.hasInf && bits > f.maxFinite)
    return overflow();
  return signBit | bits;
}

inline double decode(uint32_t bits, const Format &f) {
  int total = 1 + f.expBits + f.manBits;
  bool neg = (bits >> (total - 1)) & 1;
  uint32_t expField = (bits >> f.manBits) & ((1u << f.expBits) - 1);
  uint32_t man = bits & ((1u << f.manBits) - 1);
  double v;
  if (expField == (1u << f.expBits) - 1 && f.hasInf) {
    v = man ? NAN : INFINITY;
  } else if (!f.hasInf && (bits & ~(1u << (total - 1))) == f.nan) {
    v = NAN;
  } else if (expField == 0) {
    v = std::ldexp(static_cast<double>(man), 1 - f.bias - f.manBits);
  } else {
    v = std::ldexp(static_cast<double>(man | (1u << f.manBits)),
                   static_cast<int>(expField) - f.bias - f.manBits);
  }
  return neg ? -v : v;
}

inline float bf16ToF32(uint32_t h) { return bitsToF32((h & 0xFFFF) << 16); }

/// f32 -> bf16, round to nearest even (the hot path of every epilogue).
inline uint32_t f32ToBf16(float f) {
  uint32_t b = f32ToBits(f);
  if ((b & 0x7FFFFFFF) > 0x7F800000)
    return 0x7FFF;
  return (b + 0x7FFF + ((b >> 16) & 1)) >> 16;
}

inline float f16ToF32(uint32_t h) {
  return static_cast<float>(decode(h & 0xFFFF, kF16));
}

} // namespace moe::emu

#endif // MOE_EMU_LIB_FLOAT_H
