// quant_math.h — numeric helpers shared by the K-quant encoders (internal to src/quant).
//
// Scale searches in the style of ggml/quants.c (make_qkx2_quants, make_qp_quants), written from the
// description in FORMATS.md §2.8. They work on one sub-block at a time, allocate nothing and keep no
// state, so encoders stay pure and thread-safe.
#pragma once

#include <cmath>
#include <cstdint>

namespace ds4::quant_detail {

// Round half to even (lrintf under the default rounding mode). The argument is first clamped to
// ±2^30 (NaN -> -2^30) so a degenerate ratio can never make the float->int conversion undefined.
inline int nearest_int(float v) {
  v = std::fmin(std::fmax(v, -1073741824.0f), 1073741824.0f);
  return static_cast<int>(std::nearbyint(v));
}

inline int clamp_int(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

// Inputs are clamped to ±kInputClamp before encoding: far beyond what any K-quant block can express
// (f16 scales saturate at 65504), and small enough that weighted sums of squares cannot overflow.
inline constexpr float kInputClamp = 1e9f;

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
