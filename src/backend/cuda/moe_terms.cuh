// moe_terms.cuh — the block terms of the routed-expert tile kernels: one weight block (IQ2_XXS, Q2_K,
// Q8_0, Q4_K in shared memory) dotted with up to P pairs' quantized activation rows, the integer part
// exact and the float finish QDot's / dot_ref.cpp's, and a (row, pair)'s chain of those terms in block
// order with the SwiGLU and routing weight. Shared by the block-tile kernels (moe_tiles.cu) and the
// warp-tile kernels (moe_warp_tiles.cu), so both give the same bits by construction.
// Also the kernel parameters (TileParams) and the padded activation layout both read.
// Deliberately not here: tiling, copies and the work distribution (each kernel's job), the prologue and
// the dispatch (moe_tiles.cu).
#pragma once

#include <cstdint>

#include "backend/cuda/common.cuh"
#include "backend/cuda/qdot.cuh"
#include "backend/exact_math.h"
#include "quant/iq2xxs_words.h"

namespace ds4::backend::cuda {

// Lean kernels: copies of the IQ2_XXS grid in shared memory, entry e's copy c at e·kGridCopies + c and
// lane l reading copy l % kGridCopies, so a half-warp's 16 random 8-byte lookups spread over 4 groups
// of 4 lanes on disjoint banks instead of colliding on 16 bank pairs. 4 copies (8 KB): two gate/up
// blocks per SM still fit (2 × (101.6 KB dynamic + 8 KB + 1 KB reserved) at Flash shapes).
constexpr int kGridCopies = 4;

// Quantized activations (x and the hidden rows) in a padded layout: block b of row r at
// kActLead + r·row_stride + b·pitch, pitch 304 (BlockQ8_K, 292 B) or 48 (BlockQ8_0Act, 36 B), so every
// block's quants (offset 4) are 16-byte aligned and a pair's values load as uint4. Inside a block the
// layout is the CPU's (d at 0, qs at 4, Q8_K bsums at 260), which QDot reads.
constexpr uint64_t kActLead = 12;
constexpr uint64_t kQ8KPitch = 304, kQ80Pitch = 48;

// Asynchronous global → shared copies (sm_80+): the copy of the next tile overlaps the computation of
// the current one without holding registers. 4-byte pieces, so each row can land at an odd word pitch
// (a warp's 128 bytes per instruction are still one coalesced request).
__device__ inline void cp_async4(void* dst, const void* src) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(s), "l"(src));
}

// ---- block terms of one weight block for c ≤ P pairs (sact[p]: pair p's activation row) ----

// Whether pair p of a chunk of c pairs is present. The lean kernels run a chunk of c pairs at P = the
// smallest of 1, 2, 4, 8, 16 that holds it (moe_tile_kernel's dispatch), so c > P / 2 and pairs
// p ≤ P / 2 need no guard (p is a constant once the loops are unrolled: the test folds away). The
// first kernels run every chunk at the largest P: each absent pair's loads and dp4a run predicated off.
template <int P, bool kLean>
__device__ inline bool present(int p, int c) {
  return (kLean && p <= P / 2) || p < c;
}

// acc + the 16 int8 products of four weight words with one 16-byte run of Q8 values (dp4a chain).
__device__ inline int dp4a_x4(const uint32_t* w, uint4 v, int acc) {
  acc = __dp4a(static_cast<int>(w[0]), static_cast<int>(v.x), acc);
  acc = __dp4a(static_cast<int>(w[1]), static_cast<int>(v.y), acc);
  acc = __dp4a(static_cast<int>(w[2]), static_cast<int>(v.z), acc);
  return __dp4a(static_cast<int>(w[3]), static_cast<int>(v.w), acc);
}

