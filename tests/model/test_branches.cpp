// test_branches.cpp — the forward pass's concurrent branches (Backend::fork / resume_main / join) are
// race-free at the level of the memory the forward pass hands to its ops: run on a backend that delays
// every side-lane op to the join (the latest moment a second stream may run it; the CPU backend and an
// in-order stream run it at once, the earliest), every logit is the same bits as the in-order run. A
// side-lane op reading a buffer the main lane writes after the fork, or a main-lane op reading the side
// lane's output before the join, or both lanes writing one buffer, changes the numbers or the order and
// shows here. Covers a prefill chunk, decode tokens across compressor emissions and the indexer's top-k
// threshold, the tables path of recorded steps (ForwardOptions::graphs), and batched steps of several
// sessions mixing prefill chunks with decode tokens, in both numerics and with quantized weights.
// Not here: the CUDA backend's own per-lane scratch (tests/cuda/test_cuda_branches.cpp, on the device).
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
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

// The CPU backend with a side lane that runs late: ops issued between fork() and resume_main() / join()
// are queued and run, in their order, at join(). Transfers and sync() while side work is pending are
// counted as misuse (the interface has the caller join first). Memory stays the inner backend's.
class LateSideLane final : public ForwardingBackend {
 public:
  explicit LateSideLane(Backend& in) : ForwardingBackend(in) {}
  uint64_t forks = 0, joins = 0, side_ops = 0, misuse = 0;

  const char* name() const override { return "cpu+late-side-lane"; }
  void upload(void* d, const void* s, uint64_t b) override {
    check_joined();
    in_.upload(d, s, b);
  }
  void download(void* d, const void* s, uint64_t b) override {
    check_joined();
    in_.download(d, s, b);
  }
  Status sync() override {
    check_joined();
    return in_.sync();
  }
  GraphMode graph_begin(std::span<const int64_t> key) override {
    check_joined();
    return in_.graph_begin(key);
  }
  bool graph_end() override {
    check_joined();
    return in_.graph_end();
  }

  void fork() override {
    if (!on_side_) ++forks;
    on_side_ = true;
  }
  void resume_main() override { on_side_ = false; }
  void join() override {
    on_side_ = false;
    if (queue_.empty()) return;
    ++joins;
    for (auto& op : queue_) op();
    queue_.clear();
  }

  void copy(void* d, const void* s, uint64_t b) override {
    run([=, this] { in_.copy(d, s, b); });
  }
  void fill_f32(float* d, float v, int64_t n) override {
    run([=, this] { in_.fill_f32(d, v, n); });
  }
  void matmul(const MatmulArgs& a) override {
    run([=, this] { in_.matmul(a); });
  }
  void matmul_many(std::span<const MatmulArgs> jobs) override {
    run([j = std::vector<MatmulArgs>(jobs.begin(), jobs.end()), this] { in_.matmul_many(j); });
  }
  void rms_norm(const RmsNormArgs& a) override {
    run([=, this] { in_.rms_norm(a); });
  }
  void rope(const RopeArgs& a) override {
    run([=, this] { in_.rope(a); });
  }
  void embed(const EmbedArgs& a) override {
    run([=, this] { in_.embed(a); });
  }
  void hc_split(const HcSplitArgs& a) override {
    run([=, this] { in_.hc_split(a); });
  }
  void hc_head(const HcHeadArgs& a) override {
    run([=, this] { in_.hc_head(a); });
  }
  void hc_collapse(const HcCollapseArgs& a) override {
    run([=, this] { in_.hc_collapse(a); });
  }
  void hc_post(const HcPostArgs& a) override {
    run([=, this] { in_.hc_post(a); });
  }
  void hc_pre(const HcPreArgs& a) override {
    run([=, this] { in_.hc_pre(a); });
  }
  void norm_rope(const NormRopeArgs& a) override {
    run([=, this] { in_.norm_rope(a); });
  }
  void fp8_round(const Fp8RoundArgs& a) override {
    run([=, this] { in_.fp8_round(a); });
  }
  void indexer_qat(const IndexerQatArgs& a) override {
    run([=, this] { in_.indexer_qat(a); });
  }
  void f16_round(float* x, int64_t n) override {
    run([=, this] { in_.f16_round(x, n); });
  }
  void add(float* y, const float* x, int64_t n) override {
    run([=, this] { in_.add(y, x, n); });
  }
  void scale(float* y, float s, int64_t n) override {
    run([=, this] { in_.scale(y, s, n); });
  }
  void compressor(const CompressorArgs& a) override {
    // n_out is host memory the caller reads at once (the one-session path): a function of the positions
    // (rows whose block ends inside the call), answered now as the CUDA backend does; the op runs late.
    if (on_side_ && a.n_out != nullptr) {
      *a.n_out = (a.pos0 + a.n) / a.ratio - a.pos0 / a.ratio;
      CompressorArgs later = a;
      later.n_out = &late_n_out_;
      run([later, this] { in_.compressor(later); });
      return;
    }
    run([=, this] { in_.compressor(a); });
  }
  void attention(const AttentionArgs& a) override {
    run([=, this] { in_.attention(a); });
  }
  void indexer(const IndexerArgs& a) override {
    run([=, this] { in_.indexer(a); });
  }
  void router(const RouterArgs& a) override {
    run([=, this] { in_.router(a); });
  }
  void moe(const MoeArgs& a) override {
    run([=, this] { in_.moe(a); });
  }
  void swiglu(const SwigluArgs& a) override {
    run([=, this] { in_.swiglu(a); });
  }
  void argmax(const ArgmaxArgs& a) override {
    run([=, this] { in_.argmax(a); });
  }

