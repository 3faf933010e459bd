// test_batch_forward.cpp — Engine::step runs ONE forward pass over several sessions: with greedy
// decoding every session's logits equal, bit for bit, those of the same request run alone (the CPU ops
// compute each column independently), for sessions of mixed lengths joining and leaving mid-run with
// prefill chunks sharing steps with decode tokens, in both numerics and with quantized weights; a
// step that fails (bad item, cancellation) changes no session.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "batch_scenario.h"
#include "ds4/engine.h"
#include "model_fixture.h"

using namespace ds4;
using namespace ds4::test;

namespace {

// `pick`: indices of mixed_requests() to run (empty = all).
void expect_batched_equals_solo(const std::string& path, Numerics nm, const std::vector<size_t>& pick = {}) {
  auto e = open_engine({path, nm, 64});
  ASSERT_TRUE(e);
  const int V = e->info().n_vocab;
  std::vector<BatchRequest> reqs = mixed_requests(V);
  if (!pick.empty()) {
    std::vector<BatchRequest> some;
    for (size_t i : pick) some.push_back(reqs[i]);
    reqs = some;
  }
  bool ok = false;
  const BatchRun b = run_batched(*e, reqs, ok);
  ASSERT_TRUE(ok);
  // The workload really batches: several sessions per step, prefill mixed with decode.
  EXPECT_GE(b.max_items, 4);
  EXPECT_GE(b.mixed_steps, 5);
  const BatchRun s = run_solo(*e, reqs, b.decoded);
  for (size_t i = 0; i < reqs.size(); ++i) {
    ASSERT_EQ(b.decoded[i].size(), static_cast<size_t>(reqs[i].n_decode)) << "request " << i;
    ASSERT_EQ(b.logits[i].size(), s.logits[i].size()) << "request " << i;
    const Diff d = compare(b.logits[i], s.logits[i], V);
    EXPECT_EQ(std::memcmp(b.logits[i].data(), s.logits[i].data(), b.logits[i].size() * sizeof(float)), 0)
        << "request " << i << " (prompt " << reqs[i].prompt.size() << "): max|d| " << d.max_abs;
    // Greedy tokens of the solo run are the batched ones (equal logits ⇒ equal argmax).
    for (size_t t = 0; t < b.decoded[i].size(); ++t) {
      const float* row = s.logits[i].data() + t * V;
      EXPECT_EQ(b.decoded[i][t], static_cast<TokenId>(std::max_element(row, row + V) - row))
          << "request " << i << " token " << t;
    }
  }
}

}  // namespace

TEST(BatchForward, MixedSessionsEqualSoloOfficial) { expect_batched_equals_solo(DS4_TINY_GGUF, Numerics::official); }
TEST(BatchForward, MixedSessionsEqualSoloReference) { expect_batched_equals_solo(DS4_TINY_GGUF, Numerics::reference); }
TEST(BatchForward, MixedSessionsEqualSoloQuantized) {
  // Quantized matmuls (activations re-quantized per row); four of the requests keep it to seconds.
  expect_batched_equals_solo(DS4_TINY_QUANT_GGUF, Numerics::official, {0, 1, 2, 5});
}

TEST(BatchForward, AllLogitsCallersStillMatchOneShot) {
  // eval_all goes through the same batched pass (one segment): every position equals decode.
  auto e = open_engine({DS4_TINY_GGUF, Numerics::official, 64});
  ASSERT_TRUE(e);
  const auto t = random_tokens(100, e->info().n_vocab, 9);
  const auto a = logits_chunked(*e, t, {17, 64, 3});
  const auto d = logits_decode(*e, t);
  ASSERT_EQ(a.size(), d.size());
  EXPECT_EQ(std::memcmp(a.data(), d.data(), a.size() * sizeof(float)), 0);
}

TEST(BatchForward, BadTokenInOneItemChangesNoSession) {
  auto e = open_engine({DS4_TINY_GGUF, Numerics::official, 64});
  ASSERT_TRUE(e);
  const int V = e->info().n_vocab;
  auto a = e->new_session().value();
  auto b = e->new_session().value();
  const auto ta = random_tokens(40, V, 3);
  ASSERT_TRUE(a->eval(ta).ok());
  const std::vector<float> before(a->logits().begin(), a->logits().end());
  const TokenId one = 7;
  const std::vector<TokenId> bad = {1, 2, V + 5};
  std::vector<StepItem> items = {{a.get(), std::span<const TokenId>(&one, 1)}, {b.get(), bad}};
  Status st = e->step(items, {});
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::invalid_argument);
  EXPECT_NE(st.message().find("outside the vocabulary"), std::string::npos) << st.to_string();
  EXPECT_EQ(a->position(), 40);
  EXPECT_EQ(b->position(), 0);
  EXPECT_TRUE(b->logits().empty());
  EXPECT_EQ(std::vector<float>(a->logits().begin(), a->logits().end()), before);

  // Cancelled before the pass: nothing changes either.
  EvalOptions cancel;
  cancel.should_cancel = [](void*) { return true; };
  items = {{a.get(), std::span<const TokenId>(&one, 1)}};
  st = e->step(items, cancel);
  EXPECT_EQ(st.code(), StatusCode::cancelled);
  EXPECT_EQ(a->position(), 40);

  // The sessions carry on exactly as a fresh solo run of the same tokens.
  const std::vector<TokenId> good = {1, 2, 3};
  items = {{a.get(), std::span<const TokenId>(&one, 1)}, {b.get(), good}};
  ASSERT_TRUE(e->step(items, {}).ok());
  auto ra = e->new_session().value();
  std::vector<TokenId> ta1 = ta;
  ta1.push_back(one);
  ASSERT_TRUE(ra->eval(ta1).ok());
  auto rb = e->new_session().value();
  ASSERT_TRUE(rb->eval(good).ok());
  EXPECT_EQ(std::vector<float>(a->logits().begin(), a->logits().end()),
            std::vector<float>(ra->logits().begin(), ra->logits().end()));
  EXPECT_EQ(std::vector<float>(b->logits().begin(), b->logits().end()),
            std::vector<float>(rb->logits().begin(), rb->logits().end()));
}

