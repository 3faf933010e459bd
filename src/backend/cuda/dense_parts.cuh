// dense_parts.cuh — a dense Q8_0 launch's parts (one matrix, out_a's groups, matmul_many's jobs sharing x)
// as the StreamSet kernels read them (gemv_stream.cu, gemv_rows.cu), and their host-side filling: the
// blocks each part gets, and the one quantize_act when the activations are too many to quantize per block.
// and, on the device, which part and rows a block of such a launch owns (dense_block_range).
// Deliberately not here: how many blocks (deal_stream_blocks, the launchers), the kernels' own parameters.
#pragma once

#include <cstdint>

#include "backend/cuda/cuda_impl.h"

namespace ds4::backend::cuda {

struct DensePart {
  const uint8_t* w;    // Q8_0 [rows][row_bytes], 16-byte aligned
  const float* x;      // fused quantization: vector v at x + v·x_stride
  const uint8_t* act;  // or pre-quantized: vector v at act + v·act_vec (BlockQ8_0Act); null: fused
  float* y;            // [n_vec][y_stride]
  int64_t y_stride;
  int32_t rows;
  int32_t block0;      // the part's first block; its blocks run to the next part's block0 (or the grid's end)
};

// The part of this block and its rows [rb, rb + rows): a part's blocks split its rows evenly (block b of B
// gets rows ⌊R·b/B⌋ … ⌊R·(b+1)/B⌋ − 1; the host gives a part at most one block per row, so none is empty).
struct DenseRange {
  const DensePart* part;
  int64_t rb, rows;
};
__device__ inline DenseRange dense_block_range(const DensePart* parts, int n_parts) {
  int pi = 0;
  while (pi + 1 < n_parts && static_cast<int32_t>(blockIdx.x) >= parts[pi + 1].block0) ++pi;
  const DensePart& P = parts[pi];
  const int32_t blocks = (pi + 1 < n_parts ? parts[pi + 1].block0 : static_cast<int32_t>(gridDim.x)) - P.block0;
  const int32_t lb = static_cast<int32_t>(blockIdx.x) - P.block0;
  const int64_t rb = int64_t{P.rows} * lb / blocks, re = int64_t{P.rows} * (lb + 1) / blocks;
  return {&P, rb, re - rb};
}

// parts[i] from s.part[i], block0 from the running sum of blocks[]; when n_vec·cols > fused_max_values one
// quantize_act over every part's input first (act set, *act_vec its stride). 1: done; 0: an error was
// recorded; −1: the inputs are not one 4-block-aligned row (nothing launched: other kernels).
inline int fill_dense_parts(CudaBackend& be, const StreamSet& s, const int64_t* blocks, int64_t fused_max_values,
                            DeviceScratch& act_scratch, DensePart* parts, uint64_t* act_vec) {
  int64_t b = 0;
  for (int i = 0; i < s.n_parts; ++i) {
    DensePart& q = parts[i];
    q.w = s.part[i].w;
    q.x = s.part[i].x;
    q.act = nullptr;
    q.y = s.part[i].y;
    q.y_stride = s.part[i].y_stride;
    q.rows = static_cast<int32_t>(s.part[i].rows);
    q.block0 = static_cast<int32_t>(b);
    b += blocks[i];
  }
  if (s.n_vec * s.cols <= fused_max_values) return 1;
  const uint8_t* acts[kStreamMaxParts] = {};
  const int got = be.stream_quantize_parts(s, act_scratch, act_vec, acts);
  if (got == 1)
    for (int i = 0; i < s.n_parts; ++i) parts[i].act = acts[i];
  return got;
}

}  // namespace ds4::backend::cuda