// Sign bytes of one IQ2_XXS chunk as two words of 0/1 bytes (byte j = bit j): the 7 stored bits plus
// their parity as bit 7 (kKsignsIq2xs[i] = i | parity(i) << 7), each nibble spread to the low bits of
// four bytes by one multiply (shifts 0, 7, 14, 21: the copies never overlap). Integer work instead of a
// second table lookup: the tile kernels are instruction- and lookup-bound (docs/PERF.md).
__device__ inline void iq2_sign_bits(uint32_t idx7, uint32_t& lo, uint32_t& hi) {
  const uint32_t s = idx7 | ((__popc(idx7) & 1u) << 7);
  lo = ((s & 15u) * 0x00204081u) & 0x01010101u;
  hi = ((s >> 4) * 0x00204081u) & 0x01010101u;
}

// IQ2_XXS: each 32-value group is decoded once into 8 signed int8×4 words, then dotted with every
// pair's Q8_K values. The sign bits as 0/1 bytes b give the byte mask m = 255·b for iq2xxs_signed_word
// (quant/iq2xxs_words.h: no carries, checked for every (grid, sign) pair). Integer sums are exact, so
// this equals iq2_xxs_group_isum's;
// the float finish is QDot's.
// grid: this lane's copy of the table, entry e at grid[e · G] (G = kGridCopies in the lean kernels).
template <int P, bool kLean>
__device__ inline void iq2_terms(const uint8_t* wb, uint64_t boff, int c, const uint8_t* const* sact,
                                 const uint64_t* grid, float* out, int out_stride) {
  constexpr int G = kLean ? kGridCopies : 1;
  int isum[P];
#pragma unroll
  for (int p = 0; p < P; ++p) isum[p] = 0;
  for (int g = 0; g < 8; ++g) {
    const uint32_t a0 = ld32_u16(wb + 2 + 8 * g), a1 = ld32_u16(wb + 6 + 8 * g);
    const int ls = 2 * static_cast<int>(a1 >> 28) + 1;
    uint32_t w[8];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const uint64_t gr = grid[((a0 >> (8 * k)) & 0xff) * G];
      uint32_t blo, bhi;
      iq2_sign_bits((a1 >> (7 * k)) & 127, blo, bhi);
      w[2 * k] = iq2xxs_signed_word(static_cast<uint32_t>(gr), blo * 255u);
      w[2 * k + 1] = iq2xxs_signed_word(static_cast<uint32_t>(gr >> 32), bhi * 255u);
    }
#pragma unroll
    for (int p = 0; p < P; ++p) {
      if (present<P, kLean>(p, c)) {
        const uint4* q8 = reinterpret_cast<const uint4*>(sact[p] + boff + 4 + 32 * g);  // 16-byte aligned
        isum[p] += dp4a_x4(w + 4, q8[1], dp4a_x4(w, q8[0], 0)) * ls;
      }
    }
  }
#pragma unroll
  for (int p = 0; p < P; ++p)
    if (present<P, kLean>(p, c)) out[p * out_stride] = QDot<GgmlType::IQ2_XXS>::finish(wb, sact[p] + boff, isum[p], 0);
}

// One Q2_K sub-block s (16 values, 2-bit words w, scale sc, min mn) dotted with every pair's Q8_K
// values at qoff; the min term uses the pair's bsum of s.
template <int P, bool kLean>
__device__ inline void q2k_sub(const uint32_t (&w)[4], int s, int sc, int mn, int qoff, uint64_t boff, int c,
                               const uint8_t* const* sact, int (&isum)[P], int (&summs)[P]) {
#pragma unroll
  for (int p = 0; p < P; ++p) {
    if (present<P, kLean>(p, c)) {
      const uint8_t* y = sact[p] + boff;
      const uint4 v = *reinterpret_cast<const uint4*>(y + qoff);  // 16-byte aligned
      isum[p] += sc * dp4a_x4(w, v, 0);
      summs[p] += q8k_bsum(y, s) * mn;
    }
  }
}

