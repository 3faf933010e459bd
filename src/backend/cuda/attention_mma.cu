// attention_mma.cu — attention with per-head sinks (MODEL.md §7.6) on TF32 tensor cores, in the MMA order
// of README.md "Attention summation order (tensor cores)", for every batch size and launch shape.
// V4 attention is MQA: one KV row serves every query head, so a segment of a query is a
// [16 heads × D] · [D × 32 rows] score product and a [16 heads × 32 rows] · [32 rows × D] value product —
// tensor-core shaped even for one decode token. A block owns one query and 16 heads (the MMA's M) and
// 8 warps; warp w owns the dims [w·D/8, (w+1)·D/8) of both products (its q fragments stay in registers).
// q, p and rows are f32; each is split x = hi + lo into TF32 parts (hi = x rounded to 11 significant bits,
// lo = the rest rounded likewise, ~22 bits), and a row's lo part is multiplied only where it is non-zero
// (rows rounded through f16 or FP8 by the KV cache are exact in TF32, so their lo part is zero).
// Launch shapes, the same bits (every (query, head, segment) runs the same MMAs on the same operands):
//  * chunk (prefill, batches): block = (query, 16 heads) walks the query's 32-row segments, staging the
//    next segment's rows with cp.async while it computes the current one, and merges each segment's state
//    into its running state in registers;
//  * split (few queries): block = (segment, 16 heads, query) stores the segment's state in scratch; the
//    chunk kernel then runs as the merge (reads the stored states, computes any past the host's bound).
// Deliberately not here: the scalar segment order (attention_segments.cu) and the previous kernels
// (ops_attention.cu, attention_decode.cu), kept behind CudaBackendOptions::attention_mma = false.
#include <algorithm>
#include <type_traits>

#include "backend/cuda/attention_merge.cuh"
#include "backend/cuda/attention_mma.cuh"
#include "backend/cuda/attention_pdl.h"
#include "backend/cuda/attention_rows.cuh"
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_impl.h"
#include "backend/cuda/mma_s8.cuh"
#include "backend/cuda/mma_tf32.cuh"
#include "backend/cuda/rows_device.cuh"  // RopeFreqs, rope_cos_sin, rope_apply, rope_rotate
#include "modelspec/memory_plan.h"

