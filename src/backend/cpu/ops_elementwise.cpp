// ops_elementwise.cpp — row-wise ops: RMSNorm, tail RoPE, FP8/FP4 round trips, f16 rounding, greedy argmax.
#include <algorithm>
#include <cmath>

#include "backend/argmax_row.h"
#include "backend/by_pieces.h"
#include "backend/cpu/cpu_impl.h"
#include "backend/cpu/primitives.h"

namespace ds4::backend::cpu {

void CpuBackend::rms_norm(const RmsNormArgs& a) {
  // x, y: [rows][stride]; each row's first `dim` values are normalized.
  pool_.parallel_for(a.rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) rms_norm_row(a.x + r * a.stride, a.w, a.y + r * a.stride, a.dim, a.eps);
  }, a.dim);
}

void CpuBackend::rope(const RopeArgs& a) {
  // x: [n][heads][head_dim]; pair i of the tail is (x[hd−R+2i], x[hd−R+2i+1]), angle pos·ω_i.
  // The angle is formed in double and reduced before cos/sin (MODEL.md §5.3 recommendation).
  const int half = a.n_rot / 2;
  pool_.parallel_for(a.n, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const double p = static_cast<double>(a.pos[t]);
      for (int i = 0; i < half; ++i) {
        const double theta = std::fmod(p * a.freq[i], 2.0 * M_PI);
        const float c = static_cast<float>(std::cos(theta));
        const float s = static_cast<float>(a.inverse ? -std::sin(theta) : std::sin(theta));
        for (int h = 0; h < a.heads; ++h) {
          float* v = a.x + (t * a.heads + h) * a.head_dim + (a.head_dim - a.n_rot) + 2 * i;
          const float x0 = v[0], x1 = v[1];
          v[0] = x0 * c - x1 * s;
          v[1] = x0 * s + x1 * c;
        }
      }
    }
  }, a.heads * a.n_rot * 4);
}

void CpuBackend::fp8_round(const Fp8RoundArgs& a) {
  // x: [rows][stride]; dims [0, n_quant) in blocks of 64; the RoPE tail is untouched.
  pool_.parallel_for(a.rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      for (int b = 0; b + 64 <= a.n_quant; b += 64) fp8_round_block(a.x + r * a.stride + b, 64);
  }, a.n_quant * 8);
}

void CpuBackend::indexer_qat(const IndexerQatArgs& a) {
  if (a.n_rot > 0) {  // the RoPE first (by_pieces.h)
    indexer_qat_by_pieces(*this, a);
    return;
  }
  // x: [rows][dim] (or rows at x_at, the first *count of them); Hadamard over the whole row, then FP4
  // blocks of 32, then (f16) half rounding.
  const int64_t rows = a.count ? std::min<int64_t>(a.rows, *a.count) : a.rows;
  pool_.parallel_for(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float* x = a.x_at ? a.x_at[r] : a.x + r * a.dim;
      hadamard_scaled(x, a.dim);
      for (int b = 0; b < a.dim; b += 32) fp4_round_block(x + b, 32);
      if (a.f16)
        for (int i = 0; i < a.dim; ++i) x[i] = round_f16(x[i]);
    }
  }, a.dim * 16);
}

void CpuBackend::f16_round(float* x, int64_t count) {
  for (int64_t i = 0; i < count; ++i) x[i] = round_f16(x[i]);
}

void CpuBackend::norm_rope(const NormRopeArgs& a) { norm_rope_by_pieces(*this, a); }

void CpuBackend::argmax(const ArgmaxArgs& a) {
  // x: [rows][n] → out [rows]; the host scan itself (argmax_row.h), so the CPU op is the reference.
  for (int64_t r = 0; r < a.rows; ++r) a.out[r] = argmax_row(a.x + r * a.n, a.n, a.excluded);
}

}  // namespace ds4::backend::cpu
