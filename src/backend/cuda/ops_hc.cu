// ops_hc.cu — hyper-connection ops (MODEL.md §6): split + Sinkhorn, output-head weights, collapse, post.
// Same per-element float operations and order as backend/cpu/ops_hc.cpp (collapse and post are
// bit-identical to the CPU; split/head differ only by the device expf).
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_impl.h"

namespace ds4::backend::cuda {

namespace {

constexpr int kMaxHc = 8;

__device__ float sigmoid_dev(float z) { return 1.0f / (1.0f + expf(-z)); }

// One thread per token: the CPU's hc_split_one (nhc ≤ kMaxHc).
__global__ void hc_split_kernel(HcSplitArgs a) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= a.n) return;
  const int nhc = a.nhc;
  const float* m = a.m + t * (2 + nhc) * nhc;
  float* pre = a.pre + t * nhc;
  float* post = a.post + t * nhc;
  for (int s = 0; s < nhc; ++s) {
    pre[s] = sigmoid_dev(m[s] * a.scale[0] + a.base[s]) + a.eps;
    post[s] = 2.0f * sigmoid_dev(m[nhc + s] * a.scale[1] + a.base[nhc + s]);
  }
  const int off = 2 * nhc;
  float c[kMaxHc * kMaxHc];  // C[j][k] at j·nhc + k
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
  hc_split_kernel<<<grid_for(a.n, 64), 64, 0, stream()>>>(a);
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
