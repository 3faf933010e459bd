// ops_norm_rope.cu — RMSNorm rows (sum of squares in double, as the CPU's rms_norm_row), tail RoPE
// with adjacent pairs (MODEL.md §5.3; angle formed and reduced in double before cos/sin), and the fused
// norm_rope op (NormRopeArgs): norm, RoPE, FP8 and half rounding and the raw-ring write of one row in
// one block, each step the single op's device code (rows_device.cuh), so the bits are the pieces' bits.
#include <cmath>
#include <cstdint>
#include <string>

#include "backend/cuda/attention_pdl.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_impl.h"
#include "backend/cuda/dense_ramp.h"     // kRampNormTrigger
#include "backend/cuda/f16_segment.cuh"  // aligned16
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
// A programmatic dependent at decode (kRopePdl below): x and the positions come from the work before.
__global__ void rope_kernel(float* x, const int32_t* pos, int64_t n, int32_t heads, int32_t head_dim, int32_t n_rot,
                            RopeFreqs f, bool inverse) {
  grid_dependency_wait();  // a no-op in a plain launch
  const int half = n_rot / 2;
  const int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k >= n * half * heads) return;
  const int h = static_cast<int>(k % heads);
  const int i = static_cast<int>((k / heads) % half);
  const int64_t t = k / (static_cast<int64_t>(heads) * half);
  rope_rotate(x + (t * heads + h) * head_dim + (head_dim - n_rot) + 2 * i, pos[t], f.w[i], inverse);
}

// norm_rope's last steps before the write, shared by both kernels: the FP8 round trip of the first
// fp8_quant values of the row at v (a warp per 64-value block, then a barrier), and the raw-ring row this
// token's row goes to (null without a ring). Every thread of the block calls it.
__device__ inline float* fp8_and_ring_row(const NormRopeArgs& a, float* v, int32_t p, int64_t row, int64_t t) {
  if (a.fp8_quant > 0) {
    const int lane = threadIdx.x % kWarp, warps = blockDim.x / kWarp;
    for (int b = threadIdx.x / kWarp; b < a.fp8_quant / 64; b += warps) fp8_block_warp(v + b * 64, lane);
    __syncthreads();
  }
  if (!a.ring && !a.ring_at) return nullptr;
  float* base = a.ring_at ? a.ring_at[t] : a.ring;
  const int64_t D = a.head_dim;
  return base + (p % a.ring_cap) * (static_cast<int64_t>(a.heads) * D) + (row % a.heads) * D;
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
  float* dst = fp8_and_ring_row(a, xr, p, row, t);
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
    float v = xr[i];
    if (a.f16) xr[i] = v = __half2float(__float2half_rn(v));
    if (dst) dst[i] = v;
  }
}

// ---- a warp per row (CudaBackendOptions::small_v3, rows of ≤ kWarpRowPer·32 values whose norm takes 256
// threads): prefill runs norm_rope on 131,072 rows (2,048 tokens × 64 heads), where a 256-thread block per row
// was latency-bound (~4.7 µs per row chain, 8 rows per SM in flight: 590 µs, 910 GB/s) and formed the same 32
// double-precision angles for every head. Here a block holds up to 8 heads of one token: the angles once per
// block, then each warp takes a row with no block barrier — lane l carries the chains of the norm's 256 threads
// l, l + 32, …, l + 224 (emulated warp q = lane chain q, so warp_sum of chain q is that warp's sum, and block_sum's
// second stage is a warp_sum over lanes 0 … 7): rms_scale_row's bits. RoPE, FP8 and the writes as norm_rope3.
constexpr int kWarpRowPer = 16;      // values per lane: head_dim ≤ 512
constexpr int kWarpRowHeads = 8;     // heads (warps) per block
constexpr int kNormThreads = 256;    // rms_norm_threads of every row this kernel takes
// Whether small_v3's norm_rope takes this kernel (else norm_rope3_kernel below; same bits): a constant here so
// that turning it off after a device run rebuilds one file.
constexpr bool kNormRopeWarpRows = true;
constexpr int64_t kWarpRowsMin = 4096;  // rows (tokens × heads) from which it is taken

