// ops_moe.cpp — MoE router (sqrt-softplus, hash or biased top-k), SwiGLU with clamps, routed experts
// (MODEL.md §8).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "backend/cpu/cpu_impl.h"
#include "backend/cpu/primitives.h"
#include "backend/exact_math.h"

namespace ds4::backend::cpu {

void CpuBackend::router(const RouterArgs& a) {
  // logits: [n][NE] → ids, weights: [n][k].
  for (int64_t i = 0; i < a.n; ++i) {
    const float* z = a.logits + i * a.n_expert;
    int32_t* ids = a.ids + i * a.k;
    float* w = a.weights + i * a.k;
    auto p = [&](int32_t e) { return std::sqrt(softplus(z[e])); };
    if (a.hash) {
      const int32_t* row = a.hash + static_cast<int64_t>(a.tokens[i]) * a.k;
      for (int j = 0; j < a.k; ++j) ids[j] = row[j];
    } else {
      // Top-k of p + bias by repeated selection (k is small); ties go to the lower expert id.
      for (int j = 0; j < a.k; ++j) {
        int32_t best = -1;
        float best_v = -std::numeric_limits<float>::infinity();
        for (int32_t e = 0; e < a.n_expert; ++e) {
          bool taken = false;
          for (int q = 0; q < j; ++q) taken |= ids[q] == e;
          if (taken) continue;
          const float v = p(e) + (a.bias ? a.bias[e] : 0.0f);
          if (best < 0 || v > best_v) {
            best = e;
            best_v = v;
          }
        }
        ids[j] = best;
      }
    }
    float sum = 0;
    for (int j = 0; j < a.k; ++j) {
      w[j] = p(ids[j]);
      sum += w[j];
    }
    const float denom = std::max(sum, a.denom_guard);
    for (int j = 0; j < a.k; ++j) w[j] = a.scale * w[j] / denom;
  }
}

static float swiglu_one(float g, float u, float clamp) {
  if (clamp > 0) {
    g = std::min(g, clamp);
    u = std::clamp(u, -clamp, clamp);
  }
  return exact_silu(g) * u;  // exact_math.h: every CUDA expert kernel's bits
}

void CpuBackend::swiglu(const SwigluArgs& a) {
  for (int64_t i = 0; i < a.count; ++i) a.h[i] = swiglu_one(a.g[i], a.u[i], a.clamp);
}

void CpuBackend::moe(const MoeArgs& a) {
  // x: [n][dim]; per (token, slot) the expert output y[token·k + slot][dim] is computed in batches
  // grouped by expert, then summed per token in slot order (so the result does not depend on how
  // tokens are batched).
  const int64_t pairs = a.n * a.k;
  grow(moe_rows_, static_cast<size_t>(pairs));
  float* xs = grow(moe_x_, static_cast<size_t>(pairs * a.dim)).data();   // [pairs][dim] gathered inputs
  float* gs = grow(moe_g_, static_cast<size_t>(pairs * a.ff)).data();    // [pairs][ff]
  float* us = grow(moe_u_, static_cast<size_t>(pairs * a.ff)).data();    // [pairs][ff]
  float* ys = grow(moe_y_, static_cast<size_t>(pairs * a.dim)).data();   // [pairs][dim] in (token, slot) order
  int32_t* order = moe_rows_.data();
  // Counting sort of (token, slot) pairs by expert.
  int64_t filled = 0;
  for (int32_t e = 0; e < a.gate.n_expert; ++e) {
    const int64_t start = filled;
    for (int64_t p = 0; p < pairs; ++p)
      if (a.ids[p] == e) order[filled++] = static_cast<int32_t>(p);
    const int64_t m = filled - start;
    if (m == 0) continue;
    for (int64_t r = 0; r < m; ++r)
      std::memcpy(xs + r * a.dim, a.x + (order[start + r] / a.k) * a.dim, a.dim * sizeof(float));
    matmul({a.gate.expert(e), xs, a.dim, gs, a.ff, m, a.numerics});
    matmul({a.up.expert(e), xs, a.dim, us, a.ff, m, a.numerics});
    // h = swiglu(g, u) · w (ds4 scales before the down projection; identical in exact arithmetic).
    for (int64_t r = 0; r < m; ++r) {
      const float w = a.weights[order[start + r]];
      for (int64_t f = 0; f < a.ff; ++f) gs[r * a.ff + f] = swiglu_one(gs[r * a.ff + f], us[r * a.ff + f], a.clamp) * w;
    }
    matmul({a.down.expert(e), gs, a.ff, xs, a.dim, m, a.numerics});
    for (int64_t r = 0; r < m; ++r) std::memcpy(ys + order[start + r] * a.dim, xs + r * a.dim, a.dim * sizeof(float));
  }
  for (int64_t i = 0; i < a.n; ++i) {
    float* out = a.out + i * a.dim;
    std::memcpy(out, ys + (i * a.k) * a.dim, a.dim * sizeof(float));
    for (int j = 1; j < a.k; ++j)
      for (int64_t d = 0; d < a.dim; ++d) out[d] += ys[(i * a.k + j) * a.dim + d];
  }
}

}  // namespace ds4::backend::cpu
