// gemv_rows.cu — dense Q8_0 matmuls of 1..kRowsMaxVec (8) vectors with each weight octet in registers:
// a thread owns one 8-block "octet" of a row (272 bytes = 17 aligned 16-byte chunks) per tile, a tile is
// R rows × C octets (R·C ≤ 256 threads; C = the whole row, or column chunks of 8 octets for 4096 / 8192
// columns), and the next tile's loads are in flight while the current one is computed. Same parts as
// gemv_stream.cu (one matrix, the groups of out_a, matmul_many's matrices sharing an input: a
// StreamSet) and the same numerics: each block's ds4 term (f16(d_w)·d_x)·Σ q_w q_x (dense_block_terms'
// expression), then a chain per (row, vector) from 0.0f in block order (dense_row_sum, carried across a
// row's column chunks) — the CPU's bits.
//
// Why (docs/PERF.md, W3 ncu of gemv_stream's out_b): staging every byte in shared memory by cp.async
// and reading each block back as 9 words cost ~250 instructions per 34-byte block and 82 KB of shared
// memory per block (25 % occupancy): instruction and latency bound at ~2 TB/s. Here a block's quant
// words come from registers (odd blocks: 8 aligned words; even blocks: 8 byte permutes), the activation
// blocks from shared memory in a padded per-octet layout (two conflict-free 16-byte loads per block and
// vector). The weights are read coalesced (a warp instruction takes 512 consecutive bytes; the first
// H200 run, each thread reading its own 272 bytes, made every instruction touch 32 cache lines and ran
// at 1.7–2.2 TB/s) and passed to the owning lanes through an 8.7 KB staging area per warp.
// The block terms go through shared memory because the chain of a row is serial across its octets (no
// reassociation is allowed): thread per (row, vector) adds a tile's row after one barrier, while the
// other warps go on with the next tile (two term buffers where they fit).
// The half kernel (dense_ramp.h kRampRowsHalf, one vector): one cp.async ring slot and ≤ 128 registers, two blocks
// an SM — two tiles in flight per SM and one block's terms and chains under the other's loads; out_b's 15.5 rows a
// block as 16-row tiles of 16 octets (kRampHalfRows16), two full tiles a block.
// Deliberately not here: choosing jobs (CudaBackend::gemv / gemv_stream_many, gemv_rows_wins), more
// than 8 vectors (gemv_stream.cu, gemv_mma.cu), other weight types.
#include <algorithm>

#include "backend/cuda/act_quant.cuh"
#include "backend/cuda/bulk_copy.cuh"
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_impl.h"
#include "backend/cuda/dense_parts.cuh"
#include "backend/cuda/dense_q8.cuh"
#include "backend/cuda/dense_ramp.h"
#include "backend/cuda/mma_s8.cuh"

namespace ds4::backend::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kOctetBlocks = 8;          // Q8_0 blocks a thread owns: 272 bytes, 16-byte aligned in a row
constexpr int kOctetLoads = 17;          // 16-byte loads per octet
constexpr uint32_t kActOctet = 304;      // smem bytes per octet and vector: 8 × 32 quants, 8 d, 16 pad
constexpr uint64_t kMaxSmem = 160 * 1024;  // under sm_80's 163 KB opt-in (CI builds compute_80 too)
// kRampRowsRing (sm_90 only: above sm_80's opt-in): the staging area as a ring of kRingSlots whole-tile slots
// (69,632 bytes each) filled by cp.async, so kRingSlots tiles are in flight while one is computed.
constexpr int kRingSlots = 2;
constexpr uint64_t kRingMaxSmem = 220 * 1024;
// kRampRowsHalf (sm_90, one vector): one ring slot, ≤ 128 registers a thread and ≤ kHalfMaxSmem, so that two blocks
// share an SM.
constexpr uint64_t kHalfMaxSmem = 112 * 1024;
constexpr uint64_t kBulkBarBytes = 8 * 8;  // kRampRowsBulk: one mbarrier a warp
constexpr uint32_t kStageBytes = kThreads * 272;  // one tile: every thread's octet
constexpr int64_t kFusedMaxValues = 8192;  // n·cols above this: one quantize_act first (as gemv_stream.cu)

struct RowsParams {
  DensePart part[kStreamMaxParts];
  int32_t n_parts, n_vec;
  int32_t nb;          // blocks per row (8·O)
  int32_t octets;      // O: octets per row
  int32_t chunk_oct;   // C: octets of a row per tile (O, or 8 when O is a larger multiple of 8)
  int32_t tile_rows;   // R = kThreads / C
  uint64_t row_bytes;
  uint32_t act_vec_bytes;  // smem: O · kActOctet per vector
  uint32_t terms_off;      // smem: two buffers of [n_vec][R][term_pitch] floats (the raw activations before them)
  uint32_t term_pitch;     // 8·C + 4: 16-byte aligned rows, 4 banks apart
  uint32_t buf_floats;     // n_vec · R · term_pitch
  int32_t two_buffers;     // 1: tile k's terms in buffer k % 2; 0: one buffer, a second barrier per tile
  uint32_t stage_off;      // smem: each warp's 8,704-byte staging area (8 warps)
  int64_t x_stride;
  uint64_t act_vec;
  int32_t ramp;  // dense_ramp.h bits (kRampRowsTwoTiles, kRampDirectQuant)
  uint32_t bar_off;  // kRampRowsBulk: smem of the warps' mbarriers [8] uint64
};

