// gemm_experts.cu — the routed experts' grouped prefill GEMM (IQ2_XXS gate/up, Q2_K down, against Q8_K
// activations; tiles of ≤ 64 pairs of one expert from group_by_expert) with warp specialisation.
//
// Why a kernel of its own: ops_gemm.cu's gemm2_kernel runs copy, weight decode and MMA in turn inside a
// block, two block barriers per 256-value stage, ~128 registers so that two blocks share an SM; on the
// Flash shapes (~48 pairs per expert) it ran at ~130 TOP/s, far below both the tensor pipe and its
// instruction count. Here a block of 16 warps splits the work:
//  - 8 producer warps copy the raw stages (cp.async, the 16-byte windows of gemm_tiles.cuh) into a ring of
//    3 slots, two stages ahead, and decode each stage — weights to int8 by decode_a (the code of every
//    GEMM kernel), the activation quants moved to an aligned tile, the scales and Q2_K bsums — into one
//    of two decoded slots;
//  - 8 MMA warps of 32 rows × 32 pairs take a decoded slot as soon as it is full (named barriers: full /
//    free per slot, no block-wide barrier in the loop) and run the MMAs with ldmatrix fragments of both
//    operands, so decoding stage kb + 1 overlaps the MMAs of stage kb.
// Numerics: those of gemm2_kernel (so bit-identical to it and to the CPU op): the same integer block
// sums (IQ2_XXS: Σ_g ls_g·Σ_32 w·q_x; Q2_K: Σ (scale·q)·q_x and Σ min·bsum), the same float expressions
// in the same order per super-block, the same 0.125 of IQ2_XXS once per output.
// Needs what gemm2_kernel needs (gemm2_fits: 16-byte aligned weights and activation rows) and ~210 KB of
// shared memory (sm_90's opt-in); CudaBackendOptions::gemm_experts selects it (ops_gemm.cu dispatch).
// Deliberately not here: Q8_0 and dense jobs (gemm_q8.cu, ops_gemm.cu), the grouping (ops_gemm.cu).
#include <algorithm>

#include "backend/cuda/act_quant.cuh"
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_impl.h"
#include "backend/cuda/gemm_experts.h"
#include "backend/cuda/gemm_tiles.cuh"
#include "backend/cuda/mma_s8.cuh"
#include "quant/blocks.h"
#include "quant/iq2xxs_tables.h"

namespace ds4::backend::cuda {

namespace {

__constant__ uint64_t c_grid[256];
__constant__ uint8_t c_signs[128];

constexpr int kRing = 3;   // raw stages: the copies of stage kb + 2 are issued while stage kb is decoded
constexpr int kSlots = 2;  // decoded stages: producers fill one while the MMA warps read the other
constexpr int kMmaWarps = 8, kProducerWarps = 8;
constexpr int kXThreads = (kMmaWarps + kProducerWarps) * kWarp;
constexpr int kProducers = kProducerWarps * kWarp;
static_assert(kMmaWarps == 4 * (kBN / 32), "MMA warps are 4 (rows) × 2 (pairs) of 32 × 32");

// Named barriers (0 is __syncthreads): the producers among themselves; slot s full (producers arrive,
// MMA warps wait) and free again (MMA warps arrive, producers wait). Each counts all 512 threads.
constexpr int kBarProducers = 1, kBarFull = 2, kBarFree = 2 + kSlots;

__device__ inline void bar_sync(int id, int count) { asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory"); }
__device__ inline void bar_arrive(int id, int count) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

template <GgmlType T>
struct XSmem {
  alignas(16) uint8_t raw_a[kRing][kBM * raw_a_pitch<T>()];  // weight bytes as stored (gemm2_kernel's windows)
  alignas(16) uint8_t raw_b[kRing][kBN * kRawB];            // Q8_K blocks as stored
  alignas(16) int8_t a[kSlots][kBM * kLd];                  // decoded weights (decode_a), K-contiguous per row
  alignas(16) int8_t b[kSlots][kBN * kLd];                  // activation quants, K-contiguous per pair
  float ad[kSlots][2 * kBM];                                // d_w [0, 128), dmin_w [128, 256) (decode_a)
  float bd[kSlots][kBN];                                    // d_x
  uint8_t aux[kSlots][kBM * 16];                            // IQ2_XXS ls per (row, group); Q2_K mins (decode_a)
  int8_t blo[kSlots][kBN * 16];                             // Q2_K bsum = 64·hi + lo, as gemm2_kernel
  int8_t bhi[kSlots][kBN * 16];
  uint64_t grid[256];
  uint8_t signs[128];
  uint4 smask[128];  // IQ2_XXS sign index → (0xFF per negative byte, 0x01 per negative byte) of each half
};

// Producers: cp.async of stage kb's raw bytes into raw slot g % kRing (g: the stage's place in the block's
// sequence; rows past the matrix and absent pairs are skipped).
template <GgmlType T>
__device__ inline void copy_stage_x(XSmem<T>& s, const GemmParams& p, const uint8_t* wbase, int64_t m0,
                                    const int64_t* arow, int g, int kb, int pt) {
  constexpr int PA = raw_a_pitch<T>(), CA = PA / 16, CB = kRawB / 16;
  uint8_t* ra = s.raw_a[g % kRing];
  for (int j = pt; j < kBM * CA; j += kProducers) {
    const int r = j / CA, k = j % CA;
    if (m0 + r < p.rows) copy_chunk(ra + r * PA, stage_w<T>(p, wbase, m0 + r, kb), stage_w_bytes<T>(), k);
  }
  uint8_t* rb = s.raw_b[g % kRing];
  for (int j = pt; j < kBN * CB; j += kProducers) {
    const int c = j / CB, k = j % CB;
    if (arow[c] >= 0)
      copy_chunk(rb + c * kRawB, p.act + static_cast<uint64_t>(arow[c]) * p.act_stride + int64_t{kb} * stage_x_bytes<T>(),
                 stage_x_bytes<T>(), k);
  }
}

// The sign-mask table of decode_iq2: entry i = (m_lo, m_hi, m_lo & 0x01…, m_hi & 0x01…) with byte k of
// m = 0xFF where bit k of ksigns[i] is set (decode_a's slo · 0xFF and slo, precomputed).
__device__ inline uint4 sign_masks(uint8_t sg) {
  const uint32_t lo = byte_bits4(sg & 15), hi = byte_bits4(sg >> 4);
  return make_uint4(lo * 0xFFu, hi * 0xFFu, lo, hi);
}

// decode_a<IQ2_XXS> for a valid row with the sign-mask table: the same int8 bytes, ls and d (grid bytes
// 8, 25 or 43: (g ^ 0xFF) + 1 = −g in the byte, no carry out), 5 operations per 8 values instead of 11.
__device__ inline void decode_iq2(const uint8_t* blk, int r, int sb, int8_t* a, float* ad, uint8_t* aux,
                                  const uint64_t* grid, const uint4* smask) {
  uint4* dst = reinterpret_cast<uint4*>(a + r * kLd + 32 * sb);
  if (sb == 0) ad[r] = f16v(ld16(blk));
  const uint32_t a0 = ld32_u16(blk + 2 + 8 * sb), a1 = ld32_u16(blk + 6 + 8 * sb);
  aux[r * 8 + sb] = static_cast<uint8_t>(2 * (a1 >> 28) + 1);
  uint32_t w[8];
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    const uint64_t gr = grid[(a0 >> (8 * c)) & 0xff];
    const uint4 m = smask[(a1 >> (7 * c)) & 127];
    w[2 * c] = (static_cast<uint32_t>(gr) ^ m.x) + m.z;
    w[2 * c + 1] = (static_cast<uint32_t>(gr >> 32) ^ m.y) + m.w;
  }
  dst[0] = make_uint4(w[0], w[1], w[2], w[3]);
  dst[1] = make_uint4(w[4], w[5], w[6], w[7]);
}

// Producers: raw slot g % kRing (stage kb) → decoded slot `slot` (weights by decode_a; activation quants,
// d_x and the Q2_K bsums; absent pairs as zeros).
template <GgmlType T>
__device__ inline void decode_stage_x(XSmem<T>& s, const GemmParams& p, const uint8_t* wbase, int64_t m0,
                                      const int64_t* arow, int g, int kb, int slot, int pt) {
  constexpr int PA = raw_a_pitch<T>();
  const uint8_t* ra = s.raw_a[g % kRing];
  for (int j = pt; j < kBM * 8; j += kProducers) {
    const int r = j / 8, sb = j % 8;
    const bool valid = m0 + r < p.rows;
    const uint8_t* blk = ra + r * PA;
    if (valid) blk += reinterpret_cast<uintptr_t>(stage_w<T>(p, wbase, m0 + r, kb)) & 15;
    if constexpr (T == GgmlType::IQ2_XXS) {
      if (valid) {
        decode_iq2(blk, r, sb, s.a[slot], s.ad[slot], s.aux[slot], s.grid, s.smask);
        continue;
      }
    }
    decode_a<T>(blk, r, sb, valid, s.a[slot], s.ad[slot], s.aux[slot], s.grid, s.signs);
  }
  // Every activation row starts on 16 bytes (gemm2_fits): one shift for the whole stage; Q8_K: d at 0,
  // quants at 4, bsums at 260.
  const int bsh = static_cast<int>((reinterpret_cast<uintptr_t>(p.act) + int64_t{kb} * stage_x_bytes<T>()) & 15);
  const uint8_t* rb = s.raw_b[g % kRing] + bsh;
  for (int j = pt; j < kBN * 16; j += kProducers) {
    const int c = j / 16, q = j % 16;  // 16-byte chunk q of pair c's 256 quants
    uint4 v = make_uint4(0, 0, 0, 0);
    if (arow[c] >= 0) {
      const uint8_t* src = rb + c * kRawB + 4 + 16 * q;
      v = make_uint4(ld32(src), ld32(src + 4), ld32(src + 8), ld32(src + 12));
    }
    *reinterpret_cast<uint4*>(s.b[slot] + c * kLd + 16 * q) = v;
  }
  for (int c = pt; c < kBN; c += kProducers)
    s.bd[slot][c] = arow[c] < 0 ? 0.0f : *reinterpret_cast<const float*>(rb + c * kRawB);
  if constexpr (T == GgmlType::Q2_K) {
    for (int j = pt; j < kBN * 16; j += kProducers) {
      const int c = j / 16, k = j % 16;
      const int v = arow[c] < 0 ? 0 : *reinterpret_cast<const int16_t*>(rb + c * kRawB + 260 + 2 * k);
      s.blo[slot][j] = static_cast<int8_t>(v & 63);
      s.bhi[slot][j] = static_cast<int8_t>(v >> 6);  // arithmetic shift: v = 64·hi + lo
    }
  }
}

// MMA warps: one decoded stage for the warp's 32 rows × first 8·NJA pairs (NJA = 4 or 2), the block
// terms of gemm2_kernel's stage_mma with both operands' fragments by ldmatrix.
// One decoded stage as the MMA warps read it: int8 tiles (pitch kLd) and scales (layouts of XSmem).
struct StageView {
  const int8_t *a, *b;
  const float *ad, *bd;
  const uint8_t* aux;
  const int8_t *blo, *bhi;
};

template <GgmlType T>
__device__ inline StageView view_of(const XSmem<T>& s, int slot) {
  return StageView{s.a[slot], s.b[slot], s.ad[slot], s.bd[slot], s.aux[slot], s.blo[slot], s.bhi[slot]};
}

template <GgmlType T, int NJA>
__device__ __forceinline__ void stage_mma_x(const StageView& v, int wm, int wn, int lane, float (&acc)[2][4][4],
                                            int (&ic)[2][4][4]) {
  const int g = lane / 4, t = lane % 4;
  const int8_t* sa = v.a;
  const int8_t* sbv = v.b;
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < NJA; ++j)
#pragma unroll
      for (int q = 0; q < 4; ++q) ic[i][j][q] = 0;
#pragma unroll 2
  for (int sb = 0; sb < 8; ++sb) {
    uint32_t af[2][4], bf[NJA][2];
#pragma unroll
    for (int i = 0; i < 2; ++i) ldmatrix_x4(af[i], sa + (wm + 16 * i + (lane & 15)) * kLd + 32 * sb + 16 * (lane >> 4));
#pragma unroll
    for (int j = 0; j < NJA; j += 2) {
      // Matrices: pairs wn + 8j … + 7 (k 0–15, 16–31), then pairs + 8 (the same): bf[j], bf[j + 1].
      uint32_t r[4];
      ldmatrix_x4(r, sbv + (wn + 8 * j + (lane & 7) + 8 * (lane >> 4)) * kLd + 32 * sb + 16 * ((lane >> 3) & 1));
      bf[j][0] = r[0];
      bf[j][1] = r[1];
      bf[j + 1][0] = r[2];
      bf[j + 1][1] = r[3];
    }
    if constexpr (T == GgmlType::IQ2_XXS) {
      int ls[2][2];
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) ls[i][h] = v.aux[(wm + 16 * i + g + 8 * h) * 8 + sb];
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
  // The scales of the warp's rows (wm + 16i + g + 8h) and pairs (wn + 8j + 2t + e), loaded once.
  float da[2][2], db[NJA][2];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) da[i][h] = v.ad[wm + 16 * i + g + 8 * h];
#pragma unroll
  for (int j = 0; j < NJA; ++j)
#pragma unroll
    for (int e = 0; e < 2; ++e) db[j][e] = v.bd[wn + 8 * j + 2 * t + e];
  if constexpr (T == GgmlType::IQ2_XXS) {
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < NJA; ++j)
#pragma unroll
        for (int q = 0; q < 4; ++q)
          acc[i][j][q] += (da[i][q >> 1] * db[j][q & 1]) * static_cast<float>(ic[i][j][q]);
  } else {
    // summs = Σ_16 min·bsum = 64·Σ min·hi + Σ min·lo, as gemm2_kernel.
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const uint8_t* mb = v.aux + (wm + 16 * i + g) * 16 + 4 * t;
      const uint32_t am[4] = {ld32(mb), ld32(mb + 8 * 16), 0u, 0u};
#pragma unroll
      for (int j = 0; j < NJA; ++j) {
        const int col0 = wn + 8 * j + g;
        const uint32_t blo[2] = {*reinterpret_cast<const uint32_t*>(v.blo + col0 * 16 + 4 * t), 0u};
        const uint32_t bhi[2] = {*reinterpret_cast<const uint32_t*>(v.bhi + col0 * 16 + 4 * t), 0u};
        int lo[4] = {0, 0, 0, 0}, hi[4] = {0, 0, 0, 0};
        mma_s8(lo, am, blo);
        mma_s8(hi, am, bhi);
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const int row = wm + 16 * i + g + (q >= 2 ? 8 : 0);
          const int summs = 64 * hi[q] + lo[q];
          const float dall = db[j][q & 1] * da[i][q >> 1];
          const float dmin = db[j][q & 1] * v.ad[kBM + row];
          acc[i][j][q] += dall * static_cast<float>(ic[i][j][q]) - dmin * static_cast<float>(summs);
        }
      }
    }
  }
}

