// test_exact_math.cpp — exact_math.h (the exp / log1p the CPU ops and the CUDA kernels share, bit for bit) against
// double precision: exp within 1 ulp over [−104, 89] (every 29th float), log1p within 2 ulp over [0, 4.9e8] (the
// router's e^z for |z| ≤ 20), the special values the ops meet, and the compositions (σ, softplus) near their
// double values. test_cuda_exact_math.cpp checks the device against these host functions.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "backend/exact_math.h"

using namespace ds4::backend;

namespace {

uint32_t bits_of(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

float float_of(uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

// |got − want| in units of the last place of a float at want (subnormal spacing below 2^−126).
double ulps(float got, double want) {
  if (std::isinf(got) && want >= 0x1.ffffffp127) return 0;  // the float result rounds to inf
  int e = 0;
  std::frexp(want, &e);
  const double ulp = std::ldexp(1.0, std::max(e - 24, -149));
  return std::fabs(static_cast<double>(got) - want) / ulp;
}

// Worst error of f vs ref over the floats [lo, hi] (same sign), every stride-th.
template <typename F, typename R>
double worst(float lo, float hi, uint32_t stride, F f, R ref, float* at) {
  uint32_t b0 = bits_of(lo), b1 = bits_of(hi);
  double mx = 0;
  for (uint64_t b = b0; b <= b1; b += stride) {
    const float x = float_of(static_cast<uint32_t>(b));
    const double e = ulps(f(x), ref(static_cast<double>(x)));
    if (e > mx) {
      mx = e;
      *at = x;
    }
  }
  return mx;
}

TEST(ExactMath, ExpWithinOneUlp) {
  float at = 0;
  const auto f = [](float x) { return exact_exp(x); };
  const auto ref = [](double x) { return std::exp(x); };
  const double neg = worst(-0.0f, -104.0f, 29, f, ref, &at);
  EXPECT_LE(neg, 1.0) << "at " << at;
  const double pos = worst(0.0f, 88.72f, 29, f, ref, &at);
  EXPECT_LE(pos, 1.0) << "at " << at;
  std::printf("exact_exp: worst %.3f ulp on [-104, 0], %.3f on [0, 88.72] (every 29th float)\n", neg, pos);
}

TEST(ExactMath, Log1pWithinTwoUlp) {
  float at = 0;
  const double e = worst(0.0f, 4.9e8f, 29, [](float y) { return exact_log1p(y); },
                         [](double y) { return std::log1p(y); }, &at);
  EXPECT_LE(e, 2.0) << "at " << at;
  std::printf("exact_log1p: worst %.3f ulp on [0, 4.9e8] (every 29th float)\n", e);
}

TEST(ExactMath, SpecialValues) {
  EXPECT_EQ(bits_of(exact_exp(0.0f)), bits_of(1.0f));
  EXPECT_EQ(bits_of(exact_exp(-0.0f)), bits_of(1.0f));
  EXPECT_EQ(bits_of(exact_exp(-INFINITY)), bits_of(0.0f));  // masked scores, empty compressor slots
  EXPECT_TRUE(std::isinf(exact_exp(INFINITY)));
  EXPECT_TRUE(std::isnan(exact_exp(NAN)));
  EXPECT_TRUE(std::isinf(exact_exp(88.73f)));                      // e^88.73 > FLT_MAX
  EXPECT_LE(ulps(exact_exp(88.72f), std::exp(static_cast<double>(88.72f))), 1.0);  // near the largest finite result
  EXPECT_EQ(exact_exp(-103.9f), std::numeric_limits<float>::denorm_min());
  EXPECT_EQ(bits_of(exact_exp(-104.5f)), bits_of(0.0f));
  EXPECT_EQ(bits_of(exact_log1p(0.0f)), bits_of(0.0f));
  EXPECT_EQ(exact_log1p(1e-30f), 1e-30f);
  EXPECT_TRUE(std::isinf(exact_log1p(INFINITY)));
  EXPECT_TRUE(std::isnan(exact_log1p(NAN)));
  // The compositions: a NaN gate stays NaN (a bad expert id's NaN weights), σ saturates without NaN.
  EXPECT_EQ(exact_sigmoid(200.0f), 1.0f);
  EXPECT_EQ(bits_of(exact_sigmoid(-200.0f)), bits_of(0.0f));
  EXPECT_TRUE(std::isnan(exact_sigmoid(NAN)));
  EXPECT_EQ(exact_softplus(25.0f), 25.0f);
  EXPECT_EQ(exact_softplus(-25.0f), exact_exp(-25.0f));
}

// σ and softplus over the ranges the ops use, against their double values: a few ulp (each composes one exact_exp,
// one add, one divide or log1p).
TEST(ExactMath, CompositionsNearDouble) {
  double sig = 0, soft = 0;
  for (float z = -30.0f; z <= 30.0f; z += 0.0037f) {
    const double zd = z;
    sig = std::max(sig, ulps(exact_sigmoid(z), 1.0 / (1.0 + std::exp(-zd))));
    soft = std::max(soft, ulps(exact_softplus(z), zd > 20 ? zd : zd < -20 ? std::exp(zd) : std::log1p(std::exp(zd))));
  }
  EXPECT_LE(sig, 3.0);
  EXPECT_LE(soft, 3.0);
  std::printf("exact_sigmoid: worst %.3f ulp, exact_softplus: worst %.3f ulp on [-30, 30]\n", sig, soft);
}

}  // namespace