// One 16-byte weight load: through L1 (the two halves of a 32-byte sector are read by consecutive
// loads of the same thread) or, kNoL1, L1::no_allocate (each load its own L2 request).
template <bool kNoL1>
__device__ __forceinline__ uint4 load_w(const uint8_t* p) {
  uint4 v;
  if constexpr (kNoL1)
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p));
  else
    v = __ldg(reinterpret_cast<const uint4*>(p));
  return v;
}

// A warp's share of tile (row group g, column chunk c), coalesced: the warp's 32 octet slots q (thread
// 32·warp + q owns row (32·warp + q) / C, octet (32·warp + q) % C of the tile) as 544 16-byte chunks i =
// 17q + piece; load k takes chunk 32k + lane, so a warp instruction reads 512 bytes that are consecutive
// within each row's C octets (C·272 bytes). row0: the tile's first row in the part; rows: the block's.
// each(k, src) runs for the lane's chunk 32k + lane at src when its row is one of the block's.
template <class Each>
__device__ __forceinline__ void walk_chunks(const uint8_t* w, uint64_t row_bytes, int row0, int rows, int C, int c,
                                            Each&& each) {
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  const int first = static_cast<int>(threadIdx.x / kWarp) * kWarp + lane / 17;  // the tile slot of chunk `lane`
  int r = first / C, o = first - r * C;
  const uint8_t* src = w + static_cast<uint64_t>(row0 + r) * row_bytes + static_cast<uint64_t>(c * C + o) * 272u +
                       16u * static_cast<uint32_t>(lane % 17);
  const uint64_t wrap = row_bytes - static_cast<uint64_t>(C) * 272u;  // from past a row's chunk to the next row's
  int piece = lane % 17;
#pragma unroll
  for (int k = 0; k < kOctetLoads; ++k) {
    if (row0 + r < rows) each(k, src);
    // chunk i + 32 of the slots: 512 bytes on within a row's C octets (piece + 32 = piece + 15 + 17: one
    // slot on, or two when piece + 15 ≥ 17), plus a row step for each wrap past the chunk's C octets
    src += 512;
    piece += 15;
    int step = 1;
    if (piece >= 17) piece -= 17, step = 2;
    o += step;
    while (o >= C) o -= C, ++r, src += wrap;
  }
}

// walk_chunks' chunks into registers: ch[k] = chunk 32k + lane.
template <bool kNoL1>
__device__ __forceinline__ void load_chunks(uint4 (&ch)[kOctetLoads], const uint8_t* w, uint64_t row_bytes,
                                            int row0, int rows, int C, int c) {
  walk_chunks(w, row_bytes, row0, rows, C, c, [&](int k, const uint8_t* src) { ch[k] = load_w<kNoL1>(src); });
}

// The chunks of load_chunks through the warp's 8,704-byte staging area into each lane's own octet (lane
// l: bytes 272l … 272l + 271, 17 16-byte loads at a 68-word pitch — conflict-free per quarter warp).
__device__ __forceinline__ void chunks_to_octet(const uint4 (&c)[kOctetLoads], uint4 (&a)[kOctetLoads], uint8_t* stage) {
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  __syncwarp();  // the previous tile's reads of `stage` are done
#pragma unroll
  for (int k = 0; k < kOctetLoads; ++k) reinterpret_cast<uint4*>(stage)[32 * k + lane] = c[k];
  __syncwarp();
#pragma unroll
  for (int k = 0; k < kOctetLoads; ++k) a[k] = reinterpret_cast<const uint4*>(stage + 272 * lane)[k];
}

// kRampRowsRing: load_chunks' chunks as cp.async copies straight into the warp's slice `slot` of a ring slot, at
// the places chunks_to_octet's stores would put them (chunk 32k + lane at 16·(32k + lane)), L2 only (.cg); one
// group, committed by the caller. Rows past the block's keep the slot's old bytes (their chains never run).
__device__ __forceinline__ void copy_chunks(uint8_t* slot, const uint8_t* w, uint64_t row_bytes, int row0, int rows,
                                            int C, int c) {
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  walk_chunks(w, row_bytes, row0, rows, C, c,
              [&](int k, const uint8_t* src) { cp_async16(slot + 16 * (32 * k + lane), src); });
}

// The generic proxy's accesses to shared memory ordered before the async proxy's (a bulk copy overwriting what the
// thread read).
__device__ __forceinline__ void fence_proxy_async_shared() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}