template <GgmlType T>
__global__ void __launch_bounds__(kXThreads, 1) experts_kernel(GemmParams p) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  XSmem<T>& s = *reinterpret_cast<XSmem<T>*>(smem_raw);
  __shared__ int64_t arow[kBN], orow[kBN];

  if (static_cast<int>(blockIdx.y) >= *p.n_tiles) return;  // the whole block: no barrier reached
  const int32_t* tl = p.tiles + 3 * blockIdx.y;
  const int64_t m0 = static_cast<int64_t>(blockIdx.x) * kBM;
  const uint8_t* wbase = p.w + static_cast<uint64_t>(tl[0]) * p.expert_bytes;
  const int nvec = tl[2];
  for (int c = threadIdx.x; c < kBN; c += kXThreads) {
    const int64_t v = c < nvec ? p.order[tl[1] + c] : -1;
    arow[c] = v < 0 ? -1 : v / p.x_div;
    orow[c] = v;
  }
  if constexpr (T == GgmlType::IQ2_XXS) {
    for (int i = threadIdx.x; i < 256; i += kXThreads) s.grid[i] = c_grid[i];
    for (int i = threadIdx.x; i < 128; i += kXThreads) {
      s.signs[i] = c_signs[i];
      s.smask[i] = sign_masks(c_signs[i]);
    }
  }
  __syncthreads();

  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int nkb = static_cast<int>(p.cols / kBK);
  if (warp >= kMmaWarps) {  // producers
    const int pt = threadIdx.x - kMmaWarps * kWarp;
#pragma unroll
    for (int kb = 0; kb < kRing - 1; ++kb) {
      if (kb < nkb) copy_stage_x<T>(s, p, wbase, m0, arow, kb, kb, pt);
      cp_async_commit();
    }
    for (int kb = 0; kb < nkb; ++kb) {
      cp_async_wait<kRing - 2>();           // this thread's copies of stage kb landed
      bar_sync(kBarProducers, kProducers);  // everyone's did; stage kb − 1's raw slot is decoded
      if (kb + kRing - 1 < nkb) copy_stage_x<T>(s, p, wbase, m0, arow, kb + kRing - 1, kb + kRing - 1, pt);
      cp_async_commit();  // (empty groups keep the count)
      const int slot = kb % kSlots;
      if (kb >= kSlots) bar_sync(kBarFree + slot, kXThreads);  // the MMA warps are done with stage kb − 2
      decode_stage_x<T>(s, p, wbase, m0, arow, kb, kb, slot, pt);
      __threadfence_block();
      bar_arrive(kBarFull + slot, kXThreads);
    }
    return;
  }

  // MMA warps: 4 (rows) × 2 (pairs) of 32 × 32.
  const int g = lane / 4, t = lane % 4;
  const int wm = (warp % 4) * 32, wn = (warp / 4) * 32;
  const int nja = min(4, max(0, (nvec - wn + 7) / 8));  // this warp's n8 fragments that hold pairs
  float acc[2][4][4] = {};
  int ic[2][4][4];
  for (int kb = 0; kb < nkb; ++kb) {
    const int slot = kb % kSlots;
    bar_sync(kBarFull + slot, kXThreads);
    if (nja > 2) {
      stage_mma_x<T, 4>(view_of(s, slot), wm, wn, lane, acc, ic);
    } else if (nja > 0) {
      stage_mma_x<T, 2>(view_of(s, slot), wm, wn, lane, acc, ic);
    }
    if (kb + kSlots < nkb) bar_arrive(kBarFree + slot, kXThreads);
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

// Variant 2: one resident block per SM walks the work items it = blockIdx.x, + gridDim.x, … of
// row_blocks × n_tiles (it → tile it / row_blocks, rows 128·(it % row_blocks): neighbouring blocks share a
// tile's activations in L2), the stages of consecutive items one sequence G = u·nkb + kb, so the copies
// and decodes of item u + 1 run while the MMA warps finish item u (no pipeline fill per item). Producers
// keep the items' weight base, first row and activation rows in a 2-entry ring (entry u & 1), written
// for item u + 1 in the iteration that decodes stage nkb − 3 of item u (then neither entry's readers are
// in the way; needs nkb ≥ 3); the MMA warps read their item's tile from global memory.
struct ItemInfo {
  const uint8_t* wbase;
  int64_t m0;
};

__device__ inline int item_of(int u, int row_blocks, int* rb) {
  const int it = static_cast<int>(blockIdx.x) + u * static_cast<int>(gridDim.x);
  *rb = it % row_blocks;
  return it / row_blocks;
}

template <GgmlType T>
__global__ void __launch_bounds__(kXThreads, 1) experts_persistent_kernel(GemmParams p, int row_blocks) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  XSmem<T>& s = *reinterpret_cast<XSmem<T>*>(smem_raw);
  __shared__ int64_t arow[2][kBN];
  __shared__ ItemInfo info[2];

  const int n_items = row_blocks * *p.n_tiles;
  if (static_cast<int>(blockIdx.x) >= n_items) return;  // the whole block: no barrier reached
  const int n_mine = (n_items - static_cast<int>(blockIdx.x) + static_cast<int>(gridDim.x) - 1) / static_cast<int>(gridDim.x);
  const int nkb = static_cast<int>(p.cols / kBK), total = n_mine * nkb;
  // Item u's ring entry (producer threads pt < kBN, and pt == 0 for the base and first row).
  auto fill_info = [&](int u, int pt) {
    int rb = 0;
    const int32_t* tl = p.tiles + 3 * item_of(u, row_blocks, &rb);
    if (pt < kBN) {
      const int64_t v = pt < tl[2] ? p.order[tl[1] + pt] : -1;
      arow[u & 1][pt] = v < 0 ? -1 : v / p.x_div;
    }
    if (pt == 0) info[u & 1] = ItemInfo{p.w + static_cast<uint64_t>(tl[0]) * p.expert_bytes, int64_t{rb} * kBM};
  };
  if constexpr (T == GgmlType::IQ2_XXS) {
    for (int i = threadIdx.x; i < 256; i += kXThreads) s.grid[i] = c_grid[i];
    for (int i = threadIdx.x; i < 128; i += kXThreads) {
      s.signs[i] = c_signs[i];
      s.smask[i] = sign_masks(c_signs[i]);
    }
  }
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  if (warp >= kMmaWarps) fill_info(0, threadIdx.x - kMmaWarps * kWarp);
  __syncthreads();

  if (warp >= kMmaWarps) {  // producers
    const int pt = threadIdx.x - kMmaWarps * kWarp;
    auto copy = [&](int g) {
      const int u = g / nkb;
      const ItemInfo& in = info[u & 1];
      copy_stage_x<T>(s, p, in.wbase, in.m0, arow[u & 1], g, g - u * nkb, pt);
    };
#pragma unroll
    for (int g = 0; g < kRing - 1; ++g) {
      if (g < total) copy(g);
      cp_async_commit();
    }
    for (int g = 0; g < total; ++g) {
      cp_async_wait<kRing - 2>();
      bar_sync(kBarProducers, kProducers);  // stage g landed; every producer is past iteration g − 1
      if (g + kRing - 1 < total) copy(g + kRing - 1);
      cp_async_commit();
      const int slot = g % kSlots, u = g / nkb, kb = g - u * nkb;
      if (kb == nkb - 3 && u + 1 < n_mine) fill_info(u + 1, pt);  // read from iteration g + 1 on
      if (g >= kSlots) bar_sync(kBarFree + slot, kXThreads);
      const ItemInfo& in = info[u & 1];
      decode_stage_x<T>(s, p, in.wbase, in.m0, arow[u & 1], g, kb, slot, pt);
      __threadfence_block();
      bar_arrive(kBarFull + slot, kXThreads);
    }
    return;
  }

  const int g8 = lane / 4, t = lane % 4;
  const int wm = (warp % 4) * 32, wn = (warp / 4) * 32;
  float acc[2][4][4] = {};
  int ic[2][4][4];
  int nja = 0;
  for (int g = 0; g < total; ++g) {
    const int slot = g % kSlots, u = g / nkb, kb = g - u * nkb;
    int rb = 0;
    const int32_t* tl = p.tiles + 3 * item_of(u, row_blocks, &rb);
    if (kb == 0) nja = min(4, max(0, (tl[2] - wn + 7) / 8));
    bar_sync(kBarFull + slot, kXThreads);
    if (nja > 2) {
      stage_mma_x<T, 4>(view_of(s, slot), wm, wn, lane, acc, ic);
    } else if (nja > 0) {
      stage_mma_x<T, 2>(view_of(s, slot), wm, wn, lane, acc, ic);
    }
    if (g + kSlots < total) bar_arrive(kBarFree + slot, kXThreads);
    if (kb != nkb - 1) continue;
    const int64_t m0 = int64_t{rb} * kBM;
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const int row = wm + 16 * i + g8 + (q >= 2 ? 8 : 0);
          const int col = wn + 8 * j + 2 * t + (q & 1);
          float v = acc[i][j][q];
          acc[i][j][q] = 0;
          if (col >= tl[2] || m0 + row >= p.rows) continue;
          if constexpr (T == GgmlType::IQ2_XXS) v = 0.125f * v;  // once per row, as dot_iq2_xxs_ref
          p.y[static_cast<int64_t>(p.order[tl[1] + col]) * p.y_stride + m0 + row] = v;
        }
  }
}

