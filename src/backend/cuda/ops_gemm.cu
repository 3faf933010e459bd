// ops_gemm.cu — tensor-core GEMM for prefill: Y[n][rows] = W[rows][cols] · X[n][cols] with quantized
// weights (Q8_0, IQ2_XXS, Q2_K) against the ds4 quantized activations (Q8_0 act / Q8_K), using int8
// MMA (mma.sync m16n8k32 s8·s8→s32) and the per-block scales of the formats.
//
// Numerics (ds4, MatmulNumerics::ds4): every integer block sum the CPU forms (Q8_0: Σq_w·q_x over 32;
// IQ2_XXS: Σ_g ls_g·Σ_32 w·q_x over a super-block; Q2_K: Σ (scale·q)·q_x and Σ min·bsum) is formed
// exactly (int32 MMA accumulators; weights decoded to int8 in shared memory: IQ2_XXS grid values ≤ 43
// with signs, Q2_K q·scale ≤ 45), then scaled by the same float products in the same order as
// src/quant/dot_ref.cpp (Q8_0: (d_w·d_x)·isum; K-quants: (d_x·d_w)·isum − (d_x·dmin_w)·summs), added
// per output in the CPU's block order (below), so the result equals the CPU op bit for bit.
//
// Two kernels, same bits (tests/cuda/test_cuda_gemm.cpp):
//  - gemm2_kernel (default; CudaBackendOptions::gemm_pipelined): raw weight and activation bytes of the
//    next 256-value stage copied by cp.async while this one is decoded and multiplied; dense batches of
//    more than 96 vectors in 128 × 128 tiles (16 warps of 32 × 32), grouped experts and smaller batches
//    in 128 × 64 tiles (8 warps, two blocks per SM for the K-quants); ldmatrix weight fragments,
//    activations read where they were copied. Needs 16-byte aligned weights and activation rows
//    (gemm2_fits); anything else runs
//  - gemm_kernel (gemm_pipelined = false, and the fallback): 128 weight rows × 64 vectors × 256 values
//    per stage, loaded and decoded by all threads, then multiplied; 8 warps as 4 (rows) × 2 (vectors),
//    each 32×32 = 2 m16 × 4 n8 fragments.
// (Dense Q8_0 batches take gemm_q8.cu instead, by default; CudaBackendOptions::gemm_q8 = 0 keeps them
// here: the same bits, no decode pass.) Both run dense (one matrix, n vectors) or grouped by expert (routed experts: a tile list over vectors
// sorted by expert, built on the device by group_by_expert, so each expert's rows are read once per 64
// of its vectors instead of once per vector).
// Float order: the quantized GEMM sums its per-block terms in the CPU's block order, which the
// quantized matvec also uses, so a token's result is the same for any batch size and bit-identical to
// the CPU op. F16 weights (router, compressor, indexer, HC) run matmul_f16.cu's segment order; the F16
// kernel here is the previous lane order (lane-strided elements + warp butterfly, 16 vectors per weight
// read), kept for CudaBackendOptions::f16_segments = false.
// Deliberately not here: n < kGemmMinVectors (the matvec in ops_matmul.cu is faster for decode),
// exact numerics and F32/BF16 weights (matvec), Q4_K (matvec).
#include <string>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_impl.h"
#include "backend/cuda/experts_order.h"
#include "backend/cuda/gemm_tiles.cuh"
#include "backend/cuda/mma_s8.cuh"
#include "backend/cuda/moe_group.cuh"
#include "quant/blocks.h"
#include "quant/iq2xxs_tables.h"

namespace ds4::backend::cuda {

namespace {

__constant__ uint64_t c_grid[256];
__constant__ uint8_t c_signs[128];

constexpr int kThreads = 256;

// Shared memory of one block (dynamic; ~62 KB).
struct Smem {
  int8_t a[kBM * kLd];       // weights, int8, K-contiguous per row
  int8_t b[kBN * kLd];       // activations, int8, K-contiguous per vector
  float ad[kBM * 8];         // Q8_0: d_w per (row, 32-block); K-quants: [0,128) d_w, [128,256) dmin_w
  float bd[kBN * 8];         // Q8_0: d_x per (vector, 32-block); K-quants: [0,64) d_x
  uint8_t aux[kBM * 16];     // IQ2_XXS: ls per (row, 32-group); Q2_K: min per (row, 16-sub-block)
  int8_t blo[kBN * 16];      // Q2_K: bsum = 64·hi + lo, lo in [0,63], hi in [-32,31] (both int8)
  int8_t bhi[kBN * 16];
  uint64_t grid[256];
  uint8_t signs[128];
};

// Weight tile of stage kb (values 256·kb …) into smem: rows m0 … m0+127 of `wbase`.
template <GgmlType T>
__device__ inline void load_a(Smem& s, const GemmParams& p, const uint8_t* wbase, int64_t m0, int64_t kb) {
  for (int j = threadIdx.x; j < kBM * 8; j += kThreads) {
    const int r = j / 8, sb = j % 8;  // row, 32-value sub-block of the stage
    const bool valid = m0 + r < p.rows;
    const uint8_t* row = wbase + static_cast<uint64_t>(valid ? m0 + r : 0) * p.row_bytes;
    const uint8_t* blk = T == GgmlType::Q8_0 ? row + (kb * 8 + sb) * sizeof(BlockQ8_0)
                         : T == GgmlType::IQ2_XXS ? row + kb * sizeof(BlockIQ2_XXS)
                                                  : row + kb * sizeof(BlockQ2_K);
    decode_a<T>(blk, r, sb, valid, s.a, s.ad, s.aux, s.grid, s.signs);
  }
}

// Activation tile of stage kb into smem: columns c of the tile read activation row `arow[c]` (< 0: none).
template <GgmlType T>
__device__ inline void load_b(Smem& s, const GemmParams& p, const int64_t* arow, int64_t kb) {
  for (int j = threadIdx.x; j < kBN * 8; j += kThreads) {
    const int c = j / 8, sb = j % 8;
    uint32_t* dst = reinterpret_cast<uint32_t*>(s.b + c * kLd + 32 * sb);
    if (arow[c] < 0) {
      for (int q = 0; q < 8; ++q) dst[q] = 0;
      if constexpr (T == GgmlType::Q8_0) {
        s.bd[c * 8 + sb] = 0;
      } else {
        if (sb == 0) s.bd[c] = 0;
        if constexpr (T == GgmlType::Q2_K) {
          s.blo[c * 16 + 2 * sb] = s.blo[c * 16 + 2 * sb + 1] = 0;
          s.bhi[c * 16 + 2 * sb] = s.bhi[c * 16 + 2 * sb + 1] = 0;
        }
      }
      continue;
    }
    const uint8_t* act = p.act + static_cast<uint64_t>(arow[c]) * p.act_stride;
    if constexpr (T == GgmlType::Q8_0) {
      const uint8_t* blk = act + (kb * 8 + sb) * sizeof(BlockQ8_0Act);
      s.bd[c * 8 + sb] = *reinterpret_cast<const float*>(blk);
#pragma unroll
      for (int q = 0; q < 8; ++q) dst[q] = ld32(blk + 4 + 4 * q);
    } else {
      const uint8_t* blk = act + kb * sizeof(BlockQ8_K);
      if (sb == 0) s.bd[c] = *reinterpret_cast<const float*>(blk);
#pragma unroll
      for (int q = 0; q < 8; ++q) dst[q] = ld32(blk + 4 + 32 * sb + 4 * q);
      if constexpr (T == GgmlType::Q2_K) {
        const int16_t* bs = reinterpret_cast<const int16_t*>(blk + 260);
        for (int h = 0; h < 2; ++h) {
          const int v = bs[2 * sb + h];
          s.blo[c * 16 + 2 * sb + h] = static_cast<int8_t>(v & 63);
          s.bhi[c * 16 + 2 * sb + h] = static_cast<int8_t>(v >> 6);  // arithmetic shift: v = 64·hi + lo
        }
      }
    }
  }
}

template <GgmlType T>
__global__ void __launch_bounds__(kThreads) gemm_kernel(GemmParams p) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Smem& s = *reinterpret_cast<Smem*>(smem_raw);
  __shared__ int64_t arow[kBN], orow[kBN];

