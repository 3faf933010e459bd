// attention_mma.cuh — the pieces of the MMA attention order (README.md "Attention summation order on
// tensor cores") that its kernels share: the block's head tile and warp layout, the m16n8k8 TF32 MMA's
// three-product form for rows not exact in TF32 (the TF32 split and the MMA: mma_tf32.cuh), a warp's query
// fragments, and the staging of a segment's rows by cp.async with their comp_idx entries loaded ahead.
// Used by attention_mma.cu (split, merge and the previous chunk kernels) and attention_mma_chunk.cu
// (the chunk kernel with the softmax once per block), so both run the same operations on the same
// operands. Deliberately not here: the kernels themselves and their launch decisions.
#pragma once

#include <cstdint>

#include "backend/backend.h"
#include "backend/cuda/attention_rows.cuh"
#include "backend/cuda/common.cuh"
#include "backend/cuda/mma_s8.cuh"
#include "backend/cuda/mma_tf32.cuh"

namespace ds4::backend::cuda {
class CudaBackend;
}

namespace ds4::backend::cuda::attn_mma {

// attention_mma_chunk.cu: the chunk shape with the softmax once per block (attention_mma_kernels = 3;
// head_dim 64, 128, 256 or 512). smem_ready: the caller's bits of kernels whose shared-memory limit is
// raised (these launchers use bits 8–31).
// loop32 (attention_mma_kernels = 10): its segment loop on 32-bit counters and a rotating buffer index (same bits).
void launch_chunk_softmax_once(CudaBackend& be, const AttentionArgs& a, uint32_t& smem_ready, bool loop32 = false,
                               bool qs = false);
// attention_mma_kernels = 14: the same steps with each warp's segments pipelined (between one pair of barriers the
// value product of segment s − 1, the softmax of s and the scores of s + 1; rows staged per warp slice); needs
// raw_cap ≥ window. lanes8 (attention_mma_kernels = 18): its row copies 8 lanes a row (two copies a lane).
// qs (with loop32: attention_mma_kernels = 25; with lanes8: 26; the default's since session 13): q staged through shared
// memory by coalesced 16-byte copies (attention_mma_chunk.cu stage_q_slice) and the exactness decision's checks as
// independent chains (partials_finite, slice_scores' kOr4) — the same bits.
// tail (with lanes8 and qs: attention_mma_kernels = 32, session 14): a query's last segment formed only over its n-tiles and
// k-steps holding rows (attention_mma_chunk.cu chunk14_block kTail) — the same bits. spread (with tail:
// attention_mma_kernels = 34, the default's since session 14): each interval's row copies issued a row source at a time
// between the score k-steps (attention_mma_chunk.cu SpreadCopies) — the same bits.
void launch_chunk_pipelined(CudaBackend& be, const AttentionArgs& a, uint32_t& smem_ready, bool lanes8 = false,
                            bool qs = false, bool tail = false, bool spread = false);
// The split kernel of the same steps: split_segs segments per (query, 16 heads) into st. pdl (attention_mma_kernels 37;
// attention_pdl.h): launched as a programmatic dependent of the kernel before it (sm_90, the main lane: the caller
// decides), its blocks reading only the step's inputs before they wait and copying the rows those inputs place into
// shared memory — the same bits.
void launch_split_softmax_once(CudaBackend& be, const AttentionArgs& a, int64_t split_segs, const SegStates& st,
                               uint32_t& smem_ready, bool pdl = false);

inline constexpr int kHeads = 16;  // heads per block = the MMA's M: lane 4g + t holds heads g and g + 8
inline constexpr int kWarps = 8;   // warp w owns dims [w·DW, (w+1)·DW), DW = head_dim / 8
inline constexpr int kThreads = kWarps * kWarp;
inline constexpr int kPad = 4;     // row pitch D + 4 floats: both products' fragment loads hit 32 distinct banks

// c += a·b + (a·b_lo where b's 8 × 8 block is not exact in TF32): b = (b0, b1) as loaded; the hi part
// first, then a_lo·b_hi, then a_hi·b_lo, all into the same accumulator.
__device__ inline void mma_split(float (&c)[4], const uint32_t (&a_hi)[4], const uint32_t (&a_lo)[4], float b0,
                                 float b1) {
  const uint32_t h0 = tf32_bits(b0), h1 = tf32_bits(b1);
  const float r0 = b0 - __uint_as_float(h0), r1 = b1 - __uint_as_float(h1);
  mma_tf32(c, a_hi, h0, h1);
  mma_tf32(c, a_lo, h0, h1);
  if (__any_sync(0xffffffffu, r0 != 0.0f || r1 != 0.0f)) mma_tf32(c, a_hi, tf32_bits(r0), tf32_bits(r1));
}

// One warp's query fragments: heads (g, g + 8) × its dims, KK k-steps of 8, split into TF32 hi/lo.
template <int KK>
struct QFrag {
  uint32_t hi[KK][4], lo[KK][4];
  __device__ void get(int kk, uint32_t (&h)[4], uint32_t (&l)[4]) const {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      h[e] = hi[kk][e];
      l[e] = lo[kk][e];
    }
  }
};

