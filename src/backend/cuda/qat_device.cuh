// qat_device.cuh — the indexer rows' QAT device pieces (MODEL.md §5.5: scaled Walsh–Hadamard, FP4 E2M1 round trip
// in blocks of 32, half rounding) and the indexer query's RoPE + QAT of one row, for the kernels that run them:
// ops_qat.cu's and compressors_qat.cu's (the query's QAT beside a CSA layer's compressors). Each is the CPU
// primitive (backend/cpu/primitives.cpp) in the same float operations. Header-only, __device__ inline.
// Deliberately not here: launches, the warp-per-row prefill kernel (ops_qat.cu).
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "backend/backend.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/rows_device.cuh"

namespace ds4::backend::cuda {

__device__ inline float round_e2m1_dev(float x) {
  const float kValues[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float a = fminf(fabsf(x), 6.0f);
  int best = 0;
  float best_d = a;
  for (int c = 1; c < 8; ++c) {
    const float d = fabsf(a - kValues[c]);
    if (d < best_d || (d == best_d && (c % 2 == 0))) {
      best = c;
      best_d = d;
    }
  }
  return x < 0 ? -kValues[best] : kValues[best];
}

// The FP4 E2M1 round trip of the 32-value block of h held by one warp (power-of-two scale from the block's
// absmax) and the store of value i, half-rounded with f16 (none with a null row: a block's idle rows, which
// still take the warp's and block's steps): the end of every indexer_qat kernel.
__device__ inline void fp4_block_store(float h, float* row, int i, bool f16) {
  const float amax = warp_max(fabsf(h));
  const float sc = pow2_ceil_dev(fmaxf(amax, 6.0f * ldexpf(1.0f, -126)) / 6.0f);
  const float v = sc * round_e2m1_dev(fminf(fmaxf(h / sc, -6.0f), 6.0f));
  if (row) row[i] = f16 ? __half2float(__float2half_rn(v)) : v;
}

// Thread i of a row's dim threads (i = threadIdx.x, or its index in a block holding several rows, whose
// share of shared memory sh then is) holding value i of the row: the Hadamard stages as above, then the
// FP4 round trip and the store of value i. Every thread calls it (barriers).
__device__ inline void hadamard_fp4_store(float v, float* sh, float* row, int32_t dim, float k, bool f16, int i) {
#pragma unroll
  for (int s = 1; s < kWarp; s *= 2) {
    const float o = __shfl_xor_sync(0xffffffffu, v, s);
    v = (i & s) == 0 ? v + o : o - v;
  }
  for (int s = kWarp; s < dim; s *= 2) {
    sh[i] = v;
    __syncthreads();
    const float o = sh[i ^ s];
    v = (i & s) == 0 ? v + o : o - v;
    __syncthreads();  // the next stage overwrites sh
  }
  fp4_block_store(v * k, row, i, f16);
}

// The indexer query's RoPE + QAT of row r (IndexerQatArgs::n_rot; row r is head r mod heads of token r / heads)
// by its dim threads, thread i holding value i: rope_kernel's rotation of the last n_rot dims — the pair
// (2j, 2j + 1) of the tail starts at an even dim (dim − n_rot), so it sits on lanes i, i ^ 1 of one warp: each
// lane takes its partner's value by one shuffle and computes its own half of rope_apply's two expressions with
// rope_cos_sin's angle — then hadamard_fp4_store. live = false: a block's idle row (no load, no store), which
// still takes every shuffle and barrier. sh: this row's dim floats of shared memory.
__device__ inline void rope_qat_row(const IndexerQatArgs& a, const RopeFreqs& f, float k, int64_t r, int i, float* sh,
                                    bool live) {
  const int32_t dim = a.dim;
  float* row = live ? a.x + r * dim : nullptr;
  const int j = i - (dim - a.n_rot);  // j ≥ 0: index in the rotated tail
  float v = live ? row[i] : 0.0f;
  const float2 cs = live && j >= 0 ? rope_cos_sin(a.pos[r / a.heads], f.w[j / 2], false) : make_float2(1.0f, 0.0f);
  const float o = __shfl_xor_sync(0xffffffffu, v, 1);
  if (j >= 0) {
    const bool odd = (j & 1) != 0;
    const float x0 = odd ? o : v, x1 = odd ? v : o;  // the pair (v[0], v[1]) of rope_apply
    v = odd ? x0 * cs.y + x1 * cs.x : x0 * cs.x - x1 * cs.y;
  }
  hadamard_fp4_store(v, sh, row, dim, k, a.f16, i);
}

}  // namespace ds4::backend::cuda