// kLoadsFirst (CudaBackendOptions::norm_rope_loads_first): the warp's row loads go out before warp 0 forms the
// block's angles (double-precision fmod / cos / sin, ~µs of latency) and the barrier, so the two overlap;
// otherwise after them. The same values either way.
template <bool kLoadsFirst>
__global__ void __launch_bounds__(kWarpRowHeads * kWarp) norm_rope_warp_kernel(NormRopeArgs a, RopeFreqs f) {
  extern __shared__ float xs[];  // [warps][head_dim]
  __shared__ float2 cs[kMaxRopePairs];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int64_t t = blockIdx.x, D = a.head_dim;
  const int h = blockIdx.y * kWarpRowHeads + warp, half = a.n_rot / 2;
  float wv[kWarpRowPer], v[kWarpRowPer];
#pragma unroll
  for (int k = 0; k < kWarpRowPer; ++k) {
    const int64_t e = lane + k * kWarp;
    wv[k] = a.w && e < D ? a.w[e] : 1.0f;
  }
  grid_dependency_wait();  // the rows, positions and counts come from the work before
  if (a.count && t >= *a.count) return;  // whole blocks
  float* xr = a.x_at ? a.x_at[t] + h * D : a.x + (t * a.heads + h) * D;
  auto load_row = [&] {
#pragma unroll
    for (int k = 0; k < kWarpRowPer; ++k) {
      const int64_t e = lane + k * kWarp;
      v[k] = e < D ? xr[e] : 0.0f;
    }
  };
  if (kLoadsFirst && h < a.heads) load_row();
  const int32_t p = a.pos[t];
  for (int i = threadIdx.x; i < half; i += blockDim.x) cs[i] = rope_cos_sin(p, f.w[i], false);
  __syncthreads();
  if (h >= a.heads) return;  // whole warps; no block barrier below
  if (!kLoadsFirst) load_row();
  // Value k of this lane is element e = lane + 32k: the norm's thread e % 256 = lane + 32·(k % 8), its
  // (k / 8)-th term. Chain q adds its terms in that order, as rms_scale_row's loop.
  double ss[kNormThreads / kWarp];
#pragma unroll
  for (int q = 0; q < kNormThreads / kWarp; ++q) ss[q] = 0;
#pragma unroll
  for (int k = 0; k < kWarpRowPer; ++k)
    if (lane + k * kWarp < D) ss[k % (kNormThreads / kWarp)] += static_cast<double>(v[k]) * v[k];
  double part = 0;  // block_sum's second stage: lane q < 8 holds emulated warp q's sum
#pragma unroll
  for (int q = 0; q < kNormThreads / kWarp; ++q) {
    const double wq = warp_sum(ss[q]);
    if (lane == q) part = wq;
  }
  const float scale = rms_scale_from_sum(warp_sum(part), D, a.eps);
  float* row = xs + warp * D;
#pragma unroll
  for (int k = 0; k < kWarpRowPer; ++k) {
    const int64_t e = lane + k * kWarp;
    if (e < D) row[e] = a.w ? v[k] * scale * wv[k] : v[k] * scale;
  }
  __syncwarp();
  for (int i = lane; i < half; i += kWarp) rope_apply(row + (D - a.n_rot) + 2 * i, cs[i]);
  __syncwarp();
  for (int b = 0; b < a.fp8_quant / 64; ++b) fp8_block_warp(row + b * 64, lane);
  __syncwarp();
  float* dst = nullptr;
  if (a.ring || a.ring_at) {
    float* base = a.ring_at ? a.ring_at[t] : a.ring;
    dst = base + (p % a.ring_cap) * (static_cast<int64_t>(a.heads) * D) + h * D;
  }
  for (int64_t e = lane; e < D; e += kWarp) {
    float val = row[e];
    if (a.f16) val = __half2float(__float2half_rn(val));
    xr[e] = val;
    if (dst) dst[e] = val;
  }
}

