// ops_indexer.cu — lightning-indexer top-k selection (MODEL.md §7.5; ties per §14.6: lower row id wins).
//
// Scores are computed one thread per row in exactly the CPU's float order (per head a sequential dot,
// then Σ_h w_h·max(0, dot) in head order; no contraction in this build), so the selection — a discrete
// decision — is the CPU's, not merely close to it. Selection: per query, a bitwise search for the k-th
// largest score key, then one ordered compaction pass, which also yields the ids in ascending order.
// CudaBackendOptions::indexer_v2 (default) takes the radix select and the 4-head score loop below;
// false keeps the previous kernels for before/after runs (the same ids either way). Decode and batched
// decode steps (≤ 32 queries) score in indexer_score_decode_kernel (CudaBackendOptions::indexer_decode):
// one launch of ~one block per multiprocessor over all queries' rows, q held in registers.
// Scratch is sized by IndexerArgs::max_rows (a host bound); only without it does the op read the
// per-query row counts back (one small synchronous copy). Its layout: the fused kernels' per-query counters,
// the wide kernel's per-query histograms (both kept at zero between calls), then the scores (or keys).
// CudaBackendOptions::indexer_select (passed through unfiltered; no header change): 0 … 4 as its header text says,
// 5 / 6 the wide decode kernel (indexer_score_select_wide_kernel: scores and select in one launch past 2,048 rows,
// the 32K context's 8,192) for every decode call up to 16,384 rows / above 2,048 rows only (else as 4); 7 / 8 as
// 5 / 6 with the dots as fused multiply-adds where that is exact (FP4 operands: the same bits, half the instructions);
// 9, 10 / 11, 12 as 5, 7 / 6, 8 with a register-blocked tile (4 rows × 2 or 4 heads a thread) where a block has 32
// or 64 rows; 13 as 11 with every decode tile's rows staged by asynchronous copies (stage_rows_async); 14 as 13 with
// the blocked tile at 32 rows and two blocks per multiprocessor at every wide row count; 17 as 14 with the selects'
// all-equal checks (wide_select: when the k-th key's 11-bit bin holds more than half the keys, their min and max;
// radix_select_block: the first pass's min and max) — equal: that key is T, the other passes skipped; 18 as 17 with
// 40 keys a thread in the wide select up to 10,240 rows (the 32K decode step's bound).
#include <algorithm>
#include <string>
#include <vector>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_impl.h"
#include "backend/cuda/mma_s8.cuh"

