// quant_math.cpp — the scale searches of quant_math.h.
#include "quant/quant_math.h"

#include <cstring>

namespace ds4::quant_detail {

namespace {

float weighted_error(int n, const float* x, const float* w, const uint8_t* L, float scale, float offset,
                     bool use_mad) {
  float err = 0;
  for (int i = 0; i < n; ++i) {
    const float diff = scale * static_cast<float>(L[i]) + offset - x[i];
    err += w[i] * (use_mad ? std::fabs(diff) : diff * diff);
  }
  return err;
}

}  // namespace

float fit_scale_min(int n, int nmax, const float* x, const float* w, uint8_t* L, float* min_out, uint8_t* laux,
                    const ScaleSearch& search) {
  float lo = x[0], hi = x[0], sum_w = 0, sum_x = 0;
  for (int i = 0; i < n; ++i) {
    lo = min_f(lo, x[i]);
    hi = max_f(hi, x[i]);
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  if (lo > 0) lo = 0;  // the offset only ever moves values down: a positive "min" is never stored
  if (!(hi > lo)) {
    std::memset(L, 0, static_cast<size_t>(n));
    *min_out = -lo;
    return 0.0f;
  }
  // Candidate 0: the plain min/max scale.
  float iscale = static_cast<float>(nmax) / (hi - lo);
  float scale = 1.0f / iscale;
  float offset = lo;  // x ≈ scale * L + offset, offset <= 0
  for (int i = 0; i < n; ++i) L[i] = static_cast<uint8_t>(clamp_int(nearest_int(iscale * (x[i] - lo)), 0, nmax));
  float best = weighted_error(n, x, w, L, scale, offset, search.use_mad);

  // Each candidate is taken relative to the best offset found so far (as quants.c does): the search
  // refines (scale, offset) progressively rather than scanning around the initial min/max fit.
  for (int t = 0; t <= search.nstep && search.nstep > 0; ++t) {
    iscale = (search.rmin + search.rdelta * static_cast<float>(t) + static_cast<float>(nmax)) / (hi - offset);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = clamp_int(nearest_int(iscale * (x[i] - offset)), 0, nmax);
      laux[i] = static_cast<uint8_t>(l);
      sum_l += w[i] * static_cast<float>(l);
      sum_l2 += w[i] * static_cast<float>(l) * static_cast<float>(l);
      sum_xl += w[i] * static_cast<float>(l) * x[i];
    }
    // Weighted least squares for (scale, offset) with these L.
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (!(det > 0)) continue;
    float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
    float this_offset = (sum_l2 * sum_x - sum_l * sum_xl) / det;
    if (this_offset > 0) {  // keep the offset non-positive: refit the scale alone
      this_offset = 0;
      this_scale = sum_xl / sum_l2;
    }
    const float err = weighted_error(n, x, w, laux, this_scale, this_offset, search.use_mad);
    if (err < best) {
      std::memcpy(L, laux, static_cast<size_t>(n));
      best = err;
      scale = this_scale;
      offset = this_offset;
    }
  }
  *min_out = -offset;
  return scale;
}

float fit_positive_scale(int n, int nmax, const float* x, uint8_t* L, const float* w) {
  float max = 0;
  for (int i = 0; i < n; ++i) max = max_f(max, x[i]);
  if (max < 1e-30f) {
    std::memset(L, 0, static_cast<size_t>(n));
    return 0.0f;
  }
  auto quantize_with = [&](float iscale, uint8_t* out) {
    for (int i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(clamp_int(nearest_int(iscale * x[i]), 0, nmax));
  };
  auto error_of = [&](float iscale) {
    uint8_t tmp[64];
    quantize_with(iscale, tmp);
    const float scale = 1.0f / iscale;
    float err = 0;
    for (int i = 0; i < n; ++i) {
      const float diff = x[i] - scale * static_cast<float>(tmp[i]);
      err += w[i] * diff * diff;
    }
    return err;
  };
  // Try inverse scales around nmax/max, keep the best, then refine L by coordinate descent on the
  // LS objective (sum w x l)^2 / (sum w l^2), which is what the optimal scale for fixed L achieves.
  float best_iscale = static_cast<float>(nmax) / max;
  float best_err = error_of(best_iscale);
  for (int t = -4; t <= 4; ++t) {
    if (t == 0) continue;
    const float is = (static_cast<float>(nmax) + 0.1f * static_cast<float>(t)) / max;
    const float err = error_of(is);
    if (err < best_err) {
      best_err = err;
      best_iscale = is;
    }
  }
  quantize_with(best_iscale, L);
  float sum_lx = 0, sum_l2 = 0;
  for (int i = 0; i < n; ++i) {
    sum_lx += w[i] * x[i] * static_cast<float>(L[i]);
    sum_l2 += w[i] * static_cast<float>(L[i]) * static_cast<float>(L[i]);
  }
  for (int pass = 0; pass < 5; ++pass) {
    int changed = 0;
    for (int i = 0; i < n; ++i) {
      const float li = static_cast<float>(L[i]);
      const float slx = sum_lx - w[i] * x[i] * li;
      const float sl2 = sum_l2 - w[i] * li * li;
      if (!(slx > 0 && sl2 > 0)) continue;
      const int nl = clamp_int(nearest_int(x[i] * sl2 / slx), 0, nmax);
      if (nl == L[i]) continue;
      const float nlx = slx + w[i] * x[i] * static_cast<float>(nl);
      const float nl2 = sl2 + w[i] * static_cast<float>(nl) * static_cast<float>(nl);
      if (nlx * nlx * sum_l2 > sum_lx * sum_lx * nl2) {
        L[i] = static_cast<uint8_t>(nl);
        sum_lx = nlx;
        sum_l2 = nl2;
        ++changed;
      }
    }
    if (changed == 0) break;
  }
  return sum_l2 > 0 ? sum_lx / sum_l2 : 0.0f;
}

}  // namespace ds4::quant_detail
