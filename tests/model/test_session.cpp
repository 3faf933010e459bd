// test_session.cpp — whole-model self-consistency on the tiny-6 model (MODEL.md §9.2, §10):
// one-shot prefill ≡ chunked prefill ≡ token-by-token decode at every position, in both numerics;
// snapshot/restore and rewind reproduce the timeline; bad input gives errors, never crashes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "model_fixture.h"

using namespace ds4;
using namespace ds4::test;

namespace {

constexpr int kLen = 300;  // > window 16, > 4·top_k (indexer selects from position 67), 18 HCA rows

class TinySession : public ::testing::TestWithParam<Numerics> {
 protected:
  void SetUp() override {
    engine_ = open_engine({DS4_TINY_GGUF, GetParam(), 512});
    ASSERT_TRUE(engine_);
    V_ = engine_->info().n_vocab;
    tokens_ = random_tokens(kLen, V_, 7);
  }
  std::unique_ptr<Engine> engine_;
  int V_ = 0;
  std::vector<TokenId> tokens_;
};

const char* name(Numerics n) { return n == Numerics::official ? "official" : "reference"; }

}  // namespace

TEST_P(TinySession, PrefillChunkedAndDecodeAgreeAtEveryPosition) {
  const auto one_shot = logits_chunked(*engine_, tokens_, {kLen});
  bool finite = true;
  for (float v : one_shot) finite &= std::isfinite(v);
  ASSERT_TRUE(finite);
  const std::vector<std::vector<int>> patterns = {{37}, {64}, {1, 2, 3, 5, 7, 11, 13, 17, 19, 23}, {4}, {16}, {127}};
  for (const auto& p : patterns) {
    const Diff d = compare(logits_chunked(*engine_, tokens_, p), one_shot, V_);
    std::printf("[%s] chunks %d…: max|Δ| = %.3g (max|logit| %.3g)\n", name(GetParam()), p[0], d.max_abs, d.max_ref);
    EXPECT_LE(d.max_abs, 1e-6 * d.max_ref) << "chunk pattern starting " << p[0];
    EXPECT_EQ(d.argmax_mismatch, 0);
  }
  const Diff d = compare(logits_decode(*engine_, tokens_), one_shot, V_);
  std::printf("[%s] token-by-token: max|Δ| = %.3g\n", name(GetParam()), d.max_abs);
  EXPECT_LE(d.max_abs, 1e-6 * d.max_ref);
  EXPECT_EQ(d.argmax_mismatch, 0);
}

TEST_P(TinySession, PrefillThenDecodeMatchesPrefill) {
  const auto one_shot = logits_chunked(*engine_, tokens_, {kLen});
  auto s = engine_->new_session();
  ASSERT_TRUE(s.ok());
  std::vector<float> first;
  ASSERT_TRUE((*s)->eval_all(std::span<const TokenId>(tokens_).first(101), first).ok());
  for (int t = 101; t < kLen; ++t) {
    ASSERT_TRUE((*s)->eval(std::span<const TokenId>(&tokens_[t], 1)).ok());
    auto l = (*s)->logits();
    for (int v = 0; v < V_; ++v) ASSERT_NEAR(l[v], one_shot[size_t(t) * V_ + v], 1e-5) << "position " << t;
  }
  EXPECT_EQ((*s)->position(), kLen);
}

