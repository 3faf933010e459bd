// test_cuda_branches.cpp — concurrent branches on the device (EngineOptions::cuda_branches,
// CudaBackendOptions::branches: the shared expert, the KV path and the compressors + indexer on a second
// stream beside the routed experts and the query path). The same ops in the same order on each lane, so
// branches on must give the in-order bits exactly: decode token by token across compressor emissions
// and the indexer's top-k threshold, chunked prefill, and batched steps of several sessions (prefill
// chunks mixed with decode tokens, and steady batched decode), with step graphs off (host-launched, the
// two streams ordered by events) and on (the lanes recorded as parallel graph branches, which must
// really be recorded and replayed, not fall back to eager). The in-order CUDA run is itself checked
// against the CPU by test_cuda_model.cpp; here the reference-numerics decode is also bounded against
// the CPU directly. Skips without a GPU.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>

#include "backend/cuda/cuda_backend.h"
#include "batch_scenario.h"
#include "ds4/engine.h"
#include "model/forward.h"
#include "engine_graph_stats.h"
#include "model_data_path.h"
#include "model_fixture.h"

using namespace ds4;
using namespace ds4::test;
namespace fs = std::filesystem;

namespace {

std::unique_ptr<Engine> open_cuda(const std::string& path, Numerics nm, bool graphs, bool branches,
                                  BackendKind kind = BackendKind::cuda, int64_t l2_prefetch = -1) {
  EngineOptions o;
  o.l2_prefetch = l2_prefetch;
  o.model_path = path;
  o.backend = kind;
  o.numerics = nm;
  o.max_chunk = 64;
  o.cuda_graphs = graphs;
  o.cuda_branches = branches;
  auto e = Engine::open(o);
  EXPECT_TRUE(e.ok()) << path << ": " << e.status().to_string();
  if (!e.ok()) return nullptr;
  return std::move(e).value();
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void decode_same_bits(const std::string& path) {
  if (backend::cuda::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  if (!fs::exists(path)) GTEST_SKIP() << "missing " << path;
  for (Numerics nm : {Numerics::official, Numerics::reference}) {
    const std::string name = fs::path(path).filename().string() + (nm == Numerics::official ? " official" : " reference");
    for (bool graphs : {false, true}) {
      const std::string tag = name + (graphs ? " graphs" : " host-launched");
      auto plain = open_cuda(path, nm, graphs, false);
      auto br = open_cuda(path, nm, graphs, true);
      ASSERT_TRUE(plain && br);
      const int V = plain->info().n_vocab;
      const auto toks = random_tokens(160, V, 4321);
      const auto want = logits_decode(*plain, toks);
      const auto got = logits_decode(*br, toks);
      EXPECT_TRUE(same_bits(want, got)) << tag << " decode";
      const auto wc = logits_chunked(*plain, toks, {7, 13, 1, 30});
      const auto gc = logits_chunked(*br, toks, {7, 13, 1, 30});
      EXPECT_TRUE(same_bits(wc, gc)) << tag << " chunked 7/13/1/30";
      const auto st = engine_graph_stats(*br);
      std::printf("BRANCHES %-44s decode + chunked: same bits %s; graphs %llu recorded, %llu replayed\n", tag.c_str(),
                  same_bits(want, got) && same_bits(wc, gc) ? "yes" : "NO",
                  static_cast<unsigned long long>(st.recorded), static_cast<unsigned long long>(st.replayed));
      if (graphs) EXPECT_GT(st.replayed, 120u) << tag << ": the branched steps must be recorded and replayed";
      if (nm == Numerics::reference && graphs) {
        // Branches ≡ in order ≡ CPU (within the reference bound test_cuda_model uses).
        auto cpu = open_cuda(path, nm, false, false, BackendKind::cpu);
        ASSERT_TRUE(cpu);
        const Diff d = compare(got, logits_decode(*cpu, toks), V);
        std::printf("BRANCHES %-44s decode vs cpu: max|d| = %.3g*max|logit|\n", tag.c_str(),
                    d.max_abs / std::max(1e-30, d.max_ref));
        EXPECT_LE(d.max_abs, 1e-4 * d.max_ref) << tag << " vs cpu";
      }
    }
  }
}

void batched_same_bits(const std::string& path, bool steady) {
  if (backend::cuda::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  if (!fs::exists(path)) GTEST_SKIP() << "missing " << path;
  for (bool graphs : {false, true}) {
    const std::string tag = fs::path(path).filename().string() + (steady ? " steady" : " mixed") +
                            (graphs ? " graphs" : " host-launched");
    BatchRun runs[2];
    for (int b = 0; b < 2; ++b) {
      auto e = open_cuda(path, Numerics::official, graphs, b == 1);
      ASSERT_TRUE(e);
      const int V = e->info().n_vocab;
      bool ok = false;
      runs[b] = run_batched(*e, steady ? steady_requests(V) : mixed_requests(V), ok);
      ASSERT_TRUE(ok) << tag;
      if (b == 1) {
        const auto st = engine_graph_stats(*e);
        std::printf("BRANCHES %-44s %d steps (up to %d sessions); graphs %llu recorded, %llu replayed\n", tag.c_str(),
                    runs[b].steps, runs[b].max_items, static_cast<unsigned long long>(st.recorded),
                    static_cast<unsigned long long>(st.replayed));
        if (graphs && steady) EXPECT_GE(st.replayed, 30u) << tag;
      }
    }
    ASSERT_EQ(runs[0].logits.size(), runs[1].logits.size());
    for (size_t i = 0; i < runs[0].logits.size(); ++i) {
      EXPECT_TRUE(same_bits(runs[0].logits[i], runs[1].logits[i])) << tag << " request " << i;
      EXPECT_EQ(runs[0].decoded[i], runs[1].decoded[i]) << tag << " request " << i;
    }
  }
}

// Weight prefetch (EngineOptions::l2_prefetch, Backend::prefetch on the side lane) is a cache hint: every
// part on ≡ none, decode and chunked, graphs off and on, branches on (the prefetch beside the ops) and off
// (in order on the one stream).
void prefetch_same_bits(const std::string& path) {
  if (backend::cuda::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  if (!fs::exists(path)) GTEST_SKIP() << "missing " << path;
  const int64_t all = model::kPrefetchQuery | model::kPrefetchOutA | model::kPrefetchOutB | model::kPrefetchShared;
  for (bool graphs : {false, true}) {
    for (bool branches : {true, false}) {
      const std::string tag = fs::path(path).filename().string() + (graphs ? " graphs" : " host-launched") +
                              (branches ? " branches" : " in order");
      auto none = open_cuda(path, Numerics::official, graphs, branches, BackendKind::cuda, 0);
      auto pre = open_cuda(path, Numerics::official, graphs, branches, BackendKind::cuda, all);
      auto out_b = open_cuda(path, Numerics::official, graphs, branches, BackendKind::cuda, model::kPrefetchOutB);
      ASSERT_TRUE(none && pre && out_b);
      const auto toks = random_tokens(140, none->info().n_vocab, 977);
      const auto want = logits_decode(*none, toks);
      EXPECT_TRUE(same_bits(want, logits_decode(*pre, toks))) << tag << " decode, every part prefetched";
      EXPECT_TRUE(same_bits(want, logits_decode(*out_b, toks))) << tag << " decode, out_b prefetched";
      const auto wc = logits_chunked(*none, toks, {9, 1, 30});
      EXPECT_TRUE(same_bits(wc, logits_chunked(*pre, toks, {9, 1, 30}))) << tag << " chunked 9/1/30";
      std::printf("PREFETCH %-44s decode + chunked checked (%zu tokens)\n", tag.c_str(), toks.size());
    }
  }
}

}  // namespace

TEST(CudaBranches, TinyQuantPrefetchEqualsNone) {
  prefetch_same_bits(model_data_path("tiny-quant-seed1.gguf", DS4_TINY_QUANT_GGUF));
}

TEST(CudaBranches, TinyDecodeEqualsInOrder) { decode_same_bits(model_data_path("tiny-seed1.gguf", DS4_TINY_GGUF)); }
TEST(CudaBranches, TinyQuantDecodeEqualsInOrder) {
  decode_same_bits(model_data_path("tiny-quant-seed1.gguf", DS4_TINY_QUANT_GGUF));
}
TEST(CudaBranches, TinyMixedBatchEqualsInOrder) { batched_same_bits(model_data_path("tiny-seed1.gguf", DS4_TINY_GGUF), false); }
TEST(CudaBranches, TinyQuantMixedBatchEqualsInOrder) {
  batched_same_bits(model_data_path("tiny-quant-seed1.gguf", DS4_TINY_QUANT_GGUF), false);
}
TEST(CudaBranches, TinyQuantSteadyBatchEqualsInOrder) {
  batched_same_bits(model_data_path("tiny-quant-seed1.gguf", DS4_TINY_QUANT_GGUF), true);
}
