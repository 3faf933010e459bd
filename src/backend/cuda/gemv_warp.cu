// gemv_warp.cu — dense Q8_0 matmuls of 1..kWarpMaxVec (4) vectors on per-warp bulk-copy rings (sm_90): the
// StreamSet parts of gemv_stream.cu / gemv_rows.cu (one matrix, out_a's groups, matmul_many's matrices sharing
// an input), each resident block a contiguous row range of one part (dense_block_range), and within the block
// every warp its own stream: tiles of RW whole rows (~8.5 KB: RW = 8 rows of 1024 columns, 4 of 2048, 2 of
// 4096, 1 of 8192), tile t of the block to warp t % 8, each warp a ring of `slots` such tiles (one
// `cp.async.bulk` copy per tile, the rows being contiguous; its own mbarrier per slot, bulk_copy.cuh).
// Per tile the warp forms the block terms (dense_block_terms, lane per (row, block)) into its own term buffer,
// refills the slot, and lanes per (row, vector) add their row's terms from 0.0f in block order
// (dense_row_sum) — the CPU's bits (src/backend/cuda/README.md's numerics contract), as every dense kernel.
//
// Why (docs/PERF.md, session 9 "Dense decode matvecs on bulk copies"): the bulk rings of gemv_stream.cu
// stream at 79 % of DRAM peak on the head but stall 45 % at their block-wide tile barriers (terms, then
// chains, then the next tile) on the 35 MB matrices; gemv_rows.cu keeps one 70 KB tile in flight per SM
// and every SM's tile lands at about the same time, so DRAM idles for a latency between tiles. Here no
// barrier joins the warps after the activations: 8 warps × slots tiles (up to ~200 KB) in flight per SM,
// refilled one warp at a time, every slot of a block requested before griddepcontrol.wait (the small
// matrices: every tile of the launch in one memory latency).
// Deliberately not here: choosing jobs (CudaBackend::gemv and gemv_stream_many; gemv_warp_wins), more than 4
// vectors (gemv_stream.cu, gemv_mma.cu), other weight types, below sm_90 (the bodies trap; never launched).
#include <algorithm>

#include "backend/cuda/act_quant.cuh"
#include "backend/cuda/bulk_copy.cuh"
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_impl.h"
#include "backend/cuda/dense_parts.cuh"
#include "backend/cuda/dense_q8.cuh"

