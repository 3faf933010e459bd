// moe_tiles.cu — routed experts for decode steps of 1..kTileMaxTokens tokens (one session or a batch
// of sessions) near memory bandwidth: every (expert, row tile) is read from device memory once, with
// coalesced 16-byte copies into shared memory, and computed for all (token, slot) pairs routed to it.
//
// Launches: (1) prologue — block 0 groups the pairs by expert (moe_group.cuh, no host sync), the
// other blocks quantize x (Q8_K / Q8_0 act, bit-exact with the CPU); (2) gate+up+SwiGLU tiles;
// (3) the hidden rows quantized once per pair; (4) down tiles; moe() then
// adds the slots in slot order (its moe_sum_kernel).
//
// Tile kernels: work item = (group g = one expert and its pairs, tile of R output rows), grid-stride
// over a grid of about SMs × blocks per SM; the next item's weight rows are copied (cp.async,
// double-buffered) while the current one is computed, so each SM keeps a tile (≈ 22–34 KB) in flight.
// Per item and chunk of ≤ P pairs: thread per (row, weight block) computes the block's term for each
// pair — the integer part exact (weights decoded once into registers, then one dp4a run per pair), the
// block's float `finish` as dot_ref.cpp — into shared memory terms[pair][row][block]; then one thread
// per (row, pair) adds its terms from 0.0f in block order (the CPU's sequential sum, as every other
// quantized kernel here) and applies ·0.125 (IQ2_XXS), the SwiGLU and the routing weight exactly as
// moe_swiglu_kernel. A token's output is therefore the same bits on every path and at every batch
// size (src/backend/cuda/README.md numerics contract).
// Lean and first tile kernels (CudaBackendOptions::expert_tiles_lean, default lean): the same work and
// bits; the lean ones run each chunk's pair loop at the smallest P of 1, 2, 4, 8, 16 that holds it (a
// one-pair expert — most of them below 40 tokens — carries no guards for 15 absent pairs), read the
// IQ2_XXS grid from 4 interleaved copies and each Q2_K quant/scale word once; the first ones stay
// selectable to switch back if a GPU run finds a problem, and for before/after benchmarks.
// Fast tile kernels (CudaBackendOptions::expert_tiles_fast, default; with lean): the same work and bits
// at fewer instructions per weight — IQ2_XXS: a warp per block (gate and up rows of one block), the
// quant words by aligned loads and funnel shifts, per 8-value chunk one 64-bit grid and one 64-bit sign
// mask load from 16-copy conflict-free shared tables and 3 integer operations per 4 weights
// (quant/iq2xxs_words.h), one 512-thread block per SM sharing the 48 KB of tables; Q2_K: quants masked
// in place for unsigned-byte dp4a, min terms by dp2a; at most 8 (IQ2_XXS) / 4 (Q2_K) pairs a pass.
// Deliberately not here: prefill-sized batches (ops_gemm.cu's grouped GEMM), `exact` numerics and
// float weights (ops_matmul.cu), the slot sum and the dispatch (ops_moe.cu CudaBackend::moe).
#include <algorithm>
#include <type_traits>

#include "backend/cuda/act_quant.cuh"
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_impl.h"
#include "backend/cuda/moe_group.cuh"
#include "backend/cuda/qdot.cuh"
#include "quant/iq2xxs_tables.h"
#include "quant/iq2xxs_words.h"

