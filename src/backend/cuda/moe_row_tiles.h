// moe_row_tiles.h — entry points of the row-tile routed-expert kernels (moe_row_tiles.cu), called by
// moe_tiles.cu's CudaBackend::moe_tiles after its prologue (pairs grouped, activations quantized).
// Deliberately not here: the prologue, the hidden-row quantization and the choice of kernels (moe_tiles.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/moe_terms.cuh"
#include "quant/types.h"

namespace ds4::backend::cuda {

class CudaBackend;

// Output rows of one row-tile item (each of gate and up in gate_up mode): 16 for gate/up, 32 for down.
int row_tile_rows(bool gate_up);

// Whether a projection of `rows` output rows, nb blocks of type t (IQ2_XXS or Q2_K) and row_bytes per
// row can run as row tiles on be's device for n_pairs pairs in at most max_groups experts (whole items,
// whole slabs, 4-byte aligned rows, the per-block shared memory of the shapes and IQ2_XXS decode that
// launch_row_tiles will take for perm and v2 within the device's limit).
bool row_tiles_fit(CudaBackend& be, GgmlType t, bool gate_up, uint64_t row_bytes, int nb, int64_t rows,
                   int64_t n_pairs, int32_t max_groups, bool perm, bool v2);

// Launches the gate/up (+ SwiGLU) or down row tiles; p.n_tiles = rows / row_tile_rows(gate_up);
// items_bound ≥ the device-side item count (groups × n_tiles); pdl: as a programmatic dependent of the
// kernel before it (sm_90); perm: IQ2_XXS blocks by the byte-permute decode (moe_terms.cuh iq2_terms_perm);
// v2: the second shapes (CudaBackendOptions::expert_row_tiles_v2); v3: the balanced expert-major runs
// (expert_row_tiles_v3). false: a launch error (recorded in be).
bool launch_row_tiles(CudaBackend& be, GgmlType t, bool gate_up, const TileParams& p, int64_t items_bound, bool pdl,
                      bool perm, bool v2, bool v3, cudaStream_t s);

// Grid table and shared-memory limits of the row-tile kernels (once, outside any capture).
cudaError_t init_row_tile_kernels();

}  // namespace ds4::backend::cuda
