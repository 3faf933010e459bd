// norm_device.cuh — the RMSNorm of one row held in registers (rms_norm3_kernel's device code, CudaBackendOptions::
// small_v3), shared by its own kernel (ops_norm_rope.cu) and by the q_a norm fold of the dense decode matmul
// (gemv_stream.cu, CudaBackendOptions::launch_folds): one copy of the expressions, so the fold's values are the
// norm kernel's bits. A block of rms_norm_threads(dim) threads runs it (the sum order depends on the block size).
// Deliberately not here: launches, the wide-row and older norm kernels (ops_norm_rope.cu).
#pragma once

#include <cstdint>

#include "backend/cuda/rows_device.cuh"

namespace ds4::backend::cuda {

// wv[q] = w[threadIdx.x + q·blockDim.x] (1 past dim or without w): the norm weights, which nothing writes —
// loaded before a programmatic-dependent wait.
template <int kPer>
__device__ inline void rms_norm3_weights(const float* w, int64_t dim, float (&wv)[kPer]) {
  const int64_t bd = blockDim.x;
#pragma unroll
  for (int q = 0; q < kPer; ++q) {
    const int64_t i = threadIdx.x + q * bd;
    wv[q] = w && i < dim ? w[i] : 1.0f;
  }
}

// yr = RMSNorm(xr) · w (rms_norm_kernel's values; dim ≤ kPer·blockDim.x; with_w: w given). Every thread of the block
// calls it (block_sum's barriers); xr may equal yr (every load precedes the barrier). The loads bypass L1
// (__ldcg): a fold reads rows other blocks of its own launch wrote.
template <int kPer>
__device__ inline void rms_norm3_row(const float* xr, float* yr, bool with_w, const float (&wv)[kPer], int64_t dim,
                                     float eps) {
  const int64_t bd = blockDim.x;
  float v[kPer];
  double ss = 0;  // rms_scale_row's chain: i = threadIdx.x, + bd, …
#pragma unroll
  for (int q = 0; q < kPer; ++q) {
    const int64_t i = threadIdx.x + q * bd;
    v[q] = i < dim ? __ldcg(xr + i) : 0.0f;
  }
#pragma unroll
  for (int q = 0; q < kPer; ++q)
    if (threadIdx.x + q * bd < dim) ss += static_cast<double>(v[q]) * v[q];
  const float scale = rms_scale_of(ss, dim, eps);
#pragma unroll
  for (int q = 0; q < kPer; ++q) {
    const int64_t i = threadIdx.x + q * bd;
    if (i < dim) yr[i] = with_w ? v[q] * scale * wv[q] : v[q] * scale;
  }
}

}  // namespace ds4::backend::cuda