namespace ds4::backend::cuda {

namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * kWarp;
constexpr uint64_t kSlotTarget = 8704;       // default weight bytes a tile holds (at least one row): 256 Q8_0 blocks
constexpr int kMaxSlots = 4;
constexpr int kMaxTileRows = 32;
constexpr uint64_t kMaxSmem = 227 * 1024;    // sm_90's opt-in per block
// Tiles of ≤ kPairTileBytes (gemv_warp_tile_bytes): two slots a warp and ≤ kPairSmem a block, so that two blocks
// fit on an SM — the next launch's block (a programmatic dependent) starts its weight copies beside this one's tail.
constexpr uint64_t kPairTileBytes = 4352;
constexpr uint64_t kPairSmem = 112 * 1024;
constexpr int64_t kFusedMaxValues = 8192;    // n·cols above this: one quantize_act first (as gemv_stream.cu)

struct WarpParams {
  DensePart part[kStreamMaxParts];
  int32_t n_parts, n_vec;
  int32_t nb;           // blocks per row (a multiple of 8)
  int32_t tile_rows;    // RW: whole rows per tile
  int32_t slots;        // tiles in flight per warp
  uint32_t nb_magic;    // dense_div_magic(nb)
  uint64_t row_bytes;   // 34·nb, a multiple of 16
  uint32_t slot_bytes;  // RW·row_bytes + 16 (dense_block_terms' 9-word reads past a row's last even block)
  uint32_t act_off;     // smem: quantized activations [n_vec][nb · 36]
  uint32_t terms_off;   // smem: per warp [n_vec][RW][term_pitch] floats
  uint32_t term_pitch;  // nb + 4: 16-byte aligned rows, 4 banks apart (the chain lanes read different rows)
  uint32_t warp_terms;  // floats per warp: n_vec · RW · term_pitch
  uint32_t bar_off;     // smem: [kWarps][slots] uint64 mbarriers
  int64_t x_stride;
  uint64_t act_vec;
};

// NV: the most vectors of the instantiation (p.n_vec ≤ NV).
template <int NV>
__global__ void __launch_bounds__(kThreads, 2) gemv_warp_kernel(const __grid_constant__ WarpParams p) {
  extern __shared__ __align__(16) uint8_t sm[];
  const DenseRange range = dense_block_range(p.part, p.n_parts);
  const DensePart& P = *range.part;
  const int64_t rb = range.rb;
  const int rows = static_cast<int>(range.rows), RW = p.tile_rows, S = p.slots;
  const int warp = static_cast<int>(threadIdx.x / kWarp), lane = static_cast<int>(threadIdx.x % kWarp);
  const int n_tiles = (rows + RW - 1) / RW;
  const int my_tiles = warp < n_tiles ? (n_tiles - warp + kWarps - 1) / kWarps : 0;  // tiles warp, warp + 8, …
  const uint8_t* w = P.w + static_cast<uint64_t>(rb) * p.row_bytes;
  uint8_t* ring = sm + static_cast<uint32_t>(warp * S) * p.slot_bytes;
  uint64_t* bars = reinterpret_cast<uint64_t*>(sm + p.bar_off) + warp * S;

  // The warp's k-th tile (block tile warp + 8k: rows 8k·RW + warp·RW …) into slot k % S, by lane 0: one copy
  // of its whole rows, announced on the slot's barrier first.
  auto issue = [&](int k) {
    if (k >= my_tiles) return;
    const int r0 = (warp + k * kWarps) * RW;
    const uint32_t bytes = static_cast<uint32_t>(min(RW, rows - r0)) * static_cast<uint32_t>(p.row_bytes);
    uint64_t* bar = &bars[k % S];
    mbar_expect(bar, bytes);
    bulk_copy(ring + static_cast<uint32_t>(k % S) * p.slot_bytes, w + static_cast<uint64_t>(r0) * p.row_bytes, bytes,
              bar);
  };
  // The weights first: they do not depend on the kernel before this one (PDL: it may still run).
  if (lane == 0) {
    for (int s = 0; s < S; ++s) mbar_init(&bars[s]);
    for (int k = 0; k < S; ++k) issue(k);
  }
  grid_launch_dependents();  // a programmatic dependent may start its own weight copies now
  grid_dependency_wait();    // the activations (and y, which the kernel before may read) from here on

  uint8_t* act = sm + p.act_off;
  const uint32_t act_row = static_cast<uint32_t>(p.nb) * sizeof(BlockQ8_0Act);  // a multiple of 16 (nb % 8 == 0)
  if (P.act) {
    const int words = static_cast<int>(act_row / 16);
    for (int i = threadIdx.x; i < p.n_vec * words; i += kThreads) {
      const int v = i / words, c = i - v * words;
      reinterpret_cast<uint4*>(act + v * act_row)[c] =
          reinterpret_cast<const uint4*>(P.act + static_cast<uint64_t>(v) * p.act_vec)[c];
    }
    __syncthreads();  // (also makes lane 0's barrier initialisations visible to the warp)
  } else {
    quantize_q8_0_rows_to_smem(P.x, p.x_stride, p.n_vec, int64_t{p.nb} * kQK8_0, act, act_row);  // ends in a barrier
  }

  float* terms = reinterpret_cast<float*>(sm + p.terms_off) + warp * p.warp_terms;
  const uint32_t vstride = static_cast<uint32_t>(RW) * p.term_pitch;
  for (int k = 0; k < my_tiles; ++k) {
    const int s = k % S;
    mbar_wait(&bars[s], static_cast<uint32_t>(k / S) & 1u);  // tile k's bytes have landed
    const int r0 = (warp + k * kWarps) * RW;
    const int here = min(RW, rows - r0);
    const uint8_t* slot = ring + static_cast<uint32_t>(s) * p.slot_bytes;
    const uint32_t items = static_cast<uint32_t>(here) * static_cast<uint32_t>(p.nb);
    for (uint32_t i = lane; i < items; i += kWarp) {
      const int r = static_cast<int>(__umulhi(i, p.nb_magic)), b = static_cast<int>(i) - r * p.nb;  // i / nb, i % nb
      dense_block_terms<NV>(slot + static_cast<uint32_t>(r) * static_cast<uint32_t>(p.row_bytes), b, act, act_row,
                            p.n_vec, terms + r * p.term_pitch + b, vstride);
    }
    __syncwarp();  // the slot is read and the terms are written
    if (lane == 0) issue(k + S);
    for (int q = lane; q < p.n_vec * RW; q += kWarp) {
      const int v = q / RW, r = q - v * RW;
      if (r < here) P.y[v * P.y_stride + rb + r0 + r] = dense_row_sum(terms + (v * RW + r) * p.term_pitch, p.nb);
    }
    __syncwarp();  // the chains are done with the terms before the next tile's overwrite them
  }
}

struct WarpPlan {
  int tile_rows = 0, slots = 0;
  uint32_t slot_bytes = 0, act_off = 0, terms_off = 0, term_pitch = 0, warp_terms = 0, bar_off = 0;
  uint64_t smem = 0;
};

// The tile shape and shared-memory layout for n_vec vectors of nb blocks, tiles of about tile_bytes (0: kSlotTarget);
// smem = 0 when it does not fit.
WarpPlan plan_warp(int64_t nb, int64_t n_vec, int tile_bytes) {
  WarpPlan d;
  if (nb % 8 != 0 || n_vec < 1 || n_vec > kWarpMaxVec) return d;
  const uint64_t row_bytes = 34 * static_cast<uint64_t>(nb);
  const uint64_t target = tile_bytes > 0 ? static_cast<uint64_t>(tile_bytes) : kSlotTarget;
  d.tile_rows = static_cast<int>(std::clamp<uint64_t>(target / row_bytes, 1, kMaxTileRows));
  d.slot_bytes = static_cast<uint32_t>(d.tile_rows * row_bytes + 16);
  d.term_pitch = static_cast<uint32_t>(nb + 4);
  d.warp_terms = static_cast<uint32_t>(n_vec * d.tile_rows) * d.term_pitch;
  const uint64_t act = static_cast<uint64_t>(n_vec * nb) * sizeof(BlockQ8_0Act);
  const uint64_t fixed = act + uint64_t{kWarps} * d.warp_terms * sizeof(float) + uint64_t{kWarps} * kMaxSlots * 8;
  const bool pair = tile_bytes > 0 && static_cast<uint64_t>(tile_bytes) <= kPairTileBytes;
  const uint64_t budget = pair ? kPairSmem : kMaxSmem;
  if (fixed + uint64_t{kWarps} * d.slot_bytes * (pair ? 2 : 1) > budget) return d;
  d.slots = pair ? 2 : static_cast<int>(std::min<uint64_t>(kMaxSlots, (kMaxSmem - fixed) / (uint64_t{kWarps} * d.slot_bytes)));
  d.act_off = static_cast<uint32_t>(kWarps * d.slots) * d.slot_bytes;
  d.terms_off = d.act_off + static_cast<uint32_t>(act);
  d.bar_off = d.terms_off + static_cast<uint32_t>(kWarps * d.warp_terms * sizeof(float));
  d.smem = d.bar_off + static_cast<uint64_t>(kWarps * d.slots) * 8;
  return d;
}

int warp_index(int64_t n) { return n <= 1 ? 0 : n <= 2 ? 1 : 2; }

const void* warp_kernel(int index) {
  switch (index) {
    case 0: return reinterpret_cast<const void*>(gemv_warp_kernel<1>);
    case 1: return reinterpret_cast<const void*>(gemv_warp_kernel<2>);
    default: return reinterpret_cast<const void*>(gemv_warp_kernel<4>);
  }
}

}  // namespace

