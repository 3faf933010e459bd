// gemv_warp.h — the launcher of gemv_warp.cu (dense Q8_0 matmuls of 1..kWarpMaxVec vectors on per-warp
// bulk-copy rings), for the dispatch that owns the backend's state (sm count, opt-in shared memory, the
// per-instantiation "limit raised" flags). Deliberately not here: choosing jobs (the dispatch).
#pragma once

#include <cstdint>

#include "backend/cuda/cuda_impl.h"

namespace ds4::backend::cuda {

inline constexpr int kWarpMaxVec = 4;
inline constexpr int kWarpKernels = 3;  // instantiations: 1, 2, 4 vectors

// Launches the StreamSet `s` on gemv_warp.cu (sm_90 only: the caller checks). smem_set: kWarpKernels flags, each
// set once its instantiation's shared-memory limit is raised. False: declined (nothing launched: the shape
// or n_vec is not the kernel's); true: launched, or an error was recorded on `be`.
bool gemv_warp_launch(CudaBackend& be, const StreamSet& s, DeviceScratch& act_scratch, int sm_count, int smem_optin,
                      bool* smem_set);

}  // namespace ds4::backend::cuda