  const int64_t m0 = static_cast<int64_t>(blockIdx.x) * kBM;
  const uint8_t* wbase = p.w;
  if (p.tiles) {
    if (static_cast<int>(blockIdx.y) >= *p.n_tiles) return;
    const int32_t* tl = p.tiles + 3 * blockIdx.y;
    wbase += static_cast<uint64_t>(tl[0]) * p.expert_bytes;
    for (int c = threadIdx.x; c < kBN; c += kThreads) {
      const int64_t v = c < tl[2] ? p.order[tl[1] + c] : -1;
      arow[c] = v < 0 ? -1 : v / p.x_div;
      orow[c] = v;
    }
  } else {
    for (int c = threadIdx.x; c < kBN; c += kThreads) {
      const int64_t v = static_cast<int64_t>(blockIdx.y) * kBN + c;
      arow[c] = v < p.n_vec ? v / p.x_div : -1;
      orow[c] = v < p.n_vec ? v : -1;
    }
  }
  if constexpr (T == GgmlType::IQ2_XXS) {
    for (int i = threadIdx.x; i < 256; i += kThreads) s.grid[i] = c_grid[i];
    for (int i = threadIdx.x; i < 128; i += kThreads) s.signs[i] = c_signs[i];
  }
  __syncthreads();

  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int g = lane / 4, t = lane % 4;
  const int wm = (warp % 4) * 32, wn = (warp / 4) * 32;
  float acc[2][4][4] = {};
  int ic[2][4][4];  // integer sums of the current 32-block (Q8_0) or super-block (K-quants)

  const int64_t nkb = p.cols / kBK;
  for (int64_t kb = 0; kb < nkb; ++kb) {
    load_a<T>(s, p, wbase, m0, kb);
    load_b<T>(s, p, arow, kb);
    __syncthreads();
    if constexpr (T != GgmlType::Q8_0) {
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
          for (int q = 0; q < 4; ++q) ic[i][j][q] = 0;
    }
#pragma unroll 2
    for (int sb = 0; sb < 8; ++sb) {
      uint32_t af[2][4], bf[4][2];
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int8_t* base = s.a + (wm + 16 * i + g) * kLd + 32 * sb + 4 * t;
        af[i][0] = *reinterpret_cast<const uint32_t*>(base);
        af[i][1] = *reinterpret_cast<const uint32_t*>(base + 8 * kLd);
        af[i][2] = *reinterpret_cast<const uint32_t*>(base + 16);
        af[i][3] = *reinterpret_cast<const uint32_t*>(base + 8 * kLd + 16);
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int8_t* base = s.b + (wn + 8 * j + g) * kLd + 32 * sb + 4 * t;
        bf[j][0] = *reinterpret_cast<const uint32_t*>(base);
        bf[j][1] = *reinterpret_cast<const uint32_t*>(base + 16);
      }
      if constexpr (T == GgmlType::Q8_0) {
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            int c[4] = {0, 0, 0, 0};
            mma_s8(c, af[i], bf[j]);
#pragma unroll
            for (int q = 0; q < 4; ++q) {
              const int row = wm + 16 * i + g + (q >= 2 ? 8 : 0);
              const int col = wn + 8 * j + 2 * t + (q & 1);
              // |isum| ≤ 32·128·128 = 2^19: exact in small_i2f; (d_w·d_x)·isum as dot_ref.
              acc[i][j][q] += (s.ad[row * 8 + sb] * s.bd[col * 8 + sb]) * small_i2f(c[q]);
            }
          }
      } else if constexpr (T == GgmlType::IQ2_XXS) {
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            int c[4] = {0, 0, 0, 0};
            mma_s8(c, af[i], bf[j]);
#pragma unroll
            for (int q = 0; q < 4; ++q) {
              const int row = wm + 16 * i + g + (q >= 2 ? 8 : 0);
              ic[i][j][q] += static_cast<int>(s.aux[row * 8 + sb]) * c[q];
            }
          }
      } else {  // Q2_K: scales folded into the int8 weights, one integer sum per super-block
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) mma_s8(ic[i][j], af[i], bf[j]);
      }
    }
    if constexpr (T == GgmlType::IQ2_XXS) {
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
          for (int q = 0; q < 4; ++q) {
            const int row = wm + 16 * i + g + (q >= 2 ? 8 : 0);
            const int col = wn + 8 * j + 2 * t + (q & 1);
            acc[i][j][q] += (s.ad[row] * s.bd[col]) * static_cast<float>(ic[i][j][q]);
          }
    } else if constexpr (T == GgmlType::Q2_K) {
      // summs = Σ_16 min·bsum = 64·Σ min·hi + Σ min·lo: two MMAs with K 16 of 32 used (the rest zero).
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const uint8_t* mb = s.aux + (wm + 16 * i + g) * 16 + 4 * t;
        const uint32_t am[4] = {*reinterpret_cast<const uint32_t*>(mb), *reinterpret_cast<const uint32_t*>(mb + 8 * 16),
                                0u, 0u};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int col0 = wn + 8 * j + g;
          const uint32_t blo[2] = {*reinterpret_cast<const uint32_t*>(s.blo + col0 * 16 + 4 * t), 0u};
          const uint32_t bhi[2] = {*reinterpret_cast<const uint32_t*>(s.bhi + col0 * 16 + 4 * t), 0u};
          int lo[4] = {0, 0, 0, 0}, hi[4] = {0, 0, 0, 0};
          mma_s8(lo, am, blo);
          mma_s8(hi, am, bhi);
#pragma unroll
          for (int q = 0; q < 4; ++q) {
            const int row = wm + 16 * i + g + (q >= 2 ? 8 : 0);
            const int col = wn + 8 * j + 2 * t + (q & 1);
            const int summs = 64 * hi[q] + lo[q];
            const float dall = s.bd[col] * s.ad[row];
            const float dmin = s.bd[col] * s.ad[kBM + row];
            acc[i][j][q] += dall * static_cast<float>(ic[i][j][q]) - dmin * static_cast<float>(summs);
          }
        }
      }
    }
    __syncthreads();  // the next stage overwrites the tiles
  }

