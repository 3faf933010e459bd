// experts_gate_up.h — the MoE op's (ops_moe.cu) gate and up projections on gemm_experts.cu with the SwiGLU
// in the up projection's epilogue (CudaBackendOptions::gemm_experts 40). Included by .cu files only.
// Deliberately not here: the single-job entries and ExpertsSwiglu (gemm_experts.h), the kernels.
#pragma once

#include "backend/cuda/gemm_experts.h"

namespace ds4::backend::cuda {

// Whether the MoE op runs its gate and up projections as one gemm_experts_gate_up_swiglu call at
// CudaBackendOptions::gemm_experts `variant` (resolved): 40.
bool experts_swiglu_in_up(int variant);

// Variant 40: the gate job (IQ2_XXS, activations quantized into planes once), then the up job on the same
// planes (same activations, shapes, groups and y stride; checked) whose outputs are the down projection's
// input: moe_swiglu_value(gate output, up value, sw.weights[pair], sw.clamp), stored in the up job's y —
// the values gemm_experts_planes's quantizer with ExpertsSwiglu forms from the two rows, so the down job
// then reads up.y with x_div 1 and no ExpertsSwiglu, with the same bits. sw.u unused. false: not taken,
// nothing launched (the caller runs its usual path); true: done, or a failure recorded on `be`.
bool gemm_experts_gate_up_swiglu(CudaBackend& be, const GemvJob& gate, const GemvJob& up, DeviceScratch& scratch,
                                 int variant, const ExpertsSwiglu& sw);

}  // namespace ds4::backend::cuda
