// moe_one_lean.h — entry points of the lean one-token routed-expert kernels (moe_one_lean.cu): gate/up
// variants 8, 9 and the down kernel with the slot sum, fold 5 (CudaBackendOptions::expert_one_token V + 10·F
// with V = 8, 9 and / or F = 5), called by moe_tiles.cu's CudaBackend::moe_tiles at n = 1 beside moe_one_token.cu's.
// Deliberately not here: the choice of kernels (moe_tiles.cu), the other variants (moe_one_token.h).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/moe_one_token.h"

namespace ds4::backend::cuda {

class CudaBackend;

// Whether gate/up variant 8 or 9 fits be's device (its shared memory) and ff rows (two per item); the other
// shapes are one_token_fits's.
bool one_lean_gate_up_fits(CudaBackend& be, int variant, int64_t ff);

// Whether the fold-5 down kernel fits k slots (≤ kOneSumMaxSlots) and down rows of dn_row_bytes (672 at the
// Flash shapes: 8 Q2_K blocks, the only ones taken).
bool one_lean_down_fits(CudaBackend& be, int32_t k, uint64_t dn_row_bytes);

// The L2 prefetch the gate/up kernel issues (session 12; expert_one_token P·100 + V + 10·F with V = 8, 9, F = 5):
// mode 5 asks for the down weights (dn: down's expert 0, dn_expert_bytes apart) of the token's slots with the
// evict_last L2 priority once a warp's last item has landed. 0 (or any other value): none. (Measured on the H200,
// 2026-12-01, docs/PERF.md session 12 moe1: modes 1 — the normal priority once a warp's last item is asked for —,
// 2 — right after the wait —, 3 — 1 plus the warp's own later items — and 4 — 1 with evict_last — were slower in
// the op and no faster in decode steps: removed.)
struct LeanPrefetch {
  const uint8_t* dn = nullptr;
  uint64_t dn_expert_bytes = 0;
  int mode = 0;
};

// Session 13 (expert_one_token Q·1000 + P·100 + 10·F + V with V = 9): the gate/up decode's pipes. decode 1: the OR
// of a lookup's grid and sign selectors as an integer multiply-add (g·1 + s, disjoint bits: IMAD on the FMA pipe,
// where the byte permutes, shifts and LOPs of the decode all queue on the ALU pipe); 3: 1 with lane (block, half)
// decoding half an IQ2_XXS block of both matrices (its token values in 32 registers instead of 64; the halves'
// integer sums added by a shuffle). The same integers, so the same bits. (Measured on the H200, 2026-12-01, docs/
// PERF.md session 13 moe1: 2 — 1 with sel >> 16 as an IMAD.HI — no faster; F = 6 — the hidden rows quantized inside
// the down kernel behind ready flags, no quantization launch — 1.4 µs faster as an op, slower in decode steps in
// both runs: removed.)

// Gate/up variant 8 or 9 (+ SwiGLU, routing weight): as launch_one_gate_up_slots (p.n_tiles = ff rows; items of
// two rows over sa's k slots, x quantized inside; pdl: a programmatic dependent of the kernel before), with pf's
// L2 prefetches and decode (above: 0, 1, 3). false: a launch error (recorded in be).
bool launch_one_lean_gate_up(CudaBackend& be, const TileParams& p, const OneTokenSum& sa, int variant, bool pdl,
                             cudaStream_t s, const LeanPrefetch& pf = {}, int decode = 0);

// The fold-5 down kernel with moe()'s slot sum: as launch_one_down_sum with fold 2 (p.act: the quantized
// hidden rows; p.n_tiles = dim / one_token_down_rows()). false: a launch error.
bool launch_one_lean_down(CudaBackend& be, const TileParams& p, const OneTokenSum& sa, bool pdl, cudaStream_t s);

// Grid table and shared-memory limits of these kernels (once, outside any capture).
cudaError_t init_one_lean_kernels();

}  // namespace ds4::backend::cuda
