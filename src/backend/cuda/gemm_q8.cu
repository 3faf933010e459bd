// gemm_q8.cu — the prefill GEMM for dense Q8_0 weights (attention projections, shared expert):
// Y[n][rows] = W[rows][cols] · X[n][cols] on int8 tensor cores with the weight fragments read straight
// from the copied Q8_0 blocks, so a stage needs no decode pass and no second barrier.
//
// Why a kernel of its own: ops_gemm.cu's gemm2_kernel decodes every stage's weights into an int8 tile
// (Q8_0: 34-byte blocks, the quants 2 bytes off a word) between two block barriers, so decode, copy
// issue and MMA run in turn inside a block at one block per SM. Here a Q8_0 block's quants are read
// where cp.async put them: odd blocks (34·sb + 2 ≡ 0 mod 4) with one 32-bit load per fragment word,
// even ones with two loads and a byte permute; scales (f16 d_w, f32 d_x) straight from the copied
// blocks. Stages of 256 values (8 blocks) go through a ring of 2 or 3, one barrier per stage.
//
// Numerics: those of ops_gemm.cu (bit-identical to the CPU op): each 32-value block's Σ q_w·q_x is one
// MMA k32 (int32, exact; the accumulator starts at 0x4B400000 so the result read as a float is
// 12582912 + isum exactly, |isum| ≤ 2^19), the term (d_w·d_x)·isum as dot_ref, added to the output's
// accumulator in block order (tests/cuda/test_cuda_gemm.cpp, with the previous kernels and the CPU).
//
// Launch shapes (Cfg; CudaBackendOptions::gemm_q8 picks one): warps of WM = 32 or 64 rows × 32 vectors
// (64: half the activation-fragment loads per MMA), tiles of 128 or 256 rows × 64 or 128 vectors, rings
// of 2 or 3 stages, one or two blocks per SM; up to 216 KiB of shared memory (sm_90's 227 KiB opt-in).
// Needs 16-byte aligned weights, activation rows and strides (gemm_q8_fits); cols a multiple of 256.
// Deliberately not here: K-quants and grouped experts (ops_gemm.cu), the dispatch (CudaBackend::gemm).
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_impl.h"
#include "backend/cuda/mma_s8.cuh"
#include "quant/blocks.h"

namespace ds4::backend::cuda {

namespace {

// Row pitches (bytes): 8 Q8_0 blocks = 272 B = 68 words (rows g = 0..7 of a fragment start at banks
// 4g: with t = 0..3 conflict-free); 8 act blocks = 288 B padded to 76 words (banks 12g + t: conflict-free).
constexpr int kPitchA = 8 * 34, kPitchB = 304;

// A launch shape: BM rows × BN vectors per block, warps of WM rows × 32 vectors, a ring of STAGES
// 256-value stages, MINB blocks per SM (the register cap that implies).
template <int WM_, int BM_, int BN_, int STAGES_, int MINB_>
struct Cfg {
  static constexpr int WM = WM_, BM = BM_, BN = BN_, STAGES = STAGES_, MINB = MINB_;
  static constexpr int THREADS = (BM / WM) * (BN / 32) * kWarp;
  static constexpr int STAGE_A = BM * kPitchA, STAGE_B = BN * kPitchB;
  static constexpr int SMEM = STAGES * (STAGE_A + STAGE_B);
};
// CudaBackendOptions::gemm_q8 = 1, 3, 4 (the shapes default_shape picks; 2, 8 warps of 64 × 32 on 128 × 128
// tiles, measured between 1 and 3 and never picked, is gone).
using Cfg1 = Cfg<32, 128, 128, 3, 1>;  // 16 warps, 221,184 B
using Cfg3 = Cfg<32, 128, 64, 2, 2>;   // 8 warps, 108,544 B: two blocks per SM
using Cfg4 = Cfg<64, 256, 128, 2, 1>;  // 16 warps, 217,088 B
constexpr int kMaxSmem = Cfg1::SMEM;
static_assert(Cfg3::SMEM <= kMaxSmem && Cfg4::SMEM <= kMaxSmem, "gemm_q8_fits checks the largest");
static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ8_0Act) == 36, "Q8_0 block layouts");

struct Q8Params {
  const uint8_t* w;
  uint64_t row_bytes;
  int64_t rows, cols;
  const uint8_t* act;  // Q8_0 act rows [n / x_div][act_stride bytes]
  uint64_t act_stride;
  int32_t x_div;       // vector v reads activation row v / x_div
  float* y;            // [n_vec][y_stride]
  int64_t y_stride, n_vec;
};

__device__ inline uint32_t lds32(const uint8_t* p) { return *reinterpret_cast<const uint32_t*>(p); }

// The 4 weight bytes at p (a Q8_0 quant offset in shared memory): p is 4-byte aligned in odd blocks;
// in even blocks p ≡ 2 (mod 4), so the words around it are joined (bytes 2, 3 of one, 0, 1 of the next).
template <bool kAligned>
__device__ inline uint32_t ld_quant4(const uint8_t* p) {
  if constexpr (kAligned) {
    return lds32(p);
  } else {
    return __byte_perm(lds32(p - 2), lds32(p + 2), 0x5432);
  }
}

