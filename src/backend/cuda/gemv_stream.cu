// gemv_stream.cu — dense Q8_0 matmuls of 1..kDenseMaxVec (16) vectors as one streaming launch over
// several "parts" that share a column count: one matrix, the groups of a grouped matrix (out_a), or
// matrices that share an input (Backend::matmul_many: q_a + kv, the shared expert's gate + up). In the
// ds4 numerics contract (src/backend/cuda/README.md: the CPU's block order, bit for bit), with the same
// per-block and per-row steps as gemv_dense.cu (dense_q8.cuh).
//
// Why (kernels.txt, 43-layer decode at 2K): gemv_dense.cu splits a matrix into fixed tiles dealt out to
// the resident blocks, so a 35 MB matrix ends on a wave of blocks that got one tile more than the rest
// (q_b: 2,048 tiles on 528 blocks), and each launch pays its ramp alone: the small matrices run at
// 0.4–0.7 TB/s and the layer's dense sum is ~102 µs against 33 µs at 4.3 TB/s. Here:
//   - every resident block gets a contiguous range of whole rows of one part (the ranges of a part
//     differ by at most one row; the parts get blocks in proportion to their rows), so every SM streams
//     until the end; a block whose rows fit in one stage copies them all at once;
//   - the block's first kStages − 1 stages are requested before anything else, and with PDL (sm_90,
//     CudaBackendOptions::gemv_stream_pdl) before griddepcontrol.wait: the weights do not depend on the
//     kernel before, so their copies overlap its tail and the launch gap; only the activations wait;
//   - several matrices in one launch: one ramp and one tail instead of two.
// Per tile: terms phase (thread per (row, block): dense_block_terms into shared memory), then chains
// (thread per (row, vector): dense_row_sum, the CPU's sequential sum) — as gemv_dense.cu. With
// CudaBackendOptions::gemv_stream_chunks, wide rows (fewer than 8 whole ones per 18 KB stage: 4096 and
// 8192 columns) are staged as tiles of R rows × 32
// blocks, and each chain thread carries its row's sum across the row group's chunks in a register: the
// same additions in the same order, but a tile's chains are 32 adds long instead of 128 or 256 (out_b's
// 2-row tiles of whole rows spent ~1,100 cycles per tile in one 256-long FADD chain).
// With CudaBackendOptions::gemv_bulk (sm_90): the same tiles and the same per-tile steps, but each tile's row
// pieces are `cp.async.bulk` copies (bulk_copy.cuh) that one warp issues and the SM's TMA unit walks, completing
// on the slot's mbarrier, in a deeper ring of larger stages (kBulkStages × ~kBulkStageTarget, one block per
// SM): the bytes in flight no longer cost a thread instruction per 16 bytes (the cp.async ring issued ~250
// instructions per 34-byte block and ran at ~2 TB/s), and a block's first kBulkStages tiles — every tile of
// the small matrices (q_a + kv: ~12 rows a block) — are requested before griddepcontrol.wait.
// Deliberately not here: other weight types, expert-indexed rows (moe_tiles.cu, gemv_decode.cu), ≥ 17
// vectors (gemv_mma.cu, gemv_skinny.cu, ops_gemm.cu); which jobs come here (CudaBackend::gemv and
// matmul_many; gemv_stream_wins).
#include <algorithm>

#include "backend/cuda/act_quant.cuh"
#include "backend/cuda/bulk_copy.cuh"
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_impl.h"
#include "backend/cuda/dense_parts.cuh"
#include "backend/cuda/dense_q8.cuh"
#include "backend/cuda/mma_s8.cuh"

