// ops_compressor.cu — the KV compressor frontier update and softmax pooling (MODEL.md §7.4, §10.2).
//
// Tokens are sequential (a token may close a block the next one starts), so one thread block walks
// the chunk and its threads split the row width. The count of emitted rows depends only on the
// positions, so the host computes it (CompressorArgs::n_out is host memory) without waiting.
#include <string>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_impl.h"

namespace ds4::backend::cuda {

namespace {

// kv, score: [n][width]; ape: [ratio][width]; state: [slots][width]; out: [*][out_dim].
__global__ void compressor_kernel(CompressorArgs a) {
  const int64_t D = a.out_dim;
  const int64_t width = a.overlap ? 2 * D : D;
  const int64_t cur = a.overlap ? a.ratio : 0;  // first slot of the current block
  int64_t emitted = 0;
  for (int64_t i = 0; i < a.n; ++i) {
    const int64_t t = a.pos0 + i;
    const int64_t j = t % a.ratio;
    float* skv = a.state_kv + (cur + j) * width;
    float* ssc = a.state_score + (cur + j) * width;
    for (int64_t d = threadIdx.x; d < width; d += blockDim.x) {
      skv[d] = a.kv[i * width + d];
      ssc[d] = a.score[i * width + d] + a.ape[j * width + d];
    }
    if ((t + 1) % a.ratio != 0) continue;
    __syncthreads();
    float* out = a.out + emitted * D;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
      // Candidates in the CPU's order: (overlap) previous block series A = slots [0, r) column d, then
      // current block series B = slots [r, 2r) column D+d; (no overlap) slots [0, r) column d.
      float mx = -INFINITY;
      for (int s = 0; s < a.ratio; ++s) mx = fmaxf(mx, a.state_score[s * width + d]);
      if (a.overlap)
        for (int s = 0; s < a.ratio; ++s) mx = fmaxf(mx, a.state_score[(cur + s) * width + D + d]);
      float denom = 0, acc = 0;
      for (int s = 0; s < a.ratio; ++s) {
        const float sc = a.state_score[s * width + d];
        if (sc == -INFINITY) continue;  // empty slot (no previous block yet)
        const float e = expf(sc - mx);
        denom += e;
        acc += e * a.state_kv[s * width + d];
      }
      if (a.overlap)
        for (int s = 0; s < a.ratio; ++s) {
          const float sc = a.state_score[(cur + s) * width + D + d];
          if (sc == -INFINITY) continue;
          const float e = expf(sc - mx);
          denom += e;
          acc += e * a.state_kv[(cur + s) * width + D + d];
        }
      out[d] = acc / denom;
    }
    if (threadIdx.x == 0) a.out_pos[emitted] = static_cast<int32_t>(t + 1 - a.ratio);
    ++emitted;
    if (a.overlap) {  // the current block becomes the previous one
      __syncthreads();
      for (int64_t q = threadIdx.x; q < a.ratio * width; q += blockDim.x) {
        a.state_kv[q] = a.state_kv[cur * width + q];
        a.state_score[q] = a.state_score[cur * width + q];
      }
    }
    __syncthreads();
  }
}

}  // namespace

void CudaBackend::compressor(const CompressorArgs& a) {
  if (a.n_out) *a.n_out = 0;
  if (failed() || a.n <= 0) return;
  if (a.ratio <= 0 || a.out_dim <= 0 || a.pos0 < 0) {
    fail(invalid_argument("cuda compressor: ratio " + std::to_string(a.ratio) + ", out_dim " +
                          std::to_string(a.out_dim) + ", pos0 " + std::to_string(a.pos0) + " out of range"));
    return;
  }
  const int64_t emitted = (a.pos0 + a.n) / a.ratio - a.pos0 / a.ratio;
  compressor_kernel<<<1, 512, 0, stream()>>>(a);
  if (launched("compressor") && a.n_out) *a.n_out = emitted;
}

}  // namespace ds4::backend::cuda