namespace ds4::backend::cuda {

namespace {

using namespace attn_mma;

// Kernel 3's chunk loop: on 32-bit counters (as 10) since the session-10 H200 run (−0.7 % per chunk, the same
// bits: PERF.md "Session 10: prefill chunk attention on 16 warps …").
constexpr bool kChunkLoop32Auto = true;

// Kernel 3's chunk shape takes kernel 14 (attention_mma_chunk.cu: each warp's segments pipelined, the same bits)
// where the host's bound of a query's rows reaches this: the session-11 H200 run (PERF.md "Session 11: prefill chunk
// attention …") measured CSA chunks (640 rows, 20 segments a query) −4.4 %, HCA at 32K (400 rows) −2.7 %, HCA at 2K
// (160 rows) +3.4 % — a short query pays the pipeline's fill and drain. 0: kernel 3's own loop everywhere.
// 144 since session 13 (with kChunkQsAuto): the pipelined form with q staged (26) beat the loop form (25) in every shape
// measured — HCA at 2K 160 rows 1,037 / 1,046 µs against 1,069 / 1,080 (two passes), 144 rows (n = 32) 20.3 against 21.0 —
// and every Flash chunk's bound is ≥ 144 (window 128 + HCA's ≥ 16 compressed rows; CSA 640).
constexpr int64_t kChunkPipelinedMinRows = 144;
// …and copies its rows 8 lanes a row (attention_mma_chunk.cu stage_slice, kernel 18) since session 12's H200 runs
// (PERF.md "Session 12: prefill chunk attention …"): the same bits, CSA chunks at 2K 3,656 → 3,553 µs, HCA at 32K
// 2,471 → 2,408 (−2.8 %, −2.5 %; both runs alike). false: kernel 14's copies (16 lanes a row).
constexpr bool kChunkPipelinedLanes8 = true;

// Kernel 3's chunk shape (both its kernels) with q staged through shared memory by coalesced 16-byte copies and the
// exactness decision's checks as independent chains (attention_mma_chunk.cu stage_q_slice, partials_finite: kernels 25,
// 26 — the same bits). false: 10's and 18's q loads and checks. On since session 13's H200 W2 (PERF.md "Session 13: prefill
// chunk attention …"): 2K chunk CSA 3,528 / 3,523 → 3,405 / 3,441 µs (26 vs the default 18), HCA 1,137 / 1,146 → 1,037 /
// 1,046 (26 vs the default 10); 32K CSA −3 %, HCA (400 rows) −4 %; 194 PARITY lines bit for bit.
constexpr bool kChunkQsAuto = true;

// Kernel 3's pipelined chunk form (with kChunkQsAuto and kChunkPipelinedLanes8) forming a query's last segment only over
// its n-tiles and k-steps holding rows, and staging no segment past the last (attention_mma_chunk.cu kTail: kernel 32,
// session 14 — the same bits). false: 26's kernel.
// …and with each interval's row copies issued a row source at a time between the score product's k-steps
// (attention_mma_chunk.cu SpreadCopies: kernel 34 — the same copies, the same bits). false: 32's.
// Both on since session 14's H200 W2 (PERF.md "Session 14: prefill chunk attention …"; two passes, 200 PARITY lines bit for
// bit): CSA chunk at 2K 3,342 / 3,340 → 2,818 / 2,822 µs (26 → 34), HCA at 2K (160 rows) 1,037 / 1,031 → 925 / 924, at
// 32K CSA −16 %, HCA (400 rows) 2,248 → 1,885; 32 alone: −1 % CSA, −4 % HCA.
constexpr bool kChunkTailAuto = true;
constexpr bool kChunkSpreadAuto = true;

// Kernel 3's split shape of one decode query: the sliced merge as a programmatic dependent of the split kernel
// (attention_mma_kernels 31; sm_90, the main lane): its blocks launch while the split runs and form their RoPE angles
// before they wait — the same kernels, the same bits. On since session 12's H200 runs (PERF.md "Session 12: decode
// attention of one token …"): −3.1 µs a layer alone in every Flash shape (CSA 15.5 → 12.4 µs at 2K), test_cuda_model
// with it. false: the plain launch after the split (attention_mma_kernels 10 keeps it too).
constexpr bool kMergePdlAuto = true;

// Host: a query's candidate rows under the host's bound (window + compressed rows bounded by the selection width
// and/or AttentionArgs::max_comp, as attention_split_segments), or −1 when unknown.
int64_t rows_bound(const AttentionArgs& a) {
  int64_t comp = -1;
  if (!a.comp_count) comp = 0;
  if (a.comp_count && a.comp_idx) comp = a.comp_idx_stride;
  if (a.comp_count && a.max_comp > 0) comp = comp < 0 ? a.max_comp : std::min<int64_t>(comp, a.max_comp);
  return comp < 0 ? -1 : std::max<int64_t>(a.window, 0) + comp;
}

constexpr int kMergeBatch = 4;  // stored states loaded ahead of their merges (ILP only; the sliced merge's: kSliceBatch)

// Kernel variants (CudaBackendOptions::attention_mma_kernels), the same bits: V = 0 the previous kernels
// (every warp adding all partial scores, comp_idx loaded at each copy); V = 1 "fast": partial scores added
// once per block, comp_idx a segment ahead, and segments whose staged values are all exact in TF32 (the KV
// cache's rows) multiplied without splitting them (their TF32 part is their own bits, their remainder
// zero: no conversion, no vote).
template <int V>
inline constexpr bool kFastOf = V >= 1;
static_assert(kAttnSeg == 32 && kAttnSeg == modelspec::kCudaAttnSegmentRows,
              "the score tile is 4 n-tiles of 8 rows and the value product 4 k-steps of 8 rows");

// Whether every value this thread copied into the staged segment (its warp's rows w + NW·k, columns
// 4·(lane + 32c) …; its own cp.async copies have landed after cp_async_wait, its zero fills are its own
// stores) is exact in TF32 and finite: low 13 mantissa bits zero, exponent not all ones — then
// tf32_bits(v) is v's bits and v − tf32(v) = 0. The caller ANDs it over the block (__syncthreads_and).
template <int D, int NW>
__device__ inline bool own_rows_exact(const float* buf, int wid, int lane) {
  constexpr int P = D + kPad, C4 = D / 4;
  uint32_t bad = 0;
#pragma unroll
  for (int k = 0; k < kAttnSeg / NW; ++k) {
    const float* row = buf + (wid + NW * k) * P;
    for (int c4 = lane; c4 < C4; c4 += kWarp) {
      const uint4 x = *reinterpret_cast<const uint4*>(row + 4 * c4);
      const uint32_t w[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
      for (int e = 0; e < 4; ++e) bad |= (w[e] & 0x1fffu) | ((w[e] & 0x7f800000u) == 0x7f800000u ? 1u : 0u);
    }
  }
  return bad == 0;
}

// The state (m, l, acc) of heads (g, g + 8) over one staged segment of cnt ≥ 1 rows (rows [kAttnSeg][P],
// padded rows zero), for this warp's dims of acc. Whole block (one or two __syncthreads inside); red: the
// [kWarps][16][32] partial scores.
// 1. Slice w's partial score tile [16 heads × 32 rows] over its dims (slice_scores, attention_mma.cuh).
// 2. Score = ((partial_0 + partial_1) + …) + partial_7, times scale; rows ≥ cnt get −inf.
// 3. m = max of the head's 32 scores; p = expf(s − m); l = Σ p: per lane its 8 values (n-tile order, then
//    column 2t, 2t + 1) from 0, then the quad's xor butterfly (offsets 1, 2).
// 4. acc over this warp's dims (slice_values, p's parts split here from the registers holding p).
// V = 0 (the previous kernels): every warp adds the 8 partials of each of its 16 scores itself (128 shared
// loads per thread); V = 1: the 512 scores are each added once by one thread (the same order of the 8
// partials), written over slice 0's partials and read back.
// exact (V ≥ 1, block-uniform): every staged value of the segment is exact in TF32 (own_rows_exact).
template <int DW, int V>
__device__ inline void segment_mma(const float* rows, int cnt, const QFrag<DW / 8>& qf, float scale, float* red, int wid,
                                   int lane, bool exact, float (&m)[2], float (&l)[2], float (&acc)[DW / 8][4]) {
  const int g = lane >> 2, t = lane & 3;
  const float* base = rows + wid * DW;
  float pt[4][4];
  uint32_t bits = 0;  // unused: exact is known
  if (kFastOf<V> && exact) slice_scores<DW, true>(base, qf, g, t, pt, bits);
  else slice_scores<DW, false>(base, qf, g, t, pt, bits);
#pragma unroll
  for (int u = 0; u < 4; ++u)
#pragma unroll
    for (int c = 0; c < 4; ++c) red[(wid * 16 + u * 4 + c) * kWarp + lane] = pt[u][c];
  __syncthreads();
  float s[4][4];
  if constexpr (!kFastOf<V>) {
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        float v = red[(nt * 4 + c) * kWarp + lane];
#pragma unroll
        for (int w = 1; w < kWarps; ++w) v = v + red[(w * 16 + nt * 4 + c) * kWarp + lane];
        s[nt][c] = 8 * nt + 2 * t + (c & 1) < cnt ? v * scale : -INFINITY;
      }
  } else {
    // Score k = (nt·4 + c)·32 + lane' by thread k and k + 256: read only by this thread before it is
    // overwritten.
#pragma unroll
    for (int k = static_cast<int>(threadIdx.x); k < 16 * kWarp; k += kThreads) {
      float v = red[k];
#pragma unroll
      for (int w = 1; w < kWarps; ++w) v = v + red[w * 16 * kWarp + k];
      const int nt = k / (4 * kWarp), c = (k / kWarp) % 4, tt = k % 4;
      red[k] = 8 * nt + 2 * tt + (c & 1) < cnt ? v * scale : -INFINITY;
    }
    __syncthreads();
#pragma unroll
    for (int nt2 = 0; nt2 < 4; ++nt2)
#pragma unroll
      for (int c2 = 0; c2 < 4; ++c2) s[nt2][c2] = red[(nt2 * 4 + c2) * kWarp + lane];
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {  // r = 0: head g (columns c = 0, 1); r = 1: head g + 8 (c = 2, 3)
    float mx = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) mx = fmaxf(mx, fmaxf(s[nt][2 * r], s[nt][2 * r + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    float sum = 0.0f;
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      s[nt][2 * r] = expf(s[nt][2 * r] - mx);  // s now holds p
      s[nt][2 * r + 1] = expf(s[nt][2 * r + 1] - mx);
      sum = sum + s[nt][2 * r];
      sum = sum + s[nt][2 * r + 1];
    }
    sum = sum + __shfl_xor_sync(0xffffffffu, sum, 1);
    sum = sum + __shfl_xor_sync(0xffffffffu, sum, 2);
    m[r] = mx;
    l[r] = sum;
  }
  slice_values<DW>(base, [&](int j, uint32_t (&ph)[4], uint32_t (&pl)[4]) {
    split_tf32(s[j][0], ph[0], pl[0]);  // (g, t) = c0, (g + 8, t) = c2, (g, t + 4) = c1, (g + 8, t + 4) = c3
    split_tf32(s[j][2], ph[1], pl[1]);
    split_tf32(s[j][1], ph[2], pl[2]);
    split_tf32(s[j][3], ph[3], pl[3]);
  }, g, t, kFastOf<V> && exact, acc);
}

// Block = (query i, 16 heads), 8 warps. kStored = false (chunk shape): computes every segment from rows
// staged in shared memory (two buffers: the next segment's copies fly while the current one is
// computed) and merges each into the running state in registers. kStored = true (the merge after the
// split kernel): segments 0 … n_stored−1 are read from scratch, any past the host's bound computed here.
// Then the sink, and out. Dynamic shared memory: [2][kAttnSeg][D + kPad] rows, then [kWarps][16][32].
// The body of the chunk kernel for block (query i, heads h0 … h0 + 15); also the sliced merge's path for
// a query whose segments outrun the stored ones (attention_mma_merge_kernel).
template <int DW, bool kStored, int V>
__device__ inline void chunk_block(const AttentionArgs& a, const SegStates& st, int64_t i, int h0) {
  constexpr int D = DW * kWarps, P = D + kPad, KK = DW / 8, KN = KK, NW = kWarps;
  extern __shared__ float4 smem4[];
  float* bufs = reinterpret_cast<float*>(smem4);
  float* red = bufs + 2 * kAttnSeg * P;
  const int lane = threadIdx.x % kWarp, wid = threadIdx.x / kWarp;
  const int g = lane >> 2, t = lane & 3;
  const int hs[2] = {h0 + g, h0 + g + 8};
  const bool ok[2] = {hs[0] < a.heads, hs[1] < a.heads};
  const QueryRows qr = query_rows(a, i);
  const int64_t n_seg = segments_of(qr);
  const int d0 = wid * DW;  // this warp's slice: q fragments, acc, run, out

  float M[2] = {-INFINITY, -INFINITY}, L[2] = {0.0f, 0.0f}, run[KN][4];
#pragma unroll
  for (int nt = 0; nt < KN; ++nt)
#pragma unroll
    for (int c = 0; c < 4; ++c) run[nt][c] = 0.0f;

  // Stored states, in segment order; kMergeBatch states loaded before their merges (latency: a decode
  // step's merge reads ~20 states per block).
  const int64_t n_read = !kStored ? 0 : n_seg < st.n_stored ? n_seg : st.n_stored;
  for (int64_t k0 = 0; k0 < n_read; k0 += kMergeBatch) {
    float ms[kMergeBatch][2], ls[kMergeBatch][2];
    float2 v[kMergeBatch][KN][2];
#pragma unroll
    for (int b = 0; b < kMergeBatch; ++b) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const bool load = ok[r] && k0 + b < n_read;
        const int64_t slot = (i * a.heads + hs[r]) * st.n_stored + k0 + b;
        ms[b][r] = load ? st.ml[2 * slot] : -INFINITY;
        ls[b][r] = load ? st.ml[2 * slot + 1] : 0.0f;
#pragma unroll
        for (int nt = 0; nt < KN; ++nt)
          v[b][nt][r] = load ? *reinterpret_cast<const float2*>(st.acc + slot * D + d0 + 8 * nt + 2 * t) : make_float2(0.0f, 0.0f);
      }
    }
#pragma unroll
    for (int b = 0; b < kMergeBatch; ++b) {
      if (k0 + b >= n_read) break;
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float fa, fb;
        merge_step(M[r], L[r], ms[b][r], ls[b][r], fa, fb);
#pragma unroll
        for (int nt = 0; nt < KN; ++nt) {
          run[nt][2 * r] = merged(run[nt][2 * r], fa, v[b][nt][r].x, fb);
          run[nt][2 * r + 1] = merged(run[nt][2 * r + 1], fa, v[b][nt][r].y, fb);
        }
      }
    }
  }

