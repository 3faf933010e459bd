// matmul_f16_mma_decode.cu — decode-sized F16 matmuls (1 … 8 vectors, ds4 numerics) in README.md's
// "F16 MMA order" (CudaBackendOptions::f16_mma with f16_mma_decode): matmul (router 256 × 4096, the
// head's HC 4 × 16384) and matmul_many (a CSA layer's six projections, the HCA's pair) in one launch of
// up to 8 jobs. Why a kernel of its own: at n = 1 the order's work is a chain of 32 dependent MMAs per
// 128-value quarter, so time is load latency — here each warp owns ONE quarter of an R-row tile
// (R = 4, 8 or 16 rows × 8 vectors) and issues every weight load of it (R = 16: 8 × 16 bytes per lane)
// before its first MMA, the activations (cached, shared by every block) one 32-value block ahead; the four
// quarters of a segment are four warps, a block holds `segs` segments (1 by default, 2 or 4; ≤ 64
// registers, so 1,024 threads per multiprocessor).
// The order is f16_mma.cuh's, unchanged: each quarter's chain is f16_mma_quarter_loaded (blocks 0 … 3,
// k-steps in order, hi then lo), seg = ((q0 + q1) + q2) + q3, y = (…((0 + seg_0) + seg_1) + …) in
// segment order — so a token gets the bits of every other launch shape (batched ≡ solo).
// Rows of more segments than a block holds (the 4096- and 16384-value rows) are split over blocks: each
// block stores its segment sums to scratch (f16_part_: [counters][sums]), counts itself done on its row
// tile's counter after a fence, and the tile's last block adds all of the tile's segment sums in segment
// order and resets the counter (zero between calls; zeroed when the area is allocated).
// With CudaBackendOptions::f16_mma_pdl (off by default: whole steps measured slower) on the main lane
// (sm_90) the kernel is a programmatic dependent: its blocks issue their weight loads while the kernel
// before ends, wait (griddepcontrol) before reading the activations, and let the kernel after start early.
// With CudaBackendOptions::f16_mma_cluster (sm_90, one segment per block, split tiles of 2, 4 or 8
// blocks) the blocks run as clusters of 8, each job's blocks padded to whole clusters: every block keeps
// its segment sums in shared memory and the tile's first block adds its tile's, read from the others'
// shared memory between two cluster barriers — the same additions in the same order as the counter path.
// With CudaBackendOptions::f16_mma_decode_kernel 1 … 9 (sm_90) the calls of many 16-row tiles of whole
// segments (a CSA layer's six projections) go to matmul_f16_mma_ring.cu's weight stream instead, and with 3 … 6
// this kernel's launches of few blocks load all of a quarter's activations before its chain (kXAll).
// Deliberately not here: more than 8 vectors, expert-indexed jobs (matmul_f16_mma.cu), prefill shapes
// (matmul_f16_mma_tiles.cu), the HC controls' segment sums (ops_hc.cu), the scalar segment order.
#include <cooperative_groups.h>

#include <algorithm>
#include <string>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_impl.h"
#include "backend/cuda/f16_mma.cuh"
#include "backend/cuda/matmul_f16_mma_ring.h"

