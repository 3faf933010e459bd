// moe_warp_ring.cuh — a warp's run of expert items and its private cp.async ring in shared memory, shared by
// the warp tiles (moe_warp_tiles.cu) and the one-token kernels (moe_one_token.cu): the run's bounds, the
// ring's first copies and the per-item step (kStages − 1 items in flight while one is computed).
// Deliberately not here: what an item is, its order or how it is copied (the kernels' issue functions).
#pragma once

#include <cstdint>

#include "backend/cuda/common.cuh"
#include "backend/cuda/mma_s8.cuh"

namespace ds4::backend::cuda {

// This warp's run [begin, end) of `items` items, cut evenly over the grid's warps (warps_per_block a block):
// warp w takes items [w·per, (w + 1)·per).
__device__ inline void warp_run(int64_t items, int warps_per_block, int wid, int64_t& begin, int64_t& end) {
  const int64_t warps = static_cast<int64_t>(gridDim.x) * warps_per_block;
  const int64_t per = (items + warps - 1) / warps;
  begin = (static_cast<int64_t>(blockIdx.x) * warps_per_block + wid) * per;
  end = begin + per < items ? begin + per : items;
}

// The ring's first kStages − 1 items: issue_next(stage) for each within the run, one commit group per stage
// (empty past the run's end, so ring_step's wait counts stay right).
template <int kStages, typename Issue>
__device__ inline void ring_fill(int64_t begin, int64_t end, Issue&& issue_next) {
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (begin + s < end) issue_next(s);
    cp_async_commit();
  }
}

// Item `item` of the run [begin, end): the copy kStages − 1 items ahead issued (into the stage the item
// before this one used), then this item's copies awaited by every lane. Returns this item's stage.
template <int kStages, typename Issue>
__device__ inline int ring_step(int64_t item, int64_t begin, int64_t end, Issue&& issue_next) {
  const int k = static_cast<int>(item - begin);
  if (item + kStages - 1 < end) issue_next((k + kStages - 1) % kStages);
  cp_async_commit();
  cp_async_wait<kStages - 1>();  // this item's group has landed
  __syncwarp();                  // … for every lane's copies
  return k % kStages;
}

}  // namespace ds4::backend::cuda
