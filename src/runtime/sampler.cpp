// sampler.cpp — see include/ds4/sampler.h.
#include "ds4/sampler.h"

#include <algorithm>
#include <cmath>

#include "backend/argmax_row.h"

namespace ds4 {

namespace {
bool better(const std::pair<float, TokenId>& a, const std::pair<float, TokenId>& b) {
  return a.first > b.first || (a.first == b.first && a.second < b.second);
}
double log_sum_exp(std::span<const float> logits, float mx) {
  double s = 0;
  for (float v : logits) s += std::exp(static_cast<double>(v) - mx);
  return std::log(s) + mx;
}
}  // namespace

Sampler::Sampler(const SamplerOptions& opts) : opts_(opts), rng_(opts.seed) {}

TokenId argmax(std::span<const float> logits) {
  return logits.empty() ? 0 : argmax(logits, -1);
}

TokenId argmax(std::span<const float> logits, TokenId excluded) {
  return backend::argmax_row(logits.data(), static_cast<int64_t>(logits.size()), excluded);
}

float token_logprob(std::span<const float> logits, TokenId id) {
  if (id < 0 || static_cast<size_t>(id) >= logits.size()) return -INFINITY;
  const float mx = *std::max_element(logits.begin(), logits.end());
  return static_cast<float>(logits[id] - log_sum_exp(logits, mx));
}

std::vector<TokenLogprob> top_logprobs(std::span<const float> logits, int n) {
  std::vector<TokenLogprob> out;
  if (logits.empty() || n <= 0) return out;
  n = std::min<int>(n, static_cast<int>(logits.size()));
  std::vector<std::pair<float, TokenId>> c(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) c[i] = {logits[i], static_cast<TokenId>(i)};
  std::partial_sort(c.begin(), c.begin() + n, c.end(), better);
  const double lse = log_sum_exp(logits, c[0].first);
  for (int i = 0; i < n; ++i) out.push_back({c[i].second, static_cast<float>(c[i].first - lse)});
  return out;
}

TokenId Sampler::sample(std::span<const float> logits) {
  if (logits.empty()) return 0;
  if (opts_.temperature <= 0.0f || opts_.top_k == 1) return argmax(logits);
  const double T = opts_.temperature;
  cand_.resize(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) cand_[i] = {logits[i], static_cast<TokenId>(i)};
  if (opts_.top_k > 0 && static_cast<size_t>(opts_.top_k) < cand_.size()) {  // top-k: O(V) selection
    std::nth_element(cand_.begin(), cand_.begin() + opts_.top_k - 1, cand_.end(), better);
    cand_.resize(static_cast<size_t>(opts_.top_k));
  }
  // Softmax normalizer over the top-k set (at the temperature), in double.
  float mx = -INFINITY;
  for (const auto& c : cand_) mx = std::max(mx, c.first);
  double z = 0;
  for (const auto& c : cand_) z += std::exp((c.first - mx) / T);
  // min-p keeps p >= min_p·p_max, i.e. logit >= max + T·ln(min_p): the head of the sorted order, so it
  // is applied before sorting (a 129k vocabulary then sorts only a few survivors per token).
  if (opts_.min_p > 0.0f) {
    const double floor_logit = mx + T * std::log(static_cast<double>(opts_.min_p));
    cand_.erase(std::remove_if(cand_.begin(), cand_.end(), [&](const auto& c) { return c.first < floor_logit; }),
                cand_.end());
  }
  std::sort(cand_.begin(), cand_.end(), better);
  const size_t n = cand_.size();
  std::vector<double>& p = probs_;
  p.resize(n);
  for (size_t i = 0; i < n; ++i) p[i] = std::exp((cand_[i].first - mx) / T) / z;
  size_t keep = n;
  if (opts_.top_p < 1.0f) {  // smallest head with mass >= top_p (of the whole top-k distribution)
    double acc = 0;
    for (size_t i = 0; i < n; ++i) {
      acc += p[i];
      if (acc >= opts_.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  double mass = 0;
  for (size_t i = 0; i < keep; ++i) mass += p[i];
  // 53-bit uniform in [0, 1): portable, unlike std::uniform_real_distribution.
  const double u = static_cast<double>(rng_() >> 11) * (1.0 / 9007199254740992.0) * mass;
  double acc = 0;
  for (size_t i = 0; i < keep; ++i) {
    acc += p[i];
    if (u < acc) return cand_[i].second;
  }
  return cand_[keep - 1].second;
}

}  // namespace ds4