// Query i's fragments for heads hs[0] (rows g) and hs[1] (rows g + 8; zero where !ok) over dims d0 …
// d0 + 8·KK − 1: k-step kk holds dims d0 + 8kk + t (columns t) and + 4 (columns t + 4).
// In two steps where the loads should fly across other work: load_q_floats, then split_q.
template <int KK>
__device__ inline void load_q_floats(float (&x)[KK][4], const AttentionArgs& a, int64_t i, const int (&hs)[2],
                                     const bool (&ok)[2], int d0, int t) {
  const int64_t D = a.head_dim;
  const float* qa = a.q + (i * a.heads + hs[0]) * D + d0;
  const float* qb = a.q + (i * a.heads + hs[1]) * D + d0;
#pragma unroll
  for (int kk = 0; kk < KK; ++kk) {
    x[kk][0] = ok[0] ? qa[8 * kk + t] : 0.0f;
    x[kk][1] = ok[1] ? qb[8 * kk + t] : 0.0f;
    x[kk][2] = ok[0] ? qa[8 * kk + t + 4] : 0.0f;
    x[kk][3] = ok[1] ? qb[8 * kk + t + 4] : 0.0f;
  }
}
template <int KK>
__device__ inline void split_q(QFrag<KK>& qf, const float (&x)[KK][4]) {
#pragma unroll
  for (int kk = 0; kk < KK; ++kk)
#pragma unroll
    for (int e = 0; e < 4; ++e) split_tf32(x[kk][e], qf.hi[kk][e], qf.lo[kk][e]);
}
template <int KK>
__device__ inline void load_q(QFrag<KK>& qf, const AttentionArgs& a, int64_t i, const int (&hs)[2], const bool (&ok)[2],
                              int d0, int t) {
  float x[KK][4];
  load_q_floats(x, a, i, hs, ok, d0, t);
  split_q(qf, x);
}

