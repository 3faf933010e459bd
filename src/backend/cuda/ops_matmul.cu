// ops_matmul.cu — y = W·x for every weight type of the GGUFs, with ds4's or exact numerics
// (backend.h MatmulNumerics, MODEL.md §12), the activation quantizers, and the embedding gather.
//
// ds4 numerics: Q8_0 rows · Q8_0 activation blocks (f32 scale), Q2_K/Q4_K/IQ2_XXS rows · Q8_K blocks,
// F16 rows · floats with float accumulation, F32/BF16 rows · floats with double accumulation.
// Activations are quantized bit-exactly like src/quant/quantize.cpp; integer block sums are exact,
// and the per-block terms are summed in the CPU's block order: the result is the CPU op's, bit for bit.
// exact numerics: every row decoded to float like dequantize_row, double accumulation.
// First version: one warp per (vector, output row), lanes striding over blocks. Fused multi-vector
// GEMV/GEMM tiles for prefill are the next step (docs/PERF.md).
#include <algorithm>
#include <cmath>
#include <string>

#include "backend/cuda/act_quant.cuh"
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_impl.h"
#include "backend/cuda/gemm_experts.h"
#include "backend/cuda/gemm_q8.h"
#include "backend/cuda/quant_device.cuh"
#include "quant/iq2xxs_tables.h"

