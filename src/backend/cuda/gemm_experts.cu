// gemm_experts.cu — the routed experts' grouped prefill GEMM (IQ2_XXS gate/up, Q2_K down, against Q8_K
// activations; tiles of ≤ 64 pairs of one expert from group_by_expert) with the weights decoded straight
// into MMA fragments by the warp that multiplies them.
//
// Why a kernel of its own: ops_gemm.cu's gemm2_kernel runs copy, weight decode into an int8 tile and MMA
// in turn inside a block, two barriers per 256-value stage (~130 TOP/s on the Flash shapes, ~48 pairs per
// expert). Here the activations are quantized into planes whose 32-value groups are stored in the K order
// of the MMA fragments (quantize_q8_K_planes_kernel), so each lane's k32 fragment holds 8 consecutive
// values of a group — one IQ2_XXS grid entry under one sign index, or 8 Q2_K quants under one scale — and
// each warp decodes its 16 rows × 32 values per sub-block in registers, once per (expert, k-tile), for all
// of the tile's pairs (ldmatrix fragments of the quants); raw weight bytes and activation planes go
// through a 3-stage cp.async ring with one barrier per stage.
// Two kernels (CudaBackendOptions::gemm_experts), both two resident blocks per SM walking the (128 rows,
// tile) items through one continuous ring: experts_fast_kernel (20: fewer instructions per stage, see
// there; 32, 27, 29, 30: its lean stage and items handed out by a counter, see there; 34: 32 with IQ2_XXS
// decoded by shared tables — table_stage, experts_iq2.cuh; 44: 34 with gate and up on one
// quantization in one launch, the tiles dearest first, see experts_fast_kernel's kAlign / kSkip; 48: 44 with the
// table lookups by 32-bit shared addresses, table_stage's kLA; 50 (the default): 48 on table_stage_step — stepped 32-bit addresses,
// raw prmt, small tiles' fragments a sub-block ahead — and the copy state in shared memory, see there; the default)
// and experts_walk_kernel (13, an earlier default).
// Numerics: those of gemm2_kernel (so bit-identical to it and to the CPU op): the same integer block
// sums (IQ2_XXS: Σ_g ls_g·Σ_32 w·q_x; Q2_K: Σ (scale·q)·q_x and Σ min·bsum; integer sums do not depend on
// the order of k), the same float expressions in the same order per super-block, the same 0.125 of
// IQ2_XXS once per output.
// Needs 16-byte aligned weights, K a multiple of 1,024 and ≤ ~108 KB of shared memory per block
// (gemm_experts_planes checks). Deliberately not here: Q8_0 and dense jobs (gemm_q8.cu, ops_gemm.cu),
// the grouping (ops_gemm.cu), other widths and alignments (gemm2_kernel).
#include <algorithm>
#include <climits>
#include <type_traits>

#include "backend/cuda/act_quant.cuh"
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_impl.h"
#include "backend/cuda/experts_order.h"
#include "backend/cuda/experts_iq2.cuh"
#include "backend/cuda/gemm_experts.h"
#include "backend/cuda/gemm_tiles.cuh"
#include "backend/cuda/mma_s8.cuh"
#include "quant/blocks.h"
#include "quant/iq2xxs_tables.h"

namespace ds4::backend::cuda {

namespace {

__constant__ uint64_t c_grid[256];
__constant__ Iq2TableSrc c_iq2;  // variant 34 (experts_iq2.cuh)

// Variant 44 and its successors 48, 50 (each changes only the IQ2_XXS gate/up stage): they share 44's host paths —
// gate and up in one launch, the 16-byte activation loads, the tiles ordered by cost, 29's Q2_K down kernel.
constexpr bool from_variant_44(int variant) { return variant == 44 || variant == 48 || variant == 50; }

// The Q8_K activation rows as three planes (gemm_experts_planes) — quants [rows][K] int8, d [rows][K/256]
// f32, bsums [rows][K/16] int16: the values of quantize_act's BlockQ8_K (quantize_q8_K_warp_to), so a
// stage's quants are whole 16-byte chunks that cp.async puts straight into the MMA tile.
struct PlaneParams {
  const int8_t* qs;       // [act rows][K]
  const float* d;         // [act rows][K / 256]
  const int16_t* bsums;   // [act rows][K / 16]
  int* next_item;         // experts_fast_kernel kDyn: the items handed out past the first gridDim.x (zeroed
                          // before each launch), else unused
  // Variant 30 (experts_fast_kernel): the up projection in the gate's launch — its expert 0 (same shape,
  // row and expert bytes as the gate's) and its outputs (the gate's y stride); items row_blocks·n_tiles …
  // are its own. Null: one matrix.
  const uint8_t* w2;
  float* y2;
};

__device__ inline void cp_async4(void* dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smem_addr(dst)), "l"(src) : "memory");
}
// The lean copies' forms (experts_fast_kernel kLeanCopy): shared addresses as 32-bit offsets from the
// block's base (no generic→shared conversion per copy), and a byte count n (0: the destination zero-filled,
// nothing read) instead of a branch around absent pairs and rows.
__device__ inline void cp_async16_n(uint32_t dst, const void* src, int n) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n) : "memory");
}
__device__ inline void cp_async4_n(uint32_t dst, const void* src, int n) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(n) : "memory");
}

// One warp per 256-value block of x [rows][x_stride] into the planes of `q` (K = cols), the quants of each
// 32-value group stored in the fragments' K order (byte 4t + j = value 8t + j, byte 16 + 4t + j = value
// 8t + 4 + j): lane l, which holds values 8l … 8l + 7 (chunk l % 4 of group l / 4), writes its 8 quants as
// two 4-byte words at 32·(l / 4) + 4·(l % 4) and + 16. Same values, same d and bsums. sw.u set: the
// values are moe_swiglu_value(x, u, weights[row], clamp) — moe_swiglu4_kernel's, quantized without
// being written (u with x's stride).
// kVec4 (variant 44): a lane's 8 values (and u's) by two 16-byte loads (x, u and x_stride 16-byte aligned,
// checked by the caller) instead of 8 scalar ones; the same values, so the same bits.
template <bool kVec4 = false>
__global__ void __launch_bounds__(256) quantize_q8_K_planes_kernel(const float* x, int64_t x_stride, int64_t rows,
                                                                   int64_t cols, PlaneParams q, ExpertsSwiglu sw) {
  __shared__ alignas(16) int8_t stage[256 / kWarp][kQK_K];  // each warp's natural-order quants
  const int64_t nb = cols / kQK_K;
  const int64_t blk = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (blk >= rows * nb) return;
  const int64_t r = static_cast<uint32_t>(blk) / static_cast<uint32_t>(nb), b = blk - r * nb;  // rows·nb < 2^31
  const float* src = x + r * x_stride + b * kQK_K + 8 * lane;
  float v[8];
  auto load8 = [](const float* a, float (&o)[8]) {
    if constexpr (kVec4) {
      const float4 l = reinterpret_cast<const float4*>(a)[0], h = reinterpret_cast<const float4*>(a)[1];
      o[0] = l.x, o[1] = l.y, o[2] = l.z, o[3] = l.w, o[4] = h.x, o[5] = h.y, o[6] = h.z, o[7] = h.w;
    } else {
      for (int i = 0; i < 8; ++i) o[i] = a[i];
    }
  };
  load8(src, v);
  if (sw.u) {
    float us[8];
    load8(sw.u + (src - x), us);
    const float w = sw.weights[r];
    for (int i = 0; i < 8; ++i) v[i] = moe_swiglu_value(v[i], us[i], w, sw.clamp);
  }
  int8_t* qs = const_cast<int8_t*>(q.qs) + blk * kQK_K;
  int8_t* mine = stage[threadIdx.x / kWarp];
  quantize_q8_K_warp_to(v, lane, const_cast<float*>(q.d) + blk, mine, const_cast<int16_t*>(q.bsums) + blk * 16);
  __syncwarp();
  const uint2 w = *reinterpret_cast<const uint2*>(mine + 8 * lane);  // this lane's own 8 quants
  int8_t* g = qs + 32 * (lane / 4) + 4 * (lane % 4);
  *reinterpret_cast<uint32_t*>(g) = w.x;
  *reinterpret_cast<uint32_t*>(g + 16) = w.y;
}

// ---- the direct kernels: weights decoded straight into MMA fragments ----
// The k32 fragment of lane (g, t) — MMA positions 4t … 4t + 3 and 16 + 4t … — holds values 8t … 8t + 7 of
// the group (the planes' K order): one IQ2_XXS grid entry with one sign index (low and high 32 bits), or 8
// consecutive Q2_K quants under one scale. A block: 8 warps of 16 rows × 64 pairs (1 m16 × 8 n8), raw
// weight bytes and activation planes through a 3-stage cp.async ring, one barrier per stage; each warp
// decodes its own rows from the raw bytes in registers (the IQ2_XXS grid — with experts_fast_kernel also
// its sign masks — in shared memory), ≤ ~108 KB of shared memory: two blocks per SM.
constexpr int kDWarps = 8, kDThreads = kDWarps * kWarp, kDRing = 3;
static_assert(kDWarps * 16 == kBM, "8 warps of 16 rows");

