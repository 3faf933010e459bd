// moe_one_lean.cu — lean kernels for the routed experts of a one-token decode step (session 11,
// CudaBackendOptions::expert_one_token V + 10·F with V = 8: gate/up, F = 5: down + slot sum). The same work,
// the same integer sums and float expressions as moe_one_token.cu's variant 7 and fold 2 — so the same bits —
// at fewer instructions per item: the Flash shapes compile-time (gate/up rows of 16 IQ2_XXS blocks = 1,056 B,
// down rows of 8 Q2_K blocks = 672 B), so every weight and table load is a 32-bit shared address plus an
// immediate, with no 64-bit row arithmetic per group; the expert ids and routing weights of the k ≤ 8 slots in
// lane registers (a shuffle per item, no global load); a row's block terms added through a warp's 256 B of
// shared memory (2 stores, 4 lanes reading 16 terms each) instead of 16 shuffles a row.
//
// Gate/up (variant 8): variant 7's items (two rows of gate and of up over the token's slots, 12 warps × 3
// stages beside the 64 KB perm tables, x quantized by every block into shared memory after the wait) with
// another lane layout: lane (matrix m = lane / 16, block bl = lane % 16) decodes all 8 groups of block bl of
// both rows of matrix m (the byte-permute decode of moe_one_token.cu, lookups at [table + offset]: one address
// register and the tables' uniform base), holding the block's 256 token values in 64 registers — so a block's
// integer sum is one lane's (no octet reduce-scatter: 2 × 7 shuffles and their selects an item) and its quant
// bytes are 17 words per row instead of 24. Its term QDot's (f16(d)·d_x)·sum goes to the warp's terms; the 4
// lanes 2r + m then add row r of matrix m from 0.0f in block order, ·0.125, SwiGLU and the routing weight as
// tile_row_finish.
// Down (fold 5): fold 2's work split (two warps of a block per tile of 4 output rows, the first taking slots
// [0, ⌈k/2⌉) and handing its partial sum to the second at a named barrier; 16 warps × 4 stages) with another
// lane layout: lane (block b = lane / 4, quarter c = lane % 4 = 2h + jh) takes quant bytes 32h + 16jh … + 15
// of block b of each of the 4 rows — 4 words, whose 2-bit fields at 2l (l = 0 … 3) are values
// 128h + 32l + 16jh + i, i.e. 4 whole sub-blocks 8h + 2l + jh: each word read once and masked in place 4 times
// (fold 2 reads each word 4 times, once per l). Sub-block sums (4^l times the sum, shifted back: exact) and
// their scales go through two dp2a (sums as int16 pairs, |sum| ≤ 6,144), the min terms through two more
// (the pair's bsums × the min nibbles); the quad's reduce-scatter (3 shuffles an array) leaves lane (b, c)
// with row c's sums of block b, its term q2k_finish's, and lane r < 4 adds row r's 8 terms in block order.
// A warp's pairs' quantized hidden rows (values, bsums, d) are loaded into registers once, after the wait.
// Deliberately not here: other shapes or types (moe_one_token.cu's variants and the tiles take them), more
// than one token, the prologue, the hidden rows' quantization and the dispatch (moe_tiles.cu).
#include "backend/cuda/moe_one_lean.h"

#include <algorithm>

#include "backend/cuda/act_quant.cuh"
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_impl.h"
#include "backend/cuda/mma_s8.cuh"
#include "backend/cuda/moe_warp_ring.cuh"
#include "quant/blocks.h"
#include "quant/iq2xxs_tables.h"
#include "quant/iq2xxs_words.h"

