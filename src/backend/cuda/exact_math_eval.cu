// exact_math_eval.cu — see exact_math_eval.h: one thread per swept input.
#include "backend/cuda/exact_math_eval.h"

#include <cuda_runtime.h>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_backend.h"
#include "backend/exact_math.h"

namespace ds4::backend::cuda {

namespace {

__global__ void exact_math_eval_kernel(ExactMathFn fn, uint32_t first, uint32_t stride, int64_t n, float* y) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float x = __uint_as_float(first + static_cast<uint32_t>(i) * stride);
  float v = 0;
  switch (fn) {
    case ExactMathFn::exp: v = exact_exp(x); break;
    case ExactMathFn::log1p: v = exact_log1p(x); break;
    case ExactMathFn::sigmoid: v = exact_sigmoid(x); break;
    case ExactMathFn::softplus: v = exact_softplus(x); break;
    case ExactMathFn::device_expf: v = expf(x); break;
    case ExactMathFn::device_log1pf: v = log1pf(x); break;
  }
  y[i] = v;
}

}  // namespace

bool exact_math_eval(const Backend& be, ExactMathFn fn, uint32_t first, uint32_t stride, int64_t n, float* y) {
  if (n <= 0) return true;
  auto* stream = static_cast<cudaStream_t>(cuda_stream(be));
  exact_math_eval_kernel<<<grid_for(n, 256), 256, 0, stream>>>(fn, first, stride, n, y);
  return cudaGetLastError() == cudaSuccess;
}

}  // namespace ds4::backend::cuda
