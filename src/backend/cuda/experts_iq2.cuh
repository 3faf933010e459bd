// experts_iq2.cuh — IQ2_XXS sub-blocks decoded into int8 MMA fragments by lookup tables in shared memory,
// for gemm_experts.cu's experts_fast_kernel (CudaBackendOptions::gemm_experts 34).
//
// Why: the SASS of variant 32 (docs/PERF.md, session 10) spends ~94 instructions per IQ2_XXS sub-block at 6
// fragments: ~21 ALU per row to expand a 7-bit sign index (parity, byte masks, negation) and 4 IMAD per
// MMA for the per-32 scale ls (ic += ls·c; ls·grid ≤ 1,333 does not fit int8). Here the 8 grid magnitudes
// of an entry (8, 25 or 43) as 2-bit codes and the 8 signs of a sign index (parity included) are two 32-bit
// selector words from two tables; their OR selects each value's byte from {+8, +25, +43} / {−8, −25, −43}
// with one PRMT per 4 values (nibble j = code | sign << 2). (Removed after session 11's H200 runs: the split
// form — the scale folded into lo/hi values by a third table, two MMA chains: fewer instructions, slower.)
// Table sizes: codes 256 × 32 copies (lane l reads copy l: the 32 lanes' random 4-byte lookups hit 32
// different banks), signs 128 × 32 copies = 48 KB.
// Deliberately not here: the stage loop, copies and float terms (gemm_experts.cu); the CPU decode
// (src/quant/dot_ref.cpp dot_iq2_xxs_ref, the oracle).
#pragma once

#include <cstdint>

#include "backend/cuda/common.cuh"

namespace ds4::backend::cuda {

inline constexpr int kIq2TabCopies = 32;

// The tables once (built on the host from kIq2xxsGrid / kKsignsIq2xs: gemm_experts.cu build_iq2_tables).
struct Iq2TableSrc {
  uint32_t codes[256];  // grid entry i: nibble j = code of byte j (8 → 0, 25 → 1, 43 → 2)
  uint32_t signs[128];  // sign index si: nibble j = 4 if value j is negative (kKsignsIq2xs[si] bit j), else 0
};

// The tables in shared memory, replicated (see the file comment).
struct Iq2Tables {
  uint32_t codes[256 * kIq2TabCopies];
  uint32_t signs[128 * kIq2TabCopies];
};

// Every thread of a block of `threads` copies its share of the tables from `src` (constant memory).
__device__ inline void fill_iq2_tables(Iq2Tables& tb, const Iq2TableSrc& src, int tid, int threads) {
  for (int i = tid; i < 256 * kIq2TabCopies; i += threads) tb.codes[i] = src.codes[i / kIq2TabCopies];
  for (int i = tid; i < 128 * kIq2TabCopies; i += threads) tb.signs[i] = src.signs[i / kIq2TabCopies];
}

// Bytes of the magnitudes by code (byte 3 unused) and of their negatives (int8).
inline constexpr uint32_t kIq2Pos = 0x002B1908u, kIq2Neg = 0x00D5E7F8u;

// The selector word of a lane's 8 values: grid entry idx under sign index si; nibble j (value j) = code |
// sign << 2 — PRMT's source byte (0 … 2 of the positive word, 4 … 6 of the negative one). Values 0 … 3
// use the low 16 bits, 4 … 7 the word shifted by 16 (PRMT reads only the low 16 bits; no nibble has bit 3).
__device__ __forceinline__ uint32_t iq2_sel(const Iq2Tables& tb, uint32_t idx, uint32_t si, int lane) {
  return tb.codes[kIq2TabCopies * idx + lane] | tb.signs[kIq2TabCopies * si + lane];
}

// The 4 int8 values of 4 selector nibbles from the positive / negative byte words.
__device__ __forceinline__ uint32_t iq2_pick(uint32_t pos, uint32_t neg, uint32_t sel) {
  return __byte_perm(pos, neg, sel);
}

}  // namespace ds4::backend::cuda