// R: ring slots; GR: copies of the IQ2_XXS grid, entry i's copy c at grid[GR·i + c], read by lane l from
// copy l % GR — with 16 copies the 16 lanes of a half-warp's 8-byte loads hit 16 different bank pairs
// whatever the indices (one copy: a 2.7-way average conflict on random indices, docs/PERF.md).
template <GgmlType T, int R = kDRing, int GR = 1>
struct DSmem {
  enum : int { kGridCopies = GR };
  alignas(16) uint8_t raw_a[R][kBM * raw_a_pitch<T>()];
  alignas(16) int8_t q[R][kBN * kLd];    // permuted activation quants, pitch kLd (ldmatrix)
  alignas(16) int16_t qbs[R][kBN * 16];  // Q2_K bsums
  float qd[R][kBN];                      // d_x
  uint64_t grid[256 * GR];               // IQ2_XXS grid
};

// A sub-block's raw weight words for the lane's two rows (blk0, blk1), read from shared memory: IQ2_XXS
// the sign/scale word and the grid entry of the lane's 8 values; Q2_K the scale byte and the two words of
// the lane's 8 quants. decode_sub turns them into the A fragment (and IQ2_XXS's scales ls).
template <GgmlType T>
struct RawSub;
template <>
struct RawSub<GgmlType::IQ2_XXS> {
  uint32_t a1[2];
  uint64_t gr[2];
};
template <>
struct RawSub<GgmlType::Q2_K> {
  uint32_t sc[2], lo[2], hi[2];
};

template <GgmlType T, class S>
__device__ __forceinline__ RawSub<T> load_sub(const S& s, const uint8_t* blk0, const uint8_t* blk1, int sb, int lane) {
  RawSub<T> r;
  const int t = lane % 4;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if constexpr (T == GgmlType::IQ2_XXS) {
      const uint8_t* b = (h ? blk1 : blk0) + 2 + 8 * sb;  // 4 grid indices, then 4 × 7 sign bits + ls
      r.a1[h] = ld32_u16(b + 4);
      r.gr[h] = s.grid[S::kGridCopies * b[t] + lane % S::kGridCopies];
    } else {  // Q2_K: element 32·sb + k in byte 16 + 32·(sb / 4) + k; scale of k / 16
      const uint8_t* b = h ? blk1 : blk0;
      r.sc[h] = b[2 * sb + (t >> 1)] & 15;
      const uint8_t* qq = b + 16 + 32 * (sb / 4) + 8 * t;
      r.lo[h] = ld32(qq);
      r.hi[h] = ld32(qq + 4);
    }
  }
  return r;
}

template <GgmlType T>
__device__ __forceinline__ void decode_sub(const RawSub<T>& r, int sb, int t, uint32_t (&af)[4], int (&ls)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if constexpr (T == GgmlType::IQ2_XXS) {
      const uint32_t a1 = r.a1[h];
      ls[h] = static_cast<int>(2 * (a1 >> 28) + 1);
      const uint32_t si = (a1 >> (7 * t)) & 127;
      const uint32_t sg = si | ((__popc(si) & 1u) << 7);  // kKsignsIq2xs[si]
      const uint32_t slo = byte_bits4(sg & 15), shi = byte_bits4(sg >> 4);
      // Grid bytes are 8, 25 or 43: (g ^ 0xFF) + 1 = −g in the byte, no carry out.
      af[h] = (static_cast<uint32_t>(r.gr[h]) ^ (slo * 0xFFu)) + slo;            // values 8t … 8t + 3
      af[2 + h] = (static_cast<uint32_t>(r.gr[h] >> 32) ^ (shi * 0xFFu)) + shi;  // values 8t + 4 … 8t + 7
    } else {  // bits 2·(sb % 4) of each byte
      const int l2 = 2 * (sb % 4);
      af[h] = ((r.lo[h] >> l2) & 0x03030303u) * r.sc[h];  // bytes q·scale ≤ 45: no carry between bytes
      af[2 + h] = ((r.hi[h] >> l2) & 0x03030303u) * r.sc[h];
    }
  }
}

// One ring slot: the warp's tile rows r0 = 16·warp + g and r0 + 8 (their weight blocks at blk0 / blk1 in
// the raw slot) × the first 8·kNJ pairs of quant slot `slot`: the integer block sums of the stage's
// super-block, then gemm2_kernel's float terms of the stage into acc[j][e] (pair 8j + 2t + (e & 1), row
// r0 + 8·(e >= 2)). IQ2_XXS signs: ksigns[si] = si | parity(si) << 7, expanded by integer operations (a
// replicated mask table measured slower, docs/PERF.md). kUnroll: the sub-block loop's unrolling. kNJ: the
// fragment count fixed at compile time (the tile's rounded up by the caller; the extra columns are never
// stored), so the fragment loops are straight-line code whose loads and MMAs the compiler can overlap. The
// Q2_K finish: the 4 bsums of a fragment by one 8-byte load, small_i2f for the block sums (both under its
// 2^22 bound).
template <GgmlType T, int kUnroll, int kNJ, class S>
__device__ __forceinline__ void direct_stage(const S& s, int slot, const uint8_t* blk0, const uint8_t* blk1, int lane,
                                             float (&acc)[8][4]) {
  const int g = lane / 4, t = lane % 4;
  constexpr int nj = kNJ;
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
    decode_sub<T>(load_sub<T>(s, blk0, blk1, sb, lane), sb, t, af, ls);
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
      // The 4 sums as two words of int16 halves (one 8-byte load): byte k of lo = v_k & 63, of hi = the
      // low byte of v_k >> 6 (bits 6 … 13 of v_k: the logical shift of the word leaves them in place).
      const uint2 w = *reinterpret_cast<const uint2*>(bs);
      const uint32_t lo = __byte_perm(w.x, w.y, 0x6420) & 0x3F3F3F3Fu;
      const uint32_t hi = __byte_perm(w.x >> 6, w.y >> 6, 0x6420);
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
        // |ic| ≤ 256·45·128, |summs| ≤ 16·15·2048: both < 2^22, exact by small_i2f
        acc[j][e] += dall * small_i2f(ic[j][e]) - dmin * small_i2f(summs);
      }
    }
  }
}

// ---- variants 25 and 26: the lean stage (experts_fast_kernel's copies, fewer instructions per stage) ----
// Same integer sums and float expressions as direct_stage (so the same bits), fewer instructions:
//  * sub-block 0 peeled: its MMAs set the integer block sums (IQ2_XXS ic = ls·c; Q2_K from the bias
//    below) instead of zeroing 4·kNJ registers per stage and adding;
//  * Q2_K: the block sums start at kI2fBias, so their exact int→float (small_i2f, |v| < 2^22) is one FADD;
//  * Q2_K mins: Σ_16 min·bsum as ONE u8·s8 MMA (direct_stage: two s8 MMAs with K 16 of 32 and a 64·hi + lo
//    combine): A = {min (k 0–15), 16·min (k 16–31)} — both a nibble mask of the 16 scale bytes, 16·min ≤ 240
//    as u8 — and B = {bsum & 15, bsum >> 4} (bsum ∈ [−2032, 2032]: bsum >> 4 fits s8), started at the bias.
// kUnroll: the sub-block loop's unrolling after the peeled sub-block 0 (1 or 7).
constexpr int kI2fBias = 0x4B400000;  // __int_as_float(kI2fBias + v) − 12582912 = v for |v| < 2^22 (small_i2f)
__device__ __forceinline__ float biased_i2f(int b) { return __int_as_float(b) - 12582912.0f; }

// d = a·b + (c, c, c, c), a unsigned (u8), b signed (s8).
__device__ inline void mma_u8s8_from(int (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2], int c) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};\n"
      : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(c), "r"(c), "r"(c), "r"(c));
}

template <GgmlType T, int kUnroll, int kNJ, class S, int kAJ>
__device__ __forceinline__ void lean_stage(const S& s, int slot, const uint8_t* blk0, const uint8_t* blk1, int lane,
                                           float (&acc)[kAJ][4]) {
  static_assert(kNJ <= kAJ, "accumulators for every fragment");
  const int g = lane / 4, t = lane % 4;
  constexpr int nj = kNJ;
  const int8_t* qb = s.q[slot];
  int ic[8][4];
  // Sub-block sb's MMAs into ic; kFirst: the first of the stage (sets ic instead of adding).
  auto sub = [&](int sb, auto first) {
    constexpr bool kFirst = decltype(first)::value;
    uint32_t af[4];
    int ls[2] = {0, 0};
    decode_sub<T>(load_sub<T>(s, blk0, blk1, sb, lane), sb, t, af, ls);
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
          if constexpr (kFirst) {
            ic[2 * jj][e] = ls[e >> 1] * c0[e];
            ic[2 * jj + 1][e] = ls[e >> 1] * c1[e];
          } else {
            ic[2 * jj][e] += ls[e >> 1] * c0[e];
            ic[2 * jj + 1][e] += ls[e >> 1] * c1[e];
          }
        }
      } else if constexpr (kFirst) {
        mma_s8_from(ic[2 * jj], af, bf0, kI2fBias);
        mma_s8_from(ic[2 * jj + 1], af, bf1, kI2fBias);
      } else {
        mma_s8(ic[2 * jj], af, bf0);
        mma_s8(ic[2 * jj + 1], af, bf1);
      }
    }
  };
  sub(0, std::true_type{});
