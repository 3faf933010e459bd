// attention_merge.cuh — one thread's step of the MMA order's sliced merge (README.md "Attention summation order on
// tensor cores", steps 4–5, with the output's inverse RoPE): for one float4 column of one head of a query, the
// stored segment states merged in segment order from (−inf, 0, 0) (merge_step / merged), the sink (sink_step), the
// rotation of the column's pairs that lie in the RoPE tail (rope_kernel's rope_rotate on the same floats), the store;
// the angles formed apart (merge_angles), so a merge launched as a programmatic dependent of the split kernel forms
// them before it waits (attention_mma.cu attention_mma_merge_kernel).
// Deliberately not here: which thread takes which column, and queries with more segments than were stored (the
// callers' fallbacks).
#pragma once

#include <cstdint>

#include "backend/cuda/attention_rows.cuh"
#include "backend/cuda/rows_device.cuh"  // RopeFreqs, rope_cos_sin, rope_apply

namespace ds4::backend::cuda {

inline constexpr int kSliceBatch = 8;  // stored states loaded ahead of their merges (a thread's states: 8 × 6 registers)

// One float4 column of the merge: dims 4·c4 … 4·c4 + 3 of head h, and the angles of its two pairs where they lie in
// the RoPE tail (merge_angles).
struct MergeCol {
  int h = 0;
  int64_t c4 = 0;
  float2 cs[2] = {make_float2(1.0f, 0.0f), make_float2(1.0f, 0.0f)};
  bool rot[2] = {false, false};
};

// The angles of column c's pairs in the tail (the last out_rot dims of head_dim D; out_rot = 0: none), at query i's
// position with angles rf — rope_kernel's expressions (rope_cos_sin), formed apart so a caller may form them before
// it waits for the states.
template <int D>
__device__ inline void merge_angles(MergeCol& c, const AttentionArgs& a, int64_t i, int out_rot, const RopeFreqs& rf) {
  if (out_rot <= 0) return;
  const int64_t tail = D - out_rot;  // first rotated dim
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t d = 4 * c.c4 + 2 * r;
    c.rot[r] = d >= tail;
    if (c.rot[r]) c.cs[r] = rope_cos_sin(a.pos[i], rf.w[(d - tail) / 2], true);
  }
}

// Column c (head_dim D) of query i over its first n_seg stored states, kSliceBatch states loaded before their merges:
// the states merged in segment order from (−inf, 0, 0), the sink, the rotation of its pairs in the tail (angles from
// merge_angles), the store.
template <int D>
__device__ inline void merge_column(const AttentionArgs& a, const SegStates& st, int64_t i, const MergeCol& c,
                                    int64_t n_seg) {
  const int64_t slot0 = (i * a.heads + c.h) * st.n_stored;
  float M = -INFINITY, L = 0.0f;
  float4 run = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  for (int64_t k0 = 0; k0 < n_seg; k0 += kSliceBatch) {
    float ms[kSliceBatch], ls[kSliceBatch];
    float4 v[kSliceBatch];
#pragma unroll
    for (int b = 0; b < kSliceBatch; ++b) {
      const bool load = k0 + b < n_seg;
      const int64_t slot = slot0 + k0 + b;
      ms[b] = load ? st.ml[2 * slot] : -INFINITY;
      ls[b] = load ? st.ml[2 * slot + 1] : 0.0f;
      v[b] = load ? reinterpret_cast<const float4*>(st.acc + slot * D)[c.c4] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
#pragma unroll
    for (int b = 0; b < kSliceBatch; ++b) {
      if (k0 + b >= n_seg) break;
      float fa, fb;
      merge_step(M, L, ms[b], ls[b], fa, fb);
      run.x = merged(run.x, fa, v[b].x, fb);
      run.y = merged(run.y, fa, v[b].y, fb);
      run.z = merged(run.z, fa, v[b].z, fb);
      run.w = merged(run.w, fa, v[b].w, fb);
    }
  }
  float f, denom;
  sink_step(a.sinks[c.h], M, L, f, denom);
  float o[4] = {run.x * f / denom, run.y * f / denom, run.z * f / denom, run.w * f / denom};
  if (c.rot[0]) rope_apply(o, c.cs[0]);
  if (c.rot[1]) rope_apply(o + 2, c.cs[1]);
  reinterpret_cast<float4*>(a.out + (i * a.heads + c.h) * D)[c.c4] = make_float4(o[0], o[1], o[2], o[3]);
}

// The fallbacks' rotation (a query's heads computed by a block's chunk body, their outputs stored): the RoPE tails
// (the last out_rot dims) of heads h0 … h0 + NH − 1 of query i rotated in place by the block's NT threads. The caller
// puts a barrier between the output stores and this, so every store is visible to every thread.
template <int D, int NH, int NT>
__device__ inline void rope_heads_in_place(const AttentionArgs& a, int64_t i, int h0, int out_rot, const RopeFreqs& rf) {
  const int64_t tail = D - out_rot;
  const int half = out_rot / 2;
  for (int k = threadIdx.x; k < NH * half; k += NT) {
    const int h = h0 + k / half;
    if (h < a.heads) rope_rotate(a.out + (i * a.heads + h) * D + tail + 2 * (k % half), a.pos[i], rf.w[k % half], true);
  }
}

}  // namespace ds4::backend::cuda
