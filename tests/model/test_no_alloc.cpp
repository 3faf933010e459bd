// test_no_alloc.cpp — the decode loop allocates nothing once warm: scratch is sized at engine creation,
// op scratch only grows on the first larger op, and compressed rows grow by doubling (not per token).
// Counts global operator new calls (this replacement only counts; it serves every test of the binary).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include "model_fixture.h"

namespace {
std::atomic<uint64_t> g_news{0};
}

void* operator new(std::size_t n) {
  g_news.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

using namespace ds4;
using namespace ds4::test;

TEST(NoAlloc, DecodeTokenLoopDoesNotAllocate) {
  for (Numerics nm : {Numerics::official, Numerics::reference}) {
    auto e = open_engine({DS4_TINY_GGUF, nm});
    ASSERT_TRUE(e);
    auto s = e->new_session();
    ASSERT_TRUE(s.ok());
    const auto t = random_tokens(140, 512, 17);
    // Warm up past the indexer threshold (position 67) so every op has run at its largest size so far;
    // 100 tokens leave 25 ratio-4 rows (capacity 32) and 6 ratio-16 rows (capacity 16).
    ASSERT_TRUE((*s)->eval(std::span<const TokenId>(t).first(100)).ok());
    ASSERT_TRUE((*s)->eval(std::span<const TokenId>(&t[100], 1)).ok());
    const uint64_t before = g_news.load();
    for (int i = 101; i < 125; ++i) ASSERT_TRUE((*s)->eval(std::span<const TokenId>(&t[i], 1)).ok());
    EXPECT_EQ(g_news.load() - before, 0u) << "heap allocations during 24 decode steps";
  }
}
