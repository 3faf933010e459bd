// rope.cpp — see rope.h; formulas of MODEL.md §5.3.
#include "model/rope.h"

#include <algorithm>
#include <cmath>

namespace ds4::model {

std::vector<double> rope_freqs(const RopeFreqParams& p) {
  const int half = p.n_rot / 2;
  std::vector<double> w(static_cast<size_t>(half));
  for (int i = 0; i < half; ++i) w[i] = std::pow(p.base, -2.0 * i / p.n_rot);
  if (!p.yarn) return w;
  auto corr = [&](double beta) { return p.n_rot * std::log(p.orig_context / (2.0 * M_PI * beta)) / (2.0 * std::log(p.base)); };
  const double lo = std::max(0.0, std::floor(corr(p.beta_fast)));
  const double hi = std::min(static_cast<double>(p.n_rot - 1), std::ceil(corr(p.beta_slow)));
  for (int i = 0; i < half; ++i) {
    const double ramp = std::clamp((i - lo) / std::max(0.001, hi - lo), 0.0, 1.0);
    w[i] = (w[i] / p.factor) * ramp + w[i] * (1.0 - ramp);
  }
  return w;
}

}  // namespace ds4::model