namespace ds4::backend::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kStages = 4;                  // ring slots: three stages in flight while one is computed
constexpr int64_t kStageTarget = 18 * 1024; // weight bytes a stage holds (at least one row)
constexpr int64_t kOneStageMax = 40 * 1024; // a block's rows up to this many bytes: one stage, one copy round
constexpr int kMaxTileRows = 64;
// Ring tiles of wide rows: column chunks of this many blocks (1,088 bytes of a row) when fewer than
// kMinChainRows whole rows fit a stage (a tile's chains are then C adds long instead of nb).
constexpr int64_t kChunkBlocks = 32;
constexpr int64_t kMinChainRows = 8;
constexpr uint64_t kRowPad = 16;            // smem row pitch = row_bytes + 16: 4 banks between rows
constexpr uint64_t kMaxSmem = 160 * 1024;   // under sm_80's 163 KB opt-in (CI builds compute_80 too)
// n·cols above this: one quantize_act launch, then each block copies the quantized rows (1.125 B a
// value) instead of quantizing 4-byte floats itself (gemv_dense.cu measured the crossover).
constexpr int64_t kFusedMaxValues = 8192;
// The bulk rings (gemv_bulk, sm_90 only: no sm_80 shared-memory cap), every slot requested at the start,
// the tile rows of a block balanced over its row groups:
// - ring 1 ("deep"): up to 6 slots of ~28 KB (one block per SM), tiles of 16-byte-padded row pieces
//   (column chunks for wide rows): one bulk copy per row piece;
// - ring 2 ("contiguous"): up to 4 slots of ~24 KB (two blocks per SM), tiles of whole rows at a pitch of
//   the row's own bytes, so a tile is one contiguous range and one bulk copy (H200 W1: ring 1's ~1 KB
//   pieces streamed the large matrices at 1.3–1.9 TB/s — ~25 copies per tile).
enum BulkRing { kRingCpAsync = 0, kRingDeep = 1, kRingContiguous = 2 };
constexpr int kBulkStages = 6;
constexpr int64_t kBulkStageTarget = 28 * 1024;
constexpr int kBulk2Stages = 4;
constexpr int64_t kBulk2StageTarget = 24 * 1024;
constexpr uint64_t kBulkMaxSmem = 210 * 1024;  // under sm_90's 227 KB opt-in

struct StreamParams {
  DensePart part[kStreamMaxParts];
  int32_t n_parts, n_vec;
  int32_t nb;            // blocks per row (a multiple of 8: 272-byte, 16-byte aligned chunks)
  int32_t chunk_nb;      // C: blocks of a row a tile holds (nb, or a multiple of 8 dividing it)
  int32_t tile_rows;     // R
  uint64_t row_bytes;
  uint32_t pitch;        // smem bytes per staged row piece: 34·C + 16
  uint32_t stage_bytes;  // R · pitch
  uint32_t act_off;      // smem: quantized activations [n_vec][nb · 36]
  uint32_t terms_off;    // smem: block terms [n_vec][R][term_pitch] floats
  uint32_t term_pitch;   // C + 4: 16-byte aligned rows, 4 banks apart
  uint32_t cpr_magic, chunk_magic;  // dense_div_magic(34·C / 16), dense_div_magic(C)
  int32_t slots;         // bulk ring: slots (tiles in flight); the cp.async ring uses kStages
  uint32_t bar_off;      // bulk ring: smem of the slots' mbarriers [slots] uint64
  int64_t x_stride;
  uint64_t act_vec;
};

// Issues the 16-byte copies of tile k of the block's rows (if k < n_tiles) into `dst` and closes the
// group: an empty group past the range keeps wait_group's count uniform. Tile k = row group k / chunks
// (R rows) × column chunk k % chunks (C blocks, 34·C bytes of each row); piece r lands at r·pitch.
__device__ inline void stream_tile(const StreamParams& p, const uint8_t* w, int64_t rows, int k, int n_tiles,
                                   uint8_t* dst) {
  if (k < n_tiles) {
    const int chunks = p.nb / p.chunk_nb, g = k / chunks, c = k - g * chunks;
    const int64_t r0 = int64_t{g} * p.tile_rows;
    const int rows_here = static_cast<int>(rows - r0 < p.tile_rows ? rows - r0 : p.tile_rows);
    const uint32_t cpr = static_cast<uint32_t>(p.chunk_nb) * 34u / 16u;  // 16-byte copies per row piece
    const uint32_t n = static_cast<uint32_t>(rows_here) * cpr;
    const uint8_t* src = w + static_cast<uint64_t>(r0) * p.row_bytes + static_cast<uint64_t>(c) * p.chunk_nb * 34u;
    for (uint32_t i = threadIdx.x; i < n; i += kThreads) {
      const uint32_t r = __umulhi(i, p.cpr_magic), q = i - r * cpr;  // i / cpr, i % cpr
      cp_async16(dst + r * p.pitch + 16 * q, src + r * p.row_bytes + 16 * q);
    }
  }
  cp_async_commit();
}