namespace ds4::backend::cuda {

namespace {

__constant__ uint64_t c_lean_grid[256];

constexpr uint32_t kIq2Blk = 66, kQ2kBlk = 84;   // sizeof(BlockIQ2_XXS), sizeof(BlockQ2_K)
constexpr uint32_t kGuRow = 16 * kIq2Blk;        // a gate/up row: 16 IQ2_XXS blocks (dim 4,096)
constexpr uint32_t kDnRow = 8 * kQ2kBlk;         // a down row: 8 Q2_K blocks (ff 2,048)
constexpr uint32_t kPitch = 304;                 // Q8_K activation block pitch (moe_terms.cuh kQ8KPitch)
constexpr uint32_t kLead = 12;                   // moe_terms.cuh kActLead

// Gate/up: an item = 2 rows of gate, 96 bytes of padding (up's rows then start 8 banks on: a warp's quant loads
// meet at most two to a bank), the same 2 rows of up, and 16 spare bytes (a group's third quant word may reach
// past up's last block); x's 16 blocks, a warp's 64 block terms. Shapes (GuShape): variant 8 = 12 warps ×
// 3 stages (variant 7's), variant 9 = 16 warps × 2 stages (more warps to hide the table lookups, one item in
// flight a warp; 125 registers a thread fit 16 warps).
constexpr uint32_t kGuMat = 2 * kGuRow;                      // 2,112 B: an item's rows of one matrix
constexpr uint32_t kGuUp = kGuMat + 96;                      // up's rows in a stage (2,208 ≡ 32 mod 128)
constexpr uint32_t kGuStage = kGuUp + kGuMat + 16;           // 4,336 B
constexpr uint32_t kGuAct = (kLead + 16 * kPitch + 15) / 16 * 16;
constexpr uint32_t kGuTerms = 4 * 16 * 4;                    // [row][matrix][block] floats
template <int V>
struct GuShape {
  static constexpr int kWarps = V == 9 ? 16 : 12, kRing = V == 9 ? 2 : 3;
  static constexpr uint32_t kRings = kWarps * kRing * kGuStage;
  static constexpr uint64_t kSmem = kPermTableBytes + kRings + kGuAct + uint64_t{kWarps} * kGuTerms;
};

// Down: an item = 4 rows (2,688 B) of one slot's expert; 16 warps (8 units of 2) × 4 stages.
constexpr int kDnRows = 4, kDnWarps = 16, kDnUnits = kDnWarps / 2, kDnRing = 4;
constexpr int kDnHalfSlots = kOneSumMaxSlots / 2;            // slots of a warp at most
constexpr uint32_t kDnItem = kDnRows * kDnRow;
constexpr uint64_t kDnSmem = uint64_t{kDnWarps} * kDnRing * kDnItem;

// 16-byte cp.async at a 32-bit shared address, both sides + immediate offsets (L2 only: weights read once).
template <uint32_t kDst, uint32_t kSrc>
__device__ inline void cp16(uint32_t dst, const uint8_t* src) {
  asm volatile("cp.async.cg.shared.global [%0+%2], [%1+%3], 16;\n" ::"r"(dst), "l"(src), "n"(kDst), "n"(kSrc)
               : "memory");
}

// A perm-table word at shared address a (the tables are constant once filled: no memory clobber).
__device__ inline uint32_t tab_ld(uint32_t a) {
  uint32_t v;
  asm("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(a));
  return v;
}
__device__ inline uint32_t tab_ld_sign(uint32_t a) {  // the sign half of an entry: + 128
  uint32_t v;
  asm("ld.shared.u32 %0, [%1+128];" : "=r"(v) : "r"(a));
  return v;
}

// acc + the exact integer sum of one IQ2_XXS group (a0: 4 grid indices, a1: 4 × 7 sign bits and the 4-bit
// scale) with the token's 32 Q8_K values x, times 2·(a1 >> 28) + 1: moe_one_token.cu's iq2_group_isum, the
// tables read at tab + offset (tab: their shared address, lane4 = 4 × lane: the lane's copy); pos =
// kIq2xxsPermPos, held in a register (a byte permute takes one immediate, the other candidate word a register).
// Q (moe_one_lean.h, session 13): 0 the OR on the ALU pipe; 1 the OR as g·one + s (one = 1 read back from an
// unused table word like pos, so ptxas cannot fold it into a LOP3); 3 as 1 (with half-block lanes, in the kernel).
// (2, also sel >> 16 as an IMAD.HI, was no faster in the op and slower in decode steps: removed.)
template <int Q>
__device__ inline int group_isum(uint32_t a0, uint32_t a1, const uint32_t (&x)[8], uint32_t tab, uint32_t lane4, uint32_t pos,
                                 uint32_t one, int acc) {
  int sum = 0;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const uint32_t go = prmt(a0, lane4, 0x5504u | (k << 4));  // bytes: 4·lane, index k, 0, 0
    const uint32_t so = ((k == 0 ? a1 << 8 : k == 1 ? a1 << 1 : a1 >> (7 * k - 8)) & 0x7f00u) | lane4;
    uint32_t sel;
    if constexpr (Q >= 1) {  // grid selectors use bits 0–1 of each nibble, sign selectors bit 2: g + s = g | s
      asm("mad.lo.u32 %0, %1, %2, %3;" : "=r"(sel) : "r"(tab_ld(tab + go)), "r"(one), "r"(tab_ld_sign(tab + so)));
    } else {
      sel = tab_ld(tab + go) | tab_ld_sign(tab + so);
    }
    sum = __dp4a(static_cast<int>(prmt(pos, kIq2xxsPermNeg, sel)), static_cast<int>(x[2 * k]), sum);
    sum = __dp4a(static_cast<int>(prmt(pos, kIq2xxsPermNeg, sel >> 16)), static_cast<int>(x[2 * k + 1]), sum);
  }
  // 2·(a1 >> 28) + 1 = (a1 >> 27) | 1 (bit 27 — a sign bit — lands on the 1): two operations and the multiply-add.
  return acc + sum * static_cast<int>((a1 >> 27) | 1u);
}

// Reduce-scatter of 4 integers over a quad of lanes: v[0] of lane l ends with the quad's sum of index l & 3.
__device__ inline void quad_reduce4(int (&v)[4], int lane) {
  const bool b1 = lane & 2, b0 = lane & 1;
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const int send = b1 ? v[j] : v[j + 2], keep = b1 ? v[j + 2] : v[j];
    v[j] = keep + __shfl_xor_sync(0xffffffffu, send, 2);
  }
  const int send = b0 ? v[0] : v[1], keep = b0 ? v[1] : v[0];
  v[0] = keep + __shfl_xor_sync(0xffffffffu, send, 1);
}

// An L2 prefetch of the 128-byte line at a with the evict_last priority (so this kernel's own streamed weights
// leave L2 first); no data comes back to the SM, the bits are untouched.
__device__ inline void l2_line_last(const uint8_t* a) { asm volatile("prefetch.global.L2::evict_last [%0];" ::"l"(a)); }

// Session 12 (pf.mode 5): the token's down weights — k experts × dim rows × 672 B = 16.5 MB at k = 6 — asked into
// L2 by every thread of the gate/up grid once its warp's last item has landed, a line each per slot (21,504 lines
// an expert, 67,584 threads), so the down kernel, which can only start its copies as gate/up blocks leave the
// SMs, finds them in L2. Bad ids are skipped (nothing outside the tensor is touched).
template <int kWarps>
__device__ inline void prefetch_down(const LeanPrefetch& pf, int32_t k, int32_t my_id, uint32_t ok_mask, int wid, int lane) {
  const uint64_t t = (static_cast<uint64_t>(blockIdx.x) * kWarps + wid) * kWarp + lane;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * kWarps * kWarp;
  const uint64_t lines = (pf.dn_expert_bytes + 127) / 128;
  for (int32_t j = 0; j < k; ++j) {
    const int32_t e = __shfl_sync(0xffffffffu, my_id, j);
    if (!((ok_mask >> j) & 1u)) continue;
    const uint8_t* base = pf.dn + static_cast<uint64_t>(e) * pf.dn_expert_bytes;
    for (uint64_t l = t; l < lines; l += stride) l2_line_last(base + 128 * l);
  }
}

template <int V, int Q>
__global__ void __launch_bounds__(GuShape<V>::kWarps* kWarp, 1)
    moe_one_lean_gate_up_kernel(TileParams p, OneTokenSum sa, LeanPrefetch pf) {
  constexpr int kGuWarps = GuShape<V>::kWarps, kGuRing = GuShape<V>::kRing;
  constexpr uint32_t kGuRings = GuShape<V>::kRings;
  extern __shared__ __align__(16) uint8_t smem[];
  const int lane = threadIdx.x % kWarp, wid = threadIdx.x / kWarp;
  const uint32_t tab = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const uint32_t ring_off = static_cast<uint32_t>(kPermTableBytes) + static_cast<uint32_t>(wid) * kGuRing * kGuStage;
  uint8_t* const sact = smem + kPermTableBytes + kGuRings;
  float* const terms = reinterpret_cast<float*>(sact + kGuAct + static_cast<uint32_t>(wid) * kGuTerms);
  // The tables while the kernel before finishes; then its outputs (ids, weights, x).
  fill_perm_tables(reinterpret_cast<uint32_t*>(smem), c_lean_grid, threadIdx.x, blockDim.x);
  // kIq2xxsPermPos in an unused word of the tables (entry 128's sign half: sign entries stop at 127), read back
  // below: a loaded value stays in a register, where a constant was rematerialised before each of the decode's
  // byte permutes (W1 SASS: 103 IMADs an item).
  // The decode's 1 (Q ≥ 1) likewise, in the next word.
  constexpr uint32_t kPosAt = 128 * 256 + 128;
  if (threadIdx.x == 0) {
    uint32_t* const w = reinterpret_cast<uint32_t*>(smem + kPosAt);
    w[0] = kIq2xxsPermPos;
    w[1] = 1;
  }
  grid_dependency_wait();
  grid_launch_dependents();  // the hidden rows' quantization may be placed; it waits for this grid's end
  const int32_t k = sa.k;    // ≤ kOneSumMaxSlots
  const int32_t my_id = lane < k ? sa.ids[lane] : -1;
  const uint32_t ok_mask = __ballot_sync(0xffffffffu, my_id >= 0 && my_id < sa.n_expert);
  const float my_w = lane < k ? p.weights[lane] : 0.0f;
  int64_t begin = 0, end = 0;
  // Items row-major (item = row pair · k + slot; p.n_tiles = ff / 2): every warp gets rows of every slot alike.
  warp_run(static_cast<int64_t>(k) * p.n_tiles, kGuWarps, wid, begin, end);
  const int n = static_cast<int>(end - begin);
  int32_t ig = k > 0 ? static_cast<int32_t>(begin % k) : 0;  // the next item to copy
  int64_t it = k > 0 ? begin / k : 0;
  // pf.mode 5: the down weights asked for once the warp's last item has landed (below; a warp without items
  // asks now).
  if (pf.mode == 5 && n == 0) prefetch_down<kGuWarps>(pf, k, my_id, ok_mask, wid, lane);
  auto issue = [&](int stage) {
    const int32_t e = __shfl_sync(0xffffffffu, my_id, ig);
    if ((ok_mask >> ig) & 1u) {  // a bad id's items copy nothing
      const uint64_t off = static_cast<uint64_t>(e) * p.expert_bytes + static_cast<uint64_t>(it) * kGuMat + 16u * lane;
      const uint8_t* g = p.w + off;
      const uint8_t* u = p.w2 + off;
      const uint32_t d = tab + ring_off + static_cast<uint32_t>(stage) * kGuStage + 16u * lane;
      cp16<0, 0>(d, g);
      cp16<512, 512>(d, g);
      cp16<1024, 1024>(d, g);
      cp16<1536, 1536>(d, g);
      cp16<kGuUp, 0>(d, u);
      cp16<kGuUp + 512, 512>(d, u);
      cp16<kGuUp + 1024, 1024>(d, u);
      cp16<kGuUp + 1536, 1536>(d, u);
      if (lane < 4) {  // chunks 128 … 131 of each matrix
        cp16<2048, 2048>(d, g);
        cp16<kGuUp + 2048, 2048>(d, u);
      }
    }
    if (++ig == k) ig = 0, ++it;
  };
#pragma unroll
  for (int s = 0; s < kGuRing - 1; ++s) {
    if (s < n) issue(s);
    cp_async_commit();
  }
  // x [dim] quantized into shared memory after the rings' first copies (quantize_q8_K_warp: the prologue's bytes).
  for (int blk = wid; blk < 16; blk += kGuWarps) {
    const float4* src = reinterpret_cast<const float4*>(sa.x + blk * kQK_K + 8 * lane);
    const float4 a = src[0], b = src[1];
    const float v[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
    quantize_q8_K_warp(v, lane, sact + kLead + blk * kPitch);
  }
  __syncthreads();  // tables and x
  // Lane (matrix m = lane / 16, block bl = lane % 16) computes whole blocks: no reduction between lanes.
  // Q = 3 (session 13): lane (block bl = lane / 2, half hh = lane % 2) computes groups 4hh … 4hh + 3 of block bl
  // of both matrices and rows, its 128 token values in 32 registers (96 registers a thread instead of 125); the
  // pair's integer sums add exactly (one shuffle), lane hh = 0 stores the term.
  constexpr bool kHalf = Q == 3;
  constexpr int kGroups = kHalf ? 4 : 8;
  const int m = kHalf ? 0 : lane / 16, bl = kHalf ? lane / 2 : lane % 16, hh = kHalf ? lane % 2 : 0;
  const uint8_t* const act = sact + kLead;
  uint32_t xa[kGroups][8];  // the token's values of block bl (its half: groups 4hh …), group by group
#pragma unroll
  for (int gi = 0; gi < kGroups; ++gi) {
    const uint4* q = reinterpret_cast<const uint4*>(act + bl * kPitch + 4 + 32 * (gi + kGroups * hh));
    const uint4 v0 = q[0], v1 = q[1];
    xa[gi][0] = v0.x, xa[gi][1] = v0.y, xa[gi][2] = v0.z, xa[gi][3] = v0.w;
    xa[gi][4] = v1.x, xa[gi][5] = v1.y, xa[gi][6] = v1.z, xa[gi][7] = v1.w;
  }
  const float dxb = q8k_d(act + bl * kPitch);
  // The lane's block in a stage: matrix m at m·kGuUp, row r at r·1,056, block bl at 66·bl (d), its quant bytes
  // from + 2; blocks are 66 B, so they are 2-byte aligned: 17 words from the aligned-down address and two funnel
  // shifts a group (stages and rows are multiples of 16 bytes: one shift for the kernel). Q = 3: 9 words from
  // + 32hh.
  const uint32_t qb = static_cast<uint32_t>(m) * kGuUp + static_cast<uint32_t>(bl) * kIq2Blk;
  const uint32_t qb4 = ((qb + 2) & ~3u) + 32u * static_cast<uint32_t>(hh), sh = 8 * ((qb + 2) & 3u);
  const uint32_t lane4 = 4u * static_cast<uint32_t>(lane);
  const uint32_t pos = *reinterpret_cast<volatile const uint32_t*>(smem + kPosAt);
  const uint32_t one = *reinterpret_cast<volatile const uint32_t*>(smem + kPosAt + 4);
  uint8_t* const ring = smem + ring_off;
  int32_t g = k > 0 ? static_cast<int32_t>(begin % k) : 0;  // the item computed
  int64_t row = k > 0 ? begin / k : 0;
  int cs = 0, is = kGuRing - 1;  // stage computed, stage of the next copy
  for (int i = 0; i < n; ++i) {
    if (i + kGuRing - 1 < n) issue(is);
    cp_async_commit();
    cp_async_wait<kGuRing - 1>();  // this item's copies have landed …
    __syncwarp();                  // … for every lane
    if (pf.mode == 5 && i == n - 1) prefetch_down<kGuWarps>(pf, k, my_id, ok_mask, wid, lane);
    const uint8_t* const wt = ring + static_cast<uint32_t>(cs) * kGuStage;
    if ((ok_mask >> g) & 1u) {
#pragma unroll
      for (int rm = 0; rm < (kHalf ? 4 : 2); ++rm) {
        const int r = kHalf ? rm / 2 : rm, mm = kHalf ? rm % 2 : m;  // kHalf: row r, matrix mm
        const uint32_t mo = kHalf ? static_cast<uint32_t>(mm) * kGuUp : 0u;
        const uint32_t* qw = reinterpret_cast<const uint32_t*>(wt + qb4 + mo + r * kGuRow);
        int isum = 0;
        uint32_t w_lo = qw[0];
#pragma unroll
        for (int gi = 0; gi < kGroups; ++gi) {
          const uint32_t w_mid = qw[2 * gi + 1], w_hi = qw[2 * gi + 2];
          isum = group_isum<Q>(__funnelshift_r(w_lo, w_mid, sh), __funnelshift_r(w_mid, w_hi, sh), xa[gi], tab, lane4, pos,
                               one, isum);
          w_lo = w_hi;
        }
        if constexpr (kHalf) isum += __shfl_xor_sync(0xffffffffu, isum, 1);  // the block's exact integer sum
        // QDot<IQ2_XXS>::finish: (f16(d) · d_x) · sum, at terms[row r][matrix m][block bl].
        if (!kHalf || hh == 0)
          terms[(2 * r + mm) * 16 + bl] =
              f16_dev(*reinterpret_cast<const uint16_t*>(wt + qb + mo + r * kGuRow)) * dxb * static_cast<float>(isum);
      }
      __syncwarp();
      // Lane 2r + m (every quad alike) adds row r of matrix m from 0.0f in block order.
      const float4* t4 = reinterpret_cast<const float4*>(terms + 16 * (lane & 3));
      float acc = 0;
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const float4 t = t4[q];
        acc += t.x;
        acc += t.y;
        acc += t.z;
        acc += t.w;
      }
      const float upv = __shfl_xor_sync(0xffffffffu, acc, 1);
      const float w = __shfl_sync(0xffffffffu, my_w, g);
      if (lane == 0 || lane == 2)
        p.y[static_cast<int64_t>(g) * p.y_stride + 2 * row + lane / 2] = tile_row_finish<true, true>(acc, upv, p.clamp, w);
    }
    __syncwarp();  // this stage and the terms are rewritten next
    if (++g == k) g = 0, ++row;
    cs = cs == kGuRing - 1 ? 0 : cs + 1;
    is = is == kGuRing - 1 ? 0 : is + 1;
  }
  cp_async_wait<0>();
}

// One pair's quantized hidden values for a down lane (block b, quarter 2h + jh): the 16-byte pieces
// 128h + 32l + 16jh (l = 0 … 3) of block b, the bsums of sub-blocks 8h + 2l + jh as int16 pairs (l = 0, 1 and
// 2, 3), and d.
struct DnAct {
  uint4 x[4];
  uint32_t bs01, bs23;
  float d;
};

__device__ inline void load_dn_act(const uint8_t* blk, int h, int jh, DnAct& a) {
#pragma unroll
  for (int l = 0; l < 4; ++l) a.x[l] = *reinterpret_cast<const uint4*>(blk + 4 + 128 * h + 32 * l + 16 * jh);
  const uint4 b = *reinterpret_cast<const uint4*>(blk + 260 + 16 * h);  // bsums 8h … 8h + 7 (16-byte aligned)
  const uint32_t sel = jh ? 0x7632u : 0x5410u;                           // the jh halves
  a.bs01 = prmt(b.x, b.y, sel);
  a.bs23 = prmt(b.z, b.w, sel);
  a.d = *reinterpret_cast<const float*>(blk);
}

// Integer sums of one down row's block b quarter (4 quant words q, scale/min words sc0, sc1 of sub-blocks
// 8h … 8h + 7) with a pair's values: isum = Σ_l scale_l · sub_l, msum = Σ_l min_l · bsum_l over the lane's 4
// sub-blocks 8h + 2l + jh (q2k_piece's, exact in any grouping).
__device__ inline void dn_quarter(const uint32_t (&q)[4], uint32_t sc0, uint32_t sc1, uint32_t sel, const DnAct& a,
                                  int& isum, int& msum) {
  int sub[4];
#pragma unroll
  for (int l = 0; l < 4; ++l) {
    const uint32_t mask = 0x03030303u << (2 * l);
    int s = dp4a_us(q[0] & mask, a.x[l].x, 0);
    s = dp4a_us(q[1] & mask, a.x[l].y, s);
    s = dp4a_us(q[2] & mask, a.x[l].z, s);
    s = dp4a_us(q[3] & mask, a.x[l].w, s);
    sub[l] = s >> (2 * l);  // 4^l times the sub-block's sum: exact
  }
  const uint32_t sm = prmt(sc0, sc1, sel);  // bytes: sub-blocks 8h + jh + 2l, l = 0 … 3
  const int scales = static_cast<int>(sm & 0x0f0f0f0fu), mins = static_cast<int>((sm >> 4) & 0x0f0f0f0fu);
  // |sub| ≤ 16 · 3 · 128: int16 pairs for dp2a.
  isum = __dp2a_lo(static_cast<int>(prmt(static_cast<uint32_t>(sub[0]), static_cast<uint32_t>(sub[1]), 0x5410u)), scales, 0);
  isum = __dp2a_hi(static_cast<int>(prmt(static_cast<uint32_t>(sub[2]), static_cast<uint32_t>(sub[3]), 0x5410u)), scales, isum);
  msum = __dp2a_lo(static_cast<int>(a.bs01), mins, 0);
  msum = __dp2a_hi(static_cast<int>(a.bs23), mins, msum);
}

__global__ void __launch_bounds__(kDnWarps* kWarp, 1) moe_one_lean_down_kernel(TileParams p, OneTokenSum sa) {
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ float xch[kDnUnits][2][kDnRows];                  // a unit's partial sums, by tile parity
  __shared__ float held[kDnWarps][kDnHalfSlots][kDnRows];      // second warps' slot values
  __shared__ __align__(16) float terms[kDnWarps][kDnRows * 8];  // a warp's block terms [row][block]
  const int lane = threadIdx.x % kWarp, wid = threadIdx.x / kWarp;
  const int unit = wid / 2, half = wid % 2;
  const uint32_t ring_off = static_cast<uint32_t>(wid) * kDnRing * kDnItem;
  const uint32_t ring_s = static_cast<uint32_t>(__cvta_generic_to_shared(smem)) + ring_off;
  const int32_t k = sa.k, kh = (k + 1) / 2;
  const int32_t j0 = half == 0 ? 0 : kh, j1 = half == 0 ? kh : k;
  const int32_t ns = j1 - j0;  // slots of this warp (≤ kDnHalfSlots)
  int64_t tb = 0, te = 0;      // this unit's tiles
  warp_run(p.n_tiles, kDnUnits, unit, tb, te);
  const int64_t n = (te - tb) * ns;
  // The slots' ids come from the router, complete before the kernel before this one started.
  const int32_t my_id = lane < k ? sa.ids[lane] : -1;
  const uint32_t ok_mask = __ballot_sync(0xffffffffu, my_id >= 0 && my_id < sa.n_expert);
  int32_t ij = j0;
  int64_t it = tb;
  auto issue = [&](int stage) {
    const int32_t e = __shfl_sync(0xffffffffu, my_id, ij);
    if ((ok_mask >> ij) & 1u) {
      const uint8_t* src = p.w + static_cast<uint64_t>(e) * p.expert_bytes + static_cast<uint64_t>(it) * kDnItem + 16u * lane;
      const uint32_t d = ring_s + static_cast<uint32_t>(stage) * kDnItem + 16u * lane;
      cp16<0, 0>(d, src);
      cp16<512, 512>(d, src);
      cp16<1024, 1024>(d, src);
      cp16<1536, 1536>(d, src);
      cp16<2048, 2048>(d, src);
      if (lane < 8) cp16<2560, 2560>(d, src);  // chunks 160 … 167
    }
    if (++ij == j1) ij = j0, ++it;
  };
#pragma unroll
  for (int s = 0; s < kDnRing - 1; ++s) {
    if (s < n) issue(s);
    cp_async_commit();
  }
  grid_dependency_wait();  // the quantized hidden rows come from the kernel before
  const int b = lane / 4, c = lane % 4, h = c / 2, jh = c % 2;
  // This warp's pairs' values, loaded once (a unit has one tile at the Flash shapes: 1,024 tiles, 1,024 units).
  DnAct xs[kDnHalfSlots];
#pragma unroll
  for (int jj = 0; jj < kDnHalfSlots; ++jj)
    if (jj < ns && ((ok_mask >> (j0 + jj)) & 1u))
      load_dn_act(p.act + kLead + static_cast<uint64_t>(j0 + jj) * p.act_stride + b * p.act_pitch, h, jh, xs[jj]);
  const uint32_t sel = jh ? 0x7531u : 0x6420u;      // scale bytes jh, jh + 2 of each word
  const uint32_t qo = b * kQ2kBlk + 16 + 16 * c;    // the quarter's quant words in a row
  const uint32_t so = b * kQ2kBlk + 8 * h;          // its scale/min words
  const uint32_t fo = c * kDnRow + b * kQ2kBlk + 80;  // d and dmin of (row c, block b)
  uint8_t* const ring = smem + ring_off;
  float* const tw = terms[wid];
  float sum = 0;
  int64_t item = 0;
  int cs = 0, is = kDnRing - 1;
  for (int64_t t = tb; t < te; ++t) {
#pragma unroll
    for (int jj = 0; jj < kDnHalfSlots; ++jj) {
      if (jj >= ns) break;
      const int32_t j = j0 + jj;
      if (item + kDnRing - 1 < n) issue(is);
      cp_async_commit();
      cp_async_wait<kDnRing - 1>();
      __syncwarp();
      const uint8_t* const wt = ring + static_cast<uint32_t>(cs) * kDnItem;
      float v = NAN;
      if ((ok_mask >> j) & 1u) {
        int is4[4], ms4[4];
#pragma unroll
        for (int r = 0; r < kDnRows; ++r) {
          const uint32_t* qw = reinterpret_cast<const uint32_t*>(wt + r * kDnRow + qo);
          const uint32_t q[4] = {qw[0], qw[1], qw[2], qw[3]};
          const uint32_t* sw = reinterpret_cast<const uint32_t*>(wt + r * kDnRow + so);
          dn_quarter(q, sw[0], sw[1], sel, xs[jj], is4[r], ms4[r]);
        }
        quad_reduce4(is4, lane);
        quad_reduce4(ms4, lane);
        // q2k_finish of (row c, block b).
        const uint32_t dd = *reinterpret_cast<const uint32_t*>(wt + fo);
        const float dall = xs[jj].d * f16_dev(static_cast<uint16_t>(dd & 0xffffu));
        const float dmin = xs[jj].d * f16_dev(static_cast<uint16_t>(dd >> 16));
        tw[c * 8 + b] = dall * static_cast<float>(is4[0]) - dmin * static_cast<float>(ms4[0]);
        __syncwarp();
        // Lane r (every quad alike) adds row r's terms from 0.0f in block order.
        const float4* t4 = reinterpret_cast<const float4*>(tw + 8 * (lane & 3));
        const float4 ta = t4[0], tb4 = t4[1];
        float acc = 0;
        acc += ta.x;
        acc += ta.y;
        acc += ta.z;
        acc += ta.w;
        acc += tb4.x;
        acc += tb4.y;
        acc += tb4.z;
        acc += tb4.w;
        v = tile_row_finish<false, false>(acc, 0.0f, 0.0f, 0.0f);
      }
      if (half == 1) {
        if (lane < kDnRows) held[wid][jj][lane] = v;
      } else {
        sum = j == 0 ? v : sum + v;  // moe_sum_kernel's order
      }
      __syncwarp();  // this stage and the terms are rewritten next
      ++item;
      cs = cs == kDnRing - 1 ? 0 : cs + 1;
      is = is == kDnRing - 1 ? 0 : is + 1;
    }
    float* const out = sa.out + t * kDnRows + lane;
    const int par = static_cast<int>(t & 1);
    if (half == 0 && lane < kDnRows) xch[unit][par][lane] = sum;
    // The unit's two warps meet once a tile (named barrier 1 + unit of 64 threads); by tile parity, the
    // partial a first warp writes next is one its second warp read before arriving here.
    asm volatile("bar.sync %0, %1;" ::"r"(1 + unit), "r"(2 * kWarp) : "memory");
    if (half == 1 && lane < kDnRows) {
      float s = xch[unit][par][lane];
      for (int32_t jj = 0; jj < ns; ++jj) s = s + held[wid][jj][lane];
      *out = s;
    }
  }
  cp_async_wait<0>();
}

int smem_optin(int device) {
  int limit = 0;
  if (cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess) return 0;
  return limit;
}

// One block per SM at most (their shared memory), no more blocks than `per_block` units of work fill.
template <typename... A>
bool launch_lean(CudaBackend& be, bool pdl, void (*kernel)(A...), int warps, uint64_t smem, int64_t units,
                 int64_t per_block, cudaStream_t s, const char* what, const A&... args) {
  int sms = 0;
  if (!be.check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, be.device()), what)) return false;
  const int64_t blocks = std::clamp<int64_t>((units + per_block - 1) / per_block, 1, std::max(sms, 1));
  return be.check(launch_dependent(pdl, dim3(static_cast<unsigned>(blocks)), dim3(warps * kWarp), smem, s, kernel, args...),
                  what);
}

}  // namespace

