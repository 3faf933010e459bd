// hc_device.cuh — the per-token device pieces of the HC ops (MODEL.md §6) that more than one kernel file runs, so
// each gives the same bits: the sigmoid of the split, the Sinkhorn split of one token on one warp (nhc = 4), and
// the HC post's values of four dims (hc_post4_kernel's expressions). ops_hc.cu's kernels and hc_boundary.cu's
// sublayer boundary kernel both call them. Header-only, __device__ inline.
// Deliberately not here: launches, the F16 control sums (f16_mma.cuh / f16_segment.cuh), the norms
// (rows_device.cuh).
#pragma once

#include <cstdint>

#include "backend/backend.h"
#include "backend/exact_math.h"
#include "backend/cuda/common.cuh"

namespace ds4::backend::cuda {

inline constexpr int kMaxHc = 8;

// σ(z) = 1 / (1 + e^−z) with exact_exp (exact_math.h): the CPU op's bits for every z.
__device__ inline float sigmoid_dev(float z) { return exact_sigmoid(z); }

// nhc = 4 (Flash), one warp per token, lane l < 16 holding C[j][k] with j = l / 4, k = l % 4: the
// same float operations in the same order as hc_split_kernel (each row/column sum is gathered by
// shuffles and added in index order), with the 16 divisions of every Sinkhorn step in parallel
// instead of one after another in a single thread (the split was ~15 µs of serial divisions, 86
// calls per Flash token). Lanes 16…31 mirror lanes 0…15 and write nothing. Called by a whole warp;
// m is token t's mix row [24] (a.m's row t, or a copy of it in shared memory).
__device__ inline void hc_split4_token(const HcSplitArgs& a, int64_t t, int lane, const float* m) {
  constexpr int N = 4;
  const int l = lane % 16, j = l / N, k = l % N;
  if (lane < N) {
    a.pre[t * N + lane] = sigmoid_dev(m[lane] * a.scale[0] + a.base[lane]) + a.eps;
    a.post[t * N + lane] = 2.0f * sigmoid_dev(m[N + lane] * a.scale[1] + a.base[N + lane]);
  }
  const int off = 2 * N;
  // Value of C[r][k'] held by lane 4r + k' (same half of the warp).
  auto at = [&](float v, int r, int kk) { return __shfl_sync(0xffffffffu, v, (lane & 16) | (r * N + kk)); };
  float c = m[off + j * N + k] * a.scale[2] + a.base[off + j * N + k];
  float mx = -INFINITY;
  for (int kk = 0; kk < N; ++kk) mx = fmaxf(mx, at(c, j, kk));
  c = exact_exp(c - mx);
  float sum = 0;
  for (int kk = 0; kk < N; ++kk) sum += at(c, j, kk);
  c = c / sum + a.eps;
  for (int it = 0; it < (a.iters > 1 ? a.iters : 1); ++it) {
    if (it > 0) {  // rows, then columns (the first iteration normalizes columns only)
      float rs = 0;
      for (int kk = 0; kk < N; ++kk) rs += at(c, j, kk);
      c /= (rs + a.eps);
    }
    float cs = 0;
    for (int r = 0; r < N; ++r) cs += at(c, r, k);
    c /= (cs + a.eps);
  }
  if (lane < 16) a.comb[t * N * N + l] = c;
}

// X'[k][d … d + 3] = post[k]·(f + f_add) + Σ_j C[j][k]·X[j] for k = 0 … 3, hc_post4_kernel's expressions in its
// order, from loads issued together. pc: post[0 … 3] then C[0 … 15] (loaded once per thread).
struct PostIn4 {
  float4 f, x[4];
};
__device__ inline PostIn4 post_load4(const HcPostArgs& q, int64_t d) {
  PostIn4 in;
  in.f = *reinterpret_cast<const float4*>(q.f + d);
  if (q.f_add) {
    const float4 g = *reinterpret_cast<const float4*>(q.f_add + d);
    in.f = make_float4(in.f.x + g.x, in.f.y + g.y, in.f.z + g.z, in.f.w + g.w);
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) in.x[j] = *reinterpret_cast<const float4*>(q.x + j * q.dim + d);
  return in;
}
__device__ inline void post_load_pc(const HcPostArgs& q, float (&pc)[20]) {
#pragma unroll
  for (int k = 0; k < 4; ++k) pc[k] = q.post[k];
#pragma unroll
  for (int k = 0; k < 16; ++k) pc[4 + k] = q.comb[k];
}
__device__ inline float4 post_value4(const PostIn4& in, const float (&pc)[20], int k) {
  const float pk = pc[k];
  float4 acc = make_float4(pk * in.f.x, pk * in.f.y, pk * in.f.z, pk * in.f.w);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float cj = pc[4 + j * 4 + k];
    acc.x += cj * in.x[j].x;
    acc.y += cj * in.x[j].y;
    acc.z += cj * in.x[j].z;
    acc.w += cj * in.x[j].w;
  }
  return acc;
}
}  // namespace ds4::backend::cuda
