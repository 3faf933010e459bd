// argmax.cu — CudaBackend::argmax (backend.h ArgmaxArgs): the greedy next token of each row of logits on
// the device, so a greedy decode step downloads 4 bytes per session instead of its [V] logits and can be
// recorded into the step graph with the head.
// One block per row: 1,024 threads scan the row (float4 loads when the row is 16-byte aligned), each
// keeping its best (value, id); the block then reduces the pairs, larger value first, lower id on ties.
// The result equals argmax_row.h's left-to-right scan: NaNs are skipped as candidates, and a NaN at the
// row's first candidate id is answered by thread 0 directly (the scan keeps a NaN best forever).
// Deliberately not here: sampling with temperature (the host sampler reads downloaded logits).
#include <cmath>

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

}  // namespace

void CudaBackend::argmax(const ArgmaxArgs& a) {
  if (failed() || a.rows <= 0) return;
  if (a.n <= 0 || a.n > INT32_MAX || a.rows > INT32_MAX) {
    fail(invalid_argument("cuda backend: argmax of " + std::to_string(a.rows) + " rows of " + std::to_string(a.n) +
                          " values (rows and ids must fit int32, n > 0)"));
    return;
  }
  argmax_kernel<<<static_cast<unsigned>(a.rows), kThreads, 0, stream()>>>(a.x, a.n, a.excluded, a.out);
  launched("argmax");
}

}  // namespace ds4::backend::cuda
