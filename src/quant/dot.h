// dot.h — dot products of one weight row with activations, the way the CPU backend runs matmuls.
//
// Pairings follow ds4's CPU kernels (FORMATS.md §2.7) so our logits match ds4's numerics. The
// reference kernels and activation quantizers reproduce ds4's scalar C kernels bit for bit
// (cross-checked against ds4.c compiled without -ffast-math; ds4's own x86 build uses -ffast-math
// -march=native, so ds4 itself only agrees with them to float rounding):
//   Q2_K, Q4_K, IQ2_XXS weights · Q8_K activations     (ds4_vec_dot_*_q8_K; Q4_K by the same scheme)
//   Q8_0 weights            · Q8_0 activation blocks   (dot_q8_0_row: f32 activation scale)
//   F16, BF16 weights       · f32 activations          (dot_f16_row: plain sequential float sum)
//   F32 weights             · f32 activations          (matvec_f32: sequential double sum)
// Each pairing has a scalar reference (*_ref) and an AVX2 version (*_avx2, compiled with
// target attributes and chosen at run time, so binaries still run on any x86-64). For the
// quantized pairings the AVX2 result is bit-identical to the reference: integer block sums are
// exact and the per-block float arithmetic is done in the same order. For F16/BF16 the AVX2
// kernels sum in a different order; |avx2 - ref| <= 2n·2^-24·Σ|w_i x_i| (error bound of two
// differently-ordered float sums of n terms). For F32 both sum in double (AVX2 in another order),
// so they differ by at most about one float rounding of the result.
//
// Precondition (not checked in the kernels, which are the hot loop): n is a multiple of the weight
// block size. Any weight bytes and any activation quants (-128 included) are handled exactly.
// Use matvec() for a checked entry point.
// Everything here is a pure function; the kernel tables are immutable constants.
#pragma once

#include <cstdint>
#include <optional>

#include "ds4/status.h"
#include "quant/blocks.h"
#include "quant/types.h"

namespace ds4 {

// Format of the activation vector a weight type is multiplied with.
enum class ActFormat : uint8_t {
  F32,   // float[n]
  Q8_0,  // BlockQ8_0Act[n/32]
  Q8_K,  // BlockQ8_K[n/256]
};

// nullopt for types that are not matmul weights (Q8_K, I32).
std::optional<ActFormat> act_format_for(GgmlType weight_type);
// Bytes of one activation vector of n values; nullopt if n does not fit the format's block size.
std::optional<uint64_t> act_bytes(ActFormat f, int64_t n);
// x[n] -> dst (act_bytes(f, n) bytes). Errors on a bad length.
Status quantize_activation(ActFormat f, const float* x, void* dst, int64_t n);

// w: one weight row (unaligned bytes straight from the file); act: the activation in the format of
// act_format_for(type); n: values in the row.
using DotFn = float (*)(const void* w, const void* act, int64_t n);

enum class KernelLevel : uint8_t { scalar, avx2 };

// avx2 when the CPU (and OS) support AVX2, FMA and F16C; otherwise scalar.
KernelLevel detect_kernel_level();

struct DotKernels {
  KernelLevel level;
  DotFn q8_0, q2_K, q4_K, iq2_xxs, f16, bf16, f32;
  DotFn for_type(GgmlType weight_type) const;  // nullptr for Q8_K / I32
};

// The kernel table of a level (avx2 on a non-x86 build returns the scalar table).
const DotKernels& dot_kernels(KernelLevel level);
// dot_kernels(detect_kernel_level()).
const DotKernels& best_dot_kernels();

// Reference kernels.
float dot_q8_0_ref(const void* w, const void* act, int64_t n);
float dot_q2_K_ref(const void* w, const void* act, int64_t n);
float dot_q4_K_ref(const void* w, const void* act, int64_t n);
float dot_iq2_xxs_ref(const void* w, const void* act, int64_t n);
float dot_f16_ref(const void* w, const void* act, int64_t n);
float dot_bf16_ref(const void* w, const void* act, int64_t n);
float dot_f32_ref(const void* w, const void* act, int64_t n);

// AVX2 kernels (call only when detect_kernel_level() == avx2; absent on non-x86 builds).
#if defined(__x86_64__) || defined(__i386__)
#define DS4_QUANT_HAVE_AVX2 1
float dot_q8_0_avx2(const void* w, const void* act, int64_t n);
float dot_q2_K_avx2(const void* w, const void* act, int64_t n);
float dot_q4_K_avx2(const void* w, const void* act, int64_t n);
float dot_iq2_xxs_avx2(const void* w, const void* act, int64_t n);
float dot_f16_avx2(const void* w, const void* act, int64_t n);
float dot_bf16_avx2(const void* w, const void* act, int64_t n);
float dot_f32_avx2(const void* w, const void* act, int64_t n);
#endif

// Matrix x few vectors: out[v * out_stride + r] = dot(row r, activation v) for r in [row_begin, row_end).
// Meant to be called from a thread pool with disjoint row ranges; pure apart from writing `out`.
struct MatvecParams {
  GgmlType type = GgmlType::F32;  // weight type
  const void* weights = nullptr;  // row r starts at weights + r * row_stride bytes
  uint64_t row_stride = 0;        // bytes between rows (type_bytes(type, n_cols) for a dense matrix)
  int64_t n_cols = 0;             // values per row (= activation length)
  int64_t row_begin = 0, row_end = 0;
  const void* act = nullptr;      // n_vec activations in act_format_for(type), act_stride bytes apart
  uint64_t act_stride = 0;
  int n_vec = 1;
  float* out = nullptr;
  int64_t out_stride = 0;         // floats between the outputs of consecutive activation vectors
};
Status matvec(const DotKernels& kernels, const MatvecParams& p);

}  // namespace ds4
