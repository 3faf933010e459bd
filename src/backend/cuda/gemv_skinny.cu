// gemv_skinny.cu — quantized ds4 matmuls and routed experts for decode batches of several sessions
// (more vectors than gemv_decode.cu takes, at most kSkinnyMaxVec = 64): each weight row is read once
// for every vector that needs it, and each (row, vector) still adds its per-block float terms one by
// one in the CPU's block order, so a token's result equals the CPU op and the solo decode bit for bit.
//
// Why: at 8..64 vectors the tensor-core GEMM (ops_gemm.cu, 128×64×256 tiles) leaves most of its tile
// empty and runs few blocks (q_a, 1024 rows: 8 blocks, ~110 µs for 4 MB of weights), and the
// per-vector matvec reads every row n times. Here one warp owns one output row (or one (expert, row))
// and a set of ≤ 32 vectors: for each group of 32 weight blocks its lanes compute the G·c block terms
// (block b, vector v) — spread over all lanes whatever G and c are — into shared memory terms[v][b],
// then lane v adds its G terms in block order (one sequential chain per (row, vector), as
// dot_ref.cpp). Activations are quantized once per call into global memory (L1/L2 resident: 64 Q8_K
// rows of 4096 values are 300 KB) by the standalone quantizers (CudaBackend::quantize_act).
// Routed experts: the (token, slot) pairs are grouped by expert on the device by one parallel kernel
// (block-wide scans, no single-thread planning), then (expert, row) work items read each expert's
// row once for all its pairs: gate+up+SwiGLU, hidden quantization, down, and moe()'s slot sum.
// Deliberately not here: ≤ kDecodeMaxVec vectors with fused activation quantization (gemv_decode.cu),
// prefill-sized batches (ops_gemm.cu), float weights and `exact` numerics (ops_matmul.cu); the
// dispatch is CudaBackend::gemv / moe.
#include <algorithm>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_impl.h"
#include "backend/cuda/moe_group.cuh"
#include "backend/cuda/qdot.cuh"
#include "backend/exact_math.h"
#include "quant/iq2xxs_tables.h"

