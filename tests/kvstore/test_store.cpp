// test_store.cpp — one process: save/lookup/hit after restart, longest prefix, compatibility
// (model, engine, quant flag, ctx, vocab), eviction under the budget, damaged files survived and
// removed, wiping the directory mid-run, the codec hook, list/verify/gc/clear, and the StoreStats
// counters (rejections by reason, files written/read, evictions) and usage() along the way.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <utime.h>

#include <filesystem>

#include "kv_test_util.h"

namespace ds4::kvstore {
namespace {

using namespace testing;

std::unique_ptr<Store> open_store(const StoreOptions& o) {
  auto s = Store::open(o);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return s.ok() ? std::move(s).value() : nullptr;
}

std::optional<Hit> find(Store& s, const std::string& prompt, uint64_t min_tokens = 1) {
  LookupRequest r;
  r.prompt = prompt;
  r.min_tokens = min_tokens;
  auto h = s.lookup(r);
  EXPECT_TRUE(h.ok()) << h.status().to_string();
  return h.ok() ? std::move(h).value() : std::nullopt;
}

TEST(KvStore, SaveThenHitAfterRestart) {
  TempDir dir;
  const std::string text = words(3000, 1);
  Checkpoint c = make_checkpoint(text);
  {
    auto s = open_store(options(dir.path()));
    auto r = s->save(c.request());
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_TRUE(r->written);
    EXPECT_EQ(r->key, to_hex(s->key_of(text)));
  }
  // No temp files left; exactly one entry, its sidecar and one index bucket.
  EXPECT_TRUE(dir.names_with(".kv").size() == 1);
  for (auto& n : dir.names()) EXPECT_NE(n.rfind("tmp.", 0), 0u) << n;
  // "Restart": a new Store object on the same directory.
  auto s2 = open_store(options(dir.path()));
  auto hit = find(*s2, text + " and the next user turn");
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->entry.text, text);
  EXPECT_TRUE(entry_matches(hit->entry));
  EXPECT_EQ(hit->hits, 1u);
  EXPECT_EQ(hit->entry.header.reason, SaveReason::cold);
  auto hit2 = find(*s2, text);  // the whole prompt cached: still a hit
  ASSERT_TRUE(hit2.has_value());
  EXPECT_EQ(hit2->hits, 2u);
  // Hit counts survive another restart.
  auto s3 = open_store(options(dir.path()));
  auto list = s3->list();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].meta.hits, 2u);
  EXPECT_EQ((*list)[0].header->n_tokens, c.tokens.size());
  // Nothing deleted on load (shared-directory rule).
  EXPECT_EQ(dir.names_with(".kv").size(), 1u);
}

TEST(KvStore, MissesWhenNotAPrefix) {
  TempDir dir;
  auto s = open_store(options(dir.path()));
  const std::string text = words(1000, 2);
  ASSERT_TRUE(s->save(make_checkpoint(text).request()).ok());
  std::string other = text;
  other[500] ^= 1;  // diverges inside the cached text
  EXPECT_FALSE(find(*s, other).has_value());
  EXPECT_FALSE(find(*s, text.substr(0, 999)).has_value());  // shorter than the cached text
  EXPECT_FALSE(find(*s, "").has_value());
}

TEST(KvStore, LongestPrefixWins) {
  TempDir dir;
  auto s = open_store(options(dir.path()));
  const std::string full = words(5000, 3);
  // Lengths inside one bucket, across buckets, exactly on a boundary (stride 256).
  for (size_t n : {300, 310, 512, 1024, 2999, 3000, 4097}) ASSERT_TRUE(s->save(make_checkpoint(full.substr(0, n)).request()).ok());
  auto expect_len = [&](size_t prompt_len, size_t want) {
    auto hit = find(*s, full.substr(0, prompt_len));
    if (want == 0) {
      EXPECT_FALSE(hit.has_value()) << prompt_len;
      return;
    }
    ASSERT_TRUE(hit.has_value()) << prompt_len;
    EXPECT_EQ(hit->entry.text.size(), want) << prompt_len;
    EXPECT_TRUE(entry_matches(hit->entry));
  };
  expect_len(5000, 4097);
  expect_len(4097, 4097);
  expect_len(4096, 3000);
  expect_len(3000, 3000);
  expect_len(2999, 2999);
  expect_len(2000, 1024);
  expect_len(1024, 1024);
  expect_len(600, 512);
  expect_len(309, 300);
  expect_len(299, 0);
  // A different continuation sharing the first 1500 bytes finds the 1024 entry.
  std::string fork = full.substr(0, 1500) + words(3000, 99);
  {
    auto hit = find(*s, fork);
    ASSERT_TRUE(hit.has_value());
    EXPECT_EQ(hit->entry.text.size(), 1024u);
  }
}

