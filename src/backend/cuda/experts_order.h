// experts_order.h — what gemm_experts.cu's variants ask of the routed experts' grouping (ops_gemm.cu
// group_by_expert): the order of the tiles. Included by .cu files only.
// Deliberately not here: the GEMM entries (gemm_experts.h), the grouping itself (ops_gemm.cu, moe_group.cuh).
#pragma once

namespace ds4::backend::cuda {

// Whether group_by_expert orders the tiles dearest first (group_tiles_kernel by_cost: every full tile and last
// tile of 49 … 64 pairs, then last tiles of 33 … 48, 17 … 32, 1 … 16) at CudaBackendOptions::gemm_experts
// `variant` (resolved): 44. The tile order changes no sum, only which items gemm_experts.cu's blocks walk last.
bool experts_tiles_by_cost(int variant);

}  // namespace ds4::backend::cuda
