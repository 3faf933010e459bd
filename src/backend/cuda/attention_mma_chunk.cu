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

// Step 2 for head sh of the block, rows r0 = 8·snt + 2·stt and r0 + 1 (thread = 16·sh + 4·snt + stt; the
// 16 threads of a head are one half-warp): the scores from the slices' partials, the softmax — the
// segment's (m, l) of head sh, in every thread of the head — and p's parts into pfr.
__device__ inline void segment_softmax(const float* red, uint32_t* pfr_words, int cnt, float scale, int sh, int snt,
                                       int stt, float& m, float& l) {
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
  uint32_t* hw = pfr_words + (2 * snt * kWarp + fl) * 4;
  uint32_t* lw = pfr_words + ((2 * snt + 1) * kWarp + fl) * 4;
  hw[e] = hi0;
  hw[e + 2] = hi1;
  lw[e] = lo0;
  lw[e + 2] = lo1;
}

// Steps 1–3 of one staged segment (rows: [kAttnSeg][D + kPad], cnt ≥ 1 of them real) for the block's 16
// heads: acc = this warp's slice of the value product; step 2's threads call on_state(m, l) with their
// head's segment state (every thread of a head, after p's fragments are stored; whatever it writes to
// shared memory is visible once this returns). Three barriers inside; the caller's next writes to red,
// pfr or the rows must follow a barrier after this.
template <int DW, typename OnState>
__device__ inline void segment_state(const float* rows, int cnt, const QFrag<DW / 8>& qf, float scale, float* red,
                                     uint4* pfr, OnState on_state, float (&acc)[DW / 8][4]) {
  const int lane = threadIdx.x % kWarp, wid = threadIdx.x / kWarp, g = lane >> 2, t = lane & 3;
  const int sh = threadIdx.x >> 4, snt = (threadIdx.x >> 2) & 3, stt = threadIdx.x & 3;
  const float* base = rows + wid * DW;
  float pt[4][4];
  uint32_t bits = 0;
  slice_scores<DW, true>(base, qf, g, t, pt, bits);
  float sum = 0.0f;  // finite iff every partial is (an inf or NaN read makes its column's partials so)
#pragma unroll
  for (int nt = 0; nt < 4; ++nt)
#pragma unroll
    for (int c = 0; c < 4; ++c) sum = sum + pt[nt][c];
  const bool as_is = __all_sync(0xffffffffu, (bits & 0x1fffu) == 0 && isfinite(sum)) != 0;
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
// k32 (attention_mma_kernels = 10): the segment loop on 32-bit counters and a rotating buffer index
// (stage_rows32, prefetch_idx32): the same copies and steps.
template <int DW, bool k32>
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
  {
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
      segment_state<DW>(bufs + bc * (kAttnSeg * P), left < kAttnSeg ? left : kAttnSeg, qf, a.scale, red, pfr, on_state, acc);
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

template <int DW, bool k32>
__global__ void __launch_bounds__(kThreads, 1) attention_mma_chunk3_kernel(AttentionArgs a) {
  const int groups = (a.heads + kHeads - 1) / kHeads;
  chunk3_block<DW, k32>(a, blockIdx.x / groups, static_cast<int>(blockIdx.x % groups) * kHeads);
}

// Split shape (decode, small batches): block = (segment k, 16 heads, query i), steps 1–3 as in the chunk
// kernel on the one staged segment; stores segment k's state of each head as attention_mma.cu's split
// kernel does (acc: each warp its dims; (m, l): the first step-2 thread of the head), for its merges.
// Dynamic shared memory: rows [kAttnSeg][D + kPad], red, pfr.
template <int DW>
__global__ void __launch_bounds__(kThreads, 1) attention_mma_split3_kernel(AttentionArgs a, SegStates st) {
  constexpr int D = DW * kWarps, P = D + kPad, KK = DW / 8, KN = KK, NW = kWarps;
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
  const QueryRows qr = query_rows(a, i);
  if (seg >= segments_of(qr)) return;  // the whole block leaves together
  const int d0 = wid * DW;
  QFrag<KK> qf;  // the index and q loads issued together, then the copies
  {
    const int32_t pre = prefetch_idx<NW>(qr, seg, wid, lane);
    float x[KK][4];
    load_q_floats(x, a, i, hs, ok, d0, t);
    stage_rows_pre<D, NW>(rows, qr, a.raw_cap, qr.first % a.raw_cap, seg, wid, lane, pre);
    cp_async_commit();
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

// Bits of smem_ready: 16 + log2(DW / 8) for the chunk kernels (+ 4 with the 32-bit loop), 24 + … for the split ones.
template <int DW>
constexpr uint32_t dw_bit() { return DW == 8 ? 0 : DW == 16 ? 1 : DW == 32 ? 2 : 3; }

template <int DW>
void launch_split(CudaBackend& be, const AttentionArgs& a, int64_t split_segs, const SegStates& st, uint32_t& smem_ready) {
  if (!smem_once(be, smem_ready, 1u << (24 + dw_bit<DW>()), attention_mma_split3_kernel<DW>, split3_smem<DW>())) return;
  const dim3 grid(static_cast<unsigned>(split_segs), static_cast<unsigned>((a.heads + kHeads - 1) / kHeads),
                  static_cast<unsigned>(a.n));
  attention_mma_split3_kernel<DW><<<grid, kThreads, split3_smem<DW>(), be.stream()>>>(a, st);
  be.launched("attention mma (split, softmax once)");
}

template <int DW, bool k32>
void launch_chunk(CudaBackend& be, const AttentionArgs& a, uint32_t& smem_ready) {
  if (!smem_once(be, smem_ready, 1u << (16 + dw_bit<DW>() + (k32 ? 4 : 0)), attention_mma_chunk3_kernel<DW, k32>,
                 Smem<DW>::bytes))
    return;
  const int64_t blocks = a.n * ((a.heads + kHeads - 1) / kHeads);
  attention_mma_chunk3_kernel<DW, k32><<<static_cast<unsigned>(blocks), kThreads, Smem<DW>::bytes, be.stream()>>>(a);
  be.launched("attention mma (chunk, softmax once)");
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
                               uint32_t& smem_ready) {
  by_dw(a, [&](auto dw) { launch_split<decltype(dw)::value>(be, a, split_segs, st, smem_ready); });
}

void launch_chunk_softmax_once(CudaBackend& be, const AttentionArgs& a, uint32_t& smem_ready, bool loop32) {
  by_dw(a, [&](auto dw) {
    if (loop32) launch_chunk<decltype(dw)::value, true>(be, a, smem_ready);
    else launch_chunk<decltype(dw)::value, false>(be, a, smem_ready);
  });
}

}  // namespace ds4::backend::cuda::attn_mma
