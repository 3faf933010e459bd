// dense_q8.cuh — the per-block, per-row and per-tile steps shared by the dense Q8_0 matmul kernels that
// stage whole weight rows in shared memory (gemv_dense.cu, gemv_stream.cu): one Q8_0 block's ds4 term for
// every vector, one row's terms added in the CPU's block order, and a staged tile through both. Both are the numerics contract
// (src/backend/cuda/README.md: QDot<Q8_0>::finish's expression, then a sequential sum from 0.0f), so
// the two kernels give the CPU's bits whatever their schedules.
// Deliberately not here: staging, scheduling and activation quantization (the kernels; act_quant.cuh).
#pragma once

#include <cstdint>

#include "backend/cuda/act_quant.cuh"
#include "backend/cuda/common.cuh"
#include "backend/cuda/mma_s8.cuh"

namespace ds4::backend::cuda {

// ⌈2^32 / d⌉: i / d = __umulhi(i, magic) for the small chunk and item indices of a staged tile (exact
// while i·(magic·d − 2^32) < 2^32: i < 2^16 and d ≤ 2^16 here). A 32-bit division is ~20 instructions,
// and the first H200 run of gemv_dense.cu found it issue-bound.
inline uint32_t dense_div_magic(uint64_t d) { return static_cast<uint32_t>(((uint64_t{1} << 32) + d - 1) / d); }

// Block b of a staged row: the terms (f16(d_w)·d_x)·Σ q_w q_x of every vector into out[v·vstride].
// The block starts at byte 34b: on a 4-byte boundary for even b (d = low half of word 0, quant word m =
// bytes 2 + 4m … of words m, m + 1), 2 bytes past one for odd b (d = high half, quant word m = word
// m + 1). The 9th word's unused bytes are the next block's or the row pad (the staged row must have
// ≥ 2 readable bytes after its last block). act: n_vec rows of act_row bytes of BlockQ8_0Act.
template <int NV>
__device__ inline void dense_block_terms(const uint8_t* row, int b, const uint8_t* act, uint32_t act_row, int n_vec,
                                         float* out, uint32_t vstride) {
  const uint32_t o = 34u * static_cast<uint32_t>(b);
  const uint32_t* wp = reinterpret_cast<const uint32_t*>(row + (o & ~3u));
  const uint32_t sh = (o & 2u) ? 32u : 16u;
  uint32_t w[9];
#pragma unroll
  for (int m = 0; m < 9; ++m) w[m] = wp[m];
  const float wd = f16_dev(static_cast<uint16_t>(sh == 32u ? w[0] >> 16 : w[0] & 0xffffu));
  int q[8];
#pragma unroll
  for (int m = 0; m < 8; ++m) q[m] = static_cast<int>(__funnelshift_rc(w[m], w[m + 1], sh));
#pragma unroll
  for (int v = 0; v < NV; ++v) {
    if (v < n_vec) {
      const uint8_t* ab = act + v * act_row + static_cast<uint32_t>(b) * sizeof(BlockQ8_0Act);
      const int* aq = reinterpret_cast<const int*>(ab + 4);
      int isum = 0;
#pragma unroll
      for (int m = 0; m < 8; ++m) isum = __dp4a(q[m], aq[m], isum);
      out[v * vstride] = wd * *reinterpret_cast<const float*>(ab) * small_i2f(isum);
    }
  }
}

// A row's nb terms (16-byte aligned, nb a multiple of 4) added to acc in block order: from 0.0f, the
// CPU's sequential sum; from the sum of the row's earlier blocks, its continuation (the same additions in
// the same order). The float4 loads run ahead of the FADD chain.
__device__ inline float dense_row_sum(const float* terms, int nb, float acc = 0.0f) {
  const float4* t = reinterpret_cast<const float4*>(terms);
#pragma unroll 8
  for (int q = 0; q < nb / 4; ++q) {
    const float4 u = t[q];
    acc += u.x;
    acc += u.y;
    acc += u.z;
    acc += u.w;
  }
  return acc;
}

// Phase 1 of a staged tile, every thread of the block (THREADS) calling: thread per (row, block) writes
// the terms of blocks 0 … nb − 1 of rows_here (≤ R) staged rows (pitch bytes apart, each from its first
// block; act at the activation block of block 0) to terms [n_vec][R][term_pitch]. nb_magic =
// dense_div_magic(nb).
template <int NV, int THREADS>
__device__ inline void dense_tile_terms(const uint8_t* stage, uint32_t pitch, int rows_here, int R, int nb,
                                        uint32_t nb_magic, const uint8_t* act, uint32_t act_row, int n_vec, float* terms,
                                        uint32_t term_pitch) {
  const uint32_t vstride = static_cast<uint32_t>(R) * term_pitch;
  const uint32_t items = static_cast<uint32_t>(rows_here) * static_cast<uint32_t>(nb);
  for (uint32_t i = threadIdx.x; i < items; i += THREADS) {
    const int r = static_cast<int>(__umulhi(i, nb_magic)), b = static_cast<int>(i) - r * nb;  // i / nb, i % nb
    dense_block_terms<NV>(stage + r * pitch, b, act, act_row, n_vec, terms + r * term_pitch + b, vstride);
  }
}

// A whole tile: phase 1; a barrier; phase 2, thread per (row, vector) adds its row's terms in block order
// into y[v·y_stride + r] (y: the tile's first row of vector 0). The caller's barrier before the next tile
// keeps `terms` from being overwritten while the chains read it.
template <int NV, int THREADS>
__device__ inline void dense_tile(const uint8_t* stage, uint32_t pitch, int rows_here, int R, int nb, uint32_t nb_magic,
                                  const uint8_t* act, uint32_t act_row, int n_vec, float* terms, uint32_t term_pitch,
                                  float* y, int64_t y_stride) {
  dense_tile_terms<NV, THREADS>(stage, pitch, rows_here, R, nb, nb_magic, act, act_row, n_vec, terms, term_pitch);
  __syncthreads();
  for (int c = threadIdx.x; c < n_vec * R; c += THREADS) {
    const int v = c / R, r = c - v * R;
    if (r < rows_here) y[v * y_stride + r] = dense_row_sum(terms + (v * R + r) * term_pitch, nb);
  }
}

}  // namespace ds4::backend::cuda
