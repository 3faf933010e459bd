// sampler.h — the server's view of sampling: the per-request parameters as the APIs give them and
// the logprob records the APIs return. The sampling itself is the runtime's ds4::Sampler
// (include/ds4/sampler.h); this file only adapts request parameters to it (an absent seed draws
// one from std::random_device) and shapes log-probabilities for `logprobs` / `top_logprobs`.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "ds4/sampler.h"
#include "ds4/tokens.h"

namespace ds4::server {

struct SamplingParams {
  float temperature = 1.0f;  // <= 0: greedy (argmax)
  float top_p = 1.0f;        // nucleus mass kept, (0, 1]
  float min_p = 0.05f;       // drop tokens with p < min_p * p_max (ds4 default 0.05)
  int32_t top_k = 0;         // 0 = off
  std::optional<uint64_t> seed;  // none: seeded from std::random_device
};

// A runtime sampler for one generation; a request without a seed gets a fresh random one.
ds4::Sampler make_sampler(const SamplingParams& params);

struct TopLogprob {
  TokenId id = 0;
  float logprob = 0;
};

struct TokenLogprob {
  TokenId id = 0;
  float logprob = 0;               // log-softmax of the raw logits (temperature 1)
  std::vector<TopLogprob> top;     // most likely alternatives, best first
};

// Log-probability of `chosen` and the `top_n` best tokens under softmax(logits).
TokenLogprob token_logprob(std::span<const float> logits, TokenId chosen, int top_n);

}  // namespace ds4::server
