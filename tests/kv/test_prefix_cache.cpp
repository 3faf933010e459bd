// test_prefix_cache.cpp — kv::PrefixCache: only block-aligned prefixes are stored; the longest
// stored prefix of a prompt is found; the branch point shared with a longer entry is reported;
// a hash collision or a different token is a miss; LRU eviction keeps the byte budget.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "kv/prefix_cache.h"

namespace ds4::kv {
namespace {

std::vector<TokenId> seq(int n, int start = 0) {
  std::vector<TokenId> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), start);
  return v;
}

TEST(PrefixCache, DisabledWithoutBudget) {
  PrefixCache c({.block_tokens = 4, .max_bytes = 0});
  auto t = seq(8);
  EXPECT_FALSE(c.insert(t, 4, {1, 2, 3}));
  EXPECT_EQ(c.lookup(t, 8).hit_tokens, 0);
}

TEST(PrefixCache, LongestAlignedPrefixAndBranchPoint) {
  PrefixCache c({.block_tokens = 4, .max_bytes = 1 << 20});
  auto a = seq(12);
  EXPECT_FALSE(c.insert(a, 6, {1}));  // not a block boundary
  ASSERT_TRUE(c.insert(a, 4, {4}));
  ASSERT_TRUE(c.insert(a, 12, {12}));
  EXPECT_TRUE(c.contains(a, 12));
  EXPECT_FALSE(c.contains(a, 8));

  auto b = seq(20);  // extends a
  PrefixLookup r = c.lookup(b, 20);
  EXPECT_EQ(r.hit_tokens, 12);
  ASSERT_NE(r.payload, nullptr);
  EXPECT_EQ((*r.payload)[0], 12);
  EXPECT_EQ(c.lookup(b, 11).hit_tokens, 4);  // limit respected

  // Same first 9 tokens, then different: restorable prefix 4, shared (branch) prefix 8.
  auto d = seq(16);
  d[9] = 999;
  r = c.lookup(d, 16);
  EXPECT_EQ(r.hit_tokens, 4);
  EXPECT_EQ(r.shared_tokens, 8);
  // Different first token: a miss.
  auto e = seq(16, 1);
  r = c.lookup(e, 16);
  EXPECT_EQ(r.hit_tokens, 0);
  EXPECT_EQ(r.shared_tokens, 0);
  const PrefixCacheStats s = c.stats();
  EXPECT_EQ(s.lookups, 4u);
  EXPECT_EQ(s.hits, 3u);
  EXPECT_EQ(s.hit_tokens, 12u + 4 + 4);
  EXPECT_EQ(s.entries, 2u);
}

TEST(PrefixCache, LeastRecentlyUsedEntriesAreEvictedToStayInBudget) {
  // Each entry: 100 payload bytes + 4 tokens * 4 bytes = 116 bytes; room for two.
  PrefixCache c({.block_tokens = 4, .max_bytes = 240});
  auto a = seq(4, 0), b = seq(4, 100), d = seq(4, 200);
  ASSERT_TRUE(c.insert(a, 4, std::vector<uint8_t>(100, 1)));
  ASSERT_TRUE(c.insert(b, 4, std::vector<uint8_t>(100, 2)));
  EXPECT_EQ(c.lookup(a, 4).hit_tokens, 4);  // a is now more recent than b
  ASSERT_TRUE(c.insert(d, 4, std::vector<uint8_t>(100, 3)));
  EXPECT_TRUE(c.contains(a, 4));
  EXPECT_FALSE(c.contains(b, 4));
  EXPECT_TRUE(c.contains(d, 4));
  EXPECT_EQ(c.stats().evictions, 1u);
  EXPECT_LE(c.stats().bytes, 240u);
  EXPECT_FALSE(c.insert(seq(4, 300), 4, std::vector<uint8_t>(1000, 0)));  // larger than the budget
  c.clear();
  EXPECT_EQ(c.stats().entries, 0u);
  EXPECT_EQ(c.stats().bytes, 0u);
}

}  // namespace
}  // namespace ds4::kv