// ---- variants 3 and 4: activations quantized into planes (gemm_experts_planes) ----
// The Q8_K activation rows as three planes — quants [rows][K] int8, d [rows][K/256] f32, bsums
// [rows][K/16] int16 (the same values as quantize_act's BlockQ8_K, by quantize_q8_K_warp_to) — so a
// stage's quants are whole 16-byte chunks that cp.async puts straight into the MMA tile (no raw
// activation buffer, no window arithmetic, no move): the producers' activation work drops from 1,216
// window chunks + 1,024 moves to 1,024 aligned chunks + 64 four-byte d copies per stage. The quant
// tiles form a 4-slot ring (stage g in slot g % 4): a copy into slot (g + 2) % 4 = (g − 2) % 4 waits
// for the MMA warps to free stage g − 2 (the free barrier now comes before the copy).
constexpr int kQRing = 4;

struct PlaneParams {
  const int8_t* qs;       // [act rows][K]
  const float* d;         // [act rows][K / 256]
  const int16_t* bsums;   // [act rows][K / 16]
};

template <GgmlType T>
struct PSmem {
  alignas(16) uint8_t raw_a[kRing][kBM * raw_a_pitch<T>()];
  alignas(16) int8_t q[kQRing][kBN * kLd];     // activation quants of stage g in slot g % kQRing
  alignas(16) int16_t qbs[kQRing][kBN * 16];   // Q2_K bsums of stage g
  float qd[kQRing][kBN];                       // d_x of stage g
  alignas(16) int8_t a[kSlots][kBM * kLd];
  float ad[kSlots][2 * kBM];
  float bd[kSlots][kBN];
  uint8_t aux[kSlots][kBM * 16];
  int8_t blo[kSlots][kBN * 16];
  int8_t bhi[kSlots][kBN * 16];
  uint64_t grid[256];
  uint8_t signs[128];
  uint4 smask[128];
};

__device__ inline void cp_async4(void* dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smem_addr(dst)), "l"(src) : "memory");
}

