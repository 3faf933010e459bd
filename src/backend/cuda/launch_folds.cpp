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
// The folds (launch_folds.h bits):
//   kFoldRmsNorm: q_a's dense matmul at one token (gemv_stream.cu, 1024 × 4096 Q8_0) runs its RMSNorm
//     (norm_device.cuh, rms_norm3_kernel's code) in the last block to finish — one launch less per layer.
//   kRouterPdl (not a fold): the router's logits (matmul_f16_mma_decode.cu) as a programmatic dependent of the kernel
//     before (the FFN's HC pre), its weight loads under that kernel's tail; the selection stays its own launch.
#include "backend/cuda/cuda_impl.h"
#include "backend/cuda/launch_folds.h"

namespace ds4::backend::cuda {

int* fold_counters(CudaBackend& be, DeviceScratch& area) {
  const DeviceScratch before = area;
  if (!be.ensure(area, kFoldScratchBytes, "launch fold counters")) return nullptr;
  if ((area.ptr != before.ptr || area.bytes != before.bytes) &&
      !be.check(cudaMemsetAsync(area.ptr, 0, kFoldScratchBytes, be.stream()), "launch fold counters"))
    return nullptr;
  return static_cast<int*>(area.ptr);
}

void CudaBackend::matmul_rms_norm(const MatmulArgs& m, const RmsNormArgs& n) {
  if ((launch_folds_ & kFoldRmsNorm) && !failed() && m.n > 0 && n.rows == m.n && n.x == m.y && n.stride == m.y_stride &&
      n.dim == m.w.rows) {
    GemvJob j = gemv_job(m);
    bool folded = false;
    j.y_norm = &n;
    j.folded = &folded;
    gemv(j, act_);
    if (!folded) rms_norm(n);
    return;
  }
  matmul(m);
  rms_norm(n);
}

void CudaBackend::matmul_norm_rope(const MatmulArgs& m, const NormRopeArgs& r) {
  matmul(m);
  norm_rope(r);
}

void CudaBackend::router_logits(const MatmulArgs& m, const RouterArgs& r) {
  if (launch_folds_ & kRouterPdl) {  // the logits' job marked as the router's (no fold: *folded stays unset)
    GemvJob j = gemv_job(m);
    j.y_router = &r;
    gemv(j, act_);
  } else {
    matmul(m);
  }
  router(r);
}

}  // namespace ds4::backend::cuda
