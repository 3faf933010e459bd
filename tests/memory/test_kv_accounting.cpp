// test_kv_accounting.cpp — a session's counted KV bytes equal the formula exactly at several lengths,
// grow in blocks with the tokens held, are released on rewind, reset and free, and never go negative or
// leak across 1,000 create/extend/rewind/free cycles.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <random>
#include <vector>

#include "ds4/engine.h"
#include "gguf/gguf.h"
#include "model/forward.h"
#include "modelspec/config.h"
#include "modelspec/layer_plan.h"
#include "modelspec/memory_plan.h"

using namespace ds4;

namespace {

std::unique_ptr<Engine> open_tiny(int64_t max_context = 0) {
  EngineOptions o;
  o.model_path = DS4_MEM_TINY_GGUF;
  o.n_threads = 2;
  o.max_context = max_context;
  auto e = Engine::open(o);
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  return e.ok() ? std::move(e).value() : nullptr;
}

modelspec::ModelConfig tiny_config() {
  auto f = gguf::File::open(DS4_MEM_TINY_GGUF);
  EXPECT_TRUE(f.ok());
  auto c = modelspec::config_from_gguf(**f);
  EXPECT_TRUE(c.ok());
  return *c;
}

std::vector<TokenId> tokens(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<TokenId> t(static_cast<size_t>(n));
  for (auto& x : t) x = static_cast<TokenId>(rng() % 512);
  return t;
}

MemBytes kv_of(const SessionMemory& m) {
  MemBytes k = m.host;
  k[MemCategory::other] = 0;  // token ids and logits, not KV
  return k;
}

void expect_equal(const MemBytes& a, const MemBytes& b, const std::string& what) {
  for (int c = 0; c < kMemCategoryCount; ++c)
    EXPECT_EQ(a.bytes[c], b.bytes[c]) << what << ": " << mem_category_name(static_cast<MemCategory>(c));
}

constexpr uint64_t kBlock = 64 << 10;
uint64_t blocks(uint64_t b) { return (b + kBlock - 1) / kBlock * kBlock; }

}  // namespace

// The tiny model's layers are [0, 0, 4, 16, 4, 16], D = 256, ID = 128, window 16, chunk 64. Written out by
// hand (MODEL.md §10.1 with this engine's ring and frontier sizes) and compared with the counted bytes
// and with the formula module, at lengths around block and compression boundaries.
TEST(KvAccounting, ExactBytesEqualFormulaAtSeveralLengths) {
  auto e = open_tiny();
  ASSERT_TRUE(e);
  const auto cfg = tiny_config();
  const auto plan = modelspec::layer_plan(cfg);
  auto s = e->new_session();
  ASSERT_TRUE(s.ok());
  const auto t = tokens(1100, 5);
  int64_t at = 0;
  for (int64_t n : {0, 1, 3, 4, 15, 16, 17, 255, 256, 257, 300, 1023, 1024, 1025, 1100}) {
    if (n > at) {
      ASSERT_TRUE((*s)->eval(std::span<const TokenId>(t).subspan(at, n - at)).ok());
    }
    at = n;
    const SessionMemory m = (*s)->memory();
    ASSERT_EQ(m.tokens, n);
    MemBytes hand;
    hand[MemCategory::raw_kv] = 6ull * (16 + 64 - 1) * 256 * 4;
    hand[MemCategory::compressor_state] = (2ull * 72 * (512 + 256) * 2 + 2ull * 80 * 256 * 2) * 4;
    hand[MemCategory::compressed_kv_r4] = 2 * blocks(uint64_t(n / 4) * 256 * 4);
    hand[MemCategory::indexer_kv] = 2 * blocks(uint64_t(n / 4) * 128 * 4);
    hand[MemCategory::compressed_kv_rhc] = 2 * blocks(uint64_t(n / 16) * 256 * 4);
    expect_equal(kv_of(m), hand, "hand formula at " + std::to_string(n));
    expect_equal(kv_of(m), modelspec::session_kv_bytes(cfg, plan, n, {64, kBlock}), "memory_plan at " + std::to_string(n));
    // Rows without block rounding: MODEL.md §10.3's per-token growth for this geometry.
    const MemBytes rows = modelspec::session_kv_row_bytes(cfg, plan, n, {64, kBlock});
    EXPECT_EQ(rows[MemCategory::compressed_kv_r4], 2ull * (n / 4) * 1024);
    EXPECT_EQ(rows[MemCategory::indexer_kv], 2ull * (n / 4) * 512);
    EXPECT_EQ(rows[MemCategory::compressed_kv_rhc], 2ull * (n / 16) * 1024);
  }
  const MemoryReport r = e->memory_report();
  EXPECT_DOUBLE_EQ(r.kv_bytes_per_token[static_cast<size_t>(MemCategory::compressed_kv_r4)], 2 * 1024 / 4.0);
  EXPECT_DOUBLE_EQ(r.kv_bytes_per_token[static_cast<size_t>(MemCategory::indexer_kv)], 2 * 512 / 4.0);
  EXPECT_DOUBLE_EQ(r.kv_bytes_per_token[static_cast<size_t>(MemCategory::compressed_kv_rhc)], 2 * 1024 / 16.0);
  EXPECT_EQ(r.kv_block_bytes, kBlock);
}