// H200 W1 (2026-11-30 18:52 UTC) and W2 (19:35, three repeats), docs/PERF.md "Session 10: dense decode matvecs on
// per-warp rings"; cold graph µs. One decode layer's dense matmuls back to back (q_a + kv, q_b, out_a, out_b,
// gate + up, down) — the line that decides — with gemv_warp on every launch against the default before it: 4 vectors
// 104.4–104.9 vs 116.0–116.7 (W1: 104.5 vs 121.2; with it only on the ≥ 2,048-row launches 110.9–111.4), 2 vectors
// 78.0–78.6 vs 80.0–80.4 (W1: 79.0 vs 80.5), though q_a and kv alone are slower here (n = 4: 9.7 vs 7.5, 9.0 vs 6.5).
// 1 vector: slower (65.5–65.8 vs 66.5–66.9; gemv_rows on every shape: 61.4–61.6, gemv_rows_wins). Tiles of
// 4.4 KB (two blocks an SM): slower on the layer at every n (75 µs at 1). Only the measured shapes (≥ 1024 columns).
// Session 11 W1 (21:49 UTC), whole decode steps as the engine runs them (cuda_bench --warp-steps: graphs, branches,
// f16_mma; a 4-layer flash-q2 file, tied routing; off / on interleaved twice): batch 2 at 1K **slower** with it
// (1.120 / 1.128 against 1.062 / 1.061 ms per step: the layer line's 2-vector gain does not survive the step's
// concurrent branches), batch 4 faster (1.490 / 1.489 against 1.496 / 1.509), batch 1 equal (0.857–0.859 against
// 0.855–0.856: the noise). So from 3 vectors only.
bool gemv_warp_wins(const StreamSet& s) { return s.n_vec >= 3 && s.cols >= 1024; }

