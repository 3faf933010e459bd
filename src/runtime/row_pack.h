// row_pack.h — lossless compact storage of float32 cache rows for compact session snapshots
// (issue 9, "store KV at the precision the model uses").
//
// The KV rows the model keeps are float32 buffers whose values were rounded to a narrower format
// (MODEL.md §5.4-5.6): the 448 nope dims of an attention row are 2^k · E4M3 per 64-dim block, the
// 128 dims of an indexer row are 2^k · E2M1 per 32-dim block, the RoPE dims are f16-rounded. Each
// row is split into groups of 64 values (the last group of a row may be shorter) and every group
// is stored in the smallest form that reproduces its float32 bits EXACTLY — checked when encoding
// by decoding the candidate with the very arithmetic the decoder uses:
//
//   tag 4 zero : all 64 values are +0.0                       0 bytes
//   tag 3 e2m1 : per 32 values one i8 exponent k, then codes    2 + 32 bytes (4-bit codes, low nibble first)
//   tag 2 e4m3 : one i8 exponent k, then one E4M3FN code each   1 + 64 bytes
//   tag 1 f16  : IEEE half each                                 128 bytes
//   tag 0 f32  : the float32 bits                               256 bytes
//
// plus the tag byte. A value v of an e4m3/e2m1 group is decoded as table[code] * 2^k (2^k a normal
// float, k in [-126, 127]). Anything not exactly representable (reference numerics, logits, NaN
// payloads) falls back to f16 or f32, so restore is always bit-exact.
// Deliberately not here: the snapshot layout (snapshot.cpp decides which arrays are rows).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "ds4/status.h"

namespace ds4::runtime {

inline constexpr int64_t kPackGroup = 64;

// Appends the packed form of `rows` ([n_rows][width] float32, row-major) to `out`.
void pack_rows(std::span<const float> rows, int64_t width, std::vector<uint8_t>& out);

// Decodes packed bytes produced by pack_rows into `rows` (size = n_rows · width), consuming all of
// `in` exactly. `in` is untrusted: any bad tag, exponent, NaN code or length mismatch is an error.
Status unpack_rows(std::span<const uint8_t> in, int64_t width, std::span<float> rows);

}  // namespace ds4::runtime
