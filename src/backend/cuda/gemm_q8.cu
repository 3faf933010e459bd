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
// Launch shapes (Cfg; CudaBackendOptions::gemm_q8 picks one): warps of WM = 32 or 64 rows × WN = 32 or 64
// vectors (64 rows: half the activation-fragment loads per MMA; 64 vectors: half the weight-fragment
// loads), tiles of 128 or 256 rows × 64 or 128 vectors, rings of 2 or 3 stages, one or two blocks per SM
// (8 warps per block: 255 registers a thread); up to 216 KiB of shared memory (sm_90's 227 KiB opt-in).
// A launch covers up to 8 parts (blockIdx.z: a grouped matmul's row groups, or matmul_many's jobs on one
// input), each with its own weights, rows and outputs and an offset into the shared activation rows.
// Needs 16-byte aligned weights, activation rows and strides (gemm_q8_fits); cols a multiple of 256.
// Deliberately not here: K-quants and grouped experts (ops_gemm.cu), the dispatch (CudaBackend::gemm).

#include <algorithm>

#include "backend/cuda/bulk_copy.cuh"
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_impl.h"
#include "backend/cuda/gemm_q8.h"
#include "backend/cuda/mma_s8.cuh"
#include "backend/cuda/tensor_copy.cuh"
#include "quant/blocks.h"

namespace ds4::backend::cuda {

namespace {

// Row pitches (bytes): 8 Q8_0 blocks = 272 B = 68 words (rows g = 0..7 of a fragment start at banks
// 4g: with t = 0..3 conflict-free); 8 act blocks = 288 B padded to 76 words (banks 12g + t: conflict-free).
constexpr int kPitchA = 8 * 34, kPitchB = 304;

// A launch shape: BM rows × BN vectors per block, warps of WM rows × WN vectors, a ring of STAGES
// 256-value stages, MINB blocks per SM (the register cap that implies: 16 warps per SM leave 128
// registers a thread, 8 warps 255).
template <int WM_, int WN_, int BM_, int BN_, int STAGES_, int MINB_>
struct Cfg {
  static constexpr int WM = WM_, WN = WN_, BM = BM_, BN = BN_, STAGES = STAGES_, MINB = MINB_;
  static constexpr int THREADS = (BM / WM) * (BN / WN) * kWarp;
  static constexpr int STAGE_A = BM * kPitchA, STAGE_B = BN * kPitchB;
  static constexpr int SMEM = STAGES * (STAGE_A + STAGE_B);
};
// CudaBackendOptions::gemm_q8 = 1, 3 … 8 (2, 8 warps of 64 × 32 on 128 × 128 tiles with 2 stages, measured
// between 1 and 3 and never picked, is gone; default_shape picks 7, 1 or 3). Warps of 64 × 64 outputs (7)
// load half the fragments per MMA of 64 × 32 (4), and 8 warps a block leave 255 registers a thread (no
// spills): ncu on q_b (session 9 W1) 23.4 against 26.2 warp instructions per MMA at ~65 % issue. Measured
// slower on the H200 (W2) and removed: Cfg7 with a stage as a loop of 4 block pairs (198.5 against 204.7
// TOP/s on q_b) and with each thread copying whole rows (165.3: 10 % fewer instructions, but the LSU and
// MIO queues throttle).
using Cfg1 = Cfg<32, 32, 128, 128, 3, 1>;  // 16 warps, 221,184 B
using Cfg3 = Cfg<32, 32, 128, 64, 2, 2>;   // 8 warps, 108,544 B: two blocks per SM
using Cfg4 = Cfg<64, 32, 256, 128, 2, 1>;  // 16 warps, 217,088 B (128 registers: spills 148 B)
using Cfg5 = Cfg<64, 32, 128, 128, 3, 1>;  // 8 warps, 221,184 B
using Cfg6 = Cfg<32, 64, 256, 128, 2, 1>;  // 16 warps, 217,088 B
using Cfg7 = Cfg<64, 64, 256, 128, 2, 1>;  // 8 warps, 217,088 B
using Cfg8 = Cfg<32, 64, 128, 128, 3, 1>;  // 8 warps, 221,184 B
constexpr int kMaxSmem = Cfg1::SMEM;
static_assert(Cfg3::SMEM <= kMaxSmem && Cfg4::SMEM <= kMaxSmem && Cfg5::SMEM <= kMaxSmem && Cfg6::SMEM <= kMaxSmem &&
                  Cfg7::SMEM <= kMaxSmem && Cfg8::SMEM <= kMaxSmem,
              "gemm_q8_fits checks the largest");
static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ8_0Act) == 36, "Q8_0 block layouts");