namespace ds4::backend::cuda {

namespace {

__constant__ uint64_t c_iq2xxs_grid[256];
__constant__ uint8_t c_iq2xxs_signs[128];

constexpr int kGemvWarps = 4;  // output rows per 128-thread block

// ---- activation quantizers (quantize.cpp quantize_act_q8_0 / quantize_act_q8_K) ----

// Row of block `blk` of a [rows][nb] grid: a 32-bit division where the grid allows it (every prefill
// chunk) — the 64-bit one is a long emulated sequence per thread, ~half the time of a 2,048 × 4,096 call.
__device__ inline int64_t block_row(int64_t blk, int64_t nb, int64_t rows) {
  return rows * nb < (int64_t{1} << 31) ? static_cast<uint32_t>(blk) / static_cast<uint32_t>(nb) : blk / nb;
}

// One warp per 32-value block. x: [rows][x_stride]; out: [rows][cols/32] BlockQ8_0Act.
__global__ void quantize_q8_0_kernel(const float* x, int64_t x_stride, int64_t rows, int64_t cols, uint8_t* out) {
  const int64_t nb = cols / kQK8_0;
  const int64_t blk = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (blk >= rows * nb) return;
  const int64_t r = block_row(blk, nb, rows), b = blk - r * nb;
  quantize_q8_0_warp(x[r * x_stride + b * kQK8_0 + lane], lane, out + blk * sizeof(BlockQ8_0Act));
}

// The prefill quantizer (CudaBackendOptions::prefill_glue): quantize_q8_0_rows_warps over the whole grid,
// 16 blocks per warp with 16-byte loads — a warp per 32-value block (quantize_q8_0_kernel) issues one
// 128-byte load and then waits on it (44 µs for 2,048 × 4,096 on the H200, ~0.9 TB/s). Needs x and
// x_stride 16-byte aligned and rows·nb·36 < 2^32 (quantize_act checks). kTrigger (CudaBackendOptions::gemm_q8 28): a
// GEMM launched next as a programmatic dependent may start once every block has started (it waits for this grid
// before reading the rows; its blocks take the SMs our last blocks leave).
template <bool kTrigger>
__global__ void __launch_bounds__(256) quantize_q8_0_rows_kernel(const float* x, int64_t x_stride, int rows,
                                                                 int64_t cols, uint8_t* out) {
  if constexpr (kTrigger) grid_launch_dependents();
  const uint32_t warp = (blockIdx.x * blockDim.x + threadIdx.x) / kWarp, n_warps = gridDim.x * blockDim.x / kWarp;
  quantize_q8_0_rows_warps<true>(x, x_stride, rows, cols, out, static_cast<uint64_t>(cols / kQK8_0) * sizeof(BlockQ8_0Act),
                                 warp, n_warps);
}

// One warp per 256-value super-block; lane l holds values 8l … 8l+7. out: [rows][cols/256] BlockQ8_K.
__global__ void quantize_q8_K_kernel(const float* x, int64_t x_stride, int64_t rows, int64_t cols, uint8_t* out) {
  const int64_t nb = cols / kQK_K;
  const int64_t blk = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (blk >= rows * nb) return;
  const int64_t r = block_row(blk, nb, rows), b = blk - r * nb;
  const float* src = x + r * x_stride + b * kQK_K + 8 * lane;
  float v[8];
  for (int i = 0; i < 8; ++i) v[i] = src[i];
  quantize_q8_K_warp(v, lane, out + blk * sizeof(BlockQ8_K));
}

// ---- matvec kernels: one warp per (vector v, output row o) ----

struct GemvParams {
  const uint8_t* w;        // expert 0 / the matrix
  uint64_t row_bytes, expert_bytes;
  const int32_t* ids;      // [n_vec] or null
  int32_t n_expert;
  int64_t rows, cols;
  const float* x;          // float activations [*][x_stride]
  int64_t x_stride;
  const uint8_t* act;      // quantized activations [*][act_stride bytes]
  uint64_t act_stride;
  int32_t x_div;
  float* y;                // [n_vec][y_stride]
  int64_t y_stride, n_vec;
};

// Row o of the weight that vector v multiplies, or null when its expert id is out of range.
__device__ inline const uint8_t* gemv_row(const GemvParams& p, int64_t v, int64_t o) {
  const uint8_t* base = p.w;
  if (p.ids) {
    const int32_t e = p.ids[v];
    if (e < 0 || e >= p.n_expert) return nullptr;
    base += static_cast<uint64_t>(e) * p.expert_bytes;
  }
  return base + static_cast<uint64_t>(o) * p.row_bytes;
}

// Decoded rows · float activations, double accumulation (exact numerics; F32/BF16 under ds4).
template <GgmlType T>
__global__ void gemv_double_kernel(GemvParams p) {
  const int lane = threadIdx.x % kWarp;
  const int64_t o = static_cast<int64_t>(blockIdx.x) * kGemvWarps + threadIdx.x / kWarp;
  if (o >= p.rows) return;
  for (int64_t v = blockIdx.y; v < p.n_vec; v += gridDim.y) {
    const uint8_t* row = gemv_row(p, v, o);
    float* y = p.y + v * p.y_stride + o;
    if (!row) {
      if (lane == 0) *y = NAN;
      continue;
    }
    const float* x = p.x + (v / p.x_div) * p.x_stride;
    double acc = 0;
#pragma unroll 8  // loads of later elements in flight; the sum order is unchanged
    for (int64_t e = lane; e < p.cols; e += kWarp)
      acc += static_cast<double>(decode_elem<T>(row, e, c_iq2xxs_grid, c_iq2xxs_signs)) * static_cast<double>(x[e]);
    acc = warp_sum(acc);
    if (lane == 0) *y = static_cast<float>(acc);
  }
}

// F16 rows · floats with float accumulation (ds4's dot_f16_row), lane order: only with
// CudaBackendOptions::f16_segments = false (the default runs matmul_f16.cu's segment order).
__global__ void gemv_f16_kernel(GemvParams p) {
  const int lane = threadIdx.x % kWarp;
  const int64_t o = static_cast<int64_t>(blockIdx.x) * kGemvWarps + threadIdx.x / kWarp;
  if (o >= p.rows) return;
  for (int64_t v = blockIdx.y; v < p.n_vec; v += gridDim.y) {
    const uint8_t* row = gemv_row(p, v, o);
    float* y = p.y + v * p.y_stride + o;
    if (!row) {
      if (lane == 0) *y = NAN;
      continue;
    }
    const float* x = p.x + (v / p.x_div) * p.x_stride;
    const uint16_t* h = reinterpret_cast<const uint16_t*>(row);
    float acc = 0;
#pragma unroll 8  // loads of later elements in flight; the sum order (the lane order) is unchanged
    for (int64_t e = lane; e < p.cols; e += kWarp) acc += f16_dev(h[e]) * x[e];
    acc = warp_sum(acc);
    if (lane == 0) *y = acc;
  }
}

// Quantized rows · quantized activation blocks; lanes stride over blocks.
template <GgmlType T>
__global__ void gemv_quant_kernel(GemvParams p) {
  __shared__ uint64_t grid[256];
  __shared__ uint8_t signs[128];
  if constexpr (T == GgmlType::IQ2_XXS) {  // divergent table lookups are cheaper from shared memory
    for (int i = threadIdx.x; i < 256; i += blockDim.x) grid[i] = c_iq2xxs_grid[i];
    for (int i = threadIdx.x; i < 128; i += blockDim.x) signs[i] = c_iq2xxs_signs[i];
    __syncthreads();
  }
  const int lane = threadIdx.x % kWarp;
  const int64_t o = static_cast<int64_t>(blockIdx.x) * kGemvWarps + threadIdx.x / kWarp;
  if (o >= p.rows) return;
  constexpr int kBlockElems = T == GgmlType::Q8_0 ? kQK8_0 : kQK_K;
  constexpr uint64_t kWBytes = T == GgmlType::Q8_0 ? sizeof(BlockQ8_0)
                               : T == GgmlType::Q2_K ? sizeof(BlockQ2_K)
                               : T == GgmlType::Q4_K ? sizeof(BlockQ4_K)
                                                     : sizeof(BlockIQ2_XXS);
  constexpr uint64_t kABytes = T == GgmlType::Q8_0 ? sizeof(BlockQ8_0Act) : sizeof(BlockQ8_K);
  const int64_t nb = p.cols / kBlockElems;
  for (int64_t v = blockIdx.y; v < p.n_vec; v += gridDim.y) {
    const uint8_t* row = gemv_row(p, v, o);
    float* y = p.y + v * p.y_stride + o;
    if (!row) {
      if (lane == 0) *y = NAN;
      continue;
    }
    const uint8_t* act = p.act + (v / p.x_div) * p.act_stride;
    // Lanes compute 32 block terms at a time; every lane then adds them in block order, the CPU's
    // sequential sum (dot_ref.cpp), so the result equals the CPU op and the tensor-core GEMM
    // (ops_gemm.cu) bit for bit, whatever the batch size.
    float acc = 0;
    for (int64_t b0 = 0; b0 < nb; b0 += kWarp) {
      const int64_t b = b0 + lane;
      float t = 0;
      if (b < nb) {
        const uint8_t* wb = row + b * kWBytes;
        const uint8_t* xb = act + b * kABytes;
        if constexpr (T == GgmlType::Q8_0) t = dot_block_q8_0(wb, xb);
        else if constexpr (T == GgmlType::Q2_K) t = dot_block_q2_K(wb, xb);
        else if constexpr (T == GgmlType::Q4_K) t = dot_block_q4_K(wb, xb);
        else t = dot_block_iq2_xxs(wb, xb, grid, signs);
      }
      const int m = nb - b0 < kWarp ? static_cast<int>(nb - b0) : kWarp;
      for (int l = 0; l < m; ++l) acc += __shfl_sync(0xffffffffu, t, l);
    }
    if constexpr (T == GgmlType::IQ2_XXS) acc = 0.125f * acc;
    if (lane == 0) *y = acc;
  }
}

// out[t][s][d] = decoded row tokens[t] of the table, for every stream s (EmbedArgs).
template <GgmlType T>
__global__ void embed_kernel(const uint8_t* table, uint64_t row_bytes, int64_t dim, const int32_t* tokens, int64_t n,
                             int32_t nhc, float* out) {
  const int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k >= n * dim) return;
  const int64_t t = k / dim, d = k % dim;
  const float v = decode_elem<T>(table + static_cast<uint64_t>(tokens[t]) * row_bytes, d, c_iq2xxs_grid, c_iq2xxs_signs);
  for (int s = 0; s < nhc; ++s) out[(t * nhc + s) * dim + d] = v;
}

bool quantized(GgmlType t) {
  return t == GgmlType::Q8_0 || t == GgmlType::Q2_K || t == GgmlType::Q4_K || t == GgmlType::IQ2_XXS;
}

int64_t block_elems(GgmlType t) {
  if (t == GgmlType::Q8_0) return kQK8_0;
  if (quantized(t)) return kQK_K;
  return 1;
}

}  // namespace

