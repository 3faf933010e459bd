// matmul_f16_mma_ring.cu — decode-sized F16 matmuls (1 … 8 vectors, ds4 numerics) in README.md's "F16 MMA
// order" as a weight stream: a CSA layer's six projections (matmul_many: compressor kv and gate 1024 × 4096,
// indexer compressor kv and gate 256 × 4096, indexer q_b 8192 × 1024, indexer weights 64 × 4096; 36.5 MB) at
// the rate DRAM delivers, where matmul_f16_mma_decode.cu's kernel (a warp loads one 128-value quarter of a
// 16-row tile into registers, runs its 32-MMA chain and exits) ran 2.2 waves of load → chain → exit at half
// occupancy (63 registers): 23.1 µs, DRAM 36 % busy (docs/PERF.md, session 10 f16dec).
// Here the unit of work is one 512-value segment of a 16-row tile (16 KB of weights). A block (4 warps) owns
// whole tiles; it streams their segments in order through a ring of NS shared-memory slots, one
// `cp.async.bulk` copy per row (1 KB) completing on the slot's mbarrier (bulk_copy.cuh), issued by thread 0
// NS segments ahead — so the next segments' bytes are in flight while the warps run the current one's chains,
// and registers no longer bound what is in flight (4 blocks × 3 slots × 16 KB per multiprocessor; 2 or 3 blocks
// with F16RingLaunch::blocks_per_sm, leaving room for a kernel of the other lane).
// The order is f16_mma.cuh's, unchanged: warp w runs quarter w's chain (f16_mma_block for blocks 0 … 3 from
// c = 0), the block adds seg = ((q0 + q1) + q2) + q3 and y = (…((0 + seg_0) + seg_1) + …) in segment order
// — a tile's segments are consecutive in its block's stream, so y is one register chain per (row, vector)
// and no row is split over blocks (no counters, no scratch sums). Same bits as every other launch shape.
// Tiles are ordered longest rows first (the 8-segment tiles, then q_b's 2-segment ones) and handed out
// either by a device counter (variant 1: each block takes the next tile when its stream needs one, so blocks
// that start late or run beside another lane's kernel take fewer) or statically (variant 2: tiles b, b + grid, …).
// Slot layout: row r of the tile at r · 1,088 bytes (1,024 + 64): lanes (g, t) of one 16-byte shared load
// read rows g and g + 1 64 bytes apart modulo 128, so each quarter-warp phase touches 32 distinct banks.
// With F16RingLaunch::tensor the slot is instead one 2-D tensor copy (a 16 × 1 KB box of the row-major matrix,
// dense): the TMA unit takes one request per unit instead of 16 — on the H200 (W1) the 16 row copies per unit left
// the blocks waiting (the ring at 31–52 µs a CSA call against the register kernel's 21), as gemm_q8.cu's row
// copies did (docs/PERF.md, session 10 gemm).
// Deliberately not here: choosing it (CudaBackend::f16_mma_decode, f16_mma_decode_kernel), K not a multiple of
// 512, unaligned rows, few tiles (the router: matmul_f16_mma_decode.cu), prefill shapes, below sm_90 (the
// bulk copies trap; never launched there).
#include "backend/cuda/matmul_f16_mma_ring.h"

#include <algorithm>
#include <numeric>

#include "backend/cuda/bulk_copy.cuh"
#include "backend/cuda/common.cuh"
#include "backend/cuda/f16_mma.cuh"
#include "backend/cuda/tensor_copy.cuh"

