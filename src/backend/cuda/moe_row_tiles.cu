// moe_row_tiles.cu — routed experts for decode batches (CudaBackendOptions::expert_row_tiles_min, issue 8)
// as row tiles: a grouped GEMV in which every lane owns one output row of an item and walks that row's
// weight blocks in block order, so a row's block terms are added in registers as they are formed (no
// terms buffer, no chain pass, no barrier but the warp's own), and all lanes read the same activation
// block at the same time (one broadcast address per load, where the warp tiles read 16–32).
//
// Work item = (group g = one expert and its pairs, row tile t): gate/up 16 rows of gate and the same 16
// rows of up (lane l < 16: gate row l, lane 16 + l: up row l), down 32 rows. Each warp takes a run of
// items in tile-major order (item = t·groups + g, as the warp tiles: every warp gets the same share of
// every expert's pairs) or, with CudaBackendOptions::expert_row_tiles_v3, a run of expert-major items cut at
// an equal share of the estimated work (balanced_run: a block's warps then share one or two experts'
// activation rows in L1, where tile-major runs spread a block over 16 experts), and streams them slab by slab — a slab is the next kSlab blocks of the item's 32
// rows (IQ2_XXS 2 × 66 B, Q2_K 84 B per row), 4-byte cp.async where each warp instruction copies 128
// consecutive bytes of one row — through a private kStages-deep ring, the rows at an odd word pitch so
// the 32 lanes' word loads hit 32 banks. An expert with more pairs than a pass holds (kMaxQ) streams the
// item again per pass (from L2); a pass's pair loop is specialised on its size (1, 2, 4, kMaxQ).
// Block terms: moe_terms.cuh's fast functions (IQ2_XXS from the 16-copy shared tables, Q2_K masked
// dp4a), so the integer sums and each block's float finish are the block tiles'; a row's terms are added
// from 0.0f in block order and finished by tile_row_finish (·0.125, SwiGLU with the up row's sum from
// lane 16 + l, routing weight): the same bits as every other expert path (tests/cuda/test_cuda_moe_tiles.cpp).
// Deliberately not here: the prologue, the hidden-row quantization, the slot sum and the choice of
// kernels (moe_tiles.cu, ops_moe.cu); other weight types (the block or warp tiles take them); prefill.
#include "backend/cuda/moe_row_tiles.h"

#include <algorithm>
#include <type_traits>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_impl.h"
#include "backend/cuda/mma_s8.cuh"
#include "quant/iq2xxs_tables.h"

