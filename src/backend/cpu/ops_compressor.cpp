// ops_compressor.cpp — the KV compressor frontier update and softmax pooling (MODEL.md §7.4, §10.2).
//
// Sequential over tokens (each token may close a block that the next one starts), parallel over the
// output dimension when a row is pooled.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/cpu_impl.h"

namespace ds4::backend::cpu {

void CpuBackend::compressor(const CompressorArgs& a) {
  // kv, score: [n][width]; ape: [ratio][width]; state: [slots][width]; out: [*][out_dim].
  const int64_t D = a.out_dim;
  const int64_t width = a.overlap ? 2 * D : D;
  const int64_t cur = a.overlap ? a.ratio : 0;  // first slot of the current block
  int64_t emitted = 0;
  for (int64_t i = 0; i < a.n; ++i) {
    const int64_t t = a.pos0 + i;
    const int64_t j = t % a.ratio;
    float* skv = a.state_kv + (cur + j) * width;
    float* ssc = a.state_score + (cur + j) * width;
    std::memcpy(skv, a.kv + i * width, width * sizeof(float));
    for (int64_t d = 0; d < width; ++d) ssc[d] = a.score[i * width + d] + a.ape[j * width + d];
    if ((t + 1) % a.ratio != 0) continue;

    // Block B = (t+1)/r − 1 is complete: pool each output dimension over its candidates.
    float* out = a.out + emitted * D;
    pool_.parallel_for(D, [&](int64_t d0, int64_t d1) {
      for (int64_t d = d0; d < d1; ++d) {
        // Candidates: (overlap) previous block series A = slots [0, r) column d, then current block
        // series B = slots [r, 2r) column D+d; (no overlap) slots [0, r) column d.
        float mx = -INFINITY;
        auto visit = [&](auto&& fn) {
          if (a.overlap) {
            for (int64_t s = 0; s < a.ratio; ++s) fn(a.state_score[s * width + d], a.state_kv[s * width + d]);
            for (int64_t s = 0; s < a.ratio; ++s)
              fn(a.state_score[(cur + s) * width + D + d], a.state_kv[(cur + s) * width + D + d]);
          } else {
            for (int64_t s = 0; s < a.ratio; ++s) fn(a.state_score[s * width + d], a.state_kv[s * width + d]);
          }
        };
        visit([&](float sc, float) { mx = std::max(mx, sc); });
        float denom = 0, acc = 0;
        visit([&](float sc, float v) {
          if (sc == -INFINITY) return;  // empty slot (no previous block yet)
          const float e = std::exp(sc - mx);
          denom += e;
          acc += e * v;
        });
        out[d] = acc / denom;
      }
    }, 4 * a.ratio);
    a.out_pos[emitted] = static_cast<int32_t>(t + 1 - a.ratio);
    ++emitted;
    if (a.overlap) {  // the current block becomes the previous one
      std::memcpy(a.state_kv, a.state_kv + cur * width, a.ratio * width * sizeof(float));
      std::memcpy(a.state_score, a.state_score + cur * width, a.ratio * width * sizeof(float));
    }
  }
  *a.n_out = emitted;
}

}  // namespace ds4::backend::cpu
