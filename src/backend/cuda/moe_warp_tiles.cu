// moe_warp_tiles.cu — routed experts for decode steps of 1..kTileMaxTokens tokens as warp tiles
// (CudaBackendOptions::expert_tiles_warp_max): the block-tile kernels' work (moe_tiles.cu) with every warp
// on its own items, so no block-wide barrier stands between a tile's copy, its terms and its chains.
//
// Work item = (group g = one expert and its pairs, R output rows): gate/up 1 row of gate and 1 of up
// (2 × 1056 B at Flash shapes: 32 blocks = one per lane), down 4 rows (4 × 672 B: 32 Q2_K blocks). Each
// warp streams its items (grid-stride over warps) through a private kStages-deep ring in shared memory
// filled by 16-byte cp.async (.cg: weights are read once), kStages − 1 items in flight while one is
// computed, so an SM keeps ~100–130 KB of weights in flight (the block tiles: one 22–34 KB tile).
// Per item and pass of ≤ Q pairs: lane per (row, weight block) forms the block's term for each pair
// with moe_terms.cuh's functions (the fast ones: IQ2_XXS from 16-copy shared tables, Q2_K masked
// dp4a) into the warp's terms; after a __syncwarp, lane per (row, pair) adds them from 0.0f in block
// order and finishes the row (tile_row_value: ·0.125, SwiGLU, routing weight). Same terms, same chain
// expression as the block tiles: the same bits (tests/cuda/test_cuda_moe_tiles.cpp).
// Deliberately not here: the prologue, the hidden-row quantization, the slot sum and the choice of
// kernels (moe_tiles.cu, ops_moe.cu); prefill-sized batches (ops_gemm.cu).
#include "backend/cuda/moe_warp_tiles.h"

#include <algorithm>
#include <type_traits>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_impl.h"
#include "backend/cuda/mma_s8.cuh"
#include "backend/cuda/moe_warp_ring.cuh"
#include "quant/iq2xxs_tables.h"

