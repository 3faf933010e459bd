// matmul_f16_many.cu — Backend::matmul_many on CUDA: several independent F16 matmuls (ds4 numerics) of
// the same 1..kManyMaxVec vectors in one launch — a CSA layer's decode projections (compressor kv and
// gate [1024][4096], the indexer compressor's [256][4096] pair, the indexer query [8192][1024] and head
// weights [64][4096]: six launches of a few hundred blocks each became one of ~4,700 blocks that keeps
// the whole GPU streaming weights).
//
// Each output is summed in README.md's F16 segment order, as matmul_f16.cu does: a warp owns one
// 512-value segment of R rows (R = 1 for one vector, 4 for several: each activation load then serves 4
// rows), lane l sums its chunks 8·l and 256 + 8·l in element order (dot8), the butterfly warp_sum gives
// the segment sum, and one thread per (vector, row) adds the segment sums from 0.0f in segment order. A
// block holds all segments of its rows (rows of ≤ kManyWarps segments, i.e. ≤ 4,096 values), so the bits
// equal one matmul() per job.
// Deliberately not here: other weight types, `exact` numerics, grouped jobs, rows of more than 4,096
// values or more than kManyMaxVec vectors — those jobs (and every job with CudaBackendOptions::f16_many =
// false) run as one matmul() each.
#include <algorithm>
#include <string>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_impl.h"
#include "backend/cuda/f16_segment.cuh"

namespace ds4::backend::cuda {

namespace {

constexpr int kManyMaxJobs = 8;
constexpr int kManyWarps = 8;    // segments per block: rows of up to 8 × 512 values
constexpr int kManyMaxVec = 32;  // vectors (decode and batched decode steps)

struct F16ManyJob {
  const uint8_t* w;
  uint64_t row_bytes;
  int64_t rows;
  const float* x;  // [n][x_stride]
  int64_t x_stride;
  float* y;        // [n][y_stride]
  int64_t y_stride;
  int32_t nseg;    // ⌈cols / 512⌉ ≤ kManyWarps
  int32_t groups;  // row groups of R rows per block: kManyWarps / nseg
  int32_t block0;  // first block of this job
  int32_t cols;
};

struct F16ManyParams {
  F16ManyJob job[kManyMaxJobs];
  int32_t n_jobs;
  int32_t n_vec;
};

// grid: Σ_j ⌈rows_j / (groups_j·R)⌉ blocks of kManyWarps warps; warp w of a block: row group w / nseg,
// segment w % nseg.
template <int R>
__global__ void __launch_bounds__(kManyWarps * kWarp) f16_many_kernel(F16ManyParams p) {
  __shared__ float part[kManyMaxVec][R][kManyWarps];  // segment sums
  F16ManyJob J = p.job[0];
#pragma unroll
  for (int k = 1; k < kManyMaxJobs; ++k)  // constant indices: the table stays in parameter space
    if (k < p.n_jobs && static_cast<int32_t>(blockIdx.x) >= p.job[k].block0) J = p.job[k];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, nv = p.n_vec;
  const int64_t b = static_cast<int64_t>(blockIdx.x) - J.block0;
  const int g = warp / J.nseg, s = warp % J.nseg;
  if (g < J.groups) {  // the same for the whole warp
    const int64_t o0 = (b * J.groups + g) * R;
    const int64_t e0 = static_cast<int64_t>(s) * kF16Seg + 8 * lane, e1 = e0 + kF16SegHalf;
    uint4 w[R][2];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (o0 + r < J.rows) {
        const uint8_t* row = J.w + static_cast<uint64_t>(o0 + r) * J.row_bytes;
        w[r][0] = load_w8(row, e0, J.cols, true);
        w[r][1] = load_w8(row, e1, J.cols, true);
      } else {
        w[r][0] = w[r][1] = make_uint4(0, 0, 0, 0);
      }
    }
    for (int v = 0; v < nv; ++v) {
      const float* x = J.x + v * J.x_stride;
      float4 xa, xb, xc, xd;
      load_x8(x, e0, J.cols, true, xa, xb);
      load_x8(x, e1, J.cols, true, xc, xd);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        // The contract: chunk 8·lane then chunk 256 + 8·lane, in element order, then the butterfly.
        const float seg_sum = warp_sum(dot8(dot8(0.0f, w[r][0], xa, xb), w[r][1], xc, xd));
        if (lane == 0) part[v][r][warp] = seg_sum;
      }
    }
  }
  __syncthreads();
  const int items = nv * J.groups * R;  // (vector, row group, row)
  for (int t = threadIdx.x; t < items; t += blockDim.x) {
    const int v = t / (J.groups * R), gg = t / R % J.groups, r = t % R;
    const int64_t o = (b * J.groups + gg) * R + r;
    if (o >= J.rows) continue;
    float total = 0.0f;
    for (int k = 0; k < J.nseg; ++k) total += part[v][r][gg * J.nseg + k];  // segment order
    J.y[v * J.y_stride + o] = total;
  }
}

}  // namespace

