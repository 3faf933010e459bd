// gemm_tiles.cuh — the pieces the int8 tensor-core prefill GEMMs for quantized weights share: the job
// parameters, the weight decode into int8 tiles (Q8_0, IQ2_XXS, Q2_K: decode_a), the raw-stage copy
// windows (cp.async of 16-byte chunks around unaligned blocks), ldmatrix and the biased int8 MMA.
// Used by ops_gemm.cu (gemm_kernel, gemm2_kernel) and gemm_experts.cu (the grouped experts' kernels: the
// parameters, copy windows, ldmatrix and MMA), so the integer sums and scales are the same code everywhere.
// Deliberately not here: the kernels, their shared-memory layouts and launch logic; the IQ2_XXS tables
// (each translation unit has its own __constant__ copy, uploaded at backend creation).
#pragma once

#include <cstdint>

#include "backend/cuda/common.cuh"
#include "quant/blocks.h"

namespace ds4::backend::cuda {

constexpr int kBM = 128, kBN = 64, kBK = 256;
constexpr int kLd = kBK + 16;  // smem row pitch in bytes: 68 words, so fragment loads hit 32 banks

struct GemmParams {
  const uint8_t* w;          // matrix, or expert 0
  uint64_t row_bytes, expert_bytes;
  int64_t rows, cols;
  const uint8_t* act;        // quantized activations [act rows][act_stride bytes]
  uint64_t act_stride;
  int32_t x_div;             // vector v reads activation row v / x_div
  float* y;                  // [n_vec][y_stride]
  int64_t y_stride, n_vec;
  const int32_t* order;      // grouped: vectors sorted by expert
  const int32_t* tiles;      // grouped: [max_tiles][3] = expert, first index into order, count
  const int32_t* n_tiles;    // grouped: number of valid tiles (device)
};

__device__ inline float f16v(uint16_t h) { return __half2float(__ushort_as_half(h)); }
__device__ inline uint16_t ld16(const uint8_t* p) { return *reinterpret_cast<const uint16_t*>(p); }
__device__ inline uint32_t ld32(const uint8_t* p) { return *reinterpret_cast<const uint32_t*>(p); }
__device__ inline uint32_t ld32_u16(const uint8_t* p) {
  return static_cast<uint32_t>(ld16(p)) | (static_cast<uint32_t>(ld16(p + 2)) << 16);
}

// Byte i of the result is 1 where bit i of the 4-bit `bits` is set (the shifted copies do not overlap).
__device__ inline uint32_t byte_bits4(uint32_t bits) { return (bits * 0x00204081u) & 0x01010101u; }

// One weight block's share of a stage: the 32 values of sub-block sb (0 … 7) of tile row r, decoded to
// int8 into a[r][32·sb …] (pitch kLd), with the block's scales into ad / aux (layout of Smem). `blk` is
// the Q8_0 block of sb, or the IQ2_XXS / Q2_K super-block of the stage (global or shared memory);
// !valid (a row past the matrix) writes zeros. Shared by both GEMM kernels.
template <GgmlType T>
__device__ inline void decode_a(const uint8_t* blk, int r, int sb, bool valid, int8_t* a, float* ad, uint8_t* aux,
                                const uint64_t* grid, const uint8_t* signs) {
  // Two 16-byte stores per block (a quarter warp's 8 stores then hit 8 rows or 4 rows × 2 halves).
  uint4* dst = reinterpret_cast<uint4*>(a + r * kLd + 32 * sb);
  uint32_t w[8];
  if constexpr (T == GgmlType::Q8_0) {
    if (!valid) {
      dst[0] = dst[1] = make_uint4(0, 0, 0, 0);
      ad[r * 8 + sb] = 0;
      return;
    }
    ad[r * 8 + sb] = f16v(ld16(blk));
#pragma unroll
    for (int q = 0; q < 8; ++q) w[q] = ld32_u16(blk + 2 + 4 * q);
  } else if constexpr (T == GgmlType::IQ2_XXS) {
    if (!valid) {
      dst[0] = dst[1] = make_uint4(0, 0, 0, 0);
      aux[r * 8 + sb] = 0;
      if (sb == 0) ad[r] = 0;
      return;
    }
    if (sb == 0) ad[r] = f16v(ld16(blk));
    const uint32_t a0 = ld32_u16(blk + 2 + 8 * sb), a1 = ld32_u16(blk + 6 + 8 * sb);
    aux[r * 8 + sb] = static_cast<uint8_t>(2 * (a1 >> 28) + 1);
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const uint64_t gr = grid[(a0 >> (8 * c)) & 0xff];
      const uint32_t sg = signs[(a1 >> (7 * c)) & 127];
      const uint32_t slo = byte_bits4(sg & 15), shi = byte_bits4(sg >> 4);
      // Grid bytes are 8, 25 or 43: (g ^ 0xFF) + 1 = 256 − g ≤ 248 is −g in the byte, no carry out.
      w[2 * c] = (static_cast<uint32_t>(gr) ^ (slo * 0xFFu)) + slo;
      w[2 * c + 1] = (static_cast<uint32_t>(gr >> 32) ^ (shi * 0xFFu)) + shi;
    }
  } else {  // Q2_K: element 32·sb + k sits in byte 16 + 32h + k, bits 2l, with sb = 4h + l
    if (!valid) {
      dst[0] = dst[1] = make_uint4(0, 0, 0, 0);
      aux[r * 16 + 2 * sb] = 0;
      aux[r * 16 + 2 * sb + 1] = 0;
      if (sb == 0) ad[r] = ad[kBM + r] = 0;
      return;
    }
    if (sb == 0) {
      ad[r] = f16v(ld16(blk + 80));
      ad[kBM + r] = f16v(ld16(blk + 82));
    }
    const int h = sb / 4, l = sb % 4;
    const uint32_t sc0 = blk[2 * sb] & 15, sc1 = blk[2 * sb + 1] & 15;
    aux[r * 16 + 2 * sb] = blk[2 * sb] >> 4;
    aux[r * 16 + 2 * sb + 1] = blk[2 * sb + 1] >> 4;
#pragma unroll
    for (int q = 0; q < 8; ++q) {
      const uint32_t v = (ld32(blk + 16 + 32 * h + 4 * q) >> (2 * l)) & 0x03030303u;
      w[q] = v * (q < 4 ? sc0 : sc1);  // bytes q·scale ≤ 45: no carry between bytes
    }
  }
  dst[0] = make_uint4(w[0], w[1], w[2], w[3]);
  dst[1] = make_uint4(w[4], w[5], w[6], w[7]);
}