TEST(KvStore, MinTokensAndCtxAndVocabFilters) {
  TempDir dir;
  auto s = open_store(options(dir.path()));
  const std::string full = words(4000, 4);
  ASSERT_TRUE(s->save(make_checkpoint(full.substr(0, 1000)).request(SaveReason::cold, 4096)).ok());  // 250 tokens
  ASSERT_TRUE(s->save(make_checkpoint(full.substr(0, 3000)).request(SaveReason::cold, 65536)).ok());  // 750 tokens
  LookupRequest r;
  r.prompt = full;
  r.min_tokens = 1;
  auto h = s->lookup(r);
  ASSERT_TRUE(h.ok() && h->has_value());
  EXPECT_EQ((*h)->entry.text.size(), 3000u);
  r.max_ctx = 8192;  // the long one was written by a 64K session
  h = s->lookup(r);
  ASSERT_TRUE(h.ok() && h->has_value());
  EXPECT_EQ((*h)->entry.text.size(), 1000u);
  r.max_ctx = 0;
  r.min_tokens = 800;
  h = s->lookup(r);
  ASSERT_TRUE(h.ok());
  EXPECT_FALSE(h->has_value());
  r.min_tokens = 1;
  r.n_logits = 129280;  // our synthetic logits have 64 entries
  h = s->lookup(r);
  ASSERT_TRUE(h.ok());
  EXPECT_FALSE(h->has_value());
  // Counted by reason: the 64K entry once for ctx, both for vocab; the min-tokens filter works on
  // index records and opens nothing. Only the two hits were read in full.
  const StoreStats st = s->stats();
  EXPECT_EQ(st.rejected[static_cast<size_t>(Rejection::ctx)], 1u);
  EXPECT_EQ(st.rejected[static_cast<size_t>(Rejection::vocab)], 2u);
  EXPECT_EQ(st.rejected[static_cast<size_t>(Rejection::corrupt)], 0u);
  EXPECT_EQ(st.files_read, 2u);
  EXPECT_EQ(st.files_written, 2u);
}

TEST(KvStore, OtherModelOrEngineIsIgnoredNotDeleted) {
  TempDir dir;
  const std::string text = words(2000, 5);
  auto a = open_store(options(dir.path(), identity("model-a")));
  ASSERT_TRUE(a->save(make_checkpoint(text).request()).ok());
  auto b = open_store(options(dir.path(), identity("model-b")));
  EXPECT_FALSE(find(*b, text).has_value());
  auto e = open_store(options(dir.path(), identity("model-a", 2, "ds4cpp-0.2.0/snap2")));
  EXPECT_FALSE(find(*e, text).has_value());
  // Model B caches the same text under its own name: both coexist.
  ASSERT_TRUE(b->save(make_checkpoint(text, 4096, 64, 7).request()).ok());
  EXPECT_EQ(dir.names_with(".kv").size(), 2u);
  auto ha = find(*a, text);
  auto hb = find(*b, text);
  ASSERT_TRUE(ha && hb);
  EXPECT_TRUE(entry_matches(ha->entry));
  EXPECT_TRUE(entry_matches(hb->entry, 4096, 64, 7));
  EXPECT_NE(ha->key, hb->key);
}

