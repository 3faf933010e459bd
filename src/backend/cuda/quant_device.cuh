// quant_device.cuh — device decoders of the ggml weight blocks (FORMATS.md §2, src/quant/blocks.h)
// and the ds4 activation blocks, written to round exactly like src/quant/dequant.cpp and dot_ref.cpp
// (same float operations in the same order; the build has no multiply-add contraction).
//
// Included by ops_matmul.cu only: IQ2_XXS needs the __constant__ tables defined there (a CUDA
// __constant__ symbol belongs to one translation unit without relocatable device code).
// Rows of the odd-sized blocks (Q8_0: 34 bytes, IQ2_XXS: 66) are only 2-byte aligned, so 16-bit
// fields are read as u16 and wider words are assembled from u16 halves.
#pragma once

#include <cstdint>

#include "backend/cuda/common.cuh"
#include "quant/blocks.h"
#include "quant/types.h"

namespace ds4::backend::cuda {

__device__ inline uint16_t ld16(const uint8_t* p) { return *reinterpret_cast<const uint16_t*>(p); }
__device__ inline uint32_t ld32(const uint8_t* p) { return *reinterpret_cast<const uint32_t*>(p); }
__device__ inline uint32_t ld32_u16(const uint8_t* p) {  // 2-byte aligned 32-bit little-endian word
  return static_cast<uint32_t>(ld16(p)) | (static_cast<uint32_t>(ld16(p + 2)) << 16);
}

// blocks.h q4k_scale_min on the device.
__device__ inline void q4k_scale_min_dev(int j, const uint8_t* s, int* sc, int* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
    *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// Value e of a weight row of type T, as dequantize_row computes it.
template <GgmlType T>
__device__ inline float decode_elem(const uint8_t* row, int64_t e, const uint64_t* grid, const uint8_t* signs) {
  if constexpr (T == GgmlType::F32) {
    return reinterpret_cast<const float*>(row)[e];
  } else if constexpr (T == GgmlType::F16) {
    return f16_dev(ld16(row + 2 * e));
  } else if constexpr (T == GgmlType::BF16) {
    return bf16_dev(ld16(row + 2 * e));
  } else if constexpr (T == GgmlType::Q8_0) {
    const uint8_t* b = row + (e / kQK8_0) * sizeof(BlockQ8_0);
    return f16_dev(ld16(b)) * static_cast<float>(static_cast<int8_t>(b[2 + e % kQK8_0]));
  } else if constexpr (T == GgmlType::Q2_K) {
    const uint8_t* b = row + (e / kQK_K) * sizeof(BlockQ2_K);
    const int r = static_cast<int>(e % kQK_K), h = r / 128, l = (r % 128) / 32, k = r % 32;
    const int q = (b[16 + 32 * h + k] >> (2 * l)) & 3;
    const int s = b[r / 16];
    return f16_dev(ld16(b + 80)) * static_cast<float>(s & 15) * static_cast<float>(q) -
           f16_dev(ld16(b + 82)) * static_cast<float>(s >> 4);
  } else if constexpr (T == GgmlType::Q4_K) {
    const uint8_t* b = row + (e / kQK_K) * sizeof(BlockQ4_K);
    const int r = static_cast<int>(e % kQK_K), c = r / 64, rr = r % 64;
    const int q = rr < 32 ? (b[16 + 32 * c + rr] & 0x0f) : (b[16 + 32 * c + rr - 32] >> 4);
    int sc, m;
    q4k_scale_min_dev(rr < 32 ? 2 * c : 2 * c + 1, b + 4, &sc, &m);
    return f16_dev(ld16(b)) * static_cast<float>(sc) * static_cast<float>(q) -
           f16_dev(ld16(b + 2)) * static_cast<float>(m);
  } else {  // IQ2_XXS
    const uint8_t* b = row + (e / kQK_K) * sizeof(BlockIQ2_XXS);
    const int r = static_cast<int>(e % kQK_K), g = r / 32, c = (r % 32) / 8, i = r % 8;
    const uint32_t w0 = ld32_u16(b + 2 + 8 * g), w1 = ld32_u16(b + 6 + 8 * g);
    const float db = f16_dev(ld16(b)) * (0.5f + static_cast<float>(w1 >> 28)) * 0.25f;
    const uint64_t gr = grid[(w0 >> (8 * c)) & 0xff];
    const uint8_t sg = signs[(w1 >> (7 * c)) & 127];
    const float mag = static_cast<float>((gr >> (8 * i)) & 0xff);
    return db * mag * ((sg >> i) & 1 ? -1.0f : 1.0f);
  }
}

// ---- ds4 dot products of one weight block with one activation block (dot_ref.cpp order) ----

// Q8_0 weights · BlockQ8_0Act: f16(d_w)·d_x·Σ q_w q_x.
__device__ inline float dot_block_q8_0(const uint8_t* wb, const uint8_t* xb) {
  int isum = 0;
  const uint8_t* xq = xb + 4;
#pragma unroll
  for (int m = 0; m < 8; ++m) isum = __dp4a(static_cast<int>(ld32_u16(wb + 2 + 4 * m)), static_cast<int>(ld32(xq + 4 * m)), isum);
  return f16_dev(ld16(wb)) * *reinterpret_cast<const float*>(xb) * static_cast<float>(isum);
}

// Q8_K activation block fields: d (f32) at 0, qs[256] at 4, bsums[16] (i16) at 260.
__device__ inline float q8k_d(const uint8_t* y) { return *reinterpret_cast<const float*>(y); }
__device__ inline const uint8_t* q8k_qs(const uint8_t* y) { return y + 4; }
__device__ inline int q8k_bsum(const uint8_t* y, int k) { return reinterpret_cast<const int16_t*>(y + 260)[k]; }

// Integer pieces of the ds4 K-quant block dots (dot_ref.cpp's loops), shared by the whole-block dots below
// and the piecewise QDot<T> of qdot.cuh. Integer sums are exact in any grouping, so every caller's result is
// the same bits; only `*_finish` has float arithmetic, in dot_ref's order.
// Q2_K piece s = 8h + 2l + half (a 16-value sub-block): (scale nibble)·Σ q2·q8; its min term goes to summs.
__device__ inline int q2k_piece(const uint8_t* x, const uint8_t* y, int s, int& summs) {
  summs += q8k_bsum(y, s) * (x[s] >> 4);
  const int h = s / 8, l = (s % 8) / 2, half = s % 2;
  const uint8_t* q2 = x + 16 + 32 * h + 16 * half;
  const uint8_t* q8 = q8k_qs(y) + 128 * h + 32 * l + 16 * half;
  int sub = 0;
#pragma unroll
  for (int m = 0; m < 4; ++m)
    sub = __dp4a(static_cast<int>((ld32(q2 + 4 * m) >> (2 * l)) & 0x03030303u), static_cast<int>(ld32(q8 + 4 * m)), sub);
  return (x[s] & 15) * sub;
}
__device__ inline float q2k_finish(const uint8_t* x, const uint8_t* y, int isum, int summs) {
  const float dall = q8k_d(y) * f16_dev(ld16(x + 80));
  const float dmin = q8k_d(y) * f16_dev(ld16(x + 82));
  return dall * static_cast<float>(isum) - dmin * static_cast<float>(summs);
}

// Q4_K piece j (0..7, a 32-value sub-block with its 6-bit scale and min).
__device__ inline int q4k_piece(const uint8_t* x, const uint8_t* y, int j, int& summs) {
  int sc, m;
  q4k_scale_min_dev(j, x + 4, &sc, &m);
  summs += m * (q8k_bsum(y, 2 * j) + q8k_bsum(y, 2 * j + 1));
  const int c = j / 2, hi = j % 2;
  int sub = 0;
#pragma unroll
  for (int k = 0; k < 8; ++k)
    sub = __dp4a(static_cast<int>((ld32(x + 16 + 32 * c + 4 * k) >> (4 * hi)) & 0x0f0f0f0fu),
                 static_cast<int>(ld32(q8k_qs(y) + 64 * c + 32 * hi + 4 * k)), sub);
  return sc * sub;
}
__device__ inline float q4k_finish(const uint8_t* x, const uint8_t* y, int isum, int summs) {
  const float dall = q8k_d(y) * f16_dev(ld16(x));
  const float dmin = q8k_d(y) * f16_dev(ld16(x + 2));
  return dall * static_cast<float>(isum) - dmin * static_cast<float>(summs);
}

__device__ inline float dot_block_q2_K(const uint8_t* x, const uint8_t* y) {
  int isum = 0, summs = 0;
  for (int s = 0; s < 16; ++s) isum += q2k_piece(x, y, s, summs);
  return q2k_finish(x, y, isum, summs);
}

__device__ inline float dot_block_q4_K(const uint8_t* x, const uint8_t* y) {
  int isum = 0, summs = 0;
  for (int j = 0; j < 8; ++j) isum += q4k_piece(x, y, j, summs);
  return q4k_finish(x, y, isum, summs);
}

// Integer sum of 32-value group g (0..7) of an IQ2_XXS block against its Q8_K activations, times the
// group's scale 2·s+1 (exact in int; the block's d and the row's ·0.125 are applied by the caller).
__device__ inline int iq2_xxs_group_isum(const uint8_t* x, const uint8_t* y, int g, const uint64_t* grid,
                                         const uint8_t* signs) {
  const uint32_t a0 = ld32_u16(x + 2 + 8 * g), a1 = ld32_u16(x + 6 + 8 * g);
  const int ls = 2 * static_cast<int>(a1 >> 28) + 1;
  int sumi = 0;
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    const uint64_t gr = grid[(a0 >> (8 * c)) & 0xff];
    const uint32_t sg = signs[(a1 >> (7 * c)) & 127];
    uint32_t w[2] = {0, 0};
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      int v = static_cast<int>((gr >> (8 * i)) & 0xff);
      if ((sg >> i) & 1) v = -v;
      w[i / 4] |= (static_cast<uint32_t>(v) & 0xffu) << (8 * (i % 4));
    }
    const uint8_t* q8 = q8k_qs(y) + 32 * g + 8 * c;
    sumi = __dp4a(static_cast<int>(w[0]), static_cast<int>(ld32(q8)), sumi);
    sumi = __dp4a(static_cast<int>(w[1]), static_cast<int>(ld32(q8 + 4)), sumi);
  }
  return sumi * ls;
}

// Without the final ·0.125 (applied once per row, as dot_iq2_xxs_ref does).
__device__ inline float dot_block_iq2_xxs(const uint8_t* x, const uint8_t* y, const uint64_t* grid,
                                          const uint8_t* signs) {
  const float d = f16_dev(ld16(x)) * q8k_d(y);
  int bsum = 0;
  for (int g = 0; g < 8; ++g) bsum += iq2_xxs_group_isum(x, y, g, grid, signs);
  return d * static_cast<float>(bsum);
}

}  // namespace ds4::backend::cuda