namespace ds4::backend::cuda {

namespace {

__constant__ uint64_t c_grid[256];

constexpr int kThreads = 256;  // threads of a tile block (the fast IQ2_XXS kernels: threads_of)
// gate/up: 16 rows of gate and 16 of up per item (2 × 16 × 1060 B = 33 KB at Flash shapes), 16 pairs
// per chunk (16 × 16 chains = kThreads), 2 blocks per SM; down: 32 rows (21 KB), 8 pairs per chunk.
constexpr int kGuRows = 16;
constexpr int kDnRows = 32;
constexpr uint64_t kMaxTileSmem = 200 * 1024;  // dynamic shared memory of one tile block
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
__device__ inline void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ inline void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
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
    uint32_t w[8];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      // Byte offsets of entry e in this lane's copy: e · 128 (kFastCopies entries of 8 bytes apart).
      const uint32_t go = __byte_perm(a0, 0, 0x4440 + k) << 7;
      const uint32_t so = (k == 0 ? a1 << 7 : a1 >> (7 * k - 7)) & (127u << 7);
      const uint64_t gr = *reinterpret_cast<const uint64_t*>(gl + go);
      const uint64_t sm = *reinterpret_cast<const uint64_t*>(sl + so);
      w[2 * k] = iq2xxs_signed_word(static_cast<uint32_t>(gr), static_cast<uint32_t>(sm));
      w[2 * k + 1] = iq2xxs_signed_word(static_cast<uint32_t>(gr >> 32), static_cast<uint32_t>(sm >> 32));
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
  float* y;                  // [pairs][y_stride]
  int64_t y_stride;
  const float* weights;      // gate_up: [pairs] routing weights
  float clamp;               // gate_up: SwiGLU clamp (0: none)
};

template <bool kGateUp>
constexpr int rows_of() {
  return kGateUp ? kGuRows : kDnRows;
}

// Shared-memory row pitch of a weight tile: rows of whole 4-byte words land at an odd number of words,
// so the R lanes reading the same block of R consecutive rows hit R different banks; other rows
// (IQ2_XXS or Q8_0 with an odd block count: 2-byte aligned) keep the device layout (pitch = row bytes,
// the tile copied as one run of words).
uint32_t tile_pitch(uint64_t row_bytes) {
  if (row_bytes % 4 != 0) return static_cast<uint32_t>(row_bytes);
  return static_cast<uint32_t>(4 * ((row_bytes / 4) | 1));
}

// Tile kernel variants: the first ones (CudaBackendOptions::expert_tiles_lean = false), the lean ones
// (expert_tiles_fast = false) and the fast ones (default).
constexpr int kFirst = 0, kLeanVar = 1, kFast = 2;

// The fast IQ2_XXS kernels hold 48 KB of tables per block (kFastTableBytes): one block of 512 threads per
// SM shares them (16 warps, as two 256-thread blocks gave); every other kernel runs 256 threads, 2 per SM.
template <GgmlType T, int kVar>
constexpr bool fast_iq2() {
  return kVar == kFast && T == GgmlType::IQ2_XXS;
}
template <GgmlType T, int kVar>
constexpr int threads_of() {
  return fast_iq2<T, kVar>() ? 2 * kThreads : kThreads;
}

// Dynamic shared memory: (fast IQ2_XXS: the tables), two weight tiles (R rows of each matrix at `pitch`),
// then terms [P][R][V + 1] floats (V = blocks per row, both matrices in gate_up mode; the +1 pitch
// spreads the (row, pair) chains over the banks), 16 spare bytes (iq2_terms_fast's last word).
// fast_tables: the kernel is a fast IQ2_XXS one (fast_iq2).
uint64_t tile_smem(bool gate_up, bool fast_tables, uint64_t row_bytes, int nb) {
  const int R = gate_up ? rows_of<true>() : rows_of<false>(), P = kThreads / R;
  const uint64_t tile = (gate_up ? 2 : 1) * R * static_cast<uint64_t>(tile_pitch(row_bytes));
  const int V = gate_up ? 2 * nb : nb;
  return (fast_tables ? kFastTableBytes : 0) + 2 * tile + static_cast<uint64_t>(P) * R * (V + 1) * sizeof(float) + 16;
}

// kVar: kFirst, kLeanVar or kFast (above). P pairs per chunk (P × R = 256 chains) in every variant.
template <GgmlType T, bool kGateUp, int kVar>
__global__ void __launch_bounds__(threads_of<T, kVar>(), fast_iq2<T, kVar>() ? 1 : 2) moe_tile_kernel(TileParams p) {
  constexpr int R = rows_of<kGateUp>(), P = kThreads / R;
  static_assert(P == 8 || P == 16, "the lean dispatch below covers chunks of up to 8 or 16 pairs");
  constexpr bool kIq2 = T == GgmlType::IQ2_XXS;
  constexpr bool kLean = kVar != kFirst;
  constexpr bool kFastIq2 = fast_iq2<T, kVar>();
  constexpr int kBlockThreads = threads_of<T, kVar>();
  constexpr int kCopies = kVar == kLeanVar ? kGridCopies : 1;
  using D = QDot<T>;
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ uint64_t grid[kIq2 && !kFastIq2 ? 256 * kCopies : 1];
  __shared__ const uint8_t* sact[P];
  __shared__ int32_t spair[P];
  const int tid = threadIdx.x, lane = tid % kWarp, wid = tid / kWarp;
  uint8_t* const tiles = smem + (kFastIq2 ? kFastTableBytes : 0);
  uint64_t* const fgrid = reinterpret_cast<uint64_t*>(smem);  // fast IQ2_XXS tables (kFastCopies each)
  uint64_t* const fsign = fgrid + 256 * kFastCopies;
  const uint64_t* lane_grid = grid + lane % kCopies;
  // fast: a half-warp's lanes on 16 copies
  [[maybe_unused]] const uint8_t* lane_fgrid = reinterpret_cast<const uint8_t*>(fgrid + lane % kFastCopies);
  [[maybe_unused]] const uint8_t* lane_fsign = reinterpret_cast<const uint8_t*>(fsign + lane % kFastCopies);
  const int nb = p.nb, V = kGateUp ? 2 * nb : nb, TS = V + 1;
  const uint32_t mat = R * p.pitch;  // one matrix's rows in a tile
  const uint32_t tile = (kGateUp ? 2 : 1) * mat;
  const uint32_t row_words = static_cast<uint32_t>(p.row_bytes / 4);
  float* terms = reinterpret_cast<float*>(tiles + 2 * tile);
  const int64_t items = static_cast<int64_t>(*p.n_groups) * p.n_tiles;
  // Copies item's R rows of each matrix (contiguous in the expert) to dst, row r at r·pitch: warp w
  // takes rows w, w + warps, …, its lanes 128 consecutive bytes per instruction (or, pitch = row bytes,
  // the whole run of R rows word by word).
  auto issue = [&](int64_t item, uint8_t* dst) {
    const int64_t g = item / p.n_tiles, t = item % p.n_tiles;
    const uint64_t off = static_cast<uint64_t>(p.groups[3 * g]) * p.expert_bytes +
                         static_cast<uint64_t>(t) * R * p.row_bytes;
    for (int m = 0; m < (kGateUp ? 2 : 1); ++m) {
      const uint8_t* src = (m == 0 ? p.w : p.w2) + off;
      uint8_t* d = dst + m * mat;
      if (p.pitch == p.row_bytes) {
        for (uint32_t j = tid; j < mat / 4; j += kBlockThreads) cp_async4(d + 4 * j, src + 4 * j);
      } else {
        for (int r = wid; r < R; r += kBlockThreads / kWarp) {
          const uint8_t* sr = src + r * p.row_bytes + 4 * lane;  // pointers stepped, not recomputed per word
          uint8_t* dr = d + r * p.pitch + 4 * lane;
          for (uint32_t j = lane; j < row_words; j += kWarp, sr += 4 * kWarp, dr += 4 * kWarp) cp_async4(dr, sr);
        }
      }
    }
  };
  int64_t item = blockIdx.x;
  int buf = 0;
  if (item < items) issue(item, tiles);
  cp_async_commit();
  // The IQ2_XXS tables, while the first tile is in flight; visible after the first barrier below.
  if constexpr (kFastIq2) {
    for (int i = tid; i < 256 * kFastCopies; i += kBlockThreads) fgrid[i] = c_grid[i / kFastCopies];
    for (int i = tid; i < 128 * kFastCopies; i += kBlockThreads) fsign[i] = iq2xxs_sign_mask(i / kFastCopies);
  } else if constexpr (kIq2) {  // entry e's copy c at e·kCopies + c
    for (int i = tid; i < 256 * kCopies; i += kBlockThreads) grid[i] = c_grid[i / kCopies];
  }
  for (; item < items; item += gridDim.x) {
    const int64_t next = item + gridDim.x;
    if (next < items) issue(next, tiles + (buf ^ 1) * tile);
    cp_async_commit();
    cp_async_wait<1>();  // this item's tile has landed (the next one may still be in flight)
    __syncthreads();
    const uint8_t* wt = tiles + buf * tile;
    const int64_t g = item / p.n_tiles;
    const int64_t row0 = (item % p.n_tiles) * R;
    const int32_t first = p.groups[3 * g + 1], count = p.groups[3 * g + 2];
    for (int32_t s0 = 0; s0 < count; s0 += P) {
      const int c = count - s0 < P ? count - s0 : P;
      if (tid < c) {
        const int32_t pr = p.order[first + s0 + tid];
        spair[tid] = pr;
        sact[tid] = p.act + kActLead + static_cast<uint64_t>(pr / p.x_div) * p.act_stride;
      }
      __syncthreads();
      // Block terms: thread per (row r, virtual block vb), consecutive threads on consecutive rows of
      // one block (so a warp's activation loads are one or two broadcast addresses); vb < nb is gate's
      // block vb (or down's), vb ≥ nb up's block vb − nb. Pair q's term lands at terms[(q·R + r)·TS + vb].
      // Q (a std::integral_constant): the pair loop's length; pairs q0 … q0 + cs − 1 of the chunk.
      // The fast IQ2_XXS kernels map a warp to one block b instead: lanes 0–15 gate rows 0–15 and lanes
      // 16–31 up rows 0–15 (gate_up), or lanes = down rows 0–31 — one activation address per warp, and
      // every lane the same 2-byte offset into its block (rows at pitch ≡ 0 mod 4 at Flash shapes).
      auto block_terms = [&](auto q_pairs, int q0, int cs) {
        constexpr int Q = decltype(q_pairs)::value;
        const uint8_t* const* sa = sact + q0;
        float* const tq = terms + q0 * R * TS;
        if constexpr (kFastIq2) {
          static_assert(kGateUp ? R == kWarp / 2 : R == kWarp, "a warp covers one block of every row");
          for (int u = tid; u < kWarp * nb; u += kBlockThreads) {
            const int b = u / kWarp, l = u % kWarp;
            const bool up = kGateUp && l >= R;
            const int r = l % R;
            const uint8_t* wb = wt + (up ? mat : 0) + r * p.pitch + b * D::kWBytes;
            iq2_terms_fast<Q, kLean>(wb, static_cast<uint64_t>(b) * p.act_pitch, cs, sa, lane_fgrid, lane_fsign,
                                     tq + r * TS + (up ? nb + b : b), R * TS);
          }
        } else {
          for (int u = tid; u < R * V; u += kBlockThreads) {
            const int r = u % R, vb = u / R;
            const bool up = kGateUp && vb >= nb;
            const int b = up ? vb - nb : vb;
            const uint8_t* wb = wt + (up ? mat : 0) + r * p.pitch + b * D::kWBytes;
            float* out = tq + r * TS + vb;
            const uint64_t boff = static_cast<uint64_t>(b) * p.act_pitch;
            if constexpr (kIq2) iq2_terms<Q, kLean>(wb, boff, cs, sa, lane_grid, out, R * TS);
            else if constexpr (T == GgmlType::Q2_K && kVar == kFast) q2k_terms_fast<Q, kLean>(wb, boff, cs, sa, out, R * TS);
            else if constexpr (T == GgmlType::Q2_K) q2k_terms<Q, kLean>(wb, boff, cs, sa, out, R * TS);
            else generic_terms<T, Q, kLean>(wb, boff, cs, sa, out, R * TS);
          }
        }
      };
      if constexpr (kVar == kFast) {  // c is the same in the whole block: no divergence
        // At most kMaxQ pairs a pass (more spill at 128 registers, ptxas -v: IQ2_XXS 16, Q2_K 8), the
        // block decoded again for a further pass; each pass at the smallest Q of 1, 2, 4, 8 that holds it.
        constexpr int kMaxQ = T == GgmlType::Q2_K ? 4 : 8;
        for (int q0 = 0; q0 < c; q0 += kMaxQ) {
          const int cs = c - q0 < kMaxQ ? c - q0 : kMaxQ;
          if (cs == 1) block_terms(std::integral_constant<int, 1>{}, q0, cs);
          else if (cs == 2) block_terms(std::integral_constant<int, 2>{}, q0, cs);
          else if (cs <= 4 || kMaxQ == 4) block_terms(std::integral_constant<int, 4>{}, q0, cs);
          else block_terms(std::integral_constant<int, kMaxQ>{}, q0, cs);
        }
      } else if constexpr (kLean) {
        if (c == 1) block_terms(std::integral_constant<int, 1>{}, 0, c);
        else if (c == 2) block_terms(std::integral_constant<int, 2>{}, 0, c);
        else if (c <= 4) block_terms(std::integral_constant<int, 4>{}, 0, c);
        else if (P == 8 || c <= 8) block_terms(std::integral_constant<int, 8>{}, 0, c);
        else block_terms(std::integral_constant<int, P>{}, 0, c);
      } else {
        block_terms(std::integral_constant<int, P>{}, 0, c);
      }
      __syncthreads();
      // Chains: thread per (pair q, row r) adds its terms from 0.0f in block order (consecutive
      // threads take consecutive rows: terms reads on distinct banks, coalesced output writes).
      const int q = tid / R, r = tid % R;
      if (q < c) {
        const float* tr = terms + (q * R + r) * TS;
        const int32_t pair = spair[q];
        float acc = 0;
        for (int b = 0; b < nb; ++b) acc += tr[b];
        if constexpr (kIq2) acc = 0.125f * acc;  // once per row, as dot_iq2_xxs_ref
        if constexpr (kGateUp) {
          float uv = 0;
          for (int b = 0; b < nb; ++b) uv += tr[nb + b];
          if constexpr (kIq2) uv = 0.125f * uv;
          float gv = acc;
          if (p.clamp > 0) {  // moe_swiglu_kernel's expression, operation for operation
            gv = fminf(gv, p.clamp);
            uv = fminf(fmaxf(uv, -p.clamp), p.clamp);
          }
          acc = gv / (1.0f + expf(-gv)) * uv * p.weights[pair];
        }
        p.y[static_cast<int64_t>(pair) * p.y_stride + row0 + r] = acc;
      }
      __syncthreads();  // spair, sact and terms are rewritten by the next chunk
    }
    buf ^= 1;
  }
  cp_async_wait<0>();
}

// One warp quantizes activation block `blk` of x [rows][cols] (row stride x_stride) into the padded
// layout (Q8_K, or Q8_0 act when kQ80), bit-exact with quantize_act's kernels.
template <bool kQ80>
__device__ inline void quantize_padded(const float* x, int64_t x_stride, int64_t rows, int64_t cols, uint8_t* act,
                                       int64_t blk, int lane) {
  constexpr int kElems = kQ80 ? kQK8_0 : kQK_K;
  constexpr uint64_t kPitch = kQ80 ? kQ80Pitch : kQ8KPitch;
  const int64_t nb = cols / kElems;
  if (blk >= rows * nb) return;  // whole warps: blk is the same for every lane
  const int64_t r = blk / nb, b = blk % nb;
  uint8_t* o = act + kActLead + (r * nb + b) * kPitch;
  if constexpr (kQ80) {
    quantize_q8_0_warp(x[r * x_stride + b * kQK8_0 + lane], lane, o);
  } else {
    const float* src = x + r * x_stride + b * kQK_K + 8 * lane;
    float v[8];
    for (int i = 0; i < 8; ++i) v[i] = src[i];
    quantize_q8_K_warp(v, lane, o);
  }
}

// Block 0 (kMaxGroupExperts threads): pairs grouped by expert. Blocks ≥ 1: x [n][dim] quantized.
struct PrologueParams {
  const int32_t* ids;
  int32_t n_pairs, n_expert;
  int32_t *order, *groups, *n_groups;
  const float* x;
  int64_t n, dim;
  uint8_t* act;
};

template <bool kQ80>
__global__ void __launch_bounds__(kMaxGroupExperts) moe_prologue_kernel(PrologueParams q) {
  if (blockIdx.x == 0) {
    group_pairs_block(q.ids, q.n_pairs, q.n_expert, q.order, q.groups, q.n_groups);
    return;
  }
  const int64_t blk = static_cast<int64_t>(blockIdx.x - 1) * (kMaxGroupExperts / kWarp) + threadIdx.x / kWarp;
  quantize_padded<kQ80>(q.x, q.dim, q.n, q.dim, q.act, blk, threadIdx.x % kWarp);
}

// The hidden rows h [pairs][ff] quantized once per pair, one warp per block.
template <bool kQ80>
__global__ void moe_quantize_hidden_kernel(const float* h, int64_t pairs, int64_t ff, uint8_t* act) {
  const int64_t blk = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  quantize_padded<kQ80>(h, ff, pairs, ff, act, blk, threadIdx.x % kWarp);
}

bool tile_type(GgmlType t) {
  return t == GgmlType::Q8_0 || t == GgmlType::Q2_K || t == GgmlType::Q4_K || t == GgmlType::IQ2_XXS;
}
int elems_of(GgmlType t) { return t == GgmlType::Q8_0 ? kQK8_0 : kQK_K; }
uint64_t act_pitch_of(GgmlType t) { return t == GgmlType::Q8_0 ? kQ80Pitch : kQ8KPitch; }

// Whether one projection can run as tiles of R rows: whole tiles of whole 4-byte words (the copies),
// 4-byte aligned rows for the types read in 32-bit words (Q2_K, Q4_K).
bool tiles_fit(const ExpertWeights& w, int64_t rows, int R) {
  const GgmlType t = w.first.type;
  return rows % R == 0 && rows / R <= 0x7fffffff && reinterpret_cast<uintptr_t>(w.first.data) % 4 == 0 &&
         (R * w.first.row_bytes) % 4 == 0 && w.expert_bytes % 4 == 0 &&
         (w.first.row_bytes % 4 == 0 || t == GgmlType::IQ2_XXS || t == GgmlType::Q8_0);
}

template <GgmlType T, bool kGateUp, int kVar>
bool launch_tiles(CudaBackend& be, const TileParams& p, int64_t items_bound, cudaStream_t s) {
  // ≤ kMaxTileSmem (moe_tiles checks), the limit init_tile_kernels set
  const uint64_t smem = tile_smem(kGateUp, fast_iq2<T, kVar>(), p.row_bytes, p.nb);
  constexpr int threads = threads_of<T, kVar>();
  auto kernel = moe_tile_kernel<T, kGateUp, kVar>;
  int per_sm = 0, sms = 0;
  if (!be.check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem), "moe tiles: occupancy") ||
      !be.check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, be.device()), "moe tiles: SM count"))
    return false;
  // Items are grid-stride over at most one wave of blocks; the grid divides the (host-bound) item
  // count evenly, so no block takes one item more than the others.
  const int64_t cap = std::max<int64_t>(1, int64_t{std::max(per_sm, 1)} * sms);
  const int64_t per_block = (items_bound + cap - 1) / cap;
  const int64_t blocks = std::max<int64_t>(1, (items_bound + per_block - 1) / per_block);
  moe_tile_kernel<T, kGateUp, kVar><<<static_cast<unsigned>(blocks), threads, smem, s>>>(p);
  return be.launched(kGateUp ? "moe gate/up tiles" : "moe down tiles");
}

