// test_bench_tool.cpp — runs ds4-bench on the committed tiny-chat model (6 layers, ratios
// [0,0,4,16,4,16], D = 128, indexer D = 128, window 64) with small frontiers and checks what it
// writes: the CSV's columns and shape, the frontier schedule (linear and geometric), positive
// rates, the memory mode, the plots, and that the session's KV bytes per category follow MODEL.md
// §10.3's formulas for the model's own config (read from the GGUF, not hard-coded). Also: bad flags
// and files fail with a message and a non-zero exit, before any model is loaded.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "../common/temp_dir.h"
#include "bench_csv.h"
#include "gguf/gguf.h"
#include "modelspec/config.h"

namespace fs = std::filesystem;
using ds4::bench_test::Csv;
using ds4::bench_test::read_csv;
using ds4::bench_test::run_tool;

namespace {

const char* kCategories[] = {"weights",          "raw_kv",     "compressed_kv_r4", "compressed_kv_rhc",
                             "indexer_kv",       "compressor_state", "scratch",    "other"};

class BenchTool : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(DS4_TINY_CHAT)) GTEST_SKIP() << "model missing: " << DS4_TINY_CHAT;
    dir_ = tmp_.path();
    prompt_ = (dir_ / "prompt.txt").string();
    std::ofstream p(prompt_);
    // About 90 tokens: shorter than every frontier below, so the tool must repeat it.
    p << "In the beginning God created the heaven and the earth. And the earth was without form, and void; "
         "and darkness was upon the face of the deep. And the Spirit of God moved upon the face of the waters. "
         "And God said, Let there be light: and there was light.\n";
  }
  std::string path(const char* name) const { return (dir_ / name).string(); }

  ds4::test_util::TempDir tmp_{"ds4_bench_tool"};  // removed after each test
  fs::path dir_;
  std::string prompt_;
};

Csv load(const std::string& p) {
  Csv c;
  std::string err;
  EXPECT_TRUE(read_csv(p, c, err)) << err;
  return c;
}

void expect_header(const Csv& c) {
  const std::vector<std::string> lead = {"frontier",  "prefill_tokens", "prefill_tps",    "gen_tokens",
                                         "gen_tps",   "kv_bytes",       "snapshot_bytes", "rss_bytes",
                                         "device_used_bytes"};
  ASSERT_GE(c.columns.size(), lead.size());
  for (size_t i = 0; i < lead.size(); ++i) EXPECT_EQ(c.columns[i], lead[i]);
  for (const char* cat : kCategories) {
    EXPECT_TRUE(c.has(std::string("session_") + cat)) << cat;
    EXPECT_TRUE(c.has(std::string("process_") + cat)) << cat;
  }
  EXPECT_EQ(c.columns.size(), lead.size() + 2 * std::size(kCategories));
}

bool file_starts_with(const std::string& p, const std::string& magic) {
  std::ifstream f(p, std::ios::binary);
  std::string head(magic.size(), '\0');
  f.read(head.data(), static_cast<std::streamsize>(head.size()));
  return f && head == magic;
}

bool have_gnuplot() { return std::system("command -v gnuplot >/dev/null 2>&1") == 0; }

// MODEL.md §10.3 for this model: rows actually held at N tokens, in bytes (f32 state).
struct Formula {
  ds4::modelspec::ModelConfig cfg;
  double raw(int64_t n) const {
    return double(cfg.n_layer) * double(std::min<int64_t>(n, cfg.sliding_window)) * cfg.head_dim * 4;
  }
  double rows(int64_t n, bool csa, int64_t dim) const {
    double b = 0;
    for (uint32_t r : cfg.compress_ratios)
      if (r != 0 && (r == 4) == csa) b += double(n / r) * double(dim) * 4;
    return b;
  }
  double r4(int64_t n) const { return rows(n, true, cfg.head_dim); }
  double rhc(int64_t n) const { return rows(n, false, cfg.head_dim); }
  double indexer(int64_t n) const { return rows(n, true, cfg.indexer_head_dim); }
  // Allocation slack any sane growth scheme stays within: at most double the rows held, or the
  // rows held plus 256 per layer (a first block), whichever is larger.
  double upper(double used, int64_t n, bool csa, int64_t dim) const {
    double per_layer_block = 0;
    for (uint32_t r : cfg.compress_ratios)
      if (r != 0 && (r == 4) == csa) per_layer_block += 256.0 * double(dim) * 4;
    (void)n;
    return std::max(2 * used, used + per_layer_block);
  }
};