#pragma unroll(kUnroll)
  for (int sb = 1; sb < 8; ++sb) sub(sb, std::false_type{});
  if constexpr (T == GgmlType::IQ2_XXS) {  // direct_stage's finish
    const float da[2] = {f16v(ld16(blk0)), f16v(ld16(blk1))};
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      if (j >= nj) break;
      const float db[2] = {s.qd[slot][8 * j + 2 * t], s.qd[slot][8 * j + 2 * t + 1]};
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[j][e] += (da[e >> 1] * db[e & 1]) * static_cast<float>(ic[j][e]);
    }
  } else {
    const float da[2] = {f16v(ld16(blk0 + 80)), f16v(ld16(blk1 + 80))};
    const float dm[2] = {f16v(ld16(blk0 + 82)), f16v(ld16(blk1 + 82))};
    const uint32_t m0 = ld32(blk0 + 4 * t), m1 = ld32(blk1 + 4 * t);  // scale bytes 4t … 4t + 3: min << 4 | scale
    const uint32_t am[4] = {(m0 >> 4) & 0x0F0F0F0Fu, (m1 >> 4) & 0x0F0F0F0Fu, m0 & 0xF0F0F0F0u, m1 & 0xF0F0F0F0u};
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      if (j >= nj) break;
      const int16_t* bs = s.qbs[slot] + (8 * j + g) * 16 + 4 * t;  // pair 8j + g, sub-blocks 4t … 4t + 3
      // Byte k of lo = bsum_k & 15, of hi = bits 4 … 11 of bsum_k (= bsum_k >> 4 as s8): the logical
      // shift of the word leaves the high half's bits 4 … 11 in its byte 2.
      const uint2 w = *reinterpret_cast<const uint2*>(bs);
      const uint32_t b[2] = {__byte_perm(w.x, w.y, 0x6420) & 0x0F0F0F0Fu, __byte_perm(w.x >> 4, w.y >> 4, 0x6420)};
      int summs[4];
      mma_u8s8_from(summs, am, b, kI2fBias);
      const float db[2] = {s.qd[slot][8 * j + 2 * t], s.qd[slot][8 * j + 2 * t + 1]};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float dall = db[e & 1] * da[e >> 1];
        const float dmin = db[e & 1] * dm[e >> 1];
        acc[j][e] += dall * biased_i2f(ic[j][e]) - dmin * biased_i2f(summs[e]);
      }
    }
  }
}

// ---- variant 34: IQ2_XXS by shared tables (experts_iq2.cuh) ----
// The shared memory of the table kernels (IQ2_XXS only): lean_stage's ring without the Q2_K bsums, and the
// decode tables instead of the grid (~103 KB at 2 slots: two blocks per SM).
template <int R>
struct DSmemTab {
  alignas(16) uint8_t raw_a[R][kBM * raw_a_pitch<GgmlType::IQ2_XXS>()];
  alignas(16) int8_t q[R][kBN * kLd];  // permuted activation quants, pitch kLd (ldmatrix)
  float qd[R][kBN];                    // d_x
  alignas(16) Iq2Tables tab;
};

// lean_stage's IQ2_XXS stage (sub-block 0 peeled, the same integer block sums and float terms, so the same
// bits) with the values picked by selector words (iq2_sel, iq2_pick: ~11 instead of ~21 ALU per row and
// sub-block). kUnroll: the sub-block loop's unrolling after the peeled sub-block 0 (1 or 7); kNJ even.
// kA4 (variant 44: the stages whose sign/scale words sit on 4 bytes: blk0 and blk1 ≡ 2 mod 4): each word
// by one 4-byte load instead of two 2-byte loads and a merge.
// (Removed after session 11's H200 runs, docs/PERF.md: the split form — the scale folded into lo/hi fragments,
// two MMA chains — and odd fragment counts ending on an x2 ldmatrix, variants 35 … 39.)
// kLA (variant 48): the table lookups by 32-bit shared addresses from per-lane bases (base + 4·lane + 128·entry, one
// shift-add each, ld.shared) — the SASS of 44 (session 13 W4's ncu source page) formed each lookup's address by two
// IMADs (32·idx + lane, then ·4 + base) and the sign index's by five instructions (W5: writing the same index
// arithmetic with signed ints compiled to the identical SASS); the same words looked up, so the same bits.
template <int kUnroll, int kNJ, bool kA4 = false, bool kLA = false, class S, int kAJ>
__device__ __forceinline__ void table_stage(const S& s, int slot, const uint8_t* blk0, const uint8_t* blk1, int lane,
                                            float (&acc)[kAJ][4]) {
  static_assert(kNJ <= kAJ && kNJ % 2 == 0, "accumulators for every fragment, fragments in pairs");
  const int t = lane % 4;
  const int8_t* qb = s.q[slot];
  int ic[kNJ][4];
  // kLA: the lane's table bases and its sign-index shift, once per stage.
  [[maybe_unused]] const uint32_t cbase = smem_addr(s.tab.codes) + 4u * lane, sbase = smem_addr(s.tab.signs) + 4u * lane;
  [[maybe_unused]] const uint32_t s7 = 7u * t;
  auto sub = [&](int sb, auto first) {
    constexpr bool kFirst = decltype(first)::value;
    uint32_t al[4];
    int ls[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint8_t* b = (h ? blk1 : blk0) + 2 + 8 * sb;  // 4 grid indices, then 4 × 7 sign bits + ls
      const uint32_t a1 = kA4 ? ld32(b + 4) : ld32_u16(b + 4);
      uint32_t sel;
      if constexpr (kLA) {
        // 32-bit shared addresses: this lane's copy of entry i at base + 128·i (kIq2TabCopies words an entry).
        static_assert(kIq2TabCopies == 32, "entry pitch 128 bytes");
        const uint32_t ca = cbase + (static_cast<uint32_t>(b[t]) << 7), sa = sbase + (((a1 >> s7) & 127u) << 7);
        uint32_t cw, sw;
        asm("ld.shared.u32 %0, [%1];\n" : "=r"(cw) : "r"(ca));
        asm("ld.shared.u32 %0, [%1];\n" : "=r"(sw) : "r"(sa));
        sel = cw | sw;
      } else {
        sel = iq2_sel(s.tab, b[t], (a1 >> (7 * t)) & 127, lane);
      }
      ls[h] = static_cast<int>(2 * (a1 >> 28) + 1);
      al[h] = iq2_pick(kIq2Pos, kIq2Neg, sel);             // values 8t … 8t + 3
      al[2 + h] = iq2_pick(kIq2Pos, kIq2Neg, sel >> 16);  // values 8t + 4 … 8t + 7
    }
    // Fragment j's MMAs on its B fragment bf (pairs 8j … 8j + 7).
    auto frag = [&](int j, const uint32_t(&bf)[2]) {
      int c[4];
      mma_s8_from(c, al, bf, 0);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        if constexpr (kFirst) {
          ic[j][e] = ls[e >> 1] * c[e];
        } else {
          ic[j][e] += ls[e >> 1] * c[e];
        }
      }
    };
    const int8_t* qa = qb + ((lane & 7) + 8 * (lane >> 4)) * kLd + 32 * sb + 16 * ((lane >> 3) & 1);
#pragma unroll
    for (int jj = 0; jj < kNJ / 2; ++jj) {
      uint32_t r[4];
      ldmatrix_x4(r, qa + 16 * jj * kLd);
      const uint32_t bf0[2] = {r[0], r[1]}, bf1[2] = {r[2], r[3]};
      frag(2 * jj, bf0);
      frag(2 * jj + 1, bf1);
    }
  };
  sub(0, std::true_type{});
#pragma unroll(kUnroll)
  for (int sb = 1; sb < 8; ++sb) sub(sb, std::false_type{});
  // direct_stage's float terms: |Σ ls·grid·q| < 2^31 (256 · 1,333 · 128).
  const float da[2] = {f16v(ld16(blk0)), f16v(ld16(blk1))};
#pragma unroll
  for (int j = 0; j < kNJ; ++j) {
    const float db[2] = {s.qd[slot][8 * j + 2 * t], s.qd[slot][8 * j + 2 * t + 1]};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      acc[j][e] += (da[e >> 1] * db[e & 1]) * static_cast<float>(ic[j][e]);
    }
  }
}

// ---- variant 50: table_stage on 32-bit shared addresses stepped by the sub-block loop ----
// What 44's SASS (session 13 W4, ncu source page) spent per IQ2_XXS sub-block beside the 8 MMAs and their 32 scale
// IMADs: 5 IMADs for the sub-block's byte offsets (sb·8 + each row's word / index base, sb·32 + the ldmatrix base),
// 4 LOP3 `& 0x7777` (CUDA's __byte_perm uses 3 bits of each selector nibble, the PRMT instruction 4: the compiler
// masks; iq2_sel's nibbles never have bit 3 set, so the raw prmt picks the same bytes) and the row r0 + 8's own
// addresses. Here: the rows r0 and r0 + 8 one immediate apart (blk1 = blk0 + 8·PA: an IQ2_XXS row is 66·K/256
// bytes, even, so 8 rows shift a window by a multiple of 16 — the same in-slot offset), three 32-bit shared
// addresses (the lane's sign/scale word, its grid-index byte, its ldmatrix row) stepped by 8, 8 and 32 bytes a
// sub-block, the loads by ld.shared on them, the values by raw prmt. kAhead (tiles of ≤ 32 pairs): the next
// sub-block's words loaded and its fragment formed before this one's MMAs (two LDS latencies off each sub-block's
// chain; +6 registers, which 6 or 8 fragments' accumulators leave no room for). (Session 14 W1: 49 — without kAhead
// — 3.234 ms a layer at prompt-like routing against 50's 3.179; removed.) Same words, same MMAs and integer sums in
// the same order, same float terms: the same bits.
__device__ __forceinline__ uint32_t lds_u32(uint32_t a) {
  uint32_t v;
  asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(a));
  return v;
}
__device__ __forceinline__ uint32_t lds_u16(uint32_t a) {
  uint16_t v;
  asm volatile("ld.shared.u16 %0, [%1];\n" : "=h"(v) : "r"(a));
  return v;
}
__device__ __forceinline__ uint32_t lds_u8(uint32_t a) {
  uint32_t v;
  asm volatile("ld.shared.u8 %0, [%1];\n" : "=r"(v) : "r"(a));
  return v;
}
__device__ __forceinline__ uint32_t prmt_raw(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t v;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(v) : "r"(a), "r"(b), "r"(sel));
  return v;
}
__device__ __forceinline__ void ldmatrix_x4_at(uint32_t (&r)[4], uint32_t a) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