TEST(KvStore, QuantVariantsSharedUnlessRejected) {
  TempDir dir;
  const std::string text = words(2000, 6);
  auto q2 = open_store(options(dir.path(), identity("flash", 2)));
  ASSERT_TRUE(q2->save(make_checkpoint(text).request()).ok());
  auto q4 = open_store(options(dir.path(), identity("flash", 4)));
  auto hit = find(*q4, text);
  ASSERT_TRUE(hit.has_value());  // ds4 default: different routed-expert quant accepted
  EXPECT_EQ(hit->entry.header.quant_family, 2u);
  StoreOptions strict = options(dir.path(), identity("flash", 4));
  strict.reject_different_quant = true;
  auto q4s = open_store(strict);
  EXPECT_FALSE(find(*q4s, text).has_value());
  EXPECT_EQ(q4s->stats().rejected[static_cast<size_t>(Rejection::quant)], 1u);
  EXPECT_EQ(q4->stats().rejected[static_cast<size_t>(Rejection::quant)], 0u);
  // The strict store replaces it with its own on save; then it hits.
  auto r = q4s->save(make_checkpoint(text).request());
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->written);
  auto hit4 = find(*q4s, text);
  ASSERT_TRUE(hit4.has_value());
  EXPECT_EQ(hit4->entry.header.quant_family, 4u);
}

TEST(KvStore, SavingTheSameTextTwiceKeepsOneFileAndItsHits) {
  TempDir dir;
  auto s = open_store(options(dir.path()));
  const std::string text = words(1500, 8);
  ASSERT_TRUE(s->save(make_checkpoint(text).request()).ok());
  ASSERT_TRUE(find(*s, text).has_value());
  auto r = s->save(make_checkpoint(text).request());
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->already_present);
  EXPECT_FALSE(r->written);
  auto hit = find(*s, text);
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->hits, 2u);
  EXPECT_EQ(dir.names_with(".kv").size(), 1u);
}

TEST(KvStore, EvictionKeepsUsageUnderTheBudget) {
  TempDir dir;
  StoreOptions o = options(dir.path());
  o.space_bytes = 200 * 1024;
  auto s = open_store(o);
  const std::string full = words(20000, 9);
  // ~33 KiB per entry: 20 saves of distinct prefixes need several evictions.
  for (int i = 1; i <= 20; ++i) {
    auto r = s->save(make_checkpoint(full.substr(0, 500 + 900 * i), 32 * 1024).request());
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_TRUE(r->written);
    auto u = s->usage_bytes();
    ASSERT_TRUE(u.ok());
    EXPECT_LE(*u, o.space_bytes) << "after save " << i;
    // The entry just written survives its own save.
    EXPECT_TRUE(std::filesystem::exists(dir.path() + "/" + r->key + ".kv"));
  }
  EXPECT_LT(dir.names_with(".kv").size(), 20u);
  // Every save and eviction counted; usage() sees what is left.
  const StoreStats st = s->stats();
  EXPECT_EQ(st.files_written, 20u);
  EXPECT_EQ(st.evicted_entries, 20u - dir.names_with(".kv").size());
  EXPECT_GT(st.evicted_bytes, st.evicted_entries * 32 * 1024);
  auto u = s->usage();
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->entries, dir.names_with(".kv").size());
  EXPECT_EQ(u->bytes, *s->usage_bytes());
  // Whatever survived is intact and findable.
  auto hit = find(*s, full);
  ASSERT_TRUE(hit.has_value());
  EXPECT_TRUE(entry_matches(hit->entry, 32 * 1024));
}

TEST(KvStore, EvictionPrefersColdShortEntriesAndSparesHitOnes) {
  TempDir dir;
  StoreOptions o = options(dir.path());
  uint64_t fake_now = 1'800'000'000;
  o.clock = [&] { return fake_now; };
  o.space_bytes = 1 << 30;
  auto s = open_store(o);
  const std::string full = words(8000, 10);
  std::vector<std::string> keys;
  for (int i = 0; i < 4; ++i) {
    auto r = s->save(make_checkpoint(full.substr(0, 1000 + 1000 * i), 16 * 1024).request());
    ASSERT_TRUE(r.ok());
    keys.push_back(r->key);
    fake_now += 10;
  }
  // Hit the shortest entry many times: it becomes the most valuable despite its size.
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(find(*s, full.substr(0, 1500)).has_value());
  auto gc = s->gc(3 * 18 * 1024);  // room for ~2-3 entries
  ASSERT_TRUE(gc.ok());
  EXPECT_GE(gc->evicted_entries, 1u);
  EXPECT_TRUE(std::filesystem::exists(dir.path() + "/" + keys[0] + ".kv"));   // hit 20 times
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/" + keys[1] + ".kv"));  // lowest score
  // Hit counts decay (6 h half-life): after 5 days the hot entry is just a short entry again.
  fake_now += 5 * 24 * 3600;
  auto gc2 = s->gc(2 * 18 * 1024);
  ASSERT_TRUE(gc2.ok());
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/" + keys[0] + ".kv"));
  EXPECT_TRUE(std::filesystem::exists(dir.path() + "/" + keys[3] + ".kv"));
}

