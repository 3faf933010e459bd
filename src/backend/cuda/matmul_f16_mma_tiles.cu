// matmul_f16_mma_tiles.cu — prefill F16 matmuls (≥ 64 vectors, ≥ 256 rows) in README.md's F16 MMA order
// with the operands staged through shared memory: a block of WM × WN warps owns (32·WM rows) × (32·WN
// vectors); each 32-value block of K (weights BM × 64 bytes, activations BN × 128 bytes) is copied once by
// cp.async into a 4-stage ring and every warp reads its fragments from there, so a weight value is read
// from L2 once per block instead of once per warp and an activation once per WM warps (the direct kernels
// of matmul_f16_mma.cu read both once per warp). Each warp computes its 32 × 32 tile exactly as
// f16_mma_tile's one-warp path does — f16_mma_block per 32-value block in order, each quarter's chain from
// 0, the segment sum ((q0 + q1) + q2) + q3, y += segment sum every 16 blocks — so the bits are the same as
// every other launch shape.
// Rows and vectors past the ends are read from the last valid row / vector (never stored: MMA rows and
// columns do not interact), so no zero-filling copies are needed.
// The default (session 13, f16_mma_xsplit_kernel): the weights by cp.async as above, the activations loaded into
// registers one stage ahead by the block's threads and split into TF32 hi / lo once per block (not once per warp
// row), 64 × 16 warp tiles — the same MMAs in the same order.
// Deliberately not here: K not a multiple of 128 or unaligned operands (the direct kernel), decode shapes.
#include <algorithm>

#include "backend/cuda/common.cuh"
#include "backend/cuda/f16_mma.cuh"
#include "backend/cuda/matmul_f16_mma_tiles.h"
#include "backend/cuda/mma_s8.cuh"

