// batch_scenario.h — a scripted multi-session workload for Engine::step equivalence tests (CPU here,
// CUDA in tests/cuda): requests join at given steps, prefill in their own chunk patterns under the
// step's token budget (so prefill chunks share steps with other sessions' decode tokens), decode greedy
// tokens, and leave (their session is destroyed) when done. The same requests run alone give the
// reference: each prompt in one eval(), then the batched run's decode tokens one at a time.
#pragma once

#include <cstdint>
#include <vector>

#include "ds4/engine.h"

namespace ds4::test {

struct BatchRequest {
  int join_step = 0;               // first step the request takes part in
  std::vector<TokenId> prompt;     // non-empty
  int n_decode = 0;                // greedy tokens after the prompt
  std::vector<int> chunks;         // prefill chunk pattern (cycled; cut to the step budget)
};

struct BatchRun {
  // Per request: the decoded tokens, and the logits after the prompt and after each decoded token,
  // [(1 + n_decode)][V].
  std::vector<std::vector<TokenId>> decoded;
  std::vector<std::vector<float>> logits;
  int steps = 0;            // Engine::step calls
  int max_items = 0;        // most sessions in one step
  int mixed_steps = 0;      // steps holding both a prefill chunk and a decode token
};

// Mixed lengths that cross the tiny models' sliding window (16), the ratio-4 and ratio-16 row
// boundaries and the indexer's top-k threshold (more than 16 ratio-4 rows from position 68 on).
std::vector<BatchRequest> mixed_requests(int vocab);
// Steady serving: four sessions with prompts of different lengths decode together for 60 steps, so
// nearly every step has some session emitting a ratio-4 row (and now and then a ratio-16 one), with
// the indexer's threshold crossed on the way — the steps a recorded batched graph must serve.
std::vector<BatchRequest> steady_requests(int vocab);

// Drives the requests through Engine::step; `ok` is false (with a gtest failure) if a step fails.
BatchRun run_batched(Engine& e, const std::vector<BatchRequest>& reqs, bool& ok);
// Each request alone on a fresh session: eval(prompt), then decoded[i] token by token.
BatchRun run_solo(Engine& e, const std::vector<BatchRequest>& reqs, const std::vector<std::vector<TokenId>>& decoded);

}  // namespace ds4::test