TEST_P(TinySession, SnapshotRestoreRoundTrip) {
  auto a = engine_->new_session();
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE((*a)->eval(std::span<const TokenId>(tokens_).first(150)).ok());
  auto snap = (*a)->snapshot();
  ASSERT_TRUE(snap.ok());
  std::vector<float> rest_a, rest_b;
  ASSERT_TRUE((*a)->eval_all(std::span<const TokenId>(tokens_).subspan(150), rest_a).ok());

  // Into a fresh session, and back into the same one after it moved on.
  for (int round = 0; round < 2; ++round) {
    auto b = engine_->new_session();
    ASSERT_TRUE(b.ok());
    Session& target = round == 0 ? **b : **a;
    ASSERT_TRUE(target.restore(*snap).ok());
    EXPECT_EQ(target.position(), 150);
    EXPECT_EQ(std::vector<TokenId>(target.tokens().begin(), target.tokens().end()),
              std::vector<TokenId>(tokens_.begin(), tokens_.begin() + 150));
    ASSERT_TRUE(target.eval_all(std::span<const TokenId>(tokens_).subspan(150), rest_b).ok());
    EXPECT_EQ(rest_a, rest_b) << "round " << round;
  }
  // A second snapshot of an identical timeline is byte-identical.
  auto c = engine_->new_session();
  ASSERT_TRUE((*c)->restore(*snap).ok());
  auto snap2 = (*c)->snapshot();
  ASSERT_TRUE(snap2.ok());
  EXPECT_EQ(snap->bytes, snap2->bytes);
}

TEST_P(TinySession, RewindReproducesTimeline) {
  const auto one_shot = logits_chunked(*engine_, tokens_, {kLen});
  auto s = engine_->new_session();
  ASSERT_TRUE((*s)->eval(std::span<const TokenId>(tokens_).first(250)).ok());
  for (int keep : {199, 123, 4, 0}) {
    ASSERT_TRUE((*s)->rewind(keep).ok());
    EXPECT_EQ((*s)->position(), keep);
    if (keep > 0) {
      auto l = (*s)->logits();
      for (int v = 0; v < V_; ++v) ASSERT_EQ(l[v], one_shot[size_t(keep - 1) * V_ + v]);
    }
  }
  // Continue after a rewind with different tokens, then rewind back and go on with the original ones.
  std::vector<TokenId> other = random_tokens(40, V_, 99);
  ASSERT_TRUE((*s)->eval(std::span<const TokenId>(tokens_).first(60)).ok());
  ASSERT_TRUE((*s)->eval(other).ok());
  ASSERT_TRUE((*s)->rewind(60).ok());
  std::vector<float> rest;
  ASSERT_TRUE((*s)->eval_all(std::span<const TokenId>(tokens_).subspan(60), rest).ok());
  const Diff d = compare(rest, std::vector<float>(one_shot.begin() + 60 * V_, one_shot.end()), V_);
  EXPECT_EQ(d.max_abs, 0.0);
  EXPECT_FALSE((*s)->rewind(kLen + 1).ok());
  EXPECT_FALSE((*s)->rewind(-1).ok());
}

TEST_P(TinySession, ShortRewindsAcrossBlockBoundariesRestoreExactState) {
  // Rewinds of up to max_chunk − 1 tokens reuse the rings (raw window and compressor frontiers);
  // longer ones replay. Either way the state must be exactly that of a fresh timeline: same logits,
  // same canonical snapshot bytes, same continuation.
  const auto one_shot = logits_chunked(*engine_, tokens_, {kLen});
  auto s = engine_->new_session();
  ASSERT_TRUE((*s)->eval(std::span<const TokenId>(tokens_).first(200)).ok());
  for (int d : {1, 3, 4, 5, 16, 17, 63, 70}) {
    const int n = 200 - d;
    ASSERT_TRUE((*s)->rewind(n).ok()) << d;
    auto l = (*s)->logits();
    for (int v = 0; v < V_; ++v) ASSERT_EQ(l[v], one_shot[size_t(n - 1) * V_ + v]) << "rewind by " << d;
    auto fresh = engine_->new_session();
    ASSERT_TRUE((*fresh)->eval(std::span<const TokenId>(tokens_).first(n)).ok());
    auto a = (*s)->snapshot();
    auto b = (*fresh)->snapshot();
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(a->bytes, b->bytes) << "rewind by " << d;
    ASSERT_TRUE((*s)->eval(std::span<const TokenId>(tokens_).subspan(n, d)).ok());
    l = (*s)->logits();
    for (int v = 0; v < V_; ++v) ASSERT_EQ(l[v], one_shot[size_t(199) * V_ + v]) << "continue after " << d;
  }
}

