// qdot.cuh — the ds4 block dot product of one quantized weight block with one activation block, split
// into an integer part over pieces of the block and the block's float `finish` (dot_ref.cpp's
// expressions, operation for operation), for the kernels that compute block terms lane by lane and
// add them in the CPU's block order: the decode matvec / experts (gemv_decode.cu) and the skinny
// (5..64 vector) matmul / experts (gemv_skinny.cu).
// Deliberately not here: how terms are summed (each kernel's job, always in block order) and the
// IQ2_XXS __constant__ tables (a symbol belongs to one translation unit: each .cu keeps its own copy
// and passes it to load_tables).
#pragma once

#include <cstdint>

#include "backend/cuda/common.cuh"
#include "backend/cuda/quant_device.cuh"

namespace ds4::backend::cuda {

// Per weight type: block geometry, the integer part of the ds4 block dot product over pieces
// [p0, p1) of the block (dot_ref.cpp's loops; integer sums, exact in any grouping), and `finish`, the
// block's float expression from the integer sums (dot_ref order).
template <GgmlType T>
struct QDot;

template <>
struct QDot<GgmlType::Q8_0> {
  static constexpr int kElems = kQK8_0, kWBytes = sizeof(BlockQ8_0), kABytes = sizeof(BlockQ8_0Act), kParts = 8;
  __device__ static void part(const uint8_t* wb, const uint8_t* ab, int p0, int p1, int& i0, int&, const uint64_t*,
                              const uint8_t*) {
    for (int m = p0; m < p1; ++m)
      i0 = __dp4a(static_cast<int>(ld32_u16(wb + 2 + 4 * m)), static_cast<int>(ld32(ab + 4 + 4 * m)), i0);
  }
  __device__ static float finish(const uint8_t* wb, const uint8_t* ab, int i0, int) {
    return f16_dev(ld16(wb)) * *reinterpret_cast<const float*>(ab) * static_cast<float>(i0);
  }
};

template <>
struct QDot<GgmlType::Q2_K> {
  static constexpr int kElems = kQK_K, kWBytes = sizeof(BlockQ2_K), kABytes = sizeof(BlockQ8_K), kParts = 16;
  // Piece s = 8h + 2l + half (16-value sub-block) and its scale/min byte x[s] (quant_device.cuh).
  __device__ static void part(const uint8_t* x, const uint8_t* y, int p0, int p1, int& isum, int& summs,
                              const uint64_t*, const uint8_t*) {
    for (int s = p0; s < p1; ++s) isum += q2k_piece(x, y, s, summs);
  }
  __device__ static float finish(const uint8_t* x, const uint8_t* y, int isum, int summs) {
    return q2k_finish(x, y, isum, summs);
  }
};

template <>
struct QDot<GgmlType::Q4_K> {
  static constexpr int kElems = kQK_K, kWBytes = sizeof(BlockQ4_K), kABytes = sizeof(BlockQ8_K), kParts = 8;
  __device__ static void part(const uint8_t* x, const uint8_t* y, int p0, int p1, int& isum, int& summs,
                              const uint64_t*, const uint8_t*) {
    for (int j = p0; j < p1; ++j) isum += q4k_piece(x, y, j, summs);
  }
  __device__ static float finish(const uint8_t* x, const uint8_t* y, int isum, int summs) {
    return q4k_finish(x, y, isum, summs);
  }
};

template <>
struct QDot<GgmlType::IQ2_XXS> {
  static constexpr int kElems = kQK_K, kWBytes = sizeof(BlockIQ2_XXS), kABytes = sizeof(BlockQ8_K), kParts = 8;
  __device__ static void part(const uint8_t* x, const uint8_t* y, int p0, int p1, int& bsum, int&,
                              const uint64_t* grid, const uint8_t* signs) {
    for (int g = p0; g < p1; ++g) bsum += iq2_xxs_group_isum(x, y, g, grid, signs);
  }
  // Without the row's final ·0.125 (applied once per row, as dot_iq2_xxs_ref does).
  __device__ static float finish(const uint8_t* x, const uint8_t* y, int bsum, int) {
    const float d = f16_dev(ld16(x)) * q8k_d(y);
    return d * static_cast<float>(bsum);
  }
};

// Copies a translation unit's IQ2_XXS tables into shared memory (divergent lookups are cheaper there);
// no-op for the other types. The caller synchronizes the block before use.
template <GgmlType T>
__device__ inline void load_tables(const uint64_t* c_grid, const uint8_t* c_signs, uint64_t* grid, uint8_t* signs) {
  if constexpr (T == GgmlType::IQ2_XXS) {
    for (int i = threadIdx.x; i < 256; i += blockDim.x) grid[i] = c_grid[i];
    for (int i = threadIdx.x; i < 128; i += blockDim.x) signs[i] = c_signs[i];
  }
}

}  // namespace ds4::backend::cuda
