// act_quant.cuh — warp-wide activation quantizers (src/quant/quantize.cpp quantize_act_q8_0 and
// quantize_act_q8_K, bit-exact), shared by the standalone quantize kernels (ops_matmul.cu) and the
// decode GEMV / MoE kernels that quantize their activations into shared memory (gemv_decode.cu,
// gemv_dense.cu).
// Deliberately not here: weight decoding and dot products (quant_device.cuh).
#pragma once

#include <cstdint>

#include "backend/cuda/common.cuh"
#include "quant/blocks.h"

namespace ds4::backend::cuda {

// One warp quantizes one 32-value block: lane l holds value l; `o` receives a BlockQ8_0Act
// (f32 scale at 0, 32 int8 at 4; 4-byte aligned). Every lane of the warp must call it.
__device__ inline void quantize_q8_0_warp(float v, int lane, uint8_t* o) {
  const float amax = warp_max(fabsf(v));  // fmaxf skips NaN like the CPU's `ax > amax`
  const float d = amax / 127.0f;
  const float id = d != 0 ? 1.0f / d : 0.0f;
  if (lane == 0) *reinterpret_cast<float*>(o) = d;
  o[4 + lane] = static_cast<uint8_t>(static_cast<int8_t>(clamp_int_dev(nearest_int_dev(v * id), -128, 127)));
}

// One warp quantizes one 256-value super-block: lane l holds values 8l … 8l+7 in v[]; the block's d (f32),
// 256 quants and 16 bsums (int16) go to dp, qs, bsums — a BlockQ8_K (quantize_q8_K_warp) or the GEMM's
// planes (gemm_experts.cu).
__device__ inline void quantize_q8_K_warp_to(const float (&v)[8], int lane, float* dp, int8_t* qs, int16_t* bsums) {
  // The largest |x| keeping its sign, first index on ties (strict >, NaN never wins), as ds4.
  float best_ax = 0, best_v = 0;
  int best_i = 1 << 30;
  for (int i = 0; i < 8; ++i) {
    const float ax = fabsf(v[i]);
    if (ax > best_ax) {
      best_ax = ax;
      best_v = v[i];
      best_i = 8 * lane + i;
    }
  }
  for (int o = 16; o > 0; o >>= 1) {
    const float oax = __shfl_xor_sync(0xffffffffu, best_ax, o);
    const float ov = __shfl_xor_sync(0xffffffffu, best_v, o);
    const int oi = __shfl_xor_sync(0xffffffffu, best_i, o);
    if (oax > best_ax || (oax == best_ax && oi < best_i)) {
      best_ax = oax;
      best_v = ov;
      best_i = oi;
    }
  }
  if (best_ax == 0) {
    if (lane == 0) *dp = 0;
    for (int i = 0; i < 8; ++i) qs[8 * lane + i] = 0;
    if (lane < 16) bsums[lane] = 0;
    return;
  }
  const float iscale = -127.0f / best_v;
  int s = 0;
  for (int i = 0; i < 8; ++i) {
    const int q = clamp_int_dev(nearest_int_dev(iscale * v[i]), -128, 127);
    qs[8 * lane + i] = static_cast<int8_t>(q);
    s += q;
  }
  s += __shfl_xor_sync(0xffffffffu, s, 1);  // bsums[k] covers lanes 2k and 2k+1
  if (lane % 2 == 0) bsums[lane / 2] = static_cast<int16_t>(s);
  if (lane == 0) *dp = 1.0f / iscale;
}

// One warp quantizes one 256-value super-block: lane l holds values 8l … 8l+7 in v[]; `blkp`
// receives a BlockQ8_K (f32 d at 0, qs[256] at 4, bsums[16] at 260; 4-byte aligned).
__device__ inline void quantize_q8_K_warp(const float (&v)[8], int lane, uint8_t* blkp) {
  quantize_q8_K_warp_to(v, lane, reinterpret_cast<float*>(blkp), reinterpret_cast<int8_t*>(blkp + 4),
                        reinterpret_cast<int16_t*>(blkp + 260));
}

// Rows x[v] (v < n_vec, `cols` values each) into `act` ([n_vec][act_row bytes] BlockQ8_0Act): warp `warp`
// of `n_warps` takes the 4-block steps warp, warp + n_warps, … (every lane of those warps calls it; no
// barrier). 8 lanes per 32-value block (4 values each), so a warp quantizes 4 blocks per step — 4× fewer
// steps than with quantize_q8_0_warp. Bit-identical to the CPU's quantize_act_q8_0 (and to
// quantize_q8_0_warp on every block with a number in it): the block's amax is a max from 0 (order-free,
// fmaxf drops NaN, as the CPU's `ax > amax`), then the same d, 1/d and per-value rounding. kVec4 (the
// global-memory quantizer): each lane's 4 values by one 16-byte load (x and x_stride 16-byte aligned)
// and its 4 quants by one 4-byte store; 32-bit offsets: the caller keeps n_vec·act_row below 2^32.
template <bool kVec4 = false>
__device__ inline void quantize_q8_0_rows_warps(const float* x, int64_t x_stride, int n_vec, int64_t cols,
                                                uint8_t* act, uint64_t act_row, uint32_t warp, uint32_t n_warps) {
  const int lane = threadIdx.x % kWarp;
  const int sub = lane % 8;
  // 32-bit indices (n_vec·nb < 2^31): a 64-bit division is a long emulated sequence, and the first H200
  // run of gemv_dense.cu measured the prologue at ~2 µs per 4096-value vector with them.
  const uint32_t nb = static_cast<uint32_t>(cols / kQK8_0), total = static_cast<uint32_t>(n_vec) * nb;
  // kSteps warp steps at a time: every load of them is issued before the first shuffle, so a warp
  // waits for one round of memory latency per kSteps steps instead of one per step.
  constexpr int kSteps = 4;
  const uint32_t step = 4u * n_warps;
  for (uint32_t base = 4u * warp; base < total; base += step * kSteps) {
    float vals[kSteps][4];
    uint32_t off[kSteps];  // byte offset of the step's block in `act`
#pragma unroll
    for (int u = 0; u < kSteps; ++u) {
      const uint32_t q = base + step * u + static_cast<uint32_t>(lane / 8);
      const bool live = q < total;
      const uint32_t v = live ? q / nb : 0, b = live ? q - v * nb : 0;
      off[u] = static_cast<uint32_t>(v * act_row) + b * static_cast<uint32_t>(sizeof(BlockQ8_0Act));
      const float* src = x + static_cast<int64_t>(v) * x_stride + b * kQK8_0 + 4 * sub;
      if constexpr (kVec4) {
        const float4 f = live ? *reinterpret_cast<const float4*>(src) : make_float4(0, 0, 0, 0);
        vals[u][0] = f.x;
        vals[u][1] = f.y;
        vals[u][2] = f.z;
        vals[u][3] = f.w;
      } else {
#pragma unroll
        for (int i = 0; i < 4; ++i) vals[u][i] = live ? src[i] : 0.0f;
      }
    }
#pragma unroll
    for (int u = 0; u < kSteps; ++u) {
      const uint32_t q0 = base + step * u;
      if (q0 >= total) break;  // uniform over the warp: no step left
      const bool live = q0 + static_cast<uint32_t>(lane / 8) < total;
      float amax = 0;  // as the CPU's `ax > amax` from 0 (an all-NaN block gets d = 0)
#pragma unroll
      for (int i = 0; i < 4; ++i) amax = fmaxf(amax, fabsf(vals[u][i]));
      for (int o = 4; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
      if (!live) continue;
      const float d = amax / 127.0f;
      const float id = d != 0 ? 1.0f / d : 0.0f;
      uint8_t* o = act + off[u];
      if (sub == 0) *reinterpret_cast<float*>(o) = d;
      if constexpr (kVec4) {
        uint32_t packed = 0;  // the 4 int8 values, one 4-byte store (act blocks are 4-byte aligned)
#pragma unroll
        for (int i = 0; i < 4; ++i)
          packed |= static_cast<uint32_t>(static_cast<uint8_t>(
                        static_cast<int8_t>(clamp_int_dev(nearest_int_dev(vals[u][i] * id), -128, 127))))
                    << (8 * i);
        *reinterpret_cast<uint32_t*>(o + 4 + 4 * sub) = packed;
      } else {
#pragma unroll
        for (int i = 0; i < 4; ++i)
          o[4 + 4 * sub + i] =
              static_cast<uint8_t>(static_cast<int8_t>(clamp_int_dev(nearest_int_dev(vals[u][i] * id), -128, 127)));
      }
    }
  }
}

// quantize_q8_0_rows_warps with all warps of the block (the fused-quantization prologue of gemv_decode.cu,
// gemv_dense.cu and gemv_stream.cu, into shared memory), ending with a block barrier.
__device__ inline void quantize_q8_0_rows_to_smem(const float* x, int64_t x_stride, int n_vec, int64_t cols,
                                                  uint8_t* act, uint64_t act_row) {
  quantize_q8_0_rows_warps(x, x_stride, n_vec, cols, act, act_row, threadIdx.x / kWarp, blockDim.x / kWarp);
  __syncthreads();
}

}  // namespace ds4::backend::cuda
