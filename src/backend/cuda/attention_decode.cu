// attention_decode.cu — attention with sinks (MODEL.md §7.6) as split-K ("flash decoding") over the
// candidate rows, then one merge per (query, head) with the sink; used for every batch size.
//
// Why: the one-block-per-(query, head) kernel (ops_attention.cu) runs a decode step as 64 blocks
// walking ~640 rows each one after another — ~217 µs per CSA layer on the H200, latency-bound while
// the rows (≈1.3 MB) could be read in a few µs. Here each (query, head) is split into kSplits row
// ranges that run in parallel (1024 blocks at H 64, ~31 µs measured), every range keeps an online
// softmax state (m, l, acc[D]) in scratch, and the merge kernel combines them with the sink as the
// general kernel merges its warps. Results agree with the CPU's two-pass softmax to float rounding.
// Batches run kSliceQueries queries per launch pair with the same per-query arithmetic, so a query's
// output does not depend on the batch around it (a decode step ≡ the same token in a batched step,
// which official numerics would otherwise amplify).
// Deliberately not here: query tiles sharing K/V loads for long prefill chunks; the row count per
// query is read on the device (comp_count), so nothing is synchronized.
#include <algorithm>
#include <string>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_impl.h"

namespace ds4::backend::cuda {

namespace {

constexpr int kSplits = 16;
constexpr int64_t kSliceQueries = 16;  // queries per launch pair (scratch: 16·heads·kSplits·(D+2) floats)
constexpr int kWarpsPerSplit = 4;
constexpr int kMaxPerLane = 16;  // head_dim ≤ 512

// Block (split s, head h, query i): online softmax over rows [s·chunk, (s+1)·chunk) of the query's
// raw window followed by its compressed rows. part: [n·heads·kSplits][D] acc, ml: […][2] (m, l).
__global__ void __launch_bounds__(kWarpsPerSplit * kWarp) attention_split_kernel(AttentionArgs a, float* part, float* ml) {
  __shared__ float sh[kWarpsPerSplit * (kMaxPerLane * kWarp) + 2 * kWarpsPerSplit];
  const int64_t D = a.head_dim;
  const int per_lane = static_cast<int>(D / kWarp);
  const int s = blockIdx.x, h = blockIdx.y;
  const int64_t i = blockIdx.z;
  const int lane = threadIdx.x % kWarp, wid = threadIdx.x / kWarp;
  const float* q = a.q + (i * a.heads + h) * D;
  float qr[kMaxPerLane], acc[kMaxPerLane];
#pragma unroll
  for (int k = 0; k < kMaxPerLane; ++k) {
    qr[k] = k < per_lane ? q[lane + kWarp * k] : 0.0f;
    acc[k] = 0;
  }
  const int64_t t = a.pos[i];
  const int64_t first = t - a.window + 1 > 0 ? t - a.window + 1 : 0;
  const int64_t n_raw = t - first + 1;
  const int64_t n_comp = a.comp_count ? a.comp_count[i] : 0;
  const int64_t total = n_raw + n_comp;
  const int64_t chunk = (total + kSplits - 1) / kSplits;
  const int64_t j0 = s * chunk, j1 = j0 + chunk < total ? j0 + chunk : total;
  const float* raw = a.raw_at ? a.raw_at[i] : a.raw;  // per-query session state (batched step)
  const float* comp = a.comp_at ? a.comp_at[i] : a.comp;
  float m = -INFINITY, l = 0;
  for (int64_t j = j0 + wid; j < j1; j += kWarpsPerSplit) {
    const float* r;
    if (j < n_raw) {
      r = raw + ((first + j) % a.raw_cap) * D;
    } else {
      const int64_t c = j - n_raw;
      r = comp + (a.comp_idx ? static_cast<int64_t>(a.comp_idx[i * a.comp_idx_stride + c]) : c) * D;
    }
    float rv[kMaxPerLane];
    float dot = 0;
#pragma unroll
    for (int k = 0; k < kMaxPerLane; ++k) {
      rv[k] = k < per_lane ? r[lane + kWarp * k] : 0.0f;
      if (k < per_lane) dot += qr[k] * rv[k];
    }
    const float sc = warp_sum(dot) * a.scale;
    const float m_new = fmaxf(m, sc);
    const float corr = expf(m - m_new);
    const float p = expf(sc - m_new);
    l = l * corr + p;
#pragma unroll
    for (int k = 0; k < kMaxPerLane; ++k) acc[k] = acc[k] * corr + p * rv[k];
    m = m_new;
  }
  // Merge the block's warps into one state (no sink here: the merge kernel adds it once).
  float* wacc = sh + wid * (kMaxPerLane * kWarp);
  for (int k = 0; k < per_lane; ++k) wacc[lane + kWarp * k] = acc[k];
  float* wm = sh + kWarpsPerSplit * (kMaxPerLane * kWarp);
  float* wl = wm + kWarpsPerSplit;
  if (lane == 0) {
    wm[wid] = m;
    wl[wid] = l;
  }
  __syncthreads();
  float M = -INFINITY;
  for (int w = 0; w < kWarpsPerSplit; ++w) M = fmaxf(M, wm[w]);
  float f[kWarpsPerSplit];
  float L = 0;
  for (int w = 0; w < kWarpsPerSplit; ++w) {
    f[w] = wm[w] == -INFINITY ? 0.0f : expf(wm[w] - M);
    L += wl[w] * f[w];
  }
  const int64_t slot = (i * a.heads + h) * kSplits + s;
  float* o = part + slot * D;
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
    float v = 0;
    for (int w = 0; w < kWarpsPerSplit; ++w) v += sh[w * (kMaxPerLane * kWarp) + d] * f[w];
    o[d] = v;
  }
  if (threadIdx.x == 0) {
    ml[2 * slot] = M;
    ml[2 * slot + 1] = L;
  }
}

// Block (head h, query i): out = Σ_s acc_s·e^(m_s−M) / (e^(sink−M) + Σ_s l_s·e^(m_s−M)), M over the
// splits and the sink (the general kernel's warp merge, over splits).
__global__ void attention_merge_kernel(AttentionArgs a, const float* part, const float* ml) {
  const int h = blockIdx.x;
  const int64_t i = blockIdx.y;
  const int64_t D = a.head_dim;
  const int64_t base = (i * a.heads + h) * kSplits;
  const float sink = a.sinks[h];
  float M = sink;
  for (int s = 0; s < kSplits; ++s) M = fmaxf(M, ml[2 * (base + s)]);
  float denom = expf(sink - M);
  float f[kSplits];
  for (int s = 0; s < kSplits; ++s) {
    const float ms = ml[2 * (base + s)];
    f[s] = ms == -INFINITY ? 0.0f : expf(ms - M);
    denom += ml[2 * (base + s) + 1] * f[s];
  }
  float* o = a.out + (i * a.heads + h) * D;
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
    float v = 0;
    for (int s = 0; s < kSplits; ++s) v += part[(base + s) * D + d] * f[s];
    o[d] = v / denom;
  }
}

}  // namespace

