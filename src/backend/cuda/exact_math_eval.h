// exact_math_eval.h — evaluates exact_math.h's functions (and, for comparison, CUDA's own expf / log1pf) over a
// sweep of float bit patterns on a CUDA backend's stream, so a test can check that the device computes the host's
// bits for every input (tests/cuda/test_cuda_exact_math.cpp). Test support only: no op calls it.
#pragma once

#include <cstdint>

#include "backend/backend.h"

namespace ds4::backend::cuda {

enum class ExactMathFn : int32_t {
  exp,           // exact_exp
  log1p,         // exact_log1p
  sigmoid,       // exact_sigmoid
  softplus,      // exact_softplus
  device_expf,   // CUDA's expf (what the kernels ran before exact_math.h)
  device_log1pf  // CUDA's log1pf
};

// y[i] = fn(the float whose bits are first + i·stride) for i < n (the bit patterns wrap at 2^32); y: a device
// array of n floats. Enqueued on be's stream (a CUDA backend's); false if the launch failed. Sync before reading.
bool exact_math_eval(const Backend& be, ExactMathFn fn, uint32_t first, uint32_t stride, int64_t n, float* y);

}  // namespace ds4::backend::cuda