// Q2_K: each 16-value piece's 2-bit quants are unpacked once (q2k_piece's words), then dotted with
// every pair's Q8_K values; the min terms use the pair's bsums. Same integers as q2k_piece (integer
// sums: their order does not matter), same q2k_finish. The lean kernels read each of the block's 16
// quant words and 4 scale words once (the first ones: 64 quant words, 16 scale bytes).
template <int P, bool kLean>
__device__ inline void q2k_terms(const uint8_t* x, uint64_t boff, int c, const uint8_t* const* sact, float* out,
                                 int out_stride) {
  int isum[P], summs[P];
#pragma unroll
  for (int p = 0; p < P; ++p) isum[p] = summs[p] = 0;
  if constexpr (kLean) {
#pragma unroll 1
    for (int h = 0; h < 2; ++h) {  // not unrolled (nor half, l): unrolled, the P = 8 code spills (ptxas -v)
      const uint32_t scw0 = ld32(x + 8 * h), scw1 = ld32(x + 8 * h + 4);  // scale bytes 8h … 8h + 7
#pragma unroll 1
      for (int half = 0; half < 2; ++half) {
        // Quant bytes 16 + 32h + 16·half …: word m holds piece (l, half)'s values 4m … 4m + 3 at bits
        // 2l of each byte, l = 0 … 3 (the layout q2k_piece reads).
        uint32_t qw[4];
#pragma unroll
        for (int m = 0; m < 4; ++m) qw[m] = ld32(x + 16 + 32 * h + 16 * half + 4 * m);
#pragma unroll 1
        for (int l = 0; l < 4; ++l) {
          const int s = 8 * h + 2 * l + half;
          const uint32_t sb = ((l < 2 ? scw0 : scw1) >> (8 * ((2 * l + half) % 4))) & 0xffu;  // byte x[s]
          uint32_t w[4];
#pragma unroll
          for (int m = 0; m < 4; ++m) w[m] = (qw[m] >> (2 * l)) & 0x03030303u;
          q2k_sub<P, kLean>(w, s, static_cast<int>(sb & 15), static_cast<int>(sb >> 4),
                            4 + 128 * h + 32 * l + 16 * half, boff, c, sact, isum, summs);
        }
      }
    }
  } else {
    for (int s = 0; s < 16; ++s) {
      const int h = s / 8, l = (s % 8) / 2, half = s % 2;
      const uint8_t* q2 = x + 16 + 32 * h + 16 * half;
      uint32_t w[4];
#pragma unroll
      for (int m = 0; m < 4; ++m) w[m] = (ld32(q2 + 4 * m) >> (2 * l)) & 0x03030303u;
      q2k_sub<P, kLean>(w, s, x[s] & 15, x[s] >> 4, 4 + 128 * h + 32 * l + 16 * half, boff, c, sact, isum, summs);
    }
  }
#pragma unroll
  for (int p = 0; p < P; ++p)
    if (present<P, kLean>(p, c)) out[p * out_stride] = q2k_finish(x, sact[p] + boff, isum[p], summs[p]);
}

// ---- fast kernels (CudaBackendOptions::expert_tiles_fast): ~2 instructions per weight ----
//
// IQ2_XXS tables of the fast kernels, at the start of dynamic shared memory: kFastCopies copies of the
// grid (256 × u64) and of the sign byte masks (128 × u64, iq2xxs_sign_mask), entry e's copy c at
// 8·(kFastCopies·e + c) bytes, lane l reading copy l % 16. A warp's 64-bit loads are served a half-warp
// per wavefront; the half-warp's 16 lanes read 16 different copies, i.e. banks 2c and 2c + 1 whatever
// entries they pick: every lookup is conflict-free (2 wavefronts a warp, the minimum for 8 bytes a lane).
constexpr int kFastCopies = 16;
constexpr uint64_t kFastTableBytes = (256 + 128) * kFastCopies * sizeof(uint64_t);  // 48 KB

