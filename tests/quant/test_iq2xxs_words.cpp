// test_iq2xxs_words.cpp — the IQ2_XXS chunk decode of the CUDA expert tiles (iq2xxs_words.h: grid entry,
// 64-bit sign byte mask, (g ^ m) + (m & 0x01010101) per word) against dequantize_block_iq2_xxs for every
// grid index and every sign pattern, so the device kernels' integer weights are the format's values.
#include <gtest/gtest.h>

#include <cstring>

#include "quant/blocks.h"
#include "quant/dequant.h"
#include "quant/half.h"
#include "quant/iq2xxs_tables.h"
#include "quant/iq2xxs_words.h"

namespace ds4 {
namespace {

TEST(Iq2xxsWords, SignMasksAreTheKsignsTable) {
  for (uint32_t i = 0; i < 128; ++i)
    for (int j = 0; j < 8; ++j)
      EXPECT_EQ((iq2xxs_sign_mask(i) >> (8 * j)) & 0xff, (kKsignsIq2xs[i] >> j) & 1 ? 0xffu : 0u) << i << " " << j;
}

TEST(Iq2xxsWords, EveryGridIndexAndSignPatternDecodesAsDequant) {
  // Block (e, q): every chunk c of group 0 has grid index e and sign index 4q + c; d = 1, scale 0, so the
  // dequantized value is 0.125 · (±magnitude), exact in float.
  for (uint32_t e = 0; e < 256; ++e) {
    for (uint32_t q = 0; q < 32; ++q) {
      BlockIQ2_XXS b{};
      b.d = f32_to_f16(1.0f);
      uint32_t w[2] = {e * 0x01010101u, 0};
      for (uint32_t c = 0; c < 4; ++c) w[1] |= (4 * q + c) << (7 * c);
      std::memcpy(&b.qs[0], w, sizeof(w));
      float out[kQK_K];
      dequantize_block_iq2_xxs(b, out);
      for (uint32_t c = 0; c < 4; ++c) {
        const uint64_t g = kIq2xxsGrid[e], m = iq2xxs_sign_mask(4 * q + c);
        const uint32_t lo = iq2xxs_signed_word(static_cast<uint32_t>(g), static_cast<uint32_t>(m));
        const uint32_t hi = iq2xxs_signed_word(static_cast<uint32_t>(g >> 32), static_cast<uint32_t>(m >> 32));
        for (int j = 0; j < 8; ++j) {
          const auto v = static_cast<int8_t>(((j < 4 ? lo : hi) >> (8 * (j % 4))) & 0xff);
          ASSERT_EQ(0.125f * static_cast<float>(v), out[8 * c + j]) << "grid " << e << " signs " << 4 * q + c << " j " << j;
        }
      }
    }
  }
}

TEST(Iq2xxsWords, GridMagnitudesLeaveNoCarry) {
  // The no-carry argument of iq2xxs_signed_word: every grid byte is one of 8, 25, 43 (never 0).
  for (uint64_t g : kIq2xxsGrid)
    for (int j = 0; j < 8; ++j) {
      const uint64_t v = (g >> (8 * j)) & 0xff;
      EXPECT_TRUE(v == 8 || v == 25 || v == 43) << v;
    }
}

TEST(Iq2xxsWords, BytePermuteDecodeGivesTheSignedWords) {
  // Every grid entry with every sign index: the two permuted words are iq2xxs_signed_word's (checked
  // against the dequantizer above), so the row tiles' decode gives the same integer sums.
  for (uint64_t g : kIq2xxsGrid)
    for (uint32_t i = 0; i < 128; ++i) {
      const uint64_t m = iq2xxs_sign_mask(i);
      const uint32_t sel = iq2xxs_grid_selectors(g) | iq2xxs_sign_selectors(i);
      ASSERT_EQ(byte_perm_ref(kIq2xxsPermPos, kIq2xxsPermNeg, sel),
                iq2xxs_signed_word(static_cast<uint32_t>(g), static_cast<uint32_t>(m)))
          << "grid " << g << " signs " << i;
      ASSERT_EQ(byte_perm_ref(kIq2xxsPermPos, kIq2xxsPermNeg, sel >> 16),
                iq2xxs_signed_word(static_cast<uint32_t>(g >> 32), static_cast<uint32_t>(m >> 32)))
          << "grid " << g << " signs " << i;
    }
}

}  // namespace
}  // namespace ds4
