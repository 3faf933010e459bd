// test_kvstore_engine.cpp — the store with a real engine (tiny synthetic model, CPU): a checkpoint
// saved by one session, found after a "restart" (new Store) by the longest-prefix lookup and
// restored into a fresh session, continues with exactly the logits of a cold run; a damaged
// checkpoint is a miss, never restored. This is the worker flow docs/KV_CACHE.md describes.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "../../common/temp_dir.h"
#include "ds4/engine.h"
#include "kvstore/kvstore.h"

namespace ds4::kvstore {
namespace {

// Stand-in for the chat renderer: one text segment per token id, so a token prefix renders to a
// byte prefix (the store itself never looks inside the text).
std::string render(std::span<const TokenId> ids) {
  std::string s;
  for (TokenId t : ids) s += "<" + std::to_string(t) + ">";
  return s;
}

struct TempDir : ds4::test_util::TempDir {
  TempDir() : ds4::test_util::TempDir("ds4_kvstore_engine") {}
};

class KvStoreEngine : public ::testing::Test {
 protected:
  void SetUp() override {
    EngineOptions o;
    o.model_path = DS4_TINY_GGUF;
    o.n_threads = 2;
    auto e = Engine::open(o);
    ASSERT_TRUE(e.ok()) << e.status().to_string();
    engine_ = std::move(e).value();
    V_ = engine_->info().n_vocab;
    std::mt19937 rng(9);
    tokens_.resize(300);
    for (auto& t : tokens_) t = static_cast<TokenId>(rng() % static_cast<uint32_t>(V_));
    tokens_[0] = 0;
  }
  StoreOptions store_options(const std::string& dir) const {
    StoreOptions so;
    so.dir = dir;
    std::string_view parts[] = {engine_->info().name, engine_->info().quant_summary, "tiny-seed1"};
    so.model.fingerprint = ModelIdentity::fingerprint_of(parts);
    so.model.quant_family = 0;
    so.model.engine_version = "ds4cpp-test";
    so.index_stride_bytes = 512;
    return so;
  }
  std::unique_ptr<Engine> engine_;
  int V_ = 0;
  std::vector<TokenId> tokens_;
};

TEST_F(KvStoreEngine, HitAfterRestartContinuesExactlyLikeAColdRun) {
  TempDir dir;
  // Cold run over the whole prompt.
  auto cold = engine_->new_session();
  ASSERT_TRUE(cold.ok());
  ASSERT_TRUE((*cold)->eval(tokens_).ok());
  const std::vector<float> cold_logits((*cold)->logits().begin(), (*cold)->logits().end());

  // An earlier request saved its first 200 tokens (e.g. an evict save).
  const std::span<const TokenId> prefix = std::span<const TokenId>(tokens_).first(200);
  uint64_t snapshot_bytes = 0;
  {
    auto store = Store::open(store_options(dir.path()));
    ASSERT_TRUE(store.ok()) << store.status().to_string();
    auto s = engine_->new_session();
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE((*s)->eval(prefix).ok());
    auto snap = (*s)->snapshot();
    ASSERT_TRUE(snap.ok()) << snap.status().to_string();
    snapshot_bytes = snap->bytes.size();
    const std::string text = render(prefix);
    SaveRequest req{text, (*s)->tokens(), (*s)->logits(), snap->bytes, SaveReason::evict,
                    static_cast<uint64_t>((*s)->max_context())};
    auto r = (*store)->save(req);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    ASSERT_TRUE(r->written);
    std::printf("[ info ] tiny model: snapshot %llu bytes for 200 tokens, entry file %llu bytes\n",
                static_cast<unsigned long long>(snapshot_bytes), static_cast<unsigned long long>(r->file_bytes));
  }

  // Restart: a new store and a fresh session see the full prompt.
  auto store = Store::open(store_options(dir.path()));
  ASSERT_TRUE(store.ok());
  const std::string prompt = render(tokens_);
  auto session = engine_->new_session();
  ASSERT_TRUE(session.ok());
  LookupRequest lr;
  lr.prompt = prompt;
  lr.min_tokens = 100;
  lr.max_ctx = static_cast<uint64_t>((*session)->max_context());
  lr.n_logits = static_cast<uint64_t>(V_);
  auto hit = (*store)->lookup(lr);
  ASSERT_TRUE(hit.ok());
  ASSERT_TRUE(hit->has_value());
  Entry& e = (*hit)->entry;
  ASSERT_EQ(e.tokens.size(), 200u);
  ASSERT_TRUE((*session)->restore(SessionSnapshot{std::move(e.payload)}).ok());
  EXPECT_EQ(std::vector<TokenId>((*session)->tokens().begin(), (*session)->tokens().end()), e.tokens);
  EXPECT_EQ(std::vector<float>((*session)->logits().begin(), (*session)->logits().end()), e.logits);
  // The worker tokenizes only the text after the cached bytes; here that is tokens 200..299.
  ASSERT_TRUE((*session)->eval(std::span<const TokenId>(tokens_).subspan(e.tokens.size())).ok());
  const std::vector<float> warm_logits((*session)->logits().begin(), (*session)->logits().end());
  EXPECT_EQ(warm_logits, cold_logits);
}

TEST_F(KvStoreEngine, DamagedCheckpointIsNeverRestored) {
  TempDir dir;
  auto store = Store::open(store_options(dir.path()));
  ASSERT_TRUE(store.ok());
  auto s = engine_->new_session();
  ASSERT_TRUE((*s)->eval(std::span<const TokenId>(tokens_).first(150)).ok());
  auto snap = (*s)->snapshot();
  ASSERT_TRUE(snap.ok());
  const std::string text = render((*s)->tokens());
  SaveRequest req{text, (*s)->tokens(), (*s)->logits(), snap->bytes, SaveReason::cold, 0};
  auto r = (*store)->save(req);
  ASSERT_TRUE(r.ok() && r->written);
  // Flip one byte in the middle of the snapshot payload.
  const std::string file = dir.path() + "/" + r->key + ".kv";
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(r->file_bytes - snap->bytes.size() / 2));
    char c = 0x55;
    f.write(&c, 1);
  }
  LookupRequest lr;
  const std::string prompt = render(tokens_);
  lr.prompt = prompt;
  auto hit = (*store)->lookup(lr);
  ASSERT_TRUE(hit.ok());
  EXPECT_FALSE(hit->has_value());
  EXPECT_FALSE(std::filesystem::exists(file));
}

}  // namespace
}  // namespace ds4::kvstore
