// attention_mma_chunk.cu — the chunk shape (prefill chunks, batches past the split shape) of the MMA
// attention order of README.md "Attention summation order on tensor cores", with each segment's softmax
// done once per block (CudaBackendOptions::attention_mma_kernels = 3, the default).
// Block = (query, 16 heads), 8 warps, warp w = dim slice w, as in attention_mma.cu; per 32-row segment:
//  1. every warp forms its slice's partial scores [16 heads × 32 rows] (the same MMAs on the same
//     operands) and stores them;
//  2. a thread per (head, two rows) adds the 8 partials in slice order, and the block's 256 threads run
//     the segment's softmax once — max, p = expf(s − m), l in the contract's lane order (per column pair
//     t a chain over the n-tiles, then the butterfly over t), the merge factors of the running state —
//     and store p split into TF32 parts as the value product's A fragments (the 8-warp kernels of
//     attention_mma.cu ran this step in every warp, 8 times);
//  3. every warp forms its slice of the value product from those fragments and merges it in registers.
// Whether a warp may pass its rows' bits to the MMAs unconverted (every value exact in TF32 and finite)
// is decided from the values its score MMAs read — the OR of their low 13 bits and whether the partial
// scores came out finite (an inf or NaN among them makes its column's scores non-finite) — instead of a
// separate pass over the staged rows; a slice that fails runs its score MMAs again in the converted
// three-product form (the same products the contract names), and its value product too. The value
// product of slice w reads exactly the values its score product read, so one decision covers both.
// Rows are staged three segments deep (cp.async): the copies of segment s + 2 are issued after the
// barrier that opens segment s, so a segment needs three barriers, not four.
// The split shape (decode, small batches) runs the same steps on one segment per block and stores its
// state for attention_mma.cu's merges (attention_mma_split3_kernel).
// Steps 1 and 3's MMAs are attention_mma.cuh's slice_scores / slice_values, as in attention_mma.cu.
// Deliberately not here: the merges (attention_mma.cu; the same bits), the scalar order
// (attention_segments.cu).
#include <cmath>
#include <type_traits>

#include "backend/cuda/attention_mma.cuh"
#include "backend/cuda/attention_rows.cuh"
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_impl.h"

