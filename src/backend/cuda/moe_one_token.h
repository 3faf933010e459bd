// moe_one_token.h — entry points of the one-token routed-expert kernels (moe_one_token.cu: IQ2_XXS gate/up
// + SwiGLU and Q2_K down with the token's activation blocks held in registers), called by moe_tiles.cu's
// CudaBackend::moe_tiles after its prologue when CudaBackendOptions::expert_one_token is on and n = 1.
// With the slot sum folded (launch_one_down_sum) and gate/up variant 7 (launch_one_gate_up_slots) the routed
// experts of one token are 2–4 launches instead of 5.
// Deliberately not here: the prologue, the hidden-row quantization, the slot sum of the other paths and the
// choice of kernels (moe_tiles.cu, ops_moe.cu).
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

// The down kernel with moe()'s slot sum (CudaBackendOptions::expert_one_token ≥ 10, moe_tiles.cu): out [dim]
// = Σ over the token's k slots in slot order of its down rows (NaN for an id outside [0, n_expert)), written
// by the warps that compute them — no y rows, no slot-sum launch.
constexpr int kOneSumMaxSlots = 8;
struct OneTokenSum {
  const int32_t* ids;  // [k] the token's expert ids (slot order)
  int32_t k, n_expert;
  const float* h;      // [k][ff] the hidden rows, f32 (fold 3, 4: quantized by the down kernel itself)
  float* out;          // [dim]
  const float* x;      // [dim] the token's input (gate/up variant 7: quantized by that kernel itself)
};

// Whether fold (1: a warp per tile of rows, 2: two warps per tile, 3 / 4: the same quantizing the hidden rows
// themselves) fits k slots of hidden rows h_stride bytes apart (quantized) and down rows of dn_row_bytes.
bool one_token_sum_fits(CudaBackend& be, int fold, int32_t k, uint64_t h_stride, uint64_t dn_row_bytes);

// Launches the down kernel with the slot sum: p as for launch_one_down (p.act: the quantized hidden rows,
// read unless fold ≥ 3), sa the slots and the output; pdl: as a programmatic dependent of the kernel before
// (the hidden rows' quantization, or with fold ≥ 3 the gate/up kernel). false: a launch error.
bool launch_one_down_sum(CudaBackend& be, const TileParams& p, const OneTokenSum& sa, int fold, bool pdl,
                         cudaStream_t s);

// Launches gate/up variant 7 (no prologue: items over sa's k slots, x quantized inside): p as for
// launch_one_gate_up (p.groups, p.order, p.n_groups, p.act unused); pdl: as a programmatic dependent of the
// kernel before (the table fill overlaps it). Only with launch_one_down_sum after it. false: a launch error.
bool launch_one_gate_up_slots(CudaBackend& be, const TileParams& p, const OneTokenSum& sa, bool pdl, cudaStream_t s);

// Grid table and shared-memory limits of these kernels (once, outside any capture).
cudaError_t init_one_token_kernels();

}  // namespace ds4::backend::cuda
