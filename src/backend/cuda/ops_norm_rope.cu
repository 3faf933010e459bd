// ops_norm_rope.cu — RMSNorm rows (sum of squares in double, as the CPU's rms_norm_row) and tail RoPE
// with adjacent pairs (MODEL.md §5.3; angle formed and reduced in double before cos/sin).
#include <cmath>
#include <string>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_impl.h"

namespace ds4::backend::cuda {

namespace {

constexpr int kMaxRopePairs = 64;  // n_rot ≤ 128 (Flash: 64)

// The layer's inverse frequencies travel by value: RopeArgs::freq is host memory.
struct RopeFreqs {
  double w[kMaxRopePairs];
};

// One block per row. x, y: [rows][stride]; w: [dim] or null.
__global__ void rms_norm_kernel(const float* x, float* y, const float* w, int64_t dim, int64_t stride, float eps) {
  const float* xr = x + blockIdx.x * stride;
  float* yr = y + blockIdx.x * stride;
  double ss = 0;
#pragma unroll 4
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) ss += static_cast<double>(xr[i]) * xr[i];
  ss = block_sum(ss);
  const float scale = 1.0f / sqrtf(static_cast<float>(ss / static_cast<double>(dim)) + eps);
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
  const double theta = fmod(static_cast<double>(pos[t]) * f.w[i], 2.0 * M_PI);
  const float c = static_cast<float>(cos(theta));
  const float s = static_cast<float>(inverse ? -sin(theta) : sin(theta));
  float* v = x + (t * heads + h) * head_dim + (head_dim - n_rot) + 2 * i;
  const float x0 = v[0], x1 = v[1];
  v[0] = x0 * c - x1 * s;
  v[1] = x0 * s + x1 * c;
}

}  // namespace

void CudaBackend::rms_norm(const RmsNormArgs& a) {
  if (failed() || a.rows <= 0) return;
  if (a.rows > 0x7fffffff) {
    fail(invalid_argument("cuda rms_norm: too many rows"));
    return;
  }
  // Wide rows (the 16384-wide HC state): 1024 threads, so each thread's dependent load/add chain is
  // short (decode runs one row). By width only, so a row's sum order never depends on the batch.
  const int threads = a.dim >= 8192 ? 1024 : 256;
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
  RopeFreqs f{};
  for (int i = 0; i < a.n_rot / 2; ++i) f.w[i] = a.freq[i];
  const int64_t total = a.n * (a.n_rot / 2) * a.heads;
  rope_kernel<<<grid_for(total, 256), 256, 0, stream()>>>(a.x, a.pos, a.n, a.heads, a.head_dim, a.n_rot, f, a.inverse);
  launched("rope");
}

}  // namespace ds4::backend::cuda