// Producers: stage kb of item (wbase, m0, arow) into raw slot g % kRing (weights, gemm2_kernel's
// windows) and quant slot g % kQRing (activations from the planes).
template <GgmlType T>
__device__ inline void copy_stage_p(PSmem<T>& s, const GemmParams& p, const PlaneParams& q, const uint8_t* wbase,
                                    int64_t m0, const int64_t* arow, int g, int kb, int pt) {
  constexpr int PA = raw_a_pitch<T>(), CA = PA / 16;
  uint8_t* ra = s.raw_a[g % kRing];
  for (int j = pt; j < kBM * CA; j += kProducers) {
    const int r = j / CA, k = j % CA;
    if (m0 + r < p.rows) copy_chunk(ra + r * PA, stage_w<T>(p, wbase, m0 + r, kb), stage_w_bytes<T>(), k);
  }
  const int slot = g % kQRing;
  const int64_t K = p.cols, nb = K / kBK;
  for (int j = pt; j < kBN * 16; j += kProducers) {
    const int c = j / 16, k = j % 16;
    if (arow[c] >= 0) cp_async16(s.q[slot] + c * kLd + 16 * k, q.qs + arow[c] * K + int64_t{kb} * kBK + 16 * k);
  }
  for (int c = pt; c < kBN; c += kProducers)
    if (arow[c] >= 0) cp_async4(s.qd[slot] + c, q.d + arow[c] * nb + kb);
  if constexpr (T == GgmlType::Q2_K) {
    for (int j = pt; j < kBN * 2; j += kProducers) {
      const int c = j / 2, h = j % 2;
      if (arow[c] >= 0) cp_async16(s.qbs[slot] + c * 16 + 8 * h, q.bsums + arow[c] * (K / 16) + int64_t{kb} * 16 + 8 * h);
    }
  }
}

// Producers: raw slot g % kRing → decoded slot g % kSlots (weights), the activation scales and Q2_K
// bsums of quant slot g % kQRing (absent pairs: zeros; their quants are never stored outputs).
template <GgmlType T>
__device__ inline void decode_stage_p(PSmem<T>& s, const GemmParams& p, const uint8_t* wbase, int64_t m0,
                                      const int64_t* arow, int g, int kb, int pt) {
  constexpr int PA = raw_a_pitch<T>();
  const int slot = g % kSlots, qslot = g % kQRing;
  const uint8_t* ra = s.raw_a[g % kRing];
  for (int j = pt; j < kBM * 8; j += kProducers) {
    const int r = j / 8, sb = j % 8;
    const bool valid = m0 + r < p.rows;
    const uint8_t* blk = ra + r * PA;
    if (valid) blk += reinterpret_cast<uintptr_t>(stage_w<T>(p, wbase, m0 + r, kb)) & 15;
    if constexpr (T == GgmlType::IQ2_XXS) {
      if (valid) {
        decode_iq2(blk, r, sb, s.a[slot], s.ad[slot], s.aux[slot], s.grid, s.smask);
        continue;
      }
    }
    decode_a<T>(blk, r, sb, valid, s.a[slot], s.ad[slot], s.aux[slot], s.grid, s.signs);
  }
  for (int c = pt; c < kBN; c += kProducers) s.bd[slot][c] = arow[c] < 0 ? 0.0f : s.qd[qslot][c];
  if constexpr (T == GgmlType::Q2_K) {
    for (int j = pt; j < kBN * 16; j += kProducers) {
      const int v = arow[j / 16] < 0 ? 0 : s.qbs[qslot][j];
      s.blo[slot][j] = static_cast<int8_t>(v & 63);
      s.bhi[slot][j] = static_cast<int8_t>(v >> 6);  // arithmetic shift: v = 64·hi + lo
    }
  }
}

// experts_persistent_kernel on planes: the same items, walk, item ring and barriers, with the free
// barrier before the copy (the quant ring above). Grid: one block per SM (variant 3) or per item (4).
template <GgmlType T>
__global__ void __launch_bounds__(kXThreads, 1) experts_planes_kernel(GemmParams p, PlaneParams q, int row_blocks) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  PSmem<T>& s = *reinterpret_cast<PSmem<T>*>(smem_raw);
  __shared__ int64_t arow[2][kBN];
  __shared__ ItemInfo info[2];

  const int n_items = row_blocks * *p.n_tiles;
  if (static_cast<int>(blockIdx.x) >= n_items) return;  // the whole block: no barrier reached
  const int n_mine = (n_items - static_cast<int>(blockIdx.x) + static_cast<int>(gridDim.x) - 1) / static_cast<int>(gridDim.x);
  const int nkb = static_cast<int>(p.cols / kBK), total = n_mine * nkb;
  auto fill_info = [&](int u, int pt) {
    int rb = 0;
    const int32_t* tl = p.tiles + 3 * item_of(u, row_blocks, &rb);
    if (pt < kBN) {
      const int64_t v = pt < tl[2] ? p.order[tl[1] + pt] : -1;
      arow[u & 1][pt] = v < 0 ? -1 : v / p.x_div;
    }
    if (pt == 0) info[u & 1] = ItemInfo{p.w + static_cast<uint64_t>(tl[0]) * p.expert_bytes, int64_t{rb} * kBM};
  };
  if constexpr (T == GgmlType::IQ2_XXS) {
    for (int i = threadIdx.x; i < 256; i += kXThreads) s.grid[i] = c_grid[i];
    for (int i = threadIdx.x; i < 128; i += kXThreads) {
      s.signs[i] = c_signs[i];
      s.smask[i] = sign_masks(c_signs[i]);
    }
  }
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  if (warp >= kMmaWarps) fill_info(0, threadIdx.x - kMmaWarps * kWarp);
  __syncthreads();

  if (warp >= kMmaWarps) {  // producers
    const int pt = threadIdx.x - kMmaWarps * kWarp;
    auto copy = [&](int g) {
      const int u = g / nkb;
      const ItemInfo& in = info[u & 1];
      copy_stage_p<T>(s, p, q, in.wbase, in.m0, arow[u & 1], g, g - u * nkb, pt);
    };
#pragma unroll
    for (int g = 0; g < kRing - 1; ++g) {
      if (g < total) copy(g);
      cp_async_commit();
    }
    for (int g = 0; g < total; ++g) {
      const int slot = g % kSlots, u = g / nkb, kb = g - u * nkb;
      cp_async_wait<kRing - 2>();
      bar_sync(kBarProducers, kProducers);  // stage g landed; every producer is past iteration g − 1
      if (g >= kSlots) bar_sync(kBarFree + slot, kXThreads);  // stage g − 2 done: its slots are free
      if (g + kRing - 1 < total) copy(g + kRing - 1);
      cp_async_commit();
      if (kb == nkb - 3 && u + 1 < n_mine) fill_info(u + 1, pt);  // read from iteration g + 1 on
      const ItemInfo& in = info[u & 1];
      decode_stage_p<T>(s, p, in.wbase, in.m0, arow[u & 1], g, kb, pt);
      __threadfence_block();
      bar_arrive(kBarFull + slot, kXThreads);
    }
    return;
  }

  const int g8 = lane / 4, t = lane % 4;
  const int wm = (warp % 4) * 32, wn = (warp / 4) * 32;
  float acc[2][4][4] = {};
  int ic[2][4][4];
  int nja = 0;
  for (int g = 0; g < total; ++g) {
    const int slot = g % kSlots, u = g / nkb, kb = g - u * nkb;
    int rb = 0;
    const int32_t* tl = p.tiles + 3 * item_of(u, row_blocks, &rb);
    if (kb == 0) nja = min(4, max(0, (tl[2] - wn + 7) / 8));
    bar_sync(kBarFull + slot, kXThreads);
    const StageView v{s.a[slot], s.q[g % kQRing], s.ad[slot], s.bd[slot], s.aux[slot], s.blo[slot], s.bhi[slot]};
    if (nja > 2) {
      stage_mma_x<T, 4>(v, wm, wn, lane, acc, ic);
    } else if (nja > 0) {
      stage_mma_x<T, 2>(v, wm, wn, lane, acc, ic);
    }
    if (g + kSlots < total) bar_arrive(kBarFree + slot, kXThreads);
    if (kb != nkb - 1) continue;
    const int64_t m0 = int64_t{rb} * kBM;
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int qq = 0; qq < 4; ++qq) {
          const int row = wm + 16 * i + g8 + (qq >= 2 ? 8 : 0);
          const int col = wn + 8 * j + 2 * t + (qq & 1);
          float val = acc[i][j][qq];
          acc[i][j][qq] = 0;
          if (col >= tl[2] || m0 + row >= p.rows) continue;
          if constexpr (T == GgmlType::IQ2_XXS) val = 0.125f * val;  // once per row, as dot_iq2_xxs_ref
          p.y[static_cast<int64_t>(p.order[tl[1] + col]) * p.y_stride + m0 + row] = val;
        }
  }
}

