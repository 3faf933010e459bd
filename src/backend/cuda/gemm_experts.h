// gemm_experts.h — the entry of gemm_experts.cu for the matmul dispatch (ops_matmul.cu gemv) and the MoE
// op (ops_moe.cu, the down projection with its SwiGLU folded in): the grouped experts' job quantized into
// activation planes and multiplied in one call. Included by .cu files only (a __device__ helper).
// Deliberately not here: other weight types and dense jobs (ops_gemm.cu, gemm_q8.cu).
#pragma once

#include "backend/cuda/cuda_impl.h"
#include "backend/exact_math.h"

namespace ds4::backend::cuda {

// swiglu(g, u) · w, ds4's expression (the routed experts' scale applied before the down projection):
// ops_moe.cu's SwiGLU kernels and gemm_experts.cu's quantizer of the down projection's input.
__device__ inline float moe_swiglu_value(float gv, float uv, float w, float clamp) {
  if (clamp > 0) {
    gv = fminf(gv, clamp);
    uv = fminf(fmaxf(uv, -clamp), clamp);
  }
  return exact_silu(gv) * uv * w;
}

// The routed experts' SwiGLU folded into the down projection's quantizer: the activation row of pair p
// is moe_swiglu_value(x[p][f], u[p][f], weights[p], clamp) (x: the gate rows, u: the up rows, same stride).
struct ExpertsSwiglu {
  const float* u = nullptr;
  const float* weights = nullptr;
  float clamp = 0;
};

// CudaBackendOptions::gemm_experts 13, 20, 25 … 30 (gemm_experts.cu's kernels): the grouped
// expert job j (IQ2_XXS / Q2_K weights, j.groups set) with its activations (with `swiglu`: SwiGLU of
// j.x and swiglu->u, x_div 1) quantized into Q8_K planes in `scratch`, then gemm_experts.cu's kernel.
// false: not taken (variant, type, width, alignment or shared memory) and nothing launched, the caller
// runs its usual path; true: done, or a failure recorded on `be`.
bool gemm_experts_planes(CudaBackend& be, const GemvJob& j, DeviceScratch& scratch, int variant,
                         const ExpertsSwiglu* swiglu = nullptr);

// CudaBackendOptions::gemm_experts 30: the gate and up jobs (same shapes, activations, groups and y
// stride; their own weights and outputs) on one quantization into Q8_K planes and one launch of
// gemm_experts.cu's kernel whose items cover both matrices. false: not taken, nothing launched (the
// caller runs each job as usual); true: done, or a failure recorded on `be`.
bool gemm_experts_gate_up(CudaBackend& be, const GemvJob& gate, const GemvJob& up, DeviceScratch& scratch,
                          int variant);

// Whether the MoE op runs its gate and up projections as one gemm_experts_gate_up call at
// CudaBackendOptions::gemm_experts `variant` (resolved): 30.
bool experts_gate_up_one_launch(int variant);

// Whether the MoE op folds its SwiGLU into the down projection's quantizer (gemm_experts_planes with
// `swiglu`) at CudaBackendOptions::gemm_experts `variant` (resolved): from 20 on.
bool experts_fold_swiglu(int variant);

}  // namespace ds4::backend::cuda
