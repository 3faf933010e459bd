// ops_attention.cu — attention with per-head sinks over the raw window and compressed rows
// (MODEL.md §7.3, §7.6). Every row is both key and value (one shared KV head).
//
// One block per (query, head); each warp runs an online softmax over its share of the candidate rows
// (lanes split head_dim), then the warps' partial states and the sink are merged. The CPU op uses a
// two-pass softmax; the results agree to float rounding (~1e-6 relative), not bit for bit.
// First version: one query per block (decode-shaped); query tiles sharing K/V loads come next.
#include <string>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_impl.h"

namespace ds4::backend::cuda {

namespace {

constexpr int kAttnWarps = 4;
constexpr int kMaxPerLane = 16;  // head_dim ≤ 512

__global__ void attention_kernel(AttentionArgs a) {
  extern __shared__ float sh[];  // [kAttnWarps][D] partial outputs, then m and l per warp
  const int64_t D = a.head_dim;
  const int per_lane = static_cast<int>(D / kWarp);
  const int64_t i = blockIdx.x / a.heads;
  const int h = static_cast<int>(blockIdx.x % a.heads);
  const int lane = threadIdx.x % kWarp, wid = threadIdx.x / kWarp;
  const float* q = a.q + (i * a.heads + h) * D;
  float qr[kMaxPerLane], acc[kMaxPerLane];
  for (int k = 0; k < per_lane; ++k) {
    qr[k] = q[lane + kWarp * k];
    acc[k] = 0;
  }
  const int64_t t = a.pos[i];
  const int64_t first = t - a.window + 1 > 0 ? t - a.window + 1 : 0;
  const int64_t n_raw = t - first + 1;
  const int64_t n_comp = a.comp_count ? a.comp_count[i] : 0;
  const float* raw = a.raw_at ? a.raw_at[i] : a.raw;      // per-query session state (batched step)
  const float* comp = a.comp_at ? a.comp_at[i] : a.comp;
  float m = -INFINITY, l = 0;
  for (int64_t j = wid; j < n_raw + n_comp; j += kAttnWarps) {
    const float* r;
    if (j < n_raw) {
      r = raw + ((first + j) % a.raw_cap) * D;
    } else {
      const int64_t c = j - n_raw;
      r = comp + (a.comp_idx ? static_cast<int64_t>(a.comp_idx[i * a.comp_idx_stride + c]) : c) * D;
    }
    float rv[kMaxPerLane];
    float dot = 0;
    for (int k = 0; k < per_lane; ++k) {
      rv[k] = r[lane + kWarp * k];
      dot += qr[k] * rv[k];
    }
    const float s = warp_sum(dot) * a.scale;
    const float m_new = fmaxf(m, s);
    const float corr = expf(m - m_new);
    const float p = expf(s - m_new);
    l = l * corr + p;
    for (int k = 0; k < per_lane; ++k) acc[k] = acc[k] * corr + p * rv[k];
    m = m_new;
  }
  float* part = sh + wid * D;
  for (int k = 0; k < per_lane; ++k) part[lane + kWarp * k] = acc[k];
  float* wm = sh + kAttnWarps * D;
  float* wl = wm + kAttnWarps;
  if (lane == 0) {
    wm[wid] = m;
    wl[wid] = l;
  }
  __syncthreads();
  const float sink = a.sinks[h];
  float M = sink;
  for (int w = 0; w < kAttnWarps; ++w) M = fmaxf(M, wm[w]);
  float denom = expf(sink - M);
  float f[kAttnWarps];
  for (int w = 0; w < kAttnWarps; ++w) {
    f[w] = wm[w] == -INFINITY ? 0.0f : expf(wm[w] - M);
    denom += wl[w] * f[w];
  }
  float* o = a.out + (i * a.heads + h) * D;
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
    float v = 0;
    for (int w = 0; w < kAttnWarps; ++w) v += sh[w * D + d] * f[w];
    o[d] = v / denom;
  }
}

}  // namespace

void CudaBackend::attention(const AttentionArgs& a) {
  if (failed() || a.n <= 0 || a.heads <= 0) return;
  if (a.head_dim <= 0 || a.head_dim % kWarp != 0 || a.head_dim > kWarp * kMaxPerLane) {
    fail(invalid_argument("cuda attention: head_dim " + std::to_string(a.head_dim) +
                          " must be a multiple of 32 and at most 512"));
    return;
  }
  if (a.n * a.heads > 0x7fffffff || a.raw_cap <= 0) {
    fail(invalid_argument("cuda attention: bad batch or raw ring size"));
    return;
  }
  const size_t shmem = (kAttnWarps * a.head_dim + 2 * kAttnWarps) * sizeof(float);
  attention_kernel<<<static_cast<unsigned>(a.n * a.heads), kAttnWarps * kWarp, shmem, stream()>>>(a);
  launched("attention");
}

}  // namespace ds4::backend::cuda