template <bool kGateUp, int kVar>
bool launch_tiles_of(CudaBackend& be, GgmlType t, const TileParams& p, int64_t items_bound, cudaStream_t s) {
  switch (t) {
    case GgmlType::Q8_0: return launch_tiles<GgmlType::Q8_0, kGateUp, kVar>(be, p, items_bound, s);
    case GgmlType::Q2_K: return launch_tiles<GgmlType::Q2_K, kGateUp, kVar>(be, p, items_bound, s);
    case GgmlType::Q4_K: return launch_tiles<GgmlType::Q4_K, kGateUp, kVar>(be, p, items_bound, s);
    default: return launch_tiles<GgmlType::IQ2_XXS, kGateUp, kVar>(be, p, items_bound, s);
  }
}

template <bool kGateUp>
bool launch_tiles_of(CudaBackend& be, int var, GgmlType t, const TileParams& p, int64_t items_bound, cudaStream_t s) {
  switch (var) {
    case kFirst: return launch_tiles_of<kGateUp, kFirst>(be, t, p, items_bound, s);
    case kLeanVar: return launch_tiles_of<kGateUp, kLeanVar>(be, t, p, items_bound, s);
    default: return launch_tiles_of<kGateUp, kFast>(be, t, p, items_bound, s);
  }
}

