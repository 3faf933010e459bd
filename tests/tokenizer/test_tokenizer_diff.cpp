// test_tokenizer_diff.cpp — differential test: ds4cpp's tokenizer vs the JS oracle
// (tests/js/tokenizer_oracle.js = @lenml/tokenizers with the DeepSeek tokenizer.json) over the
// corpus built by scripts/make_corpus.py (> 5 MB: prose, code, CJK, Korean, Italian, Russian,
// emoji/ZWJ, numbers, odd whitespace, random code points, invalid UTF-8). Ids must be identical
// for every document, in plain mode (no added-token matching) and with all 1283 V4 added tokens.
//
// Both sides see the same text: each document's bytes go through WHATWG UTF-8 replacement
// (utf8_sanitize here, TextDecoder there), because JS strings cannot hold invalid UTF-8.
// Paths come from the build (compile definitions); node runs the oracle as a child process.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "full_vocab.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/pretokenizer_regex.h"
#include "tokenizer/utf8.h"

namespace ds4::tokenizer {
namespace {

using testing::full_vocab;
using testing::read_all;
using testing::source_path;

struct Doc {
  std::string name;
  std::string bytes;
};

std::vector<Doc> read_corpus(const std::string& dir) {
  const std::string bin = read_all(dir + "/corpus.bin");
  std::istringstream idx(read_all(dir + "/corpus.idx"));
  std::vector<Doc> docs;
  size_t off, len;
  std::string name;
  while (idx >> off >> len >> name) docs.push_back({name, bin.substr(off, len)});
  return docs;
}

// u32le count + i32le ids per document.
std::vector<std::vector<TokenId>> read_ids(const std::string& path, size_t n_docs) {
  const std::string b = read_all(path);
  std::vector<std::vector<TokenId>> out;
  size_t p = 0;
  auto u32 = [&](size_t at) {
    uint32_t v;
    std::memcpy(&v, b.data() + at, 4);
    return v;
  };
  while (p + 4 <= b.size() && out.size() < n_docs) {
    const uint32_t n = u32(p);
    p += 4;
    if (p + size_t(n) * 4 > b.size()) break;
    std::vector<TokenId> ids(n);
    std::memcpy(ids.data(), b.data() + p, size_t(n) * 4);
    p += size_t(n) * 4;
    out.push_back(std::move(ids));
  }
  return out;
}

std::string describe_mismatch(const BpeTokenizer& tok, const std::vector<TokenId>& ours,
                              const std::vector<TokenId>& theirs) {
  size_t i = 0;
  while (i < ours.size() && i < theirs.size() && ours[i] == theirs[i]) ++i;
  std::ostringstream os;
  os << "first difference at id " << i << " of " << ours.size() << " (ours) / " << theirs.size() << " (oracle)\n";
  const size_t from = i >= 4 ? i - 4 : 0;
  auto show = [&](const char* who, const std::vector<TokenId>& v) {
    os << "  " << who << ":";
    for (size_t k = from; k < std::min(v.size(), i + 6); ++k) {
      std::string t(tok.token_bytes(v[k]));
      for (char& c : t) if (c == '\n') c = '|';
      os << " " << v[k] << "'" << t << "'";
    }
    os << "\n";
  };
  show("ours  ", ours);
  show("oracle", theirs);
  return os.str();
}

// The hand-written pre-tokenizer equals the official regexes run by PCRE2 on every document.
TEST(TokenizerDiff, ScannerEqualsOfficialRegexesOnCorpus) {
  const auto docs = read_corpus(DS4_TOKENIZER_CORPUS_DIR);
  ASSERT_GT(docs.size(), 100u);
  auto re = RegexPretokenizer::create();
  ASSERT_TRUE(re.ok()) << re.status().to_string();
  size_t bad = 0, n_pieces = 0;
  for (const Doc& d : docs) {
    const std::string text = utf8_sanitize(d.bytes);
    auto ref = re->split(text);
    ASSERT_TRUE(ref.ok()) << ref.status().to_string();
    const auto ours = pretokenize_pieces(text);
    n_pieces += ours.size();
    if (ours != *ref && ++bad <= 5) {
      size_t i = 0;
      while (i < ours.size() && i < ref->size() && ours[i] == (*ref)[i]) ++i;
      ADD_FAILURE() << d.name << ": piece " << i << " differs: ours '"
                    << (i < ours.size() ? std::string(ours[i]) : "<end>") << "' regex '"
                    << (i < ref->size() ? std::string((*ref)[i]) : "<end>") << "'";
    }
  }
  EXPECT_EQ(bad, 0u);
  std::printf("[regex] %zu documents, %zu pieces, mismatching documents: %zu\n", docs.size(), n_pieces, bad);
}

TEST(TokenizerDiff, IdenticalToJsOracleOnCorpus) {
  const auto* v = full_vocab();
  ASSERT_NE(v, nullptr);
  const std::string dir = DS4_TOKENIZER_CORPUS_DIR;
  const auto docs = read_corpus(dir);
  ASSERT_GT(docs.size(), 100u) << "corpus missing in " << dir << " (scripts/make_corpus.py)";
  size_t total = 0;
  for (const Doc& d : docs) total += d.bytes.size();
  EXPECT_GE(total, size_t(5) << 20);

  // All-added mode can only differ from plain mode in documents holding an added-token string.
  // Every V4 added token contains "｜" or "<|" or is one of <think>, </think>, <dsml:, </dsml:;
  // this filter is independent of our matcher, so the oracle still checks what we fail to match.
  std::vector<size_t> with_added;
  {
    std::ofstream idx(dir + "/corpus_added.idx");
    const std::string bin_idx = read_all(dir + "/corpus.idx");
    std::istringstream lines(bin_idx);
    std::string line;
    for (size_t i = 0; std::getline(lines, line); ++i) {
      const std::string text = utf8_sanitize(docs[i].bytes);
      bool any = false;
      for (const char* s : {"｜", "<|", "<think>", "</think>", "<dsml:", "</dsml:"}) any |= text.find(s) != std::string::npos;
      if (any) {
        idx << line << "\n";
        with_added.push_back(i);
      }
    }
  }
  // Both oracle modes at once (2 cores).
  const std::string oracle = source_path("tests/js/tokenizer_oracle.js");
  const std::string corpus = " --corpus '" + dir + "/corpus.bin'";
  const std::string cmd = std::string("cd '") + source_path("tests/js") + "' && { '" DS4_NODE "' '" + oracle + "'" +
                          corpus + " --index '" + dir + "/corpus.idx' --out '" + dir + "/ids_none.bin' & '" DS4_NODE
                          "' '" + oracle + "'" + corpus + " --index '" + dir + "/corpus_added.idx' --special all --v4-table '" +
                          source_path("tests/tokenizer/data/v4_added_tokens.tsv") + "' --out '" + dir +
                          "/ids_all.bin' & wait %1 && wait %2; }";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const auto plain = read_ids(dir + "/ids_none.bin", docs.size());
  const auto all_some = read_ids(dir + "/ids_all.bin", with_added.size());
  ASSERT_EQ(plain.size(), docs.size());
  ASSERT_EQ(all_some.size(), with_added.size());
  std::vector<std::vector<TokenId>> all = plain;  // documents without added strings: same as plain
  for (size_t k = 0; k < with_added.size(); ++k) all[with_added[k]] = all_some[k];

  EncodeOptions all_added;
  all_added.parse_special = true;
  all_added.special_set = SpecialSet::all_added;
  size_t bad_plain = 0, bad_all = 0, n_ids = 0;
  for (size_t i = 0; i < docs.size(); ++i) {
    const std::string text = utf8_sanitize(docs[i].bytes);
    const auto a = v->tok->encode(text);
    n_ids += a.size();
    if (a != plain[i] && ++bad_plain <= 5)
      ADD_FAILURE() << "plain mode, document " << docs[i].name << ": " << describe_mismatch(*v->tok, a, plain[i]);
    const auto b = v->tok->encode(text, all_added);
    if (b != all[i] && ++bad_all <= 5)
      ADD_FAILURE() << "all-added mode, document " << docs[i].name << ": " << describe_mismatch(*v->tok, b, all[i]);
    // Decoding is the exact inverse on (sanitized) text.
    if (v->tok->decode(a) != text) ADD_FAILURE() << "decode(encode(x)) != x for " << docs[i].name;
  }
  EXPECT_EQ(bad_plain, 0u);
  EXPECT_EQ(bad_all, 0u);
  std::printf("[diff] %zu documents, %zu bytes, %zu ids; %zu documents hold added-token strings; "
              "mismatching documents: plain %zu, all-added %zu\n",
              docs.size(), total, n_ids, with_added.size(), bad_plain, bad_all);
}

}  // namespace
}  // namespace ds4::tokenizer