namespace ds4::backend::cuda {

namespace {

constexpr int kWPitch = 64;   // bytes per weight row per 32-value block: 32 F16 values; 2 rows = one 128-byte bank sweep
constexpr int kXPitch = 144;  // bytes per vector per 32-value block: 32 floats + 16 (conflict-free LDS.128 of 8 lanes)

// A launch shape (none changes the order): blocks of WM × WN warps, warp tiles of TM m16 × TN n8 tiles (TM = 2:
// 32 × 32, the chain, segment sum and y in registers, 3 × 32 floats; TM = 1: 16 × 32, twice the warps for
// a matrix — the 256- and 512-row matrices leave 4 warps per SM with 32-row tiles), KB 32-value blocks per
// ring stage (one block barrier per stage; a stage = KB sub-tiles, each in the one-block layout below, so
// the fragment loads stay conflict-free), STAGES ring slots.
// SPLIT: the stage's activations split x = hi + lo (split_tf32) once by the whole block into shared memory
// (hi over x, lo beside it; a second block barrier per stage) instead of by each of the WM warps that read
// them — the same hi and lo words, so the same MMAs.
// MINB: blocks per multiprocessor the registers must allow (__launch_bounds__; > 1: ≤ 65,536 / (MINB·THREADS)
// registers a thread, so that more warps hide the shared-memory and MMA latencies — the session 10 ncu put
// these tiles at 6–12 % warps active).
template <int WM_, int WN_, int TM_, int TN_, int KB_, int STAGES_, bool SPLIT_ = false, int MINB_ = 1>
struct TileCfg {
  static constexpr int WM = WM_, WN = WN_, TM = TM_, TN = TN_, KB = KB_, STAGES = STAGES_, MINB = MINB_;
  static constexpr bool SPLIT = SPLIT_;
  static constexpr int BM = 16 * TM * WM, BN = 8 * TN * WN, THREADS = WM * WN * kWarp;
  // One 32-value block's weights + activations (+ the activations' lo parts with SPLIT).
  static constexpr int SUB = BM * kWPitch + (SPLIT ? 2 : 1) * BN * kXPitch;
  static constexpr int STAGE = KB * SUB, SMEM = STAGES * STAGE;
};

// f16_mma_block with the activations already split (xh, xl: the hi and lo words of x, as split_tf32
// gives them): the same MMAs in the same order.
template <int TM, int TN>
__device__ inline void f16_mma_block_split(float (&c)[TM][TN][4], const uint4 (&w)[TM][2], const uint32_t (&xh)[TN][8],
                                           const uint32_t (&xl)[TN][8]) {
#pragma unroll
  for (int q = 0; q < 4; ++q) {
#pragma unroll
    for (int i = 0; i < TM; ++i) {
      const uint32_t w0 = word_of(w[i][0], q), w1 = word_of(w[i][1], q);
      const uint32_t a[4] = {f16_tf32(w0 & 0xffffu), f16_tf32(w1 & 0xffffu), f16_tf32(w0 >> 16), f16_tf32(w1 >> 16)};
#pragma unroll
      for (int j = 0; j < TN; ++j) {
        mma_tf32(c[i][j], a, xh[j][2 * q], xh[j][2 * q + 1]);
        mma_tf32(c[i][j], a, xl[j][2 * q], xl[j][2 * q + 1]);
      }
    }
  }
}

__device__ inline void unpack4(const uint4& v, uint32_t* o) { o[0] = v.x, o[1] = v.y, o[2] = v.z, o[3] = v.w; }

// One 32-value block b of K into a sub-tile at sw: BM weight rows of 64 bytes, then (sx = sw + BM·kWPitch) BN
// activation vectors of 128 bytes, by the block's kThreads threads; rows / vectors past the ends repeat the last one.
template <int BM, int BN, int kThreads>
__device__ inline void copy_block(uint8_t* sw, const GemvJob& p, const uint8_t* wt, int64_t b, int64_t m0, int64_t n0) {
  uint8_t* sx = sw + BM * kWPitch;
  for (int idx = threadIdx.x; idx < 4 * BM + 8 * BN; idx += kThreads) {
    if (idx < 4 * BM) {
      const int r = idx / 4, c = idx % 4;
      const int64_t row = std::min<int64_t>(m0 + r, p.w.rows - 1);
      cp_async16(sw + r * kWPitch + 16 * c, wt + static_cast<uint64_t>(row) * p.w.row_bytes + 2 * (b * kF16MmaBlk + 8 * c));
    } else {
      const int k = idx - 4 * BM, v = k / 8, c = k % 8;
      const int64_t vec = std::min<int64_t>(n0 + v, p.n_vec - 1);
      cp_async16(sx + v * kXPitch + 16 * c, p.x + vec * p.x_stride + b * kF16MmaBlk + 4 * c);
    }
  }
}

// A warp's fragments of one staged block: weights of its TM m16 tiles (rows wm·16·TM + 16·i + g and + 8), the
// activations of its TN n8 tiles (vectors wn·8·TN + 8·j + g, 8 values from 8·t) as f16_mma_block takes them.
template <int TM>
__device__ inline void load_w_frags(uint4 (&w)[TM][2], const uint8_t* sw, int wm, int g, int t) {
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h)
      w[i][h] = *reinterpret_cast<const uint4*>(sw + (wm * 16 * TM + 16 * i + g + 8 * h) * kWPitch + 16 * t);
}

template <int TN>
__device__ inline void load_x_frags(float (&x)[TN][8], const uint8_t* sx, int wn, int g, int t) {
#pragma unroll
  for (int j = 0; j < TN; ++j) {
    const float* xv = reinterpret_cast<const float*>(sx + (wn * 8 * TN + 8 * j + g) * kXPitch + 32 * t);
    const float4 a = *reinterpret_cast<const float4*>(xv), bb = *reinterpret_cast<const float4*>(xv + 4);
    x[j][0] = a.x, x[j][1] = a.y, x[j][2] = a.z, x[j][3] = a.w;
    x[j][4] = bb.x, x[j][5] = bb.y, x[j][6] = bb.z, x[j][7] = bb.w;
  }
}

// The warp tile's outputs y (m16n8 fragment layout) into p.y, rows and vectors past the ends skipped.
template <int TM, int TN>
__device__ inline void store_tile(const GemvJob& p, const float (&y)[TM][TN][4], int64_t m0, int64_t n0, int wm, int wn,
                                  int g, int t) {
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int64_t o = m0 + wm * 16 * TM + f16_mma_row(i, g, r), v = n0 + wn * 8 * TN + f16_mma_vec(j, t, r);
        if (o < p.w.rows && v < p.n_vec) p.y[v * p.y_stride + o] = y[i][j][r];
      }
}

// A warp tile's accumulators from zero: the quarter's MMA chain c, the segment sum sg, the outputs y.
template <int TM, int TN>
__device__ inline void zero_acc(float (&c)[TM][TN][4], float (&sg)[TM][TN][4], float (&y)[TM][TN][4]) {
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r) c[i][j][r] = sg[i][j][r] = y[i][j][r] = 0.0f;
}