// ---- CudaBackendOptions::small_v3: rows of ≤ kRowPer values per thread held in registers ----
// The single-block decode norms (q_a's RMSNorm: 1,024 values; kv's norm + RoPE: 512) were chains of
// dependent global round trips — norm weights loaded after the scale, every step of norm_rope_kernel
// re-reading the row from global memory behind a barrier, the RoPE angle's double-precision fmod/cos/sin
// started only after the norm. Here every load of a thread goes out at once (norm weights before the
// programmatic-dependent wait), the angle is formed beside the norm's reduction, and the row stays in
// registers / shared memory until the one final write. The same expressions in the same order: the bits
// of rms_norm_kernel and norm_rope_kernel.
constexpr int kRowPer = 4;

// rms_norm_kernel's values; dim ≤ kRowPer·blockDim.x. x may equal y (every load precedes the barrier).
// kTrigger (dense_ramp.h kRampNormTrigger): the dependents launched once the kernel before has ended (right after
// griddepcontrol.wait), so that a dependent's weight copies (q_b after q_a's norm) run under this row's work; the
// dependent reads the row only after its own wait, i.e. after this grid's end.
template <bool kTrigger>
__global__ void rms_norm3_kernel(const float* x, float* y, const float* w, int64_t dim, int64_t stride, float eps) {
  const float* xr = x + blockIdx.x * stride;
  float* yr = y + blockIdx.x * stride;
  const int64_t bd = blockDim.x;
  float wv[kRowPer], v[kRowPer];
#pragma unroll
  for (int q = 0; q < kRowPer; ++q) {
    const int64_t i = threadIdx.x + q * bd;
    wv[q] = w && i < dim ? w[i] : 1.0f;
  }
  grid_dependency_wait();  // x is the output of the kernel before
  if constexpr (kTrigger) grid_launch_dependents();
  double ss = 0;  // rms_scale_row's chain: i = threadIdx.x, + bd, …
#pragma unroll
  for (int q = 0; q < kRowPer; ++q) {
    const int64_t i = threadIdx.x + q * bd;
    v[q] = i < dim ? xr[i] : 0.0f;
  }
#pragma unroll
  for (int q = 0; q < kRowPer; ++q)
    if (threadIdx.x + q * bd < dim) ss += static_cast<double>(v[q]) * v[q];
  const float scale = rms_scale_of(ss, dim, eps);
#pragma unroll
  for (int q = 0; q < kRowPer; ++q) {
    const int64_t i = threadIdx.x + q * bd;
    if (i < dim) yr[i] = w ? v[q] * scale * wv[q] : v[q] * scale;
  }
}