namespace ds4::backend::cuda {

namespace {

constexpr int kRingJobs = 8;
constexpr int kRingMaxVec = 8;                         // one MMA n-tile
constexpr int kRingRows = 16;                          // rows of a tile: one m16 MMA tile
constexpr int kRingRowBytes = 2 * kF16MmaSeg;          // one segment of an F16 row
constexpr int kRingStride = kRingRowBytes + 64;        // a slot's row pitch with row copies (banks: file comment)
constexpr int kRingSlotBytes = kRingRows * kRingStride;  // 17,408
// kTensor: one 2-D tensor copy per unit (16 rows × 1 KB box, dense: rows 1,024 bytes apart — lanes of rows g and
// g + 1 meet on the same banks, two wavefronts a phase: 64 smem cycles a unit beside a 32-MMA chain).
constexpr int kRingTensorSlotBytes = kRingRows * kRingRowBytes;  // 16,384
constexpr int kRingWarps = 4;                          // warp w: quarter w of every segment
constexpr int kRingThreads = kRingWarps * kWarp;
constexpr int kRingBlocksPerSm = 4;                    // 4 × (3 slots + 4 KB) fit in an sm_90 multiprocessor
constexpr int kRingQueue = 4;                          // variant 1: the block's tiles known ahead (ring of ids)

struct RingJob {
  const uint8_t* w;
  uint64_t row_bytes;
  int64_t rows;
  const float* x;  // vector v reads row v / x_div of [*][x_stride]
  int64_t x_stride;
  float* y;        // [n][y_stride]
  int64_t y_stride;
  int32_t x_div;
  int32_t nseg;    // cols / 512
  int32_t tile0;   // the job's first tile in the launch's tile order
  int32_t index;   // its place in the table (its tensor map)
};

struct RingParams {
  CUtensorMap map[kRingJobs];  // kTensor: job k's weights as [rows][cols / 2] 4-byte elements, box 256 × 16
  RingJob job[kRingJobs];  // most segments per row first
  int32_t n_jobs, n_vec, tiles;
  int* counters;           // variant 1: [0] tiles handed out beyond the first grid, [1] blocks done (zero between calls)
};

// The job of tile T (constant indices: the table stays in parameter space).
__device__ inline RingJob ring_job(const RingParams& p, int T) {
  RingJob J = p.job[0];
#pragma unroll
  for (int k = 1; k < kRingJobs; ++k)
    if (k < p.n_jobs && T >= p.job[k].tile0) J = p.job[k];
  return J;
}

// Where one block is in its stream of (tile, segment) units: its k-th tile T (T ≥ tiles: the end), segment s of nseg.
struct RingPos {
  int k, T, s, nseg;
};

// Thread 0: slot `slot` ← the weights of unit (T, s), counted on full[slot]: one bulk copy per row of the tile, or
// (kTensor) one tensor copy of the whole 16 × 1 KB box (rows past the matrix arrive as zeros and count as bytes).
template <bool kTensor>
__device__ inline void ring_issue(const RingParams& p, uint8_t* slots, uint64_t* full, int slot, const RingPos& u) {
  const RingJob J = ring_job(p, u.T);
  const int64_t r0 = static_cast<int64_t>(u.T - J.tile0) * kRingRows;
  if constexpr (kTensor) {
    mbar_expect(&full[slot], kRingTensorSlotBytes);
    tensor_copy_2d(slots + slot * kRingTensorSlotBytes, &p.map[J.index], u.s * (kRingRowBytes / 4), static_cast<int>(r0),
                   &full[slot]);
    return;
  }
  const int nr = static_cast<int>(min(static_cast<int64_t>(kRingRows), J.rows - r0));
  uint64_t* bar = &full[slot];
  mbar_expect(bar, static_cast<uint32_t>(nr * kRingRowBytes));
  const uint8_t* src = J.w + static_cast<uint64_t>(r0) * J.row_bytes + static_cast<uint64_t>(u.s) * kRingRowBytes;
  uint8_t* dst = slots + slot * kRingSlotBytes;
  for (int r = 0; r < nr; ++r) bulk_copy(dst + r * kRingStride, src + static_cast<uint64_t>(r) * J.row_bytes, kRingRowBytes, bar);
}

template <int NS, bool kDynamic, bool kTensor>
__global__ void __launch_bounds__(kRingThreads, kRingBlocksPerSm) f16_mma_ring_kernel(const __grid_constant__ RingParams p) {
  constexpr int kSlotBytes = kTensor ? kRingTensorSlotBytes : kRingSlotBytes, kPitch = kTensor ? kRingRowBytes : kRingStride;
  static_assert(NS >= 3, "the x prefetch reads the tile queue one barrier after thread 0 wrote it (NS ≥ 3)");
  extern __shared__ __align__(128) uint8_t slots[];  // [NS][kRingSlotBytes]
  __shared__ uint64_t full[NS];
  __shared__ float qs[2][kRingWarps][4][kWarp];      // quarter accumulators (two units: no barrier between reuse)
  __shared__ int tq[kRingQueue];                     // variant 1: the block's tiles, tile k at k % kRingQueue
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, g = lane >> 2, t = lane & 3;
  const int G = static_cast<int>(gridDim.x), b = static_cast<int>(blockIdx.x);
  // The block's k-th tile: statically b + k·G; with the counter, tile 0 is b and later ones come from tq,
  // which thread 0 fills two tiles ahead of its own stream (so every reader of tq[k] is at least one
  // barrier after the write).
  auto tile_of = [&](int k) { return kDynamic && k > 0 ? tq[k % kRingQueue] : b + k * G; };
  auto start = [&](int k) {
    const int T = tile_of(k);
    return RingPos{k, T, 0, T < p.tiles ? ring_job(p, T).nseg : 0};
  };
  auto advance = [&](RingPos& u) {
    if (u.T >= p.tiles) return;
    if (++u.s < u.nseg) return;
    u = start(u.k + 1);
  };

  // Thread 0's stream: `issued` units requested so far, `pu` the next one to request.
  RingPos pu{0, b, 0, 0};
  int issued = 0, pending = 0, qk = 2;  // pending: variant 1's counter value in flight for tile qk + 1 (tq holds ≤ qk)
  if (threadIdx.x == 0) {
#pragma unroll
    for (int k = 0; k < NS; ++k) mbar_init(&full[k]);
    pu = start(0);
    // The weights first (they do not depend on the kernel before; PDL may still run it): tile 0's segments.
    while (issued < NS && pu.T < p.tiles && pu.k == 0) {
      ring_issue<kTensor>(p, slots, full, issued % NS, pu);
      ++issued;
      advance(pu);
    }
  }
  grid_dependency_wait();  // the activations, y and the counters from here on
  grid_launch_dependents();
  if (kDynamic && threadIdx.x == 0) {
    const int two = atomicAdd(&p.counters[0], 2);  // tiles 1 and 2 of this block
    tq[1] = G + two;
    tq[2] = G + two + 1;
    pending = G + atomicAdd(&p.counters[0], 1);
    if (pu.k == 1 && pu.s == 0) pu = start(1);  // tile 0 ended within the first slots: now known
  }
  auto top_up = [&](int consumed) {  // thread 0: keep NS units requested beyond the consumed ones
    while (issued < consumed + NS && pu.T < p.tiles) {
      if (kDynamic && pu.k + 2 > qk) {  // entering tile k ≥ 1: tile k + 2 is the counter value in flight
        qk = pu.k + 2;
        tq[qk % kRingQueue] = pending;
        pending = pending < p.tiles ? G + atomicAdd(&p.counters[0], 1) : pending;
      }
      ring_issue<kTensor>(p, slots, full, issued % NS, pu);
      ++issued;
      advance(pu);
    }
  };
  if (threadIdx.x == 0) top_up(0);
  __syncthreads();  // barrier initialisations and tq visible to every thread

  // The block's stream, unit by unit: warp `warp` runs quarter `warp` of segment u.s of tile u.T.
  RingPos u = start(0);
  float xc[4][1][8], xn[4][1][8] = {};  // this unit's and the next one's activations (vector g; blocks 0 … 3 of the quarter)
  auto load_x = [&](const RingPos& v, float (&xx)[4][1][8]) {
    const RingJob J = ring_job(p, v.T);
    const float* xr = g < p.n_vec ? J.x + static_cast<int64_t>(g / J.x_div) * J.x_stride : nullptr;
    const int64_t cols = static_cast<int64_t>(J.nseg) * kF16MmaSeg;
#pragma unroll
    for (int bb = 0; bb < 4; ++bb)
      load_x8_mma<false>(xr, static_cast<int64_t>(v.s) * kF16MmaSeg + warp * kF16MmaQ + bb * kF16MmaBlk + 8 * t, cols,
                         true, 1.0f, xx[bb][0]);
  };
  if (u.T < p.tiles) load_x(u, xc);
  const int nv = p.n_vec;
  const int rr = threadIdx.x / nv, vv = threadIdx.x % nv;  // this thread's (row, vector) of the tile (< 16·nv)
  float acc = 0.0f;
  for (int i = 0; u.T < p.tiles; ++i) {
    RingPos nx = u;
    advance(nx);
    if (nx.T < p.tiles) load_x(nx, xn);  // in flight during this unit's chain
    const int slot = i % NS;
    mbar_wait(&full[slot], static_cast<uint32_t>(i / NS) & 1u);  // this unit's weights have landed
    const uint8_t* sw = slots + slot * kSlotBytes + warp * (kF16MmaQ * 2) + 16 * t;
    float c[1][1][4] = {{{0.0f, 0.0f, 0.0f, 0.0f}}};
#pragma unroll
    for (int bb = 0; bb < 4; ++bb) {
      uint4 w[1][2];
      w[0][0] = *reinterpret_cast<const uint4*>(sw + g * kPitch + bb * kF16MmaBlk * 2);
      w[0][1] = *reinterpret_cast<const uint4*>(sw + (g + 8) * kPitch + bb * kF16MmaBlk * 2);
      f16_mma_block<1, 1>(c, w, xc[bb]);
    }
#pragma unroll
    for (int r = 0; r < 4; ++r) qs[i & 1][warp][r][lane] = c[0][0][r];
    __syncthreads();  // the slot is read, the quarters are stored
    if (threadIdx.x == 0) top_up(i + 1);
    if (threadIdx.x < kRingRows * nv) {
      const int ln = 4 * (rr % 8) + vv / 2, rq = 2 * (rr / 8) + (vv & 1);  // accumulator element of (rr, vv)
      const float seg = f16_mma_seg_sum(qs[i & 1][0][rq][ln], qs[i & 1][1][rq][ln], qs[i & 1][2][rq][ln],
                                        qs[i & 1][3][rq][ln]);
      if (u.s == 0) acc = 0.0f;
      acc += seg;  // (…((0 + seg_0) + seg_1) + …)
      if (u.s == u.nseg - 1) {
        const RingJob J = ring_job(p, u.T);
        const int64_t o = static_cast<int64_t>(u.T - J.tile0) * kRingRows + rr;
        if (o < J.rows) J.y[vv * J.y_stride + o] = acc;
      }
    }
    u = nx;
#pragma unroll
    for (int bb = 0; bb < 4; ++bb)
#pragma unroll
      for (int e = 0; e < 8; ++e) xc[bb][0][e] = xn[bb][0][e];
  }
  if (kDynamic && threadIdx.x == 0) {  // the last block out leaves the counters at zero for the next call
    __threadfence();
    if (atomicAdd(&p.counters[1], 1) == G - 1) {
      p.counters[0] = 0;
      p.counters[1] = 0;
    }
  }
}

constexpr int kRingSlots = 3;

}  // namespace

bool f16_mma_ring_takes(std::span<const GemvJob> jobs, int sm_count) {
  if (jobs.empty() || jobs.size() > kRingJobs || sm_count <= 0) return false;
  const int64_t n = jobs[0].n_vec;
  if (n < 1 || n > kRingMaxVec) return false;
  int64_t tiles = 0;
  for (const GemvJob& j : jobs) {
    if (j.ids || j.groups || j.group_rows != 0 || j.n_vec != n || j.numerics != MatmulNumerics::ds4 || j.w.rows <= 0 ||
        j.w.cols <= 0 || j.w.cols % kF16MmaSeg != 0 || j.w.row_bytes % 16 != 0 || !aligned16(j.w.data) ||
        !aligned16(j.x) || j.x_stride % 4 != 0 || j.x_div < 1)
      return false;
    tiles += (j.w.rows + kRingRows - 1) / kRingRows;
  }
  return tiles >= 2 * static_cast<int64_t>(sm_count) && tiles < (int64_t{1} << 30);
}

cudaError_t f16_mma_ring_launch(std::span<const GemvJob> jobs, const F16RingLaunch& l) {
  // Tile order: most segments per row first (stable), so the long tiles are handed out first.
  int order[kRingJobs];
  std::iota(order, order + jobs.size(), 0);
  std::stable_sort(order, order + jobs.size(), [&](int a, int b) { return jobs[a].w.cols > jobs[b].w.cols; });
  RingParams p{};
  p.n_jobs = static_cast<int32_t>(jobs.size());
  p.n_vec = static_cast<int32_t>(jobs[0].n_vec);
  p.counters = l.counters;
  int64_t tiles = 0;
  for (size_t k = 0; k < jobs.size(); ++k) {
    const GemvJob& j = jobs[order[k]];
    RingJob& J = p.job[k];
    J.w = static_cast<const uint8_t*>(j.w.data);
    J.row_bytes = j.w.row_bytes;
    J.rows = j.w.rows;
    J.x = j.x;
    J.x_stride = j.x_stride;
    J.x_div = j.x_div;
    J.y = j.y;
    J.y_stride = j.y_stride;
    J.nseg = static_cast<int32_t>(j.w.cols / kF16MmaSeg);
    J.tile0 = static_cast<int32_t>(tiles);
    J.index = static_cast<int32_t>(k);
    tiles += (j.w.rows + kRingRows - 1) / kRingRows;
  }
  p.tiles = static_cast<int32_t>(tiles);
  const int per_sm = std::clamp(l.blocks_per_sm, 1, kRingBlocksPerSm);
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>(tiles, int64_t{l.sm_count} * per_sm));
  if (l.tensor) {  // the maps (host encodes; no stream work)
    const EncodeTiled encode = tensor_map_encoder();
    if (!encode) return cudaErrorNotSupported;
    for (size_t k = 0; k < jobs.size(); ++k) {
      // 4-byte elements (F16 pairs), box 256 × 16 rows = one unit, zeros past the ends.
      const RingJob& J = p.job[k];
      if (!tensor_map_2d(encode, &p.map[k], CU_TENSOR_MAP_DATA_TYPE_UINT32, J.w, int64_t{J.nseg} * kF16MmaSeg / 2, J.rows,
                         J.row_bytes, kRingRowBytes / 4, kRingRows))
        return cudaErrorInvalidValue;
    }
  }
  const size_t smem = static_cast<size_t>(kRingSlots) * (l.tensor ? kRingTensorSlotBytes : kRingSlotBytes);
  auto go = [&](auto kernel) {
    // Every call (a host attribute, no stream work; eager and recorded calls alike): > 48 KB of dynamic
    // shared memory, and the carveout that lets kRingBlocksPerSm blocks share a multiprocessor.
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (e == cudaSuccess)
      e = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared);
    if (e != cudaSuccess) return e;
    return launch_dependent(l.pdl, dim3(grid), dim3(kRingThreads), smem, l.stream, kernel, p);
  };
  if (l.tensor)
    return l.variant == 2 ? go(f16_mma_ring_kernel<kRingSlots, false, true>) : go(f16_mma_ring_kernel<kRingSlots, true, true>);
  return l.variant == 2 ? go(f16_mma_ring_kernel<kRingSlots, false, false>) : go(f16_mma_ring_kernel<kRingSlots, true, false>);
}

}  // namespace ds4::backend::cuda