// dp4a with unsigned weight bytes (0 … 255) and signed activation bytes.
__device__ inline int dp4a_us(uint32_t a, uint32_t b, int c) {
  int d;
  asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

// IQ2_XXS block at wb (2-byte aligned in shared memory), fast decode. Per 32-value group: the two 32-bit
// words (grid indices, sign indices + scale) from three aligned 32-bit loads and two funnel shifts (the
// group is 2 or 0 bytes off a word boundary: wb + 2 is the quants' start); per 8-value chunk one 64-bit
// grid load and one 64-bit sign-mask load (conflict-free tables above), the signs applied 4 bytes at a
// time by iq2xxs_signed_word (3 integer operations, no per-byte work; the no-carry proof is there), then
// per pair 2 dp4a. The integer sums are iq2_xxs_group_isum's (exact), the float finish is QDot's.
// gl / sl: this lane's copy of the grid / sign table as bytes (entry e's 8 bytes at e · 128).
template <int P, bool kLean>
__device__ inline void iq2_terms_fast(const uint8_t* wb, uint64_t boff, int c, const uint8_t* const* sact,
                                      const uint8_t* gl, const uint8_t* sl, float* out, int out_stride) {
  const uint8_t* q = wb + 2;
  const int mis = static_cast<int>(reinterpret_cast<uintptr_t>(q) & 3);  // 0 or 2
  const uint32_t* qw = reinterpret_cast<const uint32_t*>(q - mis);       // 17 words cover the 64 quant bytes
  const uint32_t sh = 8u * static_cast<uint32_t>(mis);
  int isum[P];
  const uint8_t* ap[P];  // pair p's quants of this block
#pragma unroll
  for (int p = 0; p < P; ++p) {
    isum[p] = 0;
    ap[p] = present<P, kLean>(p, c) ? sact[p] + boff + 4 : nullptr;
  }
  uint32_t w_lo = qw[0];
  // Unrolled for one pair (immediate offsets, no loop); not for more: the loads hoisted across
  // groups then spill (ptxas -v).
#pragma unroll(P == 1 ? 8 : 1)
  for (int g = 0; g < 8; ++g) {
    // The last group's w_hi reaches ≤ 4 bytes past the block (the next block, the row pitch's padding or
    // tile_smem's 16 spare bytes) and is used only for its first 2 bytes when sh = 16.
    const uint32_t w_mid = qw[2 * g + 1], w_hi = qw[2 * g + 2];
    const uint32_t a0 = __funnelshift_r(w_lo, w_mid, sh);
    const uint32_t a1 = __funnelshift_r(w_mid, w_hi, sh);
    w_lo = w_hi;
    const int ls = 2 * static_cast<int>(a1 >> 28) + 1;
    // w: the signed weights, or (one pair) the grid bytes as stored and n their negative ones (g & m).
    uint32_t w[8], n[8];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      // Byte offsets of entry e in this lane's copy: e · 128 (kFastCopies entries of 8 bytes apart).
      const uint32_t go = __byte_perm(a0, 0, 0x4440 + k) << 7;
      const uint32_t so = (k == 0 ? a1 << 7 : a1 >> (7 * k - 7)) & (127u << 7);
      const uint64_t gr = *reinterpret_cast<const uint64_t*>(gl + go);
      const uint64_t sm = *reinterpret_cast<const uint64_t*>(sl + so);
      const uint32_t g0 = static_cast<uint32_t>(gr), g1 = static_cast<uint32_t>(gr >> 32);
      const uint32_t m0 = static_cast<uint32_t>(sm), m1 = static_cast<uint32_t>(sm >> 32);
      if constexpr (P == 1) {
        w[2 * k] = g0, w[2 * k + 1] = g1;
        n[2 * k] = g0 & m0, n[2 * k + 1] = g1 & m1;
      } else {
        w[2 * k] = iq2xxs_signed_word(g0, m0);
        w[2 * k + 1] = iq2xxs_signed_word(g1, m1);
      }
    }
#pragma unroll
    for (int p = 0; p < P; ++p) {
      if (present<P, kLean>(p, c)) {
        const uint4* q8 = reinterpret_cast<const uint4*>(ap[p] + 32 * g);  // 16-byte aligned
        if constexpr (P == 1) {
          // One pair: Σ s·g·a = Σ g·a − 2·Σ (g & m)·a (grid bytes 8..43 are non-negative int8), an AND and
          // a second dp4a a word instead of the 3-operation sign step; the same exact integer.
          const int pos = dp4a_x4(w + 4, q8[1], dp4a_x4(w, q8[0], 0));
          const int neg = dp4a_x4(n + 4, q8[1], dp4a_x4(n, q8[0], 0));
          isum[p] += (pos - 2 * neg) * ls;
        } else {
          isum[p] += dp4a_x4(w + 4, q8[1], dp4a_x4(w, q8[0], 0)) * ls;
        }
      }
    }
  }
#pragma unroll
  for (int p = 0; p < P; ++p)
    if (present<P, kLean>(p, c)) out[p * out_stride] = QDot<GgmlType::IQ2_XXS>::finish(wb, sact[p] + boff, isum[p], 0);
}