namespace ds4::backend::cuda {

namespace {

constexpr int kDecJobs = 8;
constexpr int kDecMaxVec = 8;                  // one MMA n-tile
constexpr int kDecCounters = 4096;             // row-tile counters at the scratch's start
constexpr uint64_t kDecCounterBytes = kDecCounters * 4;
constexpr int kDecRingCounter = kDecCounters - 2;  // the last two: matmul_f16_mma_ring.cu's tile counter and exit count

struct DecJob {
  const uint8_t* w;
  uint64_t row_bytes;
  int64_t rows, cols;
  const float* x;  // vector v reads row v / x_div of [*][x_stride]
  int64_t x_stride;
  int32_t x_div;
  float* y;        // [n][y_stride]
  int64_t y_stride;
  int64_t part0;   // first segment sum of this job in the scratch (split jobs)
  int32_t nseg;    // ⌈cols / 512⌉
  int32_t spb;     // segments per block: min(nseg, the launch's segs)
  int32_t groups;  // row tiles per block (segs / spb where the row fits in a block, else 1)
  int32_t sblocks; // blocks per row tile (> 1: split, the tile's last block adds the segment sums)
  int32_t block0;  // first block of the job
  int32_t tile0;   // first counter of the job (split jobs)
  int32_t wide;    // 16-byte loads (cols % 8 == 0, aligned rows and x)
};

struct DecParams {
  DecJob job[kDecJobs];
  int32_t n_jobs, n_vec;
  int* done;    // [kDecCounters] (zero between calls)
  float* part;  // split jobs' segment sums: [tile][nseg][R][8]
};

// Block of 4·kSegs warps; warp w: row tile group w / (4·spb), segment w % (4·spb) / 4 of the block's,
// quarter w % 4 of it.
// kCluster (kSegs = 1 only): launched as clusters of 8 blocks, split tiles combined through distributed
// shared memory (file comment).
// kXAll (f16_mma_decode_kernel ≥ 3, launches of few blocks: the router, the head's HC, the HCA pair): every
// activation load of the quarter issued at once before the chain (32 registers) instead of one block ahead —
// one memory latency before the 32 MMAs instead of one between each 8 of them; few blocks, so the
// registers cost no occupancy.
template <int R, int kSegs, bool kCluster, bool kXAll>
__global__ void __launch_bounds__(4 * kSegs * kWarp, kXAll ? 4 : 8 / kSegs) f16_mma_dec_kernel(DecParams p) {
  constexpr int kWarps = 4 * kSegs, kH = R == 16 ? 2 : 1;
  static_assert(!kCluster || kSegs == 1, "clusters hold one segment per block");
  __shared__ float qs[kWarps][4][kWarp];  // quarter accumulators: warp, element r, lane
  __shared__ float cs[kCluster ? R * kDecMaxVec : 1];  // kCluster: this block's segment sums [row][vector]
  __shared__ int last;
  DecJob J = p.job[0];
#pragma unroll
  for (int k = 1; k < kDecJobs; ++k)  // constant indices: the table stays in parameter space
    if (k < p.n_jobs && static_cast<int32_t>(blockIdx.x) >= p.job[k].block0) J = p.job[k];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, g = lane >> 2, t = lane & 3;
  const int64_t b = static_cast<int64_t>(blockIdx.x) - J.block0;
  const int64_t tb = b / J.sblocks, sg = b % J.sblocks;  // row tile (group) index, segment block
  const int grp = warp / (4 * J.spb), lq = warp % (4 * J.spb);
  const int64_t tile = tb * J.groups + grp, s = sg * J.spb + lq / 4, u = 4 * s + lq % 4;
  const bool on = grp < J.groups && s < J.nseg && tile * R < J.rows;  // uniform over the warp
  float c[1][1][4] = {{{0.0f, 0.0f, 0.0f, 0.0f}}};
  // Every load of the quarter first (weights: rows g, g + 8 of the tile; activations: vector g). The
  // weights are written by nothing, so they are requested before griddepcontrol.wait (f16_mma_pdl: a
  // programmatic dependent launch; a no-op otherwise); every thread waits before it reads x or writes.
  uint4 w[4][1][2];
  const bool wide = J.wide != 0;
  if (on) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t o = tile * R + g + 8 * h;
      const bool row_on = h < kH && g + 8 * h < R && o < J.rows;
      const uint8_t* wr = row_on ? J.w + static_cast<uint64_t>(o) * J.row_bytes : nullptr;
#pragma unroll
      for (int bb = 0; bb < 4; ++bb)
        w[bb][0][h] = wr ? load_w8(wr, u * kF16MmaQ + bb * kF16MmaBlk + 8 * t, J.cols, wide) : make_uint4(0, 0, 0, 0);
    }
  }
  grid_dependency_wait();
  grid_launch_dependents();
  if (on && kXAll) {
    const float* xr = g < p.n_vec ? J.x + (g / J.x_div) * J.x_stride : nullptr;
    float x[4][1][8];
#pragma unroll
    for (int bb = 0; bb < 4; ++bb) load_x8_mma<false>(xr, u * kF16MmaQ + bb * kF16MmaBlk + 8 * t, J.cols, wide, 1.0f, x[bb][0]);
#pragma unroll
    for (int bb = 0; bb < 4; ++bb) f16_mma_block<1, 1>(c, w[bb], x[bb]);
  } else if (on) {
    float x[2][1][8];
    // Activations (small, cached) one block ahead of the MMAs that read them: 16 registers instead of
    // 32, so 512- and 1024-thread blocks keep two and one per multiprocessor. The chain is
    // f16_mma_quarter_loaded's: blocks 0 … 3 in order from c = 0.
    const float* xr = g < p.n_vec ? J.x + (g / J.x_div) * J.x_stride : nullptr;
    load_x8_mma<false>(xr, u * kF16MmaQ + 8 * t, J.cols, wide, 1.0f, x[0][0]);
#pragma unroll
    for (int bb = 0; bb < 4; ++bb) {
      if (bb < 3) load_x8_mma<false>(xr, u * kF16MmaQ + (bb + 1) * kF16MmaBlk + 8 * t, J.cols, wide, 1.0f, x[(bb + 1) & 1][0]);
      f16_mma_block<1, 1>(c, w[bb], x[bb & 1]);
    }
  }
#pragma unroll
  for (int r = 0; r < 4; ++r) qs[warp][r][lane] = c[0][0][r];
  __syncthreads();
  // (group, row, vector): the block's segment sums, in segment order.
  const int nv = p.n_vec, nk = static_cast<int>(std::min<int64_t>(J.spb, J.nseg - sg * J.spb));
  const bool split = J.sblocks > 1;
  for (int i = threadIdx.x; i < J.groups * R * nv; i += blockDim.x) {
    const int gi = i / (R * nv), rr = i / nv % R, v = i % nv;
    const int64_t o = (tb * J.groups + gi) * R + rr;
    if (o >= J.rows) continue;
    const int ln = 4 * (rr % 8) + v / 2, rq = 2 * (rr / 8) + (v & 1);  // accumulator element of (rr, v)
    float acc = 0.0f;
    for (int k = 0; k < nk; ++k) {
      const int w0 = gi * 4 * J.spb + 4 * k;
      const float seg = f16_mma_seg_sum(qs[w0][rq][ln], qs[w0 + 1][rq][ln], qs[w0 + 2][rq][ln], qs[w0 + 3][rq][ln]);
      if (split && kCluster)
        cs[rr * kDecMaxVec + v] = seg;  // k = 0: the block's one segment
      else if (split)
        p.part[J.part0 + ((tb * J.nseg + sg * J.spb + k) * R + rr) * kDecMaxVec + v] = seg;
      else
        acc += seg;  // (…((0 + seg_0) + seg_1) + …)
    }
    if (!split) J.y[v * J.y_stride + o] = acc;
  }
  if (!split) return;  // uniform over a cluster: a job's blocks fill whole clusters
  if constexpr (kCluster) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    // The tile's blocks are ranks first … first + sblocks − 1 of the cluster (sblocks divides 8, jobs start
    // on a cluster): its first block adds their sums in segment order once all have stored them, and every
    // block stays until that is done (the second barrier).
    namespace cg = cooperative_groups;
    cg::cluster_group cl = cg::this_cluster();
    cl.sync();
    if (sg == 0) {
      const unsigned first = cl.block_rank();
      for (int i = threadIdx.x; i < R * nv; i += blockDim.x) {
        const int rr = i / nv, v = i % nv;
        const int64_t o = tb * R + rr;
        if (o >= J.rows) continue;
        float acc = 0.0f;
        for (int k = 0; k < J.sblocks; ++k) acc += cl.map_shared_rank(cs, first + k)[rr * kDecMaxVec + v];
        J.y[v * J.y_stride + o] = acc;
      }
    }
    cl.sync();
#endif
    return;
  }
  // Split: the tile's last block adds every segment sum in order (the others' stores fenced before
  // their count; this block's fence after seeing the count orders its reads after them).
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(&p.done[J.tile0 + tb], 1) == J.sblocks - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  for (int i = threadIdx.x; i < R * nv; i += blockDim.x) {
    const int rr = i / nv, v = i % nv;
    const int64_t o = tb * R + rr;
    if (o >= J.rows) continue;
    const float* q = p.part + J.part0 + (tb * J.nseg * R + rr) * kDecMaxVec + v;
    float acc = 0.0f;
    for (int k = 0; k < J.nseg; ++k) acc += __ldcg(q + static_cast<int64_t>(k) * R * kDecMaxVec);  // segment order
    J.y[v * J.y_stride + o] = acc;
  }
  if (threadIdx.x == 0) p.done[J.tile0 + tb] = 0;  // ready for the next call
}