TEST_P(TinySession, RewindAfterRestoreAboveAndBelowTheRestoredPosition) {
  // A restored session holds only the ring rows its snapshot carries: rewinding below the restored
  // position must still give exact results (replay), and above it may reuse the rings.
  const auto one_shot = logits_chunked(*engine_, tokens_, {kLen});
  auto a = engine_->new_session();
  ASSERT_TRUE((*a)->eval(std::span<const TokenId>(tokens_).first(150)).ok());
  auto snap = (*a)->snapshot();
  ASSERT_TRUE(snap.ok());
  for (int target : {145, 140, 170, 158}) {
    auto b = engine_->new_session();
    ASSERT_TRUE((*b)->restore(*snap).ok());
    ASSERT_TRUE((*b)->eval(std::span<const TokenId>(tokens_).subspan(150, 30)).ok());
    ASSERT_TRUE((*b)->rewind(target).ok());
    auto l = (*b)->logits();
    for (int v = 0; v < V_; ++v) ASSERT_EQ(l[v], one_shot[size_t(target - 1) * V_ + v]) << "rewind to " << target;
    ASSERT_TRUE((*b)->eval(std::span<const TokenId>(tokens_).subspan(target, 200 - target)).ok());
    l = (*b)->logits();
    for (int v = 0; v < V_; ++v) ASSERT_EQ(l[v], one_shot[size_t(199) * V_ + v]) << "continue from " << target;
  }
}

INSTANTIATE_TEST_SUITE_P(Numerics, TinySession, ::testing::Values(Numerics::official, Numerics::reference),
                         [](const auto& info) { return std::string(name(info.param)); });

TEST(TinyModel, InfoAndNumericsDiffer) {
  auto off = open_engine({DS4_TINY_GGUF, Numerics::official});
  auto ref = open_engine({DS4_TINY_GGUF, Numerics::reference});
  ASSERT_TRUE(off && ref);
  EXPECT_EQ(off->info().n_layer, 6);
  EXPECT_EQ(off->info().n_embd, 64);
  EXPECT_EQ(off->info().n_vocab, 512);
  const auto t = random_tokens(120, 512, 3);
  const Diff d = compare(logits_chunked(*off, t, {120}), logits_chunked(*ref, t, {120}), 512);
  std::printf("official vs reference numerics: max|Δ| = %.3g (max|logit| %.3g), argmax mismatches %d/120\n",
              d.max_abs, d.max_ref, d.argmax_mismatch);
  EXPECT_GT(d.max_abs, 0.0);               // the simulations change something
  EXPECT_LT(d.max_abs, 0.2 * d.max_ref);   // but they are small perturbations
}

TEST(TinyModel, ErrorsLeaveSessionUsable) {
  EngineOptions o;
  o.model_path = DS4_TINY_GGUF;
  o.max_context = 50;
  auto e = Engine::open(o);
  ASSERT_TRUE(e.ok());
  auto s = (*e)->new_session();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ((*s)->max_context(), 50);
  const auto t = random_tokens(60, 512, 5);
  Status st = (*s)->eval(t);
  EXPECT_EQ(st.code(), StatusCode::invalid_argument);
  EXPECT_EQ((*s)->position(), 0);
  ASSERT_TRUE((*s)->eval(std::span<const TokenId>(t).first(30)).ok());
  const std::vector<float> before((*s)->logits().begin(), (*s)->logits().end());
  const std::vector<TokenId> bad = {5, 512};
  EXPECT_EQ((*s)->eval(bad).code(), StatusCode::invalid_argument);
  const std::vector<TokenId> neg = {-3};
  EXPECT_EQ((*s)->eval(neg).code(), StatusCode::invalid_argument);
  EXPECT_EQ((*s)->position(), 30);
  EXPECT_EQ(std::vector<float>((*s)->logits().begin(), (*s)->logits().end()), before);
  EXPECT_EQ((*s)->eval(std::span<const TokenId>(t).first(25)).code(), StatusCode::invalid_argument);  // 55 > 50

  // Corrupt or foreign snapshots are rejected before the session changes.
  auto snap = (*s)->snapshot();
  ASSERT_TRUE(snap.ok());
  SessionSnapshot cut{std::vector<uint8_t>(snap->bytes.begin(), snap->bytes.end() - 7)};
  EXPECT_EQ((*s)->restore(cut).code(), StatusCode::invalid_data);
  SessionSnapshot junk{std::vector<uint8_t>(100, 0xab)};
  EXPECT_EQ((*s)->restore(junk).code(), StatusCode::invalid_data);
  SessionSnapshot empty;
  EXPECT_EQ((*s)->restore(empty).code(), StatusCode::invalid_data);
  SessionSnapshot extra = *snap;
  extra.bytes.push_back(0);
  EXPECT_EQ((*s)->restore(extra).code(), StatusCode::invalid_data);
  EXPECT_EQ((*s)->position(), 30);
  EXPECT_EQ(std::vector<float>((*s)->logits().begin(), (*s)->logits().end()), before);
  EXPECT_TRUE((*s)->restore(*snap).ok());
}