// rms_norm_kernel's values for wide rows (small_v5; the 16384-wide HC state of a prefill chunk's HC pre): a
// block of 256 threads standing for the row's 1,024 (rms_norm_threads), thread j carrying the chains of the
// emulated threads 4j … 4j + 3 — x[4j + 1024k … + 3] as one float4, k < 16, all in flight — then
// rms_scale_v4_of (rms_scale_row_v4's reduction: block_sum's tree over the 1,024) and the stores from the
// same registers: the row read once (rms_norm_kernel read it twice, a strided scalar load at a time).
// dim ≤ 16·1024 and a multiple of 4, rows 16-byte aligned.
constexpr int kWideRound = 16, kWideThreads = 1024;
__global__ void __launch_bounds__(kWideThreads / 4) rms_norm_wide_kernel(const float* x, float* y, const float* w,
                                                                        int64_t dim, int64_t stride, float eps) {
  const float* xr = x + blockIdx.x * stride;
  float* yr = y + blockIdx.x * stride;
  const int64_t j4 = 4 * static_cast<int64_t>(threadIdx.x);
  float4 v[kWideRound];
#pragma unroll
  for (int k = 0; k < kWideRound; ++k) {
    const int64_t i = k * int64_t{kWideThreads} + j4;
    v[k] = i < dim ? *reinterpret_cast<const float4*>(xr + i) : make_float4(0, 0, 0, 0);
  }
  double s[4] = {0, 0, 0, 0};
#pragma unroll
  for (int k = 0; k < kWideRound; ++k) {  // each chain in order; past dim nothing is added
    if (k * int64_t{kWideThreads} + j4 >= dim) continue;
    s[0] += static_cast<double>(v[k].x) * v[k].x;
    s[1] += static_cast<double>(v[k].y) * v[k].y;
    s[2] += static_cast<double>(v[k].z) * v[k].z;
    s[3] += static_cast<double>(v[k].w) * v[k].w;
  }
  const float scale = rms_scale_v4_of(s, dim, eps, kWideThreads);
#pragma unroll
  for (int k = 0; k < kWideRound; ++k) {
    const int64_t i = k * int64_t{kWideThreads} + j4;
    if (i >= dim) continue;
    float4 o = make_float4(v[k].x * scale, v[k].y * scale, v[k].z * scale, v[k].w * scale);
    if (w) {
      const float4 wv = *reinterpret_cast<const float4*>(w + i);
      o = make_float4(v[k].x * scale * wv.x, v[k].y * scale * wv.y, v[k].z * scale * wv.z, v[k].w * scale * wv.w);
    }
    *reinterpret_cast<float4*>(yr + i) = o;
  }
}

// norm_rope_kernel's values; head_dim ≤ kRowPer·blockDim.x, n_rot / 2 ≤ blockDim.x. Dynamic shared memory:
// head_dim floats (the row between the steps). trigger (attention_pdl.h split_pdl; the q norm on the main lane): lets a
// programmatic dependent (one decode query's split kernel) start right after its own wait — every kernel before it has
// finished then; else at its end.
__global__ void norm_rope3_kernel(NormRopeArgs a, RopeFreqs f, bool trigger) {
  extern __shared__ float xs[];
  const int64_t row = blockIdx.x, t = row / a.heads, D = a.head_dim, bd = blockDim.x;
  const int half = a.n_rot / 2;
  float wv[kRowPer], v[kRowPer];
#pragma unroll
  for (int q = 0; q < kRowPer; ++q) {
    const int64_t i = threadIdx.x + q * bd;
    wv[q] = a.w && i < D ? a.w[i] : 1.0f;
  }
  grid_dependency_wait();  // the row, positions and counts come from the work before
  if (trigger) grid_launch_dependents();
  if (a.count && t >= *a.count) return;  // whole blocks
  float* xr = a.x_at ? a.x_at[t] + (row % a.heads) * D : a.x + row * D;
  const int32_t p = a.pos[t];
#pragma unroll
  for (int q = 0; q < kRowPer; ++q) {
    const int64_t i = threadIdx.x + q * bd;
    v[q] = i < D ? xr[i] : 0.0f;
  }
  const float2 cs = static_cast<int>(threadIdx.x) < half ? rope_cos_sin(p, f.w[threadIdx.x], false) : make_float2(1, 0);
  double ss = 0;
#pragma unroll
  for (int q = 0; q < kRowPer; ++q)
    if (threadIdx.x + q * bd < D) ss += static_cast<double>(v[q]) * v[q];
  const float scale = rms_scale_of(ss, D, a.eps);
#pragma unroll
  for (int q = 0; q < kRowPer; ++q) {
    const int64_t i = threadIdx.x + q * bd;
    if (i < D) xs[i] = a.w ? v[q] * scale * wv[q] : v[q] * scale;
  }
  __syncthreads();
  if (static_cast<int>(threadIdx.x) < half) rope_apply(xs + (D - a.n_rot) + 2 * threadIdx.x, cs);
  __syncthreads();
  float* dst = fp8_and_ring_row(a, xs, p, row, t);
  for (int64_t i = threadIdx.x; i < D; i += bd) {
    float val = xs[i];
    if (a.f16) val = __half2float(__float2half_rn(val));
    xr[i] = val;
    if (dst) dst[i] = val;
  }
}