constexpr int kDecCluster = 8;  // blocks per cluster (f16_mma_cluster)

template <int R, int kSegs, bool kCluster, bool kXAll = false>
cudaError_t launch_dec(const DecParams& p, unsigned blocks, bool pdl, cudaStream_t s) {
  if constexpr (!kCluster) {
    return launch_dependent(pdl, dim3(blocks), dim3(4 * kSegs * kWarp), 0, s, f16_mma_dec_kernel<R, kSegs, false, kXAll>, p);
  } else {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(blocks);
    cfg.blockDim = dim3(4 * kSegs * kWarp);
    cfg.stream = s;
    cudaLaunchAttribute at[2];
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = kDecCluster;
    at[0].val.clusterDim.y = 1;
    at[0].val.clusterDim.z = 1;
    at[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[1].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = pdl ? 2 : 1;
    return cudaLaunchKernelEx(&cfg, f16_mma_dec_kernel<R, kSegs, true, kXAll>, p);
  }
}

template <int R>
cudaError_t launch_dec_segs(const DecParams& p, unsigned blocks, int segs, bool cluster, bool pdl, bool x_all,
                            cudaStream_t s) {
  if (x_all && segs == 1)
    return cluster ? launch_dec<R, 1, true, true>(p, blocks, pdl, s) : launch_dec<R, 1, false, true>(p, blocks, pdl, s);
  if (cluster) return launch_dec<R, 1, true>(p, blocks, pdl, s);
  if (segs == 1) return launch_dec<R, 1, false>(p, blocks, pdl, s);
  if (segs == 2) return launch_dec<R, 2, false>(p, blocks, pdl, s);
  return launch_dec<R, 4, false>(p, blocks, pdl, s);
}

}  // namespace

