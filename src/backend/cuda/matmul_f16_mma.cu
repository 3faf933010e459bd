// matmul_f16_mma.cu — F16 weights · float activations under ds4 numerics on TF32 tensor cores, in
// README.md's "F16 MMA order" (CudaBackendOptions::f16_mma): matmul (router, compressor and indexer
// projections, HC controls and head, every batch size) and matmul_many (a CSA layer's decode projections
// in one launch). Every launch shape runs f16_mma.cuh's f16_mma_tile — 512-value segments of four
// 128-value MMA chains from 0, ((q0 + q1) + q2) + q3, added in segment order — or the same operations in
// matmul_f16_mma_tiles.cu, so a token's bits depend on neither n nor the shape: a batched step equals the
// solo run bit for bit.
// Launch shapes (by job; none changes the order):
//  * prefill, ≥ 256 rows (K a multiple of 512, aligned): matmul_f16_mma_tiles.cu's shared-memory tiles;
//  * prefill, other jobs (64-row indexer weights, 24-row HC controls): f16_mma_few_rows_launch_shape, by
//    default 32 rows × 16 vectors per block, 16 warps × 1 quarter per round (4 segments) up to 32 rows,
//    else 32 × 8 per block, 8 warps × 1 quarter, 4 blocks per SM;
//  * decode (≤ 8 vectors, with f16_mma_decode): matmul_f16_mma_decode.cu, a warp per quarter;
//  * decode and decode batches (< 64 vectors): 16 rows (8 or 4 where rows are few) × 8 … 32 vectors per block,
//    up to 16 warps × 2 quarters each in flight, loads straight from global memory into the fragments.
// Deliberately not here: the scalar segment order (matmul_f16.cu, matmul_f16_many.cu — the default: these
// decode shapes are slower, docs/PERF.md), other weight types, `exact` numerics.
#include <algorithm>
#include <string>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_impl.h"
#include "backend/cuda/f16_mma.cuh"
#include "backend/cuda/matmul_f16_mma_tiles.h"

