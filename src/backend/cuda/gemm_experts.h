// gemm_experts.h — the entry of gemm_experts.cu for the matmul dispatch (ops_matmul.cu gemv) and the MoE
// op (ops_moe.cu, the down projection with its SwiGLU folded in): the grouped experts' job quantized into
// activation planes and multiplied in one call. Included by .cu files only (a __device__ helper).
// Deliberately not here: other weight types and dense jobs (ops_gemm.cu, gemm_q8.cu).
#pragma once

#include "backend/cuda/cuda_impl.h"

namespace ds4::backend::cuda {

// swiglu(g, u) · w, ds4's expression (the routed experts' scale applied before the down projection):
// ops_moe.cu's SwiGLU kernels and gemm_experts.cu's quantizer of the down projection's input.
__device__ inline float moe_swiglu_value(float gv, float uv, float w, float clamp) {
  if (clamp > 0) {
    gv = fminf(gv, clamp);
    uv = fminf(fmaxf(uv, -clamp), clamp);
  }
  return gv / (1.0f + expf(-gv)) * uv * w;
}

// The routed experts' SwiGLU folded into the down projection's quantizer: the activation row of pair p
// is moe_swiglu_value(x[p][f], u[p][f], weights[p], clamp) (x: the gate rows, u: the up rows, same stride).
struct ExpertsSwiglu {
  const float* u = nullptr;
  const float* weights = nullptr;
  float clamp = 0;
};

// CudaBackendOptions::gemm_experts 13 or 20 (gemm_experts.cu's kernels): the grouped
// expert job j (IQ2_XXS / Q2_K weights, j.groups set) with its activations (with `swiglu`: SwiGLU of
// j.x and swiglu->u, x_div 1) quantized into Q8_K planes in `scratch`, then gemm_experts.cu's kernel.
// false: not taken (variant, type, width, alignment or shared memory) and nothing launched, the caller
// runs its usual path; true: done, or a failure recorded on `be`.
bool gemm_experts_planes(CudaBackend& be, const GemvJob& j, DeviceScratch& scratch, int variant,
                         const ExpertsSwiglu* swiglu = nullptr);

// Whether the MoE op folds its SwiGLU into the down projection's quantizer (gemm_experts_planes with
// `swiglu`) at CudaBackendOptions::gemm_experts `variant` (resolved): from 20 on.
bool experts_fold_swiglu(int variant);

}  // namespace ds4::backend::cuda