template <int kNJ, bool kA4, bool kAhead, class S, int kAJ>
__device__ __forceinline__ void table_stage_step(const S& s, int slot, const uint8_t* blk0, int lane,
                                                 float (&acc)[kAJ][4]) {
  static_assert(kNJ <= kAJ && kNJ % 2 == 0, "accumulators for every fragment, fragments in pairs");
  static_assert(kIq2TabCopies == 32, "entry pitch 128 bytes");
  constexpr uint32_t kRow8 = 8 * raw_a_pitch<GgmlType::IQ2_XXS>();  // row r0 + 8's bytes, one immediate on
  const int t = lane % 4;
  const uint32_t cbase = smem_addr(s.tab.codes) + 4u * lane, sbase = smem_addr(s.tab.signs) + 4u * lane;
  const uint32_t s7 = 7u * t;
  const uint32_t b0 = smem_addr(blk0);
  uint32_t pw = b0 + 6, pi = b0 + 2 + t;  // sub-block 0's sign/scale word and this lane's grid index, row r0
  uint32_t pq = smem_addr(s.q[slot] + ((lane & 7) + 8 * (lane >> 4)) * kLd + 16 * ((lane >> 3) & 1));
  int ic[kNJ][4];
  // The A fragment and scales of the sub-block at pw / pi (table_stage's words and values).
  auto decode = [&](uint32_t w, uint32_t ix, uint32_t(&al)[4], int(&ls)[2]) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint32_t o = h ? kRow8 : 0u;
      const uint32_t a1 = kA4 ? lds_u32(w + o) : prmt_raw(lds_u16(w + o), lds_u16(w + o + 2), 0x5410);
      const uint32_t idx = lds_u8(ix + o);
      const uint32_t sel = lds_u32(cbase + (idx << 7)) | lds_u32(sbase + (((a1 >> s7) & 127u) << 7));
      ls[h] = static_cast<int>((a1 >> 27) | 1u);  // 2·(a1 >> 28) + 1
      al[h] = prmt_raw(kIq2Pos, kIq2Neg, sel);             // values 8t … 8t + 3
      al[2 + h] = prmt_raw(kIq2Pos, kIq2Neg, sel >> 16);  // values 8t + 4 … 8t + 7
    }
  };
  // The sub-block's MMAs (B fragments at q) into ic; kFirst: the stage's first (sets ic).
  auto mmas = [&](const uint32_t(&al)[4], const int(&ls)[2], uint32_t q, auto first) {
    constexpr bool kFirst = decltype(first)::value;
#pragma unroll
    for (int jj = 0; jj < kNJ / 2; ++jj) {
      uint32_t r[4];
      ldmatrix_x4_at(r, q + 16 * jj * kLd);
#pragma unroll
      for (int f = 0; f < 2; ++f) {
        const uint32_t bf[2] = {r[2 * f], r[2 * f + 1]};
        int c[4];
        mma_s8_from(c, al, bf, 0);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          if constexpr (kFirst) {
            ic[2 * jj + f][e] = ls[e >> 1] * c[e];
          } else {
            ic[2 * jj + f][e] += ls[e >> 1] * c[e];
          }
        }
      }
    }
  };
  if constexpr (kAhead) {
    uint32_t aA[4], aB[4];
    int lA[2], lB[2];
    decode(pw, pi, aA, lA);
    decode(pw + 8, pi + 8, aB, lB);
    mmas(aA, lA, pq, std::true_type{});
#pragma unroll 1
    for (int sb = 1; sb < 7; sb += 2) {  // sub-blocks sb (in B) and sb + 1; the next two decoded ahead
      pw += 16;
      pi += 16;
      decode(pw, pi, aA, lA);  // sb + 1
      mmas(aB, lB, pq + 32, std::false_type{});
      decode(pw + 8, pi + 8, aB, lB);  // sb + 2
      mmas(aA, lA, pq + 64, std::false_type{});
      pq += 64;
    }
    mmas(aB, lB, pq + 32, std::false_type{});  // sub-block 7
  } else {
    {
      uint32_t al[4];
      int ls[2];
      decode(pw, pi, al, ls);
      mmas(al, ls, pq, std::true_type{});
    }
#pragma unroll 1
    for (int sb = 1; sb < 8; ++sb) {
      pw += 8;
      pi += 8;
      pq += 32;
      uint32_t al[4];
      int ls[2];
      decode(pw, pi, al, ls);
      mmas(al, ls, pq, std::false_type{});
    }
  }
  // table_stage's float terms (blk1 = blk0 + 8 rows).
  const float da[2] = {f16v(ld16(blk0)), f16v(ld16(blk0 + kRow8))};
#pragma unroll
  for (int j = 0; j < kNJ; ++j) {
    const float db[2] = {s.qd[slot][8 * j + 2 * t], s.qd[slot][8 * j + 2 * t + 1]};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      acc[j][e] += (da[e >> 1] * db[e & 1]) * static_cast<float>(ic[j][e]);
    }
  }
}

// ---- variant 13 (the previous default): blocks walking several items ----
// A grid of two blocks per SM walks the (128 rows, tile) items it =
// blockIdx.x, + gridDim.x, … (neighbouring blocks share a tile's activations in L2), the stages of its
// items one sequence G = u·nkb + kb, so the copies of item u + 1's first stages are in flight while the
// warps finish item u. Each thread copies the activation chunks of the 4 pairs c = tid / 16 + 16i of its
// copy item (their activation rows in registers, reloaded when the copy sequence enters a new item).
// The stage arithmetic: walk_stage (direct_stage with the fragment count fixed at compile time, nj rounded
// up to 2, 4, 6 or 8: straight-line ldmatrix/MMA sequences; the sub-block loop not unrolled).
struct WalkItem {
  const uint8_t* wbase;
  int32_t m0, first, nvec;
};

__device__ inline WalkItem walk_item(const GemmParams& p, int it, int row_blocks) {
  const int32_t* tl = p.tiles + 3 * (it / row_blocks);
  return WalkItem{p.w + static_cast<uint64_t>(tl[0]) * p.expert_bytes, (it % row_blocks) * kBM, tl[1], tl[2]};
}

// The walking kernels' stage: direct_stage with the fragment count fixed at nj rounded up to even (one
// ldmatrix.x4 covers two fragments anyway), the sub-block loop not unrolled (unrolled by 2: slower).
// kLean (0: direct_stage; U ≥ 1: lean_stage with its sub-block loop unrolled by U).
template <GgmlType T, int kLean = 0, class S>
__device__ __forceinline__ void walk_stage(const S& s, int slot, const uint8_t* blk0, const uint8_t* blk1, int nj,
                                           int lane, float (&acc)[8][4]) {
  if constexpr (kLean > 0) {
    switch ((nj + 1) / 2) {
      case 1: lean_stage<T, kLean, 2>(s, slot, blk0, blk1, lane, acc); break;
      case 2: lean_stage<T, kLean, 4>(s, slot, blk0, blk1, lane, acc); break;
      case 3: lean_stage<T, kLean, 6>(s, slot, blk0, blk1, lane, acc); break;
      default: lean_stage<T, kLean, 8>(s, slot, blk0, blk1, lane, acc); break;
    }
    return;
  }
  switch ((nj + 1) / 2) {
    case 1: direct_stage<T, 1, 2>(s, slot, blk0, blk1, lane, acc); break;
    case 2: direct_stage<T, 1, 4>(s, slot, blk0, blk1, lane, acc); break;
    case 3: direct_stage<T, 1, 6>(s, slot, blk0, blk1, lane, acc); break;
    default: direct_stage<T, 1, 8>(s, slot, blk0, blk1, lane, acc); break;
  }
}

// An item's outputs: this lane's rows r0, r0 + 8 × its pairs 8j + 2t + (e & 1), in the pairs' rows of y
// (p.y, or the second matrix's outputs).
template <GgmlType T, int kAJ>
__device__ __forceinline__ void store_item(const GemmParams& p, const WalkItem& mi, int r0, int t,
                                           const float (&acc)[kAJ][4], float* y) {
#pragma unroll
  for (int j = 0; j < kAJ; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int row = r0 + (e >= 2 ? 8 : 0), col = 8 * j + 2 * t + (e & 1);
      if (col >= mi.nvec || mi.m0 + row >= p.rows) continue;
      float val = acc[j][e];
      if constexpr (T == GgmlType::IQ2_XXS) val = 0.125f * val;  // once per row, as dot_iq2_xxs_ref
      y[static_cast<int64_t>(p.order[mi.first + col]) * p.y_stride + mi.m0 + row] = val;
    }
}

