// argmax.cu — CudaBackend::argmax (backend.h ArgmaxArgs): the greedy next token of each row of logits on
// the device, so a greedy decode step downloads 4 bytes per session instead of its [V] logits and can be
// recorded into the step graph with the head.
// One block per row: 1,024 threads scan the row (float4 loads when the row is 16-byte aligned), each
// keeping its best (value, id); the block then reduces the pairs, larger value first, lower id on ties.
// The result equals argmax_row.h's left-to-right scan: NaNs are skipped as candidates, and a NaN at the
// row's first candidate id is answered by thread 0 directly (the scan keeps a NaN best forever).
// The cluster form (sm_90, CudaBackendOptions::hc_fuse's hundreds digit with bit 4 — the output head's launches; rows
// of ≥ kClusterMinN values): a cluster of kCluster blocks per row, each scanning one contiguous slice with all of a
// thread's loads in flight at once (one memory round trip where the one block walks the row in ~32 dependent
// rounds), block 0 reducing the blocks' pairs through distributed shared memory; launched as a programmatic
// dependent of the kernel before it (the head's matvec), so it is resident and waiting when the logits land. The
// pair rule is associative and commutative (the larger value, the lower id on ties), so any split gives the scan's id.
// Deliberately not here: sampling with temperature (the host sampler reads downloaded logits).
#include <cmath>

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
#include <cooperative_groups.h>
#endif

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_impl.h"

namespace ds4::backend::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int32_t kNone = 0x7fffffff;  // no candidate seen (an id no row reaches)

struct Best {
  float v;
  int32_t i;
};

// b replaces a: a candidate over none, a larger value, or an equal value at a lower id.
__device__ __forceinline__ bool better(const Best& a, const Best& b) {
  return b.i != kNone && (a.i == kNone || b.v > a.v || (b.v == a.v && b.i < a.i));
}

__device__ __forceinline__ void consider(Best& b, float v, int32_t i, int32_t excluded) {
  // Within a thread ids only increase, so a strictly larger value is the only way to win.
  if (i == excluded || isnan(v)) return;
  if (b.i == kNone || v > b.v) b = {v, i};
}

