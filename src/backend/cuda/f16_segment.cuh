// f16_segment.cuh — the pieces of README.md's F16 summation order that every kernel summing F16 rows
// under ds4 numerics shares (matmul_f16.cu, the fused HC pre of ops_hc.cu): the segment size, one
// lane's 8-value weight and activation chunks, the in-order 8-product accumulation, and the
// reduce-scatter that gives 16 segment sums with warp_sum's bits in 16 shuffles instead of 80.
// Deliberately not here: launch shapes (each kernel picks its own; the order does not depend on them).
#pragma once

#include <cstdint>

#include "backend/cuda/common.cuh"

namespace ds4::backend::cuda {

inline constexpr int kF16Seg = 512;      // values per segment: the summation contract, never a tuning knob
inline constexpr int kF16SegHalf = 256;  // a lane's two 8-value chunks start at 8·lane and 256 + 8·lane

inline bool aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

// One lane's 8-value chunk of F16 weights at element e (zeros beyond cols).
__device__ inline uint4 load_w8(const uint8_t* row, int64_t e, int64_t cols, bool wide) {
  if (wide) return e < cols ? *reinterpret_cast<const uint4*>(row + 2 * e) : make_uint4(0, 0, 0, 0);
  uint16_t h[8];
  const uint16_t* r = reinterpret_cast<const uint16_t*>(row);
#pragma unroll
  for (int j = 0; j < 8; ++j) h[j] = e + j < cols ? r[e + j] : 0;
  return make_uint4(h[0] | (uint32_t{h[1]} << 16), h[2] | (uint32_t{h[3]} << 16), h[4] | (uint32_t{h[5]} << 16),
                    h[6] | (uint32_t{h[7]} << 16));
}

// The matching 8 activations (zeros beyond cols, so padding never turns a product into NaN).
__device__ inline void load_x8(const float* x, int64_t e, int64_t cols, bool wide, float4& a, float4& b) {
  if (wide) {
    if (e < cols) {
      a = *reinterpret_cast<const float4*>(x + e);
      b = *reinterpret_cast<const float4*>(x + e + 4);
    } else {
      a = b = make_float4(0, 0, 0, 0);
    }
    return;
  }
  float v[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) v[j] = e + j < cols ? x[e + j] : 0.0f;
  a = make_float4(v[0], v[1], v[2], v[3]);
  b = make_float4(v[4], v[5], v[6], v[7]);
}

// acc += w_j · x_j for j = 0 … 7 in order (one product rounded, then one add: --fmad=false).
__device__ inline float dot8(float acc, uint4 w, float4 a, float4 b) {
  const uint32_t q[4] = {w.x, w.y, w.z, w.w};
  const float x[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    acc += f16_dev(static_cast<uint16_t>(q[k] & 0xffffu)) * x[2 * k];
    acc += f16_dev(static_cast<uint16_t>(q[k] >> 16)) * x[2 * k + 1];
  }
  return acc;
}

// 16 sums of one warp at once (items of several rows × vectors): the additions are warp_sum's butterfly
// tree (offsets 16, 8, 4, 2, 1, each lane adding its partner's value), only each lane carries the items
// it ends with, so every item's sum has warp_sum's bits.
// One step of the reduce-scatter: lanes with bit `o` set keep items [H, 2H) (moved to [0, H)), the
// others [0, H); each sends the half it drops to lane ^ o and adds what it receives.
template <int H>
__device__ inline void reduce_scatter_step(float (&v)[16], int lane, int o) {
  const bool hi = (lane & o) != 0;
#pragma unroll
  for (int i = 0; i < H; ++i) {
    const float send = hi ? v[i] : v[H + i];
    const float keep = hi ? v[H + i] : v[i];
    v[i] = keep + __shfl_xor_sync(0xffffffffu, send, o);
  }
}
// Lane l ends with the whole-warp sum of item (l >> 1) & 15 (lanes l and l ^ 1 hold the same item).
__device__ inline float reduce_scatter16(float (&v)[16], int lane) {
  reduce_scatter_step<8>(v, lane, 16);
  reduce_scatter_step<4>(v, lane, 8);
  reduce_scatter_step<2>(v, lane, 4);
  reduce_scatter_step<1>(v, lane, 2);
  return v[0] + __shfl_xor_sync(0xffffffffu, v[0], 1);
}

}  // namespace ds4::backend::cuda