// Stage kb of item `in` into ring slot `slot`; ar[i]: activation row of pair tid / 16 + 16i (−1: absent).
template <GgmlType T, class S>
__device__ inline void copy_stage_walk(S& s, const GemmParams& p, const PlaneParams& q, const WalkItem& in,
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

template <GgmlType T>
__global__ void __launch_bounds__(kDThreads, 2) experts_walk_kernel(GemmParams p, PlaneParams q, int row_blocks) {
  constexpr int PA = raw_a_pitch<T>(), R = kDRing;
  using S = DSmem<T>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  S& s = *reinterpret_cast<S*>(smem_raw);

  const int n_items = row_blocks * *p.n_tiles, bid = static_cast<int>(blockIdx.x), nblk = static_cast<int>(gridDim.x);
  if (bid >= n_items) return;  // the whole block: no barrier reached
  const int n_mine = (n_items - bid + nblk - 1) / nblk;
  const int nkb = static_cast<int>(p.cols / kBK), total = n_mine * nkb;
  if constexpr (T == GgmlType::IQ2_XXS) {
    for (int i = threadIdx.x; i < 256; i += kDThreads) s.grid[i] = c_grid[i];
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
    copy_stage_walk<T>(s, p, q, ci, ar, G % R, G - u * nkb);
  };
#pragma unroll
  for (int G = 0; G < R - 1; ++G) {
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
    cp_async_wait<R - 2>();
    __syncthreads();  // stage G landed everywhere; stage G − 1's slot is no longer read
    if (G + R - 1 < total) copy(G + R - 1);
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
    const int slot = G % R;
    const uint32_t skb = static_cast<uint32_t>(kb) * stage_w_bytes<T>();
    const uint8_t* blk0 = s.raw_a[slot] + r0 * PA + ((sh0 + skb) & 15);
    const uint8_t* blk1 = s.raw_a[slot] + (r0 + 8) * PA + ((sh1 + skb) & 15);
    walk_stage<T>(s, slot, blk0, blk1, nj, lane, acc);
    if (++kb < nkb) continue;
    kb = 0;
    ++u;
    store_item<T>(p, mi, r0, t, acc, p.y);
  }
}

// ---- variant 20 (the default): fewer instructions per stage ----
// What the H200's SASS and ncu said of 13 (docs/PERF.md): ~1,340 instructions per warp and 256-value stage
// for IQ2_XXS gate/up, 66 % issue-active — the kernel is bound by its instruction count. Of those, ~750 are
// the 8 sub-blocks, ~250 the copies (64-bit window arithmetic per chunk, a signed division G / nkb per
// stage). Here: the copy side counts its stage and item instead of dividing; each thread's raw-weight
// chunks (row, chunk) are fixed for the kernel, their row offsets set per item, and a chunk's window is
// 32-bit arithmetic on the stage's row address; the activation chunks are 32-bit offsets into the planes
// (rows·K < 2^31, checked by the caller); for IQ2_XXS a 2-slot ring and the grid in 16 copies
// (conflict-free lookups: DSmem GR 16). Stage arithmetic and the sums: direct_stage's, so the same bits.
// kLean: the stage arithmetic (walk_stage: 0 direct_stage, U ≥ 1 lean_stage unrolled by U; variants 25, 26).
// kDyn (variant 27): items handed out as blocks free up (q.next_item) instead of it = bid, + gridDim.x, …:
// ~15 items per block at 2,048 tokens with pair counts of 1 … 64 per tile, so a static share ends unevenly.
// The copy side runs ahead of the warps; thread 0 takes item u + 1's id when the copies enter item u and
// leaves it in ids[(u + 1) % 4] (read by all threads ≥ 1 barrier later: an item has ≥ 4 stages, the ring ≤ 3).
// kPerItem (variant 28, with kLean ≥ 1): the stage loop of an item specialised on its fragment count (2, 4, 6
// or 8), its float accumulators sized by it (acc[NJ][4]: 24 registers instead of 32 at ~48 pairs, for the
// unrolled sub-blocks), instead of one loop switching per stage.
// kPair (variant 30): items past row_blocks·n_tiles are the second matrix's (PlaneParams::w2, y2).
// kLeanCopy (variants 32, 33): the copy side without branches per chunk (the SASS of 25: ~240 instructions
// per warp and stage, ~20 %: per cp.async a generic→shared conversion, 3 padding slots, a divergent branch
// around absent pairs, rows and window tails, 4 d copies by 1 thread in 16): absent pairs and rows
// zero-filled (cp.async byte count 0), the window tails' byte counts without a test (every chunk of a
// window holds bytes: (CA − 1)·16 < WB), shared addresses as offsets from one base, d copied by threads
// 0 … 63 for pair tid and Q2_K bsums by 64 … 191 for pair (tid − 64) / 2 (their activation rows set per item).
// kTab (variant 34, IQ2_XXS with kPerItem): the stages by table_stage (tables in DSmemTab instead of the grid).
// kAlign (variant 44, with kTab): the stages whose IQ2_XXS words sit on 4 bytes by table_stage's kA4 form
// (with 16-byte aligned rows of 1,056 bytes — K 4,096 — every odd stage kb: a block starts 66·kb bytes in).
// kSkip (variant 44: IQ2_XXS, with kLeanCopy; 29's Q2_K copies skip absent pairs already): no activation
// copies for the pair rows past the item's fragments (rows ≥ 16·⌈nvec / 16⌉, never read by its ldmatrix:
// left as they are, warp-uniform) — a 1 … 16-pair tile copies a quarter of the rows instead of all 64.
template <GgmlType T, int R, int GR, int kLean = 0, bool kDyn = false, bool kPerItem = false, bool kPair = false,
          bool kLeanCopy = false, bool kTab = false, bool kAlign = false, bool kSkip = false, bool kLA = false,
          int kStep = 0>
__global__ void __launch_bounds__(kDThreads, 2) experts_fast_kernel(GemmParams p, PlaneParams q, int row_blocks) {
  constexpr int PA = raw_a_pitch<T>(), CA = PA / 16, WB = stage_w_bytes<T>();
  constexpr int NA = (kBM * CA + kDThreads - 1) / kDThreads;  // raw chunks per thread
  static_assert(!kTab || (T == GgmlType::IQ2_XXS && kPerItem), "the tables: IQ2_XXS, per-item stage loops");
  using S = std::conditional_t<kTab, DSmemTab<R>, DSmem<T, R, GR>>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  S& s = *reinterpret_cast<S*>(smem_raw);
  __shared__ int ids[4];  // kDyn: item ids by u % 4

  const int n_one = row_blocks * *p.n_tiles, n_items = kPair ? 2 * n_one : n_one;
  const int bid = static_cast<int>(blockIdx.x), nblk = static_cast<int>(gridDim.x);
  auto item = [&](int it) {  // item `it`, of the second matrix from n_one on
    if (!kPair || it < n_one) return walk_item(p, it, row_blocks);
    WalkItem w = walk_item(p, it - n_one, row_blocks);
    w.wbase = q.w2 + (w.wbase - p.w);
    return w;
  };
  if (bid >= n_items) return;  // the whole block: no barrier reached
  const int n_mine = (n_items - bid + nblk - 1) / nblk;
  const int nkb = static_cast<int>(p.cols / kBK), total = kDyn ? INT_MAX : n_mine * nkb;
  const int tid = static_cast<int>(threadIdx.x);
  if constexpr (kTab) {
    fill_iq2_tables(s.tab, c_iq2, tid, kDThreads);
  } else if constexpr (T == GgmlType::IQ2_XXS) {
    for (int i = tid; i < 256 * GR; i += kDThreads) s.grid[i] = c_grid[i / GR];
  }
  auto item_id = [&](int u) { return kDyn ? (u == 0 ? bid : ids[u & 3]) : bid + u * nblk; };
  bool copy_done = false;  // kDyn: the copy side passed the last item

  // Copy side. Raw chunk i of this thread: j = tid + kDThreads·i, tile row j / CA, chunk j % CA (fixed);
  // ra_off[i]: its row's byte offset from the expert's first row at stage 0 (−1: past the matrix or past
  // the chunk count).
  // Activations: pair c_i = tid / 16 + 16i, chunk k = tid % 16; ap[i] = its activation row · K (−1: none).
  // kStep > 0 (variant 50): these NA + 5 values kept in shared memory (cst, written when the copies enter an
  // item, read at each stage) instead of registers live through the stage arithmetic (128 registers a thread).
  const int ck = tid % 16;
  int32_t ra_off[NA], ap[4];
  int32_t apx = -1;  // kLeanCopy: the activation row · K of pair tid (d) or (tid − 64) / 2 (Q2_K bsums), −1: none
  constexpr bool kSlim = kStep > 0;
  static_assert(!kSlim || kLeanCopy, "the slim copy state: the lean copies");
  __shared__ int32_t cst[kSlim ? NA + 5 : 1][kDThreads];
  const uint32_t sbase = smem_addr(smem_raw);
  auto soff = [&](const void* q) { return sbase + static_cast<uint32_t>(static_cast<const unsigned char*>(q) - smem_raw); };
  static_assert(!kLeanCopy || (CA - 1) * 16 < WB, "every chunk of a raw window holds bytes");
  const uint8_t* cw = nullptr;  // the copy item's expert base
  int cnr = kBN;                // kSkip: the copy item's pair rows read by its fragments
  int cu = -1, ckb = 0;
  const uint32_t K = static_cast<uint32_t>(p.cols), nb = K / kBK;
  auto copy = [&] {  // the next stage of the copy sequence into its ring slot
    if (kDyn && copy_done) return;
    if (ckb == 0) {
      ++cu;
      const int it = item_id(cu);
      if (kDyn && it >= n_items) {
        copy_done = true;
        return;
      }
      if (kDyn && tid == 0) ids[(cu + 1) & 3] = nblk + atomicAdd(q.next_item, 1);
      const WalkItem ci = item(it);
      cw = ci.wbase;
#pragma unroll
      for (int i = 0; i < NA; ++i) {
        const int j = tid + kDThreads * i, r = j / CA;
        ra_off[i] = j < kBM * CA && ci.m0 + r < p.rows ? static_cast<int32_t>((ci.m0 + r) * p.row_bytes) : -1;
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int c = tid / 16 + 16 * i;
        const int32_t v = c < ci.nvec ? p.order[ci.first + c] : -1;
        ap[i] = v < 0 ? -1 : static_cast<int32_t>(static_cast<uint32_t>(v) / static_cast<uint32_t>(p.x_div) * K);
      }
      if constexpr (kSkip) cnr = min(kBN, (ci.nvec + 15) / 16 * 16);
      if constexpr (kLeanCopy) {
        const int c = tid < 64 ? tid : (tid - 64) / 2;
        const int32_t v = (tid < 64 || (T == GgmlType::Q2_K && tid < 192)) && c < ci.nvec ? p.order[ci.first + c] : -1;
        apx = v < 0 ? -1 : static_cast<int32_t>(static_cast<uint32_t>(v) / static_cast<uint32_t>(p.x_div) * K);
      }
      if constexpr (kSlim) {
#pragma unroll
        for (int i = 0; i < NA; ++i) cst[i][tid] = ra_off[i];
#pragma unroll
        for (int i = 0; i < 4; ++i) cst[NA + i][tid] = ap[i];
        cst[NA + 4][tid] = apx;
      }
    } else if constexpr (kSlim) {
#pragma unroll
      for (int i = 0; i < NA; ++i) ra_off[i] = cst[i][tid];
#pragma unroll
      for (int i = 0; i < 4; ++i) ap[i] = cst[NA + i][tid];
      apx = cst[NA + 4][tid];
    }
    const int slot = (cu * nkb + ckb) % R;
    if constexpr (kLeanCopy) {
      const uint8_t* stage = cw + ckb * WB;
#pragma unroll
      for (int i = 0; i < NA; ++i) {
        const int j = tid + kDThreads * i, r = j / CA, k = j - r * CA;
        if (j >= kBM * CA) break;  // (warp-uniform at the Flash shapes)
        const bool ok = ra_off[i] >= 0;
        const uint8_t* at = stage + (ok ? ra_off[i] : 0);
        const int sh = static_cast<int>(reinterpret_cast<uintptr_t>(at) & 15), left = sh + WB - 16 * k;
        cp_async16_n(soff(s.raw_a[slot] + r * PA + 16 * k), at - sh + 16 * k, ok ? min(left, 16) : 0);
      }
      const uint32_t kq = static_cast<uint32_t>(ckb) * kBK;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int c = tid / 16 + 16 * i;
        if (kSkip && 16 * i + 2 * (tid / kWarp) >= cnr) break;  // rows c ≥ cnr (warp-uniform: cnr % 16 == 0)
        const bool ok = ap[i] >= 0;
        cp_async16_n(soff(s.q[slot] + c * kLd + 16 * ck), q.qs + (ok ? static_cast<uint32_t>(ap[i]) + kq + 16 * ck : 0u),
                     ok ? 16 : 0);
      }
      const bool okx = apx >= 0;
      const uint32_t ax = okx ? static_cast<uint32_t>(apx) : 0u;
      if (tid < 64) cp_async4_n(soff(s.qd[slot] + tid), q.d + (okx ? ax / kBK + ckb : 0u), okx ? 4 : 0);
      if constexpr (T == GgmlType::Q2_K) {
        if (tid >= 64 && tid < 192) {
          const int c = (tid - 64) / 2, h = tid % 2;
          cp_async16_n(soff(s.qbs[slot] + c * 16 + 8 * h), q.bsums + (okx ? ax / 16 + ckb * 16 + 8 * h : 0u), okx ? 16 : 0);
        }
      }
      if (++ckb == nkb) ckb = 0;
      return;
    }
    uint8_t* ra = s.raw_a[slot];
    const uint8_t* stage = cw + ckb * WB;
#pragma unroll
    for (int i = 0; i < NA; ++i) {
      if (ra_off[i] < 0) continue;
      const int j = tid + kDThreads * i, r = j / CA, k = j - r * CA;
      const uint8_t* at = stage + ra_off[i];
      const int sh = static_cast<int>(reinterpret_cast<uintptr_t>(at) & 15), left = sh + WB - 16 * k;
      if (left > 0) cp_async16(ra + r * PA + 16 * k, at - sh + 16 * k, left < 16 ? left : 16);
    }
    const uint32_t kq = static_cast<uint32_t>(ckb) * kBK;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if (ap[i] < 0) continue;
      const int c = tid / 16 + 16 * i;
      const uint32_t a = static_cast<uint32_t>(ap[i]);
      cp_async16(s.q[slot] + c * kLd + 16 * ck, q.qs + a + kq + 16 * ck);
      if (ck == 0) cp_async4(s.qd[slot] + c, q.d + a / kBK + ckb);
      if constexpr (T == GgmlType::Q2_K) {
        if (ck == 1 || ck == 2) cp_async16(s.qbs[slot] + c * 16 + 8 * (ck - 1), q.bsums + a / 16 + ckb * 16 + 8 * (ck - 1));
      }
    }
    if (++ckb == nkb) ckb = 0;
  };
  (void)nb;