namespace ds4::backend::cuda {

namespace {

__constant__ uint64_t c_rgrid[256];

// kV2 (CudaBackendOptions::expert_row_tiles_v2): the second shapes below.
template <GgmlType T, bool kGateUp, bool kV2>
struct RowTile {
  static constexpr bool kIq2 = T == GgmlType::IQ2_XXS;
  static constexpr int kRows = kGateUp ? kWarp / 2 : kWarp;  // output rows of an item (each matrix)
  static constexpr int kSlab = kIq2 ? 2 : 1;                 // blocks of each row in one stage
  static constexpr int kSlabWords = kSlab * QDot<T>::kWBytes / 4;  // 33 / 21
  static_assert(kSlab * QDot<T>::kWBytes % 4 == 0, "slabs of whole words");
  static constexpr int kPitchWords = kSlabWords | 1;  // odd: lane l's word w on bank (l·pitch + w) % 32
  static constexpr uint32_t kWeightBytes = kWarp * kPitchWords * 4;  // a stage's weights: 4,224 / 2,688
  static constexpr int kMaxQ = kIq2 ? 8 : 4;  // pairs a pass (as the fast block tiles: more spill)
  // v2, down: each pass's activation blocks of the slab copied after the weights (kActSlot bytes a
  // block: the 292-byte Q8_K block from its 16-byte aligned start 12 bytes before), read from shared
  // memory instead of through L1, which the weights' 4-byte copies (cp.async.ca) keep evicting (the W1
  // run: long-scoreboard stalls 3.3 per issue in the down tiles at 32 tokens).
  static constexpr bool kActStaged = kV2 && !kGateUp;
  static constexpr uint32_t kActSlot = kQ8KPitch;  // 304 = 19 × 16
  static constexpr uint32_t kActBytes = kActStaged ? kMaxQ * kSlab * kActSlot : 0;
  // A stage's bytes, then 16 never written: the last row's IQ2_XXS word read past its second block (iq2_terms_*:
  // used only for a block 2 bytes off a word, which a second block never is here) lands there instead of on the
  // next stage's first word, which lane 0's cp.async of a later slab may be writing — harmless, but compute-sanitizer
  // racecheck reported it as a memcpy_async RAW hazard (5,766 warnings, session 11 W1), hiding real ones.
  static constexpr uint32_t kStageBytes = kWeightBytes + kActBytes + 16;
  // IQ2_XXS: one block per SM shares the 48 KB of tables; 12 warps × 3 stages = 152 KB of rings (v2: 16
  // warps × 2 stages = 135 KB, more warps to hide latency: one slab in flight outlasts its copy).
  // Q2_K: 16 warps × 4 stages = 172 KB (v2 with the activation blocks: 16 × 3 × 3,920 = 188 KB).
  static constexpr int kWarps = kIq2 && !kV2 ? 12 : 16;
  static constexpr int kStages = kIq2 ? (kV2 ? 2 : 3) : (kV2 ? 3 : 4);
};

__host__ __device__ constexpr uint32_t align16(uint64_t v) { return static_cast<uint32_t>((v + 15) / 16 * 16); }

// Per-block metadata after the IQ2_XXS tables: activation-row pointers [n_pairs], groups [max_groups][3],
// pair ids [n_pairs]; then the warps' rings, 16 spare bytes at the end (iq2_terms_fast reads ≤ 4 bytes
// past a block).
__host__ __device__ constexpr uint32_t meta_bytes(int32_t n_pairs, int32_t max_groups) {
  return align16(static_cast<uint64_t>(n_pairs) * (sizeof(void*) + sizeof(int32_t)) +
                 3ull * static_cast<uint64_t>(max_groups) * sizeof(int32_t));
}

// The IQ2_XXS tables at the start of dynamic shared memory (kPerm: the byte-permute decode's).
template <GgmlType T, bool kPerm>
constexpr uint64_t table_bytes() {
  return T != GgmlType::IQ2_XXS ? 0 : kPerm ? kPermTableBytes : kFastTableBytes;
}

template <GgmlType T, bool kGateUp, bool kPerm, bool kV2>
uint64_t row_smem(int32_t n_pairs, int32_t max_groups) {
  using W = RowTile<T, kGateUp, kV2>;
  return table_bytes<T, kPerm>() + meta_bytes(n_pairs, max_groups) +
         uint64_t{W::kWarps} * W::kStages * W::kStageBytes + 16;
}

// Estimated cost of one item (a row tile) of an expert with `count` pairs, in units of one pair's block
// terms: every pass of ≤ Q pairs decodes the weights again (kDecode: an IQ2_XXS decode costs about three
// pairs' dp4a work, a Q2_K one about half of one pair's), each pair adds its own (kPair).
template <GgmlType T>
__device__ inline int32_t item_cost(int32_t count, int Q) {
  constexpr int32_t kDecode = T == GgmlType::IQ2_XXS ? 3 : 1, kPair = T == GgmlType::IQ2_XXS ? 1 : 2;
  return kDecode * ((count + Q - 1) / Q) + kPair * count;
}

// The balanced run of items (CudaBackendOptions::expert_row_tiles_v3) of global warp `w` of `nw`: items are
// numbered expert-major (item = g·n_tiles + t, so the warps of one block work on the same one or two experts
// and share their activation rows in L1), and warp w takes the items whose estimated start cost (item_cost
// summed in that order) lies in [C·w/nw, C·(w+1)/nw), C the total: equal shares of the work whatever the
// pairs per expert. Every lane of the warp calls it (same result); groups in device memory (the
// prologue's). The boundary of w and w + 1 is one computation, so the runs partition the items exactly.
template <GgmlType T>
__device__ void balanced_run(const int32_t* groups, int32_t ng, int32_t n_tiles, int Q, int64_t w, int64_t nw,
                             int64_t& begin, int64_t& end) {
  // Lane l's costs of groups l, l + 32, … held in registers for the first kCached chunks (256 groups: every
  // Flash batch), so their loads are independent and cost one round trip; later chunks load again.
  constexpr int kCached = 8;
  const int lane = threadIdx.x % kWarp;
  auto cost = [&](int32_t g) { return g < ng ? item_cost<T>(groups[3 * g + 2], Q) : 0; };
  int32_t cached[kCached];
#pragma unroll
  for (int i = 0; i < kCached; ++i) cached[i] = cost(i * kWarp + lane);
  auto chunk_cost = [&](int i) {
    int32_t c = 0;
#pragma unroll
    for (int j = 0; j < kCached; ++j)
      if (j == i) c = cached[j];
    return i < kCached ? c : cost(i * kWarp + lane);
  };
  const int chunks = (ng + kWarp - 1) / kWarp;
  int64_t total = 0;
  for (int i = 0; i < chunks; ++i) total += chunk_cost(i);
  total = warp_sum<int64_t>(total) * n_tiles;
  const int64_t lo = total * w / nw, hi = total * (w + 1) / nw;
  // The first item whose start cost is ≥ x: in group g with start S ≤ x < S + n_tiles·c, item ⌈(x − S)/c⌉
  // of it (n_tiles: the next group's first); none (x ≥ total): the end of all items.
  begin = end = static_cast<int64_t>(ng) * n_tiles;
  bool found_lo = lo >= total, found_hi = hi >= total;
  int64_t run = 0;  // cost of the groups before this chunk, per tile
  for (int i = 0; i < chunks && !(found_lo && found_hi); ++i) {
    const int32_t g = i * kWarp + lane;
    const int32_t c = chunk_cost(i);
    int32_t incl = c;
#pragma unroll
    for (int d = 1; d < kWarp; d <<= 1) {
      const int32_t v = __shfl_up_sync(0xffffffffu, incl, d);
      if (lane >= d) incl += v;
    }
    const int64_t s0 = (run + incl - c) * n_tiles, s1 = (run + incl) * n_tiles;
    auto locate = [&](int64_t x, bool& found, int64_t& at) {
      const unsigned hit = __ballot_sync(0xffffffffu, !found && c > 0 && x >= s0 && x < s1);
      if (hit != 0) {
        const int64_t t = c > 0 ? (x - s0 + c - 1) / c : 0;
        at = __shfl_sync(0xffffffffu, static_cast<int64_t>(g) * n_tiles + t, __ffs(hit) - 1);
        found = true;
      }
    };
    locate(lo, found_lo, begin);
    locate(hi, found_hi, end);
    run += __shfl_sync(0xffffffffu, incl, kWarp - 1);
  }
}

// kPerm (IQ2_XXS only): the block terms by iq2_terms_perm (byte-permute decode) instead of iq2_terms_fast.
// balanced: the runs of balanced_run (expert-major) instead of equal runs of tile-major items.
template <GgmlType T, bool kGateUp, bool kPerm, bool kV2>
__global__ void __launch_bounds__(RowTile<T, kGateUp, kV2>::kWarps* kWarp, 1)
    moe_row_tile_kernel(TileParams p, bool balanced) {
  using W = RowTile<T, kGateUp, kV2>;
  constexpr int R = W::kRows, S = W::kStages, SW = W::kSlabWords, Q = W::kMaxQ;
  constexpr uint32_t kRowPitch = 4 * W::kPitchWords;
  extern __shared__ __align__(16) uint8_t smem[];
  const int lane = threadIdx.x % kWarp, wid = threadIdx.x / kWarp;
  uint8_t* const meta = smem + table_bytes<T, kPerm>();
  const uint8_t** const sact = reinterpret_cast<const uint8_t**>(meta);
  int32_t* const spid = reinterpret_cast<int32_t*>(meta + static_cast<uint64_t>(p.n_pairs) * sizeof(void*));
  int32_t* const sgroups = spid + p.n_pairs;
  uint8_t* const ring = meta + meta_bytes(p.n_pairs, p.max_groups) + wid * (S * W::kStageBytes);
  const int nslab = p.nb / W::kSlab;
  const int32_t ng = *p.n_groups;
  const int64_t items = static_cast<int64_t>(ng) * p.n_tiles;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * W::kWarps;
  int64_t begin = 0, end = 0;
  if (balanced) {
    balanced_run<T>(p.groups, ng, p.n_tiles, Q, static_cast<int64_t>(blockIdx.x) * W::kWarps + wid, warps, begin, end);
  } else {
    // Runs numbered warp-major across blocks (run wid·blocks + block), so a batch of fewer items than
    // warps still spreads over every SM (1 token: 768 gate/up items, 5–6 busy warps on each of 132 SMs).
    const int64_t per = (items + warps - 1) / warps;
    begin = (static_cast<int64_t>(wid) * gridDim.x + blockIdx.x) * per;
    end = begin + per < items ? begin + per : items;
  }
  // Item → (group, tile): expert-major when balanced (tile fastest), else tile-major (group fastest).
  auto group_of = [&](int64_t item) {
    return static_cast<int32_t>(ng == 0 ? 0 : balanced ? item / p.n_tiles : item % ng);
  };
  auto tile_of = [&](int64_t item) { return ng == 0 ? 0 : balanced ? item % p.n_tiles : item / ng; };
  auto step = [&](int32_t& g, int64_t& t) {
    if (balanced) {
      if (++t == p.n_tiles) t = 0, ++g;
    } else if (++g == ng) {
      g = 0, ++t;
    }
  };
  const int32_t* grp = p.groups;  // sgroups once the block has filled it
  const int32_t* pids = p.order;  // spid once the block has filled it

  // The copy side walks the same sequence as the compute side below — per item, per pass of ≤ Q
  // pairs, per slab — kStages − 1 slabs ahead.
  int64_t c_item = begin;
  int32_t c_g = group_of(begin);
  int64_t c_t = tile_of(begin);
  int32_t c_q0 = 0;
  int c_s = 0;
  // Slab c_s of item (c_g, c_t) into ring buffer `buf`: row i of the stage (gate rows 0 … R − 1, then up's)
  // at i · kRowPitch; warp instruction i copies the first 32 words of row i, the rest (IQ2_XXS: word 32)
  // go a row a lane.
  auto issue_next = [&](int buf) {
    if (c_item >= end) return;
    uint8_t* dst = ring + buf * W::kStageBytes;
    const uint64_t off = static_cast<uint64_t>(grp[3 * c_g]) * p.expert_bytes +
                         static_cast<uint64_t>(c_t) * R * p.row_bytes + static_cast<uint64_t>(c_s) * (4 * SW);
#pragma unroll
    for (int m = 0; m < (kGateUp ? 2 : 1); ++m) {
      const uint8_t* src = (m == 0 ? p.w : p.w2) + off;
      uint8_t* d = dst + m * R * kRowPitch;
      if (lane < SW) {
#pragma unroll 4
        for (int i = 0; i < R; ++i) cp_async4(d + i * kRowPitch + 4 * lane, src + i * p.row_bytes + 4 * lane);
      }
      if constexpr (SW > kWarp) {
        for (int u = lane; u < R * (SW - kWarp); u += kWarp) {
          const int i = u / (SW - kWarp), j = kWarp + u % (SW - kWarp);
          cp_async4(d + i * kRowPitch + 4 * j, src + i * p.row_bytes + 4 * j);
        }
      }
    }
    if constexpr (W::kActStaged) {
      // The pass's pairs' blocks c_s·kSlab … of their activation rows, each from its 16-byte aligned start
      // (block − 12: kActLead and the pitches keep the quants 16-byte aligned) into slot (q, kb).
      const int32_t first = grp[3 * c_g + 1], count = grp[3 * c_g + 2];
      const int cs = count - c_q0 < Q ? count - c_q0 : Q;
      constexpr int kChunks = W::kActSlot / 16;
      uint8_t* da = dst + W::kWeightBytes;
      for (int u = lane; u < cs * W::kSlab * kChunks; u += kWarp) {
        const int slot = u / kChunks, chunk = u % kChunks, q = slot / W::kSlab, kb = slot % W::kSlab;
        const uint32_t row = static_cast<uint32_t>(pids[first + c_q0 + q]) / p.x_div;
        const uint8_t* src = p.act + kActLead - 12 + static_cast<uint64_t>(row) * p.act_stride +
                             static_cast<uint64_t>(c_s * W::kSlab + kb) * p.act_pitch;
        cp_async16(da + slot * W::kActSlot + 16 * chunk, src + 16 * chunk);
      }
    }
    if (++c_s == nslab) {
      c_s = 0;
      c_q0 += Q;
      if (c_q0 >= grp[3 * c_g + 2]) {
        c_q0 = 0;
        ++c_item;
        step(c_g, c_t);
      }
    }
  };
  // Staged activations are copied with the weights: as a programmatic dependent (the down projection
  // after the hidden rows' quantization), wait for them first. No-op otherwise.
  if constexpr (W::kActStaged) grid_dependency_wait();
#pragma unroll
  for (int s = 0; s < S - 1; ++s) {
    issue_next(s);
    cp_async_commit();
  }
  // While the first slabs are in flight: the block's copy of the groups and pair ids, the IQ2_XXS tables.
  for (int i = threadIdx.x; i < 3 * ng; i += blockDim.x) sgroups[i] = p.groups[i];
  for (int i = threadIdx.x; i < p.n_pairs; i += blockDim.x) spid[i] = p.order[i];
  if constexpr (W::kIq2 && kPerm) fill_perm_tables(reinterpret_cast<uint32_t*>(smem), c_rgrid, threadIdx.x, blockDim.x);
  else if constexpr (W::kIq2) fill_fast_tables(reinterpret_cast<uint64_t*>(smem), c_rgrid, threadIdx.x, blockDim.x);
  // The down projection may run as a programmatic dependent of the hidden rows' quantization; it reads
  // those rows only below (staged: waited above). No-op otherwise.
  if constexpr (!W::kActStaged) grid_dependency_wait();
  __syncthreads();
  for (int i = threadIdx.x; i < p.n_pairs; i += blockDim.x)  // order's unused entries give unused pointers
    sact[i] = p.act + kActLead + static_cast<uint64_t>(static_cast<uint32_t>(spid[i]) / p.x_div) * p.act_stride;
  __syncthreads();
  grp = sgroups;
  pids = spid;
  [[maybe_unused]] const uint8_t* lane_fgrid = nullptr;
  [[maybe_unused]] const uint8_t* lane_fsign = nullptr;
  if constexpr (W::kIq2 && !kPerm) {
    const auto* fgrid = reinterpret_cast<const uint64_t*>(smem);
    lane_fgrid = reinterpret_cast<const uint8_t*>(fgrid + lane % kFastCopies);
    lane_fsign = reinterpret_cast<const uint8_t*>(fgrid + 256 * kFastCopies + lane % kFastCopies);
  }
  int buf = 0;  // ring buffer of the slab computed next
  const uint8_t* const my_row = ring + lane * kRowPitch;
  int32_t g = group_of(begin);
  int64_t t = tile_of(begin);
  for (int64_t item = begin; item < end; ++item) {
    const int32_t first = sgroups[3 * g + 1], count = sgroups[3 * g + 2];
    const int64_t row0 = t * R;
    for (int32_t q0 = 0; q0 < count; q0 += Q) {
      const int cs = count - q0 < Q ? count - q0 : Q;
      const uint8_t* const* wact = sact + first + q0;  // the pass's pairs: activation rows, ids
      const int32_t* wpair = spid + first + q0;
      // One pass: lane's row chain of every pair, over all slabs; QP: the pair loop's length.
      auto pass = [&](auto qp) {
        constexpr int QP = decltype(qp)::value;
        float acc[QP];
#pragma unroll
        for (int q = 0; q < QP; ++q) acc[q] = 0.0f;
        for (int s = 0; s < nslab; ++s) {
          issue_next(buf == 0 ? S - 1 : buf - 1);  // the buffer computed last time
          cp_async_commit();
          cp_async_wait<S - 1>();  // this slab has landed
          __syncwarp();            // … for every lane's copies
          const uint8_t* wrow = my_row + buf * W::kStageBytes;
          // Staged activations: pair q's block kb at slot q·kSlab + kb (the block 12 bytes in), else the rows
          // in device memory.
          [[maybe_unused]] const uint8_t* sa[QP];
          if constexpr (W::kActStaged) {
#pragma unroll
            for (int q = 0; q < QP; ++q)
              sa[q] = ring + buf * W::kStageBytes + W::kWeightBytes + q * W::kSlab * W::kActSlot + 12;
          }
          const uint8_t* const* pa = W::kActStaged ? sa : wact;
#pragma unroll
          for (int kb = 0; kb < W::kSlab; ++kb) {
            const int b = s * W::kSlab + kb;
            const uint64_t boff = W::kActStaged ? kb * W::kActSlot : static_cast<uint64_t>(b) * p.act_pitch;
            float tm[QP];
#pragma unroll
            for (int q = 0; q < QP; ++q) tm[q] = 0.0f;
            if constexpr (W::kIq2 && kPerm)
              iq2_terms_perm<QP, true>(wrow + kb * QDot<T>::kWBytes, boff, cs, pa, smem + 4 * lane, tm, 1);
            else if constexpr (W::kIq2)
              iq2_terms_fast<QP, true>(wrow + kb * QDot<T>::kWBytes, boff, cs, pa, lane_fgrid, lane_fsign, tm, 1);
            else
              q2k_terms_fast<QP, true>(wrow + kb * QDot<T>::kWBytes, boff, cs, pa, tm, 1);
            // The block tiles' chain: from 0.0f, one add per block in block order (tile_row_sum).
#pragma unroll
            for (int q = 0; q < QP; ++q) acc[q] = __fadd_rn(acc[q], tm[q]);
          }
          __syncwarp();  // every lane is done with this buffer before it is refilled
          buf = buf == S - 1 ? 0 : buf + 1;
        }
#pragma unroll
        for (int q = 0; q < QP; ++q) {
          if (q < cs) {  // warp-uniform
            const int32_t pair = wpair[q];
            if constexpr (kGateUp) {
              const float up = __shfl_down_sync(0xffffffffu, acc[q], kWarp / 2);
              if (lane < kWarp / 2)
                p.y[static_cast<int64_t>(pair) * p.y_stride + row0 + lane] =
                    tile_row_finish<W::kIq2, true>(acc[q], up, p.clamp, p.weights[pair]);
            } else {
              p.y[static_cast<int64_t>(pair) * p.y_stride + row0 + lane] =
                  tile_row_finish<W::kIq2, false>(acc[q], 0.0f, p.clamp, 0.0f);
            }
          }
        }
      };
      if (cs == 1) pass(std::integral_constant<int, 1>{});
      else if (cs == 2) pass(std::integral_constant<int, 2>{});
      else if (cs <= 4 || Q == 4) pass(std::integral_constant<int, 4>{});
      else pass(std::integral_constant<int, Q>{});
    }
    step(g, t);
  }
  cp_async_wait<0>();
}

template <GgmlType T, bool kGateUp, bool kPerm, bool kV2>
bool launch(CudaBackend& be, const TileParams& p, int64_t items_bound, bool pdl, bool balanced, cudaStream_t s) {
  using W = RowTile<T, kGateUp, kV2>;
  constexpr int threads = W::kWarps * kWarp;
  auto kernel = moe_row_tile_kernel<T, kGateUp, kPerm, kV2>;
  const uint64_t smem = row_smem<T, kGateUp, kPerm, kV2>(p.n_pairs, p.max_groups);
  int per_sm = 0, sms = 0;
  if (!be.check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem),
                "moe row tiles: occupancy") ||
      !be.check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, be.device()), "moe row tiles: SM count"))
    return false;
  // One wave of blocks at most, and no more blocks than items (the kernel spreads its warps' runs of
  // items over all blocks first).
  const int64_t cap = std::max<int64_t>(1, int64_t{std::max(per_sm, 1)} * sms);
  const int64_t blocks = std::clamp<int64_t>(items_bound, 1, cap);
  return be.check(launch_dependent(pdl, dim3(static_cast<unsigned>(blocks)), dim3(threads), smem, s, kernel, p, balanced),
                  kGateUp ? "moe gate/up row tiles" : "moe down row tiles");
}

