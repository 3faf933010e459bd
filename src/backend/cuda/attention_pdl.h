// attention_pdl.h — whether CudaBackendOptions::attention_mma_kernels launches one decode query's split kernel as a
// programmatic dependent of the kernel before it (37; kernel 3 with kSplitPdlAuto), so that the q norm + RoPE before it
// (ops_norm_rope.cu) lets it start. Shared by attention_mma.cu (the launch) and ops_norm_rope.cu (the trigger), so the
// two files agree on the values.
// Deliberately not here: the kernels (attention_mma_chunk.cu, attention_mma.cu, ops_norm_rope.cu).
#pragma once

namespace ds4::backend::cuda {

// Whether kernel 3 (the default) takes 37's split form. On since session 14's H200 runs (docs/PERF.md "Session 14: decode
// attention of one token …"): 4-layer whole decode steps faster than 31 in every round at 2K and 32K; test_cuda_model
// with it. false: 31's (the split launched after the kernel before it ends; 37 keeps the programmatic form).
inline constexpr bool kSplitPdlAuto = true;

// 37: 31 (the sliced merge a programmatic dependent of the split kernel) with the split kernel itself a programmatic
// dependent of the kernel before it: the q norm + RoPE (norm_rope3_kernel, main lane, one token, no ring) calls
// griddepcontrol.launch_dependents right after its own wait — every kernel before it has finished then — and the
// split's blocks copy the rows the step's inputs place into shared memory before their own wait.
constexpr bool split_pdl(int attention_mma_kernels) {
  return attention_mma_kernels == 37 || (attention_mma_kernels == 3 && kSplitPdlAuto);
}

}  // namespace ds4::backend::cuda
