// ops_elementwise.cu — flat element-wise ops: fill, add, scale, f16 rounding, SwiGLU (MODEL.md §8 step 5).
#include <cstdint>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_impl.h"
#include "backend/exact_math.h"

namespace ds4::backend::cuda {

namespace {

__global__ void fill_kernel(float* y, float v, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = v;
}

// fill_kernel with 16-byte stores (small_v3; y 16-byte aligned): the emitting decode steps fill ~8 MB of
// compressor state per layer, where fill_kernel's 4-byte stores reached ~1.3 TB/s. Launched as a
// programmatic dependent: it waits before its first store (the kernel before may still read y).
__global__ void fill4_kernel(float* y, float v, int64_t n) {
  grid_dependency_wait();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (4 * i + 3 < n) {
    reinterpret_cast<float4*>(y)[i] = make_float4(v, v, v, v);
  } else {
    for (int64_t j = 4 * i; j < n; ++j) y[j] = v;
  }
}

__global__ void add_kernel(float* y, const float* x, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] += x[i];
}

// small_v3 launches it as a programmatic dependent (the wait is a no-op otherwise).
__global__ void scale_kernel(float* y, float s, int64_t n) {
  grid_dependency_wait();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] *= s;
}

// Round to nearest even through IEEE half; overflow → ±inf, inf/NaN unchanged (primitives round_f16).
__global__ void f16_round_kernel(float* x, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] = __half2float(__float2half_rn(x[i]));
}

// h = silu(min(g, clamp)) · clamp(u, ±clamp) (clamp <= 0: none); the CPU's swiglu_one.
// small_v3 launches it as a programmatic dependent (the wait is a no-op otherwise).
__global__ void swiglu_kernel(const float* g, const float* u, float* h, int64_t n, float clamp) {
  grid_dependency_wait();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float gv = g[i], uv = u[i];
  if (clamp > 0) {
    gv = fminf(gv, clamp);
    uv = fminf(fmaxf(uv, -clamp), clamp);
  }
  h[i] = exact_silu(gv) * uv;
}

}  // namespace

void CudaBackend::fill_f32(float* dst, float value, int64_t count) {
  if (failed() || count <= 0) return;
  if (small_v3_ && reinterpret_cast<uintptr_t>(dst) % 16 == 0) {
    check(launch_dependent(hc_pdl_ && !on_side_ && sm90(), dim3(grid_for((count + 3) / 4, 256)), 256, 0, stream(), fill4_kernel, dst,
                           value, count),
          "fill_f32");
    return;
  }
  fill_kernel<<<grid_for(count, 256), 256, 0, stream()>>>(dst, value, count);
  launched("fill_f32");
}

void CudaBackend::add(float* y, const float* x, int64_t count) {
  if (failed() || count <= 0) return;
  add_kernel<<<grid_for(count, 256), 256, 0, stream()>>>(y, x, count);
  launched("add");
}

void CudaBackend::scale(float* y, float s, int64_t count) {
  if (failed() || count <= 0) return;
  check(launch_dependent(small_v3_ && hc_pdl_ && !on_side_ && sm90(), dim3(grid_for(count, 256)), 256, 0, stream(), scale_kernel, y, s,
                         count),
        "scale");
}

void CudaBackend::f16_round(float* x, int64_t count) {
  if (failed() || count <= 0) return;
  f16_round_kernel<<<grid_for(count, 256), 256, 0, stream()>>>(x, count);
  launched("f16_round");
}

void CudaBackend::swiglu(const SwigluArgs& a) {
  if (failed() || a.count <= 0) return;
  check(launch_dependent(small_v3_ && hc_pdl_ && !on_side_ && sm90(), dim3(grid_for(a.count, 256)), 256, 0, stream(), swiglu_kernel,
                         a.g, a.u, a.h, a.count, a.clamp),
        "swiglu");
}

}  // namespace ds4::backend::cuda
