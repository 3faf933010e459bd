// hc_boundary.cu — a decode token's sublayer boundary in one launch (CudaBackendOptions::hc_post_fold = 2): the
// previous sublayer's HC post X' = post ⊗ (f + f_add) + Cᵀ·X (HcPreArgs::prev_post) and the next HC pre on X'
// (RMSNorm scale of the 16384-value state, the 24 F16 MMA control sums, mix, Sinkhorn split, collapse y, sublayer
// norm xn), bit for bit hc_post4_kernel then the spread pre (hc_seg_mma_kernel + hc_finish5_kernel), as ONE cluster
// of 8 blocks (256 threads each) that pass partial sums through distributed shared memory.
// Why a cluster, and this cut (session 10 folded the post into the 48 segment blocks: each formed the whole state
// for the norm and lost 4.2 µs): every reduction here has a fixed order, and block r owns the pieces of each order:
//   * the state's norm (rms_scale_row_v4: 1,024 emulated threads, chain v = Σ_k' X'[v + 1024k']², k' = 0 … 15, then
//     warp_sum per emulated warp and warp_sum over the 32 warp sums): block r owns the chains v with v mod 256 in
//     [32r, 32r + 32), i.e. emulated warps r + 8w (w = 0 … 3), whole — X' at dims d with d mod 256 in that range;
//   * the sublayer norm of y (256 threads, chain i = Σ_m y[i + 256m]², then block_sum): the same dims hold chains
//     i = 32r … 32r + 31 = warp r of block_sum, whole;
//   * the F16 MMA controls (README.md's order: a quarter of 128 values is one MMA chain): block r owns segments
//     8k + r (stream k, dims [512r, 512r + 512)), whole — it forms X' there a second time from the post's inputs
//     (L2 loads beside the others) instead of reading other blocks' X' after a barrier.
// The partial results are added in the fixed order of the single kernels after cluster barriers: (1) the state
// norm's 32 emulated warp sums → scale → the MMAs; (2) the 24 × 32 segment sums → mix (segment order) → pre → y;
// (3) the 8 warp sums of y's norm → xn; the Sinkhorn split runs in one warp of block 0 after (2), beside y and xn,
// as the finish kernel's split block runs beside its collapse block. Weights and norm weights are loaded before
// griddepcontrol.wait (with a programmatic launch they stream while the kernel before ends).
// Deliberately not here: other batch sizes and shapes (the caller falls back to hc_post + hc_pre), the scalar F16
// segment order (f16_mma off), the decision which options allow it (ops_hc.cu).
#include "backend/cuda/hc_boundary.h"

#include <cooperative_groups.h>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_impl.h"
#include "backend/cuda/f16_mma.cuh"
#include "backend/cuda/hc_device.cuh"
#include "backend/cuda/rows_device.cuh"

namespace ds4::backend::cuda {

namespace {

constexpr int kThreads = 256;                        // 8 warps
constexpr int kE = 4096, kNhc = 4, kHcd = kNhc * kE, kRows = (2 + kNhc) * kNhc;
constexpr int kNseg = kHcd / kF16MmaSeg;             // 32 segments of the state row

// The cluster's shape: C blocks (8: portable; 16: the non-portable size, half the weights and loads a block).
// Block r = 8h + r8 (h < H = C / 8) owns
//   MMA dims [512·r8 + DM·h, + DM) of every stream (DM = 512 / H): quarters 4h/H … of segments 8k + r8 (k = 0 … 3);
//   the state norm's emulated warps r8 + 8w, w in [4h/H, 4(h + 1)/H) (dims 1024m'' + 256w + 32·r8 + c);
//   y's norm chains i = 32·r8 + c with c ≡ h (mod H) (dims i + 256m): with H = 2 each block holds one parity of
//   warp r8's lanes — warp_sum's butterfly adds the two parities only at its last step (offset 1), so each half's
//   sum with the other lanes at zero is that step's operand, and the reader adds even + odd.
template <int C>
struct Shape {
  static constexpr int H = C / 8;
  static constexpr int DM = 512 / H;          // MMA dims a block (of each stream)
  static constexpr int QB = 4 / H;            // quarters a block of each segment
  static constexpr int Qw = QB * 4 / 8;       // quarters a warp (16 / H a block over 8 warps)
  static constexpr int MPos = DM / 4;         // MMA positions (float4 of every stream): threads [0, MPos)
  static constexpr int WN = 4 / H;            // emulated warps of the state norm a block
  static constexpr int NPos = 4 * WN * 8;     // its positions: threads [NBase, NBase + NPos)
  static constexpr int NBase = H == 1 ? 128 : 64;
  static_assert(MPos <= NBase && NBase + NPos <= kThreads, "positions");
};

struct BoundaryParams {
  HcPostArgs post;      // prev_post (n = 1): x the old state [4][4096], f, f_add [4096], post [4], comb [4][4];
                        // out [4][4096] the new state (the pre's x)
  const uint8_t* w;     // [24][row_bytes] F16 controls fn
  uint64_t row_bytes;
  HcSplitArgs s;        // the pre's scale [3], base [24], pre [4], post [4], comb [16], eps, iters (m unused)
  float* mix;           // [24] the pre's mix output
  const float* norm_w;  // [4096] or null
  float* y;             // [4096]
  float* xn;            // [4096]
  float eps;            // rms_eps (both norms)
  bool with_split;
  long long* stamps;    // HcBoundaryLaunch::stamps (null: none)
};

// Block 0's thread `tid0` records clock64 as stamp i (diagnostics, HcBoundaryLaunch::stamps).
__device__ inline void stamp(const BoundaryParams& p, int r, int i, int tid0 = 0) {
  if (p.stamps && r == 0 && static_cast<int>(threadIdx.x) == tid0) p.stamps[i] = clock64();
}

__device__ inline void cluster_arrive() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release;" ::: "memory");
#endif
}
__device__ inline void cluster_arrive_relaxed() {  // no memory order (barrier (0): only that the block runs)
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.relaxed;" ::: "memory");
#endif
}
__device__ inline void cluster_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.wait.acquire;" ::: "memory");
#endif
}
__device__ inline void cluster_sync_all() {
  cluster_arrive();
  cluster_wait();
}
template <int kCount>
__device__ inline void named_sync(int id) {  // the kCount threads of one role (whole warps)
  asm volatile("bar.sync %0, %1;" ::"r"(id), "n"(kCount) : "memory");
}
__device__ inline float4 f4_at(const float* p) { return *reinterpret_cast<const float4*>(p); }
__device__ inline float comp(const float4& v, int c) { return c == 0 ? v.x : c == 1 ? v.y : c == 2 ? v.z : v.w; }

