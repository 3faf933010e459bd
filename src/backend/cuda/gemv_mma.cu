// gemv_mma.cu — dense Q8_0 matmuls of 1..kMmaMaxVec (64) vectors near memory bandwidth: the decode
// matvec of one session and the skinny matmul of a decode batch (q/kv, output and shared-expert
// projections, the output head), in the ds4 numerics contract (src/backend/cuda/README.md).
//
// Why: the per-warp-row kernels (gemv_decode.cu, gemv_skinny.cu) load 34-byte blocks with 2-byte loads
// and add 32 block terms by 32 dependent shuffles per row, so they are latency-bound at 17–56 % of the
// bandwidth (docs/PERF.md). Here each warp (one per block) owns tiles of 8 weight rows and streams
// them through a cp.async ring of 16-byte copies (8 rows × 8 blocks = 2,176 B a stage, 3–11 stages
// in flight), and forms the integer block sums on int8 tensor cores: one m16n8k32 MMA is exactly one
// 32-value block for 16 vectors × 8 rows. Every C fragment element (vector, row) lives in one lane,
// which turns it into the block's float term — QDot<Q8_0>::finish's (d_w·d_x)·isum — and adds it to
// its own accumulator, block after block in the CPU's order. So a row's result is the CPU op's bit
// for bit at any batch size, and 8 (row, vector) chains run in parallel per warp instead of 32
// shuffles per group.
// Activations: quantized once per call into global scratch (CudaBackend::quantize_act); up to 16
// vectors their blocks ride in the same ring stages as the weights (MmaCfg), above that lanes read
// them from L1 (lane (g, t) reads words 1 + t and 5 + t of vector g's block).
// Deliberately not here: other weight types and expert-indexed rows (gemv_decode.cu, gemv_skinny.cu,
// ops_gemm.cu); prefill-sized batches (ops_gemm.cu); the dispatch (CudaBackend::gemv).
#include <algorithm>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_impl.h"
#include "backend/cuda/mma_s8.cuh"
#include "backend/cuda/quant_device.cuh"