// The bulk ring's stream_tile, called by warp 0: tile k (if k < n_tiles) as one bulk copy per row piece
// (34·C bytes, a multiple of 272: 16-byte sizes and addresses) into `dst`, completing on `bar`, whose one
// arrival (lane 0) announces the tile's bytes before any copy is issued.
__device__ inline void bulk_tile(const StreamParams& p, const uint8_t* w, int64_t rows, int k, int n_tiles, uint8_t* dst,
                                 uint64_t* bar) {
  if (k >= n_tiles) return;
  const int chunks = p.nb / p.chunk_nb, g = k / chunks, c = k - g * chunks;
  const int64_t r0 = int64_t{g} * p.tile_rows;
  const int rows_here = static_cast<int>(rows - r0 < p.tile_rows ? rows - r0 : p.tile_rows);
  const uint32_t piece = static_cast<uint32_t>(p.chunk_nb) * 34u;
  const uint8_t* src = w + static_cast<uint64_t>(r0) * p.row_bytes + static_cast<uint64_t>(c) * piece;
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  if (p.pitch == p.row_bytes) {  // ring 2: whole rows staged at their own pitch — one contiguous range
    if (lane == 0) {
      const uint32_t bytes = piece * static_cast<uint32_t>(rows_here);
      mbar_expect(bar, bytes);
      bulk_copy(dst, src, bytes, bar);
    }
    return;
  }
  if (lane == 0) mbar_expect(bar, piece * static_cast<uint32_t>(rows_here));
  __syncwarp();
  for (int r = lane; r < rows_here; r += kWarp) bulk_copy(dst + r * p.pitch, src + r * p.row_bytes, piece, bar);
}

// NV: the most vectors of the instantiation (p.n_vec ≤ NV); kBulk: the bulk ring (sm_90). One block: a
// row range of one part.
template <int NV, bool kBulk>
__global__ void __launch_bounds__(kThreads) gemv_stream_kernel(const __grid_constant__ StreamParams p) {
  extern __shared__ __align__(16) uint8_t sm[];
  const DenseRange range = dense_block_range(p.part, p.n_parts);
  const DensePart& P = *range.part;
  const int64_t rb = range.rb, rows = range.rows;
  const int R = p.tile_rows, C = p.chunk_nb, chunks = p.nb / C;
  const int n_tiles = static_cast<int>((rows + R - 1) / R) * chunks;
  const uint8_t* w = P.w + static_cast<uint64_t>(rb) * p.row_bytes;

  // The weights first: they do not depend on the kernel before this one (PDL: it may still run).
  uint64_t* bars = reinterpret_cast<uint64_t*>(sm + p.bar_off);
  if constexpr (kBulk) {
    if (threadIdx.x == 0)
      for (int s = 0; s < p.slots; ++s) mbar_init(&bars[s]);
    __syncthreads();  // the barriers initialised before any thread names them
    if (threadIdx.x < kWarp)
      for (int s = 0; s < p.slots; ++s) bulk_tile(p, w, rows, s, n_tiles, sm + s * p.stage_bytes, &bars[s]);
  } else {
    for (int s = 0; s < kStages - 1; ++s) stream_tile(p, w, rows, s, n_tiles, sm + s * p.stage_bytes);
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
    __syncthreads();
  } else {
    quantize_q8_0_rows_to_smem(P.x, p.x_stride, p.n_vec, int64_t{p.nb} * kQK8_0, act, act_row);  // ends in a barrier
  }

  float* terms = reinterpret_cast<float*>(sm + p.terms_off);
  // Chains: thread t < n_vec·R owns (vector t / R, row t % R) of the current row group and carries its
  // sum across the group's column chunks in `acc` (the host keeps n_vec·R ≤ kThreads).
  const int cv = threadIdx.x / R, cr = threadIdx.x - cv * R;
  float acc = 0.0f;
  const int slots = kBulk ? p.slots : kStages;
  for (int k = 0; k < n_tiles; ++k) {
    if constexpr (kBulk) {
      mbar_wait(&bars[k % slots], static_cast<uint32_t>(k / slots) & 1u);  // tile k's bytes have landed
      __syncthreads();  // tile k − 1's chains are done with `terms`
    } else {
      // Groups committed so far: kStages − 1 + k; at most kStages − 2 pending → tile k's has landed.
      cp_async_wait<kStages - 2>();
      __syncthreads();  // tile k visible to all; tile k − 1's terms and chains are done (its slot and `terms` free)
      stream_tile(p, w, rows, k + kStages - 1, n_tiles, sm + ((k + kStages - 1) % kStages) * p.stage_bytes);
    }
    const int g = k / chunks, c = k - g * chunks;
    const int64_t r0 = int64_t{g} * R;
    const int rows_here = static_cast<int>(rows - r0 < R ? rows - r0 : R);
    dense_tile_terms<NV, kThreads>(sm + (k % slots) * p.stage_bytes, p.pitch, rows_here, R, C, p.chunk_magic,
                                   act + static_cast<uint32_t>(c * C) * sizeof(BlockQ8_0Act), act_row, p.n_vec, terms,
                                   p.term_pitch);
    __syncthreads();
    // Bulk: every thread is done reading slot k % slots: warp 0 refills it with tile k + slots.
    if constexpr (kBulk) {
      if (threadIdx.x < kWarp)
        bulk_tile(p, w, rows, k + slots, n_tiles, sm + (k % slots) * p.stage_bytes, &bars[k % slots]);
    }
    if (cv < p.n_vec && cr < rows_here) {
      acc = dense_row_sum(terms + (cv * R + cr) * p.term_pitch, C, c == 0 ? 0.0f : acc);
      if (c == chunks - 1) P.y[cv * P.y_stride + rb + r0 + cr] = acc;
    }
  }
  if constexpr (!kBulk) cp_async_wait<0>();  // nothing in flight at exit (the trailing groups are empty)
}