// After 32-value block b of K: at the end of a quarter (4 blocks) its chain c goes into the segment sum
// ((q0 + q1) + q2) + q3 and restarts at 0; at the end of a segment (16 blocks) y += the segment sum (segment order).
template <int TM, int TN>
__device__ inline void block_end(float (&c)[TM][TN][4], float (&sg)[TM][TN][4], float (&y)[TM][TN][4], int64_t b) {
  if (b % 4 != 3) return;
  const bool first = b % 16 == 3, last = b % 16 == 15;
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        sg[i][j][r] = first ? c[i][j][r] : sg[i][j][r] + c[i][j][r];
        c[i][j][r] = 0.0f;
        if (last) y[i][j][r] += sg[i][j][r];
      }
}

template <class C>
__global__ void __launch_bounds__(C::THREADS, C::MINB) f16_mma_smem_kernel(GemvJob p) {
  constexpr int TM = C::TM, TN = C::TN, BM = C::BM, BN = C::BN, kThreads = C::THREADS, KB = C::KB, S = C::STAGES;
  extern __shared__ __align__(16) uint8_t smem[];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, g = lane >> 2, t = lane & 3;
  const int wm = warp / C::WN, wn = warp % C::WN;
  const int64_t m0 = static_cast<int64_t>(blockIdx.x) * BM, n0 = static_cast<int64_t>(blockIdx.y) * BN;
  const int64_t nblk = p.w.cols / kF16MmaBlk, nst = nblk / KB;  // (cols: whole segments, so whole stages)
  const auto* wt = static_cast<const uint8_t*>(p.w.data);
  auto copy_stage = [&](int64_t st, int slot) {
#pragma unroll
    for (int kb = 0; kb < KB; ++kb)
      copy_block<BM, BN, kThreads>(smem + slot * C::STAGE + kb * C::SUB, p, wt, st * KB + kb, m0, n0);
  };
#pragma unroll
  for (int st = 0; st < S - 1; ++st) {
    if (st < nst) copy_stage(st, st);
    cp_async_commit();
  }
  float c[TM][TN][4], sg[TM][TN][4], y[TM][TN][4];
  zero_acc<TM, TN>(c, sg, y);
  for (int64_t st = 0; st < nst; ++st) {
    cp_async_wait<S - 2>();
    __syncthreads();  // stage st visible to all; every warp done with the slot the next copy overwrites
    if constexpr (C::SPLIT) {  // the stage's x → hi (in place) and lo (beside it), 4 values a step
      for (int idx = threadIdx.x; idx < KB * BN * 8; idx += kThreads) {
        const int kb = idx / (BN * 8), v = (idx / 8) % BN, c4 = idx % 8;
        uint8_t* px = smem + (st % S) * C::STAGE + kb * C::SUB + BM * kWPitch + v * kXPitch + 16 * c4;
        const float4 xv = *reinterpret_cast<const float4*>(px);
        uint4 h, l;
        split_tf32(xv.x, h.x, l.x);
        split_tf32(xv.y, h.y, l.y);
        split_tf32(xv.z, h.z, l.z);
        split_tf32(xv.w, h.w, l.w);
        *reinterpret_cast<uint4*>(px) = h;
        *reinterpret_cast<uint4*>(px + BN * kXPitch) = l;
      }
      __syncthreads();  // the split stage visible to all
    }
    if (st + S - 1 < nst) copy_stage(st + S - 1, static_cast<int>((st + S - 1) % S));
    cp_async_commit();
#pragma unroll
    for (int kb = 0; kb < KB; ++kb) {
      const int64_t b = st * KB + kb;
      const uint8_t* sw = smem + (st % S) * C::STAGE + kb * C::SUB;
      const uint8_t* sx = sw + BM * kWPitch;
      uint4 w[TM][2];
      load_w_frags<TM>(w, sw, wm, g, t);
      if constexpr (C::SPLIT) {
        uint32_t xh[TN][8], xl[TN][8];
#pragma unroll
        for (int j = 0; j < TN; ++j) {
          const uint8_t* xv = sx + (wn * 8 * TN + 8 * j + g) * kXPitch + 32 * t;
          unpack4(*reinterpret_cast<const uint4*>(xv), xh[j]);
          unpack4(*reinterpret_cast<const uint4*>(xv + 16), xh[j] + 4);
          unpack4(*reinterpret_cast<const uint4*>(xv + BN * kXPitch), xl[j]);
          unpack4(*reinterpret_cast<const uint4*>(xv + BN * kXPitch + 16), xl[j] + 4);
        }
        f16_mma_block_split<TM, TN>(c, w, xh, xl);
      } else {
        float x[TN][8];
        load_x_frags<TN>(x, sx, wn, g, t);
        f16_mma_block<TM, TN>(c, w, x);
      }
      block_end<TM, TN>(c, sg, y, b);
    }
  }
  store_tile<TM, TN>(p, y, m0, n0, wm, wn, g, t);
}

