// gemv_rows.cu — dense Q8_0 matmuls of 1..kRowsMaxVec (4) vectors with the weights loaded straight into
// registers: each thread owns one 8-block "octet" of a row (272 bytes = 17 aligned 16-byte loads), a tile
// is R rows × O octets (R·O ≤ 256 threads), and the next tile's 17 loads are in flight while the current
// one is computed. Same parts as gemv_stream.cu (one matrix, the groups of out_a, matmul_many's matrices
// sharing an input: a StreamSet) and the same numerics: each block's ds4 term (f16(d_w)·d_x)·Σ q_w q_x
// (dense_block_terms' expression), then a chain per (row, vector) from 0.0f in block order
// (dense_row_sum) — the CPU's bits.
//
// Why (docs/PERF.md, W3 ncu of gemv_stream's out_b): staging every byte in shared memory by cp.async
// and reading each block back as 9 words cost ~250 instructions per 34-byte block and 82 KB of shared
// memory per block (25 % occupancy): instruction and latency bound at ~2 TB/s. Here a block's quant
// words come from registers (odd blocks: 8 aligned words; even blocks: 8 byte permutes), the activation
// blocks from shared memory in a padded per-octet layout (two conflict-free 16-byte loads per block and
// vector), ~25 instructions per block; shared memory holds only the activations and two term buffers.
// The block terms go through shared memory because the chain of a row is serial across its octets (no
// reassociation is allowed): thread per (row, vector) adds a tile's row after one barrier, while the
// other warps go on with the next tile (two term buffers).
// Deliberately not here: choosing jobs (CudaBackend::gemv / gemv_stream_many, gemv_rows_wins), more
// than 4 vectors (gemv_stream.cu, gemv_mma.cu), other weight types.
#include <algorithm>

#include "backend/cuda/act_quant.cuh"
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_impl.h"
#include "backend/cuda/dense_q8.cuh"
#include "backend/cuda/mma_s8.cuh"

namespace ds4::backend::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kOctetBlocks = 8;          // Q8_0 blocks a thread owns: 272 bytes, 16-byte aligned in a row
constexpr int kOctetLoads = 17;          // 16-byte loads per octet
constexpr uint32_t kActOctet = 304;      // smem bytes per octet and vector: 8 × 32 quants, 8 d, 16 pad
constexpr uint64_t kMaxSmem = 160 * 1024;  // under sm_80's 163 KB opt-in (CI builds compute_80 too)
constexpr int64_t kFusedMaxValues = 8192;  // n·cols above this: one quantize_act first (as gemv_stream.cu)

struct RowsPart {
  const uint8_t* w;    // Q8_0 [rows][row_bytes], 16-byte aligned
  const float* x;      // fused quantization: vector v at x + v·x_stride
  const uint8_t* act;  // or pre-quantized: vector v at act + v·act_vec (BlockQ8_0Act)
  float* y;            // [n_vec][y_stride]
  int64_t y_stride;
  int32_t rows;
  int32_t block0;      // the part's first block (its blocks run to the next part's block0 or the grid's end)
};

