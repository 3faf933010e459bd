// small7_folds.h — session 10's fold of attention's output inverse RoPE (§7.7, a launch on every layer's decode
// critical chain) into the decode merge kernel, as an entry point for the tests and benches only
// (tests/cuda/test_cuda_small7.cpp, cuda_bench --small7): measured bit for bit the two ops and 0.9 µs faster per call
// on the H200 (docs/PERF.md, session 10 `small`). The engine takes it once the Backend interface carries it
// (AttentionArgs::out_rot / out_freq, a CudaBackendOptions switch, the forward pass passing the layer's RoPE: written
// on branch small-iface of /work/wt-small, not built this session — a backend.h change recompiles every CUDA file).
// Not called by the engine. Deliberately not here: the kernels (attention_mma.cu).
#pragma once

#include <cstdint>

#include "backend/backend.h"

namespace ds4::backend::cuda {

// Caller-owned state of attention_out_rope_folded: the segment states' scratch (allocated by the backend, grown as
// needed) and the kernels' shared-memory set-up bits.
struct AttnFoldScratch {
  void* seg = nullptr;
  uint64_t bytes = 0;
  uint32_t smem_ready = 0;
};

// attention(a) then rope({a.out, a.pos, a.n, a.heads, a.head_dim, out_rot, out_freq, inverse = true}) with the
// rotation inside the MMA order's sliced merge (each thread rotates its own dims' pairs before the store; the
// backend's defaults otherwise: split shape up to 128 blocks, kernels 3). The same bits as the two ops. False
// (nothing launched) where the split shape does not run (then call the two ops).
bool attention_out_rope_folded(Backend& be, const AttentionArgs& a, int32_t out_rot, const double* out_freq,
                               AttnFoldScratch& s);

}  // namespace ds4::backend::cuda
