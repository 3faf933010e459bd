// test_primitives.cpp — single-row reference math vs MODEL.md's check values (§5, §6.2).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backend/cpu/primitives.h"
#include "model/rope.h"

using namespace ds4::backend::cpu;

TEST(Primitives, RmsNormWeightedAndUnweighted) {
  const float x[4] = {1, 2, 3, 4};
  const float w[4] = {1, 0.5f, 2, -1};
  float y[4];
  rms_norm_row(x, nullptr, y, 4, 1e-6f);
  const double rms = std::sqrt((1 + 4 + 9 + 16) / 4.0 + 1e-6);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(y[i], x[i] / rms, 1e-6);
  rms_norm_row(x, w, y, 4, 1e-6f);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(y[i], x[i] / rms * w[i], 1e-6);
}

TEST(Primitives, RopeFrequenciesCompressedYarn) {
  ds4::model::RopeFreqParams p;
  p.base = 160000;
  p.yarn = true;
  const auto w = ds4::model::rope_freqs(p);
  ASSERT_EQ(w.size(), 32u);
  EXPECT_NEAR(w[0], 1.0, 1e-15);
  EXPECT_NEAR(w[1], 0.6876560219336321, 1e-15);
  EXPECT_NEAR(w[15], 0.003635538583622384, 1e-17);
  EXPECT_NEAR(w[16], 0.0022656250000000003, 1e-17);
  EXPECT_NEAR(w[20], 0.00029697777826169085, 1e-18);
  EXPECT_NEAR(w[24], 1.9531249999999997e-05, 1e-19);
  EXPECT_NEAR(w[25], 5.372312671356501e-06, 1e-20);
  EXPECT_NEAR(w[31], 5.680529036909976e-07, 1e-21);
}

TEST(Primitives, RopeFrequenciesRatioZero) {
  ds4::model::RopeFreqParams p;
  const auto w = ds4::model::rope_freqs(p);
  EXPECT_NEAR(w[1], 0.7498942093324559, 1e-15);
  EXPECT_NEAR(w[31], 0.0001333521432163324, 1e-18);
}

TEST(Primitives, HcSinkhornGoldenVector) {
  float m[24], base[24];
  for (int k = 0; k < 24; ++k) {
    m[k] = static_cast<float>(std::sin(1.0 + k));
    base[k] = (k - 12) / 8.0f;
  }
  const float scale[3] = {0.5f, 2.0f, 3.0f};
  float pre[4], post[4], comb[16];
  hc_split_one(m, scale, base, 4, 20, 1e-6f, pre, post, comb);
  const double pre_ref[4] = {0.253646227, 0.284887323, 0.235153901, 0.181919788};
  const double post_ref[4] = {0.102556531, 0.385004945, 1.274742724, 1.589473130};
  const double c_ref[16] = {0.440280696, 0.195951557, 0.157211752, 0.206554437, 0.010571054, 0.458650663,
                            0.520568419, 0.010207973, 0.000339852, 0.005005849, 0.235237105, 0.759419604,
                            0.548807399, 0.340390931, 0.086981724, 0.023816986};
  for (int i = 0; i < 4; ++i) {
    EXPECT_NEAR(pre[i], pre_ref[i], 2e-6) << i;
    EXPECT_NEAR(post[i], post_ref[i], 2e-6) << i;
  }
  for (int i = 0; i < 16; ++i) EXPECT_NEAR(comb[i], c_ref[i], 2e-6) << i;
}

TEST(Primitives, Fp8E4m3CheckValues) {
  float x[64];
  for (int j = 0; j < 64; ++j) x[j] = (j - 31.5f) / 7.0f;
  fp8_round_block(x, 64);
  EXPECT_EQ(x[0], -4.5f);               // −4.5 stays
  EXPECT_EQ(x[1], -4.5f);               // −4.357… → −4.5
  EXPECT_EQ(x[2], -4.0f);               // −4.214… → −4.0
  EXPECT_EQ(x[31], -0.0703125f);        // −0.0714… → −0.0703125
  EXPECT_EQ(x[63], 4.5f);
}

