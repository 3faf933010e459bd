// moe_one_token.cu — the routed experts of a one-token decode step (CudaBackendOptions::expert_one_token):
// IQ2_XXS gate/up + SwiGLU and Q2_K down, where every lane keeps the same pieces of the activation in
// registers for all the rows it computes, so the inner loops read only weights and table entries.
//
// Gate/up: work item = (expert group, one output row — two in variant 4, the default): that row of gate and
// of up (2 × nb × 66 B; 2,112 B at Flash shapes, nb = 16), streamed per warp through a private ring of 16-byte
// cp.async copies (moe_warp_ring.cuh: 2–3 items in flight while one is computed, as the warp tiles do). Lane
// (octet o = lane / 8, group gi = lane % 8) takes 32-value group gi of blocks o + 4s (s < nb / 4) of every
// row of the item (nb = 16 at the Flash shapes, the only ones taken): 8 groups of 32 weights a row, the
// token's 4 × 32 Q8_K values for them loaded once per kernel (32 registers). Per group: the two quant
// words by aligned loads and a funnel shift; per 8-value chunk the byte-permute decode of the row tiles
// (moe_terms.cuh iq2_terms_perm, fill_perm_tables: one 4-byte grid-selector and one 4-byte sign-selector
// lookup from 32-copy tables — one conflict-free wavefront each, half the shared-memory traffic of 8-byte
// entries — their OR and two byte permutes give the 8 signed weights) and 2 dp4a, times the group scale.
// The 8 lanes of an octet hold the 8 groups of the same blocks: a reduce-scatter over the octet
// (shuffles at distance 4, 2, 1: 7 shuffles for 8 sums) leaves lane l with the whole integer sum of
// matrix (l >> 2) & 1, block o + 4(l & 3) — exact, as every grouping of integer sums is — and its float
// term QDot<IQ2_XXS>::finish's (f16(d)·d_x)·sum. Lanes 0–15 then add gate's terms from 0.0f in block
// order, lanes 16–31 up's (a shuffle per term), and tile_row_finish applies ·0.125, the SwiGLU and each
// pair's routing weight: the same bits as every other path (tests/cuda/test_cuda_moe_tiles.cpp).
// Down: item = (expert group, 4 output rows, 4 × nb × 84 B), same ring; lane (o, piece pc = 4h + l) takes
// values 128h + 32l … + 31 of blocks o + 4s (s < nb / 4) of each row — sub-blocks 8h + 2l and 8h + 2l + 1,
// the quant bits at 2l of quant words 8h … 8h + 7 masked in place and dotted with the pair's Q8_K values
// as unsigned bytes (the 4^l factor shifted out of the exact sum), their mins with the pair's bsums;
// the octet reduce-scatter gives lane l the integer sums of (row (l & 7) >> 1, block o + 4(l & 1)), its
// term q2k_finish's, and lane 8r the chain of row r in block order. Items in group-major order, so a
// warp reloads its activation registers only when its run of rows crosses into the next expert.
// Session 10 (expert_one_token V + 10·F, F ≥ 1): the down kernel with moe()'s slot sum — a warp (F = 1, 3) or
// two warps of a block (F = 2, 4) per tile of 4 output rows walk the token's k slots in slot order, the
// pair's quantized hidden row staged in shared memory by every block (F = 3, 4: quantized there from h, no
// quantization launch), and store out[row] (moe_sum_kernel's order): no y rows and no slot-sum launch. Gate/up
// variant 7 (with F ≥ 1) needs no prologue launch: items over the slots (ids[j]) and x quantized by every
// block; variant 6 reads the perm tables by ld.shared at explicit 64 KB-aligned addresses (no address adds).
// Deliberately not here: more than one token (the warp and row tiles: several pairs of an expert read
// different activation rows, which these registers cannot hold), other weight types and shapes (they take
// the warp tiles), the prologue, the hidden-row quantization and the slot sum of the other paths
// (moe_tiles.cu, ops_moe.cu).
#include "backend/cuda/moe_one_token.h"

#include <algorithm>

#include "backend/cuda/act_quant.cuh"
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_impl.h"
#include "backend/cuda/mma_s8.cuh"
#include "backend/cuda/moe_warp_ring.cuh"
#include "quant/iq2xxs_tables.h"
#include "quant/iq2xxs_words.h"