namespace ds4::backend::cuda {

namespace {

__constant__ uint64_t c_wgrid[256];

constexpr int kStages = 4;  // per-warp ring: 3 items in flight while one is computed

template <GgmlType T, bool kGateUp>
struct WarpTile {
  static constexpr bool kIq2 = T == GgmlType::IQ2_XXS;
  static constexpr int kRows = kGateUp ? 1 : 4;
  // Pairs a pass (as the fast block tiles: more spill at 128 registers).
  static constexpr int kMaxQ = T == GgmlType::Q2_K ? 4 : 8;
  // IQ2_XXS: one block per SM shares the 48 KB of tables among 16 warps; others 2 blocks of 8 warps.
  static constexpr int kWarps = kIq2 ? 16 : 8;
  static constexpr int kMinBlocks = kIq2 ? 1 : 2;
  static_assert(kRows * kMaxQ <= kWarp, "one pass of (row, pair) chains fits a warp");
};

constexpr uint32_t align16(uint64_t v) { return static_cast<uint32_t>((v + 15) / 16 * 16); }

// Shared memory of a block: (IQ2_XXS: the fast tables), then the pairs' metadata shared by its warps —
// activation-row pointers [n_pairs] (in order's order), groups [max_groups][3], pair ids [n_pairs] —
// then (act > 0) a copy of the quantized activation rows, then each warp's region: kStages item buffers
// (gate rows then up rows, each matrix's R rows as in device memory) and terms [Q][R][V + 1] floats; 16
// spare bytes at the end (iq2_terms_fast reads ≤ 4 bytes past a block).
struct WarpLayout {
  uint32_t meta, groups_at, pids_at;  // the metadata's bytes; groups and pair ids' offsets in it
  uint32_t act;                       // bytes of the activation copy (0: read from device memory)
  uint32_t stage, terms, warp_bytes;
};

// Activation rows up to this size are copied into each block's shared memory: a few tokens' rows are
// read by every warp many times, and from shared memory each read waits ~30 cycles instead of an L2
// round trip (the 06:20 UTC ncu: the down tiles at 1 token stalled on those loads most of the time).
constexpr uint64_t kActCopyMax = 16 * 1024;

// act_bytes: the activation region (kActLead + rows · act_stride) or 0.
WarpLayout warp_layout(bool gate_up, int rows, int max_q, uint64_t row_bytes, int nb, int32_t n_pairs,
                       int32_t max_groups, uint64_t act_bytes) {
  WarpLayout l;
  l.groups_at = static_cast<uint32_t>(n_pairs) * sizeof(void*);
  l.pids_at = l.groups_at + 3u * static_cast<uint32_t>(max_groups) * sizeof(int32_t);
  l.meta = align16(l.pids_at + static_cast<uint64_t>(n_pairs) * sizeof(int32_t));
  l.act = act_bytes <= kActCopyMax ? align16(act_bytes) : 0;
  const int mats = gate_up ? 2 : 1, V = gate_up ? 2 * nb : nb;
  l.stage = align16(uint64_t{static_cast<uint64_t>(mats) * rows} * row_bytes);
  l.terms = align16(static_cast<uint64_t>(max_q) * rows * (V + 1) * sizeof(float));
  l.warp_bytes = kStages * l.stage + l.terms;
  return l;
}

template <GgmlType T, bool kGateUp>
uint64_t warp_smem(const WarpLayout& l) {
  using W = WarpTile<T, kGateUp>;
  return (W::kIq2 ? kFastTableBytes : 0) + l.meta + l.act + uint64_t{W::kWarps} * l.warp_bytes + 16;
}

template <GgmlType T, bool kGateUp>
__global__ void __launch_bounds__(WarpTile<T, kGateUp>::kWarps* kWarp, WarpTile<T, kGateUp>::kMinBlocks)
    moe_warp_tile_kernel(TileParams p, WarpLayout lay) {
  using W = WarpTile<T, kGateUp>;
  using D = QDot<T>;
  constexpr int R = W::kRows, Q = W::kMaxQ;
  static_assert(!kGateUp || R * Q <= kWarp / 2, "gate/up chains: gate on lanes 0–15, up on 16–31");
  extern __shared__ __align__(16) uint8_t smem[];
  const int lane = threadIdx.x % kWarp, wid = threadIdx.x / kWarp;
  uint8_t* const meta = smem + (W::kIq2 ? kFastTableBytes : 0);
  const uint8_t** const sact = reinterpret_cast<const uint8_t**>(meta);
  int32_t* const sgroups = reinterpret_cast<int32_t*>(meta + lay.groups_at);
  int32_t* const spid = reinterpret_cast<int32_t*>(meta + lay.pids_at);
  uint8_t* const act_copy = meta + lay.meta;
  uint8_t* const stages = act_copy + lay.act + wid * lay.warp_bytes;
  float* const terms = reinterpret_cast<float*>(stages + kStages * lay.stage);
  const int nb = p.nb, V = kGateUp ? 2 * nb : nb, TS = V + 1;
  const uint64_t mat = R * p.row_bytes;  // one matrix's rows of an item (contiguous in the expert)
  const int32_t ng = *p.n_groups;
  const int64_t items = static_cast<int64_t>(ng) * p.n_tiles;
  // 16-byte copies where every source and destination run is 16-byte aligned (Flash shapes), else 4.
  const bool c16 = ((reinterpret_cast<uintptr_t>(p.w) | reinterpret_cast<uintptr_t>(kGateUp ? p.w2 : p.w) |
                     p.expert_bytes | mat) & 15) == 0;
  const int32_t* grp = p.groups;  // sgroups once the block has filled it
  // Copies item (g, t) — rows t·R … of group g's expert — to dst.
  auto issue = [&](int32_t g, int64_t t, uint8_t* dst) {
    const uint64_t off = static_cast<uint64_t>(grp[3 * g]) * p.expert_bytes + static_cast<uint64_t>(t) * mat;
#pragma unroll
    for (int m = 0; m < (kGateUp ? 2 : 1); ++m) {
      const uint8_t* src = (m == 0 ? p.w : p.w2) + off;
      uint8_t* d = dst + m * mat;
      if (c16) {
        for (uint32_t j = lane; j < mat / 16; j += kWarp) cp_async16(d + 16 * j, src + 16 * j);
      } else {
        for (uint32_t j = lane; j < mat / 4; j += kWarp) cp_async4(d + 4 * j, src + 4 * j);
      }
    }
  };
  // Items in tile-major order (item = t·ng + g: row tile t of every expert, then t + 1), warp w taking
  // items [w·per, (w + 1)·per): every warp gets rows of every expert in the same proportion, so warps
  // finish together whatever the experts' pair counts (a run of one expert's rows per warp left the
  // warps of many-pair experts last: 06:20 UTC run); (g, t) step without divisions.
  int64_t begin = 0, end = 0;
  warp_run(items, W::kWarps, wid, begin, end);
  int32_t ig = ng > 0 ? static_cast<int32_t>(begin % ng) : 0;  // the next item to issue
  int64_t it = ng > 0 ? begin / ng : 0;
  auto issue_next = [&](int s) {
    issue(ig, it, stages + s * lay.stage);
    if (++ig == ng) ig = 0, ++it;
  };
  ring_fill<kStages>(begin, end, issue_next);
  // While the first items are in flight: the block's copy of the groups, the pair ids and their
  // activation rows (read per item from shared memory, not through L2), and the IQ2_XXS tables.
  for (int i = threadIdx.x; i < 3 * ng; i += blockDim.x) sgroups[i] = p.groups[i];
  for (int i = threadIdx.x; i < p.n_pairs; i += blockDim.x) spid[i] = p.order[i];
  if constexpr (W::kIq2) fill_fast_tables(reinterpret_cast<uint64_t*>(smem), c_wgrid, threadIdx.x, blockDim.x);
  // The down projection may run as a programmatic dependent of the hidden rows' quantization (its first
  // weights above are in flight meanwhile); it reads those rows only below. No-op otherwise.
  grid_dependency_wait();
  // The activation rows (kActLead + rows · stride bytes from p.act, 16-byte aligned) where they fit.
  for (uint32_t i = threadIdx.x; i < lay.act / 16; i += blockDim.x)
    reinterpret_cast<uint4*>(act_copy)[i] = reinterpret_cast<const uint4*>(p.act)[i];
  const uint8_t* const act = lay.act > 0 ? act_copy : p.act;
  __syncthreads();
  for (int i = threadIdx.x; i < p.n_pairs; i += blockDim.x)  // order's unused entries give unused pointers
    sact[i] = act + kActLead + static_cast<uint64_t>(static_cast<uint32_t>(spid[i]) / p.x_div) * p.act_stride;
  __syncthreads();
  grp = sgroups;
  [[maybe_unused]] const uint8_t* lane_fgrid = nullptr;
  [[maybe_unused]] const uint8_t* lane_fsign = nullptr;
  if constexpr (W::kIq2) {
    const auto* fgrid = reinterpret_cast<const uint64_t*>(smem);
    lane_fgrid = reinterpret_cast<const uint8_t*>(fgrid + lane % kFastCopies);
    lane_fsign = reinterpret_cast<const uint8_t*>(fgrid + 256 * kFastCopies + lane % kFastCopies);
  }
  int32_t g = ng > 0 ? static_cast<int32_t>(begin % ng) : 0;  // the item computed
  int64_t t = ng > 0 ? begin / ng : 0;
  for (int64_t item = begin; item < end; ++item) {
    const uint8_t* wt = stages + ring_step<kStages>(item, begin, end, issue_next) * lay.stage;
    const int64_t row0 = t * R;
    const int32_t first = sgroups[3 * g + 1], count = sgroups[3 * g + 2];
    for (int32_t q0 = 0; q0 < count; q0 += Q) {
      const int cs = count - q0 < Q ? count - q0 : Q;
      const uint8_t* const* wact = sact + first + q0;  // the pass's pairs: activation rows, ids
      const int32_t* wpair = spid + first + q0;
      // Lane per (row r, virtual block vb): vb < nb gate's (or down's) block vb, vb ≥ nb up's block
      // vb − nb; pair q's term at terms[(q·R + r)·TS + vb]. QP: the pass's pair-loop length.
      auto block_terms = [&](auto qp) {
        constexpr int QP = decltype(qp)::value;
        for (int u = lane; u < R * V; u += kWarp) {
          const int r = u / V, vb = u % V;
          const bool up = kGateUp && vb >= nb;
          const int b = up ? vb - nb : vb;
          const uint8_t* wb = wt + (up ? mat : 0) + r * p.row_bytes + static_cast<uint64_t>(b) * D::kWBytes;
          const uint64_t boff = static_cast<uint64_t>(b) * p.act_pitch;
          float* out = terms + r * TS + vb;
          if constexpr (W::kIq2) iq2_terms_fast<QP, true>(wb, boff, cs, wact, lane_fgrid, lane_fsign, out, R * TS);
          else if constexpr (T == GgmlType::Q2_K) q2k_terms_fast<QP, true>(wb, boff, cs, wact, out, R * TS);
          else generic_terms<T, QP, true>(wb, boff, cs, wact, out, R * TS);
        }
      };
      // The smallest pair-loop length of 1, 2, 4, Q that holds the pass (present(): no guards for the
      // first half).
      if (cs == 1) block_terms(std::integral_constant<int, 1>{});
      else if (cs == 2) block_terms(std::integral_constant<int, 2>{});
      else if (cs <= 4 || Q == 4) block_terms(std::integral_constant<int, 4>{});
      else block_terms(std::integral_constant<int, Q>{});
      __syncwarp();
      // Chains of (row r, pair q), j = q·R + r: gate/up — lane j adds the gate row's terms and lane
      // 16 + j the up row's at the same time, and passes its sum down; down — lane j the row's.
      if constexpr (kGateUp) {
        const int j = lane % (kWarp / 2), half = lane / (kWarp / 2);
        float part = 0;
        if (j < cs * R) part = tile_row_sum(terms + j * TS + half * nb, nb);
        const float up = __shfl_down_sync(0xffffffffu, part, kWarp / 2);
        if (half == 0 && j < cs * R) {
          const int32_t pair = wpair[j / R];
          p.y[static_cast<int64_t>(pair) * p.y_stride + row0 + j % R] =
              tile_row_finish<W::kIq2, true>(part, up, p.clamp, p.weights[pair]);
        }
      } else {
        for (int j = lane; j < cs * R; j += kWarp) {
          const int32_t pair = wpair[j / R];
          p.y[static_cast<int64_t>(pair) * p.y_stride + row0 + j % R] =
              tile_row_finish<W::kIq2, false>(tile_row_sum(terms + j * TS, nb), 0.0f, p.clamp, 0.0f);
        }
      }
      __syncwarp();  // terms and (after the last pass) this stage are rewritten next
    }
    if (++g == ng) g = 0, ++t;
  }
  cp_async_wait<0>();
}

template <GgmlType T, bool kGateUp>
bool launch(CudaBackend& be, const TileParams& p, int64_t items_bound, bool pdl, cudaStream_t s) {
  using W = WarpTile<T, kGateUp>;
  constexpr int threads = W::kWarps * kWarp;
  auto kernel = moe_warp_tile_kernel<T, kGateUp>;
  // With the activation rows copied into shared memory where they fit (rows: tokens for gate/up, pairs
  // for down) unless that costs a block per SM; without, the size warp_tiles_fit checked.
  const int64_t act_rows = (p.n_pairs + p.x_div - 1) / p.x_div;
  WarpLayout lay = warp_layout(kGateUp, W::kRows, W::kMaxQ, p.row_bytes, p.nb, p.n_pairs, p.max_groups,
                               kActLead + static_cast<uint64_t>(act_rows) * p.act_stride);
  const WarpLayout plain = warp_layout(kGateUp, W::kRows, W::kMaxQ, p.row_bytes, p.nb, p.n_pairs, p.max_groups,
                                       kActCopyMax + 1);
  int per_sm = 0, plain_per_sm = 0, sms = 0;
  if (!be.check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, warp_smem<T, kGateUp>(lay)),
                "moe warp tiles: occupancy") ||
      !be.check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&plain_per_sm, kernel, threads, warp_smem<T, kGateUp>(plain)),
                "moe warp tiles: occupancy") ||
      !be.check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, be.device()), "moe warp tiles: SM count"))
    return false;
  if (per_sm < plain_per_sm) lay = plain, per_sm = plain_per_sm;
  const uint64_t smem = warp_smem<T, kGateUp>(lay);
  // One wave of blocks at most, and no more warps than items.
  const int64_t cap = std::max<int64_t>(1, int64_t{std::max(per_sm, 1)} * sms);
  const int64_t blocks = std::clamp<int64_t>((items_bound + W::kWarps - 1) / W::kWarps, 1, cap);
  return be.check(launch_dependent(pdl, dim3(static_cast<unsigned>(blocks)), dim3(threads), smem, s, kernel, p, lay),
                  kGateUp ? "moe gate/up warp tiles" : "moe down warp tiles");
}

