// experts_gate_up.h — what the MoE op (ops_moe.cu) and the grouping (ops_gemm.cu) ask of gemm_experts.cu's
// variants 42 … 45: the gate and up projections on one activation quantization, and the tile order.
// Included by .cu files only. Deliberately not here: the single-job entries and ExpertsSwiglu (gemm_experts.h).
#pragma once

#include "backend/cuda/gemm_experts.h"

namespace ds4::backend::cuda {

// Whether the MoE op runs its gate and up projections as one gemm_experts_gate_up_once call at
// CudaBackendOptions::gemm_experts `variant` (resolved): 42, 43.
bool experts_gate_up_once(int variant);

// Whether group_by_expert orders the tiles dearest first (group_tiles_kernel by_cost) at `variant`: 42 … 45.
bool experts_tiles_by_cost(int variant);

// Variants 42, 43: the gate job (IQ2_XXS, activations quantized into planes once), then the up job on the
// same planes (same activations, shapes and groups; checked) — two launches, one quantization; the same
// kernels, so the same bits. false: not taken, nothing launched (the caller runs each job as usual); true:
// done, or a failure recorded on `be`.
bool gemm_experts_gate_up_once(CudaBackend& be, const GemvJob& gate, const GemvJob& up, DeviceScratch& scratch,
                               int variant);

}  // namespace ds4::backend::cuda
