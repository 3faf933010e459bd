// iq2xxs_words.h — one IQ2_XXS 8-value chunk as two signed int8×4 words ready for dp4a, from its grid
// entry and a precomputed 64-bit sign byte mask: the decode the CUDA expert tiles run (moe_tiles.cu's
// fast kernels, which keep the masks in a 128-entry shared-memory table), kept here as plain constexpr
// C++ so that tests/quant checks it against dequantize_block_iq2_xxs for every grid index and sign pattern.
// Deliberately not here: the tables' shared-memory layout and the dot products (moe_tiles.cu), any float
// work (the block scale and d stay in dequant.cpp / dot_ref.cpp).
#pragma once

#include <cstdint>

namespace ds4 {

// Sign byte mask of a chunk's 7-bit sign index: byte j is 0xFF where element j is negative, else 0x00.
// The stored 7 bits are elements 0…6; element 7's sign is their parity (kKsignsIq2xs[i] = i | parity << 7).
// A few integer operations (the CUDA kernels build their shared tables with it): the parity by xor
// folding; each nibble spread to bit 0 of four bytes by one multiply (copies at bits n, n + 7, n + 14,
// n + 21 of a 4-bit n never overlap, so no carries), then each 0/1 byte times 255.
constexpr uint64_t iq2xxs_sign_mask(uint32_t idx7) {
  const uint32_t x = idx7 & 127u;
  uint32_t parity = x ^ (x >> 4);
  parity ^= parity >> 2;
  parity ^= parity >> 1;
  const uint32_t bits = x | ((parity & 1u) << 7);
  const uint64_t lo = ((bits & 15u) * 0x00204081u) & 0x01010101u;
  const uint64_t hi = ((bits >> 4) * 0x00204081u) & 0x01010101u;
  return (lo | (hi << 32)) * 0xffu;
}

// Four grid magnitudes g (bytes, each 8, 25 or 43: kIq2xxsGrid) with the signs of mask word m applied:
// byte j becomes g_j or −g_j (two's complement int8). Why (g ^ m) + (m & 0x01010101) has no carry
// between bytes: where m_j = 0x00 the byte is g_j + 0 = g_j ≤ 43; where m_j = 0xFF it is
// (255 − g_j) + 1 = 256 − g_j, and 255 − g_j ≤ 247 (g_j ≥ 8), so the sum ≤ 248 < 256 stays in its byte
// and equals −g_j mod 256. A zero magnitude (255 + 1) would carry: the grid has none (tests/quant checks
// every entry). Three integer operations per 4 weights, shared by every activation row dotted with them.
constexpr uint32_t iq2xxs_signed_word(uint32_t g, uint32_t m) { return (g ^ m) + (m & 0x01010101u); }

// Byte-permute decode (the CUDA row tiles' iq2_terms_perm): one byte permute (__byte_perm, PRMT) picks each
// of 4 weights from 8 candidate bytes — the grid magnitudes 8, 25, 43 (bytes 0–2 of kIq2xxsPermPos) and their
// negatives (bytes 4–6, kIq2xxsPermNeg) — by a 3-bit selector: the magnitude's code 0/1/2, plus 4 where the
// weight is negative. A grid entry becomes 8 code nibbles (iq2xxs_grid_selectors), a sign index 8 nibbles
// of 0 or 4 (iq2xxs_sign_selectors); their OR selects a chunk's 8 signed weights (its low 16 bits weights
// 0–3, its high 16 bits weights 4–7): an OR, a shift and two permutes per 8 weights from 4-byte table
// entries, where iq2xxs_signed_word takes 8-byte entries and 6 operations. Same int8 words (tests/quant).
inline constexpr uint32_t kIq2xxsPermPos = 0x002b1908u;  // bytes 8, 25, 43, 0
inline constexpr uint32_t kIq2xxsPermNeg = 0x00d5e7f8u;  // bytes −8, −25, −43, 0

// Grid entry g (8 magnitudes, each 8, 25 or 43 — tests/quant checks there are no others) as 8 code nibbles.
constexpr uint32_t iq2xxs_grid_selectors(uint64_t g) {
  uint32_t s = 0;
  for (int j = 0; j < 8; ++j) {
    const uint32_t v = static_cast<uint32_t>(g >> (8 * j)) & 0xffu;
    s |= (v == 8 ? 0u : v == 25 ? 1u : 2u) << (4 * j);
  }
  return s;
}

// Sign index idx7 (iq2xxs_sign_mask's) as 8 nibbles: 4 where element j is negative, else 0.
constexpr uint32_t iq2xxs_sign_selectors(uint32_t idx7) {
  const uint64_t m = iq2xxs_sign_mask(idx7);
  uint32_t s = 0;
  for (int j = 0; j < 8; ++j) s |= static_cast<uint32_t>((m >> (8 * j)) & 1u) << (4 * j + 2);
  return s;
}

// __byte_perm(x, y, s) for selector nibbles 0–7 (what the decode uses): result byte i is byte s_i of the
// 8 bytes y:x (x bytes 0–3, y bytes 4–7), s_i = bits 4i … 4i + 2 of s.
constexpr uint32_t byte_perm_ref(uint32_t x, uint32_t y, uint32_t s) {
  const uint64_t xy = (static_cast<uint64_t>(y) << 32) | x;
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i) r |= static_cast<uint32_t>((xy >> (8 * ((s >> (4 * i)) & 7u))) & 0xffu) << (8 * i);
  return r;
}

}  // namespace ds4
