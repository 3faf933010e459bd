// blocks.h — byte layouts of the ggml quantized blocks used by DeepSeek V4 GGUFs (FORMATS.md §2.3–2.7),
// plus the ds4 Q8_0 activation block.
//
// Structs mirror the on-disk bytes exactly (little-endian host assumed, as everywhere in ds4cpp);
// static_asserts pin the sizes so a padding mistake cannot silently change the file format.
// Weight tensors are read straight out of the mmap'd file through these structs: all fields have
// alignment <= 2 except Q8_K / Q8_0Act (activation-side only, allocated by us). Decoding is in
// dequant.h, encoding in quantize.h, dot products in dot.h.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ds4 {

inline constexpr int kQK8_0 = 32;  // values per Q8_0 block
inline constexpr int kQK_K = 256;  // values per K-quant / IQ super-block

// Q8_0 (id 8): x[i] = f16(d) * qs[i].
struct BlockQ8_0 {
  uint16_t d;           // f16 scale
  int8_t qs[kQK8_0];    // [32] quants
};
static_assert(sizeof(BlockQ8_0) == 34 && offsetof(BlockQ8_0, qs) == 2);

// Q2_K (id 10): 16 sub-blocks of 16; x[e] = f16(d)*(scales[j]&15)*q_e - f16(dmin)*(scales[j]>>4).
struct BlockQ2_K {
  uint8_t scales[kQK_K / 16];  // [16] low nibble scale, high nibble min, one per 16-value sub-block
  uint8_t qs[kQK_K / 4];       // [64] 2-bit quants; byte 32h+k holds elements 128h+k+32l in bits 2l..2l+1
  uint16_t d;                  // f16 super-scale of the scales
  uint16_t dmin;               // f16 super-scale of the mins
};
static_assert(sizeof(BlockQ2_K) == 84 && offsetof(BlockQ2_K, qs) == 16 && offsetof(BlockQ2_K, d) == 80);

// Q4_K (id 12): 8 sub-blocks of 32 with 6-bit scales/mins; x[e] = f16(d)*sc_j*q_e - f16(dmin)*m_j.
struct BlockQ4_K {
  uint16_t d;                  // f16
  uint16_t dmin;               // f16
  uint8_t scales[12];          // eight 6-bit scales + eight 6-bit mins, packed (q4k_scale_min)
  uint8_t qs[kQK_K / 2];       // [128] byte 32c+l: low nibble element 64c+l, high nibble 64c+32+l
};
static_assert(sizeof(BlockQ4_K) == 144 && offsetof(BlockQ4_K, scales) == 4 && offsetof(BlockQ4_K, qs) == 16);

// IQ2_XXS (id 16): 8 groups of 32; group g = u32 pair (qs[4g..4g+1], qs[4g+2..4g+3]) read as
// w0 = four grid indices (one byte per 8-value chunk), w1 = four 7-bit sign indices | 4-bit scale << 28.
struct BlockIQ2_XXS {
  uint16_t d;                  // f16
  uint16_t qs[kQK_K / 8];      // [32] little-endian u16 = 16 u32 words
};
static_assert(sizeof(BlockIQ2_XXS) == 66);

// Q8_K (id 15, activations only): x[i] = d * qs[i]; bsums[k] = Σ qs[16k..16k+15].
struct BlockQ8_K {
  float d;                     // f32 scale (negative when the block's largest-|x| value is positive)
  int8_t qs[kQK_K];            // [256]
  int16_t bsums[kQK_K / 16];   // [16]
};
static_assert(sizeof(BlockQ8_K) == 292);

// ds4's Q8_0 activation block (not a ggml type): the scale stays float32 (amax/127, never rounded
// to f16) so the Q8_0 matvec numerics match ds4's dot_q8_0_row. x[i] = d * qs[i].
struct BlockQ8_0Act {
  float d;                     // f32 scale = amax / 127
  int8_t qs[kQK8_0];           // [32]
};
static_assert(sizeof(BlockQ8_0Act) == 36);

// Q4_K 6-bit (scale, min) of sub-block j (0..7) from the packed 12 bytes (FORMATS.md §2.5).
inline void q4k_scale_min(int j, const uint8_t* s, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
  }
}

// Inverse of q4k_scale_min: packs eight 6-bit scales and mins (each <= 63) into 12 bytes.
inline void q4k_pack_scale_min(const uint8_t sc[8], const uint8_t m[8], uint8_t out[12]) {
  for (int j = 0; j < 12; ++j) out[j] = 0;
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      out[j] |= sc[j] & 63;
      out[j + 4] |= m[j] & 63;
    } else {
      out[j + 4] = static_cast<uint8_t>((sc[j] & 15) | ((m[j] & 15) << 4));
      out[j - 4] |= static_cast<uint8_t>((sc[j] >> 4) << 6);
      out[j] |= static_cast<uint8_t>((m[j] >> 4) << 6);
    }
  }
}

}  // namespace ds4
