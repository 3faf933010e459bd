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

}  // namespace ds4