// kRampRowsBulk (sm_90): the warp's slice of tile (row group at row0, column chunk c) — its 32 octet slots q0 … q0 + 31
// (slot q: row q / C, octet q % C of the tile), stored by copy_chunks at 272·(q − q0) — as cp.async.bulk copies, one
// per row the slice touches (a run of consecutive slots of one row is contiguous in the row and in the slice), issued by
// one lane each (≤ 32: C = 1 makes every slot a row), completing on the warp's mbarrier `bar`, whose one arrival (lane
// 0) announces the bytes of the slots in the block's rows first. The same bytes at the same places as copy_chunks:
// the same bits. Slots of rows past the block's keep their old bytes (their chains never run).
__device__ __forceinline__ void bulk_slice(uint8_t* slice, const uint8_t* w, uint64_t row_bytes, int row0, int rows,
                                           int C, int c, uint64_t* bar) {
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  const int q0 = static_cast<int>(threadIdx.x / kWarp) * kWarp;
  const int valid = min(max((rows - row0) * C - q0, 0), kWarp);  // the slice's slots in the block's rows
  if (lane == 0) mbar_expect(bar, static_cast<uint32_t>(valid) * 272u);  // 0: the phase completes at once
  __syncwarp();  // the expectation before any copy's completion
  if (valid == 0) return;
  const int ra = q0 / C, r = ra + lane;  // lane's row of the tile
  if (r > (q0 + valid - 1) / C) return;
  const int s0 = max(q0, r * C), s1 = min(q0 + valid, (r + 1) * C);  // its slots [s0, s1)
  bulk_copy(slice + 272u * static_cast<uint32_t>(s0 - q0),
            w + static_cast<uint64_t>(row0 + r) * row_bytes + static_cast<uint64_t>(c * C + s0 - r * C) * 272u,
            static_cast<uint32_t>(s1 - s0) * 272u, bar);
}

// Word m (0 … 67) of a loaded octet (m is a constant once the callers' loops are unrolled).
__device__ __forceinline__ uint32_t word(const uint4 (&a)[kOctetLoads], int m) {
  const uint4& v = a[m >> 2];
  switch (m & 3) {
    case 0: return v.x;
    case 1: return v.y;
    case 2: return v.z;
    default: return v.w;
  }
}

// The 8 terms of an octet for every vector into out[v·vstride + i] (i = 0 … 7, two 16-byte stores each).
// Block i starts at byte 34i of the octet: even i = 2k at word 17k (d = its low half, quant word m =
// bytes 2 + 4m …, a byte permute of words 17k + m, 17k + m + 1), odd i at word 17k + 8 (d = its high
// half, quant words 17k + 9 … 17k + 16, aligned). act: this octet's activations of vector 0 (kActOctet
// layout: quants of block i at 32i, d of block i at 256 + 4i), vector v act_vec bytes further.
template <int NV>
__device__ __forceinline__ void octet_terms(const uint4 (&a)[kOctetLoads], const uint8_t* act, uint32_t act_vec,
                                            int n_vec, float* out, uint32_t vstride) {
  float t[NV][kOctetBlocks];
  float dx[NV][kOctetBlocks];
#pragma unroll
  for (int v = 0; v < NV; ++v) {
    if (v < n_vec) {
      const float4 d0 = *reinterpret_cast<const float4*>(act + v * act_vec + 256);
      const float4 d1 = *reinterpret_cast<const float4*>(act + v * act_vec + 272);
      dx[v][0] = d0.x, dx[v][1] = d0.y, dx[v][2] = d0.z, dx[v][3] = d0.w;
      dx[v][4] = d1.x, dx[v][5] = d1.y, dx[v][6] = d1.z, dx[v][7] = d1.w;
    }
  }
#pragma unroll
  for (int i = 0; i < kOctetBlocks; ++i) {
    const int base = (i / 2) * 17 + (i % 2) * 8;
    const uint32_t w0 = word(a, base);
    const float wd = f16_dev(static_cast<uint16_t>(i % 2 ? w0 >> 16 : w0 & 0xffffu));
    int q[8];
#pragma unroll
    for (int m = 0; m < 8; ++m)
      q[m] = static_cast<int>(i % 2 ? word(a, base + 1 + m) : __byte_perm(word(a, base + m), word(a, base + m + 1), 0x5432));
#pragma unroll
    for (int v = 0; v < NV; ++v) {
      if (v < n_vec) {
        const int4 x0 = *reinterpret_cast<const int4*>(act + v * act_vec + 32 * i);
        const int4 x1 = *reinterpret_cast<const int4*>(act + v * act_vec + 32 * i + 16);
        int isum = 0;
        isum = __dp4a(q[0], x0.x, isum);
        isum = __dp4a(q[1], x0.y, isum);
        isum = __dp4a(q[2], x0.z, isum);
        isum = __dp4a(q[3], x0.w, isum);
        isum = __dp4a(q[4], x1.x, isum);
        isum = __dp4a(q[5], x1.y, isum);
        isum = __dp4a(q[6], x1.z, isum);
        isum = __dp4a(q[7], x1.w, isum);
        t[v][i] = wd * dx[v][i] * small_i2f(isum);  // dense_block_terms' expression: (d_w·d_x)·isum
      }
    }
  }
#pragma unroll
  for (int v = 0; v < NV; ++v) {
    if (v < n_vec) {
      float4* o = reinterpret_cast<float4*>(out + v * vstride);
      o[0] = make_float4(t[v][0], t[v][1], t[v][2], t[v][3]);
      o[1] = make_float4(t[v][4], t[v][5], t[v][6], t[v][7]);
    }
  }
}