template <bool kGateUp>
bool launch_of(CudaBackend& be, GgmlType t, const TileParams& p, int64_t items_bound, bool pdl, cudaStream_t s) {
  switch (t) {
    case GgmlType::Q8_0: return launch<GgmlType::Q8_0, kGateUp>(be, p, items_bound, pdl, s);
    case GgmlType::Q2_K: return launch<GgmlType::Q2_K, kGateUp>(be, p, items_bound, pdl, s);
    case GgmlType::Q4_K: return launch<GgmlType::Q4_K, kGateUp>(be, p, items_bound, pdl, s);
    default: return launch<GgmlType::IQ2_XXS, kGateUp>(be, p, items_bound, pdl, s);
  }
}

template <GgmlType T, bool kGateUp>
uint64_t smem_of(uint64_t row_bytes, int nb, int32_t n_pairs, int32_t max_groups) {
  using W = WarpTile<T, kGateUp>;
  return warp_smem<T, kGateUp>(warp_layout(kGateUp, W::kRows, W::kMaxQ, row_bytes, nb, n_pairs, max_groups, kActCopyMax + 1));
}

template <bool kGateUp>
uint64_t smem_of(GgmlType t, uint64_t row_bytes, int nb, int32_t n_pairs, int32_t max_groups) {
  switch (t) {
    case GgmlType::Q8_0: return smem_of<GgmlType::Q8_0, kGateUp>(row_bytes, nb, n_pairs, max_groups);
    case GgmlType::Q2_K: return smem_of<GgmlType::Q2_K, kGateUp>(row_bytes, nb, n_pairs, max_groups);
    case GgmlType::Q4_K: return smem_of<GgmlType::Q4_K, kGateUp>(row_bytes, nb, n_pairs, max_groups);
    default: return smem_of<GgmlType::IQ2_XXS, kGateUp>(row_bytes, nb, n_pairs, max_groups);
  }
}