namespace ds4::backend::cuda::attn_mma {

namespace {

constexpr int kBufs = 3;       // staged segments: s + 1 and s + 2 in flight while s is computed
constexpr int kRedPitch = 40;  // floats per (slice, head) row of partial scores (32 + 8: a warp's float2
                               // stores of its fragments hit 32 distinct banks per half-warp)

// Shared memory of the chunk kernel (floats unless marked): rows [kBufs][kAttnSeg][D + kPad]; red
// [kWarps slices][16 heads][kRedPitch] partial scores (row pair k of head h at 2k); pfr [4 k-steps][hi,
// lo][32 lanes] uint4 (p's A fragments); fab [16] (fa, fb) float2 of the segment's merge; mls [16] (M, L).
template <int DW>
struct Smem {
  static constexpr int D = DW * kWarps, P = D + kPad;
  static constexpr size_t rows = static_cast<size_t>(kBufs) * kAttnSeg * P;
  static constexpr size_t red = static_cast<size_t>(kWarps) * kHeads * kRedPitch;
  static constexpr size_t pfr = 4 * 2 * kWarp;
  static constexpr size_t bytes =
      (rows + red) * sizeof(float) + pfr * sizeof(uint4) + 2 * kHeads * sizeof(float2);
};

// 16-byte copy, or 16 zero bytes when !full (src must still be a valid address).
__device__ inline void cp_async16_or_zero(float* dst, const float* src, bool full) {
  const auto d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(full ? 16 : 0) : "memory");
}

// q staged through shared memory (attention_mma_kernels 25, 26): each warp copies its slice of the block's q — 16 heads ×
// dims d0 … d0 + DW − 1, [16][DW + kPad] floats — by 16-byte cp.async (coalesced: 16 lanes a head row, 8 copies a lane at
// DW = 64) into a staged segment that is not yet in use, then reads its fragments from there: the same floats as
// load_q_floats (heads past a.heads zero-filled). The session-11 SASS profile of kernel 14 put ~5 % of a CSA chunk's stall
// samples on q's 32 scalar loads a thread (LSU queue throttle, half of each 32-byte sector unused) and their first use.
template <int DW>
inline constexpr int kQPitch = DW + kPad;  // conflict-free fragment reads: rows 4 banks apart (DW + 4 ≡ 4, 12 or 20 mod 32)
template <int DW>
__device__ inline void stage_q_slice(float* qs, const AttentionArgs& a, int64_t i, int h0, int d0, int lane) {
  constexpr int C = DW / 4, PER = kHeads * C / kWarp;  // 16-byte pieces a head row, copies a lane
  static_assert(kHeads * C % kWarp == 0, "whole copies a lane");
#pragma unroll
  for (int m = 0; m < PER; ++m) {
    const int c = lane + kWarp * m, h = c / C, piece = c % C;
    const bool ok = h0 + h < a.heads;
    const float* src = ok ? a.q + (i * a.heads + h0 + h) * a.head_dim + d0 + 4 * piece : a.q;
    cp_async16_or_zero(qs + h * kQPitch<DW> + 4 * piece, src, ok);
  }
}
// load_q_floats' x from a staged slice (rows g, g + 8: heads h0 + g, h0 + g + 8).
template <int KK>
__device__ inline void read_q_slice(float (&x)[KK][4], const float* qs, int g, int t) {
  constexpr int QP = 8 * KK + kPad;
#pragma unroll
  for (int kk = 0; kk < KK; ++kk) {
    x[kk][0] = qs[g * QP + 8 * kk + t];
    x[kk][1] = qs[(g + 8) * QP + 8 * kk + t];
    x[kk][2] = qs[g * QP + 8 * kk + t + 4];
    x[kk][3] = qs[(g + 8) * QP + 8 * kk + t + 4];
  }
}
// Step 2 for head sh of the block, rows r0 = 8·snt + 2·stt and r0 + 1 (thread = 16·sh + 4·snt + stt; the
// 16 threads of a head are one half-warp): the scores from the slices' partials, the softmax — the
// segment's (m, l) of head sh, in every thread of the head — and p's parts into pfr.
// slot(k): the 4 words of p's fragment slot k (k = 2·j·32 + lane for the hi parts of k-step j, + 32 for the lo
// parts) — contiguous uint4s for kernel 3, the staged rows' pads for kernel 11.
template <typename Slot>
__device__ inline void segment_softmax_at(const float* red, Slot slot, int cnt, float scale, int sh, int snt, int stt,
                                          float& m, float& l) {
  const int spair = 4 * snt + stt;
  const float* rr = red + sh * kRedPitch + 2 * spair;
  float2 v = *reinterpret_cast<const float2*>(rr);
#pragma unroll
  for (int w = 1; w < kWarps; ++w) {  // ((partial_0 + partial_1) + …) + partial_7
    const float2 u = *reinterpret_cast<const float2*>(rr + w * kHeads * kRedPitch);
    v.x = v.x + u.x;
    v.y = v.y + u.y;
  }
  const int r0 = 8 * snt + 2 * stt;
  const float s0 = r0 < cnt ? v.x * scale : -INFINITY;
  const float s1 = r0 + 1 < cnt ? v.y * scale : -INFINITY;
  float mx = fmaxf(s0, s1);
#pragma unroll
  for (int o = 1; o < 16; o <<= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  const float p0 = expf(s0 - mx), p1 = expf(s1 - mx);
  // l: per column pair stt, from 0 in n-tile order (p0 then p1 of each), a chain through the lanes
  // 4 apart; then (s_0 + s_1) + (s_2 + s_3) by the butterfly over stt, read from the snt = 3 lanes.
  float x = (0.0f + p0) + p1;
#pragma unroll
  for (int step = 1; step < 4; ++step) {
    const float prev = __shfl_up_sync(0xffffffffu, x, 4, 16);
    if (snt == step) x = (prev + p0) + p1;
  }
  x = x + __shfl_xor_sync(0xffffffffu, x, 1);
  x = x + __shfl_xor_sync(0xffffffffu, x, 2);
  l = __shfl_sync(0xffffffffu, x, 12, 16);
  m = mx;
  // A fragment of k-step snt, lane 4·(sh mod 8) + stt: word sh / 8 holds row r0 (column stt), word
  // 2 + sh / 8 row r0 + 1 (column stt + 4).
  uint32_t hi0, lo0, hi1, lo1;
  split_tf32(p0, hi0, lo0);
  split_tf32(p1, hi1, lo1);
  const int fl = 4 * (sh & 7) + stt, e = sh >> 3;
  uint32_t* hw = slot(2 * snt * kWarp + fl);
  uint32_t* lw = slot((2 * snt + 1) * kWarp + fl);
  hw[e] = hi0;
  hw[e + 2] = hi1;
  lw[e] = lo0;
  lw[e + 2] = lo1;
}
__device__ inline void segment_softmax(const float* red, uint32_t* pfr_words, int cnt, float scale, int sh, int snt,
                                       int stt, float& m, float& l) {
  segment_softmax_at(red, [pfr_words](int k) { return pfr_words + 4 * k; }, cnt, scale, sh, snt, stt, m, l);
}

// Whether this lane's partial scores are all finite, for the exactness decision (the OR of the rows' low bits says
// nothing about inf / NaN: an inf or NaN read makes its row's partials non-finite for every head). kLean (attention_mma_kernels
// 25, 26): head g's 8 partials only — they cover the lane's rows 8nt + 2t, 8nt + 2t + 1 of every n-tile as both heads'
// 16 do — added as a tree (7 adds, 3 deep, instead of a chain of 16). A finite sum that overflows sends the warp to the
// converted path, which for exact rows runs the same MMAs on the same operands: the decision never changes the bits.
template <bool kLean>
__device__ inline bool partials_finite(const float (&pt)[4][4]) {
  if constexpr (kLean) {
    return isfinite(((pt[0][0] + pt[0][1]) + (pt[1][0] + pt[1][1])) + ((pt[2][0] + pt[2][1]) + (pt[3][0] + pt[3][1])));
  } else {
    float sum = 0.0f;
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int c = 0; c < 4; ++c) sum = sum + pt[nt][c];
    return isfinite(sum);
  }
}

// Steps 1–3 of one staged segment (rows: [kAttnSeg][D + kPad], cnt ≥ 1 of them real) for the block's 16
// heads: acc = this warp's slice of the value product; step 2's threads call on_state(m, l) with their
// head's segment state (every thread of a head, after p's fragments are stored; whatever it writes to
// shared memory is visible once this returns). Three barriers inside; the caller's next writes to red,
// pfr or the rows must follow a barrier after this.
template <int DW, typename OnState, bool kLean = false>
__device__ inline void segment_state(const float* rows, int cnt, const QFrag<DW / 8>& qf, float scale, float* red,
                                     uint4* pfr, OnState on_state, float (&acc)[DW / 8][4]) {
  const int lane = threadIdx.x % kWarp, wid = threadIdx.x / kWarp, g = lane >> 2, t = lane & 3;
  const int sh = threadIdx.x >> 4, snt = (threadIdx.x >> 2) & 3, stt = threadIdx.x & 3;
  const float* base = rows + wid * DW;
  float pt[4][4];
  uint32_t bits = 0;
  slice_scores<DW, true, DW * kWarps + kPad, kLean>(base, qf, g, t, pt, bits);
  const bool as_is = __all_sync(0xffffffffu, (bits & 0x1fffu) == 0 && partials_finite<kLean>(pt)) != 0;
  if (!as_is) slice_scores<DW, false>(base, qf, g, t, pt, bits);
  float* rw = red + wid * kHeads * kRedPitch;
#pragma unroll
  for (int u = 0; u < 4; ++u) {
    const int k = 4 * u + t;
    *reinterpret_cast<float2*>(rw + g * kRedPitch + 2 * k) = make_float2(pt[u][0], pt[u][1]);
    *reinterpret_cast<float2*>(rw + (g + 8) * kRedPitch + 2 * k) = make_float2(pt[u][2], pt[u][3]);
  }
  __syncthreads();
  {
    float m, l;
    segment_softmax(red, reinterpret_cast<uint32_t*>(pfr), cnt, scale, sh, snt, stt, m, l);
    on_state(m, l);
  }
  __syncthreads();
  slice_values<DW>(base, [&](int j, uint32_t (&ph)[4], uint32_t (&pl)[4]) {
    const uint4 h = pfr[2 * j * kWarp + lane], l = pfr[(2 * j + 1) * kWarp + lane];
    ph[0] = h.x, ph[1] = h.y, ph[2] = h.z, ph[3] = h.w;
    pl[0] = l.x, pl[1] = l.y, pl[2] = l.z, pl[3] = l.w;
  }, g, t, as_is, acc);
}

// The chunk shape's block (query i, heads h0 … h0 + 15): every segment staged, steps 1–3, merged in
// registers, the sink, out. Dynamic shared memory: Smem<DW>::bytes.
// The block's end (kernels 3 and 14): head sh's running (M, L) from its step-2 threads through mls to the lanes
// holding the head's run (rows g, g + 8 of this warp's dims d0 …), the sink's step, out = run·f / denom.
template <int D, int KN>
__device__ __forceinline__ void store_heads(const AttentionArgs& a, int64_t i, float2* mls, float M, float L, int sh,
                                            const int (&hs)[2], const bool (&ok)[2], int g, int t, int d0,
                                            const float (&run)[KN][4]) {
  if ((threadIdx.x & 15) == 0) mls[sh] = make_float2(M, L);
  __syncthreads();
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (!ok[r]) continue;
    const float2 ml = mls[g + 8 * r];
    float f, denom;
    sink_step(a.sinks[hs[r]], ml.x, ml.y, f, denom);
    float* o = a.out + (i * a.heads + hs[r]) * D + d0;
#pragma unroll
    for (int u = 0; u < KN; ++u)
      *reinterpret_cast<float2*>(o + 8 * u + 2 * t) = make_float2(run[u][2 * r] * f / denom, run[u][2 * r + 1] * f / denom);
  }
}

