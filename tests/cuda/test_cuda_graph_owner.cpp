// test_cuda_graph_owner.cpp — step graphs go with the Forward that recorded them: two Forwards made one
// after the other on one CUDA backend (as cuda_bench's variant loops do), the second possibly at the first's
// freed scratch addresses. The first records and replays its decode steps; when it is destroyed its graphs
// are dropped (none kept); the second records its own (never replays the first's, which point at freed
// scratch) and gives the first's logits bit for bit.
// Not here: the key layout itself (tests/model/test_graph_owner.cpp, CPU).
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <span>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "gguf/gguf.h"
#include "model/forward.h"
#include "model/weights.h"
#include "model_data_path.h"
#include "model_fixture.h"
#include "modelspec/config.h"
#include "modelspec/layer_plan.h"

using namespace ds4;
using namespace ds4::backend;

namespace {

// A prompt chunk then 8 decode tokens of one session on a fresh Forward over `be`; the logits of every step.
std::vector<float> run_forward(const modelspec::ModelConfig& cfg, const model::ModelWeights& w, Backend& be) {
  model::ForwardOptions fo;
  fo.max_chunk = 32;
  fo.graphs = true;
  auto fw = model::Forward::create(be, cfg, w, fo);
  EXPECT_TRUE(fw.ok()) << fw.status().to_string();
  if (!fw.ok()) return {};
  auto kv = (*fw)->new_state(256);
  EXPECT_TRUE(kv.ok()) << kv.status().to_string();
  if (!kv.ok()) return {};
  const auto toks = ds4::test::random_tokens(32, static_cast<int>(cfg.n_vocab), 5);
  std::vector<float> all;
  int64_t pos = 0;
  for (const int64_t n : {20, 1, 1, 1, 1, 1, 1, 1, 1}) {
    std::vector<float> logits(cfg.n_vocab);
    model::Segment sg;
    sg.kv = &*kv;
    sg.tokens = std::span<const TokenId>(toks.data() + pos, static_cast<size_t>(n));
    sg.pos0 = pos;
    sg.logits_out = logits.data();
    const Status st = (*fw)->eval_batch(std::span<const model::Segment>(&sg, 1));
    EXPECT_TRUE(st.ok()) << st.to_string();
    if (!st.ok()) return {};
    all.insert(all.end(), logits.begin(), logits.end());
    pos += n;
  }
  return all;
}

}  // namespace

TEST(CudaGraphOwner, SecondForwardOnOneBackendRecordsItsOwnGraphs) {
  if (cuda::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const std::string path = ds4::test::model_data_path("tiny-seed1.gguf", DS4_TINY_GGUF);
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "missing " << path;
  auto f = gguf::File::open(path);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  auto cfg = modelspec::config_from_gguf(**f);
  ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
  auto made = cuda::make_cuda_backend();
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  auto be = std::move(made).value();
  auto w = model::bind_weights(**f, *cfg, modelspec::layer_plan(*cfg), *be);
  ASSERT_TRUE(w.ok()) << w.status().to_string();

  const auto first = run_forward(*cfg, *w, *be);
  const cuda::GraphStats a = cuda::graph_stats(*be);
  EXPECT_GT(a.recorded, 0u);
  EXPECT_GT(a.replayed, 0u);
  EXPECT_EQ(a.kept, 0u) << "the destroyed Forward's graphs are still held";

  const auto second = run_forward(*cfg, *w, *be);
  const cuda::GraphStats b = cuda::graph_stats(*be);
  EXPECT_EQ(b.recorded, 2 * a.recorded) << "the second Forward replayed graphs it did not record";
  EXPECT_EQ(b.replayed, 2 * a.replayed);
  EXPECT_EQ(b.kept, 0u);
  ASSERT_EQ(first.size(), second.size());
  EXPECT_TRUE(first == second) << "the second Forward's logits differ from the first's";
  std::printf("GRAPHOWNER recorded %llu + %llu, replayed %llu + %llu, kept after each Forward %llu / %llu\n",
              static_cast<unsigned long long>(a.recorded), static_cast<unsigned long long>(b.recorded - a.recorded),
              static_cast<unsigned long long>(a.replayed), static_cast<unsigned long long>(b.replayed - a.replayed),
              static_cast<unsigned long long>(a.kept), static_cast<unsigned long long>(b.kept));
}