// Raw stages are copied as the 16-byte chunks of a window that starts at the data's address rounded down
// to 16 bytes (the data lands `shift` = address & 15 bytes into its row of the buffer; a chunk reads
// nothing past the data's end, and at most 15 bytes before its start, inside the same tensor or buffer).
// Weights per row and stage: 8 Q8_0 blocks (272 B, shift even: 18 chunks), one IQ2_XXS super-block
// (66 B: 5 chunks) or one Q2_K super-block (84 B, shift a multiple of 4: 6 chunks). Activations per
// vector: 8 Q8_0 act blocks (288 B, shift 0) or one Q8_K block (292 B, shift a multiple of 4), 19 chunks.
constexpr int kRawB = 304;  // activation row pitch of a raw stage (76 words: conflict-free fragment reads)

template <GgmlType T>
constexpr int stage_w_bytes() {
  return T == GgmlType::Q8_0 ? 8 * sizeof(BlockQ8_0) : T == GgmlType::IQ2_XXS ? sizeof(BlockIQ2_XXS) : sizeof(BlockQ2_K);
}
template <GgmlType T>
constexpr int stage_x_bytes() {
  return T == GgmlType::Q8_0 ? 8 * sizeof(BlockQ8_0Act) : sizeof(BlockQ8_K);
}
template <GgmlType T>
constexpr int raw_a_pitch() {  // bytes + largest shift, in whole chunks
  return (stage_w_bytes<T>() + (T == GgmlType::Q2_K ? 12 : 14) + 15) / 16 * 16;
}

__device__ inline unsigned smem_addr(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }
// 16 bytes into dst, the first n (1 … 16) read from src, the rest zero.
__device__ inline void cp_async16(void* dst, const void* src, int n) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(n) : "memory");
}
__device__ inline void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }

// Chunk k of the window of bytes [at, at + len) into dst (a raw buffer row, 16-byte aligned).
__device__ inline void copy_chunk(uint8_t* dst, const uint8_t* at, int len, int k) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(at), lo = (a & ~uintptr_t{15}) + 16 * k;
  const int64_t left = static_cast<int64_t>(a + len) - static_cast<int64_t>(lo);
  if (left > 0) cp_async16(dst + 16 * k, reinterpret_cast<const uint8_t*>(lo), left < 16 ? static_cast<int>(left) : 16);
}

__device__ inline void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

// d = a·b + (c, c, c, c).
__device__ inline void mma_s8_from(int (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2], int c) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};\n"
      : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(c), "r"(c), "r"(c), "r"(c));
}

// Row r's weight bytes of stage kb.
template <GgmlType T>
__device__ inline const uint8_t* stage_w(const GemmParams& p, const uint8_t* wbase, int64_t row, int64_t kb) {
  return wbase + static_cast<uint64_t>(row) * p.row_bytes + kb * stage_w_bytes<T>();
}

}  // namespace ds4::backend::cuda