// Quarter pairs: twice the warps for the same output tiles without smaller warp tiles. Warps [0, NW) (group A,
// NW = WM·WN) run quarters 0 and 1 of every segment, warps [NW, 2·NW) (group B) quarters 2 and 3 of the same
// segment for the same warp tile, each chain from 0 in block order as f16_mma_block does everywhere; B hands
// its q2 and q3 to A through shared memory and A adds seg = ((q0 + q1) + q2) + q3, y += seg — the same
// additions in the same order as f16_mma_smem_kernel. A ring stage holds two 32-value blocks of A's quarter
// and the same two of B's (stage 4s + r of segment s: quarters r / 2 and r / 2 + 2, blocks 2·(r % 2) and
// 2·(r % 2) + 1), so both groups read one stage between the same two block barriers. B's q2, q3 of segment s
// are stored at the end of stage 4s + 3 and read by A after the next barrier, before B can write them again
// (three barriers later). Only C's WM, WN, TM, TN, STAGES and MINB are used (a stage is 4 block layouts).
template <class C>
__global__ void __launch_bounds__(2 * C::THREADS, C::MINB) f16_mma_pair_kernel(GemvJob p) {
  constexpr int TM = C::TM, TN = C::TN, BM = C::BM, BN = C::BN, NW = C::WM * C::WN, kThreads = 2 * C::THREADS;
  static_assert(C::KB == 4 && !C::SPLIT, "a quarter-pair stage holds 4 blocks of the one-block layout");
  constexpr int S = C::STAGES, kSub = C::SUB, kStage = C::STAGE, kTile = TM * TN * 4 * kWarp;
  extern __shared__ __align__(16) uint8_t smem[];
  float* xch = reinterpret_cast<float*>(smem + S * kStage);  // [NW][2][kTile]: B's q2, q3 (lane-major)
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, g = lane >> 2, t = lane & 3;
  const int grp = warp / NW, wq = warp % NW, wm = wq / C::WN, wn = wq % C::WN;
  const int64_t m0 = static_cast<int64_t>(blockIdx.x) * BM, n0 = static_cast<int64_t>(blockIdx.y) * BN;
  const int64_t nst = 4 * (p.w.cols / kF16MmaSeg);  // (cols: whole segments)
  const auto* wt = static_cast<const uint8_t*>(p.w.data);
  auto copy_stage = [&](int64_t st, int slot) {
    const int64_t seg = st / 4;
    const int r = static_cast<int>(st % 4), qa = r / 2, bb0 = 2 * (r % 2);
#pragma unroll
    for (int kb = 0; kb < 4; ++kb) {
      const int64_t b = seg * 16 + (kb < 2 ? qa : qa + 2) * 4 + bb0 + (kb & 1);  // 32-value block of K
      copy_block<BM, BN, kThreads>(smem + slot * kStage + kb * kSub, p, wt, b, m0, n0);
    }
  };
#pragma unroll
  for (int st = 0; st < S - 1; ++st) {
    if (st < nst) copy_stage(st, st);
    cp_async_commit();
  }
  float c[TM][TN][4], sg[TM][TN][4], y[TM][TN][4];  // B: sg holds q2
  zero_acc<TM, TN>(c, sg, y);
  float* mine = xch + static_cast<int64_t>(wq) * 2 * kTile;
  // A: the segment before, y += ((q0 + q1) + q2) + q3 (B's q2, q3 stored before the last barrier).
  auto finish_segment = [&] {
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j)
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const int e = ((i * TN + j) * 4 + r) * kWarp + lane;
          y[i][j][r] += (sg[i][j][r] + mine[e]) + mine[kTile + e];  // ((q0 + q1) + q2) + q3
        }
  };
  for (int64_t st = 0; st < nst; ++st) {
    cp_async_wait<S - 2>();
    __syncthreads();  // stage st visible to all; every warp done with the slot the next copy overwrites
    if (grp == 0 && st % 4 == 0 && st > 0) finish_segment();
    if (st + S - 1 < nst) copy_stage(st + S - 1, static_cast<int>((st + S - 1) % S));
    cp_async_commit();
#pragma unroll
    for (int kb = 0; kb < 2; ++kb) {
      const uint8_t* sw = smem + (st % S) * kStage + (2 * grp + kb) * kSub;
      const uint8_t* sx = sw + BM * kWPitch;
      uint4 w[TM][2];
      load_w_frags<TM>(w, sw, wm, g, t);
      float x[TN][8];
      load_x_frags<TN>(x, sx, wn, g, t);
      f16_mma_block<TM, TN>(c, w, x);
    }
    const int r = static_cast<int>(st % 4);
    if (r % 2 == 1) {  // the end of a quarter (A: q0 or q1; B: q2 or q3); the chain restarts at 0
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j)
#pragma unroll
          for (int rr = 0; rr < 4; ++rr) {
            const int e = ((i * TN + j) * 4 + rr) * kWarp + lane;
            if (r == 1)
              sg[i][j][rr] = c[i][j][rr];  // A: q0; B: q2
            else if (grp == 0)
              sg[i][j][rr] = sg[i][j][rr] + c[i][j][rr];  // q0 + q1
            else
              mine[e] = sg[i][j][rr], mine[kTile + e] = c[i][j][rr];  // q2, q3 for A
            c[i][j][rr] = 0.0f;
          }
    }
  }
  __syncthreads();  // B's last q2, q3
  if (grp != 0) return;
  if (nst > 0) finish_segment();
  store_tile<TM, TN>(p, y, m0, n0, wm, wn, g, t);
}

