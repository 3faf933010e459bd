// sampler.cpp — see sampler.h. Filters in the order llama.cpp/ds4 use: top-k, temperature, min-p,
// top-p; min-p first cuts the 129K-entry vocabulary down to a handful of candidates, so the sort
// that top-p needs is cheap.
#include "server/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace ds4::server {

Sampler::Sampler(const SamplingParams& params) : params_(params) {
  if (params_.seed) {
    rng_.seed(*params_.seed);
  } else {
    std::random_device rd;
    rng_.seed((static_cast<uint64_t>(rd()) << 32) ^ rd());
  }
}

static TokenId argmax(std::span<const float> logits) {
  TokenId best = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[best]) best = static_cast<TokenId>(i);
  return best;
}

TokenId Sampler::sample(std::span<const float> logits) {
  if (logits.empty()) return 0;
  if (params_.temperature <= 0.0f || params_.top_k == 1) return argmax(logits);
  const float inv_t = 1.0f / params_.temperature;
  float max_logit = -std::numeric_limits<float>::infinity();
  for (float l : logits) max_logit = std::max(max_logit, l);

  cand_.clear();
  if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < logits.size()) {
    cand_.reserve(logits.size());
    for (size_t i = 0; i < logits.size(); ++i) cand_.emplace_back(logits[i], static_cast<TokenId>(i));
    std::nth_element(cand_.begin(), cand_.begin() + params_.top_k, cand_.end(),
                     [](const auto& a, const auto& b) { return a.first > b.first; });
    cand_.resize(params_.top_k);
    for (auto& c : cand_) c.first = std::exp((c.first - max_logit) * inv_t);
  } else {
    // min-p on unnormalised weights: p_i / p_max = exp((l_i - l_max)/T).
    const float floor = params_.min_p > 0 ? params_.min_p : 0.0f;
    for (size_t i = 0; i < logits.size(); ++i) {
      float w = std::exp((logits[i] - max_logit) * inv_t);
      if (w >= floor && w > 0) cand_.emplace_back(w, static_cast<TokenId>(i));
    }
  }
  if (params_.min_p > 0 && params_.top_k > 0) {
    float wmax = 0;
    for (auto& c : cand_) wmax = std::max(wmax, c.first);
    std::erase_if(cand_, [&](const auto& c) { return c.first < params_.min_p * wmax; });
  }
  if (cand_.empty()) return argmax(logits);
  if (params_.top_p > 0 && params_.top_p < 1.0f) {
    std::sort(cand_.begin(), cand_.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    double total = 0;
    for (auto& c : cand_) total += c.first;
    double acc = 0;
    size_t keep = cand_.size();
    for (size_t i = 0; i < cand_.size(); ++i) {
      acc += cand_[i].first;
      if (acc >= params_.top_p * total) {
        keep = i + 1;
        break;
      }
    }
    cand_.resize(keep);
  }
  double total = 0;
  for (auto& c : cand_) total += c.first;
  std::uniform_real_distribution<double> dist(0.0, total);
  double r = dist(rng_);
  for (auto& c : cand_) {
    r -= c.first;
    if (r <= 0) return c.second;
  }
  return cand_.back().second;
}

TokenLogprob token_logprob(std::span<const float> logits, TokenId chosen, int top_n) {
  TokenLogprob out;
  out.id = chosen;
  if (logits.empty()) return out;
  float max_logit = -std::numeric_limits<float>::infinity();
  for (float l : logits) max_logit = std::max(max_logit, l);
  double sum = 0;
  for (float l : logits) sum += std::exp(static_cast<double>(l - max_logit));
  const double log_z = max_logit + std::log(sum);
  if (chosen >= 0 && static_cast<size_t>(chosen) < logits.size())
    out.logprob = static_cast<float>(logits[chosen] - log_z);
  if (top_n > 0) {
    std::vector<std::pair<float, TokenId>> all;
    all.reserve(logits.size());
    for (size_t i = 0; i < logits.size(); ++i) all.emplace_back(logits[i], static_cast<TokenId>(i));
    const size_t n = std::min<size_t>(top_n, all.size());
    std::partial_sort(all.begin(), all.begin() + n, all.end(), [](const auto& a, const auto& b) {
      return a.first > b.first || (a.first == b.first && a.second < b.second);
    });
    for (size_t i = 0; i < n; ++i)
      out.top.push_back({all[i].second, static_cast<float>(all[i].first - log_z)});
  }
  return out;
}

}  // namespace ds4::server
