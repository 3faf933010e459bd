// f16_mma.cuh — README.md's "F16 MMA order" (CudaBackendOptions::f16_mma): the pieces every kernel that
// sums F16 rows · float vectors on TF32 tensor cores shares (matmul_f16_mma.cu: matmul and matmul_many
// at every batch size; ops_hc.cu's HC control segments): the 512-value segment of four 128-value quarters,
// the k order inside a quarter (4 blocks of 32 values, 4 k-steps each), the TF32 split of the activations,
// a quarter's MMA chain for a warp tile, the segment sum ((q0 + q1) + q2) + q3, and one block's whole
// output tile (quarters spread over its warps, segments added in order).
// F16 weights are exact in TF32 (11 significant bits), so the A operand is the weight itself; each
// activation is split x = hi + lo (mma_tf32.cuh) and each k-step is two MMAs, hi then lo, into one fp32
// accumulator that starts at 0 for every quarter — four independent chains per segment (decode latency),
// and 512-value segments as in the scalar order (the HC finish kernels add 32 sums per 16,384 values).
// Layout (why the k order is permuted): lane (g, t) of a warp (lane = 4g + t) loads 8 consecutive values
// of a row (one 16-byte load of F16 weights, two of floats) — values 8t … 8t + 7 of a 32-value block —
// and those feed k-step q at MMA k index t (value 8t + 2q) and t + 4 (value 8t + 2q + 1): the fragment
// layout of m16n8k8 without shuffles, for direct global loads (decode) and shared-memory tiles alike.
// Deliberately not here: launch shapes (they never change the order), the scalar segment order
// (f16_segment.cuh), other weight types.
#pragma once

#include <cstdint>

#include "backend/cuda/common.cuh"
#include "backend/cuda/f16_segment.cuh"
#include "backend/cuda/mma_tf32.cuh"

namespace ds4::backend::cuda {

inline constexpr int kF16MmaSeg = 512;  // values per segment (= kF16Seg): the summation contract, never a tuning knob
inline constexpr int kF16MmaQ = 128;    // values per quarter: one MMA chain
inline constexpr int kF16MmaBlk = 32;   // values per block: 4 k-steps of 8
static_assert(kF16MmaSeg == kF16Seg && kF16MmaSeg == 4 * kF16MmaQ && kF16MmaQ == 4 * kF16MmaBlk, "the F16 MMA order's sizes");

__device__ inline uint32_t word_of(const uint4& w, int q) { return q == 0 ? w.x : q == 1 ? w.y : q == 2 ? w.z : w.w; }

// F16 → the f32 bits of the same value (exact in TF32: low 13 mantissa bits zero).
__device__ inline uint32_t f16_tf32(uint32_t h) { return __float_as_uint(f16_dev(static_cast<uint16_t>(h))); }

// One 32-value block: c[i][j] += the block's 4 k-steps for m-tile i, n-tile j. Lane (g, t): w[i][0], w[i][1]
// = rows g and g + 8 of m-tile i, values 8t … 8t + 7 of the block (word q = values 2q, 2q + 1); x[j] =
// vector g of n-tile j, the same 8 values. k-step q: A = (row g, k t) value 2q, (g + 8, t) 2q, (g, t + 4)
// 2q + 1, (g + 8, t + 4) 2q + 1; B = (k t) value 2q, (k t + 4) value 2q + 1; MMA hi, then MMA lo.
template <int TM, int TN>
__device__ inline void f16_mma_block(float (&c)[TM][TN][4], const uint4 (&w)[TM][2], const float (&x)[TN][8]) {
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    uint32_t bh[TN][2], bl[TN][2];
#pragma unroll
    for (int j = 0; j < TN; ++j) {
      split_tf32(x[j][2 * q], bh[j][0], bl[j][0]);
      split_tf32(x[j][2 * q + 1], bh[j][1], bl[j][1]);
    }
#pragma unroll
    for (int i = 0; i < TM; ++i) {
      const uint32_t w0 = word_of(w[i][0], q), w1 = word_of(w[i][1], q);
      const uint32_t a[4] = {f16_tf32(w0 & 0xffffu), f16_tf32(w1 & 0xffffu), f16_tf32(w0 >> 16), f16_tf32(w1 >> 16)};
#pragma unroll
      for (int j = 0; j < TN; ++j) {
        mma_tf32(c[i][j], a, bh[j][0], bh[j][1]);
        mma_tf32(c[i][j], a, bl[j][0], bl[j][1]);
      }
    }
  }
}

// Vector g's 8 values at e (zeros beyond cols or for a missing vector), times sc when kScale (the HC
// controls multiply the normed row x·scale, as rms_norm writes it, before splitting).
template <bool kScale>
__device__ inline void load_x8_mma(const float* xr, int64_t e, int64_t cols, bool wide, float sc, float (&x)[8]) {
  float4 a = make_float4(0, 0, 0, 0), b = a;
  if (xr) load_x8(xr, e, cols, wide, a, b);
  x[0] = a.x, x[1] = a.y, x[2] = a.z, x[3] = a.w, x[4] = b.x, x[5] = b.y, x[6] = b.z, x[7] = b.w;
  if (kScale) {
#pragma unroll
    for (int k = 0; k < 8; ++k) x[k] *= sc;
  }
}

