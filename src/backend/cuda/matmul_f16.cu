// matmul_f16.cu — F16 weights · float activations under ds4 numerics (router [256][4096], compressor and
// indexer projections, HC controls [24][16384] and the head's [4][16384]) for every batch size, in the
// segment order of README.md "F16 summation order": K is cut into 512-value segments, each summed by one
// warp in a fixed lane order, and the segment sums are added in segment order. The order depends on
// nothing but K, so one kernel serves n = 1 and n = 64 and a token's bits never depend on its batch.
//
// Launch shape (free to change: it never touches the order): a block owns R rows (1 or 4) and up to 16
// vectors and walks the segments in rounds of one segment per warp; each warp loads its weights once
// (16 values per lane per row) and reuses them for every vector of the block. With R = 4 each
// activation load serves 4 rows. A 24 × 16384 HC matmul at n = 1 is 24 blocks of 32 warps: every
// weight byte is in flight at once instead of 24 warps walking 16384 values each.
// Prefill chunks take f16_tile_kernel: the same order with the weights converted once per segment and
// 16 segment sums reduced together (reduce_scatter16 in f16_segment.cuh: warp_sum's bits).
// Deliberately not here: F32/BF16 and `exact` numerics (double-accumulating matvec, ops_matmul.cu),
// the previous lane-order kernels (CudaBackendOptions::f16_segments = false keeps them selectable).
#include <algorithm>
#include <string>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_impl.h"
#include "backend/cuda/f16_segment.cuh"