Formula tiny_formula() {
  auto f = ds4::gguf::File::open(DS4_TINY_CHAT);
  EXPECT_TRUE(f.ok()) << f.status().to_string();
  auto cfg = ds4::modelspec::config_from_gguf(**f);
  EXPECT_TRUE(cfg.ok()) << cfg.status().to_string();
  return Formula{*cfg};
}

TEST_F(BenchTool, LinearSweepCsvRatesKvAndPlot) {
  const std::string csv = path("bench.csv"), png = path("bench.png");
  std::vector<std::string> args = {"-m", DS4_TINY_CHAT, "--prompt-file", prompt_, "-t", "2", "--ctx-start", "64",
                                   "--ctx-max", "256", "--step-incr", "64", "-n", "4", "--csv", csv};
  const bool plot = have_gnuplot();
  if (plot) args.insert(args.end(), {"--plot", png});
  const auto r = run_tool(DS4_BENCH_BIN, args, dir_.string());
  ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
  EXPECT_NE(r.stderr_text.find("repeating"), std::string::npos) << r.stderr_text;
  const Csv c = load(csv);
  expect_header(c);
  ASSERT_EQ(c.rows.size(), 4u);
  const Formula fm = tiny_formula();
  for (size_t i = 0; i < c.rows.size(); ++i) {
    const int64_t n = 64 * int64_t(i + 1);
    SCOPED_TRACE("frontier " + std::to_string(n));
    EXPECT_EQ(c.at(i, "frontier"), double(n));
    EXPECT_EQ(c.at(i, "prefill_tokens"), 64.0);
    EXPECT_GT(c.at(i, "prefill_tps"), 0.0);
    EXPECT_EQ(c.at(i, "gen_tokens"), 4.0);
    EXPECT_GT(c.at(i, "gen_tps"), 0.0);
    EXPECT_GT(c.at(i, "snapshot_bytes"), 0.0);
    EXPECT_GT(c.at(i, "rss_bytes"), 0.0);
    EXPECT_EQ(c.at(i, "device_used_bytes"), 0.0);  // CPU backend
    // kv_bytes is the sum of the session's KV categories.
    const double kv = c.at(i, "session_raw_kv") + c.at(i, "session_compressed_kv_r4") +
                      c.at(i, "session_compressed_kv_rhc") + c.at(i, "session_indexer_kv") +
                      c.at(i, "session_compressor_state");
    EXPECT_EQ(c.at(i, "kv_bytes"), kv);
    // Per category: at least the rows held (§10.3), at most the allocation slack.
    EXPECT_GE(c.at(i, "session_raw_kv"), fm.raw(n));
    EXPECT_GE(c.at(i, "session_compressed_kv_r4"), fm.r4(n));
    EXPECT_LE(c.at(i, "session_compressed_kv_r4"), fm.upper(fm.r4(n), n, true, fm.cfg.head_dim));
    EXPECT_GE(c.at(i, "session_indexer_kv"), fm.indexer(n));
    EXPECT_LE(c.at(i, "session_indexer_kv"), fm.upper(fm.indexer(n), n, true, fm.cfg.indexer_head_dim));
    EXPECT_GE(c.at(i, "session_compressed_kv_rhc"), fm.rhc(n));
    EXPECT_LE(c.at(i, "session_compressed_kv_rhc"), fm.upper(fm.rhc(n), n, false, fm.cfg.head_dim));
    EXPECT_GT(c.at(i, "session_compressor_state"), 0.0);
    // The process holds at least the session, plus the weights.
    EXPECT_GT(c.at(i, "process_weights"), 0.0);
    for (const char* cat : {"raw_kv", "compressed_kv_r4", "compressed_kv_rhc", "indexer_kv", "compressor_state"})
      EXPECT_GE(c.at(i, std::string("process_") + cat), c.at(i, std::string("session_") + cat)) << cat;
    if (i > 0) {
      // The raw window and the compressor frontiers are fixed once N >= window; compressed rows only grow.
      EXPECT_EQ(c.at(i, "session_raw_kv"), c.at(0, "session_raw_kv"));
      EXPECT_EQ(c.at(i, "session_compressor_state"), c.at(0, "session_compressor_state"));
      EXPECT_GE(c.at(i, "kv_bytes"), c.at(i - 1, "kv_bytes"));
      EXPECT_GE(c.at(i, "snapshot_bytes"), c.at(i - 1, "snapshot_bytes"));
    }
  }
  // Growth 64 -> 256 tokens covers at least the rows the formula adds.
  const double grown = c.at(3, "kv_bytes") - c.at(0, "kv_bytes");
  const double formula_growth =
      (fm.r4(256) + fm.indexer(256) + fm.rhc(256)) - (fm.r4(64) + fm.indexer(64) + fm.rhc(64));
  EXPECT_GT(formula_growth, 0.0);
  EXPECT_GE(grown + (fm.upper(fm.r4(64), 64, true, fm.cfg.head_dim) - fm.r4(64)) +
                (fm.upper(fm.indexer(64), 64, true, fm.cfg.indexer_head_dim) - fm.indexer(64)) +
                (fm.upper(fm.rhc(64), 64, false, fm.cfg.head_dim) - fm.rhc(64)),
            formula_growth);
  // The snapshot holds every compressed row, so it grows at least by the rows added.
  EXPECT_GE(c.at(3, "snapshot_bytes") - c.at(0, "snapshot_bytes"), formula_growth);
  if (plot) {
    EXPECT_TRUE(file_starts_with(png, "\x89PNG")) << png;
  }
}