TEST(Primitives, E4m3RoundingTiesToEvenAndRange) {
  EXPECT_EQ(round_e4m3(448.0f), 448.0f);
  EXPECT_EQ(round_e4m3(1.0625f), 1.0f);     // tie between 1 and 1.125 → even mantissa (1.0)
  EXPECT_EQ(round_e4m3(1.1875f), 1.25f);    // tie between 1.125 and 1.25 → 1.25 (even)
  EXPECT_EQ(round_e4m3(-3.0f * 0.001953125f / 2), -0.00390625f);  // 1.5 quanta (subnormal) → 2 quanta
  // Every representable value round-trips exactly.
  for (int e = 1; e < 16; ++e)
    for (int mnt = 0; mnt < 8; ++mnt) {
      const float v = std::ldexp(1.0f + mnt / 8.0f, e - 7);
      if (v > 448) continue;
      EXPECT_EQ(round_e4m3(v), v);
    }
}

TEST(Primitives, HadamardFp4CheckValues) {
  float x[32];
  for (int j = 0; j < 32; ++j) x[j] = (j - 15.5f) / 4.0f;
  fp4_round_block(x, 32);
  EXPECT_EQ(x[0], -4.0f);    // −3.875 → −4
  EXPECT_EQ(x[5], -3.0f);    // −2.625 → −3
  EXPECT_EQ(x[15], 0.0f);    // −0.125 → 0
  EXPECT_EQ(x[16], 0.0f);    // +0.125 → 0
  EXPECT_EQ(round_e2m1(0.25f), 0.0f);  // ties to the even code
  EXPECT_EQ(round_e2m1(2.5f), 2.0f);
  EXPECT_EQ(round_e2m1(5.0f), 4.0f);
  EXPECT_EQ(round_e2m1(-1.75f), -2.0f);
}

TEST(Primitives, HadamardIsOrthogonal) {
  std::vector<float> x(128), y(128);
  double n0 = 0;
  for (int i = 0; i < 128; ++i) {
    x[i] = std::sin(0.3f * i) + 0.1f * i;
    n0 += double(x[i]) * x[i];
  }
  y = x;
  hadamard_scaled(y.data(), 128);
  double n1 = 0;
  for (float v : y) n1 += double(v) * v;
  EXPECT_NEAR(n1, n0, 1e-4 * n0);
  hadamard_scaled(y.data(), 128);  // H·H = I for the scaled Sylvester matrix
  for (int i = 0; i < 128; ++i) EXPECT_NEAR(y[i], x[i], 1e-5);
  // First output is the scaled sum.
  std::vector<float> z(128, 1.0f);
  hadamard_scaled(z.data(), 128);
  EXPECT_NEAR(z[0], 128 * 0.08838834764831845, 1e-5);
  for (int i = 1; i < 128; ++i) EXPECT_NEAR(z[i], 0.0f, 1e-6);
}

TEST(Primitives, F16Rounding) {
  EXPECT_EQ(round_f16(1.0f), 1.0f);
  EXPECT_EQ(round_f16(1.0f + std::ldexp(1.0f, -11)), 1.0f);                         // tie → even
  EXPECT_EQ(round_f16(1.0f + 3 * std::ldexp(1.0f, -11)), 1.0f + std::ldexp(1.0f, -9));  // tie → even (up)
  EXPECT_EQ(round_f16(65504.0f), 65504.0f);
  EXPECT_TRUE(std::isinf(round_f16(65520.0f)));
  EXPECT_EQ(round_f16(std::ldexp(1.0f, -24)), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(round_f16(std::ldexp(1.0f, -26)), 0.0f);
}

TEST(Primitives, Softplus) {
  EXPECT_NEAR(softplus(0.0f), std::log(2.0f), 1e-7);
  EXPECT_EQ(softplus(25.0f), 25.0f);
  EXPECT_NEAR(softplus(-25.0f), std::exp(-25.0f), 1e-20);
}