// k32 (attention_mma_kernels = 10): the segment loop on 32-bit counters and a rotating buffer index
// (stage_rows32, prefetch_idx32): the same copies and steps.
// kQs (attention_mma_kernels = 25, with k32): q staged in segment 2's buffer (stage_q_slice) and the exactness decision's
// checks as independent chains (partials_finite, slice_scores' kOr4) — the same bits.
template <int DW, bool k32, bool kQs = false>
__device__ inline void chunk3_block(const AttentionArgs& a, int64_t i, int h0) {
  using S = Smem<DW>;
  constexpr int D = S::D, P = S::P, KK = DW / 8, KN = KK, NW = kWarps;
  extern __shared__ float4 smem4[];
  float* bufs = reinterpret_cast<float*>(smem4);
  float* red = bufs + S::rows;
  uint4* pfr = reinterpret_cast<uint4*>(red + S::red);
  float2* fab = reinterpret_cast<float2*>(pfr + S::pfr);
  float2* mls = fab + kHeads;
  const int lane = threadIdx.x % kWarp, wid = threadIdx.x / kWarp;
  const int g = lane >> 2, t = lane & 3;
  const int hs[2] = {h0 + g, h0 + g + 8};
  const bool ok[2] = {hs[0] < a.heads, hs[1] < a.heads};
  const QueryRows qr = query_rows(a, i);
  const int64_t n_seg = segments_of(qr);
  const int d0 = wid * DW;            // this warp's slice: q fragments, acc, run, out
  const int sh = threadIdx.x >> 4;  // step 2's head
  float M = -INFINITY, L = 0.0f;  // head sh's running state (every step-2 thread of the head holds it)
  float run[KN][4];
#pragma unroll
  for (int u = 0; u < KN; ++u)
#pragma unroll
    for (int c = 0; c < 4; ++c) run[u][c] = 0.0f;
  const int64_t first_mod = qr.first % a.raw_cap;
  auto buf = [&](int64_t seg) { return bufs + (seg % kBufs) * (kAttnSeg * P); };

  QFrag<KK> qf;  // the first two segments' copies are issued before q's loads are waited on
  if constexpr (kQs) {
    // Warp w's q slice in staged segment 2 (read before the loop's first barrier; segment 2's copies follow it).
    float* qs = bufs + 2 * (kAttnSeg * P) + wid * kHeads * kQPitch<DW>;
    stage_q_slice<DW>(qs, a, i, h0, d0, lane);
    cp_async_commit();
    const int32_t pre0 = prefetch_idx<NW>(qr, 0, wid, lane), pre1 = prefetch_idx<NW>(qr, 1, wid, lane);
    if (n_seg > 0) stage_rows_pre<D, NW>(buf(0), qr, a.raw_cap, first_mod, 0, wid, lane, pre0);
    cp_async_commit();
    if (n_seg > 1) stage_rows_pre<D, NW>(buf(1), qr, a.raw_cap, first_mod, 1, wid, lane, pre1);
    cp_async_commit();
    cp_async_wait<2>();  // q's copies (segments 0 and 1 may fly)
    __syncwarp();
    float x[KK][4];
    read_q_slice(x, qs, g, t);
    split_q(qf, x);
  } else {
    const int32_t pre0 = prefetch_idx<NW>(qr, 0, wid, lane), pre1 = prefetch_idx<NW>(qr, 1, wid, lane);
    float x[KK][4];
    load_q_floats(x, a, i, hs, ok, d0, t);
    if (n_seg > 0) stage_rows_pre<D, NW>(buf(0), qr, a.raw_cap, first_mod, 0, wid, lane, pre0);
    cp_async_commit();
    if (n_seg > 1) stage_rows_pre<D, NW>(buf(1), qr, a.raw_cap, first_mod, 1, wid, lane, pre1);
    cp_async_commit();
    split_q(qf, x);
  }
  int32_t pre = prefetch_idx<NW>(qr, 2, wid, lane);  // consumed a segment later

  auto merge_run = [&](const float (&acc)[KN][4]) {
    const float2 fg = fab[g], fg8 = fab[g + 8];
    const float fa[2] = {fg.x, fg8.x}, fb[2] = {fg.y, fg8.y};
#pragma unroll
    for (int u = 0; u < KN; ++u)
#pragma unroll
      for (int c = 0; c < 4; ++c) run[u][c] = merged(run[u][c], fa[c >> 1], acc[u][c], fb[c >> 1]);
  };
  auto on_state = [&](float m_s, float l_s) {
    float fa, fb;
    merge_step(M, L, m_s, l_s, fa, fb);
    if ((threadIdx.x & 15) == 0) fab[sh] = make_float2(fa, fb);
  };
  if constexpr (k32) {
    const int ns = static_cast<int>(n_seg), n_raw = static_cast<int>(qr.n_raw), total = static_cast<int>(qr.total);
    const int cap = static_cast<int>(a.raw_cap), fm = static_cast<int>(first_mod);
    int bc = 0;  // seg's buffer
    for (int seg = 0; seg < ns; ++seg) {
      cp_async_wait<1>();
      __syncthreads();
      if (seg + 2 < ns) {
        const int b2 = bc == 0 ? 2 : bc - 1;
        stage_rows32<D, NW>(bufs + b2 * (kAttnSeg * P), qr, n_raw, total, cap, fm, seg + 2, wid, lane, pre);
        pre = prefetch_idx32<NW>(qr.idx, n_raw, total, seg + 3, wid, lane);
      }
      cp_async_commit();
      const int left = total - seg * kAttnSeg;
      float acc[KN][4];
      segment_state<DW, decltype(on_state), kQs>(bufs + bc * (kAttnSeg * P), left < kAttnSeg ? left : kAttnSeg, qf,
                                                    a.scale, red, pfr, on_state, acc);
      merge_run(acc);
      bc = bc == 2 ? 0 : bc + 1;
    }
  } else {
  for (int64_t seg = 0; seg < n_seg; ++seg) {
    cp_async_wait<1>();  // this thread's copies of seg have landed (only seg + 1's may fly)
    __syncthreads();     // everyone's have; every warp is done with seg − 1 (its rows, red, pfr, fab)
    if (seg + 2 < n_seg) {
      stage_rows_pre<D, NW>(buf(seg + 2), qr, a.raw_cap, first_mod, seg + 2, wid, lane, pre);
      pre = prefetch_idx<NW>(qr, seg + 3, wid, lane);
    }
    cp_async_commit();
    const int64_t left = qr.total - seg * kAttnSeg;
    const int cnt = left < kAttnSeg ? static_cast<int>(left) : kAttnSeg;
    float acc[KN][4];
    segment_state<DW>(buf(seg), cnt, qf, a.scale, red, pfr, on_state, acc);
    merge_run(acc);
  }

  }

  store_heads<D, KN>(a, i, mls, M, L, sh, hs, ok, g, t, d0, run);
}

template <int DW, bool k32, bool kQs = false>
__global__ void __launch_bounds__(kThreads, 1) attention_mma_chunk3_kernel(AttentionArgs a) {
  const int groups = (a.heads + kHeads - 1) / kHeads;
  chunk3_block<DW, k32, kQs>(a, blockIdx.x / groups, static_cast<int>(blockIdx.x % groups) * kHeads);
}