  if (n_read < n_seg) {  // block-uniform
    QFrag<KK> qf;
    load_q(qf, a, i, hs, ok, d0, t);
    const int64_t first_mod = qr.first % a.raw_cap;
    int32_t pre = 0;  // fast kernels: the next segment's comp_idx entries (prefetch_idx)
    if constexpr (kFastOf<V>) {
      stage_rows_pre<D, NW>(bufs, qr, a.raw_cap, first_mod, n_read, wid, lane, prefetch_idx<NW>(qr, n_read, wid, lane));
      pre = prefetch_idx<NW>(qr, n_read + 1, wid, lane);
    } else {
      stage_rows_pre<D, NW, false>(bufs, qr, a.raw_cap, first_mod, n_read, wid, lane, 0);
    }
    cp_async_commit();
    for (int64_t seg = n_read; seg < n_seg; ++seg) {
      float* cur = bufs + ((seg - n_read) & 1) * kAttnSeg * P;
      if (seg + 1 < n_seg) {
        float* nxt = bufs + ((seg + 1 - n_read) & 1) * kAttnSeg * P;
        if constexpr (kFastOf<V>) {
          stage_rows_pre<D, NW>(nxt, qr, a.raw_cap, first_mod, seg + 1, wid, lane, pre);
          pre = prefetch_idx<NW>(qr, seg + 2, wid, lane);  // consumed a whole segment later
        } else {
          stage_rows_pre<D, NW, false>(nxt, qr, a.raw_cap, first_mod, seg + 1, wid, lane, 0);
        }
      }
      cp_async_commit();
      cp_async_wait<1>();  // this thread's copies of segment seg have landed
      bool exact = false;  // everyone's have (the barrier), and (fast kernels) all are exact in TF32
      if constexpr (kFastOf<V>) {
        exact = __syncthreads_and(own_rows_exact<D, NW>(cur, wid, lane)) != 0;
      } else {
        __syncthreads();
      }
      const int64_t left = qr.total - seg * kAttnSeg;
      const int cnt = left < kAttnSeg ? static_cast<int>(left) : kAttnSeg;
      float m[2], l[2], acc[KN][4];
      segment_mma<DW, V>(cur, cnt, qf, a.scale, red, wid, lane, exact, m, l, acc);
      float fa[2], fb[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) merge_step(M[r], L[r], m[r], l[r], fa[r], fb[r]);
#pragma unroll
      for (int nt = 0; nt < KN; ++nt)
#pragma unroll
        for (int c = 0; c < 4; ++c) run[nt][c] = merged(run[nt][c], fa[c >> 1], acc[nt][c], fb[c >> 1]);
      __syncthreads();  // cur and red are free for the next segment's copies and scores
    }
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (!ok[r]) continue;
    float f, denom;
    sink_step(a.sinks[hs[r]], M[r], L[r], f, denom);
    float* o = a.out + (i * a.heads + hs[r]) * D + d0;
#pragma unroll
    for (int nt = 0; nt < KN; ++nt)
      *reinterpret_cast<float2*>(o + 8 * nt + 2 * t) = make_float2(run[nt][2 * r] * f / denom, run[nt][2 * r + 1] * f / denom);
  }
}

template <int DW, bool kStored, int V>
__global__ void __launch_bounds__(kThreads, 1) attention_mma_chunk_kernel(AttentionArgs a, SegStates st) {
  const int groups = (a.heads + kHeads - 1) / kHeads;
  chunk_block<DW, kStored, V>(a, st, blockIdx.x / groups, static_cast<int>(blockIdx.x % groups) * kHeads);
}

// The merge after the split kernel, spread over the dims: block = (query i, 16 heads, dim slice y of
// `slices`); a thread owns 4 consecutive dims of one head and runs, for them, the chunk kernel's merge of
// the stored states (merge_step / merged in segment order from (−inf, 0, 0)) and the sink — the same
// expressions on the same values, so the same bits, with the reads (a CSA decode query: 20 states ×
// 64 heads × 2 KB = 2.6 MB) spread over n·groups·slices blocks instead of n·groups. (m, l) are
// recomputed per thread (cheap: the head's scalars). A query with more segments than were stored (a host
// bound below the real counts) is left to slice 0, which runs the chunk kernel's body for its 16 heads.
// out_rot > 0 (AttentionArgs::out_rot with CudaBackendOptions::attn_out_rope; even, ≤ 2·kMaxRopePairs): the output's inverse RoPE
// (§7.7) at the query's position, each thread rotating the pairs of its own 4 dims before the store —
// rope_kernel's rope_rotate on the same floats, so its bits — angles rf (the layer's frequencies) formed
// before the state loads; the chunk-body fallback rotates its heads' tails in place after a barrier.
// pdl (attention_mma_kernels 31): launched as a programmatic dependent of the split kernel — the blocks start while it
// runs, form their first column's angles, then wait for its end (griddepcontrol.wait) before any state read, and
// let out_a start only after that wait (not during the split's row copies); else a plain launch (the wait returns at
// once) that lets out_a start at its start. pdl = 2 (37: the split itself a programmatic dependent of the kernel before
// it, which may still be running — the indexer's select writes the selected count): with comp_idx the query's segment
// count is read after the wait too (without, the count is the step's input, read before it as 31's).
template <int DW, int V>
__global__ void __launch_bounds__(kThreads, 1) attention_mma_merge_kernel(AttentionArgs a, SegStates st, int slices,
                                                                          int out_rot, RopeFreqs rf, int pdl) {
  constexpr int D = DW * kWarps, D4 = D / 4;
  const int groups = (a.heads + kHeads - 1) / kHeads;
  const int64_t i = blockIdx.x / groups;
  const int h0 = static_cast<int>(blockIdx.x % groups) * kHeads;
  // Folded, the next kernel reads this one's output (out_a: a programmatic dependent that waits before its
  // activation reads), so it may start and load its weights now (pdl: after the wait below, not during the split's
  // row copies). Without the fold the rope launch follows.
  if (out_rot > 0 && !pdl) grid_launch_dependents();
  // The step's inputs, written before the split kernel ran (pdl < 2): block-uniform; a query with more segments than
  // stored: slice 0 runs the chunk body.
  // pdl = 2 with comp_idx: the selected count is the output of the kernel before the split (the indexer).
  const bool counts_now = pdl < 2 || a.comp_idx == nullptr;
  int64_t n_seg = counts_now ? segments_of(query_rows(a, i)) : 0;
  bool sliced = n_seg <= st.n_stored;
  const int per = D4 / slices;  // float4 columns of a head in this slice
  // Column e of this slice: head h0 + e / per (< a.heads), dims 4·c4 … of it.
  auto column = [&](int e, MergeCol& c) {
    c.h = h0 + e / per;
    c.c4 = static_cast<int64_t>(blockIdx.y) * per + e % per;
    return e < kHeads * per && c.h < a.heads;
  };
  MergeCol c0;
  bool has0 = sliced && column(threadIdx.x, c0);  // !counts_now: every column's angles (sliced is known after the wait)
  if (has0) merge_angles<D>(c0, a, i, out_rot, rf);
  grid_dependency_wait();  // the split kernel's states (pdl); a plain launch returns at once
  if (out_rot > 0 && pdl) grid_launch_dependents();
  if (!counts_now) {
    n_seg = segments_of(query_rows(a, i));
    sliced = n_seg <= st.n_stored;
    has0 = has0 && sliced;
  }
  if (!sliced) {
    if (blockIdx.y == 0) {
      chunk_block<DW, true, V>(a, st, i, h0);
      if (out_rot > 0) {
        __syncthreads();  // the block's output stores are visible to all its threads
        rope_heads_in_place<D, kHeads, kThreads>(a, i, h0, out_rot, rf);
      }
    }
    return;
  }
  if (has0) merge_column<D>(a, st, i, c0, n_seg);
  for (int e = threadIdx.x + kThreads; e < kHeads * per; e += kThreads) {
    MergeCol c;
    if (!column(e, c)) break;  // e grows with h
    merge_angles<D>(c, a, i, out_rot, rf);
    merge_column<D>(a, st, i, c, n_seg);
  }
}

// Split kernel: block = (segment k, 16 heads, query i), 8 warps; stores segment k's state of each head
// (segments past the query's rows have nothing to store). Dynamic shared memory: [kAttnSeg][D + kPad]
// rows, then [kWarps][16][32].
template <int DW, int V>
__global__ void __launch_bounds__(kThreads, 1) attention_mma_split_kernel(AttentionArgs a, SegStates st) {
  constexpr int D = DW * kWarps, P = D + kPad, KK = DW / 8, KN = KK, NW = kWarps;
  extern __shared__ float4 smem4[];
  float* rows = reinterpret_cast<float*>(smem4);
  float* red = rows + kAttnSeg * P;
  const int64_t seg = blockIdx.x;
  const int h0 = static_cast<int>(blockIdx.y) * kHeads;
  const int64_t i = blockIdx.z;
  const int lane = threadIdx.x % kWarp, wid = threadIdx.x / kWarp;
  const int g = lane >> 2, t = lane & 3;
  const int hs[2] = {h0 + g, h0 + g + 8};
  const bool ok[2] = {hs[0] < a.heads, hs[1] < a.heads};
  const QueryRows qr = query_rows(a, i);
  if (seg >= segments_of(qr)) return;  // the whole block leaves together
  const int d0 = wid * DW;
  QFrag<KK> qf;  // loaded while the copies fly
  if constexpr (kFastOf<V>) {  // the index and q loads issued together, then the copies
    const int32_t pre = prefetch_idx<NW>(qr, seg, wid, lane);
    float x[KK][4];
    load_q_floats(x, a, i, hs, ok, d0, t);
    stage_rows_pre<D, NW>(rows, qr, a.raw_cap, qr.first % a.raw_cap, seg, wid, lane, pre);
    cp_async_commit();
    split_q(qf, x);
  } else {
    stage_rows_pre<D, NW, false>(rows, qr, a.raw_cap, qr.first % a.raw_cap, seg, wid, lane, 0);
    cp_async_commit();
    load_q(qf, a, i, hs, ok, d0, t);
  }
  cp_async_wait<0>();
  bool exact = false;
  if constexpr (kFastOf<V>) {
    exact = __syncthreads_and(own_rows_exact<D, NW>(rows, wid, lane)) != 0;
  } else {
    __syncthreads();
  }
  const int64_t left = qr.total - seg * kAttnSeg;
  const int cnt = left < kAttnSeg ? static_cast<int>(left) : kAttnSeg;
  float m[2], l[2], acc[KN][4];
  segment_mma<DW, V>(rows, cnt, qf, a.scale, red, wid, lane, exact, m, l, acc);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (!ok[r]) continue;
    const int64_t slot = (i * a.heads + hs[r]) * st.n_stored + seg;
#pragma unroll
    for (int nt = 0; nt < KN; ++nt)
      *reinterpret_cast<float2*>(st.acc + slot * D + d0 + 8 * nt + 2 * t) = make_float2(acc[nt][2 * r], acc[nt][2 * r + 1]);
    if (wid == 0 && t == 0) {
      st.ml[2 * slot] = m[r];
      st.ml[2 * slot + 1] = l[r];
    }
  }
}