namespace ds4::backend::cuda {

namespace {

constexpr int kRows = 8;                                 // weight rows per warp tile (MMA n8)
constexpr int kGroup = 8;                                // Q8_0 blocks per stage (272 B = 17 chunks a row)
constexpr int kChunk = 16;                               // cp.async bytes
constexpr int kWPitch = kGroup * sizeof(BlockQ8_0) + 32;      // 304 B smem row pitch: rows 12 banks apart
constexpr int kAPitch = kGroup * sizeof(BlockQ8_0Act) + 16;   // 304 B per staged activation row
constexpr int kWBytes = kRows * kWPitch;                 // 2,432 B of weights a stage

// Per instantiation (NV: the largest vector count): up to 16 vectors the stage also carries the
// activation blocks (16 B copies: a vector's 8 blocks are 288 B, 16-byte aligned because nb % 8 == 0),
// so they come through the ring too instead of one L1/L2 round trip per block; with 32 or 64 vectors
// that would be 9–18 KB a stage, so those read them with __ldg (L1) and run a deeper weight-only ring.
// Every configuration stays under 48 KB of static shared memory.
template <int NV>
struct MmaCfg {
  static constexpr bool kStageAct = NV <= 16;
  static constexpr int kStageBytes = kWBytes + (kStageAct ? NV * kAPitch : 0);
  static constexpr int kStages = NV <= 8 ? 6 : NV <= 16 ? 4 : 12;  // ≈ 29 KB: 7 blocks per SM
  static_assert(kStages * kStageBytes <= 48 * 1024);
};

struct MmaParams {
  const uint8_t* w;     // Q8_0 [rows][row_bytes], 16-byte aligned rows
  uint64_t row_bytes;
  int64_t rows;
  int32_t nb;           // blocks per row, a multiple of kGroup (whole 16-byte chunks per stage)
  const uint8_t* act;   // BlockQ8_0Act [n_vec][act_stride bytes], 16-byte aligned rows
  uint64_t act_stride;
  int32_t n_vec;
  float* y;             // [n_vec][y_stride]
  int64_t y_stride;
};

// Issues the copies of step `s` of this warp (tile wg + (s / gpr)·warps, stage s % gpr: blocks
// 8·(s % gpr) …) into `buf` and closes the group (an empty group past the last step keeps
// wait_group's count uniform).
template <int NV>
__device__ inline void issue_stage(const MmaParams& p, uint8_t* buf, int64_t s, int64_t steps, int64_t wg,
                                   int64_t warps, int gpr, int lane) {
  if (s < steps) {
    constexpr int cw = kGroup * sizeof(BlockQ8_0) / kChunk;     // 17 chunks a weight row
    const int64_t tile = wg + (s / gpr) * warps;
    const int grp = static_cast<int>(s % gpr);
    const uint8_t* src0 = p.w + static_cast<uint64_t>(grp) * kGroup * sizeof(BlockQ8_0);
    for (int i = lane; i < kRows * cw; i += kWarp) {
      const int r = i / cw, c = i - r * cw;
      const int64_t o = tile * kRows + r;
      if (o < p.rows) cp_async16(buf + r * kWPitch + c * kChunk, src0 + static_cast<uint64_t>(o) * p.row_bytes + c * kChunk);
    }
    if constexpr (MmaCfg<NV>::kStageAct) {
      constexpr int ca = kGroup * sizeof(BlockQ8_0Act) / kChunk;  // 18 chunks a vector
      const uint8_t* a0 = p.act + static_cast<uint64_t>(grp) * kGroup * sizeof(BlockQ8_0Act);
      for (int i = lane; i < p.n_vec * ca; i += kWarp) {
        const int v = i / ca, c = i - v * ca;
        cp_async16(buf + kWBytes + v * kAPitch + c * kChunk, a0 + static_cast<uint64_t>(v) * p.act_stride + c * kChunk);
      }
    }
  }
  cp_async_commit();
}

// One block (b of the stage at `buf`, global block kb) for every vector tile: the MMA forms the integer
// sums of (vector, row), and each lane adds its terms (d_w · d_x) · isum — QDot<Q8_0>::finish's
// expression — to its accumulators. kAligned: the block's quants sit on a 4-byte boundary of shared
// memory (odd b). Staged activations are read from the stage, the others from global memory (L1).
template <int NV, bool kAligned>
__device__ inline void block_terms(const uint8_t* buf, int b, int kb, const uint8_t* const (&av)[NV <= 16 ? 1 : NV / 16][2],
                                   const bool (&live)[NV <= 16 ? 1 : NV / 16][2], int g, int t,
                                   float (&acc)[NV <= 16 ? 1 : NV / 16][4]) {
  constexpr int MT = NV <= 16 ? 1 : NV / 16;
  constexpr bool kHalf = NV <= 8;  // vectors g + 8 never exist: skip their half of the tile
  const uint8_t* blk = buf + b * sizeof(BlockQ8_0);
  const uint8_t* q = blk + g * kWPitch + 2 + 4 * t;  // B fragment: row g, quants 4t … 4t+3 and 16 + 4t …
  uint32_t bf[2];
  if constexpr (kAligned) {
    bf[0] = *reinterpret_cast<const uint32_t*>(q);
    bf[1] = *reinterpret_cast<const uint32_t*>(q + 16);
  } else {
    bf[0] = ld32_u16(q);
    bf[1] = ld32_u16(q + 16);
  }
  const float wd0 = f16_dev(ld16(blk + (2 * t) * kWPitch)), wd1 = f16_dev(ld16(blk + (2 * t + 1) * kWPitch));
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    uint32_t af[4] = {0, 0, 0, 0};
    float ad[2] = {0, 0};
#pragma unroll
    for (int h = 0; h < 2; ++h)
      if (live[mt][h]) {
        if constexpr (MmaCfg<NV>::kStageAct) {
          const uint8_t* a = buf + kWBytes + (8 * h + g) * kAPitch + b * sizeof(BlockQ8_0Act);
          ad[h] = *reinterpret_cast<const float*>(a);
          af[h] = *reinterpret_cast<const uint32_t*>(a + 4 + 4 * t);
          af[2 + h] = *reinterpret_cast<const uint32_t*>(a + 20 + 4 * t);
        } else {
          const uint8_t* a = av[mt][h] + static_cast<uint64_t>(kb) * sizeof(BlockQ8_0Act);
          ad[h] = __ldg(reinterpret_cast<const float*>(a));
          af[h] = __ldg(reinterpret_cast<const uint32_t*>(a + 4 + 4 * t));
          af[2 + h] = __ldg(reinterpret_cast<const uint32_t*>(a + 20 + 4 * t));
        }
      }
    int c[4] = {0, 0, 0, 0};
    mma_s8(c, af, bf);
    acc[mt][0] += wd0 * ad[0] * small_i2f(c[0]);
    acc[mt][1] += wd1 * ad[0] * small_i2f(c[1]);
    if constexpr (!kHalf) {
      acc[mt][2] += wd0 * ad[1] * small_i2f(c[2]);
      acc[mt][3] += wd1 * ad[1] * small_i2f(c[3]);
    }
  }
}

// One warp per block; each warp walks its 8-row tiles (grid-stride) stage by stage through its ring.
template <int NV>
__global__ void __launch_bounds__(kWarp) gemv_mma_kernel(MmaParams p) {
  using C = MmaCfg<NV>;
  constexpr int MT = NV <= 16 ? 1 : NV / 16;  // 16-vector MMA tiles
  constexpr bool kHalf = NV <= 8;
  __shared__ __align__(16) uint8_t ring[C::kStages][C::kStageBytes];
  const int lane = threadIdx.x, g = lane / 4, t = lane % 4;
  const int64_t wg = blockIdx.x, warps = gridDim.x;
  const int64_t n_tiles = (p.rows + kRows - 1) / kRows;
  if (wg >= n_tiles) return;
  const int gpr = p.nb / kGroup;
  const int64_t steps = ((n_tiles - 1 - wg) / warps + 1) * gpr;

  // Activation rows of the vectors this lane feeds into the A fragments (g and g + 8 of each tile).
  const uint8_t* av[MT][2];
  bool live[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int v = 16 * mt + 8 * h + g;
      live[mt][h] = v < p.n_vec && !(kHalf && h == 1);
      av[mt][h] = p.act + static_cast<uint64_t>(live[mt][h] ? v : 0) * p.act_stride;
    }

  for (int s = 0; s < C::kStages - 1; ++s) issue_stage<NV>(p, ring[s], s, steps, wg, warps, gpr, lane);
  float acc[MT][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[mt][i] = 0;

  for (int64_t s = 0; s < steps; ++s) {
    // The buffer of step s − 1 is free (every lane passed the __syncwarp below): refill it.
    issue_stage<NV>(p, ring[(s + C::kStages - 1) % C::kStages], s + C::kStages - 1, steps, wg, warps, gpr, lane);
    cp_async_wait<C::kStages - 1>();
    __syncwarp();
    const uint8_t* buf = ring[s % C::kStages];
    const int grp = static_cast<int>(s % gpr);
    // Blocks in pairs, in block order (each lane's accumulators add one term per block): an even
    // block's quants start 2 bytes past a 4-byte boundary (u16 halves), the odd block's on one
    // (34·(b + 1) + 2 ≡ 0 mod 4), so its fragment words are single loads.
#pragma unroll
    for (int b = 0; b < kGroup; b += 2) {
      block_terms<NV, false>(buf, b, grp * kGroup + b, av, live, g, t, acc);
      block_terms<NV, true>(buf, b + 1, grp * kGroup + b + 1, av, live, g, t, acc);
    }
    if (grp == gpr - 1) {  // the tile's rows are complete
      const int64_t o = (wg + (s / gpr) * warps) * kRows + 2 * t;
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          if (live[mt][h]) {
            float* y = p.y + static_cast<int64_t>(16 * mt + 8 * h + g) * p.y_stride + o;
            if (o < p.rows) y[0] = acc[mt][2 * h];
            if (o + 1 < p.rows) y[1] = acc[mt][2 * h + 1];
          }
          acc[mt][2 * h] = acc[mt][2 * h + 1] = 0;
        }
    }
    __syncwarp();  // every lane is done with this buffer before it is refilled
  }
  cp_async_wait<0>();  // no copy outlives the block (the trailing groups are empty)
}

// Blocks (one warp each) for `tiles` warp tiles: one per tile, capped at what is resident on the device at once
// (`per_sm`: the backend's cache of the instantiation's occupancy; the rest of the tiles grid-stride).
template <int NV>
unsigned mma_grid(int64_t tiles, int sms, int& per_sm) {
  if (per_sm == 0 && cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, gemv_mma_kernel<NV>, kWarp, 0) != cudaSuccess)
    per_sm = 1;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(tiles, int64_t{std::max(per_sm, 1)} * sms)));
}

}  // namespace

