// ops_attention.cpp — attention with per-head sinks over the raw window and compressed rows
// (MODEL.md §7.3, §7.6). Every row is both key and value (one shared KV head).
#include <algorithm>
#include <cmath>

#include "backend/cpu/cpu_impl.h"

namespace ds4::backend::cpu {

void CpuBackend::attention(const AttentionArgs& a) {
  // q, out: [n][heads][D]; raw: ring [raw_cap][D]; comp: [*][D].
  const int64_t D = a.head_dim;
  int64_t max_comp = 0;
  if (a.comp_count)
    for (int64_t i = 0; i < a.n; ++i) max_comp = std::max<int64_t>(max_comp, a.comp_count[i]);
  auto& scratch = thread_scratch(static_cast<size_t>(a.window + max_comp));
  const int64_t total = a.n * a.heads;
  const int64_t parts = pool_.parts_for(total, (a.window + max_comp) * D * 2);
  pool_.parallel_for(parts, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      float* s = scratch[static_cast<size_t>(p)].data();  // [window + comp] scores, then weights
      for (int64_t k = total * p / parts; k < total * (p + 1) / parts; ++k) {
        const int64_t i = k / a.heads, h = k % a.heads;
        const float* q = a.q + (i * a.heads + h) * D;
        const int64_t t = a.pos[i];
        const int64_t first = std::max<int64_t>(0, t - a.window + 1);
        const int64_t n_raw = t - first + 1;
        const int64_t n_comp = a.comp_count ? a.comp_count[i] : 0;
        const float* raw = a.raw_at ? a.raw_at[i] : a.raw;
        const float* comp = a.comp_at ? a.comp_at[i] : a.comp;
        auto raw_row = [&](int64_t j) { return raw + ((first + j) % a.raw_cap) * D; };
        auto comp_row = [&](int64_t j) {
          const int64_t id = a.comp_idx ? a.comp_idx[i * a.comp_idx_stride + j] : j;
          return comp + id * D;
        };
        float mx = a.sinks[h];
        for (int64_t j = 0; j < n_raw + n_comp; ++j) {
          const float* r = j < n_raw ? raw_row(j) : comp_row(j - n_raw);
          float dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += q[d] * r[d];
          s[j] = dot * a.scale;
          mx = std::max(mx, s[j]);
        }
        float denom = std::exp(a.sinks[h] - mx);
        for (int64_t j = 0; j < n_raw + n_comp; ++j) {
          s[j] = std::exp(s[j] - mx);
          denom += s[j];
        }
        float* o = a.out + (i * a.heads + h) * D;
        std::fill(o, o + D, 0.0f);
        for (int64_t j = 0; j < n_raw + n_comp; ++j) {
          const float* r = j < n_raw ? raw_row(j) : comp_row(j - n_raw);
          const float w = s[j] / denom;
          for (int64_t d = 0; d < D; ++d) o[d] += w * r[d];
        }
      }
    }
  }, ThreadPool::kMinWorkPerPart);
  // §7.7's inverse RoPE of the output (AttentionArgs::out_rot), as its own op would do it.
  if (a.out_rot > 0) rope({a.out, a.pos, a.n, a.heads, a.head_dim, a.out_rot, a.out_freq, true});
}

}  // namespace ds4::backend::cpu