namespace ds4::backend::cuda {

namespace {

__constant__ uint64_t c_one_grid[256];

constexpr int kDnStages = 4;    // down's per-warp ring: 3 items in flight while one is computed
// Gate/up variants (expert_one_token 1–4): warps of the one block per SM that shares the 64 KB of perm
// tables, ring depth, whether the lane's table copy rides in the lookup offsets (a byte permute puts the
// index byte next to the lane's 4·l, a LOP3 ORs it into the sign offset: no address add per lookup), and
// the rows of gate and of up per item. 2 rows (4): the same activation registers serve twice the weights,
// and the item's fixed work (ring bookkeeping, group lookups, the routed pair's SwiGLU and store loop) is
// paid once per two rows; 16 independent groups per lane instead of 8 for the scheduler to interleave. An
// item is then 4,224 B at the Flash shapes, so 12 warps × 3 stages fit beside the tables (H200, session 9
// W1: 11.5 M warp instructions against variant 2's 13.2 M, 22.8 µs against 24.7 cold; 8 warps × 4 stages
// measured 27.7).
// Variant 6: variant 4 with the tables at a 64 KB-aligned shared-window address T, read by ld.shared at
// explicit 32-bit addresses: the grid lookup's address is one byte permute of the quant word and T | 4·lane
// (bytes 4·lane, index, T's two high bytes), the sign lookup's the LOP3 as before with the +128 in the
// instruction — no address add per lookup (session 9's SASS of variant 4: 179 IMAD.IADD per item, most of
// them `tab + offset`). The warps' rings sit below T where whole rings fit, the rest above the tables.
// Variant 7 (only with the down kernel adding the slots, expert_one_token 7 + 10·F): variant 4 without the
// prologue launch — items over the token's slots (expert ids[j], pair j; a bad id's items copy and write
// nothing) instead of the prologue's groups, and the token's x quantized by every block into shared memory
// (quantize_q8_K_warp: the prologue's bytes) after the tables are filled; as a programmatic dependent the
// table fill overlaps the kernel before. A repeated expert is read once per slot (the same values).
template <int V>
struct GuVariant {
  static constexpr bool kPair = V == 4 || V == 6 || V == 7;  // two rows of gate and of up per item
  static constexpr int kWarps = V == 3 ? 20 : kPair ? 12 : 16;
  static constexpr int kRing = V == 3 || kPair ? 3 : 4;
  static constexpr bool kLaneSel = V >= 2;
  static constexpr int kRows = kPair ? 2 : 1;
  static constexpr bool kExplicit = V == 6;
  static constexpr bool kSlots = V == 7;
};
constexpr uint32_t kGuActBytes = (12 + 16 * 304 + 15) / 16 * 16;  // variant 7's x: kActLead + 16 Q8_K blocks
// Block counts are compile-time (the Flash shapes: gate/up rows of 16 IQ2_XXS blocks, down rows of 8 Q2_K
// blocks; others take the warp tiles): with a runtime count every group sat behind its own branch and the
// compiler could not interleave a lane's 8 groups — one dependency chain at a time (06:13 UTC W1 ncu: no
// faster than the warp tiles at 14.1 M instructions, 58 % issue).
constexpr int kGuSteps = 4;     // nb = 16: lane's blocks o + 4s, s < 4
constexpr int kDnWarps = 8;     // down: two 256-thread blocks per SM
constexpr int kDnRows = 4;      // rows per down item: 4 rows × 2 blocks a lane = the octet's 8 sums
constexpr int kDnSteps = 2;     // nb = 8
constexpr uint32_t kIq2Bytes = 66, kQ2kBytes = 84;  // sizeof(BlockIQ2_XXS), sizeof(BlockQ2_K)

constexpr uint32_t align16(uint64_t v) { return static_cast<uint32_t>((v + 15) / 16 * 16); }

// Ring stage of one item: gate/up its `rows` rows of gate then the same rows of up (+ 16 spare bytes: a
// group's third quant word may reach 4 bytes past up's last block), down kDnRows rows.
uint32_t gu_stage(uint64_t row_bytes, int rows) { return align16(2 * rows * row_bytes + 16); }
uint32_t dn_stage(uint64_t row_bytes) { return align16(kDnRows * row_bytes); }
template <int V>
uint64_t gu_smem(uint64_t row_bytes) {
  // Variant 6: one ring more of room, for the rings below the 64 KB-aligned tables (≤ one ring unused).
  constexpr int rings = GuVariant<V>::kWarps + (GuVariant<V>::kExplicit ? 1 : 0);
  return kPermTableBytes + uint64_t{rings} * GuVariant<V>::kRing * gu_stage(row_bytes, GuVariant<V>::kRows) +
         (GuVariant<V>::kSlots ? kGuActBytes : 0);
}
uint64_t dn_smem(uint64_t row_bytes) { return uint64_t{kDnWarps} * kDnStages * dn_stage(row_bytes); }

// Exact integer sum of one IQ2_XXS 32-value group (quant words a0: 4 grid indices, a1: 4 × 7 sign bits and
// the 4-bit scale) with the token's 32 Q8_K values x, times the group scale 2·(a1 >> 28) + 1 — the integer
// iq2_xxs_group_isum gives. tab: the perm tables + 4 × lane (the lane's copy); kLaneSel: tab is the tables'
// start and lane4 = 4 × lane goes into the offsets (bits 0…6, below the index · 256).
// kExplicit (variant 6): lane4 = T | 4 × lane, the tables' shared-window address T a multiple of 64 KB.
template <bool kLaneSel, bool kExplicit = false>
__device__ inline int iq2_group_isum(uint32_t a0, uint32_t a1, const uint32_t (&x)[8], const uint8_t* tab,
                                     uint32_t lane4) {
  int sum = 0;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    uint32_t go, so;  // grid index k · 256 and sign index k · 256 (+ 4 · lane)
    const uint32_t sk = (k == 0 ? a1 << 8 : k == 1 ? a1 << 1 : a1 >> (7 * k - 8)) & 0x7f00u;
    uint32_t sel;
    if constexpr (kExplicit) {
      go = prmt(a0, lane4, 0x7604u | (k << 4));  // bytes: 4·lane, index k, T's bytes 2 and 3
      so = sk | lane4;
      uint32_t gv, sv;
      asm("ld.shared.u32 %0, [%1];" : "=r"(gv) : "r"(go));
      asm("ld.shared.u32 %0, [%1+128];" : "=r"(sv) : "r"(so));
      sel = gv | sv;
    } else {
      if constexpr (kLaneSel) {
        go = prmt(a0, lane4, 0x5504u | (k << 4));  // bytes: 4·lane, index k, 0, 0
        so = sk | lane4;
      } else {
        go = prmt(a0, 0, 0x4404u | (k << 4));
        so = sk;
      }
      sel = *reinterpret_cast<const uint32_t*>(tab + go) | *reinterpret_cast<const uint32_t*>(tab + so + 128);
    }
    sum = __dp4a(static_cast<int>(prmt(kIq2xxsPermPos, kIq2xxsPermNeg, sel)), static_cast<int>(x[2 * k]), sum);
    sum = __dp4a(static_cast<int>(prmt(kIq2xxsPermPos, kIq2xxsPermNeg, sel >> 16)), static_cast<int>(x[2 * k + 1]), sum);
  }
  return sum * (2 * static_cast<int>(a1 >> 28) + 1);
}

// Reduce-scatter of 8 integers over the 8 lanes of an octet: afterwards v[0] of lane l holds the octet's
// sum of index l & 7 (pairs of halves exchanged at lane distance 4, 2, 1).
__device__ inline void octet_reduce(int (&v)[8], int lane) {
  const bool b2 = lane & 4, b1 = lane & 2, b0 = lane & 1;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int send = b2 ? v[j] : v[j + 4], keep = b2 ? v[j + 4] : v[j];
    v[j] = keep + __shfl_xor_sync(0xffffffffu, send, 4);
  }
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const int send = b1 ? v[j] : v[j + 2], keep = b1 ? v[j + 2] : v[j];
    v[j] = keep + __shfl_xor_sync(0xffffffffu, send, 2);
  }
  const int send = b0 ? v[0] : v[1], keep = b0 ? v[1] : v[0];
  v[0] = keep + __shfl_xor_sync(0xffffffffu, send, 1);
}