// Segment sums of mix rows 0 … NR − 1 into sg [NR][32] from every block's part_q (layout in the kernel), lane s
// loading segment s of each row (NR loads, 3·NR with H = 2, in flight together); the whole warp calls it.
// Clusters and distributed shared memory are sm_90's: the compute_80 PTX (CI's default archs) gets a kernel that
// traps, never launched there (ops_hc.cu takes this path only when CudaBackend::sm90()).
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
template <int H, int NR>
__device__ inline void gather_segs(const cooperative_groups::cluster_group& cl, float (&part_q)[kRows][kNhc][2],
                                   float (&sg)[NR][kNseg], int lane) {
  const int k = lane / 8, rs = lane % 8;  // segment lane = 8k + rs
  float v[NR];
#pragma unroll
  for (int o = 0; o < NR; ++o) {
    if (H == 1) {
      v[o] = *cl.map_shared_rank(&part_q[o][k][0], rs);
    } else {  // seg = ((q0 + q1) + q2) + q3 (f16_mma_seg_sum's order)
      const float a = *cl.map_shared_rank(&part_q[o][k][0], rs);
      const float* hi = cl.map_shared_rank(&part_q[o][k][0], rs + 8);
      v[o] = (a + hi[0]) + hi[1];
    }
  }
#pragma unroll
  for (int o = 0; o < NR; ++o) sg[o][lane] = v[o];
  __syncwarp();
}

// One-way pushes (kForm bit 256): st.async stores a value into another block's shared memory and completes its bytes
// on that block's mbarrier, which the adder waits for — no cluster barrier (all 2,048 threads, the release waiting
// for the sender's remote stores) between a partial sum and its adder. Each mbarrier is used once (phase 0), its
// count 1 with the expected bytes set by its own block at the start (the tx count may go below zero meanwhile:
// PTX allows stores completing before the expectation); barrier (0) orders the initialization before any push.
__device__ inline uint32_t smem_u32(const void* q) { return static_cast<uint32_t>(__cvta_generic_to_shared(q)); }
__device__ inline uint32_t cluster_u32(uint32_t a, int rank) {  // the same offset in block `rank`'s shared memory
  uint32_t out;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(out) : "r"(a), "r"(rank));
  return out;
}
__device__ inline void mbar_init_expect(uint64_t* mb, uint32_t bytes) {  // one thread, before barrier (0)
  const uint32_t a = smem_u32(mb);
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(a) : "memory");
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(a), "r"(bytes) : "memory");
}
__device__ inline void mbar_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }
__device__ inline void mbar_wait(uint64_t* mb) {  // phase 0 complete: every expected byte stored (acquire, cluster)
  const uint32_t a = smem_u32(mb);
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], 0;\n"
        " selp.u32 %0, 1, 0, p;\n}"
        : "=r"(done)
        : "r"(a)
        : "memory");
  } while (!done);
}
__device__ inline void push_f64(double* dst, int rank, uint64_t* mb, double v) {  // dst, mb: this block's addresses
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b64 [%0], %1, [%2];" ::"r"(
                   cluster_u32(smem_u32(dst), rank)),
               "l"(__double_as_longlong(v)), "r"(cluster_u32(smem_u32(mb), rank))
               : "memory");
}
__device__ inline void push_f32(float* dst, int rank, uint64_t* mb, float v) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(
                   cluster_u32(smem_u32(dst), rank)),
               "r"(__float_as_uint(v)), "r"(cluster_u32(smem_u32(mb), rank))
               : "memory");
}
#endif

// warp_sum's butterfly (offsets 16, 8, 4, 2, 1: every lane ends with these bits, addition being commutative) of
// v[0 … 31] — or of v[0 … 7] with lanes 8 … 31 zero (their steps 16 and 8 add +0 to sums of squares: exact) — from
// shared memory by every lane at once, instead of five rounds of shuffles (kForm bit 64).
__device__ inline double tree_sum32(const double* v) {
  double s[16];
#pragma unroll
  for (int i = 0; i < 16; ++i) s[i] = v[i] + v[i + 16];
#pragma unroll
  for (int i = 0; i < 8; ++i) s[i] = s[i] + s[i + 8];
#pragma unroll
  for (int i = 0; i < 4; ++i) s[i] = s[i] + s[i + 4];
  s[0] = s[0] + s[2];
  s[1] = s[1] + s[3];
  return s[0] + s[1];
}
__device__ inline double tree_sum8(const double* v) {
  double s[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) s[i] = v[i] + v[i + 4];
  s[0] = s[0] + s[2];
  s[1] = s[1] + s[3];
  return s[0] + s[1];
}