namespace ds4::backend::cuda {

namespace {

constexpr int64_t kMmaPrefillVecs = 64;  // from here the prefill shapes
constexpr int kManyMaxJobs = 8;
constexpr int kManyMaxVec = 32;
constexpr int kManyRows = 8;  // rows per block: 8-row MMA tiles (decode is bandwidth-bound: more blocks in flight)

struct F16MmaParams {
  GemvJob j;              // the job (device pointers); with ids one vector per block
  int32_t rows_per_block, vecs_per_block;
  bool wide;
};

// Grid (row blocks, vector blocks); blockDim = warps × 32 (template bound kThreads; kMinB blocks per
// multiprocessor the registers must allow).
template <int P, int TM, int TN, bool kUnroll, int kThreads, int kMinB = 1>
__global__ void __launch_bounds__(kThreads, kMinB) f16_mma_kernel(F16MmaParams p) {
  extern __shared__ float sh[];
  const GemvJob& j = p.j;
  F16MmaTile T;
  T.w = static_cast<const uint8_t*>(j.w.data);
  T.poison = false;
  T.v0 = static_cast<int64_t>(blockIdx.y) * p.vecs_per_block;
  if (j.ids) {  // vecs_per_block == 1: this block's one vector picks the expert
    const int32_t e = j.ids[T.v0];
    T.poison = e < 0 || e >= j.n_expert;
    T.w += static_cast<uint64_t>(T.poison ? 0 : e) * j.expert_bytes;
  }
  T.row_bytes = j.w.row_bytes;
  T.rows = j.w.rows;
  T.cols = j.w.cols;
  T.o0 = static_cast<int64_t>(blockIdx.x) * p.rows_per_block;
  T.rpt = p.rows_per_block;
  T.x = j.x;
  T.x_stride = j.x_stride;
  T.x_div = j.x_div;
  T.nv = std::min<int64_t>(p.vecs_per_block, j.n_vec - T.v0);
  T.y = j.y;
  T.y_stride = j.y_stride;
  T.wide = p.wide;
  f16_mma_tile<P, TM, TN, kUnroll>(T, sh);
}

struct F16MmaManyJob {
  const uint8_t* w;
  uint64_t row_bytes;
  int64_t rows, cols;
  const float* x;
  int64_t x_stride;
  float* y;
  int64_t y_stride;
  int32_t block0;  // first block of this job (one block per kManyRows rows)
};

struct F16MmaManyParams {
  F16MmaManyJob job[kManyMaxJobs];
  int32_t n_jobs;
  int32_t n_vec;
};

// Block b of job J: rows 8·(b − J.block0) …, every vector, 8 warps × 2 quarters per round (4 segments).
template <int TN>
__global__ void __launch_bounds__(256) f16_mma_many_kernel(F16MmaManyParams p) {
  extern __shared__ float sh[];
  F16MmaManyJob J = p.job[0];
#pragma unroll
  for (int k = 1; k < kManyMaxJobs; ++k)  // constant indices: the table stays in parameter space
    if (k < p.n_jobs && static_cast<int32_t>(blockIdx.x) >= p.job[k].block0) J = p.job[k];
  F16MmaTile T;
  T.w = J.w;
  T.row_bytes = J.row_bytes;
  T.rows = J.rows;
  T.cols = J.cols;
  T.o0 = (static_cast<int64_t>(blockIdx.x) - J.block0) * kManyRows;
  T.rpt = kManyRows;
  T.x = J.x;
  T.x_stride = J.x_stride;
  T.x_div = 1;
  T.v0 = 0;
  T.nv = p.n_vec;
  T.y = J.y;
  T.y_stride = J.y_stride;
  T.wide = true;
  T.poison = false;
  f16_mma_tile<2, 1, TN, true>(T, sh);
}

// Dynamic shared memory: (warps·P + 1) warp tiles of segment sums (≤ 37 KB for every shape above: no opt-in).
template <int P, int TM, int TN, bool kUnroll, int kThreads, int kMinB = 1>
cudaError_t launch_mma(const F16MmaParams& p, dim3 grid, int warps, cudaStream_t s) {
  const int per_round = warps * P;
  const size_t smem = per_round == 1 ? 0 : static_cast<size_t>(per_round + 1) * 128 * TM * TN * sizeof(float);
  f16_mma_kernel<P, TM, TN, kUnroll, kThreads, kMinB><<<grid, warps * kWarp, smem, s>>>(p);
  return cudaGetLastError();
}

bool wide_job(const GemvJob& j) {
  return j.w.cols % 8 == 0 && j.w.row_bytes % 16 == 0 && aligned16(j.w.data) && aligned16(j.x) && j.x_stride % 4 == 0 &&
         (!j.ids || j.expert_bytes % 16 == 0);
}

}  // namespace

bool f16_mma_few_rows_support(const GemvJob& j) { return !j.ids && j.n_vec >= kMmaPrefillVecs; }

cudaError_t f16_mma_few_rows_launch_shape(const GemvJob& j, cudaStream_t s, int shape) {
  F16MmaParams p{};
  p.j = j;
  p.wide = wide_job(j);
  auto grid = [&](int64_t rpb, int64_t vpb) {
    p.rows_per_block = static_cast<int32_t>(rpb);
    p.vecs_per_block = static_cast<int32_t>(vpb);
    return dim3(static_cast<unsigned>((j.w.rows + rpb - 1) / rpb), static_cast<unsigned>((j.n_vec + vpb - 1) / vpb));
  };
  if ((j.n_vec + 7) / 8 > 65535) return cudaErrorInvalidConfiguration;
  // The HC controls (24 × 16384 at 2,048 vectors: 134 MB of activations, 0.8 MB of weights) are bound by
  // the activations' loads in flight and the weights' re-reads from L2 (once per block's vectors). −1, the
  // default (session 12 on the H200, ms per call at 2,048 vectors, W2 two rounds): up to 32 rows shape 4 (HC
  // controls 0.075 → 0.061 against shape 0, the session 11 default; shape 1 0.068), else 5 (indexer weights
  // 64 × 4096 0.037 → 0.029). Measured slower and removed: 16 warps × 1 quarter on 8-vector blocks with the
  // quarter's loads first (0.084), shape 0 with them first (0.077), 8-vector blocks at 3 per SM (0.133).
  if (shape < 0) shape = j.w.rows <= 32 ? 4 : 5;
  switch (shape) {
    case 0:  // 32 rows × 16 vectors per block, 8 warps × 2 quarters per round (4 segments)
      return launch_mma<2, 2, 2, false, 256>(p, grid(32, 16), 8, s);
    case 1:  // 256 blocks of 8 vectors, 2 per multiprocessor (≤ 128 registers)
      return launch_mma<2, 2, 1, false, 256, 2>(p, grid(32, 8), 8, s);
    case 4:  // 128 blocks of 16 vectors (the weights read once per 16 vectors), 16 warps × 1 quarter
      return launch_mma<1, 2, 2, false, 512>(p, grid(32, 16), 16, s);
    case 5:  // 256 blocks of 8 vectors, 8 warps × 1 quarter, 4 per multiprocessor (≤ 64 registers)
      return launch_mma<1, 2, 1, false, 256, 4>(p, grid(32, 8), 8, s);
    default:  // 2, 3, 6: removed (slower, session 12); 7, 8: removed (session 13: 8 / 12 warps × 1 quarter with a
              // quarter's loads in flight together — HC controls 0.087 / 0.070 ms against 4's 0.060); 9: removed
              // (session 13: 4 warps streaming their quarters through private cp.async rings — 0.061, no gain)
      return cudaErrorInvalidValue;
  }
}

void CudaBackend::gemv_f16_mma(const GemvJob& j) {
  F16MmaParams p{};
  p.j = j;
  p.wide = wide_job(j);
  const int64_t nq = 4 * ((j.w.cols + kF16MmaSeg - 1) / kF16MmaSeg);  // quarters, whole segments
  cudaStream_t s = stream();
  auto grid = [&](int64_t rpb, int64_t vpb) {
    p.rows_per_block = static_cast<int32_t>(rpb);
    p.vecs_per_block = static_cast<int32_t>(vpb);
    return dim3(static_cast<unsigned>((j.w.rows + rpb - 1) / rpb), static_cast<unsigned>((j.n_vec + vpb - 1) / vpb));
  };
  if ((j.n_vec + (j.ids ? 1 : 8) - 1) / (j.ids ? 1 : 8) > 65535) {
    fail(invalid_argument("cuda matmul f16: " + std::to_string(j.n_vec) + " vectors exceed one launch"));
    return;
  }
  // Every shape below runs rounds of warps × 2 quarters, a multiple of 4 (whole segments).
  cudaError_t e;
  if (f16_mma_decode(std::span<const GemvJob>(&j, 1))) return;  // ≤ 8 vectors: matmul_f16_mma_decode.cu
  if (f16_mma_tiles_support(j)) {  // prefill, ≥ 256 rows: shared-memory tiles (matmul_f16_mma_tiles.cu)
    e = f16_mma_tiles_launch(j, s);
  } else if (f16_mma_few_rows_support(j)) {  // prefill, few rows (HC controls): the shape by rows (4 or 5)
    e = f16_mma_few_rows_launch_shape(j, s, -1);
  } else {
    // Decode: 8- or 4-row tiles where 16-row ones would leave the device mostly idle (the router's 256 rows
    // in 64 blocks): bandwidth-bound, the idle MMA rows cost nothing.
    const int64_t rpb = j.w.rows >= 2048 ? 16 : j.w.rows >= 512 ? 8 : 4;
    const int warps = static_cast<int>(std::clamp<int64_t>(nq / 2, 2, 16));  // even: rounds of whole segments
    if (j.ids || j.n_vec == 1) {
      e = launch_mma<2, 1, 1, true, 512>(p, grid(rpb, 1), warps, s);
    } else if (j.n_vec <= 8) {
      e = launch_mma<2, 1, 1, true, 512>(p, grid(rpb, 8), warps, s);
    } else if (j.n_vec <= 16) {
      e = launch_mma<2, 1, 2, true, 512>(p, grid(rpb, 16), warps, s);
    } else {
      e = launch_mma<2, 1, 4, true, 256>(p, grid(rpb, 32), std::min(warps, 8), s);
    }
  }
  check(e, "matmul f16 (MMA order)");
}

bool CudaBackend::matmul_many_f16_mma(std::span<const MatmulArgs> jobs) {
  const int64_t n = jobs[0].n;
  if (jobs.size() > kManyMaxJobs || n < 1 || n > kManyMaxVec) return false;
  for (const MatmulArgs& a : jobs)
    if (a.w.type != GgmlType::F16 || a.numerics != MatmulNumerics::ds4 || a.group_rows != 0 || a.n != n ||
        a.w.rows <= 0 || a.w.cols <= 0 || a.w.cols % 8 != 0 || a.w.row_bytes % 16 != 0 || !aligned16(a.w.data) ||
        !aligned16(a.x) || a.x_stride % 4 != 0)
      return false;
  if (n <= 8) {  // decode: matmul_f16_mma_decode.cu, when on
    GemvJob dj[kManyMaxJobs];
    for (size_t k = 0; k < jobs.size(); ++k) dj[k] = gemv_job(jobs[k]);
    if (f16_mma_decode(std::span<const GemvJob>(dj, jobs.size()))) return true;
  }
  F16MmaManyParams p{};
  p.n_jobs = static_cast<int32_t>(jobs.size());
  p.n_vec = static_cast<int32_t>(n);
  int64_t blocks = 0;
  for (size_t k = 0; k < jobs.size(); ++k) {
    const MatmulArgs& a = jobs[k];
    F16MmaManyJob& J = p.job[k];
    J.w = static_cast<const uint8_t*>(a.w.data);
    J.row_bytes = a.w.row_bytes;
    J.rows = a.w.rows;
    J.cols = a.w.cols;
    J.x = a.x;
    J.x_stride = a.x_stride;
    J.y = a.y;
    J.y_stride = a.y_stride;
    J.block0 = static_cast<int32_t>(blocks);
    blocks += (a.w.rows + kManyRows - 1) / kManyRows;
  }
  if (blocks > (int64_t{1} << 30)) {
    fail(invalid_argument("cuda matmul_many: " + std::to_string(blocks) + " blocks exceed one launch"));
    return true;
  }
  constexpr int kWarps = 8, kP = 2;
  const int TN = n <= 8 ? 1 : n <= 16 ? 2 : 4;
  const size_t smem = static_cast<size_t>(kWarps * kP + 1) * 128 * TN * sizeof(float);  // ≤ 35 KB
  const unsigned grid = static_cast<unsigned>(blocks);
  if (TN == 1)
    f16_mma_many_kernel<1><<<grid, kWarps * kWarp, smem, stream()>>>(p);
  else if (TN == 2)
    f16_mma_many_kernel<2><<<grid, kWarps * kWarp, smem, stream()>>>(p);
  else
    f16_mma_many_kernel<4><<<grid, kWarps * kWarp, smem, stream()>>>(p);
  const cudaError_t e = cudaGetLastError();
  check(e, "matmul_many f16 (MMA order)");
  return true;
}

}  // namespace ds4::backend::cuda
