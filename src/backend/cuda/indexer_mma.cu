// indexer_mma.cu — the lightning indexer's scores of a prefill chunk (MODEL.md §7.5: score[c] =
// Σ_h w_h·max(0, q_h·k_c) over 64 heads × 128 dims) on int8 tensor cores, bit for bit the CPU's
// (CudaBackendOptions::indexer_mma).
// The CPU adds each head's 128 products sequentially in float. The indexer's operands are FP4 round trips
// (§5.5: e2m1 codes times a power of two per 32 values), so a q head or a row is usually c·2^e exactly,
// with integer codes |c| ≤ 127 under one exponent e for all its 128 values. When both sides are, every
// product is (c_q·c_k)·2^(e_q + e_k) exactly and every partial sum of the CPU's chain is an integer below
// 2^21 times 2^(e_q + e_k) (exponents kept within [−63, 50]: no underflow, no overflow) — so each of the
// CPU's additions is exact, its dot is the exact integer dot times the two scales, and so is ours: one
// int8 MMA chain (m16n8k32, k = 128) per (16 heads, 8 rows) and two exact multiplications. A q head or
// row that does not decompose (other data, non-finite values, denormals, a spread of more than 7 bits)
// gets a NaN scale, which makes its dots NaN, and those dots are computed as the CPU's sequential chain
// instead. The head sum Σ_h w_h·max(0, dot_h) runs in head order per (query, row), as on the CPU.
// Kernels: indexer_q_codes_kernel (a warp per q head: codes and scale into scratch), then
// indexer_score_mma_kernel: block = (64 rows, 4 queries), 8 warps; the block decomposes its rows into
// shared memory (rows past every query's count are not read), stages the queries' codes by cp.async,
// warp w takes rows 8w … 8w + 7 (its B fragments stay in registers) and for each query and 16-head tile
// forms the integer dots, turns them into w_h·max(0, dot) terms in shared memory and, two queries at a
// time, adds each row's terms in head order (16 lanes, one row each).
// Deliberately not here: decode steps (ops_indexer.cu's decode kernels), the selection (ops_indexer.cu).
#include <cmath>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_impl.h"
#include "backend/cuda/mma_s8.cuh"

