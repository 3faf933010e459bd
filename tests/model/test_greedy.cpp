// test_greedy.cpp — greedy decoding with the token picked by the backend's argmax inside the step
// (Session::eval_greedy, StepItem::next) equals the logits path on the CPU engine: the same tokens, and the
// deferred logits and snapshots recomputed exactly; a batch mixing greedy and sampled sessions (prefill
// chunks and decode tokens) gives every session the tokens the logits path gives it. With and without step
// graphs (EngineOptions::cuda_graphs changes the CPU's step input layout: per-column tables).
#include <gtest/gtest.h>

#include "greedy_scenario.h"
#include "model_fixture.h"

using namespace ds4;
using namespace ds4::test;

namespace {

void expect_same(const GreedyRun& a, const GreedyRun& b) {
  ASSERT_EQ(a.tokens.size(), b.tokens.size());
  ASSERT_EQ(a.snapshots.size(), b.snapshots.size());
  for (size_t i = 0; i < a.tokens.size(); ++i) EXPECT_EQ(a.tokens[i], b.tokens[i]) << "session " << i;
  for (size_t i = 0; i < a.snapshots.size(); ++i) {
    EXPECT_EQ(a.logits[i], b.logits[i]) << "result " << i;  // bit for bit, NaN-free tiny model
    EXPECT_TRUE(a.snapshots[i] == b.snapshots[i]) << "result " << i;
  }
}

}  // namespace

TEST(Greedy, SoloDeviceArgmaxEqualsHostArgmax) {
  for (const bool graphs : {false, true}) {
    auto e = open_engine({DS4_TINY_GGUF, Numerics::official, 64, true, graphs});
    ASSERT_TRUE(e);
    const auto prompt = random_tokens(40, e->info().n_vocab, 9);
    for (const TokenId exclude : {TokenId{-1}, TokenId{1}}) {
      const GreedyRun host = greedy_solo(*e, prompt, 24, exclude, GreedyPath::host);
      expect_same(host, greedy_solo(*e, prompt, 24, exclude, GreedyPath::device));
      expect_same(host, greedy_solo(*e, prompt, 24, exclude, GreedyPath::pipelined));
    }
    // The excluded id is never chosen: exclude the first token the unrestricted run picks.
    const GreedyRun free_run = greedy_solo(*e, prompt, 4, -1, GreedyPath::device);
    const TokenId first = free_run.tokens[0][0];
    const GreedyRun barred = greedy_solo(*e, prompt, 4, first, GreedyPath::pipelined);
    for (TokenId t : barred.tokens[0]) EXPECT_NE(t, first);
  }
}

// generate_greedy stopped by its callback: the step run ahead is rolled back, so the session is exactly
// where the one-step-at-a-time loop stopping at the same token leaves it (tokens, logits, snapshot).
TEST(Greedy, PipelinedStopRollsBackTheStepRunAhead) {
  for (const bool graphs : {false, true}) {
    auto e = open_engine({DS4_TINY_GGUF, Numerics::official, 64, true, graphs});
    ASSERT_TRUE(e);
    const auto prompt = random_tokens(30, e->info().n_vocab, 4);
    for (const int stop : {1, 7}) {
      const GreedyRun host = greedy_solo(*e, prompt, 20, -1, GreedyPath::host, stop);
      ASSERT_EQ(host.tokens[0].size(), static_cast<size_t>(stop + 1));
      expect_same(host, greedy_solo(*e, prompt, 20, -1, GreedyPath::pipelined, stop));
    }
  }
}

TEST(Greedy, MixedBatchOfGreedyAndSampledSessions) {
  for (const bool graphs : {false, true}) {
    auto e = open_engine({DS4_TINY_GGUF, Numerics::official, 128, true, graphs});
    ASSERT_TRUE(e);
    expect_same(greedy_mixed_batch(*e, 16, false), greedy_mixed_batch(*e, 16, true));
  }
}

// logits() after a later step (the greedy step's logits overwritten on the device): the last token is
// evaluated again, giving the same logits and state, and decoding on from there gives the same tokens.
TEST(Greedy, DeferredLogitsRecomputedAfterALaterStep) {
  for (const bool graphs : {false, true}) {
    auto e = open_engine({DS4_TINY_GGUF, Numerics::official, 64, true, graphs});
    ASSERT_TRUE(e);
    const auto prompt = random_tokens(37, e->info().n_vocab, 21);
    expect_same(greedy_recompute(*e, prompt, 11, 6, false), greedy_recompute(*e, prompt, 11, 6, true));
  }
}

TEST(Greedy, BadExcludedIdChangesNothing) {
  auto e = open_engine({DS4_TINY_GGUF, Numerics::official, 64});
  ASSERT_TRUE(e);
  auto s = e->new_session().value();
  const auto prompt = random_tokens(5, e->info().n_vocab, 3);
  TokenId next = -1;
  EXPECT_FALSE(s->eval_greedy(prompt, &next, e->info().n_vocab).ok());
  EXPECT_FALSE(s->eval_greedy(prompt, nullptr).ok());
  EXPECT_EQ(s->position(), 0);
  StepItem it{s.get(), prompt, &next, -5};
  EXPECT_FALSE(e->step(std::span<const StepItem>(&it, 1), EvalOptions{}).ok());
  EXPECT_EQ(s->position(), 0);
  EXPECT_EQ(next, -1);
}
