// l2_prefetch.cu — CudaBackend::prefetch (backend.h "cache hint"): a small kernel that asks the memory
// system to pull up to kMaxRanges weight ranges into L2 and exits without waiting for the bytes.
//
// Why: a decode step alternates weight-streaming matvecs with latency-bound stretches (HC pre ~13 µs,
// attention 15–30 µs, norms, the router) in which HBM sits idle; the H200's 50 MB L2 can hold the next
// 35 MB matrix (q_b, out_a) by the time its matvec starts if the bytes are requested early, beside those
// stretches on the side lane (forward.cpp, ForwardOptions::l2_prefetch).
// How: the ranges are cut into kChunk-byte pieces (16-byte aligned starts, 16-byte multiple sizes); on
// sm_90 a thread issues one `cp.async.bulk.prefetch.L2.global` per piece (the TMA unit of its SM walks it;
// the pieces are spread over up to one block per SM so many units run at once), optionally with an
// evict_last L2 policy (CudaBackendOptions::l2_prefetch_mode 1); mode 2, and below sm_90 (CI's compute_80
// PTX), a thread issues `prefetch.global.L2::evict_last` per 128-byte line of its pieces.
// Deliberately not here: which weights and when (the forward pass), any wait for the bytes or any read of
// them (nothing here changes a value; a range's ragged 16-byte ends are simply not prefetched).
#include <algorithm>

#include "backend/cuda/cuda_impl.h"
#include "backend/cuda/dense_ramp.h"

namespace ds4::backend::cuda {

namespace {

constexpr int kMaxRanges = 4;
constexpr uint32_t kChunk = 16 * 1024;  // bytes one prefetch instruction covers (sm_90)
constexpr int kThreads = 32;

struct PrefetchParams {
  const uint8_t* base[kMaxRanges];
  uint64_t bytes[kMaxRanges];
  uint64_t first_chunk[kMaxRanges + 1];  // prefix sums of each range's piece count
  int n;
  int mode;  // CudaBackendOptions::l2_prefetch_mode
};

// prefetch.global.L2::evict_last over one piece, a 128-byte line per instruction.
__device__ inline void prefetch_lines(const uint8_t* a, uint32_t size) {
  for (uint32_t i = 0; i < size; i += 128) asm volatile("prefetch.global.L2::evict_last [%0];" ::"l"(a + i));
}

__global__ void __launch_bounds__(kThreads) l2_prefetch_kernel(const __grid_constant__ PrefetchParams p) {
  const uint64_t total = p.first_chunk[p.n];
  // Piece c = t·grid + block: consecutive pieces on different SMs, every block busy.
  for (uint64_t c = uint64_t{threadIdx.x} * gridDim.x + blockIdx.x; c < total; c += uint64_t{gridDim.x} * kThreads) {
    int r = 0;
    while (r + 1 < p.n && c >= p.first_chunk[r + 1]) ++r;
    const uint64_t off = (c - p.first_chunk[r]) * kChunk;
    const uint32_t size = static_cast<uint32_t>(std::min<uint64_t>(kChunk, p.bytes[r] - off));  // a multiple of 16
    const uint8_t* a = p.base[r] + off;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (p.mode == 0) {
      asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(a), "r"(size) : "memory");
    } else if (p.mode == 1) {
      uint64_t policy;
      asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
      asm volatile("cp.async.bulk.prefetch.L2.global.L2::cache_hint [%0], %1, %2;" ::"l"(a), "r"(size), "l"(policy)
                   : "memory");
    } else {
      prefetch_lines(a, size);
    }
#else
    prefetch_lines(a, size);
#endif
  }
}

}  // namespace

void CudaBackend::prefetch(std::span<const Weight> ws) {
  PrefetchParams p{};
  for (const Weight& w : ws) {
    if (w.empty() || w.rows <= 0 || p.n == kMaxRanges) continue;
    // The whole 16-byte units inside the weight's bytes (TMA's alignment and size rule).
    const uintptr_t b = reinterpret_cast<uintptr_t>(w.data);
    const uintptr_t e = b + static_cast<uint64_t>(w.rows) * w.row_bytes;
    const uintptr_t b16 = (b + 15) & ~uintptr_t{15}, e16 = e & ~uintptr_t{15};
    if (e16 <= b16) continue;
    p.base[p.n] = reinterpret_cast<const uint8_t*>(b16);
    p.bytes[p.n] = e16 - b16;
    p.first_chunk[p.n + 1] = p.first_chunk[p.n] + (p.bytes[p.n] + kChunk - 1) / kChunk;
    ++p.n;
  }
  if (p.n == 0) return;
  p.mode = l2_prefetch_base_mode(l2_prefetch_mode_);  // the bits above are dense_ramp.h's
  if (sm_count_ == 0 && !check(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, device_),
                               "multiprocessor count"))
    return;
  const uint64_t chunks = p.first_chunk[p.n];
  // A block per SM (fewer for few pieces): 35 MB is 2,176 pieces, ~16 per block on 132 SMs.
  const unsigned blocks = static_cast<unsigned>(std::clamp<uint64_t>(chunks, 1, static_cast<uint64_t>(std::max(sm_count_, 1))));
  l2_prefetch_kernel<<<blocks, kThreads, 0, stream()>>>(p);
  check(cudaGetLastError(), "l2 prefetch");
}

}  // namespace ds4::backend::cuda
