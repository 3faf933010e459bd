// test_multiprocess.cpp — several processes (fork) on one directory under bounded load: every hit
// is the right content, no file is corrupt afterwards, hit counts from all processes add up,
// usage ends under the shared budget, and a process wiping the directory meanwhile breaks nothing.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include "kv_test_util.h"

namespace ds4::kvstore {
namespace {

using namespace testing;

constexpr size_t kPayload = 24 * 1024;

// Child exit codes (0 = fine).
enum Failure { kOpen = 10, kLookupError, kWrongAnswer, kSaveError, kHitsWrong };

std::string conversation(int c) {
  // A shared "system prompt" head, then a per-conversation history.
  return words(1200, 1000) + words(6000, 2000 + static_cast<uint64_t>(c));
}

// Writes how many lookups hit into counts_dir/<id> (outside the cache directory).
int worker(const std::string& dir, int id, int iterations, uint64_t budget, bool tolerate_save_errors,
           const std::string& counts_dir) {
  StoreOptions o = options(dir);
  o.space_bytes = budget;
  o.fsync = true;  // the real publish protocol
  int hits = 0;
  auto s = Store::open(o);
  if (!s.ok()) return kOpen;
  std::mt19937_64 rng(777 + static_cast<uint64_t>(id));
  for (int i = 0; i < iterations; ++i) {
    const std::string conv = conversation(static_cast<int>(rng() % 6));
    const size_t len = 1300 + rng() % (conv.size() - 1300);
    LookupRequest r;
    r.prompt = std::string_view(conv).substr(0, len);
    auto hit = (*s)->lookup(r);
    if (!hit.ok()) return kLookupError;
    if (hit->has_value()) {
      ++hits;
      const Entry& e = (*hit)->entry;
      if (e.text.size() > len || conv.compare(0, e.text.size(), e.text) != 0 || !entry_matches(e, kPayload))
        return kWrongAnswer;
    }
    // Save a prefix a little shorter than the prompt (like a cold save trimmed to a boundary).
    const size_t save_len = len - rng() % 200;
    auto saved = (*s)->save(make_checkpoint(conv.substr(0, save_len), kPayload).request());
    if (!saved.ok() && !tolerate_save_errors) return kSaveError;
  }
  std::string n = std::to_string(hits);
  write_file(counts_dir + "/" + std::to_string(id), std::vector<uint8_t>(n.begin(), n.end()));
  return 0;
}

int total_hits(const std::string& counts_dir) {
  int total = 0;
  for (const auto& e : std::filesystem::directory_iterator(counts_dir)) {
    auto b = read_file(e.path().string());
    total += std::atoi(std::string(b.begin(), b.end()).c_str());
  }
  return total;
}

std::vector<int> run_children(int n, const std::function<int(int)>& body) {
  std::vector<pid_t> pids;
  for (int i = 0; i < n; ++i) {
    pid_t pid = fork();
    if (pid == 0) _exit(body(i));
    pids.push_back(pid);
  }
  std::vector<int> codes;
  for (pid_t p : pids) {
    int st = 0;
    waitpid(p, &st, 0);
    codes.push_back(WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
  }
  return codes;
}

TEST(KvStoreProcesses, ConcurrentWritersAndReadersShareOneDirectory) {
  TempDir dir, counts;
  const uint64_t budget = 400 * 1024;  // ~14 entries of ~28 KiB: constant eviction pressure
  auto codes = run_children(4, [&](int id) { return worker(dir.path(), id, 40, budget, false, counts.path()); });
  for (size_t i = 0; i < codes.size(); ++i) EXPECT_EQ(codes[i], 0) << "worker " << i;

  auto s = Store::open(options(dir.path()));
  ASSERT_TRUE(s.ok());
  // No temp file left behind, nothing corrupt.
  for (auto& n : dir.names()) EXPECT_NE(n.rfind("tmp.", 0), 0u) << n;
  auto v = (*s)->verify(false);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->bad, 0u);
  EXPECT_GT(v->ok, 0u);
  // Over budget by at most what readers held at the last eviction; one gc brings it under.
  auto before = (*s)->usage_bytes();
  ASSERT_TRUE(before.ok());
  EXPECT_LE(*before, budget + 2 * (kPayload + 8 * 1024));
  auto gc = (*s)->gc(budget);
  ASSERT_TRUE(gc.ok());
  auto after = (*s)->usage_bytes();
  ASSERT_TRUE(after.ok());
  EXPECT_LE(*after, budget);
  const int hits = total_hits(counts.path());
  EXPECT_GT(hits, 20);  // the processes really found each other's (and their own) entries
  std::printf("[ info ] 4 processes x 40 lookups+saves: %d hits, %llu entries survive, %llu bytes (budget %llu)\n",
              hits, static_cast<unsigned long long>(v->ok), static_cast<unsigned long long>(*before),
              static_cast<unsigned long long>(budget));
}

TEST(KvStoreProcesses, HitCountsFromAllProcessesAddUp) {
  TempDir dir;
  const std::string text = words(3000, 31);
  {
    auto s = Store::open(options(dir.path()));
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE((*s)->save(make_checkpoint(text, kPayload).request()).ok());
  }
  constexpr int kProcs = 4, kHits = 25;
  auto codes = run_children(kProcs, [&](int) {
    auto s = Store::open(options(dir.path()));
    if (!s.ok()) return static_cast<int>(kOpen);
    for (int i = 0; i < kHits; ++i) {
      LookupRequest r;
      r.prompt = text;
      auto h = (*s)->lookup(r);
      if (!h.ok()) return static_cast<int>(kLookupError);
      if (!h->has_value() || !entry_matches((*h)->entry, kPayload)) return static_cast<int>(kWrongAnswer);
    }
    return 0;
  });
  for (int c : codes) EXPECT_EQ(c, 0);
  auto s = Store::open(options(dir.path()));
  ASSERT_TRUE(s.ok());
  auto list = (*s)->list();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].meta.hits, static_cast<uint64_t>(kProcs * kHits));
}

TEST(KvStoreProcesses, WipingTheDirectoryMidRun) {
  TempDir dir, counts;
  const std::string sub = dir.path() + "/shared";
  const uint64_t budget = 1 << 20;
  auto codes = run_children(4, [&](int id) {
    if (id == 3) {  // the wiper: rm -rf the whole directory, or clear its files, over and over
      for (int i = 0; i < 60; ++i) {
        usleep(3000);
        std::error_code ec;
        if (i % 2) {
          std::filesystem::remove_all(sub, ec);
        } else if (auto s = Store::open(options(sub)); s.ok()) {
          (void)(*s)->clear();
        }
      }
      return 0;
    }
    return worker(sub, id, 40, budget, /*tolerate_save_errors=*/true, counts.path());
  });
  for (size_t i = 0; i < codes.size(); ++i) EXPECT_EQ(codes[i], 0) << "process " << i;
  std::printf("[ info ] 3 processes x 40 lookups+saves under a wiper: %d hits\n", total_hits(counts.path()));
  // Whatever remains is intact.
  if (std::filesystem::exists(sub)) {
    auto s = Store::open(options(sub));
    ASSERT_TRUE(s.ok());
    auto v = (*s)->verify(false);
    ASSERT_TRUE(v.ok());
    EXPECT_EQ(v->bad, 0u);
  }
}

}  // namespace
}  // namespace ds4::kvstore
