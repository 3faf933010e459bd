// dot_avx2.cpp — AVX2/FMA/F16C dot kernels of dot.h, selected at run time (never -march=native).
//
// Quantized kernels compute each block's integer sums exactly with SIMD and then apply the block's
// float scales in exactly the reference order (dot_ref.cpp), so their results are bit-identical to
// the reference. F16/BF16 kernels use float FMA accumulators, F32 double ones like its reference
// (results differ from the sequential references by summation-order rounding only; bounds in dot.h).
#include "quant/dot.h"

#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>

#include <cstring>

#include "quant/half.h"
#include "quant/iq2xxs_tables.h"

#define DS4_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace ds4 {

namespace {

DS4_AVX2 inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// Σ of 32 int8 products w·x as 8 int32 lanes, exact for every pair of int8 values: both sides are
// sign-extended to int16 (the maddubs |w|·sign(x,w) shortcut would be wrong for x = w = -128).
DS4_AVX2 inline __m256i dot_i8x32(const void* w, const void* x) {
  const auto* w8 = static_cast<const __m128i*>(w);
  const auto* x8 = static_cast<const __m128i*>(x);
  const __m256i lo = _mm256_madd_epi16(_mm256_cvtepi8_epi16(_mm_loadu_si128(w8)), _mm256_cvtepi8_epi16(_mm_loadu_si128(x8)));
  const __m256i hi =
      _mm256_madd_epi16(_mm256_cvtepi8_epi16(_mm_loadu_si128(w8 + 1)), _mm256_cvtepi8_epi16(_mm_loadu_si128(x8 + 1)));
  return _mm256_add_epi32(lo, hi);
}

// Horizontal sums of four 8-lane int32 vectors -> [Σa, Σb, Σc, Σd].
DS4_AVX2 inline __m128i hsum4_i32(__m256i a, __m256i b, __m256i c, __m256i d) {
  const __m256i ab = _mm256_hadd_epi32(a, b);  // a01 a23 b01 b23 | a45 a67 b45 b67
  const __m256i cd = _mm256_hadd_epi32(c, d);
  const __m256i abcd = _mm256_hadd_epi32(ab, cd);  // a0123 b0123 c0123 d0123 | a4567 ...
  return _mm_add_epi32(_mm256_castsi256_si128(abcd), _mm256_extracti128_si256(abcd, 1));
}

DS4_AVX2 inline int32_t hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}

DS4_AVX2 inline float hsum_ps(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// 8 bf16 -> 8 floats (bf16 is the high half of a float).
DS4_AVX2 inline __m256 widen_bf16(__m128i h) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

// f16 -> f32 with F16C: the same value as half.h's f16_to_f32 for every non-NaN input (NaNs stay
// NaN), without its branches.
DS4_AVX2 inline float f16_hw(uint16_t h) { return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h))); }

uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

}  // namespace

DS4_AVX2 float dot_q8_0_avx2(const void* w, const void* act, int64_t n) {
  const auto* row = static_cast<const uint8_t*>(w);
  const auto* x = static_cast<const BlockQ8_0Act*>(act);
  const int64_t nb = n / kQK8_0;
  float acc = 0;
  int64_t b = 0;
  for (; b + 4 <= nb; b += 4) {
    __m256i s[4];
    for (int k = 0; k < 4; ++k) s[k] = dot_i8x32(row + (b + k) * 34 + 2, x[b + k].qs);
    // Per block (f16(d_w) * d_x) * isum, four at a time (F16C decodes f16 exactly), then added to
    // the running sum one block at a time in the reference order.
    const __m128 wd = _mm_cvtph_ps(_mm_setr_epi16(static_cast<int16_t>(load_u16(row + b * 34)),
                                                  static_cast<int16_t>(load_u16(row + (b + 1) * 34)),
                                                  static_cast<int16_t>(load_u16(row + (b + 2) * 34)),
                                                  static_cast<int16_t>(load_u16(row + (b + 3) * 34)), 0, 0, 0, 0));
    const __m128 xd = _mm_setr_ps(x[b].d, x[b + 1].d, x[b + 2].d, x[b + 3].d);
    const __m128 terms = _mm_mul_ps(_mm_mul_ps(wd, xd), _mm_cvtepi32_ps(hsum4_i32(s[0], s[1], s[2], s[3])));
    alignas(16) float t[4];
    _mm_store_ps(t, terms);
    acc += t[0];
    acc += t[1];
    acc += t[2];
    acc += t[3];
  }
  for (; b < nb; ++b) {
    const uint8_t* blk = row + b * 34;
    const int32_t isum = hsum_i32(dot_i8x32(blk + 2, x[b].qs));
    acc += f16_hw(load_u16(blk)) * x[b].d * static_cast<float>(isum);
  }
  return acc;
}

