// ops_indexer.cpp — lightning-indexer top-k selection (MODEL.md §7.5, ties per §14.6: lower id wins).
#include <algorithm>
#include <numeric>

#include "backend/cpu/cpu_impl.h"

namespace ds4::backend::cpu {

void CpuBackend::indexer(const IndexerArgs& a) {
  // q: [n][heads][head_dim], w: [n][heads], rows: [*][head_dim] → idx: [n][top_k], count: [n].
  int64_t max_rows = 0;
  for (int64_t i = 0; i < a.n; ++i) max_rows = std::max<int64_t>(max_rows, a.n_rows[i]);
  // Scores and candidate ids share one float scratch row per thread (ids stored after the scores).
  auto& scratch = thread_scratch(static_cast<size_t>(2 * max_rows + 1));
  const int64_t parts = pool_.parts_for(a.n, max_rows * a.heads * a.head_dim);
  pool_.parallel_for(parts, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      float* score = scratch[static_cast<size_t>(p)].data();
      int32_t* ids = reinterpret_cast<int32_t*>(score + max_rows);
      for (int64_t i = a.n * p / parts; i < a.n * (p + 1) / parts; ++i) {
        const int32_t nr = a.n_rows[i];
        int32_t* out = a.idx + i * a.top_k;
        if (nr <= a.top_k) {  // every row is visible; no scoring (as ds4)
          for (int32_t c = 0; c < nr; ++c) out[c] = c;
          a.count[i] = nr;
          continue;
        }
        const float* q = a.q + i * a.heads * a.head_dim;
        const float* w = a.w + i * a.heads;
        const float* rows = a.rows_at ? a.rows_at[i] : a.rows;
        for (int32_t c = 0; c < nr; ++c) {
          const float* k = rows + static_cast<int64_t>(c) * a.head_dim;
          float sc = 0;
          for (int h = 0; h < a.heads; ++h) {
            const float* qh = q + h * a.head_dim;
            float dot = 0;
            for (int d = 0; d < a.head_dim; ++d) dot += qh[d] * k[d];
            sc += w[h] * std::max(0.0f, dot);
          }
          score[c] = sc;
          ids[c] = c;
        }
        // Strict total order: higher score first, then lower row id.
        std::nth_element(ids, ids + a.top_k - 1, ids + nr, [&](int32_t x, int32_t y) {
          return score[x] > score[y] || (score[x] == score[y] && x < y);
        });
        std::copy(ids, ids + a.top_k, out);
        std::sort(out, out + a.top_k);
        a.count[i] = a.top_k;
      }
    }
  }, ThreadPool::kMinWorkPerPart);
}

}  // namespace ds4::backend::cpu
