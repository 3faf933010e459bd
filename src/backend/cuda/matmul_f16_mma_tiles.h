// matmul_f16_mma_tiles.h — the shared-memory prefill tiles of the F16 MMA order (matmul_f16_mma_tiles.cu),
// called by matmul_f16_mma.cu's dispatch for the jobs they take.
// Deliberately not here: the other launch shapes (matmul_f16_mma.cu).
#pragma once

#include <cuda_runtime.h>

#include "backend/cuda/cuda_impl.h"

namespace ds4::backend::cuda {

// Prefill jobs the tiles take: no expert ids, one activation row per vector, K a multiple of 128, 16-byte
// aligned operands, ≥ 512 rows and ≥ 64 vectors.
bool f16_mma_tiles_support(const GemvJob& j);
// Launches the tiles on `s` (a job f16_mma_tiles_support accepts); the launch's error.
cudaError_t f16_mma_tiles_launch(const GemvJob& j, cudaStream_t s);
// The same in launch shape `shape` (−1: f16_mma_tiles_launch's — 21 from 512 rows, else 14; 1 where a device
// refuses 21's shared memory; 0: the first one (128 × 64 tiles of 32 × 32 warps from 1,024 rows, else 64 × 64);
// 1: two 32-value blocks per ring stage; 2: 16-row warp tiles; 3: both; 4: 1 with the activations split into
// TF32 hi / lo once per stage by the block; 5: 3 likewise; 6: four 32-value blocks per stage; 7: 64 × 16 warp
// tiles; 8: 32 × 16 warp tiles, 2 / 4 blocks per multiprocessor; 10: quarter pairs — two warps per warp tile,
// one on quarters 0 and 1 of each segment, one on 2 and 3 — of 32 × 16 warp tiles; 12: 16 warps of 32 × 16
// with four blocks per stage (≥ 1,024 rows), else 8 with four blocks per stage; 14: 7's warp tiles with the
// activations split once per block by the threads that stage them (8 warps, 128 × 64 tiles from 1,024 rows,
// else 4 warps, 64 × 64); 21: 14's warp tiles in 128 × 64 blocks of 8 warps at every row count, four blocks
// per stage in a two-slot ring; 9, 11, 13, 15 … 20: removed, cudaErrorInvalidValue) — for the benches and tests
// comparing shapes; none changes the order.
cudaError_t f16_mma_tiles_launch_shape(const GemvJob& j, cudaStream_t s, int shape);
// Prefill jobs of few rows that the tiles do not take (the HC controls 24 × 16384, the indexer weights
// 64 × 4096): no expert ids, ≥ 64 vectors.
bool f16_mma_few_rows_support(const GemvJob& j);
// Launches such a job in launch shape `shape` (matmul_f16_mma.cu's f16_mma_tile; −1: the default, 4 up to 32
// rows, else 5; 0: 32 × 16 per block, 8 warps × 2 quarters; 1: 32 × 8 per block at 2 blocks per multiprocessor;
// 4: 32 × 16 per block, 16 warps × 1 quarter; 5: 32 × 8 per block, 8 warps × 1 quarter, 4 blocks per
// multiprocessor; 2, 3, 6 … 9: removed, cudaErrorInvalidValue) — none changes the order; the launch's error.
cudaError_t f16_mma_few_rows_launch_shape(const GemvJob& j, cudaStream_t s, int shape);

}  // namespace ds4::backend::cuda