__device__ inline void load_x8(const uint8_t* p, uint32_t (&x)[8]) {  // 32 bytes, 16-byte aligned
  const uint4 v0 = reinterpret_cast<const uint4*>(p)[0], v1 = reinterpret_cast<const uint4*>(p)[1];
  x[0] = v0.x, x[1] = v0.y, x[2] = v0.z, x[3] = v0.w, x[4] = v1.x, x[5] = v1.y, x[6] = v1.z, x[7] = v1.w;
}

template <int V>
__global__ void __launch_bounds__(GuVariant<V>::kWarps* kWarp, 1)
    moe_one_gate_up_kernel(TileParams p, uint32_t stage, OneTokenSum sa) {
  constexpr int kGuWarps = GuVariant<V>::kWarps, kStages = GuVariant<V>::kRing, kR = GuVariant<V>::kRows;
  extern __shared__ __align__(16) uint8_t smem[];
  const int lane = threadIdx.x % kWarp, wid = threadIdx.x / kWarp;
  constexpr bool kExplicit = GuVariant<V>::kExplicit;
  uint32_t tab_off = 0;  // the tables' offset in the dynamic shared memory
  uint8_t* ring = smem + kPermTableBytes + static_cast<uint32_t>(wid) * kStages * stage;
  if constexpr (kExplicit) {
    const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
    tab_off = ((base + 0xffffu) & ~0xffffu) - base;
    const uint32_t wr = kStages * stage, below = tab_off / wr;  // a warp's ring; rings that fit below T
    const uint32_t w = static_cast<uint32_t>(wid);
    ring = smem + (w < below ? w * wr : tab_off + static_cast<uint32_t>(kPermTableBytes) + (w - below) * wr);
  }
  constexpr int steps = kGuSteps, nb = 4 * steps;
  const uint64_t rb = p.row_bytes;
  const uint32_t chunks = static_cast<uint32_t>(kR * rb / 16);  // 16-byte pieces of an item's gate rows
  constexpr bool kSlots = GuVariant<V>::kSlots;
  if constexpr (kSlots) {  // the tables while the kernel before finishes; then its outputs (ids, x)
    fill_perm_tables(reinterpret_cast<uint32_t*>(smem), c_one_grid, threadIdx.x, blockDim.x);
    grid_dependency_wait();
  }
  auto slot_ok = [&](int32_t j) {
    const int32_t e = sa.ids[j];
    return e >= 0 && e < sa.n_expert;
  };
  const int32_t ng = kSlots ? sa.k : *p.n_groups;
  int64_t begin = 0, end = 0;
  warp_run(static_cast<int64_t>(ng) * p.n_tiles, kGuWarps, wid, begin, end);
  // Items in row-major order (item = row tile · ng + g; p.n_tiles = ff / kR): every warp gets rows of every
  // expert alike.
  int32_t ig = ng > 0 ? static_cast<int32_t>(begin % ng) : 0;  // the next item to copy
  int64_t it = ng > 0 ? begin / ng : 0;
  auto issue_next = [&](int s) {
    if (!kSlots || slot_ok(ig)) {
      const int32_t e = kSlots ? sa.ids[ig] : p.groups[3 * ig];
      const uint64_t off = static_cast<uint64_t>(e) * p.expert_bytes + static_cast<uint64_t>(it) * kR * rb;
      uint8_t* dst = ring + s * stage;
      for (uint32_t j = lane; j < 2 * chunks; j += kWarp) {
        const bool up = j >= chunks;
        cp_async16(dst + 16 * j, (up ? p.w2 : p.w) + off + 16 * (j - (up ? chunks : 0)));
      }
    }
    if (++ig == ng) ig = 0, ++it;
  };
  ring_fill<kStages>(begin, end, issue_next);
  const uint8_t* act = p.act + kActLead;
  if constexpr (kSlots) {  // x [dim] quantized into shared memory after the rings (as the prologue would)
    uint8_t* const sact = smem + kPermTableBytes + kGuWarps * kStages * stage;
    for (int blk = wid; blk < nb; blk += kGuWarps) {
      const float4* src = reinterpret_cast<const float4*>(sa.x + blk * kQK_K + 8 * lane);
      const float4 a = src[0], b = src[1];
      const float v[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
      quantize_q8_K_warp(v, lane, sact + kActLead + blk * p.act_pitch);
    }
    __syncthreads();
    act = sact + kActLead;
  } else {
    fill_perm_tables(reinterpret_cast<uint32_t*>(smem + tab_off), c_one_grid, threadIdx.x, blockDim.x);
  }
  // The token's values for this lane's groups (one token: every pair reads activation row 0).
  const int oct = lane / 8, gi = lane % 8;
  uint32_t xa[kGuSteps][8];
#pragma unroll
  for (int s = 0; s < kGuSteps; ++s) {
    if (s < steps) {
      load_x8(act + (oct + 4 * s) * p.act_pitch + 4 + 32 * gi, xa[s]);
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j) xa[s][j] = 0;
    }
  }
  // The block this lane finishes after the octet reduction: matrix fm (0 gate, 1 up), block fb.
  const int fs = lane & 3, fm = (lane >> 2) & 1, fb = oct + 4 * fs;
  const float fda = fs < steps ? q8k_d(act + fb * p.act_pitch) : 0.0f;
  const int mo = lane < kWarp / 2 ? 0 : 4;  // lanes 0–15 chain gate's terms, 16–31 up's
  __syncthreads();
  const uint8_t* const tab = GuVariant<V>::kLaneSel ? smem : smem + 4 * lane;
  const uint32_t lane4 =
      (kExplicit ? static_cast<uint32_t>(__cvta_generic_to_shared(smem)) + tab_off : 0u) | 4u * static_cast<uint32_t>(lane);
  int32_t g = ng > 0 ? static_cast<int32_t>(begin % ng) : 0;  // the item computed
  int64_t row = ng > 0 ? begin / ng : 0;
  for (int64_t item = begin; item < end; ++item) {
    const uint8_t* wt = ring + ring_step<kStages>(item, begin, end, issue_next) * stage;
    if (kSlots && !slot_ok(g)) {  // a bad id: nothing copied, nothing written (its token's sum is NaN)
      __syncwarp();
      if (++g == ng) g = 0, ++row;
      continue;
    }
    int v[kR][8];  // v[r][4m + s]: row r of matrix m, group gi of block oct + 4s
#pragma unroll
    for (int r = 0; r < kR; ++r) {
#pragma unroll
      for (int m = 0; m < 2; ++m) {
#pragma unroll
        for (int s = 0; s < kGuSteps; ++s) {
          int sum = 0;
          if (s < steps) {
            // The group's 8 quant bytes are 2-byte aligned (blocks of 66 bytes): three aligned words and two
            // funnel shifts.
            const uint8_t* q = wt + (m * kR + r) * rb + (oct + 4 * s) * kIq2Bytes + 2 + 8 * gi;
            const uint32_t mis = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(q) & 3);
            const uint32_t* qw = reinterpret_cast<const uint32_t*>(q - mis);
            const uint32_t w0 = qw[0], w1 = qw[1], w2 = qw[2];
            sum = iq2_group_isum<GuVariant<V>::kLaneSel, kExplicit>(__funnelshift_r(w0, w1, 8 * mis),
                                                         __funnelshift_r(w1, w2, 8 * mis), xa[s], tab, lane4);
          }
          v[r][4 * m + s] = sum;
        }
      }
    }
    float gate[kR], up[kR];
#pragma unroll
    for (int r = 0; r < kR; ++r) {
      octet_reduce(v[r], lane);
      // QDot<IQ2_XXS>::finish: (f16(d) · d_x) · sum.
      const float term =
          fs < steps ? f16_dev(ld16(wt + (fm * kR + r) * rb + fb * kIq2Bytes)) * fda * static_cast<float>(v[r][0]) : 0.0f;
      // Block b of matrix m sits on lane 8(b % 4) + 4m + b / 4; the chain from 0.0f in block order.
      float acc = 0;
#pragma unroll
      for (int b = 0; b < nb; ++b) acc += __shfl_sync(0xffffffffu, term, 8 * (b % 4) + b / 4 + mo);
      gate[r] = __shfl_sync(0xffffffffu, acc, 0), up[r] = __shfl_sync(0xffffffffu, acc, kWarp / 2);
    }
    const int32_t first = kSlots ? 0 : p.groups[3 * g + 1], count = kSlots ? 1 : p.groups[3 * g + 2];
    for (int j = lane; j < count; j += kWarp) {
      const int32_t pair = kSlots ? g : p.order[first + j];
      const float w = p.weights[pair];
      float* const y = p.y + static_cast<int64_t>(pair) * p.y_stride + row * kR;
#pragma unroll
      for (int r = 0; r < kR; ++r) y[r] = tile_row_finish<true, true>(gate[r], up[r], p.clamp, w);
    }
    __syncwarp();  // this stage is rewritten next
    if (++g == ng) g = 0, ++row;
  }
  cp_async_wait<0>();
}

