// test_tokenizer_unit.cpp — tokenizer pieces that need no external data: UTF-8 handling, the byte
// alphabet, the pre-tokenizer (vs the PCRE2 reference of the official regexes), BPE merge order,
// the tiny 512-token vocabulary, GGUF metadata round trips and malformed-metadata errors, and the
// streaming decoder.
#include <gtest/gtest.h>

#include <functional>
#include <random>

#include "gguf/gguf.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/byte_alphabet.h"
#include "tokenizer/hf_import.h"
#include "tokenizer/merge_table.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/pretokenizer_regex.h"
#include "tokenizer/special_matcher.h"
#include "tokenizer/unicode_class.h"
#include "tokenizer/utf8.h"

namespace ds4::tokenizer {
namespace {

std::vector<std::string> pieces(std::string_view s) {
  std::vector<std::string> out;
  for (auto p : pretokenize_pieces(s)) out.emplace_back(p);
  return out;
}
using V = std::vector<std::string>;

// ---- UTF-8 ---------------------------------------------------------------------------------

TEST(Utf8, SanitizeMatchesWhatwgReplacement) {
  EXPECT_EQ(utf8_sanitize("abc"), "abc");
  EXPECT_EQ(utf8_sanitize("caf\xC3\xA9"), "café");
  EXPECT_EQ(utf8_sanitize("\x80"), "\uFFFD");
  EXPECT_EQ(utf8_sanitize("\xC0\xAF"), "\uFFFD\uFFFD");          // overlong: C0 never valid
  EXPECT_EQ(utf8_sanitize("\xE0\x80\xAF"), "\uFFFD\uFFFD\uFFFD");  // E0 needs A0..BF next
  EXPECT_EQ(utf8_sanitize("\xED\xA0\x80"), "\uFFFD\uFFFD\uFFFD");  // surrogate
  EXPECT_EQ(utf8_sanitize("\xF4\x90\x80\x80"), "\uFFFD\uFFFD\uFFFD\uFFFD");  // > U+10FFFF
  EXPECT_EQ(utf8_sanitize("\xE2\x82x"), "\uFFFDx");               // truncated: one U+FFFD for the subpart
  EXPECT_EQ(utf8_sanitize("\xF0\x9F\x98"), "\uFFFD");
  EXPECT_EQ(utf8_sanitize("\xF0\x9F\x98\x80"), "😀");
  EXPECT_EQ(utf8_sanitize(std::string("a\0b", 3)), std::string("a\0b", 3));
  EXPECT_TRUE(utf8_valid("日本語 😀"));
  EXPECT_FALSE(utf8_valid("\xFF"));
}

TEST(Utf8, StreamSafeLength) {
  EXPECT_EQ(utf8_stream_safe_len("abc"), 3u);
  EXPECT_EQ(utf8_stream_safe_len("ab\xF0\x9F"), 2u);      // could still become 😀
  EXPECT_EQ(utf8_stream_safe_len("ab\xF0\x9F\x98"), 2u);
  EXPECT_EQ(utf8_stream_safe_len("ab\xF0\x9F\x98\x80"), 6u);
  EXPECT_EQ(utf8_stream_safe_len("ab\x80"), 3u);          // never valid: not held back
  EXPECT_EQ(utf8_stream_safe_len("ab\xE0\x80"), 4u);      // E0 80 can never complete
  EXPECT_EQ(utf8_stream_safe_len("\xE2\xC3"), 1u);        // E2 is dead, C3 may complete
}

// ---- byte alphabet -------------------------------------------------------------------------

TEST(ByteAlphabet, Gpt2Mapping) {
  EXPECT_EQ(byte_to_codepoint('A'), uint32_t('A'));
  EXPECT_EQ(byte_to_codepoint(0x00), 0x100u);
  EXPECT_EQ(byte_to_codepoint(0x09), 0x109u);
  EXPECT_EQ(byte_to_codepoint(0x0A), 0x10Au);
  EXPECT_EQ(byte_to_codepoint(0x20), 0x120u);
  EXPECT_EQ(byte_to_codepoint(0x7F), 0x121u);
  EXPECT_EQ(byte_to_codepoint(0xA0), 0x142u);
  EXPECT_EQ(byte_to_codepoint(0xAD), 0x143u);
  EXPECT_EQ(byte_to_codepoint(0xE9), 0xE9u);
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(char(b));
  std::string enc;
  append_byte_level(enc, all);
  bool ok = false;
  EXPECT_EQ(byte_level_to_bytes(enc, &ok), all);
  EXPECT_TRUE(ok);
  EXPECT_EQ(byte_level_to_bytes("Ġthe"), " the");
  EXPECT_EQ(byte_level_to_bytes("ĊĊ"), "\n\n");
  EXPECT_EQ(byte_level_to_bytes("a｜b", &ok), "ab");  // outside the alphabet: dropped
  EXPECT_FALSE(ok);
}

// ---- Unicode classes -----------------------------------------------------------------------

TEST(UnicodeClass, Categories) {
  EXPECT_EQ(unicode_flags('a'), kUcL);
  EXPECT_EQ(unicode_flags('7'), kUcN);
  EXPECT_EQ(unicode_flags(0x00B2), kUcN);   // ²
  EXPECT_EQ(unicode_flags(0x0663), kUcN);   // ٣
  EXPECT_EQ(unicode_flags(0x0301), kUcM);
  EXPECT_EQ(unicode_flags(0xFF5C), kUcS);   // ｜ is Sm
  EXPECT_EQ(unicode_flags(0x00AB), kUcP);   // « is Pi
  EXPECT_EQ(unicode_flags(0x2026), kUcP);   // … is Po
  EXPECT_EQ(unicode_flags(0x0085), kUcWS);  // NEL is White_Space
  EXPECT_EQ(unicode_flags(0x00A0), kUcWS);
  EXPECT_EQ(unicode_flags(0x3000), kUcWS);
  EXPECT_EQ(unicode_flags(0xFEFF), 0);      // BOM is not White_Space
  EXPECT_EQ(unicode_flags(0x200B), 0);      // ZWSP is Cf
  EXPECT_EQ(unicode_flags(0x1F680), kUcS);  // 🚀 So
  EXPECT_EQ(unicode_flags(0xD800), 0);
  EXPECT_EQ(unicode_flags(0x110000), 0);
}

// ---- pre-tokenizer -------------------------------------------------------------------------

TEST(Pretokenizer, SpecExamples) {
  EXPECT_EQ(pieces("a 1"), (V{"a", " ", "1"}));
  EXPECT_EQ(pieces("1234567"), (V{"123", "456", "7"}));
  EXPECT_EQ(pieces("    int x;"), (V{"   ", " int", " x", ";"}));
  EXPECT_EQ(pieces("Hello, world!"), (V{"Hello", ",", " world", "!"}));
  EXPECT_EQ(pieces("a\r\nb"), (V{"a", "\r\n", "b"}));
  EXPECT_EQ(pieces("«Dunque parli.»"), (V{"«", "Dunque", " parli", ".»"}));
  EXPECT_EQ(pieces("٣٤٥ ²³ １２３"), (V{"٣٤٥", " ", "²³", " ", "１２３"}));
  EXPECT_EQ(pieces("世界カタカナabc"), (V{"世界カタカナ", "abc"}));
  EXPECT_EQ(pieces("x\n  y"), (V{"x", "\n", " ", " y"}));
  EXPECT_EQ(pieces("don't"), (V{"don", "'t"}));
  EXPECT_EQ(pieces("end  "), (V{"end", "  "}));  // \s+(?!\S) takes the whole run at the end
  EXPECT_EQ(pieces(""), V{});
}

TEST(Pretokenizer, InvalidBytesAreClasslessSymbols) {
  // An invalid byte can prefix a letter run (alternative 2) and otherwise stays in a gap.
  EXPECT_EQ(pieces("\xFF" "abc"), (V{"\xFF" "abc"}));
  EXPECT_EQ(pieces("ab\x80\x80!"), (V{"ab", "\x80\x80", "!"}));
  // Pieces always tile the input.
  std::mt19937 rng(7);
  for (int k = 0; k < 200; ++k) {
    std::string s;
    for (int i = 0; i < 64; ++i) s.push_back(char(rng()));
    std::string joined;
    for (auto p : pretokenize_pieces(s)) {
      EXPECT_FALSE(p.empty());
      joined += p;
    }
    EXPECT_EQ(joined, s);
  }
}

TEST(Pretokenizer, EqualsPcre2ReferenceOnTrickyText) {
  auto re = RegexPretokenizer::create();
  ASSERT_TRUE(re.ok()) << re.status().to_string();
  const std::string_view texts[] = {
      "Hello, world! 123456789 42 007", "    int x;\n\tfoo(bar);\r\n\r\n  }\n", "a  \n\n  b \u00a0c\u3000d\u0085e",
      "«Dunque parli.» — «Sì…»", "٣٤٥ ²³ １２３ ½ Ⅻ", "Cafe\u0301 \u0301x \u0301", "emoji 🚀🦙😀 and 👩\u200d💻 zwj",
      "$foo->bar ::baz #include <x.h> 'quoted' \"s\"", "  ", " ", "\n", "x\u2028y\u2029z\u200bw\ufeffv",
      "中文测试：你好，世界！123abc カタカナ・テスト ひらがな", "!!!\n\n???\r\r a.b.c,d;e", " ?!x ?x ?\n",
  };
  for (std::string_view t : texts) {
    auto r = re->split(t);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(pretokenize_pieces(t), *r) << t;
  }
  EXPECT_FALSE(re->split("\xFF").ok());  // the reference needs valid UTF-8
}

TEST(Pretokenizer, EqualsPcre2ReferenceOnRandomText) {
  auto re = RegexPretokenizer::create();
  ASSERT_TRUE(re.ok());
  // Random mixes of characters from every class the regexes distinguish.
  const std::vector<std::string> alphabet = {"a", "Z", " ", "  ", "\t", "\n", "\r", "\r\n", "1", "²", "٣", ".", ",",
                                             "'", "\"", "(", "«", "»", "…", "-", "_", "$", "+", "€", "世", "カ", "ぁ",
                                             "・", "é", "\u0301", "\u00a0", "\u3000", "\u0085", "\ufeff", "😀",
                                             "\u200d", "Ω", "ß", "\x7f", "\x01", "｜", "<", ">"};
  std::mt19937 rng(1234);
  for (int k = 0; k < 3000; ++k) {
    std::string s;
    const int n = int(rng() % 24);
    for (int i = 0; i < n; ++i) s += alphabet[rng() % alphabet.size()];
    auto r = re->split(s);
    ASSERT_TRUE(r.ok());
    ASSERT_EQ(pretokenize_pieces(s), *r) << "text: " << s;
  }
}

// ---- BPE merge order -----------------------------------------------------------------------

TEST(MergeTable, ShortAndLongPathsAgree) {
  // Symbols 0..3; merges chosen so that ties and rank order matter.
  MergeTable mt;
  mt.add(0, 0, 0, 4);  // a a -> A (rank 0)
  mt.add(4, 1, 1, 5);  // A b -> B
  mt.add(1, 4, 2, 6);  // b A -> C
  mt.add(4, 4, 3, 7);  // A A -> D
  mt.add(2, 3, 4, 8);
  std::mt19937 rng(3);
  MergeTable::Scratch sc;
  for (int k = 0; k < 500; ++k) {
    const int n = 2 + int(rng() % 60);
    std::vector<int32_t> syms(n);
    for (auto& s : syms) s = int32_t(rng() % 4);
    // Reference: naive BPE (lowest rank, leftmost).
    std::vector<int32_t> ref = syms;
    for (;;) {
      int best = -1;
      uint32_t br = UINT32_MAX;
      for (size_t i = 0; i + 1 < ref.size(); ++i)
        if (auto* m = mt.find(ref[i], ref[i + 1]); m && m->rank < br) { br = m->rank; best = int(i); }
      if (best < 0) break;
      ref[best] = mt.find(ref[best], ref[best + 1])->result;
      ref.erase(ref.begin() + best + 1);
    }
    std::vector<int32_t> out, s2 = syms;
    mt.apply(s2, out, sc);
    EXPECT_EQ(out, ref);
  }
  EXPECT_EQ(mt.find(9, 9), nullptr);
}

// ---- special matcher -----------------------------------------------------------------------

TEST(SpecialMatcher, LeftmostLongest) {
  SpecialMatcher m;
  m.build({{"<a>", 1}, {"<a>b", 2}, {"b", 3}, {"", 4}});
  SpecialMatcher::Match hit;
  ASSERT_TRUE(m.find("xx<a>bc", 0, hit));
  EXPECT_EQ(hit.start, 2u);
  EXPECT_EQ(hit.length, 4u);
  EXPECT_EQ(hit.id, 2);
  ASSERT_TRUE(m.find("<a", 0, hit) == false);
  ASSERT_TRUE(m.find("ab", 0, hit));
  EXPECT_EQ(hit.id, 3);
  SpecialMatcher empty;
  EXPECT_FALSE(empty.find("anything", 0, hit));
}

// ---- tiny vocabulary, GGUF metadata --------------------------------------------------------

Result<std::unique_ptr<Tokenizer>> via_gguf(const TokenizerData& d, std::vector<uint8_t>& storage,
                                           std::unique_ptr<gguf::File>& file) {
  gguf::Writer w;
  w.add_string("general.architecture", "deepseek4");
  write_tokenizer_metadata(d, w);
  auto img = w.write_to_memory([](size_t, std::span<uint8_t>) { return Status::Ok(); });
  if (!img.ok()) return img.status();
  storage = std::move(img).value();
  auto f = gguf::File::from_memory(storage);
  if (!f.ok()) return f.status();
  file = std::move(f).value();
  return Tokenizer::from_gguf(*file);
}

TEST(SmallVocab, LayoutAndDeterminism) {
  auto a = make_small_vocab();
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  auto b = make_small_vocab();
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(a->tokens, b->tokens);
  EXPECT_EQ(a->merges, b->merges);
  ASSERT_EQ(a->tokens.size(), 512u);
  EXPECT_EQ(a->tokens[0], "<｜begin▁of▁sentence｜>");
  EXPECT_EQ(a->tokens[1], "<｜end▁of▁sentence｜>");
  EXPECT_EQ(a->tokens[3 + 0x20], "Ġ");
  EXPECT_EQ(a->tokens[511], "<|EOT|>");
  EXPECT_GE(a->merges.size(), 512u - 275u);
  auto tok = make_tokenizer(*a);
  ASSERT_TRUE(tok.ok());
  const Tokenizer& t = **tok;
  for (std::string_view s : {"<｜User｜>", "<｜Assistant｜>", "<think>", "</think>", "｜DSML｜", "<｜latest_reminder｜>"})
    EXPECT_GE(t.special_id(s), 496) << s;
  // Merges really apply: common sample words are single tokens.
  EXPECT_EQ(t.encode(" the").size(), 1u);
  EXPECT_LT(t.encode("The quick brown fox jumps over the lazy dog.").size(), 30u);  // 44 bytes
  // Every byte string round-trips.
  std::mt19937 rng(5);
  for (int k = 0; k < 50; ++k) {
    std::string s;
    for (int i = 0; i < 200; ++i) s.push_back(char(rng()));
    auto ids = t.encode(s);
    for (TokenId id : ids) ASSERT_TRUE(id >= 0 && id < 512);
    EXPECT_EQ(t.decode(ids), s);
  }
  EncodeOptions o;
  o.parse_special = true;
  const auto ids = t.encode("<｜begin▁of▁sentence｜><｜User｜>hi<｜Assistant｜><think>", o);
  EXPECT_EQ(ids.front(), 0);
  EXPECT_EQ(ids.back(), t.special_id("<think>"));
  EXPECT_EQ(make_small_vocab({200}).status().code(), StatusCode::invalid_argument);
}

TEST(GgufMetadata, SmallVocabRoundTrip) {
  auto d = make_small_vocab();
  ASSERT_TRUE(d.ok());
  std::vector<uint8_t> storage;
  std::unique_ptr<gguf::File> file;
  auto tok = via_gguf(*d, storage, file);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  EXPECT_EQ((*tok)->vocab_size(), 512);
  EXPECT_EQ((*tok)->bos_id(), 0);
  EXPECT_EQ((*tok)->eos_id(), 1);
  // Key types as in the real file.
  EXPECT_EQ(file->find("tokenizer.ggml.model")->type, gguf::ValueType::string);
  EXPECT_EQ(file->find("tokenizer.ggml.bos_token_id")->type, gguf::ValueType::u32);
  EXPECT_EQ(file->find("tokenizer.ggml.add_bos_token")->type, gguf::ValueType::boolean);
  EXPECT_EQ(file->find("tokenizer.ggml.token_type")->as_array()->elem_type, gguf::ValueType::i32);
  auto back = read_tokenizer_metadata(*file);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->tokens, d->tokens);
  EXPECT_EQ(back->merges, d->merges);
  EXPECT_EQ(back->token_types, d->token_types);
}

// Each malformed variant must fail with a clear error, never crash.
TEST(GgufMetadata, MalformedMetadataIsRejected) {
  auto good = make_small_vocab();
  ASSERT_TRUE(good.ok());
  struct Case {
    const char* what;
    std::function<void(gguf::Writer&)> write;
    StatusCode code;
    const char* needle;
  };
  auto strings = [](std::vector<std::string> v) {
    std::vector<gguf::Value> out;
    for (auto& s : v) out.push_back(gguf::Value::of_string(s));
    return out;
  };
  const TokenizerData g = *good;
  std::vector<Case> cases = {
      {"no tokenizer", [](gguf::Writer& w) { w.add_string("general.name", "x"); }, StatusCode::not_found, "tokenizer.ggml.tokens"},
      {"tokens not an array", [](gguf::Writer& w) { w.add_string("tokenizer.ggml.tokens", "x"); }, StatusCode::invalid_data, "tokenizer.ggml.tokens"},
      {"tokens of ints", [](gguf::Writer& w) { w.add_array("tokenizer.ggml.tokens", gguf::ValueType::i32, {gguf::Value::of_i32(1)}); },
       StatusCode::invalid_data, "ARRAY of STRING"},
      {"merges missing", [&](gguf::Writer& w) { w.add_array("tokenizer.ggml.tokens", gguf::ValueType::string, strings(g.tokens)); },
       StatusCode::not_found, "tokenizer.ggml.merges"},
      {"bad merge", [&](gguf::Writer& w) {
         w.add_array("tokenizer.ggml.tokens", gguf::ValueType::string, strings(g.tokens));
         w.add_array("tokenizer.ggml.merges", gguf::ValueType::string, strings({"a"}));
       }, StatusCode::invalid_data, "merge 0"},
      {"merge of unknown tokens", [&](gguf::Writer& w) {
         w.add_array("tokenizer.ggml.tokens", gguf::ValueType::string, strings(g.tokens));
         w.add_array("tokenizer.ggml.merges", gguf::ValueType::string, strings({"qqq zzz"}));
       }, StatusCode::invalid_data, "not in the vocabulary"},
      {"duplicate token", [&](gguf::Writer& w) {
         auto t = g.tokens;
         t[300] = t[301];
         w.add_array("tokenizer.ggml.tokens", gguf::ValueType::string, strings(t));
         w.add_array("tokenizer.ggml.merges", gguf::ValueType::string, {});
       }, StatusCode::invalid_data, "occurs twice"},
      {"missing byte symbol", [&](gguf::Writer& w) {
         w.add_array("tokenizer.ggml.tokens", gguf::ValueType::string, strings({"a", "b", "c"}));
         w.add_array("tokenizer.ggml.merges", gguf::ValueType::string, {});
       }, StatusCode::invalid_data, "single-byte symbol"},
      {"bos out of range", [&](gguf::Writer& w) {
         w.add_array("tokenizer.ggml.tokens", gguf::ValueType::string, strings(g.tokens));
         w.add_array("tokenizer.ggml.merges", gguf::ValueType::string, strings(g.merges));
         w.add_u32("tokenizer.ggml.bos_token_id", 100000);
       }, StatusCode::invalid_data, "out of range"},
      {"bos wrong type", [&](gguf::Writer& w) {
         w.add_array("tokenizer.ggml.tokens", gguf::ValueType::string, strings(g.tokens));
         w.add_array("tokenizer.ggml.merges", gguf::ValueType::string, strings(g.merges));
         w.add_string("tokenizer.ggml.bos_token_id", "0");
       }, StatusCode::invalid_data, "bos_token_id"},
      {"unsupported model", [&](gguf::Writer& w) {
         w.add_string("tokenizer.ggml.model", "llama");
         w.add_array("tokenizer.ggml.tokens", gguf::ValueType::string, strings(g.tokens));
         w.add_array("tokenizer.ggml.merges", gguf::ValueType::string, strings(g.merges));
       }, StatusCode::unsupported, "llama"},
  };
  for (const Case& c : cases) {
    gguf::Writer w;
    c.write(w);
    auto img = w.write_to_memory([](size_t, std::span<uint8_t>) { return Status::Ok(); });
    ASSERT_TRUE(img.ok()) << c.what;
    auto f = gguf::File::from_memory(*img);
    ASSERT_TRUE(f.ok()) << c.what;
    auto t = Tokenizer::from_gguf(**f);
    ASSERT_FALSE(t.ok()) << c.what;
    EXPECT_EQ(t.status().code(), c.code) << c.what << ": " << t.status().to_string();
    EXPECT_NE(t.status().message().find(c.needle), std::string::npos) << c.what << ": " << t.status().to_string();
  }
}

TEST(HfImport, MalformedJsonIsRejected) {
  EXPECT_FALSE(parse_hf_tokenizer_json("not json").ok());
  EXPECT_FALSE(parse_hf_tokenizer_json("{}").ok());
  EXPECT_EQ(parse_hf_tokenizer_json(R"({"model":{"type":"Unigram"}})").status().code(), StatusCode::unsupported);
  EXPECT_FALSE(parse_hf_tokenizer_json(R"({"model":{"type":"BPE","vocab":{"a":0,"b":2},"merges":[]}})").ok());  // gap
  EXPECT_FALSE(parse_hf_tokenizer_json(R"({"model":{"type":"BPE","vocab":{"a":0},"merges":[1]}})").ok());
  auto ok = parse_hf_tokenizer_json(R"({"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":[["a","b"]]},
                                        "added_tokens":[{"id":3,"content":"<x>","special":true}]})");
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_EQ(ok->merges, (std::vector<std::string>{"a b"}));
  EXPECT_EQ(ok->tokens[3], "<x>");
  EXPECT_EQ(ok->token_types[3], int32_t(TokenType::control));
  TokenizerData d = *ok;
  EXPECT_FALSE(apply_v4_added_tokens(d, "12\tnot-json\n").ok());
  EXPECT_FALSE(apply_v4_added_tokens(d, "x\t\"a\"\n").ok());
  EXPECT_FALSE(apply_v4_added_tokens(d, "9\t\"<y>\"\n").ok());  // leaves ids 4..8 undefined
  HfImportOptions o;
  o.tokenizer_json_path = "/nonexistent/tokenizer.json";
  EXPECT_EQ(import_hf_tokenizer(o).status().code(), StatusCode::io_error);
}