namespace ds4::backend::cuda {

namespace {

constexpr int kHD = 128;          // head_dim this path takes
constexpr int kMaxHeads = 64;
constexpr int kRT = 64;           // rows per block: 8 warps × one 8-row n-tile
constexpr int kQT = 4;            // queries per block
constexpr int kQG = 2;            // queries whose head sums a warp runs together (16 lanes, a row each)
constexpr int kCodePitch = 144;   // bytes per staged code vector: 8 ldmatrix rows 16 bytes apart mod 128
constexpr int kYPitch = 68;       // floats per (query, row) of head terms (float4 reads conflict-free)
constexpr int kThreadsMma = 256;

constexpr size_t kSmemQc = static_cast<size_t>(kQT) * kMaxHeads * kCodePitch;
constexpr size_t kSmemSqw = static_cast<size_t>(kQT) * kMaxHeads * sizeof(float2);
constexpr size_t kSmemRc = static_cast<size_t>(kRT) * kCodePitch;
constexpr size_t kSmemSk = kRT * sizeof(float);
constexpr size_t kSmemY = static_cast<size_t>(kThreadsMma / kWarp) * kQG * 8 * kYPitch * sizeof(float);
constexpr size_t kSmemBytes = kSmemQc + kSmemSqw + kSmemRc + kSmemSk + kSmemY;
static_assert(kSmemQc % 16 == 0 && kSmemSqw % 16 == 0 && kSmemRc % 16 == 0 && kSmemSk % 16 == 0, "16-byte parts");

// One 128-value vector held by a warp (lane l: values 4l … 4l + 3) as codes·2^e: code4 the lane's four
// int8 codes (little-endian), scale = 2^e; scale = NaN when the vector does not decompose (a non-finite
// or denormal value, codes that would need more than 7 bits, e outside [−63, 50]); an all-zero vector
// gets codes 0 and scale 1.
__device__ inline void decompose(const float4 x, uint32_t& code4, float& scale) {
  const float v[4] = {x.x, x.y, x.z, x.w};
  int lo = 1 << 20, hi = -(1 << 20);  // lowest set bit's exponent, highest exponent, over nonzero values
  bool bad = false;
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const uint32_t u = __float_as_uint(v[e]);
    const int ef = static_cast<int>((u >> 23) & 0xffu);
    const uint32_t m = u & 0x7fffffu;
    if (ef == 0xff) {
      bad = true;
    } else if (ef == 0) {
      if (m != 0) bad = true;  // denormal
    } else {
      lo = min(lo, ef - 150 + __ffs(static_cast<int>(m | 0x800000u)) - 1);
      hi = max(hi, ef - 127);
    }
  }
  lo = __reduce_min_sync(0xffffffffu, lo);
  hi = __reduce_max_sync(0xffffffffu, hi);
  bad = __any_sync(0xffffffffu, bad) != 0;
  if (!bad && hi < -(1 << 19)) {  // every value ±0
    code4 = 0;
    scale = 1.0f;
    return;
  }
  if (bad || hi - lo > 6 || lo < -63 || lo > 50) {
    code4 = 0;
    scale = __uint_as_float(0x7fc00000u);
    return;
  }
  const float inv = __uint_as_float(static_cast<uint32_t>(127 - lo) << 23);  // 2^−lo: x·inv exact, |·| < 128
  uint32_t c = 0;
#pragma unroll
  for (int e = 0; e < 4; ++e) c |= (static_cast<uint32_t>(static_cast<int>(v[e] * inv)) & 0xffu) << (8 * e);
  code4 = c;
  scale = __uint_as_float(static_cast<uint32_t>(127 + lo) << 23);
}

// The CPU's dot: from 0, q[d]·k[d] added in d order (no contraction in this build).
__device__ inline float sequential_dot(const float* q, const float* k) {
  float dot = 0.0f;
  for (int d = 0; d < kHD; ++d) dot += q[d] * k[d];
  return dot;
}

// A warp per q head (query i, head h = vector v): codes [v][128] int8, scales [v].
__global__ void indexer_q_codes_kernel(const float* q, int64_t vectors, uint32_t* codes, float* scales) {
  const int64_t v = static_cast<int64_t>(blockIdx.x) * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (v >= vectors) return;  // the whole warp
  uint32_t c;
  float s;
  decompose(reinterpret_cast<const float4*>(q + v * kHD)[lane], c, s);
  codes[v * (kHD / 4) + lane] = c;
  if (lane == 0) scales[v] = s;
}

__device__ inline void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  const auto a = static_cast<uint32_t>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

__global__ void __launch_bounds__(kThreadsMma, 2) indexer_score_mma_kernel(IndexerArgs a, const uint8_t* qcodes,
                                                                         const float* qscales, float* scores,
                                                                         int64_t score_stride) {
  extern __shared__ uint4 smem_u4[];
  uint8_t* qc = reinterpret_cast<uint8_t*>(smem_u4);              // [kQT][kMaxHeads][kCodePitch]
  float2* sqw = reinterpret_cast<float2*>(qc + kSmemQc);          // [kQT][kMaxHeads] (scale, w)
  uint8_t* rc = reinterpret_cast<uint8_t*>(sqw + kQT * kMaxHeads);  // [kRT][kCodePitch]
  float* sk = reinterpret_cast<float*>(rc + kSmemRc);             // [kRT]
  float* ys = sk + kRT;                                           // [warps][kQG][8 rows][kYPitch]
  const int H = a.heads, MT = H / 16;
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * kRT, i0 = static_cast<int64_t>(blockIdx.y) * kQT;
  const int tid = threadIdx.x, lane = tid % kWarp, wid = tid / kWarp, g = lane >> 2, t = lane & 3;
  int32_t nq[kQT];  // rows each query scores (0: none — past the call, or at most top_k rows)
  int32_t nmax = 0;
#pragma unroll
  for (int q = 0; q < kQT; ++q) {
    const int32_t nr = i0 + q < a.n ? a.n_rows[i0 + q] : 0;
    nq[q] = nr > a.top_k ? nr : 0;
    nmax = max(nmax, nq[q]);
  }
  if (nmax <= c0) return;  // the same for the whole block

  for (int e = tid; e < kQT * H * (kHD / 16); e += kThreadsMma) {  // the live queries' codes, 16 bytes a copy
    const int q = e / (H * (kHD / 16)), r = e % (H * (kHD / 16)), h = r / (kHD / 16), part = r % (kHD / 16);
    if (nq[q] > c0)
      cp_async16(qc + (q * kMaxHeads + h) * kCodePitch + 16 * part, qcodes + ((i0 + q) * H + h) * kHD + 16 * part);
  }
  cp_async_commit();
  for (int e = tid; e < kQT * H; e += kThreadsMma) {
    const int q = e / H, h = e % H;
    sqw[q * kMaxHeads + h] = nq[q] > c0 ? make_float2(qscales[(i0 + q) * H + h], a.w[(i0 + q) * H + h]) : make_float2(0.0f, 0.0f);
  }
  for (int r = wid; r < kRT; r += kThreadsMma / kWarp) {  // rows a query reads exist; later ones are zeros
    const int64_t c = c0 + r;
    uint32_t code4 = 0;
    float s = 0.0f;
    if (c < nmax) decompose(reinterpret_cast<const float4*>(a.rows + c * kHD)[lane], code4, s);
    reinterpret_cast<uint32_t*>(rc + r * kCodePitch)[lane] = code4;
    if (lane == 0) sk[r] = s;
  }
  cp_async_wait<0>();
  __syncthreads();

  // B fragments of rows 8·wid + g (k-block kb: bytes 32kb + 4t … + 3 and + 16), the lane's row scales.
  const int rw0 = 8 * wid;
  uint32_t bf[kHD / 32][2];
#pragma unroll
  for (int kb = 0; kb < kHD / 32; ++kb) {
    const uint8_t* p = rc + (rw0 + g) * kCodePitch + 32 * kb + 4 * t;
    bf[kb][0] = *reinterpret_cast<const uint32_t*>(p);
    bf[kb][1] = *reinterpret_cast<const uint32_t*>(p + 16);
  }
  const float skr[2] = {sk[rw0 + 2 * t], sk[rw0 + 2 * t + 1]};
  float* yw = ys + wid * kQG * 8 * kYPitch;
  // ldmatrix rows of this lane: matrix j = lane / 8 (heads + 8·(j & 1), bytes + 16·(j >> 1)), row lane % 8.
  const int lm_row = lane % 8 + 8 * ((lane / 8) & 1), lm_col = 16 * (lane / 16);

  for (int q0 = 0; q0 < kQT; q0 += kQG) {
#pragma unroll
    for (int qq = 0; qq < kQG; ++qq) {
      const int q = q0 + qq;
      if (nq[q] <= c0 + rw0) continue;  // no row of this warp is visible to q (warp-uniform)
      const int64_t i = i0 + q;
      for (int mt = 0; mt < MT; ++mt) {
        int acc[4] = {0, 0, 0, 0};
        const uint8_t* abase = qc + (q * kMaxHeads + 16 * mt + lm_row) * kCodePitch + lm_col;
#pragma unroll
        for (int kb = 0; kb < kHD / 32; ++kb) {
          uint32_t af[4];
          ldmatrix_x4(af, abase + 32 * kb);
          mma_s8(acc, af, bf[kb]);
        }
#pragma unroll
        for (int e = 0; e < 4; ++e) {  // c0: (head g, row 2t), c1: (g, 2t + 1), c2: (g + 8, 2t), c3: (g + 8, 2t + 1)
          const int h = 16 * mt + g + 8 * (e >> 1), row = 2 * t + (e & 1);
          const float2 sw = sqw[q * kMaxHeads + h];
          float dot = small_i2f(acc[e]) * sw.x * skr[e & 1];
          const int64_t c = c0 + rw0 + row;
          if (dot != dot && c < nq[q]) dot = sequential_dot(a.q + (i * H + h) * kHD, a.rows + c * kHD);
          yw[(qq * 8 + row) * kYPitch + h] = sw.y * fmaxf(0.0f, dot);
        }
      }
    }
    __syncwarp();
    if (lane < kQG * 8) {  // lane = (query q0 + lane / 8, row lane % 8): Σ_h in head order, from 0
      const int q = q0 + lane / 8;
      const int64_t c = c0 + rw0 + lane % 8;
      if (c < nq[q]) {
        const float4* yr = reinterpret_cast<const float4*>(yw + lane * kYPitch);
        float sc = 0.0f;
        for (int h4 = 0; h4 < H / 4; ++h4) {
          const float4 y = yr[h4];
          sc = sc + y.x;
          sc = sc + y.y;
          sc = sc + y.z;
          sc = sc + y.w;
        }
        scores[(i0 + q) * score_stride + c] = sc;
      }
    }
    __syncwarp();
  }
}

}  // namespace