bool CudaBackend::f16_mma_decode(std::span<const GemvJob> jobs) {
  if (!f16_mma_decode_ || jobs.empty() || jobs.size() > kDecJobs) return false;
  const int64_t n = jobs[0].n_vec;
  if (n < 1 || n > kDecMaxVec) return false;
  int64_t total_rows = 0;
  for (const GemvJob& j : jobs)
    if (j.ids || j.groups || j.group_rows != 0 || j.n_vec != n || j.w.rows <= 0 || j.w.cols <= 0 || j.x_div < 1 ||
        j.numerics != MatmulNumerics::ds4)
      return false;
    else
      total_rows += j.w.rows;
  // The scratch area (f16_part_): counters, then split rows' segment sums. A new area (eager: ensure never grows
  // while a graph is recorded): its counters start at zero, and every call leaves them at zero.
  auto ensure_dec_scratch = [&](uint64_t bytes) {
    const DeviceScratch before = f16_part_;
    if (!ensure(f16_part_, bytes, "f16 mma decode segment sums")) return false;
    return (f16_part_.ptr == before.ptr && f16_part_.bytes == before.bytes) ||
           check(cudaMemsetAsync(f16_part_.ptr, 0, kDecCounterBytes, stream()), "f16 mma decode counters");
  };
  // f16_mma_decode_kernel 1 / 2 (sm_90): the streaming ring kernel where it takes the shape (matmul_f16_mma_ring.cu:
  // many 16-row tiles of whole segments — a CSA layer's six projections), tiles by a counter (1) or static (2);
  // 3 = 1, and the launches of few blocks left to this kernel (the router, the head's HC, the HCA pair) with
  // every activation load issued before the chain (kXAll); 4 = 3 with those launched as programmatic
  // dependents on the main lane (their weight loads before griddepcontrol.wait); 5 / 6 = 3 with 2 / 3 ring blocks
  // per multiprocessor instead of 4 (room for the other lane's kernel beside it). 7 … 9: the ring with one 2-D
  // tensor copy per segment instead of 16 row copies (W1: the row copies left the blocks waiting, 31–52 µs against
  // this kernel's 21), tiles by a counter with 4 blocks per multiprocessor (7), static (8), by a counter with 2 (9);
  // the other launches as by kernel 0.
  const int variant = f16_dec_kernel_;
  if (variant >= 1 && variant <= 9 && sm90() && stream_device_info() &&
      f16_mma_ring_takes(jobs, sm_count_)) {
    if (!ensure_dec_scratch(kDecCounterBytes)) return true;  // error recorded
    F16RingLaunch l;
    l.sm_count = sm_count_;
    l.blocks_per_sm = variant == 5 || variant == 9 ? 2 : variant == 6 ? 3 : 4;
    l.tensor = variant >= 7;
    l.counters = static_cast<int*>(f16_part_.ptr) + kDecRingCounter;
    l.pdl = f16_mma_pdl_ && !on_side_;
    l.variant = variant == 2 || variant == 8 ? 2 : 1;
    l.stream = stream();
    check(f16_mma_ring_launch(jobs, l), "matmul f16 decode (MMA order, ring)");
    return true;
  }
  // By shape (W2 on the H200, every launch shape measured): one segment per block (4 warps, 128 threads,
  // many blocks per multiprocessor while chains run; split rows finished by the last block) — the CSA
  // matmul_many 17.9 µs against 19.4 with 4 segments and 27.6 with whole rows in 1,024-thread blocks; 16-row
  // tiles where the rows are many, 8 or 4 where 16-row ones would leave the device idle (the router's 256
  // rows: 8-row tiles, 256 blocks, 5.1 µs).
  const int R = f16_dec_rows_ ? f16_dec_rows_ : total_rows >= 1024 ? 16 : total_rows >= 64 ? 8 : 4;
  const int segs = f16_dec_segs_ ? f16_dec_segs_ : 1;
  // Clusters where every split job's tile is 2, 4 or 8 blocks of one segment (sm_90).
  bool cluster = f16_mma_cluster_ && segs == 1 && sm90();
  for (const GemvJob& j : jobs) {
    const int64_t nseg = (j.w.cols + kF16MmaSeg - 1) / kF16MmaSeg;
    if (nseg > 1 && kDecCluster % nseg != 0) cluster = false;
  }
  DecParams p{};
  p.n_jobs = static_cast<int32_t>(jobs.size());
  p.n_vec = static_cast<int32_t>(n);
  int64_t blocks = 0, tiles_split = 0, part = 0;
  for (size_t k = 0; k < jobs.size(); ++k) {
    const GemvJob& j = jobs[k];
    DecJob& J = p.job[k];
    J.w = static_cast<const uint8_t*>(j.w.data);
    J.row_bytes = j.w.row_bytes;
    J.rows = j.w.rows;
    J.cols = j.w.cols;
    J.x = j.x;
    J.x_stride = j.x_stride;
    J.x_div = j.x_div;
    J.y = j.y;
    J.y_stride = j.y_stride;
    J.wide = j.w.cols % 8 == 0 && j.w.row_bytes % 16 == 0 && aligned16(j.w.data) && aligned16(j.x) && j.x_stride % 4 == 0;
    const int64_t nseg = (j.w.cols + kF16MmaSeg - 1) / kF16MmaSeg, tiles = (j.w.rows + R - 1) / R;
    J.nseg = static_cast<int32_t>(nseg);
    J.spb = static_cast<int32_t>(std::min<int64_t>(nseg, segs));
    J.groups = nseg <= segs ? static_cast<int32_t>(segs / nseg) : 1;
    J.sblocks = static_cast<int32_t>((nseg + J.spb - 1) / J.spb);
    J.block0 = static_cast<int32_t>(blocks);
    J.tile0 = static_cast<int32_t>(tiles_split);
    J.part0 = part;
    blocks += J.sblocks > 1 ? tiles * J.sblocks : (tiles + J.groups - 1) / J.groups;
    if (cluster) {  // whole clusters per job (the padding blocks find no rows)
      blocks = (blocks + kDecCluster - 1) / kDecCluster * kDecCluster;
      continue;
    }
    if (J.sblocks > 1) {
      tiles_split += tiles;
      part += tiles * nseg * R * kDecMaxVec;
    }
  }
  if (tiles_split > kDecRingCounter || blocks > (int64_t{1} << 30)) return false;  // not a decode shape: the other kernels
  if (tiles_split > 0) {
    if (!ensure_dec_scratch(kDecCounterBytes + static_cast<uint64_t>(part) * 4)) return true;  // error recorded
    p.done = static_cast<int*>(f16_part_.ptr);
    p.part = reinterpret_cast<float*>(static_cast<char*>(f16_part_.ptr) + kDecCounterBytes);
  }
  const unsigned grid = static_cast<unsigned>(blocks);
  // The side lane keeps plain stream order (as the other programmatic dependents: its kernel before may
  // be the fork's event).
  const bool pdl = (f16_mma_pdl_ || variant == 4) && !on_side_ && sm90();
  const bool x_all = variant >= 3 && variant <= 6 && (sm_count_ == 0 || blocks <= int64_t{4} * sm_count_);
  const cudaError_t e = R == 16  ? launch_dec_segs<16>(p, grid, segs, cluster, pdl, x_all, stream())
                        : R == 8 ? launch_dec_segs<8>(p, grid, segs, cluster, pdl, x_all, stream())
                                 : launch_dec_segs<4>(p, grid, segs, cluster, pdl, x_all, stream());
  check(e, "matmul f16 decode (MMA order)");
  return true;
}

}  // namespace ds4::backend::cuda
