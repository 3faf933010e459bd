// moe_group.cuh — grouping of routed-expert (token, slot) pairs by expert on the device, as one
// block-wide step that kernels embed (gemv_skinny.cu's group_pairs_kernel, moe_tiles.cu's prologue).
// Deliberately not here: what the groups are used for, and the tensor-core GEMM's tiling of groups
// into 64-pair tiles (ops_gemm.cu group_by_expert).
#pragma once

#include <cstdint>

#include "backend/cuda/common.cuh"

namespace ds4::backend::cuda {

// Most experts a grouping block handles: one thread per expert.
inline constexpr int kMaxGroupExperts = 1024;

// Groups the pairs p < n_pairs by expert ids[p] (ids outside [0, n_expert) are left out): order lists
// pair ids expert by expert, groups[g] = (expert, first, count) for the *n_groups non-empty experts in
// expert order. Called by every thread of one block of kMaxGroupExperts threads: shared-memory
// counts, block-wide inclusive scans (Hillis–Steele) of the counts and of the non-empty flags, then a
// scatter. The order inside a group is not deterministic and need not be: each pair's sums are its own.
// kPre > 0 (ops_gemm.cu's group_tiles_kernel for gemm_experts 44): a thread's first kPre ids are loaded
// at once into registers and reused by the scatter (kPre dependent global loads per loop become one wait;
// ids past kPre·blockDim as before) — the same groups, the same kind of order.
template <int kPre = 0>
__device__ inline void group_pairs_block(const int32_t* ids, int32_t n_pairs, int32_t n_expert, int32_t* order,
                                         int32_t* groups, int32_t* n_groups) {
  __shared__ int32_t cnt[kMaxGroupExperts], scan_n[kMaxGroupExperts], scan_g[kMaxGroupExperts];
  const int e = threadIdx.x;
  const int32_t step = static_cast<int32_t>(blockDim.x);
  int32_t pre[kPre > 0 ? kPre : 1];
#pragma unroll
  for (int i = 0; i < kPre; ++i) pre[i] = e + i * step < n_pairs ? ids[e + i * step] : -1;
  cnt[e] = 0;
  __syncthreads();
#pragma unroll
  for (int i = 0; i < kPre; ++i)
    if (pre[i] >= 0 && pre[i] < n_expert) atomicAdd(&cnt[pre[i]], 1);
  for (int32_t p = e + kPre * step; p < n_pairs; p += step) {
    const int32_t id = ids[p];
    if (id >= 0 && id < n_expert) atomicAdd(&cnt[id], 1);
  }
  __syncthreads();
  const int32_t mine = cnt[e];
  int32_t sn = mine, sg = mine > 0;
  scan_n[e] = sn;
  scan_g[e] = sg;
  __syncthreads();
  for (int d = 1; d < static_cast<int>(blockDim.x); d <<= 1) {
    const int32_t an = e >= d ? scan_n[e - d] : 0, ag = e >= d ? scan_g[e - d] : 0;
    __syncthreads();
    sn += an;
    sg += ag;
    scan_n[e] = sn;
    scan_g[e] = sg;
    __syncthreads();
  }
  if (mine > 0) {
    groups[3 * (sg - 1)] = e;
    groups[3 * (sg - 1) + 1] = sn - mine;
    groups[3 * (sg - 1) + 2] = mine;
  }
  if (e == static_cast<int>(blockDim.x) - 1) *n_groups = sg;
  cnt[e] = sn - mine;  // now the next free slot of expert e
  __syncthreads();
#pragma unroll
  for (int i = 0; i < kPre; ++i)
    if (pre[i] >= 0 && pre[i] < n_expert) order[atomicAdd(&cnt[pre[i]], 1)] = e + i * step;
  for (int32_t p = e + kPre * step; p < n_pairs; p += step) {
    const int32_t id = ids[p];
    if (id >= 0 && id < n_expert) order[atomicAdd(&cnt[id], 1)] = p;
  }
}

}  // namespace ds4::backend::cuda
