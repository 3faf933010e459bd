// ops_compressor.cpp — the KV compressor frontier update and softmax pooling (MODEL.md §7.4, §10.2).
//
// Sequential over tokens (each token may close a block that the next one starts), parallel over the
// output dimension when a row is pooled.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/cpu_impl.h"
#include "backend/exact_math.h"

namespace ds4::backend::cpu {

void CpuBackend::compressor(const CompressorArgs& a) {
  // kv, score: [n][width]; ape: [ratio][width]; state: ring [slots][width]; out: [*][out_dim].
  const int64_t D = a.out_dim, r = a.ratio, slots = a.slots;
  const int64_t width = a.overlap ? 2 * D : D;
  if (a.segments > 0) {  // a batched step: each session's frontier is independent and sequential
    for (int32_t s = 0; s < a.segments; ++s) {
      const CompressorSegment& sg = a.seg[s];
      CompressorArgs one = a;
      one.segments = 0;
      one.seg = nullptr;
      one.kv = a.kv + sg.col * width;
      one.score = a.score + sg.col * width;
      one.n = sg.n;
      one.pos0 = sg.pos0;
      one.state_kv = sg.state_kv;
      one.state_score = sg.state_score;
      one.out = sg.out;
      one.out_pos = sg.out_pos;
      int64_t emitted = 0;
      one.n_out = &emitted;
      compressor(one);
    }
    return;
  }
  int64_t emitted = 0;
  for (int64_t i = 0; i < a.n; ++i) {
    const int64_t t = a.pos0 + i;
    const int64_t row = t % slots;
    std::memcpy(a.state_kv + row * width, a.kv + i * width, width * sizeof(float));
    for (int64_t d = 0; d < width; ++d)
      a.state_score[row * width + d] = a.score[i * width + d] + a.ape[(t % r) * width + d];
    if ((t + 1) % r != 0) continue;

    // Block B = (t+1)/r − 1 is complete. Candidates per output dimension d: (overlap, B > 0) the
    // previous block's series A (column d), then this block's series B (column D+d); (no overlap) this
    // block's column d. For B = 0 the previous block does not exist (weight 0).
    const int64_t B = (t + 1) / r - 1;
    const int64_t cur = (B * r) % slots, prev = ((B - 1) * r % slots + slots) % slots;
    const bool has_prev = a.overlap && B > 0;
    const int64_t cur_col = a.overlap ? D : 0;
    float* out = a.out + emitted * D;
    pool_.parallel_for(D, [&](int64_t d0, int64_t d1) {
      for (int64_t d = d0; d < d1; ++d) {
        auto visit = [&](auto&& fn) {
          if (has_prev)
            for (int64_t s = 0; s < r; ++s) fn(a.state_score[(prev + s) * width + d], a.state_kv[(prev + s) * width + d]);
          for (int64_t s = 0; s < r; ++s)
            fn(a.state_score[(cur + s) * width + cur_col + d], a.state_kv[(cur + s) * width + cur_col + d]);
        };
        float mx = -INFINITY;
        visit([&](float sc, float) { mx = std::max(mx, sc); });
        float denom = 0, acc = 0;
        visit([&](float sc, float v) {
          const float e = exact_exp(sc - mx);  // exact_math.h: the CUDA kernels' bits
          denom += e;
          acc += e * v;
        });
        out[d] = acc / denom;
      }
    }, 4 * r);
    a.out_pos[emitted] = static_cast<int32_t>(B * r);
    ++emitted;
  }
  *a.n_out = emitted;
}

}  // namespace ds4::backend::cpu