bool CudaBackend::attention_decode(const AttentionArgs& a) {
  if (a.heads > 65535) return false;
  // Every batch size, kSliceQueries queries per launch pair (scratch stays bounded): a query's output
  // is computed the same way whatever the batch, so a decode step equals the token in a batched step.
  const int64_t slice = std::min<int64_t>(a.n, kSliceQueries);
  const uint64_t slots = static_cast<uint64_t>(slice) * a.heads * kSplits;
  if (!ensure(attn_part_, slots * (a.head_dim + 2) * sizeof(float), "attention split partials")) return true;
  float* part = static_cast<float*>(attn_part_.ptr);
  float* ml = part + slots * a.head_dim;
  const int64_t hd = static_cast<int64_t>(a.heads) * a.head_dim;
  for (int64_t i0 = 0; i0 < a.n; i0 += slice) {
    AttentionArgs s = a;
    s.n = std::min<int64_t>(slice, a.n - i0);
    s.q = a.q + i0 * hd;
    s.pos = a.pos + i0;
    s.out = a.out + i0 * hd;
    if (a.comp_count) s.comp_count = a.comp_count + i0;
    if (a.comp_idx) s.comp_idx = a.comp_idx + i0 * a.comp_idx_stride;
    if (a.raw_at) s.raw_at = a.raw_at + i0;
    if (a.comp_at) s.comp_at = a.comp_at + i0;
    const dim3 grid(kSplits, static_cast<unsigned>(a.heads), static_cast<unsigned>(s.n));
    attention_split_kernel<<<grid, kWarpsPerSplit * kWarp, 0, stream()>>>(s, part, ml);
    if (!launched("attention split")) return true;
    attention_merge_kernel<<<dim3(static_cast<unsigned>(a.heads), static_cast<unsigned>(s.n)), 128, 0, stream()>>>(s, part, ml);
    if (!launched("attention merge")) return true;
  }
  return true;
}

}  // namespace ds4::backend::cuda