struct RowsParams {
  RowsPart part[kStreamMaxParts];
  int32_t n_parts, n_vec;
  int32_t nb;          // blocks per row (8·O)
  int32_t octets;      // O
  int32_t tile_rows;   // R (R·O ≤ kThreads)
  uint32_t oct_magic;  // dense_div_magic(O)
  uint64_t row_bytes;
  uint32_t act_vec_bytes;  // smem: O · kActOctet per vector
  uint32_t terms_off;      // smem: two buffers of [n_vec][R][term_pitch] floats (the raw activations before them)
  uint32_t term_pitch;     // nb + 4: 16-byte aligned rows, 4 banks apart
  uint32_t buf_floats;     // n_vec · R · term_pitch
  int64_t x_stride;
  uint64_t act_vec;
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

template <bool kNoL1>
__device__ __forceinline__ void load_octet(uint4 (&a)[kOctetLoads], const uint8_t* p, bool live) {
  if (live) {
#pragma unroll
    for (int k = 0; k < kOctetLoads; ++k) a[k] = load_w<kNoL1>(p + 16 * k);
  }
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

// NV: the most vectors of the instantiation (p.n_vec ≤ NV). One block: a contiguous row range of one part.
template <int NV, bool kNoL1>
__global__ void __launch_bounds__(kThreads, 1) gemv_rows_kernel(const __grid_constant__ RowsParams p) {
  extern __shared__ __align__(16) uint8_t sm[];
  int pi = 0;
  while (pi + 1 < p.n_parts && static_cast<int32_t>(blockIdx.x) >= p.part[pi + 1].block0) ++pi;
  const RowsPart& P = p.part[pi];
  const int32_t blocks = (pi + 1 < p.n_parts ? p.part[pi + 1].block0 : static_cast<int32_t>(gridDim.x)) - P.block0;
  const int32_t lb = static_cast<int32_t>(blockIdx.x) - P.block0;
  const int64_t rb = int64_t{P.rows} * lb / blocks, re = int64_t{P.rows} * (lb + 1) / blocks;
  const int rows = static_cast<int>(re - rb);
  const int R = p.tile_rows, O = p.octets;
  const int tiles = (rows + R - 1) / R;
  // Thread t < R·O owns octet o of row r of every tile (the same octet, so the same activation blocks).
  const uint32_t t = threadIdx.x;
  const bool worker = t < static_cast<uint32_t>(R * O);
  const int r = static_cast<int>(__umulhi(t, p.oct_magic)), o = static_cast<int>(t) - r * O;  // t / O, t % O
  const uint8_t* wrow = P.w + static_cast<uint64_t>(rb + r) * p.row_bytes + static_cast<uint64_t>(o) * 272u;
  const uint64_t tile_bytes = static_cast<uint64_t>(R) * p.row_bytes;

  uint4 a[kOctetLoads], b[kOctetLoads];
  // Tile 0's weights first: they do not depend on the kernel before this one (PDL: it may still run).
  load_octet<kNoL1>(a, wrow, worker && r < rows);
  grid_launch_dependents();
  grid_dependency_wait();  // the activations (and y, which the kernel before may read) from here on

  // Activations into the per-octet layout: from the pre-quantized rows, or quantized here into the
  // term buffers' space first (BlockQ8_0Act rows), then rearranged.
  const uint32_t act_row = static_cast<uint32_t>(p.nb) * sizeof(BlockQ8_0Act);
  const uint8_t* raw = P.act;
  uint64_t raw_vec = p.act_vec;
  if (!raw) {
    quantize_q8_0_rows_to_smem(P.x, p.x_stride, p.n_vec, int64_t{p.nb} * kQK8_0, sm + p.terms_off, act_row);
    raw = sm + p.terms_off;
    raw_vec = act_row;
  }
  {
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

  const uint8_t* act = sm + static_cast<uint32_t>(o) * kActOctet;
  float* terms = reinterpret_cast<float*>(sm + p.terms_off);
  const uint32_t vstride = static_cast<uint32_t>(R) * p.term_pitch;
  float* my_terms = terms + r * p.term_pitch + o * kOctetBlocks;
  // One tile: its terms into buffer `buf`, a barrier, then the chains of (vector, row) by the first
  // R·n_vec threads. The next tile's terms go to the other buffer, so one barrier per tile suffices: a
  // chain reading buffer k % 2 finishes before its thread reaches the barrier after which tile k + 2's
  // terms overwrite it.
  auto tile = [&](const uint4 (&w)[kOctetLoads], int k) {
    float* buf = terms + (k & 1) * p.buf_floats;
    if (worker) octet_terms<NV>(w, act, p.act_vec_bytes, p.n_vec, my_terms + (k & 1) * p.buf_floats, vstride);
    __syncthreads();
    const int r0 = k * R;
    for (int c = static_cast<int>(t); c < R * p.n_vec; c += kThreads) {
      const int v = c / R, cr = c - v * R;
      if (r0 + cr < rows)
        P.y[v * P.y_stride + rb + r0 + cr] = dense_row_sum(buf + (v * R + cr) * p.term_pitch, p.nb);
    }
  };
  for (int k = 0; k < tiles; k += 2) {
    load_octet<kNoL1>(b, wrow + (k + 1) * tile_bytes, worker && k + 1 < tiles && (k + 1) * R + r < rows);
    tile(a, k);
    if (k + 1 >= tiles) break;
    load_octet<kNoL1>(a, wrow + (k + 2) * tile_bytes, worker && k + 2 < tiles && (k + 2) * R + r < rows);
    tile(b, k + 1);
  }
}

// Tile rows and shared memory for n_vec vectors of nb blocks; smem = 0 when it does not fit.
struct RowsPlan {
  int octets = 0, tile_rows = 0;
  uint32_t act_vec_bytes = 0, terms_off = 0, term_pitch = 0, buf_floats = 0;
  uint64_t smem = 0;
};

RowsPlan plan_rows(int64_t nb, int64_t n_vec) {
  RowsPlan d;
  if (nb % kOctetBlocks != 0 || nb / kOctetBlocks > kThreads || n_vec < 1 || n_vec > kRowsMaxVec) return d;
  d.octets = static_cast<int>(nb / kOctetBlocks);
  d.tile_rows = kThreads / d.octets;
  d.act_vec_bytes = static_cast<uint32_t>(d.octets) * kActOctet;
  d.terms_off = static_cast<uint32_t>(n_vec) * d.act_vec_bytes;
  d.term_pitch = static_cast<uint32_t>(nb + 4);
  d.buf_floats = static_cast<uint32_t>(n_vec * d.tile_rows) * d.term_pitch;
  const uint64_t terms = 2ull * d.buf_floats * sizeof(float);
  const uint64_t raw = static_cast<uint64_t>(n_vec * nb) * sizeof(BlockQ8_0Act);  // fused quantization's rows
  const uint64_t smem = d.terms_off + std::max(terms, raw);
  d.smem = smem <= kMaxSmem ? smem : 0;
  return d;
}

int rows_index(int64_t n) { return n <= 1 ? 0 : n <= 2 ? 1 : 2; }

const void* rows_kernel(int index, bool no_l1) {
  switch (index + (no_l1 ? 3 : 0)) {
    case 0: return reinterpret_cast<const void*>(gemv_rows_kernel<1, false>);
    case 1: return reinterpret_cast<const void*>(gemv_rows_kernel<2, false>);
    case 2: return reinterpret_cast<const void*>(gemv_rows_kernel<4, false>);
    case 3: return reinterpret_cast<const void*>(gemv_rows_kernel<1, true>);
    case 4: return reinterpret_cast<const void*>(gemv_rows_kernel<2, true>);
    default: return reinterpret_cast<const void*>(gemv_rows_kernel<4, true>);
  }
}

}  // namespace

bool gemv_rows_supports(const GemvJob& j) {
  return j.n_vec <= kRowsMaxVec && gemv_stream_supports(j) && plan_rows(j.w.cols / kQK8_0, j.n_vec).smem > 0;
}

// Not measured yet: wins nowhere until a device run shows where it is faster (CudaBackendOptions::gemv_rows).
bool gemv_rows_wins(const GemvJob& j) {
  (void)j;
  return false;
}

bool CudaBackend::gemv_rows_set(const StreamSet& s, DeviceScratch& act_scratch) {
  if (s.n_parts < 1 || s.n_parts > kStreamMaxParts || s.n_vec < 1 || s.n_vec > kRowsMaxVec) return false;
  const RowsPlan d = plan_rows(s.cols / kQK8_0, s.n_vec);
  if (d.smem == 0 || !stream_device_info()) return d.smem != 0;  // no plan: decline; no device info: error recorded
  if (d.smem > static_cast<uint64_t>(dense_smem_optin_)) return false;
  const int idx = rows_index(s.n_vec) + (gemv_rows_no_l1_ ? 3 : 0);
  if (!rows_smem_set_[idx]) {  // first use (eager: a recorded step always ran once before)
    if (!check(cudaFuncSetAttribute(rows_kernel(idx % 3, idx >= 3), cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(std::min<uint64_t>(kMaxSmem, dense_smem_optin_))),
               "gemv_rows shared memory"))
      return true;
    rows_smem_set_[idx] = true;
  }
  // One resident block per SM (__launch_bounds__(256, 1): the two register tiles take ~170 registers).
  int64_t blocks[kStreamMaxParts] = {};
  const int64_t total_blocks = deal_stream_blocks(s, sm_count_, blocks);

  RowsParams p{};
  p.n_parts = s.n_parts;
  p.n_vec = static_cast<int32_t>(s.n_vec);
  p.nb = static_cast<int32_t>(s.cols / kQK8_0);
  p.octets = d.octets;
  p.tile_rows = d.tile_rows;
  p.oct_magic = dense_div_magic(static_cast<uint64_t>(d.octets));
  p.row_bytes = s.row_bytes;
  p.act_vec_bytes = d.act_vec_bytes;
  p.terms_off = d.terms_off;
  p.term_pitch = d.term_pitch;
  p.buf_floats = d.buf_floats;
  p.x_stride = s.x_stride;
  int64_t b = 0;
  for (int i = 0; i < s.n_parts; ++i) {
    RowsPart& q = p.part[i];
    q.w = s.part[i].w;
    q.x = s.part[i].x;
    q.y = s.part[i].y;
    q.y_stride = s.part[i].y_stride;
    q.rows = static_cast<int32_t>(s.part[i].rows);
    q.block0 = static_cast<int32_t>(b);
    b += blocks[i];
  }
  if (s.n_vec * s.cols > kFusedMaxValues) {
    const uint8_t* acts[kStreamMaxParts] = {};
    const int got = stream_quantize_parts(s, act_scratch, &p.act_vec, acts);
    if (got < 0) return false;  // inputs the one quantize_act cannot cover: other kernels
    if (got == 0) return true;  // error recorded
    for (int i = 0; i < s.n_parts; ++i) p.part[i].act = acts[i];
  }
  const bool pdl = gemv_stream_pdl_ && cc_major_ >= 9 && !on_side_;
  const dim3 grid(static_cast<unsigned>(total_blocks));
  cudaError_t e = cudaSuccess;
  switch (idx) {
    case 0: e = launch_dependent(pdl, grid, dim3(kThreads), d.smem, stream(), gemv_rows_kernel<1, false>, p); break;
    case 1: e = launch_dependent(pdl, grid, dim3(kThreads), d.smem, stream(), gemv_rows_kernel<2, false>, p); break;
    case 2: e = launch_dependent(pdl, grid, dim3(kThreads), d.smem, stream(), gemv_rows_kernel<4, false>, p); break;
    case 3: e = launch_dependent(pdl, grid, dim3(kThreads), d.smem, stream(), gemv_rows_kernel<1, true>, p); break;
    case 4: e = launch_dependent(pdl, grid, dim3(kThreads), d.smem, stream(), gemv_rows_kernel<2, true>, p); break;
    default: e = launch_dependent(pdl, grid, dim3(kThreads), d.smem, stream(), gemv_rows_kernel<4, true>, p); break;
  }
  check(e, "gemv (q8_0 rows)");
  return true;
}

}  // namespace ds4::backend::cuda