// Activations split by the copying threads (shapes 13 … 15): the ring's weights arrive by cp.async as in
// f16_mma_smem_kernel, but each stage's activations are loaded into registers one stage ahead (while the
// warps run the stage before), split x = hi + lo (split_tf32: the same words f16_mma_block computes) once per
// block — not once per warp row — and stored as hi / lo words beside the stage's weights, so a warp's inner
// loop is fragment loads and MMAs (f16_mma_block_split: the same MMAs in the same order, the same bits).
// Slot (st + 1) % S's activations are written during stage st: that slot was last read in stage st + 1 − S
// ≤ st − 1, before the barrier that opens stage st, and the barrier that opens stage st + 1 publishes them.
// A slot: KB weight sub-tiles (BM × kWPitch each), then KB activation sub-tiles (BN × kXsPitch: vector v's
// 32 hi words, then its 32 lo words, 16 bytes of padding — conflict-free LDS.128 / STS.128 of 8 lanes).
constexpr int kXsPitch = 272;

template <class C>
struct XsplitCfg {
  static constexpr int WSUB = C::BM * kWPitch, XSUB = C::BN * kXsPitch;
  static constexpr int SLOT = C::KB * (WSUB + XSUB), SMEM = C::STAGES * SLOT;
  static constexpr int XUNITS = C::KB * C::BN * 8;  // float4s of activations per stage
  static constexpr int XPER = XUNITS / C::THREADS;  // per thread
  static_assert(XUNITS % C::THREADS == 0 && C::STAGES >= 2 && !C::SPLIT, "whole float4s per thread; a 2+ stage ring");
};