TEST(KvStore, EntryLargerThanTheBudgetIsNotWritten) {
  TempDir dir;
  StoreOptions o = options(dir.path());
  o.space_bytes = 64 * 1024;
  auto s = open_store(o);
  auto r = s->save(make_checkpoint(words(1000, 11), 100 * 1024).request());
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->written);
  EXPECT_FALSE(r->skipped.empty());
  EXPECT_TRUE(dir.names_with(".kv").empty());
}

// Damage helpers: each returns the path of the only entry after damaging it.
std::string only_entry(const TempDir& dir) {
  auto kv = dir.names_with(".kv");
  EXPECT_EQ(kv.size(), 1u);
  return kv.empty() ? std::string() : dir.path() + "/" + kv[0];
}

TEST(KvStore, DamagedEntriesAreMissesAndRemoved) {
  struct Damage {
    const char* name;
    std::function<void(std::vector<uint8_t>&)> apply;
  };
  const std::vector<Damage> damages = {
      {"truncated", [](std::vector<uint8_t>& b) { b.resize(b.size() / 2); }},
      {"header only", [](std::vector<uint8_t>& b) { b.resize(300); }},
      {"empty", [](std::vector<uint8_t>& b) { b.clear(); }},
      {"payload bit flip", [](std::vector<uint8_t>& b) { b[b.size() - 5] ^= 0x10; }},
      {"token bit flip", [](std::vector<uint8_t>& b) { b[512 + 2048 + 8] ^= 1; }},
      {"header bit flip", [](std::vector<uint8_t>& b) { b[100] ^= 4; }},
      {"crafted length", [](std::vector<uint8_t>& b) {
         uint64_t huge = uint64_t{1} << 45;
         std::memcpy(b.data() + 136, &huge, 8);
         Digest d = sha256(b.data(), 480);
         std::memcpy(b.data() + 480, d.data(), 32);
       }},
      {"garbage", [](std::vector<uint8_t>& b) {
         for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>(i * 7);
       }},
  };
  for (const Damage& d : damages) {
    TempDir dir;
    auto s = open_store(options(dir.path()));
    const std::string text = words(2048, 12);
    ASSERT_TRUE(s->save(make_checkpoint(text).request()).ok());
    const std::string file = only_entry(dir);
    auto bytes = read_file(file);
    d.apply(bytes);
    write_file(file, bytes);
    std::vector<std::string> logs;
    StoreOptions o = options(dir.path());
    o.log = [&](const std::string& l) { logs.push_back(l); };
    auto s2 = open_store(o);
    EXPECT_FALSE(find(*s2, text + "tail").has_value()) << d.name;
    EXPECT_EQ(s2->stats().rejected[static_cast<size_t>(Rejection::corrupt)], 1u) << d.name;
    EXPECT_FALSE(std::filesystem::exists(file)) << d.name << ": damaged file not removed";
    bool logged = false;
    for (auto& l : logs) logged |= l.find("damaged") != std::string::npos;
    EXPECT_TRUE(logged) << d.name;
    // The cache keeps working: a fresh save of the same text hits again.
    ASSERT_TRUE(s2->save(make_checkpoint(text).request()).ok());
    auto hit = find(*s2, text);
    ASSERT_TRUE(hit.has_value()) << d.name;
    EXPECT_TRUE(entry_matches(hit->entry));
  }
}

TEST(KvStore, DamagedSidecarsAndIndexAreHarmless) {
  TempDir dir;
  auto s = open_store(options(dir.path()));
  const std::string full = words(3000, 13);
  ASSERT_TRUE(s->save(make_checkpoint(full.substr(0, 2000)).request()).ok());
  for (auto& m : dir.names_with(".meta")) write_file(dir.path() + "/" + m, {1, 2, 3});
  // Garbage appended to the index bucket (a torn record) must not hide the good record.
  for (auto& i : dir.names_with(".idx")) {
    auto b = read_file(dir.path() + "/" + i);
    b.insert(b.end(), 100, 0xee);
    write_file(dir.path() + "/" + i, b);
  }
  auto hit = find(*s, full);
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->hits, 1u);  // the damaged record read as "no statistics"
  // A new entry in the same bucket is still appended on a record boundary and found.
  ASSERT_TRUE(s->save(make_checkpoint(full.substr(0, 2010)).request()).ok());
  auto hit2 = find(*s, full);
  ASSERT_TRUE(hit2.has_value());
  EXPECT_EQ(hit2->entry.text.size(), 2010u);
}

