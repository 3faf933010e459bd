// sampler.cpp — request sampling parameters → ds4::Sampler, and API logprob records.
#include "server/sampler.h"

#include <random>

namespace ds4::server {

ds4::Sampler make_sampler(const SamplingParams& params) {
  SamplerOptions o;
  o.temperature = params.temperature;
  o.top_k = params.top_k;
  o.top_p = params.top_p;
  o.min_p = params.min_p;
  if (params.seed) {
    o.seed = *params.seed;
  } else {
    std::random_device rd;
    o.seed = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }
  return ds4::Sampler(o);
}

TokenLogprob token_logprob(std::span<const float> logits, TokenId chosen, int top_n) {
  TokenLogprob out;
  out.id = chosen;
  out.logprob = ds4::token_logprob(logits, chosen);
  if (top_n > 0)
    for (const auto& t : ds4::top_logprobs(logits, top_n)) out.top.push_back({t.id, t.logprob});
  return out;
}

}  // namespace ds4::server
