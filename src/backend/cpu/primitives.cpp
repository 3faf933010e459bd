// primitives.cpp — see primitives.h. Every function follows the MODEL.md section it names.
#include "backend/cpu/primitives.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/exact_math.h"

namespace ds4::backend::cpu {

float round_f16(float x) {
  // Bit-exact float → half → float with round-to-nearest-even, written out so that the rounding
  // does not depend on compiler support for _Float16.
  uint32_t u;
  std::memcpy(&u, &x, 4);
  const uint32_t sign = u & 0x80000000u;
  uint32_t a = u & 0x7fffffffu;
  if (a >= 0x7f800000u) return x;  // inf / nan unchanged
  float r;
  if (a >= 0x477ff000u) {  // >= 65520: rounds to inf in half
    uint32_t inf = sign | 0x7f800000u;
    std::memcpy(&r, &inf, 4);
    return r;
  }
  if (a < 0x38800000u) {  // below the smallest normal half (2^-14): quantum 2^-24
    const float q = std::ldexp(1.0f, -24);
    float m = std::nearbyint(std::fabs(x) / q) * q;
    return sign ? -m : m;
  }
  // Normal half: keep 10 mantissa bits, round half to even on the 13 dropped bits.
  const uint32_t drop = 13, mask = (1u << drop) - 1, half = 1u << (drop - 1);
  uint32_t rem = a & mask;
  a &= ~mask;
  if (rem > half || (rem == half && (a & (1u << drop)))) a += 1u << drop;
  a |= sign;
  std::memcpy(&r, &a, 4);
  return r;
}

float round_e4m3(float x) {
  const float a = std::fabs(x);
  if (a == 0.0f || std::isnan(a)) return x;
  float q;
  if (a < 0.015625f) {  // subnormal range: quantum 2^-9 (code parity = parity of the multiple)
    q = std::nearbyint(a * 512.0f) / 512.0f;
  } else {
    int e;
    std::frexp(a, &e);  // a = f·2^e, f in [0.5, 1)  → leading bit 2^(e-1), quantum 2^(e-4)
    const float step = std::ldexp(1.0f, e - 4);
    q = std::nearbyint(a / step) * step;  // ties to even multiple = even mantissa code
  }
  q = std::min(q, 448.0f);
  return x < 0 ? -q : q;
}

float round_e2m1(float x) {
  static constexpr float kValues[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float a = std::min(std::fabs(x), 6.0f);
  int best = 0;
  float best_d = a;
  for (int c = 1; c < 8; ++c) {
    const float d = std::fabs(a - kValues[c]);
    if (d < best_d || (d == best_d && (c % 2 == 0))) {
      best = c;
      best_d = d;
    }
  }
  return x < 0 ? -kValues[best] : kValues[best];
}

float pow2_ceil(float v) {
  int e;
  const float f = std::frexp(v, &e);  // v = f·2^e, f in [0.5, 1)
  return f == 0.5f ? std::ldexp(1.0f, e - 1) : std::ldexp(1.0f, e);
}

void fp8_round_block(float* x, int n) {
  float amax = 0;
  for (int i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float s = pow2_ceil(std::max(amax, 1e-4f) / 448.0f);
  for (int i = 0; i < n; ++i) x[i] = s * round_e4m3(std::clamp(x[i] / s, -448.0f, 448.0f));
}

void fp4_round_block(float* x, int n) {
  float amax = 0;
  for (int i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float s = pow2_ceil(std::max(amax, 6.0f * std::ldexp(1.0f, -126)) / 6.0f);
  for (int i = 0; i < n; ++i) x[i] = s * round_e2m1(std::clamp(x[i] / s, -6.0f, 6.0f));
}

void hadamard_scaled(float* x, int n) {
  for (int s = 1; s < n; s *= 2) {
    for (int b = 0; b < n; b += 2 * s) {
      for (int i = 0; i < s; ++i) {
        const float u = x[b + i], v = x[b + s + i];
        x[b + i] = u + v;
        x[b + s + i] = u - v;
      }
    }
  }
  const float k = static_cast<float>(1.0 / std::sqrt(static_cast<double>(n)));
  for (int i = 0; i < n; ++i) x[i] *= k;
}

void rms_norm_row(const float* x, const float* w, float* y, int64_t dim, float eps) {
  double ss = 0;
  for (int64_t i = 0; i < dim; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float scale = 1.0f / std::sqrt(static_cast<float>(ss / static_cast<double>(dim)) + eps);
  if (w) {
    for (int64_t i = 0; i < dim; ++i) y[i] = x[i] * scale * w[i];
  } else {
    for (int64_t i = 0; i < dim; ++i) y[i] = x[i] * scale;
  }
}

void hc_split_one(const float* m, const float* scale, const float* base, int nhc, int iters, float eps,
                  float* pre, float* post, float* comb) {
  for (int s = 0; s < nhc; ++s) {
    // exact_math.h's σ (and exp below): the CUDA kernels compute the same bits.
    pre[s] = exact_sigmoid(m[s] * scale[0] + base[s]) + eps;
    post[s] = 2.0f * exact_sigmoid(m[nhc + s] * scale[1] + base[nhc + s]);
  }
  const int off = 2 * nhc;
  float* c = comb;  // C[j][k] at j·nhc + k
  for (int j = 0; j < nhc; ++j) {
    float mx = -INFINITY;
    for (int k = 0; k < nhc; ++k) {
      c[j * nhc + k] = m[off + j * nhc + k] * scale[2] + base[off + j * nhc + k];
      mx = std::max(mx, c[j * nhc + k]);
    }
    float sum = 0;
    for (int k = 0; k < nhc; ++k) {
      c[j * nhc + k] = exact_exp(c[j * nhc + k] - mx);
      sum += c[j * nhc + k];
    }
    for (int k = 0; k < nhc; ++k) c[j * nhc + k] = c[j * nhc + k] / sum + eps;
  }
  auto normalize_columns = [&] {
    for (int k = 0; k < nhc; ++k) {
      float sum = 0;
      for (int j = 0; j < nhc; ++j) sum += c[j * nhc + k];
      for (int j = 0; j < nhc; ++j) c[j * nhc + k] /= (sum + eps);
    }
  };
  normalize_columns();
  for (int it = 1; it < iters; ++it) {
    for (int j = 0; j < nhc; ++j) {
      float sum = 0;
      for (int k = 0; k < nhc; ++k) sum += c[j * nhc + k];
      for (int k = 0; k < nhc; ++k) c[j * nhc + k] /= (sum + eps);
    }
    normalize_columns();
  }
}

float softplus(float z) { return exact_softplus(z); }

}  // namespace ds4::backend::cpu