// The pair's Q8_K values 128h + 32l … + 31 of blocks o + 4s and the bsums of their two sub-blocks (lane
// (o, piece 4h + l)); arow: the pair's activation row (padded layout, global or shared memory).
__device__ inline void load_down_act(const uint8_t* arow, uint64_t act_pitch, int lane, uint32_t (&xa)[kDnSteps][8],
                                     int (&bs)[kDnSteps][2]) {
  const int oct = lane / 8, pc = lane % 8, h = pc / 4, l = pc % 4;
#pragma unroll
  for (int s = 0; s < kDnSteps; ++s) {
    const uint8_t* ab = arow + (oct + 4 * s) * act_pitch;
    load_x8(ab + 4 + 128 * h + 32 * l, xa[s]);
    const uint32_t w = *reinterpret_cast<const uint32_t*>(ab + 260 + 2 * (8 * h + 2 * l));
    bs[s][0] = static_cast<int16_t>(w & 0xffffu);
    bs[s][1] = static_cast<int16_t>(w >> 16);
  }
}

// One down item (kDnRows rows at wt, row pitch rb) with one pair's values: lane 8r returns row r's block
// terms added from 0.0f in block order (other lanes: partial chains). fact: the pair's activation block
// that this lane's term finishes with (block fb below).
__device__ inline float down_item_chain(const uint8_t* wt, uint64_t rb, const uint32_t (&xa)[kDnSteps][8],
                                        const int (&bs)[kDnSteps][2], const uint8_t* fact, int lane) {
  constexpr int steps = kDnSteps, nb = 4 * steps;
  const int oct = lane / 8, pc = lane % 8, h = pc / 4, l = pc % 4;
  const uint32_t mask = 0x03030303u << (2 * l);
  const int fs = lane & 1, fr = (lane & 7) >> 1, fb = oct + 4 * fs;  // the (row, block) this lane finishes
  const int cr = lane / 8;                                             // the row whose chain this lane adds
  int vi[8], vm[8];  // [2r + s]: row r, block oct + 4s — the integer sum and the min sum
#pragma unroll
  for (int r = 0; r < kDnRows; ++r) {
#pragma unroll
    for (int s = 0; s < kDnSteps; ++s) {
      const uint8_t* blk = wt + r * rb + (oct + 4 * s) * kQ2kBytes;
      const uint32_t* qw = reinterpret_cast<const uint32_t*>(blk + 16 + 32 * h);
      int sub0 = 0, sub1 = 0;
#pragma unroll
      for (int m = 0; m < 4; ++m) {
        sub0 = dp4a_us(qw[m] & mask, xa[s][m], sub0);
        sub1 = dp4a_us(qw[4 + m] & mask, xa[s][4 + m], sub1);
      }
      const uint32_t sc = ld16(blk + 8 * h + 2 * l);  // scale/min bytes of sub-blocks 8h + 2l, + 1
      // Each sub is 4^l times the sub-block's sum: exact, so the shift is.
      vi[2 * r + s] = (static_cast<int>(sc & 15u) * sub0 + static_cast<int>((sc >> 8) & 15u) * sub1) >> (2 * l);
      vm[2 * r + s] = bs[s][0] * static_cast<int>((sc >> 4) & 15u) + bs[s][1] * static_cast<int>(sc >> 12);
    }
  }
  octet_reduce(vi, lane);
  octet_reduce(vm, lane);
  const float term = q2k_finish(wt + fr * rb + fb * kQ2kBytes, fact, vi[0], vm[0]);
  // Block b of row r sits on lane 8(b % 4) + 2r + b / 4; lane 8r adds row r's chain in block order.
  float acc = 0;
#pragma unroll
  for (int b = 0; b < nb; ++b) acc += __shfl_sync(0xffffffffu, term, 8 * (b % 4) + 2 * cr + b / 4);
  return acc;
}