template <GgmlType T, bool kPerm, bool kV2>
cudaError_t allow_smem(int limit) {
  cudaError_t e = cudaFuncSetAttribute(moe_row_tile_kernel<T, true, kPerm, kV2>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, limit);
  if (e == cudaSuccess)
    e = cudaFuncSetAttribute(moe_row_tile_kernel<T, false, kPerm, kV2>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             limit);
  return e;
}

// The launch of one (type, projection) by the two switches (kPerm only for IQ2_XXS).
template <GgmlType T, bool kGateUp>
bool launch_of(CudaBackend& be, const TileParams& p, int64_t items_bound, bool pdl, bool perm, bool v2, bool v3,
               cudaStream_t s) {
  if constexpr (T == GgmlType::IQ2_XXS) {
    if (perm)
      return v2 ? launch<T, kGateUp, true, true>(be, p, items_bound, pdl, v3, s)
                : launch<T, kGateUp, true, false>(be, p, items_bound, pdl, v3, s);
  }
  return v2 ? launch<T, kGateUp, false, true>(be, p, items_bound, pdl, v3, s)
            : launch<T, kGateUp, false, false>(be, p, items_bound, pdl, v3, s);
}

template <GgmlType T, bool kGateUp>
uint64_t smem_of(bool perm, bool v2, int32_t n_pairs, int32_t max_groups) {
  if (perm)
    return v2 ? row_smem<T, kGateUp, true, true>(n_pairs, max_groups)
              : row_smem<T, kGateUp, true, false>(n_pairs, max_groups);
  return v2 ? row_smem<T, kGateUp, false, true>(n_pairs, max_groups)
            : row_smem<T, kGateUp, false, false>(n_pairs, max_groups);
}