// Lane (g, t)'s weights of one 32-value block at e (row pointers as below; zeros when !on or for null rows).
template <int TM>
__device__ inline void f16_mma_load_w(uint4 (&w)[TM][2], const uint8_t* const (&wr)[TM][2], bool on, int64_t e,
                                      int64_t cols, bool wide) {
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) w[i][h] = on && wr[i][h] ? load_w8(wr[i][h], e, cols, wide) : make_uint4(0, 0, 0, 0);
}

// Quarter u of a warp tile with its operands already loaded (w[b], x[b] = block b's, f16_mma_load_w and
// load_x8_mma): c = the quarter's chain from 0 (the HC controls load both before the norm scale is known).
template <int TM, int TN>
__device__ inline void f16_mma_quarter_loaded(float (&c)[TM][TN][4], const uint4 (&w)[4][TM][2],
                                              const float (&x)[4][TN][8]) {
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j) c[i][j][0] = c[i][j][1] = c[i][j][2] = c[i][j][3] = 0.0f;
#pragma unroll
  for (int b = 0; b < 4; ++b) f16_mma_block<TM, TN>(c, w[b], x[b]);
}

// Quarters u0 + p·du (p = 0 … P − 1; those ≥ nq skipped: c stays 0) of a warp tile: c[p] = Σ over the
// quarter's 16 k-steps in order, from 0. wr[i][h]: row g + 8h of m-tile i (null: a zero row), xr[j]: vector g
// of n-tile j (null: a zero vector); t = lane & 3. The P quarters are independent chains (ILP for
// latency-bound decode tiles). kUnroll: the 4 blocks unrolled (their loads in flight together), else one
// at a time (large tiles: registers).
template <int P, int TM, int TN, bool kScale, bool kUnroll>
__device__ inline void f16_mma_quarters(float (&c)[P][TM][TN][4], const uint8_t* const (&wr)[TM][2],
                                        const float* const (&xr)[TN], const float (&sc)[TN], int64_t u0, int64_t du,
                                        int64_t nq, int64_t cols, bool wide, int t) {
#pragma unroll
  for (int p = 0; p < P; ++p)
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) c[p][i][j][0] = c[p][i][j][1] = c[p][i][j][2] = c[p][i][j][3] = 0.0f;
  auto blk = [&](int b) {
    uint4 w[P][TM][2];
    float x[P][TN][8];
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const int64_t u = u0 + p * du;
      const bool on = u < nq;
      const int64_t e = u * kF16MmaQ + b * kF16MmaBlk + 8 * t;
      f16_mma_load_w<TM>(w[p], wr, on, e, cols, wide);
#pragma unroll
      for (int j = 0; j < TN; ++j) load_x8_mma<kScale>(on ? xr[j] : nullptr, e, cols, wide, sc[j], x[p][j]);
    }
#pragma unroll
    for (int p = 0; p < P; ++p) f16_mma_block<TM, TN>(c[p], w[p], x[p]);
  };
  if constexpr (kUnroll) {
#pragma unroll
    for (int b = 0; b < 4; ++b) blk(b);
  } else {
#pragma unroll 1
    for (int b = 0; b < 4; ++b) blk(b);
  }
}

// Accumulator element r of lane (g, t) in m-tile i, n-tile j: row 16i + g + 8·(r >> 1), vector 8j + 2t + (r & 1).
__device__ inline int f16_mma_row(int i, int g, int r) { return 16 * i + g + 8 * (r >> 1); }
__device__ inline int f16_mma_vec(int j, int t, int r) { return 8 * j + 2 * t + (r & 1); }

// One block's output tile under ds4 numerics: rows o0 … o0 + rpt − 1 and vectors v0 … v0 + nv − 1.
struct F16MmaTile {
  const uint8_t* w;   // matrix (row o at w + o·row_bytes)
  uint64_t row_bytes;
  int64_t rows, cols;
  int64_t o0;
  int32_t rpt;        // rows of the tile: 16·TM, or with TM = 1 also 8 or 4 (decode: more blocks; the MMA rows
                      // past rpt are zero rows, never stored)
  const float* x;     // vector v reads row v / x_div of [*][x_stride]
  int64_t x_stride;
  int32_t x_div;
  int64_t v0, nv;     // nv ≤ 8·TN
  float* y;           // [*][y_stride]
  int64_t y_stride;
  bool wide;          // 16-byte loads (cols % 8 == 0, aligned rows and x)
  bool poison;        // a bad expert id: NaN outputs
};