// Step 1 of the contract for this warp's slice (rows at base = staged segment + slice offset, pitch
// D + kPad): the partial scores part[nt][c] = A + B of heads (g, g + 8) × rows 8nt + 2t, 8nt + 2t + 1
// (c = 0, 1 head g; 2, 3 head g + 8). kAsIs: the rows' bits go to the MMAs unconverted and `bits` collects
// their OR (right only when every value is exact in TF32 and finite — the caller checks or knows); else
// each 8 × 8 block is converted and gets its third product where it is not exact, as the contract writes it.
// P: the staged rows' pitch in floats (the block's rows, or one warp's slice of them: attention_mma_chunk.cu kernel 14).
// kOr4 (attention_mma_chunk.cu kernels 25, 26): the OR collected per n-tile and joined at the end — four chains of 8
// instead of one of 32 dependent ORs; the same OR.
// NT < 4 (attention_mma_chunk.cu kernel 32, a query's last segment): only n-tiles 0 … NT − 1 formed, part = 0 for the
// others — the caller's rows from 8·NT on are past the query's candidates (zero-filled, their scores masked to −inf).
// after_k(kk): called after k-step kk's MMAs (attention_mma_chunk.cu kernel 34: the next staging's copies spread over the
// k-steps); NoHook: nothing.
struct NoHook {
  __device__ void operator()(int) const {}
};
template <int DW, bool kAsIs, int P = DW * kWarps + kPad, bool kOr4 = false, int NT = 4, typename Q, typename Hook = NoHook>
__device__ inline void slice_scores(const float* base, const Q& qf, int g, int t, float (&part)[4][4], uint32_t& bits,
                                    Hook after_k = {}) {
  static_assert(NT >= 1 && NT <= 4, "n-tiles formed");
  constexpr int KK = DW / 8;
  float sa[4][4], sb[4][4];
  uint32_t bn[4] = {0u, 0u, 0u, 0u};  // kOr4: the OR of n-tile nt's values
#pragma unroll
  for (int nt = 0; nt < 4; ++nt)
#pragma unroll
    for (int c = 0; c < 4; ++c) sa[nt][c] = sb[nt][c] = 0.0f;
#pragma unroll
  for (int kk = 0; kk < KK; ++kk) {
    uint32_t qhi[4], qlo[4];
    qf.get(kk, qhi, qlo);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const float* kr = base + (8 * nt + g) * P + 8 * kk + t;
      const float k0 = kr[0], k1 = kr[4];
      if constexpr (kAsIs) {
        const uint32_t u0 = __float_as_uint(k0), u1 = __float_as_uint(k1);
        if constexpr (kOr4) bn[nt] |= u0 | u1;
        else bits |= u0 | u1;
        mma_tf32(sa[nt], qhi, u0, u1);
        mma_tf32(sb[nt], qlo, u0, u1);
      } else {
        const uint32_t h0 = tf32_bits(k0), h1 = tf32_bits(k1);
        const float r0 = k0 - __uint_as_float(h0), r1 = k1 - __uint_as_float(h1);
        mma_tf32(sa[nt], qhi, h0, h1);
        mma_tf32(sb[nt], qlo, h0, h1);
        if (__any_sync(0xffffffffu, r0 != 0.0f || r1 != 0.0f)) mma_tf32(sb[nt], qhi, tf32_bits(r0), tf32_bits(r1));
      }
    }
    after_k(kk);
  }
  if constexpr (kOr4 && kAsIs) bits |= (bn[0] | bn[1]) | (bn[2] | bn[3]);
#pragma unroll
  for (int nt = 0; nt < 4; ++nt)
#pragma unroll
    for (int c = 0; c < 4; ++c) part[nt][c] = sa[nt][c] + sb[nt][c];
}

// Step 3 for this warp's slice: acc[u] over dims 8u … 8u + 7 of base, k-steps j = 0 … 3 (row 8j + 2t at
// column t, 8j + 2t + 1 at t + 4), p's TF32 parts of k-step j from p_frag(j, hi, lo) (A fragments: (g, t)
// = word 0, (g + 8, t) = 1, (g, t + 4) = 2, (g + 8, t + 4) = 3); as_is: the rows' bits unconverted (every
// value exact in TF32 and finite), else mma_split per 8 × 8 block.
// NJ < 4 (attention_mma_chunk.cu kernel 32, a query's last segment): only k-steps 0 … NJ − 1 — the others' products are
// p = 0 (masked scores) times zero-filled rows, exact zeros added to acc, which leave every nonzero acc as it is.
template <int DW, int P = DW * kWarps + kPad, int NJ = 4, typename PFrag>
__device__ inline void slice_values(const float* base, PFrag p_frag, int g, int t, bool as_is, float (&acc)[DW / 8][4]) {
  constexpr int KN = DW / 8;
  static_assert(NJ >= 1 && NJ <= 4, "k-steps formed");
#pragma unroll
  for (int u = 0; u < KN; ++u)
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[u][c] = 0.0f;
#pragma unroll
  for (int j = 0; j < NJ; ++j) {
    uint32_t ph[4], pl[4];
    p_frag(j, ph, pl);
    const float* vr = base + (8 * j + 2 * t) * P + g;
    if (as_is) {
#pragma unroll
      for (int u = 0; u < KN; ++u) {
        const uint32_t v0 = __float_as_uint(vr[8 * u]), v1 = __float_as_uint(vr[P + 8 * u]);
        mma_tf32(acc[u], ph, v0, v1);
        mma_tf32(acc[u], pl, v0, v1);
      }
    } else {
#pragma unroll
      for (int u = 0; u < KN; ++u) mma_split(acc[u], ph, pl, vr[8 * u], vr[P + 8 * u]);
    }
  }
}

