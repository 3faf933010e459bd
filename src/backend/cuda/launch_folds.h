// launch_folds.h — the bits of CudaBackendOptions::launch_folds (resolved in CudaBackend::launch_folds())
// and the layout of the per-lane fold_ scratch the folding kernels count in. Included by launch_folds.cpp
// and the kernels that fold a pair's second op; nothing else needs it.
#pragma once

#include <cstdint>

namespace ds4::backend::cuda {

class CudaBackend;
struct DeviceScratch;

// Which pairs are offered to their matmul's kernel (launch_folds.cpp); a kernel that does not take the
// shape leaves the pair to the two ops' launches. (Bits 1 and 8 were session 13's router fold — the router's top-k
// in the logits matmul's last block, also at 2..8 tokens: slower on the H200, removed; docs/PERF.md.)
inline constexpr int kFoldRmsNorm = 2;  // matmul_rms_norm: gemv_stream.cu (q_a at one token) + the row's RMSNorm
inline constexpr int kFoldNormTrigger = 4;  // with kFoldRmsNorm: the kernel after (q_b) starts as the norm begins
inline constexpr int kRouterPdl = 16;   // router_logits: the logits' F16 MMA decode launch as a programmatic dependent

// fold_'s counters (int32 each; zero between calls: set when the area is made, reset by each fold's last block).
inline constexpr int kFoldCounterRmsNorm = 1;
inline constexpr int kFoldCounters = 64;
inline constexpr uint64_t kFoldScratchBytes = kFoldCounters * 4;

// The counters of `area` (the lane's fold_), made (zeroed) on first use; null after an error was recorded
// (launch_folds.cpp).
int* fold_counters(CudaBackend& be, DeviceScratch& area);

}  // namespace ds4::backend::cuda
