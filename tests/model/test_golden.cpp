// test_golden.cpp — engine logits vs golden per-position logits from HF transformers (MODEL.md §14.5).
//
// Golden sets live under tests/reference/<dir>/manifest.json (format: tests/reference/make_golden.py).
// The model is regenerated with ds4-gen from the manifest's generator keys and checked against the
// recorded sha256. The engine runs in reference numerics (no simulations, float32) with the shared-expert
// clamp the installed HF revision uses. Positions from the first discrete decision whose relative margin
// is below 1e-6 on are not compared (§14.6: a tie there makes every later position implementation-defined).
// Compared: one-shot prefill, chunked prefill (37 and 64) and prefill + token-by-token decode.
// Tolerance: max|Δ| ≤ 1e-4·max|logit| and identical argmax wherever the golden top-2 gap exceeds it.
#include <gtest/gtest.h>
#include <openssl/evp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model_fixture.h"

using namespace ds4;
using namespace ds4::test;
namespace fs = std::filesystem;

namespace {

template <typename T>
std::vector<T> read_bin(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::vector<char> b((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<T> v(b.size() / sizeof(T));
  std::memcpy(v.data(), b.data(), v.size() * sizeof(T));
  return v;
}

std::string sha256_file(const std::string& path, uint64_t offset) {
  std::ifstream f(path, std::ios::binary);
  std::vector<char> b((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (offset > b.size()) return "";
  unsigned char md[32];
  unsigned int len = 0;
  EVP_Digest(b.data() + offset, b.size() - offset, md, &len, EVP_sha256(), nullptr);
  char hex[65];
  for (int i = 0; i < 32; ++i) std::snprintf(hex + 2 * i, 3, "%02x", md[i]);
  return std::string(hex, 64);
}

std::vector<fs::path> golden_dirs() {
  std::vector<fs::path> out;
  std::error_code ec;
  if (!fs::exists(DS4_REFERENCE_DIR, ec)) return out;
  for (auto it = fs::recursive_directory_iterator(DS4_REFERENCE_DIR, ec); it != fs::recursive_directory_iterator();
       it.increment(ec))
    if (it->path().filename() == "manifest.json") out.push_back(it->path().parent_path());
  std::sort(out.begin(), out.end());
  return out;
}

// Regenerates the manifest's model with ds4-gen; returns its path or "" (with a message) on failure.
std::string model_for(const nlohmann::json& m, const fs::path& dir, std::string& why) {
  for (const char* local : {"model.gguf", "tiny.gguf"})
    if (fs::exists(dir / local)) return (dir / local).string();
  const auto& g = m.value("gguf_generator", nlohmann::json::object());
  if (!g.contains("ds4cpp.generator.profile") || !g.contains("ds4cpp.generator.seed")) {
    why = "manifest has no ds4cpp.generator keys";
    return "";
  }
  const std::string prof = g["ds4cpp.generator.profile"].get<std::string>();  // e.g. "tiny (f32)"
  const std::string name = prof.substr(0, prof.find(' '));
  const bool f16 = prof.find("(f16)") != std::string::npos;
  const uint64_t seed = g["ds4cpp.generator.seed"].get<uint64_t>();
  const std::string out = std::string(DS4_TEST_TMP) + "/golden-" + name + "-" + std::to_string(seed) +
                          (f16 ? "-f16" : "") + ".gguf";
  const std::string cmd = std::string(DS4_GEN_PATH) + " --profile " + name + " --seed " + std::to_string(seed) +
                          (f16 ? " --f16" : "") + " -o " + out + " > /dev/null";
  if (std::system(cmd.c_str()) != 0) {
    why = "ds4-gen failed: " + cmd;
    return "";
  }
  // The data section (tensor payloads) is what the logits depend on; metadata may legitimately change.
  if (m.contains("gguf_data_sha256") && m.contains("gguf_data_offset")) {
    if (sha256_file(out, m["gguf_data_offset"].get<uint64_t>()) != m["gguf_data_sha256"].get<std::string>()) {
      why = "regenerated model's tensor data does not match the manifest's gguf_data_sha256 (ds4-gen changed?)";
      return "";
    }
  } else if (m.contains("gguf_sha256") && sha256_file(out, 0) != m["gguf_sha256"].get<std::string>()) {
    why = "regenerated model does not match the manifest's sha256 (ds4-gen changed?)";
    return "";
  }
  return out;
}

}  // namespace

TEST(Golden, MatchesTransformersLogits) {
  const auto dirs = golden_dirs();
  if (dirs.empty()) GTEST_SKIP() << "no golden sets under " << DS4_REFERENCE_DIR;
  int compared_sets = 0;
  for (const auto& dir : dirs) {
    std::ifstream mf(dir / "manifest.json");
    nlohmann::json m = nlohmann::json::parse(mf, nullptr, false);
    ASSERT_FALSE(m.is_discarded()) << dir;
    if (!m.contains("stats") || !m.contains("lengths")) continue;  // an incomplete run
    std::string why;
    const std::string model = model_for(m, dir, why);
    ASSERT_FALSE(model.empty()) << dir << ": " << why;
    bool clamp = true;
    if (m.contains("revision_checks") && m["revision_checks"].contains("shared_expert_clamp") &&
        m["revision_checks"]["shared_expert_clamp"].is_boolean())
      clamp = m["revision_checks"]["shared_expert_clamp"].get<bool>();
    const auto lengths = m["lengths"].get<std::vector<int>>();
    const int max_len = *std::max_element(lengths.begin(), lengths.end());
    auto engine = open_engine({model, Numerics::reference, max_len, clamp});
    ASSERT_TRUE(engine);
    const int V = engine->info().n_vocab;
    for (size_t i = 0; i < lengths.size(); ++i) {
      const std::string base = "seq" + std::to_string(i);
      const auto ids = read_bin<int32_t>(dir / (base + ".ids.i32"));
      const auto gold = read_bin<float>(dir / (base + ".logits.f32"));
      const int S = static_cast<int>(ids.size());
      ASSERT_EQ(gold.size(), size_t(S) * V) << dir << " " << base;
      // First position with an ambiguous discrete decision (indexer cut-off or expert k vs k+1).
      int first_bad = S;
      for (const char* mfile : {".indexer_margin.f32", ".expert_margin.f32"}) {
        const auto marg = read_bin<float>(dir / (base + mfile));
        for (size_t k = 0; k < marg.size(); ++k)
          if (marg[k] < 1e-6f) first_bad = std::min(first_bad, static_cast<int>(k % S));
      }
      ASSERT_GT(first_bad, 0);
      const std::vector<TokenId> toks(ids.begin(), ids.end());
      const std::vector<float> gold_cut(gold.begin(), gold.begin() + size_t(first_bad) * V);
      struct Mode {
        const char* name;
        std::vector<float> logits;
      };
      std::vector<Mode> modes;
      modes.push_back({"one-shot prefill", logits_chunked(*engine, toks, {S})});
      modes.push_back({"chunked 37", logits_chunked(*engine, toks, {37})});
      modes.push_back({"chunked 64", logits_chunked(*engine, toks, {64})});
      {
        std::vector<float> all(size_t(S) * V), part;
        auto s = engine->new_session();
        const int pre = S / 3;
        ASSERT_TRUE((*s)->eval_all(std::span<const TokenId>(toks).first(pre), part).ok());
        std::copy(part.begin(), part.end(), all.begin());
        for (int t = pre; t < S; ++t) {
          ASSERT_TRUE((*s)->eval(std::span<const TokenId>(&toks[t], 1)).ok());
          std::copy((*s)->logits().begin(), (*s)->logits().end(), all.begin() + size_t(t) * V);
        }
        modes.push_back({"prefill + decode", std::move(all)});
      }
      for (auto& md : modes) {
        if (first_bad < S) {  // informative only: the tail after an exact tie is implementation-defined
          const Diff full = compare(md.logits, gold, V);
          std::printf("golden %s %s (%s): whole sequence incl. %d positions after a tie: max|Δ| = %.3g\n",
                      dir.filename().c_str(), base.c_str(), md.name, S - first_bad, full.max_abs);
        }
        md.logits.resize(size_t(first_bad) * V);
        const Diff d = compare(md.logits, gold_cut, V);
        const double tol = 1e-4 * d.max_ref;
        int argmax_bad = 0;
        for (int t = 0; t < first_bad; ++t) {
          const float* g = &gold[size_t(t) * V];
          const float* e = &md.logits[size_t(t) * V];
          std::vector<float> sorted(g, g + V);
          std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
          if (sorted[0] - sorted[1] <= 2 * tol) continue;  // golden argmax itself within tolerance
          if (std::max_element(g, g + V) - g != std::max_element(e, e + V) - e) ++argmax_bad;
        }
        std::printf("golden %s %s (%s): positions %d/%d compared, max|Δ| = %.3g = %.3g·max|logit|, argmax mismatches %d\n",
                    dir.filename().c_str(), base.c_str(), md.name, first_bad, S, d.max_abs,
                    d.max_abs / std::max(1e-30, d.max_ref), argmax_bad);
        EXPECT_LE(d.max_abs, tol) << dir << " " << base << " " << md.name;
        EXPECT_EQ(argmax_bad, 0) << dir << " " << base << " " << md.name;
      }
    }
    ++compared_sets;
  }
  if (compared_sets == 0) GTEST_SKIP() << "golden manifests found but none complete";
}