// Tile shape and shared-memory layout for blocks of at most `block_rows` rows; smem = 0 when it does not fit.
struct StreamPlan {
  int tile_rows = 0, chunk_nb = 0, slots = 0;
  uint32_t pitch = 0, stage_bytes = 0, act_off = 0, terms_off = 0, term_pitch = 0, bar_off = 0;
  uint64_t smem = 0;
};

// ring: a bulk ring's plan (BulkRing: larger stages, their mbarriers after the terms, the tile rows
// balanced over a block's row groups so that no group is a sliver; ring 2: whole rows at a pitch of
// 34·nb, each stage 16 bytes longer for the last block's over-read).
StreamPlan plan_stream(int64_t cols, int64_t n_vec, int64_t block_rows, bool allow_chunks, int ring = kRingCpAsync) {
  StreamPlan d;
  const bool bulk = ring != kRingCpAsync, contiguous = ring == kRingContiguous;
  const int64_t stage_target = ring == kRingDeep ? kBulkStageTarget : contiguous ? kBulk2StageTarget : kStageTarget;
  const int64_t max_slots = ring == kRingDeep ? kBulkStages : contiguous ? kBulk2Stages : kStages;
  const uint64_t max_smem = bulk ? kBulkMaxSmem : kMaxSmem;
  const int64_t pad = contiguous ? 0 : static_cast<int64_t>(kRowPad);
  const int64_t nb = cols / kQK8_0;
  const int64_t act_bytes = n_vec * nb * static_cast<int64_t>(sizeof(BlockQ8_0Act));
  const int64_t max_rows = std::min<int64_t>(kMaxTileRows, kThreads / n_vec);  // a chain thread per (vector, row)
  auto layout = [&](int64_t r, int64_t c, int64_t slots) {
    d.tile_rows = static_cast<int>(r);
    d.chunk_nb = static_cast<int>(c);
    d.slots = static_cast<int>(slots);
    d.pitch = static_cast<uint32_t>(34 * c + pad);
    d.term_pitch = static_cast<uint32_t>(c + 4);
    d.stage_bytes = static_cast<uint32_t>(r * d.pitch + (contiguous ? kRowPad : 0));
    d.act_off = static_cast<uint32_t>(slots * d.stage_bytes);
    d.terms_off = d.act_off + static_cast<uint32_t>(act_bytes);
    const uint64_t end = d.terms_off + static_cast<uint64_t>(n_vec) * r * d.term_pitch * sizeof(float);
    d.bar_off = static_cast<uint32_t>((end + 7) / 8 * 8);
    return bulk ? d.bar_off + static_cast<uint64_t>(slots) * sizeof(uint64_t) : end;
  };
  uint64_t smem = 0;
  if (block_rows * (34 * nb + kRowPad) <= kOneStageMax && block_rows <= max_rows) {
    smem = layout(block_rows, nb, 1);  // every row of the block in one stage: one copy round, one tile
  } else {
    // Ring: whole rows when kMinChainRows of them fit a stage (or allow_chunks, gemv_stream_chunks, is
    // off), else column chunks of kChunkBlocks (the row sums carried across a row group's chunks), so
    // that many short chains run per tile instead of a few nb-long ones.
    const bool whole = contiguous || !allow_chunks || (34 * nb + kRowPad) * kMinChainRows <= stage_target ||
                       nb % kChunkBlocks != 0;
    const int64_t c = whole ? nb : kChunkBlocks;
    int64_t r = std::clamp<int64_t>(stage_target / (34 * c + pad), 1, std::min(max_rows, block_rows));
    if (bulk) {  // 31 rows as 16 + 15, not 29 + 2
      const int64_t groups = (block_rows + r - 1) / r;
      r = (block_rows + groups - 1) / groups;
    }
    const int64_t chunks = nb / c;
    auto slots = [&](int64_t rr) { return std::min<int64_t>(max_slots, (block_rows + rr - 1) / rr * chunks); };
    smem = layout(r, c, slots(r));
    while (smem > max_smem && r > 1) {
      --r;
      smem = layout(r, c, slots(r));
    }
  }
  d.smem = smem <= max_smem ? smem : 0;
  return d;
}