// rope_kernel's values with each token's angles formed once (rope_kernel forms the same double-precision
// fmod/cos/sin for every head: 64 times per pair at Flash's 64 heads): block = token, its n_rot / 2 cos/sin
// pairs into shared memory by the first threads, then every (head, pair) rotated. Same expressions.
constexpr int64_t kRope3MinTokens = 16;
// Session 9: whether the decode-sized rope (rope_kernel below kRope3MinTokens: the attention output's inverse
// RoPE, on every layer's critical chain between attention and out_a) is a programmatic dependent with hc_pdl on
// sm_90 — it starts while the kernel before it finishes, then waits. The same kernel, so the same bits either
// way (test_cuda_small6.cpp: hc_pdl on vs off); a constant, so turning it off rebuilds one file.
constexpr bool kRopePdl = true;

__global__ void rope3_kernel(float* x, const int32_t* pos, int32_t heads, int32_t head_dim, int32_t n_rot, RopeFreqs f,
                             bool inverse) {
  __shared__ float2 cs[kMaxRopePairs];
  const int half = n_rot / 2;
  const int64_t t = blockIdx.x;
  grid_dependency_wait();  // x (and the positions) come from the work before
  if (static_cast<int>(threadIdx.x) < half) cs[threadIdx.x] = rope_cos_sin(pos[t], f.w[threadIdx.x], inverse);
  __syncthreads();
  float* xt = x + t * heads * head_dim + (head_dim - n_rot);
  // A thread's pairs loaded kBatch at a time before any store (the stores could alias later loads for all
  // the compiler knows, which would serialize one round trip per pair). Pairs are 8-byte aligned (even offsets).
  constexpr int kBatch = 8;
  const int total = heads * half, bd = blockDim.x;
  for (int k0 = threadIdx.x; k0 < total; k0 += kBatch * bd) {
    float2 v[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int k = k0 + u * bd;
      if (k < total) v[u] = *reinterpret_cast<const float2*>(xt + static_cast<int64_t>(k / half) * head_dim + 2 * (k % half));
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int k = k0 + u * bd;
      if (k >= total) break;
      float p[2] = {v[u].x, v[u].y};
      rope_apply(p, cs[k % half]);
      *reinterpret_cast<float2*>(xt + static_cast<int64_t>(k / half) * head_dim + 2 * (k % half)) = make_float2(p[0], p[1]);
    }
  }
}

}  // namespace

