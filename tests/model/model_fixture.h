// model_fixture.h — shared helpers for the whole-model tests: opening engines on the generated tiny
// models, random token sequences, and logit comparisons.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ds4/engine.h"

namespace ds4::test {

struct EngineSpec {
  std::string path;
  Numerics numerics = Numerics::official;
  int32_t max_chunk = 0;
  bool shared_expert_clamp = true;
  bool cuda_graphs = false;  // EngineOptions::cuda_graphs
};

std::unique_ptr<Engine> open_engine(const EngineSpec& spec);
std::vector<TokenId> random_tokens(int n, int vocab, uint32_t seed);

// Runs `tokens` through a fresh session in the given chunk pattern (cycled); returns [n][V] logits.
std::vector<float> logits_chunked(Engine& e, const std::vector<TokenId>& tokens, const std::vector<int>& chunks);
// Token by token with eval() and logits() (decode path); returns [n][V].
std::vector<float> logits_decode(Engine& e, const std::vector<TokenId>& tokens);

struct Diff {
  double max_abs = 0;       // max |a − b|
  double max_ref = 0;       // max |b|
  int argmax_mismatch = 0;  // rows whose argmax differs
};
Diff compare(const std::vector<float>& a, const std::vector<float>& b, int vocab);

}  // namespace ds4::test
