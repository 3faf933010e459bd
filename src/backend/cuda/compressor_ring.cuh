// compressor_ring.cuh — the compressor's walking ring body (one thread block walks one session's tokens: each
// token's (kv, score + ape) into its frontier row, a pooled row at every block boundary; MODEL.md §7.4) and a
// batched step's per-session share of it, for every kernel that walks a ring: ops_compressor.cu's single and
// paired launches and compressors_qat.cu's launch beside the indexer query's QAT. Header-only, __device__.
// Deliberately not here: launches, the prefill chunk's parallel pooling (ops_compressor.cu).
#pragma once

#include <cmath>
#include <cstdint>

#include "backend/backend.h"
#include "backend/exact_math.h"

namespace ds4::backend::cuda {

// Ring frontier (backend.h with CompressorArgs::slots).
// kv, score: [n][width]; ape: [ratio][width]; state: ring [slots][width] (token t in row t mod slots);
// out: [*][out_dim].
template <typename Args>
__device__ inline void compressor_ring_body(const Args& a) {
  const int64_t D = a.out_dim, r = a.ratio, slots = a.slots;
  const int64_t width = a.overlap ? 2 * D : D;
  int64_t emitted = 0;
  for (int64_t i = 0; i < a.n; ++i) {
    const int64_t t = a.pos0 + i;
    const int64_t row = t % slots;
    for (int64_t d = threadIdx.x; d < width; d += blockDim.x) {
      a.state_kv[row * width + d] = a.kv[i * width + d];
      a.state_score[row * width + d] = a.score[i * width + d] + a.ape[(t % r) * width + d];
    }
    if ((t + 1) % r != 0) continue;
    __syncthreads();
    // Block B is complete. Candidates per output dimension d, in the CPU's order: (overlap, B > 0) the
    // previous block's series A (column d), then this block's series B (column D+d); (no overlap) this
    // block's column d.
    const int64_t B = (t + 1) / r - 1;
    const int64_t cur = (B * r) % slots, prev = ((B - 1) * r % slots + slots) % slots;
    const bool has_prev = a.overlap && B > 0;
    const int64_t cur_col = a.overlap ? D : 0;
    float* out = a.out + emitted * D;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
      float mx = -INFINITY;
      if (has_prev)
        for (int64_t s = 0; s < r; ++s) mx = fmaxf(mx, a.state_score[(prev + s) * width + d]);
      for (int64_t s = 0; s < r; ++s) mx = fmaxf(mx, a.state_score[(cur + s) * width + cur_col + d]);
      float denom = 0, acc = 0;
      if (has_prev)
        for (int64_t s = 0; s < r; ++s) {
          const float e = exact_exp(a.state_score[(prev + s) * width + d] - mx);
          denom += e;
          acc += e * a.state_kv[(prev + s) * width + d];
        }
      for (int64_t s = 0; s < r; ++s) {
        const float e = exact_exp(a.state_score[(cur + s) * width + cur_col + d] - mx);
        denom += e;
        acc += e * a.state_kv[(cur + s) * width + cur_col + d];
      }
      out[d] = acc / denom;
    }
    if (threadIdx.x == 0) a.out_pos[emitted] = static_cast<int32_t>(B * r);
    ++emitted;
    __syncthreads();  // the next token may overwrite a row pooled here
  }
}

// A batched step: thread block s walks session s (CompressorArgs::seg) with the single-session body.
template <typename Args>
__device__ inline void compressor_ring_segment(const Args& a, int s) {
  const CompressorSegment sg = a.seg[s];
  const int64_t width = a.overlap ? 2 * static_cast<int64_t>(a.out_dim) : a.out_dim;
  Args one = a;
  one.kv = a.kv + sg.col * width;
  one.score = a.score + sg.col * width;
  one.n = sg.n;
  one.pos0 = sg.pos0;
  one.state_kv = sg.state_kv;
  one.state_score = sg.state_score;
  one.out = sg.out;
  one.out_pos = sg.out_pos;
  compressor_ring_body(one);
}

// Block `block` of a job of a paired launch (two independent compressors in one grid): a batched step's
// session `block`, or (one session) block 0 walking the tokens; blocks past the job's count leave at once
// (before any barrier).
__device__ inline void compressor_pair_block(const CompressorArgs& a, int block) {
  if (a.segments > 0) {
    if (block < a.segments) compressor_ring_segment(a, block);
  } else if (block == 0) {
    compressor_ring_body(a);
  }
}

}  // namespace ds4::backend::cuda