// octet_terms for up to NV vectors, 2 at a time (the registers of 2 vectors' terms and scales live at once).
template <int NV>
__device__ __forceinline__ void octet_terms_all(const uint4 (&a)[kOctetLoads], const uint8_t* act, uint32_t act_vec,
                                                int n_vec, float* out, uint32_t vstride) {
  if constexpr (NV <= 2) {
    octet_terms<NV>(a, act, act_vec, n_vec, out, vstride);
  } else {
#pragma unroll 1
    for (int v0 = 0; v0 < n_vec; v0 += 2)
      octet_terms<2>(a, act + v0 * act_vec, act_vec, n_vec - v0, out + v0 * vstride, vstride);
  }
}

// kRampDirectQuant: rows x[v] (v < n_vec, nb blocks of 32 floats each) quantized straight into the per-octet
// layout at act (vector v at v·act_vec_bytes: block b's quants at octet b / 8, byte 32·(b % 8); its d at 256 +
// 4·(b % 8)) with quantize_q8_0_rows_warps' expressions (8 lanes a block, 4 values a lane; the amax a max from 0
// over the 4 values then xor-shuffles 4, 2, 1; d = amax / 127, 1/d, the same rounding) — its bits — but every
// load of a warp's ≤ kSteps four-block steps issued before the first shuffle (out_b's 8,192 values at one vector:
// one memory round trip a warp instead of two) and no raw rows, second pass or barrier between them.
template <int kSteps>
__device__ inline void quantize_to_octets(const float* x, int64_t x_stride, int n_vec, int nb, uint8_t* act,
                                          uint32_t act_vec_bytes) {
  const int lane = static_cast<int>(threadIdx.x % kWarp), sub = lane % 8;
  const uint32_t warp = threadIdx.x / kWarp, step = 4u * (kThreads / kWarp);
  const uint32_t total = static_cast<uint32_t>(n_vec) * static_cast<uint32_t>(nb), unb = static_cast<uint32_t>(nb);
  for (uint32_t base = 4u * warp; base < total; base += step * kSteps) {
    float vals[kSteps][4];
#pragma unroll
    for (int u = 0; u < kSteps; ++u) {
      const uint32_t q = base + step * u + static_cast<uint32_t>(lane / 8);
      const bool live = q < total;
      const uint32_t v = live ? q / unb : 0, b = live ? q - v * unb : 0;
      const float* src = x + static_cast<int64_t>(v) * x_stride + b * kQK8_0 + 4 * sub;
#pragma unroll
      for (int i = 0; i < 4; ++i) vals[u][i] = live ? src[i] : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kSteps; ++u) {
      const uint32_t q0 = base + step * u;
      if (q0 >= total) break;  // uniform over the warp: no step left
      const uint32_t q = q0 + static_cast<uint32_t>(lane / 8);
      const bool live = q < total;
      float amax = 0;
#pragma unroll
      for (int i = 0; i < 4; ++i) amax = fmaxf(amax, fabsf(vals[u][i]));
      for (int o = 4; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
      if (!live) continue;
      const float d = amax / 127.0f;
      const float id = d != 0 ? 1.0f / d : 0.0f;
      const uint32_t v = q / unb, b = q - v * unb;
      uint8_t* o = act + v * act_vec_bytes + (b / kOctetBlocks) * kActOctet;
      const uint32_t bi = b % kOctetBlocks;
      if (sub == 0) *reinterpret_cast<float*>(o + 256 + 4 * bi) = d;
      uint32_t packed = 0;
#pragma unroll
      for (int i = 0; i < 4; ++i)
        packed |= static_cast<uint32_t>(static_cast<uint8_t>(
                      static_cast<int8_t>(clamp_int_dev(nearest_int_dev(vals[u][i] * id), -128, 127))))
                  << (8 * i);
      *reinterpret_cast<uint32_t*>(o + 32 * bi + 4 * sub) = packed;
    }
  }
}

// NV: the most vectors of the instantiation (p.n_vec ≤ NV). One block: a contiguous row range of one part.
// kSlots: 0 the register path; kRingSlots the ring of kRampRowsRing, 1 the half-SM ring of kRampRowsHalf (two
// blocks an SM fit: ≤ 128 registers) — kNoL1 unused with a ring: the copies are L2-only.
// kBulk (kRampRowsBulk, the half kernel only): each warp's slice of the ring slot filled by bulk_slice on the warp's
// mbarrier instead of 17 cp.async copies a thread.
template <int NV, bool kNoL1, int kSlots = 0, bool kBulk = false>
__global__ void __launch_bounds__(kThreads, kSlots == 1 ? 2 : 1) gemv_rows_kernel(const __grid_constant__ RowsParams p) {
  constexpr bool kRing = kSlots > 0;
  extern __shared__ __align__(16) uint8_t sm[];
  const DenseRange range = dense_block_range(p.part, p.n_parts);
  const DensePart& P = *range.part;
  const int64_t rb = range.rb;
  const int rows = static_cast<int>(range.rows);
  const int R = p.tile_rows, C = p.chunk_oct, chunks = p.octets / C;
  const int tiles = (rows + R - 1) / R * chunks;  // tile k: row group k / chunks, column chunk k % chunks
  // Thread t < R·C owns octet o of row r of every tile (octet c·C + o of the row in chunk c).
  const uint32_t t = threadIdx.x;
  const bool worker = t < static_cast<uint32_t>(R * C);
  const int r = static_cast<int>(t) / C, o = static_cast<int>(t) - r * C;  // once per thread: no magic needed
  const uint8_t* wb = P.w + static_cast<uint64_t>(rb) * p.row_bytes;
  uint8_t* stage = sm + p.stage_off + (t / kWarp) * (kWarp * 272u);

  uint4 a[kOctetLoads], ch[kRing ? 1 : kOctetLoads];
  uint64_t* wbar = reinterpret_cast<uint64_t*>(sm + p.bar_off) + t / kWarp;  // kBulk: the warp's barrier
  if constexpr (kBulk) {
    if (t % kWarp == 0) mbar_init(wbar);
    __syncwarp();
  }
  // Ring: tile k's copies into slot k % kSlots (the warp's slice of it at `stage`); take(k) waits for them,
  // moves this thread's octet into `a`, and refills the slot with tile k + kSlots. Groups: one per tile, in
  // tile order (empty past the last), so at take(k) k + kSlots are committed and waiting until at most
  // kSlots − 1 are pending leaves tile k's done.
  auto ring_copy = [&](int k) {
    if constexpr (kBulk) {
      if (k < tiles) {
        const int g = k / chunks;
        fence_proxy_async_shared();  // this warp's reads of the slice (generic proxy) before the copies overwrite it
        bulk_slice(stage, wb, p.row_bytes, g * R, rows, C, k - g * chunks, wbar);
      }
      return;
    }
    if (k < tiles) {
      const int g = k / chunks;
      copy_chunks(stage + (k % (kRing ? kSlots : 1)) * kStageBytes, wb, p.row_bytes, g * R, rows, C, k - g * chunks);
    }
    cp_async_commit();
  };
  auto take = [&](int k) {
    if constexpr (kBulk)
      mbar_wait(wbar, static_cast<uint32_t>(k) & 1u);  // fill k of the one slot: phase k
    else
      cp_async_wait<(kRing ? kSlots : 1) - 1>();
    __syncwarp();  // every lane's copies of the warp's slice have landed
    const uint8_t* slot = stage + (k % (kRing ? kSlots : 1)) * kStageBytes;
#pragma unroll
    for (int j = 0; j < kOctetLoads; ++j) a[j] = reinterpret_cast<const uint4*>(slot + 272 * (t % kWarp))[j];
    __syncwarp();  // every lane has read its octet: the slot may be refilled
    ring_copy(k + kSlots);
  };
  // Tile 0's weights first: they do not depend on the kernel before this one (PDL: it may still run).
  if constexpr (kRing) {
    for (int s = 0; s < kSlots; ++s) ring_copy(s);
  } else {
    load_chunks<kNoL1>(ch, wb, p.row_bytes, 0, rows, C, 0);
  }
  // kRampRowsTwoTiles: tile 0 into the octet registers now (waiting for its bytes) and tile 1's loads in flight,
  // so that two tiles move while the kernel before may still run; the loop below then starts at tile 1's.
  const bool two = (p.ramp & kRampRowsTwoTiles) != 0 && tiles > 1;
  if (two) {
    if constexpr (kRing) {
      take(0);
    } else {
      chunks_to_octet(ch, a, stage);
      load_chunks<kNoL1>(ch, wb, p.row_bytes, chunks == 1 ? R : 0, rows, C, chunks == 1 ? 0 : 1);
    }
  }
  grid_launch_dependents();
  grid_dependency_wait();  // the activations (and y, which the kernel before may read) from here on

  // Activations into the per-octet layout: from the pre-quantized rows, or quantized here into the
  // term buffers' space first (BlockQ8_0Act rows), then rearranged.
  const uint32_t act_row = static_cast<uint32_t>(p.nb) * sizeof(BlockQ8_0Act);
  const uint8_t* raw = P.act;
  uint64_t raw_vec = p.act_vec;
  if (!raw && (p.ramp & kRampDirectQuant) != 0) {
    // (kSlots 1: four steps in flight, not eight — tile 0's octet is in `a` under 128 registers; the same bits.)
    quantize_to_octets<kSlots == 1 ? 4 : 8>(P.x, p.x_stride, p.n_vec, p.nb, sm, p.act_vec_bytes);
  } else if (!raw) {
    quantize_q8_0_rows_to_smem(P.x, p.x_stride, p.n_vec, int64_t{p.nb} * kQK8_0, sm + p.terms_off, act_row);
    raw = sm + p.terms_off;
    raw_vec = act_row;
  }
  if (raw) {
    const uint32_t per_vec = static_cast<uint32_t>(p.nb) * 9u;  // 9 words per block: d, then 8 quant words
    for (uint32_t i = t; i < static_cast<uint32_t>(p.n_vec) * per_vec; i += kThreads) {
      const uint32_t v = i / per_vec, k = i - v * per_vec, blk = k / 9u, m = k - blk * 9u;
      const uint32_t val = *reinterpret_cast<const uint32_t*>(raw + v * raw_vec + blk * sizeof(BlockQ8_0Act) + 4u * m);
      const uint32_t oct = blk / kOctetBlocks, bi = blk % kOctetBlocks;
      const uint32_t dst = v * p.act_vec_bytes + oct * kActOctet + (m == 0 ? 256u + 4u * bi : 32u * bi + 4u * (m - 1));
      *reinterpret_cast<uint32_t*>(sm + dst) = val;
    }
  }
  __syncthreads();

  float* terms = reinterpret_cast<float*>(sm + p.terms_off);
  const uint32_t vstride = static_cast<uint32_t>(R) * p.term_pitch;
  float* my_terms = terms + r * p.term_pitch + o * kOctetBlocks;
  // One tile: its terms into buffer `buf`, a barrier, then the chains of (vector, row) by the first
  // R·n_vec threads, each carrying its row's sum across the row group's chunks in `acc` (the host keeps
  // R·n_vec ≤ kThreads when chunks > 1): the same additions in the same order as one chain over the row.
  // With two buffers the next tile's terms go to the other one, so one barrier per tile suffices: a chain
  // reading buffer k % 2 finishes before its thread reaches the barrier after which tile k + 2's terms
  // overwrite it. With one (two do not fit), a barrier before each write.
  float acc = 0.0f;
  for (int k = 0; k < tiles; ++k) {
    const int g = k / chunks, c = k - g * chunks;
    if constexpr (kRing) {
      if (!(two && k == 0)) take(k);  // (two: tile 0 is in `a` already)
    } else {
      if (!(two && k == 0)) {         // (two: tile 0 is in `a` and tile 1's loads in flight already)
        chunks_to_octet(ch, a, stage);  // tile k's chunks (waits for their loads) into this thread's octet
      }
      if (k + 1 < tiles && !(two && k == 0)) {  // tile k + 1's loads in flight while tile k is computed
        const int g1 = (k + 1) / chunks;
        load_chunks<kNoL1>(ch, wb, p.row_bytes, g1 * R, rows, C, k + 1 - g1 * chunks);
      }
    }
    const uint32_t off = p.two_buffers ? (k & 1) * p.buf_floats : 0u;
    float* buf = terms + off;
    if (!p.two_buffers && k > 0) __syncthreads();  // one buffer: tile k − 1's chains are done with it
    if (worker)
      octet_terms_all<NV>(a, sm + static_cast<uint32_t>(c * C + o) * kActOctet, p.act_vec_bytes, p.n_vec,
                          my_terms + off, vstride);
    __syncthreads();
    const int r0 = g * R;
    for (int q = static_cast<int>(t); q < R * p.n_vec; q += kThreads) {
      const int v = q / R, cr = q - v * R;
      if (r0 + cr < rows) {
        acc = dense_row_sum(buf + (v * R + cr) * p.term_pitch, C * kOctetBlocks, c == 0 ? 0.0f : acc);
        if (c == chunks - 1) P.y[v * P.y_stride + rb + r0 + cr] = acc;
      }
    }
  }
  if constexpr (kRing && !kBulk) cp_async_wait<0>();  // nothing in flight at exit (the trailing groups are empty)
  // (kBulk: every fill was waited for by take(); none is issued past the last tile.)
}

// Tile rows and shared memory for n_vec vectors of nb blocks; smem = 0 when it does not fit.
struct RowsPlan {
  int octets = 0, chunk_oct = 0, tile_rows = 0, two_buffers = 0;
  uint32_t act_vec_bytes = 0, terms_off = 0, term_pitch = 0, buf_floats = 0, stage_off = 0;
  uint64_t smem = 0;
};

// slots: whole-tile staging slots (1: the register path's one area; kRingSlots: the ring) under max_smem.
// wide: the column chunk of wide rows in octets (8; 16: kRampHalfRows16's 16-row tiles).
RowsPlan plan_rows(int64_t nb, int64_t n_vec, int slots = 1, uint64_t max_smem = kMaxSmem, int wide = 8) {
  RowsPlan d;
  if (nb % kOctetBlocks != 0 || nb / kOctetBlocks > kThreads || n_vec < 1 || n_vec > kRowsMaxVec) return d;
  d.octets = static_cast<int>(nb / kOctetBlocks);
  // Wide rows (O a multiple of 8 above 8: 4096 and 8192 columns) as column chunks of 8 octets (64 blocks):
  // 32-row tiles whose chains are 64 adds long instead of 128–256 (a chain is serial, and the next tile
  // waits for it), if the chain threads stay one per (row, vector). (wide 16: 16-row tiles, chains 128 adds.)
  const bool chunked = d.octets > wide && d.octets % wide == 0 && (kThreads / wide) * n_vec <= kThreads;
  d.chunk_oct = chunked ? wide : d.octets;
  d.tile_rows = kThreads / d.chunk_oct;
  d.act_vec_bytes = static_cast<uint32_t>(d.octets) * kActOctet;
  d.terms_off = static_cast<uint32_t>(n_vec) * d.act_vec_bytes;
  d.term_pitch = static_cast<uint32_t>(d.chunk_oct * kOctetBlocks + 4);
  d.buf_floats = static_cast<uint32_t>(n_vec * d.tile_rows) * d.term_pitch;
  const uint64_t raw = static_cast<uint64_t>(n_vec * nb) * sizeof(BlockQ8_0Act);  // fused quantization's rows
  for (int bufs = 2; bufs >= 1; --bufs) {
    const uint64_t stage = d.terms_off + std::max<uint64_t>(uint64_t{d.buf_floats} * bufs * sizeof(float), raw);
    if (stage + uint64_t{kStageBytes} * slots <= max_smem) {  // the warps' staging areas (or ring slots)
      d.two_buffers = bufs == 2;
      d.stage_off = static_cast<uint32_t>(stage);
      d.smem = stage + uint64_t{kStageBytes} * slots;
      return d;
    }
  }
  d.smem = 0;
  return d;
}

constexpr int kRowsKernels = 4;  // instantiations per load kind: NV = 1, 2, 4, 8
int rows_index(int64_t n) { return n <= 1 ? 0 : n <= 2 ? 1 : n <= 4 ? 2 : 3; }

// The ring's instantiations (kRampRowsRing), by rows_index.
const void* ring_kernel(int index) {
  switch (index) {
    case 0: return reinterpret_cast<const void*>(gemv_rows_kernel<1, false, kRingSlots>);
    case 1: return reinterpret_cast<const void*>(gemv_rows_kernel<2, false, kRingSlots>);
    case 2: return reinterpret_cast<const void*>(gemv_rows_kernel<4, false, kRingSlots>);
    default: return reinterpret_cast<const void*>(gemv_rows_kernel<8, false, kRingSlots>);
  }
}
// kRampRowsHalf's one instantiation (one vector).
const void* half_kernel(bool bulk) {
  return bulk ? reinterpret_cast<const void*>(gemv_rows_kernel<1, false, 1, true>)
              : reinterpret_cast<const void*>(gemv_rows_kernel<1, false, 1>);
}

const void* rows_kernel(int index) {  // index + kRowsKernels: the no-L1 loads
  switch (index) {
    case 0: return reinterpret_cast<const void*>(gemv_rows_kernel<1, false>);
    case 1: return reinterpret_cast<const void*>(gemv_rows_kernel<2, false>);
    case 2: return reinterpret_cast<const void*>(gemv_rows_kernel<4, false>);
    case 3: return reinterpret_cast<const void*>(gemv_rows_kernel<8, false>);
    case 4: return reinterpret_cast<const void*>(gemv_rows_kernel<1, true>);
    case 5: return reinterpret_cast<const void*>(gemv_rows_kernel<2, true>);
    case 6: return reinterpret_cast<const void*>(gemv_rows_kernel<4, true>);
    default: return reinterpret_cast<const void*>(gemv_rows_kernel<8, true>);
  }
}

}  // namespace