#pragma unroll
  for (int G = 0; G < R - 1; ++G) {
    if (G < total) copy();
    cp_async_commit();
  }
  __syncthreads();  // the tables

  const int warp = tid / kWarp, lane = tid % kWarp, t = lane % 4;
  const int r0 = 16 * warp + lane / 4;  // this lane's tile rows r0 and r0 + 8
  const uint32_t rb_lo = static_cast<uint32_t>(p.row_bytes & 15);
  if constexpr (kPerItem) {
    for (int G = 0, u = 0;; ++u) {
      int it;
      if constexpr (kDyn) {
        it = item_id(u);  // ids[u % 4] was left ≥ 1 barrier ago: uniform over the block
        if (it >= n_items) break;
      } else {
        if (u >= n_mine) break;
        it = bid + u * nblk;
      }
      const WalkItem mi = item(it);
      const uint32_t sh0 =
          (static_cast<uint32_t>(reinterpret_cast<uintptr_t>(mi.wbase)) & 15) + static_cast<uint32_t>(mi.m0 + r0) * rb_lo;
      auto run = [&](auto nj_c) {
        constexpr int NJ = decltype(nj_c)::value;
        float acc[NJ][4];
#pragma unroll
        for (int j = 0; j < NJ; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[j][e] = 0.0f;
        for (int kb = 0; kb < nkb; ++kb, ++G) {
          cp_async_wait<R - 2>();
          __syncthreads();  // stage G landed everywhere; stage G − 1's slot is no longer read
          if (G + R - 1 < total) copy();
          cp_async_commit();
          const int slot = G % R;
          const uint32_t skb = sh0 + static_cast<uint32_t>(kb) * WB;
          const uint8_t* blk0 = s.raw_a[slot] + r0 * PA + (skb & 15);
          const uint8_t* blk1 = s.raw_a[slot] + (r0 + 8) * PA + ((skb + 8 * rb_lo) & 15);
          if constexpr (kTab && kAlign) {
            // blk0's and blk1's word addresses (+ 6 + 8·sb) mod 4 (rows PA apart, slots 16-byte aligned).
            const bool a4 = (skb & 3) == 2 && ((skb + 8 * rb_lo) & 3) == 2;  // uniform over the block
            if constexpr (kStep > 0) {  // variant 50 (blk1 = blk0 + 8 rows: checked by the caller)
              // The fragments a sub-block ahead at ≤ 4 fragments (at 6: 72 bytes of spills at 128 registers, ptxas).
              if (a4) {
                table_stage_step<NJ, true, NJ <= 4>(s, slot, blk0, lane, acc);
              } else {
                table_stage_step<NJ, false, NJ <= 4>(s, slot, blk0, lane, acc);
              }
            } else if (a4) {
              table_stage<kLean, NJ, true, kLA>(s, slot, blk0, blk1, lane, acc);
            } else {
              table_stage<kLean, NJ, false, kLA>(s, slot, blk0, blk1, lane, acc);
            }
          } else if constexpr (kTab) {
            table_stage<kLean, NJ>(s, slot, blk0, blk1, lane, acc);
          } else {
            lean_stage<T, kLean, NJ>(s, slot, blk0, blk1, lane, acc);
          }
        }
        store_item<T>(p, mi, r0, t, acc, kPair && it >= n_one ? q.y2 : p.y);
      };
      const int nf = min(8, (mi.nvec + 7) / 8);  // uniform over the block
      switch ((nf + 1) / 2) {
        case 1: run(std::integral_constant<int, 2>{}); break;
        case 2: run(std::integral_constant<int, 4>{}); break;
        case 3: run(std::integral_constant<int, 6>{}); break;
        default: run(std::integral_constant<int, 8>{}); break;
      }
    }
    return;
  }
  WalkItem mi{};
  int nj = 0;
  uint32_t sh0 = 0;
  float acc[8][4];
  for (int G = 0, kb = 0, u = 0; G < total; ++G) {
    int it = 0;
    if (kDyn && kb == 0) {  // ids[u % 4] was left ≥ 1 barrier ago: uniform over the block
      it = item_id(u);
      if (it >= n_items) break;
    }
    cp_async_wait<R - 2>();
    __syncthreads();  // stage G landed everywhere; stage G − 1's slot is no longer read
    if (G + R - 1 < total) copy();
    cp_async_commit();
    if (kb == 0) {  // a new item: its tile, the fragments holding pairs, its rows' window shifts
      mi = item(kDyn ? it : bid + u * nblk);
      nj = min(8, (mi.nvec + 7) / 8);  // uniform over the block
      sh0 = (static_cast<uint32_t>(reinterpret_cast<uintptr_t>(mi.wbase)) & 15) + static_cast<uint32_t>(mi.m0 + r0) * rb_lo;
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[j][e] = 0.0f;
    }
    const int slot = G % R;
    const uint32_t skb = sh0 + static_cast<uint32_t>(kb) * WB;
    const uint8_t* blk0 = s.raw_a[slot] + r0 * PA + (skb & 15);
    const uint8_t* blk1 = s.raw_a[slot] + (r0 + 8) * PA + ((skb + 8 * rb_lo) & 15);
    if constexpr (!kTab) walk_stage<T, kLean>(s, slot, blk0, blk1, nj, lane, acc);  // (kTab: kPerItem)
    if (++kb < nkb) continue;
    kb = 0;
    ++u;
    store_item<T>(p, mi, r0, t, acc, p.y);
  }
}