TEST(KvStore, RenamedOrForeignFilesAreNotWrongAnswers) {
  TempDir dir;
  auto s = open_store(options(dir.path()));
  const std::string full = words(4000, 14);
  const std::string a = full.substr(0, 1000), b = words(1000, 15);
  ASSERT_TRUE(s->save(make_checkpoint(a).request()).ok());
  ASSERT_TRUE(s->save(make_checkpoint(b).request()).ok());
  // Someone copies entry b over entry a's name: a lookup for `full` must not return b's payload.
  const std::string ka = to_hex(s->key_of(a)), kb = to_hex(s->key_of(b));
  std::filesystem::copy_file(dir.path() + "/" + kb + ".kv", dir.path() + "/" + ka + ".kv",
                             std::filesystem::copy_options::overwrite_existing);
  EXPECT_FALSE(find(*s, full).has_value());
  EXPECT_EQ(s->stats().rejected[static_cast<size_t>(Rejection::mismatch)], 1u);
  // Unrelated files in the directory are left alone by everything, clear() included.
  write_file(dir.path() + "/README", {'h', 'i'});
  write_file(dir.path() + "/" + std::string(64, 'z') + ".kv", {'x'});
  auto v = s->verify(true);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->bad, 1u);
  ASSERT_TRUE(s->clear().ok());
  EXPECT_TRUE(std::filesystem::exists(dir.path() + "/README"));
  EXPECT_TRUE(dir.names_with(".kv").size() == 1);  // the non-hex name is not ours
}

TEST(KvStore, WipingTheDirectoryAtAnyTimeIsHarmless) {
  TempDir dir;
  const std::string sub = dir.path() + "/cache";
  auto s = open_store(options(sub));
  const std::string text = words(1500, 16);
  ASSERT_TRUE(s->save(make_checkpoint(text).request()).ok());
  std::filesystem::remove_all(sub);
  EXPECT_FALSE(find(*s, text).has_value());  // everything gone: a miss, not an error
  auto u = s->usage_bytes();
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(*u, 0u);
  auto r = s->save(make_checkpoint(text).request());  // recreates the directory
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(r->written);
  ASSERT_TRUE(find(*s, text).has_value());
  // Only the entry removed (sidecars and index left): a miss; then saved again.
  for (auto& k : std::vector<std::string>{to_hex(s->key_of(text)) + ".kv"}) std::filesystem::remove(sub + "/" + k);
  EXPECT_FALSE(find(*s, text).has_value());
  // Only the index removed: the entry exists but cannot be found; a re-save re-indexes it.
  ASSERT_TRUE(s->save(make_checkpoint(text).request()).ok());
  for (auto& n : std::filesystem::directory_iterator(sub))
    if (n.path().extension() == ".idx") std::filesystem::remove(n.path());
  EXPECT_FALSE(find(*s, text).has_value());
  auto again = s->save(make_checkpoint(text).request());
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->already_present);
  EXPECT_TRUE(find(*s, text).has_value());
}

TEST(KvStore, StaleTempFilesAndOrphansAreCollected) {
  TempDir dir;
  StoreOptions o = options(dir.path());
  uint64_t fake_now = static_cast<uint64_t>(std::time(nullptr));
  o.clock = [&] { return fake_now; };
  auto s = open_store(o);
  write_file(dir.path() + "/tmp.deadbeef.123.0000000000000000", std::vector<uint8_t>(1000, 1));
  write_file(dir.path() + "/" + std::string(64, 'a') + ".meta", std::vector<uint8_t>(64, 1));
  auto gc = s->gc(o.space_bytes);
  ASSERT_TRUE(gc.ok());
  EXPECT_EQ(gc->removed_temp, 0u);  // young: may be a live writer
  EXPECT_EQ(gc->removed_orphans, 1u);
  fake_now += 2 * 3600;
  gc = s->gc(o.space_bytes);
  ASSERT_TRUE(gc.ok());
  EXPECT_EQ(gc->removed_temp, 1u);
  EXPECT_TRUE(dir.names().size() <= 1);  // only .lock
}