template <class C>
__global__ void __launch_bounds__(C::THREADS, C::MINB) f16_mma_xsplit_kernel(GemvJob p) {
  using X = XsplitCfg<C>;
  constexpr int TM = C::TM, TN = C::TN, BM = C::BM, BN = C::BN, kThreads = C::THREADS, KB = C::KB, S = C::STAGES;
  extern __shared__ __align__(16) uint8_t smem[];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, g = lane >> 2, t = lane & 3;
  const int wm = warp / C::WN, wn = warp % C::WN;
  const int64_t m0 = static_cast<int64_t>(blockIdx.x) * BM, n0 = static_cast<int64_t>(blockIdx.y) * BN;
  const int64_t nst = p.w.cols / (kF16MmaBlk * KB);  // (cols: whole segments, so whole stages)
  const auto* wt = static_cast<const uint8_t*>(p.w.data);
  auto copy_w = [&](int64_t st, int slot) {
    for (int idx = threadIdx.x; idx < KB * BM * 4; idx += kThreads) {
      const int kb = idx / (4 * BM), r = (idx / 4) % BM, c = idx % 4;
      const int64_t row = std::min<int64_t>(m0 + r, p.w.rows - 1);
      cp_async16(smem + slot * X::SLOT + kb * X::WSUB + r * kWPitch + 16 * c,
                 wt + static_cast<uint64_t>(row) * p.w.row_bytes + 2 * ((st * KB + kb) * kF16MmaBlk + 8 * c));
    }
  };
  // Unit idx of a stage: vector idx / (8·KB), block (idx / 8) % KB, float4 idx % 8 (a vector's KB blocks are
  // contiguous in x: 8·KB consecutive threads read 128·KB consecutive bytes).
  float4 xr[X::XPER];
  auto load_x = [&](int64_t st) {
#pragma unroll
    for (int u = 0; u < X::XPER; ++u) {
      const int idx = threadIdx.x + u * kThreads, v = idx / (8 * KB), kb = (idx / 8) % KB, c4 = idx % 8;
      const int64_t vec = std::min<int64_t>(n0 + v, p.n_vec - 1);
      xr[u] = *reinterpret_cast<const float4*>(p.x + vec * p.x_stride + (st * KB + kb) * kF16MmaBlk + 4 * c4);
    }
  };
  auto store_x = [&](int slot) {
#pragma unroll
    for (int u = 0; u < X::XPER; ++u) {
      const int idx = threadIdx.x + u * kThreads, v = idx / (8 * KB), kb = (idx / 8) % KB, c4 = idx % 8;
      uint8_t* px = smem + slot * X::SLOT + KB * X::WSUB + kb * X::XSUB + v * kXsPitch + 16 * c4;
      uint4 h, l;
      split_tf32(xr[u].x, h.x, l.x);
      split_tf32(xr[u].y, h.y, l.y);
      split_tf32(xr[u].z, h.z, l.z);
      split_tf32(xr[u].w, h.w, l.w);
      *reinterpret_cast<uint4*>(px) = h;
      *reinterpret_cast<uint4*>(px + 128) = l;
    }
  };
  if (nst > 0) {
    load_x(0);
    store_x(0);
  }
#pragma unroll
  for (int st = 0; st < S - 1; ++st) {
    if (st < nst) copy_w(st, st);
    cp_async_commit();
  }
  float c[TM][TN][4], sg[TM][TN][4], y[TM][TN][4];
  zero_acc<TM, TN>(c, sg, y);
  for (int64_t st = 0; st < nst; ++st) {
    cp_async_wait<S - 2>();
    __syncthreads();  // stage st's weights and activations visible to all; every warp done with stage st − 1's slot
    if (st + S - 1 < nst) copy_w(st + S - 1, static_cast<int>((st + S - 1) % S));
    cp_async_commit();
    const bool next = st + 1 < nst;
    if (next) load_x(st + 1);  // in flight during the stage's MMAs
    const uint8_t* slot = smem + (st % S) * X::SLOT;
#pragma unroll
    for (int kb = 0; kb < KB; ++kb) {
      const int64_t b = st * KB + kb;
      uint4 w[TM][2];
      load_w_frags<TM>(w, slot + kb * X::WSUB, wm, g, t);
      uint32_t xh[TN][8], xl[TN][8];
#pragma unroll
      for (int j = 0; j < TN; ++j) {
        const uint8_t* xv = slot + KB * X::WSUB + kb * X::XSUB + (wn * 8 * TN + 8 * j + g) * kXsPitch + 32 * t;
        unpack4(*reinterpret_cast<const uint4*>(xv), xh[j]);
        unpack4(*reinterpret_cast<const uint4*>(xv + 16), xh[j] + 4);
        unpack4(*reinterpret_cast<const uint4*>(xv + 128), xl[j]);
        unpack4(*reinterpret_cast<const uint4*>(xv + 144), xl[j] + 4);
      }
      f16_mma_block_split<TM, TN>(c, w, xh, xl);
      block_end<TM, TN>(c, sg, y, b);
    }
    if (next) store_x(static_cast<int>((st + 1) % S));
  }
  store_tile<TM, TN>(p, y, m0, n0, wm, wn, g, t);
}

template <class C>
cudaError_t launch_xsplit(const GemvJob& p, cudaStream_t s) {
  auto k = f16_mma_xsplit_kernel<C>;
  cudaError_t e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, XsplitCfg<C>::SMEM);
  if (e == cudaSuccess) e = cudaFuncSetAttribute(k, cudaFuncAttributePreferredSharedMemoryCarveout, 100);
  if (e != cudaSuccess) return e;
  const dim3 grid(static_cast<unsigned>((p.w.rows + C::BM - 1) / C::BM), static_cast<unsigned>((p.n_vec + C::BN - 1) / C::BN));
  if ((p.n_vec + C::BN - 1) / C::BN > 65535) return cudaErrorInvalidConfiguration;
  k<<<grid, C::THREADS, XsplitCfg<C>::SMEM, s>>>(p);
  return cudaGetLastError();
}