int stream_nv_index(int64_t n) { return n <= 1 ? 0 : n <= 2 ? 1 : n <= 4 ? 2 : n <= 8 ? 3 : 4; }

constexpr int kStreamKernels = 5;  // instantiations per ring: NV = 1, 2, 4, 8, 16

template <bool kBulk>
const void* stream_kernel_of(int nv_index) {
  switch (nv_index) {
    case 0: return reinterpret_cast<const void*>(gemv_stream_kernel<1, kBulk>);
    case 1: return reinterpret_cast<const void*>(gemv_stream_kernel<2, kBulk>);
    case 2: return reinterpret_cast<const void*>(gemv_stream_kernel<4, kBulk>);
    case 3: return reinterpret_cast<const void*>(gemv_stream_kernel<8, kBulk>);
    default: return reinterpret_cast<const void*>(gemv_stream_kernel<16, kBulk>);
  }
}

// index + kStreamKernels: the bulk ring's.
const void* stream_kernel(int index) {
  return index < kStreamKernels ? stream_kernel_of<false>(index) : stream_kernel_of<true>(index - kStreamKernels);
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// The row shape every part must have (a whole number of 8-block chunks, 16-byte rows).
bool stream_shape_ok(const Weight& w, int64_t n_vec) {
  if (w.type != GgmlType::Q8_0 || n_vec < 1 || n_vec > kDenseMaxVec || w.cols % kQK8_0 != 0 || w.rows <= 0 ||
      w.rows > (int64_t{1} << 30))
    return false;
  const int64_t nb = w.cols / kQK8_0;
  return nb % 8 == 0 && nb <= (1 << 14) && w.row_bytes == 34 * static_cast<uint64_t>(nb) && aligned16(w.data);
}

}  // namespace

bool gemv_stream_supports(const GemvJob& j) {
  if (j.numerics != MatmulNumerics::ds4 || j.ids || j.x_div != 1 || !stream_shape_ok(j.w, j.n_vec)) return false;
  if (j.group_rows > 0 && (j.w.rows % j.group_rows != 0 || j.group_x_stride < j.w.cols ||
                           j.w.rows / j.group_rows > kStreamMaxParts))
    return false;
  // The largest one-block plan the launch could need (one row per block: one stage of one row).
  return plan_stream(j.w.cols, j.n_vec, 1, false).smem > 0;
}

// H200 run of 2026-11-30 06:16 (docs/PERF.md, "Dense Q8_0 matmuls as one streaming launch"): cold
// weights, graph µs against the default dispatch of then (gemv_dense / gemv_decode / gemv_mma), PDL on:
// - ≤ 2048 columns (q_b, shared down): faster from 1 to 8 vectors (q_b 14.1 vs 15.6 at 1, 27.8 vs 29.0 at
//   8; down 5.5 vs 6.5 at 1), slower at 16 (q_b 56 vs 41);
// - 4096 columns (q_a, out_a's groups, shared gate/up): faster at 1 and 2 vectors (out_a 16.3 vs 19.1,
//   gate/up 6.7 vs 8.4 at 1), slower from 4 (out_a 24.9 vs 24.0) — but kv's 512 rows at 1 (5.1 vs 4.5);
// - 8192 columns (out_b): slower at every n (21.2 vs 20.6 at 1) with whole-row tiles; with column chunks
//   (gemv_stream_chunks; H200 run of 09:07, docs/PERF.md "Dense decode matvecs: column chunks") faster at 1
//   and 2 vectors (17.2 vs 21.3 µs, 20.1 vs 23.1), slower from 4 (29.9 vs 27.2).
// Only the column counts measured there (≥ 1024): smaller shapes (the tiny test models) keep the kernels
// they had.
bool gemv_stream_wins(const GemvJob& j, bool chunks) {
  const int64_t rows = j.group_rows > 0 ? j.group_rows : j.w.rows;
  if (j.w.cols < 1024) return false;
  if (j.w.cols <= 2048) return j.n_vec <= 8;
  if (j.w.cols <= 4096) return j.n_vec <= 2 && !(j.n_vec == 1 && rows <= 512);
  return chunks && j.w.cols <= 8192 && j.n_vec <= 2;
}

