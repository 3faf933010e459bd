// test_dequant.cpp — blocks built byte by byte, decoded values checked against hand-computed
// numbers (FORMATS.md §2.3–2.7), plus the row API's error handling.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "quant/blocks.h"
#include "quant/dequant.h"

namespace ds4 {
namespace {

std::vector<float> decode(GgmlType t, const void* bytes, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n), NAN);
  Status s = dequantize_row(t, bytes, out.data(), n);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return out;
}

TEST(Dequant, Q8_0HandBuilt) {
  uint8_t b[2 * 34] = {};
  b[0] = 0x00, b[1] = 0x38;  // d = f16 0x3800 = 0.5
  for (int i = 0; i < 32; ++i) b[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(i - 16));
  b[34] = 0x00, b[35] = 0xc0;  // d = -2
  b[36] = 0x80;                // qs[0] = -128
  b[37] = 0x7f;                // qs[1] = 127
  const auto x = decode(GgmlType::Q8_0, b, 64);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(x[i], 0.5f * (i - 16)) << i;
  EXPECT_EQ(x[32], 256.0f);
  EXPECT_EQ(x[33], -254.0f);
  EXPECT_EQ(x[34], -0.0f);
}

TEST(Dequant, Q2_KHandBuilt) {
  BlockQ2_K b{};
  b.d = 0x3c00;     // 1.0
  b.dmin = 0x3800;  // 0.5
  b.scales[0] = 0x21;  // sc 1, m 2
  b.scales[1] = 0x03;  // sc 3, m 0
  b.scales[2] = 0x12;  // sc 2, m 1
  b.scales[4] = 0x34;  // sc 4, m 3
  b.scales[6] = 0x0f;  // sc 15, m 0
  b.scales[8] = 0x5f;  // sc 15, m 5
  b.qs[0] = 0xe4;      // elements 0, 32, 64, 96 get q = 0, 1, 2, 3
  b.qs[16] = 0x03;     // element 16: q = 3
  b.qs[37] = 0x02;     // element 128 + 5: q = 2
  const auto x = decode(GgmlType::Q2_K, &b, 256);
  EXPECT_EQ(x[0], -1.0f);    // 1*1*0 - 0.5*2
  EXPECT_EQ(x[1], -1.0f);
  EXPECT_EQ(x[16], 9.0f);    // 1*3*3 - 0
  EXPECT_EQ(x[32], 1.5f);    // 1*2*1 - 0.5*1
  EXPECT_EQ(x[64], 6.5f);    // 1*4*2 - 0.5*3
  EXPECT_EQ(x[96], 45.0f);   // 1*15*3
  EXPECT_EQ(x[133], 27.5f);  // 1*15*2 - 0.5*5
  EXPECT_EQ(x[132], -2.5f);  // q = 0 in sub-block 8
  EXPECT_EQ(x[200], 0.0f);   // sub-block 12: scale byte 0
}

TEST(Dequant, Q4_KHandBuilt) {
  BlockQ4_K b{};
  b.d = 0x4000;     // 2.0
  b.dmin = 0x3c00;  // 1.0
  // j = 0: sc 1, m 2;  j = 1: sc 3, m 4;  j = 5: sc 33, m 17 (6-bit values with high bits set).
  b.scales[0] = 1;
  b.scales[4] = 2;
  b.scales[1] = 0x80 | 3;  // bits 6-7 = high bits of sc_5 (33 >> 4 = 2)
  b.scales[5] = 0x40 | 4;  // bits 6-7 = high bits of m_5 (17 >> 4 = 1)
  b.scales[9] = 0x11;      // low nibbles of sc_5 (1) and m_5 (1)
  b.qs[0] = 0x5a;          // element 0 (j 0): q 10; element 32 (j 1): q 5
  b.qs[67] = 0x70;         // element 131 (j 4): q 0; element 163 (j 5): q 7
  const auto x = decode(GgmlType::Q4_K, &b, 256);
  EXPECT_EQ(x[0], 18.0f);     // 2*1*10 - 1*2
  EXPECT_EQ(x[1], -2.0f);     // q 0
  EXPECT_EQ(x[32], 26.0f);    // 2*3*5 - 1*4
  EXPECT_EQ(x[163], 445.0f);  // 2*33*7 - 1*17
  EXPECT_EQ(x[160], -17.0f);
  EXPECT_EQ(x[131], 0.0f);    // sub-block 4: sc 0, m 0
}

