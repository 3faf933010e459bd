// bulk_copy.cuh — Hopper (sm_90) bulk global → shared copies completing on a shared-memory mbarrier:
// `cp.async.bulk` pieces that the SM's TMA unit walks without registers or per-16-byte instructions, and
// the transaction-count barrier a consumer waits on (one barrier per ring slot; its phase flips once per
// fill). Used by gemv_stream.cu's bulk ring (CudaBackendOptions::gemv_stream_bulk).
// Below sm_90 (CI also builds compute_80) the bodies trap: callers launch these paths only when
// CudaBackend::sm90() holds. Deliberately not here: tensor-map (2D) copies, clusters, multicast.
#pragma once

#include <cstdint>

#include "backend/cuda/common.cuh"

namespace ds4::backend::cuda {

__device__ inline uint32_t smem_addr(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

// One thread: the barrier at `bar` (8-byte aligned shared memory) expects one arrival per phase; the
// fence makes the initialisation visible to the async proxy (the TMA unit) before any copy names it.
__device__ inline void mbar_init(uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(bar)) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#else
  __trap();
#endif
}

// The one arrival of a phase, announcing `bytes` of copies that will complete on it (issue before them).
__device__ inline void mbar_expect(uint64_t* bar, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
#else
  __trap();
#endif
}

// `bytes` (a multiple of 16; both addresses 16-byte aligned) from global `src` to shared `dst`, counted on `bar`.
__device__ inline void bulk_copy(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   smem_addr(dst)),
               "l"(src), "r"(bytes), "r"(smem_addr(bar))
               : "memory");
#else
  __trap();
#endif
}

// Waits until the phase of parity `parity` of `bar` has completed (its copies' bytes are visible).
__device__ inline void mbar_wait(uint64_t* bar, uint32_t parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
        : "=r"(done)
        : "r"(smem_addr(bar)), "r"(parity)
        : "memory");
  } while (!done);
#else
  __trap();
#endif
}

}  // namespace ds4::backend::cuda
