// gemm_experts.h — the entry of gemm_experts.cu for the matmul dispatch (ops_matmul.cu gemv): the grouped
// experts' job quantized into activation planes and multiplied in one call.
// Deliberately not here: other weight types and dense jobs (ops_gemm.cu, gemm_q8.cu).
#pragma once

#include "backend/cuda/cuda_impl.h"

namespace ds4::backend::cuda {

// CudaBackendOptions::gemm_experts 6 (a block per item) or 13 (blocks walking the items): the grouped
// expert job j (IQ2_XXS / Q2_K weights, j.groups set) with its activations quantized into Q8_K planes in
// `scratch`, then gemm_experts.cu's kernel. false: not taken (variant, type, width,
// alignment or shared memory), the caller runs its usual path; true: done, or a failure recorded on `be`.
bool gemm_experts_planes(CudaBackend& be, const GemvJob& j, DeviceScratch& scratch, int variant);

}  // namespace ds4::backend::cuda