// One warp per 256-value block of x [rows][x_stride] into the planes of `q` (K = cols). kPerm: the quants
// of each 32-value group stored in variant 5's K order (byte 4t + j = value 8t + j, byte 16 + 4t + j =
// value 8t + 4 + j): lane l, which holds values 8l … 8l + 7 (chunk l % 4 of group l / 4), writes its 8
// quants as two 4-byte words at 32·(l / 4) + 4·(l % 4) and + 16. Same values, same d and bsums.
template <bool kPerm>
__global__ void __launch_bounds__(256) quantize_q8_K_planes_kernel(const float* x, int64_t x_stride, int64_t rows,
                                                                   int64_t cols, PlaneParams q) {
  __shared__ alignas(16) int8_t stage[256 / kWarp][kQK_K];  // kPerm: each warp's natural-order quants
  const int64_t nb = cols / kQK_K;
  const int64_t blk = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (blk >= rows * nb) return;
  const int64_t r = static_cast<uint32_t>(blk) / static_cast<uint32_t>(nb), b = blk - r * nb;  // rows·nb < 2^31
  const float* src = x + r * x_stride + b * kQK_K + 8 * lane;
  float v[8];
  for (int i = 0; i < 8; ++i) v[i] = src[i];
  int8_t* qs = const_cast<int8_t*>(q.qs) + blk * kQK_K;
  if constexpr (kPerm) {
    int8_t* mine = stage[threadIdx.x / kWarp];
    quantize_q8_K_warp_to(v, lane, const_cast<float*>(q.d) + blk, mine, const_cast<int16_t*>(q.bsums) + blk * 16);
    __syncwarp();
    const uint2 w = *reinterpret_cast<const uint2*>(mine + 8 * lane);  // this lane's own 8 quants
    int8_t* g = qs + 32 * (lane / 4) + 4 * (lane % 4);
    *reinterpret_cast<uint32_t*>(g) = w.x;
    *reinterpret_cast<uint32_t*>(g + 16) = w.y;
  } else {
    quantize_q8_K_warp_to(v, lane, const_cast<float*>(q.d) + blk, qs, const_cast<int16_t*>(q.bsums) + blk * 16);
  }
}

// ---- variant 5: weights decoded straight into MMA fragments (no decoded tile, no producer warps) ----
// K order: the activation quants of each 32-value group are stored permuted (quantize_q8_K_planes_kernel
// <true>), so the k32 fragment of lane (g, t) — MMA positions 4t … 4t + 3 and 16 + 4t … — holds values
// 8t … 8t + 7 of the group: one IQ2_XXS grid entry with one sign index (low and high 32 bits), or 8
// consecutive Q2_K quants under one scale. Integer sums over a group do not depend on the order of k,
// so every block sum, and everything after it, is gemm2_kernel's. A block: 8 warps of 16 rows × 64 pairs
// (1 m16 × 8 n8), one (128 rows, tile) item, raw weight bytes and activation planes through a 3-stage
// cp.async ring, one barrier per stage; each warp decodes its own rows from the raw bytes in registers
// (the grid and sign-mask tables in shared memory), ~90 KB of shared memory: two blocks per SM.
constexpr int kDWarps = 8, kDThreads = kDWarps * kWarp, kDRing = 3;
static_assert(kDWarps * 16 == kBM, "8 warps of 16 rows");

template <GgmlType T>
struct DSmem {
  alignas(16) uint8_t raw_a[kDRing][kBM * raw_a_pitch<T>()];
  alignas(16) int8_t q[kDRing][kBN * kLd];    // permuted activation quants, pitch kLd (ldmatrix)
  alignas(16) int16_t qbs[kDRing][kBN * 16];  // Q2_K bsums
  float qd[kDRing][kBN];                      // d_x
  uint64_t grid[256];
  uint4 smask[128];
};

// Stage kb into ring slot kb % kDRing: weight windows (gemm_tiles.cuh) and the planes' chunks.
template <GgmlType T>
__device__ inline void copy_stage_d(DSmem<T>& s, const GemmParams& p, const PlaneParams& q, const uint8_t* wbase,
                                    int64_t m0, const int64_t* arow, int kb) {
  constexpr int PA = raw_a_pitch<T>(), CA = PA / 16;
  const int slot = kb % kDRing;
  uint8_t* ra = s.raw_a[slot];
  for (int j = threadIdx.x; j < kBM * CA; j += kDThreads) {
    const int r = j / CA, k = j % CA;
    if (m0 + r < p.rows) copy_chunk(ra + r * PA, stage_w<T>(p, wbase, m0 + r, kb), stage_w_bytes<T>(), k);
  }
  const int64_t K = p.cols, nb = K / kBK;
  for (int j = threadIdx.x; j < kBN * 16; j += kDThreads) {
    const int c = j / 16, k = j % 16;
    if (arow[c] >= 0) cp_async16(s.q[slot] + c * kLd + 16 * k, q.qs + arow[c] * K + int64_t{kb} * kBK + 16 * k);
  }
  for (int c = threadIdx.x; c < kBN; c += kDThreads)
    if (arow[c] >= 0) cp_async4(s.qd[slot] + c, q.d + arow[c] * nb + kb);
  if constexpr (T == GgmlType::Q2_K) {
    for (int j = threadIdx.x; j < kBN * 2; j += kDThreads) {
      const int c = j / 2, h = j % 2;
      if (arow[c] >= 0) cp_async16(s.qbs[slot] + c * 16 + 8 * h, q.bsums + arow[c] * (K / 16) + int64_t{kb} * 16 + 8 * h);
    }
  }
}

// kAluSigns (variant 6): the IQ2_XXS sign byte computed (ksigns[i] = i | parity(i) << 7) and expanded by
// integer operations instead of the sign-mask table — W2 measured variant 5 at the pace of gemm2_kernel,
// and its random 16-byte table loads take ~6 shared-memory wavefronts per row and group. Same bytes.
// kPackedGrid (variant 7, with kAluSigns): the IQ2_XXS grid as 2-bit codes (every grid byte is 8, 25 or 43:
// code c → 8 + 17c + (c >> 1)), a 512-byte table of uint16 instead of 2 KB of uint64, the bytes rebuilt
// by integer operations. Same bytes.
__device__ inline uint32_t grid_half(uint32_t codes4) {  // 4 codes (8 bits) → 4 grid bytes
  const uint32_t y = (codes4 | (codes4 << 6) | (codes4 << 12) | (codes4 << 18)) & 0x03030303u;
  return 0x08080808u + y * 17u + ((y >> 1) & 0x01010101u);
}

// Variant 11: an IQ2_XXS grid entry as the 32-bit byte-permute selector of its 8 bytes (nibble k = 0, 1, 2
// for byte k = 8, 25, 43): one 4-byte table load per 8 values instead of 8 bytes (~4 shared-memory
// wavefronts per warp instead of ~6 for 32 random entries), the signed bytes by two prmt.
__device__ inline uint32_t prmt_selector(uint64_t grid) {
  uint32_t sel = 0;
  for (int k = 0; k < 8; ++k) {
    const uint32_t v = static_cast<uint32_t>(grid >> (8 * k)) & 0xff;
    sel |= (v == 8 ? 0u : v == 25 ? 1u : 2u) << (4 * k);
  }
  return sel;
}

// One ring slot of the direct kernels: the warp's tile rows r0 = 16·warp + g and r0 + 8 (their weight blocks
// at blk0 / blk1 in the raw slot) × the first 8·nj pairs of quant slot `slot`: the integer block sums of the
// stage's super-block, then gemm2_kernel's float terms of the stage into acc[j][e] (pair 8j + 2t + (e & 1),
// row r0 + 8·(e >= 2)).
template <GgmlType T, bool kAluSigns, bool kPackedGrid, int kUnroll = 2, bool kLean = false, bool kPrmt = false>
__device__ __forceinline__ void direct_stage(const DSmem<T>& s, int slot, const uint8_t* blk0, const uint8_t* blk1,
                                             int nj, int lane, const uint16_t* gcodes, float (&acc)[8][4]) {
  const int g = lane / 4, t = lane % 4;
  const int8_t* qb = s.q[slot];
  int ic[8][4];
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) ic[j][e] = 0;
#pragma unroll(kUnroll)
  for (int sb = 0; sb < 8; ++sb) {
    uint32_t af[4];
    int ls[2] = {0, 0};
    if constexpr (T == GgmlType::IQ2_XXS) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint8_t* b = (h ? blk1 : blk0) + 2 + 8 * sb;  // 4 grid indices, then 4 × 7 sign bits + ls
        const uint32_t a1 = ld32_u16(b + 4);
        ls[h] = static_cast<int>(2 * (a1 >> 28) + 1);
        if constexpr (kPrmt) {
          // prmt_selectors(): nibble k = code of grid byte k; sign bit k (of ksigns[si] = si | parity << 7)
          // moved to bit 4k + 2, so nibble k selects byte code + 4·sign of (8, 25, 43, 0, −8, −25, −43, 0).
          const uint32_t si = (a1 >> (7 * t)) & 127;
          uint32_t x = (si | (si << 12)) & 0x000F000Fu;  // bits 0–3 stay, 4–6 → 16–18
          x = (x | (x << 6)) & 0x03030303u;               // two bits per byte
          x = (x | (x << 3)) & 0x11111111u;               // bit k at 4k
          const uint32_t sel = reinterpret_cast<const uint32_t*>(s.smask)[b[t]] | (x << 2) | ((__popc(si) & 1u) << 30);
          af[h] = __byte_perm(0x002B1908u, 0x00D5E7F8u, sel);            // values 8t … 8t + 3
          af[2 + h] = __byte_perm(0x002B1908u, 0x00D5E7F8u, sel >> 16);  // values 8t + 4 … 8t + 7
          continue;
        }
        uint64_t gr;
        if constexpr (kPackedGrid) {
          const uint32_t code = gcodes[b[t]];
          gr = grid_half(code & 0xff) | (static_cast<uint64_t>(grid_half(code >> 8)) << 32);
        } else {
          gr = s.grid[b[t]];
        }
        const uint32_t si = (a1 >> (7 * t)) & 127;
        if constexpr (kAluSigns) {
          const uint32_t sg = si | ((__popc(si) & 1u) << 7);  // kKsignsIq2xs[si]
          const uint32_t slo = byte_bits4(sg & 15), shi = byte_bits4(sg >> 4);
          af[h] = (static_cast<uint32_t>(gr) ^ (slo * 0xFFu)) + slo;
          af[2 + h] = (static_cast<uint32_t>(gr >> 32) ^ (shi * 0xFFu)) + shi;
        } else {
          const uint4 m = s.smask[si];
          af[h] = (static_cast<uint32_t>(gr) ^ m.x) + m.z;            // values 8t … 8t + 3
          af[2 + h] = (static_cast<uint32_t>(gr >> 32) ^ m.y) + m.w;  // values 8t + 4 … 8t + 7
        }
      }
    } else {  // Q2_K: element 32·sb + k in byte 16 + 32·(sb / 4) + k, bits 2·(sb % 4); scale of k / 16
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint8_t* b = h ? blk1 : blk0;
        const uint32_t sc = b[2 * sb + (t >> 1)] & 15;
        const uint8_t* qq = b + 16 + 32 * (sb / 4) + 8 * t;
        const int l2 = 2 * (sb % 4);
        af[h] = ((ld32(qq) >> l2) & 0x03030303u) * sc;  // bytes q·scale ≤ 45: no carry between bytes
        af[2 + h] = ((ld32(qq + 4) >> l2) & 0x03030303u) * sc;
      }
    }