// Segment-index prefetch (the fast kernels): lane k < kAttnSeg / NW of warp w holds the comp_idx entry of
// row w + NW·k of a segment (−1 for raw rows and rows past the query's), loaded a whole segment before its
// copies are issued — the copies of segment s + 1 then wait on no global load (the previous kernels load
// each index right before its copy, one serial global latency per segment and warp).
template <int NW>
__device__ inline int32_t prefetch_idx(const QueryRows& q, int64_t seg, int wid, int lane) {
  const int64_t j = seg * kAttnSeg + wid + NW * lane;
  return lane < kAttnSeg / NW && j >= q.n_raw && j < q.total && q.idx ? q.idx[j - q.n_raw] : -1;
}

// Issues the copies of segment seg's rows into buf ([kAttnSeg][D + kPad] floats) — warp w copies rows
// w, w + NW, … — and zero-fills rows past the query's candidates (their scores are masked, but the value
// product reads them: 0·0, never 0·NaN). first_mod = first mod raw_cap. kPre: the compressed rows' ids
// from prefetch_idx (pre); else each loaded from comp_idx right before its copy (the previous kernels).
template <int D, int NW, bool kPre = true>
__device__ inline void stage_rows_pre(float* buf, const QueryRows& q, int64_t raw_cap, int64_t first_mod, int64_t seg,
                                      int wid, int lane, int32_t pre) {
  constexpr int P = D + kPad;
  constexpr int C4 = D / 4;
#pragma unroll
  for (int k = 0; k < kAttnSeg / NW; ++k) {
    const int r = wid + NW * k;
    const int64_t j = seg * kAttnSeg + r;
    const int32_t id = kPre ? __shfl_sync(0xffffffffu, pre, k) : 0;
    float* dst = buf + r * P;
    if (j < q.total) {
      const float* src;
      if (j < q.n_raw) {
        int64_t rr = first_mod + j;
        if (rr >= raw_cap) rr %= raw_cap;
        src = q.raw + rr * D;
      } else {
        const int64_t c = j - q.n_raw;
        src = q.comp + (q.idx ? static_cast<int64_t>(kPre ? id : q.idx[c]) : c) * D;
      }
      for (int c4 = lane; c4 < C4; c4 += kWarp) cp_async16(dst + 4 * c4, src + 4 * c4);
    } else {
      for (int c4 = lane; c4 < C4; c4 += kWarp) reinterpret_cast<float4*>(dst)[c4] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
  }
}

// 32-bit forms of prefetch_idx / stage_rows_pre for the chunk loops of kernels 7 and 10 (session 10 W2 probe:
// what the per-warp, per-segment 64-bit index and buffer arithmetic costs).
// n_raw, total, first_mod, raw_cap: the query's counts (each < 2^31).
template <int NW>
__device__ inline int32_t prefetch_idx32(const int32_t* idx, int n_raw, int total, int seg, int wid, int lane) {
  const int j = seg * kAttnSeg + wid + NW * lane;
  return lane < kAttnSeg / NW && j >= n_raw && j < total && idx ? idx[j - n_raw] : -1;
}
template <int D, int NW>
__device__ inline void stage_rows32(float* buf, const QueryRows& q, int n_raw, int total, int raw_cap, int first_mod,
                                    int seg, int wid, int lane, int32_t pre) {
  constexpr int P = D + kPad, C4 = D / 4;
#pragma unroll
  for (int k = 0; k < kAttnSeg / NW; ++k) {
    const int r = wid + NW * k, j = seg * kAttnSeg + r;
    const int32_t id = __shfl_sync(0xffffffffu, pre, k);
    float* dst = buf + r * P;
    if (j < total) {
      const float* src;
      if (j < n_raw) {
        int rr = first_mod + j;
        if (rr >= raw_cap) rr %= raw_cap;
        src = q.raw + static_cast<int64_t>(rr) * D;
      } else {
        src = q.comp + static_cast<int64_t>(q.idx ? id : j - n_raw) * D;
      }
#pragma unroll
      for (int c4 = lane; c4 < C4; c4 += kWarp) cp_async16(dst + 4 * c4, src + 4 * c4);
    } else {
#pragma unroll
      for (int c4 = lane; c4 < C4; c4 += kWarp) reinterpret_cast<float4*>(dst)[c4] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
  }
}

}  // namespace ds4::backend::cuda::attn_mma
