// rows_device.cuh — the per-row device pieces that both the single ops and the fused ones run, so a
// fused kernel gives the single ops' bits: the RMSNorm scale of a row (sum of squares in double, as
// the CPU's rms_norm_row) and its thread count, the tail RoPE rotation (angle in double), and the FP8
// E4M3 round trip of a 64-value block (MODEL.md §5.4). Header-only, __device__ inline.
// Deliberately not here: launches (ops_norm_rope.cu, ops_qat.cu, ops_hc.cu own their kernels).
#pragma once

#include <cmath>
#include <cstdint>

#include "backend/cuda/common.cuh"

namespace ds4::backend::cuda {

inline constexpr int kMaxRopePairs = 64;  // n_rot ≤ 128 (Flash: 64)

// The layer's inverse frequencies travel by value: RopeArgs::freq is host memory.
struct RopeFreqs {
  double w[kMaxRopePairs];
};

// The kernel argument from the host array freq [n_rot/2] (n_rot/2 ≤ kMaxRopePairs, checked by the caller).
inline RopeFreqs rope_freqs(const double* freq, int n_rot) {
  RopeFreqs f{};
  for (int i = 0; i < n_rot / 2; ++i) f.w[i] = freq[i];
  return f;
}

// Threads of a block that normalizes one row of `dim` values. By width only, so a row's sum order never
// depends on the batch; wide rows (the 16384-wide HC state) get 1024 so each thread's dependent
// load/add chain stays short. Every kernel that takes a row's RMSNorm scale uses this count.
inline int rms_norm_threads(int64_t dim) { return dim >= 8192 ? 1024 : 256; }

// 1/sqrt(mean(x²) + eps) of row xr: thread i sums xr[i], xr[i + blockDim.x], … in double, then
// block_sum. Every thread of the block must call it (it synchronizes); all get the scale.
// The scale from each thread's own chain ss (rms_scale_row's loop, for kernels that hold the row in
// registers): block_sum, then the formula (rms_scale_from_sum: the formula on the row's total). Every thread must
// call rms_scale_of.
__device__ inline float rms_scale_from_sum(double ss, int64_t dim, float eps) {
  return 1.0f / sqrtf(static_cast<float>(ss / static_cast<double>(dim)) + eps);
}
__device__ inline float rms_scale_of(double ss, int64_t dim, float eps) { return rms_scale_from_sum(block_sum(ss), dim, eps); }

__device__ inline float rms_scale_row(const float* xr, int64_t dim, float eps) {
  double ss = 0;
#pragma unroll 4
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) ss += static_cast<double>(xr[i]) * xr[i];
  return rms_scale_of(ss, dim, eps);
}

// rms_scale_row's bits as a block of `threads` threads would compute them (thread i sums xr[i],
// xr[i + threads], … in double; block_sum's tree over threads / 32 warp sums), computed by a block of
// any other size: blockDim.x ≥ threads (the threads past `threads` add nothing), or threads =
// q·blockDim.x with q ≤ kMaxPer (each thread carries q of the emulated threads' chains, its loads all
// in flight). `threads` is a multiple of 32, at most 1024. For kernels whose launch shape is not the
// norm's: ops_hc.cu's spread HC pre (a 256-thread block taking the 1024-thread scale of the 16384-wide
// state; the 256-thread scale of a 4096 row in a 1024-thread block). Every thread must call it.
template <int kMaxPer>
__device__ inline float rms_scale_row_as(const float* xr, int64_t dim, float eps, int threads) {
  __shared__ double part[32];
  const int lane = threadIdx.x % kWarp;
  const int bd = static_cast<int>(blockDim.x), per = threads > bd ? threads / bd : 1;
  double ss[kMaxPer];
#pragma unroll
  for (int q = 0; q < kMaxPer; ++q) ss[q] = 0;
#pragma unroll 4
  for (int64_t b = 0; b < dim; b += threads) {  // each chain in rms_scale_row's order (b ascending)
#pragma unroll
    for (int q = 0; q < kMaxPer; ++q) {
      const int v = static_cast<int>(threadIdx.x) + q * bd;  // the emulated thread
      const int64_t i = b + v;
      if (q < per && v < threads && i < dim) ss[q] += static_cast<double>(xr[i]) * xr[i];
    }
  }
  __syncthreads();  // `part` may still be read by a previous call
#pragma unroll
  for (int q = 0; q < kMaxPer; ++q) {
    if (q < per) {  // uniform across the block
      const double s = warp_sum(ss[q]);
      const int vw = (static_cast<int>(threadIdx.x) + q * bd) / kWarp;  // the emulated warp
      if (lane == 0 && vw < threads / kWarp) part[vw] = s;
    }
  }
  __syncthreads();
  double t = lane < threads / kWarp ? part[lane] : 0.0;
  t = warp_sum(t);
  return 1.0f / sqrtf(static_cast<float>(t / static_cast<double>(dim)) + eps);
}