// One matrix of a launch (blockIdx.z): a single job's matrix, a grouped job's row group (out_a: group
// g's rows over activation blocks [g·cols/32, …) of the row), or one of matmul_many's jobs on one input.
struct Q8Part {
  const uint8_t* w;   // [rows][row_bytes] Q8_0 blocks
  float* y;           // [n_vec][y_stride]
  int64_t rows, y_stride;
  uint64_t act_off;   // bytes into each activation row
};
constexpr int kMaxParts = 8;
// CudaBackendOptions::gemm_q8 = 12: default_shape's launch shape with bulk copies (9 … 11: Cfg7, Cfg1, Cfg3).
constexpr int kGemmQ8BulkByGrid = 12;
// … = 15: default_shape's launch shape with 2-D tensor copies (13, 14: Cfg7, Cfg1).
constexpr int kGemmQ8TensorByGrid = 15;
// … = 16: default_shape's launch shape with cp.async (the default before session 10's W2).
constexpr int kGemmQ8AsyncByGrid = 16;
// … = 17 … 22 (session 13; sm_90, else the cp.async default): 2-D tensor copies with gemm_q8_kernel's kOpt —
// 17 = default_shape's shape, lean stores, vector tiles first; 18 = 17 with the converted sums; 19 = default_shape,
// lean stores, converted sums; 21 = default_shape, lean stores; 22 = Cfg7, as 18 (tests: partial row tiles).
// (20, 12 warps of 32 × 64 on 128 × 192 tiles, measured slower than Cfg7 on every Flash shape in W2, is gone.)
constexpr int kGemmQ8VFirst = 17, kGemmQ8VFirstCvt = 18, kGemmQ8Cvt = 19, kGemmQ8Lean = 21, kGemmQ8VFirstCvtCfg7 = 22;
// … = 23 (session 14): 18 with the converted sums on Cfg1 and Cfg3 too (q_a, kv; 18 keeps their biased sums);
// 28: 23 with the GEMM a programmatic dependent of its quantizer (kOptPdl; quantize_q8_0_rows_kernel lets it start
// once its last blocks run: the GEMM blocks' prologue and first weight stages overlap the quantizer's tail) except
// on Cfg3 (W1: kv's 128 blocks of two per SM, placed beside the quantizer's, ran 0.058 → 0.086 ms).
// (24 … 27, session 14 W1: a streaming quantizer of resident blocks walking rounds — 61–89 % of 18's quantizer's
// rate on every Flash width — and it with the programmatic GEMM; removed.)
// (29, session 14 W2/W3: 28 with a quantizer of 8 values a lane — mixed alone, slower than 28 in the matmul lines;
// removed.)
constexpr int kGemmQ8AllCvt = 23, kGemmQ8PdlAllCvt = 28;
// The default (−1) on sm_90: 28 since session 14 (H200 W2, W3: a layer's 7 dense matmul lines at 2,048 tokens, incl.
// their quantizations, 2.132 / 2.129 and 2.116 / 2.117 ms against 18's 2.147 / 2.152 and 2.138 / 2.155; test_cuda_model
// 26 passed with it). 18 keeps the previous default.
constexpr int kGemmQ8Default = kGemmQ8PdlAllCvt;
enum : int { kOptLean = 1, kOptVFirst = 2, kOptCvt = 4, kOptPdl = 8 };

struct Q8Params {
  uint64_t row_bytes;
  int64_t cols;
  const uint8_t* act;  // Q8_0 act rows [n / x_div][act_stride bytes]
  uint64_t act_stride;
  int32_t x_div;       // vector v reads activation row v / x_div
  int64_t n_vec;
  Q8Part part[kMaxParts];
  // kCopyTensor only (CudaBackendOptions::gemm_q8 13 … 15): 2-D tensor maps of 8-byte elements — each part's
  // weights (rows × row_bytes / 8, box BM rows × 34: a stage's 272 bytes) and the activation rows (n × act_stride
  // / 8, box BN rows × 38: a stage's 288 bytes + 16, the tile's padded pitch; past a row's end the TMA fills zeros).
  CUtensorMap tw[kMaxParts];
  CUtensorMap ta;
};

// How a stage reaches shared memory: cp.async (16 bytes a thread and instruction), one bulk copy per row
// (bulk_stage), or one 2-D tensor copy per operand and stage (tensor_stage).
enum : int { kCopyAsync = 0, kCopyBulk = 1, kCopyTensor = 2 };

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

// c = a·b from zero: the int32 sum itself (kCvt: converted by cvt.rn.f32.s32, exact for |isum| ≤ 2^19, so the
// same float as the biased form's F − 12582912), the MMA's C operand the zero register instead of 4 registers.
__device__ inline void mma_s8_zero(int (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};\n"
      : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(0));
}

// One 32-value block sb of a stage for the warp's WM × WN outputs: ra = the warp's row g in the stage's
// weight tile, rb = the stage's activation tile. The activation fragments and scales are loaded once
// for the warp's MI row fragments.
// kCvt (CudaBackendOptions::gemm_q8 18, 19, 22): the MMA from zero and its int32 sum converted (I2FP) instead
// of biased and debiased (FADD): the same float, one instruction either way, and the MMA reads no C registers.
template <int WM, int WN, int SB, bool kCvt = false>
__device__ inline void q8_block(float (&acc)[WM / 16][WN / 8][4], const uint8_t* ra, const uint8_t* rb, int wn, int g,
                                int t) {
  constexpr int MI = WM / 16, NJ = WN / 8;
  constexpr bool kAligned = (SB & 1) != 0;
  uint32_t bf[NJ][2];
  float db[NJ][2];
#pragma unroll
  for (int j = 0; j < NJ; ++j) {
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
    for (int j = 0; j < NJ; ++j) {
      int c[4];
      if constexpr (kCvt) {
        mma_s8_zero(c, af, bf[j]);
        acc[i][j][0] += (da0 * db[j][0]) * __int2float_rn(c[0]);
        acc[i][j][1] += (da0 * db[j][1]) * __int2float_rn(c[1]);
        acc[i][j][2] += (da1 * db[j][0]) * __int2float_rn(c[2]);
        acc[i][j][3] += (da1 * db[j][1]) * __int2float_rn(c[3]);
      } else {
        mma_s8_biased(c, af, bf[j]);
        // (d_w·d_x)·isum added in block order, as dot_ref and ops_gemm.cu.
        acc[i][j][0] += (da0 * db[j][0]) * (__int_as_float(c[0]) - 12582912.0f);
        acc[i][j][1] += (da0 * db[j][1]) * (__int_as_float(c[1]) - 12582912.0f);
        acc[i][j][2] += (da1 * db[j][0]) * (__int_as_float(c[2]) - 12582912.0f);
        acc[i][j][3] += (da1 * db[j][1]) * (__int_as_float(c[3]) - 12582912.0f);
      }
    }
  }
}

