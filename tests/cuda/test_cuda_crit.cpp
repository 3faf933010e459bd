// test_cuda_crit.cpp — crit_backend.h's what-if wrapper (cuda_bench --crit), checked where it can be without a GPU:
// on the CPU backend with the tiny model. With nothing removed the wrapper must be invisible (prefill and decode
// logits bit for bit with the plain backend); a decode step's calls must land in the stages the bench names, with
// the counts forward.cpp issues per layer (so a stage removed on the GPU is what its name says); and removing
// any one stage must change the step (its calls really are dropped). Runs in CI (no device needed).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "crit_backend.h"
#include "gguf/gguf.h"
#include "model/forward.h"
#include "model/weights.h"
#include "model_data_path.h"
#include "modelspec/config.h"
#include "modelspec/layer_plan.h"

using namespace ds4;
using namespace ds4::test;

namespace {

struct Tiny {
  std::unique_ptr<gguf::File> file;
  modelspec::ModelConfig cfg;
  std::vector<modelspec::LayerPlan> plan;
  std::unique_ptr<backend::Backend> be;
  model::ModelWeights w;
};

// The forward pass as the CUDA engine runs it (graphs, branches with the HC split on the side lane); the CPU
// backend answers "eager" and runs the lanes in order.
std::unique_ptr<model::Forward> forward_on(backend::Backend& be, const Tiny& t) {
  model::ForwardOptions fo;
  fo.max_chunk = 64;
  fo.graphs = true;
  fo.branches |= model::kBranchHcSplit;
  auto fw = model::Forward::create(be, t.cfg, t.w, fo);
  EXPECT_TRUE(fw.ok()) << fw.status().to_string();
  return fw.ok() ? std::move(fw).value() : nullptr;
}

int32_t step_token(int64_t i, int64_t V) { return static_cast<int32_t>((i * 104729 + 7) % V); }

// Prefill of `prompt` tokens, then `steps` decode tokens; the logits of the prefill's last row and of each step.
std::vector<std::vector<float>> run(model::Forward& fw, model::KvState& kv, int64_t prompt, int steps) {
  const int64_t V = fw.config().n_vocab;
  std::vector<std::vector<float>> out;
  std::vector<int32_t> toks(static_cast<size_t>(prompt));
  for (size_t k = 0; k < toks.size(); ++k) toks[k] = static_cast<int32_t>((k * 7919 + 13) % static_cast<size_t>(V));
  std::vector<float> logits(static_cast<size_t>(V));
  for (int64_t p = 0; p < prompt; p += fw.max_chunk()) {
    const int64_t n = std::min(fw.max_chunk(), prompt - p);
    EXPECT_TRUE(fw.eval(kv, std::span<const int32_t>(toks.data() + p, static_cast<size_t>(n)), p, logits.data(), false).ok());
  }
  out.push_back(logits);
  for (int s = 0; s < steps; ++s) {
    const int32_t t = step_token(s, V);
    EXPECT_TRUE(fw.eval(kv, std::span<const int32_t>(&t, 1), prompt + s, logits.data(), false).ok());
    out.push_back(logits);
  }
  return out;
}

// Counts the forks that reach the backend under CritBackend (the CPU runs branches in order, so a branch shows
// only as its fork call).
class ForkCounter final : public backend::ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  void fork() override {
    ++forks;
    in_.fork();
  }
  void prefetch(std::span<const backend::Weight>) override {}
  void compressor_many(std::span<const backend::CompressorArgs> jobs) override { in_.compressor_many(jobs); }
  void compressors_and_qat(std::span<const backend::CompressorArgs> jobs, const backend::IndexerQatArgs& q) override {
    in_.compressors_and_qat(jobs, q);
  }
  int64_t forks = 0;
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class CudaCrit : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string path = model_data_path("tiny-seed1.gguf", DS4_TINY_GGUF);
    if (!std::filesystem::exists(path)) GTEST_SKIP() << "missing " << path;
    auto f = gguf::File::open(path);
    ASSERT_TRUE(f.ok()) << f.status().to_string();
    t_.file = std::move(f).value();
    auto cfg = modelspec::config_from_gguf(*t_.file);
    ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
    t_.cfg = *cfg;
    t_.plan = modelspec::layer_plan(t_.cfg);
    t_.be = backend::cpu::make_cpu_backend({2});
    auto w = model::bind_weights(*t_.file, t_.cfg, t_.plan, *t_.be);
    ASSERT_TRUE(w.ok()) << w.status().to_string();
    t_.w = std::move(w).value();
  }
  // A Forward over `be` with one session after kPrompt tokens and `steps` decode steps.
  struct Run {
    std::unique_ptr<model::Forward> fw;
    model::KvState kv;
  };
  Run prefilled(backend::Backend& be, int steps);
  Tiny t_;
};