// IQ2_XXS tables of the byte-permute decode (the row tiles with CudaBackendOptions::expert_row_tiles_perm),
// at the start of dynamic shared memory: 256 entries of 256 bytes; entry e holds kPermCopies copies of grid
// entry e's selectors (iq2xxs_grid_selectors) in bytes 0 … 127 and, for e < 128, as many copies of sign
// index e's selectors (iq2xxs_sign_selectors) in bytes 128 … 255; lane l reads copy l (bytes 4l … 4l + 3), so
// every lookup of a warp is one conflict-free wavefront. The 256-byte entries let one byte permute turn a
// grid index byte into its entry's offset (index · 256).
constexpr int kPermCopies = 32;
static_assert(kPermCopies == kWarp, "lane l reads copy l");
constexpr uint64_t kPermTableBytes = 256 * 256;  // 64 KB

// prmt.b32 in its default mode: result byte i = byte s_i of b:a (selector nibbles 0–7, never the sign mode
// here), without the 3-bit mask __byte_perm adds to each selector.
__device__ inline uint32_t prmt(uint32_t a, uint32_t b, uint32_t s) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(s));
  return d;
}

// IQ2_XXS block at wb (2-byte aligned in shared memory), byte-permute decode: iq2_terms_fast's quant words
// and scale, then per 8-value chunk one 4-byte grid-selector and one 4-byte sign-selector load, their OR,
// and two byte permutes of the candidate bytes (quant/iq2xxs_words.h: the same signed int8 words as
// iq2xxs_signed_word, checked for every grid entry and sign index), then per pair 2 dp4a. Same integer
// sums, same float finish (QDot's). tab: the tables (shared memory) + 4 × the lane's copy. Offsets: the grid
// entry's by one permute (index byte to bits 8 … 15), the sign entry's by a shift and a mask.
template <int P, bool kLean>
__device__ inline void iq2_terms_perm(const uint8_t* wb, uint64_t boff, int c, const uint8_t* const* sact,
                                      const uint8_t* tab, float* out, int out_stride) {
  const uint8_t* q = wb + 2;
  const int mis = static_cast<int>(reinterpret_cast<uintptr_t>(q) & 3);  // 0 or 2
  const uint32_t* qw = reinterpret_cast<const uint32_t*>(q - mis);       // 17 words cover the 64 quant bytes
  const uint32_t sh = 8u * static_cast<uint32_t>(mis);
  int isum[P];
  const uint8_t* ap[P];  // pair p's quants of this block
#pragma unroll
  for (int p = 0; p < P; ++p) {
    isum[p] = 0;
    ap[p] = present<P, kLean>(p, c) ? sact[p] + boff + 4 : nullptr;
  }
  uint32_t w_lo = qw[0];
#pragma unroll(P <= 2 ? 8 : 1)
  for (int g = 0; g < 8; ++g) {
    // As iq2_terms_fast: the last group's w_hi reaches ≤ 4 bytes past the block, used only when sh = 16.
    const uint32_t w_mid = qw[2 * g + 1], w_hi = qw[2 * g + 2];
    const uint32_t a0 = __funnelshift_r(w_lo, w_mid, sh);
    const uint32_t a1 = __funnelshift_r(w_mid, w_hi, sh);
    w_lo = w_hi;
    const int ls = 2 * static_cast<int>(a1 >> 28) + 1;
    uint32_t w[8];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      // Grid index (byte k of a0) · 256, and sign index (bits 7k … 7k + 6 of a1) · 256.
      const uint32_t go = prmt(a0, 0, 0x4404u | (k << 4));
      const uint32_t so = (k == 0 ? a1 << 8 : k == 1 ? a1 << 1 : a1 >> (7 * k - 8)) & 0x7f00u;
      const uint32_t sel = *reinterpret_cast<const uint32_t*>(tab + go) |
                           *reinterpret_cast<const uint32_t*>(tab + so + 128);
      w[2 * k] = prmt(kIq2xxsPermPos, kIq2xxsPermNeg, sel);
      w[2 * k + 1] = prmt(kIq2xxsPermPos, kIq2xxsPermNeg, sel >> 16);
    }
#pragma unroll
    for (int p = 0; p < P; ++p) {
      if (present<P, kLean>(p, c)) {
        const uint4* q8 = reinterpret_cast<const uint4*>(ap[p] + 32 * g);  // 16-byte aligned
        isum[p] += dp4a_x4(w + 4, q8[1], dp4a_x4(w, q8[0], 0)) * ls;
      }
    }
  }