// ---- Kernel 14 (attention_mma_kernels = 14): the chunk shape's segments pipelined within each warp ----
// Kernel 3 runs a segment's three steps between three block barriers: the score MMAs, then (barrier) the
// softmax on CUDA cores while the tensor cores idle, then (barrier) the value MMAs. Kernel 14 runs the same
// steps on the same operands in the same order per segment, but shifted: between one pair of barriers a
// warp forms the value product of segment s − 1 (and merges it into its running output), the softmax of
// segment s and the score product of segment s + 1 — the softmax's dependent chains and the merge run beside
// the MMAs of the neighbouring segments. A warp reads only its dim slice of a staged row (both products), so
// each warp stages that slice itself ([kAttnSeg][DW + kPad] floats per warp and segment) and waits only on
// its own copies (no block barrier for the rows); three staged segments (s − 1, s, s + 1 in use, s + 2
// copied into s − 1's slices once its value product is formed). p's fragments of two segments sit in the
// pads of two staged segments' rows (kWarps × kAttnSeg pads of 16 bytes = one segment's 256 fragment slots).
// Per-warp pitch DW + 4 keeps both products' fragment loads conflict-free (rows 68 words apart at DW = 64).
// The copies: DW/4 lanes per row, so one cp.async instruction copies 32 / (DW/4) whole row slices (4 cache
// lines at DW = 64, as kernel 3's row copies), each row's source from its lane by a shuffle.
// Session 11 on the H200 (PERF.md): the same bits as kernel 3 in every test shape; CSA chunk (20 segments a
// query) 3,641 vs 3,807 µs, HCA at 32K (13) 2,458 vs 2,527, HCA at 2K (5) 1,184 vs 1,145 — a short query
// pays the pipeline's fill and drain, so the default takes it from kChunkPipelinedMinRows (attention_mma.cu).
// Measured and removed: two lanes per row (11, 12: 16 lines an instruction, LSU-bound, +26 %) and one
// cp.async.bulk per row slice (13: +3.5 %).
// Session 12: kernel 18 = these steps with stage_slice's copies 8 lanes a row (the default's pipelined form since:
// CSA chunks −2.8 %). Measured and removed: a block walking several items with its row staging and q loads running
// on across them (15–17 on kernel 3's steps, 19, 20 on 18's: +2 … +8 % in every chunk shape — an item's start and
// end cost less than the walk's stream bookkeeping added a segment).
template <int DW>
struct PipeSmem {
  static constexpr int D = DW * kWarps, PW = DW + kPad, WS = kAttnSeg * PW, BS = kWarps * WS;
  static constexpr size_t rows = static_cast<size_t>(kBufs) * BS;
  static constexpr size_t red = static_cast<size_t>(kWarps) * kHeads * kRedPitch;
  // rows, red (as Smem), fab [2 segments][16] (fa, fb), mls [16] (M, L).
  static constexpr size_t bytes = (rows + red) * sizeof(float) + 3 * kHeads * sizeof(float2);
  static_assert(kPad * sizeof(float) == sizeof(uint4) && kWarps * kAttnSeg == 4 * 2 * kWarp,
                "a staged segment's row pads hold one segment's p fragments");
};


// Lane r's comp_idx entry of row r of segment seg (−1 for raw rows and rows past the query's), loaded a
// segment ahead of its copies.
__device__ inline int32_t prefetch_id(const int32_t* idx, int n_raw, int total, int seg, int lane) {
  const int j = seg * kAttnSeg + lane;
  return idx && j >= n_raw && j < total ? idx[j - n_raw] : -1;
}
// Row j's slice source (dims d0 …; rows past the query's: q.raw, never read). raw_cap ≥ window: one subtraction wraps.
template <int D>
__device__ inline const float* row_source(const QueryRows& q, int n_raw, int total, int raw_cap, int first_mod, int j,
                                          int32_t id, int d0) {
  int rr = first_mod + j;
  rr = rr >= raw_cap ? rr - raw_cap : rr;
  if (j >= total) return q.raw;
  return (j < n_raw ? q.raw + static_cast<int64_t>(rr) * D : q.comp + static_cast<int64_t>(q.idx ? id : j - n_raw) * D) + d0;
}

// Issues the copies of this warp's slice (dims d0 … d0 + DW − 1) of segment seg's rows into wb
// ([kAttnSeg][DW + kPad]); rows past the query's candidates (or a segment past the last) are zero-filled.
// LPR lanes per row, C = DW/4 16-byte chunks a row slice: lane l copies chunks l mod LPR + LPR·c (c < C / LPR) of rows
// k·(32/LPR) + l/LPR, k = 0 … LPR − 1, each row's source shuffled from its lane once. LPR = C (kernel 14): one copy a
// lane and row; LPR = 8 (kernel 18, DW = 64): two copies a lane at +0 / +128 bytes off one shuffled source — each
// cp.async still copies 4 whole 128-byte lines, with half the shuffles (session 11's SASS put 22 % of kernel 14's
// stall samples at its copies, each waiting for the previous one to release the one source register pair).
template <int DW, int LPR>
__device__ inline void stage_slice(float* wb, const QueryRows& q, int n_raw, int total, int raw_cap, int first_mod,
                                   int seg, int d0, int lane, int32_t id) {
  constexpr int D = DW * kWarps, PW = DW + kPad, C = DW / 4, CPL = C / LPR, RPI = kWarp / LPR;  // rows per instruction
  static_assert(C % LPR == 0 && kWarp % LPR == 0, "whole chunks a lane, whole rows an instruction");
  const int left = total - seg * kAttnSeg;
  const float* mine = row_source<D>(q, n_raw, total, raw_cap, first_mod, seg * kAttnSeg + lane, id, d0);
  const int chunk = lane % LPR, sub = lane / LPR;
  float* dst = wb + sub * PW + 4 * chunk;
#pragma unroll
  for (int k = 0; k < LPR; ++k) {
    const int r = k * RPI + sub;
    const float* src = reinterpret_cast<const float*>(
        __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(mine), r));
    const bool full = r < left;
    const float* s = full ? src + 4 * chunk : q.raw;  // !full: 0 bytes read (q.raw + 4·(C − LPR) floats: inside its first row)
#pragma unroll
    for (int c = 0; c < CPL; ++c) cp_async16_or_zero(dst + k * RPI * PW + 4 * LPR * c, s + 4 * LPR * c, full);
  }
}
// Kernel 14's copies (DW/4 lanes a row) and kernel 18's (at most 8).
template <int DW>
inline constexpr int kLanesWide = DW / 4;
template <int DW>
inline constexpr int kLanes8 = DW / 4 < 8 ? DW / 4 : 8;

// stage_slice's copies (kernel 18's, LPR lanes a row) in LPR steps of one row source each, issued a step at a time: kernel
// 34 issues them one or two a k-step of the score product that precedes their wait, instead of back to back — session
// 14's SASS profile of 26 (CSA chunk) put ~8 % of the stall samples on the moves into the one register pair every copy's
// address takes, each waiting for the previous copy to release it (long scoreboard). No select of the zero-filled rows'
// source either: row_source gives q.raw past the query's rows, which the zero-size copies read nothing of.
template <int DW, int LPR>
struct SpreadCopies {
  static constexpr int PW = DW + kPad, C = DW / 4, CPL = C / LPR, RPI = kWarp / LPR;
  static_assert(C % LPR == 0 && kWarp % LPR == 0, "whole chunks a lane, whole rows an instruction");
  const float* mine;  // this lane's row's source (row seg·32 + lane), shuffled to the lanes copying it
  float* dst;
  int chunk, sub, left;
  __device__ SpreadCopies(float* wb, const QueryRows& q, int n_raw, int total, int raw_cap, int first_mod, int seg, int d0,
                          int lane, int32_t id)
      : mine(row_source<DW * kWarps>(q, n_raw, total, raw_cap, first_mod, seg * kAttnSeg + lane, id, d0)),
        dst(wb + (lane / LPR) * PW + 4 * (lane % LPR)), chunk(lane % LPR), sub(lane / LPR), left(total - seg * kAttnSeg) {}
  __device__ void step(int k) const {  // rows k·RPI + sub, as stage_slice's k
    const int r = k * RPI + sub;
    const float* src = reinterpret_cast<const float*>(__shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(mine), r)) +
                       4 * chunk;
#pragma unroll
    for (int c = 0; c < CPL; ++c) cp_async16_or_zero(dst + k * RPI * PW + 4 * LPR * c, src + 4 * LPR * c, r < left);
  }
};
// slice_scores' hook issuing SpreadCopies' steps, LPR / KK a k-step (1 at DW = 64, 2 below).
template <int DW, int LPR>
struct CopiesAfterK {
  const SpreadCopies<DW, LPR>& sc;
  __device__ void operator()(int kk) const {
    constexpr int KK = DW / 8, PER = LPR / KK;
    static_assert(LPR % KK == 0, "whole steps a k-step");
#pragma unroll
    for (int k = 0; k < PER; ++k) sc.step(kk * PER + k);
  }
};