__global__ void __launch_bounds__(kDnWarps* kWarp, 2) moe_one_down_kernel(TileParams p, uint32_t stage) {
  extern __shared__ __align__(16) uint8_t smem[];
  const int lane = threadIdx.x % kWarp, wid = threadIdx.x / kWarp;
  uint8_t* const ring = smem + static_cast<uint32_t>(wid) * kDnStages * stage;
  const uint64_t rb = p.row_bytes, mat = kDnRows * rb;  // an item's rows, contiguous in the expert
  const int32_t ng = *p.n_groups;
  const int64_t nt = p.n_tiles;
  int64_t begin = 0, end = 0;
  warp_run(static_cast<int64_t>(ng) * nt, kDnWarps, wid, begin, end);
  // Items in group-major order (item = g · n_tiles + t): a warp's run stays on one or two experts.
  int32_t ig = nt > 0 ? static_cast<int32_t>(begin / nt) : 0;
  int64_t it = nt > 0 ? begin % nt : 0;
  auto issue_next = [&](int s) {
    const uint8_t* src = p.w + static_cast<uint64_t>(p.groups[3 * ig]) * p.expert_bytes + static_cast<uint64_t>(it) * mat;
    uint8_t* dst = ring + s * stage;
    for (uint32_t j = lane; j < mat / 16; j += kWarp) cp_async16(dst + 16 * j, src + 16 * j);
    if (++it == nt) it = 0, ++ig;
  };
  ring_fill<kDnStages>(begin, end, issue_next);
  // The hidden rows come from the kernel before (a programmatic dependent: its first weights are in flight).
  grid_dependency_wait();
  const int fb = (lane / 8) + 4 * (lane & 1);  // the block this lane's term finishes with
  const int cr = lane / 8;
  uint32_t xa[kDnSteps][8];
  int bs[kDnSteps][2];
  int32_t loaded = -1;  // the pair whose values are in xa, bs
  const uint8_t* fact = nullptr;
  int32_t g = nt > 0 ? static_cast<int32_t>(begin / nt) : 0;
  int64_t t = nt > 0 ? begin % nt : 0;
  for (int64_t item = begin; item < end; ++item) {
    const uint8_t* wt = ring + ring_step<kDnStages>(item, begin, end, issue_next) * stage;
    const int32_t first = p.groups[3 * g + 1], count = p.groups[3 * g + 2];
    for (int32_t q = 0; q < count; ++q) {
      const int32_t pair = p.order[first + q];
      if (pair != loaded) {
        loaded = pair;
        const uint8_t* arow = p.act + kActLead + static_cast<uint64_t>(static_cast<uint32_t>(pair) / p.x_div) * p.act_stride;
        load_down_act(arow, p.act_pitch, lane, xa, bs);
        fact = arow + fb * p.act_pitch;
      }
      const float acc = down_item_chain(wt, rb, xa, bs, fact, lane);
      if (lane % 8 == 0)
        p.y[static_cast<int64_t>(pair) * p.y_stride + t * kDnRows + cr] = tile_row_finish<false, false>(acc, 0.0f, 0.0f, 0.0f);
    }
    __syncwarp();
    if (++t == nt) t = 0, ++g;
  }
  cp_async_wait<0>();
}