#pragma unroll
  for (int p = 0; p < P; ++p)
    if (present<P, kLean>(p, c)) out[p * out_stride] = QDot<GgmlType::IQ2_XXS>::finish(wb, sact[p] + boff, isum[p], 0);
}

// Q2_K block at x (4-byte aligned in shared memory), fast decode. The 16 quant words are read once and
// masked in place: for shift l (values at bits 2l of each byte) w = qw & (0x03030303 << 2l) holds 4^l·q
// in unsigned bytes (≤ 192), dotted with the signed Q8_K bytes by dp4a.u32.s32 — one operation a word
// instead of a shift and a mask. Sub-block s = 8h + 2l + half adds (scale s)·4^l·sub_s to acc_l, and
// acc_l >> 2l is exactly Σ (scale s)·sub_s (a multiple of 4^l; |acc_l| < 2^25), so isum is
// q2k_piece's. The min terms Σ_s bsum_s·min_s go two sub-blocks per dp2a (int16 bsums × the min
// nibbles as bytes). Integer sums, exact in any grouping; the float finish is q2k_finish.
template <int P, bool kLean>
__device__ inline void q2k_terms_fast(const uint8_t* x, uint64_t boff, int c, const uint8_t* const* sact, float* out,
                                      int out_stride) {
  const uint32_t* xw = reinterpret_cast<const uint32_t*>(x);
  uint32_t sc[4], mn[4], qw[16];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t s = xw[i];  // scale/min bytes 4i … 4i + 3
    sc[i] = s & 0x0f0f0f0fu;
    mn[i] = (s >> 4) & 0x0f0f0f0fu;
  }
#pragma unroll
  for (int i = 0; i < 16; ++i) qw[i] = xw[4 + i];  // quant bytes 16 + 4i …
  int isum[P], summs[P];