#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int row = wm + 16 * i + g + (q >= 2 ? 8 : 0);
        const int col = wn + 8 * j + 2 * t + (q & 1);
        const int64_t o = orow[col];
        if (o < 0 || m0 + row >= p.rows) continue;
        float v = acc[i][j][q];
        if constexpr (T == GgmlType::IQ2_XXS) v = 0.125f * v;  // once per row, as dot_iq2_xxs_ref
        p.y[o * p.y_stride + m0 + row] = v;
      }
}

// ---- pipelined GEMM (CudaBackendOptions::gemm_pipelined, the default) ----
// The same integer block sums and the same float expressions in the same order as gemm_kernel (so the
// same bits, bit-identical to the CPU op), arranged for the tensor cores' sake:
//  - the raw bytes of stage kb + 1 (weights and activations, as stored) are copied by cp.async into the
//    second of two raw buffers while stage kb is decoded and multiplied, so global latency is hidden;
//  - dense batches take BN = 128 vectors per block (a weight tile is decoded once per 128 vectors) with
//    16 warps of 32 × 32 outputs (4 per scheduler: the decode, copy and MMA phases hide each other's
//    latency better than 8 warps of 32 × 64 did: with decode_a's 16-byte stores, +6–14 % Q8_0 and
//    +17 % Q2_K on the H200); the
//    grouped experts keep BN = 64 (plan_tiles' tiles), 8 warps, ≤ 128 registers so that two K-quant
//    blocks share an SM (one block per SM measured −17 % on the grouped experts);
//  - the MMA reads the activations straight from the copied blocks (row pitch 304 B = 76 words: the 8
//    vectors of a fragment land on 8 distinct 4-bank groups), weights are decoded to int8 once per stage
//    (decode_a, the code of gemm_kernel) and loaded with ldmatrix (pitch kLd: conflict-free);
//  - Q8_0: the MMA accumulator starts at 0x4B400000, so its result read as a float is already
//    12582912 + isum (small_i2f without its integer add: 4 FP32 operations per output and 32-value block
//    remain — fsub, d_w·d_x, ·isum, += — the bound of this epilogue at ~0.5 POP/s on the H200).
// Needs the copy sources aligned (gemm2_fits); otherwise gemm() runs gemm_kernel.

// Threads of a BN-vector block: 4 (rows) × BN/32 (vectors) warps of 32 × 32 outputs. BN = 128: 16 warps,
// one block per SM (shared memory); BN = 64: 8 warps, two blocks per SM where the shared memory allows.
template <int BN>
constexpr int kThreads2 = 4 * BN;

template <GgmlType T, int BN>
struct Smem2 {
  alignas(16) uint8_t raw_a[2][kBM * raw_a_pitch<T>()];
  alignas(16) uint8_t raw_b[2][BN * kRawB];
  alignas(16) int8_t a[kBM * kLd];  // decoded weights, as Smem::a
  float ad[kBM * 8];                // as Smem::ad
  alignas(8) float bd[8 * BN];      // Q8_0: d_x per [32-block][vector]; K-quants: [vector]
  uint8_t aux[kBM * 16];            // as Smem::aux
  int8_t blo[BN * 16];              // as Smem::blo / bhi
  int8_t bhi[BN * 16];
  uint64_t grid[256];
  uint8_t signs[128];
};

