// sampler.h — next-token selection from logits: greedy, temperature, top-k, top-p, min-p with a
// seeded RNG, and log-probabilities (chosen token and the top-N alternatives).
//
// Implemented in src/runtime/sampler.cpp. A Sampler owns its RNG: one per generation, so a fixed
// seed reproduces a generation on every machine (mt19937_64 and a 53-bit uniform, no
// std::*_distribution whose output is implementation-defined). Nothing here touches the model.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "ds4/tokens.h"

namespace ds4 {

struct SamplerOptions {
  float temperature = 1.0f;  // <= 0: greedy (argmax; ties → lower id)
  int32_t top_k = 0;         // keep the k most likely; 0 = off
  float top_p = 1.0f;        // keep the smallest most-likely set with mass >= top_p; 1 = off
  float min_p = 0.0f;        // drop tokens with p < min_p · p_max; 0 = off (ds4 CLI default 0.05)
  uint64_t seed = 0;
};

struct TokenLogprob {
  TokenId id = 0;
  float logprob = 0;  // log-softmax of the raw logits (temperature 1)
};

class Sampler {
 public:
  explicit Sampler(const SamplerOptions& opts);
  // logits: [n_vocab]. Filters are applied in the order top-k → temperature → top-p → min-p.
  TokenId sample(std::span<const float> logits);
  const SamplerOptions& options() const { return opts_; }

 private:
  SamplerOptions opts_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, TokenId>> cand_;  // reused scratch: (logit, id)
  std::vector<double> probs_;                    // reused scratch: probabilities of cand_
};

TokenId argmax(std::span<const float> logits);  // lowest id among equal maxima
// The same scan skipping `excluded` (−1: none); −1 when no id is left. NaN: never chosen unless it sits at
// the first candidate id (the scan replaces its best only by a strictly larger value).
TokenId argmax(std::span<const float> logits, TokenId excluded);
float token_logprob(std::span<const float> logits, TokenId id);
// The n most likely tokens, best first (ties → lower id).
std::vector<TokenLogprob> top_logprobs(std::span<const float> logits, int n);

}  // namespace ds4