#pragma unroll
  for (int p = 0; p < P; ++p) {
    isum[p] = summs[p] = 0;
    if (present<P, kLean>(p, c)) {
      const uint4* bs = reinterpret_cast<const uint4*>(sact[p] + boff + 260);  // bsums, 16-byte aligned
      const uint4 b0 = bs[0], b1 = bs[1];
      int m = __dp2a_lo(static_cast<int>(b0.x), static_cast<int>(mn[0]), 0);
      m = __dp2a_hi(static_cast<int>(b0.y), static_cast<int>(mn[0]), m);
      m = __dp2a_lo(static_cast<int>(b0.z), static_cast<int>(mn[1]), m);
      m = __dp2a_hi(static_cast<int>(b0.w), static_cast<int>(mn[1]), m);
      m = __dp2a_lo(static_cast<int>(b1.x), static_cast<int>(mn[2]), m);
      m = __dp2a_hi(static_cast<int>(b1.y), static_cast<int>(mn[2]), m);
      m = __dp2a_lo(static_cast<int>(b1.z), static_cast<int>(mn[3]), m);
      m = __dp2a_hi(static_cast<int>(b1.w), static_cast<int>(mn[3]), m);
      summs[p] = m;
    }
  }
#pragma unroll(P == 1 ? 4 : 1)
  for (int l = 0; l < 4; ++l) {  // unrolled above 1 pair, it spills (ptxas -v); l moves a mask, a byte select, a shift
    const uint32_t mask = 0x03030303u << (2 * l);
    int acc[P];
#pragma unroll
    for (int p = 0; p < P; ++p) acc[p] = 0;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        // Scale of sub-block s = 8h + 2l + half: byte s % 4 = 2(l % 2) + half of word s / 4 = 2h + l / 2.
        const uint32_t scw = (l & 2) ? sc[2 * h + 1] : sc[2 * h];
        const int scale = static_cast<int>(__byte_perm(scw, 0, 0x4440 + 2 * (l & 1) + half));
        uint32_t w[4];
#pragma unroll
        for (int m = 0; m < 4; ++m) w[m] = qw[8 * h + 4 * half + m] & mask;
#pragma unroll
        for (int p = 0; p < P; ++p) {
          if (present<P, kLean>(p, c)) {
            const uint4 v = *reinterpret_cast<const uint4*>(sact[p] + boff + 4 + 128 * h + 32 * l + 16 * half);
            int sub = dp4a_us(w[0], v.x, 0);
            sub = dp4a_us(w[1], v.y, sub);
            sub = dp4a_us(w[2], v.z, sub);
            sub = dp4a_us(w[3], v.w, sub);
            acc[p] += scale * sub;
          }
        }
      }
    }
#pragma unroll
    for (int p = 0; p < P; ++p) isum[p] += acc[p] >> (2 * l);
  }
#pragma unroll
  for (int p = 0; p < P; ++p)
    if (present<P, kLean>(p, c)) out[p * out_stride] = q2k_finish(x, sact[p] + boff, isum[p], summs[p]);
}

// Other types (Q8_0, Q4_K): QDot per pair.
template <GgmlType T, int P, bool kLean>
__device__ inline void generic_terms(const uint8_t* wb, uint64_t boff, int c, const uint8_t* const* sact, float* out,
                                     int out_stride) {
  using D = QDot<T>;
#pragma unroll
  for (int p = 0; p < P; ++p) {
    if (present<P, kLean>(p, c)) {
      const uint8_t* ab = sact[p] + boff;
      int i0 = 0, i1 = 0;
      D::part(wb, ab, 0, D::kParts, i0, i1, nullptr, nullptr);
      out[p * out_stride] = D::finish(wb, ab, i0, i1);
    }
  }
}

struct TileParams {
  const uint8_t* w;          // expert 0 (gate in gate_up mode)
  const uint8_t* w2;         // gate_up: up's expert 0
  uint64_t row_bytes, expert_bytes;
  uint32_t pitch;            // bytes between rows of a weight tile in shared memory (an odd number of words)
  int32_t nb;                // weight blocks per row
  int32_t n_tiles;           // output rows per expert / R
  const uint8_t* act;        // padded quantized activation rows (kActLead, act_stride, act_pitch)
  uint64_t act_stride, act_pitch;
  int32_t x_div;             // pair p reads activation row p / x_div
  const int32_t* order;      // pair ids grouped by expert (moe_group.cuh)
  const int32_t* groups;     // [n_groups][3] (expert, first, count)
  const int32_t* n_groups;   // device
  int32_t n_pairs;           // host bounds: entries of order, and of groups (≥ *n_groups)
  int32_t max_groups;
  float* y;                  // [pairs][y_stride]
  int64_t y_stride;
  const float* weights;      // gate_up: [pairs] routing weights
  float clamp;               // gate_up: SwiGLU clamp (0: none)
};