// Issues the cp.async copies of stage kb's raw bytes into raw buffer `slot` (rows past the matrix and
// vectors without an activation row are skipped: their tile entries are never stored).
template <GgmlType T, int BN>
__device__ inline void copy_stage(Smem2<T, BN>& s, int slot, const GemmParams& p, const uint8_t* wbase, int64_t m0,
                                  const int64_t* arow, int64_t kb) {
  constexpr int PA = raw_a_pitch<T>(), CA = PA / 16, CB = kRawB / 16;
  uint8_t* ra = s.raw_a[slot];
  for (int j = threadIdx.x; j < kBM * CA; j += kThreads2<BN>) {
    const int r = j / CA, k = j % CA;
    if (m0 + r < p.rows) copy_chunk(ra + r * PA, stage_w<T>(p, wbase, m0 + r, kb), stage_w_bytes<T>(), k);
  }
  uint8_t* rb = s.raw_b[slot];
  for (int j = threadIdx.x; j < BN * CB; j += kThreads2<BN>) {
    const int c = j / CB, k = j % CB;
    if (arow[c] >= 0)
      copy_chunk(rb + c * kRawB, p.act + static_cast<uint64_t>(arow[c]) * p.act_stride + kb * stage_x_bytes<T>(),
                 stage_x_bytes<T>(), k);
  }
}

// Decodes raw buffer `slot` (stage kb): weights to int8 with their scales (decode_a, the code of
// gemm_kernel), activation scales (and the Q2_K bsums split as load_b does); the activation values stay
// where they are, `bsh` bytes into each vector's row.
template <GgmlType T, int BN>
__device__ inline void decode_stage(Smem2<T, BN>& s, int slot, const GemmParams& p, const uint8_t* wbase, int64_t m0,
                                    const int64_t* arow, int64_t kb, int bsh) {
  constexpr int PA = raw_a_pitch<T>();
  for (int j = threadIdx.x; j < kBM * 8; j += kThreads2<BN>) {
    const int r = j / 8, sb = j % 8;
    const bool valid = m0 + r < p.rows;
    const uint8_t* blk = s.raw_a[slot] + r * PA;
    if (valid) blk += reinterpret_cast<uintptr_t>(stage_w<T>(p, wbase, m0 + r, kb)) & 15;
    if constexpr (T == GgmlType::Q8_0) blk += sizeof(BlockQ8_0) * sb;
    decode_a<T>(blk, r, sb, valid, s.a, s.ad, s.aux, s.grid, s.signs);
  }
  const uint8_t* rb = s.raw_b[slot] + bsh;
  if constexpr (T == GgmlType::Q8_0) {
    for (int j = threadIdx.x; j < BN * 8; j += kThreads2<BN>) {
      const int c = j % BN, sb = j / BN;
      s.bd[sb * BN + c] = arow[c] < 0 ? 0.0f : *reinterpret_cast<const float*>(rb + c * kRawB + 36 * sb);
    }
  } else {
    for (int c = threadIdx.x; c < BN; c += kThreads2<BN>)
      s.bd[c] = arow[c] < 0 ? 0.0f : *reinterpret_cast<const float*>(rb + c * kRawB);
    if constexpr (T == GgmlType::Q2_K) {
      for (int j = threadIdx.x; j < BN * 16; j += kThreads2<BN>) {
        const int c = j / 16, k = j % 16;
        const int v = arow[c] < 0 ? 0 : *reinterpret_cast<const int16_t*>(rb + c * kRawB + 260 + 2 * k);
        s.blo[j] = static_cast<int8_t>(v & 63);
        s.bhi[j] = static_cast<int8_t>(v >> 6);  // arithmetic shift: v = 64·hi + lo
      }
    }
  }
}

// One stage's MMAs and K-quant block terms of a warp whose first NJA n8 fragments hold vectors (NJA = 4
// or 2; fragments past a tile's vectors are skipped: their outputs are never stored).
template <GgmlType T, int BN, int NJA>
__device__ __forceinline__ void stage_mma(Smem2<T, BN>& s, const uint8_t* rb, int wm, int wn, int lane,
                                          float (&acc)[2][4][4], int (&ic)[2][4][4]) {
  const int g = lane / 4, t = lane % 4;
  if constexpr (T != GgmlType::Q8_0) {
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < NJA; ++j)
#pragma unroll
        for (int q = 0; q < 4; ++q) ic[i][j][q] = 0;
  }
#pragma unroll 2
  for (int sb = 0; sb < 8; ++sb) {
    uint32_t af[2][4], bf[NJA][2];
#pragma unroll
    for (int i = 0; i < 2; ++i) ldmatrix_x4(af[i], s.a + (wm + 16 * i + (lane & 15)) * kLd + 32 * sb + 16 * (lane >> 4));
#pragma unroll
    for (int j = 0; j < NJA; ++j) {
      // Q8_0 act block sb: d at 36·sb, values from 36·sb + 4; Q8_K: values from 4 + 32·sb.
      const uint8_t* b = rb + (wn + 8 * j + g) * kRawB + 4 * t + (T == GgmlType::Q8_0 ? 36 * sb + 4 : 4 + 32 * sb);
      bf[j][0] = ld32(b);
      bf[j][1] = ld32(b + 16);
    }
    if constexpr (T == GgmlType::Q8_0) {
      float da[2][2];
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) da[i][h] = s.ad[(wm + 16 * i + g + 8 * h) * 8 + sb];
#pragma unroll
      for (int j = 0; j < NJA; ++j) {
        const float2 db = *reinterpret_cast<const float2*>(s.bd + sb * BN + wn + 8 * j + 2 * t);
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          int c[4];
          mma_s8_from(c, af[i], bf[j], 0x4B400000);
#pragma unroll
          for (int q = 0; q < 4; ++q) {
            // |isum| ≤ 2^19: c as a float is 12582912 + isum exactly; (d_w·d_x)·isum as dot_ref.
            const float isum = __int_as_float(c[q]) - 12582912.0f;
            acc[i][j][q] += (da[i][q >> 1] * ((q & 1) ? db.y : db.x)) * isum;
          }
        }
      }
    } else if constexpr (T == GgmlType::IQ2_XXS) {
      int ls[2][2];
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) ls[i][h] = s.aux[(wm + 16 * i + g + 8 * h) * 8 + sb];
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < NJA; ++j) {
          int c[4];
          mma_s8_from(c, af[i], bf[j], 0);
#pragma unroll
          for (int q = 0; q < 4; ++q) ic[i][j][q] += ls[i][q >> 1] * c[q];
        }
    } else {  // Q2_K: scales folded into the int8 weights, one integer sum per super-block
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < NJA; ++j) mma_s8(ic[i][j], af[i], bf[j]);
    }
  }
  if constexpr (T == GgmlType::IQ2_XXS) {
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < NJA; ++j)
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const int row = wm + 16 * i + g + (q >= 2 ? 8 : 0);
          const int col = wn + 8 * j + 2 * t + (q & 1);
          acc[i][j][q] += (s.ad[row] * s.bd[col]) * static_cast<float>(ic[i][j][q]);
        }
  } else if constexpr (T == GgmlType::Q2_K) {
    // summs = Σ_16 min·bsum = 64·Σ min·hi + Σ min·lo, as gemm_kernel.
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const uint8_t* mb = s.aux + (wm + 16 * i + g) * 16 + 4 * t;
      const uint32_t am[4] = {ld32(mb), ld32(mb + 8 * 16), 0u, 0u};
#pragma unroll
      for (int j = 0; j < NJA; ++j) {
        const int col0 = wn + 8 * j + g;
        const uint32_t blo[2] = {*reinterpret_cast<const uint32_t*>(s.blo + col0 * 16 + 4 * t), 0u};
        const uint32_t bhi[2] = {*reinterpret_cast<const uint32_t*>(s.bhi + col0 * 16 + 4 * t), 0u};
        int lo[4] = {0, 0, 0, 0}, hi[4] = {0, 0, 0, 0};
        mma_s8(lo, am, blo);
        mma_s8(hi, am, bhi);
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const int row = wm + 16 * i + g + (q >= 2 ? 8 : 0);
          const int col = wn + 8 * j + 2 * t + (q & 1);
          const int summs = 64 * hi[q] + lo[q];
          const float dall = s.bd[col] * s.ad[row];
          const float dmin = s.bd[col] * s.ad[kBM + row];
          acc[i][j][q] += dall * static_cast<float>(ic[i][j][q]) - dmin * static_cast<float>(summs);
        }
      }
    }
  }
}