template <class C>
cudaError_t launch_pair(const GemvJob& p, cudaStream_t s) {
  auto k = f16_mma_pair_kernel<C>;
  constexpr int kSmem = C::SMEM + C::WM * C::WN * 2 * C::TM * C::TN * 4 * kWarp * 4;  // the ring + B's q2, q3
  cudaError_t e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  if (e == cudaSuccess) e = cudaFuncSetAttribute(k, cudaFuncAttributePreferredSharedMemoryCarveout, 100);
  if (e != cudaSuccess) return e;
  const dim3 grid(static_cast<unsigned>((p.w.rows + C::BM - 1) / C::BM), static_cast<unsigned>((p.n_vec + C::BN - 1) / C::BN));
  if ((p.n_vec + C::BN - 1) / C::BN > 65535) return cudaErrorInvalidConfiguration;
  k<<<grid, 2 * C::THREADS, kSmem, s>>>(p);
  return cudaGetLastError();
}

template <class C>
cudaError_t launch_smem(const GemvJob& p, cudaStream_t s) {
  auto k = f16_mma_smem_kernel<C>;
  cudaError_t e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, C::SMEM);
  if (e == cudaSuccess && C::MINB > 1)  // room for MINB blocks' rings (the carveout otherwise may hold fewer)
    e = cudaFuncSetAttribute(k, cudaFuncAttributePreferredSharedMemoryCarveout, 100);
  if (e != cudaSuccess) return e;
  const dim3 grid(static_cast<unsigned>((p.w.rows + C::BM - 1) / C::BM), static_cast<unsigned>((p.n_vec + C::BN - 1) / C::BN));
  if ((p.n_vec + C::BN - 1) / C::BN > 65535) return cudaErrorInvalidConfiguration;
  k<<<grid, C::THREADS, C::SMEM, s>>>(p);
  return cudaGetLastError();
}

}  // namespace

bool f16_mma_tiles_support(const GemvJob& j) {
  return !j.ids && j.x_div == 1 && j.w.cols % kF16MmaSeg == 0 && j.w.row_bytes % 16 == 0 && aligned16(j.w.data) &&
         aligned16(j.x) && j.x_stride % 4 == 0 && j.w.rows >= 256 && j.n_vec >= 64 && (j.n_vec + 63) / 64 <= 65535;
}

cudaError_t f16_mma_tiles_launch(const GemvJob& j, cudaStream_t s) { return f16_mma_tiles_launch_shape(j, s, -1); }