 private:
  void run(std::function<void()> op) {
    if (!on_side_) {
      op();
      return;
    }
    ++side_ops;
    queue_.push_back(std::move(op));
  }
  void check_joined() {
    if (on_side_ || !queue_.empty()) ++misuse;
  }

  bool on_side_ = false;
  int64_t late_n_out_ = 0;
  std::vector<std::function<void()>> queue_;
};

struct Model {
  std::unique_ptr<gguf::File> file;
  modelspec::ModelConfig cfg;
};

Model load(const std::string& path) {
  Model m;
  auto f = gguf::File::open(path);
  EXPECT_TRUE(f.ok()) << path << ": " << f.status().to_string();
  if (!f.ok()) return m;
  m.file = std::move(f).value();
  auto c = modelspec::config_from_gguf(*m.file);
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  if (c.ok()) m.cfg = std::move(c).value();
  return m;
}

// One session's step: `tokens` of session `s` at its current length.
struct Item {
  int s;
  int n;
  bool all_logits;
};

// Runs the script (a list of steps) over `sessions` fresh sessions on backend `be`; returns every
// logit row the steps produced, in order.
std::vector<float> run_script(const Model& m, Backend& be, const model::ForwardOptions& fo, int sessions,
                              const std::vector<std::vector<Item>>& steps, const std::vector<TokenId>& toks) {
  const auto plan = modelspec::layer_plan(m.cfg);
  auto w = model::bind_weights(*m.file, m.cfg, plan, be);
  EXPECT_TRUE(w.ok()) << w.status().to_string();
  if (!w.ok()) return {};
  auto fw = model::Forward::create(be, m.cfg, *w, fo);
  EXPECT_TRUE(fw.ok()) << fw.status().to_string();
  if (!fw.ok()) return {};
  std::vector<model::KvState> kv;
  std::vector<int64_t> len(static_cast<size_t>(sessions), 0);
  for (int s = 0; s < sessions; ++s) {
    auto st = (*fw)->new_state(1024);
    EXPECT_TRUE(st.ok()) << st.status().to_string();
    if (!st.ok()) return {};
    kv.push_back(std::move(st).value());
  }
  const int64_t V = m.cfg.n_vocab;
  std::vector<float> out;
  size_t next_tok = 0;
  for (const auto& step : steps) {
    std::vector<model::Segment> segs;
    std::vector<std::vector<float>> logits;
    logits.reserve(step.size());
    for (const Item& it : step) {
      logits.emplace_back(static_cast<size_t>((it.all_logits ? it.n : 1) * V));
      model::Segment sg;
      sg.kv = &kv[static_cast<size_t>(it.s)];
      sg.tokens = std::span<const TokenId>(toks.data() + next_tok % (toks.size() - 64), static_cast<size_t>(it.n));
      next_tok += static_cast<size_t>(it.n);
      sg.pos0 = len[static_cast<size_t>(it.s)];
      sg.logits_out = logits.back().data();
      sg.all_logits = it.all_logits;
      len[static_cast<size_t>(it.s)] += it.n;
      segs.push_back(sg);
    }
    const Status st = (*fw)->eval_batch(segs);
    EXPECT_TRUE(st.ok()) << st.to_string();
    if (!st.ok()) return {};
    for (const auto& l : logits) out.insert(out.end(), l.begin(), l.end());
  }
  return out;
}