// The engine's process-wide counts are the sum of its parts: forward scratch is exactly the formula
// before any op has run, and every session's KV appears once in the process totals.
TEST(KvAccounting, ProcessTotalsAreTheSumOfSessions) {
  auto e = open_tiny();
  ASSERT_TRUE(e);
  const auto cfg = tiny_config();
  const MemoryReport r0 = e->memory_report();
  EXPECT_EQ(r0.host[MemCategory::scratch], model::Forward::planned_scratch_bytes(cfg, 64));
  EXPECT_EQ(r0.host[MemCategory::raw_kv], 0u);
  EXPECT_GT(r0.host_rss, 0u);
  EXPECT_GT(r0.host_mapped_weights, 0u);
  EXPECT_LE(r0.host_weights_resident, r0.host_mapped_weights);
  auto a = e->new_session();
  auto b = e->new_session();
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE((*a)->eval(tokens(700, 1)).ok());
  ASSERT_TRUE((*b)->eval(tokens(90, 2)).ok());
  const MemoryReport r = e->memory_report();
  ASSERT_EQ(r.sessions.size(), 2u);
  for (MemCategory c : {MemCategory::raw_kv, MemCategory::compressed_kv_r4, MemCategory::compressed_kv_rhc,
                        MemCategory::indexer_kv, MemCategory::compressor_state})
    EXPECT_EQ(r.host[c], r.sessions[0].host[c] + r.sessions[1].host[c]) << mem_category_name(c);
  // The mapped weights became resident when the forward pass read them.
  EXPECT_GT(r.host_weights_resident, 0u);
}

TEST(KvAccounting, GrowsInBlocksAndIsReleasedOnRewindResetAndFree) {
  auto e = open_tiny();
  ASSERT_TRUE(e);
  const auto cfg = tiny_config();
  const auto plan = modelspec::layer_plan(cfg);
  auto s = e->new_session();
  ASSERT_TRUE(s.ok());
  const auto t = tokens(2100, 9);
  // Growth: bytes never shrink while tokens are added, and memory follows tokens (not the context limit).
  uint64_t prev = 0;
  for (int i = 0; i < 2100; i += 300) {
    ASSERT_TRUE((*s)->eval(std::span<const TokenId>(t).subspan(i, 300)).ok());
    const uint64_t now = kv_of((*s)->memory()).total();
    EXPECT_GE(now, prev);
    prev = now;
  }
  const uint64_t at_2100 = e->memory_report().host[MemCategory::compressed_kv_r4];
  EXPECT_EQ(at_2100, 2 * blocks(525 * 1024));
  // Cheap rewind (a few tokens back) and a deep rewind (replay) both give the blocks back.
  ASSERT_TRUE((*s)->rewind(2090).ok());
  expect_equal(kv_of((*s)->memory()), modelspec::session_kv_bytes(cfg, plan, 2090, {64, kBlock}), "cheap rewind");
  ASSERT_TRUE((*s)->rewind(100).ok());
  expect_equal(kv_of((*s)->memory()), modelspec::session_kv_bytes(cfg, plan, 100, {64, kBlock}), "deep rewind");
  EXPECT_LT(e->memory_report().host[MemCategory::compressed_kv_r4], at_2100);
  ASSERT_TRUE((*s)->rewind(0).ok());
  expect_equal(kv_of((*s)->memory()), modelspec::session_kv_bytes(cfg, plan, 0, {64, kBlock}), "rewind to 0");
  EXPECT_EQ(e->memory_report().host[MemCategory::compressed_kv_r4], 0u);
  // Growing again after a release works and counts the same.
  ASSERT_TRUE((*s)->eval(std::span<const TokenId>(t).first(600)).ok());
  expect_equal(kv_of((*s)->memory()), modelspec::session_kv_bytes(cfg, plan, 600, {64, kBlock}), "regrow");
  // Restoring a shorter snapshot into a session that holds more gives the extra blocks back.
  auto snap = (*s)->snapshot();
  ASSERT_TRUE(snap.ok());
  ASSERT_TRUE((*s)->eval(std::span<const TokenId>(t).subspan(600, 900)).ok());
  ASSERT_TRUE((*s)->restore(*snap).ok());
  expect_equal(kv_of((*s)->memory()), modelspec::session_kv_bytes(cfg, plan, 600, {64, kBlock}), "restore");
  s->reset();
  const MemoryReport r = e->memory_report();
  for (MemCategory c : {MemCategory::raw_kv, MemCategory::compressed_kv_r4, MemCategory::compressed_kv_rhc,
                        MemCategory::indexer_kv, MemCategory::compressor_state})
    EXPECT_EQ(r.host[c], 0u) << mem_category_name(c);
}

