// test_graph_owner.cpp — the forward pass's host side of step graphs, on the CPU backend (which records
// nothing) behind wrappers of the graph calls:
// - keys name their Forward: every key a Forward hands to Backend::graph_begin starts with the id it took from
//   Backend::graph_owner, two Forwards made one after the other on one backend (the second possibly at the
//   first's freed scratch addresses) never share an id, and a Forward releases its id (Backend::graph_release:
//   the CUDA backend drops that owner's graphs) when it goes — else a bench making several Forwards on one
//   backend could replay a freed Forward's graph;
// - a replayed step (its ops not enqueued again) leaves the host's session state as the eager step does: each
//   layer's count of compressed rows, which snapshots, trim() and restore read.
// Not here: the CUDA cache dropping the graphs (tests/cuda/test_cuda_graph_owner.cpp, on the device).
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <span>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/forwarding_backend.h"
#include "gguf/gguf.h"
#include "model/forward.h"
#include "model/weights.h"
#include "model_fixture.h"
#include "modelspec/config.h"
#include "modelspec/layer_plan.h"

using namespace ds4;
using namespace ds4::backend;

namespace {

// Logs every key graph_begin sees and every graph_release; answers eager (the CPU backend records nothing).
class GraphLog final : public ForwardingBackend {
 public:
  explicit GraphLog(Backend& in) : ForwardingBackend(in) {}
  std::vector<std::vector<int64_t>> keys;
  std::vector<int64_t> released;
  GraphMode graph_begin(std::span<const int64_t> key) override {
    keys.emplace_back(key.begin(), key.end());
    return in_.graph_begin(key);
  }
  void graph_release(int64_t owner) override {
    released.push_back(owner);
    in_.graph_release(owner);
  }
};

// Answers `replayed` for every key after its first sight, without running anything: the ops of such a step
// are skipped, as on a backend replaying a recorded graph (the device state then is not the point).
class PretendReplay final : public ForwardingBackend {
 public:
  explicit PretendReplay(Backend& in) : ForwardingBackend(in) {}
  int replayed = 0;
  GraphMode graph_begin(std::span<const int64_t> key) override {
    for (const auto& k : seen_)
      if (k.size() == key.size() && std::equal(k.begin(), k.end(), key.begin())) {
        ++replayed;
        return GraphMode::replayed;
      }
    seen_.emplace_back(key.begin(), key.end());
    return GraphMode::eager;
  }

 private:
  std::vector<std::vector<int64_t>> seen_;
};

// A prompt chunk then `decode` decode tokens of one session on a fresh Forward over `be`; each layer's
// compressed row count after every step (when `counts`).
void run_forward(const gguf::File& file, const modelspec::ModelConfig& cfg, Backend& be, bool graphs,
                 int decode = 3, std::vector<std::vector<int64_t>>* counts = nullptr) {
  auto w = model::bind_weights(file, cfg, modelspec::layer_plan(cfg), be);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  model::ForwardOptions fo;
  fo.max_chunk = 32;
  fo.graphs = graphs;
  auto fw = model::Forward::create(be, cfg, *w, fo);
  ASSERT_TRUE(fw.ok()) << fw.status().to_string();
  auto kv = (*fw)->new_state(256);
  ASSERT_TRUE(kv.ok()) << kv.status().to_string();
  const auto toks = ds4::test::random_tokens(20 + decode, static_cast<int>(cfg.n_vocab), 3);
  std::vector<float> logits(cfg.n_vocab);
  std::vector<int64_t> steps{20};
  steps.insert(steps.end(), static_cast<size_t>(decode), 1);
  int64_t pos = 0;
  for (const int64_t n : steps) {
    model::Segment sg;
    sg.kv = &*kv;
    sg.tokens = std::span<const TokenId>(toks.data() + pos, static_cast<size_t>(n));
    sg.pos0 = pos;
    sg.logits_out = logits.data();
    ASSERT_TRUE((*fw)->eval_batch(std::span<const model::Segment>(&sg, 1)).ok());
    pos += n;
    if (!counts) continue;
    counts->emplace_back();
    for (const auto& k : kv->layers()) counts->back().push_back(k.n_comp);
  }
}

}  // namespace

TEST(GraphOwner, KeysStartWithTheForwardsIdAndItIsReleasedWithIt) {
  auto f = gguf::File::open(DS4_TINY_GGUF);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  auto cfg = modelspec::config_from_gguf(**f);
  ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
  auto cpu = cpu::make_cpu_backend({1});
  GraphLog log(*cpu);

  run_forward(**f, *cfg, log, true);
  ASSERT_EQ(log.keys.size(), 3u);  // the decode tokens; the one-session prompt chunk is not recordable
  ASSERT_EQ(log.released.size(), 1u);
  const int64_t first = log.released[0];
  EXPECT_NE(first, 0);
  for (const auto& k : log.keys) EXPECT_EQ(k.at(0), first);

  log.keys.clear();
  run_forward(**f, *cfg, log, true);  // the same model and shapes: the keys differ only in the owner
  ASSERT_EQ(log.keys.size(), 3u);
  ASSERT_EQ(log.released.size(), 2u);
  const int64_t second = log.released[1];
  EXPECT_NE(second, first);
  for (const auto& k : log.keys) EXPECT_EQ(k.at(0), second);

  log.keys.clear();
  run_forward(**f, *cfg, log, false);  // graphs off: no keys, nothing to release
  EXPECT_TRUE(log.keys.empty());
  EXPECT_EQ(log.released.size(), 2u);
}

TEST(GraphOwner, ReplayedStepsAdvanceTheCompressedRowCounts) {
  auto f = gguf::File::open(DS4_TINY_GGUF);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  auto cfg = modelspec::config_from_gguf(**f);
  ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
  auto cpu = cpu::make_cpu_backend({1});
  // 40 decode tokens from position 20: every ratio-4 and the ratio-16 emissions, each step's key seen before
  // from its second occurrence on (the row bounds change rarely at these sizes).
  std::vector<std::vector<int64_t>> eager, replayed;
  run_forward(**f, *cfg, *cpu, true, 40, &eager);
  PretendReplay pretend(*cpu);
  run_forward(**f, *cfg, pretend, true, 40, &replayed);
  EXPECT_GT(pretend.replayed, 20);
  ASSERT_EQ(eager.size(), replayed.size());
  for (size_t i = 0; i < eager.size(); ++i) EXPECT_EQ(eager[i], replayed[i]) << "after step " << i;
  const auto& plan = modelspec::layer_plan(*cfg);
  for (size_t l = 0; l < plan.size(); ++l)  // 60 tokens in the end
    if (plan[l].has_compressor) EXPECT_EQ(eager.back()[l], 60 / plan[l].compress_ratio) << "layer " << l;
}