namespace ds4::backend::cuda {

namespace {

constexpr int kBlockVecs = 16;   // vectors per block (grid y covers the rest)

struct F16Params {
  const uint8_t* w;            // matrix, or expert 0
  uint64_t row_bytes, expert_bytes;
  const int32_t* ids;          // [n_vec] expert per vector, or null (then one vector per block)
  int32_t n_expert;
  int64_t rows, cols;
  const float* x;              // [*][x_stride]; vector v reads row v / x_div
  int64_t x_stride;
  int32_t x_div;
  float* y;                    // [n_vec][y_stride]
  int64_t y_stride, n_vec;
  int32_t block_vecs;          // vectors per block (≤ kBlockVecs; 1 with ids)
  bool wide_loads;             // 16-byte weight and activation loads are aligned (cols % 8 == 0, …)
};

// End of a round of segments (whole block): thread t < nv·R adds the round's segment sums of (vector
// t / R, row t % R) to its running total, in segment order, once every warp has written `part`.
template <int R, int kMaxWarps>
__device__ inline void add_round(const float (&part)[kBlockVecs][R][kMaxWarps], int nv, int nw, int64_t nseg,
                                 int64_t s0, float& total) {
  __syncthreads();
  if (static_cast<int>(threadIdx.x) < nv * R) {
    const int v = threadIdx.x / R, r = threadIdx.x % R;
    const int m = static_cast<int>(std::min<int64_t>(nw, nseg - s0));
    for (int k = 0; k < m; ++k) total += part[v][r][k];  // segment order
  }
  __syncthreads();  // the next round overwrites `part`
}

// R rows per block, up to kMaxWarps warps (one segment each per round).
template <int R, int kMaxWarps>
__global__ void __launch_bounds__(kMaxWarps * kWarp) f16_segment_kernel(F16Params p) {
  __shared__ float part[kBlockVecs][R][kMaxWarps];  // segment sums of the current round
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, nw = blockDim.x / kWarp;
  const int64_t o0 = static_cast<int64_t>(blockIdx.x) * R;
  const int64_t v0 = static_cast<int64_t>(blockIdx.y) * p.block_vecs;
  const int nv = static_cast<int>(std::min<int64_t>(p.block_vecs, p.n_vec - v0));
  const uint8_t* base = p.w;
  bool bad_expert = false;
  if (p.ids) {  // block_vecs == 1: this block's one vector picks the expert
    const int32_t e = p.ids[v0];
    bad_expert = e < 0 || e >= p.n_expert;
    base += static_cast<uint64_t>(bad_expert ? 0 : e) * p.expert_bytes;
  }
  const int64_t nseg = (p.cols + kF16Seg - 1) / kF16Seg;
  // Thread t < nv·R keeps the running row sum of vector t / R, row o0 + t % R.
  float total = 0.0f;
  for (int64_t s0 = 0; s0 < nseg && !bad_expert; s0 += nw) {
    const int64_t s = s0 + warp;
    if (s < nseg) {
      const int64_t e0 = s * kF16Seg + 8 * lane, e1 = e0 + kF16SegHalf;
      uint4 w[R][2];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (o0 + r < p.rows) {
          const uint8_t* row = base + static_cast<uint64_t>(o0 + r) * p.row_bytes;
          w[r][0] = load_w8(row, e0, p.cols, p.wide_loads);
          w[r][1] = load_w8(row, e1, p.cols, p.wide_loads);
        } else {
          w[r][0] = w[r][1] = make_uint4(0, 0, 0, 0);
        }
      }
#pragma unroll 2
      for (int v = 0; v < nv; ++v) {
        const float* x = p.x + ((v0 + v) / p.x_div) * p.x_stride;
        float4 xa, xb, xc, xd;
        load_x8(x, e0, p.cols, p.wide_loads, xa, xb);
        load_x8(x, e1, p.cols, p.wide_loads, xc, xd);
#pragma unroll
        for (int r = 0; r < R; ++r) {
          // The contract: chunk 8·lane then chunk 256 + 8·lane, in element order, then the butterfly.
          const float lane_sum = dot8(dot8(0.0f, w[r][0], xa, xb), w[r][1], xc, xd);
          const float seg_sum = warp_sum(lane_sum);
          if (lane == 0) part[v][r][warp] = seg_sum;
        }
      }
    }
    add_round<R, kMaxWarps>(part, nv, nw, nseg, s0, total);
  }
  if (static_cast<int>(threadIdx.x) < nv * R) {
    const int v = threadIdx.x / R, r = threadIdx.x % R;
    if (o0 + r < p.rows) p.y[(v0 + v) * p.y_stride + o0 + r] = bad_expert ? NAN : total;
  }
}

// Prefill (≥ kTileMinVecs vectors, 16-byte loads, no expert ids; CudaBackendOptions::f16_tiles): the
// same launch shape as f16_segment_kernel<4, 8> and the same sums, with less work per product. A warp
// converts its 4 rows' weights of the segment to float once (not once per vector), and reduces the 16
// lane sums of 4 rows × 4 vectors together (reduce_scatter16) instead of one warp_sum each: the
// additions are warp_sum's butterfly tree (offsets 16, 8, 4, 2, 1, each lane adding its partner's
// value), only each lane carries the items it ends with, so every segment sum has warp_sum's bits.
constexpr int64_t kTileMinVecs = 64;
constexpr int kTileVecs = 4;  // vectors per reduction (× 4 rows = 16 items)

__global__ void __launch_bounds__(8 * kWarp) f16_tile_kernel(F16Params p) {
  constexpr int R = 4, kMaxWarps = 8;
  __shared__ float part[kBlockVecs][R][kMaxWarps];  // segment sums of the current round
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, nw = blockDim.x / kWarp;
  const int64_t o0 = static_cast<int64_t>(blockIdx.x) * R;
  const int64_t v0 = static_cast<int64_t>(blockIdx.y) * p.block_vecs;
  const int nv = static_cast<int>(std::min<int64_t>(p.block_vecs, p.n_vec - v0));
  const int64_t nseg = (p.cols + kF16Seg - 1) / kF16Seg;
  float total = 0.0f;
  for (int64_t s0 = 0; s0 < nseg; s0 += nw) {
    const int64_t s = s0 + warp;
    if (s < nseg) {
      const int64_t e0 = s * kF16Seg + 8 * lane, e1 = e0 + kF16SegHalf;
      float wf[R][16];  // f16_dev of the lane's 16 weights per row: chunk e0, then chunk e1
#pragma unroll
      for (int r = 0; r < R; ++r) {
        uint4 w[2] = {make_uint4(0, 0, 0, 0), make_uint4(0, 0, 0, 0)};
        if (o0 + r < p.rows) {
          const uint8_t* row = p.w + static_cast<uint64_t>(o0 + r) * p.row_bytes;
          w[0] = load_w8(row, e0, p.cols, true);
          w[1] = load_w8(row, e1, p.cols, true);
        }
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const uint32_t q[4] = {w[c].x, w[c].y, w[c].z, w[c].w};
#pragma unroll
          for (int k = 0; k < 4; ++k) {
            wf[r][8 * c + 2 * k] = f16_dev(static_cast<uint16_t>(q[k] & 0xffffu));
            wf[r][8 * c + 2 * k + 1] = f16_dev(static_cast<uint16_t>(q[k] >> 16));
          }
        }
      }
      for (int vb = 0; vb < nv; vb += kTileVecs) {  // nv is the same for the whole block
        float sums[16];  // item r·4 + vi: this lane's sum of row r, vector vb + vi (dot8's order)
#pragma unroll
        for (int vi = 0; vi < kTileVecs; ++vi) {
          float4 xa = make_float4(0, 0, 0, 0), xb = xa, xc = xa, xd = xa;  // past nv: zeros, never stored
          if (vb + vi < nv) {
            const float* x = p.x + ((v0 + vb + vi) / p.x_div) * p.x_stride;
            load_x8(x, e0, p.cols, true, xa, xb);
            load_x8(x, e1, p.cols, true, xc, xd);
          }
          const float xv[16] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w,
                                xc.x, xc.y, xc.z, xc.w, xd.x, xd.y, xd.z, xd.w};
#pragma unroll
          for (int r = 0; r < R; ++r) {
            float acc = 0.0f;
#pragma unroll
            for (int j = 0; j < 16; ++j) acc += wf[r][j] * xv[j];
            sums[r * kTileVecs + vi] = acc;
          }
        }
        const float seg_sum = reduce_scatter16(sums, lane);
        const int item = (lane >> 1) & 15, r = item / kTileVecs, v = vb + item % kTileVecs;
        if ((lane & 1) == 0 && v < nv) part[v][r][warp] = seg_sum;
      }
    }
    add_round<R, kMaxWarps>(part, nv, nw, nseg, s0, total);
  }
  if (static_cast<int>(threadIdx.x) < nv * R) {
    const int v = threadIdx.x / R, r = threadIdx.x % R;
    if (o0 + r < p.rows) p.y[(v0 + v) * p.y_stride + o0 + r] = total;
  }
}

}  // namespace

