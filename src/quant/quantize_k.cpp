// quantize_k.cpp — Q2_K and Q4_K block encoders (FORMATS.md §2.8).
//
// Both follow the same plan: fit a (scale, min) per sub-block, quantize those to 4 bits (Q2_K) or
// 6 bits (Q4_K) against the f16 super-scales d/dmin, then re-quantize every value with the *stored*
// (f16-rounded, integer-scaled) parameters so the decoder reproduces what the search measured.
// Without importance weights this is quants.c's reference path; with them, its weighted path.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "quant/half.h"
#include "quant/quant_math.h"
#include "quant/quantize.h"

namespace ds4 {

using quant_detail::clamp_int;
using quant_detail::fit_positive_scale;
using quant_detail::fit_scale_min;
using quant_detail::kInputClamp;
using quant_detail::max_f;
using quant_detail::min_f;
using quant_detail::nearest_int;
using quant_detail::ScaleSearch;

namespace {

// f16 of a non-negative super-scale, saturating at the largest finite f16.
uint16_t scale_to_f16(float v) { return f32_to_f16(min_f(v, kF16Max)); }

void clamp_input(const float* x, float* out) {
  for (int i = 0; i < kQK_K; ++i) out[i] = min_f(max_f(x[i], -kInputClamp), kInputClamp);
}

// Per-sub-block (scale, min) as small integers against super-scales; fills ls/lm and the f16 bits.
struct SuperScales {
  uint16_t d = 0, dmin = 0;
};

// Plain path: super-scale = max / levels, each sub-block value rounded against it.
SuperScales quantize_scales_max(int n_sub, int levels, const float* scales, const float* mins, uint8_t* ls,
                                uint8_t* lm) {
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < n_sub; ++j) {
    max_scale = max_f(max_scale, scales[j]);
    max_min = max_f(max_min, mins[j]);
  }
  SuperScales s;
  s.d = max_scale > 0 ? scale_to_f16(max_scale / static_cast<float>(levels)) : 0;
  s.dmin = max_min > 0 ? scale_to_f16(max_min / static_cast<float>(levels)) : 0;
  // Round against the unrounded super-scale (as quants.c does); clamp covers f16 saturation.
  const float inv_s = max_scale > 0 ? static_cast<float>(levels) / max_scale : 0;
  const float inv_m = max_min > 0 ? static_cast<float>(levels) / max_min : 0;
  for (int j = 0; j < n_sub; ++j) {
    ls[j] = static_cast<uint8_t>(clamp_int(nearest_int(inv_s * scales[j]), 0, levels));
    lm[j] = static_cast<uint8_t>(clamp_int(nearest_int(inv_m * mins[j]), 0, levels));
  }
  return s;
}

// Weighted path: the sub-block scales and mins are themselves quantized with a weighted LS fit.
SuperScales quantize_scales_weighted(int n_sub, int levels, const float* scales, const float* mins,
                                     const float* sub_weight, uint8_t* ls, uint8_t* lm) {
  SuperScales s;
  s.d = scale_to_f16(fit_positive_scale(n_sub, levels, scales, ls, sub_weight));
  s.dmin = scale_to_f16(fit_positive_scale(n_sub, levels, mins, lm, sub_weight));
  return s;
}

// Re-quantizes x[sub_len] with the stored parameters: q = nearest((x + dmin*m) / (d*sc)).
void requantize(const float* x, int sub_len, int nmax, float d, float dmin, uint8_t sc, uint8_t m, uint8_t* q) {
  const float D = d * static_cast<float>(sc);
  if (D == 0) {
    std::memset(q, 0, static_cast<size_t>(sub_len));
    return;
  }
  const float M = dmin * static_cast<float>(m);
  for (int i = 0; i < sub_len; ++i) q[i] = static_cast<uint8_t>(clamp_int(nearest_int((x[i] + M) / D), 0, nmax));
}

// The shared body of Q2_K and Q4_K: fits each sub-block of x[kQK_K] (sub_len elements, levels
// 0..nmax, per-element weights w[kQK_K]) to a scale and a min, quantizes those to the super-block's
// 4-/6-bit scales (ls, lm in 0..scale_levels) and re-quantizes every element against the stored
// scales into L[kQK_K]. Only the weights and the search grid differ between the two formats.
SuperScales fit_super_block(const float* x, const float* w, int sub_len, int nmax, int scale_levels, bool weighted,
                            const ScaleSearch& search, uint8_t* L, uint8_t* ls, uint8_t* lm) {
  constexpr int kMaxSub = 16;  // Q2_K: 16 sub-blocks of 16; Q4_K: 8 of 32
  const int n_sub = kQK_K / sub_len;
  float scales[kMaxSub], mins[kMaxSub], sub_weight[kMaxSub];
  uint8_t laux[kQK_K / kMaxSub * 2];
  for (int j = 0; j < n_sub; ++j) {
    const float* ws = w + sub_len * j;
    float sw = 0;
    for (int i = 0; i < sub_len; ++i) sw += ws[i];
    sub_weight[j] = sw;
    scales[j] = fit_scale_min(sub_len, nmax, x + sub_len * j, ws, L + sub_len * j, &mins[j], laux, search);
  }
  const SuperScales s = weighted ? quantize_scales_weighted(n_sub, scale_levels, scales, mins, sub_weight, ls, lm)
                                 : quantize_scales_max(n_sub, scale_levels, scales, mins, ls, lm);
  const float d = f16_to_f32(s.d), dmin = f16_to_f32(s.dmin);
  for (int j = 0; j < n_sub; ++j) requantize(x + sub_len * j, sub_len, nmax, d, dmin, ls[j], lm[j], L + sub_len * j);
  return s;
}

}  // namespace