bool gemv_mma_supports(const GemvJob& j) {
  if (j.w.type != GgmlType::Q8_0 || j.numerics != MatmulNumerics::ds4 || j.ids || j.x_div != 1 || j.n_vec < 1 ||
      j.n_vec > kMmaMaxVec || j.w.cols % kQK8_0 != 0)
    return false;
  const int64_t nb = j.w.cols / kQK8_0;
  // Whole 16-byte chunks: 8 blocks are 272 B, so rows (and each stage of a row) stay 16-byte aligned.
  return nb % kGroup == 0 && nb <= 0x7fffffff && j.w.row_bytes % kChunk == 0 &&
         reinterpret_cast<uintptr_t>(j.w.data) % kChunk == 0;
}

// The H200 run of 2026-11-30 (docs/PERF.md, "Dense Q8_0 matmuls on int8 MMA"): each warp takes
// ~1.1–1.3 µs per 8-block stage whatever the shape (latency-bound: one warp per block, ≤ 7 per SM), so
// the kernel loses to the fused decode kernel at 1..4 vectors (q_a 18.4 vs 6.5 µs), to the skinny
// kernel on the 512–2048-row matrices and on q_b, and to the tensor-core GEMM on the head above 8
// vectors; it wins on the 4096-row matrices (out_b 4096×8192: 1.37× / 2.17× / 1.08× at n = 8 / 32 / 64;
// shared down 4096×2048: 1.21× / 1.64× / 1.00×) and on the head at n = 8 (381 vs 631 µs); the run of 03:15
// (gemv_dense.cu's first) measured the head at n = 16 too: 525 vs 637 µs.
// With gemv_dense.cu ahead in the dispatch (it takes 1..8 vectors on the other shapes), out_b takes this
// kernel from 5 vectors: flat here (33.3 / 36.7 µs at 4 / 8) against the skinny kernel's 51 at 8.
// H200 run of 2026-11-30 13:00 (dense W2, `cuda_bench --rows`, cold weights): at 17..32 vectors the
// 4096-column matrices of ≤ 2048 rows also come here — q_a 31.95 vs 41.59 µs at 32 (skinny before), kv 31.45
// vs 41.16, shared gate/up 35.02 vs 45.38, and out_a's 8 groups 258.0 vs 343.3 (each group a q_a-shaped
// call); at 16 they stay (q_a 23.81 vs 14.00 on gemv_stream), above 32 unmeasured (64 lost before).
bool gemv_mma_wins(const GemvJob& j) {
  if (j.n_vec > 16 && j.n_vec <= 32 && j.w.cols == 4096 && j.w.rows <= 2048) return true;
  if (j.n_vec < 5 || j.w.rows < 4096 || j.w.cols < 2048) return false;
  return j.n_vec <= 16 || j.w.rows <= 4096;  // taller (the head): the GEMM from 17 vectors on
}