void CudaBackend::gemv_f16(const GemvJob& j) {
  if (f16_mma_) {  // CudaBackendOptions::f16_mma: the MMA order (matmul_f16_mma.cu)
    gemv_f16_mma(j);
    return;
  }
  F16Params p{};
  p.w = static_cast<const uint8_t*>(j.w.data);
  p.row_bytes = j.w.row_bytes;
  p.expert_bytes = j.expert_bytes;
  p.ids = j.ids;
  p.n_expert = j.n_expert;
  p.rows = j.w.rows;
  p.cols = j.w.cols;
  p.x = j.x;
  p.x_stride = j.x_stride;
  p.x_div = j.x_div;
  p.y = j.y;
  p.y_stride = j.y_stride;
  p.n_vec = j.n_vec;
  p.block_vecs = j.ids ? 1 : static_cast<int32_t>(std::min<int64_t>(j.n_vec, kBlockVecs));
  p.wide_loads = j.w.cols % 8 == 0 && j.w.row_bytes % 16 == 0 && aligned16(j.w.data) && aligned16(j.x) &&
                 j.x_stride % 4 == 0 && (!j.ids || j.expert_bytes % 16 == 0);
  const int64_t nseg = (j.w.cols + kF16Seg - 1) / kF16Seg;
  const int64_t gy = (j.n_vec + p.block_vecs - 1) / p.block_vecs;
  if (gy > 65535) {
    fail(invalid_argument("cuda matmul f16: " + std::to_string(j.n_vec) + " vectors exceed one launch"));
    return;
  }
  cudaStream_t s = stream();
  if (f16_tiles_ && !j.ids && p.wide_loads && j.n_vec >= kTileMinVecs) {  // prefill chunks (HC controls included)
    const int warps = static_cast<int>(std::clamp<int64_t>(nseg, 2, 8));
    f16_tile_kernel<<<dim3(grid_for(j.w.rows, 4), static_cast<unsigned>(gy)), warps * kWarp, 0, s>>>(p);
    launched("matmul f16 (segment order, tiles)");
    return;
  }
  // 4 rows per block when several vectors share the weights and there are rows enough to fill the
  // device: each activation load then serves 4 rows (router, compressor, indexer at batch sizes > 1).
  if (!j.ids && j.n_vec > 1 && j.w.rows >= 256) {
    const int warps = static_cast<int>(std::clamp<int64_t>(nseg, 2, 8));  // ≥ 2: 64 threads sum 16 vectors × 4 rows
    f16_segment_kernel<4, 8><<<dim3(grid_for(j.w.rows, 4), static_cast<unsigned>(gy)), warps * kWarp, 0, s>>>(p);
  } else {
    const int warps = static_cast<int>(std::clamp<int64_t>(nseg, 1, 32));  // cols 0: one idle warp writes zeros
    f16_segment_kernel<1, 32><<<dim3(static_cast<unsigned>(j.w.rows), static_cast<unsigned>(gy)), warps * kWarp, 0, s>>>(p);
  }
  launched("matmul f16 (segment order)");
}

}  // namespace ds4::backend::cuda