void CudaBackend::matmul_many(std::span<const MatmulArgs> jobs) {
  if (failed() || jobs.empty()) return;
  if (gemv_stream_many(jobs, act_)) return;  // Q8_0 jobs sharing one input: gemv_stream.cu, one launch
  // … prefill batches of them with CudaBackendOptions::gemm_q8_parts: one quantization, one gemm_q8.cu launch.
  if (gemm_q8_parts_ && gemm_q8_ != 0 && tensor_cores() && gemm_pipelined_ && gemm_q8_many(jobs)) return;
  const int64_t n = jobs[0].n;
  // CudaBackendOptions::f16_mma: the MMA order's one-launch kernel (matmul_f16_mma.cu), else one matmul per job.
  if (f16_mma_ && f16_segments_) {
    if (f16_many_ && matmul_many_f16_mma(jobs)) return;
    for (const MatmulArgs& a : jobs) matmul(a);
    return;
  }
  bool one = f16_many_ && f16_segments_ && jobs.size() <= kManyMaxJobs && n >= 1 && n <= kManyMaxVec;
  for (const MatmulArgs& a : jobs) {
    const int64_t nseg = (a.w.cols + kF16Seg - 1) / kF16Seg;
    one = one && a.w.type == GgmlType::F16 && a.numerics == MatmulNumerics::ds4 && a.group_rows == 0 &&
          a.n == n && a.w.rows > 0 && a.w.cols > 0 && nseg <= kManyWarps && a.w.cols % 8 == 0 &&
          a.w.row_bytes % 16 == 0 && aligned16(a.w.data) && aligned16(a.x) && a.x_stride % 4 == 0;
  }
  if (!one) {
    for (const MatmulArgs& a : jobs) matmul(a);
    return;
  }
  const int R = n == 1 ? 1 : 4;
  F16ManyParams p{};
  p.n_jobs = static_cast<int32_t>(jobs.size());
  p.n_vec = static_cast<int32_t>(n);
  int64_t blocks = 0;
  for (size_t k = 0; k < jobs.size(); ++k) {
    const MatmulArgs& a = jobs[k];
    F16ManyJob& J = p.job[k];
    J.w = static_cast<const uint8_t*>(a.w.data);
    J.row_bytes = a.w.row_bytes;
    J.rows = a.w.rows;
    J.cols = static_cast<int32_t>(a.w.cols);
    J.x = a.x;
    J.x_stride = a.x_stride;
    J.y = a.y;
    J.y_stride = a.y_stride;
    J.nseg = static_cast<int32_t>((a.w.cols + kF16Seg - 1) / kF16Seg);
    J.groups = kManyWarps / J.nseg;
    J.block0 = static_cast<int32_t>(blocks);
    blocks += (a.w.rows + int64_t{J.groups} * R - 1) / (int64_t{J.groups} * R);
  }
  if (blocks > (int64_t{1} << 30)) {
    fail(invalid_argument("cuda matmul_many: " + std::to_string(blocks) + " blocks exceed one launch"));
    return;
  }
  const unsigned grid = static_cast<unsigned>(blocks);
  if (R == 1)
    f16_many_kernel<1><<<grid, kManyWarps * kWarp, 0, stream()>>>(p);
  else
    f16_many_kernel<4><<<grid, kManyWarps * kWarp, 0, stream()>>>(p);
  launched("matmul_many f16 (segment order)");
}

}  // namespace ds4::backend::cuda
