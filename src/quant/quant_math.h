// quant_math.h — numeric helpers shared by the K-quant encoders (internal to src/quant).
//
// Scale searches in the style of ggml/quants.c (make_qkx2_quants, make_qp_quants), written from the
// description in FORMATS.md §2.8. They work on one sub-block at a time, allocate nothing and keep no
// state, so encoders stay pure and thread-safe.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace ds4::quant_detail {

// Round half to even (as lrintf in the default rounding mode), branch-free and inlined: adding
// 1.5*2^23 leaves the rounded integer in the low mantissa bits. The argument is first clamped to
// ±(2^22 - 1), where the trick is exact (NaN -> the lower bound), so a degenerate ratio can never
// produce an out-of-range conversion; every caller clamps the result to a small range anyway.
inline int nearest_int(float v) {
  if (!(v > -4194303.0f)) v = -4194303.0f;
  if (v > 4194303.0f) v = 4194303.0f;
  const int32_t bits = std::bit_cast<int32_t>(v + 12582912.0f);
  return (bits & 0x007fffff) - 0x00400000;
}

// min/max for finite floats: plain compares, inlined (std::fmin/fmax are library calls because of
// their NaN rules; encoder inputs are checked finite before they get here).
inline float min_f(float a, float b) { return b < a ? b : a; }
inline float max_f(float a, float b) { return b > a ? b : a; }

inline int clamp_int(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

// Inputs are clamped to ±kInputClamp before encoding: far beyond what any K-quant block can express
// (f16 scales saturate at 65504), and small enough that weighted sums of squares cannot overflow.
inline constexpr float kInputClamp = 1e9f;

// True when importance weights exist and are not all zero for this block: an all-zero block of an
// imatrix (a column never activated) carries no information, so encoders fall back to their
// unweighted path rather than fitting nothing.
inline bool has_importance(const float* imp, int n) {
  if (imp == nullptr) return false;
  for (int i = 0; i < n; ++i)
    if (imp[i] > 0) return true;
  return false;
}

struct ScaleSearch {
  float rmin;    // first candidate offset of the inverse scale: (nmax + rmin + rdelta*t) / (max - min)
  float rdelta;  // candidate step
  int nstep;     // number of extra candidates (0 = plain min/max scale)
  bool use_mad;  // error metric: true = weighted |err|, false = weighted err^2
};

// Fits x[i] ≈ scale * L[i] - min_out over L in 0..nmax with min_out >= 0 (an offset that makes
// negative values reachable), weights w. Returns scale (0 when the sub-block is constant), writes
// L[n] and *min_out. `laux` is scratch of n bytes.
float fit_scale_min(int n, int nmax, const float* x, const float* w, uint8_t* L, float* min_out, uint8_t* laux,
                    const ScaleSearch& search);

// Fits x[i] ≈ scale * L[i], L in 0..nmax, for non-negative x (the sub-block scales themselves),
// weights w; then coordinate-descent on L. Returns scale (0 if all x are ~0), writes L[n].
float fit_positive_scale(int n, int nmax, const float* x, uint8_t* L, const float* w);

}  // namespace ds4::quant_detail