int smem_limit(int device) {
  int limit = 0;
  if (cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess) return 0;
  return limit;
}

}  // namespace

int row_tile_rows(bool gate_up) { return gate_up ? kWarp / 2 : kWarp; }

bool row_tiles_fit(CudaBackend& be, GgmlType t, bool gate_up, uint64_t row_bytes, int nb, int64_t rows,
                   int64_t n_pairs, int32_t max_groups, bool perm, bool v2) {
  const int R = row_tile_rows(gate_up);
  if (t != GgmlType::IQ2_XXS && t != GgmlType::Q2_K) return false;
  const int slab = t == GgmlType::IQ2_XXS ? RowTile<GgmlType::IQ2_XXS, true, false>::kSlab
                                          : RowTile<GgmlType::Q2_K, true, false>::kSlab;
  // Whole items of whole slabs; rows of whole 4-byte words (the copies).
  if (rows % R != 0 || rows / R > 0x7fffffff || nb % slab != 0 || row_bytes % 4 != 0 || n_pairs > (1 << 16))
    return false;
  const auto np = static_cast<int32_t>(n_pairs);
  uint64_t smem = 0;
  if (t == GgmlType::IQ2_XXS)
    smem = gate_up ? smem_of<GgmlType::IQ2_XXS, true>(perm, v2, np, max_groups)
                   : smem_of<GgmlType::IQ2_XXS, false>(perm, v2, np, max_groups);
  else
    smem = gate_up ? smem_of<GgmlType::Q2_K, true>(false, v2, np, max_groups)
                   : smem_of<GgmlType::Q2_K, false>(false, v2, np, max_groups);
  return smem <= static_cast<uint64_t>(smem_limit(be.device()));
}