// kForm bit 32: the chains of the warp's two quarters u = ql0, ql0 + 1 of one stream in 3 m-tiles (f16_mma_block's
// k-steps, hi then lo, from 0). Tile 0: rows g, g + 8 of quarter ql0 (w[0][b][0]); tile 1: the same rows of ql0 + 1
// (w[1][b][0]); tile 2: row 16 + g of ql0 as tile row g, of ql0 + 1 as tile row g + 8 (w[0][b][1][0], w[1][b][1][0]).
// B: column 0 (lanes g = 0) quarter ql0's split values, column 1 (g = 1) ql0 + 1's, the other columns zero. Kept:
// lane (g, 0)'s c[0][0], c[0][2], c[2][0] (ql0: rows g, g + 8, 16 + g) and c[1][1], c[1][3], c[2][3] (ql0 + 1).
// xh / xl: [stream][512] split parts of this block's MMA dims (stream mk), quarter u at 128u.
__device__ inline void mma_packed(float (&c)[3][4], const uint4 (&w)[2][4][2][2], const uint32_t* xh,
                                  const uint32_t* xl, int ql0, int g, int t) {
#pragma unroll
  for (int i = 0; i < 3; ++i) c[i][0] = c[i][1] = c[i][2] = c[i][3] = 0.0f;
#pragma unroll
  for (int b = 0; b < 4; ++b) {
    uint4 h4[2] = {}, l4[2] = {};
    if (g < 2) {
      const int e = kF16MmaQ * (ql0 + g) + kF16MmaBlk * b + 8 * t;
      h4[0] = *reinterpret_cast<const uint4*>(xh + e);
      h4[1] = *reinterpret_cast<const uint4*>(xh + e + 4);
      l4[0] = *reinterpret_cast<const uint4*>(xl + e);
      l4[1] = *reinterpret_cast<const uint4*>(xl + e + 4);
    }
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const uint32_t bh0 = word_of(h4[q / 2], 2 * (q % 2)), bh1 = word_of(h4[q / 2], 2 * (q % 2) + 1);
      const uint32_t bl0 = word_of(l4[q / 2], 2 * (q % 2)), bl1 = word_of(l4[q / 2], 2 * (q % 2) + 1);
      const uint32_t r0[3] = {word_of(w[0][b][0][0], q), word_of(w[1][b][0][0], q), word_of(w[0][b][1][0], q)};
      const uint32_t r1[3] = {word_of(w[0][b][0][1], q), word_of(w[1][b][0][1], q), word_of(w[1][b][1][0], q)};
#pragma unroll
      for (int i = 0; i < 3; ++i) {
        const uint32_t a[4] = {f16_tf32(r0[i] & 0xffffu), f16_tf32(r1[i] & 0xffffu), f16_tf32(r0[i] >> 16),
                               f16_tf32(r1[i] >> 16)};
        mma_tf32(c[i], a, bh0, bh1);
        mma_tf32(c[i], a, bl0, bl1);
      }
    }
  }
}