// The down kernel with moe()'s slot sum (expert_one_token ≥ 10, moe_tiles.cu): work unit = one tile of
// kDnRows output rows for every slot of the token, so the warp that computes a row's slot values adds them
// in slot order in a register — moe_sum_kernel's acc = v0, acc + v1, … (NaN for a bad id) — and stores
// out[row]: no y rows, no slot-sum launch. kSplit = 2: two warps of a block share a tile, the first taking
// slots [0, ⌈k/2⌉) and handing its partial sum to the second through shared memory at a named barrier (the
// second keeps its slot values until then): 16 warps per SM instead of 8 with dim / kDnRows = 1,024 tiles.
// kQuant: the hidden rows h [k][ff] are quantized here (quantize_q8_K_warp, moe_quantize_hidden_kernel's
// bytes) into shared memory by every block after the wait, not by a kernel between (one launch fewer on
// the chain); else each item reads its pair's quantized row where that kernel put it. Items (tile, slot) are
// slot-minor: a warp's weights of one tile come from k experts, each item one pair's values.
template <int kSplit>
struct DnSum {
  static constexpr int kWarps = 8 * kSplit;
  static constexpr int kRing = kSplit == 1 ? 6 : 4;  // bytes in flight per SM alike: 8 × 5 or 16 × 3 items
};

template <int kSplit, bool kQuant>
__global__ void __launch_bounds__(DnSum<kSplit>::kWarps* kWarp, 1)
    moe_one_down_sum_kernel(TileParams p, OneTokenSum sa, uint32_t stage, uint32_t act_bytes) {
  constexpr int kWarps = DnSum<kSplit>::kWarps, kStages = DnSum<kSplit>::kRing, kUnits = kWarps / kSplit;
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ float xch[kUnits][2][kDnRows];               // a unit's partial sums, by tile parity
  __shared__ float held[kSplit == 2 ? kWarps : 1][kOneSumMaxSlots / 2][kDnRows];  // second warps' slot values
  const int lane = threadIdx.x % kWarp, wid = threadIdx.x / kWarp;
  const int unit = wid / kSplit, half = wid % kSplit;
  uint8_t* const act = smem;  // the token's hidden rows quantized: [lead][k rows of act_stride]
  uint8_t* const ring = smem + act_bytes + static_cast<uint32_t>(wid) * kStages * stage;
  const uint64_t rb = p.row_bytes, mat = kDnRows * rb;
  const int32_t k = sa.k, kh = (k + 1) / 2;
  const int32_t j0 = kSplit == 1 ? 0 : half == 0 ? 0 : kh, j1 = kSplit == 1 ? k : half == 0 ? kh : k;
  const int32_t ns = j1 - j0;  // slots of this warp
  const int64_t nt = p.n_tiles;
  int64_t tb = 0, te = 0;  // this unit's tiles
  warp_run(nt, kUnits, unit, tb, te);
  const int64_t begin = 0, end = (te - tb) * ns;
  int32_t ij = j0;
  int64_t it = tb;
  auto valid = [&](int32_t j) {
    const int32_t e = sa.ids[j];
    return e >= 0 && e < sa.n_expert;
  };
  auto issue_next = [&](int s) {
    if (valid(ij)) {
      const uint8_t* src = p.w + static_cast<uint64_t>(sa.ids[ij]) * p.expert_bytes + static_cast<uint64_t>(it) * mat;
      uint8_t* dst = ring + s * stage;
      for (uint32_t j = lane; j < mat / 16; j += kWarp) cp_async16(dst + 16 * j, src + 16 * j);
    }
    if (++ij == j1) ij = j0, ++it;
  };
  ring_fill<kStages>(begin, end, issue_next);
  grid_dependency_wait();  // the hidden rows (kQuant: h; else their quantization) come from the kernel before
  if constexpr (kQuant) {
    // Rows of pairs with a bad id hold whatever h had: quantized, never read.
    constexpr int kPer = kOneSumMaxSlots * kDnSteps * 4 / kWarps;  // blocks a warp quantizes at most
    const int nq = k * 4 * kDnSteps;
    float v[kPer][8];
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int blk = wid + i * kWarps;
      if (blk < nq) {
        const float4* src = reinterpret_cast<const float4*>(sa.h + static_cast<int64_t>(blk) * kQK_K + 8 * lane);
        const float4 a = src[0], b = src[1];
        v[i][0] = a.x, v[i][1] = a.y, v[i][2] = a.z, v[i][3] = a.w, v[i][4] = b.x, v[i][5] = b.y, v[i][6] = b.z, v[i][7] = b.w;
      }
    }
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int blk = wid + i * kWarps;
      if (blk < nq) {
        const int j = blk / (4 * kDnSteps), b = blk % (4 * kDnSteps);
        quantize_q8_K_warp(v[i], lane, act + kActLead + j * p.act_stride + b * p.act_pitch);
      }
    }
    __syncthreads();
  }
  // Without kQuant each item reads its pair's rows from the quantization kernel's output (L1 after the first
  // touch): no staging copy and block barrier after the wait (H200 W1: staged, 14.3 µs against 11.8 for the
  // down kernel without the sum).
  const uint8_t* const rows = kQuant ? act : p.act;
  const int fb = (lane / 8) + 4 * (lane & 1);
  const int cr = lane / 8;
  uint32_t xa[kDnSteps][8];
  int bs[kDnSteps][2];
  float sum = 0;
  int64_t item = begin;
  for (int64_t t = tb; t < te; ++t) {
    for (int32_t j = j0; j < j1; ++j, ++item) {
      const uint8_t* wt = ring + ring_step<kStages>(item, begin, end, issue_next) * stage;
      float v = NAN;
      if (valid(j)) {
        const uint8_t* arow = rows + kActLead + static_cast<uint64_t>(j) * p.act_stride;
        load_down_act(arow, p.act_pitch, lane, xa, bs);
        v = tile_row_finish<false, false>(down_item_chain(wt, rb, xa, bs, arow + fb * p.act_pitch, lane), 0.0f, 0.0f,
                                          0.0f);
      }
      if (kSplit == 2 && half == 1) {
        if (lane % 8 == 0) held[wid][j - j0][cr] = v;
      } else {
        sum = j == 0 ? v : sum + v;  // moe_sum_kernel's order
      }
      __syncwarp();  // this stage is rewritten next
    }
    float* const out = sa.out + t * kDnRows + cr;
    if constexpr (kSplit == 1) {
      if (lane % 8 == 0) *out = sum;
    } else {
      const int par = static_cast<int>(t & 1);
      if (half == 0 && lane % 8 == 0) xch[unit][par][cr] = sum;
      // The unit's two warps meet once a tile (named barrier 1 + unit of 64 threads); by tile parity, the
      // partial a first warp writes next is one its second warp read before arriving here.
      asm volatile("bar.sync %0, %1;" ::"r"(1 + unit), "r"(2 * kWarp) : "memory");
      if (half == 1 && lane % 8 == 0) {
        float s = xch[unit][par][cr];
        for (int32_t j = 0; j < ns; ++j) s = s + held[wid][j][cr];
        *out = s;
      }
    }
  }
  cp_async_wait<0>();
}

