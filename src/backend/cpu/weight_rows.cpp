// weight_rows.cpp — see weight_rows.h.
#include "backend/cpu/weight_rows.h"

#include <cstring>

#include "quant/blocks.h"
#include "quant/dequant.h"
#include "quant/dot.h"
#include "quant/half.h"
#include "quant/quantize.h"

namespace ds4::backend::cpu {

void dequantize_weight_row(const Weight& w, int64_t row, float* out) {
  const uint8_t* src = static_cast<const uint8_t*>(w.data) + static_cast<uint64_t>(row) * w.row_bytes;
  switch (w.type) {
    case GgmlType::F32:
      std::memcpy(out, src, static_cast<size_t>(w.cols) * sizeof(float));
      return;
    case GgmlType::F16: {
      const uint16_t* h = reinterpret_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < w.cols; ++i) out[i] = f16_to_f32(h[i]);
      return;
    }
    default:
      // Types are validated when weights are bound; decoding itself cannot fail on data.
      (void)dequantize_row(w.type, src, out, w.cols);
      return;
  }
}

ActKind act_kind(GgmlType t, MatmulNumerics numerics) {
  if (numerics == MatmulNumerics::exact) return ActKind::f32;
  switch (t) {
    case GgmlType::Q8_0:
      return ActKind::q8_0;
    case GgmlType::Q2_K:
    case GgmlType::Q4_K:
    case GgmlType::IQ2_XXS:
      return ActKind::q8_k;
    default:
      return ActKind::f32;
  }
}

uint64_t act_row_bytes(ActKind k, int64_t cols) {
  switch (k) {
    case ActKind::q8_0:
      return static_cast<uint64_t>(cols / kQK8_0) * sizeof(BlockQ8_0Act);
    case ActKind::q8_k:
      return static_cast<uint64_t>(cols / kQK_K) * sizeof(BlockQ8_K);
    default:
      return 0;
  }
}

void prepare_act_row(ActKind k, const float* x, int64_t cols, uint8_t* out) {
  if (k == ActKind::q8_0) quantize_act_q8_0(x, reinterpret_cast<BlockQ8_0Act*>(out), cols);
  if (k == ActKind::q8_k) quantize_act_q8_K(x, reinterpret_cast<BlockQ8_K*>(out), cols);
}

bool needs_row_decode(const Weight& w, ActKind k, MatmulNumerics numerics) {
  if (k != ActKind::f32 || w.type == GgmlType::F32) return false;
  return !(w.type == GgmlType::F16 && numerics == MatmulNumerics::ds4);
}

float dot_f32_double(const float* w, const float* x, int64_t n) {
  // Double accumulation (ds4's F32 matvec) in 4 independent lanes so the loop is not latency-bound.
  double lane[4] = {0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (int l = 0; l < 4; ++l) lane[l] += static_cast<double>(w[i + l]) * x[i + l];
  double acc = (lane[0] + lane[1]) + (lane[2] + lane[3]);
  for (; i < n; ++i) acc += static_cast<double>(w[i]) * x[i];
  return static_cast<float>(acc);
}

float weight_row_dot(const RowDot& d, int64_t row, const float* x, const uint8_t* act) {
  const Weight& w = *d.w;
  const uint8_t* src = static_cast<const uint8_t*>(w.data) + static_cast<uint64_t>(row) * w.row_bytes;
  if (d.kind != ActKind::f32) {
    // ds4's pairings (src/quant/dot.h): Q8_0 · Q8_0 activation blocks, k-quants/IQ · Q8_K; integer
    // block sums, float accumulation of the scaled block sums.
    return best_dot_kernels().for_type(w.type)(src, act, w.cols);
  }
  if (w.type == GgmlType::F32) return dot_f32_double(reinterpret_cast<const float*>(src), x, w.cols);
  // F16 with ds4 numerics: float multiply-accumulate (other types go through needs_row_decode).
  return best_dot_kernels().f16(src, x, w.cols);
}

}  // namespace ds4::backend::cpu