// The bulk ring that measured faster than the default dispatch of then for a launch of these parts, or
// kRingCpAsync (none). H200 W1 (2026-11-30 15:45, commit cdee0a0, docs/PERF.md "Dense decode matvecs on bulk
// copies"; cold graph µs, ring 1 vs default): faster on the latency-bound small launches — kv 512×4096 at 1
// and 2 vectors (3.36 vs 4.50, 4.97 vs 5.79), q_a 1024×4096 at 2 (5.73 vs 6.24), shared down 4096×2048 at 1
// (5.13 vs 5.61); slower on every ≥ 32 MB matrix (q_b 21.9 vs 14.0, head 299 vs 139 at 1). H200 W2 (16:02,
// commit 9f1f4fd, against gemv_bulk off; ring 1's wins repeated: kv 3.35 vs 4.81, q_a at 2 5.63 vs 6.22, down
// 5.08 vs 5.61): ring 2 faster on q_b 32768×1024 at 1, 2, 4 vectors (13.18 vs 13.84, 15.00 vs 15.82, 19.12 vs
// 20.22) and shared down at 2 (5.33 vs 5.89); slower elsewhere (out_a 16.6 vs 14.1, out_b 20.7 vs 16.3, head 144
// vs 139 at 1 — ncu, head: DRAM 79 % of peak, 45 % of the stalls at the tile barriers).
namespace {
int bulk_ring_wins(const StreamSet& s) {
  int64_t rows = 0;
  for (int i = 0; i < s.n_parts; ++i) rows += s.part[i].rows;
  if (s.cols == 4096 && ((rows <= 512 && s.n_vec <= 2) || (rows <= 1024 && s.n_vec == 2))) return kRingDeep;
  if (s.cols == 2048 && rows <= 4096 && s.n_vec == 1) return kRingDeep;
  if (s.cols == 2048 && rows <= 4096 && s.n_vec == 2) return kRingContiguous;
  if (s.cols == 1024 && rows >= 16384 && s.n_vec <= 4) return kRingContiguous;
  return kRingCpAsync;
}
}  // namespace

bool gemv_bulk_wins(const GemvJob& j) { return bulk_ring_wins(stream_set_of(j)) != kRingCpAsync; }

StreamSet stream_set_of(const GemvJob& j) {
  StreamSet s;
  s.cols = j.w.cols;
  s.row_bytes = j.w.row_bytes;
  s.n_vec = j.n_vec;
  s.x_stride = j.x_stride;
  const int64_t groups = j.group_rows > 0 ? j.w.rows / j.group_rows : 1;
  const int64_t part_rows = j.group_rows > 0 ? j.group_rows : j.w.rows;
  for (int64_t g = 0; g < groups && s.n_parts < kStreamMaxParts; ++g) {
    StreamSet::Part& q = s.part[s.n_parts++];
    q.w = static_cast<const uint8_t*>(j.w.data) + static_cast<uint64_t>(g * part_rows) * j.w.row_bytes;
    q.x = j.x + g * j.group_x_stride;
    q.y = j.y + g * part_rows;
    q.y_stride = j.y_stride;
    q.rows = part_rows;
  }
  return s;
}

bool CudaBackend::gemv_stream(const GemvJob& j, DeviceScratch& act_scratch) {
  if (!gemv_stream_supports(j)) return false;
  return gemv_stream_set(stream_set_of(j), act_scratch);
}

bool CudaBackend::gemv_stream_many(std::span<const MatmulArgs> jobs, DeviceScratch& act_scratch) {
  const bool rows_on = gemv_rows_ != GemvMma::off, stream_on = gemv_stream_ != GemvMma::off;
  const bool bulk_on = gemv_bulk_ != GemvMma::off, warp_on = gemv_warp_ != GemvMma::off;
  if (!decode_kernels_ || (!rows_on && !stream_on && !bulk_on && !warp_on) || jobs.size() < 2 || jobs.size() > kStreamMaxParts)
    return false;
  const MatmulArgs& a0 = jobs[0];
  StreamSet s;
  s.cols = a0.w.cols;
  s.row_bytes = a0.w.row_bytes;
  s.n_vec = a0.n;
  s.x_stride = a0.x_stride;
  bool rows = rows_on, stream = stream_on, bulk = bulk_on;  // every job supported (and, under wins, winning) there
  for (const MatmulArgs& a : jobs) {
    if (a.numerics != MatmulNumerics::ds4 || a.group_rows > 0 || a.n != a0.n || a.x != a0.x ||
        a.x_stride != a0.x_stride || a.w.cols != a0.w.cols || a.w.row_bytes != a0.w.row_bytes ||
        !stream_shape_ok(a.w, a.n))
      return false;
    const GemvJob j = gemv_job(a);
    rows = rows && gemv_rows_supports(j) && (gemv_rows_ == GemvMma::always || gemv_rows_wins(j));
    bulk = bulk && (gemv_bulk_ == GemvMma::always || gemv_bulk_wins(j));
    stream = stream && (gemv_stream_ == GemvMma::always || gemv_stream_wins(j, gemv_stream_chunks_));
    StreamSet::Part& q = s.part[s.n_parts++];
    q.w = static_cast<const uint8_t*>(a.w.data);
    q.x = a.x;
    q.y = a.y;
    q.y_stride = a.y_stride;
    q.rows = a.w.rows;
  }
  if (warp_on && s.n_vec <= kWarpMaxVec && (gemv_warp_ == GemvMma::always || gemv_warp_wins(s)) &&
      gemv_warp_set(s, act_scratch))
    return true;
  if (bulk && gemv_stream_set(s, act_scratch, true)) return true;
  if (rows && gemv_rows_set(s, act_scratch)) return true;
  return stream && gemv_stream_set(s, act_scratch);
}