bool CudaBackend::gemv_warp_set(const StreamSet& s, DeviceScratch& act_scratch) {
  if (s.n_parts < 1 || s.n_parts > kStreamMaxParts || s.n_vec < 1 || s.n_vec > kWarpMaxVec) return false;
  if (s.row_bytes != 34 * static_cast<uint64_t>(s.cols / kQK8_0) || s.row_bytes % 16 != 0) return false;
  if (!stream_device_info()) return true;  // error recorded
  if (cc_major_ < 9) return false;         // cp.async.bulk and mbarrier transactions: sm_90
  const WarpPlan d = plan_warp(s.cols / kQK8_0, s.n_vec, gemv_warp_tile_bytes_);
  if (d.smem == 0 || d.smem > static_cast<uint64_t>(dense_smem_optin_)) return false;
  const int idx = warp_index(s.n_vec);
  if (!dense_smem(warp_kernel(idx), &warp_smem_set_[idx], kMaxSmem, "gemv_warp shared memory")) return true;
  int64_t blocks[kStreamMaxParts] = {};
  const int64_t total_blocks = deal_stream_blocks(s, sm_count_, blocks);  // one block (8 warps) per SM

  WarpParams p{};
  p.n_parts = s.n_parts;
  p.n_vec = static_cast<int32_t>(s.n_vec);
  p.nb = static_cast<int32_t>(s.cols / kQK8_0);
  p.tile_rows = d.tile_rows;
  p.slots = d.slots;
  p.nb_magic = dense_div_magic(static_cast<uint64_t>(p.nb));
  p.row_bytes = s.row_bytes;
  p.slot_bytes = d.slot_bytes;
  p.act_off = d.act_off;
  p.terms_off = d.terms_off;
  p.term_pitch = d.term_pitch;
  p.warp_terms = d.warp_terms;
  p.bar_off = d.bar_off;
  p.x_stride = s.x_stride;
  const int parts = fill_dense_parts(*this, s, blocks, kFusedMaxValues, act_scratch, p.part, &p.act_vec);
  if (parts < 0) return false;  // inputs one quantize_act cannot cover: other kernels
  if (parts == 0) return true;  // error recorded
  dense_launch(warp_kernel(idx), d.smem, total_blocks, kThreads, &p, "gemv (q8_0 warp rings)");
  return true;
}

}  // namespace ds4::backend::cuda
