// test_half.cpp — f16/bf16 <-> f32 conversions: exhaustive decode/encode round trip, rounding to
// nearest-even against a brute-force oracle, subnormals, overflow, inf and NaN.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

#include "quant/half.h"

namespace ds4 {
namespace {

TEST(Half, KnownValues) {
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0xc000), -2.0f);
  EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);
  EXPECT_EQ(f16_to_f32(0x0400), std::ldexp(1.0f, -14));
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f16_to_f32(0x03ff), 1023 * std::ldexp(1.0f, -24));
  EXPECT_EQ(f16_to_f32(0x3555), 0.333251953125f);
  EXPECT_TRUE(std::isinf(f16_to_f32(0x7c00)) && f16_to_f32(0x7c00) > 0);
  EXPECT_TRUE(std::isinf(f16_to_f32(0xfc00)) && f16_to_f32(0xfc00) < 0);
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7e00)));
  EXPECT_EQ(std::bit_cast<uint32_t>(f16_to_f32(0x8000)), 0x80000000u);  // -0 keeps its sign

  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7bff);  // below the halfway point to 65536
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);  // tie, odd mantissa -> rounds up to inf
  EXPECT_EQ(f32_to_f16(1e10f), 0x7c00);
  EXPECT_EQ(f32_to_f16(-1e10f), 0xfc00);
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::quiet_NaN()), 0x7e00);
  EXPECT_EQ(f32_to_f16(-std::numeric_limits<float>::quiet_NaN()), 0xfe00);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);                  // tie -> even (0)
  EXPECT_EQ(f32_to_f16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(f32_to_f16(3 * std::ldexp(1.0f, -25)), 0x0002);              // 1.5 ulp tie -> even (2)
  EXPECT_EQ(f32_to_f16(1e-30f), 0x0000);
  EXPECT_EQ(f32_to_f16(-1e-30f), 0x8000);
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);           // tie -> even
  EXPECT_EQ(f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);       // tie -> even (up)
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -14) - std::ldexp(1.0f, -26)), 0x0400);  // rounds up into normals
}

TEST(Half, EveryF16RoundTrips) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = f16_to_f32(static_cast<uint16_t>(h));
    const bool is_nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0;
    if (is_nan) {
      EXPECT_TRUE(std::isnan(f));
      EXPECT_EQ(f32_to_f16(f), (h & 0x8000) | 0x7e00);
    } else {
      ASSERT_EQ(f32_to_f16(f), h) << std::hex << h;
    }
  }
}

// Oracle: the nearest f16 by exhaustive comparison in double, ties to the even encoding.
uint16_t nearest_f16_oracle(float f) {
  const double x = f;
  uint16_t best = 0;
  double best_err = INFINITY;
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  for (uint32_t m = 0; m <= 0x7c00; ++m) {  // all finite magnitudes, and inf as a candidate
    double v = m == 0x7c00 ? 65536.0 : static_cast<double>(f16_to_f32(static_cast<uint16_t>(m)));
    const double err = std::fabs(std::fabs(x) - v);
    if (err < best_err || (err == best_err && (m & 1) == 0)) {
      best_err = err;
      best = static_cast<uint16_t>(m);
    }
  }
  return sign | best;
}

TEST(Half, F32ToF16MatchesNearestEvenOracle) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> expo(-27, 17);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  for (int i = 0; i < 300; ++i) {
    float f = std::ldexp(mant(rng), expo(rng)) * (i % 2 ? -1.0f : 1.0f);
    ASSERT_EQ(f32_to_f16(f), nearest_f16_oracle(f)) << f;
  }
  // Exact halfway points between neighbouring f16 values (normal and subnormal).
  for (uint16_t h : {0x0001, 0x0002, 0x03fe, 0x0400, 0x3c00, 0x3c01, 0x7bfe}) {
    const float mid = static_cast<float>((static_cast<double>(f16_to_f32(h)) + f16_to_f32(h + 1)) / 2);
    ASSERT_EQ(f32_to_f16(mid), (h & 1) ? h + 1 : h) << std::hex << h;
  }
}

TEST(Bf16, Conversions) {
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  EXPECT_EQ(bf16_to_f32(0xc040), -3.0f);
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3f808000u)), 0x3f80);  // tie -> even
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3f818000u)), 0x3f82);  // tie -> even (up)
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3f808001u)), 0x3f81);
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x7f7fffffu)), 0x7f80);  // FLT_MAX rounds to inf
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x7f800001u)), 0x7fc0);  // NaN stays NaN (quieted)
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x00010000u)), 0x0001);  // subnormals kept
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = bf16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(f))));
    } else {
      ASSERT_EQ(f32_to_bf16(f), h);
    }
  }
}

}  // namespace
}  // namespace ds4
