// test_cuda_snapshot.cpp — a session's snapshot does not depend on the step-graph history of the engine
// it ran on: the same tokens evaluated by a session whose decode steps ran eagerly and were recorded (the
// first session of a fresh engine) and by one whose steps replayed those graphs (the next session) leave the
// same snapshot bytes after the prompt and after every decode step, and the same bytes as an engine with
// graphs off. Snapshots feed the disk KV cache and prefix sharing, so "logits agree" is not enough.
// On a difference the test names the tensor: it walks the snapshot layout (runtime/snapshot.cpp, version 1)
// and prints, per differing section (layer, raw / comp / frontier / indexer rows), how many floats differ
// and the first one (row, column, both values).
// Deliberately not here: the greedy paths (test_cuda_greedy.cpp), restore (tests/runtime).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "ds4/engine.h"
#include "engine_graph_stats.h"
#include "model_data_path.h"
#include "model_fixture.h"

using namespace ds4;
using namespace ds4::test;

namespace {

// One named row array of a version-1 snapshot: `rows` rows of `width` floats at byte `off`.
struct Section {
  std::string name;
  size_t off = 0;
  int64_t rows = 0, width = 0;
};

// The sections of a version-1 snapshot (runtime/snapshot.cpp's layout), the logits as one row; empty when
// the bytes do not parse to exactly their length.
std::vector<Section> snapshot_sections(const std::vector<uint8_t>& b) {
  std::vector<Section> out;
  size_t at = 8;
  auto u32 = [&] {
    uint32_t v = 0;
    if (at + 4 <= b.size()) std::memcpy(&v, &b[at], 4);
    at += 4;
    return v;
  };
  auto u64 = [&] {
    uint64_t v = 0;
    if (at + 8 <= b.size()) std::memcpy(&v, &b[at], 8);
    at += 8;
    return v;
  };
  auto rows = [&](const std::string& name, int64_t n, int64_t width) {
    out.push_back({name, at, n, width});
    at += static_cast<size_t>(n * width * 4);
  };
  if (u32() != 1) return {};
  const int64_t n_layer = u32(), D = u32(), ID = u32(), V = u32(), W = u32();
  const int64_t T = static_cast<int64_t>(u64());
  at += static_cast<size_t>(T * 4);
  if (T > 0) rows("logits", 1, V);
  for (int64_t l = 0; l < n_layer && at <= b.size(); ++l) {
    const int64_t r = u32();
    const std::string L = "layer " + std::to_string(l) + " ";
    rows(L + "raw", std::min(T, W), D);
    if (r == 0) continue;
    const int64_t n_comp = static_cast<int64_t>(u64());
    const bool csa = r == 4;
    rows(L + "comp", n_comp, D);
    const int64_t nf = T - std::max<int64_t>(0, T / r * r - (csa ? r : 0));
    rows(L + "frontier kv", nf, (csa ? 2 : 1) * D);
    rows(L + "frontier score", nf, (csa ? 2 : 1) * D);
    if (!csa) continue;
    rows(L + "indexer rows", n_comp, ID);
    rows(L + "indexer frontier kv", nf, 2 * ID);
    rows(L + "indexer frontier score", nf, 2 * ID);
  }
  if (at != b.size()) return {};
  return out;
}

// Prints what differs between two snapshots of the same layout, section by section; true when equal.
bool report_difference(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b, const std::string& what) {
  if (a == b) return true;
  const auto sa = snapshot_sections(a);
  if (a.size() != b.size() || sa.empty()) {
    size_t k = 0;
    while (k < a.size() && k < b.size() && a[k] == b[k]) ++k;
    const auto sb = snapshot_sections(b);
    std::printf("SNAPDIFF %s: sizes %zu / %zu, first byte difference at %zu (layout %s)\n", what.c_str(), a.size(),
                b.size(), k, sa.empty() || sb.empty() ? "not parsed" : "parsed");
    for (size_t i = 0; i < sa.size() && i < sb.size(); ++i)  // which row arrays differ in length
      if (sa[i].rows != sb[i].rows)
        std::printf("SNAPDIFF %s: %s has %lld / %lld rows\n", what.c_str(), sa[i].name.c_str(),
                    static_cast<long long>(sa[i].rows), static_cast<long long>(sb[i].rows));
    return false;
  }
  size_t k = 0;
  while (a[k] == b[k]) ++k;
  if (k < sa.front().off) std::printf("SNAPDIFF %s: header / tokens differ at byte %zu\n", what.c_str(), k);
  for (const Section& s : sa) {
    int64_t n = 0, first = -1;
    for (int64_t i = 0; i < s.rows * s.width; ++i)
      if (std::memcmp(&a[s.off + 4 * i], &b[s.off + 4 * i], 4) != 0) {
        ++n;
        if (first < 0) first = i;
      }
    if (n == 0) continue;
    float fa, fb;
    uint32_t ua, ub;
    std::memcpy(&fa, &a[s.off + 4 * first], 4);
    std::memcpy(&fb, &b[s.off + 4 * first], 4);
    std::memcpy(&ua, &fa, 4);
    std::memcpy(&ub, &fb, 4);
    int64_t rows_differing = 0;
    for (int64_t r = 0; r < s.rows; ++r)
      rows_differing += std::memcmp(&a[s.off + 4 * r * s.width], &b[s.off + 4 * r * s.width], 4 * s.width) != 0;
    std::printf("SNAPDIFF %s: %s (byte %zu, %lld x %lld): %lld floats in %lld rows differ, first row %lld col %lld: "
                "%.9g (%08x) vs %.9g (%08x)\n",
                what.c_str(), s.name.c_str(), s.off, static_cast<long long>(s.rows), static_cast<long long>(s.width),
                static_cast<long long>(n), static_cast<long long>(rows_differing),
                static_cast<long long>(first / s.width), static_cast<long long>(first % s.width), fa, ua, fb, ub);
  }
  return false;
}

std::unique_ptr<Engine> open_engine(const std::string& path, bool graphs, bool branches) {
  EngineOptions o;
  o.model_path = path;
  o.backend = BackendKind::cuda;
  o.max_chunk = 128;
  o.cuda_graphs = graphs;
  o.cuda_branches = branches;
  auto er = Engine::open(o);
  EXPECT_TRUE(er.ok()) << er.status().to_string();
  return er.ok() ? std::move(er).value() : nullptr;
}

// Snapshots of one session after `prompt` and after each of `decode` one-token steps.
std::vector<std::vector<uint8_t>> snapshots_along(Engine& e, const std::vector<TokenId>& prompt,
                                                  const std::vector<TokenId>& decode) {
  std::vector<std::vector<uint8_t>> out;
  auto s = e.new_session().value();
  auto take = [&] {
    auto snap = s->snapshot();
    EXPECT_TRUE(snap.ok()) << snap.status().to_string();
    out.push_back(snap.ok() ? snap->bytes : std::vector<uint8_t>{});
  };
  EXPECT_TRUE(s->eval(prompt).ok());
  take();
  for (const TokenId t : decode) {
    EXPECT_TRUE(s->eval(std::span<const TokenId>(&t, 1)).ok());
    take();
  }
  return out;
}

// Compares two runs step by step; prints the differing sections of the first three differing steps.
void expect_same_snapshots(const std::vector<std::vector<uint8_t>>& a, const std::vector<std::vector<uint8_t>>& b,
                           const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  int reported = 0, differing = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const std::string at = what + " step " + std::to_string(i);
    if (a[i] == b[i]) continue;
    ++differing;
    if (reported++ < 3) report_difference(a[i], b[i], at);
    ADD_FAILURE() << at << ": snapshots differ";
  }
  std::printf("SNAPSHOTS %-44s %zu steps: %d differ\n", what.c_str(), a.size(), differing);
}