bool CudaBackend::gemv_mma(const GemvJob& j, const uint8_t* act, uint64_t act_stride) {
  if (!gemv_mma_supports(j)) return false;
  const int64_t nb = j.w.cols / kQK8_0;
  MmaParams p{static_cast<const uint8_t*>(j.w.data), j.w.row_bytes, j.w.rows, static_cast<int32_t>(nb), act, act_stride,
              static_cast<int32_t>(j.n_vec), j.y, j.y_stride};
  if (sm_count_ == 0 && !check(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, device_),
                               "multiprocessor count"))
    return true;  // error recorded
  const int64_t tiles = (j.w.rows + kRows - 1) / kRows;
  cudaStream_t s = stream();
  const unsigned th = kWarp;
  if (j.n_vec <= 8) gemv_mma_kernel<8><<<mma_grid<8>(tiles, sm_count_, mma_per_sm_[0]), th, 0, s>>>(p);
  else if (j.n_vec <= 16) gemv_mma_kernel<16><<<mma_grid<16>(tiles, sm_count_, mma_per_sm_[1]), th, 0, s>>>(p);
  else if (j.n_vec <= 32) gemv_mma_kernel<32><<<mma_grid<32>(tiles, sm_count_, mma_per_sm_[2]), th, 0, s>>>(p);
  else gemv_mma_kernel<64><<<mma_grid<64>(tiles, sm_count_, mma_per_sm_[3]), th, 0, s>>>(p);
  launched("gemv (q8_0 mma)");
  return true;
}

}  // namespace ds4::backend::cuda
