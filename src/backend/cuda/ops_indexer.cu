// ops_indexer.cu — lightning-indexer top-k selection (MODEL.md §7.5; ties per §14.6: lower row id wins).
//
// Scores are computed one thread per row in exactly the CPU's float order (per head a sequential dot,
// then Σ_h w_h·max(0, dot) in head order; no contraction in this build), so the selection — a discrete
// decision — is the CPU's, not merely close to it. Selection: per query, a bitwise search for the k-th
// largest score key, then one ordered compaction pass, which also yields the ids in ascending order.
// Scratch is sized by IndexerArgs::max_rows (a host bound); only without it does the op read the
// per-query row counts back (one small synchronous copy).
#include <algorithm>
#include <string>
#include <vector>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_impl.h"

namespace ds4::backend::cuda {

namespace {

// scores[i][c] for c < n_rows[i] (queries with n_rows ≤ top_k are skipped). One thread per (row,
// head) computes that head's dot sequentially over head_dim; then one thread per row adds
// w_h·max(0, dot_h) in head order — the CPU's float order, with heads in parallel (a thread per row
// walking all heads·head_dim products serially was the decode step's slowest kernel).
// Block: kIdxRows rows × heads threads (heads ≤ 64, blockDim = kIdxRows·heads). Shared: q_i with a
// padded head stride (conflict-free when a warp's lanes are 32 heads of one row), w_i, the dots.
constexpr int kIdxRows = 4;
__global__ void indexer_score_kernel(IndexerArgs a, float* scores, int64_t score_stride) {
  extern __shared__ float sh[];
  const int64_t i = blockIdx.y;
  const int32_t nr = a.n_rows[i];
  if (nr <= a.top_k) return;
  const int qs = a.head_dim + 1;  // padded head stride
  float* shq = sh;                          // [heads][qs]
  float* shw = shq + a.heads * qs;          // [heads]
  float* dots = shw + a.heads;              // [kIdxRows][heads]
  for (int k = threadIdx.x; k < a.heads * a.head_dim; k += blockDim.x)
    shq[(k / a.head_dim) * qs + k % a.head_dim] = a.q[i * a.heads * a.head_dim + k];
  for (int k = threadIdx.x; k < a.heads; k += blockDim.x) shw[k] = a.w[i * a.heads + k];
  __syncthreads();
  const int h = threadIdx.x % a.heads, rr = threadIdx.x / a.heads;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kIdxRows + rr;
  if (c < nr) {
    const float* k = (a.rows_at ? a.rows_at[i] : a.rows) + c * a.head_dim;  // per-query rows in a batched step
    const float* qh = shq + h * qs;
    float dot = 0;
    for (int d = 0; d < a.head_dim; ++d) dot += qh[d] * k[d];
    dots[rr * a.heads + h] = dot;
  }
  __syncthreads();
  if (h != 0 || c >= nr) return;
  float sc = 0;
  for (int hh = 0; hh < a.heads; ++hh) sc += shw[hh] * fmaxf(0.0f, dots[rr * a.heads + hh]);
  scores[i * score_stride + c] = sc;
}

// Prefill chunks: the same scores with the row in registers. One block per (128 rows, 16 queries);
// thread t keeps row t of its tile (HD floats) across the block's queries (reloaded only when a query
// of another session points at other rows), and each query's q and w are staged once in shared memory
// and read as broadcasts. The arithmetic per (query, row) is indexer_score_kernel's, in the same order.
// (One thread per (query, row) re-read its 512-byte row from L1/L2 for each of the 64 heads, lanes
// 512 bytes apart: the indexer dominated a 4K prefill.)
constexpr int kIdxTileRows = 128;
constexpr int kIdxTileQueries = 16;

template <int HD>
__global__ void __launch_bounds__(kIdxTileRows) indexer_score_tiled_kernel(IndexerArgs a, float* scores,
                                                                          int64_t score_stride) {
  extern __shared__ float sh[];  // q_i [heads][HD], then w_i [heads]
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kIdxTileRows + threadIdx.x;
  const int64_t tile0 = static_cast<int64_t>(blockIdx.x) * kIdxTileRows;
  const int hd = a.heads * HD;
  float kr[HD];
  const float* base = nullptr;
  for (int qi = 0; qi < kIdxTileQueries; ++qi) {
    const int64_t i = static_cast<int64_t>(blockIdx.y) * kIdxTileQueries + qi;
    if (i >= a.n) break;
    const int32_t nr = a.n_rows[i];
    if (nr <= a.top_k || tile0 >= nr) continue;  // the same for every thread of the block
    __syncthreads();                            // the previous query's q/w have been read
    for (int k = threadIdx.x; k < hd; k += blockDim.x) sh[k] = a.q[i * hd + k];
    for (int k = threadIdx.x; k < a.heads; k += blockDim.x) sh[hd + k] = a.w[i * a.heads + k];
    __syncthreads();
    if (c >= nr) continue;
    const float* rows = a.rows_at ? a.rows_at[i] : a.rows;  // per-query rows in a batched step
    if (rows != base) {
      base = rows;
      if ((reinterpret_cast<uintptr_t>(rows) & 15) == 0) {
        const float4* src = reinterpret_cast<const float4*>(rows + c * HD);
#pragma unroll
        for (int d4 = 0; d4 < HD / 4; ++d4) {
          const float4 v = src[d4];
          kr[4 * d4] = v.x;
          kr[4 * d4 + 1] = v.y;
          kr[4 * d4 + 2] = v.z;
          kr[4 * d4 + 3] = v.w;
        }
      } else {
#pragma unroll
        for (int d = 0; d < HD; ++d) kr[d] = rows[c * HD + d];
      }
    }
    float sc = 0;
    for (int h = 0; h < a.heads; ++h) {
      const float* qh = sh + h * HD;
      float dot = 0;
#pragma unroll
      for (int d = 0; d < HD; ++d) dot += qh[d] * kr[d];
      sc += sh[hd + h] * fmaxf(0.0f, dot);
    }
    scores[i * score_stride + c] = sc;
  }
}

// Order-preserving key: a larger score gives a larger unsigned key; −0 and +0 tie as on the CPU.
__device__ inline uint32_t score_key(float f) {
  const uint32_t u = __float_as_uint(f == 0.0f ? 0.0f : f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Exclusive prefix count of `flag` over the block (blockDim.x a multiple of 32); *total gets the sum.
__device__ int block_prefix(bool flag, int* total) {
  __shared__ int warp_cnt[32];
  const int lane = threadIdx.x % kWarp, wid = threadIdx.x / kWarp, nw = blockDim.x / kWarp;
  const unsigned b = __ballot_sync(0xffffffffu, flag);
  __syncthreads();  // warp_cnt may still be read by the previous call
  if (lane == 0) warp_cnt[wid] = __popc(b);
  __syncthreads();
  int off = 0, tot = 0;
  for (int w = 0; w < nw; ++w) {
    if (w < wid) off += warp_cnt[w];
    tot += warp_cnt[w];
  }
  *total = tot;
  return off + __popc(b & ((1u << lane) - 1u));
}

// One block per query: idx[i][0..count) ascending, count = min(n_rows, top_k).
__global__ void indexer_select_kernel(IndexerArgs a, const float* scores, int64_t score_stride) {
  const int64_t i = blockIdx.x;
  const int32_t nr = a.n_rows[i];
  int32_t* out = a.idx + i * a.top_k;
  if (nr <= a.top_k) {  // every row is visible; no scoring (as ds4)
    for (int c = threadIdx.x; c < nr; c += blockDim.x) out[c] = c;
    if (threadIdx.x == 0) a.count[i] = nr < 0 ? 0 : nr;
    return;
  }
  const float* s = scores + i * score_stride;
  // T = the top_k-th largest key: the largest T with #{key ≥ T} ≥ top_k, built bit by bit.
  uint32_t T = 0;
  for (int bit = 31; bit >= 0; --bit) {
    const uint32_t cand = T | (1u << bit);
    int cnt = 0;
    for (int base = 0; base < nr; base += blockDim.x) {
      const int c = base + threadIdx.x;
      cnt += __syncthreads_count(c < nr && score_key(s[c]) >= cand);
    }
    if (cnt >= a.top_k) T = cand;
  }
  int greater = 0;
  for (int base = 0; base < nr; base += blockDim.x) {
    const int c = base + threadIdx.x;
    greater += __syncthreads_count(c < nr && score_key(s[c]) > T);
  }
  const int need_eq = a.top_k - greater;  // ties at T: the lowest ids
  int written = 0, eq_seen = 0;
  for (int base = 0; base < nr; base += blockDim.x) {
    const int c = base + threadIdx.x;
    const uint32_t key = c < nr ? score_key(s[c]) : 0u;
    const bool eq = c < nr && key == T;
    int eq_total;
    const int eq_rank = eq_seen + block_prefix(eq, &eq_total);
    const bool sel = c < nr && (key > T || (eq && eq_rank < need_eq));
    int sel_total;
    const int pos = written + block_prefix(sel, &sel_total);
    if (sel) out[pos] = c;
    written += sel_total;
    eq_seen += eq_total;
  }
  if (threadIdx.x == 0) a.count[i] = a.top_k;
}

}  // namespace

void CudaBackend::indexer(const IndexerArgs& a) {
  if (failed() || a.n <= 0) return;
  if (a.top_k <= 0 || a.heads <= 0 || a.head_dim <= 0 || a.n > 65535) {
    fail(invalid_argument("cuda indexer: bad shape (n " + std::to_string(a.n) + ", top_k " + std::to_string(a.top_k) + ")"));
    return;
  }
  int64_t max_rows = a.max_rows;
  if (max_rows <= 0) {  // no host bound given: read the counts back (a synchronous copy)
    std::vector<int32_t> counts(static_cast<size_t>(a.n));
    download(counts.data(), a.n_rows, static_cast<uint64_t>(a.n) * 4);
    if (failed()) return;
    max_rows = *std::max_element(counts.begin(), counts.end());
  }
  float* scores = nullptr;
  if (max_rows > a.top_k) {
    if (!ensure(idx_scores_, static_cast<uint64_t>(a.n * max_rows) * 4, "indexer scores")) return;
    scores = static_cast<float*>(idx_scores_.ptr);
    const size_t shmem =
        (static_cast<size_t>(a.heads) * (a.head_dim + 1) + a.heads + static_cast<size_t>(kIdxRows) * a.heads) * sizeof(float);
    if (shmem > 48 * 1024 || a.heads > 256) {
      fail(invalid_argument("cuda indexer: heads·head_dim too large for one block's shared memory"));
      return;
    }
    if (tensor_cores() && a.n >= 2 && (a.head_dim == 128 || a.head_dim == 64)) {
      const dim3 grid(grid_for(max_rows, kIdxTileRows), grid_for(a.n, kIdxTileQueries));
      if (a.head_dim == 128)
        indexer_score_tiled_kernel<128><<<grid, kIdxTileRows, shmem, stream()>>>(a, scores, max_rows);
      else
        indexer_score_tiled_kernel<64><<<grid, kIdxTileRows, shmem, stream()>>>(a, scores, max_rows);
    } else {  // decode: one thread per (row, head), kIdxRows rows per block (shmem covers both layouts)
      const dim3 grid(grid_for(max_rows, kIdxRows), static_cast<unsigned>(a.n));
      indexer_score_kernel<<<grid, kIdxRows * a.heads, shmem, stream()>>>(a, scores, max_rows);
    }
    if (!launched("indexer scores")) return;
  }
  indexer_select_kernel<<<static_cast<unsigned>(a.n), 512, 0, stream()>>>(a, scores, max_rows);
  launched("indexer select");
}

}  // namespace ds4::backend::cuda