// Step 1 for this warp's slice with its exactness decision (as segment_state): true when the rows' bits
// went to the MMAs unconverted — then also for the value product of the same segment.
// NT < 4 (kernel 32, a query's last segment): the rows' bits path forms n-tiles 0 … NT − 1 only (the others' rows are
// zero-filled: they add nothing to the OR, their partials would be 0 — finite — and their scores are masked); the
// converted path, rare, forms all four as before.
// after_k: slice_scores' hook, in the rows' bits pass only (run whatever the decision).
template <int DW, int P, bool kLean = false, int NT = 4, typename Hook = NoHook>
__device__ inline bool slice_scores_checked(const float* base, const QFrag<DW / 8>& qf, int g, int t, float (&pt)[4][4],
                                            Hook after_k = {}) {
  uint32_t bits = 0;
  slice_scores<DW, true, P, kLean, NT>(base, qf, g, t, pt, bits, after_k);
  const bool as_is = __all_sync(0xffffffffu, (bits & 0x1fffu) == 0 && partials_finite<kLean>(pt)) != 0;
  if (!as_is) slice_scores<DW, false, P>(base, qf, g, t, pt, bits);
  return as_is;
}

// This warp's partial scores into red (kernel 3's layout: [slice][head][kRedPitch], row pair k at 2k).
__device__ inline void store_partials(float* red, int wid, int g, int t, const float (&pt)[4][4]) {
  float* rw = red + wid * kHeads * kRedPitch;
#pragma unroll
  for (int u = 0; u < 4; ++u) {
    const int k = 4 * u + t;
    *reinterpret_cast<float2*>(rw + g * kRedPitch + 2 * k) = make_float2(pt[u][0], pt[u][1]);
    *reinterpret_cast<float2*>(rw + (g + 8) * kRedPitch + 2 * k) = make_float2(pt[u][2], pt[u][3]);
  }
}

