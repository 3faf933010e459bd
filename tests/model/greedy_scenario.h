// greedy_scenario.h — the greedy decoding path (Session::eval_greedy, StepItem::next: the next token picked
// by Backend::argmax inside the step, 4 bytes back) against the logits path (logits downloaded, scanned by
// ds4::argmax / sampled by ds4::Sampler) on any engine: the CPU in tests/model, CUDA in tests/cuda.
// Both paths run the same steps with the same shapes, so tokens and logits must be equal exactly.
#pragma once

#include <cstdint>
#include <vector>

#include "ds4/engine.h"

namespace ds4::test {

struct GreedyRun {
  std::vector<std::vector<TokenId>> tokens;  // per session: the tokens chosen after its prompt
  std::vector<std::vector<float>> logits;    // per session: logits() at the end (recomputed when deferred)
  std::vector<std::vector<uint8_t>> snapshots;  // per session: snapshot bytes at the end
};

// How greedy_solo decodes: eval + ds4::argmax of the logits, eval_greedy per token, or generate_greedy
// (the device one step ahead of the host).
enum class GreedyPath { host, device, pipelined };

// One session: up to `n` greedy tokens after `prompt` (EOS-like id `exclude` never chosen; −1: none),
// stopping after `stop_after` reported tokens (−1: never). tokens[0] = every reported token.
GreedyRun greedy_solo(Engine& e, const std::vector<TokenId>& prompt, int n, TokenId exclude, GreedyPath path,
                      int stop_after = -1);

// Deferred logits recomputed: `n` greedy tokens (device path) or the host path, then another session's step
// (so the greedy step's logits are gone from the device and logits() re-evaluates the last token), then
// `more` tokens by the host path. tokens[0]: all tokens; logits/snapshots: after the recompute, at the end.
GreedyRun greedy_recompute(Engine& e, const std::vector<TokenId>& prompt, int n, int more, bool device);

// Three sessions stepped together by Engine::step: a greedy one, one sampled at temperature 0.8 (seeded:
// it always takes the logits path), and a greedy one with an excluded id; each prompt goes in as one
// prefill item (greedy items pick their first token from the chunk's last column), then `n` decode steps.
// `device`: greedy items use StepItem::next; else their logits are downloaded and scanned on the host.
GreedyRun greedy_mixed_batch(Engine& e, int n, bool device);

}  // namespace ds4::test
