// cuda_bench_branches.cpp — `cuda_bench --branches M...`: whole decode steps of a model file with the
// concurrent branches off and on (EngineOptions::cuda_branches), step graphs on and off, one session
// and a batch of 8, through the public Engine API. Prints one "BENCH branches" line per case: the
// median per-step wall time of the decode steps (host-timed, logits download included, as the engine
// serves them) and the rate. Method: prefill each session's prompt, run 8 warm-up steps (graphs are
// recorded on a shape's 2nd use), then the median of 5 repetitions of 16 steps.
// Deliberately not here: correctness (tests/cuda/test_cuda_branches.cpp), per-op timings (cuda_bench).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <vector>

#include "bench_median.h"
#include "ds4/engine.h"

using namespace ds4;
using Clock = std::chrono::steady_clock;

namespace {

// One case: `sessions` sessions with prompts of `prompt` tokens (different per session), then decode
// steps of one token per session. Returns seconds per step, or a negative value on failure; *prefill:
// seconds of the first session's prompt (chunks of max_chunk tokens).
double decode_step_seconds(Engine& e, int sessions, int prompt, double* prefill) {
  const int V = e.info().n_vocab;
  std::vector<std::unique_ptr<Session>> ss;
  for (int s = 0; s < sessions; ++s) {
    auto made = e.new_session();
    if (!made.ok()) return -1;
    std::vector<TokenId> p(static_cast<size_t>(prompt + 3 * s));
    for (size_t k = 0; k < p.size(); ++k) p[k] = static_cast<TokenId>((k * 7919 + 13 * s) % V);
    const auto t0 = Clock::now();
    if (!(*made)->eval(p).ok()) return -1;
    if (s == 0) *prefill = std::chrono::duration<double>(Clock::now() - t0).count();
    ss.push_back(std::move(made).value());
  }
  std::vector<TokenId> next(static_cast<size_t>(sessions), 1);
  bool ok = true;
  auto step = [&] {
    std::vector<StepItem> items;
    for (int s = 0; s < sessions; ++s) items.push_back({ss[s].get(), std::span<const TokenId>(&next[s], 1)});
    if (!e.step(items, {}).ok()) ok = false;
    for (int s = 0; s < sessions; ++s) {
      const auto l = ss[s]->logits();
      next[s] = static_cast<TokenId>(std::max_element(l.begin(), l.end()) - l.begin());
    }
  };
  for (int w = 0; w < 8; ++w) step();
  const double t = ds4::test::median_seconds(step, [] {}, 16);  // each step ends in its logits download
  return ok ? t : -1;
}

}  // namespace

void bench_branches(int argc, char** argv) {
  for (int i = 0; i < argc; ++i) {
    for (bool graphs : {true, false}) {
      for (bool branches : {false, true}) {
        EngineOptions o;
        o.model_path = argv[i];
        o.backend = BackendKind::cuda;
        o.max_chunk = 512;
        o.cuda_graphs = graphs;
        o.cuda_branches = branches;
        auto e = Engine::open(o);
        if (!e.ok()) {
          std::printf("BENCH branches %s: %s\n", argv[i], e.status().to_string().c_str());
          return;
        }
        for (int sessions : {1, 8}) {
          const int prompt = 2048;
          const int ctx = sessions == 1 ? prompt : 512;
          double pre = 0;
          const double t = decode_step_seconds(**e, sessions, ctx, &pre);
          std::printf("BENCH branches %-36s layers %d graphs %s branches %s batch %d ctx %d: %.3f ms/step, %.1f tok/s "
                      "(prefill %d tok %.1f ms)\n",
                      argv[i], (*e)->info().n_layer, graphs ? "on " : "off", branches ? "on " : "off", sessions, ctx,
                      t * 1e3, t > 0 ? sessions / t : 0.0, ctx, pre * 1e3);
        }
      }
    }
  }
}