// The chunk shape's block (query i, heads h0 … h0 + 15) of kernel 14. Dynamic shared memory: PipeSmem<DW>::bytes.
// k8: 8 lanes a row copied (kernel 18).
// kQs (attention_mma_kernels = 26, with k8): q staged in the warp's slice of staged segment 2 (stage_q_slice) and 25's
// decision checks — the same bits.
// kTail (attention_mma_kernels = 32, with k8 and kQs): the query's last segment formed only as far as its rows reach — its
// score product's n-tiles and its value product's k-steps past cnt (8 rows each, all zero-filled and masked: an HCA query
// at 2K has 16 … 31 rows there, 144 … 159 in all) are not issued — and no segment past the last staged (26 copies
// zero-filled rows of segment ns in interval ns − 2). The same bits: the skipped scores are masked to −inf whatever they
// are, the skipped value MMAs add p = 0 times zero rows (exact zeros) to their accumulators, and the exactness decision
// sees the same OR (zero rows add no bits) and finite partials alike (see slice_scores_checked).
// kSpread (attention_mma_kernels = 34, with kTail; the default's since session 14): each interval's copies of segment s + 2
// issued a row source at a time between the k-steps of segment s + 1's score product (SpreadCopies), after the wait for
// s + 1's — the same copies. Session 14's H200 W2: CSA chunks 3,341 → 2,818 µs (−16 %), HCA at 2K 1,033 → 925 (−10 %).
// Measured and removed (session 14 W2): one block per multiprocessor walking items with the next item's q and first two
// segments' copies issued during the current item's end (33, 35: +1 … +3 % over 32 / 34 — the start's wait is not
// where an item's time goes once its copies are spread).
template <int DW, bool k8, bool kQs = false, bool kTail = false, bool kSpread = false>
__device__ inline void chunk14_block(const AttentionArgs& a, int64_t i, int h0) {
  static_assert(!kTail || (k8 && kQs), "kernel 32 is 26 with its last segment's tiles skipped");
  static_assert(!kSpread || kTail, "kernel 34 is 32 with its copies spread");
  using S = PipeSmem<DW>;
  constexpr int D = S::D, PW = S::PW, KK = DW / 8, KN = KK;
  extern __shared__ float4 smem4[];
  float* bufs = reinterpret_cast<float*>(smem4);
  float* red = bufs + S::rows;
  float2* fab = reinterpret_cast<float2*>(red + S::red);  // [segment parity][head]
  float2* mls = fab + 2 * kHeads;
  const int lane = threadIdx.x % kWarp, wid = threadIdx.x / kWarp;
  const int g = lane >> 2, t = lane & 3;
  const int hs[2] = {h0 + g, h0 + g + 8};
  const bool ok[2] = {hs[0] < a.heads, hs[1] < a.heads};
  const QueryRows qr = query_rows(a, i);
  const int ns = static_cast<int>(segments_of(qr)), n_raw = static_cast<int>(qr.n_raw), total = static_cast<int>(qr.total);
  const int cap = static_cast<int>(a.raw_cap), fm = static_cast<int>(qr.first % a.raw_cap);
  const int d0 = wid * DW;
  const int sh = threadIdx.x >> 4, snt = (threadIdx.x >> 2) & 3, stt = threadIdx.x & 3;  // step 2's thread
  float* wrows = bufs + wid * S::WS;  // this warp's slice of staged segment b: wrows + b·BS
  // p's fragment slot k of segment parity e: the pad of row k mod 32 of warp slice k / 32 in staged segment e.
  auto slots = [bufs](int e) {
    return [p = bufs + e * S::BS + DW](int k) { return reinterpret_cast<uint32_t*>(p + (k >> 5) * S::WS + (k & 31) * PW); };
  };
  float M = -INFINITY, L = 0.0f;  // head sh's running state (every step-2 thread of the head holds it)
  float run[KN][4];
#pragma unroll
  for (int u = 0; u < KN; ++u)
#pragma unroll
    for (int c = 0; c < 4; ++c) run[u][c] = 0.0f;

  // Staging of segment seg into staged segment b (issue only), and the wait for the oldest one in flight.
  auto stage = [&](int b, int seg, int32_t id) {
    stage_slice<DW, k8 ? kLanes8<DW> : kLanesWide<DW>>(wrows + b * S::BS, qr, n_raw, total, cap, fm, seg, d0, lane, id);
    cp_async_commit();
  };
  auto ids_of = [&](int seg) { return prefetch_id(qr.idx, n_raw, total, seg, lane); };
  auto wait_staged = [&]() {  // the next staging may still fly
    cp_async_wait<1>();
    __syncwarp();
  };
  QFrag<KK> qf;
  int32_t pre;  // lane's id of segment s + 2, loaded an interval ahead of its copies
  if constexpr (kQs) {
    // The warp's q slice in its slice of staged segment 2 (segment 2's copies come after interval 0's softmax; its
    // pads are not p's slots, which sit in staged segments 0 and 1).
    float* qs = wrows + 2 * S::BS;
    stage_q_slice<DW>(qs, a, i, h0, d0, lane);
    cp_async_commit();
    const int32_t p0 = ids_of(0), p1 = ids_of(1);
    stage(0, 0, p0);
    stage(1, 1, p1);
    cp_async_wait<2>();  // q's copies (segments 0 and 1 may fly)
    __syncwarp();
    float x[KK][4];
    read_q_slice(x, qs, g, t);
    split_q(qf, x);
    pre = ids_of(2);
  } else {
    const int32_t p0 = ids_of(0), p1 = ids_of(1);
    float x[KK][4];
    load_q_floats(x, a, i, hs, ok, d0, t);
    stage(0, 0, p0);
    stage(1, 1, p1);
    split_q(qf, x);
    pre = ids_of(2);
  }
  bool as_is_cur = true;  // segment s's products from the rows' bits (decided by its score product)
  if (ns > 0) {
    wait_staged();
    float pt[4][4];
    as_is_cur = slice_scores_checked<DW, PW, kQs>(wrows, qf, g, t, pt);
    store_partials(red, wid, g, t, pt);
  }
  __syncthreads();

  // Value product of segment sp (staged in b) merged into run with its factors (fab of its parity).
  auto values_merge = [&](int sp, int b, bool as_is) {
    const float* pb = reinterpret_cast<const float*>(slots(sp & 1)(lane));
    float acc[KN][4];
    auto p_frag = [&](int j, uint32_t (&ph)[4], uint32_t (&pl)[4]) {
      const uint4 h = *reinterpret_cast<const uint4*>(pb + 2 * j * S::WS), l = *reinterpret_cast<const uint4*>(pb + (2 * j + 1) * S::WS);
      ph[0] = h.x, ph[1] = h.y, ph[2] = h.z, ph[3] = h.w;
      pl[0] = l.x, pl[1] = l.y, pl[2] = l.z, pl[3] = l.w;
    };
    if (as_is) slice_values<DW, PW>(wrows + b * S::BS, p_frag, g, t, true, acc);
    else slice_values<DW, PW>(wrows + b * S::BS, p_frag, g, t, false, acc);
    const float2 fg = fab[(sp & 1) * kHeads + g], fg8 = fab[(sp & 1) * kHeads + g + 8];
    const float fa[2] = {fg.x, fg8.x}, fb[2] = {fg.y, fg8.y};
#pragma unroll
    for (int u = 0; u < KN; ++u)
#pragma unroll
      for (int c = 0; c < 4; ++c) run[u][c] = merged(run[u][c], fa[c >> 1], acc[u][c], fb[c >> 1]);
  };
  // Step 2 of segment s (its partials in red): p into its parity's slots, (M, L) advanced, the merge factors.
  auto softmax = [&](int s) {
    const int left = total - s * kAttnSeg;
    float m, l, fa, fb;
    segment_softmax_at(red, slots(s & 1), left < kAttnSeg ? left : kAttnSeg, a.scale, sh, snt, stt, m, l);
    merge_step(M, L, m, l, fa, fb);
    if ((threadIdx.x & 15) == 0) fab[(s & 1) * kHeads + sh] = make_float2(fa, fb);
  };

  int b_prev = 2, b_cur = 0, b_next = 1;  // staged segments of s − 1, s, s + 1
  bool as_is_prev = true;
  // Interval s (s + 1 < ns): values of s − 1 (unless kFirst) with as_is_prev = kAsIs, softmax of s, s + 2's copies,
  // scores of s + 1 — one straight stretch of code for the scheduler (the rows' branch is the rare converted path).
  auto interval = [&](auto as_is_c, auto first_c, int s) {
    if constexpr (!decltype(first_c)::value) values_merge(s - 1, b_prev, decltype(as_is_c)::value);
    softmax(s);
    __syncwarp();  // the warp's reads of s − 1's slices are done: copy s + 2 over them
    float pt[4][4];
    bool as_is_next;
    if constexpr (kSpread) {
      cp_async_wait<0>();  // s + 1's copies (s + 2's are issued below)
      __syncwarp();
      const SpreadCopies<DW, kLanes8<DW>> sc(wrows + b_prev * S::BS, qr, n_raw, total, cap, fm, s + 2, d0, lane, pre);
      pre = ids_of(s + 3);
      as_is_next = slice_scores_checked<DW, PW, kQs>(wrows + b_next * S::BS, qf, g, t, pt, CopiesAfterK<DW, kLanes8<DW>>{sc});
      cp_async_commit();
    } else {
      stage(b_prev, s + 2, pre);
      pre = ids_of(s + 3);
      wait_staged();  // s + 1's copies (only s + 2's may fly)
      as_is_next = slice_scores_checked<DW, PW, kQs>(wrows + b_next * S::BS, qf, g, t, pt);
    }
    __syncthreads();  // every softmax of s has read red
    store_partials(red, wid, g, t, pt);
    __syncthreads();  // s + 1's partials, s's p fragments and factors visible
    as_is_prev = as_is_cur;
    as_is_cur = as_is_next;
    const int b_free = b_prev;
    b_prev = b_cur;
    b_cur = b_next;
    b_next = b_free;
  };
  using True = std::integral_constant<bool, true>;
  using False = std::integral_constant<bool, false>;
  // kTail: the loop stops an interval earlier; interval ns − 2 (scores of the last segment) follows it.
  for (int s = 0; s + (kTail ? 2 : 1) < ns; ++s) {
    if (s == 0) interval(True{}, True{}, 0);
    else if (as_is_prev) interval(True{}, False{}, s);
    else interval(False{}, False{}, s);
  }
  // kTail: n-tiles (k-steps) of segment s holding its rows, 8 each.
  auto live8 = [&](int s) {
    const int left = total - s * kAttnSeg;
    return left >= kAttnSeg ? 4 : (left + 7) >> 3;
  };
  if constexpr (kTail) {
    if (ns > 1) {  // interval ns − 2: values of ns − 3, softmax of ns − 2, no copies, scores of ns − 1 as far as its rows
      const int s = ns - 2;
      if (s > 0) values_merge(s - 1, b_prev, as_is_prev);
      softmax(s);
      cp_async_wait<0>();  // s + 1's copies: the last in flight
      __syncwarp();
      float pt[4][4];
      const float* nb = wrows + b_next * S::BS;
      bool as_is_next;
      switch (live8(s + 1)) {
        case 1: as_is_next = slice_scores_checked<DW, PW, kQs, 1>(nb, qf, g, t, pt); break;
        case 2: as_is_next = slice_scores_checked<DW, PW, kQs, 2>(nb, qf, g, t, pt); break;
        case 3: as_is_next = slice_scores_checked<DW, PW, kQs, 3>(nb, qf, g, t, pt); break;
        default: as_is_next = slice_scores_checked<DW, PW, kQs>(nb, qf, g, t, pt); break;
      }
      __syncthreads();  // every softmax of s has read red
      store_partials(red, wid, g, t, pt);
      __syncthreads();  // s + 1's partials, s's p fragments and factors visible
      as_is_prev = as_is_cur;
      as_is_cur = as_is_next;
      const int b_free = b_prev;
      b_prev = b_cur;
      b_cur = b_next;
      b_next = b_free;
    }
  }
  // kTail: the last segment's value product over its k-steps holding rows only (the rows' bits path; the converted one
  // forms all four).
  auto values_merge_live = [&](int sp, int b, auto nj_c) {
    const float* pb = reinterpret_cast<const float*>(slots(sp & 1)(lane));
    float acc[KN][4];
    auto p_frag = [&](int j, uint32_t (&ph)[4], uint32_t (&pl)[4]) {
      const uint4 h = *reinterpret_cast<const uint4*>(pb + 2 * j * S::WS), l = *reinterpret_cast<const uint4*>(pb + (2 * j + 1) * S::WS);
      ph[0] = h.x, ph[1] = h.y, ph[2] = h.z, ph[3] = h.w;
      pl[0] = l.x, pl[1] = l.y, pl[2] = l.z, pl[3] = l.w;
    };
    slice_values<DW, PW, decltype(nj_c)::value>(wrows + b * S::BS, p_frag, g, t, true, acc);
    const float2 fg = fab[(sp & 1) * kHeads + g], fg8 = fab[(sp & 1) * kHeads + g + 8];
    const float fa[2] = {fg.x, fg8.x}, fb[2] = {fg.y, fg8.y};
#pragma unroll
    for (int u = 0; u < KN; ++u)
#pragma unroll
      for (int c = 0; c < 4; ++c) run[u][c] = merged(run[u][c], fa[c >> 1], acc[u][c], fb[c >> 1]);
  };
  if (ns > 0) {  // the last interval: values of ns − 2, softmax of ns − 1, then its values
    const int s = ns - 1;
    if (s > 0) values_merge(s - 1, b_prev, as_is_prev);
    softmax(s);
    __syncthreads();
    if constexpr (kTail) {
      const int nj = as_is_cur ? live8(s) : 4;
      if (nj == 1) values_merge_live(s, b_cur, std::integral_constant<int, 1>{});
      else if (nj == 2) values_merge_live(s, b_cur, std::integral_constant<int, 2>{});
      else if (nj == 3) values_merge_live(s, b_cur, std::integral_constant<int, 3>{});
      else values_merge(s, b_cur, as_is_cur);
    } else {
      values_merge(s, b_cur, as_is_cur);
    }
  }
  cp_async_wait<0>();  // the last (zero-fill) copies land before the block ends

  store_heads<D, KN>(a, i, mls, M, L, sh, hs, ok, g, t, d0, run);
}