template <GgmlType T, int BN>
__global__ void __launch_bounds__(kThreads2<BN>, BN == 64 ? 2 : 1) gemm2_kernel(GemmParams p) {
  static_assert(BN == 64 || BN == 128, "warps are 4 (rows) × BN/32 (vectors), each 32 × 32");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Smem2<T, BN>& s = *reinterpret_cast<Smem2<T, BN>*>(smem_raw);
  __shared__ int64_t arow[BN], orow[BN];

  const int64_t m0 = static_cast<int64_t>(blockIdx.x) * kBM;
  const uint8_t* wbase = p.w;
  if (p.tiles) {
    if (static_cast<int>(blockIdx.y) >= *p.n_tiles) return;
    const int32_t* tl = p.tiles + 3 * blockIdx.y;
    wbase += static_cast<uint64_t>(tl[0]) * p.expert_bytes;
    for (int c = threadIdx.x; c < BN; c += kThreads2<BN>) {
      const int64_t v = c < tl[2] ? p.order[tl[1] + c] : -1;
      arow[c] = v < 0 ? -1 : v / p.x_div;
      orow[c] = v;
    }
  } else {
    for (int c = threadIdx.x; c < BN; c += kThreads2<BN>) {
      const int64_t v = static_cast<int64_t>(blockIdx.y) * BN + c;
      arow[c] = v < p.n_vec ? v / p.x_div : -1;
      orow[c] = v < p.n_vec ? v : -1;
    }
  }
  if constexpr (T == GgmlType::IQ2_XXS) {
    for (int i = threadIdx.x; i < 256; i += kThreads2<BN>) s.grid[i] = c_grid[i];
    for (int i = threadIdx.x; i < 128; i += kThreads2<BN>) s.signs[i] = c_signs[i];
  }
  __syncthreads();

  constexpr int NJ = 4;  // n8 fragments per warp
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int g = lane / 4, t = lane % 4;
  const int wm = (warp % 4) * 32, wn = (warp / 4) * 32;
  float acc[2][NJ][4] = {};
  int ic[2][NJ][4];  // integer sums of the current super-block (K-quants)
  const int nvec = p.tiles ? p.tiles[3 * blockIdx.y + 2]
                           : static_cast<int>(min(int64_t{BN}, p.n_vec - static_cast<int64_t>(blockIdx.y) * BN));
  const int nja = min(NJ, max(0, (nvec - wn + 7) / 8));  // this warp's n8 fragments that hold vectors

  const int64_t nkb = p.cols / kBK;
  copy_stage<T, BN>(s, 0, p, wbase, m0, arow, 0);
  cp_async_commit();
  for (int64_t kb = 0; kb < nkb; ++kb) {
    cp_async_wait_all();
    __syncthreads();  // stage kb landed for every thread; stage kb − 1's tiles are no longer read
    if (kb + 1 < nkb) copy_stage<T, BN>(s, static_cast<int>((kb + 1) & 1), p, wbase, m0, arow, kb + 1);
    cp_async_commit();
    // Every activation row starts on 16 bytes (gemm2_fits): one shift for the whole stage.
    const int bsh = static_cast<int>((reinterpret_cast<uintptr_t>(p.act) + kb * stage_x_bytes<T>()) & 15);
    decode_stage<T, BN>(s, static_cast<int>(kb & 1), p, wbase, m0, arow, kb, bsh);
    __syncthreads();
    const uint8_t* rb = s.raw_b[kb & 1] + bsh;
    // Warp-uniform: this warp's fragments that hold vectors (grouped tiles are often part full).
    if (nja > 2) {
      stage_mma<T, BN, 4>(s, rb, wm, wn, lane, acc, ic);
    } else if (nja > 0) {
      stage_mma<T, BN, 2>(s, rb, wm, wn, lane, acc, ic);
    }
  }

#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < NJ; ++j)
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int row = wm + 16 * i + g + (q >= 2 ? 8 : 0);
        const int col = wn + 8 * j + 2 * t + (q & 1);
        const int64_t o = orow[col];
        if (o < 0 || m0 + row >= p.rows) continue;
        float v = acc[i][j][q];
        if constexpr (T == GgmlType::IQ2_XXS) v = 0.125f * v;  // once per row, as dot_iq2_xxs_ref
        p.y[o * p.y_stride + m0 + row] = v;
      }
}