namespace ds4::backend::cuda {

namespace {

__constant__ uint64_t c_grid[256];
__constant__ uint8_t c_signs[128];

constexpr int kWarps = 8;                  // warps (work items at a time) per 256-thread block
constexpr int kTermStride = kWarp + 1;     // terms[v][b] row pitch: lane v's reads are conflict-free
constexpr int64_t kMaxBlocks = 2048;       // grid cap; items are grid-stride (≈ 15 blocks per SM)

enum class Mode { dense, gate_up, down };

// Σ_b W[b]·A_v[b] for the c ≤ 32 vectors of a warp (vector v's activation row `my_act` is held by lane
// v) over the nb blocks of `row`. Lanes compute the block terms of a 32-block group for all c vectors
// into terms [32][kTermStride]; lane v then adds its terms in block order from 0, exactly as
// warp_row_dot and gemv_quant_kernel do. Every lane must call it (uniform trip counts); lane v < c
// gets its vector's sum.
template <GgmlType T>
__device__ inline float vecset_dot(const uint8_t* row, int64_t nb, int c, const uint8_t* my_act, float* terms,
                                   int lane, const uint64_t* grid, const uint8_t* signs) {
  using D = QDot<T>;
  const auto my = reinterpret_cast<unsigned long long>(my_act);
  float acc = 0;
  for (int64_t b0 = 0; b0 < nb; b0 += kWarp) {
    const int G = nb - b0 < kWarp ? static_cast<int>(nb - b0) : kWarp;
    const int total = G * c;
    bool done = false;
    if constexpr (T == GgmlType::Q8_0) {
      if (G == kWarp) {  // lane = block for every vector: its 32 weight bytes stay in registers
        const uint8_t* wb = row + (b0 + lane) * D::kWBytes;
        int wq[8];
#pragma unroll
        for (int m = 0; m < 8; ++m) wq[m] = static_cast<int>(ld32_u16(wb + 2 + 4 * m));
        const float wd = f16_dev(ld16(wb));
        for (int v = 0; v < c; ++v) {
          const auto av = reinterpret_cast<const uint8_t*>(__shfl_sync(0xffffffffu, my, v));
          const uint8_t* ab = av + (b0 + lane) * D::kABytes;
          int i0 = 0;
#pragma unroll
          for (int m = 0; m < 8; ++m) i0 = __dp4a(wq[m], static_cast<int>(ld32(ab + 4 + 4 * m)), i0);
          // QDot<Q8_0>::finish's expression: (weight scale · activation scale) · integer sum.
          terms[v * kTermStride + lane] = wd * *reinterpret_cast<const float*>(ab) * static_cast<float>(i0);
        }
        done = true;
      }
    }
    for (int t0 = 0; !done && t0 < total; t0 += kWarp) {
      const int t = t0 + lane;
      const int v = t < total ? t / G : 0, bl = t - v * G;
      const auto av = reinterpret_cast<const uint8_t*>(__shfl_sync(0xffffffffu, my, v));
      if (t < total) {
        const uint8_t* wb = row + (b0 + bl) * D::kWBytes;
        const uint8_t* ab = av + (b0 + bl) * D::kABytes;
        int i0 = 0, i1 = 0;
        D::part(wb, ab, 0, D::kParts, i0, i1, grid, signs);
        terms[v * kTermStride + bl] = D::finish(wb, ab, i0, i1);
      }
    }
    __syncwarp();
    if (lane < c)
      for (int bl = 0; bl < G; ++bl) acc += terms[lane * kTermStride + bl];
    __syncwarp();  // terms are overwritten by the next group
  }
  return acc;
}

struct SkinnyParams {
  const uint8_t* w;         // the matrix, or expert 0 (gate in gate_up mode)
  const uint8_t* w2;        // gate_up: up's expert 0
  uint64_t row_bytes, expert_bytes;
  int64_t rows, nb;         // output rows (per expert) and weight blocks per row
  const uint8_t* act;       // quantized activation rows [..][act_stride]
  uint64_t act_stride;
  int32_t x_div;            // vector v reads activation row v / x_div
  int32_t n_vec;            // dense: the vectors
  const int32_t* order;     // experts: pair ids sorted by expert
  const int32_t* groups;    // experts: [max_groups][3] (expert, first index into order, count)
  const int32_t* n_groups;  // experts: how many groups are valid (device)
  int32_t max_groups;
  float* y;                 // [vector][y_stride]
  int64_t y_stride;
  const float* weights;     // gate_up: [pairs] routing weight of each pair
  float clamp;              // gate_up: SwiGLU clamp (0: none)
};

// One warp per work item (group g, output row o), grid-stride. dense: one group of all n_vec vectors;
// gate_up: y[pair][o] = swiglu(gate_e[o]·x, up_e[o]·x) · weights[pair] for the pairs of expert e,
// pair reading token pair / x_div; down: y[pair][o] = down_e[o]·h[pair].
template <GgmlType T, Mode M>
__global__ void __launch_bounds__(kWarps * kWarp) skinny_kernel(SkinnyParams p) {
  __shared__ float terms_all[kWarps][kWarp * kTermStride];
  __shared__ uint64_t grid[T == GgmlType::IQ2_XXS ? 256 : 1];
  __shared__ uint8_t signs[T == GgmlType::IQ2_XXS ? 128 : 1];
  load_tables<T>(c_grid, c_signs, grid, signs);
  if constexpr (T == GgmlType::IQ2_XXS) __syncthreads();
  const int lane = threadIdx.x % kWarp, wid = threadIdx.x / kWarp;
  float* terms = terms_all[wid];
  const int64_t n_groups = M == Mode::dense ? 1 : *p.n_groups;
  const int64_t items = n_groups * p.rows;
  for (int64_t q = static_cast<int64_t>(blockIdx.x) * kWarps + wid; q < items;
       q += static_cast<int64_t>(gridDim.x) * kWarps) {
    const int64_t g = q / p.rows, o = q % p.rows;
    int32_t e = 0, first = 0, count = p.n_vec;
    if constexpr (M != Mode::dense) {
      e = p.groups[3 * g];
      first = p.groups[3 * g + 1];
      count = p.groups[3 * g + 2];
    }
    const uint64_t off = static_cast<uint64_t>(e) * p.expert_bytes + static_cast<uint64_t>(o) * p.row_bytes;
    for (int32_t s0 = 0; s0 < count; s0 += kWarp) {  // vectors in tiles of ≤ 32 (lane v owns vector s0 + v)
      const int c = count - s0 < kWarp ? count - s0 : kWarp;
      int32_t vec = 0;
      if (lane < c) vec = M == Mode::dense ? first + s0 + lane : p.order[first + s0 + lane];
      const uint8_t* my_act = p.act + static_cast<uint64_t>(vec / p.x_div) * p.act_stride;
      float acc = vecset_dot<T>(p.w + off, p.nb, c, my_act, terms, lane, grid, signs);
      if constexpr (T == GgmlType::IQ2_XXS) acc = 0.125f * acc;  // once per row, as dot_iq2_xxs_ref
      if constexpr (M == Mode::gate_up) {
        float uv = vecset_dot<T>(p.w2 + off, p.nb, c, my_act, terms, lane, grid, signs);
        if constexpr (T == GgmlType::IQ2_XXS) uv = 0.125f * uv;
        float gv = acc;
        if (p.clamp > 0) {  // moe_swiglu_kernel's expression, operation for operation
          gv = fminf(gv, p.clamp);
          uv = fminf(fmaxf(uv, -p.clamp), p.clamp);
        }
        acc = exact_silu(gv) * uv * p.weights[vec];
      }
      if (lane < c) p.y[static_cast<int64_t>(vec) * p.y_stride + o] = acc;
    }
  }
}

// One block of kMaxGroupExperts threads: the pairs grouped by expert (moe_group.cuh).
__global__ void __launch_bounds__(kMaxGroupExperts) group_pairs_kernel(const int32_t* ids, int32_t n_pairs,
                                                                       int32_t n_expert, int32_t* order,
                                                                       int32_t* groups, int32_t* n_groups) {
  group_pairs_block(ids, n_pairs, n_expert, order, groups, n_groups);
}

bool skinny_type(GgmlType t) {
  return t == GgmlType::Q8_0 || t == GgmlType::Q2_K || t == GgmlType::Q4_K || t == GgmlType::IQ2_XXS;
}

int elems_of(GgmlType t) { return t == GgmlType::Q8_0 ? kQK8_0 : kQK_K; }

template <Mode M>
void launch(GgmlType t, unsigned g, cudaStream_t s, const SkinnyParams& p) {
  switch (t) {
    case GgmlType::Q8_0: skinny_kernel<GgmlType::Q8_0, M><<<g, kWarps * kWarp, 0, s>>>(p); break;
    case GgmlType::Q2_K: skinny_kernel<GgmlType::Q2_K, M><<<g, kWarps * kWarp, 0, s>>>(p); break;
    case GgmlType::Q4_K: skinny_kernel<GgmlType::Q4_K, M><<<g, kWarps * kWarp, 0, s>>>(p); break;
    default: skinny_kernel<GgmlType::IQ2_XXS, M><<<g, kWarps * kWarp, 0, s>>>(p); break;
  }
}

unsigned grid_of(int64_t items) { return static_cast<unsigned>(std::min<int64_t>(grid_for(items, kWarps), kMaxBlocks)); }

}  // namespace

cudaError_t upload_skinny_tables() {
  cudaError_t e = cudaMemcpyToSymbol(c_grid, kIq2xxsGrid, sizeof(kIq2xxsGrid));
  if (e != cudaSuccess) return e;
  return cudaMemcpyToSymbol(c_signs, kKsignsIq2xs, sizeof(kKsignsIq2xs));
}

bool CudaBackend::gemv_skinny(const GemvJob& j, const uint8_t* act, uint64_t act_stride) {
  const GgmlType T = j.w.type;
  if (j.numerics != MatmulNumerics::ds4 || !skinny_type(T) || j.ids || j.n_vec > kSkinnyMaxVec) return false;
  // Large products go to the tensor-core GEMM where it applies (kSkinnyMaxMacs: measured crossover).
  if (j.n_vec >= kGemmMinVectors && j.n_vec * j.w.rows * j.w.cols > kSkinnyMaxMacs && tensor_cores() &&
      gemm_supports(j))
    return false;
  SkinnyParams p{};
  p.w = static_cast<const uint8_t*>(j.w.data);
  p.row_bytes = j.w.row_bytes;
  p.rows = j.w.rows;
  p.nb = j.w.cols / elems_of(T);
  p.act = act;
  p.act_stride = act_stride;
  p.x_div = j.x_div;
  p.n_vec = static_cast<int32_t>(j.n_vec);
  p.y = j.y;
  p.y_stride = j.y_stride;
  launch<Mode::dense>(T, grid_of(j.w.rows), stream(), p);
  launched("gemv (skinny)");
  return true;
}

bool CudaBackend::moe_skinny(const MoeArgs& a, float* h, float* y) {
  const GgmlType gt = a.gate.first.type, dt = a.down.first.type;
  if (a.numerics != MatmulNumerics::ds4 || a.n > kSkinnyMaxVec || !skinny_type(gt) || a.up.first.type != gt ||
      !skinny_type(dt) || a.gate.n_expert != a.up.n_expert || a.gate.n_expert != a.down.n_expert ||
      a.gate.n_expert > kMaxGroupExperts || a.gate.expert_bytes != a.up.expert_bytes ||
      a.gate.first.row_bytes != a.up.first.row_bytes || a.dim % elems_of(gt) != 0 || a.ff % elems_of(dt) != 0)
    return false;
  const int64_t pairs = a.n * a.k;
  const int32_t n_expert = a.gate.n_expert;
  const int32_t max_groups = static_cast<int32_t>(std::min<int64_t>(pairs, n_expert));
  const uint64_t words = static_cast<uint64_t>(pairs) + 3ull * max_groups + 1;
  if (!ensure(moe_groups_, words * sizeof(int32_t), "expert groups")) return true;  // error recorded
  auto* order = static_cast<int32_t*>(moe_groups_.ptr);
  int32_t* groups = order + pairs;
  int32_t* n_groups = groups + 3 * max_groups;
  cudaStream_t s = stream();
  group_pairs_kernel<<<1, kMaxGroupExperts, 0, s>>>(a.ids, static_cast<int32_t>(pairs), n_expert, order, groups,
                                                    n_groups);
  if (!launched("group pairs by expert")) return true;

  // gate/up + SwiGLU: pair p reads token p / k; h [pairs][ff].
  const uint64_t x_stride = quantize_act(gt, a.x, a.dim, a.n, a.dim, moe_act_);
  if (x_stride == 0) return true;
  SkinnyParams p{};
  p.w = static_cast<const uint8_t*>(a.gate.first.data);
  p.w2 = static_cast<const uint8_t*>(a.up.first.data);
  p.row_bytes = a.gate.first.row_bytes;
  p.expert_bytes = a.gate.expert_bytes;
  p.rows = a.ff;
  p.nb = a.dim / elems_of(gt);
  p.act = static_cast<const uint8_t*>(moe_act_.ptr);
  p.act_stride = x_stride;
  p.x_div = a.k;
  p.order = order;
  p.groups = groups;
  p.n_groups = n_groups;
  p.max_groups = max_groups;
  p.y = h;
  p.y_stride = a.ff;
  p.weights = a.weights;
  p.clamp = a.clamp;
  launch<Mode::gate_up>(gt, grid_of(int64_t{max_groups} * a.ff), s, p);
  if (!launched("moe gate/up (skinny)")) return true;

  // down: pair p reads its own hidden row; y [pairs][dim]. Rows of pairs with a bad id hold whatever
  // h had: they are quantized but belong to no group (the slot sum gives those tokens NaN).
  const uint64_t h_stride = quantize_act(dt, h, a.ff, pairs, a.ff, moe_h_act_);
  if (h_stride == 0) return true;
  p.w = static_cast<const uint8_t*>(a.down.first.data);
  p.w2 = nullptr;
  p.row_bytes = a.down.first.row_bytes;
  p.expert_bytes = a.down.expert_bytes;
  p.rows = a.dim;
  p.nb = a.ff / elems_of(dt);
  p.act = static_cast<const uint8_t*>(moe_h_act_.ptr);
  p.act_stride = h_stride;
  p.x_div = 1;
  p.y = y;
  p.y_stride = a.dim;
  p.weights = nullptr;
  launch<Mode::down>(dt, grid_of(int64_t{max_groups} * a.dim), s, p);
  launched("moe down (skinny)");
  return true;
}

}  // namespace ds4::backend::cuda