TEST(KvStore, GcCompactsTheIndex) {
  TempDir dir;
  auto s = open_store(options(dir.path()));
  const std::string full = words(3000, 17);
  for (size_t n : {2000, 2010, 2020}) ASSERT_TRUE(s->save(make_checkpoint(full.substr(0, n)).request()).ok());
  std::filesystem::remove(dir.path() + "/" + to_hex(s->key_of(full.substr(0, 2010))) + ".kv");
  auto gc = s->gc(s->options().space_bytes);
  ASSERT_TRUE(gc.ok());
  EXPECT_EQ(gc->index_records_dropped, 1u);
  EXPECT_EQ(gc->removed_orphans, 1u);  // the removed entry's .meta
  auto hit = find(*s, full.substr(0, 2015));
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->entry.text.size(), 2000u);
}

// A payload codec plugged in through the hook: run-length coding of the zero bytes that
// dominate a sparse snapshot.
class ZeroRunCodec final : public PayloadCodec {
 public:
  uint32_t id() const override { return 0x5a52; }
  const char* name() const override { return "zero-run"; }
  Result<std::vector<uint8_t>> encode(std::span<const uint8_t> raw) const override {
    std::vector<uint8_t> out;
    for (size_t i = 0; i < raw.size();) {
      if (raw[i] == 0) {
        size_t n = 0;
        while (i < raw.size() && raw[i] == 0 && n < 255) ++i, ++n;
        out.push_back(0);
        out.push_back(static_cast<uint8_t>(n));
      } else {
        out.push_back(raw[i++]);
      }
    }
    return out;
  }
  Status decode(std::span<const uint8_t> stored, std::span<uint8_t> raw) const override {
    size_t o = 0;
    for (size_t i = 0; i < stored.size(); ++i) {
      if (stored[i] == 0) {
        if (i + 1 >= stored.size()) return invalid_data("zero-run: truncated run");
        size_t n = stored[++i];
        if (o + n > raw.size()) return invalid_data("zero-run: overflow");
        std::fill(raw.begin() + static_cast<std::ptrdiff_t>(o), raw.begin() + static_cast<std::ptrdiff_t>(o + n), 0);
        o += n;
      } else {
        if (o >= raw.size()) return invalid_data("zero-run: overflow");
        raw[o++] = stored[i];
      }
    }
    if (o != raw.size()) return invalid_data("zero-run: short output");
    return Status::Ok();
  }
};

TEST(KvStore, PayloadCodecHook) {
  TempDir dir;
  ZeroRunCodec codec;
  StoreOptions o = options(dir.path());
  o.codec = &codec;
  auto s = open_store(o);
  Checkpoint c = make_checkpoint(words(1200, 18), 64 * 1024);
  std::fill(c.payload.begin() + 1000, c.payload.end(), 0);  // mostly zeros
  auto r = s->save(c.request());
  ASSERT_TRUE(r.ok());
  EXPECT_LT(r->file_bytes, 8u * 1024);
  auto hit = find(*s, c.text);
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->entry.payload, c.payload);
  EXPECT_EQ(hit->entry.header.codec_id, codec.id());
  // A store without the codec skips the entry and leaves it in place for those who have it.
  auto plain = open_store(options(dir.path()));
  EXPECT_FALSE(find(*plain, c.text).has_value());
  EXPECT_EQ(dir.names_with(".kv").size(), 1u);
  auto v = plain->verify(true);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->removed, 0u);
}

TEST(KvStore, BadArguments) {
  TempDir dir;
  StoreOptions o = options(dir.path());
  o.dir = "";
  EXPECT_EQ(Store::open(o).status().code(), StatusCode::invalid_argument);
  o = options(dir.path());
  o.model.engine_version = std::string(40, 'v');
  EXPECT_EQ(Store::open(o).status().code(), StatusCode::invalid_argument);
  write_file(dir.path() + "/file", {1});
  o = options(dir.path() + "/file");
  EXPECT_FALSE(Store::open(o).ok());
  auto s = open_store(options(dir.path()));
  SaveRequest empty;
  EXPECT_EQ(s->save(empty).status().code(), StatusCode::invalid_argument);
}

}  // namespace
}  // namespace ds4::kvstore
