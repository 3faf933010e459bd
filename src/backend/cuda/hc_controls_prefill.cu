// hc_controls_prefill.cu — the HC control segment sums of a prefill chunk (HcPreArgs at n > 32 tokens, ops_hc.cu)
// in README.md's F16 MMA order, with each block's slice of the control weights resident in shared memory.
// Why: the controls (Flash 24 × 16,384 F16, 0.8 MB) against a chunk's state rows (2,048 × 16,384 floats, 134 MB)
// were rms_norm (read the rows, write x·scale: 268 MB) then the few-row matmul, whose 128 blocks of 16 vectors
// each re-read all 0.8 MB of weights from L2 (100 MB) — session 13 measured every load schedule of that matmul at
// 0.060 ms: bound by bytes, not by how they are issued. Here block (slice k, vector group) holds the weights of K
// values 2,048k … 2,048k + 2,047 (4 segments; Flash: 8 slices, 96 KiB) in shared memory for the whole launch and
// walks its vectors' rows once: the weights are read 12.6 MB in all (16 vector groups) instead of 100 MB, the
// rows once at their raw values times the scale hc_scale_kernel wrote (rms_norm's bits, so x·scale is exactly
// what rms_norm would have stored), and nothing is written but the segment sums part[t][row][segment] (6.3 MB) —
// which ops_hc.cu's finish kernels add in segment order, as after the decode spread kernels.
// Order: warp item (segment s, 16 vectors): quarters q = 0 … 3 of s, each f16_mma.cuh's chain of 16 k-steps
// (f16_mma_block: weight as TF32, x·scale split hi + lo) from 0, seg = ((q0 + q1) + q2) + q3 — exactly
// f16_mma_tile's per-segment values, so the finish's sums are the few-row matmul's outputs bit for bit.
// Deliberately not here: the scale and finish kernels (ops_hc.cu), other numerics (the caller checks f16_mma).
#include "backend/cuda/hc_controls_prefill.h"

#include <algorithm>

#include "backend/cuda/common.cuh"
#include "backend/cuda/f16_mma.cuh"
#include "backend/cuda/mma_s8.cuh"
#include "backend/cuda/rows_device.cuh"

namespace ds4::backend::cuda {

namespace {

constexpr int kSliceSegs = 4;                      // segments of K per block
constexpr int kSliceVals = kSliceSegs * kF16MmaSeg;  // 2,048 values
constexpr int kRowWords = kSliceVals / 8;          // 16-byte words of one row's slice
constexpr int kPitchWords = kRowWords + 4;         // ≡ 4 (mod 8): a fragment load's lanes (rows g, g + 1 × words
                                                   // t = 0 … 3) fall in 8 distinct 16-byte bank groups
constexpr int kTileVecs = 16;                      // vectors per warp item (two 8-vector n-tiles)

// Block (blockIdx.x = slice, blockIdx.y = vector group of vpb vectors); warp w takes items w, w + kWarps, …
// (item = tile·segs + segment: the block's warps read neighbouring 2 KB of each row together). kFlight: 32-value
// blocks of activation loads issued together before their MMAs (registers: 16 floats each).
template <int kWarps, int kFlight, int kMinB>
__global__ void __launch_bounds__(kWarps * kWarp, kMinB) hc_ctl_kernel(HcCtlParams p, int32_t vpb) {
  extern __shared__ uint4 wsm[];  // [rows][kPitchWords] the slice's weights (zeros past cols)
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, g = lane >> 2, t = lane & 3;
  const int64_t s0 = static_cast<int64_t>(blockIdx.x) * kSliceSegs, e0 = s0 * kF16MmaSeg;
  // The weights do not depend on the kernels before this one: copied before the wait.
  for (int k = threadIdx.x; k < p.rows * kRowWords; k += blockDim.x) {
    const int r = k / kRowWords, c = k % kRowWords;
    const int64_t e = e0 + 8 * c;
    uint4* d = wsm + r * kPitchWords + c;
    if (e < p.cols)
      cp_async16(d, p.w + static_cast<uint64_t>(r) * p.row_bytes + 2 * e);
    else
      *d = make_uint4(0, 0, 0, 0);
  }
  cp_async_commit();
  grid_dependency_wait();  // x (the HC post's) and sc (hc_scale_kernel's)
  grid_launch_dependents();
  cp_async_wait<0>();
  __syncthreads();
  const int64_t v_base = static_cast<int64_t>(blockIdx.y) * vpb;
  const int64_t nv = std::min<int64_t>(vpb, p.n - v_base);
  const int segs = static_cast<int>(std::min<int64_t>(kSliceSegs, p.nseg - s0));
  const int items = segs * static_cast<int>((nv + kTileVecs - 1) / kTileVecs);
  for (int item = warp; item < items; item += kWarps) {
    const int sl = item % segs;
    const int64_t v0 = v_base + static_cast<int64_t>(item / segs) * kTileVecs;
    const float* xr[2];
    float scl[2];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int64_t v = v0 + 8 * j + g;
      xr[j] = v < p.n ? p.x + v * p.cols : nullptr;
      scl[j] = v < p.n ? p.sc[v] : 0.0f;
    }
    int wro[2][2];  // word offsets of rows 16i + g + 8h of the two m-tiles (−1: a zero row, never stored)
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) wro[i][h] = 16 * i + g + 8 * h < p.rows ? (16 * i + g + 8 * h) * kPitchWords : -1;
    float sg[2][2][4];
#pragma unroll 1
    for (int q = 0; q < 4; ++q) {
      float c[2][2][4];
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) c[i][j][0] = c[i][j][1] = c[i][j][2] = c[i][j][3] = 0.0f;
#pragma unroll
      for (int b0 = 0; b0 < 4; b0 += kFlight) {
        float xv[kFlight][2][8];
#pragma unroll
        for (int bb = 0; bb < kFlight; ++bb) {
          const int64_t e = e0 + sl * kF16MmaSeg + q * kF16MmaQ + (b0 + bb) * kF16MmaBlk + 8 * t;
#pragma unroll
          for (int j = 0; j < 2; ++j) load_x8_mma<true>(xr[j], e, p.cols, true, scl[j], xv[bb][j]);
        }
#pragma unroll
        for (int bb = 0; bb < kFlight; ++bb) {
          const int wi = (sl * kF16MmaSeg + q * kF16MmaQ + (b0 + bb) * kF16MmaBlk + 8 * t) / 8;
          uint4 w[2][2];
#pragma unroll
          for (int i = 0; i < 2; ++i)
#pragma unroll
            for (int h = 0; h < 2; ++h) w[i][h] = wro[i][h] >= 0 ? wsm[wro[i][h] + wi] : make_uint4(0, 0, 0, 0);
          f16_mma_block<2, 2>(c, w, xv[bb]);
        }
      }
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j)
#pragma unroll
          for (int r = 0; r < 4; ++r) sg[i][j][r] = q == 0 ? c[i][j][r] : sg[i][j][r] + c[i][j][r];  // ((q0 + q1) + q2) + q3
    }
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const int row = f16_mma_row(i, g, r);
          const int64_t v = v0 + f16_mma_vec(j, t, r);
          if (row < p.rows && v < p.n) p.part[(v * p.rows + row) * p.nseg + s0 + sl] = sg[i][j][r];
        }
  }
}