#pragma unroll
    for (int jj = 0; jj < 4; ++jj) {
      if (2 * jj >= nj) break;  // uniform
      uint32_t r[4];
      ldmatrix_x4(r, qb + (16 * jj + (lane & 7) + 8 * (lane >> 4)) * kLd + 32 * sb + 16 * ((lane >> 3) & 1));
      const uint32_t bf0[2] = {r[0], r[1]}, bf1[2] = {r[2], r[3]};
      if constexpr (T == GgmlType::IQ2_XXS) {
        int c0[4], c1[4];
        mma_s8_from(c0, af, bf0, 0);
        mma_s8_from(c1, af, bf1, 0);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          ic[2 * jj][e] += ls[e >> 1] * c0[e];
          ic[2 * jj + 1][e] += ls[e >> 1] * c1[e];
        }
      } else {
        mma_s8(ic[2 * jj], af, bf0);
        mma_s8(ic[2 * jj + 1], af, bf1);
      }
    }
  }
  // The stage's float terms, gemm2_kernel's expressions: rows r0, r0 + 8; pairs 8j + 2t + e.
  if constexpr (T == GgmlType::IQ2_XXS) {
    const float da[2] = {f16v(ld16(blk0)), f16v(ld16(blk1))};
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      if (j >= nj) break;
      const float db[2] = {s.qd[slot][8 * j + 2 * t], s.qd[slot][8 * j + 2 * t + 1]};
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[j][e] += (da[e >> 1] * db[e & 1]) * static_cast<float>(ic[j][e]);
    }
  } else {
    // summs = Σ_16 min·bsum = 64·Σ min·hi + Σ min·lo (bsum = 64·hi + lo, lo in [0, 63]): two MMAs with
    // K 16 of 32 used, as gemm2_kernel; mins are the high nibbles of the 16 scale bytes.
    const float da[2] = {f16v(ld16(blk0 + 80)), f16v(ld16(blk1 + 80))};
    const float dm[2] = {f16v(ld16(blk0 + 82)), f16v(ld16(blk1 + 82))};
    const uint32_t am[4] = {(ld32(blk0 + 4 * t) >> 4) & 0x0F0F0F0Fu, (ld32(blk1 + 4 * t) >> 4) & 0x0F0F0F0Fu, 0u, 0u};
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      if (j >= nj) break;
      const int16_t* bs = s.qbs[slot] + (8 * j + g) * 16 + 4 * t;  // pair 8j + g, sub-blocks 4t … 4t + 3
      uint32_t lo = 0, hi = 0;
      if constexpr (kLean) {
        // The 4 sums as two words of int16 halves (one 8-byte load): byte k of lo = v_k & 63, of hi = the
        // low byte of v_k >> 6 (bits 6 … 13 of v_k: the logical shift of the word leaves them in place).
        const uint2 w = *reinterpret_cast<const uint2*>(bs);
        lo = __byte_perm(w.x, w.y, 0x6420) & 0x3F3F3F3Fu;
        hi = __byte_perm(w.x >> 6, w.y >> 6, 0x6420);
      } else {
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const int v = bs[k];
          lo |= static_cast<uint32_t>(v & 63) << (8 * k);
          hi |= static_cast<uint32_t>(static_cast<uint8_t>(static_cast<int8_t>(v >> 6))) << (8 * k);
        }
      }
      const uint32_t blo[2] = {lo, 0u}, bhi[2] = {hi, 0u};
      int slo[4] = {0, 0, 0, 0}, shi[4] = {0, 0, 0, 0};
      mma_s8(slo, am, blo);
      mma_s8(shi, am, bhi);
      const float db[2] = {s.qd[slot][8 * j + 2 * t], s.qd[slot][8 * j + 2 * t + 1]};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int summs = 64 * shi[e] + slo[e];
        const float dall = db[e & 1] * da[e >> 1];
        const float dmin = db[e & 1] * dm[e >> 1];
        if constexpr (kLean) {  // |ic| ≤ 256·45·128, |summs| ≤ 16·15·2048: both < 2^22, exact by small_i2f
          acc[j][e] += dall * small_i2f(ic[j][e]) - dmin * small_i2f(summs);
        } else {
          acc[j][e] += dall * static_cast<float>(ic[j][e]) - dmin * static_cast<float>(summs);
        }
      }
    }
  }
}

template <GgmlType T, bool kAluSigns, bool kPackedGrid = false>
__global__ void __launch_bounds__(kDThreads, 2) experts_direct_kernel(GemmParams p, PlaneParams q, int row_blocks) {
  constexpr int PA = raw_a_pitch<T>();
  extern __shared__ __align__(16) unsigned char smem_raw[];
  DSmem<T>& s = *reinterpret_cast<DSmem<T>*>(smem_raw);
  __shared__ int64_t arow[kBN];

  const int it = static_cast<int>(blockIdx.x);
  if (it >= row_blocks * *p.n_tiles) return;  // the whole block: no barrier reached
  const int32_t* tl = p.tiles + 3 * (it / row_blocks);
  const int64_t m0 = int64_t{it % row_blocks} * kBM;
  const uint8_t* wbase = p.w + static_cast<uint64_t>(tl[0]) * p.expert_bytes;
  const int nvec = tl[2];
  for (int c = threadIdx.x; c < kBN; c += kDThreads) {
    const int64_t v = c < nvec ? p.order[tl[1] + c] : -1;
    arow[c] = v < 0 ? -1 : v / p.x_div;
  }
  uint16_t* gcodes = reinterpret_cast<uint16_t*>(s.smask);  // kPackedGrid: the codes, in the unused mask table
  if constexpr (T == GgmlType::IQ2_XXS) {
    for (int i = threadIdx.x; i < 256; i += kDThreads) {
      if constexpr (kPackedGrid) {
        uint32_t code = 0;
        for (int k = 0; k < 8; ++k) {
          const uint32_t v = static_cast<uint32_t>(c_grid[i] >> (8 * k)) & 0xff;
          code |= (v == 8 ? 0u : v == 25 ? 1u : 2u) << (2 * k);
        }
        gcodes[i] = static_cast<uint16_t>(code);
      } else {
        s.grid[i] = c_grid[i];
      }
    }
    if constexpr (!kAluSigns)
      for (int i = threadIdx.x; i < 128; i += kDThreads) s.smask[i] = sign_masks(c_signs[i]);
  }
  __syncthreads();

  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, g = lane / 4, t = lane % 4;
  const int r0 = 16 * warp + g;                  // this lane's tile rows r0 and r0 + 8
  const int nj = min(8, (nvec + 7) / 8);         // n8 fragments holding pairs (uniform over the block)
  const int nkb = static_cast<int>(p.cols / kBK);
  // Low 4 bits of each row's address at stage 0 (the copy windows put a row's bytes that far in).
  const uint32_t base_lo = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(wbase)) & 15;
  const uint32_t rb_lo = static_cast<uint32_t>(p.row_bytes & 15);
  const uint32_t sh0 = base_lo + static_cast<uint32_t>(m0 + r0) * rb_lo, sh1 = sh0 + 8 * rb_lo;
  float acc[8][4] = {};