// The kernel of a variant for weight type T and its dynamic shared memory.
struct ExpertsKernel {
  void (*kernel)(GemmParams, PlaneParams, int);
  size_t smem;
};

template <GgmlType T>
ExpertsKernel experts_kernel(int variant) {
  if (variant == 20 || variant == 27 || (variant >= 29 && variant <= 32 && variant != 31) || variant == 34 ||
      from_variant_44(variant)) {
    if constexpr (T == GgmlType::IQ2_XXS) {
      // 44: 34 with gate and up in one launch, the aligned stages' 4-byte word loads and no copies of pair
      // rows past the fragments.
      if (variant == 44)
        return {experts_fast_kernel<T, 2, 16, 1, true, true, true, true, true, true, true>, sizeof(DSmemTab<2>)};
      // 48: 44 with table_stage's kLA (the lookups' addresses from per-lane bases).
      if (variant == 48)
        return {experts_fast_kernel<T, 2, 16, 1, true, true, true, true, true, true, true, true>, sizeof(DSmemTab<2>)};
      // 50: 48 with table_stage_step (≤ 4 fragments: each sub-block's fragment formed one sub-block ahead) and the
      // copy state in shared memory.
      if (variant == 50)
        return {experts_fast_kernel<T, 2, 16, 1, true, true, true, true, true, true, true, true, 1>, sizeof(DSmemTab<2>)};
      // 34: 32 with table_stage. (Not kept: 34 unrolled — 136 bytes of spills at 128 registers, ptxas.)
      if (variant == 34)
        return {experts_fast_kernel<T, 2, 16, 1, true, true, false, true, true>, sizeof(DSmemTab<2>)};
      if (variant == 27) return {experts_fast_kernel<T, 2, 16, 1, true>, sizeof(DSmem<T, 2, 16>)};
      if (variant == 29) return {experts_fast_kernel<T, 2, 16, 1, true, true>, sizeof(DSmem<T, 2, 16>)};
      if (variant == 32) return {experts_fast_kernel<T, 2, 16, 1, true, true, false, true>, sizeof(DSmem<T, 2, 16>)};
      if (variant == 30) return {experts_fast_kernel<T, 2, 16, 1, true, true, true>, sizeof(DSmem<T, 2, 16>)};
      return {experts_fast_kernel<T, 2, 16>, sizeof(DSmem<T, 2, 16>)};
    } else {
      if (variant == 27) return {experts_fast_kernel<T, kDRing, 1, 7, true>, sizeof(DSmem<T>)};
      if (variant == 32) return {experts_fast_kernel<T, kDRing, 1, 7, true, true, false, true>, sizeof(DSmem<T>)};
      // 30: one matrix; 34, 44: 29's Q2_K (0.880 vs 0.893 ms for 32's, session 10 W2 ncu).
      if (variant == 29 || variant == 30 || variant == 34 || from_variant_44(variant))
        return {experts_fast_kernel<T, kDRing, 1, 7, true, true>, sizeof(DSmem<T>)};
      return {experts_fast_kernel<T, kDRing, 1>, sizeof(DSmem<T>)};
    }
  }
  return {experts_walk_kernel<T>, sizeof(DSmem<T>)};
}

}  // namespace

// CudaBackendOptions::gemm_experts = −1: variant 50 (below). Before 48, before that 44, before that 34 (session 11 W1 on the H200, docs/PERF.md:
// the MoE of a 2,048-token chunk per layer 2.952 / 2.922 ms against 3.055 / 3.047 for 32 in the same run; ncu: gate or up
// 0.945 vs 0.982 ms — 584 vs 609 M instructions —, down (29's Q2_K) 0.884 vs 0.896; 35 (the scale split into
// lo/hi MMA chains) 3.111 / 3.098: 7 % fewer instructions, 60 % issue instead of 68 %; 36, 37 spill or lose
// likewise). W2 (same run, twice): 34 2.951 / 2.941, 39 (34 on exact fragment counts) 2.920 / 2.926, 38 3.046 /
// 3.050, 32 3.059 / 3.042 — but ncu had 39's kernels slower than 34's (gate 0.950 vs 0.936 ms, down 0.880 vs
// 0.876), so 34 stays. Before: 32; on the H200 (docs/PERF.md, experts session 10 W2) the MoE
// of a 2,048-token chunk per layer 3.063 ms against 3.164 for 27 (the default after W1), 3.101 for 29, 3.094
// for 30 and 3.511 / 3.499 for 20 (the default before session 10; ncu: gate or up 0.98 vs 1.10 ms, down 0.89
// vs 1.11). 27 had (W1): 3.134 against 3.458 / 3.487 for 20. 20 had: 3.465 against 3.712 for variant 13 (gemm session 9). Removed after
// the H200 runs (docs/PERF.md): 1–12 (sessions 7–8), 6 (a block per item), 14 (13 with a 2-slot ring and
// the IQ2_XXS grid in 16 copies: +0.4 %), 15, 16 (raw words loaded a sub-block ahead: no gain), 17–19 (two
// row tiles per warp, 4 warps per block: −37 % shared wavefronts, −7 % instructions, 3 % slower at 2 warps
// per scheduler), 21 (13 with the SwiGLU folded: 3.669), W2's 20 (today's 20 with a replicated IQ2_XXS
// sign-mask table: 3.503), 22 (that with a 3-slot ring, one grid copy: 3.593), 24 (that with the sub-block
// loop unrolled by 2: 3.716); today's 20 is W2's 23. Session 10 (docs/PERF.md, experts W1): 25 (the lean
// stage: 3.431), 26 (25 with the sub-blocks unrolled: 3.224) and 28 (each item's stage loop specialised,
// both types unrolled: IQ2_XXS spills 88 bytes) removed; after W2, 31 (27 with IQ2_XXS's sub-blocks unrolled:
// 3.169, spills) and 33 (31 with the lean copies: 3.120) removed. Session 11 (experts W1/W2 above): 35 … 38
// (the split form) and 39 (exact fragment counts: no measured win) removed; make_cuda_backend rejects them.
// Session 12 (engineer pexperts, docs/PERF.md): 44 — 34's kernels with gate and up on one activation
// quantization in one launch, the tiles dearest first (group_tiles_kernel by_cost), the aligned stages' IQ2_XXS
// words by 4-byte loads, no copies of pair rows past a tile's fragments, the plane quantizer by 16-byte loads.
// H200, cuda_prefill_bench 2048 walk (the MoE of a layer, ms): W2 44 2.862 / 2.864 against 34's 2.909 / 2.912
// with ids spread like a router's, 3.328 / 3.324 against 3.430 / 3.431 with routing like a text prompt's; W3 2.876
// / 3.353 against 2.944 / 3.456. Removed after those runs: 40 (one quantization, the SwiGLU in the up epilogue:
// 3.064 / 3.563 in W1 — the up kernel +0.19 ms, an expf and an IEEE division per output), 42 (two launches, no
// aligned loads or skipped copies: 2.848 / 3.346 in W2, 2.874 / 3.387 in W3), 43 (42 with them: 2.897 / 3.332,
// 2.923 / 3.369), 45 (44 without the aligned loads: 2.934 / 3.415 in W3).
// Session 13 (engineer pexperts, docs/PERF.md): 48 — 44 with the IQ2_XXS table lookups by 32-bit shared addresses.
// H200 W6 (same run, twice): the MoE of a 2,048-token layer 2.826 / 2.824 ms against 44's 2.885 / 2.880 with ids
// spread like a router's, 3.297 / 3.298 against 3.357 / 3.353 with routing like a text prompt's; gate/up 1,116 vs
// 1,170 M instructions (uniform), 1,353 vs 1,428 M (zipf); parity 2/2, PARITY ok. Not kept: 46 / 47 (128-pair tiles
// by warp pairs sharing the decode: +0.12 … +0.16 ms at prompt-like routing in W1–W3, never landed).
// Session 14 (engineer pexperts, docs/PERF.md): 50 — 48 on table_stage_step (stepped 32-bit addresses, raw prmt,
// small tiles' fragments a sub-block ahead) with the copy state in shared memory. H200 W1 / W2 (same runs): the MoE
// of a 2,048-token layer 2.782 / 2.772 ms against 48's 2.811 / 2.821 with ids spread like a router's, 3.179 / 3.175
// against 3.275 / 3.289 with routing like a text prompt's; a whole 2,048-token prefill chunk (2K → 4K) of a 4-layer
// flash-q2 file 33.02 / 32.97 and 33.20 / 33.09 ms against 33.53 / 33.22 and 33.44 / 33.36; parity passed, PARITY ok.
// Not kept: 49 (50 without the fragments ahead), 51 (50 + the next item prefetched: slower).
constexpr int kExpertsAuto = 50;