cudaError_t upload_iq2xxs_tables() {
  cudaError_t e = cudaMemcpyToSymbol(c_iq2xxs_grid, kIq2xxsGrid, sizeof(kIq2xxsGrid));
  if (e != cudaSuccess) return e;
  return cudaMemcpyToSymbol(c_iq2xxs_signs, kKsignsIq2xs, sizeof(kKsignsIq2xs));
}

uint64_t CudaBackend::quantize_act(GgmlType t, const float* x, int64_t x_stride, int64_t rows, int64_t cols,
                                   DeviceScratch& out) {
  const bool q80 = t == GgmlType::Q8_0;
  const int64_t nb = cols / (q80 ? kQK8_0 : kQK_K);
  const uint64_t stride = static_cast<uint64_t>(nb) * (q80 ? sizeof(BlockQ8_0Act) : sizeof(BlockQ8_K));
  if (!ensure(out, stride * rows, "quantized activations")) return 0;
  const unsigned qgrid = grid_for(rows * nb * kWarp, 256);
  if (q80 && prefill_glue_ && stride * rows < (uint64_t{1} << 32) && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
      x_stride % 4 == 0) {
    // 4 blocks per warp step × 4 steps per round: one warp per 16 blocks, all of them resident. gemm_q8 28 (sm_90):
    // the GEMM after it is its programmatic dependent, let start once every block runs.
    const unsigned g = grid_for(rows * nb, 16 * (256 / kWarp));
    if (gemm_q8_pdl(gemm_q8_) && sm90())
      quantize_q8_0_rows_kernel<true><<<g, 256, 0, stream()>>>(x, x_stride, static_cast<int>(rows), cols,
                                                               static_cast<uint8_t*>(out.ptr));
    else
      quantize_q8_0_rows_kernel<false><<<g, 256, 0, stream()>>>(x, x_stride, static_cast<int>(rows), cols,
                                                                static_cast<uint8_t*>(out.ptr));
  } else if (q80)
    quantize_q8_0_kernel<<<qgrid, 256, 0, stream()>>>(x, x_stride, rows, cols, static_cast<uint8_t*>(out.ptr));
  else
    quantize_q8_K_kernel<<<qgrid, 256, 0, stream()>>>(x, x_stride, rows, cols, static_cast<uint8_t*>(out.ptr));
  return launched("quantize activations") ? stride : 0;
}