// A stage's 8 blocks (ring slot at sa) for the warp.
template <class C, bool kCvt>
__device__ inline void q8_stage(float (&acc)[C::WM / 16][C::WN / 8][4], const uint8_t* sa, int wm, int wn, int g, int t) {
  const uint8_t* ra = sa + (wm + g) * kPitchA;
  const uint8_t* rb = sa + C::STAGE_A;
  q8_block<C::WM, C::WN, 0, kCvt>(acc, ra, rb, wn, g, t);
  q8_block<C::WM, C::WN, 1, kCvt>(acc, ra, rb, wn, g, t);
  q8_block<C::WM, C::WN, 2, kCvt>(acc, ra, rb, wn, g, t);
  q8_block<C::WM, C::WN, 3, kCvt>(acc, ra, rb, wn, g, t);
  q8_block<C::WM, C::WN, 4, kCvt>(acc, ra, rb, wn, g, t);
  q8_block<C::WM, C::WN, 5, kCvt>(acc, ra, rb, wn, g, t);
  q8_block<C::WM, C::WN, 6, kCvt>(acc, ra, rb, wn, g, t);
  q8_block<C::WM, C::WN, 7, kCvt>(acc, ra, rb, wn, g, t);
}

// cp.async of stage kb (values 256·kb …) into ring slot `slot`: 17 chunks per weight row, 18 per
// activation row; rows past the matrix and vectors past n are not copied (their outputs are not stored).
// w = the part's weights, act = the activation rows at the part's offset.
template <class C>
__device__ inline void copy_stage(uint8_t* smem, int slot, const uint8_t* w, uint64_t row_bytes, int64_t rows,
                                  const uint8_t* act, uint64_t act_stride, int64_t m0, const int64_t* arow, int64_t kb) {
  uint8_t* sa = smem + slot * (C::STAGE_A + C::STAGE_B);
  uint8_t* sb = sa + C::STAGE_A;
  constexpr int CA = kPitchA / 16, CB = 288 / 16;
  for (int j = threadIdx.x; j < C::BM * CA; j += C::THREADS) {
    const int r = j / CA, k = j % CA;
    if (m0 + r < rows) cp_async16(sa + r * kPitchA + 16 * k, w + static_cast<uint64_t>(m0 + r) * row_bytes + kb * 272 + 16 * k);
  }
  for (int j = threadIdx.x; j < C::BN * CB; j += C::THREADS) {
    const int c = j / CB, k = j % CB;
    if (arow[c] >= 0) cp_async16(sb + c * kPitchB + 16 * k, act + static_cast<uint64_t>(arow[c]) * act_stride + kb * 288 + 16 * k);
  }
}

// The bulk form of copy_stage (sm_90; CudaBackendOptions::gemm_q8 9 … 12): one `cp.async.bulk` per weight
// row (272 B) and per activation row (288 B) of the stage, each thread issuing at most ⌈(BM + BN) / THREADS⌉,
// completing on the slot's mbarrier (`bar`, whose expected bytes the caller announced before): the TMA unit
// walks the bytes, so a stage costs a thread 1–2 instructions of copy issue instead of 26 cp.async with
// their index arithmetic (~4 of Cfg7's 23.4 warp instructions per MMA, session 9's ncu). Same bytes in the
// same places as copy_stage.
template <class C>
__device__ inline void bulk_stage(uint8_t* smem, int slot, uint64_t* bar, const uint8_t* w, uint64_t row_bytes,
                                  int64_t rows, const uint8_t* act, uint64_t act_stride, int64_t m0,
                                  const int64_t* arow, int64_t kb) {
  uint8_t* sa = smem + slot * (C::STAGE_A + C::STAGE_B);
  uint8_t* sb = sa + C::STAGE_A;
  for (int r = threadIdx.x; r < C::BM + C::BN; r += C::THREADS) {
    if (r < C::BM) {
      if (m0 + r < rows) bulk_copy(sa + r * kPitchA, w + static_cast<uint64_t>(m0 + r) * row_bytes + kb * 272, 272, bar);
    } else {
      const int c = r - C::BM;
      if (arow[c] >= 0) bulk_copy(sb + c * kPitchB, act + static_cast<uint64_t>(arow[c]) * act_stride + kb * 288, 288, bar);
    }
  }
}

