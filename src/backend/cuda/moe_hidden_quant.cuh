// moe_hidden_quant.cuh — one warp quantizing one block of the routed experts' rows (x or the hidden rows h
// [pairs][ff]) into the padded activation layout the expert kernels read (kActLead, then blocks at kQ8KPitch /
// kQ80Pitch), bit-exact with quantize_act's kernels: moe_tiles.cu's prologue and hidden-row quantization kernel,
// and the one-token gate/up kernel that quantizes the hidden rows itself (moe_one_lean.cu, session 14).
// Deliberately not here: which warp takes which block, or when (the kernels).
#pragma once

#include <cstdint>

#include "backend/cuda/act_quant.cuh"
#include "backend/cuda/moe_terms.cuh"
#include "quant/blocks.h"

namespace ds4::backend::cuda {

// One warp quantizes activation block `blk` of x [rows][cols] (row stride x_stride) into the padded
// layout (Q8_K, or Q8_0 act when kQ80), bit-exact with quantize_act's kernels. kL2: x read at L2 (ld.global.cg),
// for rows other blocks of the same grid wrote (their fence and a counter before; L1 is not coherent).
template <bool kQ80, bool kL2 = false>
__device__ inline void quantize_padded(const float* x, int64_t x_stride, int64_t rows, int64_t cols, uint8_t* act,
                                       int64_t blk, int lane) {
  constexpr int kElems = kQ80 ? kQK8_0 : kQK_K;
  constexpr uint64_t kPitch = kQ80 ? kQ80Pitch : kQ8KPitch;
  const int64_t nb = cols / kElems;
  if (blk >= rows * nb) return;  // whole warps: blk is the same for every lane
  const int64_t r = blk / nb, b = blk % nb;
  uint8_t* o = act + kActLead + (r * nb + b) * kPitch;
  if constexpr (kQ80) {
    const float* src = x + r * x_stride + b * kQK8_0 + lane;
    quantize_q8_0_warp(kL2 ? __ldcg(src) : *src, lane, o);
  } else {
    const float* src = x + r * x_stride + b * kQK_K + 8 * lane;
    float v[8];
    for (int i = 0; i < 8; ++i) v[i] = kL2 ? __ldcg(src + i) : src[i];
    quantize_q8_K_warp(v, lane, o);
  }
  // The 12 padding bytes after the block zeroed (the first block: also the 12 before it, kActLead; the last: the 4
  // that round the region to 16): no kernel reads them as values, but the down row tiles stage each block from its
  // 16-byte aligned start 12 bytes before it and the warp tiles copy the whole region, and compute-sanitizer
  // initcheck reported those reads of never-written bytes (session 11 W1), which would hide a real one.
  constexpr uint64_t kBytes = kQ80 ? sizeof(BlockQ8_0Act) : sizeof(BlockQ8_K);
  static_assert(kPitch - kBytes == 12 && kActLead == 12, "12-byte lead and pads, blocks 16-byte aligned");
  if (lane < 3) reinterpret_cast<uint32_t*>(o + kBytes)[lane] = 0;
  else if (lane < 6 && blk == 0) reinterpret_cast<uint32_t*>(act)[lane - 3] = 0;
  else if (lane == 6 && blk == rows * nb - 1) *reinterpret_cast<uint32_t*>(o + kPitch) = 0;
}

}  // namespace ds4::backend::cuda