TEST(Dequant, IQ2_XXSHandBuilt) {
  BlockIQ2_XXS b{};
  b.d = 0x3c00;  // 1.0
  const uint32_t w0 = 1u | (0u << 8) | (2u << 16) | (255u << 24);           // grid indices of chunks 0..3
  const uint32_t w1 = 1u | (0u << 7) | (3u << 14) | (127u << 21) | (3u << 28);  // sign indices, ls = 3
  std::memcpy(&b.qs[0], &w0, 4);
  std::memcpy(&b.qs[2], &w1, 4);
  const auto x = decode(GgmlType::IQ2_XXS, &b, 256);
  // db = 1 * (0.5 + 3) * 0.25 = 0.875; magnitudes 8 -> 7, 25 -> 21.875, 43 -> 37.625.
  // chunk 0: grid[1] = 0x080808080808082b, ksigns[1] = 0x81 (elements 0 and 7 negative)
  EXPECT_EQ(x[0], -37.625f);
  for (int i = 1; i < 7; ++i) EXPECT_EQ(x[i], 7.0f) << i;
  EXPECT_EQ(x[7], -7.0f);
  for (int i = 8; i < 16; ++i) EXPECT_EQ(x[i], 7.0f) << i;  // chunk 1: grid[0], no signs
  // chunk 2: grid[2] = 0x0808080808081919, ksigns[3] = 0x03
  EXPECT_EQ(x[16], -21.875f);
  EXPECT_EQ(x[17], -21.875f);
  for (int i = 18; i < 24; ++i) EXPECT_EQ(x[i], 7.0f) << i;
  // chunk 3: grid[255] = 0x2b2b2b1908081908, ksigns[127] = 0xff (all negative)
  const float c3[8] = {-7, -21.875f, -7, -7, -21.875f, -37.625f, -37.625f, -37.625f};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(x[24 + i], c3[i]) << i;
  // groups 1..7 are zero bytes: grid[0], no signs, ls 0 -> 1 * 0.5 * 0.25 * 8 = 1.
  for (int i = 32; i < 256; ++i) EXPECT_EQ(x[i], 1.0f) << i;
}

TEST(Dequant, Q8_KAndScalarTypes) {
  BlockQ8_K b{};
  b.d = -0.5f;
  for (int i = 0; i < 256; ++i) b.qs[i] = static_cast<int8_t>(i - 128);
  const auto x = decode(GgmlType::Q8_K, &b, 256);
  for (int i = 0; i < 256; ++i) EXPECT_EQ(x[i], -0.5f * (i - 128));

  const uint16_t h[4] = {0x3c00, 0xc000, 0x0001, 0x7c00};
  const auto f = decode(GgmlType::F16, h, 4);
  EXPECT_EQ(f[0], 1.0f);
  EXPECT_EQ(f[1], -2.0f);
  EXPECT_EQ(f[2], std::ldexp(1.0f, -24));
  EXPECT_TRUE(std::isinf(f[3]));
  const uint16_t bf[2] = {0x3f80, 0xc040};
  const auto g = decode(GgmlType::BF16, bf, 2);
  EXPECT_EQ(g[0], 1.0f);
  EXPECT_EQ(g[1], -3.0f);
  const float raw[3] = {1.5f, -0.0f, 3e38f};
  const auto r = decode(GgmlType::F32, raw, 3);
  EXPECT_EQ(std::memcmp(r.data(), raw, sizeof(raw)), 0);
}

TEST(Dequant, ZeroBlocksDecodeToZero) {
  std::vector<uint8_t> zeros(1024, 0);
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q2_K, GgmlType::Q4_K, GgmlType::IQ2_XXS, GgmlType::F16,
                     GgmlType::BF16, GgmlType::F32}) {
    const auto x = decode(t, zeros.data(), 256);
    for (float v : x) ASSERT_EQ(v, 0.0f) << type_name(t);
  }
}

TEST(Dequant, RejectsBadArguments) {
  float out[256];
  uint8_t buf[512] = {};
  EXPECT_EQ(dequantize_row(GgmlType::Q2_K, buf, out, 100).code(), StatusCode::invalid_argument);
  EXPECT_EQ(dequantize_row(GgmlType::Q8_0, buf, out, -32).code(), StatusCode::invalid_argument);
  EXPECT_EQ(dequantize_row(GgmlType::I32, buf, out, 4).code(), StatusCode::unsupported);
  EXPECT_EQ(dequantize_row(static_cast<GgmlType>(2), buf, out, 32).code(), StatusCode::unsupported);
  EXPECT_EQ(dequantize_row(GgmlType::Q8_0, nullptr, out, 32).code(), StatusCode::invalid_argument);
  EXPECT_TRUE(dequantize_row(GgmlType::Q8_0, nullptr, nullptr, 0).ok());
}

}  // namespace
}  // namespace ds4