TEST(KvAccounting, ContextLimitIsALimitNotAnAllocation) {
  // A session allowed the model's whole context (1M tokens here) costs what it holds, not what it may hold.
  auto big = open_tiny(0);
  auto small = open_tiny(4096);
  ASSERT_TRUE(big && small);
  auto a = big->new_session();
  auto b = small->new_session();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_GE((*a)->max_context(), 1 << 20);
  const auto t = tokens(500, 4);
  ASSERT_TRUE((*a)->eval(t).ok());
  ASSERT_TRUE((*b)->eval(t).ok());
  expect_equal(kv_of((*a)->memory()), kv_of((*b)->memory()), "1M limit vs 4K limit");
  // The limit is enforced: rows beyond it are refused with an error, not a crash.
  auto c = small->new_session();
  ASSERT_TRUE(c.ok());
  EXPECT_EQ((*c)->eval(tokens(4097, 6)).code(), StatusCode::invalid_argument);
}

// 1,000 random operations over up to three sessions: after each, every category equals the sum of the
// formula over the live sessions (so nothing is negative and nothing leaks), and after freeing
// everything the KV categories are zero.
TEST(KvAccounting, NoLeakOrNegativeAcrossThousandCycles) {
  auto e = open_tiny(320);
  ASSERT_TRUE(e);
  const auto cfg = tiny_config();
  const auto plan = modelspec::layer_plan(cfg);
  const MemBytes base = e->memory_report().host;
  std::mt19937 rng(12345);
  std::vector<std::unique_ptr<Session>> live;
  const auto t = tokens(320, 77);
  for (int cycle = 0; cycle < 1000; ++cycle) {
    const int op = static_cast<int>(rng() % 4);
    if (op == 0 && live.size() < 3) {
      auto s = e->new_session();
      ASSERT_TRUE(s.ok());
      live.push_back(std::move(s).value());
    } else if (!live.empty()) {
      Session& s = *live[rng() % live.size()];
      const int64_t pos = s.position();
      if (op == 1 || op == 0) {
        const int64_t n = std::min<int64_t>(1 + rng() % 24, 320 - pos);
        if (n > 0) {
          ASSERT_TRUE(s.eval(std::span<const TokenId>(t).subspan(pos, n)).ok());
        }
      } else if (op == 2) {
        // Mostly the cheap path (a few tokens back); sometimes a deep rewind that replays.
        const int64_t back = (rng() % 32 == 0) ? static_cast<int64_t>(rng() % (pos + 1)) : std::min<int64_t>(pos, rng() % 12);
        ASSERT_TRUE(s.rewind(pos - back).ok());
      } else {
        live.erase(live.begin() + static_cast<long>(rng() % live.size()));
      }
    }
    MemBytes want;
    for (const auto& s : live) {
      const MemBytes k = modelspec::session_kv_bytes(cfg, plan, s->position(), {64, kBlock});
      for (int c = 0; c < kMemCategoryCount; ++c) want.bytes[c] += k.bytes[c];
    }
    const MemoryReport r = e->memory_report();
    for (MemCategory c : {MemCategory::raw_kv, MemCategory::compressed_kv_r4, MemCategory::compressed_kv_rhc,
                          MemCategory::indexer_kv, MemCategory::compressor_state}) {
      ASSERT_EQ(r.host[c], want[c]) << "cycle " << cycle << " " << mem_category_name(c);
      ASSERT_LT(r.host[c], uint64_t{1} << 40) << "wrapped below zero";
    }
  }
  live.clear();
  const MemoryReport r = e->memory_report();
  for (MemCategory c : {MemCategory::raw_kv, MemCategory::compressed_kv_r4, MemCategory::compressed_kv_rhc,
                        MemCategory::indexer_kv, MemCategory::compressor_state})
    EXPECT_EQ(r.host[c], base[c]) << mem_category_name(c);
  EXPECT_EQ(r.host[MemCategory::weights], base[MemCategory::weights]);
  EXPECT_EQ(r.sessions.size(), 0u);
}