// 20 (experts_fast_kernel) folds the MoE op's SwiGLU into the down projection's quantizer (ops_moe.cu).
bool experts_fold_swiglu(int variant) { return variant >= 20; }

int experts_variant(int option) {
  return option == 0 || option == 13 || option == 20 || option == 27 || option == 29 || option == 30 || option == 32 ||
                 option == 34 || from_variant_44(option)
             ? option
             : kExpertsAuto;
}

namespace {

// experts_iq2.cuh's tables from the CPU's (kIq2xxsGrid: every byte 8, 25 or 43; kKsignsIq2xs).
Iq2TableSrc build_iq2_tables() {
  Iq2TableSrc t{};
  for (int i = 0; i < 256; ++i)
    for (int j = 0; j < 8; ++j) {
      const int m = static_cast<int>((kIq2xxsGrid[i] >> (8 * j)) & 0xff);
      t.codes[i] |= static_cast<uint32_t>(m == 8 ? 0 : m == 25 ? 1 : 2) << (4 * j);
    }
  for (int si = 0; si < 128; ++si)
    for (int j = 0; j < 8; ++j)
      if ((kKsignsIq2xs[si] >> j) & 1) t.signs[si] |= 4u << (4 * j);
  return t;
}

}  // namespace

cudaError_t upload_gemm_experts_tables() {
  for (const uint64_t e : kIq2xxsGrid)  // experts_iq2.cuh's codes take only these magnitudes
    for (int j = 0; j < 8; ++j) {
      const int m = static_cast<int>((e >> (8 * j)) & 0xff);
      if (m != 8 && m != 25 && m != 43) return cudaErrorInvalidValue;
    }
  const Iq2TableSrc t = build_iq2_tables();
  const cudaError_t e = cudaMemcpyToSymbol(c_grid, kIq2xxsGrid, sizeof(kIq2xxsGrid));
  return e != cudaSuccess ? e : cudaMemcpyToSymbol(c_iq2, &t, sizeof(t));
}

bool experts_gate_up_one_launch(int variant) {
  return variant == 30 || from_variant_44(variant);
}

namespace {

// gemm_experts_planes, and with `second` (variants 30, 44) that job's matrix in the same launch on the same
// planes (same activations, groups, shapes and y stride; checked).
bool run_planes(CudaBackend& be, const GemvJob& j, DeviceScratch& scratch, int variant, const ExpertsSwiglu* swiglu,
                const GemvJob* second) {
  const GgmlType t = j.w.type;
  if (second && (!experts_gate_up_one_launch(variant) || swiglu || t != GgmlType::IQ2_XXS || second->w.type != t ||
                 second->w.rows != j.w.rows ||
                 second->w.cols != j.w.cols || second->w.row_bytes != j.w.row_bytes ||
                 second->expert_bytes != j.expert_bytes || second->x != j.x || second->x_stride != j.x_stride ||
                 second->x_div != j.x_div || second->n_vec != j.n_vec || second->groups != j.groups ||
                 second->y_stride != j.y_stride || reinterpret_cast<uintptr_t>(second->w.data) % 16 != 0))
    return false;
  if ((t != GgmlType::IQ2_XXS && t != GgmlType::Q2_K) || !j.groups || j.w.cols % 1024 != 0 ||
      reinterpret_cast<uintptr_t>(j.w.data) % 16 != 0)  // (the weight windows read ≤ 15 bytes before a row)
    return false;
  if (swiglu && (!swiglu->u || !swiglu->weights || j.x_div != 1)) return false;
  if (experts_variant(variant) != variant || variant == 0) return false;
  int optin = 0, sms = 0;
  if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, be.device()) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, be.device()) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  const int64_t rows = (j.n_vec + j.x_div - 1) / j.x_div, K = j.w.cols, nb = K / kQK_K;
  // experts_fast_kernel's 32-bit offsets: plane quants and an expert's rows below 2^31 bytes, else 13.
  if (variant != 13 && (rows * K >= (int64_t{1} << 31) ||
                        static_cast<uint64_t>(j.w.rows) * j.w.row_bytes >= (uint64_t{1} << 31))) {
    if (second) return false;
    variant = 13;
  }
  // 49, 50: rows r0 and r0 + 8 at the same in-slot offset (8·row_bytes ≡ 0 mod 16: IQ2_XXS rows are 66·K/256 bytes).
  if (variant == 50 && j.w.row_bytes % 2 != 0) variant = 48;
  const ExpertsKernel k = t == GgmlType::IQ2_XXS ? experts_kernel<GgmlType::IQ2_XXS>(variant)
                                                 : experts_kernel<GgmlType::Q2_K>(variant);
  if (static_cast<size_t>(optin) < k.smem + kBN * sizeof(int64_t)) return false;
  const int row_blocks = static_cast<int>(grid_for(j.w.rows, kBM));
  const int64_t items = int64_t{row_blocks} * j.groups->max_tiles * (second ? 2 : 1);
  if (rows * nb >= (int64_t{1} << 31) || items >= (int64_t{1} << 30)) return false;
  // Planes: quants, then d and bsums each on a 256-byte boundary.
  const uint64_t d_off = (static_cast<uint64_t>(rows * K) + 255) / 256 * 256;
  const uint64_t bs_off = (d_off + static_cast<uint64_t>(rows * nb) * 4 + 255) / 256 * 256;
  // Then variant 27's item counter.
  const uint64_t ctr_off = (bs_off + static_cast<uint64_t>(rows * (K / 16)) * 2 + 255) / 256 * 256;
  if (!be.ensure(scratch, ctr_off + 256, "quantized activation planes"))
    return true;  // the failure is recorded
  auto* base = static_cast<uint8_t*>(scratch.ptr);
  const PlaneParams q{reinterpret_cast<const int8_t*>(base), reinterpret_cast<const float*>(base + d_off),
                reinterpret_cast<const int16_t*>(base + bs_off), reinterpret_cast<int*>(base + ctr_off),
                second ? static_cast<const uint8_t*>(second->w.data) : nullptr, second ? second->y : nullptr};
  if (variant >= 27 && !be.check(cudaMemsetAsync(q.next_item, 0, sizeof(int), be.stream()), "gemm experts item counter"))
    return true;
  {
    // Variant 44: 16-byte loads where x (and u) and the row stride allow them.
    const bool vec4 = from_variant_44(variant) && reinterpret_cast<uintptr_t>(j.x) % 16 == 0 && j.x_stride % 4 == 0 &&
                      (!swiglu || reinterpret_cast<uintptr_t>(swiglu->u) % 16 == 0);
    auto* qk = vec4 ? quantize_q8_K_planes_kernel<true> : quantize_q8_K_planes_kernel<false>;
    qk<<<grid_for(rows * nb * kWarp, 256), 256, 0, be.stream()>>>(j.x, j.x_stride, rows, K, q,
                                                                   swiglu ? *swiglu : ExpertsSwiglu{});
    if (!be.launched("quantize activation planes")) return true;
  }
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
  auto run = [&] {
    if (!be.check(cudaFuncSetAttribute(k.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, k.smem), "gemm experts smem"))
      return;
    // Two resident blocks per SM walking the items (launch bounds, ≤ ~108 KB of shared memory each).
    const int64_t grid = std::min<int64_t>(items, int64_t{2} * sms);
    k.kernel<<<static_cast<unsigned>(grid), kDThreads, k.smem, be.stream()>>>(p, q, row_blocks);
    be.launched("gemm experts (int8 tensor cores, fragments decoded in registers)");
  };
  run();
  return true;
}

}  // namespace

bool gemm_experts_planes(CudaBackend& be, const GemvJob& j, DeviceScratch& scratch, int variant,
                         const ExpertsSwiglu* swiglu) {
  return run_planes(be, j, scratch, variant, swiglu, nullptr);
}

bool gemm_experts_gate_up(CudaBackend& be, const GemvJob& gate, const GemvJob& up, DeviceScratch& scratch,
                          int variant) {
  return run_planes(be, gate, scratch, variant, nullptr, &up);
}

bool experts_tiles_by_cost(int variant) { return from_variant_44(variant); }

}  // namespace ds4::backend::cuda