template <GgmlType T>
cudaError_t allow_tile_smem() {
  cudaError_t e = cudaSuccess;
  for (auto kernel : {moe_tile_kernel<T, true, kFast>, moe_tile_kernel<T, false, kFast>,
                      moe_tile_kernel<T, true, kLeanVar>, moe_tile_kernel<T, false, kLeanVar>,
                      moe_tile_kernel<T, true, kFirst>, moe_tile_kernel<T, false, kFirst>})
    if (e == cudaSuccess)
      e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kMaxTileSmem));
  return e;
}

}  // namespace

cudaError_t init_tile_kernels() {
  cudaError_t e = cudaMemcpyToSymbol(c_grid, kIq2xxsGrid, sizeof(kIq2xxsGrid));
  if (e == cudaSuccess) e = allow_tile_smem<GgmlType::Q8_0>();
  if (e == cudaSuccess) e = allow_tile_smem<GgmlType::Q2_K>();
  if (e == cudaSuccess) e = allow_tile_smem<GgmlType::Q4_K>();
  if (e == cudaSuccess) e = allow_tile_smem<GgmlType::IQ2_XXS>();
  return e;
}

bool CudaBackend::moe_tiles(const MoeArgs& a, float* h, float* y) {
  const GgmlType gt = a.gate.first.type, dt = a.down.first.type;
  if (a.numerics != MatmulNumerics::ds4 || a.n > kTileMaxTokens || !tile_type(gt) || a.up.first.type != gt ||
      !tile_type(dt) || a.gate.n_expert != a.up.n_expert || a.gate.n_expert != a.down.n_expert ||
      a.gate.n_expert > kMaxGroupExperts || a.gate.expert_bytes != a.up.expert_bytes ||
      a.gate.first.row_bytes != a.up.first.row_bytes || a.dim % elems_of(gt) != 0 || a.ff % elems_of(dt) != 0 ||
      !tiles_fit(a.gate, a.ff, kGuRows) || !tiles_fit(a.up, a.ff, kGuRows) || !tiles_fit(a.down, a.dim, kDnRows))
    return false;
  const int nb_gu = static_cast<int>(a.dim / elems_of(gt)), nb_d = static_cast<int>(a.ff / elems_of(dt));
  const int var = !expert_tiles_lean_ ? kFirst : expert_tiles_fast_ ? kFast : kLeanVar;
  if (tile_smem(true, var == kFast && gt == GgmlType::IQ2_XXS, a.gate.first.row_bytes, nb_gu) > kMaxTileSmem ||
      tile_smem(false, var == kFast && dt == GgmlType::IQ2_XXS, a.down.first.row_bytes, nb_d) > kMaxTileSmem)
    return false;
  const int64_t pairs = a.n * a.k;
  const int32_t n_expert = a.gate.n_expert;
  const int32_t max_groups = static_cast<int32_t>(std::min<int64_t>(pairs, n_expert));
  const uint64_t words = static_cast<uint64_t>(pairs) + 3ull * max_groups + 1;
  const uint64_t x_stride = nb_gu * act_pitch_of(gt), h_stride = nb_d * act_pitch_of(dt);
  if (!ensure(moe_groups_, words * sizeof(int32_t), "expert groups") ||
      !ensure(moe_act_, kActLead + x_stride * a.n, "quantized expert inputs") ||
      !ensure(moe_h_act_, kActLead + h_stride * pairs, "quantized expert hidden rows"))
    return true;  // error recorded
  auto* order = static_cast<int32_t*>(moe_groups_.ptr);
  int32_t* groups = order + pairs;
  int32_t* n_groups = groups + 3 * max_groups;
  auto* x_act = static_cast<uint8_t*>(moe_act_.ptr);
  auto* h_act = static_cast<uint8_t*>(moe_h_act_.ptr);
  cudaStream_t s = stream();

  PrologueParams q{a.ids, static_cast<int32_t>(pairs), n_expert, order, groups, n_groups, a.x, a.n, a.dim, x_act};
  const unsigned pro_blocks = 1 + grid_for(a.n * nb_gu, kMaxGroupExperts / kWarp);
  if (gt == GgmlType::Q8_0) moe_prologue_kernel<true><<<pro_blocks, kMaxGroupExperts, 0, s>>>(q);
  else moe_prologue_kernel<false><<<pro_blocks, kMaxGroupExperts, 0, s>>>(q);
  if (!launched("moe prologue (group pairs, quantize x)")) return true;

  // gate/up + SwiGLU: pair p reads token p / k; h [pairs][ff].
  TileParams p{};
  p.w = static_cast<const uint8_t*>(a.gate.first.data);
  p.w2 = static_cast<const uint8_t*>(a.up.first.data);
  p.row_bytes = a.gate.first.row_bytes;
  p.expert_bytes = a.gate.expert_bytes;
  p.pitch = tile_pitch(p.row_bytes);
  p.nb = nb_gu;
  p.n_tiles = static_cast<int32_t>(a.ff / kGuRows);
  p.act = x_act;
  p.act_stride = x_stride;
  p.act_pitch = act_pitch_of(gt);
  p.x_div = a.k;
  p.order = order;
  p.groups = groups;
  p.n_groups = n_groups;
  p.y = h;
  p.y_stride = a.ff;
  p.weights = a.weights;
  p.clamp = a.clamp;
  if (!launch_tiles_of<true>(*this, var, gt, p, int64_t{max_groups} * p.n_tiles, s)) return true;

  // The hidden rows quantized once per pair. Rows of pairs with a bad id hold whatever h had: they are
  // quantized but belong to no group (the slot sum gives those tokens NaN).
  const unsigned hq = grid_for(pairs * nb_d * kWarp, 256);
  if (dt == GgmlType::Q8_0) moe_quantize_hidden_kernel<true><<<hq, 256, 0, s>>>(h, pairs, a.ff, h_act);
  else moe_quantize_hidden_kernel<false><<<hq, 256, 0, s>>>(h, pairs, a.ff, h_act);
  if (!launched("moe quantize hidden rows")) return true;

  // down: pair p reads its own hidden row; y [pairs][dim].
  p.w = static_cast<const uint8_t*>(a.down.first.data);
  p.w2 = nullptr;
  p.row_bytes = a.down.first.row_bytes;
  p.expert_bytes = a.down.expert_bytes;
  p.pitch = tile_pitch(p.row_bytes);
  p.nb = nb_d;
  p.n_tiles = static_cast<int32_t>(a.dim / kDnRows);
  p.act = h_act;
  p.act_stride = h_stride;
  p.act_pitch = act_pitch_of(dt);
  p.x_div = 1;
  p.y = y;
  p.y_stride = a.dim;
  p.weights = nullptr;
  p.clamp = 0;
  launch_tiles_of<false>(*this, var, dt, p, int64_t{max_groups} * p.n_tiles, s);
  return true;
}

}  // namespace ds4::backend::cuda
