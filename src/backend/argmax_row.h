// argmax_row.h — the one greedy scan of a row of logits (header-only, no dependencies), shared by the
// runtime's host argmax (ds4::argmax, sampler.cpp), ds4-bench's EOS-excluding argmax and the CPU backend's
// argmax op, and the reference the CUDA argmax kernel is tested against (tests/ops, test_cuda_ops).
// Left to right: the first candidate id is the best so far, and only a strictly larger value replaces it.
// So ties go to the lowest id and a NaN is never chosen, except when it sits at the first candidate id
// (nothing compares greater than... a NaN best, so it stays): backend.h ArgmaxArgs states the same policy.
// Deliberately not here: sampling (sampler.cpp), the device kernel (cuda/argmax.cu).
#pragma once

#include <cstdint>

namespace ds4::backend {

// The id of the largest x[i], i in [0, n) and i != excluded (−1: none excluded); −1 when no id is left.
inline int32_t argmax_row(const float* x, int64_t n, int32_t excluded) {
  int32_t best = -1;
  for (int64_t i = 0; i < n; ++i) {
    if (i == excluded) continue;
    if (best < 0 || x[i] > x[best]) best = static_cast<int32_t>(i);
  }
  return best;
}

}  // namespace ds4::backend
