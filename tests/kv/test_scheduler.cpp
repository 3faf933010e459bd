// test_scheduler.cpp — kv::Scheduler step plans: decode tokens every step while a long prompt is
// prefilled in chunks (counted in steps), the token budget is never exceeded, prefills are served
// oldest first and capped at checkpoints, and decoders that exceed the budget take turns.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "kv/scheduler.h"

namespace ds4::kv {
namespace {

TEST(Scheduler, DecodersAdvanceEveryStepWhileALongPrefillIsChunked) {
  Scheduler s({.max_batch_tokens = 64, .prefill_chunk = 512});
  std::vector<SchedJob> jobs = {{.decoding = true, .want = 1}, {.decoding = false, .want = 10000},
                                {.decoding = true, .want = 1}};
  int steps = 0;
  while (jobs[1].want > 0) {
    StepPlan p = s.plan(jobs);
    ++steps;
    ASSERT_EQ(p.decode_jobs, 2u) << "a decoder was starved at step " << steps;
    ASSERT_LE(p.decode_tokens + p.prefill_tokens, 64);
    ASSERT_EQ(p.prefill_tokens, std::min<int64_t>(62, jobs[1].want));  // the rest of the budget goes to the prompt
    for (const SchedGrant& g : p.grants)
      if (g.job == 1) jobs[1].want -= g.tokens;
  }
  EXPECT_EQ(steps, (10000 + 61) / 62);
}

TEST(Scheduler, PrefillsOldestFirstAndCappedAtCheckpoints) {
  Scheduler s({.max_batch_tokens = 100, .prefill_chunk = 60});
  std::vector<SchedJob> jobs = {{.decoding = false, .want = 500, .cap = 0},
                                {.decoding = false, .want = 30, .cap = 0}};
  StepPlan p = s.plan(jobs);
  ASSERT_EQ(p.grants.size(), 2u);
  EXPECT_EQ(p.grants[0].tokens, 60);  // per-job chunk limit
  EXPECT_EQ(p.grants[1].tokens, 30);
  jobs[0].cap = 7;  // must stop at a prefix-cache checkpoint 7 tokens ahead
  p = s.plan(jobs);
  EXPECT_EQ(p.grants[0].tokens, 7);
  EXPECT_EQ(p.grants[1].tokens, 30);
}

TEST(Scheduler, DecodersBeyondTheBudgetTakeTurnsAndPrefillKeepsAShare) {
  Scheduler s({.max_batch_tokens = 16, .prefill_chunk = 512});
  std::vector<SchedJob> jobs(20, SchedJob{.decoding = true, .want = 1});
  jobs.push_back({.decoding = false, .want = 100});
  std::vector<int> served(20, 0);
  int prefill = 0;
  for (int step = 0; step < 40; ++step) {
    StepPlan p = s.plan(jobs);
    EXPECT_LE(p.decode_tokens + p.prefill_tokens, 16);
    EXPECT_GE(p.prefill_tokens, 1) << "the waiting prompt got nothing";
    prefill += static_cast<int>(p.prefill_tokens);
    for (const SchedGrant& g : p.grants)
      if (g.job < 20) served[g.job]++;
  }
  // 14 decode slots per step over 20 decoders for 40 steps: everyone gets 28 turns.
  for (int i = 0; i < 20; ++i) EXPECT_EQ(served[i], 28) << "decoder " << i;
  EXPECT_EQ(prefill, 80);
}

TEST(Scheduler, NothingToDoIsAnEmptyPlan) {
  Scheduler s({});
  std::vector<SchedJob> jobs = {{.decoding = false, .want = 0}};
  EXPECT_TRUE(s.plan(jobs).grants.empty());
  EXPECT_TRUE(s.plan({}).grants.empty());
}

}  // namespace
}  // namespace ds4::kv
