// ops_qat.cu — quantization-aware simulations (MODEL.md §5.4, §5.5): FP8 E4M3 round trip of KV rows
// in blocks of 64, and Hadamard + FP4 E2M1 round trip of indexer rows in blocks of 32 (with
// IndexerQatArgs::n_rot the indexer query's RoPE first, in the same launch; with small_v5 a warp per row). Each
// device function is the CPU primitive (backend/cpu/primitives.cpp) in the same float operations.
#include <algorithm>
#include <string>

#include "backend/by_pieces.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_impl.h"
#include "backend/cuda/qat_device.cuh"
#include "backend/cuda/rows_device.cuh"

namespace ds4::backend::cuda {

namespace {

// One warp per 64-value block (two values per lane). x: [rows][stride], blocks in [0, n_quant).
__global__ void fp8_round_kernel(float* x, int64_t rows, int64_t stride, int32_t n_quant) {
  const int64_t nb = n_quant / 64;
  const int64_t blk = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (blk >= rows * nb) return;
  fp8_block_warp(x + (blk / nb) * stride + (blk % nb) * 64, lane);
}

// One block of `dim` threads per row: scaled Walsh–Hadamard in shared memory, then FP4 blocks of 32
// (each a warp), then half rounding with f16. dim is a power of two, 32 … 1024. Rows at x_at with a
// device count (IndexerQatArgs): the whole block leaves before any barrier.
__global__ void indexer_qat_kernel(IndexerQatArgs a, float k) {
  extern __shared__ float sh[];
  if (a.count && blockIdx.x >= *a.count) return;
  const int32_t dim = a.dim;
  float* row = a.x_at ? a.x_at[blockIdx.x] : a.x + static_cast<int64_t>(blockIdx.x) * dim;
  const int i = threadIdx.x;
  sh[i] = row[i];
  __syncthreads();
  for (int s = 1; s < dim; s *= 2) {
    // The butterfly pair (b+j, b+s+j) is handled by the thread of the lower index.
    float u = 0, v = 0;
    const bool low = (i & s) == 0;
    if (low) {
      u = sh[i];
      v = sh[i + s];
    }
    __syncthreads();
    if (low) {
      sh[i] = u + v;
      sh[i + s] = u - v;
    }
    __syncthreads();
  }
  fp4_block_store(sh[i] * k, row, i, a.f16);
}

// indexer_qat_kernel's values (small_v3): the Hadamard stages s < 32 inside each warp by shuffles (lane i
// and its partner i ^ s: the lower index keeps own + partner, the upper partner − own — the same
// additions), only the stages s ≥ 32 through shared memory: 2·(log2(dim) − 5) barriers instead of
// 2·log2(dim) (4 instead of 14 at the indexer's 128). Launched as a programmatic dependent.
__global__ void indexer_qat3_kernel(IndexerQatArgs a, float k) {
  extern __shared__ float sh[];
  grid_dependency_wait();  // the rows (and the count) come from the work before
  if (a.count && blockIdx.x >= *a.count) return;
  const int32_t dim = a.dim;
  float* row = a.x_at ? a.x_at[blockIdx.x] : a.x + static_cast<int64_t>(blockIdx.x) * dim;
  hadamard_fp4_store(row[threadIdx.x], sh, row, dim, k, a.f16, static_cast<int>(threadIdx.x));
}

// The indexer query's RoPE and QAT (and its head weights' scale) in one launch (IndexerQatArgs::n_rot,
// scale_x; small_v4): rope_kernel's rotation
// of the row's last n_rot dims, then indexer_qat3_kernel's steps — one block of dim threads per row
// [rows = n·heads][dim], as the two kernels one after the other (64 rows of 128 at decode: the RoPE launch,
// ~3 µs on the CSA layers' chain, goes): qat_device.cuh's rope_qat_row.
// Blocks past the rows (IndexerQatArgs::scale_x): scale_kernel's y[i] *= s over the head weights, each
// block a strided share, leaving before any barrier.
__global__ void indexer_rope_qat_kernel(IndexerQatArgs a, RopeFreqs f, float k) {
  extern __shared__ float sh[];
  grid_dependency_wait();  // the rows come from the work before
  const int64_t r = blockIdx.x;
  if (r >= a.rows) {
    const int64_t step = static_cast<int64_t>(gridDim.x - a.rows) * blockDim.x;
    for (int64_t i = (r - a.rows) * blockDim.x + threadIdx.x; i < a.scale_count; i += step) a.scale_x[i] *= a.scale;
    return;
  }
  rope_qat_row(a, f, k, r, static_cast<int>(threadIdx.x), sh, true);
}

// indexer_rope_qat_kernel's values with a warp per row (small_v5): lane l holds values l + 32c of the row
// (c < V = dim / 32) in registers — the RoPE pair (2j, 2j + 1) on lanes l, l ^ 1 of one c (one shuffle), the
// Hadamard stages below 32 by shuffles on every c, the stages from 32 between a lane's own registers (c and
// c ^ (s / 32): own + partner on the lower, lower − upper on the upper, the same additions), each FP4 block of
// 32 values one c across the warp — no shared memory, no barrier. A warp walks R rows of one token (R divides
// heads), all their loads in flight, and forms its lanes' RoPE angles once for them: a 2,048-token prefill
// chunk's 131,072 rows of 128 took a 128-thread block each (4 barriers, the double cos/sin per row and lane,
// ~0.4 TB/s). Decode calls (< kWarpRowsMin rows) keep indexer_rope_qat_kernel: a row's chain spread over 128
// threads is shorter than a lane's four values (H200: 2.5 against 4.4 µs at 64 rows). Blocks past the row
// blocks: indexer_rope_qat_kernel's weight scale, sized by the count (a chunk's 131,072 weights in 4 blocks
// were ~256 dependent load-store rounds a thread, the whole launch's tail: 311 µs).
template <int V, int R>
__global__ void __launch_bounds__(128) indexer_rope_qat_warp_kernel(IndexerQatArgs a, RopeFreqs f, float k,
                                                                     int64_t row_blocks) {
  grid_dependency_wait();  // the rows come from the work before
  if (blockIdx.x >= row_blocks) {
    const int64_t step = static_cast<int64_t>(gridDim.x - row_blocks) * blockDim.x;
    for (int64_t i = (blockIdx.x - row_blocks) * blockDim.x + threadIdx.x; i < a.scale_count; i += step)
      a.scale_x[i] *= a.scale;
    return;
  }
  constexpr int kDim = V * kWarp;
  const int lane = threadIdx.x % kWarp;
  const int64_t r0 = (static_cast<int64_t>(blockIdx.x) * (blockDim.x / kWarp) + threadIdx.x / kWarp) * R;
  if (r0 >= a.rows) return;  // whole warps (rows is a multiple of R)
  float v[R][V];
#pragma unroll
  for (int q = 0; q < R; ++q)
#pragma unroll
    for (int c = 0; c < V; ++c) v[q][c] = a.x[(r0 + q) * kDim + lane + kWarp * c];
  // The token's angles for this lane's tail values (rope_cos_sin: index j = i − (dim − n_rot), pair j / 2).
  const int32_t pos = a.pos[r0 / a.heads];
  float2 cs[V];
#pragma unroll
  for (int c = 0; c < V; ++c) {
    const int j = lane + kWarp * c - (kDim - a.n_rot);
    cs[c] = j >= 0 ? rope_cos_sin(pos, f.w[j / 2], false) : make_float2(1.0f, 0.0f);
  }
#pragma unroll
  for (int q = 0; q < R; ++q) {
    float* x = v[q];
#pragma unroll
    for (int c = 0; c < V; ++c) {  // rope_apply's two expressions, one per lane of the pair
      const int j = lane + kWarp * c - (kDim - a.n_rot);
      const float o = __shfl_xor_sync(0xffffffffu, x[c], 1);
      if (j >= 0) {
        const bool odd = (j & 1) != 0;
        const float x0 = odd ? o : x[c], x1 = odd ? x[c] : o;
        x[c] = odd ? x0 * cs[c].y + x1 * cs[c].x : x0 * cs[c].x - x1 * cs[c].y;
      }
    }
#pragma unroll
    for (int s = 1; s < kWarp; s *= 2)
#pragma unroll
      for (int c = 0; c < V; ++c) {
        const float o = __shfl_xor_sync(0xffffffffu, x[c], s);
        x[c] = (lane & s) == 0 ? x[c] + o : o - x[c];
      }
#pragma unroll
    for (int m = 1; m < V; m *= 2)  // stage s = 32·m
#pragma unroll
      for (int c = 0; c < V; ++c)
        if ((c & m) == 0) {
          const float lo = x[c], hi = x[c | m];
          x[c] = lo + hi;
          x[c | m] = lo - hi;
        }
    float* row = a.x + (r0 + q) * kDim;
#pragma unroll
    for (int c = 0; c < V; ++c) fp4_block_store(x[c] * k, row, lane + kWarp * c, a.f16);
  }
}

// The launch of indexer_rope_qat_warp_kernel<V, R> for a.dim = 32·V: R rows a warp where heads allow and
// the rows fill the device (prefill chunks), else one. false: not a shape it takes.
constexpr int64_t kWarpRowsMin = 8192;
template <int V>
bool launch_rope_qat_warp(const IndexerQatArgs& a, const RopeFreqs& f, float k, int64_t sblocks, bool pdl,
                          cudaStream_t st, cudaError_t& err) {
  if (a.dim != V * kWarp) return false;
  constexpr int kWarps = 4;
  const bool wide = a.heads % 8 == 0;
  const int64_t rb = (a.rows / (wide ? 8 : 1) + kWarps - 1) / kWarps;
  const dim3 grid(static_cast<unsigned>(rb + sblocks));
  err = wide ? launch_dependent(pdl, grid, kWarps * kWarp, 0, st, indexer_rope_qat_warp_kernel<V, 8>, a, f, k, rb)
             : launch_dependent(pdl, grid, kWarps * kWarp, 0, st, indexer_rope_qat_warp_kernel<V, 1>, a, f, k, rb);
  return true;
}

}  // namespace

void CudaBackend::fp8_round(const Fp8RoundArgs& a) {
  if (failed() || a.rows <= 0 || a.n_quant <= 0) return;
  if (a.n_quant % 64 != 0) {
    fail(invalid_argument("cuda fp8_round: n_quant " + std::to_string(a.n_quant) + " is not a multiple of 64"));
    return;
  }
  const int64_t warps = a.rows * (a.n_quant / 64);
  fp8_round_kernel<<<grid_for(warps * kWarp, 256), 256, 0, stream()>>>(a.x, a.rows, a.stride, a.n_quant);
  launched("fp8_round");
}

void CudaBackend::indexer_qat(const IndexerQatArgs& a) {
  if (failed() || a.rows <= 0) return;
  if (a.dim < 32 || a.dim > 1024 || (a.dim & (a.dim - 1)) != 0) {
    fail(invalid_argument("cuda indexer_qat: dim " + std::to_string(a.dim) + " must be a power of two in [32, 1024]"));
    return;
  }
  if (a.rows > 0x7fffffff - 4) {
    fail(invalid_argument("cuda indexer_qat: too many rows"));
    return;
  }
  if (a.scale_x && a.scale_count > 0 && a.n_rot <= 0) {
    fail(invalid_argument("cuda indexer_qat: scale_x goes with the RoPE (n_rot > 0)"));
    return;
  }
  if (a.n_rot > 0) {  // RoPE first (IndexerQatArgs::n_rot)
    if (a.n_rot % 2 != 0 || a.n_rot > a.dim || a.n_rot / 2 > kMaxRopePairs || a.pos == nullptr || a.heads < 1 ||
        a.freq == nullptr || a.rows % a.heads != 0 || a.x_at || a.count) {
      fail(invalid_argument("cuda indexer_qat: RoPE needs an even n_rot <= dim and <= " +
                            std::to_string(2 * kMaxRopePairs) + ", pos, freq, rows a multiple of heads and no x_at/count (n_rot " +
                            std::to_string(a.n_rot) + ", dim " + std::to_string(a.dim) + ")"));
      return;
    }
    if (!small_v4_) {  // the pieces: rope, then the QAT kernel below
      indexer_qat_by_pieces(*this, a);
      return;
    }
  }
  const float k = static_cast<float>(1.0 / sqrt(static_cast<double>(a.dim)));
  if (a.n_rot > 0) {
    // The head weights' scale in extra blocks (≤ 4: 64 weights a token at decode take one).
    const int64_t sblocks = a.scale_x && a.scale_count > 0 ? std::min<int64_t>(4, (a.scale_count + a.dim - 1) / a.dim) : 0;
    const bool pdl = hc_pdl_ && !on_side_ && sm90();
    if (small_v5_ && a.rows >= kWarpRowsMin) {  // prefill chunks: a warp per row (dims 32 … 256)
      const RopeFreqs f = rope_freqs(a.freq, a.n_rot);
      // One scale block per 1,024 weights (a thread's 8 independent load-store rounds).
      const int64_t sb5 = a.scale_x && a.scale_count > 0 ? std::min<int64_t>(65536, (a.scale_count + 1023) / 1024) : 0;
      cudaError_t err = cudaSuccess;
      if (launch_rope_qat_warp<1>(a, f, k, sb5, pdl, stream(), err) ||
          launch_rope_qat_warp<2>(a, f, k, sb5, pdl, stream(), err) ||
          launch_rope_qat_warp<4>(a, f, k, sb5, pdl, stream(), err) ||
          launch_rope_qat_warp<8>(a, f, k, sb5, pdl, stream(), err)) {
        check(err, "indexer rope + qat (warp rows)");
        return;
      }
    }
    check(launch_dependent(hc_pdl_ && !on_side_ && sm90(), dim3(static_cast<unsigned>(a.rows + sblocks)), a.dim,
                           a.dim * sizeof(float), stream(), indexer_rope_qat_kernel, a, rope_freqs(a.freq, a.n_rot), k),
          "indexer rope + qat");
    return;
  }
  if (small_v3_) {
    check(launch_dependent(hc_pdl_ && !on_side_ && sm90(), dim3(static_cast<unsigned>(a.rows)), a.dim, a.dim * sizeof(float),
                           stream(), indexer_qat3_kernel, a, k),
          "indexer_qat");
    return;
  }
  indexer_qat_kernel<<<static_cast<unsigned>(a.rows), a.dim, a.dim * sizeof(float), stream()>>>(a, k);
  launched("indexer_qat");
}

}  // namespace ds4::backend::cuda
