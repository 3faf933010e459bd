// moe_tiles.cu — routed experts for decode steps of 1..kTileMaxTokens tokens (one session or a batch
// of sessions) near memory bandwidth: every (expert, row tile) is read from device memory once, with
// coalesced 16-byte copies into shared memory, and computed for all (token, slot) pairs routed to it.
//
// Launches: (1) prologue — block 0 groups the pairs by expert (moe_group.cuh, no host sync), the
// other blocks quantize x (Q8_K / Q8_0 act, bit-exact with the CPU); (2) gate+up+SwiGLU tiles;
// (3) the hidden rows quantized once per pair; (4) down tiles; moe() then
// adds the slots in slot order (its moe_sum_kernel). One token with CudaBackendOptions::expert_one_token
// V + 10·F, F ≥ 1 (moe() asks by y == nullptr): the down kernel adds the slots itself, F = 3, 4 also
// quantizes the hidden rows (no (3)), gate/up variant 7 needs no (1) (moe_one_token.cu).
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
#include "backend/cuda/mma_s8.cuh"
#include "backend/cuda/moe_group.cuh"
#include "backend/cuda/moe_terms.cuh"
#include "backend/cuda/moe_row_tiles.h"
#include "backend/cuda/moe_one_lean.h"
#include "backend/cuda/moe_one_token.h"
#include "backend/cuda/moe_warp_tiles.h"
#include "quant/iq2xxs_tables.h"

