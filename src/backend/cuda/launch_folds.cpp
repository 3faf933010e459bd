// launch_folds.cpp — Backend's op pairs on the CUDA backend (CudaBackendOptions::launch_folds).
//
// The forward pass issues three pairs back to back on each decode layer's chain: q_a's matmul and its
// RMSNorm (1024 values a token), q_b's / kv's matmul and their norm + RoPE, the router's matmul and its
// top-k. Each second op is a short launch of its own that waits for the whole matmul; a kernel that runs it
// in its own launch (its last block, or each block on the rows it wrote) takes one launch off the chain.
// Here: the one place that decides per pair — the pair's bit in launch_folds_ offers the second op to the
// matmul's kernel through GemvJob's y_norm / y_norm_rope / y_router; a kernel that folds it sets *folded,
// and otherwise (the bit off, another kernel, a shape it does not take) the second op runs as its own
// launch, as the interface's default does. Same bits either way.
#include "backend/cuda/cuda_impl.h"

namespace ds4::backend::cuda {

void CudaBackend::matmul_rms_norm(const MatmulArgs& m, const RmsNormArgs& n) {
  matmul(m);
  rms_norm(n);
}

void CudaBackend::matmul_norm_rope(const MatmulArgs& m, const NormRopeArgs& r) {
  matmul(m);
  norm_rope(r);
}

void CudaBackend::router_logits(const MatmulArgs& m, const RouterArgs& r) {
  matmul(m);
  router(r);
}

}  // namespace ds4::backend::cuda