TEST(TinyModel, OpenRejectsMissingAndMalformedFiles) {
  EngineOptions o;
  o.model_path = "/nonexistent/model.gguf";
  EXPECT_FALSE(Engine::open(o).ok());
  const std::string junk = std::string(DS4_TEST_TMP) + "/junk.gguf";
  FILE* f = std::fopen(junk.c_str(), "wb");
  ASSERT_TRUE(f);
  std::fputs("GGUF this is not a model", f);
  std::fclose(f);
  o.model_path = junk;
  auto e = Engine::open(o);
  EXPECT_FALSE(e.ok());
  o.model_path = "";
  EXPECT_EQ(Engine::open(o).status().code(), StatusCode::invalid_argument);
}

TEST(TinyModel, MemoryCountedByCategory) {
  auto e = open_engine({DS4_TINY_GGUF, Numerics::official});
  ASSERT_TRUE(e);
  auto s = e->new_session();
  ASSERT_TRUE((*s)->eval(random_tokens(200, 512, 11)).ok());
  const SessionMemory m = (*s)->memory();
  EXPECT_EQ(m.tokens, 200);
  // Raw ring: 6 layers × (window 16 + max_chunk 64 − 1) rows × D 256 × 4 bytes.
  EXPECT_EQ(m.host[MemCategory::raw_kv], 6ull * (16 + 64 - 1) * 256 * 4);
  EXPECT_GE(m.host[MemCategory::compressed_kv_r4], 2ull * (200 / 4) * 256 * 4);
  EXPECT_GE(m.host[MemCategory::compressed_kv_rhc], 2ull * (200 / 16) * 256 * 4);
  EXPECT_GE(m.host[MemCategory::indexer_kv], 2ull * (200 / 4) * 128 * 4);
  // Frontier rings hold the pooled block(s) plus max_chunk (64) tokens, rounded up to whole blocks:
  // ratio-4 layers 8 + 64 = 72 rows of 512 (attention) and 256 (indexer) floats; ratio-16 layers
  // 16 + 64 = 80 rows of 256; kv and score each.
  EXPECT_EQ(m.host[MemCategory::compressor_state], (2ull * 72 * (512 + 256) * 2 + 2ull * 80 * 256 * 2) * 4);
  const MemoryReport r = e->memory_report();
  ASSERT_EQ(r.sessions.size(), 1u);
  EXPECT_GT(r.host[MemCategory::weights], 1000000u);
  EXPECT_GT(r.host[MemCategory::scratch], 0u);
  EXPECT_EQ(r.host[MemCategory::raw_kv], m.host[MemCategory::raw_kv]);
  s->reset();
  EXPECT_EQ(e->memory_report().sessions.size(), 0u);
  EXPECT_EQ(e->memory_report().host[MemCategory::raw_kv], 0u);
}
