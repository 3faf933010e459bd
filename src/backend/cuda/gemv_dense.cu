// gemv_dense.cu — dense Q8_0 matmuls of 1..kDenseMaxVec (16) vectors near memory bandwidth: the decode
// projections of one session (q_a, q_b, kv, the grouped out_a, out_b, shared expert, the output head) and
// of small decode batches, in the ds4 numerics contract (src/backend/cuda/README.md: the CPU's block
// order, bit for bit).
//
// Why: gemv_decode_kernel reads each 34-byte block with 2-byte loads, one lane per block (each load
// instruction touches ~9 cache lines), and adds 32 lanes' terms by 32 dependent shuffle+add steps; the
// small 4096-column matrices pay ~2 µs of that latency and the large ones stop near 2 TB/s (docs/PERF.md).
// Here a block of 256 threads owns tiles of R whole rows (R·row_bytes ≈ 17 KB, contiguous in memory),
// copies them with 16-byte cp.async (a warp moves 512 contiguous bytes per instruction) through a
// 3-stage ring, and works on each tile in two phases:
//   1. terms: thread per (row, block) reads the block's 9 aligned words from shared memory, rebuilds the
//      quant words with funnel shifts, and for every vector forms the ds4 block term
//      (f16(d_w)·d_x)·Σ q_w q_x (QDot<Q8_0>::finish's expression) into a shared [vector][row][block] array;
//   2. chains: thread per (row, vector) adds its row's terms from 0.0f in block order — a chain of plain
//      FADDs (R·n chains in parallel), the CPU's sequential sum.
// Activations are quantized by each block into shared memory (quantize_q8_0_rows_to_smem, bit-exact),
// overlapped with the first tiles' copies, or copied there from one quantize_act launch when n·cols is
// large. Tiles are a contiguous range per block (grid = resident blocks), so a grouped matmul (out_a:
// 8 groups of 1024 rows, each over its own input slice) changes its activation rows rarely.
// Deliberately not here: other weight types, expert-indexed rows (gemv_decode.cu, gemv_skinny.cu,
// moe_tiles.cu), ≥ 17 vectors (gemv_mma.cu, gemv_skinny.cu, ops_gemm.cu); the dispatch (CudaBackend::gemv).
#include <algorithm>

#include "backend/cuda/act_quant.cuh"
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_impl.h"
#include "backend/cuda/dense_q8.cuh"
#include "backend/cuda/mma_s8.cuh"

namespace ds4::backend::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kStages = 3;                  // tiles in the ring: two in flight while one is computed
constexpr int64_t kStageTarget = 20 * 1024; // bytes of weight rows a tile holds at most (one row if wider)
constexpr int kMaxTileRows = 32;
constexpr uint64_t kRowPad = 16;            // smem row pitch = row_bytes + 16: 4 banks between rows
constexpr uint64_t kMaxSmem = 160 * 1024;   // under sm_80's 163 KB opt-in (CI builds compute_80 too)
// n·cols above this: one quantize_act launch, then each block copies the quantized rows (1.125 B a
// value) instead of quantizing 4-byte floats itself. H200, first run: the fused prologue cost ~2 µs
// per 4096-value vector (q_a at n = 4 fused 13.8 µs, at n = 8 pre-quantized 8.1 µs).
constexpr int64_t kFusedMaxValues = 8192;

struct DenseParams {
  const uint8_t* w;       // Q8_0 [rows][row_bytes], 16-byte aligned rows
  uint64_t row_bytes;
  int64_t rows;
  int32_t nb;             // blocks per row (a multiple of 8: 272-byte, 16-byte aligned chunks)
  int32_t tile_rows;      // R, a power of two (dividing group_rows when grouped)
  int64_t n_tiles;
  uint32_t pitch;         // smem bytes per staged row
  uint32_t stage_bytes;   // R · pitch
  uint32_t act_off;       // smem: quantized activations [n_vec][nb · 36]
  uint32_t terms_off;     // smem: block terms [n_vec][R][term_pitch] floats
  uint32_t term_pitch;    // nb + 4: 16-byte aligned rows, 4 banks apart
  // dense_div_magic(row_bytes / 16), dense_div_magic(nb): i / d = __umulhi(i, magic) for the tile's
  // chunk and item indices (dense_q8.cuh says why and when it is exact).
  uint32_t cpr_magic, nb_magic;
  const float* x;         // [n_vec][x_stride] floats (fused quantization), group g at x + g·group_x_stride
  int64_t x_stride;
  const uint8_t* act;     // or: BlockQ8_0Act rows, vector v of group g at act + v·act_vec + g·act_group
  uint64_t act_vec, act_group;
  int64_t group_rows, group_x_stride;  // 0: not grouped
  int32_t n_vec;
  float* y;               // [n_vec][y_stride]
  int64_t y_stride;
};