__global__ void argmax_kernel(const float* __restrict__ x, int64_t n, int32_t excluded, int32_t* __restrict__ out) {
  const float* row = x + static_cast<int64_t>(blockIdx.x) * n;
  Best b{-INFINITY, kNone};
  if (reinterpret_cast<uintptr_t>(row) % 16 == 0) {
    const int64_t n4 = n / 4;
    const float4* r4 = reinterpret_cast<const float4*>(row);
    for (int64_t j = threadIdx.x; j < n4; j += kThreads) {
      const float4 v = r4[j];
      const int32_t i = static_cast<int32_t>(4 * j);
      consider(b, v.x, i, excluded);
      consider(b, v.y, i + 1, excluded);
      consider(b, v.z, i + 2, excluded);
      consider(b, v.w, i + 3, excluded);
    }
    for (int64_t i = 4 * n4 + threadIdx.x; i < n; i += kThreads) consider(b, row[i], static_cast<int32_t>(i), excluded);
  } else {
    for (int64_t i = threadIdx.x; i < n; i += kThreads) consider(b, row[i], static_cast<int32_t>(i), excluded);
  }
  for (int off = 16; off > 0; off /= 2) {
    const Best o{__shfl_down_sync(0xffffffffu, b.v, off), __shfl_down_sync(0xffffffffu, b.i, off)};
    if (better(b, o)) b = o;
  }
  __shared__ Best warp_best[kThreads / 32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warp_best[warp] = b;
  __syncthreads();
  if (warp != 0) return;
  b = warp_best[lane];  // kThreads / 32 == 32 warps: one per lane
  for (int off = 16; off > 0; off /= 2) {
    const Best o{__shfl_down_sync(0xffffffffu, b.v, off), __shfl_down_sync(0xffffffffu, b.i, off)};
    if (better(b, o)) b = o;
  }
  if (lane != 0) return;
  const int64_t first = excluded == 0 ? 1 : 0;  // the scan's first candidate
  if (first < n && isnan(row[first])) b.i = static_cast<int32_t>(first);
  out[blockIdx.x] = b.i == kNone ? -1 : b.i;
}

static_assert(kThreads / 32 == 32, "the second reduction gives one warp's result to each lane");

// The cluster form's blocks per row (portable cluster size) and the row length from which it is used (below it the
// one block's scan is a few rounds anyway).
constexpr int kCluster = 8;
constexpr int64_t kClusterMinN = 16384;

// The block's pairs reduced (warp shuffles, then warp 0 over the 32 warps' pairs): every thread of the block calls it;
// warp 0 gets the result (lane 0's).
__device__ __forceinline__ Best block_best(Best b, Best* warp_best) {
  for (int off = 16; off > 0; off /= 2) {
    const Best o{__shfl_down_sync(0xffffffffu, b.v, off), __shfl_down_sync(0xffffffffu, b.i, off)};
    if (better(b, o)) b = o;
  }
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warp_best[warp] = b;
  __syncthreads();
  if (warp != 0) return b;
  b = warp_best[lane];
  for (int off = 16; off > 0; off /= 2) {
    const Best o{__shfl_down_sync(0xffffffffu, b.v, off), __shfl_down_sync(0xffffffffu, b.i, off)};
    if (better(b, o)) b = o;
  }
  return b;
}

// Grid (kCluster · rows), clusters of kCluster along x: block rank k of row r scans float4s [k·per, (k + 1)·per) of
// the row (per = ⌈(n / 4) / kCluster⌉; the last block also the n % 4 tail), or scalars [k·per, …) when the row is not
// 16-byte aligned — each thread's ≤ kLoads loads issued before any is compared (ids still rise within a thread).
// sm_90 only (clusters, distributed shared memory); a trap below, never launched there (CudaBackend::argmax).
constexpr int kLoads = 8;
__global__ void __launch_bounds__(kThreads) argmax_cluster_kernel(const float* __restrict__ x, int64_t n,
                                                                  int32_t excluded, int32_t* __restrict__ out) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  cg::cluster_group cl = cg::this_cluster();
  __shared__ Best warp_best[kThreads / 32];
  __shared__ Best blk;
  const int rank = static_cast<int>(cl.block_rank());
  const int64_t r = blockIdx.x / kCluster;
  const float* row = x + r * n;
  grid_dependency_wait();  // the logits are the kernel before this one's output (the head's matvec)
  Best b{-INFINITY, kNone};
  if (reinterpret_cast<uintptr_t>(row) % 16 == 0) {
    const int64_t n4 = n / 4, per = (n4 + kCluster - 1) / kCluster, q0 = rank * per, q1 = q0 + per < n4 ? q0 + per : n4;
    const float4* r4 = reinterpret_cast<const float4*>(row);
    for (int64_t j0 = q0; j0 < q1; j0 += int64_t{kThreads} * kLoads) {
      float4 v[kLoads];
#pragma unroll
      for (int u = 0; u < kLoads; ++u) {
        const int64_t j = j0 + threadIdx.x + int64_t{kThreads} * u;
        v[u] = j < q1 ? r4[j] : make_float4(NAN, NAN, NAN, NAN);  // (NaN: never a candidate)
      }
#pragma unroll
      for (int u = 0; u < kLoads; ++u) {
        const int32_t i = static_cast<int32_t>(4 * (j0 + threadIdx.x + int64_t{kThreads} * u));
        consider(b, v[u].x, i, excluded);
        consider(b, v[u].y, i + 1, excluded);
        consider(b, v[u].z, i + 2, excluded);
        consider(b, v[u].w, i + 3, excluded);
      }
    }
    if (rank == kCluster - 1)
      for (int64_t i = 4 * n4 + threadIdx.x; i < n; i += kThreads) consider(b, row[i], static_cast<int32_t>(i), excluded);
  } else {
    const int64_t per = (n + kCluster - 1) / kCluster, i0 = rank * per, i1 = i0 + per < n ? i0 + per : n;
    for (int64_t i = i0 + threadIdx.x; i < i1; i += kThreads) consider(b, row[i], static_cast<int32_t>(i), excluded);
  }
  b = block_best(b, warp_best);
  if (threadIdx.x == 0) blk = b;
  cl.sync();  // every block's pair in its shared memory
  if (rank == 0 && threadIdx.x < 32) {
    const int lane = threadIdx.x;
    b = lane < kCluster ? *cl.map_shared_rank(&blk, lane) : Best{-INFINITY, kNone};
    for (int off = 16; off > 0; off /= 2) {
      const Best o{__shfl_down_sync(0xffffffffu, b.v, off), __shfl_down_sync(0xffffffffu, b.i, off)};
      if (better(b, o)) b = o;
    }
    if (lane == 0) {
      const int64_t first = excluded == 0 ? 1 : 0;  // the scan's first candidate
      if (first < n && isnan(row[first])) b.i = static_cast<int32_t>(first);
      out[r] = b.i == kNone ? -1 : b.i;
    }
  }
  cl.sync();  // block 0 has read every block's pair before any block exits
#else
  __trap();
#endif
}


}  // namespace

void CudaBackend::argmax(const ArgmaxArgs& a) {
  if (failed() || a.rows <= 0) return;
  if (a.n <= 0 || a.n > INT32_MAX || a.rows > INT32_MAX) {
    fail(invalid_argument("cuda backend: argmax of " + std::to_string(a.rows) + " rows of " + std::to_string(a.n) +
                          " values (rows and ids must fit int32, n > 0)"));
    return;
  }
  // The cluster form (hc_fuse's hundreds digit with bit 4: the output head's launches; sm_90, long rows).
  if ((hc_fuse_ / 100 & 4) != 0 && sm90() && a.n >= kClusterMinN && a.rows <= INT32_MAX / kCluster) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(static_cast<unsigned>(a.rows * kCluster));
    cfg.blockDim = dim3(kThreads);
    cfg.stream = stream();
    cudaLaunchAttribute at[2];
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = kCluster;
    at[0].val.clusterDim.y = 1;
    at[0].val.clusterDim.z = 1;
    at[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[1].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = on_side_ ? 1 : 2;  // (programmatic on the main lane only, as the small kernels)
    check(cudaLaunchKernelEx(&cfg, argmax_cluster_kernel, a.x, a.n, a.excluded, a.out), "argmax (cluster)");
    return;
  }
  argmax_kernel<<<static_cast<unsigned>(a.rows), kThreads, 0, stream()>>>(a.x, a.n, a.excluded, a.out);
  launched("argmax");
}

}  // namespace ds4::backend::cuda
