// ops_hc.cu — hyper-connection ops (MODEL.md §6): split + Sinkhorn, output-head weights, collapse, post.
// Same per-element float operations and order as backend/cpu/ops_hc.cpp (collapse and post are
// bit-identical to the CPU; split/head differ only by the device expf).
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_impl.h"

namespace ds4::backend::cuda {

namespace {

constexpr int kMaxHc = 8;

__device__ float sigmoid_dev(float z) { return 1.0f / (1.0f + expf(-z)); }

// One thread per token: the CPU's hc_split_one (nhc ≤ kMaxHc). NHC > 0 fixes nhc at compile time so
// the loops unroll and C stays in registers (with a runtime nhc it lives in local memory and the 20
// Sinkhorn iterations took ~60 µs per call — 86 calls per Flash token); NHC = 0: any nhc.
template <int NHC>
__global__ void hc_split_kernel(HcSplitArgs a) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= a.n) return;
  const int nhc = NHC > 0 ? NHC : a.nhc;
  const float* m = a.m + t * (2 + nhc) * nhc;
  float* pre = a.pre + t * nhc;
  float* post = a.post + t * nhc;
  for (int s = 0; s < nhc; ++s) {
    pre[s] = sigmoid_dev(m[s] * a.scale[0] + a.base[s]) + a.eps;
    post[s] = 2.0f * sigmoid_dev(m[nhc + s] * a.scale[1] + a.base[nhc + s]);
  }
  const int off = 2 * nhc;
  float c[(NHC > 0 ? NHC : kMaxHc) * (NHC > 0 ? NHC : kMaxHc)];  // C[j][k] at j·nhc + k
  for (int j = 0; j < nhc; ++j) {
    float mx = -INFINITY;
    for (int k = 0; k < nhc; ++k) {
      c[j * nhc + k] = m[off + j * nhc + k] * a.scale[2] + a.base[off + j * nhc + k];
      mx = fmaxf(mx, c[j * nhc + k]);
    }
    float sum = 0;
    for (int k = 0; k < nhc; ++k) {
      c[j * nhc + k] = expf(c[j * nhc + k] - mx);
      sum += c[j * nhc + k];
    }
    for (int k = 0; k < nhc; ++k) c[j * nhc + k] = c[j * nhc + k] / sum + a.eps;
  }
  for (int it = 0; it < (a.iters > 1 ? a.iters : 1); ++it) {
    if (it > 0) {  // rows, then columns (the first iteration normalizes columns only)
      for (int j = 0; j < nhc; ++j) {
        float sum = 0;
        for (int k = 0; k < nhc; ++k) sum += c[j * nhc + k];
        for (int k = 0; k < nhc; ++k) c[j * nhc + k] /= (sum + a.eps);
      }
    }
    for (int k = 0; k < nhc; ++k) {
      float sum = 0;
      for (int j = 0; j < nhc; ++j) sum += c[j * nhc + k];
      for (int j = 0; j < nhc; ++j) c[j * nhc + k] /= (sum + a.eps);
    }
  }
  float* comb = a.comb + t * nhc * nhc;
  for (int q = 0; q < nhc * nhc; ++q) comb[q] = c[q];
}

// nhc = 4 (Flash), one warp per token, lane l < 16 holding C[j][k] with j = l / 4, k = l % 4: the
// same float operations in the same order as hc_split_kernel (each row/column sum is gathered by
// shuffles and added in index order), with the 16 divisions of every Sinkhorn step in parallel
// instead of one after another in a single thread (the split was ~15 µs of serial divisions, 86
// calls per Flash token). Lanes 16…31 mirror lanes 0…15 and write nothing.
__global__ void hc_split4_kernel(HcSplitArgs a) {
  constexpr int N = 4;
  const int lane = threadIdx.x % kWarp;
  const int64_t t = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  if (t >= a.n) return;  // whole warps leave together
  const int l = lane % 16, j = l / N, k = l % N;
  const float* m = a.m + t * (2 + N) * N;
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
  c = expf(c - mx);
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

__global__ void hc_head_kernel(HcHeadArgs a) {
  const int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k >= a.n * a.nhc) return;
  const int s = static_cast<int>(k % a.nhc);
  const float z = a.m[k] * a.scale[0] + a.base[s];
  a.w[k] = 1.0f / (1.0f + expf(-z)) + a.eps;
}

// y[t][d] = Σ_s w[t][s]·x[t][s][d], s in order.
__global__ void hc_collapse_kernel(HcCollapseArgs a) {
  const int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k >= a.n * a.dim) return;
  const int64_t t = k / a.dim, d = k % a.dim;
  const float* x = a.x + t * a.nhc * a.dim;
  const float* w = a.w + t * a.nhc;
  float acc = 0;
  for (int s = 0; s < a.nhc; ++s) acc += w[s] * x[s * a.dim + d];
  a.y[k] = acc;
}

// out[t][k][d] = post[t][k]·f[t][d] + Σ_j C[t][j][k]·x[t][j][d], j in order.
__global__ void hc_post_kernel(HcPostArgs a) {
  const int64_t q = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (q >= a.n * a.nhc * a.dim) return;
  const int64_t d = q % a.dim;
  const int k = static_cast<int>((q / a.dim) % a.nhc);
  const int64_t t = q / (a.dim * a.nhc);
  const float* x = a.x + t * a.nhc * a.dim;
  const float* c = a.comb + t * a.nhc * a.nhc;
  float acc = a.post[t * a.nhc + k] * a.f[t * a.dim + d];
  for (int j = 0; j < a.nhc; ++j) acc += c[j * a.nhc + k] * x[j * a.dim + d];
  a.out[q] = acc;
}

}  // namespace

void CudaBackend::hc_split(const HcSplitArgs& a) {
  if (failed() || a.n <= 0) return;
  if (a.nhc < 1 || a.nhc > kMaxHc) {
    fail(invalid_argument("cuda hc_split: nhc must be in [1, 8]"));
    return;
  }
  if (a.nhc == 4)  // Flash: a warp per token
    hc_split4_kernel<<<grid_for(a.n * kWarp, 128), 128, 0, stream()>>>(a);
  else
    hc_split_kernel<0><<<grid_for(a.n, 64), 64, 0, stream()>>>(a);
  launched("hc_split");
}

void CudaBackend::hc_head(const HcHeadArgs& a) {
  if (failed() || a.n <= 0) return;
  hc_head_kernel<<<grid_for(a.n * a.nhc, 256), 256, 0, stream()>>>(a);
  launched("hc_head");
}

void CudaBackend::hc_collapse(const HcCollapseArgs& a) {
  if (failed() || a.n <= 0) return;
  hc_collapse_kernel<<<grid_for(a.n * a.dim, 256), 256, 0, stream()>>>(a);
  launched("hc_collapse");
}

void CudaBackend::hc_post(const HcPostArgs& a) {
  if (failed() || a.n <= 0) return;
  hc_post_kernel<<<grid_for(a.n * a.nhc * a.dim, 256), 256, 0, stream()>>>(a);
  launched("hc_post");
}

}  // namespace ds4::backend::cuda