TEST_F(BenchTool, GeometricSweep) {
  const std::string csv = path("geo.csv");
  const auto r = run_tool(DS4_BENCH_BIN,
                          {"-m", DS4_TINY_CHAT, "--prompt-file", prompt_, "-t", "2", "--ctx-start", "32",
                           "--ctx-max", "300", "--step-mul", "2", "--tokens", "2", "--chunk", "16", "--csv", csv},
                          dir_.string());
  ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
  const Csv c = load(csv);
  expect_header(c);
  ASSERT_EQ(c.rows.size(), 4u);  // 32, 64, 128, 256 (512 > 300)
  const double want[] = {32, 64, 128, 256};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(c.at(i, "frontier"), want[i]);
    EXPECT_EQ(c.at(i, "prefill_tokens"), i == 0 ? 32.0 : want[i] / 2);
    EXPECT_EQ(c.at(i, "gen_tokens"), 2.0);
    EXPECT_GT(c.at(i, "gen_tps"), 0.0);
  }
}

TEST_F(BenchTool, MemoryModeNoDecodeAndSvgPlot) {
  const std::string csv = path("mem.csv"), svg = path("mem.svg");
  std::vector<std::string> args = {"-m",        DS4_TINY_CHAT, "--chat-prompt-file", prompt_, "-sys", "Be brief.",
                                   "-t",        "2",           "--memory",          "--ctx-start", "100",
                                   "--ctx-max", "300",         "--step-incr",       "100",  "--numerics",
                                   "reference", "--csv",       csv};
  const bool plot = have_gnuplot();
  if (plot) args.insert(args.end(), {"--plot", svg});
  const auto r = run_tool(DS4_BENCH_BIN, args, dir_.string());
  ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
  const Csv c = load(csv);
  expect_header(c);
  ASSERT_EQ(c.rows.size(), 3u);
  const Formula fm = tiny_formula();
  for (size_t i = 0; i < 3; ++i) {
    const int64_t n = 100 * int64_t(i + 1);
    EXPECT_EQ(c.at(i, "frontier"), double(n));
    EXPECT_EQ(c.at(i, "gen_tokens"), 0.0);  // --memory: no decode unless -n is given
    EXPECT_EQ(c.at(i, "gen_tps"), 0.0);
    EXPECT_EQ(c.at(i, "snapshot_bytes"), 0.0);
    EXPECT_GT(c.at(i, "rss_bytes"), 0.0);
    EXPECT_GE(c.at(i, "session_compressed_kv_r4"), fm.r4(n));
    EXPECT_GE(c.at(i, "session_indexer_kv"), fm.indexer(n));
    EXPECT_GE(c.at(i, "session_compressed_kv_rhc"), fm.rhc(n));
  }
  if (plot) {
    EXPECT_TRUE(file_starts_with(svg, "<?xml") || file_starts_with(svg, "<svg")) << svg;
  }
}

