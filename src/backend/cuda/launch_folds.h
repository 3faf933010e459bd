// launch_folds.h — the bits of CudaBackendOptions::launch_folds (resolved in CudaBackend::launch_folds())
// and the layout of the per-lane fold_ scratch the folding kernels count in. Included by launch_folds.cpp
// and the kernels that fold a pair's second op; nothing else needs it.
#pragma once

#include <cstdint>

namespace ds4::backend::cuda {

// Which pairs are offered to their matmul's kernel (launch_folds.cpp); a kernel that does not take the
// shape leaves the pair to the two ops' launches.
inline constexpr int kFoldRouter = 1;   // router_logits: matmul_f16_mma_decode.cu's split rows + router top-k
inline constexpr int kFoldBatched = 8;  // the folds also at 2 … 8 tokens (without it: one token only)

// fold_'s counters (int32 each; zero between calls: set when the area is made, reset by each fold's last block).
inline constexpr int kFoldCounterRouter = 0;
inline constexpr int kFoldCounters = 64;
inline constexpr uint64_t kFoldScratchBytes = kFoldCounters * 4;

}  // namespace ds4::backend::cuda
