// pdl_launch.cuh — host-side launch of a kernel as a programmatic dependent of the kernel before it on
// its stream (sm_90; the device side is common.cuh's grid_dependency_wait / grid_launch_dependents).
// Used by the spread HC pre (ops_hc.cu) and the expert tiles' down projection (moe_tiles.cu).
// Deliberately not here: when a launch may be dependent (each caller knows what its kernel reads early).
#pragma once

#include <cuda_runtime.h>

namespace ds4::backend::cuda {

// Launches `k` on `st`; with pdl as a programmatic dependent of the kernel before it (it may start before
// that one ends: it calls grid_dependency_wait() before touching that kernel's outputs).
template <typename... P, typename... A>
cudaError_t launch_dependent(bool pdl, dim3 grid, dim3 block, size_t smem, cudaStream_t st, void (*k)(P...),
                             A... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = st;
  cudaLaunchAttribute at[1];
  at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = at;
  cfg.numAttrs = pdl ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, k, args...);
}

}  // namespace ds4::backend::cuda