namespace ds4::backend::cuda {

namespace {

// scores[i][c] for c < n_rows[i] (queries with n_rows ≤ top_k are skipped). One thread per (row,
// head) computes that head's dot sequentially over head_dim; then one thread per row adds
// w_h·max(0, dot_h) in head order — the CPU's float order, with heads in parallel (a thread per row
// walking all heads·head_dim products serially was the decode step's slowest kernel).
// Block: kIdxRows rows × heads threads (heads ≤ 64, blockDim = kIdxRows·heads). Shared: q_i with a
// padded head stride (conflict-free when a warp's lanes are 32 heads of one row), w_i, the dots.
constexpr int kIdxRows = 4;
__global__ void indexer_score_kernel(IndexerArgs a, float* scores, int64_t score_stride) {
  extern __shared__ float sh[];
  const int64_t i = blockIdx.y;
  const int32_t nr = a.n_rows[i];
  if (nr <= a.top_k) return;
  const int qs = a.head_dim + 1;  // padded head stride
  float* shq = sh;                          // [heads][qs]
  float* shw = shq + a.heads * qs;          // [heads]
  float* dots = shw + a.heads;              // [kIdxRows][heads]
  for (int k = threadIdx.x; k < a.heads * a.head_dim; k += blockDim.x)
    shq[(k / a.head_dim) * qs + k % a.head_dim] = a.q[i * a.heads * a.head_dim + k];
  for (int k = threadIdx.x; k < a.heads; k += blockDim.x) shw[k] = a.w[i * a.heads + k];
  __syncthreads();
  const int h = threadIdx.x % a.heads, rr = threadIdx.x / a.heads;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kIdxRows + rr;
  if (c < nr) {
    const float* k = (a.rows_at ? a.rows_at[i] : a.rows) + c * a.head_dim;  // per-query rows in a batched step
    const float* qh = shq + h * qs;
    float dot = 0;
    for (int d = 0; d < a.head_dim; ++d) dot += qh[d] * k[d];
    dots[rr * a.heads + h] = dot;
  }
  __syncthreads();
  if (h != 0 || c >= nr) return;
  float sc = 0;
  for (int hh = 0; hh < a.heads; ++hh) sc += shw[hh] * fmaxf(0.0f, dots[rr * a.heads + hh]);
  scores[i * score_stride + c] = sc;
}

// Prefill chunks: the same scores with the row in registers. One block per (128 rows, 16 queries);
// thread t keeps row t of its tile (HD floats) across the block's queries (reloaded only when a query
// of another session points at other rows), and each query's q and w are staged once in shared memory
// and read as broadcasts. The arithmetic per (query, row) is indexer_score_kernel's, in the same order.
// (One thread per (query, row) re-read its 512-byte row from L1/L2 for each of the 64 heads, lanes
// 512 bytes apart: the indexer dominated a 4K prefill.)
constexpr int kIdxTileRows = 128;

// HD consecutive floats into registers (16-byte loads when src is 16-byte aligned).
template <int HD>
__device__ inline void load_regs(float (&dst)[HD], const float* src) {
  if ((reinterpret_cast<uintptr_t>(src) & 15) == 0) {
#pragma unroll
    for (int d4 = 0; d4 < HD / 4; ++d4) {
      const float4 v = reinterpret_cast<const float4*>(src)[d4];
      dst[4 * d4] = v.x;
      dst[4 * d4 + 1] = v.y;
      dst[4 * d4 + 2] = v.z;
      dst[4 * d4 + 3] = v.w;
    }
  } else {
#pragma unroll
    for (int d = 0; d < HD; ++d) dst[d] = src[d];
  }
}
constexpr int kIdxTileQueries = 16;

// kHeads4 (CudaBackendOptions::indexer_v2): four heads' dot products in flight together (four
// independent chains; each is still the sequential dot over d), then added to the sum in head order.
template <int HD, bool kHeads4>
__global__ void __launch_bounds__(kIdxTileRows) indexer_score_tiled_kernel(IndexerArgs a, float* scores,
                                                                          int64_t score_stride) {
  extern __shared__ float sh[];  // q_i [heads][HD], then w_i [heads]
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kIdxTileRows + threadIdx.x;
  const int64_t tile0 = static_cast<int64_t>(blockIdx.x) * kIdxTileRows;
  const int hd = a.heads * HD;
  float kr[HD];
  const float* base = nullptr;
  for (int qi = 0; qi < kIdxTileQueries; ++qi) {
    const int64_t i = static_cast<int64_t>(blockIdx.y) * kIdxTileQueries + qi;
    if (i >= a.n) break;
    const int32_t nr = a.n_rows[i];
    if (nr <= a.top_k || tile0 >= nr) continue;  // the same for every thread of the block
    __syncthreads();                            // the previous query's q/w have been read
    for (int k = threadIdx.x; k < hd; k += blockDim.x) sh[k] = a.q[i * hd + k];
    for (int k = threadIdx.x; k < a.heads; k += blockDim.x) sh[hd + k] = a.w[i * a.heads + k];
    __syncthreads();
    if (c >= nr) continue;
    const float* rows = a.rows_at ? a.rows_at[i] : a.rows;  // per-query rows in a batched step
    if (rows != base) {
      base = rows;
      load_regs<HD>(kr, rows + c * HD);
    }
    float sc = 0;
    int h0 = 0;
    if constexpr (kHeads4) {
      for (; h0 + 4 <= a.heads; h0 += 4) {
        const float* qh = sh + h0 * HD;
        float d0 = 0, d1 = 0, d2 = 0, d3 = 0;
#pragma unroll
        for (int d = 0; d < HD; ++d) {
          d0 += qh[d] * kr[d];
          d1 += qh[HD + d] * kr[d];
          d2 += qh[2 * HD + d] * kr[d];
          d3 += qh[3 * HD + d] * kr[d];
        }
        sc += sh[hd + h0] * fmaxf(0.0f, d0);
        sc += sh[hd + h0 + 1] * fmaxf(0.0f, d1);
        sc += sh[hd + h0 + 2] * fmaxf(0.0f, d2);
        sc += sh[hd + h0 + 3] * fmaxf(0.0f, d3);
      }
    }
    for (int h = h0; h < a.heads; ++h) {
      const float* qh = sh + h * HD;
      float dot = 0;
#pragma unroll
      for (int d = 0; d < HD; ++d) dot += qh[d] * kr[d];
      sc += sh[hd + h] * fmaxf(0.0f, dot);
    }
    scores[i * score_stride + c] = sc;
  }
}

// Decode and batched decode steps (n ≤ kIdxDecodeMaxQueries, CudaBackendOptions::indexer_decode): the
// same scores, spread so that one query's rows × heads fill the whole GPU. Block (row tile of rb rows,
// query i), kIdxDecThreads threads = heads × slots: thread (head h, slot s) holds q_i[h] in registers
// (HD floats, loaded once per block instead of the 32 KB q staged per 4 rows above) and computes the
// dots of head h for rows 4·(s + slots·it) … +3 — four independent sequential chains over d (each the
// CPU's `dot += q[d]·k[d]` from 0), the row values read as float4 broadcasts from the tile staged in
// shared memory. The dots then go to shared memory (over the tile, once it has been read) and one thread
// per row adds w_h·max(0, dot_h) in head order: the CPU's float order, so the same scores and the same
// selection as indexer_score_kernel.
// rb is a multiple of 4·slots and ≤ kIdxDecMaxRows, so a thread's dots fit 16 registers (4 × 4 rows).
constexpr int kIdxDecodeMaxQueries = 32;
constexpr int kIdxDecThreads = 256;
constexpr int kIdxDecMaxRows = 64;
// The fused decode kernel (score + select, indexer_select = 2) up to this row bound: its selecting block
// has 256 threads (the separate select kernel 1,024), too few for 32K context's 8,192 rows.
constexpr int64_t kIdxFusedMaxRows = 2048;
constexpr uint64_t kIdxDoneBytes = 256;  // ≥ kIdxDecodeMaxQueries ints; keeps the scores 256-byte aligned

// Heads the decode kernel takes: slots = 256 / heads threads per head, ≤ 16 (4 rows each) per pass.
__host__ __device__ constexpr bool indexer_decode_heads(int heads) {
  return heads >= 16 && heads <= 64 && kIdxDecThreads % heads == 0;
}

// The scores of rows r0 … r0 + rb − 1 (< nr) of query i by this block; sh: the dynamic shared memory.
// kQSmem (the fused kernel): q_i is first copied into shared memory by the whole block, coalesced
// ([heads][HD + 4], after w), and each thread takes its head's q from there — the direct loads (a warp's
// 32 lanes reading 32 heads' rows 512 bytes apart) touch 32 lines per instruction. Same values.
// kPre (with kQSmem; indexer_select = 3, 4): q_i's 16-byte pieces k = tid + 256·r (qv[r]) and w_i[tid] (wv) were
// loaded by the caller before the query's row count arrived (one memory round trip fewer); stored as above.
constexpr int kIdxQPre = 64 * 128 / 4 / kIdxDecThreads;  // q pieces per thread: 64 heads × 128 dims at most
// score_decode_dots: the tile's dots of every (row, head) into sh ([rb][heads + 1], after the last barrier) and w_i
// at sh + decode_w_offset; returns the tile's row count. score_decode_tile adds them per row (head_sum) and stores.
__host__ __device__ constexpr int decode_w_offset(int rb, int hd, int heads) { return rb * (hd > heads + 1 ? hd : heads + 1); }

// One row's score from its dots (dr: [heads]) and the head weights: Σ_h w_h·max(0, dot_h) in head order (the CPU's).
__device__ inline float head_sum(const float* dr, const float* shw, int heads) {
  float sc = 0;
  for (int hh = 0; hh < heads; ++hh) sc += shw[hh] * fmaxf(0.0f, dr[hh]);
  return sc;
}

// kFma (the wide kernel, indexer_select 7 and 8): a product q·k of two floats whose significands have ≤ 12 bits
// each (the low 12 mantissa bits zero) and whose exponents lie in [−63, 63] (or that are zero) is exact in float,
// and then the fused dot += q·k (one rounding of q·k + dot) equals the CPU's dot + fl(q·k): the same chain with one
// instruction a product instead of two (this build has no contraction). The indexer's operands are FP4 round
// trips (§5.5: e2m1 codes times a power of two; the rows also through f16), 2-bit significands, so with the
// official numerics every product qualifies. A block checks its staged values (q_i and its row tile) and takes
// the fused chain only when all qualify, else the plain one: the same bits either way.
__device__ inline bool fma_exact_value(float x) {
  const uint32_t u = __float_as_uint(x) & 0x7fffffffu, e = u >> 23;
  return u == 0 || ((u & 0xfffu) == 0 && e >= 127 - 63 && e <= 127 + 63);
}
__device__ inline bool fma_exact4(const float4& v) {
  return fma_exact_value(v.x) && fma_exact_value(v.y) && fma_exact_value(v.z) && fma_exact_value(v.w);
}

// dot += q·k: the CPU's two roundings, or (kF, the operands checked above) one fused instruction with the same bits.
template <bool kF>
__device__ inline void dot_step(float& dot, float q, float k) {
  if constexpr (kF) {
    dot = __fmaf_rn(q, k, dot);
  } else {
    dot += q * k;
  }
}

// A thread's dots of head q (its registers) with rows 4·(slot + slots·it) … +3 of the staged tile (it = 0 … 3): four
// independent sequential chains over d, the row values read as float4 broadcasts.
template <int HD, bool kF>
__device__ inline void tile_dots(const float* sh, const float (&q)[HD], int slot, int slots, int nrows,
                                 float (&dv)[4][4]) {
#pragma unroll
  for (int it = 0; it < 4; ++it) {
    const int rbase = 4 * (slot + slots * it);
    float d0 = 0.0f, d1 = 0.0f, d2 = 0.0f, d3 = 0.0f;
    if (rbase < nrows) {  // rows past nrows in this group of 4 read stale shared values, never stored
      const float4* k0 = reinterpret_cast<const float4*>(sh + rbase * HD);
#pragma unroll
      for (int d4 = 0; d4 < HD / 4; ++d4) {
        const float4 a0 = k0[d4], a1 = k0[HD / 4 + d4], a2 = k0[HD / 2 + d4], a3 = k0[3 * HD / 4 + d4];
        const float q0 = q[4 * d4], q1 = q[4 * d4 + 1], q2 = q[4 * d4 + 2], q3 = q[4 * d4 + 3];
        dot_step<kF>(d0, q0, a0.x); dot_step<kF>(d1, q0, a1.x); dot_step<kF>(d2, q0, a2.x); dot_step<kF>(d3, q0, a3.x);
        dot_step<kF>(d0, q1, a0.y); dot_step<kF>(d1, q1, a1.y); dot_step<kF>(d2, q1, a2.y); dot_step<kF>(d3, q1, a3.y);
        dot_step<kF>(d0, q2, a0.z); dot_step<kF>(d1, q2, a1.z); dot_step<kF>(d2, q2, a2.z); dot_step<kF>(d3, q2, a3.z);
        dot_step<kF>(d0, q3, a0.w); dot_step<kF>(d1, q3, a1.w); dot_step<kF>(d2, q3, a2.w); dot_step<kF>(d3, q3, a3.w);
      }
    }
    dv[it][0] = d0;
    dv[it][1] = d1;
    dv[it][2] = d2;
    dv[it][3] = d3;
  }
}

// kAsync (indexer_select 13, 14): a decode tile's nrows rows of HD floats (src 16-byte aligned) into shared memory, row r's
// piece c at dst[r·p4 + c], as asynchronous 16-byte copies all issued at once (≤ 64·128 / 4 / 256 = 8 a thread); the
// caller waits (cp_async_wait<0>) before its barrier. The plain loop's `ld; st.shared` pairs are not unrolled (the
// PTX: one generic load, its store, the next iteration), so a tile of 64 rows took 8 dependent memory round trips a
// thread — from DRAM in a decode step, where a layer's indexer rows were written tokens ago. The same values. Measured
// (session 12 W2, H200, whole 4-layer decode steps): alone (13) no gain at 32K or 2K — those round trips were not
// the cost; kept as the tile of 14.
template <int HD>
__device__ inline void stage_rows_async(float4* dst, int p4, const float* src, int nrows) {
  const float4* s4 = reinterpret_cast<const float4*>(src);
  for (int k = static_cast<int>(threadIdx.x); k < nrows * HD / 4; k += blockDim.x)
    cp_async16(dst + (k / (HD / 4)) * p4 + k % (HD / 4), s4 + k);
  cp_async_commit();
}

template <int HD, bool kQSmem, bool kPre = false, bool kFma = false, bool kAsync = false>
__device__ inline int score_decode_dots(const IndexerArgs& a, int rb, int64_t i, int32_t nr, int64_t r0, float* sh,
                                        const float4 (*qv)[kIdxQPre] = nullptr, float wv = 0.0f) {
  static_assert(!kFma || kQSmem, "the fused chain's check reads q as it is staged");
  static_assert(!kAsync || (kQSmem && !kFma), "the asynchronous tile: the fused kernels' plain chain");
  const int H = a.heads, tid = static_cast<int>(threadIdx.x);
  const int nrows = static_cast<int>(min(static_cast<int64_t>(rb), nr - r0));
  float* shw = sh + decode_w_offset(rb, HD, H);
  const float* src = (a.rows_at ? a.rows_at[i] : a.rows) + r0 * HD;  // per-query rows in a batched step
  bool exact = true;  // kFma: every value this thread staged qualifies for the fused chain
  const bool aligned = (reinterpret_cast<uintptr_t>(src) & 15) == 0;
  if (kAsync && aligned) {
    stage_rows_async<HD>(reinterpret_cast<float4*>(sh), HD / 4, src, nrows);
  } else if (aligned) {
    for (int k = tid; k < nrows * HD / 4; k += blockDim.x) {
      const float4 v = reinterpret_cast<const float4*>(src)[k];
      reinterpret_cast<float4*>(sh)[k] = v;
      if constexpr (kFma) exact = exact && fma_exact4(v);
    }
  } else {
    for (int k = tid; k < nrows * HD; k += blockDim.x) {
      const float v = src[k];
      sh[k] = v;
      if constexpr (kFma) exact = exact && fma_exact_value(v);
    }
  }
  if constexpr (kPre) {
    if (tid < H) shw[tid] = wv;
  } else {
    for (int k = tid; k < H; k += blockDim.x) shw[k] = a.w[i * H + k];
  }
  const int h = tid % H, slot = tid / H, slots = kIdxDecThreads / H;
  float q[HD];
  if constexpr (kQSmem) {
    float* sq = shw + H;  // [H][HD + 4]: rows 16-byte aligned, a warp's float4 reads of 32 heads conflict-free
    if constexpr (kPre) {
#pragma unroll
      for (int r = 0; r < kIdxQPre; ++r) {
        const int k = tid + kIdxDecThreads * r;
        if (k < H * HD / 4) {
          reinterpret_cast<float4*>(sq + (k / (HD / 4)) * (HD + 4))[k % (HD / 4)] = (*qv)[r];
          if constexpr (kFma) exact = exact && fma_exact4((*qv)[r]);
        }
      }
    } else {
      const float4* gq = reinterpret_cast<const float4*>(a.q + i * H * HD);
      for (int k = tid; k < H * HD / 4; k += blockDim.x) {
        const float4 v = gq[k];
        reinterpret_cast<float4*>(sq + (k / (HD / 4)) * (HD + 4))[k % (HD / 4)] = v;
        if constexpr (kFma) exact = exact && fma_exact4(v);
      }
    }
    if constexpr (kAsync) cp_async_wait<0>();  // this thread's tile copies, published by the barrier
    if constexpr (kFma) {
      exact = __syncthreads_and(exact) != 0;  // the whole block's staged values
    } else {
      __syncthreads();
    }
    load_regs<HD>(q, sq + h * (HD + 4));
  } else {
    load_regs<HD>(q, a.q + (i * H + h) * HD);
  }
  __syncthreads();
  float dv[4][4];
  if (kFma && exact) {
    tile_dots<HD, true>(sh, q, slot, slots, nrows, dv);
  } else {
    tile_dots<HD, false>(sh, q, slot, slots, nrows, dv);
  }
  __syncthreads();  // every thread has read the tile: the dots go over it
  float* dots = sh;  // [rb][H + 1]: a warp's 32 heads of one row are consecutive words
#pragma unroll
  for (int it = 0; it < 4; ++it)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int row = 4 * (slot + slots * it) + j;
      if (row < nrows) dots[row * (H + 1) + h] = dv[it][j];
    }
  __syncthreads();
  return nrows;
}

// The scores of rows r0 … r0 + rb − 1 (< nr) of query i by this block (score_decode_dots, then a thread per row).
template <int HD, bool kQSmem, bool kPre = false, bool kAsync = false>
__device__ inline void score_decode_tile(const IndexerArgs& a, float* scores, int64_t score_stride, int rb, int64_t i,
                                         int32_t nr, int64_t r0, float* sh, const float4 (*qv)[kIdxQPre] = nullptr,
                                         float wv = 0.0f) {
  const int nrows = score_decode_dots<HD, kQSmem, kPre, false, kAsync>(a, rb, i, nr, r0, sh, qv, wv);
  const int H = a.heads;
  const float* shw = sh + decode_w_offset(rb, HD, H);
  for (int row = static_cast<int>(threadIdx.x); row < nrows; row += blockDim.x)
    scores[i * score_stride + r0 + row] = head_sum(sh + row * (H + 1), shw, H);
}

template <int HD>
__global__ void __launch_bounds__(kIdxDecThreads) indexer_score_decode_kernel(IndexerArgs a, float* scores,
                                                                             int64_t score_stride, int rb) {
  extern __shared__ float sh[];  // [rb][HD] row tile, later [rb][heads + 1] dots; then w_i [heads]
  const int64_t i = blockIdx.y;
  const int32_t nr = a.n_rows[i];
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * rb;
  if (nr <= a.top_k || r0 >= nr) return;  // the same for the whole block
  score_decode_tile<HD, false>(a, scores, score_stride, rb, i, nr, r0, sh);
}

// Order-preserving key: a larger score gives a larger unsigned key; −0 and +0 tie as on the CPU.
__device__ inline uint32_t score_key(float f) {
  const uint32_t u = __float_as_uint(f == 0.0f ? 0.0f : f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Exclusive prefix count of `flag` over the block (blockDim.x a multiple of 32); *total gets the sum.
__device__ int block_prefix(bool flag, int* total) {
  __shared__ int warp_cnt[32];
  const int lane = threadIdx.x % kWarp, wid = threadIdx.x / kWarp, nw = blockDim.x / kWarp;
  const unsigned b = __ballot_sync(0xffffffffu, flag);
  __syncthreads();  // warp_cnt may still be read by the previous call
  if (lane == 0) warp_cnt[wid] = __popc(b);
  __syncthreads();
  int off = 0, tot = 0;
  for (int w = 0; w < nw; ++w) {
    if (w < wid) off += warp_cnt[w];
    tot += warp_cnt[w];
  }
  *total = tot;
  return off + __popc(b & ((1u << lane) - 1u));
}

// Whole block: writes, in ascending id order, the rows c < nr with key > T and the first need_eq rows
// with key = T (ties: the lowest ids) — the selection once T, the top_k-th largest key, is known.
template <typename KeyAt>
__device__ void compact_selected(KeyAt key_at, int nr, uint32_t T, int need_eq, int32_t* out) {
  int written = 0, eq_seen = 0;
  for (int base = 0; base < nr; base += blockDim.x) {
    const int c = base + static_cast<int>(threadIdx.x);
    const uint32_t key = c < nr ? key_at(c) : 0u;
    const bool eq = c < nr && key == T;
    int eq_total;
    const int eq_rank = eq_seen + block_prefix(eq, &eq_total);
    const bool sel = c < nr && (key > T || (eq && eq_rank < need_eq));
    int sel_total;
    const int pos = written + block_prefix(sel, &sel_total);
    if (sel) out[pos] = c;
    written += sel_total;
    eq_seen += eq_total;
  }
}

// Exclusive prefix sum of v over the block (blockDim.x a multiple of 32, ≤ 1,024); every thread calls it.
__device__ int block_exclusive_sum(int v) {
  __shared__ int warp_sum[32];
  const int lane = threadIdx.x % kWarp, wid = threadIdx.x / kWarp;
  int incl = v;
#pragma unroll
  for (int off = 1; off < kWarp; off *= 2) {
    const int y = __shfl_up_sync(0xffffffffu, incl, off);
    if (lane >= off) incl += y;
  }
  __syncthreads();  // warp_sum may still be read by the previous call
  if (lane == kWarp - 1) warp_sum[wid] = incl;
  __syncthreads();
  int before = 0;
  for (int w = 0; w < wid; ++w) before += warp_sum[w];
  return before + incl - v;
}

// compact_selected's output (ids ascending: the keys > T, then among those = T the first need_eq by id) from
// one block scan: thread t takes the run of ids [t·run, (t + 1)·run), counts its keys > T and = T, one
// exclusive sum of both counts (packed as gt << 16 | eq: nr < 65,536) gives each run's start, and a key's
// place is (keys > T before it) + min(keys = T before it, need_eq). Two barriers instead of four per
// blockDim keys. blockDim.x ≤ 1,024, a multiple of 32.
template <typename KeyAt>
__device__ void compact_runs(KeyAt key_at, int nr, uint32_t T, int need_eq, int32_t* out) {
  const int nt = static_cast<int>(blockDim.x), run = (nr + nt - 1) / nt;
  const int c0 = static_cast<int>(threadIdx.x) * run, c1 = min(nr, c0 + run);
  int gt = 0, eq = 0;
  for (int c = c0; c < c1; ++c) {
    const uint32_t k = key_at(c);
    gt += k > T;
    eq += k == T;
  }
  const int before = block_exclusive_sum((gt << 16) | eq);
  int g = before >> 16, e = before & 0xffff;
  for (int c = c0; c < c1; ++c) {
    const uint32_t k = key_at(c);
    if (k > T) {
      out[g + min(e, need_eq)] = c;
      ++g;
    } else if (k == T) {
      if (e < need_eq) out[g + e] = c;
      ++e;
    }
  }
}

// One block per query: idx[i][0..count) ascending, count = min(n_rows, top_k).
__global__ void indexer_select_kernel(IndexerArgs a, const float* scores, int64_t score_stride) {
  const int64_t i = blockIdx.x;
  const int32_t nr = a.n_rows[i];
  int32_t* out = a.idx + i * a.top_k;
  if (nr <= a.top_k) {  // every row is visible; no scoring (as ds4)
    for (int c = threadIdx.x; c < nr; c += blockDim.x) out[c] = c;
    if (threadIdx.x == 0) a.count[i] = nr < 0 ? 0 : nr;
    return;
  }
  const float* s = scores + i * score_stride;
  // T = the top_k-th largest key: the largest T with #{key ≥ T} ≥ top_k, built bit by bit.
  uint32_t T = 0;
  for (int bit = 31; bit >= 0; --bit) {
    const uint32_t cand = T | (1u << bit);
    int cnt = 0;
    for (int base = 0; base < nr; base += blockDim.x) {
      const int c = base + threadIdx.x;
      cnt += __syncthreads_count(c < nr && score_key(s[c]) >= cand);
    }
    if (cnt >= a.top_k) T = cand;
  }
  int greater = 0;
  for (int base = 0; base < nr; base += blockDim.x) {
    const int c = base + threadIdx.x;
    greater += __syncthreads_count(c < nr && score_key(s[c]) > T);
  }
  const int need_eq = a.top_k - greater;  // ties at T: the lowest ids
  compact_selected([&](int c) { return score_key(s[c]); }, nr, T, need_eq, out);
  if (threadIdx.x == 0) a.count[i] = a.top_k;
}

// Radix select (CudaBackendOptions::indexer_v2): the same selection as indexer_select_kernel — T is the
// top_k-th largest key, the rows with key > T and the lowest-id rows with key = T, ids ascending — found
// with 4 passes of 8-bit digits (a histogram of the keys that match the digits fixed so far) instead of
// 32 block-wide counts, over keys held in shared memory when they fit (kSelectSmemKeys: 32K context's 8,192 rows do), else read from
// the scores each pass. One block per query; the 32K decode step selects 512 of 8,192 rows per CSA layer.
constexpr int kSelectThreads = 1024;
constexpr int kSelectSmemKeys = 12288;  // 48 KiB of keys (no opt-in); more rows: keys from global memory

// kScan (CudaBackendOptions::indexer_select ≥ 1): the histogram by one shared atomic per key, and warp
// 0 finds the digit holding rank `want` with a 5-step suffix scan of its lanes' counts and walks its
// lane's 8 counts in registers; false: the previous warp-aggregated atomics (match.any), 32-step shuffle
// loop and shared-memory walk. Integer counts: the same digit either way.
// Whole block (any multiple of 32 threads): query i's selection from its nr > top_k scores s (read
// through L2: in the fused decode kernel other blocks wrote them); keys staged in skeys when nr ≤
// smem_keys.
// kLean (indexer_select = 4, the fused decode kernel: nr ≤ 2,048, kScan): the passes end as soon as the
// k-th key's digit is taken whole (its rank among the digit's keys = their count: the selection is every key
// ≥ the prefix so far, lower bits 0), and the compaction is compact_runs (one block scan, not one pair per
// blockDim keys). The same selection.
// Warp 0 of a radix pass (kScan): lane l owns digits 8l … 8l+7 of hist[256]; finds the digit holding rank `want`
// (from the top) by a 5-step suffix scan of the lanes' counts and a walk of the lane's 8 counts in registers, and
// writes the prefix with that digit at `shift`, the rank among the digit's keys, and whether that rank is the digit's
// whole count (every key of the digit is selected: the lean end).
__device__ inline void scan_digit_warp(const int* hist, uint32_t prefix, int shift, int want, uint32_t* s_prefix,
                                       int* s_want, bool* s_whole) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  int cnt[8], own = 0;
#pragma unroll
  for (int b = 0; b < 8; ++b) {
    cnt[b] = hist[8 * lane + b];
    own += cnt[b];
  }
  int incl = own;  // keys whose digit is in this lane or above
#pragma unroll
  for (int off = 1; off < kWarp; off *= 2) {
    const int v = __shfl_down_sync(0xffffffffu, incl, off);
    if (lane + off < kWarp) incl += v;
  }
  const int above = incl - own;
  const bool holds = above < want && incl >= want;
  const unsigned who = __ballot_sync(0xffffffffu, holds);
  if (lane == __ffs(who) - 1) {
    int rank = want - above, d = 0, cd = cnt[0];
    bool found = false;
#pragma unroll
    for (int b = 7; b > 0; --b) {  // the first digit from the top whose count reaches the rank
      if (!found && cnt[b] >= rank) {
        d = b;
        cd = cnt[b];
        found = true;
      }
      if (!found) rank -= cnt[b];
    }
    *s_prefix = prefix | (static_cast<uint32_t>(8 * lane + d) << shift);
    *s_want = rank;
    *s_whole = rank == cd;
  }
}

// kTie (indexer_select 17, with kLean): the first pass also takes the keys' least and greatest; if they are equal,
// every key is T and the other three passes are skipped (the benchmark file's zero indexer weights: every score 0).
template <bool kScan, bool kLean = false, bool kTie = false>
__device__ void radix_select_block(const IndexerArgs& a, int64_t i, int32_t nr, const float* s, uint32_t* skeys,
                                   int smem_keys) {
  static_assert(!kTie || (kScan && kLean), "the all-equal check: the lean end");
  __shared__ int hist[256];
  __shared__ uint32_t s_prefix;
  __shared__ int s_want;
  __shared__ bool s_whole;  // kLean: the digit just fixed is taken whole
  __shared__ uint32_t s_min, s_max;  // kTie
  int32_t* out = a.idx + i * a.top_k;
  const int tid = static_cast<int>(threadIdx.x), lane = tid % kWarp;
  const bool keys_in_smem = nr <= smem_keys;  // the block's dynamic shared memory holds smem_keys keys
  if (keys_in_smem)
    for (int c = tid; c < nr; c += blockDim.x) skeys[c] = score_key(__ldcg(s + c));
  auto key_at = [&](int c) { return keys_in_smem ? skeys[c] : score_key(__ldcg(s + c)); };
  uint32_t prefix = 0;  // the digits of T fixed so far (bits above `shift + 8`)
  int want = a.top_k;   // rank of T among the keys that match `prefix`
  bool whole = false;   // kLean: every key ≥ prefix is selected, no other
  if (kTie && tid == 0) {
    s_min = ~0u;
    s_max = 0u;
  }
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = tid; b < 256; b += blockDim.x) hist[b] = 0;
    __syncthreads();  // also: keys staged (first pass), s_prefix/s_want read (later passes)
    const uint32_t hi_mask = shift == 24 ? 0u : ~0u << (shift + 8);
    uint32_t mn = ~0u, mx = 0u;  // kTie, first pass
    for (int base = 0; base < nr; base += blockDim.x) {  // uniform trip count: whole warps shuffle
      const int c = base + tid;
      const uint32_t key = c < nr ? key_at(c) : 0u;
      const bool match = c < nr && (key & hi_mask) == prefix;
      const int digit = match ? static_cast<int>((key >> shift) & 255u) : 256;
      if (kTie && shift == 24 && c < nr) {
        mn = min(mn, key);
        mx = max(mx, key);
      }
      if constexpr (kScan) {  // a shared atomic per key (match.any costs more than the conflicts it saves)
        if (match) atomicAdd(&hist[digit], 1);
      } else {
        const unsigned peers = __match_any_sync(0xffffffffu, digit);  // one atomic per digit per warp
        if (match && lane == __ffs(peers) - 1) atomicAdd(&hist[digit], __popc(peers));
      }
    }
    if (kTie && shift == 24) {
      mn = __reduce_min_sync(0xffffffffu, mn);
      mx = __reduce_max_sync(0xffffffffu, mx);
      if (lane == 0) {
        atomicMin(&s_min, mn);
        atomicMax(&s_max, mx);
      }
    }
    __syncthreads();
    if (kTie && shift == 24 && s_min == s_max) {  // every key equal: T = that key, the top_k lowest ids
      prefix = s_min;
      want = a.top_k;
      break;
    }
    if (kScan && tid < kWarp) {
      scan_digit_warp(hist, prefix, shift, want, &s_prefix, &s_want, &s_whole);
    } else if (!kScan && tid < kWarp) {
      int own = 0;
#pragma unroll
      for (int b = 0; b < 8; ++b) own += hist[8 * lane + b];
      int above = 0;  // keys whose digit is in a lane above this one
      for (int l2 = 0; l2 < kWarp; ++l2) {  // uniform trip count (every lane shuffles)
        const int v = __shfl_sync(0xffffffffu, own, l2);
        if (l2 > lane) above += v;
      }
      const bool holds = above < want && above + own >= want;
      const unsigned who = __ballot_sync(0xffffffffu, holds);
      if (lane == __ffs(who) - 1) {
        int rank = want - above;
        int b = 7;
        for (; b > 0; --b) {
          const int cb = hist[8 * lane + b];
          if (cb >= rank) break;
          rank -= cb;
        }
        s_prefix = prefix | (static_cast<uint32_t>(8 * lane + b) << shift);
        s_want = rank;
      }
    }
    __syncthreads();
    prefix = s_prefix;
    want = s_want;
    if (kLean && kScan && s_whole) {
      whole = true;
      break;
    }
  }
  if (kLean && whole) {  // the keys ≥ prefix (> 0: a prefix of 0 would select all nr > top_k keys)
    compact_runs(key_at, nr, prefix - 1, 0, out);
  } else if (kLean) {
    compact_runs(key_at, nr, prefix, want, out);
  } else {
    // prefix = T; want = how many rows with key = T are taken (the lowest ids).
    const uint32_t T = prefix;
    const int need_eq = want;
    compact_selected(key_at, nr, T, need_eq, out);
  }
  if (tid == 0) a.count[i] = a.top_k;
}


