// test_tokenizer_conformance.cpp — the real V4 tokenizer against the spec's fixed vectors:
// table hashes (TOKENIZER.md §2), the 31 cases of data/tokenizer_tests.json, the official-API
// prompts of data/tokenizer_test_prompts/, special/added-token ids (§6) and decoding (§7).
#include <gtest/gtest.h>
#include <openssl/sha.h>

#include <nlohmann/json.hpp>

#include "full_vocab.h"
#include "gguf/gguf.h"

namespace ds4::tokenizer {
namespace {

using testing::full_vocab;
using testing::read_all;
using testing::source_path;

std::string ids_sha256(const std::vector<TokenId>& ids) {
  std::string s;
  for (TokenId id : ids) s += std::to_string(id) + "\n";
  unsigned char md[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(s.data()), s.size(), md);
  std::string hex;
  static const char* k = "0123456789abcdef";
  for (unsigned char c : md) { hex += k[c >> 4]; hex += k[c & 15]; }
  return hex;
}

TEST(TokenizerConformance, TableHashesEqualTheRealGguf) {
  const auto* v = full_vocab();
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->data.tokens.size(), 129280u);
  EXPECT_EQ(v->data.merges.size(), 127741u);
  EXPECT_EQ(canonical_table_sha256(v->data.tokens), "c92251fc634ff01cc6767d2e3ce1d368e72b5f02b647983d4410eb0c46693fa3");
  EXPECT_EQ(canonical_table_sha256(v->data.merges), "8100a9693dc10b8aad79abbe20b172545ff5e1e6051e0705cc91e73b88e3751f");
}

TEST(TokenizerConformance, AllSpecCases) {
  const auto* v = full_vocab();
  ASSERT_NE(v, nullptr);
  auto j = nlohmann::json::parse(read_all(source_path("tests/tokenizer/data/tokenizer_tests.json")));
  ASSERT_EQ(j["cases"].size(), 31u);
  for (const auto& c : j["cases"]) {
    const std::string text = c.at("text").get<std::string>();
    const std::string name = c.at("name").get<std::string>();
    EncodeOptions o;
    o.parse_special = c.at("mode").get<std::string>() == "rendered_7_specials";
    const auto ids = v->tok->encode(text, o);
    const auto expected = c.at("expected_ids").get<std::vector<TokenId>>();
    EXPECT_EQ(ids, expected) << "case " << name;
    if (c.contains("ids_sha256"))  // recorded for the ds4 captures
      EXPECT_EQ(ids_sha256(ids), c.at("ids_sha256").get<std::string>()) << "case " << name;
    // Decoding gives the text back byte for byte.
    EXPECT_EQ(v->tok->decode(ids), text) << "case " << name;
  }
}

TEST(TokenizerConformance, OfficialApiPrompts) {
  const auto* v = full_vocab();
  ASSERT_NE(v, nullptr);
  const std::string dir = source_path("tests/tokenizer/data/tokenizer_test_prompts/");
  auto m = nlohmann::json::parse(read_all(dir + "manifest.json"));
  ASSERT_EQ(m["cases"].size(), 5u);
  for (const auto& c : m["cases"]) {
    const std::string text = read_all(dir + c["file"].get<std::string>());
    ASSERT_EQ(text.size(), c["bytes"].get<size_t>()) << c["file"];
    const auto ids = v->tok->encode(text);
    EXPECT_EQ(ids.size(), c["text_tokens_hf_v3"].get<size_t>()) << c["file"];
    EXPECT_EQ(ids_sha256(ids), c["text_ids_sha256"].get<std::string>()) << c["file"];
    // Rendered as a single user turn with thinking disabled: + BOS, User, Assistant, </think>.
    EncodeOptions o;
    o.parse_special = true;
    const auto rendered = v->tok->encode("<｜begin▁of▁sentence｜><｜User｜>" + text + "<｜Assistant｜></think>", o);
    EXPECT_EQ(rendered.size(), c["official_api_prompt_tokens"].get<size_t>()) << c["file"];
    EXPECT_EQ(v->tok->decode(ids), text);
  }
}

TEST(TokenizerConformance, ControlTokenIds) {
  const auto* v = full_vocab();
  ASSERT_NE(v, nullptr);
  const Tokenizer& t = *v->tok;
  EXPECT_EQ(t.vocab_size(), 129280);
  EXPECT_EQ(t.bos_id(), 0);
  EXPECT_EQ(t.eos_id(), 1);
  EXPECT_EQ(t.special_id("<｜begin▁of▁sentence｜>"), 0);
  EXPECT_EQ(t.special_id("<｜end▁of▁sentence｜>"), 1);
  EXPECT_EQ(t.special_id("<｜User｜>"), 128803);
  EXPECT_EQ(t.special_id("<｜Assistant｜>"), 128804);
  EXPECT_EQ(t.special_id("<think>"), 128821);
  EXPECT_EQ(t.special_id("</think>"), 128822);
  EXPECT_EQ(t.special_id("｜DSML｜"), 128825);
  EXPECT_EQ(t.special_id("<｜latest_reminder｜>"), 128828);
  EXPECT_EQ(t.special_id("<|place_holder_mm_span_0435|>"), 129261);
  EXPECT_EQ(t.special_id("Hello"), -1);  // an ordinary BPE token is not special
  // Added tokens are exactly ids 0..2 and 128000..129279 (nothing else is unreachable by BPE).
  int n_special = 0;
  for (TokenId id = 0; id < t.vocab_size(); ++id) {
    if (!t.is_special(id)) continue;
    ++n_special;
    EXPECT_TRUE(id <= 2 || id >= 128000) << id;
  }
  EXPECT_EQ(n_special, 1283);
  EXPECT_FALSE(t.is_special(-1));
  EXPECT_FALSE(t.is_special(129280));
}

TEST(TokenizerConformance, SpecialSets) {
  const auto* v = full_vocab();
  ASSERT_NE(v, nullptr);
  const std::string text = "<｜User｜>hi<｜latest_reminder｜><think>x</think>｜DSML｜<|EOT|>";
  EncodeOptions ds4;
  ds4.parse_special = true;
  const auto a = v->tok->encode(text, ds4);
  // ds4 set: <｜latest_reminder｜> and <|EOT|> are plain text.
  EXPECT_EQ(a.front(), 128803);
  EXPECT_EQ(std::count(a.begin(), a.end(), 128828), 0);
  EXPECT_EQ(std::count(a.begin(), a.end(), 128821), 1);
  EXPECT_EQ(std::count(a.begin(), a.end(), 128825), 1);
  EncodeOptions all = ds4;
  all.special_set = SpecialSet::all_added;
  const auto b = v->tok->encode(text, all);
  const std::vector<TokenId> hi = v->tok->encode("hi");
  std::vector<TokenId> expected = {128803};
  expected.insert(expected.end(), hi.begin(), hi.end());
  const std::vector<TokenId> x = v->tok->encode("x");
  for (TokenId id : {128828, 128821}) expected.push_back(id);
  expected.insert(expected.end(), x.begin(), x.end());
  for (TokenId id : {128822, 128825, 128805}) expected.push_back(id);
  EXPECT_EQ(b, expected);
  // Without parse_special nothing is special.
  const auto c = v->tok->encode(text);
  for (TokenId id : c) EXPECT_FALSE(v->tok->is_special(id)) << id;
  EXPECT_EQ(v->tok->decode(a), text);
  EXPECT_EQ(v->tok->decode(b), text);
  EXPECT_EQ(v->tok->decode(c), text);
  // add_bos prepends id 0 (never added implicitly).
  EncodeOptions bos;
  bos.add_bos = true;
  EXPECT_EQ(v->tok->encode("Hello", bos), (std::vector<TokenId>{0, 19923}));
  EXPECT_EQ(v->tok->encode("Hello"), (std::vector<TokenId>{19923}));
}

TEST(TokenizerConformance, DecodeRules) {
  const auto* v = full_vocab();
  ASSERT_NE(v, nullptr);
  const Tokenizer& t = *v->tok;
  EXPECT_EQ(t.token_bytes(223), " ");
  EXPECT_EQ(t.token_bytes(201), "\n");
  EXPECT_EQ(t.token_bytes(200), "\t");
  EXPECT_EQ(t.token_bytes(128803), "<｜User｜>");  // literal: contains U+FF5C
  EXPECT_EQ(t.token_bytes(128821), "<think>");      // ASCII added token maps to itself
  EXPECT_EQ(t.token_text(19923), "Hello");
  EXPECT_EQ(t.token_bytes(-5), "");
  EXPECT_EQ(t.token_bytes(129280), "");
  // 🦙 spans three tokens; each alone is an incomplete UTF-8 sequence.
  const std::vector<TokenId> llama = {3574, 102, 250};
  EXPECT_EQ(t.encode("🦙"), llama);
  EXPECT_EQ(t.decode(llama), "🦙");
  StreamDecoder sd(t);
  EXPECT_EQ(sd.push(3574), "");
  EXPECT_EQ(sd.push(102), "");
  EXPECT_EQ(sd.push(250), "🦙");
  EXPECT_EQ(sd.flush(), "");
}

TEST(TokenizerConformance, GgufRoundTrip) {
  const auto* v = full_vocab();
  ASSERT_NE(v, nullptr);
  gguf::Writer w;
  write_tokenizer_metadata(v->data, w);
  auto bytes = w.write_to_memory([](size_t, std::span<uint8_t>) { return Status::Ok(); });
  ASSERT_TRUE(bytes.ok()) << bytes.status().to_string();
  auto f = gguf::File::from_memory(*bytes);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  auto tok = Tokenizer::from_gguf(**f);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  EXPECT_EQ((*tok)->vocab_size(), 129280);
  const std::string s = "Perché sì… «virgolette» — 123456 🦙 <think>";
  EXPECT_EQ((*tok)->encode(s), v->tok->encode(s));
  auto back = read_tokenizer_metadata(**f);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->tokens, v->data.tokens);
  EXPECT_EQ(back->merges, v->data.merges);
  EXPECT_EQ(back->token_types, v->data.token_types);
  EXPECT_EQ(back->model, "gpt2");
  EXPECT_EQ(back->pre, "joyai-llm");
  EXPECT_FALSE(back->add_bos);
}

}  // namespace
}  // namespace ds4::tokenizer
