// dot_ref.cpp — scalar reference dot products of dot.h, written to reproduce the arithmetic of
// ds4's scalar CPU kernels operation for operation (that is what "matches ds4" means here): the
// same integer block sums, then the same float operations in the same order.
#include <cstring>

#include "quant/dot.h"
#include "quant/half.h"
#include "quant/iq2xxs_tables.h"

namespace ds4 {

namespace {
template <typename B>
B load(const void* base, int64_t i) {
  B b;
  std::memcpy(&b, static_cast<const uint8_t*>(base) + i * static_cast<int64_t>(sizeof(B)), sizeof(B));
  return b;
}
}  // namespace

float dot_q8_0_ref(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ8_0Act*>(act);
  float acc = 0;
  for (int64_t b = 0; b < n / kQK8_0; ++b) {
    const BlockQ8_0 wb = load<BlockQ8_0>(w, b);
    int32_t isum = 0;
    for (int i = 0; i < kQK8_0; ++i) isum += static_cast<int32_t>(wb.qs[i]) * x[b].qs[i];
    acc += f16_to_f32(wb.d) * x[b].d * static_cast<float>(isum);
  }
  return acc;
}

float dot_q2_K_ref(const void* w, const void* act, int64_t n) {
  const auto* y = static_cast<const BlockQ8_K*>(act);
  float sumf = 0;
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockQ2_K x = load<BlockQ2_K>(w, b);
    int summs = 0;
    for (int j = 0; j < 16; ++j) summs += y[b].bsums[j] * (x.scales[j] >> 4);
    // Sub-block j = 8h + 2l + half covers elements 128h + 32l + 16half + k (k < 16), whose quants
    // are bit pair l of bytes qs[32h + 16half + k].
    int isum = 0;
    for (int h = 0; h < 2; ++h)
      for (int l = 0; l < 4; ++l)
        for (int half = 0; half < 2; ++half) {
          const uint8_t* q2 = x.qs + 32 * h + 16 * half;
          const int8_t* q8 = y[b].qs + 128 * h + 32 * l + 16 * half;
          int sub = 0;
          for (int k = 0; k < 16; ++k) sub += ((q2[k] >> (2 * l)) & 3) * q8[k];
          isum += (x.scales[8 * h + 2 * l + half] & 15) * sub;
        }
    const float dall = y[b].d * f16_to_f32(x.d);
    const float dmin = y[b].d * f16_to_f32(x.dmin);
    sumf += dall * static_cast<float>(isum) - dmin * static_cast<float>(summs);
  }
  return sumf;
}

float dot_q4_K_ref(const void* w, const void* act, int64_t n) {
  // ds4 has no CPU Q4_K kernel; this is the Q2_K scheme with Q4_K's 32-value sub-blocks.
  const auto* y = static_cast<const BlockQ8_K*>(act);
  float sumf = 0;
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockQ4_K x = load<BlockQ4_K>(w, b);
    int isum = 0, summs = 0;
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      q4k_scale_min(j, x.scales, &sc, &m);
      summs += m * (y[b].bsums[2 * j] + y[b].bsums[2 * j + 1]);
      const int c = j / 2, hi = j % 2;
      int sub = 0;
      for (int l = 0; l < 32; ++l) {
        const int q = hi ? x.qs[32 * c + l] >> 4 : x.qs[32 * c + l] & 15;
        sub += q * y[b].qs[64 * c + 32 * hi + l];
      }
      isum += sc * sub;
    }
    const float dall = y[b].d * f16_to_f32(x.d);
    const float dmin = y[b].d * f16_to_f32(x.dmin);
    sumf += dall * static_cast<float>(isum) - dmin * static_cast<float>(summs);
  }
  return sumf;
}

float dot_iq2_xxs_ref(const void* w, const void* act, int64_t n) {
  const auto* y = static_cast<const BlockQ8_K*>(act);
  float sumf = 0;
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockIQ2_XXS x = load<BlockIQ2_XXS>(w, b);
    const float d = f16_to_f32(x.d) * y[b].d;
    int32_t bsum = 0;
    for (int g = 0; g < 8; ++g) {
      uint32_t aux[2];
      std::memcpy(aux, &x.qs[4 * g], sizeof(aux));
      const int32_t ls = 2 * static_cast<int32_t>(aux[1] >> 28) + 1;
      int32_t sumi = 0;
      for (int c = 0; c < 4; ++c) {
        const uint64_t grid = kIq2xxsGrid[(aux[0] >> (8 * c)) & 0xff];
        const uint8_t signs = kKsignsIq2xs[(aux[1] >> (7 * c)) & 127];
        for (int i = 0; i < 8; ++i) {
          const int32_t v = static_cast<int32_t>((grid >> (8 * i)) & 0xff);
          sumi += ((signs >> i) & 1 ? -v : v) * y[b].qs[32 * g + 8 * c + i];
        }
      }
      bsum += sumi * ls;
    }
    sumf += d * static_cast<float>(bsum);
  }
  return 0.125f * sumf;
}

namespace {
// F16 and BF16 rows: widen each 16-bit weight with `to_f32`, accumulate in float in element order.
template <float (*to_f32)(uint16_t)>
float dot_half_ref(const void* w, const void* act, int64_t n) {
  const auto* row = static_cast<const uint8_t*>(w);
  const auto* x = static_cast<const float*>(act);
  float acc = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, row + 2 * i, 2);
    acc += to_f32(h) * x[i];
  }
  return acc;
}
}  // namespace

float dot_f16_ref(const void* w, const void* act, int64_t n) { return dot_half_ref<f16_to_f32>(w, act, n); }

float dot_bf16_ref(const void* w, const void* act, int64_t n) { return dot_half_ref<bf16_to_f32>(w, act, n); }

float dot_f32_ref(const void* w, const void* act, int64_t n) {
  const auto* row = static_cast<const uint8_t*>(w);
  const auto* x = static_cast<const float*>(act);
  double acc = 0;  // ds4's matvec_f32 accumulates F32 weights in double
  for (int64_t i = 0; i < n; ++i) {
    float v;
    std::memcpy(&v, row + 4 * i, 4);
    acc += static_cast<double>(v) * x[i];
  }
  return static_cast<float>(acc);
}

}  // namespace ds4