// Identity selection of a query that sees ≤ top_k rows (no scoring, as ds4).
__device__ inline void select_all_rows(const IndexerArgs& a, int64_t i, int32_t nr) {
  int32_t* out = a.idx + i * a.top_k;
  for (int c = threadIdx.x; c < nr; c += blockDim.x) out[c] = c;
  if (threadIdx.x == 0) a.count[i] = nr < 0 ? 0 : nr;
}

template <bool kScan>
__global__ void __launch_bounds__(kSelectThreads) indexer_radix_select_kernel(IndexerArgs a, const float* scores,
                                                                             int64_t score_stride, int smem_keys) {
  extern __shared__ uint32_t skeys[];
  const int64_t i = blockIdx.x;
  const int32_t nr = a.n_rows[i];
  if (nr <= a.top_k) {
    select_all_rows(a, i, nr);
    return;
  }
  radix_select_block<kScan>(a, i, nr, scores + i * score_stride, skeys, smem_keys);
}

// kPre: thread tid's 16-byte pieces k = tid + 256·r of q_i (64 heads × 128 at most) and w_i[tid], loaded before the
// query's row count (blockDim.x = kIdxDecThreads).
template <int HD>
__device__ inline void load_q_pre(const IndexerArgs& a, int64_t i, float4 (&qv)[kIdxQPre], float& wv) {
  const float4* gq = reinterpret_cast<const float4*>(a.q + i * a.heads * HD);
#pragma unroll
  for (int r = 0; r < kIdxQPre; ++r) {
    const int k = static_cast<int>(threadIdx.x) + kIdxDecThreads * r;
    qv[r] = k < a.heads * HD / 4 ? gq[k] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
  if (static_cast<int>(threadIdx.x) < a.heads) wv = a.w[i * a.heads + threadIdx.x];
}

// Whole block, before scoring rows r0 … of query i (nr visible rows): false when the block has none to score — the
// query sees ≤ top_k rows (block 0 then writes the identity selection) or r0 is past its rows.
__device__ inline bool block_scores_rows(const IndexerArgs& a, int64_t i, int32_t nr, int64_t r0) {
  if (nr <= a.top_k) {
    if (blockIdx.x == 0) select_all_rows(a, i, nr);
    return false;
  }
  return r0 < nr;
}

// Whole block, after its stores (and global adds) for query i: counts the block done on the query's counter (a
// fence first: what it wrote is visible device-wide) and tells whether it was the last of the query's `blocks`; that
// one resets the counter for the next call (every block of this call has counted) and fences again before reading.
__device__ inline bool last_block_of_query(int* done, int64_t i, int blocks) {
  __shared__ bool s_last;
  __threadfence();
  __syncthreads();  // every thread's stores are fenced
  if (threadIdx.x == 0) {
    s_last = atomicAdd(done + i, 1) == blocks - 1;
    if (s_last) done[i] = 0;
  }
  __syncthreads();
  if (!s_last) return false;
  __threadfence();
  return true;
}

// Decode scores and selection in one launch (CudaBackendOptions::indexer_select = 2): the blocks of
// indexer_score_decode_kernel, each then counting itself done on its query's counter (after a fence: its
// scores are visible device-wide); the last of the query's ceil(nr / rb) blocks resets the counter for the
// next call and runs the radix select over the scores with its 256 threads (keys in the block's shared
// memory when they fit). A query that sees ≤ top_k rows: block 0 writes the identity. The same scores and
// the same selection function, so the same ids as the two launches. kPre (indexer_select = 3 and 4): q_i
// and w_i are loaded before the row count (score_decode_tile; the H200 measured the scoring blocks' chain
// of dependent memory round trips as most of the kernel). kLean (4): radix_select_block's lean end. kAsync (13): the
// tile's rows by asynchronous copies (stage_rows_async).
template <int HD, bool kPre, bool kLean, bool kAsync = false, bool kTie = false>
__global__ void __launch_bounds__(kIdxDecThreads) indexer_score_select_decode_kernel(IndexerArgs a, float* scores,
                                                                                    int64_t score_stride, int rb,
                                                                                    int* done, int smem_keys) {
  extern __shared__ float sh[];
  const int64_t i = blockIdx.y;
  float4 qv[kIdxQPre];
  float wv = 0.0f;
  if constexpr (kPre) load_q_pre<HD>(a, i, qv, wv);  // heads·HD ≤ 64 × 128
  const int32_t nr = a.n_rows[i];
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * rb;
  if (!block_scores_rows(a, i, nr, r0)) return;
  score_decode_tile<HD, true, kPre, kAsync>(a, scores, score_stride, rb, i, nr, r0, sh, &qv, wv);
  if (!last_block_of_query(done, i, static_cast<int>((nr + rb - 1) / rb))) return;
  radix_select_block<true, kLean, kTie>(a, i, nr, scores + i * score_stride, reinterpret_cast<uint32_t*>(sh), smem_keys);
}

// The decode indexer past 2,048 rows in one launch (CudaBackendOptions::indexer_select 5: every decode call up to
// kIdxWideMaxRows rows; 6: 4's fused kernel up to 2,048 rows, this one above). At 32K context a CSA query scores
// 8,192 rows and keeps 512; the fused kernel's selecting block (256 threads, 4 radix passes over keys in shared
// memory, the first pass's histogram on the few top digits that float keys share) is sized for ≤ 2,048, and the
// two-launch path took ~46 µs at n = 1 (H200). Here the selection is spread over the scoring:
//   1. each block scores its ≤ 64 rows (score_decode_dots with q and w loaded first, one block per multiprocessor
//      at 8K rows), stores their keys (score_key, [n][key_stride] u32) and adds them to the query's histogram of
//      the keys' top 11 bits in global memory (sign, exponent and two mantissa bits; one add per distinct bin per
//      warp, __match_any_sync);
//   2. the query's last block (last_block_of_query) reads that histogram (8 bins a thread, higher bins on lower
//      threads), clears it for the next call, and finds the bin holding the top_k-th largest key by one block
//      scan — what the first two 8-bit passes did — while its keys arrive in registers: thread t holds the run of
//      ids [t·run, (t + 1)·run) (run ≤ KPT, a multiple of 4: 16-byte loads);
//   3. at most three more passes (8, 8 and 5 bits) over the keys matching the prefix (a shared histogram, few
//      keys: no contention), stopping once the k-th key's digit is taken whole (radix_select_block's lean end);
//   4. compact_runs' placement from the registers: one block scan of (keys > T) << 16 | (keys = T).
// T and the ties are as in every other select (the top_k-th largest key; among keys = T the lowest ids), and the
// scores are score_decode_tile's, so the same ids. Head dim 128 (Flash) only.
constexpr int kWideBins = 2048;  // 2^11
constexpr int kWideShift = 32 - 11;
constexpr uint64_t kIdxWideHistBytes = uint64_t{kIdxDecodeMaxQueries} * kWideBins * 4;  // [32][2048] i32, after the counters
constexpr int64_t kIdxWideMaxRows = 16384;  // 256 threads × 64 keys in registers

// Steps 2–4 above for query i (nr > top_k keys at `keys`, its histogram at `hist`); blockDim.x = kIdxDecThreads.
// kTie (indexer_select 17): when the 11-bit bin holding rank top_k holds more than half the keys, one min / max
// over that bin's keys first; if they are all equal, that key is T and the (up to three) passes are skipped — the
// same T and `want`, so the same ids. The benchmark file's indexer weights are zero: every score is 0, every key
// in one bin, and each pass then added all ~8,200 keys to one shared counter.
template <int KPT, bool kTie = false>
__device__ void wide_select(const IndexerArgs& a, int64_t i, int32_t nr, const uint32_t* keys, int* hist) {
  static_assert(kWideBins == 8 * kIdxDecThreads && KPT % 4 == 0, "8 bins a thread; runs of 16-byte loads");
  __shared__ int pass_hist[256];
  __shared__ uint32_t s_prefix;
  __shared__ int s_want;
  __shared__ bool s_whole;
  __shared__ int s_bin;               // kTie: the keys in the rank's 11-bit bin
  __shared__ uint32_t s_min, s_max;   // kTie: their least and greatest key
  const int tid = static_cast<int>(threadIdx.x);
  int4* hp = reinterpret_cast<int4*>(hist + (kWideBins - 8 - 8 * tid));  // bins 2040 − 8t … 2047 − 8t
  const int4 h0 = __ldcg(hp), h1 = __ldcg(hp + 1);
  const int run = min(KPT, ((nr + kIdxDecThreads - 1) / kIdxDecThreads + 3) & ~3);
  const int c0 = tid * run;
  uint32_t k[KPT];
#pragma unroll
  for (int j4 = 0; j4 < KPT / 4; ++j4) {
    const int c = c0 + 4 * j4;
    uint4 v = make_uint4(0u, 0u, 0u, 0u);
    if (4 * j4 < run && c < nr) v = __ldcg(reinterpret_cast<const uint4*>(keys + c));  // key_stride: a multiple of 4
    k[4 * j4] = v.x;
    k[4 * j4 + 1] = v.y;
    k[4 * j4 + 2] = v.z;
    k[4 * j4 + 3] = v.w;
  }
  hp[0] = make_int4(0, 0, 0, 0);  // the next call's histogram starts at zero (this thread read these bins above)
  hp[1] = make_int4(0, 0, 0, 0);
  const int cnt[8] = {h0.x, h0.y, h0.z, h0.w, h1.x, h1.y, h1.z, h1.w};
  int own = 0;
#pragma unroll
  for (int b = 0; b < 8; ++b) own += cnt[b];
  const int above = block_exclusive_sum(own);  // keys in higher bins (the lower threads')
  if (above < a.top_k && above + own >= a.top_k) {  // exactly one thread: the bin holding rank top_k
    int rank = a.top_k - above, d = 0, cd = cnt[0];
    bool found = false;
#pragma unroll
    for (int b = 7; b > 0; --b) {
      if (!found && cnt[b] >= rank) {
        d = b;
        cd = cnt[b];
        found = true;
      }
      if (!found) rank -= cnt[b];
    }
    s_prefix = static_cast<uint32_t>(kWideBins - 8 - 8 * tid + d) << kWideShift;
    s_want = rank;
    s_whole = rank == cd;
    if constexpr (kTie) s_bin = cd;
  }
  if (kTie && tid == 0) {
    s_min = ~0u;
    s_max = 0u;
  }
  __syncthreads();
  uint32_t prefix = s_prefix;
  int want = s_want;
  bool whole = s_whole;
  bool exact = false;  // kTie: prefix is T itself (every key of the rank's bin equal)
  if constexpr (kTie) {
    if (!whole && 2 * s_bin > nr) {  // the same for every thread
      uint32_t mn = ~0u, mx = 0u;
#pragma unroll
      for (int j = 0; j < KPT; ++j)
        if (j < run && c0 + j < nr && (k[j] & (~0u << kWideShift)) == prefix) {
          mn = min(mn, k[j]);
          mx = max(mx, k[j]);
        }
      mn = __reduce_min_sync(0xffffffffu, mn);
      mx = __reduce_max_sync(0xffffffffu, mx);
      if (tid % kWarp == 0) {
        atomicMin(&s_min, mn);
        atomicMax(&s_max, mx);
      }
      __syncthreads();
      if (s_min == s_max) {
        prefix = s_min;
        exact = true;
      }
    }
  }
#pragma unroll
  for (int p = 0; p < 3; ++p) {  // bits 20…13, 12…5, 4…0
    if (whole || exact) break;   // the same for every thread
    const int shift = p == 0 ? 13 : p == 1 ? 5 : 0, bits = p == 2 ? 5 : 8;
    const uint32_t hi_mask = ~0u << (shift + bits), dmask = (1u << bits) - 1u;
    pass_hist[tid] = 0;  // 256 threads, 256 digits
    __syncthreads();     // also: s_prefix / s_want / s_whole read by every thread
#pragma unroll
    for (int j = 0; j < KPT; ++j)
      if (j < run && c0 + j < nr && (k[j] & hi_mask) == prefix) atomicAdd(&pass_hist[(k[j] >> shift) & dmask], 1);
    __syncthreads();
    if (tid < kWarp) scan_digit_warp(pass_hist, prefix, shift, want, &s_prefix, &s_want, &s_whole);
    __syncthreads();
    prefix = s_prefix;
    want = s_want;
    whole = s_whole;
  }
  // Whole: the keys ≥ prefix (> 0: a bin of 0 taken whole would be every one of the nr > top_k keys). Else T = prefix
  // and the `want` lowest ids among the keys = T.
  const uint32_t T = whole ? prefix - 1u : prefix;
  const int need_eq = whole ? 0 : want;
  int gt = 0, eq = 0;
#pragma unroll
  for (int j = 0; j < KPT; ++j)
    if (j < run && c0 + j < nr) {
      gt += k[j] > T;
      eq += k[j] == T;
    }
  const int before = block_exclusive_sum((gt << 16) | eq);  // nr < 65,536
  int g = before >> 16, e = before & 0xffff;
  int32_t* out = a.idx + i * a.top_k;
#pragma unroll
  for (int j = 0; j < KPT; ++j)
    if (j < run && c0 + j < nr) {
      if (k[j] > T) {
        out[g + min(e, need_eq)] = c0 + j;
        ++g;
      } else if (k[j] == T) {
        if (e < need_eq) out[g + e] = c0 + j;
        ++e;
      }
    }
  if (tid == 0) a.count[i] = a.top_k;
}

// The register-blocked tile (indexer_select 9 … 12; 64 heads of 128): W1 measured the decode tile bound by
// shared-memory delivery — a thread holds one head's q in registers and reads every row value it multiplies, one
// float4 per 4 products. Here thread (hg, rg) takes rows 4rg … 4rg + 3 and heads hg + NHG·g (g < G; NHG = 64 / G
// head groups, consecutive heads on consecutive lanes: their padded q rows fall in distinct bank groups) with q
// and the rows both in shared memory ([rows][132], [heads][132]): per 4 dims 4 + G float4 loads for 16·G products
// (G = 4: 8 loads per 64 instead of 4 per 16). Each (row, head) dot is still one sequential chain over d from 0
// (dot_step: the CPU's order, or the exact fused step), so the same dots. rb = 4 · 256 / NHG rows (64 or 32).
constexpr int kBlkPitch = 128 + 4;  // floats per staged row / q head (16-byte aligned rows, bank groups spread)

template <int G, bool kF>
__device__ inline void blocked_dots(const float4* rp, const float4* qp, float (&acc)[4][G]) {
  constexpr int P4 = kBlkPitch / 4, NHG = 64 / G;
#pragma unroll
  for (int d4 = 0; d4 < 128 / 4; ++d4) {
    float4 kr[4], qg[G];
#pragma unroll
    for (int r = 0; r < 4; ++r) kr[r] = rp[r * P4 + d4];
#pragma unroll
    for (int g = 0; g < G; ++g) qg[g] = qp[g * NHG * P4 + d4];
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
      for (int g = 0; g < G; ++g) {
        dot_step<kF>(acc[r][g], qg[g].x, kr[r].x);
        dot_step<kF>(acc[r][g], qg[g].y, kr[r].y);
        dot_step<kF>(acc[r][g], qg[g].z, kr[r].z);
        dot_step<kF>(acc[r][g], qg[g].w, kr[r].w);
      }
  }
}

// score_decode_dots' contract (the dots into sh as [rb][65], w_i after the tile at sh + rb·kBlkPitch, returns the
// tile's row count) for the blocked layout; q and w loaded before the row count (qv, wv), heads = 64, HD = 128.
template <int G, bool kFma, bool kAsync = false>
__device__ inline int score_decode_dots_blocked(const IndexerArgs& a, int rb, int64_t i, int32_t nr, int64_t r0,
                                                float* sh, const float4 (*qv)[kIdxQPre], float wv) {
  constexpr int HD = 128, H = 64, P4 = kBlkPitch / 4, NHG = H / G;
  const int tid = static_cast<int>(threadIdx.x);
  const int nrows = static_cast<int>(min(static_cast<int64_t>(rb), nr - r0));
  float* shw = sh + rb * kBlkPitch;
  float4* sq = reinterpret_cast<float4*>(shw + H);  // [H][kBlkPitch]
  float4* st = reinterpret_cast<float4*>(sh);       // [rb][kBlkPitch]
  const float* src = (a.rows_at ? a.rows_at[i] : a.rows) + r0 * HD;
  bool exact = true;
  static_assert(!(kAsync && kFma), "the asynchronous tile: the plain chain");
  const bool aligned = (reinterpret_cast<uintptr_t>(src) & 15) == 0;
  if (kAsync && aligned) {
    stage_rows_async<HD>(st, P4, src, nrows);
  } else if (aligned) {
    for (int k = tid; k < nrows * HD / 4; k += blockDim.x) {
      const float4 v = reinterpret_cast<const float4*>(src)[k];
      st[(k / (HD / 4)) * P4 + k % (HD / 4)] = v;
      if constexpr (kFma) exact = exact && fma_exact4(v);
    }
  } else {
    for (int k = tid; k < nrows * HD; k += blockDim.x) {
      const float v = src[k];
      sh[(k / HD) * kBlkPitch + k % HD] = v;
      if constexpr (kFma) exact = exact && fma_exact_value(v);
    }
  }
  if (tid < H) shw[tid] = wv;
#pragma unroll
  for (int r = 0; r < kIdxQPre; ++r) {
    const int k = tid + kIdxDecThreads * r;  // < H·HD/4 = 2,048 = 8 × 256: every piece
    sq[(k / (HD / 4)) * P4 + k % (HD / 4)] = (*qv)[r];
    if constexpr (kFma) exact = exact && fma_exact4((*qv)[r]);
  }
  if constexpr (kAsync) cp_async_wait<0>();  // this thread's tile copies, published by the barrier
  if constexpr (kFma) {
    exact = __syncthreads_and(exact) != 0;
  } else {
    __syncthreads();
  }
  const int hg = tid % NHG, rg = tid / NHG;
  float acc[4][G];
#pragma unroll
  for (int r = 0; r < 4; ++r)
#pragma unroll
    for (int g = 0; g < G; ++g) acc[r][g] = 0.0f;
  if (4 * rg < nrows) {  // rows past nrows in this group of 4 read stale shared values, never stored
    if (kFma && exact) {
      blocked_dots<G, true>(st + 4 * rg * P4, sq + hg * P4, acc);
    } else {
      blocked_dots<G, false>(st + 4 * rg * P4, sq + hg * P4, acc);
    }
  }
  __syncthreads();  // every thread has read the tile: the dots go over it
#pragma unroll
  for (int r = 0; r < 4; ++r)
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const int row = 4 * rg + r;
      if (row < nrows) sh[row * (H + 1) + hg + NHG * g] = acc[r][g];
    }
  __syncthreads();
  return nrows;
}

