// test_sampler.cpp — sampler filters, determinism per seed, and log-probabilities.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "ds4/sampler.h"

using namespace ds4;

TEST(Sampler, GreedyPicksLowestIdAmongMaxima) {
  const std::vector<float> l = {0.5f, 3.0f, -1.0f, 3.0f};
  EXPECT_EQ(argmax(l), 1);
  Sampler s({0.0f});
  EXPECT_EQ(s.sample(l), 1);
  Sampler k1({1.0f, 1});
  EXPECT_EQ(k1.sample(l), 1);
}

TEST(Sampler, SeedReproducesAndDistributionFollowsSoftmax) {
  const std::vector<float> l = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  Sampler a({1.0f, 0, 1.0f, 0.0f, 42}), b({1.0f, 0, 1.0f, 0.0f, 42});
  std::map<int, int> counts;
  for (int i = 0; i < 20000; ++i) {
    const TokenId x = a.sample(l);
    EXPECT_EQ(x, b.sample(l));
    counts[x]++;
  }
  EXPECT_NEAR(counts[0] / 20000.0, 0.5, 0.02);
  EXPECT_NEAR(counts[1] / 20000.0, 0.3, 0.02);
  EXPECT_NEAR(counts[2] / 20000.0, 0.2, 0.02);
}

TEST(Sampler, TopKTopPMinPRestrictTheCandidates) {
  const std::vector<float> l = {std::log(0.4f), std::log(0.3f), std::log(0.2f), std::log(0.1f)};
  Sampler topk({1.0f, 2, 1.0f, 0.0f, 1});
  Sampler topp({1.0f, 0, 0.65f, 0.0f, 2});   // 0.4 + 0.3 ≥ 0.65 → {0, 1}
  Sampler minp({1.0f, 0, 1.0f, 0.6f, 3});    // p ≥ 0.24 → {0, 1}
  for (int i = 0; i < 2000; ++i) {
    EXPECT_LE(topk.sample(l), 1);
    EXPECT_LE(topp.sample(l), 1);
    EXPECT_LE(minp.sample(l), 1);
  }
  // top-p measures mass over the whole distribution even when min-p dropped its tail:
  // {0.4, 0.3, 0.2 | 0.1 dropped by min-p 0.3}; top-p 0.75 needs 0.4 + 0.3 + 0.2, so token 2 stays.
  Sampler both({1.0f, 0, 0.75f, 0.3f, 5});
  int twos = 0;
  for (int i = 0; i < 4000; ++i) {
    const TokenId x = both.sample(l);
    EXPECT_LE(x, 2);
    twos += x == 2;
  }
  EXPECT_NEAR(twos / 4000.0, 0.2 / 0.9, 0.03);
  // Low temperature concentrates on the best token.
  Sampler cold({0.01f, 0, 1.0f, 0.0f, 4});
  for (int i = 0; i < 100; ++i) EXPECT_EQ(cold.sample(l), 0);
}

TEST(Sampler, Logprobs) {
  const std::vector<float> l = {1.0f, 2.0f, 3.0f, 3.0f};
  const double lse = std::log(std::exp(1.0) + std::exp(2.0) + 2 * std::exp(3.0));
  EXPECT_NEAR(token_logprob(l, 0), 1.0 - lse, 1e-6);
  EXPECT_EQ(token_logprob(l, 9), -INFINITY);
  const auto top = top_logprobs(l, 3);
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0].id, 2);
  EXPECT_EQ(top[1].id, 3);
  EXPECT_EQ(top[2].id, 1);
  EXPECT_NEAR(top[2].logprob, 2.0 - lse, 1e-6);
  EXPECT_EQ(top_logprobs(l, 10).size(), 4u);
}