// c = a·b + (0x4B400000, …): the int32 sum biased so that it reads as the float 12582912 + isum.
__device__ inline void mma_s8_biased(int (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};\n"
      : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(0x4B400000));
}

// One 32-value block sb of a stage for the warp's WM × 32 outputs: ra = the warp's row g in the stage's
// weight tile, rb = the stage's activation tile. The activation fragments and scales are loaded once
// for the warp's MI row fragments.
template <int WM, int SB>
__device__ inline void q8_block(float (&acc)[WM / 16][4][4], const uint8_t* ra, const uint8_t* rb, int wn, int g,
                                int t) {
  constexpr int MI = WM / 16;
  constexpr bool kAligned = (SB & 1) != 0;
  uint32_t bf[4][2];
  float db[4][2];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const uint8_t* bq = rb + (wn + 8 * j + g) * kPitchB + 36 * SB + 4 + 4 * t;  // vector wn + 8j + g
    bf[j][0] = lds32(bq);
    bf[j][1] = lds32(bq + 16);
    const uint8_t* bs = rb + (wn + 8 * j + 2 * t) * kPitchB + 36 * SB;  // d_x of vectors wn + 8j + 2t, + 1
    db[j][0] = *reinterpret_cast<const float*>(bs);
    db[j][1] = *reinterpret_cast<const float*>(bs + kPitchB);
  }
#pragma unroll
  for (int i = 0; i < MI; ++i) {
    const uint8_t* r0 = ra + 16 * i * kPitchA + 34 * SB;  // block sb of row wm + 16i + g
    const uint8_t* r1 = r0 + 8 * kPitchA;                 // … of row + 8
    const uint32_t af[4] = {ld_quant4<kAligned>(r0 + 2 + 4 * t), ld_quant4<kAligned>(r1 + 2 + 4 * t),
                            ld_quant4<kAligned>(r0 + 18 + 4 * t), ld_quant4<kAligned>(r1 + 18 + 4 * t)};
    const float da0 = __half2float(*reinterpret_cast<const __half*>(r0));
    const float da1 = __half2float(*reinterpret_cast<const __half*>(r1));
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      int c[4];
      mma_s8_biased(c, af, bf[j]);
      // (d_w·d_x)·isum added in block order, as dot_ref and ops_gemm.cu.
      acc[i][j][0] += (da0 * db[j][0]) * (__int_as_float(c[0]) - 12582912.0f);
      acc[i][j][1] += (da0 * db[j][1]) * (__int_as_float(c[1]) - 12582912.0f);
      acc[i][j][2] += (da1 * db[j][0]) * (__int_as_float(c[2]) - 12582912.0f);
      acc[i][j][3] += (da1 * db[j][1]) * (__int_as_float(c[3]) - 12582912.0f);
    }
  }
}

// cp.async of stage kb (values 256·kb …) into ring slot `slot`: 17 chunks per weight row, 18 per
// activation row; rows past the matrix and vectors past n are not copied (their outputs are not stored).
template <class C>
__device__ inline void copy_stage(uint8_t* smem, int slot, const Q8Params& p, int64_t m0, const int64_t* arow,
                                  int64_t kb) {
  uint8_t* sa = smem + slot * (C::STAGE_A + C::STAGE_B);
  uint8_t* sb = sa + C::STAGE_A;
  constexpr int CA = kPitchA / 16, CB = 288 / 16;
  for (int j = threadIdx.x; j < C::BM * CA; j += C::THREADS) {
    const int r = j / CA, k = j % CA;
    if (m0 + r < p.rows)
      cp_async16(sa + r * kPitchA + 16 * k, p.w + static_cast<uint64_t>(m0 + r) * p.row_bytes + kb * 272 + 16 * k);
  }
  for (int j = threadIdx.x; j < C::BN * CB; j += C::THREADS) {
    const int c = j / CB, k = j % CB;
    if (arow[c] >= 0)
      cp_async16(sb + c * kPitchB + 16 * k, p.act + static_cast<uint64_t>(arow[c]) * p.act_stride + kb * 288 + 16 * k);
  }
}

