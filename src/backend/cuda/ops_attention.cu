// ops_attention.cu — attention with per-head sinks over the raw window and compressed rows
// (MODEL.md §7.3, §7.6). Every row is both key and value (one shared KV head).
//
// One block per (query, head); each warp runs an online softmax over its share of the candidate rows
// (lanes split head_dim), then the warps' partial states and the sink are merged. The CPU op uses a
// two-pass softmax; the results agree to float rounding (~1e-6 relative), not bit for bit.
// Heads a multiple of 8: one block per (query, 8 heads), one warp per head; the block stages
// 16 candidate rows at a time in shared memory, so each row is read from L2 once per 8 heads instead of
// once per head (the single KV head is shared by all 64 query heads; per layer at 4K tokens that is
// 4096·64·~640 rows·2 KB ≈ 340 GB of L2 reads in the one-head-per-block kernel, 8× less here).
// Each warp runs one online softmax over all rows, then adds the sink: the same arithmetic for every
// batch size (decode included), so a token's output does not depend on what shares its call.
// CudaBackend::attention is the one dispatch point: with tensor cores the segment order runs
// (attention_segments.cu, README.md "Attention summation order"); the kernels in this file are the
// previous order, kept for CudaBackendOptions::attention_segments = false and head_dim the segment
// kernels do not take.
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

constexpr int kHeadsPerBlock = 8;
constexpr int kRowTile = 16;

// PL = head_dim / 32 values per lane, a template parameter so q and acc stay in registers.
template <int PL>
__global__ void attention_heads_kernel(AttentionArgs a) {
  extern __shared__ float rows[];  // [kRowTile][D] staged candidate rows
  constexpr int64_t D = PL * kWarp;
  constexpr int per_lane = PL;
  const int groups = a.heads / kHeadsPerBlock;
  const int64_t i = blockIdx.x / groups;
  const int lane = threadIdx.x % kWarp, wid = threadIdx.x / kWarp;
  const int h = static_cast<int>(blockIdx.x % groups) * kHeadsPerBlock + wid;
  const float* q = a.q + (i * a.heads + h) * D;
  float qr[PL], acc[PL];
#pragma unroll
  for (int k = 0; k < per_lane; ++k) {
    qr[k] = q[lane + kWarp * k];
    acc[k] = 0;
  }
  const int64_t t = a.pos[i];
  const int64_t first = t - a.window + 1 > 0 ? t - a.window + 1 : 0;
  const int64_t n_raw = t - first + 1;
  const int64_t n_comp = a.comp_count ? a.comp_count[i] : 0;
  const int64_t total = n_raw + n_comp;
  const int64_t d4 = D / 4;
  const float* raw = a.raw_at ? a.raw_at[i] : a.raw;  // per-query session state (batched step)
  const float* comp = a.comp_at ? a.comp_at[i] : a.comp;
  float m = -INFINITY, l = 0;
  for (int64_t j0 = 0; j0 < total; j0 += kRowTile) {
    const int cnt = static_cast<int>(total - j0 < kRowTile ? total - j0 : kRowTile);
    __syncthreads();  // the previous tile has been read by every warp
    for (int64_t e = threadIdx.x; e < cnt * d4; e += blockDim.x) {
      const int64_t r = e / d4, c4 = e % d4, j = j0 + r;
      const float* src;
      if (j < n_raw) {
        src = raw + ((first + j) % a.raw_cap) * D;
      } else {
        const int64_t c = j - n_raw;
        src = comp + (a.comp_idx ? static_cast<int64_t>(a.comp_idx[i * a.comp_idx_stride + c]) : c) * D;
      }
      reinterpret_cast<float4*>(rows)[r * d4 + c4] = reinterpret_cast<const float4*>(src)[c4];
    }
    __syncthreads();
    for (int r = 0; r < cnt; ++r) {
      const float* rv = rows + r * D;
      float dot = 0;
#pragma unroll
      for (int k = 0; k < per_lane; ++k) dot += qr[k] * rv[lane + kWarp * k];
      const float s = warp_sum(dot) * a.scale;
      const float m_new = fmaxf(m, s);
      const float corr = expf(m - m_new);
      const float p = expf(s - m_new);
      l = l * corr + p;
#pragma unroll
      for (int k = 0; k < per_lane; ++k) acc[k] = acc[k] * corr + p * rv[lane + kWarp * k];
      m = m_new;
    }
  }
  const float sink = a.sinks[h];
  const float M = fmaxf(sink, m);
  const float f = m == -INFINITY ? 0.0f : expf(m - M);
  const float denom = expf(sink - M) + l * f;
  float* o = a.out + (i * a.heads + h) * D;
#pragma unroll
  for (int k = 0; k < per_lane; ++k) o[lane + kWarp * k] = acc[k] * f / denom;
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
  // AttentionArgs::out_rot: the output's inverse RoPE inside the MMA order's sliced merge where it runs
  // (attn_out_rope), else the rope op after the kernels — the same values either way.
  bool rope_done = false;
  auto out_rope = [&] {
    if (a.out_rot > 0 && !rope_done) rope({a.out, a.pos, a.n, a.heads, a.head_dim, a.out_rot, a.out_freq, true});
  };
  AttentionArgs folded = a;
  if (!attn_out_rope_) folded.out_rot = 0;
  // The MMA order (tensor cores), else the scalar segment order: every batch size, split (few queries)
  // or chunk shape, the same bits either way.
  if (attention_mma_ && tensor_cores() && attention_mma(folded, &rope_done)) return out_rope();
  if (attention_segments_ && tensor_cores() && attention_segments(a)) return out_rope();
  const int pl = a.head_dim / kWarp;
  if (tensor_cores() && a.heads % kHeadsPerBlock == 0 && (pl == 2 || pl == 4 || pl == 8 || pl == 16)) {
    const size_t rows_bytes = static_cast<size_t>(kRowTile) * a.head_dim * sizeof(float);
    const unsigned blocks = static_cast<unsigned>(a.n * (a.heads / kHeadsPerBlock));
    const int threads = kHeadsPerBlock * kWarp;
    cudaStream_t s = stream();
    switch (pl) {
      case 2: attention_heads_kernel<2><<<blocks, threads, rows_bytes, s>>>(a); break;
      case 4: attention_heads_kernel<4><<<blocks, threads, rows_bytes, s>>>(a); break;
      case 8: attention_heads_kernel<8><<<blocks, threads, rows_bytes, s>>>(a); break;
      default: attention_heads_kernel<16><<<blocks, threads, rows_bytes, s>>>(a); break;
    }
    launched("attention (8 heads per block)");
    return out_rope();
  }
  // Without tensor cores, or heads not a multiple of 8: the split-rows kernels for every batch size
  // (attention_decode.cu); a query's output is the same whatever the batch, as with the 8-head kernel.
  if (decode_kernels_ && attention_decode(a)) return out_rope();
  const size_t shmem = (kAttnWarps * a.head_dim + 2 * kAttnWarps) * sizeof(float);
  attention_kernel<<<static_cast<unsigned>(a.n * a.heads), kAttnWarps * kWarp, shmem, stream()>>>(a);
  launched("attention");
  out_rope();
}

}  // namespace ds4::backend::cuda