// seg = ((q0 + q1) + q2) + q3 of one accumulator element (quarters past K are zero chains: +0).
__device__ inline float f16_mma_seg_sum(float q0, float q1, float q2, float q3) { return ((q0 + q1) + q2) + q3; }

// y = (…((0 + seg_0) + seg_1) + …) + seg_last for the tile, every thread of the block calling it. With one
// warp and P = 1 the warp walks the quarters itself (chain c, segment sum g, y in registers); otherwise
// each round covers nw·P quarters (a multiple of 4: whole segments), warp w computing quarters
// u0 + p·nw + w into part (shared), and the block adds the round's segments in order into ys (shared).
// sh: (nw·P + 1)·128·TM·TN floats unless nw·P == 1.
template <int P, int TM, int TN, bool kUnroll>
__device__ inline void f16_mma_tile(const F16MmaTile& T, float* sh) {
  constexpr int kTile = 128 * TM * TN;  // accumulator values of a warp tile (32 lanes × TM·TN·4)
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, nw = blockDim.x / kWarp;
  const int g = lane >> 2, t = lane & 3;
  const uint8_t* wr[TM][2];
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t o = T.o0 + 16 * i + g + 8 * h;
      wr[i][h] = !T.poison && o < T.rows && 16 * i + g + 8 * h < T.rpt ? T.w + static_cast<uint64_t>(o) * T.row_bytes : nullptr;
    }
  const float* xr[TN];
  float sc[TN];
#pragma unroll
  for (int j = 0; j < TN; ++j) {
    const int64_t v = 8 * j + g;
    xr[j] = v < T.nv ? T.x + ((T.v0 + v) / T.x_div) * T.x_stride : nullptr;
    sc[j] = 1.0f;
  }
  const int64_t nseg = (T.cols + kF16MmaSeg - 1) / kF16MmaSeg, nq = 4 * nseg;
  auto store = [&](int i, int j, int r, float v) {
    const int64_t o = T.o0 + f16_mma_row(i, g, r), vv = f16_mma_vec(j, t, r);
    if (o < T.rows && vv < T.nv && f16_mma_row(i, g, r) < T.rpt) T.y[(T.v0 + vv) * T.y_stride + o] = T.poison ? NAN : v;
  };
  float c[P][TM][TN][4];
  if (P == 1 && nw == 1) {
    float y[TM][TN][4], sg[TM][TN][4];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) y[i][j][0] = y[i][j][1] = y[i][j][2] = y[i][j][3] = 0.0f;
    for (int64_t u = 0; u < nq; ++u) {
      f16_mma_quarters<P, TM, TN, false, kUnroll>(c, wr, xr, sc, u, 1, nq, T.cols, T.wide, t);
      const int q = static_cast<int>(u % 4);
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j)
#pragma unroll
          for (int r = 0; r < 4; ++r) {
            sg[i][j][r] = q == 0 ? c[0][i][j][r] : sg[i][j][r] + c[0][i][j][r];  // ((q0 + q1) + q2) + q3
            if (q == 3) y[i][j][r] += sg[i][j][r];                              // segment order
          }
    }
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j)
#pragma unroll
        for (int r = 0; r < 4; ++r) store(i, j, r, y[i][j][r]);
    return;
  }
  const int per_round = nw * P;        // quarters per round, a multiple of 4 (the launch's choice)
  float* part = sh;                    // [nw·P][kTile]: quarter u0 + k at k·kTile + ((i·TN + j)·4 + r)·32 + lane
  float* ys = sh + per_round * kTile;  // [kTile] running sums, same indexing
  for (int e = threadIdx.x; e < kTile; e += blockDim.x) ys[e] = 0.0f;
  for (int64_t u0 = 0; u0 < nq; u0 += per_round) {
    f16_mma_quarters<P, TM, TN, false, kUnroll>(c, wr, xr, sc, u0 + warp, nw, nq, T.cols, T.wide, t);
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const int k = p * nw + warp;
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j)
#pragma unroll
          for (int r = 0; r < 4; ++r) part[k * kTile + ((i * TN + j) * 4 + r) * kWarp + lane] = c[p][i][j][r];
    }
    __syncthreads();
    const int m = static_cast<int>(nq - u0 < per_round ? nq - u0 : per_round) / 4;  // whole segments
    for (int e = threadIdx.x; e < kTile; e += blockDim.x) {
      float v = ys[e];
      for (int k = 0; k < m; ++k) {  // segment order
        const float* q = part + 4 * k * kTile + e;
        v += f16_mma_seg_sum(q[0], q[kTile], q[2 * kTile], q[3 * kTile]);
      }
      ys[e] = v;
    }
    __syncthreads();  // the next round overwrites `part`
  }
  if (warp == 0) {
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j)
#pragma unroll
        for (int r = 0; r < 4; ++r) store(i, j, r, ys[((i * TN + j) * 4 + r) * kWarp + lane]);
  }
}

}  // namespace ds4::backend::cuda