#pragma unroll
  for (int st = 0; st < kDRing - 1; ++st) {
    if (st < nkb) copy_stage_d<T>(s, p, q, wbase, m0, arow, st);
    cp_async_commit();
  }
  for (int kb = 0; kb < nkb; ++kb) {
    cp_async_wait<kDRing - 2>();
    __syncthreads();  // stage kb landed everywhere; stage kb − 1's slot is no longer read
    if (kb + kDRing - 1 < nkb) copy_stage_d<T>(s, p, q, wbase, m0, arow, kb + kDRing - 1);
    cp_async_commit();
    const int slot = kb % kDRing;
    const uint32_t skb = static_cast<uint32_t>(kb) * stage_w_bytes<T>();
    const uint8_t* blk0 = s.raw_a[slot] + r0 * PA + ((sh0 + skb) & 15);
    const uint8_t* blk1 = s.raw_a[slot] + (r0 + 8) * PA + ((sh1 + skb) & 15);
    direct_stage<T, kAluSigns, kPackedGrid>(s, slot, blk0, blk1, nj, lane, gcodes, acc);
  }
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int row = r0 + (e >= 2 ? 8 : 0), col = 8 * j + 2 * t + (e & 1);
      if (col >= nvec || m0 + row >= p.rows) continue;
      float val = acc[j][e];
      if constexpr (T == GgmlType::IQ2_XXS) val = 0.125f * val;  // once per row, as dot_iq2_xxs_ref
      p.y[static_cast<int64_t>(p.order[tl[1] + col]) * p.y_stride + m0 + row] = val;
    }
}

// ---- variant 8: variant 6 walking several items per block through one continuous ring ----
// Variant 6 runs a block per (128 rows, tile) item: 8 (Q2_K down, K 2,048) or 16 (IQ2_XXS gate/up)
// stages, each block paying its table fill, its tile prologue and the latency of its first two stages
// with nothing of its own to overlap them. Here a grid of two blocks per SM walks the items it =
// blockIdx.x, + gridDim.x, … (neighbouring blocks share a tile's activations in L2), the stages of its
// items one sequence G = u·nkb + kb, so the copies of item u + 1's first stages are in flight while the
// warps finish item u. Each thread copies the activation chunks of the 4 pairs c = tid / 16 + 16i of its
// copy item (their activation rows in registers, reloaded when the copy sequence enters a new item).
// The stage arithmetic is variant 6's (direct_stage), so every sum and float term is the same.
struct WalkItem {
  const uint8_t* wbase;
  int32_t m0, first, nvec;
};

__device__ inline WalkItem walk_item(const GemmParams& p, int it, int row_blocks) {
  const int32_t* tl = p.tiles + 3 * (it / row_blocks);
  return WalkItem{p.w + static_cast<uint64_t>(tl[0]) * p.expert_bytes, (it % row_blocks) * kBM, tl[1], tl[2]};
}

// Stage kb of item `in` into ring slot `slot`; ar[i]: activation row of pair tid / 16 + 16i (−1: absent).
template <GgmlType T>
__device__ inline void copy_stage_walk(DSmem<T>& s, const GemmParams& p, const PlaneParams& q, const WalkItem& in,
                                       const int32_t (&ar)[4], int slot, int kb) {
  constexpr int PA = raw_a_pitch<T>(), CA = PA / 16;
  uint8_t* ra = s.raw_a[slot];
  for (int j = threadIdx.x; j < kBM * CA; j += kDThreads) {
    const int r = j / CA, k = j % CA;
    if (in.m0 + r < p.rows) copy_chunk(ra + r * PA, stage_w<T>(p, in.wbase, in.m0 + r, kb), stage_w_bytes<T>(), k);
  }
  const int64_t K = p.cols, nb = K / kBK;
  const int k = threadIdx.x % 16;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int c = static_cast<int>(threadIdx.x) / 16 + 16 * i;
    if (ar[i] < 0) continue;
    const int64_t a = ar[i];
    cp_async16(s.q[slot] + c * kLd + 16 * k, q.qs + a * K + int64_t{kb} * kBK + 16 * k);
    if (k == 0) cp_async4(s.qd[slot] + c, q.d + a * nb + kb);
    if constexpr (T == GgmlType::Q2_K) {
      if (k == 1 || k == 2)
        cp_async16(s.qbs[slot] + c * 16 + 8 * (k - 1), q.bsums + a * (K / 16) + int64_t{kb} * 16 + 8 * (k - 1));
    }
  }
}

template <GgmlType T, int kUnroll, bool kLean, bool kPrmt = false>
__global__ void __launch_bounds__(kDThreads, 2) experts_walk_kernel(GemmParams p, PlaneParams q, int row_blocks) {
  constexpr int PA = raw_a_pitch<T>();
  extern __shared__ __align__(16) unsigned char smem_raw[];
  DSmem<T>& s = *reinterpret_cast<DSmem<T>*>(smem_raw);

  const int n_items = row_blocks * *p.n_tiles, bid = static_cast<int>(blockIdx.x), nblk = static_cast<int>(gridDim.x);
  if (bid >= n_items) return;  // the whole block: no barrier reached
  const int n_mine = (n_items - bid + nblk - 1) / nblk;
  const int nkb = static_cast<int>(p.cols / kBK), total = n_mine * nkb;
  if constexpr (T == GgmlType::IQ2_XXS) {
    for (int i = threadIdx.x; i < 256; i += kDThreads) {
      if constexpr (kPrmt) {
        reinterpret_cast<uint32_t*>(s.smask)[i] = prmt_selector(c_grid[i]);
      } else {
        s.grid[i] = c_grid[i];
      }
    }
  }

  // Copy side: the item of the last stage issued (cu) and its pairs' activation rows.
  int cu = -1;
  WalkItem ci{};
  int32_t ar[4];
  auto copy = [&](int G) {
    const int u = G / nkb;
    if (u != cu) {
      cu = u;
      ci = walk_item(p, bid + u * nblk, row_blocks);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int c = static_cast<int>(threadIdx.x) / 16 + 16 * i;
        const int32_t v = c < ci.nvec ? p.order[ci.first + c] : -1;
        ar[i] = v < 0 ? -1 : static_cast<int32_t>(static_cast<uint32_t>(v) / static_cast<uint32_t>(p.x_div));
      }
    }
    copy_stage_walk<T>(s, p, q, ci, ar, G % kDRing, G - u * nkb);
  };
#pragma unroll
  for (int G = 0; G < kDRing - 1; ++G) {
    if (G < total) copy(G);
    cp_async_commit();
  }
  __syncthreads();  // the grid table

  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, t = lane % 4;
  const int r0 = 16 * warp + lane / 4;  // this lane's tile rows r0 and r0 + 8
  const uint32_t rb_lo = static_cast<uint32_t>(p.row_bytes & 15);
  WalkItem mi{};
  int nj = 0;
  uint32_t sh0 = 0, sh1 = 0;
  float acc[8][4];
  for (int G = 0, kb = 0, u = 0; G < total; ++G) {
    cp_async_wait<kDRing - 2>();
    __syncthreads();  // stage G landed everywhere; stage G − 1's slot is no longer read
    if (G + kDRing - 1 < total) copy(G + kDRing - 1);
    cp_async_commit();
    if (kb == 0) {  // a new item: its tile, the fragments holding pairs, its rows' window shifts
      mi = walk_item(p, bid + u * nblk, row_blocks);
      nj = min(8, (mi.nvec + 7) / 8);  // uniform over the block
      sh0 = (static_cast<uint32_t>(reinterpret_cast<uintptr_t>(mi.wbase)) & 15) + static_cast<uint32_t>(mi.m0 + r0) * rb_lo;
      sh1 = sh0 + 8 * rb_lo;
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[j][e] = 0.0f;
    }
    const int slot = G % kDRing;
    const uint32_t skb = static_cast<uint32_t>(kb) * stage_w_bytes<T>();
    const uint8_t* blk0 = s.raw_a[slot] + r0 * PA + ((sh0 + skb) & 15);
    const uint8_t* blk1 = s.raw_a[slot] + (r0 + 8) * PA + ((sh1 + skb) & 15);
    direct_stage<T, true, false, kUnroll, kLean, kPrmt>(s, slot, blk0, blk1, nj, lane, nullptr, acc);
    if (++kb < nkb) continue;
    kb = 0;
    ++u;
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int row = r0 + (e >= 2 ? 8 : 0), col = 8 * j + 2 * t + (e & 1);
        if (col >= mi.nvec || mi.m0 + row >= p.rows) continue;
        float val = acc[j][e];
        if constexpr (T == GgmlType::IQ2_XXS) val = 0.125f * val;  // once per row, as dot_iq2_xxs_ref
        p.y[static_cast<int64_t>(p.order[mi.first + col]) * p.y_stride + mi.m0 + row] = val;
      }
  }
}

template <GgmlType T>
void launch_persistent(CudaBackend& be, const GemmParams& p, unsigned tiles) {
  const size_t smem = sizeof(XSmem<T>);
  int sms = 0;
  if (!be.check(cudaFuncSetAttribute(experts_persistent_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
                "gemm experts smem") ||
      !be.check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, be.device()), "multiprocessors"))
    return;
  const int row_blocks = static_cast<int>(grid_for(p.rows, kBM));
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>(sms, int64_t{row_blocks} * tiles));
  experts_persistent_kernel<T><<<grid, kXThreads, smem, be.stream()>>>(p, row_blocks);
  be.launched("gemm experts (int8 tensor cores, warp-specialised, persistent)");
}