// kForm (HcBoundaryLaunch::form): bit 1 — block 0's split warp arrives at barrier (3) before its remote gather of the
// 24 × 32 segment sums (nothing it computes feeds y's norm; barrier (4) keeps every block's shared memory until its
// reads end), so y's warps pass (3) without waiting on the mix; bit 8 (with bit 1) — partial sums pushed,
// not pulled: each block stores its norm sums, segment sums and y norm sum into the shared memory of the blocks that
// add them (remote stores before the barrier's release) instead of those blocks loading them after the barrier (a
// round trip of distributed shared memory after each of the three barriers on the chain); the same values in the
// same lanes, added in the same order. A first barrier, arrived at at the kernel's start and waited for before the
// first remote store, makes sure every block of the cluster runs; no remote access follows barrier (3), so barrier
// (4) goes. Bit 16 — the activations' TF32 split (x·scale = hi + lo) formed once per value by the whole block into
// shared memory after barrier (1), not by every lane of the MMA warps for its 64 fragment values (7 of 8 of them zero
// columns): the MMA warps load hi and lo; the same split of the same product. 0 = session 11's kernel.
// Session 13's bits (8 blocks, with 25): 32 — the warp's two quarters in 3 m-tiles a k-step instead of 4 (rows 0 … 15
// of each quarter in a tile of its own, rows 16 … 23 of both in one: quarter ql0's as tile rows 0 … 7 against vector
// column 0, ql0 + 1's as rows 8 … 15 against column 1 — one B operand for the three, column 0 = quarter ql0's values,
// column 1 = ql0 + 1's): every kept element is the same row · the same vector values in the same chain, and MMA rows
// and columns do not interact (README "F16 MMA order"), so the bits stay; 96 MMAs a warp instead of 128. 64 — the sums
// of pushed partial sums (the state's 32 emulated warp sums, y's 8 warp sums) by warp_sum's tree from shared memory
// in every lane (tree_sum32 / tree_sum8) instead of shuffles. 256 — the pushes as st.async into the adder's shared
// memory completing bytes on its mbarrier (one-way), barriers (1), (2), (3) gone: each adder waits for its own data.
// 128 (with 32) — each warp splits only its own 256 values (no block barrier before the MMAs) and the stream's two
// warps add their segment sums between themselves (q0 + q1 handed to the odd warp, which adds q2, q3 and pushes).
// Only 505 (all of them) is launched: its stepping stones 57, 121, 377 and 1017 (505 on 16 blocks with the MMA
// segments split by stream: not faster on whole decode steps) were removed in session 14 (docs/PERF.md).
template <int C, int kForm>
__global__ void __launch_bounds__(kThreads, 1) hc_boundary_kernel(BoundaryParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();
#else
  using S = Shape<C>;
  constexpr int H = S::H;
  constexpr bool kPush = (kForm & 8) != 0;
  constexpr bool kSplitShared = (kForm & 16) != 0;
  constexpr bool kPack = (kForm & 32) != 0, kTree = (kForm & 64) != 0, kWarpSplit = (kForm & 128) != 0;
  constexpr bool kMbar = (kForm & 256) != 0;
  static_assert(!kPush || (kForm & 1) != 0, "push: with the split warp off barrier (3)");
  static_assert(!(kPack || kTree || kMbar) || (C == 8 && kPush && kSplitShared), "session 13's bits: 8 blocks, form 25");
  static_assert(!kWarpSplit || kPack, "the warp's own split: with the packed tiles");
  namespace cg = cooperative_groups;
  cg::cluster_group cl = cg::this_cluster();
  __shared__ __align__(16) float xm[kNhc][S::DM];        // X' of the MMA dims: [k][i] = X'[k][512·r8 + DM·h + i]
  __shared__ __align__(16) float xq[kNhc][4][S::WN][32]; // X' of the state norm's dims: [k][m''][w − w0][c]
  __shared__ __align__(16) float ys[16][32];             // y[256m + 32·r8 + c] at [m][c] (c ≡ h mod H)
  __shared__ float qs[kNhc][S::QB][kRows];               // quarter sums: stream k, local quarter, row
  __shared__ float part_q[kRows][kNhc][2];               // H = 1: [o][k][0] segment 8k + r8's sum; H = 2, h = 0:
                                                         // [0] = q0 + q1; h = 1: [0] = q2, [1] = q3
  __shared__ double part_n[S::WN];                       // state norm: emulated warp r8 + 8(w0 + w) at [w]
  __shared__ double part_y;                              // y's norm: warp r8 of block_sum (lanes ≡ h mod H)
  __shared__ float segs[kRows][kNseg];                   // segment sums of every mix row (block 0's split warp)
  __shared__ float pre_segs[kNhc][kNseg];                // segment sums of the pre rows (warp 4)
  __shared__ float ms[kRows], sb[3 + kRows], ws[kNhc];   // split warp: mix rows, scale + base; pre
  __shared__ __align__(16) uint32_t xh[kSplitShared ? kNhc : 1][S::DM];  // split: TF32 hi / lo of xm·scale
  __shared__ __align__(16) uint32_t xl[kSplitShared ? kNhc : 1][S::DM];
  __shared__ double all_n[kPush ? 32 : 1];               // push: emulated warp ew's state norm sum at [ew]
  __shared__ double all_y[kPush ? C : 1];                // push: y norm warp r8's sum (H = 2: lanes ≡ h) at [r]
  // push, H = 2: q2, q3 of segment s of each mix row (block 0) and pre row (every block); segs / pre_segs hold q0 + q1.
  __shared__ float segs_b[kPush && H == 2 ? kRows : 1][kNseg][2];
  __shared__ float pre_b[kPush && H == 2 ? kNhc : 1][kNseg][2];
  // kMbar: 0 all_n (32 doubles), 1 pre_segs (4 × 32 floats), 2 segs (block 0: 24 × 32 floats), 3 all_y (8 doubles)
  __shared__ __align__(8) uint64_t mbar[kMbar ? 4 : 1];
  __shared__ float s01[kWarpSplit ? kNhc : 1][kRows];    // kWarpSplit: q0 + q1 of stream k's segment, row o
  const int r = static_cast<int>(cl.block_rank()), r8 = r % 8, h = r / 8;
  const int tid = static_cast<int>(threadIdx.x), lane = tid % kWarp, warp = tid / kWarp, g = lane >> 2, t = lane & 3;
  const int d_m0 = 512 * r8 + S::DM * h;  // first MMA dim
  stamp(p, r, 0);
  if constexpr (kMbar) {
    if (tid == 0) {
      mbar_init_expect(&mbar[0], 32 * sizeof(double));
      mbar_init_expect(&mbar[1], kNhc * kNseg * sizeof(float));
      mbar_init_expect(&mbar[2], r == 0 ? kRows * kNseg * sizeof(float) : 0);  // nothing comes to other blocks
      mbar_init_expect(&mbar[3], C * sizeof(double));
      mbar_init_fence();
    }
  }
  if constexpr (kPush) cluster_arrive_relaxed();  // (0) this block runs (waited for before the first remote store)

  // MMA weights (the contract's fragment layout, f16_mma_load_w): warp w takes stream k = w / 2, local quarters
  // (w % 2)·Qw + qq; m-tile 0 = rows g, g + 8; m-tile 1 = row 16 + g (its rows g + 8: zero rows).
  const int mk = warp / 2, ql0 = (warp % 2) * S::Qw;
  const int64_t e0 = int64_t{kE} * mk + d_m0;
  const uint8_t* const wr[2][2] = {{p.w + g * p.row_bytes, p.w + (g + 8) * p.row_bytes},
                                   {p.w + (16 + g) * p.row_bytes, nullptr}};
  uint4 wq[S::Qw][4][2][2];
#pragma unroll
  for (int qq = 0; qq < S::Qw; ++qq)
#pragma unroll
    for (int b = 0; b < 4; ++b)
      f16_mma_load_w<2>(wq[qq][b], wr, true, e0 + kF16MmaQ * (ql0 + qq) + kF16MmaBlk * b + 8 * t, kHcd, true);
  // y's dims of a thread of warps 4 … 7: m = (tid − 128) / 8, c4 = tid % 8 → dims dy … dy + 3 (H = 2: the parity-h two).
  const bool ywarp = warp >= 4;
  const int ym = (tid - 128) / 8, yc4 = tid % 8;
  const int64_t dy = 256 * ym + 32 * r8 + 4 * yc4;
  float4 nw = make_float4(1, 1, 1, 1);
  if (ywarp && p.norm_w) nw = f4_at(p.norm_w + dy);
  float scale0 = 0.0f, base = 0.0f;
  if (warp == 4 && lane < kNhc) {
    scale0 = p.s.scale[0];
    base = p.s.base[lane];
  }
  if (r == 0 && warp == 0)
    for (int q = lane; q < 3 + kRows; q += kWarp) sb[q] = q < 3 ? p.s.scale[q] : p.s.base[q - 3];
  grid_dependency_wait();  // the post's inputs are the outputs of the kernels before this one
  grid_launch_dependents();
  stamp(p, r, 1);

  // (B) X' at the thread's 4 dims of every stream (hc_post4_kernel's expressions): the MMA dims (stored as the new
  // state, and for the MMAs), the state norm's dims, y's dims (H = 1: the state norm's).
  float pc[20];
  post_load_pc(p.post, pc);
  const bool mpos = tid < S::MPos, npos = tid >= S::NBase && tid < S::NBase + S::NPos;
  const int np = tid - S::NBase, nm = np / (S::WN * 8), nw4 = np / 8 % S::WN, nc4 = np % 8;  // norm position
  const int64_t dnorm = 1024 * nm + 256 * (S::WN * h + nw4) + 32 * r8 + 4 * nc4;
  const bool has = mpos || npos || (H == 2 && ywarp);
  const int64_t d = mpos ? d_m0 + 4 * tid : npos ? dnorm : dy;
  float4 xv[kNhc];
  if (has) {
    const PostIn4 in = post_load4(p.post, d);
#pragma unroll
    for (int k = 0; k < kNhc; ++k) xv[k] = post_value4(in, pc, k);
  }
  if (mpos) {
#pragma unroll
    for (int k = 0; k < kNhc; ++k) {
      *reinterpret_cast<float4*>(&xm[k][4 * tid]) = xv[k];
      *reinterpret_cast<float4*>(p.post.out + k * kE + d) = xv[k];
    }
  } else if (npos) {
#pragma unroll
    for (int k = 0; k < kNhc; ++k) *reinterpret_cast<float4*>(&xq[k][nm][nw4][4 * nc4]) = xv[k];
    named_sync<S::NPos>(2);
    // Chain v = 32·r8 + c + 256w (w = w0 + tid's warp among the norm warps, c = lane): X'[v + 1024k'] for
    // k' = 4k + m'' in order, in double; then emulated warp r8 + 8w's sum (warp_sum over c: rms_scale_v4_of's tree).
    const int wl = (tid - S::NBase) / kWarp;
    if (wl < S::WN) {
      double ss = 0;
#pragma unroll
      for (int kp = 0; kp < 16; ++kp) {
        const float v = xq[kp / 4][kp % 4][wl][lane];
        ss += static_cast<double>(v) * v;
      }
      ss = warp_sum(ss);
      if constexpr (kPush) {  // emulated warp r8 + 8·(WN·h + wl)'s sum into every block's all_n (lane j → block j)
        cluster_wait();       // (0)
        if constexpr (kMbar) {
          if (lane < C) push_f64(&all_n[r8 + 8 * (S::WN * h + wl)], lane, &mbar[0], ss);
        } else if (lane < C) {
          *cl.map_shared_rank(&all_n[r8 + 8 * (S::WN * h + wl)], lane) = ss;
        }
      } else if (lane == 0) {
        part_n[wl] = ss;
      }
    }
  }
  if constexpr (kPush) {
    if (!npos) cluster_wait();  // (0)
  }
  stamp(p, r, 2);
  if constexpr (kMbar) {
    __syncthreads();      // this block's xm
    mbar_wait(&mbar[0]);  // every block's norm sums
  } else {
    cluster_sync_all();  // (1) every block's norm sums and this block's xm
  }
  stamp(p, r, 3);

  // (C) The state's scale (rms_scale_v4_of: emulated warp ew = lane, at rank ew % 8 + 8·(w / WN), slot w % WN for
  // w = ew / 8), flat = X'·scale, the MMA chains of the warp's quarters, then the block's part of each segment sum.
  // Pushed (kPush): the block's sum of segment sg of mix row o to block 0 (the split warp's mix), pre rows to every block.
  auto push_seg = [&](int o, int sg, float v) {
    if constexpr (kMbar) {
      push_f32(&segs[o][sg], 0, &mbar[2], v);
      if (o < kNhc)
#pragma unroll
        for (int j = 0; j < C; ++j) push_f32(&pre_segs[o][sg], j, &mbar[1], v);
    } else {
      *cl.map_shared_rank(&segs[o][sg], 0) = v;
      if (o < kNhc)
#pragma unroll
        for (int j = 0; j < C; ++j) *cl.map_shared_rank(&pre_segs[o][sg], j) = v;
    }
  };
  {
    const int ew8 = lane / 8;
    double tn;
    if constexpr (kTree) {
      tn = tree_sum32(all_n);
    } else {
      tn = kPush ? all_n[lane] : *cl.map_shared_rank(&part_n[ew8 % S::WN], lane % 8 + 8 * (ew8 / S::WN));
      tn = warp_sum(tn);
    }
    const float sc = 1.0f / sqrtf(static_cast<float>(tn / static_cast<double>(kHcd)) + p.eps);
    auto split4 = [&](int i4) {  // float4 i4 of xm (flat) → xh, xl
      const float4 v = reinterpret_cast<const float4*>(&xm[0][0])[i4];
      uint4 hi, lo;
      split_tf32(v.x * sc, hi.x, lo.x);
      split_tf32(v.y * sc, hi.y, lo.y);
      split_tf32(v.z * sc, hi.z, lo.z);
      split_tf32(v.w * sc, hi.w, lo.w);
      reinterpret_cast<uint4*>(&xh[0][0])[i4] = hi;
      reinterpret_cast<uint4*>(&xl[0][0])[i4] = lo;
    };
    if constexpr (kWarpSplit) {  // the warp's own 256 values (quarters ql0, ql0 + 1 of stream mk), 8 a lane
      const int i4 = (mk * S::DM + kF16MmaQ * ql0 + 8 * lane) / 4;
      split4(i4);
      split4(i4 + 1);
      __syncwarp();
    } else if constexpr (kSplitShared) {
      constexpr int kF4 = kNhc * S::DM / 4;  // float4s of xm
#pragma unroll
      for (int i4 = tid; i4 < kF4; i4 += kThreads) split4(i4);
      __syncthreads();
    }
    if constexpr (kPack) {
      float c[3][4];
      mma_packed(c, wq, xh[mk], xl[mk], ql0, g, t);
      // lane (g, 0): rows g, g + 8, 16 + g of quarters ql0 (v[j][0]) and ql0 + 1 (v[j][1])
      const float v[3][2] = {{c[0][0], c[1][1]}, {c[0][2], c[1][3]}, {c[2][0], c[2][3]}};
      if constexpr (kWarpSplit) {  // seg = ((q0 + q1) + q2) + q3: warp 2mk holds q0, q1; warp 2mk + 1 q2, q3
        if (ql0 == 0 && t == 0)
#pragma unroll
          for (int j = 0; j < 3; ++j) s01[mk][g + 8 * j] = v[j][0] + v[j][1];
        named_sync<64>(3 + mk);
        if (ql0 != 0 && t == 0)
#pragma unroll
          for (int j = 0; j < 3; ++j) push_seg(g + 8 * j, 8 * mk + r8, (s01[mk][g + 8 * j] + v[j][0]) + v[j][1]);
      } else if (t == 0) {
#pragma unroll
        for (int j = 0; j < 3; ++j) {
          qs[mk][ql0][g + 8 * j] = v[j][0];
          qs[mk][ql0 + 1][g + 8 * j] = v[j][1];
        }
      }
    } else if constexpr (kSplitShared) {
#pragma unroll
      for (int qq = 0; qq < S::Qw; ++qq) {
        float c[2][4] = {};  // f16_mma_quarter_loaded<2, 1>'s chains (f16_mma_block's order) on the split values
#pragma unroll
        for (int b = 0; b < 4; ++b) {
          uint4 h4[2] = {}, l4[2] = {};
          if (g == 0) {  // vector 0 only; the other vectors are zero columns (split of 0: 0 + 0)
            const int e = kF16MmaQ * (ql0 + qq) + kF16MmaBlk * b + 8 * t;
            h4[0] = *reinterpret_cast<const uint4*>(&xh[mk][e]);
            h4[1] = *reinterpret_cast<const uint4*>(&xh[mk][e + 4]);
            l4[0] = *reinterpret_cast<const uint4*>(&xl[mk][e]);
            l4[1] = *reinterpret_cast<const uint4*>(&xl[mk][e + 4]);
          }
#pragma unroll
          for (int q = 0; q < 4; ++q) {
            const uint32_t bh0 = word_of(h4[q / 2], 2 * (q % 2)), bh1 = word_of(h4[q / 2], 2 * (q % 2) + 1);
            const uint32_t bl0 = word_of(l4[q / 2], 2 * (q % 2)), bl1 = word_of(l4[q / 2], 2 * (q % 2) + 1);
#pragma unroll
            for (int i = 0; i < 2; ++i) {
              const uint32_t w0 = word_of(wq[qq][b][i][0], q), w1 = word_of(wq[qq][b][i][1], q);
              const uint32_t a[4] = {f16_tf32(w0 & 0xffffu), f16_tf32(w1 & 0xffffu), f16_tf32(w0 >> 16),
                                     f16_tf32(w1 >> 16)};
              mma_tf32(c[i], a, bh0, bh1);
              mma_tf32(c[i], a, bl0, bl1);
            }
          }
        }
        if (t == 0) {
          float* qrow = qs[mk][ql0 + qq];
          qrow[g] = c[0][0];
          qrow[g + 8] = c[0][2];
          qrow[16 + g] = c[1][0];
        }
      }
    } else {
#pragma unroll
      for (int qq = 0; qq < S::Qw; ++qq) {
        float x[4][1][8];
#pragma unroll
        for (int b = 0; b < 4; ++b)
#pragma unroll
          for (int i = 0; i < 8; ++i)  // vector 0 only (lanes g = 0); the other vectors are zero columns
            x[b][0][i] = g == 0 ? xm[mk][kF16MmaQ * (ql0 + qq) + kF16MmaBlk * b + 8 * t + i] * sc : 0.0f;
        float c[2][1][4];
        f16_mma_quarter_loaded<2, 1>(c, wq[qq], x);
        if (t == 0) {  // vector 0: accumulator elements 0 (row 16i + g) and 2 (row 16i + g + 8)
          float* qrow = qs[mk][ql0 + qq];
          qrow[g] = c[0][0][0];
          qrow[g + 8] = c[0][0][2];
          qrow[16 + g] = c[1][0][0];
        }
      }
    }
  }
  if (!kWarpSplit) __syncthreads();
  if (!kWarpSplit && tid < kNhc * kRows) {  // seg = ((q0 + q1) + q2) + q3 (f16_mma_seg_sum), the block's part of it
    const int k = tid / kRows, o = tid % kRows;
    if constexpr (kPush) {  // segment 8k + r8 of row o: to block 0 (the split warp's mix), pre rows to every block
      const int sg = 8 * k + r8;
      if (H == 1 || h == 0) {  // the whole sum; H = 2: q0 + q1
        push_seg(o, sg, H == 1 ? f16_mma_seg_sum(qs[k][0][o], qs[k][1][o], qs[k][2][o], qs[k][3][o])
                               : qs[k][0][o] + qs[k][1][o]);
      } else {  // H = 2, h = 1: q2, q3
        const float2 v = make_float2(qs[k][0][o], qs[k][1][o]);
        *reinterpret_cast<float2*>(cl.map_shared_rank(&segs_b[o][sg][0], 0)) = v;
        if (o < kNhc)
#pragma unroll
          for (int j = 0; j < C; ++j) *reinterpret_cast<float2*>(cl.map_shared_rank(&pre_b[o][sg][0], j)) = v;
      }
    } else if (H == 1) {
      part_q[o][k][0] = f16_mma_seg_sum(qs[k][0][o], qs[k][1][o], qs[k][2][o], qs[k][3][o]);
    } else if (h == 0) {
      part_q[o][k][0] = qs[k][0][o] + qs[k][1][o];
    } else {
      part_q[o][k][0] = qs[k][0][o];
      part_q[o][k][1] = qs[k][1][o];
    }
  }
  stamp(p, r, 4);
  if constexpr (!kMbar) {
    cluster_sync_all();  // (2) every block's segment sums
    stamp(p, r, 5);
  }

  // (D) mix row o = (…((0 + seg_0) + seg_1) + …) + seg_31 (seg_total's order): segment s = 8k + r8' from rank r8'
  // (H = 2: (q0 + q1) from r8', then + q2 + q3 from r8' + 8), gathered by lane s (all loads in flight), then lane o
  // adds its row in order.
  auto mix_row = [&](const float (&sg)[kNseg]) {
    float total = 0.0f;
#pragma unroll 8
    for (int s = 0; s < kNseg; ++s) total += sg[s];
    return total;
  };
  if (r == 0 && warp == 0) {  // the split warp (hc_finish_split_warp's values): mix, then Sinkhorn beside y and xn
    if constexpr (kMbar) {
      mbar_wait(&mbar[2]);  // every block's segment sums
      stamp(p, r, 5);
    } else if constexpr ((kForm & 1) != 0) {
      cluster_arrive();  // (3) early: its remote reads end before its arrival at (4)
    }
    if constexpr (!kPush) gather_segs<H, kRows>(cl, part_q, segs, lane);
    if constexpr (kPush && H == 2) {  // lane s: seg = (q0 + q1) + q2 + q3 (gather_segs' expression)
#pragma unroll
      for (int o = 0; o < kRows; ++o) segs[o][lane] = (segs[o][lane] + segs_b[o][lane][0]) + segs_b[o][lane][1];
      __syncwarp();
    }
    if (lane < kRows) {
      const float m = mix_row(segs[lane]);
      ms[lane] = m;
      p.mix[lane] = m;
    }
    __syncwarp();
    stamp(p, r, 6);
    if constexpr ((kForm & 1) == 0) cluster_arrive();  // (3) its remote reads are done
    if (p.with_split) {
      HcSplitArgs sl = p.s;  // the same values, read from shared memory
      sl.scale = sb;
      sl.base = sb + 3;
      hc_split4_token(sl, 0, lane, ms);
    } else if (lane < kNhc) {  // without the split block the pre's own expression writes pre
      p.s.pre[lane] = sigmoid_dev(ms[lane] * sb[0] + sb[3 + lane]) + p.s.eps;
    }
    __syncwarp();
    stamp(p, r, 7);
    if constexpr (!kMbar) cluster_wait();
    if constexpr (!kPush) cluster_sync_all();  // (4)
    return;
  }
  if (ywarp) {
    if (warp == 4) {
      if constexpr (kMbar) mbar_wait(&mbar[1]);  // every block's segment sums of the pre rows
      if constexpr (!kPush) gather_segs<H, kNhc>(cl, part_q, pre_segs, lane);  // the pre rows
      if constexpr (kPush && H == 2) {
#pragma unroll
        for (int o = 0; o < kNhc; ++o) pre_segs[o][lane] = (pre_segs[o][lane] + pre_b[o][lane][0]) + pre_b[o][lane][1];
        __syncwarp();
      }
      if (lane < kNhc) ws[lane] = sigmoid_dev(mix_row(pre_segs[lane]) * scale0 + base) + p.s.eps;  // pre
    }
    named_sync<128>(1);
    // y = Σ_s pre[s]·X'[s] at the thread's dims (hc_fin5_collapse_norm's order, from 0); H = 1: the state norm's
    // positions are y's (xv above), H = 2: y's own.
    const float w0 = ws[0], w1 = ws[1], w2 = ws[2], w3 = ws[3];
    auto collapse = [&](float a0, float a1, float a2, float a3) {
      float acc = 0;
      acc += w0 * a0;
      acc += w1 * a1;
      acc += w2 * a2;
      acc += w3 * a3;
      return acc;
    };
    float yv[4];
#pragma unroll
    for (int c = 0; c < 4; ++c) yv[c] = collapse(comp(xv[0], c), comp(xv[1], c), comp(xv[2], c), comp(xv[3], c));
    if (H == 1) {
      *reinterpret_cast<float4*>(p.y + dy) = make_float4(yv[0], yv[1], yv[2], yv[3]);
      *reinterpret_cast<float4*>(&ys[ym][4 * yc4]) = make_float4(yv[0], yv[1], yv[2], yv[3]);
    } else {
#pragma unroll
      for (int c = 0; c < 4; ++c)
        if (c % 2 == h) {
          p.y[dy + c] = yv[c];
          ys[ym][4 * yc4 + c] = yv[c];
        }
    }
    named_sync<128>(1);
    if (warp == 4) {  // chain i = 32·r8 + lane: y[i + 256m], m = 0 … 15, in double; then warp r8's sum of block_sum
      double ss = 0;
      if (lane % H == h) {
#pragma unroll
        for (int m = 0; m < 16; ++m) {
          const float v = ys[m][lane];
          ss += static_cast<double>(v) * v;
        }
      }
      ss = warp_sum(ss);
      if constexpr (kMbar) {
        if (lane < C) push_f64(&all_y[r], lane, &mbar[3], ss);  // into every block (lane j → block j)
      } else if constexpr (kPush) {
        if (lane < C) *cl.map_shared_rank(&all_y[r], lane) = ss;  // into every block (lane j → block j)
      } else if (lane == 0) {
        part_y = ss;
      }
    }
    if constexpr (kMbar) {
      mbar_wait(&mbar[3]);  // every block's y norm sum
    } else {
      cluster_sync_all();  // (3) every block's y norm sum
    }
    double ty = 0.0;  // block_sum's last warp_sum over the 8 warp sums (H = 2: even lanes' + odd lanes')
    if constexpr (kTree) {
      ty = tree_sum8(all_y);
    } else {
      if (kPush) {
        if (lane < 8) ty = H == 1 ? all_y[lane] : all_y[lane] + all_y[lane + 8];
      } else if (lane < 8) {
        ty = H == 1 ? *cl.map_shared_rank(&part_y, lane)
                    : *cl.map_shared_rank(&part_y, lane) + *cl.map_shared_rank(&part_y, lane + 8);
      }
      ty = warp_sum(ty);
    }
    const float sy = rms_scale_from_sum(ty, kE, p.eps);
    if constexpr (!kPush) cluster_arrive();  // (4) its remote reads are done
    float xo[4];
#pragma unroll
    for (int c = 0; c < 4; ++c) xo[c] = p.norm_w ? yv[c] * sy * comp(nw, c) : yv[c] * sy;
    if (H == 1) {
      *reinterpret_cast<float4*>(p.xn + dy) = make_float4(xo[0], xo[1], xo[2], xo[3]);
    } else {
#pragma unroll
      for (int c = 0; c < 4; ++c)
        if (c % 2 == h) p.xn[dy + c] = xo[c];
    }
    stamp(p, r, 8, 128);
    if constexpr (!kPush) cluster_wait();  // every block's shared memory stays until no block reads it
    return;
  }
  if constexpr (!kMbar) cluster_sync_all();  // (3)
  if constexpr (!kPush) cluster_sync_all();  // (4)
#endif
}

}  // namespace

