// moe_one_token.h — entry points of the one-token routed-expert kernels (moe_one_token.cu: IQ2_XXS gate/up
// + SwiGLU and Q2_K down with the token's activation blocks held in registers), called by moe_tiles.cu's
// CudaBackend::moe_tiles after its prologue when CudaBackendOptions::expert_one_token is on and n = 1.
// Deliberately not here: the prologue, the hidden-row quantization, the slot sum and the choice of kernels
// (moe_tiles.cu, ops_moe.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/moe_terms.cuh"
#include "quant/types.h"

namespace ds4::backend::cuda {

class CudaBackend;

// Output rows of one down item (gate/up items are one row of gate and the same row of up).
int one_token_down_rows();


// Whether one token's experts can run on these kernels on be's device: IQ2_XXS gate/up of nb_gu = 16 blocks a
// row, Q2_K down of nb_d = 8 blocks (the Flash shapes; block counts are compile-time), every copied run 16-byte
// aligned (the weight pointers, row and expert sizes), the shared memory within the device's limit.
bool one_token_fits(CudaBackend& be, GgmlType gt, GgmlType dt, const void* gate, const void* up, const void* down,
                    uint64_t gu_row_bytes, uint64_t gu_expert_bytes, int nb_gu, uint64_t dn_row_bytes,
                    uint64_t dn_expert_bytes, int nb_d, int64_t dim);

// Launches the gate/up (+ SwiGLU, routing weight) kernel: p as moe_tiles fills it for the warp tiles, with
// p.n_tiles = ff (rows; variant 4 takes two per item where ff is even); items_bound ≥ groups × ff; variant
// 1–4 (CudaBackendOptions::expert_one_token: the same bits, different shapes). false: a launch error
// (recorded in be).
bool launch_one_gate_up(CudaBackend& be, const TileParams& p, int64_t items_bound, int variant, cudaStream_t s);

// Launches the down kernel: p.n_tiles = dim / one_token_down_rows(); pdl: as a programmatic dependent of the
// hidden rows' quantization (its first weights are copied before it waits). false: a launch error.
bool launch_one_down(CudaBackend& be, const TileParams& p, int64_t items_bound, bool pdl, cudaStream_t s);

// Grid table and shared-memory limits of these kernels (once, outside any capture).
cudaError_t init_one_token_kernels();

}  // namespace ds4::backend::cuda
