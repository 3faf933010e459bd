// moe_warp_tiles.h — entry points of the warp-tile routed-expert kernels (moe_warp_tiles.cu), called by
// moe_tiles.cu's CudaBackend::moe_tiles after its prologue (pairs grouped, activations quantized).
// Deliberately not here: the prologue, the hidden-row quantization and the choice of kernels (moe_tiles.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/moe_terms.cuh"
#include "quant/types.h"

namespace ds4::backend::cuda {

class CudaBackend;

// Output rows of one warp item (each of gate and up in gate_up mode): 1 for gate/up, 4 for down.
int warp_tile_rows(bool gate_up);

// Whether a projection of `rows` output rows, blocks of type t, nb blocks of row_bytes per row can run
// as warp tiles on be's device for n_pairs pairs in at most max_groups experts (whole items, the
// per-block shared memory within the device's limit).
bool warp_tiles_fit(CudaBackend& be, GgmlType t, bool gate_up, uint64_t row_bytes, int nb, int64_t rows,
                    int64_t n_pairs, int32_t max_groups);

// Launches the gate/up (+ SwiGLU) or down warp tiles; p.n_tiles = rows / warp_tile_rows(gate_up);
// items_bound ≥ the device-side item count (groups × n_tiles); pdl: as a programmatic dependent of the
// kernel before it (sm_90: the tiles copy their first weights, then wait for it). false: a launch error
// (recorded in be).
bool launch_warp_tiles(CudaBackend& be, GgmlType t, bool gate_up, const TileParams& p, int64_t items_bound, bool pdl,
                       cudaStream_t s);

// Grid table and shared-memory limits of the warp-tile kernels (once, outside any capture).
cudaError_t init_warp_tile_kernels();

}  // namespace ds4::backend::cuda