template <GgmlType T>
cudaError_t allow_smem(int limit) {
  cudaError_t e = cudaFuncSetAttribute(moe_warp_tile_kernel<T, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, limit);
  if (e == cudaSuccess)
    e = cudaFuncSetAttribute(moe_warp_tile_kernel<T, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, limit);
  return e;
}

int smem_limit(int device) {
  int limit = 0;
  if (cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess) return 0;
  return limit;
}

}  // namespace

int warp_tile_rows(bool gate_up) {
  return gate_up ? WarpTile<GgmlType::IQ2_XXS, true>::kRows : WarpTile<GgmlType::IQ2_XXS, false>::kRows;
}

bool warp_tiles_fit(CudaBackend& be, GgmlType t, bool gate_up, uint64_t row_bytes, int nb, int64_t rows,
                    int64_t n_pairs, int32_t max_groups) {
  const int R = warp_tile_rows(gate_up);
  // An item's rows are copied in 4-byte (or 16-byte) pieces from a 4-byte aligned start: R rows must be
  // whole words (one IQ2_XXS gate/up row of an odd block count is not: 66·nb bytes).
  if (rows % R != 0 || rows / R > 0x7fffffff || R * row_bytes > (1u << 20) || (R * row_bytes) % 4 != 0 ||
      n_pairs > (1 << 16))
    return false;
  const auto np = static_cast<int32_t>(n_pairs);
  const uint64_t smem = gate_up ? smem_of<true>(t, row_bytes, nb, np, max_groups)
                                : smem_of<false>(t, row_bytes, nb, np, max_groups);
  return smem <= static_cast<uint64_t>(smem_limit(be.device()));
}

bool launch_warp_tiles(CudaBackend& be, GgmlType t, bool gate_up, const TileParams& p, int64_t items_bound, bool pdl,
                       cudaStream_t s) {
  return gate_up ? launch_of<true>(be, t, p, items_bound, pdl, s) : launch_of<false>(be, t, p, items_bound, pdl, s);
}

cudaError_t init_warp_tile_kernels() {
  int device = 0;
  cudaError_t e = cudaGetDevice(&device);
  const int limit = e == cudaSuccess ? smem_limit(device) : 0;
  if (e == cudaSuccess) e = cudaMemcpyToSymbol(c_wgrid, kIq2xxsGrid, sizeof(kIq2xxsGrid));
  if (e == cudaSuccess) e = allow_smem<GgmlType::Q8_0>(limit);
  if (e == cudaSuccess) e = allow_smem<GgmlType::Q2_K>(limit);
  if (e == cudaSuccess) e = allow_smem<GgmlType::Q4_K>(limit);
  if (e == cudaSuccess) e = allow_smem<GgmlType::IQ2_XXS>(limit);
  return e;
}

}  // namespace ds4::backend::cuda
