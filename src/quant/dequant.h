// dequant.h — reference decoders: quantized/16-bit rows -> float32 (FORMATS.md §2.2–2.7).
//
// These are the plain, readable definitions of what every block means; the CPU backend uses them
// for embeddings and small tensors, and every dot product and GPU kernel is tested against them.
// They are deliberately scalar and portable (no SIMD): speed lives in dot.h.
#pragma once

#include <cstdint>

#include "ds4/status.h"
#include "quant/blocks.h"
#include "quant/types.h"

namespace ds4 {

// Decodes `n` values of type `type` starting at `src` into dst[n]. `n` must be a multiple of the
// type's block size; `src` must hold type_bytes(type, n) bytes. Q8_K (activation blocks) decodes
// too; I32 is rejected (not a float tensor). Any bytes are accepted: decoding never fails on data.
Status dequantize_row(GgmlType type, const void* src, float* dst, int64_t n);

// Per-block decoders (one block each), exposed for tests and for backends decoding single blocks.
void dequantize_block_q8_0(const BlockQ8_0& b, float out[kQK8_0]);
void dequantize_block_q2_K(const BlockQ2_K& b, float out[kQK_K]);
void dequantize_block_q4_K(const BlockQ4_K& b, float out[kQK_K]);
void dequantize_block_iq2_xxs(const BlockIQ2_XXS& b, float out[kQK_K]);
void dequantize_block_q8_K(const BlockQ8_K& b, float out[kQK_K]);

}  // namespace ds4