template <class C>
__global__ void __launch_bounds__(C::THREADS, C::MINB) gemm_q8_kernel(Q8Params p) {
  constexpr int WM = C::WM, MI = WM / 16, S = C::STAGES;
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ int64_t arow[C::BN];

  const int64_t m0 = static_cast<int64_t>(blockIdx.x) * C::BM, v0 = static_cast<int64_t>(blockIdx.y) * C::BN;
  for (int c = threadIdx.x; c < C::BN; c += C::THREADS) arow[c] = v0 + c < p.n_vec ? (v0 + c) / p.x_div : -1;
  __syncthreads();

  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int g = lane / 4, t = lane % 4;
  constexpr int kWarpsM = C::BM / WM;
  const int wm = (warp % kWarpsM) * WM, wn = (warp / kWarpsM) * 32;
  float acc[MI][4][4] = {};

  const int64_t nkb = p.cols / 256;
#pragma unroll
  for (int s = 0; s < S - 1; ++s) {
    if (s < nkb) copy_stage<C>(smem, s, p, m0, arow, s);
    cp_async_commit();
  }
  for (int64_t kb = 0; kb < nkb; ++kb) {
    cp_async_wait<S - 2>();  // this thread's copies of stage kb landed
    __syncthreads();         // everyone's did, and stage kb − 1's slot is no longer read
    if (kb + S - 1 < nkb) copy_stage<C>(smem, static_cast<int>((kb + S - 1) % S), p, m0, arow, kb + S - 1);
    cp_async_commit();  // (empty groups keep the count: wait<S − 2> always leaves only newer stages in flight)
    const uint8_t* sa = smem + (kb % S) * (C::STAGE_A + C::STAGE_B);
    const uint8_t* ra = sa + (wm + g) * kPitchA;
    const uint8_t* rb = sa + C::STAGE_A;
    q8_block<WM, 0>(acc, ra, rb, wn, g, t);
    q8_block<WM, 1>(acc, ra, rb, wn, g, t);
    q8_block<WM, 2>(acc, ra, rb, wn, g, t);
    q8_block<WM, 3>(acc, ra, rb, wn, g, t);
    q8_block<WM, 4>(acc, ra, rb, wn, g, t);
    q8_block<WM, 5>(acc, ra, rb, wn, g, t);
    q8_block<WM, 6>(acc, ra, rb, wn, g, t);
    q8_block<WM, 7>(acc, ra, rb, wn, g, t);
  }

#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int64_t row = m0 + wm + 16 * i + g + (q >= 2 ? 8 : 0);
        const int64_t v = v0 + wn + 8 * j + 2 * t + (q & 1);
        if (row < p.rows && v < p.n_vec) p.y[v * p.y_stride + row] = acc[i][j][q];
      }
}

template <class C>
bool launch(CudaBackend& be, const Q8Params& p) {
  if (!be.check(cudaFuncSetAttribute(gemm_q8_kernel<C>, cudaFuncAttributeMaxDynamicSharedMemorySize, C::SMEM),
                "gemm q8 smem"))
    return true;  // error recorded
  const dim3 grid(static_cast<unsigned>((p.rows + C::BM - 1) / C::BM),
                  static_cast<unsigned>((p.n_vec + C::BN - 1) / C::BN));
  gemm_q8_kernel<C><<<grid, C::THREADS, C::SMEM, be.stream()>>>(p);
  be.launched("gemm q8_0 (int8 tensor cores, direct fragments)");
  return true;
}

// CudaBackendOptions::gemm_q8 = −1: the shape by grid size. On the H200 at 2,048 vectors (cuda_prefill_bench
// 2048 gemm, docs/PERF.md) Cfg4's 256 × 128 tiles were fastest wherever they make ≥ 128 blocks (q_b, out_b,
// shared expert: 188 / 189 / 163 TOP/s against Cfg1's 181 / 179 / 154) and slow below (q_a: 83); Cfg1 then
// where its tiles make ≥ 128 blocks (q_a: 127.5), else Cfg3's 128 × 64 tiles (kv 512 rows: 82.5 against 65).
int default_shape(int64_t rows, int64_t n) {
  auto blocks = [&](int64_t bm, int64_t bn) { return ((rows + bm - 1) / bm) * ((n + bn - 1) / bn); };
  if (blocks(Cfg4::BM, Cfg4::BN) >= 128) return 4;
  if (blocks(Cfg1::BM, Cfg1::BN) >= 128) return 1;
  return 3;
}

}  // namespace

bool gemm_q8_fits(const GemvJob& j, const uint8_t* act, uint64_t act_stride, int smem_optin) {
  if (j.w.type != GgmlType::Q8_0 || j.groups || j.ids || j.w.cols % 256 != 0) return false;
  if (static_cast<size_t>(smem_optin) < kMaxSmem + 128 * sizeof(int64_t)) return false;
  if ((j.n_vec + 63) / 64 > 65535) return false;
  const auto w = reinterpret_cast<uintptr_t>(j.w.data), a = reinterpret_cast<uintptr_t>(act);
  return w % 16 == 0 && j.w.row_bytes % 16 == 0 && a % 16 == 0 && act_stride % 16 == 0;
}

bool CudaBackend::gemm_q8(const GemvJob& j, const uint8_t* act, uint64_t act_stride, int variant) {
  Q8Params p{};
  p.w = static_cast<const uint8_t*>(j.w.data);
  p.row_bytes = j.w.row_bytes;
  p.rows = j.w.rows;
  p.cols = j.w.cols;
  p.act = act;
  p.act_stride = act_stride;
  p.x_div = j.x_div;
  p.y = j.y;
  p.y_stride = j.y_stride;
  p.n_vec = j.n_vec;
  const bool shape = variant == 1 || variant == 3 || variant == 4;  // (any other value: the shape by grid size)
  switch (shape ? variant : default_shape(p.rows, p.n_vec)) {
    case 3: return launch<Cfg3>(*this, p);
    case 4: return launch<Cfg4>(*this, p);
    default: return launch<Cfg1>(*this, p);
  }
}

}  // namespace ds4::backend::cuda