void expect_late_side_lane_same_bits(const std::string& path, Numerics nm, bool graphs, int sessions,
                                     const std::vector<std::vector<Item>>& steps, const char* what,
                                     uint32_t extra_branches = 0) {
  const Model m = load(path);
  ASSERT_TRUE(m.file);
  model::ForwardOptions fo;
  fo.max_chunk = 64;
  fo.branches |= extra_branches;
  fo.numerics = nm == Numerics::reference ? model::ForwardNumerics::reference() : model::ForwardNumerics::official();
  fo.graphs = graphs;
  const auto toks = test::random_tokens(400, static_cast<int>(m.cfg.n_vocab), 77);
  auto cpu = cpu::make_cpu_backend({2});
  const auto want = run_script(m, *cpu, fo, sessions, steps, toks);
  auto cpu2 = cpu::make_cpu_backend({2});
  LateSideLane late(*cpu2);
  const auto got = run_script(m, late, fo, sessions, steps, toks);
  ASSERT_FALSE(want.empty());
  ASSERT_EQ(want.size(), got.size());
  EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0) << what;
  // The forward really branches: a side lane per sublayer, ops on it, nothing left unjoined.
  EXPECT_GE(late.forks, 2 * m.cfg.n_layer) << what;
  EXPECT_GT(late.side_ops, late.forks) << what;
  EXPECT_EQ(late.misuse, 0u) << what;
}

// One session: a prefill chunk, more chunks, then decode tokens across the tiny models' ratio-4 and
// ratio-16 emissions and the indexer's threshold (more than top_k = 16 ratio-4 rows from position 68).
std::vector<std::vector<Item>> one_session() {
  std::vector<std::vector<Item>> s = {{{0, 40, true}}, {{0, 13, false}}, {{0, 1, false}}, {{0, 7, true}}};
  for (int i = 0; i < 40; ++i) s.push_back({{0, 1, false}});
  return s;
}

// Three sessions: prefill chunks sharing steps with decode tokens, then batched decode past the threshold.
std::vector<std::vector<Item>> three_sessions() {
  std::vector<std::vector<Item>> s = {{{0, 50, false}},
                                      {{0, 1, false}, {1, 30, false}},
                                      {{0, 1, false}, {1, 1, false}, {2, 20, true}}};
  for (int i = 0; i < 30; ++i) s.push_back({{0, 1, false}, {1, 1, false}, {2, 1, false}});
  s.push_back({{2, 9, true}, {0, 1, false}});
  return s;
}

}  // namespace

TEST(Branches, OneSessionLateSideLaneSameBitsOfficial) {
  expect_late_side_lane_same_bits(DS4_TINY_GGUF, Numerics::official, false, 1, one_session(), "tiny official");
}
TEST(Branches, OneSessionLateSideLaneSameBitsReference) {
  expect_late_side_lane_same_bits(DS4_TINY_GGUF, Numerics::reference, false, 1, one_session(), "tiny reference");
}
TEST(Branches, OneSessionTablesLateSideLaneSameBits) {
  expect_late_side_lane_same_bits(DS4_TINY_GGUF, Numerics::official, true, 1, one_session(), "tiny graphs tables");
}
TEST(Branches, BatchedLateSideLaneSameBits) {
  expect_late_side_lane_same_bits(DS4_TINY_GGUF, Numerics::official, true, 3, three_sessions(), "tiny batched");
}
TEST(Branches, QuantizedBatchedLateSideLaneSameBits) {
  expect_late_side_lane_same_bits(DS4_TINY_QUANT_GGUF, Numerics::official, false, 3, three_sessions(),
                                  "tiny-quant batched");
}
// kBranchHcSplit (off by default): every HC pre's split on the side lane, joined before the HC post — the
// same bits late as in order, and as without it (the split inside the HC pre).
TEST(Branches, HcSplitOnTheSideLaneSameBits) {
  expect_late_side_lane_same_bits(DS4_TINY_GGUF, Numerics::official, true, 3, three_sessions(), "tiny hc split late",
                                  model::kBranchHcSplit);
  const Model m = load(DS4_TINY_GGUF);
  ASSERT_TRUE(m.file);
  const auto toks = test::random_tokens(400, static_cast<int>(m.cfg.n_vocab), 77);
  model::ForwardOptions fo;
  fo.max_chunk = 64;
  auto cpu = cpu::make_cpu_backend({2});
  const auto without = run_script(m, *cpu, fo, 1, one_session(), toks);
  fo.branches |= model::kBranchHcSplit;
  auto cpu2 = cpu::make_cpu_backend({2});
  const auto with = run_script(m, *cpu2, fo, 1, one_session(), toks);
  ASSERT_FALSE(without.empty());
  ASSERT_EQ(without.size(), with.size());
  EXPECT_EQ(std::memcmp(without.data(), with.data(), without.size() * sizeof(float)), 0);
}