bool one_lean_gate_up_fits(CudaBackend& be, int variant, int64_t ff) {
  const uint64_t smem = variant == 9 ? GuShape<9>::kSmem : GuShape<8>::kSmem;
  return (variant == 8 || variant == 9) && ff % 2 == 0 && smem <= static_cast<uint64_t>(smem_optin(be.device()));
}

bool one_lean_down_fits(CudaBackend& be, int32_t k, uint64_t dn_row_bytes) {
  cudaFuncAttributes fa{};
  if (cudaFuncGetAttributes(&fa, moe_one_lean_down_kernel) != cudaSuccess) return false;
  return k >= 1 && k <= kOneSumMaxSlots && dn_row_bytes == kDnRow &&
         kDnSmem + fa.sharedSizeBytes <= static_cast<uint64_t>(smem_optin(be.device()));
}

template <int V, int Q>
bool launch_gate_up_shape(CudaBackend& be, const TileParams& p, const OneTokenSum& sa, const LeanPrefetch& pf, bool pdl,
                          cudaStream_t s) {
  TileParams q = p;  // items of two rows
  q.n_tiles = p.n_tiles / 2;
  using S = GuShape<V>;
  return launch_lean(be, pdl, moe_one_lean_gate_up_kernel<V, Q>, S::kWarps, S::kSmem, int64_t{sa.k} * q.n_tiles, S::kWarps,
                     s, "moe one-token gate/up (variant 8, 9)", q, sa, pf);
}

