// launch_folds.h — the bits of CudaBackendOptions::launch_folds (resolved in CudaBackend::launch_folds())
// and the layout of the per-lane fold_ scratch the folding kernels count in. Included by launch_folds.cpp
// and the kernels that fold a pair's second op; nothing else needs it.
#pragma once

#include <cstdint>

namespace ds4::backend::cuda {

class CudaBackend;
struct DeviceScratch;

// Which pairs are offered to their matmul's kernel (launch_folds.cpp); a kernel that does not take the
// shape leaves the pair to the two ops' launches.
inline constexpr int kFoldRouter = 1;   // router_logits: matmul_f16_mma_decode.cu's row tiles + router top-k
inline constexpr int kFoldRmsNorm = 2;  // matmul_rms_norm: gemv_stream.cu (q_a at one token) + the row's RMSNorm
inline constexpr int kFoldNormTrigger = 4;  // with kFoldRmsNorm: the kernel after (q_b) starts as the norm begins
inline constexpr int kFoldBatched = 8;  // the folds also at 2 … 8 tokens (without it: one token only)

// fold_'s counters (int32 each; zero between calls: set when the area is made, reset by each fold's last block).
inline constexpr int kFoldCounterRouter = 0;
inline constexpr int kFoldCounterRmsNorm = 1;
inline constexpr int kFoldCounters = 64;
inline constexpr uint64_t kFoldScratchBytes = kFoldCounters * 4;

// The counters of `area` (the lane's fold_), made (zeroed) on first use; null after an error was recorded
// (launch_folds.cpp).
int* fold_counters(CudaBackend& be, DeviceScratch& area);

}  // namespace ds4::backend::cuda