bool gemv_rows_supports(const GemvJob& j) {
  return j.n_vec <= kRowsMaxVec && gemv_stream_supports(j) && plan_rows(j.w.cols / kQK8_0, j.n_vec).smem > 0;
}

// H200 run of 2026-11-30 13:00 (W2, docs/PERF.md "Dense decode matvecs with register-direct octets"; cold
// weights, graph µs per call, against the default dispatch of then — gemv_stream / gemv_mma / skinny):
// faster on the ≥ 32 MB matrices at 1 vector (q_b 13.97 vs 14.42, out_a 14.19 vs 15.49, out_b 16.28 vs
// 17.03, head 141.6 vs 160.0), at 2 on those of ≤ 4096 columns (q_b 15.89 vs 16.49, out_a 17.72 vs 18.92,
// head 167.5 vs 189.1; out_b 21.8 vs 19.8), at 4 on the head only (237.4 vs 253.3); slower at 8 where it
// fits (q_b 31.0 vs 28.2, shared down 16.0 vs 11.7) and on the small matrices (q_a 7.32 vs 4.20, kv 7.20 vs
// 4.80, gate/up 7.75 vs 5.71 at 1: their few rows per block still take two tiles, two memory latencies in
// a row); shared down a tie at 1.
bool gemv_rows_wins(const GemvJob& j) {
  const uint64_t bytes = static_cast<uint64_t>(j.w.rows) * j.w.row_bytes;  // every group of a grouped matrix
  constexpr uint64_t kBig = uint64_t{32} << 20;
  if (j.n_vec == 1) return bytes >= kBig;
  if (j.n_vec == 2) return bytes >= kBig && j.w.cols <= 4096;
  return j.n_vec <= 4 && j.w.rows >= 65536 && j.w.cols <= 4096;  // the head
}