template <int DW, bool k8, bool kQs = false, bool kTail = false, bool kSpread = false>
__global__ void __launch_bounds__(kThreads, 1) attention_mma_chunk14_kernel(AttentionArgs a) {
  const int groups = (a.heads + kHeads - 1) / kHeads;
  chunk14_block<DW, k8, kQs, kTail, kSpread>(a, blockIdx.x / groups, static_cast<int>(blockIdx.x % groups) * kHeads);
}

// Query i's raw-window rows alone (no compressed rows: total = n_raw), from the position — what a PDL split block may
// stage before its wait when comp_idx selects the rest.
__device__ inline QueryRows query_rows_raw(const AttentionArgs& a, int64_t i) {
  QueryRows r;
  const int64_t t = a.pos[i];
  r.first = t - a.window + 1 > 0 ? t - a.window + 1 : 0;
  r.n_raw = t - r.first + 1;
  r.total = r.n_raw;
  r.raw = a.raw_at ? a.raw_at[i] : a.raw;
  r.comp = nullptr;
  r.idx = nullptr;
  return r;
}

// Split shape (decode, small batches): block = (segment k, 16 heads, query i), steps 1–3 as in the chunk
// kernel on the one staged segment; stores segment k's state of each head as attention_mma.cu's split
// kernel does (acc: each warp its dims; (m, l): the first step-2 thread of the head), for its merges.
// Dynamic shared memory: rows [kAttnSeg][D + kPad], red, pfr. The sliced merge after it may be its programmatic
// dependent (attention_mma_kernels 31): its blocks start now, form their RoPE angles, then wait for this grid's end.
// kPdl (attention_mma_kernels 37; attention_pdl.h): launched itself as a programmatic dependent of the kernel before it
// (the q norm + RoPE, which lets it start after its own wait, or the indexer's select), so q, comp_idx and the selected
// count are read only after griddepcontrol.wait. Before it a block reads the step's inputs (the position; the
// compressed-row count where no comp_idx selects — the forward pass's per-ratio counts, uploaded before the step's
// kernels) and copies into shared memory the segment's rows those inputs place — all of them without selection, else a
// segment inside the raw window — rows the KV path and the compressors wrote: kernels that finished before the one that
// lets this grid start (the q norm's own wait; with concurrent branches the lanes' join before it). The rest of its
// copies are issued after the wait. The same values as a plain launch, so the same bits.
template <int DW, bool kPdl = false>
__global__ void __launch_bounds__(kThreads, 1) attention_mma_split3_kernel(AttentionArgs a, SegStates st) {
  constexpr int D = DW * kWarps, P = D + kPad, KK = DW / 8, KN = KK, NW = kWarps;
  grid_launch_dependents();
  extern __shared__ float4 smem4[];
  float* rows = reinterpret_cast<float*>(smem4);
  float* red = rows + kAttnSeg * P;
  uint4* pfr = reinterpret_cast<uint4*>(red + kWarps * kHeads * kRedPitch);
  const int64_t seg = blockIdx.x, i = blockIdx.z;
  const int h0 = static_cast<int>(blockIdx.y) * kHeads;
  const int lane = threadIdx.x % kWarp, wid = threadIdx.x / kWarp;
  const int g = lane >> 2, t = lane & 3;
  const int hs[2] = {h0 + g, h0 + g + 8};
  const bool ok[2] = {hs[0] < a.heads, hs[1] < a.heads};
  bool staged = false;  // kPdl: the segment's copies issued before the wait (block-uniform)
  if constexpr (kPdl) {
    if (!a.comp_idx) {  // every candidate row placed by the step's inputs: the whole segment now
      const QueryRows early = query_rows(a, i);
      if (seg >= segments_of(early)) return;  // the whole block leaves together (nothing read after)
      stage_rows_pre<D, NW>(rows, early, a.raw_cap, early.first % a.raw_cap, seg, wid, lane, -1);
      staged = true;
    } else {  // selected rows wait for comp_idx: only a segment inside the raw window now
      const QueryRows early = query_rows_raw(a, i);
      if ((seg + 1) * kAttnSeg <= early.n_raw) {
        stage_rows_pre<D, NW>(rows, early, a.raw_cap, early.first % a.raw_cap, seg, wid, lane, -1);
        staged = true;
      }
    }
    if (staged) cp_async_commit();
  }
  if constexpr (kPdl) grid_dependency_wait();  // q, comp_idx, the selected count from here on
  const QueryRows qr = query_rows(a, i);
  if (seg >= segments_of(qr)) return;  // the whole block leaves together
  const int d0 = wid * DW;
  QFrag<KK> qf;  // the index and q loads issued together, then the copies
  {
    const int32_t pre = staged ? -1 : prefetch_idx<NW>(qr, seg, wid, lane);
    float x[KK][4];
    load_q_floats(x, a, i, hs, ok, d0, t);
    if (!staged) {
      stage_rows_pre<D, NW>(rows, qr, a.raw_cap, qr.first % a.raw_cap, seg, wid, lane, pre);
      cp_async_commit();
    }
    split_q(qf, x);
  }
  cp_async_wait<0>();
  __syncthreads();
  const int64_t left = qr.total - seg * kAttnSeg;
  const int cnt = left < kAttnSeg ? static_cast<int>(left) : kAttnSeg;
  const int sh = threadIdx.x >> 4;
  float acc[KN][4];
  segment_state<DW>(rows, cnt, qf, a.scale, red, pfr, [&](float m, float l) {
    if ((threadIdx.x & 15) == 0 && h0 + sh < a.heads) {
      const int64_t slot = (i * a.heads + h0 + sh) * st.n_stored + seg;
      st.ml[2 * slot] = m;
      st.ml[2 * slot + 1] = l;
    }
  }, acc);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (!ok[r]) continue;
    const int64_t slot = (i * a.heads + hs[r]) * st.n_stored + seg;
#pragma unroll
    for (int u = 0; u < KN; ++u)
      *reinterpret_cast<float2*>(st.acc + slot * D + d0 + 8 * u + 2 * t) = make_float2(acc[u][2 * r], acc[u][2 * r + 1]);
  }
}