// The tensor-map form (sm_90; CudaBackendOptions::gemm_q8 13 … 15): thread 0 issues two 2-D tensor copies
// per stage — the part's BM × 272-byte weight box and the BN × 304-byte activation box (rows past the matrix
// or past n arrive as zeros; their outputs are not stored) — so the TMA unit takes 2 requests a stage
// instead of bulk_stage's BM + BN (W1: bulk_stage's 384 row copies per Cfg7 stage left the warps waiting,
// issue 54 % against 64 %). Same bytes in the used places as copy_stage. The copy: tensor_copy.cuh.

// The warp's outputs (rows r0 + …, vectors v0 + …: its corner in the part) into part.y; rows past the part
// and vectors past n are not stored. A warp whose whole WM × WN corner is inside (all but the edge tiles)
// stores through 2·NJ row pointers with constant offsets (16i, + 8) instead of an index product, a 64-bit
// address and two range checks per value (q_b: 128 stores a lane after only 4 stages); kLean only (the
// kernels of gemm_q8 17 …; the others keep the checked loop).
template <class C, bool kLean>
__device__ inline void store_tile(const float (&acc)[C::WM / 16][C::WN / 8][4], const Q8Part& part, int64_t n_vec,
                                  int64_t r0, int64_t v0, int g, int t) {
  float* y = part.y;
  const int64_t ys = part.y_stride, rows = part.rows;
  if (kLean && r0 + C::WM <= rows && v0 + C::WN <= n_vec) {  // (warp-uniform)
    float* yv = y + (v0 + 2 * t) * ys + r0 + g;
#pragma unroll
    for (int j = 0; j < C::WN / 8; ++j)
#pragma unroll
      for (int q = 0; q < 2; ++q) {
        float* yr = yv + (8 * j + q) * ys;  // vector v0 + 8j + 2t + q
#pragma unroll
        for (int i = 0; i < C::WM / 16; ++i) {
          yr[16 * i] = acc[i][j][q];
          yr[16 * i + 8] = acc[i][j][q + 2];
        }
      }
    return;
  }
#pragma unroll
  for (int i = 0; i < C::WM / 16; ++i)
#pragma unroll
    for (int j = 0; j < C::WN / 8; ++j)
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int64_t row = r0 + 16 * i + g + (q >= 2 ? 8 : 0);
        const int64_t v = v0 + 8 * j + 2 * t + (q & 1);
        if (row < rows && v < n_vec) y[v * ys + row] = acc[i][j][q];
      }
}

