// gemv_decode.cu — the decode (≤ kDecodeMaxVec vectors) paths of the quantized matmul and of the
// routed experts: one launch per matvec with the activation quantization fused in (shared memory),
// rows grid-stride under a capped grid, and a three-kernel routed-expert step (gate+up+SwiGLU,
// hidden quantization, down with the slot sum).
//
// Why: at batch 1 a decode layer is dozens of small matvecs; a separate activation-quantization
// launch per matvec and one kernel per expert projection make them latency- and launch-bound
// (docs/PERF.md). Each block quantizes the (small) activation rows into shared memory with the warp
// quantizers of act_quant.cuh (bit-identical to ops_matmul.cu's), and every row adds its per-block
// terms in the CPU's block order, exactly as gemv_quant_kernel and the tensor-core GEMM do: the result
// equals the CPU op bit for bit and does not depend on the batch (src/backend/cuda/README.md).
// Deliberately not here: many-vector GEMMs (ops_gemm.cu), float matmuls and `exact` numerics
// (ops_matmul.cu); the dispatch is CudaBackend::gemv / moe.
#include <algorithm>
#include <string>

#include "backend/cuda/act_quant.cuh"
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_impl.h"
#include "backend/cuda/qdot.cuh"
#include "backend/exact_math.h"
#include "quant/iq2xxs_tables.h"

