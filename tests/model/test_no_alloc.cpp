// test_no_alloc.cpp — the decode loop allocates nothing once warm: scratch is sized at engine creation,
// op scratch only grows on the first larger op, and compressed rows grow by committing whole blocks of
// reserved address space (mprotect, no heap allocation; kv_state.h).
// Counts global operator new calls (this replacement only counts; it serves every test of the binary).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <new>
#include <vector>

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
    // 100 tokens leave 25 ratio-4 rows and 6 ratio-16 rows, inside their first 64 KiB blocks.
    ASSERT_TRUE((*s)->eval(std::span<const TokenId>(t).first(100)).ok());
    ASSERT_TRUE((*s)->eval(std::span<const TokenId>(&t[100], 1)).ok());
    const uint64_t before = g_news.load();
    for (int i = 101; i < 125; ++i) ASSERT_TRUE((*s)->eval(std::span<const TokenId>(&t[i], 1)).ok());
    EXPECT_EQ(g_news.load() - before, 0u) << "heap allocations during 24 decode steps";
  }
}

TEST(NoAlloc, BatchedDecodeStepDoesNotAllocate) {
  // Four sessions decoding together through Engine::step: the step's segments, per-column tables and
  // validation reuse their storage once warm.
  auto e = open_engine({DS4_TINY_GGUF, Numerics::official});
  ASSERT_TRUE(e);
  std::vector<std::unique_ptr<Session>> s;
  std::vector<TokenId> next(4);
  std::vector<StepItem> items(4);
  for (int i = 0; i < 4; ++i) {
    s.push_back(e->new_session().value());
    ASSERT_TRUE(s.back()->eval(random_tokens(100 - 3 * i, 512, 30 + i)).ok());  // past the indexer threshold
    items[i].session = s.back().get();
  }
  auto step = [&](int round) {
    for (int i = 0; i < 4; ++i) {
      next[i] = static_cast<TokenId>((round * 7 + i * 13) % 512);
      items[i].tokens = std::span<const TokenId>(&next[i], 1);
    }
    return e->step(items, {});
  };
  ASSERT_TRUE(step(0).ok());
  const uint64_t before = g_news.load();
  for (int r = 1; r <= 20; ++r) ASSERT_TRUE(step(r).ok());
  EXPECT_EQ(g_news.load() - before, 0u) << "heap allocations during 20 batched decode steps";
}