template <int DW>
constexpr size_t split3_smem() {
  return (static_cast<size_t>(kAttnSeg) * (DW * kWarps + kPad) + static_cast<size_t>(kWarps) * kHeads * kRedPitch) *
             sizeof(float) +
         4 * 2 * kWarp * sizeof(uint4);
}

// Raises a kernel's dynamic shared-memory limit once (bit of smem_ready); false on an error (recorded).
template <typename K>
bool smem_once(CudaBackend& be, uint32_t& smem_ready, uint32_t bit, K kernel, size_t bytes) {
  if (smem_ready & bit) return true;
  if (!be.check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)),
                "attention mma (softmax once) smem"))
    return false;
  smem_ready |= bit;
  return true;
}

// Bits of smem_ready: 20 + log2(DW / 8) for the chunk kernels with the 32-bit loop (16 + … since session 13: 26's), 24 + …
// for the split ones, 28 + … for kernel 14, 12 + … for 18, 8 + … for 25 (attention_mma.cu's launchers take bits 0–7).
template <int DW>
constexpr uint32_t dw_bit() { return DW == 8 ? 0 : DW == 16 ? 1 : DW == 32 ? 2 : 3; }

template <int DW>
void launch_split(CudaBackend& be, const AttentionArgs& a, int64_t split_segs, const SegStates& st, uint32_t& smem_ready,
                  bool pdl) {
  const dim3 grid(static_cast<unsigned>(split_segs), static_cast<unsigned>((a.heads + kHeads - 1) / kHeads),
                  static_cast<unsigned>(a.n));
  if (pdl) {  // every bit of smem_ready is taken: its limit is raised at each launch, as kernel 9's (a replayed graph makes no call)
    auto kernel = attention_mma_split3_kernel<DW, true>;
    uint32_t every = 0;
    if (!smem_once(be, every, 1u, kernel, split3_smem<DW>())) return;
    be.check(launch_dependent(true, grid, dim3(kThreads), split3_smem<DW>(), be.stream(), kernel, a, st),
             "attention mma (split, softmax once, programmatic)");
    return;
  }
  if (!smem_once(be, smem_ready, 1u << (24 + dw_bit<DW>()), attention_mma_split3_kernel<DW>, split3_smem<DW>())) return;
  attention_mma_split3_kernel<DW><<<grid, kThreads, split3_smem<DW>(), be.stream()>>>(a, st);
  be.launched("attention mma (split, softmax once)");
}

// Bits of smem_ready for the kQs kernels: 8 + log2(DW / 8) for 25's, 16 + … for 26's (kernel 9's chunk loop on int64
// counters, a measured baseline, raises its limit at every launch instead).
template <int DW, bool k32, bool kQs = false>
void launch_chunk(CudaBackend& be, const AttentionArgs& a, uint32_t& smem_ready) {
  uint32_t every = 0;  // kernel 9: no bit kept
  if (!smem_once(be, k32 ? smem_ready : every, 1u << ((kQs ? 8 : 20) + dw_bit<DW>()), attention_mma_chunk3_kernel<DW, k32, kQs>,
                 Smem<DW>::bytes))
    return;
  const int64_t blocks = a.n * ((a.heads + kHeads - 1) / kHeads);
  attention_mma_chunk3_kernel<DW, k32, kQs><<<static_cast<unsigned>(blocks), kThreads, Smem<DW>::bytes, be.stream()>>>(a);
  be.launched("attention mma (chunk, softmax once)");
}

// kQs: bits 16 + … stand for the kernels of 26, 32 (kTail) and 34 (kTail, spread) — the same shared memory; every bit of
// smem_ready is taken —: the first launch of any raises the three limits.
template <int DW, bool k8, bool kQs = false, bool kTail = false>
void launch_chunk14(CudaBackend& be, const AttentionArgs& a, uint32_t& smem_ready, bool spread = false) {
  constexpr size_t bytes = PipeSmem<DW>::bytes;
  const uint32_t bit = 1u << ((kQs ? 16 : k8 ? 12 : 28) + dw_bit<DW>());
  if constexpr (kQs) {
    if (!(smem_ready & bit)) {
      uint32_t none = 0;
      const bool set = smem_once(be, none, bit, attention_mma_chunk14_kernel<DW, true, true, false>, bytes) &&
                       smem_once(be, none = 0, bit, attention_mma_chunk14_kernel<DW, true, true, true>, bytes) &&
                       smem_once(be, none = 0, bit, attention_mma_chunk14_kernel<DW, true, true, true, true>, bytes);
      if (!set) return;
      smem_ready |= bit;
    }
  } else if (!smem_once(be, smem_ready, bit, attention_mma_chunk14_kernel<DW, k8, kQs, kTail>, bytes)) {
    return;
  }
  const int64_t blocks = a.n * ((a.heads + kHeads - 1) / kHeads);
  if constexpr (kTail) {
    if (spread) {
      attention_mma_chunk14_kernel<DW, k8, kQs, kTail, true><<<static_cast<unsigned>(blocks), kThreads, bytes, be.stream()>>>(a);
      be.launched("attention mma (chunk, pipelined warps)");
      return;
    }
  }
  attention_mma_chunk14_kernel<DW, k8, kQs, kTail><<<static_cast<unsigned>(blocks), kThreads, bytes, be.stream()>>>(a);
  be.launched("attention mma (chunk, pipelined warps)");
}

// head_dim / 8 → DW.
template <typename F>
void by_dw(const AttentionArgs& a, F f) {
  switch (a.head_dim / kWarps) {
    case 8: f(std::integral_constant<int, 8>{}); break;
    case 16: f(std::integral_constant<int, 16>{}); break;
    case 32: f(std::integral_constant<int, 32>{}); break;
    default: f(std::integral_constant<int, 64>{}); break;
  }
}

}  // namespace

void launch_split_softmax_once(CudaBackend& be, const AttentionArgs& a, int64_t split_segs, const SegStates& st,
                               uint32_t& smem_ready, bool pdl) {
  by_dw(a, [&](auto dw) { launch_split<decltype(dw)::value>(be, a, split_segs, st, smem_ready, pdl); });
}

void launch_chunk_pipelined(CudaBackend& be, const AttentionArgs& a, uint32_t& smem_ready, bool lanes8, bool qs, bool tail,
                            bool spread) {
  by_dw(a, [&](auto dw) {
    if (lanes8 && qs && tail) launch_chunk14<decltype(dw)::value, true, true, true>(be, a, smem_ready, spread);
    else if (lanes8 && qs) launch_chunk14<decltype(dw)::value, true, true>(be, a, smem_ready);
    else if (lanes8) launch_chunk14<decltype(dw)::value, true>(be, a, smem_ready);
    else launch_chunk14<decltype(dw)::value, false>(be, a, smem_ready);
  });
}

void launch_chunk_softmax_once(CudaBackend& be, const AttentionArgs& a, uint32_t& smem_ready, bool loop32, bool qs) {
  by_dw(a, [&](auto dw) {
    if (loop32 && qs) launch_chunk<decltype(dw)::value, true, true>(be, a, smem_ready);
    else if (loop32) launch_chunk<decltype(dw)::value, true>(be, a, smem_ready);
    else launch_chunk<decltype(dw)::value, false>(be, a, smem_ready);
  });
}

}  // namespace ds4::backend::cuda::attn_mma
