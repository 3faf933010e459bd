// dot.cpp — activation formats, kernel tables and run-time selection, and the checked matvec of dot.h.
#include "quant/dot.h"

#include <string>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "quant/quantize.h"

namespace ds4 {

std::optional<ActFormat> act_format_for(GgmlType t) {
  switch (t) {
    case GgmlType::F32:
    case GgmlType::F16:
    case GgmlType::BF16:
      return ActFormat::F32;
    case GgmlType::Q8_0:
      return ActFormat::Q8_0;
    case GgmlType::Q2_K:
    case GgmlType::Q4_K:
    case GgmlType::IQ2_XXS:
      return ActFormat::Q8_K;
    case GgmlType::Q8_K:
    case GgmlType::I32:
      break;
  }
  return std::nullopt;
}

std::optional<uint64_t> act_bytes(ActFormat f, int64_t n) {
  if (n < 0) return std::nullopt;
  const auto un = static_cast<uint64_t>(n);
  switch (f) {
    case ActFormat::F32:
      return un * sizeof(float);
    case ActFormat::Q8_0:
      if (un % kQK8_0) return std::nullopt;
      return un / kQK8_0 * sizeof(BlockQ8_0Act);
    case ActFormat::Q8_K:
      if (un % kQK_K) return std::nullopt;
      return un / kQK_K * sizeof(BlockQ8_K);
  }
  return std::nullopt;
}

Status quantize_activation(ActFormat f, const float* x, void* dst, int64_t n) {
  if (!act_bytes(f, n)) return invalid_argument("quantize_activation: length " + std::to_string(n) +
                                                " does not fit the activation block size");
  switch (f) {
    case ActFormat::F32:
      for (int64_t i = 0; i < n; ++i) static_cast<float*>(dst)[i] = x[i];
      break;
    case ActFormat::Q8_0:
      quantize_act_q8_0(x, static_cast<BlockQ8_0Act*>(dst), n);
      break;
    case ActFormat::Q8_K:
      quantize_act_q8_K(x, static_cast<BlockQ8_K*>(dst), n);
      break;
  }
  return Status::Ok();
}

KernelLevel detect_kernel_level() {
#if defined(DS4_QUANT_HAVE_AVX2)
  // cpuid directly (clang's __builtin_cpu_supports has no "f16c"): leaf 1 ECX has FMA (12),
  // OSXSAVE (27), AVX (28), F16C (29); leaf 7 EBX has AVX2 (5); XCR0 bits 1-2 say the OS saves
  // the YMM registers.
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return KernelLevel::scalar;
  const bool fma = c & (1u << 12), osxsave = c & (1u << 27), avx = c & (1u << 28), f16c = c & (1u << 29);
  if (!(fma && osxsave && avx && f16c)) return KernelLevel::scalar;
  unsigned xcr0_lo, xcr0_hi;
  __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  if ((xcr0_lo & 6u) != 6u) return KernelLevel::scalar;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(b & (1u << 5))) return KernelLevel::scalar;
  return KernelLevel::avx2;
#else
  return KernelLevel::scalar;
#endif
}

DotFn DotKernels::for_type(GgmlType t) const {
  switch (t) {
    case GgmlType::Q8_0: return q8_0;
    case GgmlType::Q2_K: return q2_K;
    case GgmlType::Q4_K: return q4_K;
    case GgmlType::IQ2_XXS: return iq2_xxs;
    case GgmlType::F16: return f16;
    case GgmlType::BF16: return bf16;
    case GgmlType::F32: return f32;
    case GgmlType::Q8_K:
    case GgmlType::I32: break;
  }
  return nullptr;
}

namespace {
constexpr DotKernels kScalar{KernelLevel::scalar, dot_q8_0_ref, dot_q2_K_ref, dot_q4_K_ref, dot_iq2_xxs_ref,
                             dot_f16_ref, dot_bf16_ref, dot_f32_ref};
#if defined(DS4_QUANT_HAVE_AVX2)
constexpr DotKernels kAvx2{KernelLevel::avx2, dot_q8_0_avx2, dot_q2_K_avx2, dot_q4_K_avx2, dot_iq2_xxs_avx2,
                           dot_f16_avx2, dot_bf16_avx2, dot_f32_avx2};
#endif
}  // namespace

const DotKernels& dot_kernels(KernelLevel level) {
#if defined(DS4_QUANT_HAVE_AVX2)
  if (level == KernelLevel::avx2) return kAvx2;
#endif
  (void)level;
  return kScalar;
}

const DotKernels& best_dot_kernels() {
  static const KernelLevel level = detect_kernel_level();  // CPU features cannot change while running
  return dot_kernels(level);
}

Status matvec(const DotKernels& kernels, const MatvecParams& p) {
  const DotFn fn = kernels.for_type(p.type);
  if (!fn) return unsupported("matvec: " + std::string(type_name(p.type)) + " is not a matmul weight type");
  const auto row_bytes = type_bytes(p.type, static_cast<uint64_t>(p.n_cols < 0 ? 1 : p.n_cols));
  if (p.n_cols < 0 || !row_bytes)
    return invalid_argument("matvec: " + std::string(type_name(p.type)) + " row length " + std::to_string(p.n_cols) +
                            " is not a whole number of blocks");
  if (p.row_begin < 0 || p.row_end < p.row_begin || p.n_vec < 0)
    return invalid_argument("matvec: bad row range or vector count");
  if (p.row_end > p.row_begin && p.n_vec > 0) {
    if (!p.weights || !p.act || !p.out) return invalid_argument("matvec: null buffer");
    if (p.row_stride < *row_bytes) return invalid_argument("matvec: row stride smaller than a row");
    if (p.n_vec > 1 && (p.act_stride < *act_bytes(*act_format_for(p.type), p.n_cols) || p.out_stride < p.row_end))
      return invalid_argument("matvec: activation or output stride too small");
  }
  const auto* w = static_cast<const uint8_t*>(p.weights);
  const auto* a = static_cast<const uint8_t*>(p.act);
  for (int64_t r = p.row_begin; r < p.row_end; ++r) {
    const void* row = w + static_cast<uint64_t>(r) * p.row_stride;
    // The row (a few KB) stays in L1 while it meets every activation vector.
    for (int v = 0; v < p.n_vec; ++v) p.out[v * p.out_stride + r] = fn(row, a + v * p.act_stride, p.n_cols);
  }
  return Status::Ok();
}

}  // namespace ds4
