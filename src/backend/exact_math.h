// exact_math.h — exp and log1p that give the same float bits on the host and on the GPU, for the ops whose CUDA
// kernels are checked bit for bit against the CPU reference: the SwiGLU (routed and shared experts), the HC
// sigmoid and Sinkhorn, the router's sqrt-softplus, the compressor's softmax.
//
// Why: CUDA's expf / log1pf and glibc's expf / log1pf are each accurate to an ulp or two but are different
// algorithms (CUDA's uses the SFU's ex2.approx), so they disagree in the last bit for some inputs. The ops
// mostly hide that (a sum rounds it away, the hidden's Q8_K quantization rounds it away) except when a value
// sits on a rounding boundary: then one quant moves and a whole token's output differs (the rare
// CudaMoeRowsFlash.RandomRouting failure of session 13). Here each function is a fixed sequence of IEEE float
// operations (+, −, ×, explicit fused multiply-adds, log1p's two ÷, conversions, bit operations; no table),
// each rounded to nearest on both sides: the CUDA build has --fmad=false and the CPU backend -ffp-contract=off (no
// multiply-add contraction where none is written), and an explicit fma rounds once on both. So the host and the
// device compute the same bits for every input, and tests check both against double precision.
//
// Accuracy (tests/ops/test_exact_math.cpp, against double): exp ≤ 1 ulp, log1p ≤ 2 ulp over their ranges.
// Deliberately not here: attention's softmax (its CPU and CUDA forms differ in order, online vs two passes,
// and are compared with a tolerance), anything in the sampler (host only).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define DS4_EXACT_FN __host__ __device__ __forceinline__
#else
#define DS4_EXACT_FN inline
#endif

namespace ds4::backend {

namespace exact_detail {

DS4_EXACT_FN uint32_t bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
#endif
}

DS4_EXACT_FN float from_bits(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, 4);
  return x;
#endif
}

// a·b + c rounded once (IEEE fused multiply-add): the same bits on both sides — the device's fma.rn.f32, the host's
// fmaf (the FMA instruction where the CPU has one, else glibc's exact emulation).
DS4_EXACT_FN float fma_rn(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

// 2^k for k in [−126, 127] (a normal float).
DS4_EXACT_FN float pow2(int32_t k) { return from_bits(static_cast<uint32_t>(k + 127) << 23); }

constexpr float kLn2Hi = 0.693145752f;    // 0x3f317200: 15 significant bits, so k·kLn2Hi is exact for |k| < 512
constexpr float kLn2Lo = 1.42860677e-6f;  // 0x35bfbe8e: ln 2 − kLn2Hi
constexpr float kLog2e = 1.44269502f;
constexpr float kRound = 12582912.0f;     // 1.5·2^23: (t + kRound) − kRound rounds |t| < 2^22 to an integer

}  // namespace exact_detail

// e^x within 1 ulp (measured: 0.92 for normal results, 0.81 at subnormal ones, where 2^k rounds a second time).
// x = k·ln2 + r with k = round(x·log2 e) (one fma rounds the exact product to an integer) and |r| ≲ 0.35
// (Cody–Waite: k·kLn2Hi and x − k·kLn2Hi are exact, the fma adds −k·kLn2Lo); e^r = 1 + r·s(r), s the Taylor
// series to r^7/5040 by Horner's rule in fmas (truncation < 0.05 ulp at |r| = 0.35; each fma rounds once). 2^k
// multiplies in two normal halves, so a subnormal result rounds once. NaN → NaN; x > 88.8 → inf; x < −104 (below
// half the least subnormal) → +0; −inf → +0. ~20 operations (CUDA's expf: ~9 with the SFU's ex2.approx): the
// SwiGLU's one exp per output is in the prefill experts' gate/up epilogue, where a 40-operation form without fmas
// cost ~1 % of the op (session 14, W1).
DS4_EXACT_FN float exact_exp(float x) {
  using namespace exact_detail;
  if (x != x) return x;
  if (x > 88.8f) return INFINITY;
  if (x < -104.0f) return 0.0f;
  const float kf = fma_rn(x, kLog2e, kRound) - kRound;
  const float rh = fma_rn(-kf, kLn2Hi, x);  // exact
  const float r = fma_rn(-kf, kLn2Lo, rh);
  float s = 1.98412701e-4f;           // 1/5040
  s = fma_rn(s, r, 1.38888892e-3f);   // 1/720
  s = fma_rn(s, r, 8.33333377e-3f);   // 1/120
  s = fma_rn(s, r, 4.16666679e-2f);   // 1/24
  s = fma_rn(s, r, 0.166666672f);     // 1/6
  s = fma_rn(s, r, 0.5f);
  s = fma_rn(s, r, 1.0f);
  const float p = fma_rn(s, r, 1.0f);
  const auto k = static_cast<int32_t>(kf);  // in [−150, 129]
  const int32_t k1 = k >> 1;                // arithmetic shift: floor(k / 2), so both halves are in [−75, 65]
  return p * pow2(k1) * pow2(k - k1);
}