int smem_limit(int device) {
  int limit = 0;
  if (cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess) return 0;
  return limit;
}

// One wave of `per_block_warps`-warp blocks at most, no more warps than items.
template <typename K, typename... Extra>
bool launch_one(CudaBackend& be, K kernel, int warps, uint64_t smem, const TileParams& p, uint32_t stage,
                int64_t items_bound, bool pdl, cudaStream_t s, const char* what, const Extra&... extra) {
  int per_sm = 0, sms = 0;
  if (!be.check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, warps * kWarp, smem), what) ||
      !be.check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, be.device()), what))
    return false;
  const int64_t cap = std::max<int64_t>(1, int64_t{std::max(per_sm, 1)} * sms);
  const int64_t blocks = std::clamp<int64_t>((items_bound + warps - 1) / warps, 1, cap);
  return be.check(
      launch_dependent(pdl, dim3(static_cast<unsigned>(blocks)), dim3(warps * kWarp), smem, s, kernel, p, stage, extra...),
      what);
}

}  // namespace

int one_token_down_rows() { return kDnRows; }

bool one_token_fits(CudaBackend& be, GgmlType gt, GgmlType dt, const void* gate, const void* up, const void* down,
                    uint64_t gu_row_bytes, uint64_t gu_expert_bytes, int nb_gu, uint64_t dn_row_bytes,
                    uint64_t dn_expert_bytes, int nb_d, int64_t dim) {
  const auto a16 = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
  if (gt != GgmlType::IQ2_XXS || dt != GgmlType::Q2_K || nb_gu != 4 * kGuSteps || nb_d != 4 * kDnSteps ||
      dim % kDnRows != 0 || !a16(gate) || !a16(up) || !a16(down) ||
      gu_row_bytes % 16 != 0 || gu_expert_bytes % 16 != 0 || (kDnRows * dn_row_bytes) % 16 != 0 ||
      dn_expert_bytes % 16 != 0 || dn_expert_bytes < kDnRows * dn_row_bytes)
    return false;
  const uint64_t limit = static_cast<uint64_t>(smem_limit(be.device()));
  const uint64_t gu = std::max({gu_smem<1>(gu_row_bytes), gu_smem<3>(gu_row_bytes), gu_smem<4>(gu_row_bytes),
                                gu_smem<6>(gu_row_bytes), gu_smem<7>(gu_row_bytes)});
  return gu <= limit && dn_smem(dn_row_bytes) <= limit;
}

template <int V>
bool launch_gate_up_variant(CudaBackend& be, const TileParams& p, int64_t items_bound, const OneTokenSum& sa, bool pdl,
                            cudaStream_t s) {
  constexpr int kR = GuVariant<V>::kRows;
  TileParams q = p;  // items of kR rows
  q.n_tiles = p.n_tiles / kR;
  return launch_one(be, moe_one_gate_up_kernel<V>, GuVariant<V>::kWarps, gu_smem<V>(p.row_bytes), q,
                    gu_stage(p.row_bytes, kR), (items_bound + kR - 1) / kR, pdl, s, "moe one-token gate/up", sa);
}

template <int V>
bool launch_gate_up_variant(CudaBackend& be, const TileParams& p, int64_t items_bound, cudaStream_t s) {
  return launch_gate_up_variant<V>(be, p, items_bound, OneTokenSum{}, false, s);
}