DS4_AVX2 float dot_q2_K_avx2(const void* w, const void* act, int64_t n) {
  const auto* row = static_cast<const uint8_t*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(act);
  const __m256i m3 = _mm256_set1_epi8(3);
  float sumf = 0;
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const uint8_t* blk = row + b * 84;
    const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk));
    // mins: Σ_j bsums[j] * (scales[j] >> 4)
    const __m256i mins16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc8, 4), _mm_set1_epi8(15)));
    const __m256i bsums = load256(y[b].bsums);
    const int summs = hsum_i32(_mm256_madd_epi16(mins16, bsums));
    // scales as bytes in both 128-bit lanes, picked per sub-block pair with a shuffle.
    const __m256i sc_both = _mm256_broadcastsi128_si256(_mm_and_si128(sc8, _mm_set1_epi8(15)));
    __m256i acc = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m256i q2 = load256(blk + 16 + 32 * h);
      for (int l = 0; l < 4; ++l) {
        const int j0 = 8 * h + 2 * l;  // elements 128h+32l .. +15 -> sub-block j0, next 16 -> j0+1
        const __m256i q = _mm256_and_si256(_mm256_srli_epi16(q2, 2 * l), m3);
        const __m256i p16 = _mm256_maddubs_epi16(q, load256(y[b].qs + 128 * h + 32 * l));
        const __m256i ctrl = _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>(0x8000 | (j0 + 1))),
                                              _mm_set1_epi16(static_cast<int16_t>(0x8000 | j0)));
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p16, _mm256_shuffle_epi8(sc_both, ctrl)));
      }
    }
    const int isum = hsum_i32(acc);
    const float dall = y[b].d * f16_hw(load_u16(blk + 80));
    const float dmin = y[b].d * f16_hw(load_u16(blk + 82));
    sumf += dall * static_cast<float>(isum) - dmin * static_cast<float>(summs);
  }
  return sumf;
}

DS4_AVX2 float dot_q4_K_avx2(const void* w, const void* act, int64_t n) {
  const auto* row = static_cast<const uint8_t*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(act);
  const __m256i m4 = _mm256_set1_epi8(15);
  float sumf = 0;
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const uint8_t* blk = row + b * 144;
    uint8_t sc[8], m[8];
    for (int j = 0; j < 8; ++j) q4k_scale_min(j, blk + 4, &sc[j], &m[j]);
    // mins: Σ_j m_j * (bsums[2j] + bsums[2j+1]) — madd of bsums with each min repeated twice.
    const __m256i mins16 = _mm256_setr_epi16(m[0], m[0], m[1], m[1], m[2], m[2], m[3], m[3], m[4], m[4], m[5], m[5],
                                             m[6], m[6], m[7], m[7]);
    const int summs = hsum_i32(_mm256_madd_epi16(mins16, load256(y[b].bsums)));
    __m256i acc = _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) {
      const __m256i q4 = load256(blk + 16 + 32 * c);
      const __m256i lo = _mm256_and_si256(q4, m4);
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q4, 4), m4);
      const __m256i plo = _mm256_maddubs_epi16(lo, load256(y[b].qs + 64 * c));
      const __m256i phi = _mm256_maddubs_epi16(hi, load256(y[b].qs + 64 * c + 32));
      acc = _mm256_add_epi32(acc, _mm256_madd_epi16(plo, _mm256_set1_epi16(sc[2 * c])));
      acc = _mm256_add_epi32(acc, _mm256_madd_epi16(phi, _mm256_set1_epi16(sc[2 * c + 1])));
    }
    const int isum = hsum_i32(acc);
    const float dall = y[b].d * f16_hw(load_u16(blk));
    const float dmin = y[b].d * f16_hw(load_u16(blk + 2));
    sumf += dall * static_cast<float>(isum) - dmin * static_cast<float>(summs);
  }
  return sumf;
}

// ksigns expanded to one byte per element: 0xff where the element is negative, 0x00 otherwise.
constexpr auto kSignMask = [] {
  struct T {
    uint64_t v[128];
  } t{};
  for (int s = 0; s < 128; ++s)
    for (int i = 0; i < 8; ++i)
      if ((kKsignsIq2xs[s] >> i) & 1) t.v[s] |= uint64_t{0xff} << (8 * i);
  return t;
}();

