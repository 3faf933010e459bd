// quantize.h — float32 -> block encoders for every weight type (FORMATS.md §2.8), and the
// activation quantizers the dot products consume (Q8_K, ds4's Q8_0 activation blocks).
//
// Weight encoders are for building models (ds4-gen, tests): they always produce valid blocks and
// are pure functions of their inputs (no global mutable state; safe to call from many threads on
// disjoint outputs). With QuantEffort::best, Q8_0, Q2_K and Q4_K (with or without importance)
// implement ds4's gguf-tools/quants.c algorithms; cross-checked against it on Gaussian and
// heavy-tailed data they give identical bytes (Q2_K differs only in the don't-care quant bits of
// sub-blocks whose scale is 0, which we zero). IQ2_XXS uses its own search measured with the
// decoder's real 8/25/43 magnitudes (slightly lower error than quants.c's). The spec does not
// require bit-exact reproduction of the shipped files. Values beyond a format's range saturate:
// block scales are clamped to the largest finite f16, so a decoded block is never inf or NaN.
// Non-finite inputs are rejected with invalid_argument.
//
// Activation quantizers are the hot path of the CPU backend and reproduce ds4's numerics exactly
// (lrintf ties-to-even, f32 scales); they do not validate their input.
#pragma once

#include <cstdint>

#include "ds4/status.h"
#include "quant/blocks.h"
#include "quant/types.h"

namespace ds4 {

enum class QuantEffort {
  best,  // quants.c-style scale searches (default)
  fast,  // min/max scales, few IQ2_XXS scale candidates: ~5-10x faster, somewhat larger error
};

struct QuantizeOptions {
  // [n_cols] per-column importance (an imatrix, or column_importance()); null = all columns equal.
  // Finite and >= 0 (else invalid_argument). Used by Q2_K, Q4_K (weighted search) and IQ2_XXS;
  // ignored by the other types. A block whose importances are all 0 is encoded unweighted.
  const float* importance = nullptr;
  QuantEffort effort = QuantEffort::best;
};

// Encodes n values (a multiple of the block size) into type_bytes(type, n) bytes at dst.
// `importance`, when set, is indexed by position in this row. Types: F32, F16, BF16, Q8_0, Q2_K,
// Q4_K, IQ2_XXS, Q8_K (ds4's activation quantizer).
Status quantize_row(GgmlType type, const float* src, void* dst, int64_t n, const QuantizeOptions& opts = {});

// Row-major matrix src[n_rows][n_cols] -> n_rows rows of type_bytes(type, n_cols) bytes each;
// opts.importance is indexed by column.
Status quantize_rows(GgmlType type, const float* src, void* dst, int64_t n_rows, int64_t n_cols,
                     const QuantizeOptions& opts = {});

// imp[c] = Σ_rows src[r][c]^2 — the importance ds4's quantizer uses for IQ2_XXS without an imatrix.
void column_importance(const float* src, int64_t n_rows, int64_t n_cols, float* imp);

// ---- activation quantizers (exactly ds4's ds4_quantize_row_q8_K / quantize_q8_0_activation) ----

// x[n] -> n/256 Q8_K blocks. n must be a multiple of 256 (checked by callers; see act_bytes in dot.h).
void quantize_act_q8_K(const float* x, BlockQ8_K* y, int64_t n);
// x[n] -> n/32 Q8_0 activation blocks (d = amax/127 kept in f32). n must be a multiple of 32.
void quantize_act_q8_0(const float* x, BlockQ8_0Act* y, int64_t n);

// ---- single-block encoders (exposed for tests and benches) ----
void quantize_block_q8_0(const float x[kQK8_0], BlockQ8_0* y);
void quantize_block_q2_K(const float x[kQK_K], BlockQ2_K* y, const float* importance, QuantEffort effort);
void quantize_block_q4_K(const float x[kQK_K], BlockQ4_K* y, const float* importance, QuantEffort effort);
void quantize_block_iq2_xxs(const float x[kQK_K], BlockIQ2_XXS* y, const float* importance, QuantEffort effort);

}  // namespace ds4