// Chunk kernel (and the merges, whose fallback runs its body): two row buffers and red.
template <int DW>
size_t chunk_smem() {
  return (2 * static_cast<size_t>(kAttnSeg) * (DW * kWarps + kPad) + kWarps * 16 * kWarp) * sizeof(float);
}
template <int DW>
size_t split_smem() { return (static_cast<size_t>(kAttnSeg) * (DW * kWarps + kPad) + kWarps * 16 * kWarp) * sizeof(float); }

// How one call's split shape launches (V = 1; attention_mma_kernels): split_once — the split kernel of
// attention_mma_chunk.cu; merge_pdl — the sliced merge as its programmatic dependent (31); split_pdl — the split kernel
// itself a programmatic dependent of the kernel before it, its rows staged before its wait (37). The same bits every way.
struct SplitForm {
  bool split_once = false, merge_pdl = false, split_pdl = false;
};

// smem_ready: bit per (DW, V) variant, set once the kernels' dynamic shared-memory limits are raised.
// sliced_merge: CudaBackendOptions::attention_merge_sliced.
// out_rot, rf: the output's inverse RoPE (out_rot > 0: only the sliced merge rotates; *rope_done tells the caller
// whether it ran).
template <int DW, int V>
void launch_mma(CudaBackend& be, const AttentionArgs& a, int64_t split_segs, SegStates st, uint32_t& smem_ready,
                bool sliced_merge, int out_rot, const RopeFreqs& rf, bool* rope_done, SplitForm form = {}) {
  constexpr int threads = kThreads;
  const uint32_t bit = 1u << ((DW == 8 ? 0 : DW == 16 ? 1 : DW == 32 ? 2 : 3) + 4 * V);  // bits 0–7
  if (!(smem_ready & bit)) {
    const bool set =
        be.check(cudaFuncSetAttribute(attention_mma_chunk_kernel<DW, false, V>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(chunk_smem<DW>())), "attention mma chunk smem") &&
        be.check(cudaFuncSetAttribute(attention_mma_chunk_kernel<DW, true, V>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(chunk_smem<DW>())), "attention mma merge smem") &&
        be.check(cudaFuncSetAttribute(attention_mma_split_kernel<DW, V>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(split_smem<DW>())), "attention mma split smem") &&
        be.check(cudaFuncSetAttribute(attention_mma_merge_kernel<DW, V>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(chunk_smem<DW>())), "attention mma sliced merge smem");
    if (!set) return;
    smem_ready |= bit;
  }
  const unsigned groups = static_cast<unsigned>((a.heads + kHeads - 1) / kHeads);
  cudaStream_t s = be.stream();
  if (split_segs > 0) {
    const dim3 grid(static_cast<unsigned>(split_segs), groups, static_cast<unsigned>(a.n));
    if (form.split_once) {  // attention_mma_kernels = 3: the split kernel of attention_mma_chunk.cu, same states
      attn_mma::launch_split_softmax_once(be, a, split_segs, st, smem_ready, form.split_pdl);
      if (be.failed()) return;
    } else {
      attention_mma_split_kernel<DW, V><<<grid, threads, split_smem<DW>(), s>>>(a, st);
      if (!be.launched("attention mma (split)")) return;
    }
    if (sliced_merge) {
      // Dim slices (1 … 8; the bits do not depend on them) until the merge has ~256 blocks: a decode
      // step's 4 blocks of the chunk-kernel merge read 0.6 MB each (CSA) on 4 SMs.
      const int64_t blocks = a.n * groups;
      int slices = 8;
      while (slices > 1 && blocks * slices > 256) slices /= 2;
      const dim3 mgrid(static_cast<unsigned>(blocks), static_cast<unsigned>(slices));
      const int pdl = !form.merge_pdl ? 0 : form.split_pdl ? 2 : 1;
      *rope_done = be.check(launch_dependent(form.merge_pdl, mgrid, dim3(threads), chunk_smem<DW>(), s,
                                             attention_mma_merge_kernel<DW, V>, a, st, slices, out_rot, rf, pdl),
                            "attention mma (sliced merge)") &&
                   out_rot > 0;
      return;
    }
    attention_mma_chunk_kernel<DW, true, V><<<static_cast<unsigned>(a.n * groups), threads, chunk_smem<DW>(), s>>>(a, st);
    be.launched("attention mma (merge)");
    return;
  }
  attention_mma_chunk_kernel<DW, false, V><<<static_cast<unsigned>(a.n * groups), threads, chunk_smem<DW>(), s>>>(a, st);
  be.launched("attention mma (chunk)");
}

}  // namespace

