// hc_done_layout.h — what lives in CudaBackend::hc_done_ (one area per lane, cuda_impl.h): counters that are zero
// between calls — each user's last arrival sets its own back to 0, and a user that (re)allocates the area clears
// it once (ensure never grows while a graph is recorded: a step's first run is eager). ops_hc.cu's
// hc_seg_fused_kernel (hc_fuse) holds [0, kHcDoneBytes); moe_tiles.cu's one-token experts with the hidden rows
// quantized in the gate/up kernel (expert_one_token F = 7, 8: moe_one_lean.h LeanHidden) [kOneHiddenCountersAt, …).
// The one-token path cannot keep its counters in moe_groups_: the grouped prefill GEMM and the skinny matvecs write
// their pair orders there between decode steps.
// Deliberately not here: the counters' protocols (the kernels).
#pragma once

#include <cstdint>

namespace ds4::backend::cuda {

constexpr uint64_t kHcDoneBytes = 256;                 // hc_seg_fused_kernel's counters: 4 per token slice (≤ 8 slices)
constexpr uint64_t kOneHiddenCountersAt = kHcDoneBytes;  // then [k][ff / 256] ints (LeanHidden::counters)

}  // namespace ds4::backend::cuda