bool launch_one_lean_gate_up(CudaBackend& be, const TileParams& p, const OneTokenSum& sa, int variant, bool pdl,
                             cudaStream_t s, const LeanPrefetch& pf, int decode) {
  if (variant != 9) return launch_gate_up_shape<8, 0>(be, p, sa, pf, pdl, s);
  return decode == 3   ? launch_gate_up_shape<9, 3>(be, p, sa, pf, pdl, s)
         : decode == 1 ? launch_gate_up_shape<9, 1>(be, p, sa, pf, pdl, s)
                       : launch_gate_up_shape<9, 0>(be, p, sa, pf, pdl, s);
}

bool launch_one_lean_down(CudaBackend& be, const TileParams& p, const OneTokenSum& sa, bool pdl, cudaStream_t s) {
  return launch_lean(be, pdl, moe_one_lean_down_kernel, kDnWarps, kDnSmem, p.n_tiles, kDnUnits, s,
                     "moe one-token down + slot sum (fold 5)", p, sa);
}

// The gate/up kernels' dynamic shared memory limit (V = 9 with every decode Q).
template <int V, int... Q>
cudaError_t set_gate_up_smem(int limit) {
  cudaError_t e = cudaSuccess;
  if (GuShape<V>::kSmem > static_cast<uint64_t>(limit)) return e;
  ((e = e == cudaSuccess ? cudaFuncSetAttribute(moe_one_lean_gate_up_kernel<V, Q>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                  static_cast<int>(GuShape<V>::kSmem))
                         : e),
   ...);
  return e;
}

cudaError_t init_one_lean_kernels() {
  int device = 0;
  cudaError_t e = cudaGetDevice(&device);
  const int limit = e == cudaSuccess ? smem_optin(device) : 0;
  if (e == cudaSuccess) e = cudaMemcpyToSymbol(c_lean_grid, kIq2xxsGrid, sizeof(kIq2xxsGrid));
  if (e == cudaSuccess) e = set_gate_up_smem<8, 0>(limit);
  if (e == cudaSuccess) e = set_gate_up_smem<9, 0, 1, 3>(limit);
  cudaFuncAttributes fa{};
  if (e == cudaSuccess) e = cudaFuncGetAttributes(&fa, moe_one_lean_down_kernel);
  if (e == cudaSuccess && kDnSmem + fa.sharedSizeBytes <= static_cast<uint64_t>(limit))
    e = cudaFuncSetAttribute(moe_one_lean_down_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kDnSmem));
  return e;
}

}  // namespace ds4::backend::cuda