// Row t's RMSNorm scale (form 5): ops_hc.cu's hc_scale_kernel's expression (rms_scale_row_v4 as 1,024 threads,
// rms_norm's bits for rows ≥ 8,192 wide) in a block of 256 threads bounded at 256: all 16 of a thread's float4 loads in
// flight (hc_scale_kernel's 1,024-thread bound leaves it 64 registers: 47.8 µs at 2,048 × 16,384 on the H200, 2.8 TB/s).
__global__ void __launch_bounds__(256) hc_ctl_scale_kernel(const float* x, int64_t cols, float eps, float* sc) {
  grid_launch_dependents();  // the segment kernel may start and copy its weights meanwhile
  const float s = rms_scale_row_v4(x + static_cast<int64_t>(blockIdx.x) * cols, cols, eps, 1024);
  if (threadIdx.x == 0) sc[blockIdx.x] = s;
}

// Vector groups per slice: one wave of blocks (16 per slice at one block per SM, 32 at two) on the H200's 132 SMs
// for Flash's 8 slices; fewer vectors per group only costs more weight copies.
template <int kWarps, int kFlight, int kMinB>
cudaError_t launch_form(const HcCtlParams& p, bool pdl, cudaStream_t s) {
  const int64_t slices = (p.nseg + kSliceSegs - 1) / kSliceSegs;
  const int64_t groups = 16 * kMinB;
  const int64_t tiles = (p.n + kTileVecs - 1) / kTileVecs;
  const int32_t vpb = static_cast<int32_t>(((tiles + groups - 1) / groups) * kTileVecs);
  const dim3 grid(static_cast<unsigned>(slices), static_cast<unsigned>((p.n + vpb - 1) / vpb));
  const size_t smem = static_cast<size_t>(p.rows) * kPitchWords * 16;
  auto kernel = hc_ctl_kernel<kWarps, kFlight, kMinB>;
  const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (e != cudaSuccess) return e;
  return launch_dependent(pdl, grid, kWarps * kWarp, smem, s, kernel, p, vpb);
}

}  // namespace

bool hc_controls_prefill_scale_fits(int64_t cols, const float* x) { return cols >= 8192 && cols % 4 == 0 && aligned16(x); }

cudaError_t hc_controls_prefill_scale(const float* x, int64_t cols, int64_t n, float eps, float* sc, cudaStream_t s) {
  hc_ctl_scale_kernel<<<static_cast<unsigned>(n), 256, 0, s>>>(x, cols, eps, sc);
  return cudaGetLastError();
}

bool hc_controls_prefill_fits(const HcCtlParams& p, int form) {
  return (form == 3 || form == 5) && p.rows >= 1 && p.rows <= kHcCtlMaxRows && p.cols > 0 && p.cols % 8 == 0 &&
         p.row_bytes % 16 == 0 && aligned16(p.w) && aligned16(p.x) && p.n >= 1 && p.n <= 65535 &&
         p.nseg == (p.cols + kF16MmaSeg - 1) / kF16MmaSeg;
}

cudaError_t hc_controls_prefill_launch(const HcCtlParams& p, int form, bool pdl, cudaStream_t s) {
  switch (form) {
    case 3:
    case 5:  // 3's segment kernel (ops_hc.cu: with hc_controls_prefill_scale and the split kernel reading part)
      return launch_form<16, 4, 1>(p, pdl, s);
    default:  // 1, 2, 4: removed (session 14: 16 warps with two blocks of loads in flight, 8 warps at two blocks per
              // SM, 3 as a plain launch — HC pre 0.177, 0.190, 0.179 ms against 3's 0.177 on the H200)
      return cudaErrorInvalidValue;
  }
}

}  // namespace ds4::backend::cuda