void CudaBackend::rms_norm(const RmsNormArgs& a) {
  if (failed() || a.rows <= 0) return;
  if (a.rows > 0x7fffffff) {
    fail(invalid_argument("cuda rms_norm: too many rows"));
    return;
  }
  const int threads = rms_norm_threads(a.dim);
  if (small_v3_ && a.dim <= int64_t{kRowPer} * threads) {
    const bool pdl = hc_pdl_ && !on_side_ && sm90();
    const bool trigger = pdl && (dense_ramp_bits(l2_prefetch_mode_) & kRampNormTrigger) != 0;
    check(launch_dependent(pdl, dim3(static_cast<unsigned>(a.rows)), threads, 0, stream(),
                           trigger ? rms_norm3_kernel<true> : rms_norm3_kernel<false>, a.x, a.y, a.w, a.dim, a.stride,
                           a.eps),
          "rms_norm");
    return;
  }
  if (small_v5_ && threads == kWideThreads && a.dim <= int64_t{kWideRound} * kWideThreads && a.dim % 4 == 0 &&
      a.stride % 4 == 0 && aligned16(a.x) && aligned16(a.y) && (a.w == nullptr || aligned16(a.w))) {
    rms_norm_wide_kernel<<<static_cast<unsigned>(a.rows), kWideThreads / 4, 0, stream()>>>(a.x, a.y, a.w, a.dim,
                                                                                          a.stride, a.eps);
    launched("rms_norm (wide rows)");
    return;
  }
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
  // Decode steps (n < kRope3MinTokens) keep rope_kernel: one block per token measured 3.85 µs against its
  // 3.11 at 1 … 8 tokens (H200, 64 × 512); from 32 tokens and at prefill chunks (7× at 2,048) rope3 wins.
  // rope3 moves each pair as one float2: only where every pair is 8-byte aligned (x, head_dim and n_rot even;
  // the forward pass's scratch rows need not be — the W2 device run hit a misaligned address here).
  const bool pairs8 = reinterpret_cast<uintptr_t>(a.x) % 8 == 0 && a.head_dim % 2 == 0;
  if (small_v3_ && pairs8 && a.n >= kRope3MinTokens && a.n <= 0x7fffffff) {
    check(launch_dependent(hc_pdl_ && !on_side_ && sm90(), dim3(static_cast<unsigned>(a.n)), 256, 0, stream(), rope3_kernel, a.x,
                           a.pos, a.heads, a.head_dim, a.n_rot, rope_freqs(a.freq, a.n_rot), a.inverse),
          "rope");
    return;
  }
  if (kRopePdl && small_v3_ && hc_pdl_ && !on_side_ && sm90()) {
    check(launch_dependent(true, dim3(grid_for(total, 256)), 256, 0, stream(), rope_kernel, a.x, a.pos, a.n, a.heads,
                           a.head_dim, a.n_rot, rope_freqs(a.freq, a.n_rot), a.inverse),
          "rope");
    return;
  }
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
  const int threads = rms_norm_threads(a.head_dim);
  // Prefill-sized calls only: at decode (1 … 64 rows) the H200 measured it slower than norm_rope3 (kv 8.28 against
  // 4.68 µs with small_v3 off, q 4.19 against 3.72) and at 2,048 × 64 rows 3.3× faster (190 against 620 µs).
  if (kNormRopeWarpRows && small_v3_ && threads == kNormThreads && a.head_dim <= int64_t{kWarpRowPer} * kWarp &&
      a.n * a.heads >= kWarpRowsMin && a.n <= 0x7fffffff) {
    const int warps = a.heads < kWarpRowHeads ? a.heads : kWarpRowHeads;
    const dim3 grid(static_cast<unsigned>(a.n), static_cast<unsigned>((a.heads + kWarpRowHeads - 1) / kWarpRowHeads));
    check(launch_dependent(hc_pdl_ && sm90(), grid, warps * kWarp, static_cast<size_t>(warps) * a.head_dim * 4, stream(),
                           norm_rope_loads_first_ ? norm_rope_warp_kernel<true> : norm_rope_warp_kernel<false>, a,
                           rope_freqs(a.freq, a.n_rot)),
          "norm_rope");
    return;
  }
  if (small_v3_ && a.head_dim <= int64_t{kRowPer} * threads && a.n_rot / 2 <= threads) {
    // The q norm (no ring) of one decode token on the main lane: attention's split kernel may follow as its programmatic
    // dependent (attention_pdl.h); the kv norm (a ring) and the side lane's launches keep their end as the trigger.
    const bool q_norm = a.heads > 1 && !a.ring && !a.ring_at && !a.x_at && !a.count && a.n == 1 && !on_side_ && sm90();
    const bool trigger = q_norm && split_pdl(attn_mma_kernels_);
    check(launch_dependent(hc_pdl_ && !on_side_ && sm90(), dim3(static_cast<unsigned>(a.n * a.heads)), threads,
                           static_cast<size_t>(a.head_dim) * 4, stream(), norm_rope3_kernel, a,
                           rope_freqs(a.freq, a.n_rot), trigger),
          "norm_rope");
    return;
  }
  norm_rope_kernel<<<static_cast<unsigned>(a.n * a.heads), threads, 0, stream()>>>(
      a, rope_freqs(a.freq, a.n_rot));
  launched("norm_rope");
}

}  // namespace ds4::backend::cuda