bool CudaBackend::gemv_rows_set(const StreamSet& s, DeviceScratch& act_scratch) {
  if (s.n_parts < 1 || s.n_parts > kStreamMaxParts || s.n_vec < 1 || s.n_vec > kRowsMaxVec) return false;
  RowsPlan d = plan_rows(s.cols / kQK8_0, s.n_vec);
  if (d.smem == 0 || !stream_device_info()) return d.smem != 0;  // no plan: decline; no device info: error recorded
  if (d.smem > static_cast<uint64_t>(dense_smem_optin_)) return false;
  const int ramp = dense_ramp_bits(l2_prefetch_mode_);
  // kRampRowsRing (sm_90): the ring plan where it fits, else the register path with L1 loads. The ring's kernels
  // take the no-L1 kernels' smem flags: whether a launch asks for the ring depends only on the bits and n_vec,
  // so for one rows_index a backend launches either a ring kernel (or, not fitting, the L1 one) or a no-L1 one.
  // kRampRowsHalf (sm_90, one vector): the half kernel at two blocks an SM where each block keeps ≥ 7/8 of a tile's
  // rows (out_a: 31 of 32, the head) and its plan fits — with kRampHalfRows16 also out_b (15.5 rows of 32-row tiles)
  // as 16-row tiles of 16 octets —; else the register path with L1 loads — never the ring or the no-L1 kernel at one vector with the bit, so the half kernel takes the
  // no-L1 kernels' flag of index 0 as the ring does.
  int64_t total_rows = 0;
  for (int i = 0; i < s.n_parts; ++i) total_rows += s.part[i].rows;
  const bool half_bit = (ramp & kRampRowsHalf) != 0 && cc_major_ >= 9 && s.n_vec == 1;
  bool half_asked = half_bit && 8 * total_rows >= 7 * int64_t{d.tile_rows} * 2 * sm_count_;
  // kRampHalfRows16: where 32-row tiles of 8-octet chunks would run half empty, 16-row tiles of 16 octets if those
  // stay full (out_b: 4096 rows, 15.5 a block).
  int half_wide = 8;
  if (half_bit && !half_asked && (ramp & kRampHalfRows16) != 0 && d.chunk_oct == 8 && d.octets % 16 == 0 &&
      8 * total_rows >= 7 * int64_t{kThreads / 16} * 2 * sm_count_) {
    half_asked = true;
    half_wide = 16;
  }
  const bool ring_asked = !half_bit && (ramp & kRampRowsRing) != 0 && cc_major_ >= 9 &&
                          ((ramp & kRampRingFromTwoVectors) == 0 || s.n_vec >= 2);
  bool ring = false, half = false;
  if (half_asked) {
    const uint64_t bars = (ramp & kRampRowsBulk) != 0 ? kBulkBarBytes : 0;  // kRampRowsBulk: the warps' mbarriers
    const RowsPlan hd = plan_rows(s.cols / kQK8_0, s.n_vec, 1, kHalfMaxSmem - bars, half_wide);
    half = hd.smem != 0 && hd.smem <= static_cast<uint64_t>(dense_smem_optin_);
    if (half) d = hd;
  } else if (ring_asked) {
    const RowsPlan rd = plan_rows(s.cols / kQK8_0, s.n_vec, kRingSlots, kRingMaxSmem);
    ring = rd.smem != 0 && rd.smem <= static_cast<uint64_t>(dense_smem_optin_);
    if (ring) d = rd;
  }
  const bool no_l1_flag = ring || half || (gemv_rows_no_l1_ && !ring_asked && !half_bit);
  const int idx = rows_index(s.n_vec) + (no_l1_flag ? kRowsKernels : 0);
  const bool bulk = half && (ramp & kRampRowsBulk) != 0;
  if (bulk) d.smem += kBulkBarBytes;  // the warps' mbarriers after the ring slot (8-byte aligned: the slot's end)
  const void* kernel = half ? half_kernel(bulk) : ring ? ring_kernel(rows_index(s.n_vec)) : rows_kernel(idx);
  if (!dense_smem(kernel, &rows_smem_set_[idx], half ? kHalfMaxSmem : ring ? kRingMaxSmem : kMaxSmem,
                  "gemv_rows shared memory"))
    return true;
  // One resident block per SM (__launch_bounds__(256, 1): the octet, the next tile's chunks and the terms
  // take 210–230 registers a thread); the half kernel: two.
  int64_t blocks[kStreamMaxParts] = {};
  const int64_t total_blocks = deal_stream_blocks(s, (half ? 2 : 1) * int64_t{sm_count_}, blocks);

  RowsParams p{};
  p.n_parts = s.n_parts;
  p.n_vec = static_cast<int32_t>(s.n_vec);
  p.nb = static_cast<int32_t>(s.cols / kQK8_0);
  p.octets = d.octets;
  p.chunk_oct = d.chunk_oct;
  p.tile_rows = d.tile_rows;
  p.row_bytes = s.row_bytes;
  p.act_vec_bytes = d.act_vec_bytes;
  p.terms_off = d.terms_off;
  p.term_pitch = d.term_pitch;
  p.buf_floats = d.buf_floats;
  p.two_buffers = d.two_buffers;
  p.stage_off = d.stage_off;
  p.bar_off = static_cast<uint32_t>(d.smem - kBulkBarBytes);  // (read only by the bulk kernel)
  p.x_stride = s.x_stride;
  // Two tiles before griddepcontrol.wait only where the launch is a programmatic dependent (dense_launch's rule):
  // elsewhere nothing runs under them and tile 0's wait would only delay the activations.
  const bool two = gemv_stream_pdl_ && cc_major_ >= 9 && !on_side_ && (ramp & kRampRowsTwoTiles) != 0 &&
                   ((ramp & kRampTwoTilesOneVector) == 0 || s.n_vec == 1);
  p.ramp = (ramp & kRampDirectQuant) | (two ? kRampRowsTwoTiles : 0);
  const int parts = fill_dense_parts(*this, s, blocks, kFusedMaxValues, act_scratch, p.part, &p.act_vec);
  if (parts < 0) return false;  // inputs one quantize_act cannot cover: other kernels
  if (parts == 0) return true;  // error recorded
  dense_launch(kernel, d.smem, total_blocks, kThreads, &p,
               half ? "gemv (q8_0 rows, half)" : ring ? "gemv (q8_0 rows, ring)" : "gemv (q8_0 rows)");
  return true;
}

}  // namespace ds4::backend::cuda
