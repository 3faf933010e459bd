// test_cuda_batch.cpp — Engine::step on the CUDA backend: sessions of mixed lengths joining and leaving
// mid-run, prefill chunks sharing steps with decode tokens (tests/model/batch_scenario.h), give every
// session the logits of the same request run alone on the same backend, in both numerics.
//
// Tolerance: 1e-5·max|logit| with the same argmax wherever the solo top-2 gap is clear of it — the
// bound the CUDA model tests use for chunked ≡ decode (the kernels compute each token the same way
// whatever else shares its step). The solo runs are fed the batched run's greedy tokens, so a near-tie
// cannot make the two runs walk different sequences. Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>

#include "backend/cuda/cuda_backend.h"
#include "batch_scenario.h"
#include "engine_graph_stats.h"
#include "ds4/engine.h"
#include "model_data_path.h"
#include "model_fixture.h"

using namespace ds4;
using namespace ds4::test;

namespace {

// Graphs on (EngineOptions::cuda_graphs) vs off: the same batched workload (mixed_requests, or
// steady_requests when `steady`) gives the same bits, and the graphs-on run replayed at least
// `min_replayed` steps.
void graphs_batched_equal(const std::string& path, Numerics nm, bool steady, uint64_t min_replayed) {
  if (backend::cuda::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "missing " << path;
  std::vector<BatchRun> runs;
  for (bool graphs : {false, true}) {
    EngineOptions o;
    o.model_path = path;
    o.backend = BackendKind::cuda;
    o.numerics = nm;
    o.max_chunk = 64;
    o.cuda_graphs = graphs;
    auto er = Engine::open(o);
    ASSERT_TRUE(er.ok()) << er.status().to_string();
    const std::unique_ptr<Engine> e = std::move(er).value();
    bool ok = false;
    const int V = e->info().n_vocab;
    runs.push_back(run_batched(*e, steady ? steady_requests(V) : mixed_requests(V), ok));
    ASSERT_TRUE(ok);
    if (!graphs) continue;
    const auto st = engine_graph_stats(*e);
    std::printf("BATCH %-36s graphs: %llu recorded, %llu replayed over %d steps (%llu kept, %llu KiB)\n",
                (std::filesystem::path(path).filename().string() + (steady ? " steady" : " mixed")).c_str(),
                static_cast<unsigned long long>(st.recorded), static_cast<unsigned long long>(st.replayed),
                runs.back().steps, static_cast<unsigned long long>(st.kept),
                static_cast<unsigned long long>(st.device_bytes >> 10));
    EXPECT_GE(st.replayed, min_replayed);
  }
  ASSERT_EQ(runs[0].logits.size(), runs[1].logits.size());
  for (size_t i = 0; i < runs[0].logits.size(); ++i) {
    ASSERT_EQ(runs[0].logits[i].size(), runs[1].logits[i].size()) << "request " << i;
    EXPECT_EQ(std::memcmp(runs[0].logits[i].data(), runs[1].logits[i].data(), runs[0].logits[i].size() * sizeof(float)), 0)
        << "request " << i;
    EXPECT_EQ(runs[0].decoded[i], runs[1].decoded[i]) << "request " << i;
  }
}

void batched_equals_solo(const std::string& path, Numerics nm) {
  if (backend::cuda::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "missing " << path;
  EngineOptions o;
  o.model_path = path;
  o.backend = BackendKind::cuda;
  o.numerics = nm;
  o.max_chunk = 64;
  auto er = Engine::open(o);
  ASSERT_TRUE(er.ok()) << er.status().to_string();
  const std::unique_ptr<Engine> owned = std::move(er).value();
  Engine& e = *owned;
  const int V = e.info().n_vocab;
  const auto reqs = mixed_requests(V);
  bool ok = false;
  const BatchRun b = run_batched(e, reqs, ok);
  ASSERT_TRUE(ok);
  const BatchRun s = run_solo(e, reqs, b.decoded);
  for (size_t i = 0; i < reqs.size(); ++i) {
    ASSERT_EQ(b.logits[i].size(), s.logits[i].size()) << "request " << i;
    const Diff d = compare(b.logits[i], s.logits[i], V);
    const double tol = 1e-5 * d.max_ref;
    int argmax_bad = 0;
    for (size_t t = 0; t < s.logits[i].size() / V; ++t) {
      const float* y = &s.logits[i][t * V];
      const float* x = &b.logits[i][t * V];
      std::vector<float> top(y, y + V);
      std::partial_sort(top.begin(), top.begin() + 2, top.end(), std::greater<float>());
      if (top[0] - top[1] <= 2 * tol) continue;
      argmax_bad += std::max_element(x, x + V) - x != std::max_element(y, y + V) - y;
    }
    std::printf("BATCH %s %s request %zu (prompt %zu, %d decoded): max|d| = %.3g*max|logit|\n",
                std::filesystem::path(path).filename().c_str(), nm == Numerics::official ? "official" : "reference", i,
                reqs[i].prompt.size(), reqs[i].n_decode, d.max_abs / std::max(1e-30, d.max_ref));
    EXPECT_LE(d.max_abs, tol) << "request " << i;
    EXPECT_EQ(argmax_bad, 0) << "request " << i;
  }
}

}  // namespace

TEST(CudaBatch, TinyMixedSessionsEqualSoloOfficial) {
  batched_equals_solo(model_data_path("tiny-seed1.gguf", DS4_TINY_GGUF), Numerics::official);
}
TEST(CudaBatch, TinyMixedSessionsEqualSoloReference) {
  batched_equals_solo(model_data_path("tiny-seed1.gguf", DS4_TINY_GGUF), Numerics::reference);
}
TEST(CudaBatch, TinyQuantMixedSessionsEqualSoloOfficial) {
  batched_equals_solo(model_data_path("tiny-quant-seed1.gguf", DS4_TINY_QUANT_GGUF), Numerics::official);
}
TEST(CudaBatch, TinyMixedSessionsGraphsEqualHostLaunched) {
  graphs_batched_equal(model_data_path("tiny-seed1.gguf", DS4_TINY_GGUF), Numerics::official, false, 0);
}
TEST(CudaBatch, TinyQuantMixedSessionsGraphsEqualHostLaunched) {
  graphs_batched_equal(model_data_path("tiny-quant-seed1.gguf", DS4_TINY_QUANT_GGUF), Numerics::official, false, 0);
}
// Four sessions decoding together (steady_requests): after the prefill steps nearly every step has a
// session emitting a ratio-4 row; with a few step shapes (emission pattern, indexer selecting) each run
// eagerly once and recorded on its 2nd use, most of the ~60 batched decode steps must replay.
TEST(CudaBatch, TinySteadySessionsGraphsReplayEmittingSteps) {
  graphs_batched_equal(model_data_path("tiny-seed1.gguf", DS4_TINY_GGUF), Numerics::official, true, 30);
}
TEST(CudaBatch, TinyQuantSteadySessionsGraphsReplayEmittingSteps) {
  graphs_batched_equal(model_data_path("tiny-quant-seed1.gguf", DS4_TINY_QUANT_GGUF), Numerics::reference, true, 30);
}