// Issues the 16-byte copies of tile `tile` (if < t_end) into `dst` and closes the group: an empty group
// past the range keeps wait_group's count uniform. Rows are contiguous in global memory, so chunk i of
// the tile is global byte 16·i; in shared memory it lands at 16·(i + r), r = its row (the row pad).
__device__ inline void load_tile(const DenseParams& p, uint8_t* dst, int64_t tile, int64_t t_end) {
  if (tile < t_end) {
    const int64_t r0 = tile * p.tile_rows;
    const int rows_here = static_cast<int>(p.rows - r0 < p.tile_rows ? p.rows - r0 : p.tile_rows);
    const uint32_t chunks = static_cast<uint32_t>(rows_here) * static_cast<uint32_t>(p.row_bytes / 16);
    const uint8_t* src = p.w + static_cast<uint64_t>(r0) * p.row_bytes;
    for (uint32_t i = threadIdx.x; i < chunks; i += kThreads) {
      const uint32_t r = __umulhi(i, p.cpr_magic);  // i / (row_bytes / 16)
      cp_async16(dst + 16 * (i + r), src + 16 * static_cast<uint64_t>(i));
    }
  }
  cp_async_commit();
}

// The activation rows of group g into shared memory: quantized here from the floats, or copied from
// the quantize_act rows. Every thread calls it (uniform); ends with a block barrier. The previous
// readers of `act` (the terms phase) are past a barrier already.
__device__ inline void fill_act(const DenseParams& p, int64_t g, uint8_t* act) {
  const uint32_t act_row = static_cast<uint32_t>(p.nb) * sizeof(BlockQ8_0Act);  // a multiple of 16 (nb % 8 == 0)
  if (p.act) {
    const int words = static_cast<int>(act_row / 16);
    for (int i = threadIdx.x; i < p.n_vec * words; i += kThreads) {
      const int v = i / words, c = i - v * words;
      const uint8_t* src = p.act + static_cast<uint64_t>(v) * p.act_vec + static_cast<uint64_t>(g) * p.act_group;
      reinterpret_cast<uint4*>(act + v * act_row)[c] = reinterpret_cast<const uint4*>(src)[c];
    }
    __syncthreads();
  } else {
    quantize_q8_0_rows_to_smem(p.x + g * p.group_x_stride, p.x_stride, p.n_vec, int64_t{p.nb} * kQK8_0, act, act_row);
  }
}

// NV: the most vectors of the instantiation (p.n_vec ≤ NV). One block walks its contiguous tile range.
template <int NV>
__global__ void __launch_bounds__(kThreads) gemv_dense_kernel(DenseParams p) {
  extern __shared__ __align__(16) uint8_t sm[];
  const int64_t t0 = p.n_tiles * blockIdx.x / gridDim.x, t1 = p.n_tiles * (blockIdx.x + 1) / gridDim.x;
  if (t0 >= t1) return;  // uniform over the block
  uint8_t* act = sm + p.act_off;
  float* terms = reinterpret_cast<float*>(sm + p.terms_off);
  const uint32_t act_row = static_cast<uint32_t>(p.nb) * sizeof(BlockQ8_0Act);
  const int R = p.tile_rows;

  for (int s = 0; s < kStages - 1; ++s) load_tile(p, sm + s * p.stage_bytes, t0 + s, t1);
  int64_t group = -1;
  for (int64_t k = 0; k < t1 - t0; ++k) {
    const int64_t tile = t0 + k, r0 = tile * R;
    // The slot of tile k − 1 is free: its terms phase ended at the barrier before its chains.
    load_tile(p, sm + ((k + kStages - 1) % kStages) * p.stage_bytes, tile + kStages - 1, t1);
    const int64_t g = p.group_rows > 0 ? r0 / p.group_rows : 0;  // a tile lies in one group (R | group_rows)
    if (g != group) {
      group = g;
      fill_act(p, g, act);
    }
    // Groups committed so far: kStages − 1 + k + 1; at most kStages − 1 pending → tile k's has landed.
    cp_async_wait<kStages - 1>();
    __syncthreads();  // every thread's copies of tile k visible; the previous chains are done with `terms`
    const int rows_here = static_cast<int>(p.rows - r0 < R ? p.rows - r0 : R);
    dense_tile<NV, kThreads>(sm + (k % kStages) * p.stage_bytes, p.pitch, rows_here, R, p.nb, p.nb_magic, act, act_row,
                             p.n_vec, terms, p.term_pitch, p.y + r0, p.y_stride);
  }
  cp_async_wait<0>();  // nothing in flight at exit (the trailing groups are empty)
}