void CudaBackend::gemv(const GemvJob& j, DeviceScratch& act_scratch) {
  if (failed() || j.n_vec <= 0 || j.w.rows <= 0) return;
  const GgmlType T = j.w.type;
  if (j.w.cols % block_elems(T) != 0) {
    fail(invalid_argument("cuda matmul: " + std::string(type_name(T)) + " row of " + std::to_string(j.w.cols) +
                          " values is not a whole number of blocks"));
    return;
  }
  // gemv_warp.cu (sm_90): per-warp bulk rings, ≤ 4 vectors, where it measured faster; same bits.
  if (decode_kernels_ && gemv_warp_ != GemvMma::off && j.n_vec <= kWarpMaxVec && gemv_stream_supports(j)) {
    const StreamSet s = stream_set_of(j);
    if ((gemv_warp_ == GemvMma::always || gemv_warp_wins(s)) && gemv_warp_set(s, act_scratch)) return;
  }
  // gemv_stream.cu's bulk ring (sm_90): TMA bulk copies into a deep ring, where it measured faster; same bits.
  if (decode_kernels_ && gemv_bulk_ != GemvMma::off && gemv_stream_supports(j) &&
      (gemv_bulk_ == GemvMma::always || gemv_bulk_wins(j)) && gemv_stream_set(stream_set_of(j), act_scratch, true))
    return;
  // gemv_rows.cu: ≤ 4 vectors with the weights loaded straight into registers, where it measured faster;
  // same bits.
  if (decode_kernels_ && gemv_rows_ != GemvMma::off && gemv_rows_supports(j) &&
      (gemv_rows_ == GemvMma::always || gemv_rows_wins(j)) && gemv_rows_set(stream_set_of(j), act_scratch))
    return;
  // gemv_stream.cu: the same jobs (and a grouped one) as whole-row ranges per resident block, where it
  // measured faster; same bits.
  if (decode_kernels_ && gemv_stream_ != GemvMma::off && gemv_stream_supports(j) &&
      (gemv_stream_ == GemvMma::always || gemv_stream_wins(j, gemv_stream_chunks_)) && gemv_stream(j, act_scratch))
    return;
  // gemv_dense.cu: dense Q8_0 rows of 1..kDenseMaxVec vectors (grouped ones in one launch), block terms
  // added in the CPU's block order (same bits as every path below), where it measured faster.
  if (decode_kernels_ && gemv_dense_ != GemvMma::off && gemv_dense_supports(j) &&
      (gemv_dense_ == GemvMma::always || gemv_dense_wins(j)) && gemv_dense(j, act_scratch))
    return;
  if (j.group_rows > 0) {  // grouped matmul: one decode launch for every group, else one job per row slice
    if (decode_kernels_ && gemv_mma_ != GemvMma::always && gemv_decode_grouped(j)) return;
    // Prefill batches with CudaBackendOptions::gemm_q8_parts: one quantization and one gemm_q8.cu launch.
    if (gemm_q8_parts_ && gemm_q8_ != 0 && tensor_cores() && gemm_pipelined_ && gemm_q8_group_fits(j, device())) {
      const int64_t G = j.w.rows / j.group_rows;
      const uint64_t stride = quantize_act(GgmlType::Q8_0, j.x, j.x_stride, j.n_vec, G * j.w.cols, act_scratch);
      if (stride != 0) gemm_q8(j, static_cast<const uint8_t*>(act_scratch.ptr), stride, gemm_q8_);
      return;
    }
    for_each_row_group(j, [&](const GemvJob& s) { gemv(s, act_scratch); });
    return;
  }
  // gemv_mma.cu: dense Q8_0 rows of 1..kMmaMaxVec vectors (int8 MMA block sums, the block terms added
  // in the CPU's block order: same bits as every path below), where it measured faster.
  const bool mma = decode_kernels_ && gemv_mma_ != GemvMma::off && gemv_mma_supports(j) &&
                   (gemv_mma_ == GemvMma::always || gemv_mma_wins(j));
  // gemv_decode.cu: quantized rows of ≤ kDecodeMaxVec vectors, activation quantization fused, the
  // per-block terms added in the CPU's block order as in the kernels below (same bits at any batch).
  if (!mma && decode_kernels_ && j.n_vec <= kDecodeMaxVec && gemv_decode(j)) return;
  GemvParams p{};
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
  const dim3 grid(grid_for(j.w.rows, kGemvWarps), static_cast<unsigned>(std::min<int64_t>(j.n_vec, 65535)));
  const dim3 block(kGemvWarps * kWarp);
  cudaStream_t s = stream();

  const bool use_act = j.numerics == MatmulNumerics::ds4 && quantized(T);
  if (use_act) {
    // Grouped experts on gemm_experts.cu (CudaBackendOptions::gemm_experts ≠ 0): their
    // own activation layout, so the quantization is theirs too.
    if (tensor_cores() && gemm_pipelined_ && gemm_experts_ > 0 && j.groups && gemm_supports(j) &&
        gemm_experts_planes(*this, j, act_scratch, gemm_experts_))
      return;
    const int64_t act_rows = (j.n_vec + j.x_div - 1) / j.x_div;
    p.act_stride = quantize_act(T, j.x, j.x_stride, act_rows, j.w.cols, act_scratch);
    if (p.act_stride == 0) return;
    p.act = static_cast<const uint8_t*>(act_scratch.ptr);
    if (mma && gemv_mma(j, p.act, p.act_stride)) return;
    // gemv_skinny.cu: 5..kSkinnyMaxVec dense vectors, each weight row read once for all of them, the
    // block terms added in the CPU's block order (same bits as every other path).
    if (decode_kernels_ && !j.ids && j.n_vec <= kSkinnyMaxVec && gemv_skinny(j, p.act, p.act_stride)) return;
    if (tensor_cores() && gemm_supports(j)) {  // prefill-sized batches and grouped experts: tensor cores (ops_gemm.cu)
      gemm(j, p.act, p.act_stride);
      return;
    }
    switch (T) {
      case GgmlType::Q8_0: gemv_quant_kernel<GgmlType::Q8_0><<<grid, block, 0, s>>>(p); break;
      case GgmlType::Q2_K: gemv_quant_kernel<GgmlType::Q2_K><<<grid, block, 0, s>>>(p); break;
      case GgmlType::Q4_K: gemv_quant_kernel<GgmlType::Q4_K><<<grid, block, 0, s>>>(p); break;
      default: gemv_quant_kernel<GgmlType::IQ2_XXS><<<grid, block, 0, s>>>(p); break;
    }
    launched("gemv (quantized)");
    return;
  }
  if (T == GgmlType::F16 && j.numerics == MatmulNumerics::ds4) {
    if (f16_segments_) {  // the segment order (matmul_f16.cu), one kernel for every batch size
      gemv_f16(j);
      return;
    }
    // CudaBackendOptions::f16_segments = false: the previous lane order, matvec or 16-vector kernel.
    if (tensor_cores() && gemm_supports(j)) {  // prefill batches: tiled F16 GEMM (ops_gemm.cu)
      gemm(j, nullptr, 0);
      return;
    }
    gemv_f16_kernel<<<grid, block, 0, s>>>(p);
    launched("gemv f16");
    return;
  }
  switch (T) {
    case GgmlType::F32: gemv_double_kernel<GgmlType::F32><<<grid, block, 0, s>>>(p); break;
    case GgmlType::F16: gemv_double_kernel<GgmlType::F16><<<grid, block, 0, s>>>(p); break;
    case GgmlType::BF16: gemv_double_kernel<GgmlType::BF16><<<grid, block, 0, s>>>(p); break;
    case GgmlType::Q8_0: gemv_double_kernel<GgmlType::Q8_0><<<grid, block, 0, s>>>(p); break;
    case GgmlType::Q2_K: gemv_double_kernel<GgmlType::Q2_K><<<grid, block, 0, s>>>(p); break;
    case GgmlType::Q4_K: gemv_double_kernel<GgmlType::Q4_K><<<grid, block, 0, s>>>(p); break;
    case GgmlType::IQ2_XXS: gemv_double_kernel<GgmlType::IQ2_XXS><<<grid, block, 0, s>>>(p); break;
    default:
      fail(unsupported("cuda matmul: weight type " + std::string(type_name(T)) + " is not a matmul type"));
      return;
  }
  launched("gemv (float)");
}