// Bad flags and files: a message naming the problem and a non-zero exit, never a crash.
TEST_F(BenchTool, ClearErrors) {
  struct Case {
    std::vector<std::string> args;
    std::string needle;
  };
  const std::string missing = path("does-not-exist.txt");
  const std::string empty = path("empty.txt");
  std::ofstream(empty).close();
  const std::vector<Case> cases = {
      {{"-m", DS4_TINY_CHAT, "--prompt-file", missing, "--ctx-start", "16", "--ctx-max", "32"}, "cannot read"},
      {{"-m", DS4_TINY_CHAT, "--prompt-file", prompt_, "--ctx-start", "512", "--ctx-max", "256"}, "--ctx-max"},
      {{"-m", DS4_TINY_CHAT, "--prompt-file", prompt_, "--ctx-start", "64", "--ctx-max", "256", "--ctx-alloc", "200"},
       "--ctx-alloc"},
      {{"-m", DS4_TINY_CHAT, "--prompt-file", prompt_, "--chat-prompt-file", prompt_}, "excludes"},
      {{"-m", DS4_TINY_CHAT}, "--prompt-file"},
      {{"-m", DS4_TINY_CHAT, "--prompt-file", prompt_, "--step-mul", "0.5"}, "--step-mul"},
      {{"-m", DS4_TINY_CHAT, "--prompt-file", prompt_, "--backend", "metal"}, "--backend"},
      {{"-m", DS4_TINY_CHAT, "--prompt-file", prompt_, "--plot", path("x.png")}, "--csv"},
      {{"-m", path("no-model.gguf"), "--prompt-file", prompt_, "--ctx-start", "16", "--ctx-max", "32"},
       "no-model.gguf"},
      {{"-m", DS4_TINY_CHAT, "--prompt-file", empty, "--ctx-start", "16", "--ctx-max", "32"}, "is empty"},
      // The tiny-chat model's context_length is 1,048,576 tokens.
      {{"-m", DS4_TINY_CHAT, "--prompt-file", prompt_, "--ctx-start", "1024", "--ctx-max", "2000000", "-n", "0"},
       "model's context"},
  };
  for (const auto& k : cases) {
    std::string joined;
    for (const auto& a : k.args) joined += a + " ";
    SCOPED_TRACE(joined);
    const auto r = run_tool(DS4_BENCH_BIN, k.args, dir_.string());
    EXPECT_NE(r.exit_code, 0);
    EXPECT_LT(r.exit_code, 128);  // not killed by a signal
    EXPECT_NE(r.stderr_text.find(k.needle), std::string::npos) << r.stderr_text;
  }
}

}  // namespace