DS4_AVX2 float dot_iq2_xxs_avx2(const void* w, const void* act, int64_t n) {
  const auto* row = static_cast<const uint8_t*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(act);
  float sumf = 0;
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const uint8_t* blk = row + b * 66;
    __m256i acc = _mm256_setzero_si256();
    for (int g = 0; g < 8; ++g) {
      uint32_t aux[2];
      std::memcpy(aux, blk + 2 + 8 * g, 8);
      const __m256i grid = _mm256_setr_epi64x(
          static_cast<int64_t>(kIq2xxsGrid[aux[0] & 0xff]), static_cast<int64_t>(kIq2xxsGrid[(aux[0] >> 8) & 0xff]),
          static_cast<int64_t>(kIq2xxsGrid[(aux[0] >> 16) & 0xff]), static_cast<int64_t>(kIq2xxsGrid[aux[0] >> 24]));
      const __m256i neg = _mm256_setr_epi64x(static_cast<int64_t>(kSignMask.v[aux[1] & 127]),
                                             static_cast<int64_t>(kSignMask.v[(aux[1] >> 7) & 127]),
                                             static_cast<int64_t>(kSignMask.v[(aux[1] >> 14) & 127]),
                                             static_cast<int64_t>(kSignMask.v[(aux[1] >> 21) & 127]));
      // The grid bytes (8/25/43) are the unsigned side of maddubs; the signs are applied by
      // splitting them into the positive and the negative elements (|pair sums| <= 2*43*128, so
      // the int16 difference is exact even for activation quants of -128).
      const __m256i q8 = load256(y[b].qs + 32 * g);
      const __m256i p16 = _mm256_sub_epi16(_mm256_maddubs_epi16(_mm256_andnot_si256(neg, grid), q8),
                                           _mm256_maddubs_epi16(_mm256_and_si256(neg, grid), q8));
      const int16_t ls = static_cast<int16_t>(2 * (aux[1] >> 28) + 1);
      acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p16, _mm256_set1_epi16(ls)));
    }
    const float d = f16_hw(load_u16(blk)) * y[b].d;
    sumf += d * static_cast<float>(hsum_i32(acc));
  }
  return 0.125f * sumf;
}

DS4_AVX2 float dot_f16_avx2(const void* w, const void* act, int64_t n) {
  const auto* row = static_cast<const uint8_t*>(w);
  const auto* x = static_cast<const float*>(act);
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256i h01 = load256(row + 2 * i), h23 = load256(row + 2 * i + 32);
    a0 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm256_castsi256_si128(h01)), _mm256_loadu_ps(x + i), a0);
    a1 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm256_extracti128_si256(h01, 1)), _mm256_loadu_ps(x + i + 8), a1);
    a2 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm256_castsi256_si128(h23)), _mm256_loadu_ps(x + i + 16), a2);
    a3 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm256_extracti128_si256(h23, 1)), _mm256_loadu_ps(x + i + 24), a3);
  }
  for (; i + 8 <= n; i += 8)
    a0 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * i))),
                         _mm256_loadu_ps(x + i), a0);
  float acc = hsum_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  for (; i < n; ++i) acc += f16_hw(load_u16(row + 2 * i)) * x[i];
  return acc;
}

DS4_AVX2 float dot_bf16_avx2(const void* w, const void* act, int64_t n) {
  const auto* row = static_cast<const uint8_t*>(w);
  const auto* x = static_cast<const float*>(act);
  __m256 a0 = _mm256_setzero_ps(), a1 = a0;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = load256(row + 2 * i);
    a0 = _mm256_fmadd_ps(widen_bf16(_mm256_castsi256_si128(h)), _mm256_loadu_ps(x + i), a0);
    a1 = _mm256_fmadd_ps(widen_bf16(_mm256_extracti128_si256(h, 1)), _mm256_loadu_ps(x + i + 8), a1);
  }
  float acc = hsum_ps(_mm256_add_ps(a0, a1));
  for (; i < n; ++i) acc += bf16_to_f32(load_u16(row + 2 * i)) * x[i];
  return acc;
}

DS4_AVX2 float dot_f32_avx2(const void* w, const void* act, int64_t n) {
  // Double accumulation like the reference (ds4's matvec_f32): float products are exact in double,
  // so this differs from the sequential double sum only by double rounding before the final cast.
  const auto* row = static_cast<const float*>(w);  // only read through unaligned loads / memcpy
  const auto* x = static_cast<const float*>(act);
  __m256d a0 = _mm256_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 w0 = _mm256_loadu_ps(row + i), w1 = _mm256_loadu_ps(row + i + 8);
    const __m256 x0 = _mm256_loadu_ps(x + i), x1 = _mm256_loadu_ps(x + i + 8);
    a0 = _mm256_fmadd_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(w0)), _mm256_cvtps_pd(_mm256_castps256_ps128(x0)), a0);
    a1 = _mm256_fmadd_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(w0, 1)), _mm256_cvtps_pd(_mm256_extractf128_ps(x0, 1)), a1);
    a2 = _mm256_fmadd_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(w1)), _mm256_cvtps_pd(_mm256_castps256_ps128(x1)), a2);
    a3 = _mm256_fmadd_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(w1, 1)), _mm256_cvtps_pd(_mm256_extractf128_ps(x1, 1)), a3);
  }
  const __m256d s = _mm256_add_pd(_mm256_add_pd(a0, a1), _mm256_add_pd(a2, a3));
  const __m128d h = _mm_add_pd(_mm256_castpd256_pd128(s), _mm256_extractf128_pd(s, 1));
  double acc = _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
  for (; i < n; ++i) {
    float v;
    std::memcpy(&v, row + i, 4);
    acc += static_cast<double>(v) * x[i];
  }
  return static_cast<float>(acc);
}

}  // namespace ds4

#endif  // x86