bool launch_one_gate_up_slots(CudaBackend& be, const TileParams& p, const OneTokenSum& sa, bool pdl, cudaStream_t s) {
  return launch_gate_up_variant<7>(be, p, int64_t{sa.k} * p.n_tiles, sa, pdl, s);
}

bool launch_one_gate_up(CudaBackend& be, const TileParams& p, int64_t items_bound, int variant, cudaStream_t s) {
  // Two-row items need an even ff (2,048 at the Flash shapes); an odd one takes variant 2's single rows.
  if (variant >= 4 && p.n_tiles % 2 != 0) variant = 2;
  if (variant == 7) variant = 4;  // variant 7 needs the slot-summing down kernel: launch_one_gate_up_slots
  switch (variant) {
    case 6: return launch_gate_up_variant<6>(be, p, items_bound, s);
    case 4: return launch_gate_up_variant<4>(be, p, items_bound, s);
    case 3: return launch_gate_up_variant<3>(be, p, items_bound, s);
    case 2: return launch_gate_up_variant<2>(be, p, items_bound, s);
    default: return launch_gate_up_variant<1>(be, p, items_bound, s);
  }
}

bool launch_one_down(CudaBackend& be, const TileParams& p, int64_t items_bound, bool pdl, cudaStream_t s) {
  return launch_one(be, moe_one_down_kernel, kDnWarps, dn_smem(p.row_bytes), p, dn_stage(p.row_bytes), items_bound,
                    pdl, s, "moe one-token down");
}

uint32_t sum_act_bytes(const TileParams& p, int32_t k) { return align16(kActLead + uint64_t(k) * p.act_stride); }

template <int kSplit>
uint64_t sum_smem(uint64_t act_bytes, uint64_t row_bytes) {
  return act_bytes + uint64_t{DnSum<kSplit>::kWarps} * DnSum<kSplit>::kRing * dn_stage(row_bytes);
}

template <int kSplit, bool kQuant>
bool launch_sum_variant(CudaBackend& be, const TileParams& p, const OneTokenSum& sa, bool pdl, cudaStream_t s) {
  constexpr int warps = DnSum<kSplit>::kWarps;
  const uint32_t act_bytes = kQuant ? sum_act_bytes(p, sa.k) : 0;  // the hidden rows quantized in shared memory
  const uint64_t smem = sum_smem<kSplit>(act_bytes, p.row_bytes);
  auto kernel = moe_one_down_sum_kernel<kSplit, kQuant>;
  const char* what = "moe one-token down + slot sum";
  int per_sm = 0, sms = 0;
  if (!be.check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, warps * kWarp, smem), what) ||
      !be.check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, be.device()), what))
    return false;
  // A unit (kSplit warps) per tile where the grid allows: one wave at most.
  const int64_t cap = std::max<int64_t>(1, int64_t{std::max(per_sm, 1)} * sms);
  const int64_t units = warps / kSplit;
  const int64_t blocks = std::clamp<int64_t>((p.n_tiles + units - 1) / units, 1, cap);
  return be.check(launch_dependent(pdl, dim3(static_cast<unsigned>(blocks)), dim3(warps * kWarp), smem, s, kernel, p,
                                   sa, dn_stage(p.row_bytes), act_bytes),
                  what);
}

bool one_token_sum_fits(CudaBackend& be, int fold, int32_t k, uint64_t h_stride, uint64_t dn_row_bytes) {
  if (fold < 1 || fold > 4 || k < 1 || k > kOneSumMaxSlots) return false;
  const uint64_t act = align16(kActLead + uint64_t(k) * h_stride);
  const uint64_t smem = fold % 2 == 1 ? sum_smem<1>(act, dn_row_bytes) : sum_smem<2>(act, dn_row_bytes);
  return smem <= static_cast<uint64_t>(smem_limit(be.device()));
}

bool launch_one_down_sum(CudaBackend& be, const TileParams& p, const OneTokenSum& sa, int fold, bool pdl,
                         cudaStream_t s) {
  switch (fold) {
    case 1: return launch_sum_variant<1, false>(be, p, sa, pdl, s);
    case 2: return launch_sum_variant<2, false>(be, p, sa, pdl, s);
    case 3: return launch_sum_variant<1, true>(be, p, sa, pdl, s);
    default: return launch_sum_variant<2, true>(be, p, sa, pdl, s);
  }
}

cudaError_t init_one_token_kernels() {
  int device = 0;
  cudaError_t e = cudaGetDevice(&device);
  const int limit = e == cudaSuccess ? smem_limit(device) : 0;
  if (e == cudaSuccess) e = cudaMemcpyToSymbol(c_one_grid, kIq2xxsGrid, sizeof(kIq2xxsGrid));
  for (auto k : {moe_one_gate_up_kernel<1>, moe_one_gate_up_kernel<2>, moe_one_gate_up_kernel<3>, moe_one_gate_up_kernel<4>,
                 moe_one_gate_up_kernel<6>, moe_one_gate_up_kernel<7>})
    if (e == cudaSuccess) e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, limit);
  if (e == cudaSuccess) e = cudaFuncSetAttribute(moe_one_down_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, limit);
  for (auto k : {moe_one_down_sum_kernel<1, false>, moe_one_down_sum_kernel<2, false>, moe_one_down_sum_kernel<1, true>,
                 moe_one_down_sum_kernel<2, true>}) {
    // The static exchange arrays count against the same limit.
    cudaFuncAttributes fa{};
    if (e == cudaSuccess) e = cudaFuncGetAttributes(&fa, k);
    if (e == cudaSuccess)
      e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, limit - static_cast<int>(fa.sharedSizeBytes));
  }
  return e;
}

}  // namespace ds4::backend::cuda