bool launch_row_tiles(CudaBackend& be, GgmlType t, bool gate_up, const TileParams& p, int64_t items_bound, bool pdl,
                      bool perm, bool v2, bool v3, cudaStream_t s) {
  if (t == GgmlType::IQ2_XXS)
    return gate_up ? launch_of<GgmlType::IQ2_XXS, true>(be, p, items_bound, pdl, perm, v2, v3, s)
                   : launch_of<GgmlType::IQ2_XXS, false>(be, p, items_bound, pdl, perm, v2, v3, s);
  return gate_up ? launch_of<GgmlType::Q2_K, true>(be, p, items_bound, pdl, perm, v2, v3, s)
                 : launch_of<GgmlType::Q2_K, false>(be, p, items_bound, pdl, perm, v2, v3, s);
}

cudaError_t init_row_tile_kernels() {
  int device = 0;
  cudaError_t e = cudaGetDevice(&device);
  const int limit = e == cudaSuccess ? smem_limit(device) : 0;
  if (e == cudaSuccess) e = cudaMemcpyToSymbol(c_rgrid, kIq2xxsGrid, sizeof(kIq2xxsGrid));
  if (e == cudaSuccess) e = allow_smem<GgmlType::IQ2_XXS, false, false>(limit);
  if (e == cudaSuccess) e = allow_smem<GgmlType::IQ2_XXS, false, true>(limit);
  if (e == cudaSuccess) e = allow_smem<GgmlType::IQ2_XXS, true, false>(limit);
  if (e == cudaSuccess) e = allow_smem<GgmlType::IQ2_XXS, true, true>(limit);
  if (e == cudaSuccess) e = allow_smem<GgmlType::Q2_K, false, false>(limit);
  if (e == cudaSuccess) e = allow_smem<GgmlType::Q2_K, false, true>(limit);
  return e;
}

}  // namespace ds4::backend::cuda