TEST(CanonicalHash, KnownValue) {
  // sha256 of u64le(0) u64le(1) "a"
  const std::vector<std::string> t = {"a"};
  EXPECT_EQ(canonical_table_sha256(t).size(), 64u);
  EXPECT_NE(canonical_table_sha256(t), canonical_table_sha256(std::vector<std::string>{"b"}));
  EXPECT_NE(canonical_table_sha256(std::vector<std::string>{"ab", "c"}),
            canonical_table_sha256(std::vector<std::string>{"a", "bc"}));
}

// ---- streaming decode ----------------------------------------------------------------------

TEST(StreamDecoder, NeverEmitsBrokenUtf8) {
  auto d = make_small_vocab();
  ASSERT_TRUE(d.ok());
  auto tok = make_tokenizer(*d);
  ASSERT_TRUE(tok.ok());
  const Tokenizer& t = **tok;
  // In the byte vocabulary every byte of 😀 is its own token.
  const std::string text = "a😀b€ é世";
  const auto ids = t.encode(text);
  StreamDecoder sd(t);
  std::string out;
  for (TokenId id : ids) {
    const std::string piece = sd.push(id);
    EXPECT_TRUE(utf8_valid(piece));
    out += piece;
  }
  out += sd.flush();
  EXPECT_EQ(out, text);
  // Invalid bytes come out as U+FFFD; an unfinished tail is flushed as U+FFFD.
  StreamDecoder sd2(t);
  const TokenId x80 = 3 + 0x80, xf0 = 3 + 0xF0, x9f = 3 + 0x9F;
  EXPECT_EQ(sd2.push(x80), "\uFFFD");
  EXPECT_EQ(sd2.push(xf0), "");
  EXPECT_EQ(sd2.push(x9f), "");
  EXPECT_EQ(sd2.pending_bytes(), 2u);
  EXPECT_EQ(sd2.push(t.encode("A")[0]), "\uFFFDA");
  EXPECT_EQ(sd2.push(xf0), "");
  EXPECT_EQ(sd2.flush(), "\uFFFD");
  EXPECT_EQ(sd2.flush(), "");
  EXPECT_EQ(sd2.push(-1), "");  // out-of-range ids contribute nothing
}

}  // namespace
}  // namespace ds4::tokenizer