int64_t deal_stream_blocks(const StreamSet& s, int64_t grid_target, int64_t* blocks) {
  int64_t total_rows = 0, cum = 0, total_blocks = 0;
  for (int i = 0; i < s.n_parts; ++i) total_rows += s.part[i].rows;
  for (int i = 0; i < s.n_parts; ++i) {
    const int64_t b0 = grid_target * cum / total_rows;
    cum += s.part[i].rows;
    const int64_t b1 = grid_target * cum / total_rows;
    blocks[i] = std::clamp<int64_t>(b1 - b0, 1, s.part[i].rows);
    total_blocks += blocks[i];
  }
  return total_blocks;
}

bool CudaBackend::stream_device_info() {
  if (sm_count_ == 0 && !check(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, device_),
                               "multiprocessor count"))
    return false;
  if (cc_major_ == 0 && !check(cudaDeviceGetAttribute(&cc_major_, cudaDevAttrComputeCapabilityMajor, device_),
                               "compute capability"))
    return false;
  return dense_smem_optin_ >= 0 ||
         check(cudaDeviceGetAttribute(&dense_smem_optin_, cudaDevAttrMaxSharedMemoryPerBlockOptin, device_),
               "shared memory per block");
}

int CudaBackend::stream_quantize_parts(const StreamSet& s, DeviceScratch& act_scratch, uint64_t* act_vec,
                                       const uint8_t** acts) {
  // One quantize_act over the span of every part's inputs (blocks between two parts' inputs are
  // quantized too, and unused: each 32-value block is quantized on its own, so a part reads exactly the
  // blocks its own call would have quantized).
  const float* x0 = s.part[0].x;
  const float* x1 = s.part[0].x;
  for (int i = 0; i < s.n_parts; ++i) {
    x0 = std::min(x0, s.part[i].x);
    x1 = std::max(x1, s.part[i].x);
  }
  // Each part's first block and every vector's row start on 16 bytes (the kernels copy them by uint4):
  // offsets and the span in multiples of 4 blocks (4 · 36 bytes).
  const int64_t span = (x1 - x0) + s.cols;
  if (span > s.x_stride || span % (4 * kQK8_0) != 0) return -1;  // not one row, or unaligned
  for (int i = 0; i < s.n_parts; ++i)
    if ((s.part[i].x - x0) % (4 * kQK8_0) != 0) return -1;
  const uint64_t stride = quantize_act(GgmlType::Q8_0, x0, s.x_stride, s.n_vec, span, act_scratch);
  if (stride == 0) return 0;  // error recorded
  *act_vec = stride;
  for (int i = 0; i < s.n_parts; ++i)
    acts[i] = static_cast<const uint8_t*>(act_scratch.ptr) +
              static_cast<uint64_t>((s.part[i].x - x0) / kQK8_0) * sizeof(BlockQ8_0Act);
  return 1;
}

bool CudaBackend::dense_smem(const void* kernel, bool* smem_set, uint64_t smem_limit, const char* what) {
  if (*smem_set) return true;  // set on first use (eager: a recorded step always ran once before)
  *smem_set = check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(std::min<uint64_t>(smem_limit, dense_smem_optin_))),
                    what);
  return *smem_set;
}

void CudaBackend::dense_launch(const void* kernel, uint64_t smem, int64_t blocks, int threads, void* params,
                               const char* what) {
  // Not on the side lane (branches.cpp): its first launch after a fork depends on the main lane through an
  // event, and a programmatic edge there is a case no device run has covered yet; plain order is safe.
  const bool pdl = gemv_stream_pdl_ && cc_major_ >= 9 && !on_side_;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(blocks));
  cfg.blockDim = dim3(static_cast<unsigned>(threads));
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream();
  cudaLaunchAttribute at[1];
  at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = at;
  cfg.numAttrs = pdl ? 1 : 0;
  void* args[1] = {params};
  check(cudaLaunchKernelExC(&cfg, kernel, args), what);
}

