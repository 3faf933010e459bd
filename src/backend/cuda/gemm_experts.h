// gemm_experts.h — the entry of gemm_experts.cu's planes variants for the matmul dispatch
// (ops_matmul.cu gemv): the grouped experts' job quantized into planes and multiplied in one call.
// Deliberately not here: the raw-block variants (cuda_impl.h gemm_experts, called from ops_gemm.cu).
#pragma once

#include "backend/cuda/cuda_impl.h"

namespace ds4::backend::cuda {

// CudaBackendOptions::gemm_experts 3 (one resident block per SM walking the items) or 4 (a block per
// item): the grouped expert job j (IQ2_XXS / Q2_K weights, j.groups set) with its activations quantized
// into Q8_K planes in `scratch`, then gemm_experts.cu's planes kernel. false: not taken (type, width,
// alignment or shared memory), the caller runs its usual path; true: done, or a failure recorded on `be`.
bool gemm_experts_planes(CudaBackend& be, const GemvJob& j, DeviceScratch& scratch, int variant);

}  // namespace ds4::backend::cuda
