// attention_rows.cuh — what the two attention orders (attention_segments.cu: 32-lane dots, online
// softmax per row; attention_mma.cu: tensor-core MMAs) share: a query's candidate rows (raw window in
// position order, then its compressed rows), their cut into kAttnSeg-row segments, the segment states in
// scratch, and the float steps that merge segment states in order and add the sink (README.md
// "Attention summation order", steps 4–5 of either order). Both kernels' merges call these, so a state
// merged in a chunk kernel's registers and one read back from scratch by a merge launch round alike.
// Deliberately not here: how a segment's state is computed (that is what the two orders differ in).
#pragma once

#include <cstdint>

#include "backend/backend.h"
#include "backend/cuda/cuda_impl.h"

namespace ds4::backend::cuda {

inline constexpr int kAttnSeg = 32;  // rows per segment: part of both summation contracts, never a tuning knob

// Segment states in scratch. Slot (i, h, k) = (i·heads + h)·n_stored + k holds segment k of query i,
// head h: acc [D] floats at acc + slot·D, (m, l) at ml + 2·slot.
struct SegStates {
  float* acc = nullptr;
  float* ml = nullptr;
  int32_t n_stored = 0;  // segments per (query, head) in scratch
};

// Query i's candidate rows: j < n_raw is raw position first + j (ring row (first + j) mod raw_cap),
// then compressed row comp_idx[i][j − n_raw] (or j − n_raw without selection).
struct QueryRows {
  const float* raw;
  const float* comp;
  const int32_t* idx;
  int64_t first, n_raw, total;
};

__device__ inline QueryRows query_rows(const AttentionArgs& a, int64_t i) {
  QueryRows r;
  const int64_t t = a.pos[i];
  r.first = t - a.window + 1 > 0 ? t - a.window + 1 : 0;
  r.n_raw = t - r.first + 1;
  r.total = r.n_raw + (a.comp_count ? a.comp_count[i] : 0);
  r.raw = a.raw_at ? a.raw_at[i] : a.raw;  // per-query session state (batched step)
  r.comp = a.comp_at ? a.comp_at[i] : a.comp;
  r.idx = a.comp_idx ? a.comp_idx + i * a.comp_idx_stride : nullptr;
  return r;
}

__device__ inline const float* candidate_row(const QueryRows& q, int64_t raw_cap, int64_t D, int64_t j) {
  if (j < q.n_raw) return q.raw + ((q.first + j) % raw_cap) * D;
  const int64_t c = j - q.n_raw;
  return q.comp + (q.idx ? static_cast<int64_t>(q.idx[c]) : c) * D;
}

__device__ inline int64_t segments_of(const QueryRows& q) {
  return q.total > 0 ? (q.total + kAttnSeg - 1) / kAttnSeg : 0;
}

// Merge of a segment state (m_s, l_s, acc_s) into the running state (M, L, Acc): (M, L) advance; the
// accumulator takes merged(Acc, fa, acc_s, fb). An empty side (m = −inf) weighs 0, so merging into the
// initial state (−inf, 0, 0) copies the segment exactly.
__device__ inline void merge_step(float& M, float& L, float m_s, float l_s, float& fa, float& fb) {
  const float m_new = fmaxf(M, m_s);
  fa = M == -INFINITY ? 0.0f : expf(M - m_new);
  fb = m_s == -INFINITY ? 0.0f : expf(m_s - m_new);
  L = L * fa + l_s * fb;
  M = m_new;
}
__device__ inline float merged(float acc, float fa, float acc_s, float fb) { return acc * fa + acc_s * fb; }

// The sink, last: out = Acc·f / denom.
__device__ inline void sink_step(float sink, float M, float L, float& f, float& denom) {
  const float mx = fmaxf(sink, M);
  f = M == -INFINITY ? 0.0f : expf(M - mx);
  denom = expf(sink - mx) + L * f;
}

// Host: the segments per (query, head) a split launch stores, or 0 for the chunk shape. Split when the
// chunk shape would leave the GPU idle (n·heads/W ≤ max_blocks, W the largest power of two ≤ 8 dividing
// heads — the memory plan's figure, modelspec::cuda_attention_split_bytes) and scratch (≤ scratch_max
// bytes) can hold every segment under the host's bound of rows per query: window raw rows + compressed
// rows, bounded by the selection width (comp_idx) and/or AttentionArgs::max_comp. Unknown bound: 0.
inline int64_t attention_split_segments(const AttentionArgs& a, int64_t max_blocks, uint64_t scratch_max) {
  int W = 8;
  while (a.heads % W != 0) W /= 2;
  const int64_t groups = a.heads / W;
  if (a.n * groups > max_blocks || groups > 65535 || a.n > 65535) return 0;
  int64_t comp_bound = -1;  // -1: unknown
  if (!a.comp_count) comp_bound = 0;
  if (a.comp_count && a.comp_idx) comp_bound = a.comp_idx_stride;
  if (a.comp_count && a.max_comp > 0) comp_bound = comp_bound < 0 ? a.max_comp : (a.max_comp < comp_bound ? a.max_comp : comp_bound);
  if (comp_bound < 0) return 0;
  const int64_t segs = ((a.window > 0 ? a.window : 0) + comp_bound + kAttnSeg - 1) / kAttnSeg;
  const uint64_t bytes = static_cast<uint64_t>(a.n) * a.heads * segs * (a.head_dim + 2) * sizeof(float);
  return segs >= 2 && bytes <= scratch_max ? segs : 0;
}

// Host: points st at `scratch` grown for a split launch of segs > 0 segments per (query, head) (st stays
// empty for segs = 0, the chunk shape); false when the scratch could not grow (error recorded in be).
inline bool split_states(CudaBackend& be, DeviceScratch& scratch, const AttentionArgs& a, int64_t segs, SegStates& st) {
  if (segs <= 0) return true;
  const uint64_t slots = static_cast<uint64_t>(a.n) * a.heads * segs;
  if (!be.ensure(scratch, slots * (a.head_dim + 2) * sizeof(float), "attention segment states")) return false;
  st.acc = static_cast<float*>(scratch.ptr);
  st.ml = st.acc + slots * a.head_dim;
  st.n_stored = static_cast<int32_t>(segs);
  return true;
}

}  // namespace ds4::backend::cuda
