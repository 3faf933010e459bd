// common.cuh — small device helpers shared by the ops_*.cu files: 16-bit float decoding, warp and
// block reductions, launch geometry, programmatic dependent launch. Header-only; every function is
// __device__ inline but the launch helpers (grid_for, launch_dependent).
// Deliberately not here: block formats (ops_matmul.cu holds the decoders and their tables).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace ds4::backend::cuda {

inline constexpr int kWarp = 32;

inline unsigned grid_for(int64_t n, int threads) { return static_cast<unsigned>((n + threads - 1) / threads); }

__device__ inline float f16_dev(uint16_t h) { return __half2float(__ushort_as_half(h)); }
__device__ inline float bf16_dev(uint16_t h) { return __uint_as_float(static_cast<uint32_t>(h) << 16); }

template <typename T>
__device__ inline T warp_sum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ inline float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over a block of blockDim.x threads (a multiple of 32, at most 1024); every thread gets it.
template <typename T>
__device__ inline T block_sum(T v) {
  __shared__ T part[32];
  const int lane = threadIdx.x % kWarp, wid = threadIdx.x / kWarp, nw = blockDim.x / kWarp;
  v = warp_sum(v);
  __syncthreads();  // `part` may still be read by a previous call
  if (lane == 0) part[wid] = v;
  __syncthreads();
  T t = lane < nw ? part[lane] : T(0);
  return warp_sum(t);
}

// Programmatic dependent launch (sm_90 griddepcontrol; nothing below sm_90). A kernel launched with
// cudaLaunchAttributeProgrammaticStreamSerialization may start while the kernel before it still runs:
// it must call grid_dependency_wait() before reading that kernel's outputs (or writing what it reads);
// the kernel before it lets it start early by calling grid_launch_dependents() (in every block).
__device__ inline void grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ inline void grid_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Launches `k` on `st`; with pdl as a programmatic dependent of the kernel before it (it may start before
// that one ends: it calls grid_dependency_wait() before touching that kernel's outputs).
template <typename... P, typename... A>
cudaError_t launch_dependent(bool pdl, dim3 grid, dim3 block, size_t smem, cudaStream_t st, void (*k)(P...),
                             A... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = st;
  cudaLaunchAttribute at[1];
  at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = at;
  cfg.numAttrs = pdl ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, k, args...);
}

// ds4's float → int rounding (quant_math.h nearest_int): clamp to ±4194303 (NaN → low end), then
// round half to even.
__device__ inline int nearest_int_dev(float v) {
  if (!(v > -4194303.0f)) v = -4194303.0f;
  if (v > 4194303.0f) v = 4194303.0f;
  return __float2int_rn(v);
}

__device__ inline int clamp_int_dev(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

}  // namespace ds4::backend::cuda
