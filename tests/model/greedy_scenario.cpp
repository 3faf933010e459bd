// greedy_scenario.cpp — see greedy_scenario.h.
#include "greedy_scenario.h"

#include <gtest/gtest.h>

#include <memory>
#include <span>

#include "ds4/sampler.h"
#include "model_fixture.h"

namespace ds4::test {

namespace {

void finish(GreedyRun& run, Session& s) {
  const std::span<const float> lg = s.logits();
  run.logits.emplace_back(lg.begin(), lg.end());
  auto snap = s.snapshot();
  EXPECT_TRUE(snap.ok()) << snap.status().to_string();
  run.snapshots.push_back(snap.ok() ? snap->bytes : std::vector<uint8_t>{});
}

}  // namespace

GreedyRun greedy_solo(Engine& e, const std::vector<TokenId>& prompt, int n, TokenId exclude, GreedyPath path,
                      int stop_after) {
  GreedyRun run;
  auto s = e.new_session().value();
  std::vector<TokenId> got;
  TokenId next = -1;
  if (path == GreedyPath::host) {
    EXPECT_TRUE(s->eval(prompt).ok());
    next = argmax(s->logits(), exclude);
  } else {
    EXPECT_TRUE(s->eval_greedy(prompt, &next, exclude).ok());
  }
  got.push_back(next);
  auto report = [&](TokenId t) {
    got.push_back(t);
    return stop_after < 0 || static_cast<int>(got.size()) - 1 < stop_after;
  };
  if (path == GreedyPath::pipelined) {
    const Status st = s->generate_greedy(next, n, exclude, report);
    EXPECT_TRUE(st.ok()) << st.to_string();
  } else {
    for (int i = 0; i < n; ++i) {
      const TokenId cur = next;
      if (path == GreedyPath::device) {
        EXPECT_TRUE(s->eval_greedy(std::span<const TokenId>(&cur, 1), &next, exclude).ok());
      } else {
        EXPECT_TRUE(s->eval(std::span<const TokenId>(&cur, 1)).ok());
        next = argmax(s->logits(), exclude);
      }
      if (!report(next)) break;
    }
  }
  run.tokens.push_back(got);
  finish(run, *s);
  return run;
}

GreedyRun greedy_recompute(Engine& e, const std::vector<TokenId>& prompt, int n, int more, bool device) {
  GreedyRun run;
  auto s = e.new_session().value();
  auto other = e.new_session().value();
  std::vector<TokenId> got;
  TokenId next = -1;
  EXPECT_TRUE(s->eval(prompt).ok());
  next = argmax(s->logits());
  for (int i = 0; i < n; ++i) {
    got.push_back(next);
    const TokenId cur = next;
    if (device) {
      EXPECT_TRUE(s->eval_greedy(std::span<const TokenId>(&cur, 1), &next).ok());
    } else {
      EXPECT_TRUE(s->eval(std::span<const TokenId>(&cur, 1)).ok());
      next = argmax(s->logits());
    }
  }
  EXPECT_TRUE(other->eval(std::span<const TokenId>(prompt).first(3)).ok());  // a later step
  finish(run, *s);
  EXPECT_EQ(argmax(s->logits()), next);
  for (int i = 0; i < more; ++i) {
    got.push_back(next);
    const TokenId cur = next;
    EXPECT_TRUE(s->eval(std::span<const TokenId>(&cur, 1)).ok());
    next = argmax(s->logits());
  }
  got.push_back(next);
  run.tokens.push_back(got);
  finish(run, *s);
  return run;
}

GreedyRun greedy_mixed_batch(Engine& e, int n, bool device) {
  const int V = e.info().n_vocab;
  const std::vector<int> lens = {9, 30, 70};
  std::vector<std::vector<TokenId>> prompts;
  for (int i = 0; i < 3; ++i) prompts.push_back(random_tokens(lens[i], V, 300 + i));
  std::vector<std::unique_ptr<Session>> s;
  for (int i = 0; i < 3; ++i) s.push_back(e.new_session().value());
  SamplerOptions so;
  so.temperature = 0.8f;
  so.seed = 5;
  Sampler sampler(so);
  const TokenId excluded[3] = {-1, -1, static_cast<TokenId>(V / 2)};
  const bool greedy[3] = {true, false, true};
  GreedyRun run;
  run.tokens.resize(3);
  std::vector<TokenId> next(3, -1), cur(3, -1);
  for (int step = 0; step <= n; ++step) {
    std::vector<StepItem> items;
    for (int i = 0; i < 3; ++i) {
      StepItem it;
      it.session = s[i].get();
      it.tokens = step == 0 ? std::span<const TokenId>(prompts[i]) : std::span<const TokenId>(&cur[i], 1);
      if (device && greedy[i]) {
        it.next = &next[i];
        it.exclude = excluded[i];
      }
      items.push_back(it);
    }
    const Status st = e.step(items, EvalOptions{});
    EXPECT_TRUE(st.ok()) << st.to_string();
    if (!st.ok()) return run;
    for (int i = 0; i < 3; ++i) {
      if (!greedy[i]) next[i] = sampler.sample(s[i]->logits());
      else if (!device) next[i] = argmax(s[i]->logits(), excluded[i]);
      run.tokens[i].push_back(next[i]);
      cur[i] = next[i];
    }
  }
  for (int i = 0; i < 3; ++i) finish(run, *s[i]);
  return run;
}

}  // namespace ds4::test
