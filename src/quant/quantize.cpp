// quantize.cpp — quantize_row/quantize_rows dispatch, the Q8_0 and 16-bit encoders, and ds4's
// activation quantizers (Q8_K, Q8_0 activation blocks). K-quants: quantize_k.cpp; IQ2_XXS:
// quantize_iq2xxs.cpp.
#include "quant/quantize.h"

#include <cmath>
#include <cstring>
#include <string>

#include "quant/half.h"
#include "quant/quant_math.h"

namespace ds4 {

using quant_detail::clamp_int;
using quant_detail::max_f;
using quant_detail::min_f;
using quant_detail::nearest_int;

void quantize_block_q8_0(const float* x, BlockQ8_0* y) {
  // quants.c: quants use the unrounded d = amax/127 and round half away from zero; the decoder
  // then uses f16(d). The clamp to the f16 range only matters for |x| > 8.3e6 (saturation).
  float amax = 0;
  for (int i = 0; i < kQK8_0; ++i) amax = max_f(amax, std::fabs(x[i]));
  const float d = min_f(amax / 127.0f, kF16Max);
  const float id = d != 0 ? 1.0f / d : 0.0f;
  y->d = f32_to_f16(d);
  for (int i = 0; i < kQK8_0; ++i) {
    // roundf (half away from zero): round to nearest even, then move ties away from zero.
    const float v = x[i] * id;
    int q = nearest_int(v);
    const float frac = v - static_cast<float>(q);  // exact: |v| <= ~127
    if (frac == 0.5f && v > 0) ++q;
    if (frac == -0.5f && v < 0) --q;
    y->qs[i] = static_cast<int8_t>(clamp_int(q, -127, 127));
  }
}

void quantize_act_q8_K(const float* x, BlockQ8_K* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    BlockQ8_K& out = y[b];
    // The element of largest magnitude, keeping its sign (first one on ties), as ds4 does.
    float amax = 0, max = 0;
    for (int j = 0; j < kQK_K; ++j) {
      const float ax = std::fabs(x[j]);
      if (ax > amax) {
        amax = ax;
        max = x[j];
      }
    }
    if (amax == 0) {
      out.d = 0;
      std::memset(out.qs, 0, sizeof(out.qs));
      std::memset(out.bsums, 0, sizeof(out.bsums));
      continue;
    }
    const float iscale = -127.0f / max;
    for (int j = 0; j < kQK_K; ++j) {
      out.qs[j] = static_cast<int8_t>(clamp_int(nearest_int(iscale * x[j]), -128, 127));  // = lrintf + clamp
    }
    for (int k = 0; k < kQK_K / 16; ++k) {
      int sum = 0;
      for (int i = 0; i < 16; ++i) sum += out.qs[16 * k + i];
      out.bsums[k] = static_cast<int16_t>(sum);
    }
    out.d = 1.0f / iscale;
  }
}

void quantize_act_q8_0(const float* x, BlockQ8_0Act* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK8_0; ++b, x += kQK8_0) {
    float amax = 0;
    for (int i = 0; i < kQK8_0; ++i) {
      const float ax = std::fabs(x[i]);
      if (ax > amax) amax = ax;
    }
    const float d = amax / 127.0f;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    y[b].d = d;
    for (int i = 0; i < kQK8_0; ++i) {
      y[b].qs[i] = static_cast<int8_t>(clamp_int(nearest_int(x[i] * id), -128, 127));  // = lrintf + clamp
    }
  }
}

void column_importance(const float* src, int64_t n_rows, int64_t n_cols, float* imp) {
  for (int64_t c = 0; c < n_cols; ++c) imp[c] = 0;
  for (int64_t r = 0; r < n_rows; ++r)
    for (int64_t c = 0; c < n_cols; ++c) imp[c] += src[r * n_cols + c] * src[r * n_cols + c];
}

namespace {

template <typename B, int K, typename F>
void encode_blocks(const float* src, void* dst, int64_t n, F&& encode) {
  auto* out = static_cast<uint8_t*>(dst);
  for (int64_t i = 0; i < n / K; ++i) {
    B b;
    encode(src + i * K, &b, i * K);
    std::memcpy(out + i * static_cast<int64_t>(sizeof(B)), &b, sizeof(B));
  }
}

}  // namespace