// G = 0: score_decode_dots (q in registers, any decode head count); G = 2, 4: the register-blocked tile (64 heads).
// kStage 1 (13, with G = 2, 4): the tile's rows by asynchronous copies (stage_rows_async); 2 (14, G = 2): also two
// blocks per multiprocessor with 64 keys a thread (the 32K step's bound of 10,240 rows: 257 blocks of 32 rows, 16
// warps an SM where 64-row blocks ran 8; the select's 64 registers of keys may spill, in the last block only). H200,
// session 12 (W2, W3): the 32K step's indexer launch 54–55 → 46.8 µs, 4-layer decode steps at 32K −8 / −10 µs.
// kStage 3 (17): 2 with wide_select's all-equal check (kTie).
template <int KPT, bool kFma, int G, int kStage = 0>
__global__ void __launch_bounds__(kIdxDecThreads, (G > 0 && (KPT <= 32 || kStage >= 2)) ? 2 : 1)
    indexer_score_select_wide_kernel(IndexerArgs a, uint32_t* keys, int64_t key_stride, int rb, int* done, int* hist) {
  constexpr int HD = 128;
  extern __shared__ float sh[];
  const int64_t i = blockIdx.y;
  const int tid = static_cast<int>(threadIdx.x), lane = tid % kWarp;
  float4 qv[kIdxQPre];
  float wv = 0.0f;
  load_q_pre<HD>(a, i, qv, wv);
  const int32_t nr = a.n_rows[i];
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * rb;
  if (!block_scores_rows(a, i, nr, r0)) return;
  int nrows = 0;
  const float* shw = nullptr;
  if constexpr (G == 0) {
    nrows = score_decode_dots<HD, true, true, kFma>(a, rb, i, nr, r0, sh, &qv, wv);
    shw = sh + decode_w_offset(rb, HD, a.heads);
  } else {
    nrows = score_decode_dots_blocked<G, kFma, (kStage > 0)>(a, rb, i, nr, r0, sh, &qv, wv);
    shw = sh + rb * kBlkPitch;
  }
  const bool mine = tid < nrows;  // rb ≤ kIdxDecMaxRows < blockDim: a thread per row
  uint32_t key = 0u;
  if (mine) {
    key = score_key(head_sum(sh + tid * (a.heads + 1), shw, a.heads));
    keys[i * key_stride + r0 + tid] = key;
  }
  if (tid - lane < nrows) {  // the warps holding rows (whole warps: the match below)
    const uint32_t bin = mine ? key >> kWideShift : 0xffffffffu;
    const unsigned peers = __match_any_sync(0xffffffffu, bin);
    if (mine && lane == __ffs(peers) - 1) atomicAdd(hist + i * kWideBins + bin, __popc(peers));
  }
  if (!last_block_of_query(done, i, static_cast<int>((nr + rb - 1) / rb))) return;
  wide_select<KPT, kStage == 3>(a, i, nr, keys + i * key_stride, hist + i * kWideBins);
}

}  // namespace

