// weight_rows.cpp — see weight_rows.h.
#include "backend/cpu/weight_rows.h"

#include <cstring>

#include "quant/blocks.h"
#include "quant/dequant.h"
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

float weight_row_dot(const Weight& w, int64_t row, ActKind k, const float* x, const uint8_t* act,
                     MatmulNumerics numerics, float* scratch) {
  const uint8_t* src = static_cast<const uint8_t*>(w.data) + static_cast<uint64_t>(row) * w.row_bytes;
  const int64_t n = w.cols;
  if (k == ActKind::q8_0) {
    // ds4: int32 dot per 32-block, float accumulation of d_w·d_x·dot.
    const BlockQ8_0* wb = reinterpret_cast<const BlockQ8_0*>(src);
    const BlockQ8_0Act* xb = reinterpret_cast<const BlockQ8_0Act*>(act);
    float acc = 0;
    for (int64_t b = 0; b < n / kQK8_0; ++b) {
      int32_t dot = 0;
      for (int j = 0; j < kQK8_0; ++j) dot += static_cast<int32_t>(wb[b].qs[j]) * xb[b].qs[j];
      acc += f16_to_f32(wb[b].d) * xb[b].d * static_cast<float>(dot);
    }
    return acc;
  }
  if (k == ActKind::q8_k) {
    // Weights decoded per row against the Q8_K-decoded activations, float accumulation per 256-block.
    dequantize_weight_row(w, row, scratch);
    const BlockQ8_K* xb = reinterpret_cast<const BlockQ8_K*>(act);
    float acc = 0;
    for (int64_t b = 0; b < n / kQK_K; ++b) {
      float part = 0;
      for (int j = 0; j < kQK_K; ++j) part += scratch[b * kQK_K + j] * static_cast<float>(xb[b].qs[j]);
      acc += part * xb[b].d;
    }
    return acc;
  }
  // Float activations.
  if (w.type == GgmlType::F32) {
    const float* wr = reinterpret_cast<const float*>(src);
    double acc = 0;
    for (int64_t i = 0; i < n; ++i) acc += static_cast<double>(wr[i]) * x[i];
    return static_cast<float>(acc);
  }
  if (w.type == GgmlType::F16 && numerics == MatmulNumerics::ds4) {
    // ds4: float multiply-accumulate (8 independent lanes, then summed).
    const uint16_t* h = reinterpret_cast<const uint16_t*>(src);
    float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
      for (int l = 0; l < 8; ++l) lane[l] += f16_to_f32(h[i + l]) * x[i + l];
    float acc = 0;
    for (int l = 0; l < 8; ++l) acc += lane[l];
    for (; i < n; ++i) acc += f16_to_f32(h[i]) * x[i];
    return acc;
  }
  dequantize_weight_row(w, row, scratch);
  double acc = 0;
  for (int64_t i = 0; i < n; ++i) acc += static_cast<double>(scratch[i]) * x[i];
  return static_cast<float>(acc);
}

}  // namespace ds4::backend::cpu