namespace ds4::backend::cuda {

namespace {

__constant__ uint64_t c_grid[256];

constexpr int kThreads = 256;  // threads of a tile block (the fast IQ2_XXS kernels: threads_of)
// gate/up: 16 rows of gate and 16 of up per item (2 × 16 × 1060 B = 33 KB at Flash shapes), 16 pairs
// per chunk (16 × 16 chains = kThreads), 2 blocks per SM; down: 32 rows (21 KB), 8 pairs per chunk.
constexpr int kGuRows = 16;
constexpr int kDnRows = 32;
constexpr uint64_t kMaxTileSmem = 200 * 1024;  // dynamic shared memory of one tile block
// Routed experts of up to this many tokens take the warp tiles by default (expert_tiles_warp_max = -1):
// the H200 measured them faster at 1 and 8 tokens (2026-11-30 07:30 UTC, µs per layer: 45.3 vs 52.7,
// 277 vs 288) and slower at 32 and 64 (~1,010 vs 879, ~1,865 vs 1,404: a lane per weight block reads
// 16–32 different activation blocks per load, which costs once several pairs share an expert).
constexpr int64_t kWarpTilesAutoMax = 8;
// Routed experts of at least this many tokens take the row tiles by default (expert_row_tiles_min = -1;
// they go before the warp tiles): the H200 measured them faster at 8, 16, 32 and 64 tokens and slower at 1
// (2026-11-30 09:08 UTC, µs per layer: 249.7 vs 272.8 warp tiles at 8; 417.1, 686.1, 1,202.6 vs the block
// tiles' 513.3, 875.6, 1,401.5 at 16, 32, 64; 47.0 vs 41.3 at 1).
constexpr int64_t kRowTilesAutoMin = 8;
// One token takes moe_one_token.cu's kernels by default (expert_one_token = -1; the value is the gate/up
// variant, 0 = the warp tiles), variant 4 (two rows of gate and up per item) with the down kernel as a
// programmatic dependent launch (expert_tiles_pdl = -1): the H200 measured them bit for bit equal to the CPU
// and the block tiles (CudaMoeTiles.OneToken*, OutOfRangeIdGivesNaN: variants 1–4, variant 1 with PDL) and
// faster (2026-11-30 12:50 UTC, whole op µs per layer at n = 1: variant 2 37.1 with PDL, 41.3 without, vs
// 41.8 for the warp tiles with PDL; session 9 W1, 15:45 UTC: variant 4 + PDL 39.5 cold / 36.7 warm vs
// variant 2's 41.7 / 38.4, ncu cold gate/up 22.8 vs 24.7).
// Session 10 W2 (moe1): 27 = gate/up variant 7 (no prologue launch) with the down kernel adding the slots,
// two warps a tile (F = 2): bit for bit with the CPU and the block tiles (CudaMoeTiles one-token cases, 90
// PARITY lines) and faster, whole op at n = 1 (2026-11-30 19:35 UTC): 31.9 µs cold / 29.9 warm against variant
// 4's 38.5–38.9 / 35.8–37.0 — 3 launches instead of 5.
// Session 11 W1 (moe1, 21:52 UTC): 58 = gate/up variant 8 (moe_one_lean.cu: a lane per IQ2_XXS block, compile-time
// shapes) with the fold-5 down kernel — bit for bit with the CPU and the block tiles (170 PARITY lines, every k 1 … 8,
// bad ids) and faster: whole op at n = 1 27.96 / 27.93 µs cold against 31.62 / 31.79 for 27 (warm 26.55 / 26.26 vs
// 28.98 / 29.52); ncu gate/up 19.4–20.2 µs (8.14 M warp instructions) vs 22.4–23.6 (10.69 M); decode steps of a
// 4-layer flash-q2 file at 2K 0.845–0.850 ms vs 0.866–0.869 (three interleaved rounds).
// Session 11 W2 (22:05 UTC, kIq2xxsPermPos in a register): 59 = gate/up variant 9 (16 warps × 2 stages) with fold 5 —
// bit for bit (171 PARITY lines, the default side and n = 1 / 40 / 64 included) and the fastest: whole op 27.77 /
// 27.50 µs cold against 58's 28.98 / 27.94 and 27's 32.10 / 31.76; ncu gate/up 17.3 µs (7.55 M instructions) vs
// variant 8's 19.9 (7.51 M); steps 0.847 / 0.850 / 0.848 ms vs 58's 0.850 / 0.849 / 0.851 (27 vs 58 in the same run:
// 0.884 / 0.884 / 0.880 vs 0.875 / 0.870 / 0.862).
// Session 12 (moe1, W2 00:42 / W3 00:55 UTC 2026-12-01): 559 = 59 with the gate/up kernel's evict_last L2 prefetch of
// the token's down weights once a warp's last item has landed — bit for bit (221 and 187 PARITY lines) and faster in
// decode steps of a 4-layer flash-q2 file at 2K (engine options): 0.7956 vs 0.7983 ms (five rounds, 5 of 5) and
// 0.8020 vs 0.8050 (ten, 8 of 10), ≈ −0.7 µs a layer, though the op alone, called back to back, is 0.5–1.5 µs slower.
// Session 13 (moe1, W2–W4 ~04:15–04:31 UTC 2026-12-01): 3559 = 559 with the gate/up decode's selector OR as an IMAD and
// half-block lanes (moe_one_lean.cu Q = 3) — bit for bit (272 and 221 PARITY lines, 0 FAIL), the op 1.0 µs faster
// (26.9 vs 28.0–28.6 µs), decode steps of a 4-layer flash-q2 at 2K faster in all five rounds of W4 (four sides
// each, 20 samples: 0.8068 vs 0.8121 ms, −2.2 … −11.9 µs a round) and even in W3 (0.8035 vs 0.8037, ten samples).
constexpr int kOneTokenAuto = 3559;
constexpr bool kOneTokenPdlAuto = true;
// The warp tiles' down launch as a programmatic dependent by default (expert_tiles_pdl = -1): the H200 measured
// it faster at 1, 2 and 7 tokens (2026-11-30 12:13 UTC, µs per layer: 42.5 vs 43.6, 75.4 vs 77.2, 250.2 vs
// 255.5) with the CPU's bits (CudaMoeTiles.OneTokenKernelsSmallBatches at n = 1, 2, 5, OutOfRangeIdGivesNaN);
// the row tiles (8 tokens and more) stay plain.
constexpr bool kWarpTilesPdlAuto = true;
// The row tiles' byte-permute decode (expert_row_tiles_perm) up to this many tokens: the H200 measured it
// faster at 8 and 16 tokens and slower at 32 and 64 (2026-11-30 09:47 UTC, µs per layer with the second
// shapes: 197.0 vs 205.5, 343.4 vs 353.8; 627.1 vs 587.9, 1,032.8 vs 960.0).
constexpr int64_t kRowPermMax = 16;
// The row tiles' balanced expert-major runs (expert_row_tiles_v3 = -1), with the byte-permute decode at every n.
constexpr bool kRowTilesV3Auto = false;

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
    fill_fast_tables(fgrid, c_grid, tid, kBlockThreads);
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
        p.y[static_cast<int64_t>(pair) * p.y_stride + row0 + r] =
            tile_row_value<kIq2, kGateUp>(tr, nb, p.clamp, kGateUp ? p.weights[pair] : 0.0f);
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
  // The 12 padding bytes after the block zeroed (the first block: also the 12 before it, kActLead; the last: the 4
  // that round the region to 16): no kernel reads them as values, but the down row tiles stage each block from its
  // 16-byte aligned start 12 bytes before it and the warp tiles copy the whole region, and compute-sanitizer
  // initcheck reported those reads of never-written bytes (session 11 W1), which would hide a real one.
  constexpr uint64_t kBytes = kQ80 ? sizeof(BlockQ8_0Act) : sizeof(BlockQ8_K);
  static_assert(kPitch - kBytes == 12 && kActLead == 12, "12-byte lead and pads, blocks 16-byte aligned");
  if (lane < 3) reinterpret_cast<uint32_t*>(o + kBytes)[lane] = 0;
  else if (lane < 6 && blk == 0) reinterpret_cast<uint32_t*>(act)[lane - 3] = 0;
  else if (lane == 6 && blk == rows * nb - 1) *reinterpret_cast<uint32_t*>(o + kPitch) = 0;
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

// The hidden rows h [pairs][ff] quantized once per pair, one warp per block. Behind the warp tiles it may
// be a programmatic dependent of the gate/up tiles (it waits for them before reading h) and lets the down
// tiles start early (they wait for it before reading act); both calls are no-ops otherwise.
// kEarly (the one-token fold-5 path): the down kernel is let in before this one waits, so its blocks take the
// SMs the gate/up kernel leaves and copy their first weights while the last gate/up items and this kernel run
// (it waits for this grid's end before reading act either way).
template <bool kQ80, bool kEarly = false>
__global__ void moe_quantize_hidden_kernel(const float* h, int64_t pairs, int64_t ff, uint8_t* act) {
  if constexpr (kEarly) grid_launch_dependents();
  grid_dependency_wait();
  if constexpr (!kEarly) grid_launch_dependents();
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
  if (e == cudaSuccess) e = init_warp_tile_kernels();
  if (e == cudaSuccess) e = init_one_token_kernels();
  if (e == cudaSuccess) e = init_one_lean_kernels();
  if (e == cudaSuccess) e = init_row_tile_kernels();
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
  // Row tiles (moe_row_tiles.cu) from expert_row_tiles_min tokens where both projections fit them; else
  // warp tiles (moe_warp_tiles.cu) up to expert_tiles_warp_max where both fit them; else the block tiles.
  const int64_t row_min = expert_row_tiles_min_ < 0 ? kRowTilesAutoMin : expert_row_tiles_min_;
  const bool v3 = expert_row_tiles_v3_ < 0 ? kRowTilesV3Auto : expert_row_tiles_v3_ != 0;
  const bool perm = expert_row_tiles_perm_ && (a.n <= kRowPermMax || v3), v2 = expert_row_tiles_v2_;
  const bool rows = row_min > 0 && a.n >= row_min && var == kFast &&
                    row_tiles_fit(*this, gt, true, a.gate.first.row_bytes, nb_gu, a.ff, pairs, max_groups, perm, v2) &&
                    row_tiles_fit(*this, dt, false, a.down.first.row_bytes, nb_d, a.dim, pairs, max_groups, perm, v2);
  const int64_t warp_max = expert_tiles_warp_max_ < 0 ? kWarpTilesAutoMax : expert_tiles_warp_max_;
  const bool warp = !rows && a.n <= warp_max && var == kFast &&
                    warp_tiles_fit(*this, gt, true, a.gate.first.row_bytes, nb_gu, a.ff, pairs, max_groups) &&
                    warp_tiles_fit(*this, dt, false, a.down.first.row_bytes, nb_d, a.dim, pairs, max_groups);
  // One token (expert_one_token): moe_one_token.cu's kernels, its values in registers, where they fit. By
  // default (-1) only where the warp and row tiles are left to their defaults too: an explicit choice of
  // those (tests, benchmarks) keeps them at n = 1.
  // expert_one_token = V + 10·F: gate/up variant V, and F ≥ 1 the down kernel with moe()'s slot sum (F = 1: a
  // warp per tile of rows, 2: two warps a tile, 3 / 4: as 1 / 2 with the hidden rows quantized inside it, no
  // quantization launch) — taken only when moe() asks for it by y == nullptr (it then adds no slot sum).
  // Session 11 (moe_one_lean.cu): V = 8, 9 the lean gate/up kernels (variant 7's work and bits, compile-time
  // shapes, a lane per whole block), F = 5 the lean down + slot sum kernel (fold 2's work and bits).
  const bool others_auto = expert_tiles_warp_max_ < 0 && expert_row_tiles_min_ < 0;
  const int one_option = expert_one_token_ < 0 ? (others_auto ? kOneTokenAuto : 0) : expert_one_token_;
  // Session 12: P·100 + V + 10·F — P = 5: the gate/up kernel's L2 prefetch of the down weights (moe_one_lean.h
  // LeanPrefetch; variants 8, 9 with fold 5 only).
  // Session 13: Q·1000 + P·100 + 10·F + V — Q = 1, 3: the lean gate/up decode with the selector OR as an integer
  // multiply-add (3: with half-block lanes; variant 9 only).
  const int one_variant = one_option % 10, fold = y == nullptr ? one_option / 10 % 10 : 0;
  const int prefetch_mode = one_option / 100 % 10, lean_decode = one_option / 1000 % 10;
  const bool one = !rows && one_variant > 0 && a.n == 1 && var == kFast &&
                   one_token_fits(*this, gt, dt, a.gate.first.data, a.up.first.data, a.down.first.data,
                                  a.gate.first.row_bytes, a.gate.expert_bytes, nb_gu, a.down.first.row_bytes,
                                  a.down.expert_bytes, nb_d, a.dim);
  // y == nullptr: the one-token kernels with the slot sum into a.out, or nothing (moe() then calls again).
  // Fold 5 (session 11): moe_one_lean.cu's down kernel; the others moe_one_token.cu's.
  if (y == nullptr && !(one && fold > 0 && a.k <= kOneSumMaxSlots &&
                        (fold == 5 ? one_lean_down_fits(*this, static_cast<int32_t>(a.k), a.down.first.row_bytes)
                                   : one_token_sum_fits(*this, fold, static_cast<int32_t>(a.k), nb_d * act_pitch_of(dt),
                                                        a.down.first.row_bytes))))
    return false;
  // the down tiles' weights copied early
  const bool pdl_on = expert_tiles_pdl_ < 0 ? (one ? kOneTokenPdlAuto : warp && kWarpTilesPdlAuto) : expert_tiles_pdl_ > 0;
  const bool pdl = (one || warp || rows) && pdl_on && cc_major() >= 9;
  const uint64_t words = static_cast<uint64_t>(pairs) + 3ull * max_groups + 1;
  const uint64_t x_stride = nb_gu * act_pitch_of(gt), h_stride = nb_d * act_pitch_of(dt);
  if (!ensure(moe_groups_, words * sizeof(int32_t), "expert groups") ||
      !ensure(moe_act_, (kActLead + x_stride * a.n + 15) / 16 * 16, "quantized expert inputs") ||
      !ensure(moe_h_act_, (kActLead + h_stride * pairs + 15) / 16 * 16, "quantized expert hidden rows"))
    return true;  // error recorded
  auto* order = static_cast<int32_t*>(moe_groups_.ptr);
  int32_t* groups = order + pairs;
  int32_t* n_groups = groups + 3 * max_groups;
  auto* x_act = static_cast<uint8_t*>(moe_act_.ptr);
  auto* h_act = static_cast<uint8_t*>(moe_h_act_.ptr);
  cudaStream_t s = stream();

  // Gate/up variant 7 with the slot-summing down kernel: no prologue (the gate/up kernel takes the slots and
  // quantizes x itself; nothing reads the groups).
  // Variants 8, 9 (session 11, moe_one_lean.cu): variant 7's work at fewer instructions, where they fit (else 7).
  const bool slots = one && fold > 0 && one_variant >= 7 && reinterpret_cast<uintptr_t>(a.x) % 16 == 0;
  const bool lean_gu = slots && one_variant >= 8 && one_lean_gate_up_fits(*this, one_variant, a.ff);
  const OneTokenSum sa{a.ids, static_cast<int32_t>(a.k), a.down.n_expert, h, a.out, a.x};
  PrologueParams q{a.ids, static_cast<int32_t>(pairs), n_expert, order, groups, n_groups, a.x, a.n, a.dim, x_act};
  const unsigned pro_blocks = 1 + grid_for(a.n * nb_gu, kMaxGroupExperts / kWarp);
  if (!slots) {
    if (gt == GgmlType::Q8_0) moe_prologue_kernel<true><<<pro_blocks, kMaxGroupExperts, 0, s>>>(q);
    else moe_prologue_kernel<false><<<pro_blocks, kMaxGroupExperts, 0, s>>>(q);
    if (!launched("moe prologue (group pairs, quantize x)")) return true;
  }

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
  p.n_pairs = static_cast<int32_t>(pairs);
  p.max_groups = max_groups;
  p.y = h;
  p.y_stride = a.ff;
  p.weights = a.weights;
  p.clamp = a.clamp;
  if (slots) {
    p.n_tiles = static_cast<int32_t>(a.ff);
    LeanPrefetch pf;
    if (fold == 5) pf = {static_cast<const uint8_t*>(a.down.first.data), a.down.expert_bytes, prefetch_mode};
    if (!(lean_gu ? launch_one_lean_gate_up(*this, p, sa, one_variant, pdl, s, pf, lean_decode)
                  : launch_one_gate_up_slots(*this, p, sa, pdl, s)))
      return true;
  } else if (one) {
    p.n_tiles = static_cast<int32_t>(a.ff);
    // Variants 7 … 9 need the slot-summing down kernel: without it, variant 4's kernel.
    if (!launch_one_gate_up(*this, p, int64_t{max_groups} * p.n_tiles, one_variant >= 7 ? 4 : one_variant, s))
      return true;
  } else if (warp) {
    p.n_tiles = static_cast<int32_t>(a.ff / warp_tile_rows(true));
    if (!launch_warp_tiles(*this, gt, true, p, int64_t{max_groups} * p.n_tiles, false, s)) return true;
  } else if (rows) {
    p.n_tiles = static_cast<int32_t>(a.ff / row_tile_rows(true));
    if (!launch_row_tiles(*this, gt, true, p, int64_t{max_groups} * p.n_tiles, false, perm, v2, v3, s)) return true;
  } else if (!launch_tiles_of<true>(*this, var, gt, p, int64_t{max_groups} * p.n_tiles, s)) {
    return true;
  }

  // The hidden rows quantized once per pair. Rows of pairs with a bad id hold whatever h had: they are
  // quantized but belong to no group (the slot sum gives those tokens NaN).
  const unsigned hq = grid_for(pairs * nb_d * kWarp, 256);
  if ((fold < 3 || fold == 5) && !check(launch_dependent(pdl, hq, 256, 0, s,
                              dt == GgmlType::Q8_0 ? moe_quantize_hidden_kernel<true>
                              : fold == 5          ? moe_quantize_hidden_kernel<false, true>
                                                   : moe_quantize_hidden_kernel<false>,
                              static_cast<const float*>(h), pairs, a.ff, h_act),
             "moe quantize hidden rows"))
    return true;

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
  if (one && fold == 5) {
    p.n_tiles = static_cast<int32_t>(a.dim / one_token_down_rows());
    launch_one_lean_down(*this, p, sa, pdl, s);
  } else if (one && fold > 0) {
    p.n_tiles = static_cast<int32_t>(a.dim / one_token_down_rows());
    launch_one_down_sum(*this, p, sa, fold, pdl, s);
  } else if (one) {
    p.n_tiles = static_cast<int32_t>(a.dim / one_token_down_rows());
    launch_one_down(*this, p, int64_t{max_groups} * p.n_tiles, pdl, s);
  } else if (warp) {
    p.n_tiles = static_cast<int32_t>(a.dim / warp_tile_rows(false));
    launch_warp_tiles(*this, dt, false, p, int64_t{max_groups} * p.n_tiles, pdl, s);
  } else if (rows) {
    p.n_tiles = static_cast<int32_t>(a.dim / row_tile_rows(false));
    launch_row_tiles(*this, dt, false, p, int64_t{max_groups} * p.n_tiles, pdl, perm, v2, v3, s);
  } else {
    launch_tiles_of<false>(*this, var, dt, p, int64_t{max_groups} * p.n_tiles, s);
  }
  return true;
}

}  // namespace ds4::backend::cuda