TEST(BatchForward, SessionsAtTheStepLimitRunInOnePass) {
  // As many decoding sessions as the step holds tokens (max_chunk 8 here): one pass, 8 segments.
  auto e = open_engine({DS4_TINY_GGUF, Numerics::reference, 8});
  ASSERT_TRUE(e);
  const int V = e->info().n_vocab;
  std::vector<std::unique_ptr<Session>> s;
  std::vector<std::vector<TokenId>> prompts;
  for (int i = 0; i < 8; ++i) {
    prompts.push_back(random_tokens(3 + 5 * i, V, 70 + i));
    s.push_back(e->new_session().value());
    ASSERT_TRUE(s.back()->eval(prompts.back()).ok());
  }
  std::vector<TokenId> next(8);
  std::vector<StepItem> items;
  for (int i = 0; i < 8; ++i) {
    next[i] = static_cast<TokenId>((i * 37) % V);
    items.push_back({s[i].get(), std::span<const TokenId>(&next[i], 1)});
  }
  ASSERT_TRUE(e->step(items, {}).ok());
  for (int i = 0; i < 8; ++i) {
    auto r = e->new_session().value();
    std::vector<TokenId> all = prompts[i];
    all.push_back(next[i]);
    ASSERT_TRUE(r->eval(all).ok());
    EXPECT_EQ(std::vector<float>(s[i]->logits().begin(), s[i]->logits().end()),
              std::vector<float>(r->logits().begin(), r->logits().end()))
        << "session " << i;
  }
  const TokenId extra = 1;
  items.push_back({nullptr, std::span<const TokenId>(&extra, 1)});
  EXPECT_FALSE(e->step(items, {}).ok());
}

// ForwardOptions::graphs (EngineOptions::cuda_graphs) on the CPU: the backend records nothing, but the
// forward pass runs the graph-mode step — one session's state through the per-column device tables and
// the compressor segment table, emitted rows finished by address with a device count, compressed-row
// host bounds rounded up by Forward::row_bound — which must give the default path's bits: decode across
// the ratio-4 / ratio-16 emissions and the indexer's top-k threshold, chunked prefill, and the mixed and
// steady batched workloads.
TEST(BatchForward, GraphModeStepEqualsDefaultBitForBit) {
  for (Numerics nm : {Numerics::official, Numerics::reference}) {
    auto plain = open_engine({DS4_TINY_GGUF, nm, 64});
    auto graphs = open_engine({DS4_TINY_GGUF, nm, 64, true, true});
    ASSERT_TRUE(plain && graphs);
    const int V = plain->info().n_vocab;
    const auto t = random_tokens(150, V, 21);
    const auto want = logits_decode(*plain, t);
    const auto got = logits_decode(*graphs, t);
    ASSERT_EQ(want.size(), got.size());
    EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0) << "decode";
    const auto wc = logits_chunked(*plain, t, {7, 13, 1, 30});
    const auto gc = logits_chunked(*graphs, t, {7, 13, 1, 30});
    EXPECT_EQ(std::memcmp(wc.data(), gc.data(), wc.size() * sizeof(float)), 0) << "chunked";
    for (const auto& reqs : {mixed_requests(V), steady_requests(V)}) {
      bool ok_a = false, ok_b = false;
      const BatchRun a = run_batched(*plain, reqs, ok_a);
      const BatchRun b = run_batched(*graphs, reqs, ok_b);
      ASSERT_TRUE(ok_a && ok_b);
      for (size_t i = 0; i < reqs.size(); ++i) {
        ASSERT_EQ(a.logits[i].size(), b.logits[i].size()) << "request " << i;
        EXPECT_EQ(std::memcmp(a.logits[i].data(), b.logits[i].data(), a.logits[i].size() * sizeof(float)), 0)
            << "request " << i;
      }
    }
  }
}