// ln(1 + y), ≤ 2 ulp, for y ≥ 0 (the router's softplus: y = e^z). u = 1 + y rounds; its error c = (1 + y) − u
// is exact (two-sum), and ln(1 + y) = ln u + c/u to far below an ulp. ln u: u = 2^k·m with m in [√½, √2),
// f = m − 1, s = f / (2 + f): ln m = 2·atanh s = f − f²/2 + s·(f²/2 + R), R = 2s²/3 + 2s⁴/5 + … + 2s^8/9
// (|s| ≤ 0.172: the next term < 0.02 ulp); k·ln2 in the two Cody–Waite parts. NaN → NaN, inf → inf.
DS4_EXACT_FN float exact_log1p(float y) {
  using namespace exact_detail;
  if (!(y < INFINITY)) return y;  // NaN, +inf
  const float u = 1.0f + y;
  if (u == 1.0f) return y;  // y < 2^−24: ln(1 + y) = y to within a quarter ulp
  const float yb = u - 1.0f;
  const float c = (1.0f - (u - yb)) + (y - yb);  // (1 + y) − u exactly (Knuth's two-sum)
  uint32_t mb = (bits(u) & 0x007fffffu) | 0x3f800000u;  // u's significand: m in [1, 2)
  auto k = static_cast<int32_t>(bits(u) >> 23) - 127;
  if (mb > 0x3fb504f3u) {  // m > √2: halve it
    mb -= 0x00800000u;
    k += 1;
  }
  const float f = from_bits(mb) - 1.0f;  // exact (Sterbenz)
  const float s = f / (2.0f + f);
  const float z = s * s;
  float rr = 0.222222224f;     // 2/9
  rr = 0.285714298f + z * rr;  // 2/7
  rr = 0.400000006f + z * rr;  // 2/5
  rr = 0.666666687f + z * rr;  // 2/3
  const float R = z * rr;
  const float hf = 0.5f * f * f;
  const auto kf = static_cast<float>(k);
  const float lo = s * (hf + R) + (kf * kLn2Lo + c / u);
  return kf * kLn2Hi + (f - (hf - lo));
}

// The ops' compositions, written once so every kernel and the CPU op evaluate the same expression.
// σ(z) = 1 / (1 + e^−z) (the HC pre / post gates).
DS4_EXACT_FN float exact_sigmoid(float z) { return 1.0f / (1.0f + exact_exp(-z)); }

// The SwiGLU's gate, silu(g) = g / (1 + e^−g) (the routed and shared experts): the callers multiply by u (and then by
// the route weight) in that order, on both sides.
DS4_EXACT_FN float exact_silu(float g) { return g / (1.0f + exact_exp(-g)); }

// ds4's softplus (the router): z > 20 → z; z < −20 → e^z; else ln(1 + e^z).
DS4_EXACT_FN float exact_softplus(float z) {
  if (z > 20.0f) return z;
  if (z < -20.0f) return exact_exp(z);
  return exact_log1p(exact_exp(z));
}

}  // namespace ds4::backend

#undef DS4_EXACT_FN
