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
// Session 13 (docs/PERF.md, engineer `fold`) built and measured three forms, bit for bit, and removed them: the
// router's top-k in its logits kernel's last block (a fence and a counter, then the rank code in one block: 10.1
// against 7.6 µs a pair, +4 µs a further token, 4-layer steps +18…22 µs), q_a's RMSNorm in its gemv_stream launch's
// last block (6.7 against 6.4 µs a pair, steps even: q_a → q_b is not the step's critical chain at 2K), and the
// logits as a programmatic dependent (7.5 against 7.7 µs a pair, steps +15 µs). A programmatic-dependent second
// launch already overlaps its ramp with the matmul; a last-block tail adds a fence + counter round trip and runs the
// op's work serially — a fold here must take work off the chain, not just the launch.
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