// Fills the fast IQ2_XXS tables (kFastCopies copies of the grid, then of the sign masks, entry e's copy
// c at kFastCopies·e + c) from `grid` (the 256 grid entries, constant memory), threads tid of n.
__device__ inline void fill_fast_tables(uint64_t* fgrid, const uint64_t* grid, int tid, int n) {
  uint64_t* fsign = fgrid + 256 * kFastCopies;
  for (int i = tid; i < 256 * kFastCopies; i += n) fgrid[i] = grid[i / kFastCopies];
  for (int i = tid; i < 128 * kFastCopies; i += n) fsign[i] = iq2xxs_sign_mask(i / kFastCopies);
}

// Fills the byte-permute decode's tables (the layout above) from `grid` (constant memory), threads tid of n
// (whole warps): lane l computes entry base + l's selectors once (entries 0 … 255 grid, 256 … 383 sign), then
// the warp stores each of its 32 entries' copies, lane l copy l (conflict-free rows of 32 words).
__device__ inline void fill_perm_tables(uint32_t* t, const uint64_t* grid, int tid, int n) {
  const int lane = tid % kWarp;
  for (int base = tid - lane; base < 256 + 128; base += n) {
    const int i = base + lane;
    const uint32_t v = i < 256 ? iq2xxs_grid_selectors(grid[i]) : iq2xxs_sign_selectors(static_cast<uint32_t>(i - 256));
    for (int c = 0; c < kWarp; ++c) {
      const uint32_t vc = __shfl_sync(0xffffffffu, v, c);
      const int e = base + c;
      t[(e < 256 ? 2 * kPermCopies * e : 2 * kPermCopies * (e - 256) + kPermCopies) + lane] = vc;
    }
  }
}

// A row's block terms tr[0 … nb) added from 0.0f in block order (the CPU's sequential sum).
__device__ inline float tile_row_sum(const float* tr, int nb) {
  float acc = 0;
#pragma unroll 4
  for (int b = 0; b < nb; ++b) acc += tr[b];
  return acc;
}

// One output of a (row, pair) from its sums (tile_row_sum; up: the up row's, gate_up mode only): ·0.125
// once per row for IQ2_XXS (as dot_iq2_xxs_ref), then in gate_up mode moe_swiglu_kernel's clamp and
// SwiGLU, operation for operation, times the pair's routing weight.
template <bool kIq2, bool kGateUp>
__device__ inline float tile_row_finish(float acc, float uv, float clamp, float weight) {
  if constexpr (kIq2) acc = 0.125f * acc;
  if constexpr (kGateUp) {
    if constexpr (kIq2) uv = 0.125f * uv;
    float gv = acc;
    if (clamp > 0) {
      gv = fminf(gv, clamp);
      uv = fminf(fmaxf(uv, -clamp), clamp);
    }
    acc = exact_silu(gv) * uv * weight;
  }
  return acc;
}

// tile_row_finish of a (row, pair) whose terms are tr[0 … nb) (and up's at tr[nb … 2nb) in gate_up mode).
template <bool kIq2, bool kGateUp>
__device__ inline float tile_row_value(const float* tr, int nb, float clamp, float weight) {
  const float acc = tile_row_sum(tr, nb);
  return tile_row_finish<kIq2, kGateUp>(acc, kGateUp ? tile_row_sum(tr + nb, nb) : 0.0f, clamp, weight);
}

}  // namespace ds4::backend::cuda