// Block (x, y, z): rows [x·BM, …) of part z (blocks past a shorter part's rows return at once) × vectors
// [y·BN, …).
// kBulk: the stages by bulk_stage on one mbarrier per ring slot (`full`: stage kb is slot kb % S's
// (kb / S)-th phase) instead of cp.async groups; the block barrier per stage stays (a slot is refilled
// only after every warp is done reading it). Thread 0 announces a stage's bytes before the block barrier
// that precedes its copies, so no copy completes on a phase before its arrival.
// kOpt (session 13, CudaBackendOptions::gemm_q8 17 …): kOptLean = store_tile's fast path; kOptVFirst = the
// vector tiles fastest — block (x, y, z) takes vectors [x·BN, …) of rows [y·BM, …), so the blocks running at once
// share a few row tiles' weights (read from DRAM about once) instead of sweeping all of a matrix's weights per
// vector tile (q_b's 35 MB: the H200's L2 kept too little of them between sweeps, session 13 W1 ncu: 26 % of
// the DRAM peak for ~0.74 GB a launch); kOptCvt = q8_block's kCvt.
// kOptPdl (tensor copies only; launched as a programmatic dependent of the activations' quantizer): the first S − 1
// stages' weight boxes are asked for before grid_dependency_wait(), their activation boxes after it — nothing
// else the block does before reads the quantizer's output or writes what it reads.
template <class C, int kCopy, int kOpt = 0>
__global__ void __launch_bounds__(C::THREADS, C::MINB) gemm_q8_kernel(const __grid_constant__ Q8Params p) {
  constexpr bool kVFirst = (kOpt & kOptVFirst) != 0;
  constexpr int WM = C::WM, WN = C::WN, MI = WM / 16, NJ = WN / 8, S = C::STAGES;
  constexpr bool kBulk = kCopy != kCopyAsync, kTensor = kCopy == kCopyTensor;
  constexpr bool kPdl = kTensor && (kOpt & kOptPdl) != 0;
  extern __shared__ __align__(128) uint8_t smem_raw[];
  // Tensor copies need 128-byte aligned destinations: the launch adds 128 bytes to round up into.
  uint8_t* smem = kTensor ? smem_raw + ((128u - (smem_addr(smem_raw) & 127u)) & 127u) : smem_raw;
  __shared__ int64_t arow[C::BN];
  __shared__ __align__(8) uint64_t full[kBulk ? S : 1];

  const Q8Part& part = p.part[blockIdx.z];
  const int64_t m0 = static_cast<int64_t>(kVFirst ? blockIdx.y : blockIdx.x) * C::BM,
                v0 = static_cast<int64_t>(kVFirst ? blockIdx.x : blockIdx.y) * C::BN;
  const int64_t rows = part.rows;
  if (m0 >= rows) return;  // (uniform in the block, before any barrier)
  const uint8_t* w = part.w;
  const uint8_t* act = p.act + part.act_off;
  for (int c = threadIdx.x; c < C::BN; c += C::THREADS) arow[c] = v0 + c < p.n_vec ? (v0 + c) / p.x_div : -1;
  if (kBulk && threadIdx.x == 0)
    for (int s = 0; s < S; ++s) mbar_init(&full[s]);
  __syncthreads();

  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int g = lane / 4, t = lane % 4;
  constexpr int kWarpsM = C::BM / WM;
  const int wm = (warp % kWarpsM) * WM, wn = (warp / kWarpsM) * WN;
  float acc[MI][NJ][4] = {};

  const int64_t nkb = p.cols / 256;
  // kBulk: the bytes of every stage (rows and vectors past the matrix are not copied).
  // (tensor copies: whole boxes, zeros included)
  [[maybe_unused]] const uint32_t stage_bytes =
      kTensor ? static_cast<uint32_t>(C::BM * kPitchA + C::BN * kPitchB)
              : static_cast<uint32_t>(std::min<int64_t>(C::BM, rows - m0) * 272 + std::min<int64_t>(C::BN, p.n_vec - v0) * 288);
  [[maybe_unused]] const CUtensorMap* tw = &p.tw[blockIdx.z];
  [[maybe_unused]] const int ax0 = static_cast<int>(part.act_off / 8);  // the part's activation columns, 8-byte units
  // Stage st into `slot` (thread 0 alone for tensor copies; its bytes announced on full[slot] before).
  // kPdl: the prologue's stages as weights (`part` 1), then activations (2); else both (3).
  auto issue = [&](int slot, int64_t st, int part = 3) {
    if constexpr (kTensor) {
      if (threadIdx.x == 0) {
        uint8_t* sa = smem + slot * (C::STAGE_A + C::STAGE_B);
        if (part & 1) tensor_copy_2d(sa, tw, static_cast<int>(st * 34), static_cast<int>(m0), &full[slot]);
        if (part & 2)
          tensor_copy_2d(sa + C::STAGE_A, &p.ta, ax0 + static_cast<int>(st * 36), static_cast<int>(v0), &full[slot]);
      }
    } else {
      bulk_stage<C>(smem, slot, &full[slot], w, p.row_bytes, rows, act, p.act_stride, m0, arow, st);
    }
  };
  if constexpr (kBulk) {
    if (threadIdx.x == 0)
      for (int s = 0; s < S - 1 && s < nkb; ++s) mbar_expect(&full[s], stage_bytes);
    __syncthreads();
  }
  if constexpr (kPdl) {
#pragma unroll
    for (int s = 0; s < S - 1; ++s)
      if (s < nkb) issue(s, s, 1);
    grid_dependency_wait();  // the quantizer's rows are complete and visible
  }
#pragma unroll
  for (int s = 0; s < S - 1; ++s) {
    if constexpr (kBulk) {
      if (s < nkb) issue(s, s, kPdl ? 2 : 3);
    } else {
      if (s < nkb) copy_stage<C>(smem, s, w, p.row_bytes, rows, act, p.act_stride, m0, arow, s);
      cp_async_commit();
    }
  }
  for (int64_t kb = 0; kb < nkb; ++kb) {
    const int refill = static_cast<int>((kb + S - 1) % S);
    if constexpr (kBulk) {
      mbar_wait(&full[kb % S], static_cast<uint32_t>(kb / S) & 1u);  // stage kb's bytes landed
      // Slot `refill` held stage kb − 1, whose phase every thread passed before the previous block barrier.
      if (threadIdx.x == 0 && kb + S - 1 < nkb) mbar_expect(&full[refill], stage_bytes);
      __syncthreads();  // stage kb − 1's slot is no longer read (and its next phase is announced)
      if (kb + S - 1 < nkb)
        issue(refill, kb + S - 1);
    } else {
      cp_async_wait<S - 2>();  // this thread's copies of stage kb landed
      __syncthreads();         // everyone's did, and stage kb − 1's slot is no longer read
      if (kb + S - 1 < nkb)
        copy_stage<C>(smem, refill, w, p.row_bytes, rows, act, p.act_stride, m0, arow, kb + S - 1);
      cp_async_commit();  // (empty groups keep the count: wait<S − 2> always leaves only newer stages in flight)
    }
    q8_stage<C, (kOpt & kOptCvt) != 0>(acc, smem + (kb % S) * (C::STAGE_A + C::STAGE_B), wm, wn, g, t);
  }

  store_tile<C, (kOpt & kOptLean) != 0>(acc, part, p.n_vec, m0 + wm, v0 + wn, g, t);
}