// 80 tokens: past the tiny model's indexer top-k (16 rows of ratio 4), so the CSA layers select.
constexpr int64_t kPrompt = 80;

CudaCrit::Run CudaCrit::prefilled(backend::Backend& be, int steps) {
  Run r;
  r.fw = forward_on(be, t_);
  if (!r.fw) return r;
  auto kv = r.fw->new_state(256);
  EXPECT_TRUE(kv.ok());
  if (!kv.ok()) return Run{};
  r.kv = std::move(kv).value();
  (void)run(*r.fw, r.kv, kPrompt, steps);
  return r;
}

TEST_F(CudaCrit, NothingRemovedIsInvisible) {
  CritBackend crit(*t_.be, t_.w);
  auto plain = forward_on(*t_.be, t_);
  auto wrapped = forward_on(crit, t_);
  ASSERT_TRUE(plain && wrapped);
  auto kv1 = plain->new_state(256);
  auto kv2 = wrapped->new_state(256);
  ASSERT_TRUE(kv1.ok() && kv2.ok());
  const auto want = run(*plain, *kv1, kPrompt, 6);
  const auto got = run(*wrapped, *kv2, kPrompt, 6);
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(same_bits(want[i], got[i])) << "row " << i;
}

TEST_F(CudaCrit, DecodeStepCallsLandInTheirStages) {
  CritBackend crit(*t_.be, t_.w);
  auto [fw, kv] = prefilled(crit, 3);
  ASSERT_TRUE(fw);
  crit.set_counting(true);
  const int32_t tok = 5;
  std::vector<float> logits(static_cast<size_t>(t_.cfg.n_vocab));
  ASSERT_TRUE(fw->eval(kv, std::span<const int32_t>(&tok, 1), kPrompt + 3, logits.data(), false).ok());
  const auto& c = crit.counts();
  const int64_t L = static_cast<int64_t>(t_.plan.size());
  int64_t csa = 0, comp_layers = 0;
  for (const auto& p : t_.plan) {
    csa += p.has_indexer ? 1 : 0;
    comp_layers += p.has_compressor ? 1 : 0;
  }
  auto n = [&](CritStage s) { return c[static_cast<size_t>(s)]; };
  std::string tally;
  for (int s = 0; s < kCritStages; ++s)
    tally += std::string(" ") + crit_stage_name(static_cast<CritStage>(s)) + " " + std::to_string(c[static_cast<size_t>(s)]);
  std::printf("CRIT tiny decode step (%lld layers, %lld with a compressor, %lld CSA):%s\n", static_cast<long long>(L),
              static_cast<long long>(comp_layers), static_cast<long long>(csa), tally.c_str());
  EXPECT_EQ(n(CritStage::shared), 3 * L);    // matmul_many(gate, up), swiglu, matmul(down)
  EXPECT_EQ(n(CritStage::experts), L);       // moe
  EXPECT_EQ(n(CritStage::router), 2 * L);    // matmul(router), router
  EXPECT_EQ(n(CritStage::hcsplit), 2 * L);   // one a sublayer
  EXPECT_EQ(n(CritStage::kv), 2 * L);        // matmul(kv), norm_rope
  EXPECT_EQ(n(CritStage::q), 4 * L);         // matmul(q_a), rms_norm, matmul(q_b), norm_rope
  EXPECT_EQ(n(CritStage::attn), L);
  EXPECT_EQ(n(CritStage::out), 2 * L);       // out_a (grouped), out_b
  EXPECT_EQ(n(CritStage::boundary), 2 * L + 1);  // every sublayer hc_pre, the last layer's post (in the head's)
  EXPECT_EQ(n(CritStage::hcpost), 2 * L);        // the posts folded into hc_pres after the first, the last one
  EXPECT_EQ(n(CritStage::head), 2);          // the head-form hc_pre (its HC), matmul(output)
  EXPECT_EQ(n(CritStage::indexer), csa);     // the step selects (80 tokens: 20 rows of ratio 4 > top-k 16)
  EXPECT_GE(n(CritStage::comp), 2 * comp_layers);  // projections + compressors (+ emitted rows' finishing)
  EXPECT_EQ(n(CritStage::other), 1);         // embed
}