// ---- F16 weights · float activations, several vectors per weight read ----
// Only with CudaBackendOptions::f16_segments = false (the default runs matmul_f16.cu's segment order).
// The F16 matvec's arithmetic exactly (ops_matmul.cu gemv_f16_kernel: lane l sums elements l, l+32, …
// in order, then the xor-butterfly warp_sum), for kF16Vecs vectors per warp, so each weight row is
// read once per 16 vectors instead of once per vector and a token's result does not depend on how
// many vectors share the call (batch invariance; tests/cuda/test_cuda_batch.cpp).
constexpr int kF16Vecs = 16;
constexpr int kF16Warps = 4;  // output rows per block

__global__ void __launch_bounds__(kF16Warps * 32) gemm_f16_kernel(GemmParams p, const float* x, int64_t x_stride) {
  const int lane = threadIdx.x % kWarp;
  const int64_t o = static_cast<int64_t>(blockIdx.x) * kF16Warps + threadIdx.x / kWarp;
  const int64_t v0 = static_cast<int64_t>(blockIdx.y) * kF16Vecs;
  if (o >= p.rows) return;
  const int nv = static_cast<int>(p.n_vec - v0 < kF16Vecs ? p.n_vec - v0 : kF16Vecs);
  const uint16_t* h = reinterpret_cast<const uint16_t*>(p.w + static_cast<uint64_t>(o) * p.row_bytes);
  float acc[kF16Vecs];
#pragma unroll
  for (int v = 0; v < kF16Vecs; ++v) acc[v] = 0;
  for (int64_t e = lane; e < p.cols; e += kWarp) {
    const float w = f16v(h[e]);
#pragma unroll
    for (int v = 0; v < kF16Vecs; ++v)
      if (v < nv) acc[v] += w * x[(v0 + v) * x_stride + e];
  }
#pragma unroll
  for (int v = 0; v < kF16Vecs; ++v) {
    const float r = warp_sum(acc[v]);
    if (v < nv && lane == 0) p.y[(v0 + v) * p.y_stride + o] = r;
  }
}

// ---- grouping vectors by expert (counting sort on the device) ----

// cnt[e] = number of vectors with ids[v] == e (out-of-range ids are left out of every group).
__global__ void count_experts_kernel(const int32_t* ids, int64_t n, int32_t n_expert, int32_t* cnt) {
  const int64_t v = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (v >= n) return;
  const int32_t e = ids[v];
  if (e >= 0 && e < n_expert) atomicAdd(&cnt[e], 1);
}

// One thread: offsets, cursors and the tile list (n_expert is a few hundred).
__global__ void plan_tiles_kernel(const int32_t* cnt, int32_t n_expert, int32_t* start, int32_t* cursor,
                                  int32_t* tiles, int32_t* n_tiles) {
  int32_t off = 0, nt = 0;
  for (int32_t e = 0; e < n_expert; ++e) {
    start[e] = off;
    cursor[e] = off;
    for (int32_t f = 0; f < cnt[e]; f += kBN) {
      tiles[3 * nt] = e;
      tiles[3 * nt + 1] = off + f;
      tiles[3 * nt + 2] = min(kBN, cnt[e] - f);
      ++nt;
    }
    off += cnt[e];
  }
  *n_tiles = nt;
}

// Inclusive scan of v over the block's threads (kMaxGroupExperts, one warp per 32), and the block's total;
// warp_tot: kMaxGroupExperts / kWarp words of shared memory (free on entry; reused after the last barrier).
__device__ inline int32_t block_incl_scan(int32_t v, int32_t* warp_tot, int32_t* total) {
  const int lane = threadIdx.x % kWarp, w = threadIdx.x / kWarp;
  int32_t incl = v;  // inclusive scan within the warp
  for (int o = 1; o < kWarp; o <<= 1) {
    const int32_t x = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += x;
  }
  if (lane == kWarp - 1) warp_tot[w] = incl;
  __syncthreads();
  if (w == 0) {
    int32_t t = warp_tot[lane];
    for (int o = 1; o < kWarp; o <<= 1) {
      const int32_t x = __shfl_up_sync(0xffffffffu, t, o);
      if (lane >= o) t += x;
    }
    warp_tot[lane] = t;  // inclusive over the warps
  }
  __syncthreads();
  const int32_t r = incl + (w > 0 ? warp_tot[w - 1] : 0);
  *total = warp_tot[kMaxGroupExperts / kWarp - 1];
  __syncthreads();  // warp_tot free again
  return r;
}