template <GgmlType T>
void launch(CudaBackend& be, const GemmParams& p, unsigned tiles) {
  const size_t smem = sizeof(XSmem<T>);
  if (!be.check(cudaFuncSetAttribute(experts_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
                "gemm experts smem"))
    return;
  experts_kernel<T><<<dim3(grid_for(p.rows, kBM), tiles), kXThreads, smem, be.stream()>>>(p);
  be.launched("gemm experts (int8 tensor cores, warp-specialised)");
}

}  // namespace

// CudaBackendOptions::gemm_experts = −1: on the H200 (docs/PERF.md, W1–W3) variants 1–4 were slower than
// gemm2_kernel (the 8 producer warps' decode is latency-bound); 5–7 bit for bit the same, the MoE of a
// 2,048-token chunk per layer 4.365 (5), 3.988 (6: computed signs), 4.395 (7) against 4.583 ms.
constexpr int kExpertsAuto = 6;

int experts_variant(int option) { return option < 0 ? kExpertsAuto : option; }

cudaError_t upload_gemm_experts_tables() {
  cudaError_t e = cudaMemcpyToSymbol(c_grid, kIq2xxsGrid, sizeof(kIq2xxsGrid));
  if (e != cudaSuccess) return e;
  return cudaMemcpyToSymbol(c_signs, kKsignsIq2xs, sizeof(kKsignsIq2xs));
}

bool gemm_experts_fits(GgmlType t, int smem_optin) {
  if (t != GgmlType::IQ2_XXS && t != GgmlType::Q2_K) return false;
  const size_t need = (t == GgmlType::IQ2_XXS ? sizeof(XSmem<GgmlType::IQ2_XXS>) : sizeof(XSmem<GgmlType::Q2_K>)) +
                      2 * kBN * sizeof(int64_t);
  return static_cast<size_t>(smem_optin) >= need;
}

void gemm_experts(CudaBackend& be, const GemmParams& p, GgmlType t, unsigned tiles, int variant) {
  // The persistent walk needs ≥ 3 stages per item (its item ring, above) and item counts in int.
  const bool persistent = variant == 2 && p.cols / kBK >= 3 && (p.rows / kBM + 1) * int64_t{tiles} < (int64_t{1} << 30);
  if (t == GgmlType::IQ2_XXS) {
    persistent ? launch_persistent<GgmlType::IQ2_XXS>(be, p, tiles) : launch<GgmlType::IQ2_XXS>(be, p, tiles);
  } else {
    persistent ? launch_persistent<GgmlType::Q2_K>(be, p, tiles) : launch<GgmlType::Q2_K>(be, p, tiles);
  }
}

bool gemm_experts_planes(CudaBackend& be, const GemvJob& j, DeviceScratch& scratch, int variant) {
  const GgmlType t = j.w.type;
  if ((t != GgmlType::IQ2_XXS && t != GgmlType::Q2_K) || !j.groups || j.w.cols % 1024 != 0 ||
      reinterpret_cast<uintptr_t>(j.w.data) % 16 != 0)  // (the weight windows read ≤ 15 bytes before a row)
    return false;
  int optin = 0, sms = 0;
  if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, be.device()) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, be.device()) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  const size_t smem = t == GgmlType::IQ2_XXS ? sizeof(PSmem<GgmlType::IQ2_XXS>) : sizeof(PSmem<GgmlType::Q2_K>);
  if (static_cast<size_t>(optin) < smem + 2 * kBN * sizeof(int64_t) + 2 * sizeof(ItemInfo)) return false;
  const int64_t rows = (j.n_vec + j.x_div - 1) / j.x_div, K = j.w.cols, nb = K / kQK_K;
  const int row_blocks = static_cast<int>(grid_for(j.w.rows, kBM));
  const int64_t items = int64_t{row_blocks} * j.groups->max_tiles;
  if (rows * nb >= (int64_t{1} << 31) || items >= (int64_t{1} << 30)) return false;
  // Planes: quants, then d and bsums each on a 256-byte boundary.
  const uint64_t d_off = (static_cast<uint64_t>(rows * K) + 255) / 256 * 256;
  const uint64_t bs_off = (d_off + static_cast<uint64_t>(rows * nb) * 4 + 255) / 256 * 256;
  if (!be.ensure(scratch, bs_off + static_cast<uint64_t>(rows * (K / 16)) * 2, "quantized activation planes"))
    return true;  // the failure is recorded
  auto* base = static_cast<uint8_t*>(scratch.ptr);
  const PlaneParams q{reinterpret_cast<const int8_t*>(base), reinterpret_cast<const float*>(base + d_off),
                      reinterpret_cast<const int16_t*>(base + bs_off)};
  if (variant >= 5) {
    quantize_q8_K_planes_kernel<true><<<grid_for(rows * nb * kWarp, 256), 256, 0, be.stream()>>>(j.x, j.x_stride, rows, K, q);
  } else {
    quantize_q8_K_planes_kernel<false><<<grid_for(rows * nb * kWarp, 256), 256, 0, be.stream()>>>(j.x, j.x_stride, rows, K, q);
  }
  if (!be.launched("quantize activation planes")) return true;
  GemmParams p{};
  p.w = static_cast<const uint8_t*>(j.w.data);
  p.row_bytes = j.w.row_bytes;
  p.expert_bytes = j.expert_bytes;
  p.rows = j.w.rows;
  p.cols = K;
  p.act = base;
  p.act_stride = static_cast<uint64_t>(K);
  p.x_div = j.x_div;
  p.y = j.y;
  p.y_stride = j.y_stride;
  p.n_vec = j.n_vec;
  p.order = j.groups->order;
  p.tiles = j.groups->tiles;
  p.n_tiles = j.groups->n_tiles;
  if (variant >= 5 && variant <= 11) {
    const size_t dsmem = t == GgmlType::IQ2_XXS ? sizeof(DSmem<GgmlType::IQ2_XXS>) : sizeof(DSmem<GgmlType::Q2_K>);
    auto run_direct = [&](auto kernel) {
      if (!be.check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, dsmem), "gemm experts smem"))
        return;
      // Variant 8 walks: two resident blocks per SM (launch bounds, ~90 KB of shared memory each).
      const int64_t grid = variant >= 8 ? std::min<int64_t>(items, int64_t{2} * sms) : items;
      kernel<<<static_cast<unsigned>(grid), kDThreads, dsmem, be.stream()>>>(p, q, row_blocks);
      be.launched("gemm experts (int8 tensor cores, fragments decoded in registers)");
    };
    // 8: sub-block loop unrolled by 2 (as variant 6); 9: 8 with the lean Q2_K finish; 10: 9 unrolled by 4;
    // 11: 9 with the IQ2_XXS bytes by byte permutes of 32-bit selectors (prmt_selector).
    if (variant >= 8) {
      if (t == GgmlType::IQ2_XXS) {
        run_direct(variant == 11  ? experts_walk_kernel<GgmlType::IQ2_XXS, 2, true, true>
                   : variant == 10 ? experts_walk_kernel<GgmlType::IQ2_XXS, 4, true>
                   : variant == 9 ? experts_walk_kernel<GgmlType::IQ2_XXS, 2, true>
                                  : experts_walk_kernel<GgmlType::IQ2_XXS, 2, false>);
      } else {
        run_direct(variant == 11  ? experts_walk_kernel<GgmlType::Q2_K, 2, true>
                   : variant == 10 ? experts_walk_kernel<GgmlType::Q2_K, 4, true>
                   : variant == 9 ? experts_walk_kernel<GgmlType::Q2_K, 2, true>
                                  : experts_walk_kernel<GgmlType::Q2_K, 2, false>);
      }
    } else if (t == GgmlType::IQ2_XXS) {
      if (variant == 7) {
        run_direct(experts_direct_kernel<GgmlType::IQ2_XXS, true, true>);
      } else if (variant == 6) {
        run_direct(experts_direct_kernel<GgmlType::IQ2_XXS, true>);
      } else {
        run_direct(experts_direct_kernel<GgmlType::IQ2_XXS, false>);
      }
    } else {
      run_direct(experts_direct_kernel<GgmlType::Q2_K, false>);
    }
    return true;
  }
  // Walking several items needs ≥ 3 stages per item (the item ring of experts_persistent_kernel).
  const bool walk = variant == 3 && K / kBK >= 3;
  const unsigned grid = static_cast<unsigned>(walk ? std::min<int64_t>(sms, items) : items);
  auto run = [&](auto kernel) {
    if (!be.check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem), "gemm experts smem"))
      return;
    kernel<<<grid, kXThreads, smem, be.stream()>>>(p, q, row_blocks);
    be.launched("gemm experts (int8 tensor cores, warp-specialised, activation planes)");
  };
  if (t == GgmlType::IQ2_XXS) {
    run(experts_planes_kernel<GgmlType::IQ2_XXS>);
  } else {
    run(experts_planes_kernel<GgmlType::Q2_K>);
  }
  return true;
}

}  // namespace ds4::backend::cuda