bool CudaBackend::gemv_stream_set(const StreamSet& s, DeviceScratch& act_scratch, bool bulk) {
  if (s.n_parts < 1 || s.n_parts > kStreamMaxParts) return false;
  if (!stream_device_info()) return true;  // error recorded
  if (bulk && cc_major_ < 9) return false;  // cp.async.bulk and mbarrier transactions: sm_90
  // always: ring 2 on every shape; wins: the ring that measured faster for these parts (none: declined).
  const int ring = !bulk ? kRingCpAsync : gemv_bulk_ == GemvMma::always ? kRingContiguous : bulk_ring_wins(s);
  if (bulk && ring == kRingCpAsync) return false;
  const int idx = stream_nv_index(s.n_vec) + (bulk ? kStreamKernels : 0);
  const bool chunks = bulk || gemv_stream_chunks_;
  // Resident blocks per SM for (instantiation, smem), cached in the gemv_dense table (its own indices 5..14).
  auto resident = [&](uint64_t smem, int* per_sm) {
    *per_sm = 0;
    for (const auto& e : dense_occ_)
      if (e.smem == smem && e.index == 5 + idx) *per_sm = e.per_sm;
    if (*per_sm > 0) return true;
    if (!check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(per_sm, stream_kernel(idx), kThreads, smem),
               "gemv_stream occupancy"))
      return false;
    *per_sm = std::max(*per_sm, 1);
    dense_occ_[dense_occ_next_++ % dense_occ_.size()] = {smem, 5 + idx, *per_sm};
    return true;
  };
  int64_t max_rows = 0;
  for (int i = 0; i < s.n_parts; ++i) max_rows = std::max(max_rows, s.part[i].rows);
  // The grid: what is resident at once with many-row blocks (the ring plan), dealt to the parts in
  // proportion to their rows (at least one block, at most one per row).
  const StreamPlan big = plan_stream(s.cols, s.n_vec, max_rows, chunks, ring);
  if (big.smem == 0 || big.smem > static_cast<uint64_t>(dense_smem_optin_)) return false;
  // (The occupancy query needs the kernel's shared-memory limit raised first.)
  if (!dense_smem(stream_kernel(idx), &stream_smem_set_[idx], bulk ? kBulkMaxSmem : kMaxSmem, "gemv_stream shared memory"))
    return true;
  int per_sm = 0;
  if (!resident(big.smem, &per_sm)) return true;
  const int64_t grid_target = static_cast<int64_t>(per_sm) * sm_count_;
  int64_t blocks[kStreamMaxParts] = {}, block_rows = 0;
  const int64_t total_blocks = deal_stream_blocks(s, grid_target, blocks);
  for (int i = 0; i < s.n_parts; ++i) block_rows = std::max(block_rows, (s.part[i].rows + blocks[i] - 1) / blocks[i]);
  const StreamPlan d = plan_stream(s.cols, s.n_vec, block_rows, chunks, ring);
  if (d.smem == 0 || d.smem > static_cast<uint64_t>(dense_smem_optin_)) return false;

  const int64_t nb = s.cols / kQK8_0;
  StreamParams p{};
  p.n_parts = s.n_parts;
  p.n_vec = static_cast<int32_t>(s.n_vec);
  p.nb = static_cast<int32_t>(nb);
  p.tile_rows = d.tile_rows;
  p.row_bytes = s.row_bytes;
  p.pitch = d.pitch;
  p.stage_bytes = d.stage_bytes;
  p.act_off = d.act_off;
  p.terms_off = d.terms_off;
  p.term_pitch = d.term_pitch;
  p.chunk_nb = d.chunk_nb;
  p.cpr_magic = dense_div_magic(static_cast<uint64_t>(d.chunk_nb) * 34 / 16);
  p.chunk_magic = dense_div_magic(static_cast<uint64_t>(d.chunk_nb));
  p.slots = d.slots;
  p.bar_off = d.bar_off;
  p.x_stride = s.x_stride;
  const int parts = fill_dense_parts(*this, s, blocks, kFusedMaxValues, act_scratch, p.part, &p.act_vec);
  if (parts < 0) return false;  // inputs one quantize_act cannot cover: other kernels
  if (parts == 0) return true;  // error recorded
  dense_launch(stream_kernel(idx), d.smem, total_blocks, kThreads, &p, bulk ? "gemv (q8_0 bulk)" : "gemv (q8_0 stream)");
  return true;
}

}  // namespace ds4::backend::cuda