bool CudaBackend::indexer_scores_mma(const IndexerArgs& a, float* scores, int64_t score_stride, int64_t max_rows) {
  if (a.head_dim != kHD || a.heads % 16 != 0 || a.heads > kMaxHeads || a.rows_at || a.n < 2) return false;
  if ((reinterpret_cast<uintptr_t>(a.q) & 15) != 0 || (reinterpret_cast<uintptr_t>(a.rows) & 15) != 0) return false;
  const int64_t vectors = a.n * a.heads;
  if (!ensure(idx_codes_, static_cast<uint64_t>(vectors) * (kHD + sizeof(float)), "indexer codes")) return true;
  auto* codes = static_cast<uint32_t*>(idx_codes_.ptr);
  auto* qscales = reinterpret_cast<float*>(static_cast<uint8_t*>(idx_codes_.ptr) + vectors * kHD);
  cudaStream_t s = stream();
  indexer_q_codes_kernel<<<grid_for(vectors, kThreadsMma / kWarp), kThreadsMma, 0, s>>>(a.q, vectors, codes, qscales);
  if (!launched("indexer q codes")) return true;
  if (!check(cudaFuncSetAttribute(indexer_score_mma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(kSmemBytes)),
             "indexer mma smem"))
    return true;
  const dim3 grid(grid_for(max_rows, kRT), grid_for(a.n, kQT));
  indexer_score_mma_kernel<<<grid, kThreadsMma, kSmemBytes, s>>>(a, reinterpret_cast<const uint8_t*>(codes), qscales, scores,
                                                                 score_stride);
  launched("indexer scores (int8 mma)");
  return true;
}

}  // namespace ds4::backend::cuda
