// sampler.h — next-token selection from logits (temperature, top-k, top-p, min-p, seed) and
// log-probabilities for the `logprobs` / `top_logprobs` API options.
//
// Pure and per-request: a Sampler owns its RNG, so two requests never share random state and a
// fixed seed reproduces a generation. Does not know about the model or the APIs.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <vector>

#include "ds4/tokens.h"

namespace ds4::server {

struct SamplingParams {
  float temperature = 1.0f;  // <= 0: greedy (argmax)
  float top_p = 1.0f;        // nucleus mass kept, (0, 1]
  float min_p = 0.05f;       // drop tokens with p < min_p * p_max (ds4 default 0.05)
  int32_t top_k = 0;         // 0 = off
  std::optional<uint64_t> seed;  // none: seeded from std::random_device
};

struct TopLogprob {
  TokenId id = 0;
  float logprob = 0;
};

struct TokenLogprob {
  TokenId id = 0;
  float logprob = 0;               // log-softmax of the raw logits (temperature 1)
  std::vector<TopLogprob> top;     // most likely alternatives, best first
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);
  // logits: [n_vocab] next-token logits.
  TokenId sample(std::span<const float> logits);
  const SamplingParams& params() const { return params_; }

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, TokenId>> cand_;  // reused scratch (probability, id)
};

// Log-probability of `chosen` and the `top_n` best tokens under softmax(logits).
TokenLogprob token_logprob(std::span<const float> logits, TokenId chosen, int top_n);

}  // namespace ds4::server
