// ops_norm_rope.cu — RMSNorm rows (sum of squares in double, as the CPU's rms_norm_row), tail RoPE
// with adjacent pairs (MODEL.md §5.3; angle formed and reduced in double before cos/sin), and the fused
// norm_rope op (NormRopeArgs): norm, RoPE, FP8 and half rounding and the raw-ring write of one row in
// one block, each step the single op's device code (rows_device.cuh), so the bits are the pieces' bits.
#include <cmath>
#include <string>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_impl.h"
#include "backend/cuda/rows_device.cuh"

namespace ds4::backend::cuda {

namespace {

// One block per row. x, y: [rows][stride]; w: [dim] or null.
__global__ void rms_norm_kernel(const float* x, float* y, const float* w, int64_t dim, int64_t stride, float eps) {
  const float* xr = x + blockIdx.x * stride;
  float* yr = y + blockIdx.x * stride;
  const float scale = rms_scale_row(xr, dim, eps);
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) yr[i] = w ? xr[i] * scale * w[i] : xr[i] * scale;
}

// One thread per (token, pair, head). x: [n][heads][head_dim], the pairs in the last n_rot dims.
__global__ void rope_kernel(float* x, const int32_t* pos, int64_t n, int32_t heads, int32_t head_dim, int32_t n_rot,
                            RopeFreqs f, bool inverse) {
  const int half = n_rot / 2;
  const int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k >= n * half * heads) return;
  const int h = static_cast<int>(k % heads);
  const int i = static_cast<int>((k / heads) % half);
  const int64_t t = k / (static_cast<int64_t>(heads) * half);
  rope_rotate(x + (t * heads + h) * head_dim + (head_dim - n_rot) + 2 * i, pos[t], f.w[i], inverse);
}

// One block of rms_norm_threads(head_dim) threads per row (token t = row / heads, head h), in place in
// global memory with a barrier between the steps (each step reads values other threads wrote).
// Rows at x_at with a device count (NormRopeArgs): the whole block leaves before any barrier.
__global__ void norm_rope_kernel(NormRopeArgs a, RopeFreqs f) {
  const int64_t row = blockIdx.x, t = row / a.heads, D = a.head_dim;
  if (a.count && t >= *a.count) return;
  float* xr = a.x_at ? a.x_at[t] + (row % a.heads) * D : a.x + row * D;
  const float scale = rms_scale_row(xr, D, a.eps);
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) xr[i] = a.w ? xr[i] * scale * a.w[i] : xr[i] * scale;
  __syncthreads();
  const int32_t p = a.pos[t];
  for (int i = threadIdx.x; i < a.n_rot / 2; i += blockDim.x) rope_rotate(xr + (D - a.n_rot) + 2 * i, p, f.w[i], false);
  __syncthreads();
  if (a.fp8_quant > 0) {
    const int lane = threadIdx.x % kWarp, warps = blockDim.x / kWarp;
    for (int b = threadIdx.x / kWarp; b < a.fp8_quant / 64; b += warps) fp8_block_warp(xr + b * 64, lane);
    __syncthreads();
  }
  float* dst = nullptr;
  if (a.ring || a.ring_at) {
    float* base = a.ring_at ? a.ring_at[t] : a.ring;
    dst = base + (p % a.ring_cap) * (static_cast<int64_t>(a.heads) * D) + (row % a.heads) * D;
  }
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
    float v = xr[i];
    if (a.f16) xr[i] = v = __half2float(__float2half_rn(v));
    if (dst) dst[i] = v;
  }
}

RopeFreqs rope_freqs(const double* freq, int n_rot) {
  RopeFreqs f{};
  for (int i = 0; i < n_rot / 2; ++i) f.w[i] = freq[i];
  return f;
}

}  // namespace

void CudaBackend::rms_norm(const RmsNormArgs& a) {
  if (failed() || a.rows <= 0) return;
  if (a.rows > 0x7fffffff) {
    fail(invalid_argument("cuda rms_norm: too many rows"));
    return;
  }
  const int threads = rms_norm_threads(a.dim);
  rms_norm_kernel<<<static_cast<unsigned>(a.rows), threads, 0, stream()>>>(a.x, a.y, a.w, a.dim, a.stride, a.eps);
  launched("rms_norm");
}

void CudaBackend::rope(const RopeArgs& a) {
  if (failed() || a.n <= 0 || a.n_rot <= 0) return;
  if (a.n_rot / 2 > kMaxRopePairs || a.n_rot % 2 != 0 || a.n_rot > a.head_dim) {
    fail(invalid_argument("cuda rope: n_rot " + std::to_string(a.n_rot) + " must be even, <= head_dim and <= " +
                          std::to_string(2 * kMaxRopePairs)));
    return;
  }
  const int64_t total = a.n * (a.n_rot / 2) * a.heads;
  rope_kernel<<<grid_for(total, 256), 256, 0, stream()>>>(a.x, a.pos, a.n, a.heads, a.head_dim, a.n_rot,
                                                         rope_freqs(a.freq, a.n_rot), a.inverse);
  launched("rope");
}

void CudaBackend::norm_rope(const NormRopeArgs& a) {
  if (failed() || a.n <= 0) return;
  if (a.n_rot < 0 || a.n_rot / 2 > kMaxRopePairs || a.n_rot % 2 != 0 || a.n_rot > a.head_dim) {
    fail(invalid_argument("cuda norm_rope: n_rot " + std::to_string(a.n_rot) + " must be even, <= head_dim and <= " +
                          std::to_string(2 * kMaxRopePairs)));
    return;
  }
  if (a.fp8_quant < 0 || a.fp8_quant % 64 != 0 || a.fp8_quant > a.head_dim - a.n_rot) {
    fail(invalid_argument("cuda norm_rope: fp8_quant " + std::to_string(a.fp8_quant) +
                          " must be a multiple of 64 outside the RoPE tail"));
    return;
  }
  if ((a.ring || a.ring_at) && a.ring_cap <= 0) {
    fail(invalid_argument("cuda norm_rope: a ring needs ring_cap > 0"));
    return;
  }
  if (a.n * a.heads > 0x7fffffff) {
    fail(invalid_argument("cuda norm_rope: too many rows"));
    return;
  }
  norm_rope_kernel<<<static_cast<unsigned>(a.n * a.heads), rms_norm_threads(a.head_dim), 0, stream()>>>(
      a, rope_freqs(a.freq, a.n_rot));
  launched("norm_rope");
}

}  // namespace ds4::backend::cuda