TEST_F(CudaCrit, EachRemovedStageChangesTheStep) {
  CritBackend crit(*t_.be, t_.w);
  auto [fw, kv] = prefilled(crit, 4);  // steps at kPrompt … kPrompt + 3 (one emits a ratio-4 row)
  ASSERT_TRUE(fw);
  const int64_t V = t_.cfg.n_vocab;
  // Steps at the same positions again, the last with a token the first pass did not use there (so the KV row it
  // writes is new) as the reference, then with each stage removed. The frontier rings make a repeated step's
  // values depend on what ran before, so every run follows the same steps.
  auto step_at = [&](uint32_t removed) {
    crit.set_removed(0);
    std::vector<float> logits(static_cast<size_t>(V));
    for (int s = 0; s < 3; ++s) {
      const int32_t tok = step_token(s, V);
      EXPECT_TRUE(fw->eval(kv, std::span<const int32_t>(&tok, 1), kPrompt + s, logits.data(), false).ok());
    }
    crit.set_removed(removed);
    const int32_t tok = step_token(100, V);
    EXPECT_TRUE(fw->eval(kv, std::span<const int32_t>(&tok, 1), kPrompt + 3, logits.data(), false).ok());
    crit.set_removed(0);
    return logits;
  };
  const auto full = step_at(0);
  EXPECT_TRUE(same_bits(full, step_at(0))) << "a repeated step must give the same bits";
  for (int s = 1; s < kCritStages; ++s) {
    const auto st = static_cast<CritStage>(s);
    // The CPU's hc_pre writes post and comb even when asked not to (HcPreArgs::split = false allows it): its
    // split is the same values again. The CUDA pre leaves them to the side lane's hc_split.
    if (st == CritStage::hcsplit) continue;
    EXPECT_FALSE(same_bits(full, step_at(crit_bit(st)))) << crit_stage_name(st) << " removed left the logits alone";
  }
}

// A branch whose calls are all dropped is not made: the fork reaches the backend only before a kept call.
TEST_F(CudaCrit, EmptyBranchesAreNotMade) {
  ForkCounter counter(*t_.be);
  CritBackend crit(counter, t_.w);
  auto [fw, kv] = prefilled(crit, 3);
  ASSERT_TRUE(fw);
  const int64_t L = static_cast<int64_t>(t_.plan.size());
  std::vector<float> logits(static_cast<size_t>(t_.cfg.n_vocab));
  auto forks_with = [&](uint32_t removed) {
    crit.set_removed(removed);
    counter.forks = 0;
    const int32_t tok = 5;
    EXPECT_TRUE(fw->eval(kv, std::span<const int32_t>(&tok, 1), kPrompt + 3, logits.data(), false).ok());
    crit.set_removed(0);
    return counter.forks;
  };
  const int64_t all = forks_with(0);
  // Each sublayer's HC split has a branch of its own in the attention sublayer; the FFN's shares the shared expert's.
  EXPECT_EQ(forks_with(crit_bit(CritStage::hcsplit)), all - L);
  EXPECT_EQ(forks_with(crit_bit(CritStage::shared)), all);
  EXPECT_EQ(forks_with(crit_bit(CritStage::shared) | crit_bit(CritStage::hcsplit)), all - 2 * L);
  EXPECT_EQ(forks_with(crit_bit(CritStage::experts)), all);  // a main-lane stage leaves the branches alone
}

}  // namespace