// group_by_expert in one block (CudaBackendOptions::prefill_glue; n_expert ≤ kMaxGroupExperts): the pairs
// grouped by expert (moe_group.cuh: groups[g] = expert, first, count for the non-empty experts in expert
// order), then group g's tiles of ≤ kBN pairs written at the sum of the tile counts of the groups before it
// (a warp-shuffle scan over the groups' tile counts). The same tile list as count / plan / scatter above,
// whose plan walked the experts in one thread (46 µs per call at 256 experts on the H200).
// by_cost (CudaBackendOptions::gemm_experts 44; tile order does not change any sum): the tiles ordered by
// their pair count's class, dearest first — every full tile and each group's last tile of 49 … 64 pairs,
// then last tiles of 33 … 48, 17 … 32, 1 … 16 (8, 6, 4, 2 MMA fragments in gemm_experts.cu), each class in
// group order — so the items walked last by gemm_experts.cu's blocks (handed out in tile order) are the
// cheapest and the launch's tail shorter. Else group g's tiles at the sum of the groups' before it.
__global__ void __launch_bounds__(kMaxGroupExperts) group_tiles_kernel(const int32_t* ids, int32_t n, int32_t n_expert,
                                                                       int32_t* groups, int32_t* order, int32_t* tiles,
                                                                       int32_t* n_tiles, int by_cost) {
  constexpr int kWarps = kMaxGroupExperts / kWarp;
  static_assert(kWarps == kWarp, "one warp scans the warps' totals");
  __shared__ int32_t n_groups, warp_tot[kWarps];
  if (by_cost) {  // (gemm_experts 44: the ids of up to 16 pairs a thread loaded at once)
    group_pairs_block<16>(ids, n, n_expert, order, groups, &n_groups);
  } else {
    group_pairs_block(ids, n, n_expert, order, groups, &n_groups);
  }
  __syncthreads();  // groups (global) and n_groups written
  const int g = threadIdx.x;
  const int32_t cnt = g < n_groups ? groups[3 * g + 2] : 0, nt = (cnt + kBN - 1) / kBN;
  const int32_t e = g < n_groups ? groups[3 * g] : 0, first = g < n_groups ? groups[3 * g + 1] : 0;
  if (!by_cost) {
    int32_t total;
    const int32_t at = block_incl_scan(nt, warp_tot, &total) - nt;
    for (int32_t s = 0; s < nt; ++s) {
      tiles[3 * (at + s)] = e;
      tiles[3 * (at + s) + 1] = first + s * kBN;
      tiles[3 * (at + s) + 2] = min(kBN, cnt - s * kBN);
    }
    if (g == kMaxGroupExperts - 1) *n_tiles = total;
    return;
  }
  // Class 0: the full tiles and a last tile of > 48 pairs; classes 1 … 3: a last tile of 33 … 48, 17 … 32,
  // 1 … 16 pairs. One scan per class: this group's place in it and the class's total.
  const int32_t full = cnt / kBN, rem = cnt - full * kBN;
  const int cls = rem == 0 ? -1 : rem > 48 ? 0 : rem > 32 ? 1 : rem > 16 ? 2 : 3;
  int32_t at = 0, start = 0;  // this group's first tile of class 0 (or of its last tile's class)
  for (int c = 0; c < 4; ++c) {
    const int32_t mine = c == 0 ? full + (cls == 0) : cls == c;
    int32_t total;
    const int32_t excl = block_incl_scan(mine, warp_tot, &total) - mine;
    if (c == 0 || c == cls) at = start + excl;
    if (c == 0) {
      for (int32_t s = 0; s < full; ++s) {
        tiles[3 * (at + s)] = e;
        tiles[3 * (at + s) + 1] = first + s * kBN;
        tiles[3 * (at + s) + 2] = kBN;
      }
      at += full;  // the last tile, if of class 0
    }
    if (c == cls) {
      tiles[3 * at] = e;
      tiles[3 * at + 1] = first + full * kBN;
      tiles[3 * at + 2] = rem;
    }
    start += total;
  }
  if (g == kMaxGroupExperts - 1) *n_tiles = start;
}

__global__ void scatter_experts_kernel(const int32_t* ids, int64_t n, int32_t n_expert, int32_t* cursor,
                                       int32_t* order) {
  const int64_t v = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (v >= n) return;
  const int32_t e = ids[v];
  if (e >= 0 && e < n_expert) order[atomicAdd(&cursor[e], 1)] = static_cast<int32_t>(v);
}

// Whether gemm2_kernel runs `j`: its windows read at most 15 bytes before a row, so the weights and the
// activations start on 16 bytes; activation rows too (one shift per stage for all vectors: Q8_0 act rows
// always, Q8_K rows when cols is a multiple of 1024, as every Flash width); and its shared memory fits
// the device (Q8_0 × 128 vectors ~200 KiB: sm_90; smaller parts run gemm_kernel).
bool gemm2_fits(const GemvJob& j, const uint8_t* act, uint64_t act_stride, int smem_optin) {
  if (static_cast<size_t>(smem_optin) < sizeof(Smem2<GgmlType::Q8_0, 128>) + 2 * 128 * sizeof(int64_t)) return false;
  const auto w = reinterpret_cast<uintptr_t>(j.w.data), a = reinterpret_cast<uintptr_t>(act);
  return w % 16 == 0 && a % 16 == 0 && act_stride % 16 == 0;
}

template <GgmlType T, int BN>
void launch_gemm2(CudaBackend& be, const GemmParams& p, unsigned gy) {
  const size_t smem = sizeof(Smem2<T, BN>);
  if (!be.check(cudaFuncSetAttribute(gemm2_kernel<T, BN>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem), "gemm smem"))
    return;
  gemm2_kernel<T, BN><<<dim3(grid_for(p.rows, kBM), gy), kThreads2<BN>, smem, be.stream()>>>(p);
  be.launched("gemm (int8 tensor cores, pipelined)");
}

}  // namespace

cudaError_t upload_gemm_tables() {
  cudaError_t e = cudaMemcpyToSymbol(c_grid, kIq2xxsGrid, sizeof(kIq2xxsGrid));
  if (e != cudaSuccess) return e;
  return cudaMemcpyToSymbol(c_signs, kKsignsIq2xs, sizeof(kKsignsIq2xs));
}

bool gemm_supports(const GemvJob& j) {
  const GgmlType T = j.w.type;
  if (j.numerics != MatmulNumerics::ds4) return false;
  if (T == GgmlType::F16) return !j.ids && j.x_div == 1 && j.n_vec >= kGemmMinVectors;
  if (T != GgmlType::Q8_0 && T != GgmlType::IQ2_XXS && T != GgmlType::Q2_K) return false;
  if (j.w.cols % kBK != 0) return false;
  if (j.ids) return j.groups != nullptr;  // expert-indexed: only grouped
  return j.n_vec >= kGemmMinVectors;
}

