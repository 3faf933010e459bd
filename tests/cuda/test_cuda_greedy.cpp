// test_cuda_greedy.cpp — greedy decoding on CUDA with the next token picked by the argmax kernel inside the
// step graph (Session::eval_greedy, StepItem::next: 4 bytes back instead of the logits) equals the logits
// path (downloaded, scanned by ds4::argmax) exactly: tokens, the deferred logits recomputed afterwards, and
// snapshots; alone, pipelined (Session::generate_greedy: the next step launched before the token is read
// back, its token copied on the device; a stop rolled back), and in a batch mixing greedy and sampled
// sessions; graphs on and off; and the steps are replayed as graphs (the argmax is recorded with the head).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "backend/cuda/cuda_backend.h"
#include "ds4/engine.h"
#include "engine_graph_stats.h"
#include "greedy_scenario.h"
#include "model_data_path.h"
#include "model_fixture.h"

using namespace ds4;
using namespace ds4::test;

namespace {

std::unique_ptr<Engine> open_cuda(const std::string& path, bool graphs, int32_t max_chunk) {
  EngineOptions o;
  o.model_path = path;
  o.backend = BackendKind::cuda;
  o.max_chunk = max_chunk;
  o.cuda_graphs = graphs;
  auto er = Engine::open(o);
  EXPECT_TRUE(er.ok()) << er.status().to_string();
  return er.ok() ? std::move(er).value() : nullptr;
}

// Prints one GREEDY line per comparison (tokens, logits, snapshots; the first differing snapshot byte).
// Snapshots are asserted with graphs on too: runs whose graph histories differ (steps run eagerly and recorded
// vs replayed) once left different snapshots — a replayed step did not advance the host's count of compressed
// rows (test_cuda_snapshot.cpp).
void expect_same(const GreedyRun& a, const GreedyRun& b, const std::string& what) {
  ASSERT_EQ(a.tokens.size(), b.tokens.size()) << what;
  ASSERT_EQ(a.snapshots.size(), b.snapshots.size()) << what;
  int n = 0;
  bool tokens = true, logits = true, snaps = true;
  std::string where;
  for (size_t i = 0; i < a.tokens.size(); ++i) {
    EXPECT_EQ(a.tokens[i], b.tokens[i]) << what << " session " << i;
    tokens = tokens && a.tokens[i] == b.tokens[i];
    n += static_cast<int>(a.tokens[i].size());
  }
  for (size_t i = 0; i < a.snapshots.size(); ++i) {
    EXPECT_EQ(a.logits[i], b.logits[i]) << what << " result " << i;
    logits = logits && a.logits[i] == b.logits[i];
    EXPECT_TRUE(a.snapshots[i] == b.snapshots[i]) << what << " result " << i;
    if (a.snapshots[i] != b.snapshots[i] && snaps) {
      size_t k = 0;
      while (k < a.snapshots[i].size() && k < b.snapshots[i].size() && a.snapshots[i][k] == b.snapshots[i][k]) ++k;
      where = " (result " + std::to_string(i) + ": first difference at byte " + std::to_string(k) + " of " +
              std::to_string(a.snapshots[i].size()) + ")";
      snaps = false;
    }
  }
  std::printf("GREEDY %-36s %3d tokens: tokens %s, logits %s, snapshots %s%s\n", what.c_str(), n,
              tokens ? "equal" : "DIFFER", logits ? "equal" : "DIFFER", snaps ? "equal" : "DIFFER", where.c_str());
}

void greedy_paths_equal(const std::string& path) {
  if (backend::cuda::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "missing " << path;
  const std::string name = std::filesystem::path(path).filename().string();
  for (const bool graphs : {false, true}) {
    auto e = open_cuda(path, graphs, 128);
    ASSERT_TRUE(e);
    const auto prompt = random_tokens(40, e->info().n_vocab, 9);
    const std::string tag = name + (graphs ? " graphs" : " eager");
    for (const TokenId exclude : {TokenId{-1}, TokenId{1}}) {
      const GreedyRun host = greedy_solo(*e, prompt, 24, exclude, GreedyPath::host);
      expect_same(host, greedy_solo(*e, prompt, 24, exclude, GreedyPath::device), tag + " solo x" + std::to_string(exclude));
      expect_same(host, greedy_solo(*e, prompt, 24, exclude, GreedyPath::pipelined),
                  tag + " pipelined x" + std::to_string(exclude));
    }
    // A stop after 7 tokens rolls back the step the device ran ahead.
    expect_same(greedy_solo(*e, prompt, 24, -1, GreedyPath::host, 7), greedy_solo(*e, prompt, 24, -1, GreedyPath::pipelined, 7),
                tag + " pipelined stop");
    expect_same(greedy_mixed_batch(*e, 16, false), greedy_mixed_batch(*e, 16, true), tag + " mixed batch");
    // Deferred logits after a later step: the last token evaluated again (the cheap rewind path).
    expect_same(greedy_recompute(*e, prompt, 11, 6, false), greedy_recompute(*e, prompt, 11, 6, true),
                tag + " recomputed");
    if (graphs) {  // the logits path against itself, both runs replaying
      const GreedyRun again = greedy_solo(*e, prompt, 24, -1, GreedyPath::host);
      expect_same(again, greedy_solo(*e, prompt, 24, -1, GreedyPath::host), tag + " host twice (replayed)");
    }
    if (graphs) EXPECT_GT(engine_graph_stats(*e).replayed, 0u);
  }
}

}  // namespace

TEST(CudaGreedy, TinyDeviceArgmaxEqualsHostArgmax) { greedy_paths_equal(model_data_path("tiny-seed1.gguf", DS4_TINY_GGUF)); }
TEST(CudaGreedy, TinyQuantDeviceArgmaxEqualsHostArgmax) { greedy_paths_equal(model_data_path("tiny-quant-seed1.gguf", DS4_TINY_QUANT_GGUF)); }
