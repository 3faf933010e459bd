// ops_hc.cu — hyper-connection ops (MODEL.md §6): split + Sinkhorn, output-head weights, collapse, post,
// and the fused HC pre (HcPreArgs) in two kernels: norm + F16 controls (README.md's segment order), then
// split + collapse + sublayer norm, one block per token. Same per-element float operations and order as
// backend/cpu/ops_hc.cpp (collapse and post are bit-identical to the CPU; split/head differ only by the
// device expf); the fused kernels run the single ops' device code, so they give the pieces' bits.
#include <string>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_impl.h"
#include "backend/cuda/f16_segment.cuh"
#include "backend/cuda/rows_device.cuh"

namespace ds4::backend::cuda {

namespace {

constexpr int kMaxHc = 8;
// Up to this many tokens the fused HC pre runs its one norm + controls kernel: 24 × 8 blocks of 1024
// threads are one wave on an H200 (132 SMs × 2). Beyond, every block re-reading its token's 64 KiB state
// row costs more waves than the separate norm + 16-vector F16 kernel (same bits either way; the H200 run
// checked both paths bit for bit at n = 1 … 80, not their speed beyond n = 1).
constexpr int64_t kHcPreFusedMaxTokens = 8;

__device__ float sigmoid_dev(float z) { return 1.0f / (1.0f + expf(-z)); }

// One thread per token: the CPU's hc_split_one (nhc ≤ kMaxHc). NHC > 0 fixes nhc at compile time so
// the loops unroll and C stays in registers (with a runtime nhc it lives in local memory and the 20
// Sinkhorn iterations took ~60 µs per call — 86 calls per Flash token); NHC = 0: any nhc.
template <int NHC>
__device__ void hc_split_token(const HcSplitArgs& a, int64_t t) {
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

template <int NHC>
__global__ void hc_split_kernel(HcSplitArgs a) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t < a.n) hc_split_token<NHC>(a, t);
}

// nhc = 4 (Flash), one warp per token, lane l < 16 holding C[j][k] with j = l / 4, k = l % 4: the
// same float operations in the same order as hc_split_kernel (each row/column sum is gathered by
// shuffles and added in index order), with the 16 divisions of every Sinkhorn step in parallel
// instead of one after another in a single thread (the split was ~15 µs of serial divisions, 86
// calls per Flash token). Lanes 16…31 mirror lanes 0…15 and write nothing. Called by a whole warp.
__device__ void hc_split4_token(const HcSplitArgs& a, int64_t t, int lane) {
  constexpr int N = 4;
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

__global__ void hc_split4_kernel(HcSplitArgs a) {
  const int64_t t = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  if (t < a.n) hc_split4_token(a, t, threadIdx.x % kWarp);  // whole warps leave together
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
  const float f = a.f_add ? a.f[t * a.dim + d] + a.f_add[t * a.dim + d] : a.f[t * a.dim + d];
  float acc = a.post[t * a.nhc + k] * f;
  for (int j = 0; j < a.nhc; ++j) acc += c[j * a.nhc + k] * x[j * a.dim + d];
  a.out[q] = acc;
}

// ---- fused HC pre ----

// Block (o, t): mix[t][o] = fn[o] · (x[t] · scale_t), scale_t the RMSNorm scale of the HC state row
// (nhc·dim values) as rms_norm computes it with the same thread count, the products summed in the F16
// segment order (matmul_f16.cu's f16_segment_kernel, one vector): the bits of rms_norm then matmul.
struct HcMixParams {
  const float* x;      // [n][cols]
  const uint8_t* w;    // [rows][row_bytes] F16
  uint64_t row_bytes;
  int64_t rows, cols;
  float eps;
  bool wide_loads;
  float* mix;          // [n][rows]
};

__global__ void __launch_bounds__(1024) hc_pre_mix_kernel(HcMixParams p) {
  __shared__ float part[32];  // segment sums of the current round, one per warp
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, nw = blockDim.x / kWarp;
  const int64_t o = blockIdx.x, t = blockIdx.y;
  const float* xr = p.x + t * p.cols;
  const float sc = rms_scale_row(xr, p.cols, p.eps);
  const uint8_t* row = p.w + static_cast<uint64_t>(o) * p.row_bytes;
  const int64_t nseg = (p.cols + kF16Seg - 1) / kF16Seg;
  float total = 0.0f;
  for (int64_t s0 = 0; s0 < nseg; s0 += nw) {
    const int64_t s = s0 + warp;
    if (s < nseg) {
      const int64_t e0 = s * kF16Seg + 8 * lane, e1 = e0 + kF16SegHalf;
      const uint4 w0 = load_w8(row, e0, p.cols, p.wide_loads), w1 = load_w8(row, e1, p.cols, p.wide_loads);
      float4 v[4];
      load_x8(xr, e0, p.cols, p.wide_loads, v[0], v[1]);
      load_x8(xr, e1, p.cols, p.wide_loads, v[2], v[3]);
#pragma unroll
      for (int k = 0; k < 4; ++k) {  // flat = x · scale, as rms_norm writes it (padding stays 0)
        v[k].x *= sc;
        v[k].y *= sc;
        v[k].z *= sc;
        v[k].w *= sc;
      }
      const float seg_sum = warp_sum(dot8(dot8(0.0f, w0, v[0], v[1]), w1, v[2], v[3]));
      if (lane == 0) part[warp] = seg_sum;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      const int m = static_cast<int>(nseg - s0 < nw ? nseg - s0 : nw);
      for (int k = 0; k < m; ++k) total += part[k];  // segment order
    }
    __syncthreads();  // the next round overwrites `part`
  }
  if (threadIdx.x == 0) p.mix[t * p.rows + o] = total;
}

// One block of rms_norm_threads(dim) threads per token: split + Sinkhorn (a warp for nhc = 4, else one
// thread), then y = Σ_s pre[s]·X[s] (hc_collapse_kernel's order) and xn = RMSNorm_w(y) (rms_norm_kernel's).
__global__ void hc_pre_split_kernel(HcSplitArgs s, const float* x, const float* norm_w, float* y, float* xn,
                                    int64_t dim, float eps) {
  const int64_t t = blockIdx.x;
  if (s.nhc == 4) {
    if (threadIdx.x < kWarp) hc_split4_token(s, t, threadIdx.x);
  } else if (threadIdx.x == 0) {
    hc_split_token<0>(s, t);
  }
  __syncthreads();  // pre (global) is visible to the whole block from here
  const float* w = s.pre + t * s.nhc;
  const float* xt = x + t * s.nhc * dim;
  float* yt = y + t * dim;
  for (int64_t d = threadIdx.x; d < dim; d += blockDim.x) {
    float acc = 0;
    for (int k = 0; k < s.nhc; ++k) acc += w[k] * xt[k * dim + d];
    yt[d] = acc;
  }
  // Each thread reads back only the y values it wrote (same stride), so no barrier is needed here.
  const float sc = rms_scale_row(yt, dim, eps);
  float* xnt = xn + t * dim;
  for (int64_t d = threadIdx.x; d < dim; d += blockDim.x) xnt[d] = norm_w ? yt[d] * sc * norm_w[d] : yt[d] * sc;
}

}  // namespace

void CudaBackend::hc_pre(const HcPreArgs& a) {
  if (failed() || a.n <= 0) return;
  if (a.nhc < 1 || a.nhc > kMaxHc) {
    fail(invalid_argument("cuda hc_pre: nhc must be in [1, 8]"));
    return;
  }
  const int64_t hcd = int64_t{a.nhc} * a.dim, mix = int64_t{2 + a.nhc} * a.nhc;
  if (a.fn.rows != mix || a.fn.cols != hcd) {
    fail(invalid_argument("cuda hc_pre: fn is " + std::to_string(a.fn.rows) + " x " + std::to_string(a.fn.cols) +
                          ", expected " + std::to_string(mix) + " x " + std::to_string(hcd)));
    return;
  }
  if (a.n > 0x7fffffff) {
    fail(invalid_argument("cuda hc_pre: too many tokens"));
    return;
  }
  // Decode batches: norm and F16 controls in one kernel (each block re-reads its token's state row from
  // L2 for the norm). Larger batches (prefill) and other weight types or numerics: rms_norm then matmul,
  // whose F16 kernel shares weight loads across 16 vectors — the same bits either way.
  if (a.fn.type == GgmlType::F16 && a.numerics == MatmulNumerics::ds4 && f16_segments_ &&
      a.n <= kHcPreFusedMaxTokens) {
    HcMixParams p{a.x, static_cast<const uint8_t*>(a.fn.data), a.fn.row_bytes, mix, hcd, a.rms_eps, false, a.mix};
    p.wide_loads = hcd % 8 == 0 && a.fn.row_bytes % 16 == 0 && aligned16(a.fn.data) && aligned16(a.x);
    hc_pre_mix_kernel<<<dim3(static_cast<unsigned>(mix), static_cast<unsigned>(a.n)), rms_norm_threads(hcd), 0,
                        stream()>>>(p);
    if (!launched("hc_pre controls")) return;
  } else {
    rms_norm({a.x, a.flat, nullptr, a.n, hcd, hcd, a.rms_eps});
    matmul({a.fn, a.flat, hcd, a.mix, mix, a.n, a.numerics});
  }
  const HcSplitArgs s{a.mix, a.scale, a.base, a.n, a.nhc, a.iters, a.hc_eps, a.pre, a.post, a.comb};
  hc_pre_split_kernel<<<static_cast<unsigned>(a.n), rms_norm_threads(a.dim), 0, stream()>>>(s, a.x, a.norm_w, a.y,
                                                                                           a.xn, a.dim, a.rms_eps);
  launched("hc_pre split + collapse + norm");
}

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