Status quantize_row(GgmlType type, const float* src, void* dst, int64_t n, const QuantizeOptions& opts) {
  auto traits = type_traits(static_cast<uint32_t>(type));
  if (!traits || type == GgmlType::I32)
    return unsupported("quantize: cannot encode floats as type " + std::to_string(static_cast<uint32_t>(type)));
  if (n < 0 || n % traits->block_elems != 0)
    return invalid_argument("quantize: " + std::string(traits->name) + " row length " + std::to_string(n) +
                            " is not a multiple of " + std::to_string(traits->block_elems));
  if (n > 0 && (src == nullptr || dst == nullptr)) return invalid_argument("quantize: null buffer");
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(src[i]))
      return invalid_argument("quantize: non-finite value at index " + std::to_string(i) + " (" +
                              std::string(traits->name) + ")");
  const float* imp = opts.importance;
  if (imp != nullptr)
    for (int64_t i = 0; i < n; ++i)
      if (!(imp[i] >= 0) || !std::isfinite(imp[i]))
        return invalid_argument("quantize: importance must be finite and >= 0 (index " + std::to_string(i) + ")");
  auto* out = static_cast<uint8_t*>(dst);
  switch (type) {
    case GgmlType::F32:
      if (n > 0) std::memcpy(out, src, static_cast<size_t>(n) * 4);
      break;
    case GgmlType::F16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = f32_to_f16(src[i]);
        std::memcpy(out + 2 * i, &h, 2);
      }
      break;
    case GgmlType::BF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = f32_to_bf16(src[i]);
        std::memcpy(out + 2 * i, &h, 2);
      }
      break;
    case GgmlType::Q8_0:
      encode_blocks<BlockQ8_0, kQK8_0>(src, dst, n, [](const float* x, BlockQ8_0* b, int64_t) {
        quantize_block_q8_0(x, b);
      });
      break;
    case GgmlType::Q2_K:
      encode_blocks<BlockQ2_K, kQK_K>(src, dst, n, [&](const float* x, BlockQ2_K* b, int64_t off) {
        quantize_block_q2_K(x, b, imp ? imp + off : nullptr, opts.effort);
      });
      break;
    case GgmlType::Q4_K:
      encode_blocks<BlockQ4_K, kQK_K>(src, dst, n, [&](const float* x, BlockQ4_K* b, int64_t off) {
        quantize_block_q4_K(x, b, imp ? imp + off : nullptr, opts.effort);
      });
      break;
    case GgmlType::IQ2_XXS:
      encode_blocks<BlockIQ2_XXS, kQK_K>(src, dst, n, [&](const float* x, BlockIQ2_XXS* b, int64_t off) {
        quantize_block_iq2_xxs(x, b, imp ? imp + off : nullptr, opts.effort);
      });
      break;
    case GgmlType::Q8_K:
      encode_blocks<BlockQ8_K, kQK_K>(src, dst, n, [](const float* x, BlockQ8_K* b, int64_t) {
        quantize_act_q8_K(x, b, kQK_K);
      });
      break;
    case GgmlType::I32:
      break;  // rejected above
  }
  return Status::Ok();
}

Status quantize_rows(GgmlType type, const float* src, void* dst, int64_t n_rows, int64_t n_cols,
                     const QuantizeOptions& opts) {
  if (n_rows < 0) return invalid_argument("quantize: negative row count");
  auto row_bytes = type_bytes(type, static_cast<uint64_t>(n_cols < 0 ? 0 : n_cols));
  if (n_cols < 0 || !row_bytes) {
    auto traits = type_traits(static_cast<uint32_t>(type));
    if (!traits || type == GgmlType::I32) return unsupported("quantize: cannot encode floats as this type");
    return invalid_argument("quantize: " + std::string(traits->name) + " row length " + std::to_string(n_cols) +
                            " is not a multiple of " + std::to_string(traits->block_elems));
  }
  auto* out = static_cast<uint8_t*>(dst);
  for (int64_t r = 0; r < n_rows; ++r) {
    Status s = quantize_row(type, src + r * n_cols, out + static_cast<uint64_t>(r) * *row_bytes, n_cols, opts);
    if (!s.ok()) return s.with_context("row " + std::to_string(r));
  }
  return Status::Ok();
}

}  // namespace ds4