void CudaBackend::matmul(const MatmulArgs& a) { gemv(gemv_job(a), act_); }

void CudaBackend::embed(const EmbedArgs& a) {
  if (failed() || a.n <= 0) return;
  const int64_t dim = a.table.cols;
  const auto* t = static_cast<const uint8_t*>(a.table.data);
  const unsigned g = grid_for(a.n * dim, 256);
  cudaStream_t s = stream();
  switch (a.table.type) {
    case GgmlType::F32: embed_kernel<GgmlType::F32><<<g, 256, 0, s>>>(t, a.table.row_bytes, dim, a.tokens, a.n, a.nhc, a.out); break;
    case GgmlType::F16: embed_kernel<GgmlType::F16><<<g, 256, 0, s>>>(t, a.table.row_bytes, dim, a.tokens, a.n, a.nhc, a.out); break;
    case GgmlType::BF16: embed_kernel<GgmlType::BF16><<<g, 256, 0, s>>>(t, a.table.row_bytes, dim, a.tokens, a.n, a.nhc, a.out); break;
    case GgmlType::Q8_0: embed_kernel<GgmlType::Q8_0><<<g, 256, 0, s>>>(t, a.table.row_bytes, dim, a.tokens, a.n, a.nhc, a.out); break;
    case GgmlType::Q2_K: embed_kernel<GgmlType::Q2_K><<<g, 256, 0, s>>>(t, a.table.row_bytes, dim, a.tokens, a.n, a.nhc, a.out); break;
    case GgmlType::Q4_K: embed_kernel<GgmlType::Q4_K><<<g, 256, 0, s>>>(t, a.table.row_bytes, dim, a.tokens, a.n, a.nhc, a.out); break;
    case GgmlType::IQ2_XXS: embed_kernel<GgmlType::IQ2_XXS><<<g, 256, 0, s>>>(t, a.table.row_bytes, dim, a.tokens, a.n, a.nhc, a.out); break;
    default:
      fail(unsupported("cuda embed: table type " + std::string(type_name(a.table.type)) + " cannot be decoded"));
      return;
  }
  launched("embed");
}

}  // namespace ds4::backend::cuda