namespace ds4::backend::cuda {

namespace {

__constant__ uint64_t c_grid[256];
__constant__ uint8_t c_signs[128];

constexpr int kWarps = 8;            // warps (output rows) per 256-thread block
constexpr int kMaxSmemAct = 48 * 1024;  // quantized activations of one block (all vectors)
constexpr int64_t kMaxGemvBlocks = 1024;  // ≈ 8 blocks per SM of an H200 (132 SMs)
constexpr int64_t kFusedMaxCols = 4096;   // wider Q8_0 rows on a small grid: quantize in a launch of its own

// The ds4 dot product of `nb` weight blocks (row) with `nb` activation blocks (act): lane l computes
// the term of block b0 + l, then every lane adds the 32 terms in block order — the CPU's sequential
// sum (dot_ref.cpp), exactly as gemv_quant_kernel and the tensor-core GEMM do, so a row's result is
// the same bit for bit whatever the batch size and path. Every lane returns the sum.
template <GgmlType T>
__device__ inline float warp_row_dot(const uint8_t* row, const uint8_t* act, int64_t nb, int lane,
                                     const uint64_t* grid, const uint8_t* signs) {
  using D = QDot<T>;
  float acc = 0;
  for (int64_t b0 = 0; b0 < nb; b0 += kWarp) {  // uniform trip count: every lane reaches the shuffles
    const int64_t b = b0 + lane;
    float t = 0;
    if (b < nb) {
      const uint8_t* wb = row + b * D::kWBytes;
      const uint8_t* ab = act + b * D::kABytes;
      int i0 = 0, i1 = 0;
      D::part(wb, ab, 0, D::kParts, i0, i1, grid, signs);
      t = D::finish(wb, ab, i0, i1);
    }
    const int m = nb - b0 < kWarp ? static_cast<int>(nb - b0) : kWarp;
    for (int l = 0; l < m; ++l) acc += __shfl_sync(0xffffffffu, t, l);
  }
  return acc;
}

// Quantizes rows x[v] (v < n_vec, `cols` values each) into `act` ([n_vec][act_row bytes]) with all
// warps of the block; ends with a block barrier.
template <GgmlType T>
__device__ inline void quantize_rows_to_smem(const float* x, int64_t x_stride, int n_vec, int64_t cols, uint8_t* act,
                                             uint64_t act_row) {
  using D = QDot<T>;
  const int lane = threadIdx.x % kWarp, wid = threadIdx.x / kWarp, nw = blockDim.x / kWarp;
  const int64_t nb = cols / D::kElems;
  for (int64_t q = wid; q < n_vec * nb; q += nw) {
    const int64_t v = q / nb, b = q % nb;
    const float* src = x + v * x_stride + b * D::kElems;
    uint8_t* o = act + v * act_row + b * D::kABytes;
    if constexpr (T == GgmlType::Q8_0) {
      quantize_q8_0_warp(src[lane], lane, o);
    } else {
      float vals[8];
      for (int i = 0; i < 8; ++i) vals[i] = src[8 * lane + i];
      quantize_q8_K_warp(vals, lane, o);
    }
  }
  __syncthreads();
}

// One warp per 32-value block: x [rows][x_stride] → out [rows][cols/32] BlockQ8_0Act.
__global__ void quantize_q8_0_kernel(const float* x, int64_t x_stride, int64_t rows, int64_t cols, uint8_t* out) {
  const int64_t nb = cols / kQK8_0;
  const int64_t blk = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (blk >= rows * nb) return;
  const int64_t r = blk / nb, b = blk % nb;
  quantize_q8_0_warp(x[r * x_stride + b * kQK8_0 + lane], lane, out + blk * sizeof(BlockQ8_0Act));
}

struct DecodeParams {
  const uint8_t* w;
  uint64_t row_bytes;
  int64_t rows, cols;
  const float* x;
  int64_t x_stride;
  float* y;
  int64_t y_stride;
  int n_vec;
  const uint8_t* act = nullptr;  // [n_vec][act row] quantized activations, or null (quantize in the kernel)
  // With act: bytes between vectors' quantized rows (0: one row's nb blocks). Grouped matmul
  // (MatmulArgs::group_rows > 0): output row o reads the blocks at act + (o / group_rows)·act_group.
  uint64_t act_vec = 0;
  int64_t group_rows = 0;
  uint64_t act_group = 0;
};

// y[v][o] = W[o]·x[v] for v < n_vec (≤ kDecodeMaxVec): one warp per output row, the weights read once
// for all vectors. Shared memory: the n_vec quantized activation rows.
template <GgmlType T>
__global__ void __launch_bounds__(kWarps * kWarp) gemv_decode_kernel(DecodeParams p) {
  extern __shared__ __align__(16) uint8_t act[];
  __shared__ uint64_t grid[T == GgmlType::IQ2_XXS ? 256 : 1];
  __shared__ uint8_t signs[T == GgmlType::IQ2_XXS ? 128 : 1];
  using D = QDot<T>;
  load_tables<T>(c_grid, c_signs, grid, signs);
  const int64_t nb = p.cols / D::kElems;
  const uint64_t act_row = static_cast<uint64_t>(nb) * D::kABytes;
  const uint8_t* a = p.act;  // pre-quantized rows in global memory, or null: quantize here
  if (!a) {
    if constexpr (T == GgmlType::Q8_0) quantize_q8_0_rows_to_smem(p.x, p.x_stride, p.n_vec, p.cols, act, act_row);
    else quantize_rows_to_smem<T>(p.x, p.x_stride, p.n_vec, p.cols, act, act_row);
    a = act;
  } else if constexpr (T == GgmlType::IQ2_XXS) {
    __syncthreads();  // the tables
  }
  const int lane = threadIdx.x % kWarp;
  const uint64_t vstride = p.act && p.act_vec ? p.act_vec : act_row;
  // Rows grid-stride: the grid is capped (kMaxGemvBlocks) so each block's quantization prologue is
  // shared by several rows per warp on tall matrices (the output head has 129,280 rows).
  for (int64_t o = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / kWarp; o < p.rows;
       o += static_cast<int64_t>(gridDim.x) * kWarps) {
    const uint8_t* row = p.w + static_cast<uint64_t>(o) * p.row_bytes;
    const uint8_t* ag = p.group_rows > 0 ? a + static_cast<uint64_t>(o / p.group_rows) * p.act_group : a;
    for (int v = 0; v < p.n_vec; ++v) {
      float acc = warp_row_dot<T>(row, ag + v * vstride, nb, lane, grid, signs);
      if constexpr (T == GgmlType::IQ2_XXS) acc = 0.125f * acc;
      if (lane == 0) p.y[v * p.y_stride + o] = acc;
    }
  }
}

// One gemv_decode_kernel launch for weight type T (a decode_type); `smem` holds the fused activation
// rows, 0 when p.act is pre-quantized.
void launch_gemv_decode(GgmlType T, unsigned g, uint64_t smem, cudaStream_t s, const DecodeParams& p) {
  switch (T) {
    case GgmlType::Q8_0: gemv_decode_kernel<GgmlType::Q8_0><<<g, kWarps * kWarp, smem, s>>>(p); break;
    case GgmlType::Q2_K: gemv_decode_kernel<GgmlType::Q2_K><<<g, kWarps * kWarp, smem, s>>>(p); break;
    case GgmlType::Q4_K: gemv_decode_kernel<GgmlType::Q4_K><<<g, kWarps * kWarp, smem, s>>>(p); break;
    default: gemv_decode_kernel<GgmlType::IQ2_XXS><<<g, kWarps * kWarp, smem, s>>>(p); break;
  }
}

// ---- routed experts, decode ----

struct MoeDecodeParams {
  const uint8_t *gate, *up, *down;      // expert 0 of each tensor
  uint64_t gu_row_bytes, gu_expert_bytes, d_row_bytes, d_expert_bytes;
  int32_t n_expert;
  const float* x;                       // [n][dim]
  const int32_t* ids;                   // [n][k]
  const float* weights;                 // [n][k]
  int32_t n, k, dim, ff;
  float clamp;
  float* h;                             // [n·k][ff] weighted SwiGLU rows
  const uint8_t* h_act;                 // [n·k][ff/elems] quantized h
  uint64_t h_act_row;
  float* out;                           // [n][dim]
};

// h[p][f] = swiglu(gate_e[f]·x, up_e[f]·x) · weights[p] for pair p = (token, slot), e = ids[p]: one
// warp per (p, f); the warp's lanes cover gate's blocks and then up's (2·nb virtual blocks).
template <GgmlType T>
__global__ void __launch_bounds__(kWarps * kWarp) moe_gate_up_kernel(MoeDecodeParams p) {
  extern __shared__ __align__(16) uint8_t act[];
  __shared__ uint64_t grid[T == GgmlType::IQ2_XXS ? 256 : 1];
  __shared__ uint8_t signs[T == GgmlType::IQ2_XXS ? 128 : 1];
  using D = QDot<T>;
  load_tables<T>(c_grid, c_signs, grid, signs);
  const int64_t nb = p.dim / D::kElems;
  const uint64_t act_row = static_cast<uint64_t>(nb) * D::kABytes;
  quantize_rows_to_smem<T>(p.x, p.dim, p.n, p.dim, act, act_row);
  const int lane = threadIdx.x % kWarp;
  const int64_t total = static_cast<int64_t>(p.n) * p.k * p.ff;
  // (pair, f) rows grid-stride: the grid is capped so the table load and x quantization are shared.
  for (int64_t q = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / kWarp; q < total;
       q += static_cast<int64_t>(gridDim.x) * kWarps) {
    const int64_t pair = q / p.ff, f = q % p.ff;
    const int32_t e = p.ids[pair];
    float* hp = p.h + pair * p.ff + f;
    if (e < 0 || e >= p.n_expert) {
      if (lane == 0) *hp = NAN;
      continue;
    }
    const uint8_t* a = act + (pair / p.k) * act_row;
    const uint64_t off = static_cast<uint64_t>(e) * p.gu_expert_bytes + static_cast<uint64_t>(f) * p.gu_row_bytes;
    const uint8_t* grow = p.gate + off;
    const uint8_t* urow = p.up + off;
    // Virtual block vb < nb is gate block vb, else up block vb − nb: lane l computes the term of
    // vb = b0 + l, then the terms are added in vb order — each of gate and up in its block order,
    // the CPU's sequential sum (as the matvec and the grouped GEMM).
    float gacc = 0, uacc = 0;
    for (int64_t b0 = 0; b0 < 2 * nb; b0 += kWarp) {
      const int64_t vb = b0 + lane;
      float t = 0;
      if (vb < 2 * nb) {
        const bool is_up = vb >= nb;
        const int64_t b = is_up ? vb - nb : vb;
        const uint8_t* wb = (is_up ? urow : grow) + b * D::kWBytes;
        const uint8_t* ab = a + b * D::kABytes;
        int i0 = 0, i1 = 0;
        D::part(wb, ab, 0, D::kParts, i0, i1, grid, signs);
        t = D::finish(wb, ab, i0, i1);
      }
      const int m = 2 * nb - b0 < kWarp ? static_cast<int>(2 * nb - b0) : kWarp;
      for (int l = 0; l < m; ++l) {
        const float v = __shfl_sync(0xffffffffu, t, l);
        if (b0 + l < nb) gacc += v;
        else uacc += v;
      }
    }
    float gv = gacc, uv = uacc;
    if constexpr (T == GgmlType::IQ2_XXS) {
      gv = 0.125f * gv;
      uv = 0.125f * uv;
    }
    if (lane != 0) continue;
    if (p.clamp > 0) {  // moe_swiglu_kernel's expression, operation for operation
      gv = fminf(gv, p.clamp);
      uv = fminf(fmaxf(uv, -p.clamp), p.clamp);
    }
    *hp = exact_silu(gv) * uv * p.weights[pair];
  }
}

// h rows → quantized blocks (one warp per block), as the standalone quantize kernels.
template <GgmlType T>
__global__ void moe_quantize_h_kernel(MoeDecodeParams p) {
  using D = QDot<T>;
  const int64_t nb = p.ff / D::kElems;
  const int64_t blk = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (blk >= static_cast<int64_t>(p.n) * p.k * nb) return;
  const int64_t r = blk / nb, b = blk % nb;
  const float* src = p.h + r * p.ff + b * D::kElems;
  uint8_t* o = const_cast<uint8_t*>(p.h_act) + r * p.h_act_row + b * D::kABytes;
  if constexpr (T == GgmlType::Q8_0) {
    quantize_q8_0_warp(src[lane], lane, o);
  } else {
    float vals[8];
    for (int i = 0; i < 8; ++i) vals[i] = src[8 * lane + i];
    quantize_q8_K_warp(vals, lane, o);
  }
}

constexpr int kMaxSlots = 8;

// out[i][d] = Σ_j down_e[d]·h[i·k+j], j in slot order (moe_sum_kernel's order): one warp per (i, d);
// lanes cover k·nb virtual blocks, each slot's dot reduced separately.
template <GgmlType T>
__global__ void __launch_bounds__(kWarps * kWarp) moe_down_kernel(MoeDecodeParams p) {
  __shared__ uint64_t grid[T == GgmlType::IQ2_XXS ? 256 : 1];
  __shared__ uint8_t signs[T == GgmlType::IQ2_XXS ? 128 : 1];
  using D = QDot<T>;
  load_tables<T>(c_grid, c_signs, grid, signs);
  if constexpr (T == GgmlType::IQ2_XXS) __syncthreads();
  const int lane = threadIdx.x % kWarp;
  const int64_t q = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / kWarp;
  if (q >= static_cast<int64_t>(p.n) * p.dim) return;
  const int64_t i = q / p.dim, d = q % p.dim;
  const int64_t nb = p.ff / D::kElems;
  // Lane l computes the term of virtual block vb = b0 + l (slot vb / nb, block vb % nb); the terms are
  // added in vb order, so each slot's row sums its blocks in the CPU's order (as gemv), and the slots
  // are then added in slot order (moe_sum_kernel's).
  float acc[kMaxSlots];
  bool bad[kMaxSlots];
#pragma unroll
  for (int j = 0; j < kMaxSlots; ++j) {
    acc[j] = 0;
    bad[j] = false;
  }
  for (int64_t b0 = 0; b0 < p.k * nb; b0 += kWarp) {
    const int64_t vb = b0 + lane;
    const bool live = vb < p.k * nb;
    const int j = live ? static_cast<int>(vb / nb) : 0;
    const int64_t b = vb % nb;
    const int32_t e = live ? p.ids[i * p.k + j] : 0;
    const bool ok = live && e >= 0 && e < p.n_expert;
    float t = 0;
    if (ok) {
      const uint8_t* wb = p.down + static_cast<uint64_t>(e) * p.d_expert_bytes + static_cast<uint64_t>(d) * p.d_row_bytes +
                          b * D::kWBytes;
      const uint8_t* ab = p.h_act + (i * p.k + j) * p.h_act_row + b * D::kABytes;
      int i0 = 0, i1 = 0;
      D::part(wb, ab, 0, D::kParts, i0, i1, grid, signs);
      t = D::finish(wb, ab, i0, i1);
    }
    const int m = p.k * nb - b0 < kWarp ? static_cast<int>(p.k * nb - b0) : kWarp;
    for (int l = 0; l < m; ++l) {
      const float v = __shfl_sync(0xffffffffu, t, l);
      const int jl = static_cast<int>((b0 + l) / nb);
      const bool okl = __shfl_sync(0xffffffffu, ok, l);
#pragma unroll
      for (int jj = 0; jj < kMaxSlots; ++jj)
        if (jj == jl) {
          acc[jj] += v;
          bad[jj] |= !okl;
        }
    }
  }
  float total = 0;
#pragma unroll
  for (int j = 0; j < kMaxSlots; ++j) {
    if (j >= p.k) break;
    float y = acc[j];
    if constexpr (T == GgmlType::IQ2_XXS) y = 0.125f * y;
    if (bad[j]) y = NAN;  // the matvec path writes NaN rows for bad ids
    total = j == 0 ? y : total + y;
  }
  if (lane == 0) p.out[i * p.dim + d] = total;
}

bool decode_type(GgmlType t) {
  return t == GgmlType::Q8_0 || t == GgmlType::Q2_K || t == GgmlType::Q4_K || t == GgmlType::IQ2_XXS;
}

int elems_of(GgmlType t) { return t == GgmlType::Q8_0 ? kQK8_0 : kQK_K; }
uint64_t act_bytes_of(GgmlType t) { return t == GgmlType::Q8_0 ? sizeof(BlockQ8_0Act) : sizeof(BlockQ8_K); }

}  // namespace

cudaError_t upload_decode_tables() {
  cudaError_t e = cudaMemcpyToSymbol(c_grid, kIq2xxsGrid, sizeof(kIq2xxsGrid));
  if (e != cudaSuccess) return e;
  return cudaMemcpyToSymbol(c_signs, kKsignsIq2xs, sizeof(kKsignsIq2xs));
}

bool CudaBackend::gemv_decode(const GemvJob& j) {
  const GgmlType T = j.w.type;
  if (j.numerics != MatmulNumerics::ds4 || !decode_type(T) || j.ids || j.x_div != 1 || j.n_vec > kDecodeMaxVec)
    return false;
  const int64_t nb = j.w.cols / elems_of(T);
  const uint64_t smem = static_cast<uint64_t>(nb) * act_bytes_of(T) * static_cast<uint64_t>(j.n_vec);
  if (smem > kMaxSmemAct || j.w.rows > int64_t{0x7fffffff} * kWarps) return false;
  DecodeParams p{static_cast<const uint8_t*>(j.w.data), j.w.row_bytes, j.w.rows, j.w.cols, j.x, j.x_stride,
                 j.y, j.y_stride, static_cast<int>(j.n_vec)};
  const unsigned g = static_cast<unsigned>(std::min<int64_t>(grid_for(j.w.rows, kWarps), kMaxGemvBlocks));
  cudaStream_t s = stream();
  // Wide Q8_0 rows on few blocks (attn_output_b: 8192 columns, 512 blocks): every block would
  // quantize 256 activation blocks for its 8 rows — measured slower than one quantize launch first.
  uint64_t smem_launch = smem;
  if (T == GgmlType::Q8_0 && j.w.cols > kFusedMaxCols && g < kMaxGemvBlocks) {
    const uint64_t act_row = static_cast<uint64_t>(nb) * sizeof(BlockQ8_0Act);
    if (!ensure(act_, act_row * j.n_vec, "quantized activations")) return true;
    quantize_q8_0_kernel<<<grid_for(j.n_vec * nb * kWarp, 256), 256, 0, s>>>(j.x, j.x_stride, j.n_vec, j.w.cols,
                                                                            static_cast<uint8_t*>(act_.ptr));
    if (!launched("quantize activations (decode)")) return true;
    p.act = static_cast<const uint8_t*>(act_.ptr);
    smem_launch = 0;
  }
  launch_gemv_decode(T, g, smem_launch, s, p);  // smem_launch == smem except for the pre-quantized Q8_0 rows
  launched("gemv (decode)");
  return true;
}

bool CudaBackend::gemv_decode_grouped(const GemvJob& j) {
  const GgmlType T = j.w.type;
  if (j.numerics != MatmulNumerics::ds4 || !decode_type(T) || j.ids || j.x_div != 1 || j.n_vec > kDecodeMaxVec ||
      j.group_rows <= 0 || j.w.rows % j.group_rows != 0 || j.group_x_stride != j.w.cols ||
      j.w.rows > int64_t{0x7fffffff} * kWarps)
    return false;
  // The groups' inputs are contiguous in each vector (the attention output, [n][groups · cols]): one
  // quantization of all of them — the same blocks each group's own call quantizes — then one launch.
  const int64_t groups = j.w.rows / j.group_rows;
  if (groups * j.w.cols > j.x_stride) return false;
  const uint64_t stride = quantize_act(T, j.x, j.x_stride, j.n_vec, groups * j.w.cols, act_);
  if (stride == 0) return true;  // the failure is recorded
  DecodeParams p{static_cast<const uint8_t*>(j.w.data), j.w.row_bytes, j.w.rows, j.w.cols, j.x, j.x_stride,
                 j.y, j.y_stride, static_cast<int>(j.n_vec)};
  p.act = static_cast<const uint8_t*>(act_.ptr);
  p.act_vec = stride;
  p.group_rows = j.group_rows;
  p.act_group = static_cast<uint64_t>(j.w.cols / elems_of(T)) * act_bytes_of(T);
  const unsigned g = static_cast<unsigned>(std::min<int64_t>(grid_for(j.w.rows, kWarps), kMaxGemvBlocks));
  cudaStream_t s = stream();
  launch_gemv_decode(T, g, 0, s, p);  // activations pre-quantized in global memory
  launched("gemv (decode, grouped)");
  return true;
}

bool CudaBackend::moe_decode(const MoeArgs& a) {
  const GgmlType gt = a.gate.first.type, dt = a.down.first.type;
  if (a.numerics != MatmulNumerics::ds4 || a.n > kDecodeMaxVec || a.k > kMaxSlots || !decode_type(gt) ||
      a.up.first.type != gt || !decode_type(dt) || a.gate.n_expert != a.up.n_expert ||
      a.gate.expert_bytes != a.up.expert_bytes || a.gate.first.row_bytes != a.up.first.row_bytes ||
      a.dim % elems_of(gt) != 0 || a.ff % elems_of(dt) != 0)
    return false;
  const int64_t nb_gu = a.dim / elems_of(gt), nb_d = a.ff / elems_of(dt);
  const uint64_t smem = static_cast<uint64_t>(nb_gu) * act_bytes_of(gt) * static_cast<uint64_t>(a.n);
  if (smem > kMaxSmemAct) return false;
  const int64_t pairs = a.n * a.k;
  MoeDecodeParams p{};
  p.h_act_row = static_cast<uint64_t>(nb_d) * act_bytes_of(dt);
  if (!ensure(moe_g_, static_cast<uint64_t>(pairs * a.ff) * 4, "expert hidden rows") ||
      !ensure(moe_h_act_, p.h_act_row * pairs, "quantized expert hidden rows"))
    return true;  // error recorded
  p.gate = static_cast<const uint8_t*>(a.gate.first.data);
  p.up = static_cast<const uint8_t*>(a.up.first.data);
  p.down = static_cast<const uint8_t*>(a.down.first.data);
  p.gu_row_bytes = a.gate.first.row_bytes;
  p.gu_expert_bytes = a.gate.expert_bytes;
  p.d_row_bytes = a.down.first.row_bytes;
  p.d_expert_bytes = a.down.expert_bytes;
  p.n_expert = std::min(a.gate.n_expert, a.down.n_expert);
  p.x = a.x;
  p.ids = a.ids;
  p.weights = a.weights;
  p.n = static_cast<int32_t>(a.n);
  p.k = a.k;
  p.dim = a.dim;
  p.ff = a.ff;
  p.clamp = a.clamp;
  p.h = static_cast<float*>(moe_g_.ptr);
  p.h_act = static_cast<const uint8_t*>(moe_h_act_.ptr);
  p.out = a.out;
  cudaStream_t s = stream();
  const unsigned threads = kWarps * kWarp;

  const unsigned g1 = static_cast<unsigned>(std::min<int64_t>(grid_for(pairs * a.ff, kWarps), kMaxGemvBlocks));
  switch (gt) {
    case GgmlType::Q8_0: moe_gate_up_kernel<GgmlType::Q8_0><<<g1, threads, smem, s>>>(p); break;
    case GgmlType::Q2_K: moe_gate_up_kernel<GgmlType::Q2_K><<<g1, threads, smem, s>>>(p); break;
    case GgmlType::Q4_K: moe_gate_up_kernel<GgmlType::Q4_K><<<g1, threads, smem, s>>>(p); break;
    default: moe_gate_up_kernel<GgmlType::IQ2_XXS><<<g1, threads, smem, s>>>(p); break;
  }
  if (!launched("moe gate/up (decode)")) return true;
  const unsigned g2 = grid_for(pairs * nb_d * kWarp, 256);
  const unsigned g3 = grid_for(a.n * a.dim, kWarps);
  switch (dt) {
    case GgmlType::Q8_0:
      moe_quantize_h_kernel<GgmlType::Q8_0><<<g2, 256, 0, s>>>(p);
      moe_down_kernel<GgmlType::Q8_0><<<g3, threads, 0, s>>>(p);
      break;
    case GgmlType::Q2_K:
      moe_quantize_h_kernel<GgmlType::Q2_K><<<g2, 256, 0, s>>>(p);
      moe_down_kernel<GgmlType::Q2_K><<<g3, threads, 0, s>>>(p);
      break;
    case GgmlType::Q4_K:
      moe_quantize_h_kernel<GgmlType::Q4_K><<<g2, 256, 0, s>>>(p);
      moe_down_kernel<GgmlType::Q4_K><<<g3, threads, 0, s>>>(p);
      break;
    default:
      moe_quantize_h_kernel<GgmlType::IQ2_XXS><<<g2, 256, 0, s>>>(p);
      moe_down_kernel<GgmlType::IQ2_XXS><<<g3, threads, 0, s>>>(p);
      break;
  }
  launched("moe down (decode)");
  return true;
}

}  // namespace ds4::backend::cuda