bool CudaBackend::attention_mma(const AttentionArgs& a, bool* out_rope_done) {
  if (out_rope_done) *out_rope_done = false;
  const int dw = a.head_dim / kWarps;
  if (a.head_dim % (8 * kWarps) != 0 || (dw != 8 && dw != 16 && dw != 32 && dw != 64)) return false;
  if ((a.heads + kHeads - 1) / kHeads > 65535) return false;
  const int64_t split_segs = attention_split_segments(a, attn_split_max_blocks_, modelspec::kCudaAttnSplitScratchMax);
  SegStates st;
  if (!split_states(*this, attn_seg_, a, split_segs, st)) return true;
  // The kernel variant (CudaBackendOptions::attention_mma_kernels, 0, 1, 3, 9, 10, 14, 18, 25, 26, 31, 32, 34 or 37). 3: the chunk shape with the
  // softmax once per block (attention_mma_chunk.cu), also its split kernel for one query; the merges and
  // larger split calls the fast ones (1).
  // 10: 3 with its chunk loop on 32-bit counters and a rotating buffer index (attention_mma_chunk.cu); 9: 3
  // with the previous int64 loop. 3 takes the 32-bit loop (kChunkLoop32Auto).
  const int k = attn_mma_kernels_;
  // 14: the chunk shape with each warp's segments pipelined (attention_mma_chunk.cu; its ring index needs
  // raw_cap ≥ window, else 10's kernel); 3 takes it from kChunkPipelinedMinRows rows.
  // 18: 14 with its row copies 8 lanes a row (attention_mma_chunk.cu stage_slice).
  // 31: 3 with one decode query's sliced merge a programmatic dependent of its split kernel (sm_90); 3 takes it with
  // kMergePdlAuto.
  const bool k3 = k == 3 || k == 31 || k == 37;
  // 25: 10 with q staged through shared memory and the exactness checks as independent chains (attention_mma_chunk.cu
  // stage_q_slice, partials_finite); 26: 18 with them. 3 takes them with kChunkQsAuto.
  // 32: 26 with a query's last segment formed only over its n-tiles and k-steps holding rows (attention_mma_chunk.cu
  // kTail); 3 takes it with kChunkTailAuto.
  const bool qs = k == 25 || k == 26 || k == 32 || k == 34 || (k3 && kChunkQsAuto);
  // 34: 32 with each interval's row copies issued a row source at a time between the score k-steps
  // (attention_mma_chunk.cu SpreadCopies); 3 takes it with kChunkSpreadAuto.
  const bool tail = k == 32 || k == 34 || (k3 && kChunkQsAuto && kChunkPipelinedLanes8 && kChunkTailAuto);
  const bool spread = k == 34 || (k3 && tail && kChunkSpreadAuto);
  const bool piped = k == 14 || k == 18 || k == 26 || k == 32 || k == 34 ||
                     (k3 && kChunkPipelinedMinRows > 0 && rows_bound(a) >= kChunkPipelinedMinRows);
  const bool once = k3 || k == 9 || k == 10 || k == 25 || piped;
  if (once && split_segs == 0) {
    if (piped && a.raw_cap >= a.window)
      attn_mma::launch_chunk_pipelined(*this, a, attn_mma_smem_,
                                       k == 18 || k == 26 || k == 32 || k == 34 || (k3 && kChunkPipelinedLanes8), qs, tail,
                                       spread);
    else attn_mma::launch_chunk_softmax_once(*this, a, attn_mma_smem_, k != 9 && (!k3 || kChunkLoop32Auto), qs);
    return true;
  }
  // Its split kernel for one query only: faster there on the H200 (CSA 15.1 → 14.0 µs), slower at 8 queries
  // (40.1 → 43.7 µs: 147 registers, one block per multiprocessor where the 8-warp split kernel fits two).
  const bool split_once = once && a.n == 1;
  uint32_t& ready = attn_mma_smem_;
  const bool sm = attn_merge_sliced_;
  // The output's inverse RoPE where the sliced merge can take it (else it is left to the caller: rot = 0).
  const bool fold = attn_out_rope_ && a.out_rot > 0 && a.out_rot % 2 == 0 && a.out_rot / 2 <= kMaxRopePairs &&
                    a.out_rot <= a.head_dim && a.pos != nullptr && a.out_freq != nullptr;
  const int rot = fold ? a.out_rot : 0;
  const RopeFreqs rf = fold ? rope_freqs(a.out_freq, a.out_rot) : RopeFreqs{};
  // 37 (attention_pdl.h): 31 with the split kernel itself a programmatic dependent of the kernel before it (the q norm
  // + RoPE lets it start after its own wait; after the indexer's select it starts as that ends), the rows the step's
  // inputs place staged before its wait. 3 takes it with kSplitPdlAuto.
  SplitForm form;
  form.split_once = split_once;
  const bool pdl_ok = split_once && sm90() && !on_side_;
  form.split_pdl = pdl_ok && split_pdl(k);
  form.merge_pdl = pdl_ok && (k == 31 || (k == 3 && kMergePdlAuto) || form.split_pdl);
  bool done = false;
  auto go = [&](auto dw_c) {
    constexpr int DW = decltype(dw_c)::value;
    if (attn_mma_kernels_ == 0) launch_mma<DW, 0>(*this, a, split_segs, st, ready, sm, rot, rf, &done);
    else launch_mma<DW, 1>(*this, a, split_segs, st, ready, sm, rot, rf, &done, form);
  };
  switch (dw) {
    case 8: go(std::integral_constant<int, 8>{}); break;
    case 16: go(std::integral_constant<int, 16>{}); break;
    case 32: go(std::integral_constant<int, 32>{}); break;
    default: go(std::integral_constant<int, 64>{}); break;
  }
  if (out_rope_done) *out_rope_done = done;
  return true;
}

}  // namespace ds4::backend::cuda
