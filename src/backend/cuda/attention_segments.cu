// attention_segments.cu — attention with per-head sinks (MODEL.md §7.6) in the segment order of
// README.md "Attention summation order", for every batch size. A query's candidate rows (its raw window
// in position order, then its compressed rows) are cut into segments of kSeg = 32 rows; each segment is
// an online softmax in row order from (m = −inf, l = 0, acc = 0); the segment states are merged in
// segment order; the sink comes last. The order depends on nothing but the query's own rows, so the two
// launch shapes below give the same bits and the dispatch picks one by batch size:
//  * chunk (prefill, large batches): one block per (query, W heads), one warp per head. Each segment's
//    rows are staged in shared memory once for the W heads (the single KV head is shared by all query
//    heads), its state is computed and merged into the running state, and the next segment follows.
//  * split (decode, few queries): the split kernel runs one block per (segment, W heads, query) and
//    writes each segment's state to scratch; the chunk kernel then runs with one warp per (query, head),
//    reads the stored states and merges them in segment order. A decode step of one query is 20 × 8
//    blocks for a CSA layer (640 rows) instead of 8 blocks walking 640 rows each.
// Both shapes share the per-row step, the merge and the sink as the __device__ functions below (the
// build has --fmad=false: no contraction, so the same expressions round the same way everywhere).
// Deliberately not here: the previous kernels (ops_attention.cu: one online softmax over all rows per
// head; attention_decode.cu: 16 row ranges per head without tensor cores), which
// CudaBackendOptions::attention_segments = false and tensor_cores = false keep.
#include <algorithm>
#include <string>

#include "backend/cuda/attention_rows.cuh"
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_impl.h"
#include "modelspec/memory_plan.h"