template <class C, int kCopy = kCopyAsync, int kOpt = 0>
bool launch(CudaBackend& be, const Q8Params& p, int n_parts, int64_t max_rows) {
  constexpr int smem = C::SMEM + (kCopy == kCopyTensor ? 128 : 0);
  if (!be.check(cudaFuncSetAttribute(gemm_q8_kernel<C, kCopy, kOpt>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
                "gemm q8 smem"))
    return true;  // error recorded
  const auto m_tiles = static_cast<unsigned>((max_rows + C::BM - 1) / C::BM),
             v_tiles = static_cast<unsigned>((p.n_vec + C::BN - 1) / C::BN);
  const dim3 grid((kOpt & kOptVFirst) ? v_tiles : m_tiles, (kOpt & kOptVFirst) ? m_tiles : v_tiles,
                  static_cast<unsigned>(n_parts));
  if constexpr ((kOpt & kOptPdl) != 0) {
    if (!be.check(launch_dependent(true, grid, dim3(C::THREADS), smem, be.stream(), gemm_q8_kernel<C, kCopy, kOpt>, p),
                  "gemm q8_0 (programmatic dependent)"))
      return true;  // error recorded
  } else {
    gemm_q8_kernel<C, kCopy, kOpt><<<grid, C::THREADS, smem, be.stream()>>>(p);
  }
  be.launched(kCopy == kCopyTensor ? "gemm q8_0 (int8 tensor cores, direct fragments, tensor copies)"
              : kCopy == kCopyBulk ? "gemm q8_0 (int8 tensor cores, direct fragments, bulk copies)"
                                   : "gemm q8_0 (int8 tensor cores, direct fragments)");
  return true;
}

// Shape C with tensor copies: the maps into a copy of p, then the launch; false (nothing launched) where the
// maps cannot be made (no entry point, x_div ≠ 1: vectors sharing activation rows are not a 2-D box).
// kOpt: gemm_q8_kernel's.
template <class C, int kOpt = 0>
bool launch_tensor(CudaBackend& be, const Q8Params& p0, int n_parts, int64_t max_rows) {
  if (p0.x_div != 1) return false;
  const EncodeTiled encode = tensor_map_encoder();
  if (!encode) return false;
  Q8Params p = p0;
  const int64_t act_rows = p.n_vec;
  // 8-byte elements: a row's stride / 8 of them, box kPitch / 8 × the tile's rows (zeros past the ends).
  if (!tensor_map_2d(encode, &p.ta, CU_TENSOR_MAP_DATA_TYPE_UINT64, p.act, p.act_stride / 8, act_rows, p.act_stride,
                     kPitchB / 8, C::BN))
    return false;
  for (int k = 0; k < n_parts; ++k)
    if (!tensor_map_2d(encode, &p.tw[k], CU_TENSOR_MAP_DATA_TYPE_UINT64, p.part[k].w, p.row_bytes / 8, p.part[k].rows,
                       p.row_bytes, kPitchA / 8, C::BM))
      return false;
  return launch<C, kCopyTensor, kOpt>(be, p, n_parts, max_rows);
}

// CudaBackendOptions::gemm_q8 = −1: the shape by grid size. On the H200 at 2,048 vectors (cuda_prefill_bench
// 2048 q8, docs/PERF.md, session 9 W1) Cfg7's 256 × 128 tiles of 8 warps of 64 × 64 were fastest wherever they
// make ≥ 128 blocks (q_b, out_b, shared expert: 208 / 218 / 198.5 TOP/s against Cfg4's 191 / 205 / 185) and
// slow below (q_a: 101); Cfg1 then where its tiles make ≥ 128 blocks (q_a: 155.6, Cfg8 157.5, Cfg5 156.0), else
// Cfg3's 128 × 64 tiles (kv 512 rows: 112.4 against Cfg1's 78.5). A launch of several parts counts the blocks of
// all of them.
int default_shape(int64_t rows, int64_t n, int n_parts) {
  auto blocks = [&](int64_t bm, int64_t bn) { return n_parts * ((rows + bm - 1) / bm) * ((n + bn - 1) / bn); };
  if (blocks(Cfg7::BM, Cfg7::BN) >= 128) return 7;
  if (blocks(Cfg1::BM, Cfg1::BN) >= 128) return 1;
  return 3;
}

// The parts p.part[0 … n_parts) in launch shape `variant` (a gemm_q8_known value: 1, 3 … 8; 16 or, below sm_90,
// 17 … 23, 28: default_shape with cp.async; by default tensor copies, below).
// With bulk copies (sm_90; the caller checked): 9 … 11 = Cfg7, Cfg1, Cfg3 with bulk_stage; 12 = default_shape's
// choice with bulk_stage (kGemmQ8BulkByGrid); with tensor copies 13, 14 = Cfg7, Cfg1, 15 = default_shape's choice
// (kGemmQ8TensorByGrid) — below sm_90, without tensor maps or with x_div ≠ 1 their cp.async twins.
bool launch_parts(CudaBackend& be, const Q8Params& p, int n_parts, int variant) {
  int64_t max_rows = 0;
  for (int k = 0; k < n_parts; ++k) max_rows = std::max(max_rows, p.part[k].rows);
  // The default (−1) on sm_90: kGemmQ8PdlAllCvt (28) — default_shape's shape with tensor copies, the vector tiles
  // first, converted sums and lean stores (session 13's 18: q_b under ncu 593 → 547 µs, issue 63 → 68 %, DRAM reads
  // 490 → 39 MB), the converted sums on Cfg1 / Cfg3 too and the GEMM its quantizer's programmatic dependent (session
  // 14; docs/PERF.md). 18 and kGemmQ8TensorByGrid (15) keep the previous defaults (session 10 W2: tensor copies 12–22 %
  // faster than the cp.async ring, kGemmQ8AsyncByGrid) for before/after runs.
  // (make_cuda_backend admits only gemm_q8_known values: −1 is the one left to resolve.)
  if (variant < 0) variant = kGemmQ8Default;
  if (variant == kGemmQ8AsyncByGrid) variant = -1;
  // 17 … 23, 28 (sm_90): tensor copies with kOpt (kGemmQ8VFirst …); 23 runs 18's kernels with the converted sums on
  // every shape, 28 those kernels as programmatic dependents (but on Cfg3).
  const bool all_cvt = variant == kGemmQ8AllCvt || variant == kGemmQ8PdlAllCvt;
  const bool pdl = variant == kGemmQ8PdlAllCvt;
  if (all_cvt) variant = kGemmQ8VFirstCvt;
  if (variant >= kGemmQ8VFirst && variant <= kGemmQ8VFirstCvtCfg7) {
    if (!be.sm90()) {
      variant = -1;
    } else {
      const int shape = variant == kGemmQ8VFirstCvtCfg7 ? 7 : default_shape(max_rows, p.n_vec, n_parts);
      const int opt = kOptLean | (variant == kGemmQ8Cvt || variant == kGemmQ8Lean ? 0 : kOptVFirst) |
                      (variant == kGemmQ8VFirstCvt || variant == kGemmQ8Cvt || variant == kGemmQ8VFirstCvtCfg7 ? kOptCvt : 0);
      // 18 keeps Cfg1 / Cfg3 on the biased sums (session 13 built the converted ones for Cfg7 only); 23 and 28 convert
      // there too — the same floats (|isum| ≤ 2^19: exact either way), the MMA without C registers.
      const bool cvt13 = all_cvt && (opt & kOptCvt) != 0;
      constexpr int L = kOptLean, V = kOptVFirst, K = kOptCvt, D = kOptPdl;
      bool done = false;
      switch (shape) {
        case 7:
          done = pdl                  ? launch_tensor<Cfg7, L | V | K | D>(be, p, n_parts, max_rows)
                 : opt == (L | V)     ? launch_tensor<Cfg7, L | V>(be, p, n_parts, max_rows)
                 : opt == (L | V | K) ? launch_tensor<Cfg7, L | V | K>(be, p, n_parts, max_rows)
                 : opt == (L | K)     ? launch_tensor<Cfg7, L | K>(be, p, n_parts, max_rows)
                                      : launch_tensor<Cfg7, L>(be, p, n_parts, max_rows);
          break;
        case 1:
          done = pdl        ? launch_tensor<Cfg1, L | V | K | D>(be, p, n_parts, max_rows)
                 : cvt13    ? launch_tensor<Cfg1, L | V | K>(be, p, n_parts, max_rows)
                 : (opt & V) ? launch_tensor<Cfg1, L | V>(be, p, n_parts, max_rows)
                             : launch_tensor<Cfg1, L>(be, p, n_parts, max_rows);
          break;
        default:
          done = cvt13      ? launch_tensor<Cfg3, L | V | K>(be, p, n_parts, max_rows)
                 : (opt & V) ? launch_tensor<Cfg3, L | V>(be, p, n_parts, max_rows)
                             : launch_tensor<Cfg3, L>(be, p, n_parts, max_rows);
          break;
      }
      if (done) return true;
      variant = shape;  // (no tensor maps: the cp.async twin)
    }
  }
  if (variant >= 13 && variant <= kGemmQ8TensorByGrid && be.sm90()) {
    const int shape = variant == 13 ? 7 : variant == 14 ? 1 : default_shape(max_rows, p.n_vec, n_parts);
    bool done = false;
    switch (shape) {
      case 7: done = launch_tensor<Cfg7>(be, p, n_parts, max_rows); break;
      case 1: done = launch_tensor<Cfg1>(be, p, n_parts, max_rows); break;
      default: done = launch_tensor<Cfg3>(be, p, n_parts, max_rows); break;
    }
    if (done) return true;
    variant = shape;  // (no tensor maps: the cp.async twin)
  }
  if (variant >= 13 && variant <= kGemmQ8TensorByGrid) variant = variant == 13 ? 7 : variant == 14 ? 1 : -1;
  if (variant >= 9 && variant <= kGemmQ8BulkByGrid && !be.sm90())  // (bulk copies need sm_90: cp.async twins)
    variant = variant == 9 ? 7 : variant == 10 ? 1 : variant == 11 ? 3 : -1;
  if (variant >= 9 && variant <= kGemmQ8BulkByGrid) {
    const int shape = variant == kGemmQ8BulkByGrid ? default_shape(max_rows, p.n_vec, n_parts)
                      : variant == 9               ? 7
                      : variant == 10              ? 1
                                                   : 3;
    switch (shape) {
      case 7: return launch<Cfg7, kCopyBulk>(be, p, n_parts, max_rows);
      case 1: return launch<Cfg1, kCopyBulk>(be, p, n_parts, max_rows);
      default: return launch<Cfg3, kCopyBulk>(be, p, n_parts, max_rows);
    }
  }
  const bool shape = variant == 1 || (variant >= 3 && variant <= 8);
  switch (shape ? variant : default_shape(max_rows, p.n_vec, n_parts)) {
    case 3: return launch<Cfg3>(be, p, n_parts, max_rows);
    case 4: return launch<Cfg4>(be, p, n_parts, max_rows);
    case 5: return launch<Cfg5>(be, p, n_parts, max_rows);
    case 6: return launch<Cfg6>(be, p, n_parts, max_rows);
    case 7: return launch<Cfg7>(be, p, n_parts, max_rows);
    case 8: return launch<Cfg8>(be, p, n_parts, max_rows);
    default: return launch<Cfg1>(be, p, n_parts, max_rows);
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// gemm_q8_fits without the activations (a parts launch quantizes them itself: rows of cols / 32 · 36
// bytes, 16-byte aligned when cols is a multiple of 256).
bool weight_fits(const GemvJob& j, int smem_optin) {
  if (j.w.type != GgmlType::Q8_0 || j.groups || j.ids || j.w.cols % 256 != 0) return false;
  if (static_cast<size_t>(smem_optin) < kMaxSmem + 128 * sizeof(int64_t)) return false;
  if ((j.n_vec + 63) / 64 > 65535) return false;
  return aligned16(j.w.data) && j.w.row_bytes % 16 == 0;
}

}  // namespace

bool gemm_q8_known(int variant) {
  return variant == -1 || variant == 0 || variant == 1 || (variant >= 3 && variant <= kGemmQ8AsyncByGrid) ||
         (variant >= kGemmQ8VFirst && variant <= kGemmQ8AllCvt && variant != 20) || variant == kGemmQ8PdlAllCvt;
}

bool gemm_q8_pdl(int variant) { return (variant < 0 ? kGemmQ8Default : variant) == kGemmQ8PdlAllCvt; }

bool gemm_q8_fits(const GemvJob& j, const uint8_t* act, uint64_t act_stride, int smem_optin) {
  return weight_fits(j, smem_optin) && aligned16(act) && act_stride % 16 == 0;
}

bool CudaBackend::gemm_q8(const GemvJob& j, const uint8_t* act, uint64_t act_stride, int variant) {
  Q8Params p{};
  p.row_bytes = j.w.row_bytes;
  p.cols = j.w.cols;
  p.act = act;
  p.act_stride = act_stride;
  p.x_div = j.x_div;
  p.n_vec = j.n_vec;
  const auto* w = static_cast<const uint8_t*>(j.w.data);
  if (j.group_rows <= 0) {
    p.part[0] = Q8Part{w, j.y, j.w.rows, j.y_stride, 0};
    return launch_parts(*this, p, 1, variant);
  }
  // A grouped job (gemm_q8_group_fits): group g = rows [g·group_rows, …) over activation blocks
  // [g·cols/32, …) of each row, quantized as one row of G·cols values (a Q8_0 act block depends only on its
  // own 32 values: the bits of one quantization per group).
  const int64_t G = j.w.rows / j.group_rows;
  for (int64_t g = 0; g < G; ++g)
    p.part[g] = Q8Part{w + static_cast<uint64_t>(g * j.group_rows) * j.w.row_bytes, j.y + g * j.group_rows,
                       j.group_rows, j.y_stride, static_cast<uint64_t>(g * (j.w.cols / 32)) * sizeof(BlockQ8_0Act)};
  return launch_parts(*this, p, static_cast<int>(G), variant);
}

bool gemm_q8_group_fits(const GemvJob& j, int device) {
  const int64_t G = j.group_rows > 0 ? j.w.rows / j.group_rows : 0;
  if (G < 2 || G > kMaxParts || G * j.group_rows != j.w.rows || j.group_x_stride != j.w.cols ||
      j.x_stride < G * j.w.cols || j.x_div != 1 || j.numerics != MatmulNumerics::ds4 || j.n_vec <= kSkinnyMaxVec)
    return false;
  int smem = 0;
  if (cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess) return false;
  return weight_fits(j, smem);
}

bool CudaBackend::gemm_q8_many(std::span<const MatmulArgs> jobs) {
  if (jobs.size() < 2 || jobs.size() > static_cast<size_t>(kMaxParts)) return false;
  int smem = 0;
  if (cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device()) != cudaSuccess) return false;
  const MatmulArgs& a0 = jobs[0];
  for (const MatmulArgs& a : jobs) {
    if (a.group_rows != 0 || a.x != a0.x || a.x_stride != a0.x_stride || a.n != a0.n || a.w.cols != a0.w.cols ||
        a.w.row_bytes != a0.w.row_bytes || a.numerics != MatmulNumerics::ds4 || a.n <= kSkinnyMaxVec ||
        !weight_fits(gemv_job(a), smem))
      return false;
  }
  const uint64_t stride = quantize_act(GgmlType::Q8_0, a0.x, a0.x_stride, a0.n, a0.w.cols, act_);
  if (stride == 0) return true;  // error recorded
  Q8Params p{};
  p.row_bytes = a0.w.row_bytes;
  p.cols = a0.w.cols;
  p.act = static_cast<const uint8_t*>(act_.ptr);
  p.act_stride = stride;
  p.x_div = 1;
  p.n_vec = a0.n;
  for (size_t k = 0; k < jobs.size(); ++k)
    p.part[k] = Q8Part{static_cast<const uint8_t*>(jobs[k].w.data), jobs[k].y, jobs[k].w.rows, jobs[k].y_stride, 0};
  return launch_parts(*this, p, static_cast<int>(jobs.size()), gemm_q8_);
}

}  // namespace ds4::backend::cuda
