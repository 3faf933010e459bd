// ops_hc.cu — hyper-connection ops (MODEL.md §6): split + Sinkhorn, output-head weights, collapse, post,
// and the fused HC pre (HcPreArgs): for decode batches (n ≤ 32, CudaBackendOptions::hc_router_v2) the
// control segments spread over parallel blocks, then mix + Sinkhorn beside collapse + sublayer norm;
// otherwise (and with hc_router_v2 = false) norm + F16 controls (README.md's segment order), then
// split + collapse + sublayer norm, one block per token. Same per-element float operations and order as
// backend/cpu/ops_hc.cpp, bit for bit (the sigmoid and the Sinkhorn exp are exact_math.h's, as on the CPU); the
// fused kernels run the single ops' device code, so they give the pieces' bits.
#include <string>

#include "backend/by_pieces.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_impl.h"
#include "backend/cuda/f16_mma.cuh"
#include "backend/cuda/f16_segment.cuh"
#include "backend/cuda/hc_boundary.h"
#include "backend/cuda/hc_controls_prefill.h"
#include "backend/cuda/hc_device.cuh"
#include "backend/cuda/rows_device.cuh"

namespace ds4::backend::cuda {

namespace {

// Up to this many tokens the fused HC pre runs its one norm + controls kernel: 24 × 8 blocks of 1024
// threads are one wave on an H200 (132 SMs × 2). Beyond, every block re-reading its token's 64 KiB state
// row costs more waves than the separate norm + 16-vector F16 kernel (same bits either way; the H200 run
// checked both paths bit for bit at n = 1 … 80, not their speed beyond n = 1).
constexpr int64_t kHcPreFusedMaxTokens = 8;

// One thread per token: the CPU's hc_split_one (nhc ≤ kMaxHc). NHC > 0 fixes nhc at compile time so
// the loops unroll and C stays in registers (with a runtime nhc it lives in local memory and the 20
// Sinkhorn iterations took ~60 µs per call — 86 calls per Flash token); NHC = 0: any nhc.
// m: token t's mix row [(2 + nhc)·nhc] (a.m's row t, or a copy of it in shared memory).
template <int NHC>
__device__ void hc_split_token(const HcSplitArgs& a, int64_t t, const float* m) {
  const int nhc = NHC > 0 ? NHC : a.nhc;
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
      c[j * nhc + k] = exact_exp(c[j * nhc + k] - mx);
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
  if (t < a.n) hc_split_token<NHC>(a, t, a.m + t * (2 + a.nhc) * a.nhc);
}

__global__ void hc_split4_kernel(HcSplitArgs a) {
  const int64_t t = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  if (t < a.n) hc_split4_token(a, t, threadIdx.x % kWarp, a.m + t * 24);  // whole warps leave together
}

__global__ void hc_head_kernel(HcHeadArgs a) {
  const int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k >= a.n * a.nhc) return;
  const int s = static_cast<int>(k % a.nhc);
  const float z = a.m[k] * a.scale[0] + a.base[s];
  a.w[k] = exact_sigmoid(z) + a.eps;
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
// Lets a programmatic dependent (the next sublayer's spread HC pre) start and prefetch its weights; it
// still waits for this kernel's end before reading the state. With small_v3 itself a programmatic
// dependent of the kernel before it (the wait is a no-op otherwise); a dependent of this kernel waits
// for its end, which comes after that wait, so it still sees everything before.
__global__ void hc_post_kernel(HcPostArgs a) {
  grid_launch_dependents();
  grid_dependency_wait();
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

// hc_post_kernel's values with a thread per (token, 4 dims) computing all nhc outputs (small_v3): X[t][j][d…d+3]
// and f are read once instead of once per output stream (prefill: 4× less L2 traffic; 16384-wide rows
// of 2,048 tokens), all loads in flight, float4 stores. NHC = 4 fixes nhc (registers); dim % 4 == 0 and
// 16-byte aligned rows. Same expressions in the same order.
template <int NHC>
__global__ void hc_post4_kernel(HcPostArgs a) {
  grid_launch_dependents();
  grid_dependency_wait();
  const int nhc = NHC > 0 ? NHC : a.nhc;
  const int64_t q = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x, d4 = a.dim / 4;
  if (q >= a.n * d4) return;
  const int64_t t = q / d4, d = 4 * (q % d4);
  const float* x = a.x + t * nhc * a.dim + d;
  const float* c = a.comb + t * nhc * nhc;
  float4 f = *reinterpret_cast<const float4*>(a.f + t * a.dim + d);
  if (a.f_add) {
    const float4 g = *reinterpret_cast<const float4*>(a.f_add + t * a.dim + d);
    f = make_float4(f.x + g.x, f.y + g.y, f.z + g.z, f.w + g.w);
  }
  float4 xj[kMaxHc];
#pragma unroll
  for (int j = 0; j < kMaxHc; ++j)
    if (j < nhc) xj[j] = *reinterpret_cast<const float4*>(x + j * a.dim);
  float* out = a.out + t * nhc * a.dim + d;
#pragma unroll
  for (int k = 0; k < kMaxHc; ++k) {
    if (k >= nhc) break;
    const float pk = a.post[t * nhc + k];
    float4 acc = make_float4(pk * f.x, pk * f.y, pk * f.z, pk * f.w);
#pragma unroll
    for (int j = 0; j < kMaxHc; ++j) {
      if (j >= nhc) break;
      const float cj = c[j * nhc + k];
      acc.x += cj * xj[j].x;
      acc.y += cj * xj[j].y;
      acc.z += cj * xj[j].z;
      acc.w += cj * xj[j].w;
    }
    *reinterpret_cast<float4*>(out + k * a.dim) = acc;
  }
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
    if (threadIdx.x < kWarp) hc_split4_token(s, t, threadIdx.x, s.m + t * 24);
  } else if (threadIdx.x == 0) {
    hc_split_token<0>(s, t, s.m + t * (2 + s.nhc) * s.nhc);
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

// ---- spread HC pre (CudaBackendOptions::hc_router_v2, n ≤ kHcSpreadMaxTokens) ----
// The kernels above run the 24 control rows as 24 blocks that each re-derive the norm and then walk
// their row's 32 segments, and the split + collapse + norm as one 256-thread block per token whose
// loads go out one stride at a time; at n = 1 both are latency chains on a few SMs (~19 µs). Here:
//   (scale)    n ≥ 2: one block per token writes the state row's RMSNorm scale (rms_scale_row);
//   (segments) block (4 rows, 8 segments, 4 tokens): each warp holds its segment of 4 rows in
//              registers and sums it for 4 tokens — the lane sums of README.md's order, the 16
//              (row, token) sums by reduce_scatter16 (warp_sum's bits) — into part[t][row][segment];
//              at n = 1 each block takes the scale itself (rms_scale_row_as: the 1024-thread bits);
//   (finish)   two blocks per token: block 0's first warp adds the segment sums in segment order
//              and runs the split (Sinkhorn); block 1 adds them too, writes mix, takes pre (the
//              split's own expression) and does the collapse and the sublayer norm with every load in
//              flight — so Sinkhorn's ~2 µs of dependent divisions overlap the collapse.
// Each value is the same float expression in the same order as the kernels above: the same bits.
constexpr int64_t kHcSpreadMaxTokens = 32;
constexpr uint64_t kHcDoneBytes = 256;  // hc_seg_fused_kernel's counters: 4 per token slice (≤ 8 slices)
constexpr int kHcSegRows = 4, kHcSegWarps = 8, kHcSegTokens = 4;  // rows × tokens = reduce_scatter16's 16 items
static_assert(kHcSegRows * kHcSegTokens == 16, "one reduce_scatter16 per segment");

// v4: a block of norm_threads / 4 threads with one round of float4 loads (rms_scale_row_v4), else a block
// of norm_threads (rms_scale_row itself). Same bits either way.
__global__ void __launch_bounds__(1024) hc_scale_kernel(const float* x, int64_t cols, float eps, float* sc,
                                                        int norm_threads, bool v4) {
  grid_launch_dependents();  // the segment kernel may start and load its weights meanwhile
  const float* xr = x + static_cast<int64_t>(blockIdx.x) * cols;
  const float s = v4 ? rms_scale_row_v4(xr, cols, eps, norm_threads) : rms_scale_row(xr, cols, eps);
  if (threadIdx.x == 0) sc[blockIdx.x] = s;
}

struct HcSegParams {
  const float* x;      // [n][cols] HC state rows
  const uint8_t* w;    // [rows][row_bytes] F16 controls
  uint64_t row_bytes;
  int64_t rows, cols, n, nseg;
  float eps;
  int norm_threads;    // rms_norm_threads(cols)
  bool wide_loads;
  bool norm_v4;        // norm_threads = 4 · 256, cols % 4 == 0, x 16-byte aligned: rms_scale_row_v4
  const float* sc;     // [n] scales, or null: n == 1 and each block takes the scale itself
  float* part;         // [n][rows][nseg] segment sums
  // With kPost (CudaBackendOptions::hc_post_fold; n = 1, nhc = 4, dim 4096): x is the state the previous
  // sublayer's HC post writes (HcPreArgs::prev_post); the blocks form its values from the post's inputs instead
  // of reading them, and the blocks of blockIdx.x = 0 store their segments of it.
  HcPostArgs post;
};

// ---- CudaBackendOptions::hc_post_fold: the HC post's values where the pre reads them (n = 1, nhc = 4) ----
// X'[e … e + 7] of the 16384-value state row (e % 8 = 0): two float4 of one stream k = e / 4096.
__device__ inline void post_value8(const HcPostArgs& q, const float (&pc)[20], int64_t e, float4& a, float4& b) {
  const int k = static_cast<int>(e / q.dim);
  const int64_t d = e % q.dim;
  const PostIn4 i0 = post_load4(q, d), i1 = post_load4(q, d + 4);
  a = post_value4(i0, pc, k);
  b = post_value4(i1, pc, k);
}
// rms_scale_row_v4's bits (1,024 emulated threads over the 16384 values, one round of 16 float4 a thread) of
// the state X' formed here: thread j's float4 k is X'[1024k + 4j …] = stream k / 4 at d = 4j + 1024·(k % 4).
__device__ inline float post_norm_scale(const HcPostArgs& q, const float (&pc)[20], float eps) {
  const int64_t j4 = 4 * static_cast<int64_t>(threadIdx.x);
  PostIn4 in[4];
#pragma unroll
  for (int m = 0; m < 4; ++m) in[m] = post_load4(q, j4 + 1024 * m);
  double s[4] = {0, 0, 0, 0};
#pragma unroll
  for (int k = 0; k < 16; ++k) {  // each chain in rms_scale_row_v4's order
    const float4 v = post_value4(in[k % 4], pc, k / 4);
    s[0] += static_cast<double>(v.x) * v.x;
    s[1] += static_cast<double>(v.y) * v.y;
    s[2] += static_cast<double>(v.z) * v.z;
    s[3] += static_cast<double>(v.w) * v.w;
  }
  return rms_scale_v4_of(s, 4 * q.dim, eps, 1024);
}

// kSelfNorm (n == 1, p.sc null): the block takes the token's norm scale itself. The body of hc_seg_kernel and
// of hc_seg_fused_kernel (every thread of the block calls it).
template <bool kSelfNorm, bool kPost = false>
__device__ inline void hc_seg_sums(const HcSegParams& p) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int64_t o0 = static_cast<int64_t>(blockIdx.x) * kHcSegRows;
  const int64_t s = static_cast<int64_t>(blockIdx.y) * kHcSegWarps + warp;
  const int64_t t0 = static_cast<int64_t>(blockIdx.z) * kHcSegTokens;
  const int nt = kSelfNorm ? 1 : static_cast<int>(p.n - t0 < kHcSegTokens ? p.n - t0 : kHcSegTokens);
  const bool active = s < p.nseg;  // whole warps
  const int64_t e0 = s * kF16Seg + 8 * lane, e1 = e0 + kF16SegHalf;
  // Every load of the block goes out before the first result is needed.
  uint4 w[kHcSegRows][2];
#pragma unroll
  for (int r = 0; r < kHcSegRows; ++r) {
    w[r][0] = w[r][1] = make_uint4(0, 0, 0, 0);
    if (active && o0 + r < p.rows) {
      const uint8_t* row = p.w + static_cast<uint64_t>(o0 + r) * p.row_bytes;
      w[r][0] = load_w8(row, e0, p.cols, p.wide_loads);
      w[r][1] = load_w8(row, e1, p.cols, p.wide_loads);
    }
  }
  // Launched as a programmatic dependent (hc_pdl): the weights above are loaded while the kernel before
  // this one finishes; the state rows below are its output. The finish kernel may start from here (it
  // then finds X complete: this block has waited for the kernel that wrote it).
  grid_dependency_wait();
  grid_launch_dependents();
  float4 v[kHcSegTokens][4];
  float pc[20];
  if (kPost) post_load_pc(p.post, pc);
#pragma unroll
  for (int ti = 0; ti < kHcSegTokens; ++ti) {
    v[ti][0] = v[ti][1] = v[ti][2] = v[ti][3] = make_float4(0, 0, 0, 0);
    if (kPost) {  // n = 1: the post's values of this warp's segment, stored once (the blocks of blockIdx.x = 0)
      if (active && ti == 0) {
        post_value8(p.post, pc, e0, v[0][0], v[0][1]);
        post_value8(p.post, pc, e1, v[0][2], v[0][3]);
        if (blockIdx.x == 0) {
          float* xo = p.post.out;
          *reinterpret_cast<float4*>(xo + e0) = v[0][0];
          *reinterpret_cast<float4*>(xo + e0 + 4) = v[0][1];
          *reinterpret_cast<float4*>(xo + e1) = v[0][2];
          *reinterpret_cast<float4*>(xo + e1 + 4) = v[0][3];
        }
      }
    } else if (active && ti < nt) {
      const float* xr = p.x + (t0 + ti) * p.cols;
      load_x8(xr, e0, p.cols, p.wide_loads, v[ti][0], v[ti][1]);
      load_x8(xr, e1, p.cols, p.wide_loads, v[ti][2], v[ti][3]);
    }
  }
  float sc[kHcSegTokens];
  if (kPost) {
    sc[0] = post_norm_scale(p.post, pc, p.eps);
#pragma unroll
    for (int ti = 1; ti < kHcSegTokens; ++ti) sc[ti] = 0.0f;
  } else if (!kSelfNorm) {
#pragma unroll
    for (int ti = 0; ti < kHcSegTokens; ++ti) sc[ti] = ti < nt ? p.sc[t0 + ti] : 0.0f;
  } else {  // the block takes the scale itself, with the norm's bits (norm_v4 is uniform)
    sc[0] = p.norm_v4 ? rms_scale_row_v4(p.x, p.cols, p.eps, p.norm_threads)
                      : rms_scale_row_as<4>(p.x, p.cols, p.eps, p.norm_threads);
#pragma unroll
    for (int ti = 1; ti < kHcSegTokens; ++ti) sc[ti] = 0.0f;
  }
  if (!active) return;  // no barrier below
  float sums[16];  // item r·4 + ti: this lane's sum of row o0 + r, token t0 + ti (the contract's order)
#pragma unroll
  for (int ti = 0; ti < kHcSegTokens; ++ti) {
#pragma unroll
    for (int k = 0; k < 4; ++k) {  // flat = x · scale, as rms_norm writes it (padding stays 0)
      v[ti][k].x *= sc[ti];
      v[ti][k].y *= sc[ti];
      v[ti][k].z *= sc[ti];
      v[ti][k].w *= sc[ti];
    }
#pragma unroll
    for (int r = 0; r < kHcSegRows; ++r)
      sums[r * kHcSegTokens + ti] = dot8(dot8(0.0f, w[r][0], v[ti][0], v[ti][1]), w[r][1], v[ti][2], v[ti][3]);
  }
  const float seg_sum = reduce_scatter16(sums, lane);
  const int item = (lane >> 1) & 15, r = item / kHcSegTokens, ti = item % kHcSegTokens;
  if ((lane & 1) == 0 && ti < nt && o0 + r < p.rows) p.part[((t0 + ti) * p.rows + o0 + r) * p.nseg + s] = seg_sum;
}

template <bool kSelfNorm, bool kPost = false>
__global__ void __launch_bounds__(kHcSegWarps * kWarp) hc_seg_kernel(HcSegParams p) {
  hc_seg_sums<kSelfNorm, kPost>(p);
}

// The same segment sums in README.md's F16 MMA order (CudaBackendOptions::f16_mma): block (8 rows,
// 2 segments, 8 tokens), warp w quarter w % 4 of segment w / 4 — f16_mma.cuh's k order and chain for 8
// rows × 8 tokens (the m-tile's rows g + 8 are zero rows) — then ((q0 + q1) + q2) + q3 through shared
// memory. The normed row x·scale is split as the matmul splits rms_norm's output, so part holds the bits
// of rms_norm then the MMA matmul's segments. Weights and raw activations are loaded before the norm scale
// (and, with hc_pdl, the weights before waiting for the kernel before this one).
constexpr int kHcMmaRows = 8, kHcMmaTokens = 8, kHcMmaSegs = kHcSegWarps / 4;
template <bool kSelfNorm, bool kPost = false>
__device__ inline void hc_seg_mma_sums(const HcSegParams& p) {
  __shared__ float qs[kHcSegWarps][kWarp][2];  // quarter sums: warp, lane (row g), tokens 2t, 2t + 1
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, g = lane >> 2, t = lane & 3;
  const int64_t o0 = static_cast<int64_t>(blockIdx.x) * kHcMmaRows;
  const int64_t s = static_cast<int64_t>(blockIdx.y) * kHcMmaSegs + warp / 4;
  const int64_t u = 4 * s + warp % 4;  // the warp's quarter
  const int64_t t0 = static_cast<int64_t>(blockIdx.z) * kHcMmaTokens;
  const int64_t nt = kSelfNorm ? 1 : (p.n - t0 < kHcMmaTokens ? p.n - t0 : kHcMmaTokens);
  const bool on = s < p.nseg;
  const uint8_t* wr[1][2] = {{o0 + g < p.rows ? p.w + static_cast<uint64_t>(o0 + g) * p.row_bytes : nullptr, nullptr}};
  uint4 w[4][1][2];
#pragma unroll
  for (int b = 0; b < 4; ++b) f16_mma_load_w<1>(w[b], wr, on, u * kF16MmaQ + b * kF16MmaBlk + 8 * t, p.cols, p.wide_loads);
  grid_dependency_wait();  // the state rows (and scales) are the output of the kernels before this one
  grid_launch_dependents();
  const float* xr = on && g < nt ? p.x + (t0 + g) * p.cols : nullptr;
  float x[4][1][8];
  float pc[20];
  if (kPost) {  // n = 1: lanes g = 0 hold the quarter's post values; the blocks of blockIdx.x = 0 store them
    post_load_pc(p.post, pc);
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      float4 va = make_float4(0, 0, 0, 0), vb = va;
      const int64_t e = u * kF16MmaQ + b * kF16MmaBlk + 8 * t;
      if (xr) {
        post_value8(p.post, pc, e, va, vb);
        if (blockIdx.x == 0) {
          *reinterpret_cast<float4*>(p.post.out + e) = va;
          *reinterpret_cast<float4*>(p.post.out + e + 4) = vb;
        }
      }
      x[b][0][0] = va.x, x[b][0][1] = va.y, x[b][0][2] = va.z, x[b][0][3] = va.w;
      x[b][0][4] = vb.x, x[b][0][5] = vb.y, x[b][0][6] = vb.z, x[b][0][7] = vb.w;
    }
  } else {
#pragma unroll
    for (int b = 0; b < 4; ++b) load_x8_mma<false>(xr, u * kF16MmaQ + b * kF16MmaBlk + 8 * t, p.cols, p.wide_loads, 1.0f, x[b][0]);
  }
  float sc = 0.0f;
  if (kPost) {
    sc = post_norm_scale(p.post, pc, p.eps);
  } else if (!kSelfNorm) {
    if (g < nt) sc = p.sc[t0 + g];
  } else {  // the block takes the scale itself, with the norm's bits (norm_v4 is uniform)
    sc = p.norm_v4 ? rms_scale_row_v4(p.x, p.cols, p.eps, p.norm_threads)
                   : rms_scale_row_as<4>(p.x, p.cols, p.eps, p.norm_threads);
  }
#pragma unroll
  for (int b = 0; b < 4; ++b)
#pragma unroll
    for (int k = 0; k < 8; ++k) x[b][0][k] *= sc;  // flat = x · scale, as rms_norm writes it (padding stays 0)
  float c[1][1][4];
  f16_mma_quarter_loaded<1, 1>(c, w, x);
  qs[warp][lane][0] = c[0][0][0];  // row g, tokens 2t and 2t + 1 (c[2], c[3]: the zero rows g + 8)
  qs[warp][lane][1] = c[0][0][1];
  __syncthreads();
  if (threadIdx.x < kHcMmaSegs * kWarp * 2) {  // (segment k, lane, r): ((q0 + q1) + q2) + q3
    const int k = threadIdx.x / (2 * kWarp), l = threadIdx.x / 2 % kWarp, r = threadIdx.x % 2;
    const int64_t sk = static_cast<int64_t>(blockIdx.y) * kHcMmaSegs + k, o = o0 + (l >> 2), ti = 2 * (l & 3) + r;
    if (sk < p.nseg && o < p.rows && ti < nt)
      p.part[((t0 + ti) * p.rows + o) * p.nseg + sk] =
          f16_mma_seg_sum(qs[4 * k][l][r], qs[4 * k + 1][l][r], qs[4 * k + 2][l][r], qs[4 * k + 3][l][r]);
  }
}

template <bool kSelfNorm, bool kPost = false>
__global__ void __launch_bounds__(kHcSegWarps * kWarp) hc_seg_mma_kernel(HcSegParams p) {
  hc_seg_mma_sums<kSelfNorm, kPost>(p);
}

// Four values of y = Σ_s w[s]·X[s] (hc_collapse_kernel's order, from 0): xv[s] holds X[s]'s four.
__device__ inline float4 collapse4(const float* w, const float4 (&xv)[kMaxHc], int nhc) {
  float4 acc = make_float4(0, 0, 0, 0);
#pragma unroll
  for (int k = 0; k < kMaxHc; ++k) {
    if (k >= nhc) break;
    acc.x += w[k] * xv[k].x;
    acc.y += w[k] * xv[k].y;
    acc.z += w[k] * xv[k].z;
    acc.w += w[k] * xv[k].w;
  }
  return acc;
}

// Block 1 of the finish kernels, a thread owning y[d1 … d1 + 3]: its X values (xv[s] = X[s][d1 …], read at
// L2) and norm weights (nw, left at 1 without them), all loads in flight.
__device__ inline void hc_load_x4(const float* xt, int64_t d1, int64_t dim, int nhc, const float* norm_w,
                                  float4 (&xv)[kMaxHc], float4& nw) {
#pragma unroll
  for (int k = 0; k < kMaxHc; ++k)
    if (k < nhc) xv[k] = __ldcg(reinterpret_cast<const float4*>(xt + k * dim + d1));
  if (norm_w) nw = __ldcg(reinterpret_cast<const float4*>(norm_w + d1));
}

// Block 1 of the finish kernels, once pre is in ws: yt = Σ_s ws[s]·X[s] (hc_collapse_kernel's order, from 0)
// into ys (shared, dim floats) and global, then xnt = RMSNorm_w(y) with rms_norm_kernel's bits through
// rms_scale_row_as. one4: thread i owns y[4i … 4i + 3], its X values in xv and norm weights in nw (loaded up
// front); else vec4 (dim % 4 == 0, 16-byte aligned rows) float4 strides, or scalar. Every thread calls it.
__device__ inline void hc_collapse_norm(const float* ws, const float4 (&xv)[kMaxHc], float4 nw, bool one4, int64_t d1,
                                        const float* xt, int nhc, const float* norm_w, float* yt, float* xnt, float* ys,
                                        int64_t dim, float eps, int norm_threads, bool vec4) {
  if (one4) {
    if (d1 < dim) {
      const float4 acc = collapse4(ws, xv, nhc);
      *reinterpret_cast<float4*>(ys + d1) = acc;
      *reinterpret_cast<float4*>(yt + d1) = acc;
    }
  } else if (vec4) {  // dim % 4 == 0, 16-byte aligned rows
    for (int64_t d = 4 * threadIdx.x; d < dim; d += 4 * blockDim.x) {
      float4 xk[kMaxHc];  // constant indices (unrolled, guarded): registers, all nhc loads in flight
#pragma unroll
      for (int k = 0; k < kMaxHc; ++k)
        if (k < nhc) xk[k] = *reinterpret_cast<const float4*>(xt + k * dim + d);
      const float4 acc = collapse4(ws, xk, nhc);
      *reinterpret_cast<float4*>(ys + d) = acc;
      *reinterpret_cast<float4*>(yt + d) = acc;
    }
  } else {
    for (int64_t d = threadIdx.x; d < dim; d += blockDim.x) {
      float acc = 0;
      for (int k = 0; k < nhc; ++k) acc += ws[k] * xt[k * dim + d];
      ys[d] = acc;
      yt[d] = acc;
    }
  }
  __syncthreads();  // ys complete
  const float sc = rms_scale_row_as<1>(ys, dim, eps, norm_threads);
  if (one4) {
    if (d1 < dim) {
      const float4 yv = *reinterpret_cast<const float4*>(ys + d1);
      *reinterpret_cast<float4*>(xnt + d1) =
          norm_w ? make_float4(yv.x * sc * nw.x, yv.y * sc * nw.y, yv.z * sc * nw.z, yv.w * sc * nw.w)
                 : make_float4(yv.x * sc, yv.y * sc, yv.z * sc, yv.w * sc);
    }
  } else if (vec4) {
    for (int64_t d = 4 * threadIdx.x; d < dim; d += 4 * blockDim.x) {
      const float4 yv = *reinterpret_cast<const float4*>(ys + d);
      float4 o = make_float4(yv.x * sc, yv.y * sc, yv.z * sc, yv.w * sc);
      if (norm_w) {
        const float4 w4 = *reinterpret_cast<const float4*>(norm_w + d);
        o = make_float4(yv.x * sc * w4.x, yv.y * sc * w4.y, yv.z * sc * w4.z, yv.w * sc * w4.w);
      }
      *reinterpret_cast<float4*>(xnt + d) = o;
    }
  } else {
    for (int64_t d = threadIdx.x; d < dim; d += blockDim.x) xnt[d] = norm_w ? ys[d] * sc * norm_w[d] : ys[d] * sc;
  }
}

// Grid (2, n). mix[t][o] = (…(0 + part[t][o][0]) + …) + part[t][o][nseg − 1], as the kernels above add
// their rounds, from a copy of token t's segment sums in shared memory. Block (0, t): the split of token
// t (a warp for nhc = 4, else one thread) on copies of scale and base in shared memory. Block (1, t): mix,
// then y = Σ_s pre[s]·X[s] (hc_collapse_kernel's order) and xn = RMSNorm_w(y) (rms_norm_kernel's bits
// through rms_scale_row_as). Every global load that does not depend on another goes out in the first
// round (segment sums, scale, base, and where each thread owns one float4 of y, its X and norm_w
// values): each dependent round trip costs ~0.7 µs here. Dynamic shared memory: rows·nseg (rounded up to
// 4) + dim floats.
__global__ void __launch_bounds__(1024) hc_finish_kernel(HcSplitArgs s, const float* part, int64_t nseg, float* mix,
                                                         const float* x, const float* norm_w, float* y, float* xn,
                                                         int64_t dim, float eps, int norm_threads, bool vec4) {
  extern __shared__ float sh[];  // [rows·nseg] segment sums, then [dim] y
  __shared__ float ms[(2 + kMaxHc) * kMaxHc];
  __shared__ float sb[3 + (2 + kMaxHc) * kMaxHc];  // scale[3], then base[rows]
  __shared__ float ws[kMaxHc];
  const int64_t t = blockIdx.y;
  const int nhc = s.nhc, rows = (2 + nhc) * nhc;
  const int64_t np = rows * nseg;
  float* ps = sh;
  float* ys = sh + ((np + 3) & ~int64_t{3});  // 16-byte aligned for the float4 path
  const float* xt = x + t * nhc * dim;
  // Block 1, each thread one float4 of y: its X values and norm weights, loaded up front.
  const bool one4 = blockIdx.x == 1 && vec4 && dim <= 4 * static_cast<int64_t>(blockDim.x);
  const int64_t d1 = 4 * static_cast<int64_t>(threadIdx.x);
  float4 xv[kMaxHc], nw = make_float4(1, 1, 1, 1);
  // Before the wait (hc_pdl: the segment kernel may still run): only what it does not write — X (complete:
  // every segment block waited for its writer before letting this kernel start; read at L2, .cg), the
  // norm, scale and base weights.
  if (one4 && d1 < dim) hc_load_x4(xt, d1, dim, nhc, norm_w, xv, nw);
  if (threadIdx.x < 3) sb[threadIdx.x] = s.scale[threadIdx.x];
  if (threadIdx.x < rows) sb[3 + threadIdx.x] = s.base[threadIdx.x];
  grid_dependency_wait();  // the segment sums are the segment kernel's output
  for (int64_t q = threadIdx.x; q < np; q += blockDim.x) ps[q] = part[t * np + q];
  __syncthreads();
  const int sum_threads = blockIdx.x == 0 ? kWarp : static_cast<int>(blockDim.x);
  for (int o = threadIdx.x; o < rows && static_cast<int>(threadIdx.x) < sum_threads; o += sum_threads) {
    float total = 0.0f;
#pragma unroll 8
    for (int64_t q = 0; q < nseg; ++q) total += ps[o * nseg + q];  // segment order
    ms[o] = total;
    if (blockIdx.x == 1) mix[t * rows + o] = total;  // the op's mix output
  }
  if (blockIdx.x == 0) {
    if (threadIdx.x >= kWarp) return;
    __syncwarp();
    HcSplitArgs sl = s;  // the same values, read from shared memory
    sl.scale = sb;
    sl.base = sb + 3;
    if (nhc == 4)
      hc_split4_token(sl, t, threadIdx.x, ms);
    else if (threadIdx.x == 0)
      hc_split_token<0>(sl, t, ms);
    return;
  }
  __syncthreads();
  if (threadIdx.x < nhc)  // hc_split_token's / hc_split4_token's pre expression
    ws[threadIdx.x] = sigmoid_dev(ms[threadIdx.x] * sb[0] + sb[3 + threadIdx.x]) + s.eps;
  __syncthreads();
  hc_collapse_norm(ws, xv, nw, one4, d1, xt, nhc, norm_w, y + t * dim, xn + t * dim, ys, dim, eps, norm_threads, vec4);
}

// (…((0 + p[0]) + p[1]) + …) + p[nseg − 1], the finish kernels' segment order, read by the thread that adds
// it (L2 loads, all of a round in flight). vec: p 16-byte aligned and nseg % 4 == 0.
__device__ inline float seg_total(const float* p, int64_t nseg, bool vec) {
  float total = 0.0f;
  if (!vec) {
    for (int64_t q = 0; q < nseg; ++q) total += __ldcg(p + q);
    return total;
  }
  constexpr int kRound = 8;  // float4 loads in flight
  for (int64_t q0 = 0; q0 < nseg; q0 += 4 * kRound) {
    float4 v[kRound];
#pragma unroll
    for (int u = 0; u < kRound; ++u)
      v[u] = q0 + 4 * u < nseg ? __ldcg(reinterpret_cast<const float4*>(p + q0 + 4 * u)) : make_float4(0, 0, 0, 0);
#pragma unroll
    for (int u = 0; u < kRound; ++u) {
      if (q0 + 4 * u >= nseg) break;
      total += v[u].x;
      total += v[u].y;
      total += v[u].z;
      total += v[u].w;
    }
  }
  return total;
}

// The split block of the finish kernels (hc_finish3_kernel, hc_finish5_kernel), one warp (lane = threadIdx.x % 32):
// token t's mix rows added from its segment sums pt [rows][nseg] (seg_total's order), written to mix, then the
// split (Sinkhorn) on copies of scale and base in shared memory (ms: [rows], sb: [3 + rows]).
__device__ inline void hc_finish_split_warp(const HcSplitArgs& s, const float* pt, int64_t nseg, bool part4, float* mix,
                                            int64_t t, int nhc, float* ms, float* sb) {
  const int lane = threadIdx.x % kWarp, rows = (2 + nhc) * nhc;
  for (int q = lane; q < 3 + rows; q += kWarp) sb[q] = q < 3 ? s.scale[q] : s.base[q - 3];
  grid_dependency_wait();  // the segment sums are the segment kernel's output
  for (int o = lane; o < rows; o += kWarp) {
    const float total = seg_total(pt + o * nseg, nseg, part4);
    ms[o] = total;
    mix[t * rows + o] = total;  // the op's mix output
  }
  __syncwarp();
  HcSplitArgs sl = s;  // the same values, read from shared memory
  sl.scale = sb;
  sl.base = sb + 3;
  if (nhc == 4)
    hc_split4_token(sl, t, lane, ms);
  else if (lane == 0)
    hc_split_token<0>(sl, t, ms);
}

// hc_finish_kernel's values with shorter chains (CudaBackendOptions::small_v3): each mix sum is read by the
// thread that adds it, from global memory into registers, instead of a block-wide copy into shared memory,
// a barrier and then up to 24 threads of one block reading the same bank (row stride nseg = 32 floats) one
// value at a time; block 1 adds only the nhc pre rows it needs (block 0 writes mix), so block 1 passes one
// barrier before the collapse instead of three, and block 0 is one warp. Dynamic shared memory: dim floats.
// NHC = 4 (Flash) fixes nhc at compile time (X in 4 float4 registers: no spills at 1024 threads); 0: s.nhc.
// with_split = false (HcPreArgs::split off, grid (1, n)): no split block — the one block per token adds
// every mix row (threads < rows, each its own row as block 0 would), writes mix and takes pre from it; the
// caller's hc_split computes post and comb later (off the critical path), so the kernel ends after the
// collapse and norm instead of after Sinkhorn's ~2 µs of dependent divisions.
template <int NHC>
__global__ void __launch_bounds__(1024) hc_finish3_kernel(HcSplitArgs s, const float* part, int64_t nseg, float* mix,
                                                          const float* x, const float* norm_w, float* y, float* xn,
                                                          int64_t dim, float eps, int norm_threads, bool vec4,
                                                          bool part4, bool with_split) {
  extern __shared__ float4 sh4[];  // [dim / 4] y (block 1)
  float* ys = reinterpret_cast<float*>(sh4);
  __shared__ float ms[(2 + kMaxHc) * kMaxHc];
  __shared__ float sb[3 + (2 + kMaxHc) * kMaxHc];  // scale[3], then base[rows]
  __shared__ float ws[kMaxHc];
  const int64_t t = blockIdx.y;
  const int nhc = NHC > 0 ? NHC : s.nhc, rows = (2 + nhc) * nhc;
  const float* pt = part + t * rows * nseg;  // token t's segment sums [rows][nseg]
  if (with_split && blockIdx.x == 0) {  // mix and the split, one warp
    if (threadIdx.x < kWarp) hc_finish_split_warp(s, pt, nseg, part4, mix, t, nhc, ms, sb);
    return;
  }
  const float* xt = x + t * nhc * dim;
  const bool one4 = vec4 && dim <= 4 * static_cast<int64_t>(blockDim.x);
  const int64_t d1 = 4 * static_cast<int64_t>(threadIdx.x);
  float4 xv[kMaxHc], nw = make_float4(1, 1, 1, 1);
  // Before the wait: only what the segment kernel does not write (hc_finish_kernel's reasoning).
  if (one4 && d1 < dim) hc_load_x4(xt, d1, dim, nhc, norm_w, xv, nw);
  float scale0 = 0.0f, base = 0.0f;
  if (threadIdx.x < nhc) {
    scale0 = s.scale[0];
    base = s.base[threadIdx.x];
  }
  grid_dependency_wait();
  // Thread o < rows (without the split block) or < nhc adds mix row o; hc_split_token's / hc_split4_token's
  // pre expression on rows < nhc.
  if (static_cast<int>(threadIdx.x) < (with_split ? nhc : rows)) {
    const float total = seg_total(pt + threadIdx.x * nseg, nseg, part4);
    if (!with_split) mix[t * rows + threadIdx.x] = total;  // the op's mix output
    if (static_cast<int>(threadIdx.x) < nhc) {
      const float p = sigmoid_dev(total * scale0 + base) + s.eps;
      ws[threadIdx.x] = p;
      if (!with_split) s.pre[t * nhc + threadIdx.x] = p;  // the op's pre output (else the split block's)
    }
  }
  __syncthreads();
  hc_collapse_norm(ws, xv, nw, one4, d1, xt, nhc, norm_w, y + t * dim, xn + t * dim, ys, dim, eps, norm_threads, vec4);
}

// hc_finish3_kernel's values with the collapse and norm in registers (small_v5; nhc = 4, dim ≤ 16·256 and
// rms_norm_threads(dim) = 256): the finish block is 256 threads, thread i owning y[i + 256m] (m < 16) — exactly
// the norm's chain i, so the sum of squares runs in registers as the collapse produces y (no copy of y to
// shared memory, no barrier and no second pass over it before the norm), then block_sum (rms_scale_row's
// tree) and the stores. X (64 values a thread) and the norm weights load before the wait. Block 0 (with the
// split): hc_finish_split_warp, as hc_finish3_kernel's. Grid (with_split ? 2 : 1, n), 256 threads.
constexpr int kFin5Threads = 256, kFin5Per = 16;

// hc_finish5_kernel's pieces (also hc_seg_fused_kernel's finish). Token t's X as thread i holds it (xv[k][m] =
// X[k][i + 256m]) and the norm weights (nw, 1 without them).
__device__ inline void hc_fin5_load(const float* xt, const float* norm_w, int64_t dim, float (&xv)[4][kFin5Per],
                                    float (&nw)[kFin5Per]) {
#pragma unroll
  for (int m = 0; m < kFin5Per; ++m) {
    const int64_t d = threadIdx.x + kFin5Threads * m;
    if (d < dim) {
#pragma unroll
      for (int k = 0; k < 4; ++k) xv[k][m] = __ldcg(xt + k * dim + d);
      nw[m] = norm_w ? __ldcg(norm_w + d) : 1.0f;
    }
  }
}

// Threads < 4 (with_split) or < rows: token t's mix rows added from its segment sums pt [rows][nseg] (seg_total's
// order; mix written without the split block, which writes it otherwise), pre (hc_split4_token's expression)
// into ws (and the op's pre without the split block). scale0 = s.scale[0], base = s.base[threadIdx.x] (threads < 4).
__device__ inline void hc_fin5_pre(const HcSplitArgs& s, const float* pt, int64_t nseg, bool part4, float* mix,
                                   int64_t t, bool with_split, float scale0, float base, float* ws) {
  constexpr int nhc = 4, rows = (2 + nhc) * nhc;
  if (static_cast<int>(threadIdx.x) < (with_split ? nhc : rows)) {  // hc_finish3_kernel's mix rows and pre
    const float total = seg_total(pt + threadIdx.x * nseg, nseg, part4);
    if (!with_split) mix[t * rows + threadIdx.x] = total;
    if (static_cast<int>(threadIdx.x) < nhc) {
      const float p = sigmoid_dev(total * scale0 + base) + s.eps;
      ws[threadIdx.x] = p;
      if (!with_split) s.pre[t * nhc + threadIdx.x] = p;
    }
  }
}

// y = Σ_s ws[s]·X[s] (hc_collapse_kernel's order, from 0) and xn = RMSNorm_w(y), thread i owning y[i + 256m]:
// the norm's chain i summed in registers as the collapse forms y, then block_sum (every thread calls it).
__device__ inline void hc_fin5_collapse_norm(const float* ws, const float (&xv)[4][kFin5Per], const float (&nw)[kFin5Per],
                                             bool with_w, int64_t dim, float eps, float* yt, float* xnt) {
  const float w0 = ws[0], w1 = ws[1], w2 = ws[2], w3 = ws[3];
  float yv[kFin5Per];
  double ss = 0;  // rms_scale_row's chain of thread i: y[i], y[i + 256], …
#pragma unroll
  for (int m = 0; m < kFin5Per; ++m) {
    if (threadIdx.x + kFin5Threads * m >= dim) break;
    float acc = 0;  // hc_collapse_kernel's order, from 0
    acc += w0 * xv[0][m];
    acc += w1 * xv[1][m];
    acc += w2 * xv[2][m];
    acc += w3 * xv[3][m];
    yv[m] = acc;
    ss += static_cast<double>(acc) * acc;
  }
  const float sc = rms_scale_of(ss, dim, eps);
#pragma unroll
  for (int m = 0; m < kFin5Per; ++m) {
    const int64_t d = threadIdx.x + kFin5Threads * m;
    if (d >= dim) break;
    yt[d] = yv[m];
    xnt[d] = with_w ? yv[m] * sc * nw[m] : yv[m] * sc;
  }
}

// hc_finish3_kernel's values with the collapse and norm in registers (small_v5; nhc = 4, dim ≤ 16·256 and
// rms_norm_threads(dim) = 256): the finish block is 256 threads, thread i owning y[i + 256m] (m < 16) — exactly
// the norm's chain i, so the sum of squares runs in registers as the collapse produces y (no copy of y to
// shared memory, no barrier and no second pass over it before the norm), then block_sum (rms_scale_row's
// tree) and the stores. X (64 values a thread) and the norm weights load before the wait. Block 0 (with the
// split): hc_finish_split_warp, as hc_finish3_kernel's. Grid (with_split ? 2 : 1, n), 256 threads.
__global__ void __launch_bounds__(kFin5Threads) hc_finish5_kernel(HcSplitArgs s, const float* part, int64_t nseg,
                                                                  float* mix, const float* x, const float* norm_w,
                                                                  float* y, float* xn, int64_t dim, float eps,
                                                                  bool part4, bool with_split, bool x_late) {
  constexpr int nhc = 4, rows = (2 + nhc) * nhc;
  __shared__ float ms[rows];
  __shared__ float sb[3 + rows];
  __shared__ float ws[nhc];
  const int64_t t = blockIdx.y;
  const float* pt = part + t * rows * nseg;
  if (with_split && blockIdx.x == 0) {
    if (threadIdx.x < kWarp) hc_finish_split_warp(s, pt, nseg, part4, mix, t, nhc, ms, sb);
    return;
  }
  float xv[nhc][kFin5Per], nw[kFin5Per];
  // Before the wait: only what the segment kernel does not write (hc_finish_kernel's reasoning). x_late
  // (hc_post_fold): the segment kernel writes X, so it loads after the wait, beside the segment sums.
  if (!x_late) hc_fin5_load(x + t * nhc * dim, norm_w, dim, xv, nw);
  float scale0 = 0.0f, base = 0.0f;
  if (threadIdx.x < nhc) {
    scale0 = s.scale[0];
    base = s.base[threadIdx.x];
  }
  grid_dependency_wait();
  if (x_late) hc_fin5_load(x + t * nhc * dim, norm_w, dim, xv, nw);
  hc_fin5_pre(s, pt, nseg, part4, mix, t, with_split, scale0, base, ws);
  __syncthreads();
  hc_fin5_collapse_norm(ws, xv, nw, norm_w != nullptr, dim, eps, y + t * dim, xn + t * dim);
}

// The head form's finish (HcPreArgs with nhc = 4 F16 control rows: the output head's HC, by_pieces.h
// hc_pre_head_form; CudaBackendOptions::hc_fuse's hundreds digit): hc_finish5_kernel's collapse block with the head
// weights in the split's place — token t's 4 mix rows added from their segment sums [4][nseg] of part (seg_total's
// order) into mix [n][4], pre = σ(mix·scale[0] + base) + eps (hc_head_kernel's expression) into ws and the op's pre,
// then the collapse and the output norm in registers (hc_fin5_collapse_norm) — the bits of hc_head, hc_collapse and
// rms_norm after the spread segment sums. The head's matvec after it (gemv_rows' half kernel, a programmatic
// dependent) may launch right after the wait (griddepcontrol.launch_dependents), as the output RMSNorm let it with
// dense_ramp.h's kRampNormTrigger: its first tiles' copies move while this block adds, collapses and normalises; it
// waits for this grid's end before it reads xn. X and the norm weights load before the wait (the segment kernel
// writes neither). Grid (1, n), kFin5Threads threads.
__global__ void __launch_bounds__(kFin5Threads) hc_head_finish_kernel(HcSplitArgs s, const float* part, int64_t nseg,
                                                                      float* mix, const float* x, const float* norm_w,
                                                                      float* y, float* xn, int64_t dim, float eps,
                                                                      bool part4) {
  constexpr int nhc = 4;
  __shared__ float ws[nhc];
  const int64_t t = blockIdx.y;
  float xv[nhc][kFin5Per], nw[kFin5Per];
  hc_fin5_load(x + t * nhc * dim, norm_w, dim, xv, nw);
  float scale0 = 0.0f, base = 0.0f;
  if (threadIdx.x < nhc) {
    scale0 = s.scale[0];
    base = s.base[threadIdx.x];
  }
  grid_dependency_wait();
  grid_launch_dependents();
  if (threadIdx.x < nhc) {
    const float total = seg_total(part + (t * nhc + threadIdx.x) * nseg, nseg, part4);
    mix[t * nhc + threadIdx.x] = total;
    const float p = sigmoid_dev(total * scale0 + base) + s.eps;
    ws[threadIdx.x] = p;
    s.pre[t * nhc + threadIdx.x] = p;
  }
  __syncthreads();
  hc_fin5_collapse_norm(ws, xv, nw, norm_w != nullptr, dim, eps, y + t * dim, xn + t * dim);
}

// hc_pre_spread's segment and finish kernels as one launch (CudaBackendOptions::hc_fuse; nhc = 4 and
// hc_finish5_kernel's shapes): the segment blocks (either F16 order: hc_seg_sums / hc_seg_mma_sums), then each
// block counts itself done on its token slice's counters, after a fence (its segment sums visible device-wide;
// the last block reads them at L2, seg_total's __ldcg). The pre rows 0 … 3 all live in the blocks of
// blockIdx.x = 0 (4 or 8 rows a block), so the last of those runs hc_finish5_kernel's collapse block for the
// slice's tokens (the first token's X loaded before counting itself) while the other blocks still sum the
// post and comb rows; the last of the other blocks runs its split block (mix + Sinkhorn, a warp per token) once
// every block of the slice has counted itself done — beside the collapse, as hc_finish5's two blocks.
// Each resets its counter (zero between calls: a new counter area is cleared once, hc_pre_spread). The same
// expressions in the same order as the two kernels: the same bits. Not here: the HC post before it.
struct HcFuseArgs {
  HcSplitArgs s;
  float* mix;
  const float* x;       // [n][4][dim] HC state (p.x)
  const float* norm_w;  // [dim] or null
  float* y;
  float* xn;
  int64_t dim;
  float eps;
  bool part4, with_split;
  int slice_tokens;     // tokens per blockIdx.z (kHcSegTokens or kHcMmaTokens; ≤ kHcSegWarps)
  int* done;            // [4 · slices]: pre-row blocks, all blocks, the other blocks done (zero between calls)
};

template <bool kSelfNorm, bool kMma>
__global__ void __launch_bounds__(kHcSegWarps * kWarp) hc_seg_fused_kernel(HcSegParams p, HcFuseArgs f) {
  static_assert(kHcSegWarps * kWarp == kFin5Threads, "the segment block is the finish block");
  constexpr int nhc = 4, rows = (2 + nhc) * nhc;
  __shared__ float ms[kHcSegWarps][rows];
  __shared__ float sb[kHcSegWarps][3 + rows];
  __shared__ float ws[nhc];
  __shared__ int role;  // bit 0: the slice's last pre-row block (collapse + norm); bit 1: the split block
  if constexpr (kMma)
    hc_seg_mma_sums<kSelfNorm>(p);
  else
    hc_seg_sums<kSelfNorm>(p);
  const int64_t t0 = static_cast<int64_t>(blockIdx.z) * f.slice_tokens;
  const int nt = static_cast<int>(p.n - t0 < f.slice_tokens ? p.n - t0 : f.slice_tokens);
  const bool pre_block = blockIdx.x == 0;
  float xv[nhc][kFin5Per], nw[kFin5Per];
  if (pre_block) hc_fin5_load(f.x + t0 * nhc * f.dim, f.norm_w, f.dim, xv, nw);  // X is complete: waited above
  __threadfence();  // this thread's segment sums visible device-wide before the block counts itself done
  __syncthreads();
  if (threadIdx.x == 0) {
    // Counters: [0] pre-row blocks done, [1] all blocks done, [2] the other blocks done. The collapse goes to
    // the last pre-row block, the split to the last of the other blocks (it then waits for the pre-row blocks:
    // all of the grid's blocks are resident or will be, none waits on it), so the two run side by side as
    // hc_finish5_kernel's two blocks do; with one row of blocks the collapse block runs both.
    int r = 0;
    int* done = f.done + 4 * blockIdx.z;
    const int all = static_cast<int>(gridDim.x * gridDim.y), others = all - static_cast<int>(gridDim.y);
    const int k = atomicAdd(done + 1, 1);
    if (pre_block) {
      if (atomicAdd(done, 1) == static_cast<int>(gridDim.y) - 1) {
        done[0] = 0;
        r |= others == 0 ? 3 : 1;
      }
    } else if (atomicAdd(done + 2, 1) == others - 1) {
      done[2] = 0;
      r |= 2;
    }
    if (r & 2) {  // every block's sums counted before the split reads them; then [1] back to zero
      if (k != all - 1)
        while (atomicAdd(done + 1, 0) != all) __nanosleep(64);
      done[1] = 0;
    }
    if (r) __threadfence();
    role = r;
  }
  __syncthreads();
  const int r = role;
  if (r & 1) {
    float scale0 = 0.0f, base = 0.0f;
    if (threadIdx.x < nhc) {
      scale0 = f.s.scale[0];
      base = f.s.base[threadIdx.x];
    }
    for (int ti = 0; ti < nt; ++ti) {
      const int64_t t = t0 + ti;
      if (ti > 0) {
        hc_fin5_load(f.x + t * nhc * f.dim, f.norm_w, f.dim, xv, nw);
        __syncthreads();  // ws of the token before read by every thread
      }
      hc_fin5_pre(f.s, p.part + t * rows * p.nseg, p.nseg, f.part4, f.mix, t, f.with_split, scale0, base, ws);
      __syncthreads();
      hc_fin5_collapse_norm(ws, xv, nw, f.norm_w != nullptr, f.dim, f.eps, f.y + t * f.dim, f.xn + t * f.dim);
    }
  }
  // Split block (without it, hc_fin5_pre above wrote every mix row): warp w takes token t0 + w.
  const int w = threadIdx.x / kWarp;
  if ((r & 2) && f.with_split && w < nt)
    hc_finish_split_warp(f.s, p.part + (t0 + w) * rows * p.nseg, p.nseg, f.part4, f.mix, t0 + w, nhc, ms[w], sb[w]);
}

// hc_pre_split_kernel's values with every load in flight (small_v5; prefill chunks): a block of
// rms_norm_threads(dim) = T threads per token, thread i owning the float4s y[4i + 4Tm …] (m < kMaxV4, dim ≤
// 4T·kMaxV4), its X and norm weights loaded before anything else. Threads < nhc take pre straight from mix
// (the split's own expression), so the collapse does not wait for Sinkhorn; y goes to shared memory for the
// norm's T chains (rms_scale_row's order: thread i sums y[i], y[i + T], …), xn = y·scale·w; the split (warp 0,
// or thread 0 for nhc ≠ 4) runs last and writes pre, post and comb. The per-token 256-thread kernel above
// loaded X one stride at a time (~2.1 TB/s at 2,048 tokens). dim % 4 == 0, 16-byte aligned rows.
// kPart (hc_controls_prefill.cu's form 5): the mix rows are first added from the segment sums P.part [n][rows][nseg]
// (seg_total's order, threads < rows, after X's loads and the wait for the segment kernel) and written to P.mix; without
// P.with_split (HcPreArgs::split off) no Sinkhorn: threads < nhc write pre (the split's own expression) and the
// caller's hc_split writes post and comb.
struct HcSplit4Part {
  const float* part;
  int64_t nseg;
  bool part4, with_split;
  float* mix;
};
constexpr int kMaxV4 = 4;
template <int NHC, bool kPart = false>
__global__ void __launch_bounds__(256) hc_pre_split4_kernel(HcSplitArgs s, const float* x, const float* norm_w, float* y,
                                                            float* xn, int64_t dim, float eps, HcSplit4Part P) {
  extern __shared__ float4 ysh4[];  // [dim / 4] y
  float* ys = reinterpret_cast<float*>(ysh4);
  __shared__ float ws[kMaxHc];
  __shared__ float ms[(2 + kMaxHc) * kMaxHc];
  const int nhc = NHC > 0 ? NHC : s.nhc;
  const int64_t t = blockIdx.x, T = blockDim.x;
  const float* xt = x + t * nhc * dim;
  float4 xv[kMaxV4][kMaxHc], nw[kMaxV4];
#pragma unroll
  for (int m = 0; m < kMaxV4; ++m) {
    const int64_t d = 4 * (threadIdx.x + T * m);
    if (d < dim) {
#pragma unroll
      for (int k = 0; k < kMaxHc; ++k)
        if (k < nhc) xv[m][k] = *reinterpret_cast<const float4*>(xt + k * dim + d);
      nw[m] = norm_w ? *reinterpret_cast<const float4*>(norm_w + d) : make_float4(1, 1, 1, 1);
    }
  }
  const int rows = (2 + nhc) * nhc;
  const float* mt = s.m + t * rows;
  if (kPart) {
    grid_dependency_wait();  // the segment sums (X is not the segment kernel's output: loaded above)
    if (static_cast<int>(threadIdx.x) < rows) {
      const float total = seg_total(P.part + (t * rows + threadIdx.x) * P.nseg, P.nseg, P.part4);
      ms[threadIdx.x] = total;
      P.mix[t * rows + threadIdx.x] = total;
    }
    __syncthreads();
    mt = ms;
  }
  if (static_cast<int>(threadIdx.x) < nhc) {  // hc_split_token's / hc_split4_token's pre expression
    ws[threadIdx.x] = sigmoid_dev(mt[threadIdx.x] * s.scale[0] + s.base[threadIdx.x]) + s.eps;
    if (kPart && !P.with_split) s.pre[t * nhc + threadIdx.x] = ws[threadIdx.x];
  }
  __syncthreads();
  float* yt = y + t * dim;
#pragma unroll
  for (int m = 0; m < kMaxV4; ++m) {
    const int64_t d = 4 * (threadIdx.x + T * m);
    if (d < dim) {
      const float4 acc = collapse4(ws, xv[m], nhc);
      *reinterpret_cast<float4*>(ys + d) = acc;
      *reinterpret_cast<float4*>(yt + d) = acc;
    }
  }
  __syncthreads();  // ys complete
  const float sc = rms_scale_row(ys, dim, eps);
  float* xnt = xn + t * dim;
#pragma unroll
  for (int m = 0; m < kMaxV4; ++m) {
    const int64_t d = 4 * (threadIdx.x + T * m);
    if (d < dim) {
      const float4 yv = *reinterpret_cast<const float4*>(ys + d);
      *reinterpret_cast<float4*>(xnt + d) = norm_w ? make_float4(yv.x * sc * nw[m].x, yv.y * sc * nw[m].y,
                                                                 yv.z * sc * nw[m].z, yv.w * sc * nw[m].w)
                                                   : make_float4(yv.x * sc, yv.y * sc, yv.z * sc, yv.w * sc);
    }
  }
  if (kPart && !P.with_split) return;
  if (nhc == 4) {
    if (threadIdx.x < kWarp) hc_split4_token(s, t, threadIdx.x, mt);
  } else if (threadIdx.x == 0) {
    hc_split_token<0>(s, t, mt);
  }
}

}  // namespace

// The spread HC pre above; false when the shape is not one it takes (nothing launched then).
bool CudaBackend::hc_pre_spread(const HcPreArgs& a) {
  const int64_t hcd = int64_t{a.nhc} * a.dim, rows = int64_t{2 + a.nhc} * a.nhc;
  const int64_t nseg = (hcd + kF16Seg - 1) / kF16Seg;  // both orders' 512-value segments
  // part [n][rows][nseg] and the scales [n] live in the op's flat scratch ([n][hcd]); one token's part and
  // y in the finish kernel's shared memory (default 48 KiB limit).
  const uint64_t finish_smem = static_cast<uint64_t>((rows * nseg + 3) / 4 * 4 + a.dim) * 4;
  // A prefill chunk (n > 32) with hc_fuse's tens digit set (the form) and the F16 MMA order: the same scale and
  // finish kernels around hc_controls_prefill.cu's segment sums (weights resident in shared memory) instead of
  // rms_norm + the few-row matmul + hc_pre_split4_kernel.
  const int ctl_form = hc_fuse_ / 10 % 10;  // (the hundreds digit: the head form's, CudaBackend::hc_pre)
  HcCtlParams cp{a.x, a.flat ? a.flat + a.n * rows * nseg : nullptr, static_cast<const uint8_t*>(a.fn.data), a.fn.row_bytes,
                 static_cast<int32_t>(rows), hcd, a.n, nseg, a.flat};
  const bool prefill = a.n > kHcSpreadMaxTokens;
  if ((prefill && !(ctl_form > 0 && f16_mma_ && a.prev_post.n == 0 && hc_controls_prefill_fits(cp, ctl_form))) ||
      a.flat == nullptr || rows * nseg + 1 > hcd || finish_smem > 44 * 1024 || a.fn.type != GgmlType::F16 ||
      a.numerics != MatmulNumerics::ds4 || !f16_segments_)
    return false;
  const int norm_threads = rms_norm_threads(hcd);  // 256 or 1024: ≤ 4 chains per thread of hc_seg_kernel
  float* part = a.flat;
  float* sc = a.flat + a.n * rows * nseg;
  HcSegParams p{a.x, static_cast<const uint8_t*>(a.fn.data), a.fn.row_bytes, rows, hcd, a.n, nseg, a.rms_eps,
                norm_threads, false, false, nullptr, part, HcPostArgs{}};
  // HcPreArgs::prev_post folded in (hc_pre_post_folded checked the shape): the segment kernel forms the state.
  const bool fold = a.prev_post.n > 0;
  if (fold) p.post = a.prev_post;
  p.wide_loads = hcd % 8 == 0 && a.fn.row_bytes % 16 == 0 && aligned16(a.fn.data) && aligned16(a.x);
  // One round of float4 loads for the scale where the 1024-thread order maps onto 256 threads.
  p.norm_v4 = norm_threads == 4 * kHcSegWarps * kWarp && hcd % 4 == 0 && aligned16(a.x);
  // Programmatic dependent launches (hc_pdl, sm_90): the segment and finish kernels start early and wait
  // inside (griddepcontrol) for the outputs of the kernel before them.
  if (cc_major() == 0) return true;  // error recorded
  const bool pdl = hc_pdl_ && cc_major() >= 9;
  const dim3 grid = f16_mma_ ? dim3(grid_for(rows, kHcMmaRows), grid_for(nseg, kHcMmaSegs), grid_for(a.n, kHcMmaTokens))
                             : dim3(grid_for(rows, kHcSegRows), grid_for(nseg, kHcSegWarps), grid_for(a.n, kHcSegTokens));
  const HcSplitArgs s{a.mix, a.scale, a.base, a.n, a.nhc, a.iters, a.hc_eps, a.pre, a.post, a.comb};
  const bool fin5 = small_v5_ && a.nhc == 4 && a.dim <= int64_t{kFin5Threads} * kFin5Per &&
                    rms_norm_threads(a.dim) == kFin5Threads;
  const bool part4 = nseg % 4 == 0 && aligned16(part);
  const bool with_split = a.split || !small_v4_;
  // One launch for segments + finish (hc_seg_fused_kernel): hc_fuse's units 1 at n = 1, 2 at every n ≤ 32.
  const int fuse_mode = hc_fuse_ % 10;
  const bool fuse = fin5 && !prefill && (fuse_mode == 2 || (fuse_mode == 1 && a.n == 1));
  if (fold && (fuse || !fin5 || a.n != 1 || !p.norm_v4)) return false;  // nothing launched yet
  HcFuseArgs f{s, a.mix, a.x, a.norm_w, a.y, a.xn, a.dim, a.rms_eps, part4, with_split,
               f16_mma_ ? kHcMmaTokens : kHcSegTokens, nullptr};
  if (fuse) {
    // 2 counters per token slice, zero between calls: a new area is cleared once (ensure never grows while
    // a graph is recorded: a step's first run is eager), each call's last blocks reset theirs.
    const DeviceScratch before = hc_done_;
    if (!ensure(hc_done_, kHcDoneBytes, "hc_pre counters")) return true;
    if ((hc_done_.ptr != before.ptr || hc_done_.bytes != before.bytes) &&
        !check(cudaMemsetAsync(hc_done_.ptr, 0, kHcDoneBytes, stream()), "hc_pre counters"))
      return true;
    f.done = static_cast<int*>(hc_done_.ptr);
  }
  // Form 5: the scales by hc_controls_prefill_scale (the same expression, its loads in flight) and the finish by the
  // prefill split kernel adding the segment sums itself (the kernel the norm + matmul path finishes with).
  const int sthreads = rms_norm_threads(a.dim);
  const bool split5 = prefill && ctl_form == 5 && small_v5_ && sthreads == 256 && a.dim % 4 == 0 &&
                      a.dim <= 4 * sthreads * kMaxV4 && aligned16(a.x) && aligned16(a.y) && aligned16(a.xn) &&
                      (a.norm_w == nullptr || aligned16(a.norm_w));
  if (a.n > 1) {
    if (prefill && ctl_form == 5 && p.norm_v4 && hc_controls_prefill_scale_fits(hcd, a.x)) {
      if (!check(hc_controls_prefill_scale(a.x, hcd, a.n, a.rms_eps, sc, stream()), "hc_pre scale (prefill)")) return true;
    } else {
      hc_scale_kernel<<<static_cast<unsigned>(a.n), p.norm_v4 ? norm_threads / 4 : norm_threads, 0, stream()>>>(
          a.x, hcd, a.rms_eps, sc, norm_threads, p.norm_v4);
      if (!launched("hc_pre scale")) return true;
    }
    p.sc = sc;
    if (prefill) {
      if (!check(hc_controls_prefill_launch(cp, ctl_form, pdl, stream()), "hc_pre control segments (prefill)")) return true;
      if (split5) {
        check(launch_dependent(pdl, dim3(static_cast<unsigned>(a.n)), sthreads, static_cast<size_t>(a.dim) * 4, stream(),
                               a.nhc == 4 ? hc_pre_split4_kernel<4, true> : hc_pre_split4_kernel<0, true>, s, a.x,
                               a.norm_w, a.y, a.xn, a.dim, a.rms_eps,
                               HcSplit4Part{part, nseg, part4, with_split, a.mix}),
              "hc_pre segment sums + split + collapse + norm (prefill)");
        return true;
      }
    } else if (fuse) {
      check(launch_dependent(pdl, grid, kHcSegWarps * kWarp, 0, stream(),
                             f16_mma_ ? hc_seg_fused_kernel<false, true> : hc_seg_fused_kernel<false, false>, p, f),
            "hc_pre control segments + finish");
      return true;
    } else if (!check(launch_dependent(pdl, grid, kHcSegWarps * kWarp, 0, stream(),
                                       f16_mma_ ? hc_seg_mma_kernel<false> : hc_seg_kernel<false>, p),
                      "hc_pre control segments")) {
      return true;
    }
  } else if (fuse) {
    check(launch_dependent(pdl, grid, kHcSegWarps * kWarp, 0, stream(),
                           f16_mma_ ? hc_seg_fused_kernel<true, true> : hc_seg_fused_kernel<true, false>, p, f),
          "hc_pre control segments + finish");
    return true;
  } else if (fold) {
    // Its inputs come from before the post it replaces — with concurrent branches through a join (an event):
    // a programmatic edge there is hc_post's case (plain launches, hc_post), so the same rule here.
    if (!check(launch_dependent(pdl && !branches_ && !on_side_, grid, kHcSegWarps * kWarp, 0, stream(),
                                f16_mma_ ? hc_seg_mma_kernel<true, true> : hc_seg_kernel<true, true>, p),
               "hc_pre control segments (HC post folded)"))
      return true;
  } else if (!check(launch_dependent(pdl, grid, kHcSegWarps * kWarp, 0, stream(),
                                     f16_mma_ ? hc_seg_mma_kernel<true> : hc_seg_kernel<true>, p),
                    "hc_pre control segments")) {
    return true;
  }
  const bool vec4 = a.dim % 4 == 0 && aligned16(a.x) && aligned16(a.y) && aligned16(a.xn) &&
                    (a.norm_w == nullptr || aligned16(a.norm_w));
  const int threads = a.dim >= 4096 ? 1024 : 256;  // ≥ rms_norm_threads(dim) below 8192; 1024 above
  if (fin5) {
    check(launch_dependent(pdl, dim3(with_split ? 2 : 1, static_cast<unsigned>(a.n)), kFin5Threads, 0, stream(),
                           hc_finish5_kernel, s, static_cast<const float*>(part), nseg, a.mix, a.x, a.norm_w, a.y, a.xn,
                           a.dim, a.rms_eps, part4, with_split, fold),
          with_split ? "hc_pre mix + split + collapse + norm (v5)" : "hc_pre mix + collapse + norm (v5)");
    return true;
  }
  if (small_v3_) {
    // rows ≤ 80 ≤ threads: without the split block one thread per mix row.
    check(launch_dependent(pdl, dim3(with_split ? 2 : 1, static_cast<unsigned>(a.n)), threads,
                           static_cast<size_t>(a.dim) * 4, stream(), a.nhc == 4 ? hc_finish3_kernel<4> : hc_finish3_kernel<0>,
                           s, static_cast<const float*>(part), nseg, a.mix, a.x, a.norm_w, a.y, a.xn, a.dim, a.rms_eps,
                           rms_norm_threads(a.dim), vec4, part4, with_split),
          with_split ? "hc_pre mix + split + collapse + norm" : "hc_pre mix + collapse + norm");
    return true;
  }
  check(launch_dependent(pdl, dim3(2, static_cast<unsigned>(a.n)), threads, finish_smem, stream(), hc_finish_kernel, s,
                         static_cast<const float*>(part), nseg, a.mix, a.x, a.norm_w, a.y, a.xn, a.dim, a.rms_eps,
                         rms_norm_threads(a.dim), vec4),
        "hc_pre mix + split + collapse + norm");
  return true;
}

namespace {

// The head form of HcPreArgs (by_pieces.h hc_pre_head_form: 4 F16 control rows, the output head's HC) on the spread
// HC pre's kernels: the last layer's HC post (prev_post) its own launch, an n ≥ 2 scale kernel, the segment sums of
// the 4 rows (hc_seg_mma_kernel / hc_seg_kernel with rows = 4: one row block; at n = 1 each block its own norm
// scale), then hc_head_finish_kernel — 2 launches (3 from 2 tokens) where the pieces take 5 (rms_norm, the F16
// matmul, hc_head, hc_collapse, rms_norm). The segment sums are the bits of rms_norm then the matmul in either F16
// order (the sublayer form's contract, hc_pre_spread), the finish those of the other three: the same bits as
// hc_pre_by_pieces. False (nothing launched) where the shape is not the spread kernels' (nhc ≠ 4, n > 32, rows wider
// than the v5 finish's, other weight types or numerics). f16_mma: the F16 MMA order's segment kernel; pdl: hc_pdl on
// sm_90 (the segment and finish kernels as programmatic dependents).
// (Measured and removed, session 15 W1 / W2: the post folded into the segment kernel — the head's HC 12.9 against
// 8.1 µs, 4-layer steps −5 / −14 against −16 µs; the post's own launch a programmatic dependent after the join — 7.7
// against 8.2 µs alone, steps even.)
bool hc_pre_head_spread(CudaBackend& be, const HcPreArgs& a, bool f16_mma, bool pdl) {
  constexpr int nhc = 4;
  const int64_t hcd = int64_t{a.nhc} * a.dim, nseg = (hcd + kF16Seg - 1) / kF16Seg;
  if (a.nhc != nhc || a.n < 1 || a.n > kHcSpreadMaxTokens || a.flat == nullptr || a.pre == nullptr ||
      a.mix == nullptr || a.fn.type != GgmlType::F16 || a.numerics != MatmulNumerics::ds4 ||
      a.dim > int64_t{kFin5Threads} * kFin5Per || rms_norm_threads(a.dim) != kFin5Threads)
    return false;
  if (a.prev_post.n > 0) be.hc_post(a.prev_post);  // the post first (it writes x)
  const int norm_threads = rms_norm_threads(hcd);
  HcSegParams p{a.x, static_cast<const uint8_t*>(a.fn.data), a.fn.row_bytes, nhc, hcd, a.n, nseg, a.rms_eps,
                norm_threads, false, false, nullptr, a.flat, HcPostArgs{}};
  p.wide_loads = hcd % 8 == 0 && a.fn.row_bytes % 16 == 0 && aligned16(a.fn.data) && aligned16(a.x);
  p.norm_v4 = norm_threads == 4 * kHcSegWarps * kWarp && hcd % 4 == 0 && aligned16(a.x);
  float* sc = a.flat + a.n * nhc * nseg;  // part [n][4][nseg], then the scales [n]
  if (a.n > 1) {
    hc_scale_kernel<<<static_cast<unsigned>(a.n), p.norm_v4 ? norm_threads / 4 : norm_threads, 0, be.stream()>>>(
        a.x, hcd, a.rms_eps, sc, norm_threads, p.norm_v4);
    if (!be.launched("hc_pre scale (head)")) return true;
    p.sc = sc;
  }
  const dim3 grid = f16_mma ? dim3(1, grid_for(nseg, kHcMmaSegs), grid_for(a.n, kHcMmaTokens))
                            : dim3(1, grid_for(nseg, kHcSegWarps), grid_for(a.n, kHcSegTokens));
  static_assert(kHcMmaRows >= nhc && kHcSegRows >= nhc, "the head's 4 rows: one row block");
  const cudaError_t e =
      a.n == 1 ? launch_dependent(pdl, grid, kHcSegWarps * kWarp, 0, be.stream(),
                                  f16_mma ? hc_seg_mma_kernel<true> : hc_seg_kernel<true>, p)
               : launch_dependent(pdl, grid, kHcSegWarps * kWarp, 0, be.stream(),
                                  f16_mma ? hc_seg_mma_kernel<false> : hc_seg_kernel<false>, p);
  if (!be.check(e, "hc_pre control segments (head)")) return true;
  const HcSplitArgs s{a.mix, a.scale, a.base, a.n, nhc, a.iters, a.hc_eps, a.pre, nullptr, nullptr};
  const bool part4 = nseg % 4 == 0 && aligned16(a.flat);
  be.check(launch_dependent(pdl, dim3(1, static_cast<unsigned>(a.n)), kFin5Threads, 0, be.stream(),
                            hc_head_finish_kernel, s, static_cast<const float*>(a.flat), nseg, a.mix, a.x, a.norm_w,
                            a.y, a.xn, a.dim, a.rms_eps, part4),
           "hc_pre head weights + collapse + norm (head)");
  return true;
}

}  // namespace

void CudaBackend::hc_pre(const HcPreArgs& a) {
  if (failed() || a.n <= 0) return;
  if (a.nhc < 1 || a.nhc > kMaxHc) {
    fail(invalid_argument("cuda hc_pre: nhc must be in [1, 8]"));
    return;
  }
  const bool head = hc_pre_head_form(a);  // the output head's HC: nhc control rows, hc_head for the split
  const int64_t hcd = int64_t{a.nhc} * a.dim, mix = head ? a.nhc : int64_t{2 + a.nhc} * a.nhc;
  if (a.fn.rows != mix || a.fn.cols != hcd) {
    fail(invalid_argument("cuda hc_pre: fn is " + std::to_string(a.fn.rows) + " x " + std::to_string(a.fn.cols) +
                          ", expected " + std::to_string(mix) + " x " + std::to_string(hcd)));
    return;
  }
  if (a.n > 0x7fffffff) {
    fail(invalid_argument("cuda hc_pre: too many tokens"));
    return;
  }
  if (head) {
    // hc_fuse's hundreds digit, bit 1: the spread kernels instead of the pieces (the launches the forward pass made
    // before the head form); bit 4 is the greedy argmax's (argmax.cu).
    if ((hc_fuse_ / 100 & 1) != 0 && hc_router_v2_ && small_v5_ && f16_segments_ &&
        hc_pre_head_spread(*this, a, f16_mma_, hc_pdl_ && sm90()))
      return;
    hc_pre_by_pieces(*this, a);
    return;
  }
  if (a.prev_post.n > 0) {  // the previous sublayer's HC post: folded into the spread kernels, else its own launch
    if (hc_post_fold_ == 1 && hc_pre_post_folded(a)) return;
    // 2, 3: the whole boundary as one launch of a cluster of 8, 16 blocks (hc_boundary.cu), where the pre would take
    // the spread kernels in the F16 MMA order with the v5 finish — the path whose bits it reproduces; programmatic
    // launches only where hc_post's are. 4, 5: as 2, 3, programmatic wherever hc_pdl allows (also after a join).
    // 6, 7, 9: as 4 in HcBoundaryLaunch::form 1, 9, 25 (the split warp off y's barrier; the partial sums pushed; the
    // activations' TF32 split once per value in shared memory); 8: 5 in form 9; 13: session 13's form 505.
    if (hc_post_fold_ >= 2 && hc_router_v2_ && f16_segments_ && f16_mma_ && small_v5_ && sm90()) {
      HcBoundaryLaunch l;
      l.pdl = hc_pdl_ && (hc_post_fold_ >= 4 || (!branches_ && !on_side_));
      l.with_split = a.split || !small_v4_;
      l.cluster = hc_boundary_cluster(hc_post_fold_);
      l.form = hc_boundary_form(hc_post_fold_);  // sessions 12 / 13's forms (hc_boundary.h)
      if (hc_boundary(*this, a, l)) return;
    }
    hc_post(a.prev_post);
    HcPreArgs rest = a;
    rest.prev_post.n = 0;
    hc_pre(rest);
    return;
  }
  if (hc_router_v2_ && hc_pre_spread(a)) return;  // decode batches (n ≤ 32): the spread kernels
  // Decode batches: norm and F16 controls in one kernel (each block re-reads its token's state row from
  // L2 for the norm). Larger batches (prefill) and other weight types or numerics: rms_norm then matmul,
  // whose F16 kernel shares weight loads across 16 vectors — the same bits either way.
  if (a.fn.type == GgmlType::F16 && a.numerics == MatmulNumerics::ds4 && f16_segments_ && !f16_mma_ &&
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
  const int norm_threads = rms_norm_threads(a.dim);
  if (small_v5_ && norm_threads == 256 && a.dim % 4 == 0 && a.dim <= 4 * norm_threads * kMaxV4 && aligned16(a.x) &&
      aligned16(a.y) && aligned16(a.xn) && (a.norm_w == nullptr || aligned16(a.norm_w))) {
    (a.nhc == 4 ? hc_pre_split4_kernel<4> : hc_pre_split4_kernel<0>)<<<static_cast<unsigned>(a.n), norm_threads,
                                                                        static_cast<size_t>(a.dim) * 4, stream()>>>(
        s, a.x, a.norm_w, a.y, a.xn, a.dim, a.rms_eps, HcSplit4Part{});
    launched("hc_pre split + collapse + norm (v5)");
    return;
  }
  hc_pre_split_kernel<<<static_cast<unsigned>(a.n), rms_norm_threads(a.dim), 0, stream()>>>(s, a.x, a.norm_w, a.y,
                                                                                           a.xn, a.dim, a.rms_eps);
  launched("hc_pre split + collapse + norm");
}

// HcPreArgs::prev_post inside the spread pre's segment kernel (hc_post_fold): one token of Flash's state (4 × 4096),
// the post writing the pre's input, 16-byte aligned rows; false (nothing launched) for any other shape.
bool CudaBackend::hc_pre_post_folded(const HcPreArgs& a) {
  const HcPostArgs& q = a.prev_post;
  const bool shape = hc_router_v2_ && small_v5_ && a.n == 1 && q.n == 1 && a.nhc == 4 && q.nhc == 4 && a.dim == 4096 &&
                     q.dim == a.dim && q.out == a.x && q.x != q.out && aligned16(q.x) && aligned16(q.f) &&
                     aligned16(q.out) && (q.f_add == nullptr || aligned16(q.f_add)) && q.post && q.comb;
  return shape && hc_pre_spread(a);
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
  // Programmatic dependents only on the main lane and without concurrent branches (branches.cpp): with them
  // the forward pass's HC post follows a join, a dependency on the side lane through an event, and a
  // programmatic edge after an event (or after a fork on the side lane) is a case no device run has covered.
  const bool pdl = small_v3_ && hc_pdl_ && !on_side_ && !branches_ && sm90();
  if (small_v3_ && a.nhc >= 1 && a.nhc <= kMaxHc && a.dim % 4 == 0 && aligned16(a.x) && aligned16(a.f) &&
      aligned16(a.out) && (a.f_add == nullptr || aligned16(a.f_add))) {
    check(launch_dependent(pdl, dim3(grid_for(a.n * (a.dim / 4), 256)), 256, 0, stream(),
                           a.nhc == 4 ? hc_post4_kernel<4> : hc_post4_kernel<0>, a),
          "hc_post");
    return;
  }
  check(launch_dependent(pdl, dim3(grid_for(a.n * a.nhc * a.dim, 256)), 256, 0, stream(), hc_post_kernel, a), "hc_post");
}

}  // namespace ds4::backend::cuda