namespace ds4::backend::cuda {

namespace {

constexpr int kSeg = kAttnSeg;         // rows per segment (attention_rows.cuh): the summation contract
constexpr int kMaxHeadsPerBlock = 8;   // W: heads sharing a block's staged rows (launch shape only)
constexpr int kScoreBatch = 8;         // rows whose dot products are in flight together (ILP only)
constexpr int kMergeBatch = 4;         // stored states loaded ahead of their merges (ILP only)
constexpr int kStageBatch = 8;         // float4 loads in flight per thread while staging (ILP only)
// Largest split scratch (segment states of one call); a bigger call runs the chunk shape (same bits).
constexpr uint64_t kSplitScratchMax = uint64_t{64} << 20;
// The memory plan (modelspec::cuda_attention_split_bytes) sizes this scratch from the same figures.
static_assert(kSeg == modelspec::kCudaAttnSegmentRows && kSplitScratchMax == modelspec::kCudaAttnSplitScratchMax &&
              kMaxHeadsPerBlock == 8 && CudaBackendOptions{}.attention_split_max_blocks == modelspec::kCudaAttnSplitMaxBlocks);

// Row step of the online softmax for score s: (m, l) advance; the accumulator takes acc·corr + p·row.
// corr = 1 without expf when the maximum holds (m − m' = ±0, and expf(±0) = 1 exactly): the same value,
// one exponential fewer on most rows.
__device__ inline void online_step(float& m, float& l, float s, float& corr, float& p) {
  const float m_new = fmaxf(m, s);
  const float d = m - m_new;
  corr = d == 0.0f ? 1.0f : expf(d);
  p = expf(s - m_new);
  l = l * corr + p;
  m = m_new;
}

// One warp: the state of one head over a segment's rows 0 … cnt−1 (cnt ≤ kSeg, warp-uniform), in row
// order from (−inf, 0, 0). row(r) points at row r (shared memory or the KV arrays: the values are the
// same). Lane l holds elements l + 32k; a score is Σ_k q·row in k order per lane, then warp_sum.
template <int PL, typename RowAt>
__device__ inline void segment_state(RowAt row, int cnt, const float (&q)[PL], float scale, int lane, float& m,
                                     float& l, float (&acc)[PL]) {
  m = -INFINITY;
  l = 0.0f;
#pragma unroll
  for (int k = 0; k < PL; ++k) acc[k] = 0.0f;
  for (int r0 = 0; r0 < cnt; r0 += kScoreBatch) {
    float s[kScoreBatch];
#pragma unroll
    for (int b = 0; b < kScoreBatch; ++b) {  // independent dot products first (the order per row is fixed)
      float dot = 0.0f;
      if (r0 + b < cnt) {
        const float* rv = row(r0 + b);
#pragma unroll
        for (int k = 0; k < PL; ++k) dot += q[k] * rv[lane + kWarp * k];
      }
      s[b] = dot;
    }
#pragma unroll
    for (int b = 0; b < kScoreBatch; ++b) s[b] = warp_sum(s[b]) * scale;
#pragma unroll
    for (int b = 0; b < kScoreBatch; ++b) {  // then the softmax steps, in row order
      if (r0 + b < cnt) {
        const float* rv = row(r0 + b);
        float corr, p;
        online_step(m, l, s[b], corr, p);
#pragma unroll
        for (int k = 0; k < PL; ++k) acc[k] = acc[k] * corr + p * rv[lane + kWarp * k];
      }
    }
  }
}

// Whole block: copies rows j0 … j0+cnt−1 of query q into rows [cnt][D]. ptrs: kSeg row pointers
// (shared); blockDim.x ≥ kSeg. Ends with __syncthreads (rows ready); the caller syncs before reuse.
template <int PL>
__device__ inline void stage_segment(float* rows, const float** ptrs, const QueryRows& q, int64_t raw_cap, int64_t j0,
                                     int cnt) {
  constexpr int64_t D = PL * kWarp;
  constexpr int d4 = static_cast<int>(D / 4);
  if (static_cast<int>(threadIdx.x) < cnt) ptrs[threadIdx.x] = candidate_row(q, raw_cap, D, j0 + threadIdx.x);
  __syncthreads();
  const int n4 = cnt * d4;
  const int step = static_cast<int>(blockDim.x);
  for (int e0 = static_cast<int>(threadIdx.x); e0 < n4; e0 += kStageBatch * step) {
    float4 v[kStageBatch];
#pragma unroll
    for (int u = 0; u < kStageBatch; ++u) {
      const int e = e0 + u * step;
      if (e < n4) v[u] = reinterpret_cast<const float4*>(ptrs[e / d4])[e % d4];
    }
#pragma unroll
    for (int u = 0; u < kStageBatch; ++u) {
      const int e = e0 + u * step;
      if (e < n4) reinterpret_cast<float4*>(rows)[e] = v[u];
    }
  }
  __syncthreads();
}

// Block = (query i, W = blockDim.x/32 heads), one warp per head: merges the query's segments in order,
// then the sink. kStored = false (chunk shape): every segment is computed here from rows staged in
// shared memory ([kSeg][D] floats, dynamic) once for the W heads. kStored = true (merge after the split
// kernel, W = 1, no shared rows): segments 0 … n_stored−1 are read from scratch; any past the host's
// bound are computed here from the rows where they live. Two instantiations, so the chunk shape does
// not carry the merge's registers.
template <int PL, bool kStored>
__global__ void attention_chunk_kernel(AttentionArgs a, SegStates st) {
  extern __shared__ float4 stage4[];
  __shared__ const float* ptrs[kSeg];
  constexpr int64_t D = PL * kWarp;
  const int W = static_cast<int>(blockDim.x) / kWarp;
  const int groups = a.heads / W;
  const int64_t i = blockIdx.x / groups;
  const int lane = threadIdx.x % kWarp, wid = threadIdx.x / kWarp;
  const int h = static_cast<int>(blockIdx.x % groups) * W + wid;
  const QueryRows qrows = query_rows(a, i);
  const int64_t n_seg = segments_of(qrows);
  const float* qp = a.q + (i * a.heads + h) * D;
  float q[PL], acc_run[PL];
#pragma unroll
  for (int k = 0; k < PL; ++k) {
    q[k] = qp[lane + kWarp * k];
    acc_run[k] = 0.0f;
  }
  float M = -INFINITY, L = 0.0f;
  const int64_t n_read = !kStored ? 0 : n_seg < st.n_stored ? n_seg : st.n_stored;
  const int64_t slot0 = (i * a.heads + h) * st.n_stored;
  for (int64_t k0 = 0; k0 < n_read; k0 += kMergeBatch) {
    float ms[kMergeBatch], ls[kMergeBatch], as[kMergeBatch][PL];
#pragma unroll
    for (int b = 0; b < kMergeBatch; ++b) {
      if (k0 + b < n_read) {
        const int64_t slot = slot0 + k0 + b;
        ms[b] = st.ml[2 * slot];
        ls[b] = st.ml[2 * slot + 1];
#pragma unroll
        for (int k = 0; k < PL; ++k) as[b][k] = st.acc[slot * D + lane + kWarp * k];
      }
    }
#pragma unroll
    for (int b = 0; b < kMergeBatch; ++b) {
      if (k0 + b < n_read) {
        float fa, fb;
        merge_step(M, L, ms[b], ls[b], fa, fb);
#pragma unroll
        for (int k = 0; k < PL; ++k) acc_run[k] = merged(acc_run[k], fa, as[b][k], fb);
      }
    }
  }
  float* rows = reinterpret_cast<float*>(stage4);
  for (int64_t seg = n_read; seg < n_seg; ++seg) {  // n_seg is the same for every warp of the block
    const int64_t j0 = seg * kSeg;
    const int cnt = static_cast<int>(qrows.total - j0 < kSeg ? qrows.total - j0 : kSeg);
    float m, l, acc[PL];
    if constexpr (!kStored) {
      __syncthreads();  // every warp is done with the previous segment's rows and pointers
      stage_segment<PL>(rows, ptrs, qrows, a.raw_cap, j0, cnt);
      segment_state<PL>([&](int r) { return rows + r * D; }, cnt, q, a.scale, lane, m, l, acc);
    } else {  // merge launch, segments past the host's bound (one warp per block: nothing to share)
      segment_state<PL>([&](int r) { return candidate_row(qrows, a.raw_cap, D, j0 + r); }, cnt, q, a.scale, lane, m,
                        l, acc);
    }
    float fa, fb;
    merge_step(M, L, m, l, fa, fb);
#pragma unroll
    for (int k = 0; k < PL; ++k) acc_run[k] = merged(acc_run[k], fa, acc[k], fb);
  }
  float f, denom;
  sink_step(a.sinks[h], M, L, f, denom);
  float* o = a.out + (i * a.heads + h) * D;
#pragma unroll
  for (int k = 0; k < PL; ++k) o[lane + kWarp * k] = acc_run[k] * f / denom;
}

// Split kernel: block = (segment k, head group, query i), W = blockDim.x/32 heads, one warp per head;
// stores segment k's state of each head. Segments past the query's rows have nothing to store (the
// merge reads only the query's own segments). Dynamic shared memory: [kSeg][D] floats.
template <int PL>
__global__ void attention_split_kernel(AttentionArgs a, SegStates st) {
  extern __shared__ float4 stage4[];
  __shared__ const float* ptrs[kSeg];
  constexpr int64_t D = PL * kWarp;
  const int W = static_cast<int>(blockDim.x) / kWarp;
  const int64_t seg = blockIdx.x;
  const int64_t i = blockIdx.z;
  const int lane = threadIdx.x % kWarp, wid = threadIdx.x / kWarp;
  const int h = static_cast<int>(blockIdx.y) * W + wid;
  const QueryRows qrows = query_rows(a, i);
  if (seg >= segments_of(qrows)) return;  // the whole block leaves together
  const int64_t j0 = seg * kSeg;
  const int cnt = static_cast<int>(qrows.total - j0 < kSeg ? qrows.total - j0 : kSeg);
  const float* qp = a.q + (i * a.heads + h) * D;
  float q[PL];
#pragma unroll
  for (int k = 0; k < PL; ++k) q[k] = qp[lane + kWarp * k];
  float* rows = reinterpret_cast<float*>(stage4);
  stage_segment<PL>(rows, ptrs, qrows, a.raw_cap, j0, cnt);
  float m, l, acc[PL];
  segment_state<PL>([&](int r) { return rows + r * D; }, cnt, q, a.scale, lane, m, l, acc);
  const int64_t slot = (i * a.heads + h) * st.n_stored + seg;
#pragma unroll
  for (int k = 0; k < PL; ++k) st.acc[slot * D + lane + kWarp * k] = acc[k];
  if (lane == 0) {
    st.ml[2 * slot] = m;
    st.ml[2 * slot + 1] = l;
  }
}

// Chunk shape for many queries of one KV head (MQA), head_dim 512: block = (query i, kMqaWarps·G
// heads), warp w holds G heads. Each staged row is read from shared memory once per warp into
// registers and used for the G heads' scores and accumulators (attention_chunk_kernel reads it twice
// per head: shared-memory bandwidth, not arithmetic, bounded it), and each segment is staged once per
// 16 heads instead of 8. Per (query, head) the float operations are segment_state's, merge_step's and
// sink_step's in the same order, so the bits equal the other shapes'; the running accumulators live
// in shared memory ([kMqaWarps·G][D] after the staged rows) to leave registers for the G heads.
// acc·corr is skipped when corr = 1 (x·1 = x exactly: same bits, a third fewer multiplies per row).
constexpr int kMqaWarps = 8;
constexpr int kMqaPl = 16;  // head_dim 512 only (the Flash shape); other head_dims take the chunk kernel
template <int G>
__global__ void __launch_bounds__(kMqaWarps * kWarp, 2) attention_mqa_kernel(AttentionArgs a) {
  constexpr int PL = kMqaPl;
  constexpr int D = PL * kWarp;
  constexpr int HB = kMqaWarps * G;  // heads per block
  extern __shared__ float4 stage4[];
  __shared__ const float* ptrs[kSeg];
  const int groups = a.heads / HB;
  const int64_t i = blockIdx.x / groups;
  const int lane = threadIdx.x % kWarp, wid = threadIdx.x / kWarp;
  const int h0 = static_cast<int>(blockIdx.x % groups) * HB + wid * G;  // this warp's first head
  const QueryRows qrows = query_rows(a, i);
  const int64_t n_seg = segments_of(qrows);
  float* rows = reinterpret_cast<float*>(stage4);
  float* run = rows + kSeg * D + wid * G * D;  // this warp's running accumulators [G][D]
  float q[G][PL], M[G], L[G];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    const float* qp = a.q + (i * a.heads + h0 + g) * D;
#pragma unroll
    for (int k = 0; k < PL; ++k) {
      q[g][k] = qp[lane + kWarp * k];
      run[g * D + lane + kWarp * k] = 0.0f;
    }
    M[g] = -INFINITY;
    L[g] = 0.0f;
  }
  for (int64_t seg = 0; seg < n_seg; ++seg) {  // n_seg is the same for every warp of the block
    const int64_t j0 = seg * kSeg;
    const int cnt = static_cast<int>(qrows.total - j0 < kSeg ? qrows.total - j0 : kSeg);
    __syncthreads();  // every warp is done with the previous segment's rows and pointers
    stage_segment<PL>(rows, ptrs, qrows, a.raw_cap, j0, cnt);
    float m[G], l[G], acc[G][PL];
#pragma unroll
    for (int g = 0; g < G; ++g) {
      m[g] = -INFINITY;
      l[g] = 0.0f;
#pragma unroll
      for (int k = 0; k < PL; ++k) acc[g][k] = 0.0f;
    }
    for (int r = 0; r < cnt; ++r) {  // segment_state's row steps, one row at a time (warp-uniform)
      float rv[PL], s[G];
#pragma unroll
      for (int k = 0; k < PL; ++k) rv[k] = rows[r * D + lane + kWarp * k];
#pragma unroll
      for (int g = 0; g < G; ++g) {
        float dot = 0.0f;
#pragma unroll
        for (int k = 0; k < PL; ++k) dot += q[g][k] * rv[k];
        s[g] = dot;
      }
#pragma unroll
      for (int g = 0; g < G; ++g) s[g] = warp_sum(s[g]) * a.scale;
#pragma unroll
      for (int g = 0; g < G; ++g) {
        float corr, p;
        online_step(m[g], l[g], s[g], corr, p);
        if (corr == 1.0f) {
#pragma unroll
          for (int k = 0; k < PL; ++k) acc[g][k] = acc[g][k] + p * rv[k];
        } else {
#pragma unroll
          for (int k = 0; k < PL; ++k) acc[g][k] = acc[g][k] * corr + p * rv[k];
        }
      }
    }
#pragma unroll
    for (int g = 0; g < G; ++g) {
      float fa, fb;
      merge_step(M[g], L[g], m[g], l[g], fa, fb);
#pragma unroll
      for (int k = 0; k < PL; ++k) {
        float& x = run[g * D + lane + kWarp * k];
        x = merged(x, fa, acc[g][k], fb);
      }
    }
  }
#pragma unroll
  for (int g = 0; g < G; ++g) {
    float f, denom;
    sink_step(a.sinks[h0 + g], M[g], L[g], f, denom);
    float* o = a.out + (i * a.heads + h0 + g) * D;
#pragma unroll
    for (int k = 0; k < PL; ++k) o[lane + kWarp * k] = run[g * D + lane + kWarp * k] * f / denom;
  }
}
constexpr int kMqaHeads = 2;  // G of the launch: heads per warp (registers: 2 × (q, acc) + one row)
constexpr size_t kMqaSmem = (static_cast<size_t>(kSeg) + kMqaWarps * kMqaHeads) * kMqaPl * kWarp * sizeof(float);

// smem_ready: the 64 KiB limit is set (only D = 512 needs it; once per backend, not per call).
template <int PL>
void launch_segments(CudaBackend& be, const AttentionArgs& a, int W, int64_t split_segs, SegStates st, bool& smem_ready) {
  const size_t rows_bytes = static_cast<size_t>(kSeg) * PL * kWarp * sizeof(float);
  if (rows_bytes > 48 * 1024 && !smem_ready) {  // D = 512: 64 KiB of staged rows, above the default limit
    smem_ready =
        be.check(cudaFuncSetAttribute(attention_chunk_kernel<PL, false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(rows_bytes)), "attention chunk smem") &&
        be.check(cudaFuncSetAttribute(attention_split_kernel<PL>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(rows_bytes)), "attention split smem");
  }
  const unsigned groups = static_cast<unsigned>(a.heads / W);
  cudaStream_t s = be.stream();
  if (split_segs > 0) {
    const dim3 grid(static_cast<unsigned>(split_segs), groups, static_cast<unsigned>(a.n));
    attention_split_kernel<PL><<<grid, W * kWarp, rows_bytes, s>>>(a, st);
    if (!be.launched("attention segments (split)")) return;
    // Merge: one warp per (query, head); no rows to share, so no shared memory.
    attention_chunk_kernel<PL, true><<<static_cast<unsigned>(a.n * a.heads), kWarp, 0, s>>>(a, st);
    be.launched("attention segments (merge)");
    return;
  }
  attention_chunk_kernel<PL, false><<<static_cast<unsigned>(a.n * groups), W * kWarp, rows_bytes, s>>>(a, st);
  be.launched("attention segments (chunk)");
}

// The MQA chunk shape (head_dim 512, heads a multiple of kMqaWarps·kMqaHeads); smem_ready as above.
void launch_mqa(CudaBackend& be, const AttentionArgs& a, bool& smem_ready) {
  if (!smem_ready) {
    smem_ready = be.check(cudaFuncSetAttribute(attention_mqa_kernel<kMqaHeads>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(kMqaSmem)), "attention mqa smem");
  }
  const int64_t groups = a.heads / (kMqaWarps * kMqaHeads);
  attention_mqa_kernel<kMqaHeads><<<static_cast<unsigned>(a.n * groups), kMqaWarps * kWarp, kMqaSmem, be.stream()>>>(a);
  be.launched("attention segments (mqa chunk)");
}

}  // namespace