cudaError_t f16_mma_tiles_launch_shape(const GemvJob& j, cudaStream_t s, int shape) {
  const bool big = j.w.rows >= 1024;
  // −1, the default (session 13, cuda_prefill_bench 2048 f16shapes on the H200, ms per call at 2,048 vectors, two
  // rounds): from 512 rows shape 21 (W3 / W4: compressor 1024 × 4096 0.269 → 0.244, indexer q_b 8192 × 1024 0.531
  // → 0.468, HCA compressor 512 × 4096 0.162 → 0.123 against session 12's 12 / 12 / 7; 14: 0.250 / 0.498 / 0.137),
  // else 14 (W1–W4: router 256 × 4096 0.097 → 0.089 against 10; 21's 64 blocks there 0.120) — the activations
  // split once per block by the copying threads, 64 × 16 warp tiles. Session 12: 10 / 7 / 12 by rows.
  if (shape < 0) {
    const cudaError_t e = f16_mma_tiles_launch_shape(j, s, j.w.rows >= 512 ? 21 : 14);
    if (e != cudaErrorInvalidValue) return e;
    (void)cudaGetLastError();  // 21 takes 200 KB of shared memory: sm_80 allows 163 KB a block
    shape = 1;
  }
  switch (shape) {
    case 1:  // 2 blocks per stage: half the block barriers
      return big ? launch_smem<TileCfg<4, 2, 2, 4, 2, 3>>(j, s) : launch_smem<TileCfg<2, 2, 2, 4, 2, 3>>(j, s);
    case 2:  // 16-row warp tiles: twice the warps per matrix
      return big ? launch_smem<TileCfg<4, 2, 1, 4, 1, 4>>(j, s) : launch_smem<TileCfg<4, 1, 1, 4, 1, 4>>(j, s);
    case 3:  // both
      return big ? launch_smem<TileCfg<4, 2, 1, 4, 2, 3>>(j, s) : launch_smem<TileCfg<4, 1, 1, 4, 2, 3>>(j, s);
    case 4:  // activations split once per stage by the block, 2 blocks per stage
      return big ? launch_smem<TileCfg<4, 2, 2, 4, 2, 3, true>>(j, s) : launch_smem<TileCfg<2, 2, 2, 4, 2, 3, true>>(j, s);
    case 5:  // the same with 16-row warp tiles
      return big ? launch_smem<TileCfg<4, 2, 1, 4, 2, 3, true>>(j, s) : launch_smem<TileCfg<4, 1, 1, 4, 2, 3, true>>(j, s);
    // Session 12 (f16): more warps per multiprocessor, fewer instructions per MMA, fewer barriers.
    case 6:  // four 32-value blocks per ring stage (one block barrier per 128 values; 204 / 156 KB rings)
      return big ? launch_smem<TileCfg<4, 2, 2, 4, 4, 3>>(j, s) : launch_smem<TileCfg<2, 2, 2, 4, 4, 3>>(j, s);
    case 7:  // 64 × 16 warp tiles: an activation's split serves 4 m-tiles (not 2), a weight's conversion 2 n-tiles
      return big ? launch_smem<TileCfg<2, 4, 4, 2, 2, 3>>(j, s) : launch_smem<TileCfg<1, 4, 4, 2, 2, 3>>(j, s);
    case 8:  // 32 × 16 warp tiles at ≤ 128 registers: 2 blocks of 8 warps (big) / 4 of 4 warps per multiprocessor
      return big ? launch_smem<TileCfg<4, 2, 2, 2, 2, 3, false, 2>>(j, s)
                 : launch_smem<TileCfg<2, 2, 2, 2, 2, 3, false, 4>>(j, s);
    case 10:  // quarter pairs (f16_mma_pair_kernel): big 16 warps of 32 × 16 (128 × 32 tiles), else 8 warps of 32 × 16
              // (64 × 32 tiles, two-stage ring, 2 blocks per multiprocessor)
      return big ? launch_pair<TileCfg<4, 2, 2, 2, 4, 3>>(j, s) : launch_pair<TileCfg<2, 2, 2, 2, 4, 2, false, 2>>(j, s);
    case 12:  // big: 16 warps of 32 × 16 in one 128 × 64 block with four blocks per stage; else 8's warps with four
              // blocks per stage in a two-stage ring, 3 blocks per multiprocessor
      return big ? launch_smem<TileCfg<4, 4, 2, 2, 4, 3>>(j, s) : launch_smem<TileCfg<2, 2, 2, 2, 4, 2, false, 3>>(j, s);
    // Session 13 (f16): the activations split once per block by the threads that copy them (f16_mma_xsplit_kernel).
    case 14:  // 7's 64 × 16 warp tiles (big: 8 warps, 128 × 64 tiles; else 4 warps, 64 × 64, 2 per multiprocessor)
      return big ? launch_xsplit<TileCfg<2, 4, 4, 2, 2, 4>>(j, s) : launch_xsplit<TileCfg<1, 4, 4, 2, 2, 2, false, 2>>(j, s);
    case 21:  // 14's 64 × 16 warp tiles in 128 × 64 blocks of 8 warps at every row count, four 32-value blocks per
              // stage in a two-slot ring (one barrier per 128 values; the default from 512 rows)
      return launch_xsplit<TileCfg<2, 4, 4, 2, 4, 2>>(j, s);
    case 13:  // removed (session 13: 14's activation split with 12's 32 × 16 warp tiles — slower than 14 everywhere)
    case 16:  // removed (session 13: 10's quarter pairs with the split — 0.087 on 256 rows, far slower above)
    case 17:  // removed (session 13: 32 × 32 warp tiles with the split — 1–4 % slower than 14 everywhere)
    case 18:  // removed (session 13: 14 with the weights converted F16 → TF32 by the copying threads, both operands
              // one stage ahead in registers — 18–25 % slower)
    case 19:  // removed (session 13: 16 with 64 × 16 warp tiles — slower everywhere)
    case 20:  // removed (session 13: 21 from 1,024 rows, else 4-warp blocks one per multiprocessor — 0.121 / 0.241)
    case 15:  // removed (13 in a 3-slot ring / 2 per multiprocessor: slower than 14 but on 256 rows, equal there)
    case 9:   // removed (session 12: 16 warps of 32 × 16 with two blocks per stage, 32 × 8 warp tiles — 12 and 8 won)
    case 11:  // removed (quarter pairs of 32 × 32 warp tiles: slower than 10 everywhere)
      return cudaErrorInvalidValue;
    default:  // 128 × 64 tiles (8 warps) from 1,024 rows, else 64 × 64 (4 warps: the 256- and 512-row matrices).
      return big ? launch_smem<TileCfg<4, 2, 2, 4, 1, 4>>(j, s) : launch_smem<TileCfg<2, 2, 2, 4, 1, 4>>(j, s);
  }
}

}  // namespace ds4::backend::cuda
