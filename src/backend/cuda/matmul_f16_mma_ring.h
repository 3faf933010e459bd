// matmul_f16_mma_ring.h — the streaming decode kernel of the F16 MMA order (matmul_f16_mma_ring.cu), reached
// from CudaBackend::f16_mma_decode (matmul_f16_mma_decode.cu) by CudaBackendOptions::f16_mma_decode_kernel.
// Plain data in, one launch out: the caller owns the counters and the stream.
#pragma once

#include <span>

#include <cuda_runtime.h>

#include "backend/cuda/cuda_impl.h"

namespace ds4::backend::cuda {

// One call's launch context.
struct F16RingLaunch {
  int sm_count = 0;        // multiprocessors
  int blocks_per_sm = 4;   // the grid: sm_count × blocks_per_sm (1 … 4; fewer leave room for the other lane), ≤ the tiles
  int* counters = nullptr; // [2] device ints, zero between calls (variant 1's tile counter and exit count)
  bool pdl = false;        // a programmatic dependent of the kernel before (weight copies before griddepcontrol.wait)
  int variant = 1;         // 1: tiles handed out by a counter; 2: tiles b, b + grid, … per block
  bool tensor = false;     // one 2-D tensor copy per unit (16 rows × 1 KB) instead of 16 row copies
  cudaStream_t stream = nullptr;
};

// Whether the ring kernel takes these jobs (1 … 8 vectors, every job's K a multiple of 512, 16-byte aligned
// rows and activations, ≥ 2 · sm_count tiles of 16 rows in all — enough tiles to stream).
bool f16_mma_ring_takes(std::span<const GemvJob> jobs, int sm_count);

// Launches it (f16_mma_ring_takes held); the launch's error.
cudaError_t f16_mma_ring_launch(std::span<const GemvJob> jobs, const F16RingLaunch& l);

}  // namespace ds4::backend::cuda