// rms_scale_row_as's bits for threads = 4·blockDim.x with every load of a thread in one round (dim a
// multiple of 4, xr 16-byte aligned): thread j carries the chains of the emulated threads 4j … 4j + 3
// and reads x[4j + threads·k … + 3] as one float4 (16 of them in flight for the 16384-wide HC state
// instead of 4 rounds of 4). block_sum's tree over the emulated threads: an emulated warp is 8 real
// lanes, its butterfly offsets 16, 8, 4 are the real lanes ^ 4, 2, 1 and offsets 2, 1 are within a
// thread's 4 chains (each addition own + partner, as warp_sum's).
// rms_scale_row_v4's reduction from the four chains s[c] of the emulated threads 4j + c (for kernels that hold
// the row in registers: ops_norm_rope.cu's wide rms_norm). Every thread must call it.
__device__ inline float rms_scale_v4_of(double (&s)[4], int64_t dim, float eps, int threads) {
  __shared__ double part[32];
  const int lane = threadIdx.x % kWarp;
#pragma unroll
  for (int m = 4; m >= 1; m >>= 1)  // emulated offsets 16, 8, 4
#pragma unroll
    for (int c = 0; c < 4; ++c) s[c] += __shfl_xor_sync(0xffffffffu, s[c], m);
  // Offset 2 gives chain c the sum s[c] + s[c ^ 2], offset 1 then (s[0] + s[2]) + (s[1] + s[3]) on chain 0.
  const double w0 = (s[0] + s[2]) + (s[1] + s[3]);
  __syncthreads();  // `part` may still be read by a previous call
  if (lane % 8 == 0) part[threadIdx.x / 8] = w0;  // emulated warp j / 8
  __syncthreads();
  double t = lane < threads / kWarp ? part[lane] : 0.0;
  t = warp_sum(t);
  return 1.0f / sqrtf(static_cast<float>(t / static_cast<double>(dim)) + eps);
}

__device__ inline float rms_scale_row_v4(const float* xr, int64_t dim, float eps, int threads) {
  constexpr int kRound = 16;  // float4 loads in flight per thread
  const int64_t j4 = 4 * static_cast<int64_t>(threadIdx.x);
  double s[4] = {0, 0, 0, 0};
  for (int64_t b0 = 0; b0 < dim; b0 += kRound * int64_t{threads}) {
    float4 v[kRound];
#pragma unroll
    for (int k = 0; k < kRound; ++k) {
      const int64_t i = b0 + k * int64_t{threads} + j4;
      v[k] = i < dim ? *reinterpret_cast<const float4*>(xr + i) : make_float4(0, 0, 0, 0);
    }
#pragma unroll
    for (int k = 0; k < kRound; ++k) {  // each chain in order; past dim nothing is added
      if (b0 + k * int64_t{threads} + j4 >= dim) continue;
      s[0] += static_cast<double>(v[k].x) * v[k].x;
      s[1] += static_cast<double>(v[k].y) * v[k].y;
      s[2] += static_cast<double>(v[k].z) * v[k].z;
      s[3] += static_cast<double>(v[k].w) * v[k].w;
    }
  }
  return rms_scale_v4_of(s, dim, eps, threads);
}

// cos and sin of the angle pos·w (−pos·w when inverse), reduced in double: rope_rotate's, for kernels that
// form the angle before the pair's values are ready.
__device__ inline float2 rope_cos_sin(int32_t pos, double w, bool inverse) {
  const double theta = fmod(static_cast<double>(pos) * w, 2.0 * M_PI);
  return make_float2(static_cast<float>(cos(theta)), static_cast<float>(inverse ? -sin(theta) : sin(theta)));
}

// Rotates the adjacent pair v[0], v[1] by the angle whose cos and sin are cs.
__device__ inline void rope_apply(float* v, float2 cs) {
  const float x0 = v[0], x1 = v[1];
  v[0] = x0 * cs.x - x1 * cs.y;
  v[1] = x0 * cs.y + x1 * cs.x;
}

// Rotates the adjacent pair v[0], v[1] by pos·w (−pos·w when inverse), the angle reduced in double.
__device__ inline void rope_rotate(float* v, int32_t pos, double w, bool inverse) {
  rope_apply(v, rope_cos_sin(pos, w, inverse));
}

__device__ inline float pow2_ceil_dev(float v) {
  int e;
  const float f = frexpf(v, &e);
  return f == 0.5f ? ldexpf(1.0f, e - 1) : ldexpf(1.0f, e);
}

__device__ inline float round_e4m3_dev(float x) {
  const float a = fabsf(x);
  if (a == 0.0f || isnan(a)) return x;
  float q;
  if (a < 0.015625f) {
    q = rintf(a * 512.0f) / 512.0f;
  } else {
    int e;
    frexpf(a, &e);
    const float step = ldexpf(1.0f, e - 4);
    q = rintf(a / step) * step;
  }
  q = fminf(q, 448.0f);
  return x < 0 ? -q : q;
}

// FP8 E4M3 round trip of the 64 values at p by one whole warp (two values per lane): the CPU's
// fp8_round_block — power-of-two scale from the block's absmax, each value rounded at that scale.
__device__ inline void fp8_block_warp(float* p, int lane) {
  const float v0 = p[lane], v1 = p[lane + 32];
  const float amax = warp_max(fmaxf(fabsf(v0), fabsf(v1)));
  const float s = pow2_ceil_dev(fmaxf(amax, 1e-4f) / 448.0f);
  p[lane] = s * round_e4m3_dev(fminf(fmaxf(v0 / s, -448.0f), 448.0f));
  p[lane + 32] = s * round_e4m3_dev(fminf(fmaxf(v1 / s, -448.0f), 448.0f));
}

}  // namespace ds4::backend::cuda