bool hc_boundary(CudaBackend& be, const HcPreArgs& a, const HcBoundaryLaunch& l) {
  const HcPostArgs& q = a.prev_post;
  const bool shape = (l.cluster == 8 || l.cluster == 16) && a.n == 1 && q.n == 1 && a.nhc == kNhc && q.nhc == kNhc &&
                     a.dim == kE && q.dim == kE && q.out == a.x && q.x != q.out && q.post && q.comb &&
                     a.fn.type == GgmlType::F16 && a.fn.rows == kRows && a.fn.cols == kHcd && a.fn.row_bytes % 16 == 0 &&
                     a.numerics == MatmulNumerics::ds4 && aligned16(a.fn.data) && aligned16(q.x) && aligned16(q.f) &&
                     aligned16(q.out) && (q.f_add == nullptr || aligned16(q.f_add)) && a.y && a.xn && aligned16(a.y) &&
                     aligned16(a.xn) && (a.norm_w == nullptr || aligned16(a.norm_w)) && a.mix && a.pre &&
                     (!l.with_split || (a.post && a.comb));
  if (!shape) return false;
  BoundaryParams p{q, static_cast<const uint8_t*>(a.fn.data), a.fn.row_bytes,
                   HcSplitArgs{a.mix, a.scale, a.base, 1, a.nhc, a.iters, a.hc_eps, a.pre, a.post, a.comb},
                   a.mix, a.norm_w, a.y, a.xn, a.rms_eps, l.with_split, l.stamps};
  void (*kernel)(BoundaryParams) = nullptr;
  if (l.cluster == 16 && l.form != 0 && l.form != 9) return false;
  if (l.cluster == 16) kernel = l.form == 9 ? hc_boundary_kernel<16, 9> : hc_boundary_kernel<16, 0>;
  else if (l.form == 0) kernel = hc_boundary_kernel<8, 0>;
  else if (l.form == 1) kernel = hc_boundary_kernel<8, 1>;
  else if (l.form == 9) kernel = hc_boundary_kernel<8, 9>;
  else if (l.form == 25) kernel = hc_boundary_kernel<8, 25>;
  else if (l.form == 505) kernel = hc_boundary_kernel<8, 505>;
  else return false;
  // 16 blocks is above the portable cluster size: allowed per kernel (a host-side attribute, no stream work).
  if (l.cluster == 16 &&
      !be.check(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1), "hc boundary cluster 16"))
    return true;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(l.cluster));
  cfg.blockDim = dim3(kThreads);
  cfg.stream = be.stream();
  cudaLaunchAttribute at[2];
  at[0].id = cudaLaunchAttributeClusterDimension;
  at[0].val.clusterDim.x = static_cast<unsigned>(l.cluster);
  at[0].val.clusterDim.y = 1;
  at[0].val.clusterDim.z = 1;
  at[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at[1].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = at;
  cfg.numAttrs = l.pdl ? 2 : 1;
  be.check(cudaLaunchKernelEx(&cfg, kernel, p), "hc boundary (HC post + pre, one cluster)");
  return true;
}

}  // namespace ds4::backend::cuda