bool CudaBackend::attention_segments(const AttentionArgs& a) {
  const int pl = a.head_dim / kWarp;
  if (pl != 2 && pl != 4 && pl != 8 && pl != 16) return false;
  int W = kMaxHeadsPerBlock;  // heads per block: the largest power of two ≤ 8 dividing heads
  while (a.heads % W != 0) W /= 2;
  const int64_t split_segs = attention_split_segments(a, attn_split_max_blocks_, kSplitScratchMax);
  if (split_segs == 0 && attn_heads_per_warp_ == kMqaHeads && pl == kMqaPl && a.heads % (kMqaWarps * kMqaHeads) == 0) {
    launch_mqa(*this, a, attn_mqa_smem_);
    return true;
  }
  SegStates st;
  if (!split_states(*this, attn_seg_, a, split_segs, st)) return true;
  switch (pl) {
    case 2: launch_segments<2>(*this, a, W, split_segs, st, attn_seg_smem_); break;
    case 4: launch_segments<4>(*this, a, W, split_segs, st, attn_seg_smem_); break;
    case 8: launch_segments<8>(*this, a, W, split_segs, st, attn_seg_smem_); break;
    default: launch_segments<16>(*this, a, W, split_segs, st, attn_seg_smem_); break;
  }
  return true;
}

}  // namespace ds4::backend::cuda