void graph_history_snapshots(const std::string& path, bool branches = true) {
  if (backend::cuda::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "missing " << path;
  const std::string name = std::filesystem::path(path).filename().string() + (branches ? "" : " one lane");
  auto eager = open_engine(path, false, branches);
  auto graphed = open_engine(path, true, branches);
  ASSERT_TRUE(eager && graphed);
  const int vocab = eager->info().n_vocab;
  const auto prompt = random_tokens(40, vocab, 9);
  const auto decode = random_tokens(24, vocab, 10);
  const auto ref = snapshots_along(*eager, prompt, decode);
  const auto first = snapshots_along(*graphed, prompt, decode);   // eager, then recorded steps
  const auto second = snapshots_along(*graphed, prompt, decode);  // replayed steps
  EXPECT_GT(engine_graph_stats(*graphed).replayed, 0u);
  expect_same_snapshots(ref, first, name + " eager vs first graphed");
  expect_same_snapshots(first, second, name + " first vs replayed");
  expect_same_snapshots(ref, second, name + " eager vs replayed");
}

}  // namespace

TEST(CudaSnapshot, TinyGraphHistoryLeavesTheSameBytes) {
  graph_history_snapshots(model_data_path("tiny-seed1.gguf", DS4_TINY_GGUF));
}
TEST(CudaSnapshot, TinyQuantGraphHistoryLeavesTheSameBytes) {
  graph_history_snapshots(model_data_path("tiny-quant-seed1.gguf", DS4_TINY_QUANT_GGUF));
}
TEST(CudaSnapshot, TinyOneLaneGraphHistoryLeavesTheSameBytes) {
  graph_history_snapshots(model_data_path("tiny-seed1.gguf", DS4_TINY_GGUF), false);  // concurrent branches off
}