bool CudaBackend::group_by_expert(const int32_t* ids, int64_t n, int32_t n_expert, ExpertGroups* g) {
  const int32_t max_tiles = static_cast<int32_t>(n / kBN) + n_expert;
  const uint64_t words = 3ull * n_expert + static_cast<uint64_t>(n) + 3ull * max_tiles + 1;
  if (!ensure(moe_groups_, words * sizeof(int32_t), "expert groups")) return false;
  int32_t* base = static_cast<int32_t*>(moe_groups_.ptr);
  int32_t* cnt = base;
  int32_t* start = cnt + n_expert;
  int32_t* cursor = start + n_expert;
  int32_t* order = cursor + n_expert;
  int32_t* tiles = order + n;
  int32_t* n_tiles = tiles + 3 * max_tiles;
  g->order = order;
  g->tiles = tiles;
  g->n_tiles = n_tiles;
  g->max_tiles = max_tiles;
  cudaStream_t s = stream();
  if (prefill_glue_ && n_expert <= kMaxGroupExperts && n < (int64_t{1} << 31)) {
    // cnt, start and cursor (3 · n_expert words) hold the groups.
    // gemm_experts 44: the tiles dearest first (group_tiles_kernel by_cost).
    group_tiles_kernel<<<1, kMaxGroupExperts, 0, s>>>(ids, static_cast<int32_t>(n), n_expert, cnt, order, tiles, n_tiles,
                                                      experts_tiles_by_cost(gemm_experts_) ? 1 : 0);
    return launched("group by expert");
  }
  if (!check(cudaMemsetAsync(cnt, 0, sizeof(int32_t) * n_expert, s), "expert groups memset")) return false;
  count_experts_kernel<<<grid_for(n, 256), 256, 0, s>>>(ids, n, n_expert, cnt);
  plan_tiles_kernel<<<1, 1, 0, s>>>(cnt, n_expert, start, cursor, tiles, n_tiles);
  scatter_experts_kernel<<<grid_for(n, 256), 256, 0, s>>>(ids, n, n_expert, cursor, order);
  return launched("group by expert");
}

void CudaBackend::gemm(const GemvJob& j, const uint8_t* act, uint64_t act_stride) {
  GemmParams p{};
  if (j.w.type == GgmlType::F16) {
    p.w = static_cast<const uint8_t*>(j.w.data);
    p.row_bytes = j.w.row_bytes;
    p.rows = j.w.rows;
    p.cols = j.w.cols;
    p.y = j.y;
    p.y_stride = j.y_stride;
    p.n_vec = j.n_vec;
    const unsigned gy = grid_for(j.n_vec, kF16Vecs);
    if (gy > 65535) {
      fail(invalid_argument("cuda gemm: " + std::to_string(j.n_vec) + " vectors exceed one launch"));
      return;
    }
    gemm_f16_kernel<<<dim3(grid_for(j.w.rows, kF16Warps), gy), kF16Warps * kWarp, 0, stream()>>>(p, j.x, j.x_stride);
    launched("gemm f16 (16 vectors per weight read)");
    return;
  }
  p.w = static_cast<const uint8_t*>(j.w.data);
  p.row_bytes = j.w.row_bytes;
  p.expert_bytes = j.expert_bytes;
  p.rows = j.w.rows;
  p.cols = j.w.cols;
  p.act = act;
  p.act_stride = act_stride;
  p.x_div = j.x_div;
  p.y = j.y;
  p.y_stride = j.y_stride;
  p.n_vec = j.n_vec;
  unsigned gy = grid_for(j.n_vec, kBN);
  if (j.groups) {
    p.order = j.groups->order;
    p.tiles = j.groups->tiles;
    p.n_tiles = j.groups->n_tiles;
    gy = static_cast<unsigned>(j.groups->max_tiles);
  }
  if (gy > 65535) {
    fail(invalid_argument("cuda gemm: " + std::to_string(j.n_vec) + " vectors exceed one launch"));
    return;
  }
  cudaStream_t s = stream();
  if (gemm_smem_optin_ < 0) {
    int v = 0;
    gemm_smem_optin_ = cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, device()) == cudaSuccess ? v : 0;
  }
  if (gemm_pipelined_ && gemm_q8_ != 0 && gemm_q8_fits(j, act, act_stride, gemm_smem_optin_)) {
    gemm_q8(j, act, act_stride, gemm_q8_);  // (dense Q8_0: the same bits as gemm2_kernel, faster on sm_90)
    return;
  }
  // (Grouped experts run from gemv() on gemm_experts.cu's activation planes; jobs it does not take —
  // widths, alignment, gemm_experts = 0 — come here and run gemm2_kernel.)
  if (gemm_pipelined_ && gemm2_fits(j, act, act_stride, gemm_smem_optin_)) {
    // Grouped tiles hold ≤ kBN vectors; dense batches of more than 96 take 128-vector tiles.
    const bool wide = !j.groups && j.n_vec > 96;
    if (!j.groups) gy = grid_for(j.n_vec, wide ? 128 : kBN);
    switch (j.w.type) {
      case GgmlType::Q8_0:
        wide ? launch_gemm2<GgmlType::Q8_0, 128>(*this, p, gy) : launch_gemm2<GgmlType::Q8_0, kBN>(*this, p, gy);
        break;
      case GgmlType::IQ2_XXS:
        wide ? launch_gemm2<GgmlType::IQ2_XXS, 128>(*this, p, gy) : launch_gemm2<GgmlType::IQ2_XXS, kBN>(*this, p, gy);
        break;
      default:
        wide ? launch_gemm2<GgmlType::Q2_K, 128>(*this, p, gy) : launch_gemm2<GgmlType::Q2_K, kBN>(*this, p, gy);
        break;
    }
    return;
  }
  const dim3 grid(grid_for(j.w.rows, kBM), gy);
  const size_t smem = sizeof(Smem);
  switch (j.w.type) {
    case GgmlType::Q8_0:
      check(cudaFuncSetAttribute(gemm_kernel<GgmlType::Q8_0>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem), "gemm smem");
      gemm_kernel<GgmlType::Q8_0><<<grid, kThreads, smem, s>>>(p);
      break;
    case GgmlType::IQ2_XXS:
      check(cudaFuncSetAttribute(gemm_kernel<GgmlType::IQ2_XXS>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem), "gemm smem");
      gemm_kernel<GgmlType::IQ2_XXS><<<grid, kThreads, smem, s>>>(p);
      break;
    default:
      check(cudaFuncSetAttribute(gemm_kernel<GgmlType::Q2_K>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem), "gemm smem");
      gemm_kernel<GgmlType::Q2_K><<<grid, kThreads, smem, s>>>(p);
      break;
  }
  launched("gemm (int8 tensor cores)");
}

}  // namespace ds4::backend::cuda