void quantize_block_q2_K(const float* xin, BlockQ2_K* y, const float* importance, QuantEffort effort) {
  constexpr int kSub = 16, kN = kQK_K / kSub;
  float x[kQK_K];
  clamp_input(xin, x);
  uint8_t L[kQK_K], ls[kN], lm[kN];
  float weight[kQK_K];

  const bool fast = effort == QuantEffort::fast;
  const bool weighted = quant_detail::has_importance(importance, kQK_K) && !fast;
  float sigma2 = 0;
  for (int i = 0; i < kQK_K; ++i) sigma2 += x[i] * x[i];
  sigma2 /= kQK_K;
  for (int i = 0; i < kQK_K; ++i) weight[i] = weighted ? importance[i] * std::sqrt(sigma2 + x[i] * x[i]) : std::fabs(x[i]);
  const ScaleSearch search = fast ? ScaleSearch{0, 0, 0, false}
                             : weighted ? ScaleSearch{-0.9f, 0.05f, 36, false}
                                        : ScaleSearch{-0.5f, 0.1f, 15, true};
  const SuperScales s = fit_super_block(x, weight, kSub, 3, 15, weighted, search, L, ls, lm);
  y->d = s.d;
  y->dmin = s.dmin;
  for (int j = 0; j < kN; ++j) y->scales[j] = static_cast<uint8_t>(ls[j] | (lm[j] << 4));
  // Byte 32h+k carries elements 128h+k+32l in bit pair l.
  for (int h = 0; h < 2; ++h)
    for (int k = 0; k < 32; ++k) {
      const uint8_t* q = L + 128 * h + k;
      y->qs[32 * h + k] = static_cast<uint8_t>(q[0] | (q[32] << 2) | (q[64] << 4) | (q[96] << 6));
    }
}

void quantize_block_q4_K(const float* xin, BlockQ4_K* y, const float* importance, QuantEffort effort) {
  constexpr int kSub = 32, kN = kQK_K / kSub;
  float x[kQK_K];
  clamp_input(xin, x);
  uint8_t L[kQK_K], ls[kN], lm[kN];
  float weight[kQK_K];

  const bool fast = effort == QuantEffort::fast;
  const bool weighted = quant_detail::has_importance(importance, kQK_K) && !fast;
  float sum_x2 = 0;
  for (int i = 0; i < kQK_K; ++i) sum_x2 += x[i] * x[i];
  const float sigma2 = 2 * sum_x2 / kQK_K;
  for (int j = 0; j < kN; ++j) {
    const float* xs = x + kSub * j;
    float sub_x2 = 0;
    for (int i = 0; i < kSub; ++i) sub_x2 += xs[i] * xs[i];
    const float av_x = std::sqrt(sub_x2 / kSub);
    for (int i = 0; i < kSub; ++i)
      weight[kSub * j + i] = weighted ? importance[kSub * j + i] * std::sqrt(sigma2 + xs[i] * xs[i]) : av_x + std::fabs(xs[i]);
  }
  const ScaleSearch search = fast ? ScaleSearch{0, 0, 0, false}
                             : weighted ? ScaleSearch{-0.9f, 0.05f, 36, false}
                                        : ScaleSearch{-1.0f, 0.1f, 20, false};
  const SuperScales s = fit_super_block(x, weight, kSub, 15, 63, weighted, search, L, ls, lm);
  y->d = s.d;
  y->dmin = s.dmin;
  q4k_pack_scale_min(ls, lm, y->scales);
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) y->qs[32 * c + l] = static_cast<uint8_t>(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
}

}  // namespace ds4