void CudaBackend::indexer(const IndexerArgs& a) {
  if (failed() || a.n <= 0) return;
  if (a.top_k <= 0 || a.heads <= 0 || a.head_dim <= 0 || a.n > 65535) {
    fail(invalid_argument("cuda indexer: bad shape (n " + std::to_string(a.n) + ", top_k " + std::to_string(a.top_k) + ")"));
    return;
  }
  int64_t max_rows = a.max_rows;
  if (max_rows <= 0) {  // no host bound given: read the counts back (a synchronous copy)
    std::vector<int32_t> counts(static_cast<size_t>(a.n));
    download(counts.data(), a.n_rows, static_cast<uint64_t>(a.n) * 4);
    if (failed()) return;
    max_rows = *std::max_element(counts.begin(), counts.end());
  }
  float* scores = nullptr;
  int* done = nullptr;  // the fused decode kernels' per-query counters: kIdxDoneBytes at the scratch's start
  int* hist = nullptr;  // then the wide kernel's per-query histograms (kIdxWideHistBytes), then the scores
  const bool dec_shape = (a.head_dim == 128 || a.head_dim == 64) && indexer_decode_heads(a.heads);
  const bool dec = indexer_decode_ && dec_shape && a.n <= kIdxDecodeMaxQueries;
  if (max_rows > a.top_k) {
    const DeviceScratch before = idx_scores_;
    constexpr uint64_t head = kIdxDoneBytes + kIdxWideHistBytes;
    const int64_t stride4 = (max_rows + 3) / 4 * 4;  // the wide kernel's key rows: 16-byte aligned
    if (!ensure(idx_scores_, head + static_cast<uint64_t>(a.n * stride4) * 4, "indexer scores")) return;
    done = static_cast<int*>(idx_scores_.ptr);
    hist = reinterpret_cast<int*>(static_cast<char*>(idx_scores_.ptr) + kIdxDoneBytes);
    scores = reinterpret_cast<float*>(static_cast<char*>(idx_scores_.ptr) + head);
    // A new area (a growth always changes the size; eager: ensure never grows while a graph is recorded): its
    // counters and histograms start at zero, and the fused kernels leave them at zero after each call.
    if ((idx_scores_.ptr != before.ptr || idx_scores_.bytes != before.bytes) &&
        !check(cudaMemsetAsync(done, 0, head, stream()), "indexer counters"))
      return;
    const size_t shmem =
        (static_cast<size_t>(a.heads) * (a.head_dim + 1) + a.heads + static_cast<size_t>(kIdxRows) * a.heads) * sizeof(float);
    if (shmem > 48 * 1024 || a.heads > 256) {
      fail(invalid_argument("cuda indexer: heads·head_dim too large for one block's shared memory"));
      return;
    }
    if (dec) {
      if (sm_count_ == 0 && !check(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, device()),
                                   "indexer: multiprocessor count"))
        return;
      // Rows per block: about one block per multiprocessor over all queries' rows, in whole passes of
      // 4·slots rows (a thread's 4 chains), at most kIdxDecMaxRows (the dots' 16 registers).
      const int unit = 4 * (kIdxDecThreads / a.heads);
      const int64_t want = (max_rows * a.n + sm_count_ - 1) / std::max(sm_count_, 1);
      int rb = static_cast<int>(std::clamp<int64_t>((want + unit - 1) / unit * unit, unit, kIdxDecMaxRows));
      auto dec_smem = [&](int r) {
        return (static_cast<size_t>(r) * std::max(a.head_dim, a.heads + 1) + a.heads) * sizeof(float);
      };
      // 5: the wide kernel for every call it takes; 6: above the fused kernel's 2,048 rows only; 7, 8: as 5, 6 with
      // the fused dot chain where exact (kFma); 9, 10: as 5, 7 and 11, 12: as 6, 8 with the register-blocked tile
      // where a block has 32 or 64 rows (64 heads).
      // 13: as 11 with the tiles' rows by asynchronous copies (the fused kernel's and the blocked tile's); 14: as 13
      // with 32-row blocked tiles, two blocks per multiprocessor; 17: as 14 with the selects' all-equal checks (the wide
      // and the fused kernel's); 18: 17 with 40 keys a thread in the wide select up to 10,240 rows.
      const int sel = idx_select_;
      const bool fma = sel == 7 || sel == 8 || sel == 10 || sel == 12;
      const bool s14 = sel == 14 || sel == 17 || sel == 18;
      const bool async_rows = sel == 13 || s14;
      const bool wide = a.head_dim == 128 && max_rows <= kIdxWideMaxRows &&
                        (sel == 5 || sel == 7 || sel == 9 || sel == 10 ||
                         ((sel == 6 || sel == 8 || (sel >= 11 && sel <= 14) || sel == 17 || sel == 18) &&
                          max_rows > kIdxFusedMaxRows));
      if (wide) {  // q staged in shared memory too, rows per block not cut: > 48 KB (opt-in)
        const bool blocked = ((sel >= 9 && sel <= 14) || sel == 17 || sel == 18) && a.heads == 64 && rb > unit;
        const int g = !blocked ? 0 : rb > 2 * unit && !s14 ? 4 : 2;
        if (g > 0) rb = 16 * g;  // the blocked tile's rows: 4 · 256 / (64 / G)
        const size_t dshm = g == 0 ? dec_smem(rb) + static_cast<size_t>(a.heads) * (128 + 4) * sizeof(float)
                                   : (static_cast<size_t>(rb) * kBlkPitch + 64 + 64 * kBlkPitch) * sizeof(float);
        const int kpt = max_rows <= 2048 ? 8 : max_rows <= 8192 ? 32 : 64;
        auto pick = [&](auto k8, auto k32, auto k64) { return kpt == 8 ? k8 : kpt == 32 ? k32 : k64; };
        // 18: 17 with 40 keys a thread up to 10,240 rows (the 32K step's bound; 64 above), not 64 that may spill.
        auto k = sel == 18 && g == 2 && kpt == 64 && max_rows <= 40 * kIdxDecThreads
                     ? indexer_score_select_wide_kernel<40, false, 2, 3>
                 : (sel == 17 || sel == 18) && g == 2 ? pick(indexer_score_select_wide_kernel<8, false, 2, 3>,
                                            indexer_score_select_wide_kernel<32, false, 2, 3>,
                                            indexer_score_select_wide_kernel<64, false, 2, 3>)
                 : sel == 14 && g == 2 ? pick(indexer_score_select_wide_kernel<8, false, 2, 2>,
                                            indexer_score_select_wide_kernel<32, false, 2, 2>,
                                            indexer_score_select_wide_kernel<64, false, 2, 2>)
                 : async_rows && g == 2 ? pick(indexer_score_select_wide_kernel<8, false, 2, 1>,
                                               indexer_score_select_wide_kernel<32, false, 2, 1>,
                                               indexer_score_select_wide_kernel<64, false, 2, 1>)
                 : async_rows && g == 4 ? pick(indexer_score_select_wide_kernel<8, false, 4, 1>,
                                               indexer_score_select_wide_kernel<32, false, 4, 1>,
                                               indexer_score_select_wide_kernel<64, false, 4, 1>)
                 : g == 0 ? (fma ? pick(indexer_score_select_wide_kernel<8, true, 0>, indexer_score_select_wide_kernel<32, true, 0>,
                                      indexer_score_select_wide_kernel<64, true, 0>)
                               : pick(indexer_score_select_wide_kernel<8, false, 0>, indexer_score_select_wide_kernel<32, false, 0>,
                                      indexer_score_select_wide_kernel<64, false, 0>))
                 : g == 2 ? (fma ? pick(indexer_score_select_wide_kernel<8, true, 2>, indexer_score_select_wide_kernel<32, true, 2>,
                                        indexer_score_select_wide_kernel<64, true, 2>)
                                 : pick(indexer_score_select_wide_kernel<8, false, 2>, indexer_score_select_wide_kernel<32, false, 2>,
                                        indexer_score_select_wide_kernel<64, false, 2>))
                          : (fma ? pick(indexer_score_select_wide_kernel<8, true, 4>, indexer_score_select_wide_kernel<32, true, 4>,
                                        indexer_score_select_wide_kernel<64, true, 4>)
                                 : pick(indexer_score_select_wide_kernel<8, false, 4>, indexer_score_select_wide_kernel<32, false, 4>,
                                        indexer_score_select_wide_kernel<64, false, 4>));
        // The limit: the largest call's (64 heads, 64 rows, the blocked tile's pitch), the same value every time,
        // raised when no graph is being recorded (a recorded step always ran once eagerly before).
        constexpr int kWideSmemMax = (64 * kBlkPitch + 64 + 64 * kBlkPitch) * static_cast<int>(sizeof(float));
        cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
        if (!check(cudaStreamIsCapturing(stream(), &capturing), "indexer wide: capture status")) return;
        if (capturing == cudaStreamCaptureStatusNone &&
            !check(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, kWideSmemMax), "indexer wide smem"))
          return;
        const dim3 grid(grid_for(max_rows, rb), static_cast<unsigned>(a.n));
        k<<<grid, kIdxDecThreads, dshm, stream()>>>(a, reinterpret_cast<uint32_t*>(scores), (max_rows + 3) / 4 * 4, rb,
                                                    done, hist);
        launched("indexer scores + select (wide)");
        return;
      }
      if (idx_select_ >= 2 && max_rows <= kIdxFusedMaxRows) {  // scores and selection in one launch
        // q staged too ([heads][head_dim + 4]): rows per block cut to stay within 48 KB (no opt-in).
        const size_t qsm = static_cast<size_t>(a.heads) * (a.head_dim + 4) * sizeof(float);
        while (rb > unit && dec_smem(rb) + qsm > 48 * 1024) rb -= unit;
        const size_t dshm = dec_smem(rb) + qsm;
        const dim3 grid(grid_for(max_rows, rb), static_cast<unsigned>(a.n));
        // 3: q and w loaded before the row count; 4: also the lean radix end; 13: also the tile by asynchronous
        // copies (same ids).
        auto fused = sel == 17 || sel == 18 ? (a.head_dim == 128 ? indexer_score_select_decode_kernel<128, true, true, true, true>
                                                    : indexer_score_select_decode_kernel<64, true, true, true, true>)
                     : async_rows ? (a.head_dim == 128 ? indexer_score_select_decode_kernel<128, true, true, true>
                                                     : indexer_score_select_decode_kernel<64, true, true, true>)
                     : idx_select_ >= 4 ? (a.head_dim == 128 ? indexer_score_select_decode_kernel<128, true, true>
                                                             : indexer_score_select_decode_kernel<64, true, true>)
                     : idx_select_ == 3 ? (a.head_dim == 128 ? indexer_score_select_decode_kernel<128, true, false>
                                                             : indexer_score_select_decode_kernel<64, true, false>)
                                        : (a.head_dim == 128 ? indexer_score_select_decode_kernel<128, false, false>
                                                             : indexer_score_select_decode_kernel<64, false, false>);
        fused<<<grid, kIdxDecThreads, dshm, stream()>>>(a, scores, max_rows, rb, done, static_cast<int>(dshm / 4));
        launched("indexer scores + select");
        return;
      }
      const size_t dshm = dec_smem(rb);
      const dim3 grid(grid_for(max_rows, rb), static_cast<unsigned>(a.n));
      auto score = a.head_dim == 128 ? indexer_score_decode_kernel<128> : indexer_score_decode_kernel<64>;
      score<<<grid, kIdxDecThreads, dshm, stream()>>>(a, scores, max_rows, rb);
    } else if (indexer_mma_ && tensor_cores() && indexer_scores_mma(a, scores, max_rows, max_rows)) {
      // prefill chunks on int8 tensor cores (indexer_mma.cu), the same scores
    } else if (tensor_cores() && a.n >= 2 && (a.head_dim == 128 || a.head_dim == 64)) {
      const dim3 grid(grid_for(max_rows, kIdxTileRows), grid_for(a.n, kIdxTileQueries));
      auto tiled = a.head_dim == 128 ? (indexer_v2_ ? indexer_score_tiled_kernel<128, true> : indexer_score_tiled_kernel<128, false>)
                                     : (indexer_v2_ ? indexer_score_tiled_kernel<64, true> : indexer_score_tiled_kernel<64, false>);
      tiled<<<grid, kIdxTileRows, shmem, stream()>>>(a, scores, max_rows);
    } else {  // decode: one thread per (row, head), kIdxRows rows per block (shmem covers both layouts)
      const dim3 grid(grid_for(max_rows, kIdxRows), static_cast<unsigned>(a.n));
      indexer_score_kernel<<<grid, kIdxRows * a.heads, shmem, stream()>>>(a, scores, max_rows);
    }
    if (!launched("indexer scores")) return;
  }
  if (indexer_v2_) {
    const int smem_keys = max_rows <= kSelectSmemKeys ? static_cast<int>(max_rows) : 0;
    auto sel = idx_select_ >= 1 ? indexer_radix_select_kernel<true> : indexer_radix_select_kernel<false>;
    sel<<<static_cast<unsigned>(a.n), kSelectThreads, static_cast<size_t>(smem_keys) * 4, stream()>>>(a, scores, max_rows,
                                                                                                      smem_keys);
  } else {
    indexer_select_kernel<<<static_cast<unsigned>(a.n), 512, 0, stream()>>>(a, scores, max_rows);
  }
  launched("indexer select");
}

}  // namespace ds4::backend::cuda