// Tile rows and shared-memory layout of a supported job; smem = 0 when it does not fit.
struct DensePlan {
  int tile_rows = 0;
  uint32_t pitch = 0, stage_bytes = 0, act_off = 0, terms_off = 0, term_pitch = 0;
  uint64_t smem = 0;
};

DensePlan plan_dense(const GemvJob& j) {
  DensePlan d;
  const int64_t nb = j.w.cols / kQK8_0;
  d.pitch = static_cast<uint32_t>(j.w.row_bytes + kRowPad);
  int r = 1;
  while (r < kMaxTileRows && int64_t{2 * r} * d.pitch <= kStageTarget) r *= 2;
  while (j.group_rows > 0 && j.group_rows % r != 0) r /= 2;  // a tile never straddles two groups
  d.tile_rows = r;
  d.stage_bytes = static_cast<uint32_t>(r) * d.pitch;
  d.term_pitch = static_cast<uint32_t>(nb + 4);
  d.act_off = kStages * d.stage_bytes;
  d.terms_off = d.act_off + static_cast<uint32_t>(j.n_vec * nb * sizeof(BlockQ8_0Act));
  const uint64_t smem = d.terms_off + static_cast<uint64_t>(j.n_vec) * r * d.term_pitch * sizeof(float);
  d.smem = smem <= kMaxSmem ? smem : 0;
  return d;
}

template <int NV>
void launch_dense(unsigned grid, uint64_t smem, cudaStream_t s, const DenseParams& p) {
  gemv_dense_kernel<NV><<<grid, kThreads, smem, s>>>(p);
}

int nv_index(int64_t n) { return n <= 1 ? 0 : n <= 2 ? 1 : n <= 4 ? 2 : n <= 8 ? 3 : 4; }

const void* dense_kernel(int index) {
  switch (index) {
    case 0: return reinterpret_cast<const void*>(gemv_dense_kernel<1>);
    case 1: return reinterpret_cast<const void*>(gemv_dense_kernel<2>);
    case 2: return reinterpret_cast<const void*>(gemv_dense_kernel<4>);
    case 3: return reinterpret_cast<const void*>(gemv_dense_kernel<8>);
    default: return reinterpret_cast<const void*>(gemv_dense_kernel<16>);
  }
}

}  // namespace

bool gemv_dense_supports(const GemvJob& j) {
  if (j.w.type != GgmlType::Q8_0 || j.numerics != MatmulNumerics::ds4 || j.ids || j.x_div != 1 || j.n_vec < 1 ||
      j.n_vec > kDenseMaxVec || j.w.cols % kQK8_0 != 0 || j.w.rows <= 0)
    return false;
  const int64_t nb = j.w.cols / kQK8_0;
  if (nb % 8 != 0 || nb > (1 << 14) || j.w.row_bytes % 16 != 0 || reinterpret_cast<uintptr_t>(j.w.data) % 16 != 0)
    return false;
  if (j.group_rows > 0 && (j.w.rows % j.group_rows != 0 || j.group_x_stride < j.w.cols)) return false;
  return plan_dense(j).smem > 0;
}

// H200 run of 2026-11-30 03:25 (docs/PERF.md, "Dense Q8_0 matmuls of 1..16 vectors on whole-row
// tiles"), graph µs against the best of the previous decode / skinny kernels and gemv_mma:
// - 1 vector: faster on q_a, q_b, kv, shared down, the head (152 vs 216) and the grouped out_a; slower on
//   out_b (20.3 vs 19.6, the 8192-value fused prologue) and the shared gate/up (7.8 vs 7.5: 512 tiles on
//   396 resident blocks, so some blocks take two) — those keep gemv_decode.cu;
// - 2..4 vectors: faster on every shape (the head at 4: 251 vs 340 mma / 806 previous);
// - 5..8: faster on every shape but out_b (47 vs 37 on gemv_mma at 8, which gemv_mma_wins takes from 5);
// - 9..16: faster on the ≤ 2048-row matrices, q_b (39 vs 45 skinny) and the grouped out_a; gemv_mma
//   keeps out_b, the shared down and the head (825 vs 497).
bool gemv_dense_wins(const GemvJob& j) {
  if (j.group_rows > 0) return true;
  const bool rows_4k = j.w.rows >= 2048 && j.w.rows <= 8192;  // shared gate/up, shared down, out_b
  if (j.n_vec == 1) return !(rows_4k && j.w.cols >= 4096);
  if (j.n_vec <= kDecodeMaxVec) return true;
  if (j.n_vec <= 8) return !(rows_4k && j.w.cols >= 8192);
  return j.w.rows <= 2048 || j.w.cols <= 1024;
}

