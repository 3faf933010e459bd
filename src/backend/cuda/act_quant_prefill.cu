// act_quant_prefill.cu — the prefill Q8_0 activation quantizer with 8 values a lane (CudaBackendOptions::gemm_q8 29):
// rows x [rows][x_stride] f32 → BlockQ8_0Act rows [rows][cols / 32 · 36 bytes], the bits of quantize.cpp's
// quantize_act_q8_0.
//
// Why: ops_matmul.cu's quantize_q8_0_rows_kernel (8 lanes a 32-value block, one 16-byte load a lane and step, 4 steps
// a warp: 64 bytes in flight a thread, 42 registers) reads a 2,048-token chunk's attention output (268 MB) at ~3.6 TB/s
// of DRAM traffic by ncu (session 14 W1: 91.8 µs; the copy rate is 4.26 TB/s), its 4,096- and 8,192-wide inputs at
// 2.2–2.7 TB/s. W1's streaming rivals (resident blocks walking rounds, the next round's loads before this round's
// stores) were slower at the same bytes in flight an SM — but the one with 4 lanes a block (two 16-byte loads a lane
// and step) beat the one with 8 lanes by 16 %. Here: 4 lanes a block, 4 steps a warp (32 blocks, 4 KB of loads a
// warp, 128 bytes in flight a thread), one round a warp, every block launched at once (as the old kernel).
//
// Bits: a block's amax is a max from 0 (order-free; fmaxf drops NaN like the CPU's `ax > amax`, an all-NaN block
// gets d = 0), then the CPU's d = amax / 127, id = d ≠ 0 ? 1 / d : 0 and nearest_int(v · id) clamped to
// [−128, 127] per value — act_quant.cuh quantize_q8_0_rows_warps' expressions (tests/cuda/test_cuda_gemm.cpp
// compares the bytes with the CPU's on special values and the Flash widths).
// Deliberately not here: the Q8_K quantizers (ops_matmul.cu, gemm_experts.cu), the choice (ops_matmul.cu quantize_act).

#include <cstdint>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_impl.h"
#include "backend/cuda/gemm_q8.h"
#include "quant/blocks.h"

namespace ds4::backend::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kLanes = 4;                 // lanes a 32-value block
constexpr int kVals = 32 / kLanes;        // values a lane: two 16-byte loads
constexpr int kBlocksStep = 32 / kLanes;  // blocks a warp step
constexpr int kSteps = 4;                 // steps a warp (their loads issued together)
constexpr int kBlocksWarp = kBlocksStep * kSteps;

struct QuantParams {
  const float* x;    // [rows][x_stride] f32, 16-byte aligned rows
  int64_t x_stride;
  uint8_t* out;      // [rows][act_row bytes] BlockQ8_0Act
  uint32_t act_row;  // cols / 32 · 36
  uint32_t nb;       // blocks per row
  uint32_t total;    // rows · nb (32-bit offsets: rows · act_row < 2^32, quantize_act checks)
};

// Warp w: blocks [w · kBlocksWarp, …), step u's block w · kBlocksWarp + 8u + lane / 4, the lane's 8 values
// 8 · (lane % 4) … of it. kTrigger (gemm_q8 29): the GEMM launched next as a programmatic dependent may start once
// every block runs (it waits for this grid before reading the rows).
template <bool kTrigger>
__global__ void __launch_bounds__(kThreads) quantize_q8_0_wide_kernel(const QuantParams p) {
  if constexpr (kTrigger) grid_launch_dependents();
  const int lane = threadIdx.x % kWarp, sub = lane % kLanes;
  const uint32_t warp = (blockIdx.x * blockDim.x + threadIdx.x) / kWarp;
  const uint32_t q0 = warp * kBlocksWarp + static_cast<uint32_t>(lane / kLanes);
  if (warp * kBlocksWarp >= p.total) return;  // (warp-uniform)
  float v[kSteps][kVals];
#pragma unroll
  for (int u = 0; u < kSteps; ++u) {
    const uint32_t q = q0 + kBlocksStep * u;
    const bool live = q < p.total;
    const uint32_t row = live ? q / p.nb : 0, b = live ? q - row * p.nb : 0;
    const float* src = p.x + static_cast<int64_t>(row) * p.x_stride + b * 32 + kVals * sub;
    const float4 f0 = live ? *reinterpret_cast<const float4*>(src) : make_float4(0, 0, 0, 0);
    const float4 f1 = live ? *reinterpret_cast<const float4*>(src + 4) : make_float4(0, 0, 0, 0);
    v[u][0] = f0.x, v[u][1] = f0.y, v[u][2] = f0.z, v[u][3] = f0.w;
    v[u][4] = f1.x, v[u][5] = f1.y, v[u][6] = f1.z, v[u][7] = f1.w;
  }
#pragma unroll
  for (int u = 0; u < kSteps; ++u) {
    const uint32_t q = q0 + kBlocksStep * u;
    float amax = 0;  // as the CPU's `ax > amax` from 0
#pragma unroll
    for (int i = 0; i < kVals; ++i) amax = fmaxf(amax, fabsf(v[u][i]));
#pragma unroll
    for (int o = kLanes / 2; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    if (q >= p.total) continue;  // (after the shuffles: every lane took part)
    const uint32_t row = q / p.nb, b = q - row * p.nb;
    const float d = amax / 127.0f;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    uint8_t* o = p.out + row * p.act_row + b * static_cast<uint32_t>(sizeof(BlockQ8_0Act));
    if (sub == 0) *reinterpret_cast<float*>(o) = d;
#pragma unroll
    for (int h = 0; h < kVals / 4; ++h) {
      uint32_t packed = 0;  // 4 int8 quants, one 4-byte store (act blocks are 4-byte aligned)
#pragma unroll
      for (int i = 0; i < 4; ++i)
        packed |= static_cast<uint32_t>(static_cast<uint8_t>(static_cast<int8_t>(
                      clamp_int_dev(nearest_int_dev(v[u][4 * h + i] * id), -128, 127))))
                  << (8 * i);
      *reinterpret_cast<uint32_t*>(o + 4 + kVals * sub + 4 * h) = packed;
    }
  }
}

}  // namespace

void quantize_q8_0_wide(CudaBackend& be, bool trigger, const float* x, int64_t x_stride, int64_t rows, int64_t cols,
                        uint8_t* out) {
  QuantParams p{};
  p.x = x;
  p.x_stride = x_stride;
  p.out = out;
  p.nb = static_cast<uint32_t>(cols / 32);
  p.act_row = p.nb * static_cast<uint32_t>(sizeof(BlockQ8_0Act));
  p.total = static_cast<uint32_t>(rows) * p.nb;
  if (p.total == 0) return;
  constexpr uint32_t kPerBlock = kBlocksWarp * (kThreads / kWarp);
  const uint32_t grid = (p.total + kPerBlock - 1) / kPerBlock;
  if (trigger)
    quantize_q8_0_wide_kernel<true><<<grid, kThreads, 0, be.stream()>>>(p);
  else
    quantize_q8_0_wide_kernel<false><<<grid, kThreads, 0, be.stream()>>>(p);
}

}  // namespace ds4::backend::cuda
