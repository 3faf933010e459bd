// mma_s8.cuh — the int8 tensor-core and async-copy primitives shared by the kernels that form ds4
// integer block sums on tensor cores: the prefill GEMM (ops_gemm.cu) and the 1..64-vector Q8_0 matmul
// (gemv_mma.cu). sm_80 and later (CI also builds compute_80 PTX).
// Deliberately not here: tiling, block formats and the float order of the block terms (each kernel's
// job, always the CPU's block order; src/backend/cuda/README.md).
#pragma once

#include <cstdint>

namespace ds4::backend::cuda {

// c += a · b for one m16n8k32 tile, s8 · s8 → s32 (PTX fragment layout: a row-major 16×32, b
// column-major 32×8; lane = 4·group + t holds c rows group and group + 8, columns 2t and 2t + 1).
__device__ inline void mma_s8(int (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// |v| < 2^22: exact int→float with an add and a subtract (the I2F unit is slow on sm_90); equal to
// static_cast<float>(v) in that range.
__device__ inline float small_i2f(int v) { return __int_as_float(v + 0x4B400000) - 12582912.0f; }

// (ops_gemm.cu adds a zero-filling cp_async16 overload of its own.) 16-byte global → shared copy that
// does not wait (both addresses 16-byte aligned), L2 only (.cg:
// weights are read once); commit closes a group of copies, wait_group<N> waits until at most N of
// this thread's groups are still in flight (then a __syncwarp/__syncthreads publishes them).
__device__ inline void cp_async16(void* smem_dst, const void* gmem_src) {
  const auto d = static_cast<uint32_t>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(gmem_src) : "memory");
}
__device__ inline void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ inline void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

}  // namespace ds4::backend::cuda