bool CudaBackend::gemv_dense(const GemvJob& j, DeviceScratch& act_scratch) {
  if (!gemv_dense_supports(j)) return false;
  const DensePlan d = plan_dense(j);
  const int idx = nv_index(j.n_vec);
  if (sm_count_ == 0 && !check(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, device_),
                               "multiprocessor count"))
    return true;  // error recorded
  if (dense_smem_optin_ < 0 &&
      !check(cudaDeviceGetAttribute(&dense_smem_optin_, cudaDevAttrMaxSharedMemoryPerBlockOptin, device_),
             "shared memory per block"))
    return true;
  if (d.smem > static_cast<uint64_t>(dense_smem_optin_)) return false;
  if (!dense_smem_set_[idx]) {  // first use (eager: a recorded step always ran once before)
    if (!check(cudaFuncSetAttribute(dense_kernel(idx), cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(std::min<uint64_t>(kMaxSmem, dense_smem_optin_))),
               "gemv_dense shared memory"))
      return true;
    dense_smem_set_[idx] = true;
  }
  // Resident blocks per SM for this (instantiation, smem), cached: the grid is what runs at once.
  int per_sm = 0;
  for (const auto& e : dense_occ_)
    if (e.smem == d.smem && e.index == idx) per_sm = e.per_sm;
  if (per_sm == 0) {
    if (!check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, dense_kernel(idx), kThreads, d.smem),
               "gemv_dense occupancy"))
      return true;
    per_sm = std::max(per_sm, 1);
    dense_occ_[dense_occ_next_++ % dense_occ_.size()] = {d.smem, idx, per_sm};
  }

  const int64_t nb = j.w.cols / kQK8_0;
  DenseParams p{};
  p.w = static_cast<const uint8_t*>(j.w.data);
  p.row_bytes = j.w.row_bytes;
  p.rows = j.w.rows;
  p.nb = static_cast<int32_t>(nb);
  p.tile_rows = d.tile_rows;
  p.n_tiles = (j.w.rows + d.tile_rows - 1) / d.tile_rows;
  p.pitch = d.pitch;
  p.stage_bytes = d.stage_bytes;
  p.act_off = d.act_off;
  p.terms_off = d.terms_off;
  p.term_pitch = d.term_pitch;
  p.cpr_magic = dense_div_magic(j.w.row_bytes / 16);
  p.nb_magic = dense_div_magic(static_cast<uint64_t>(nb));
  p.x = j.x;
  p.x_stride = j.x_stride;
  p.group_rows = j.group_rows;
  p.group_x_stride = j.group_rows > 0 ? j.group_x_stride : 0;
  p.n_vec = static_cast<int32_t>(j.n_vec);
  p.y = j.y;
  p.y_stride = j.y_stride;
  if (j.n_vec * j.w.cols > kFusedMaxValues) {
    // Grouped: the groups' inputs quantized as one row of groups·cols values per vector (block g·nb + b
    // is group g's block b — the blocks each group's own call would quantize).
    const int64_t groups = j.group_rows > 0 ? j.w.rows / j.group_rows : 1;
    if (groups > 1 && j.group_x_stride != j.w.cols) return false;  // not contiguous: quantize per block
    if (groups * j.w.cols > j.x_stride) return false;
    const uint64_t stride = quantize_act(GgmlType::Q8_0, j.x, j.x_stride, j.n_vec, groups * j.w.cols, act_scratch);
    if (stride == 0) return true;  // error recorded
    p.act = static_cast<const uint8_t*>(act_scratch.ptr);
    p.act_vec = stride;
    p.act_group = static_cast<uint64_t>(nb) * sizeof(BlockQ8_0Act);
  }
  const unsigned grid =
      static_cast<unsigned>(std::min<int64_t>(p.n_tiles, static_cast<int64_t>(per_sm) * sm_count_));
  cudaStream_t s = stream();
  switch (idx) {
    case 0: launch_dense<1>(grid, d.smem, s, p); break;
    case 1: launch_dense<2>(grid, d.smem, s, p); break;
    case 2: launch_dense<4>(grid, d.smem, s, p); break;
    case 3: launch_dense<8>(grid, d.smem, s, p); break;
    default: launch_dense<16>(grid, d.smem, s, p); break;
  }
  launched("gemv (q8_0 dense)");
  return true;
}

}  // namespace ds4::backend::cuda
